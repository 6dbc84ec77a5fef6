"""Tensor parallelism in the simulator: one GPU's share of a step, plus its all-reduces.

Megatron-style sharding over `tp` GPUs (as the probe's `gpu_probe/tensor_parallel.py` does it):
every projection, the attention and its KV cache are split over the GPUs, so a layer kernel's
weight bytes, KV-cache bytes and FLOPs divide by tp; its activations per row are kept whole (a
few KB, an upper bound), the two RMSNorms and the model-level kernels (embedding, final norm,
LM head, sampling) are replicated. After o_proj and after down_proj (the row-parallel
projections) each GPU holds a partial sum, so each layer adds two all-reduces of
batch × hidden × bytes_per_el, costed like any kernel by `sim.timing.kernel_us` with the
all-reduce's own latency α and bandwidth β: α + bytes / β. Every GPU runs the same kernels,
so one GPU's lanes stand for all of them (a straggler's wait is not modelled). With more GPUs
than KV heads, each GPU keeps one KV head whole (vLLM replicates them), so the KV cache divides
by min(tp, n_kv_heads).

α and β default to PUBLISHED figures: no two-GPU run of the probe exists yet. Given a TP probe
result, `fitted_allreduce` fits them to its all-reduce sweep (`fit_allreduce`), and
`simulate_tp_step(..., allreduce=fitted)` uses the fit instead. The published ones
come from SGLang's custom all-reduce on H100 (sgl-project/sglang #2904, "unit test performance
in H100 (without cuda graph)"): 3.7 / 4.8 / 5.9 µs at 512 B and 19.9 / 31.1 / 33.8 µs at 1 MiB
for 2 / 4 / 8 GPUs; α is the 512 B time and β the slope between the two rows. For comparison,
NCCL's NVLS tree all-reduce takes about 6 µs on 2 H100s at small sizes with CUDA graphs
(NVIDIA/nccl #1259), and vLLM's custom all-reduce 9.5 µs at 512 B in the same SGLang table.

numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.modes import bucket_for, combo_label
from sim.config import HardwareConfig, ModelConfig
from sim.kernels import MODEL_LEVEL, kernel_groups, kv_groups, layer_kernel_names, roofline_us
from sim.schedule import SimulatedStep, StepSettings
from sim.timing import (
    KernelFamilyCost,
    eager_timeline,
    family_kernel_us,
    graph_replay_timeline,
)

TP_CHOICES = (1, 2, 4, 8)
# Layer kernels every GPU runs whole (the norms); all the others are sharded.
REPLICATED_OPS = frozenset({"attn_norm", "ffn_norm"})
# The row-parallel kernels: each is followed by an all-reduce of its output.
ROW_PARALLEL_OPS = frozenset({"o_proj", "rope_attn_o", "down_proj"})
ALLREDUCE = "all_reduce"

# sgl-project/sglang #2904, custom all-reduce on H100, latency in µs: GPUs -> (at 512 B, at 1 MiB).
SGLANG_H100_CUSTOM_ALLREDUCE_US = {2: (3.7, 19.9), 4: (4.8, 31.1), 8: (5.9, 33.8)}
PUBLISHED_SMALL_BYTES, PUBLISHED_LARGE_BYTES = 512, 1 << 20
NCCL_NVLS_TREE_2XH100_US = 6.0  # NVIDIA/nccl #1259: ≈6 µs at small sizes, 2 GPUs, CUDA graphs


@dataclass(frozen=True, slots=True)
class AllReduceCost:
    """α + bytes / β for one all-reduce on `tp` GPUs, and where α and β come from."""

    tp: int
    latency_us: float  # α
    GBps: float  # β: message bytes per second beyond α (not bus bandwidth)
    source: str

    def us(self, nbytes) -> np.ndarray:
        return family_kernel_us(nbytes, 0.0, KernelFamilyCost(self.latency_us, self.GBps))


def check_tp(tp) -> int:
    if isinstance(tp, bool) or not isinstance(tp, (int, np.integer)) or int(tp) not in TP_CHOICES:
        raise ValueError(f"tp: must be one of {TP_CHOICES}, got {tp!r}")
    return int(tp)


def published_allreduce(tp: int) -> AllReduceCost:
    """The published SGLang H100 figures as α, β (a line through two published rows; nothing fitted)."""
    tp = check_tp(tp)
    if tp == 1:
        return AllReduceCost(1, 0.0, float("inf"), "one GPU: no all-reduce")
    small_us, large_us = SGLANG_H100_CUSTOM_ALLREDUCE_US[tp]
    GBps = (PUBLISHED_LARGE_BYTES - PUBLISHED_SMALL_BYTES) / (large_us - small_us) / 1e3  # B/µs -> GB/s
    return AllReduceCost(
        tp,
        small_us,
        GBps,
        f"published, not fitted: SGLang custom all-reduce on {tp}×H100 (sglang #2904), "
        f"{small_us} µs at 512 B and {large_us} µs at 1 MiB",
    )


def fit_allreduce(nbytes, us_per_call, tp: int, source: str = "fitted") -> AllReduceCost:
    """α and β of all-reduce cost = α + bytes / β, fitted to measured time per call.

    Least squares on the relative error, (α + bytes/β − t) / t: a sweep's sizes grow
    geometrically (512 B to 2 MiB), and in absolute µs the largest messages would set the line
    alone, leaving α, the small-message cost a decode step pays, to chance. Linear in
    (α, 1/β), so solved exactly, with α ≥ 0 and 1/β ≥ 0 (the better one-parameter fit where the
    two-parameter one leaves that range; 1/β = 0 is β = inf). Needs two distinct sizes.
    """
    x = np.asarray(nbytes, np.float64).reshape(-1)
    t = np.asarray(us_per_call, np.float64).reshape(-1)
    if len(x) != len(t):
        raise ValueError(f"fit_allreduce: {len(x)} sizes against {len(t)} times")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(t)) and np.all(x > 0) and np.all(t > 0)):
        raise ValueError("fit_allreduce: sizes and times must be positive finite numbers")
    if len(np.unique(x)) < 2:
        raise ValueError("fit_allreduce: needs at least two distinct message sizes")
    design = np.column_stack((1.0 / t, x / t))  # relative residual: design @ (α, 1/β) − 1

    def cost(u: np.ndarray) -> float:
        r = design @ u - 1.0
        return float(r @ r)

    (alpha, slope), *_ = np.linalg.lstsq(design, np.ones(len(t)), rcond=None)
    if alpha < 0 or slope < 0:  # the best fit on the boundary: one parameter at zero
        ones = np.ones(len(t))
        column_fits = []  # (α, 0) and (0, 1/β), each the least-squares value of its column alone
        for k in (0, 1):
            u = np.zeros(2)
            u[k] = max((design[:, k] @ ones) / (design[:, k] @ design[:, k]), 0.0)
            column_fits.append(u)
        alpha, slope = min(column_fits, key=cost)
    GBps = 1.0 / (slope * 1e3) if slope > 0 else float("inf")  # µs per byte -> GB/s
    return AllReduceCost(int(tp), float(alpha), float(GBps), source)


def fitted_allreduce(result, captured: bool = True) -> AllReduceCost:
    """`fit_allreduce` on a TP probe result's sweep (`core.tp_result.TPResult`, every rank's points):
    the all-reduce captured in a CUDA graph (what a graphed step pays) or eager."""
    nbytes, us = result.sweep(captured)
    how = "captured in a CUDA graph" if captured else "eager"
    return fit_allreduce(
        nbytes, us, result.tp, f"fitted to {len(us)} measured points ({how}) on {result.device}"
    )


def kv_share(model: ModelConfig, tp: int) -> float:
    """The fraction of the KV cache one GPU holds."""
    return 1.0 / min(check_tp(tp), model.n_kv_heads)


def _row_parallel(kernel: str) -> bool:
    """A row-parallel kernel (or one merging one, fewer fused kernels a layer): an all-reduce follows."""
    return any(part in ROW_PARALLEL_OPS for part in kernel.split("+"))


def sharded_layer_groups(model: ModelConfig, fusion: bool, tp: int) -> tuple:
    """One GPU's (before, layer, after) kernel arrays: (weight bytes, bytes per row, FLOPs per row, KV per row)."""
    tp = check_tp(tp)
    if model.n_heads % tp:
        raise ValueError(f"tp: {tp} GPUs must divide the {model.n_heads} attention heads")
    groups, kvs = kernel_groups(model, fusion), kv_groups(model, fusion)
    out = []
    for (weight, per_row, flops), kv, ops in zip(
        groups, kvs, (MODEL_LEVEL[:1], layer_kernel_names(model, fusion), MODEL_LEVEL[1:])
    ):
        share = np.array([1.0 if (op in REPLICATED_OPS or op in MODEL_LEVEL) else 1.0 / tp for op in ops])
        kv_gpu = kv * kv_share(model, tp)  # only the attention kernels read KV; they are sharded
        out.append((weight * share, per_row - kv + kv_gpu, flops * share, kv_gpu))
    return tuple(out)


