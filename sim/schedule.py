"""One decode step as a schedule, vectorised over kernels and batch sizes, on the one timing model.

Each kernel's GPU time is `sim.kernels.roofline_us` (the one kernel cost, `sim.timing.kernel_us`).
Eager: the host issues launch i over [i·L, (i+1)·L] (`sim.timing.eager_timeline`); kernel i
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

from dataclasses import dataclass, field

import numpy as np

from core.modes import CHAPTER_BUCKETS, COMBOS, bucket_for, check_buckets, combo_label
from core.timeline import CPU_BOUND, GPU_BOUND, StepMetrics, Timeline
from sim.config import MAX_SIM_BATCH, HardwareConfig, ModelConfig
from sim.kernels import kernel_arrays, kernel_groups, kv_groups, roofline_us
from sim.timing import eager_timeline, graph_replay_timeline, stream_end_us


@dataclass(frozen=True, slots=True)
class StepSettings:
    batch: int = 1
    fusion: bool = False
    graphs: bool = False
    buckets: tuple[int, ...] = CHAPTER_BUCKETS  # captured graph sizes; larger batches run eagerly

    def __post_init__(self) -> None:
        if isinstance(self.batch, bool) or not isinstance(self.batch, (int, np.integer)):
            raise ValueError(f"StepSettings.batch: must be an integer, got {self.batch!r}")
        if not 1 <= self.batch <= MAX_SIM_BATCH:
            raise ValueError(f"StepSettings.batch: must be from 1 to {MAX_SIM_BATCH}, got {self.batch}")
        for name in ("fusion", "graphs"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"StepSettings.{name}: must be True or False, got {getattr(self, name)!r}")
        object.__setattr__(self, "batch", int(self.batch))
        object.__setattr__(self, "fusion", bool(self.fusion))
        object.__setattr__(self, "graphs", bool(self.graphs))
        object.__setattr__(self, "buckets", check_buckets(self.buckets, "StepSettings.buckets"))


@dataclass(frozen=True, eq=False)
class SimulatedStep:
    timeline: Timeline
    metrics: StepMetrics
    settings: StepSettings
    bucket: int | None  # the captured size replayed; None when eager
    padded_rows: int  # dummy rows added to reach the bucket
    eager_fallback: bool  # graphs asked for, but the batch is above the largest bucket
    baseline: StepMetrics  # fusion off, graphs off, same batch, model and hardware
    model: ModelConfig = field(repr=False, default=None)
    hardware: HardwareConfig = field(repr=False, default=None)

    @property
    def speedup(self) -> float:
        return self.baseline.step_us / self.metrics.step_us


def _timeline(model, hw, batch, fusion, graphs, buckets) -> tuple[Timeline, int | None]:
    weight, per_row, flops, names = kernel_arrays(model, fusion)
    bucket = bucket_for(batch, buckets) if graphs else None
    rows = batch if bucket is None else bucket
    kv = np.concatenate(
        [g if i != 1 else np.tile(g, model.n_layers) for i, g in enumerate(kv_groups(model, fusion))]
    )
    dur = roofline_us(weight, per_row, flops, hw, [rows], padded=[rows - batch], kv_per_row=kv)[0]
    label = f"{model.name} · batch {batch} · {combo_label(fusion, bucket is not None)}"
    if bucket is None:
        if graphs:
            label += " (above the largest bucket: eager)"
        return eager_timeline(dur, names, hw.eager_launch_us, hw.graph_node_gap_us, label=label), None
    if bucket > batch:
        label += f" (padded to bucket {bucket})"
    host = f"cudaGraphLaunch (bucket {bucket}, {len(names)} nodes)"
    return graph_replay_timeline(dur, names, hw.replay_cost, label=label, host_name=host), bucket


def simulate_step(
    model: ModelConfig, hw: HardwareConfig, settings: StepSettings | None = None
) -> SimulatedStep:
    """One decode step as a timeline, its metrics, and the unoptimised step it is compared with."""
    s = settings or StepSettings()
    timeline, bucket = _timeline(model, hw, s.batch, s.fusion, s.graphs, s.buckets)
    metrics = timeline.metrics()
    if s.fusion or s.graphs:
        base_tl, _ = _timeline(model, hw, s.batch, False, False, s.buckets)
        baseline = base_tl.metrics()
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
class SweepSeries:
    """One toggle combination across the swept batches (arrays aligned with Sweep.batches)."""

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
    series: dict  # (fusion, graphs) -> SweepSeries
    buckets: tuple[int, ...]

    def __getitem__(self, combo) -> SweepSeries:
        return self.series[tuple(combo)]

    def _per_combo(self, name: str) -> dict:
        return {combo: getattr(s, name) for combo, s in self.series.items()}

    @property
    def step_us(self) -> dict:
        return self._per_combo("step_us")

    @property
    def cpu_launch_us(self) -> dict:
        return self._per_combo("cpu_launch_us")

    @property
    def gpu_busy_us(self) -> dict:
        return self._per_combo("gpu_busy_us")

    @property
    def utilisation(self) -> dict:
        return self._per_combo("utilisation")

    @property
    def crossover(self) -> dict:
        """(fusion, graphs) -> smallest batch from which every swept batch is GPU-bound (None if never)."""
        out = {}
        for combo, s in self.series.items():
            bound = s.gpu_bound
            if not bound[-1]:
                out[combo] = None
                continue
            last_cpu = np.flatnonzero(~bound)
            first = last_cpu[-1] + 1 if len(last_cpu) else 0
            out[combo] = int(self.batches[first])
        return out


def _sweep_series(model, hw, batches: np.ndarray, fusion: bool, graphs: bool, buckets) -> SweepSeries:
    """The steps' metrics per batch row: each kernel's time as in `simulate_step`, the end by
    `sim.timing.stream_end_us` over (the kernels before the layers, one layer × n_layers, after)."""
    before, layer, after = kernel_groups(model, fusion)
    n_layers = model.n_layers
    n = len(before[0]) + n_layers * len(layer[0]) + len(after[0])
    if graphs and buckets:
        bucket_rows = np.asarray(buckets)[np.minimum(np.searchsorted(buckets, batches), len(buckets) - 1)]
        use_graph = batches <= buckets[-1]
    else:
        bucket_rows, use_graph = batches, np.zeros(len(batches), bool)
    rows = np.where(use_graph, bucket_rows, batches)
    padded = rows - batches  # dummy rows: matmul rows, but no KV-cache reads
    durs = [
        roofline_us(*group, hw, rows, padded, kv)
        for group, kv in zip((before, layer, after), kv_groups(model, fusion))
    ]
    busy = durs[0].sum(axis=1) + n_layers * durs[1].sum(axis=1) + durs[2].sum(axis=1)
    gap, replay = hw.graph_node_gap_us, hw.replay_cost

    def end(first_ready, host_per_kernel):
        segments = zip([host_per_kernel] * 3, durs, [gap] * 3, (1, n_layers, 1))
        return stream_end_us(first_ready, list(segments))

    eager_host = n * hw.eager_launch_us
    graph_host = replay.host_us(n)
    eager_step = np.maximum(end(0.0, hw.eager_launch_us), eager_host)
    if use_graph.any():
        graph_step = np.maximum(end(graph_host, 0.0), graph_host)  # the nodes start once the call returns
        step = np.where(use_graph, graph_step, eager_step)
    else:
        step = eager_step
    cpu_launch = np.where(use_graph, graph_host, eager_host)
    return SweepSeries(
        step_us=step,
        cpu_launch_us=cpu_launch,
        gpu_busy_us=busy,
        utilisation=busy / step,
        kernels=n,
        launches=np.where(use_graph, 1, n),
        rows=rows,
    )


def sweep(model: ModelConfig, hw: HardwareConfig, batches, buckets=CHAPTER_BUCKETS) -> Sweep:
    """Step metrics for all four toggle combinations at every batch in `batches`."""
    b = np.asarray(batches)
    if b.ndim != 1 or len(b) == 0 or not np.issubdtype(b.dtype, np.integer):
        raise ValueError("batches: must be a non-empty list of integers")
    if b.min() < 1 or b.max() > MAX_SIM_BATCH:
        raise ValueError(f"batches: each must be from 1 to {MAX_SIM_BATCH}")
    buckets = check_buckets(buckets)
    b = b.astype(np.int64)
    series = {(f, g): _sweep_series(model, hw, b, f, g, buckets) for f, g in COMBOS}
    return Sweep(batches=b, series=series, buckets=buckets)
