"""The one builder of probe results for the tests: small valid files in the schema of `core.probe_result`.

`probe_result()` is one eager run of two kernels on a made-up GPU; its keyword arguments replace top-level
fields. `probe_run()` is such a run, another timeline's or with other fields. A change of the result
format changes this file, not the tests that build on it.
"""

from __future__ import annotations

import copy

from core.timeline import Timeline

TWO_KERNELS = Timeline(
    cpu_start=[0.0, 6.0],
    cpu_dur=[6.0, 5.0],
    cpu_names=["cudaLaunchKernel"] * 2,
    gpu_start=[7.0, 12.0],
    gpu_dur=[2.0, 3.0],
    gpu_names=["k1", "k2"],
    launched_by=[0, 1],
    source="measured",
)


def probe_run(timeline: Timeline = TWO_KERNELS, step_us: float = 15.0, **fields) -> dict:
    """An eager run at batch 1 whose profiled step is `timeline`, timed at `step_us` (p10 1 µs below, p90
    2.5 µs above); its launch and busy figures are the timeline's. `fields` replace any of the run's."""
    m = timeline.metrics()
    run = {
        "mode": "eager",
        "batch": 1,
        "bucket": None,
        "padded_rows": 0,
        "eager_fallback": False,
        "step_us_median": step_us,
        "step_us_p10": step_us - 1.0,
        "step_us_p90": step_us + 2.5,
        "enqueue_us_median": 10.5,
        "kernels_per_step": m.kernels,
        "kernels_per_layer": 1.0,
        "launches": m.launches,
        "cpu_launch_us": m.cpu_launch_us,
        "gpu_busy_us": m.gpu_busy_us,
        "utilisation": m.gpu_busy_us / step_us,
        "bound_by": m.bound_by,
        "timeline": timeline.to_dict(),
    }
    return {**run, **copy.deepcopy(fields)}


def probe_result(runs: list[dict] | None = None, **fields) -> dict:
    """A valid result of `runs` (one `probe_run()` by default); `fields` replace top-level fields."""
    result = {
        "schema": 1,
        "device": "Test GPU",
        "torch": "2.11.0",
        "cuda": "12.8",
        "created": "2026-11-30T10:00:00+00:00",
        "command": "python -m gpu_probe",
        "model": {
            "config": {"name": "small", "n_layers": 32},
            "n_params": 1000,
            "weight_bytes": 2000,
            "read_bytes": 2000,
        },
        "hbm_copy_GBps": 4200.0,
        "runs": [probe_run()] if runs is None else runs,
        "captures": [],
        "checks": {},
        "errors": [],
        "settings": {"steps": 10},
    }
    return {**result, **copy.deepcopy(fields)}


def host_block(**fields) -> dict:
    """A `host` block as `gpu_probe.host_speed` writes it: a 6.1 µs torch launch, one sample before the steps
    and one after; `fields` replace any of its top-level fields."""

    def costs(scale: float) -> dict:
        return {
            "torch_launch_us": {"median": 6.1 * scale, "p10": 5.8 * scale, "p90": 7.0 * scale},
            "triton_launch_us": {"median": 9.8 * scale, "p10": 9.1 * scale, "p90": 11.5 * scale},
            "triton_bound_launch_us": {"median": 4.2 * scale, "p10": 3.9 * scale, "p90": 5.0 * scale},
            "graph_launch_us": {
                "nodes": [1, 16, 64, 256],
                "median": [4.0 * scale, 4.4 * scale, 5.6 * scale, 10.4 * scale],
                "p10": [3.8 * scale, 4.2 * scale, 5.3 * scale, 10.0 * scale],
                "p90": [4.6 * scale, 5.0 * scale, 6.2 * scale, 11.5 * scale],
            },
            "graph_fixed_us": 4.0 * scale,
            "graph_per_node_us": 0.025 * scale,
        }

    block = {
        "cpu": "Intel(R) Xeon(R) Platinum 8480+",
        "python": "3.11.9",
        "torch": "2.11.0+cu130",
        "triton": "3.6.0",
        "launches": 3000,
        **costs(1.0),
        "samples": [{"when": "before", **costs(0.98)}, {"when": "after", **costs(1.02)}],
    }
    return {**block, **copy.deepcopy(fields)}
