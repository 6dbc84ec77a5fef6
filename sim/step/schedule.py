"""One decode step as a schedule, vectorised over kernels and batch sizes, on the one timing model.

A `core.step_plan.StepPlan` says how the step runs (mode, batch, GPUs, bucket); its kernels are
`sim.step.kernels.step_kernels` (the layer of the mode's kernel set, sharded with its all-reduces on
several GPUs), each costed by `sim.timing.kernel_us`. How the host submits them is the kernel set's
(`sim.step.kernel_sets`), one `sim.step.submission.Submission` for the row: eager, the host issues
launch i over [i·L, (i+1)·L] (L the hardware's launch cost times the mode's scale) and kernel i
starts once it is submitted and kernel i-1 has finished, plus the node gap when it was already
queued; a graph replay is one host call
(`sim.timing.GraphReplayCost`), after which the nodes run back to back with the node gap; a
persistent kernel's phases run back to back, each paying a barrier. The GPU-side gap applies to
eager kernels that were waiting in the stream too, so graphs never lose to eager by the gap
alone; it is hidden whenever the GPU waits for the host.

`simulate_step` draws one step; `sweep` needs only each step's end, so it asks the same
recurrence for the last kernel's end (`sim.timing.stream_end_us`), over one layer's kernels
repeated n_layers times: [n_batches, kernels per layer] of work instead of [n_batches, kernels
per step]. Both take the step's submission from the same kernel set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
from sim.step.kernel_sets import kernel_set
from sim.step.kernels import step_kernels
from sim.step.tensor_parallel import published_allreduce
from sim.timing import AllReduceCost


@dataclass(frozen=True, eq=False)
class SimulatedStep:
    timeline: Timeline
    metrics: StepMetrics
    plan: StepPlan
    baseline: StepMetrics  # the same plan unoptimised: fusion off, graphs off
    model: ModelConfig = field(repr=False, default=None)
    hardware: HardwareConfig = field(repr=False, default=None)
    phases: bool = (
        False  # its GPU intervals are the phases of one kernel (the persistent kernel), not kernels
    )

    @property
    def speedup(self) -> float:
        return self.baseline.step_us / self.metrics.step_us


def _timeline(
    model: ModelConfig, hw: HardwareConfig, plan: StepPlan, allreduce: AllReduceCost
) -> tuple[Timeline, bool]:
    """The step drawn, and whether its GPU intervals are the phases of one kernel (its kernel set's to say)."""
    runs_as = plan.runs_as
    kernels = step_kernels(model, runs_as, plan.tp)
    how = kernel_set(runs_as).submission(hw, runs_as, len(kernels), plan.bucket)
    dur = kernels.us(hw, allreduce, plan.rows, plan.padded_rows, how.latency_us)
    return how.timeline(dur, kernels.names, label=plan.label(model.name)), how.phases


def simulate_step(
    model: ModelConfig,
    hw: HardwareConfig,
    plan: StepPlan | None = None,
    allreduce: AllReduceCost | None = None,
) -> SimulatedStep:
    """One decode step as a timeline, its metrics, and the unoptimised step it is compared with.

    On several GPUs (`plan.tp`) it is one GPU's lanes, the all-reduces costed by `allreduce`
    (the published figures by default: `sim.step.tensor_parallel.published_allreduce`)."""
    plan = plan or StepPlan()
    allreduce = allreduce or published_allreduce(plan.tp)
    timeline, phases = _timeline(model, hw, plan, allreduce)
    metrics = timeline.metrics()
    base = plan.baseline
    baseline = metrics if base == plan else _timeline(model, hw, base, allreduce)[0].metrics()
    return SimulatedStep(
        timeline=timeline,
        metrics=metrics,
        plan=plan,
        baseline=baseline,
        model=model,
        hardware=hw,
        phases=phases,
    )


@dataclass(frozen=True, slots=True)
class SweepSeries:
    """One mode across the swept batches (arrays aligned with Sweep.batches)."""

    step_us: np.ndarray
    cpu_launch_us: np.ndarray
    gpu_busy_us: np.ndarray
    utilisation: np.ndarray
    kernels: int
    launches: np.ndarray  # host calls: 1 where a graph replayed (or one kernel launched), else one per kernel
    rows: np.ndarray  # rows the GPU ran (the bucket when padded)
    replayed: np.ndarray  # a graph replayed (the batch fits a bucket of a graph mode)

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
        replayed = self.series[name].replayed
        return replayed if replayed.any() else np.ones(len(self.batches), bool)

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
    """The steps' metrics per batch row: each kernel's time as in `simulate_step`, the end by the same
    submission's `step_end_us` over (the kernels before the layers, one layer × n_layers, after)."""
    if m.graphs:
        rows, replayed = bucket_rows(batches, buckets)
    else:
        rows, replayed = batches, np.zeros(len(batches), bool)
    padded = rows - batches  # dummy rows: matmul rows, but no KV-cache reads

    def steps(as_mode: Mode):
        """(step time, GPU busy time, submission) of every batch run as `as_mode`."""
        kernels = step_kernels(model, as_mode, tp)
        how = kernel_set(as_mode).submission(hw, as_mode, len(kernels))
        durs = [g.us(hw, allreduce, rows, padded, how.latency_us) for g in kernels.groups]
        return how.step_end_us(zip(durs, kernels.repeats)), kernels.busy_us(durs), how

    step, busy, eager = steps(without_graphs(m))  # above the largest bucket: its kernels, launched eagerly
    host, calls = np.full(len(batches), eager.host_us), np.full(len(batches), eager.host_calls)
    if replayed.any():
        graph_step, graph_busy, graph = steps(m)
        step, busy = np.where(replayed, graph_step, step), np.where(replayed, graph_busy, busy)
        host, calls = np.where(replayed, graph.host_us, host), np.where(replayed, graph.host_calls, calls)
    return SweepSeries(
        step_us=step,
        cpu_launch_us=host,
        gpu_busy_us=busy,
        utilisation=busy / step,
        kernels=len(step_kernels(model, m, tp)),
        launches=calls,
        rows=rows,
        replayed=replayed,
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
