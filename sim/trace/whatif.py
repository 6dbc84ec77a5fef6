"""What CUDA graphs and kernel fusion would save on a step read from a profiler trace: an estimate.

The step's own kernels, with the durations the trace measured, are rescheduled by the one timing
model (`sim.timing`): the same recurrence, the same replay cost as the simulator and the calibration.

- **CUDA graphs** (only for a step that does not replay one already): the host copies the step's
  inputs (its host-to-device copies before the first kernel; their host time is the trace's) and
  makes one graph launch, whose cost -- fixed, plus a little per node -- and the GPU's gap between
  replayed nodes are the replay cost calibrated to the probe's recorded H200 run unless another is
  given. The kernels then run back to back, each stream in its own order; device-to-host copies
  after the last kernel (the sampled token going back) stay eager launches after the replay.
- **Fusion**: the elementwise and norm kernels that a fuser folds together (residual adds, RMSNorm's
  pow / mean / rsqrt / mul, casts, RoPE's muls and cats, SwiGLU's SiLU and multiply): each run of
  them between two kernels that are not (GEMMs, attention, embedding gathers, copies, communication)
  becomes one kernel, as Inductor's pointwise and reduction fusion does. The fused kernel reads its
  inputs and writes its output once, so it takes as long as the run's longest member; the others'
  launches, their host time and their GPU time go. The bytes saved are each folded intermediate's
  write and read, 2 × the op's largest tensor, where the trace recorded shapes (record_shapes=True).
  Host time per remaining launch, launch latency and the gap between queued kernels are the trace's.
- **Fusion + graphs**: the fused step, replayed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from core.step_plan import FUSED, FUSED_GRAPH, GRAPH
from core.timeline import StepMetrics, Timeline
from core.trace import TraceStep, op_inputs, short_kernel_name
from core.trace.families import foldable  # the one classifier of kernel names
from sim.timing import GraphReplayCost, schedule_starts

ESTIMATE = "estimate"


@dataclass(frozen=True, slots=True)
class FoldedKernel:
    """One kernel name the fusion what-if folds away: how often, and what that saves."""

    name: str
    count: int  # occurrences in the step that go (a run's longest member stays, as the fused kernel)
    gpu_us: float  # their GPU time
    host_us: float  # their launches' host time


@dataclass(frozen=True, slots=True)
class FusedGroup:
    """One run of foldable kernels that the fusion what-if makes one kernel, and what then stays on chip.

    An intermediate is a member's output that a later member of the group reads (a tensor of its shape among
    that member's inputs, from record_shapes): fused, it is neither written to HBM nor read back, 2 × its bytes.
    A copy within one dtype reads a view of some other tensor (a KV cache expanded for grouped-query attention),
    not the member before it; a member's output that nothing later in the group reads (the group's own output,
    or a copy the attention reads) is written either way."""

    first: int  # the step's index of its first kernel
    ops: tuple[str, ...]  # each member's `core.trace.op_signature` ('' where the trace has none)
    intermediates: tuple[tuple[str, tuple[int, ...], str, int], ...]  # (op, output shape, dtype, bytes)

    @property
    def bytes_saved(self) -> int:
        return 2 * sum(b for *_, b in self.intermediates)


@dataclass(frozen=True, eq=False)
class WhatIf:
    """The step as it would run with graphs, fusion or both."""

    name: str
    timeline: Timeline
    launches: int
    notes: tuple[str, ...] = ()
    folded: tuple[FoldedKernel, ...] = ()
    bytes_saved: int | None = None  # the groups' sum, None where the trace has no shapes
    groups: tuple[FusedGroup, ...] = ()
    metrics: StepMetrics = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metrics", self.timeline.metrics())

    @property
    def kernels(self) -> int:
        return len(self.timeline.gpu_start)

    def summary(self) -> dict:
        m = self.metrics
        return {
            "step_us": m.step_us,
            "gpu_busy_us": m.gpu_busy_us,
            "cpu_launch_us": m.cpu_launch_us,
            "kernels": self.kernels,
            "launches": self.launches,
            "utilisation": m.utilisation,
            "bound_by": m.bound_by,
            "bytes_saved": self.bytes_saved,
            "kind": ESTIMATE,
        }


# -- what the trace says about its own eager launches ---------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Eager:
    """Per GPU event of an eager step: its launch call's end, host time and the stream's habits."""

    call_end: np.ndarray
    host_us: np.ndarray
    latency_us: float  # launch call end -> kernel start, when the GPU was waiting (median)
    queued_gap_us: float  # end of one kernel -> start of the next already-queued one (median)
    prev_end: np.ndarray  # end of the GPU event before it on its stream (-inf: the first)
    waited: np.ndarray  # its launch arrived when its stream was idle: the host set its start


def eager_habits(step: TraceStep) -> _Eager:
    tl = step.timeline
    known = tl.launched_by >= 0  # a GPU event whose launch call the trace lacks tells nothing of either
    call_end = np.where(known, tl.gpu_start - np.nan_to_num(step.launch_delay_us), tl.gpu_start)
    prev_end = np.full(len(tl.gpu_start), -np.inf)
    for s in tl.streams:
        rows = np.flatnonzero(tl.gpu_stream == s)
        prev_end[rows[1:]] = tl.gpu_end[rows[:-1]]
    waited = known & (call_end > prev_end)  # the GPU was idle when this launch arrived
    latency = step.launch_delay_us[waited]
    queued = known & ~waited & np.isfinite(prev_end)
    gap = (tl.gpu_start - prev_end)[queued]
    return _Eager(
        call_end=call_end,
        host_us=step.host_per_launch_us,
        latency_us=float(np.median(latency)) if len(latency) else 0.0,
        queued_gap_us=float(np.clip(np.median(gap), 0.0, None)) if len(gap) else 0.0,
        prev_end=prev_end,
        waited=waited,
    )


def _by_stream_starts(ready, dur, gap, streams) -> np.ndarray:
    """The one recurrence, applied to each stream's kernels in their order."""
    start = np.zeros(len(dur))
    for s in np.unique(streams):
        rows = np.flatnonzero(streams == s)
        g = gap[rows] if np.ndim(gap) else gap
        start[rows] = schedule_starts(ready[rows], dur[rows], g)
    return start


