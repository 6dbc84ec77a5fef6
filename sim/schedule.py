"""A discrete-event schedule of one decode step, vectorised over kernels and batch sizes.

Eager: the host issues launch i over [i·L, (i+1)·L]; kernel i starts once it is
submitted and kernel i-1 has finished (plus the node gap when it was already
queued): start_i = max((i+1)·L, end_{i-1} + gap). Graphs: one host interval (the
replay, cost G), then the nodes run back to back with the node gap. The GPU-side gap
applies to eager kernels that were waiting in the stream too, so graphs never lose
to eager by the gap alone; it is hidden whenever the GPU waits for the host.

The recurrence unrolls without a Python loop: with offsets C_i = Σ_{j<i}(d_j + gap),
start_i = C_i + max_{j≤i}(submit_j - C_j), a cumulative max along the kernel axis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from core.modes import CHAPTER_BUCKETS, COMBOS, bucket_for, check_buckets, combo_label
from core.timeline import CPU_BOUND, GPU_BOUND, StepMetrics, Timeline
from sim.config import MAX_SIM_BATCH, HardwareConfig, ModelConfig
from sim.kernels import kernel_arrays, kernel_groups, kernel_names, kv_groups, roofline_us
from sim.timing import schedule_starts


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


def _plan(hw: HardwareConfig, n_kernels: int, batch: int, graphs: bool, buckets) -> tuple:
    """(rows the GPU runs, whether a graph replays, the bucket or None, when each kernel is submitted)."""
    bucket = bucket_for(batch, buckets) if graphs else None
    if bucket is not None:
        submit = np.zeros(n_kernels)
        submit[0] = hw.graph_launch_us
        return bucket, True, bucket, submit
    return batch, False, None, np.arange(1, n_kernels + 1) * hw.eager_launch_us


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


@lru_cache(maxsize=16)
def _launch_names(n_layers: int, fusion: bool) -> tuple[str, ...]:
    return tuple(f"launch {k}" for k in kernel_names(n_layers, fusion))


def _timeline(model, hw, batch, fusion, graphs, buckets) -> tuple[Timeline, int | None]:
    weight, per_row, flops, names = kernel_arrays(model, fusion)
    rows, use_graph, bucket, submit = _plan(hw, len(names), batch, graphs, buckets)
    kv = np.concatenate(
        [g if i != 1 else np.tile(g, model.n_layers) for i, g in enumerate(kv_groups(model, fusion))]
    )
    dur = roofline_us(weight, per_row, flops, hw, [rows], padded=[rows - batch], kv_per_row=kv)[0]
    start = schedule_starts(submit, dur, hw.graph_node_gap_us)
    n = len(names)
    if use_graph:
        cpu_start, cpu_dur = np.zeros(1), np.array([hw.graph_launch_us])
        cpu_names = (f"cudaGraphLaunch (bucket {bucket}, {n} nodes)",)
        launched_by = np.zeros(n, np.int64)
    else:
        cpu_start = np.arange(n) * hw.eager_launch_us
        cpu_dur = np.full(n, hw.eager_launch_us)
        cpu_names = _launch_names(model.n_layers, fusion)
        launched_by = np.arange(n)
    mode = combo_label(fusion, use_graph)
    label = f"{model.name} · batch {batch} · {mode}"
    if use_graph and bucket > batch:
        label += f" (padded to bucket {bucket})"
    if graphs and not use_graph:
        label += " (above the largest bucket: eager)"
    return Timeline(
        cpu_start,
        cpu_dur,
        cpu_names,
        start,
        dur,
        names,
        launched_by=launched_by,
        source="simulated",
        label=label,
    ), bucket


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


def _exclusive_cumsum(x: np.ndarray) -> np.ndarray:
    return np.cumsum(x, axis=-1) - x


def _sweep_series(model, hw, batches: np.ndarray, fusion: bool, graphs: bool, buckets) -> SweepSeries:
    """The same schedule as `sim.timing.schedule_starts`, reduced to what the metrics need, per batch row.

    Only the last kernel's end matters: end = busy + (n-1)·gap + L - min_j X_j, where
    X_j = Σ_{i<j}(d_i + gap - L) (the host's lead over the GPU shrinks by X_j). Layers repeat,
    so the minimum over layer positions is taken over one layer's prefix and the first or last
    layer's offset, keeping the work at [n_batches, kernels per layer].
    """
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
    d_before, d_layer, d_after = (
        roofline_us(*group, hw, rows, padded, kv)
        for group, kv in zip((before, layer, after), kv_groups(model, fusion))
    )
    busy = d_before.sum(axis=1) + n_layers * d_layer.sum(axis=1) + d_after.sum(axis=1)
    gaps = (n - 1) * hw.graph_node_gap_us

    # Eager: lowest point of the running sum X over the step (before, every layer, after).
    lead = hw.graph_node_gap_us - hw.eager_launch_us
    x_before, x_layer, x_after = d_before + lead, d_layer + lead, d_after + lead
    s_before = x_before.sum(axis=1)
    per_layer = x_layer.sum(axis=1)
    lowest = np.minimum.reduce(
        [
            _exclusive_cumsum(x_before).min(axis=1, initial=0.0),
            s_before + np.minimum(0.0, (n_layers - 1) * per_layer) + _exclusive_cumsum(x_layer).min(axis=1),
            s_before + n_layers * per_layer + _exclusive_cumsum(x_after).min(axis=1, initial=np.inf),
        ]
    )
    eager_end = busy + gaps + hw.eager_launch_us - lowest
    graph_end = hw.graph_launch_us + busy + gaps  # nodes back to back after the replay call
    gpu_end = np.where(use_graph, graph_end, eager_end)
    cpu_launch = np.where(use_graph, hw.graph_launch_us, n * hw.eager_launch_us)
    step = np.maximum(gpu_end, cpu_launch)  # host intervals run back to back from 0
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
