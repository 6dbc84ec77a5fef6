"""One decode step as a schedule, vectorised over kernels and batch sizes, on the one timing model.

A `core.step_plan.StepPlan` says how the step runs (mode, batch, GPUs, bucket); its kernels are
`sim.kernels.step_kernels` (the mode's kernel set, sharded with its all-reduces on several GPUs),
each costed by `sim.timing.kernel_us`. Eager: the host issues launch i over [i·L, (i+1)·L]
(`sim.timing.eager_timeline`, L the hardware's launch cost times the mode's scale); kernel i
starts once it is submitted and kernel i-1 has finished, plus the node gap when it was already
queued. Graphs: one replay (`sim.timing.GraphReplayCost`: the hardware's graph launch, then the
nodes back to back with the node gap, `graph_replay_timeline`). The GPU-side gap applies to
eager kernels that were waiting in the stream too, so graphs never lose to eager by the gap
alone; it is hidden whenever the GPU waits for the host.

The sweep needs only each step's end, so it asks the same recurrence for the last kernel's end
(`sim.timing.stream_end_us`), over one layer's kernels repeated n_layers times: [n_batches,
kernels per layer] of work instead of [n_batches, kernels per step].
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from core.step_plan import (
    CHAPTER_BUCKETS,
    Mode,
    StepPlan,
    bucket_rows,
    check_buckets,
    check_tp,
    mode,
    modes,
    without_graphs,
)
from core.timeline import CPU_BOUND, GPU_BOUND, StepMetrics, Timeline
from sim.config import MAX_SIM_BATCH, HardwareConfig, ModelConfig
from sim.kernels import step_kernels
from sim.tensor_parallel import AllReduceCost, published_allreduce
from sim.timing import eager_host_us, eager_timeline, graph_replay_timeline, stream_end_us


@dataclass(frozen=True, eq=False)
class SimulatedStep:
    timeline: Timeline
    metrics: StepMetrics
    plan: StepPlan
    baseline: StepMetrics  # the same plan unoptimised: fusion off, graphs off
    model: ModelConfig = field(repr=False, default=None)
    hardware: HardwareConfig = field(repr=False, default=None)

    @property
    def speedup(self) -> float:
        return self.baseline.step_us / self.metrics.step_us


def _timeline(model: ModelConfig, hw: HardwareConfig, plan: StepPlan, allreduce: AllReduceCost) -> Timeline:
    runs_as = plan.runs_as
    kernels = step_kernels(model, runs_as, plan.tp)
    dur = kernels.us(hw, allreduce, plan.rows, plan.padded_rows, hw.boundary_us(runs_as))
    label = plan.label(model.name)
    if not plan.replays:
        launch = hw.eager_launch_us * runs_as.launch_scale
        return eager_timeline(dur, kernels.names, launch, hw.graph_node_gap_us, label=label)
    if runs_as.one_kernel:  # one node: its phases run back to back, each paying a barrier
        host = f"cudaGraphLaunch (bucket {plan.bucket}, one persistent kernel)"
        cost = replace(hw.replay_cost, node_gap_us=0.0)
        return graph_replay_timeline(dur, kernels.names, cost, label=label, host_name=host, nodes=1)
    host = f"cudaGraphLaunch (bucket {plan.bucket}, {len(kernels)} nodes)"
    return graph_replay_timeline(dur, kernels.names, hw.replay_cost, label=label, host_name=host)


def simulate_step(
    model: ModelConfig,
    hw: HardwareConfig,
    plan: StepPlan | None = None,
    allreduce: AllReduceCost | None = None,
) -> SimulatedStep:
    """One decode step as a timeline, its metrics, and the unoptimised step it is compared with.

    On several GPUs (`plan.tp`) it is one GPU's lanes, the all-reduces costed by `allreduce`
    (the published figures by default: `sim.tensor_parallel.published_allreduce`)."""
    plan = plan or StepPlan()
    allreduce = allreduce or published_allreduce(plan.tp)
    timeline = _timeline(model, hw, plan, allreduce)
    metrics = timeline.metrics()
    base = plan.baseline
    baseline = metrics if base == plan else _timeline(model, hw, base, allreduce).metrics()
    return SimulatedStep(
        timeline=timeline, metrics=metrics, plan=plan, baseline=baseline, model=model, hardware=hw
    )


@dataclass(frozen=True, slots=True)
class SweepSeries:
    """One mode across the swept batches (arrays aligned with Sweep.batches)."""

    step_us: np.ndarray
    cpu_launch_us: np.ndarray
    gpu_busy_us: np.ndarray
    utilisation: np.ndarray
    kernels: int
    launches: np.ndarray  # 1 where a graph replayed, the kernel count where eager
    rows: np.ndarray  # rows the GPU ran (the bucket when padded)

    @property
    def bound_by(self) -> np.ndarray:
        return np.where(self.cpu_launch_us > self.gpu_busy_us, CPU_BOUND, GPU_BOUND)

    @property
    def gpu_bound(self) -> np.ndarray:
        return self.cpu_launch_us <= self.gpu_busy_us


@dataclass(frozen=True, eq=False)
class Sweep:
    batches: np.ndarray
    series: dict  # mode name -> SweepSeries, in the modes table's order
    buckets: tuple[int, ...]

    def __getitem__(self, m) -> SweepSeries:
        return self.series[mode(m).name]

    @property
    def modes(self) -> tuple[Mode, ...]:
        return tuple(mode(name) for name in self.series)

    def _as_itself(self, name: str) -> np.ndarray:
        """Where a mode runs as itself: a graph mode up to its largest bucket (above it, eagerly)."""
        s = self.series[name]
        replayed = s.launches == 1
        return replayed if mode(name).graphs and replayed.any() else np.ones(len(self.batches), bool)

    @property
    def crossover(self) -> dict:
        """mode name -> smallest batch from which the step stays GPU-bound at every larger swept batch the
        mode runs as itself (a graph mode: up to its largest bucket; `fallback_cpu_bound` says what the eager
        steps above it do); None if it never does."""
        out = {}
        for name, s in self.series.items():
            own = self._as_itself(name)
            batches, bound = self.batches[own], s.gpu_bound[own]
            if not bound[-1]:
                out[name] = None
                continue
            last_cpu = np.flatnonzero(~bound)
            first = last_cpu[-1] + 1 if len(last_cpu) else 0
            out[name] = int(batches[first])
        return out

    @property
    def fallback_cpu_bound(self) -> dict:
        """graph mode name -> the first swept batch above its largest bucket whose eager step is bound by
        CPU launches (None: every such step is GPU-bound, or none was swept)."""
        out = {}
        for name, s in self.series.items():
            fallback = ~self._as_itself(name)
            cpu = fallback & ~s.gpu_bound
            out[name] = int(self.batches[np.flatnonzero(cpu)[0]]) if cpu.any() else None
        return out


def _sweep_series(model, hw, batches: np.ndarray, m: Mode, buckets, tp: int, allreduce) -> SweepSeries:
    """The steps' metrics per batch row: each kernel's time as in `simulate_step`, the end by
    `sim.timing.stream_end_us` over (the kernels before the layers, one layer × n_layers, after)."""
    eager_mode = without_graphs(m)  # above the largest bucket: its kernels, launched eagerly
    kernels = step_kernels(model, m, tp)
    n = len(kernels)
    if m.graphs:
        rows, use_graph = bucket_rows(batches, buckets)
    else:
        rows, use_graph = batches, np.zeros(len(batches), bool)
    padded = rows - batches  # dummy rows: matmul rows, but no KV-cache reads

    def durations(as_mode):
        return [g.us(hw, allreduce, rows, padded, hw.boundary_us(as_mode)) for g in kernels.groups]

    def end(durs, first_ready, host_per_kernel, gap):
        segments = zip([host_per_kernel] * 3, durs, [gap] * 3, kernels.repeats)
        return stream_end_us(first_ready, list(segments))

    eager_durs = durations(eager_mode)
    launch = hw.eager_launch_us * eager_mode.launch_scale
    eager_host = eager_host_us(launch, n)
    eager_step = np.maximum(end(eager_durs, 0.0, launch, hw.graph_node_gap_us), eager_host)
    busy = kernels.busy_us(eager_durs)
    graph_host = hw.replay_cost.host_us(1 if m.one_kernel else n)
    if use_graph.any():
        graph_durs = durations(m) if m.one_kernel else eager_durs
        gap = 0.0 if m.one_kernel else hw.graph_node_gap_us
        # The nodes start once the call returns.
        graph_step = np.maximum(end(graph_durs, graph_host, 0.0, gap), graph_host)
        step = np.where(use_graph, graph_step, eager_step)
        busy = np.where(use_graph, kernels.busy_us(graph_durs), busy)
    else:
        step = eager_step
    cpu_launch = np.where(use_graph, graph_host, eager_host)  # one launch when replayed
    return SweepSeries(
        step_us=step,
        cpu_launch_us=cpu_launch,
        gpu_busy_us=busy,
        utilisation=busy / step,
        kernels=n,
        launches=np.where(use_graph, 1, n),
        rows=rows,
    )


def sweep(
    model: ModelConfig,
    hw: HardwareConfig,
    batches,
    buckets=CHAPTER_BUCKETS,
    among: tuple[Mode, ...] | None = None,
    tp: int = 1,
    allreduce: AllReduceCost | None = None,
) -> Sweep:
    """Step metrics for every simulated mode (or `among`) at every batch in `batches`."""
    b = np.asarray(batches)
    if b.ndim != 1 or len(b) == 0 or not np.issubdtype(b.dtype, np.integer):
        raise ValueError("batches: must be a non-empty list of integers")
    if b.min() < 1 or b.max() > MAX_SIM_BATCH:
        raise ValueError(f"batches: each must be from 1 to {MAX_SIM_BATCH}")
    buckets = check_buckets(buckets)
    tp = check_tp(tp)
    allreduce = allreduce or published_allreduce(tp)
    b = b.astype(np.int64)
    among = modes(modelled=True) if among is None else tuple(mode(m) for m in among)
    series = {m.name: _sweep_series(model, hw, b, m, buckets, tp, allreduce) for m in among}
    return Sweep(batches=b, series=series, buckets=buckets)