# -- fusion ------------------------------------------------------------------------------------------------------
_DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i64": 8, "i32": 4, "bool": 1}


# Ops whose output is smaller than their inputs by dimensions record_shapes does not give (a reduction's): unknown.
_REDUCTIONS = {
    f"aten::{op}"
    for op in "mean sum amax amin max min norm var std prod argmax argmin logsumexp all any linalg_vector_norm".split()
}


def _output(signature: str) -> tuple[tuple[int, ...], str] | None:
    """(shape, dtype) an op writes, from its inputs: an in-place op's destination, else their broadcast (None for a
    reduction, whose kept dimensions the trace does not record)."""
    name, inputs = op_inputs(signature)
    tensors = [t for t in inputs if t]
    if not tensors or name in _REDUCTIONS:
        return None
    if name.endswith("_"):
        return inputs[0]
    try:
        shape = tuple(int(d) for d in np.broadcast_shapes(*(t[0] for t in tensors)))
    except ValueError:
        return None
    return shape, max(tensors, key=lambda t: math.prod(t[0]))[1]


def _reads(signature: str) -> list[tuple[tuple[int, ...], str]]:
    """The tensors an op reads: its inputs, less an in-place op's destination; none for a copy within one dtype,
    which materialises a view of another tensor (a cast, across dtypes, reads the op before it)."""
    name, inputs = op_inputs(signature)
    if name == "aten::copy_" and len(inputs) > 1 and inputs[0] and inputs[1] and inputs[0][1] == inputs[1][1]:
        return []
    return [t for t in (inputs[1:] if name.endswith("_") else inputs) if t]


def fused_group(first: int, ops: tuple[str, ...]) -> FusedGroup:
    """A group of kernels, by their ops' signatures, and the intermediates fusing them keeps on chip."""
    kept = []
    for i, op in enumerate(ops[:-1]):
        out = _output(op) if op else None
        if out is None or out[1] not in _DTYPE_BYTES and not out[1].startswith("c10::Float8"):
            continue
        if any(read[0] == out[0] for later in ops[i + 1 :] if later for read in _reads(later)):
            size = _DTYPE_BYTES.get(out[1], 1)
            kept.append((op_inputs(op)[0], out[0], out[1], size * math.prod(out[0])))
    return FusedGroup(first, ops, tuple(kept))