def tp_step_kernels(
    model: ModelConfig,
    hw: HardwareConfig,
    fusion: bool,
    tp: int,
    rows: int,
    padded: int,
    allreduce: AllReduceCost,
) -> tuple[np.ndarray, tuple[str, ...]]:
    """GPU time and name of every kernel one GPU runs in a step, the all-reduces in place."""
    before, layer, after = sharded_layer_groups(model, fusion, tp)
    d_before, d_layer, d_after = (
        roofline_us(w, r, f, hw, [rows], padded=[padded], kv_per_row=kv)[0]
        for w, r, f, kv in (before, layer, after)
    )
    ops = layer_kernel_names(model, fusion)
    comm_us = float(allreduce.us(rows * model.hidden * model.bytes_per_el)) if tp > 1 else None
    names, durs = list(MODEL_LEVEL[:1]), [d_before]
    for i in range(model.n_layers):
        for op, d in zip(ops, d_layer):
            names.append(f"L{i} {op}")
            durs.append([d])
            if comm_us is not None and _row_parallel(op):
                names.append(f"L{i} {ALLREDUCE} ({op})")
                durs.append([comm_us])
    names += MODEL_LEVEL[1:]
    durs.append(d_after)
    return np.concatenate([np.atleast_1d(np.asarray(d, np.float64)) for d in durs]), tuple(names)


