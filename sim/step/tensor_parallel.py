"""Tensor parallelism in the simulator: what an all-reduce costs, and what one GPU holds.

A `tp`-way step is the one step builder's (`sim.step.kernels.step_kernels(model, mode, tp)`, drawn by
`sim.step.schedule.simulate_step` for a `StepPlan` with `tp` GPUs): the kernels sharded Megatron-style
(as the probe's sharded model does it), an all-reduce of batch × hidden × bytes_per_el after each
row-parallel kernel, costed like any kernel by the one timing model with the all-reduce's own
latency α and bandwidth β: α + bytes / β (`sim.timing.AllReduceCost`). Every GPU runs the same
kernels, so one GPU's lanes stand for all of them (a straggler's wait is not modelled).

α and β default to PUBLISHED figures: no two-GPU run of the probe exists yet. Given a TP probe
result, `fitted_allreduce` fits them to its all-reduce sweep (`fit_allreduce`), and
`simulate_step(..., allreduce=fitted)` uses the fit instead. The published ones
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

from core.step_plan import check_tp
from sim.step.kernels import ALLREDUCE, kv_share, step_kernels
from sim.timing import AllReduceCost

# sgl-project/sglang #2904, custom all-reduce on H100, latency in µs: GPUs -> (at 512 B, at 1 MiB).
SGLANG_H100_CUSTOM_ALLREDUCE_US = {2: (3.7, 19.9), 4: (4.8, 31.1), 8: (5.9, 33.8)}
PUBLISHED_SMALL_BYTES, PUBLISHED_LARGE_BYTES = 512, 1 << 20
NCCL_NVLS_TREE_2XH100_US = 6.0  # NVIDIA/nccl #1259: ≈6 µs at small sizes, 2 GPUs, CUDA graphs


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


def tp_summary(step) -> TPSummary:
    """Per-GPU weights and KV, and the all-reduce share of a simulated step (`sim.step.schedule.SimulatedStep`)."""
    model, plan = step.model, step.plan
    kernels = step_kernels(model, plan.mode, plan.tp)
    kv = (
        model.kv_cache_elements(plan.batch, model.context_len) * model.bytes_per_el * kv_share(model, plan.tp)
    )
    comm = np.array([ALLREDUCE in name for name in step.timeline.gpu_names])
    return TPSummary(
        tp=plan.tp,
        weight_bytes_per_gpu=kernels.weight_bytes,
        kv_bytes_per_gpu=float(kv),
        allreduces=int(comm.sum()),
        allreduce_us=float(step.timeline.gpu_dur[comm].sum()),
        allreduce_bytes=float(plan.rows * model.hidden * model.bytes_per_el),
    )