def _fusion_plan(step: TraceStep) -> tuple[np.ndarray, np.ndarray, list[FoldedKernel], int | None, list]:
    """(keep mask, new durations, what goes, bytes saved, the fused groups) for the step's GPU events."""
    tl = step.timeline
    names = tl.gpu_names
    fold = np.array([foldable(n) for n in names], bool) & (tl.gpu_kinds == "kernel")
    keep = np.ones(len(names), bool)
    dur = tl.gpu_dur.copy()
    gone: dict[str, list] = {}
    signatures = step.op_signatures or ("",) * len(names)
    shapes_known = any(signatures[i] for i in np.flatnonzero(fold))
    groups = []
    for s in tl.streams:
        rows = np.flatnonzero(tl.gpu_stream == s)
        run: list[int] = []
        for i in [*rows.tolist(), None]:
            if i is not None and fold[i]:
                run.append(i)
                continue
            if len(run) > 1:
                longest = max(run, key=lambda k: dur[k])
                for k in run:
                    if k == longest:
                        continue
                    keep[k] = False
                    entry = gone.setdefault(short_kernel_name(names[k]), [0, 0.0, 0.0])
                    entry[0] += 1
                    entry[1] += float(tl.gpu_dur[k])
                    entry[2] += float(step.host_per_launch_us[k])
                groups.append(fused_group(run[0], tuple(signatures[k] for k in run)))
            run = []
    folded = [
        FoldedKernel(name=n, count=c, gpu_us=g, host_us=h)
        for n, (c, g, h) in sorted(gone.items(), key=lambda kv: -kv[1][1])
    ]
    groups.sort(key=lambda g: g.first)
    saved = sum(g.bytes_saved for g in groups) if shapes_known else None
    return keep, dur, folded, saved, groups


def fusion_whatif(step: TraceStep, plan=None) -> WhatIf:
    """The step with the foldable kernels folded into their runs, launched eagerly."""
    tl = step.timeline
    keep, dur, folded, saved, groups = plan or _fusion_plan(step)
    habits = eager_habits(step)
    owner = tl.launched_by
    known = owner >= 0  # -1: the trace lacks the event's launch call
    kept_calls = np.unique(owner[keep & known])
    dropped_calls = np.setdiff1d(np.unique(owner[known]), kept_calls)
    # Host: every remaining launch keeps its host time; the time of the launches that go is taken out.
    cpu_dur = tl.cpu_dur.copy()
    cpu_dur[dropped_calls] = 0.0
    cpu_start = np.zeros(len(cpu_dur))
    for th in tl.threads:
        rows = np.flatnonzero(tl.cpu_thread == th)
        removed = np.cumsum(np.where(np.isin(rows, dropped_calls), tl.cpu_dur[rows], 0.0))
        shift = np.concatenate(([0.0], removed[:-1]))
        cpu_start[rows] = tl.cpu_start[rows] - shift
    # A kernel starts after its launch call has begun, however early the trace's habits say; one with no
    # launch call in the trace keeps its traced start.
    launcher = np.maximum(owner, 0)
    ready = np.maximum((cpu_start + cpu_dur)[launcher] + habits.latency_us, cpu_start[launcher])
    ready = np.where(known, ready, tl.gpu_start)
    rows = np.flatnonzero(keep)
    start = _by_stream_starts(ready[rows], dur[rows], habits.queued_gap_us, tl.gpu_stream[rows])
    cpu_rows = kept_calls
    remap = np.full(len(cpu_dur), -1, np.int64)
    remap[cpu_rows] = np.arange(len(cpu_rows))
    timeline = Timeline(
        cpu_start=cpu_start[cpu_rows],
        cpu_dur=cpu_dur[cpu_rows],
        cpu_names=tuple(tl.cpu_names[i] for i in cpu_rows),
        gpu_start=start,
        gpu_dur=dur[rows],
        gpu_names=tuple(tl.gpu_names[i] for i in rows),
        launched_by=np.where(known[rows], remap[launcher[rows]], -1),
        source="simulated",
        label=f"{tl.label} · fusion ({ESTIMATE})",
        gpu_stream=tl.gpu_stream[rows],
        cpu_thread=tl.cpu_thread[cpu_rows],
    )
    launches = step.launches - len(dropped_calls)
    notes = (
        f"With {FUSED.title}: {int((~keep).sum())} kernels folded into their neighbours; each run of elementwise "
        "and norm kernels becomes one kernel as long as its longest member.",
    )
    return WhatIf(
        FUSED.title,
        timeline,
        launches,
        notes=notes,
        folded=tuple(folded),
        bytes_saved=saved,
        groups=tuple(groups),
    )