def _tp_timeline(model, hw, s: StepSettings, tp: int, allreduce: AllReduceCost):
    bucket = bucket_for(s.batch, s.buckets) if s.graphs else None
    rows = bucket if bucket is not None else s.batch
    dur, names = tp_step_kernels(model, hw, s.fusion, tp, rows, rows - s.batch, allreduce)
    mode = combo_label(s.fusion, bucket is not None)
    label = f"{model.name} · {tp} GPUs (tensor parallel), one GPU's lanes · batch {s.batch} · {mode}"
    if bucket is not None and bucket > s.batch:
        label += f" (padded to bucket {bucket})"
    if s.graphs and bucket is None:
        label += " (above the largest bucket: eager)"
    if bucket is not None:
        cost = hw.replay_cost
        return graph_replay_timeline(dur, names, cost, label=label), bucket
    return eager_timeline(dur, names, hw.eager_launch_us, hw.graph_node_gap_us, label=label), None


def simulate_tp_step(
    model: ModelConfig,
    hw: HardwareConfig,
    settings: StepSettings | None = None,
    tp: int = 2,
    allreduce: AllReduceCost | None = None,
) -> SimulatedStep:
    """One GPU of a `tp`-way tensor-parallel step, like `sim.schedule.simulate_step` (same result type;
    the baseline is the same TP with fusion and graphs off). tp=1 gives simulate_step's step."""
    s = settings or StepSettings()
    tp = check_tp(tp)
    allreduce = allreduce or published_allreduce(tp)
    timeline, bucket = _tp_timeline(model, hw, s, tp, allreduce)
    metrics = timeline.metrics()
    if s.fusion or s.graphs:
        plain = StepSettings(batch=s.batch, fusion=False, graphs=False, buckets=s.buckets)
        baseline = _tp_timeline(model, hw, plain, tp, allreduce)[0].metrics()
    else:
        baseline = metrics
    return SimulatedStep(
        timeline=timeline,
        metrics=metrics,
        settings=s,
        bucket=bucket,
        padded_rows=(bucket - s.batch) if bucket is not None else 0,
        eager_fallback=bool(s.graphs and bucket is None),
        baseline=baseline,
        model=model,
        hardware=hw,
    )


@dataclass(frozen=True, slots=True)
class TPSummary:
    """What one GPU holds and spends on communication in a TP step."""

    tp: int
    weight_bytes_per_gpu: float
    kv_bytes_per_gpu: float  # the batch's KV cache at context_len
    allreduces: int
    allreduce_us: float  # GPU time of all of them in the step
    allreduce_bytes: float  # one all-reduce's message

    @property
    def per_call_us(self) -> float:
        return self.allreduce_us / self.allreduces if self.allreduces else 0.0


def tp_summary(step: SimulatedStep, tp: int) -> TPSummary:
    """Per-GPU weights and KV, and the all-reduce share of a simulated TP step."""
    model, rows = step.model, step.bucket or step.settings.batch
    before, layer, after = sharded_layer_groups(model, step.settings.fusion, tp)
    weight = before[0].sum() + model.n_layers * layer[0].sum() + after[0].sum()
    kv = model.n_layers * 2 * model.kv_dim * model.context_len * model.bytes_per_el * step.settings.batch
    kv *= kv_share(model, tp)
    comm = np.array([ALLREDUCE in name for name in step.timeline.gpu_names])
    return TPSummary(
        tp=tp,
        weight_bytes_per_gpu=float(weight),
        kv_bytes_per_gpu=float(kv),
        allreduces=int(comm.sum()),
        allreduce_us=float(step.timeline.gpu_dur[comm].sum()),
        allreduce_bytes=float(rows * model.hidden * model.bytes_per_el),
    )
