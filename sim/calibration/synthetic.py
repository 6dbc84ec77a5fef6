"""Synthetic probe results, made by the timing model with known parameters.

For tests (a fit must recover the parameters it was generated with) and for a demo before
any GPU run exists. The result follows the probe's JSON schema, so it goes through
`core.probe_result.load_result` like a real run. Its kernels carry the probe's kernel
names, so they fall in the same families. numpy only.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from core.step_plan import Mode, without_graphs
from core.step_plan import mode as mode_named
from core.step_plan import modes as table_modes
from sim.calibration.families import (
    GEMV_MAX_ROWS,
    INDEX,
    PERSISTENT_MAX_ROWS,
    TILE_MAX_ROWS,
    UNPIPELINED_BEFORE_2026_12_02,
    classify_step,
)
from sim.calibration.model import Point, ProbeModel, params_vector
from sim.config import ModelConfig

# The synthetic runs name no `settings.unpipelined_gemms`: they are read with the rule of the files without it.
UNPIPELINED = UNPIPELINED_BEFORE_2026_12_02
SPLIT_MAX_ROWS = 8  # up to here the probe's attention splits the context (one merge kernel a layer)


def kernel_names(model: ModelConfig, mode: Mode, rows: int, memsets: bool = False) -> tuple[str, ...]:
    """A probe-like step's kernels in `mode`: the names the profiler reports, in launch order
    (gpu_probe.model: the unfused step's one-op kernels, the fused step's GEMMs, cuBLAS above 64 rows).

    `memsets`: above TILE_MAX_ROWS cuBLAS zeroes a split-K workspace before the LM head, as in the probe (a
    memset node in the graph, which is then replayed in pieces)."""
    copies = ("multi_tensor_apply_kernel",) * 2 if mode.graphs else ()
    if mode.one_kernel:
        return copies + ("_decode_step_kernel",)
    wide = rows > TILE_MAX_ROWS
    gemm = "_gemv_kernel" if rows <= GEMV_MAX_ROWS else "nvjet_tst" if wide else "_fused_linear_kernel"
    merge = ("_merge_splits_kernel",) if rows <= SPLIT_MAX_ROWS else ()
    lm_head = (("Memset (Device)",) if memsets and wide else ()) + (gemm,)
    embedding = ("indexSelectSmallIndex",)
    if mode.fused and wide:
        layer = (gemm, "_paged_attention_kernel", *merge, gemm, gemm, "_rms_swiglu_kernel", gemm)
        return copies + embedding + layer * model.n_layers + ("_rms_norm_kernel", *lm_head)
    if mode.fused:
        layer = (gemm, "_paged_attention_kernel", *merge, gemm, gemm, gemm)
        return copies + embedding + layer * model.n_layers + lm_head
    add = "vectorized_elementwise_kernel"
    layer = (
        *("_rms_norm_kernel", gemm, gemm, gemm, "_rope_kernel", "_write_kv_kernel"),
        *("_paged_attention_plain_kernel", *merge, gemm, add),
        *("_rms_norm_kernel", gemm, gemm, "_silu_mul_kernel", gemm, add),
    )
    return copies + embedding + layer * model.n_layers + ("_rms_norm_kernel", *lm_head)


# The model's fields a synthetic result's `model.config` carries, as the probe writes them.
CONFIG_FIELDS = (
    "name",
    "n_layers",
    "hidden",
    "n_heads",
    "n_kv_heads",
    "ffn",
    "vocab",
    "bytes_per_el",
    "context_len",
)


def _points(model: ModelConfig, modes, batches, memsets: bool) -> list[Point]:
    """One calibration point per mode and batch, its kernels named and classified as in a probe run (the
    persistent kernel above its rows: the fused kernels eagerly, as the probe falls back)."""
    points = []
    for m in table_modes(modelled=True) if modes is None else [mode_named(m) for m in modes]:
        for b in batches:
            ran = without_graphs(m) if m.one_kernel and b > PERSISTENT_MAX_ROWS else m
            names = kernel_names(model, ran, b, memsets)
            fams = np.array(
                [INDEX[f] for f in classify_step(model, names, b, unpipelined=UNPIPELINED)], np.int64
            )
            points.append(
                Point(
                    m,
                    b,
                    b,
                    ran.graphs,
                    names,
                    fams,
                    1.0,
                    1.0,
                    1.0,
                    np.zeros(0),
                    ran=ran,
                    pdl_rows=TILE_MAX_ROWS,
                )
            )
    return points


def _run(pt: Point, tl, step_us: float, enqueue_us: float, n_layers: int) -> dict:
    """A point's run, in the probe's schema: its profiled step `tl`, timed at `step_us`."""
    m = tl.metrics()
    return {
        "mode": pt.mode.name,
        "batch": pt.batch,
        "bucket": pt.batch if pt.replays else None,
        "padded_rows": 0,
        "eager_fallback": pt.mode.graphs and not pt.replays,
        "step_us_median": step_us,
        "step_us_p10": 0.97 * step_us,
        "step_us_p90": 1.05 * step_us,
        "enqueue_us_median": enqueue_us,
        "kernels_per_step": m.kernels,
        "kernels_per_layer": round(m.kernels / n_layers, 2),
        "launches": m.launches,
        "cpu_launch_us": m.cpu_launch_us,
        "gpu_busy_us": m.gpu_busy_us,
        "utilisation": m.utilisation,
        "bound_by": m.bound_by,
        "timeline": tl.to_dict(),
    }


def synthetic_result(
    params: dict,
    model: ModelConfig,
    batches=(1, 8, 64, 256),
    modes=None,
    noise: float = 0.0,
    seed: int = 0,
    device: str = "synthetic GPU",
    hbm_copy_GBps: float = 3600.0,
    memsets: bool = False,
) -> dict:
    """A probe result (the probe's JSON schema) generated by the timing model with known parameters.

    `noise` is the relative spread of the recorded step and host times; `modes` (names or Modes) defaults
    to every mode the timing model represents; `memsets`: as `kernel_names`.
    """
    rng = np.random.default_rng(seed)
    theta = params_vector(params)
    points = _points(model, modes, batches, memsets)
    sim = ProbeModel(model, points, UNPIPELINED)
    host = sim.host_us(theta)
    runs = []
    for i, pt in enumerate(points):
        tl = replace(
            sim.timeline(theta, i), source="measured", label=f"synthetic · {pt.mode.name} · batch {pt.batch}"
        )
        step = tl.metrics().step_us * (1 + noise * rng.standard_normal())
        enqueue = float(host[i]) * (1 + noise * rng.standard_normal())
        runs.append(_run(pt, tl, step, enqueue, model.n_layers))
    return {
        "schema": 1,
        "device": device,
        "torch": "n/a (simulated)",
        "cuda": "n/a (simulated)",
        "created": "2026-11-30T09:00:00+00:00",
        "command": "sim.calibration.synthetic_result",
        "model": {
            "config": {name: getattr(model, name) for name in CONFIG_FIELDS},
            "n_params": int(model.n_params),
            "weight_bytes": int(model.n_params * model.bytes_per_el),
        },
        "hbm_copy_GBps": float(hbm_copy_GBps),  # a copy's bandwidth: not a parameter of the timing model
        "runs": runs,
        "captures": [{"bucket": b, "capture_ms": 0.0, "graph_mem_bytes": 0} for b in batches],
        "checks": {},
        "errors": [],
        "settings": {
            "synthetic": True,
            "pdl_max_rows": TILE_MAX_ROWS,
        },  # as the probe launches since 2026-12-06
    }