# -- graphs ------------------------------------------------------------------------------------------------------
def _split_copies(tl: Timeline) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, outputs): host-to-device copies before the first kernel, device-to-host copies after the last."""
    names = tl.gpu_names
    kernel_rows = np.flatnonzero(tl.gpu_kinds != "memcpy")
    if not len(kernel_rows):
        return np.zeros(len(names), bool), np.zeros(len(names), bool)
    first, last = tl.gpu_start[kernel_rows].min(), tl.gpu_end[kernel_rows].max()
    htod = np.array([n.startswith("Memcpy HtoD") for n in names], bool)
    dtoh = np.array([n.startswith("Memcpy DtoH") for n in names], bool)
    return htod & (tl.gpu_end <= first + 1e-6), dtoh & (tl.gpu_start >= last - 1e-6)


@dataclass(frozen=True, eq=False)
class _ReplayHost:
    """The host lane of a replayed step, and where the trace's launch calls went on it."""

    start: np.ndarray
    dur: np.ndarray
    names: tuple[str, ...]
    graph_at: int  # the graph launch's index on the lane
    call_index: dict  # a kept launch call of the trace -> its index on the lane
    replay: GraphReplayCost  # the replay's cost with this step's own input copies
    input_calls: int


def _replay_host(step: TraceStep, cost: GraphReplayCost, inputs, outputs, n_nodes: int) -> _ReplayHost:
    """The input copies' launches as the trace measured them, the graph launch, then the output copies."""
    tl, owner = step.timeline, step.timeline.launched_by
    input_calls = np.unique(owner[inputs])
    output_calls = np.unique(owner[outputs])
    copy_host = float(tl.cpu_dur[input_calls].sum())
    replay = replace(cost, input_copy_us=copy_host)  # this step's own copies, as the trace measured them
    cpu_start = list(np.cumsum(np.concatenate(([0.0], tl.cpu_dur[input_calls])))[:-1])
    cpu_dur = list(tl.cpu_dur[input_calls])
    cpu_names = [tl.cpu_names[i] for i in input_calls]
    graph_at = len(cpu_start)
    cpu_start.append(copy_host)
    cpu_dur.append(float(replay.call_us(n_nodes)))
    cpu_names.append(f"cudaGraphLaunch ({n_nodes} nodes, {ESTIMATE})")
    after = float(replay.host_us(n_nodes))
    for i in output_calls:
        # A copy back to pageable host memory returns only once it is done: its host time in the trace
        # includes waiting for the GPU, which the replayed step's own schedule replaces.
        waited = float(np.clip(-step.launch_delay_us[owner == i], 0.0, None).max(initial=0.0))
        host = max(float(tl.cpu_dur[i]) - waited, 0.0)
        cpu_start.append(after)
        cpu_dur.append(host)
        cpu_names.append(tl.cpu_names[i])
        after += host
    call_index = {int(c): k for k, c in enumerate(input_calls)}
    call_index.update({int(c): graph_at + 1 + k for k, c in enumerate(output_calls)})
    return _ReplayHost(
        np.array(cpu_start),
        np.array(cpu_dur),
        tuple(cpu_names),
        graph_at,
        call_index,
        replay,
        len(input_calls),
    )


