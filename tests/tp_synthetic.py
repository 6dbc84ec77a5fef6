"""A synthetic tensor-parallel result, built with the writer's own functions (no GPU, no profiler).

`synthetic_tp_result()` is what `gpu_probe.tensor_parallel.run_tp_probe` would write for the tiny
preset: per rank, `gpu_probe.measure.run_record` over a made-up profiled step (compute kernels
on one stream, NCCL all-reduce kernels on another, two per layer), the all-reduce sweep as
`allreduce_sweep` returns it with known α and β, the checks under run_tp_probe's names, and the
file assembled by `rank_record` and `tp_result_record`. Only the measurements are invented.
"""

import numpy as np

from core.step_plan import mode as mode_named
from core.timeline import Timeline
from core.tp_result import tp_modes
from core.trace import TraceStep
from gpu_probe.config import get_config
from gpu_probe.measure import run_record
from gpu_probe.tensor_parallel import rank_record, tp_result_record

CFG = get_config("tiny")
BATCHES = (1, 4)
BUCKETS = (1, 2, 4)
SWEEP_BYTES = (512, 2048, 8192, 32768, 131072, 524288, 2097152)
# Known all-reduce cost per call (µs) = α + bytes / β (β in GB/s): eager and captured.
EAGER_ALPHA, EAGER_GBPS = 9.0, 40.0
GRAPH_ALPHA, GRAPH_GBPS = 5.0, 60.0
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
COMPUTE_STREAM, NCCL_STREAM = 7, 13


def allreduce_rows(noise: float = 0.0, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for nbytes in SWEEP_BYTES:
        eager = (EAGER_ALPHA + nbytes / (EAGER_GBPS * 1e3)) * (1 + noise * rng.standard_normal())
        graph = (GRAPH_ALPHA + nbytes / (GRAPH_GBPS * 1e3)) * (1 + noise * rng.standard_normal())
        rows.append({"bytes": nbytes, "eager_us_per_call": eager, "graph_us_per_call": graph})
    return rows


def profiled_step(mode: str, batch: int, rank: int, tp: int = 2) -> TraceStep:
    """One rank's step as the profiler would give it: embedding, per layer QKV, attention, o_proj,
    all-reduce, gate/up, down, all-reduce, then the LM head (tp 1: no all-reduces); eager launches one kernel per host
    call, a graph replay all of them from one."""
    names = ["embedding"]
    for _ in range(CFG.n_layers):
        layer = [
            "gemv_qkv",
            "paged_attention",
            "gemv_o",
            NCCL_KERNEL,
            "gemv_gate_up",
            "gemv_down",
            NCCL_KERNEL,
        ]
        names += [k for k in layer if tp > 1 or k != NCCL_KERNEL]  # one GPU: no all-reduce
    names.append("gemv_lm_head")
    comm = np.array([n == NCCL_KERNEL for n in names])
    work = (8.0 if mode_named(mode).fused else 20.0) / tp + 0.5 * batch
    dur = np.where(comm, GRAPH_ALPHA + 0.2 * batch + 0.1 * rank, work)
    graphed = mode_named(mode).graphs
    launch_us = 1.5 if graphed else 12.0
    start, t = [], (40.0 if graphed else launch_us)
    for i, d in enumerate(dur):
        if not graphed:
            t = max(t, (i + 1) * launch_us)
        start.append(t)
        t += d + 1.0
    n = len(names)
    timeline = Timeline(
        cpu_start=[0.0] if graphed else [i * launch_us for i in range(n)],
        cpu_dur=[40.0] if graphed else [launch_us - 0.5] * n,
        cpu_names=("cudaGraphLaunch",) if graphed else ("cudaLaunchKernel",) * n,
        gpu_start=start,
        gpu_dur=dur,
        gpu_names=tuple(names),
        launched_by=[0] * n if graphed else list(range(n)),
        source="measured",
        label=f"{mode} · batch {batch}",
        gpu_stream=np.where(comm, NCCL_STREAM, COMPUTE_STREAM),
    )
    return TraceStep(
        index=0,
        timeline=timeline,
        launches=1 if graphed else n,
        graph_launches=1 if graphed else 0,
        launch_delay_us=np.zeros(n),
        host_per_launch_us=np.zeros(n),
    )


def runs_of(rank: int, tp: int) -> list[dict]:
    runs = []
    for mode in tp_modes():
        graphed = mode_named(mode).graphs
        for batch in BATCHES:
            traced = profiled_step(mode, batch, rank, tp)
            step = traced.timeline.step_us * 1.1
            timing = {
                "step_us_median": step,
                "step_us_p10": step * 0.97,
                "step_us_p90": step * 1.05,
                "enqueue_us_median": 30.0 if graphed else step * 0.9,
            }
            bucket = min(b for b in BUCKETS if b >= batch) if graphed else None
            runs.append(run_record(mode, batch, timing, traced, CFG.n_layers, bucket=bucket))
    return runs


def checks_of(rank: int, tp: int, failed: str | None = None) -> dict:
    """The checks run_tp_probe collects on a rank, under its names (`failed` names one that failed)."""
    checks = {}
    for variant in ("unfused", "fused"):
        checks[f"sharded_vs_unsharded ({variant})"] = {
            "passed": True,
            "rank": rank,
            "tp": tp,
            "fused": variant == "fused",
            "rel_err": {"1": 3e-7, "8": 4e-7},
            "kv_shard_matches": True,
            "detail": f"rank {rank} of {tp}: logits within 0.001 (relative) of the unsharded model's",
        }
    for mode in (m for m in tp_modes() if mode_named(m).graphs):
        checks[f"graph_vs_eager ({mode})"] = {"passed": True, "detail": "3/3 buckets", "buckets": []}
        checks[f"kv_canary ({mode})"] = {"passed": True, "detail": "real sequences' KV blocks unchanged"}
    if failed is not None:
        checks[failed] = {**checks[failed], "passed": False}
    return checks


def synthetic_tp_result(
    tp: int = 2, device: str = "NVIDIA Test GPU", failed: str | None = None, **kw
) -> dict:
    """A TP result dict, as run_tp_probe writes it (rank 0 only measures the TP1 baseline)."""
    ranks = [
        rank_record(
            rank,
            device,
            runs_of(rank, tp),
            checks_of(rank, tp, failed if rank == tp - 1 else None),
            allreduce_rows(noise=kw.get("noise", 0.0), seed=rank),
            CFG.hidden * CFG.bytes_per_el,
        )
        for rank in range(tp)
    ]
    return tp_result_record(
        tp=tp,
        preset=CFG.to_dict(),
        command=f"torchrun --nproc-per-node {tp} -m gpu_probe --tp {tp} --preset tiny --batch 1 4",
        torch_version="2.13.0+cu130",
        cuda="13.0",
        nccl="2.27.3",
        batches=BATCHES,
        modes=tp_modes(),
        buckets=BUCKETS,
        ranks=ranks,
        tp1_runs=runs_of(0, 1),
        wall_s=123.0,
        created=kw.get("created", "2026-12-02T10:00:00+00:00"),
    )