def graphs_whatif(
    step: TraceStep,
    cost: GraphReplayCost,
    keep: np.ndarray | None = None,
    dur: np.ndarray | None = None,
    name: str = GRAPH.title,
) -> WhatIf:
    """The step captured once and replayed: input copies, one graph launch, the kernels back to back."""
    tl = step.timeline
    keep = np.ones(len(tl.gpu_start), bool) if keep is None else keep
    dur = tl.gpu_dur if dur is None else dur
    owner = tl.launched_by
    inputs, outputs = _split_copies(tl)
    # A copy whose launch call the trace lacks has no host time to keep: it is replayed with the rest.
    inputs, outputs = inputs & (owner >= 0), outputs & (owner >= 0)
    nodes = keep & ~inputs & ~outputs
    n_nodes = int(nodes.sum())
    host = _replay_host(step, cost, inputs, outputs, n_nodes)
    rows_in, rows_nodes, rows_out = np.flatnonzero(inputs), np.flatnonzero(nodes), np.flatnonzero(outputs)
    launched_by = np.concatenate(
        (
            [host.call_index[int(owner[r])] for r in rows_in],
            np.full(len(rows_nodes), host.graph_at),
            [host.call_index[int(owner[r])] for r in rows_out],
        )
    ).astype(np.int64)
    submitted = (host.start + host.dur)[launched_by]
    in_start = _by_stream_starts(submitted[: len(rows_in)], dur[rows_in], 0.0, tl.gpu_stream[rows_in])
    # Each replayed node reaches the GPU as the graph launch submits it, after the input copies.
    ready = host.replay.ready_us(n_nodes)
    if len(rows_in):
        ready = np.maximum(ready, float((in_start + dur[rows_in]).max()))
    node_start = _by_stream_starts(ready, dur[rows_nodes], cost.node_gap_us, tl.gpu_stream[rows_nodes])
    node_start = np.maximum(node_start, 0.0)
    last = float((node_start + dur[rows_nodes]).max()) if n_nodes else 0.0
    out_ready = np.maximum(submitted[len(rows_in) + n_nodes :], last)
    out_start = _by_stream_starts(out_ready, dur[rows_out], 0.0, tl.gpu_stream[rows_out])
    rows = np.concatenate((rows_in, rows_nodes, rows_out))
    timeline = Timeline(
        cpu_start=host.start,
        cpu_dur=host.dur,
        cpu_names=host.names,
        gpu_start=np.concatenate((in_start, node_start, out_start)),
        gpu_dur=dur[rows],
        gpu_names=tuple(tl.gpu_names[i] for i in rows),
        launched_by=launched_by,
        source="simulated",
        label=f"{tl.label} · {name} ({ESTIMATE})",
        gpu_stream=tl.gpu_stream[rows],
    )
    back = len(host.start) - host.input_calls - 1
    notes = (
        f"With {name}: {len(host.start)} launch calls replace {step.launches} ({_copies(host.input_calls)} in, one "
        f"graph launch of {n_nodes} nodes{f', {_copies(back)} back' if back else ''}); replay cost: "
        f"{cost.launch_us:.1f} µs + {cost.per_node_host_us:.2f} µs per node on the host, {cost.node_gap_us:.2f} µs "
        "between nodes on the GPU.",
    )
    return WhatIf(name, timeline, len(host.start), notes=notes)


def _copies(n: int) -> str:
    return f"{n} cop{'y' if n == 1 else 'ies'}"


def whatifs(step: TraceStep, cost: GraphReplayCost) -> dict[str, WhatIf]:
    """The step in the optimised modes, named by their titles: 'fusion', and for a step that replays no
    graph yet, 'graphs' and 'fusion + graphs'."""
    plan = _fusion_plan(step)
    out = {FUSED.title: fusion_whatif(step, plan)}
    if step.graph_launches == 0:
        out[GRAPH.title] = graphs_whatif(step, cost)
        keep, dur, folded, saved, groups = plan
        both = graphs_whatif(step, cost, keep=keep, dur=dur, name=FUSED_GRAPH.title)
        out[FUSED_GRAPH.title] = WhatIf(
            both.name,
            both.timeline,
            both.launches,
            notes=both.notes,
            folded=tuple(folded),
            bytes_saved=saved,
            groups=tuple(groups),
        )
    return out


def default_replay_cost(host_index: float | None = None) -> GraphReplayCost:
    """The replay cost calibrated to the probe's recorded H200 run (the figures the what-ifs use by default); with
    `host_index` (µs a torch launch), on that host: a trace from a quick host is not priced at a slow run's."""
    from sim.calibration import recorded_graph_cost

    return recorded_graph_cost(host_index)
