"""One step's lanes, read off the trace: a `core.timeline.Timeline` and its readouts (`TraceStep`).

Time 0 is the step range's start, or where there is no range, the step's first launch call. A CPU interval is
one launch call plus the host time before it on its thread since the previous launch (or the step's start, or
the end of a synchronisation): the host's whole cost of building that launch -- Python, the dispatcher, argument
packing and the call itself. Where a step replays a graph, the copies issued right before the graph launch (its
inputs going into the static buffers) merge with it into one interval, as the simulator draws a replay. Each
CUDA stream is a GPU lane of its own.

Readouts: kernels, launches, graph launches, streams, step time (time 0 to the end of the last GPU event, or of
the last launch call if later), GPU busy (the union over all streams), utilisation, bound by, CPU launch time,
GPU time by kind, and the launch delay: how long after its launch call ended each GPU event started.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from core.timeline import GPU_KINDS, StepMetrics, Timeline
from core.trace.calls import LaunchIndex, launch_index
from core.trace.host import HostRecord, host_record
from core.trace.messages import TraceError, dropped_notes
from core.trace.names import short_kernel_name
from core.trace.read import Trace
from core.trace.steps import StepWindow


@dataclass(frozen=True, eq=False)
class TraceStep:
    """One step read off a trace: its lanes and what the page reports about it."""

    index: int
    timeline: Timeline
    launches: int  # launch calls (before a graph's input copies merge with its launch)
    graph_launches: int
    launch_delay_us: np.ndarray  # per GPU event: its start minus the end of its launch call (NaN: no call)
    host_per_launch_us: (
        np.ndarray
    )  # per GPU event: the host time of its launch call's CPU interval (0: no call)
    gpu_bytes: np.ndarray = field(repr=False, default=None)  # per GPU event: memcpy / memset bytes
    op_bytes: np.ndarray = field(
        repr=False, default=None
    )  # per GPU event: its op's largest tensor input (0: unknown)
    notes: tuple[str, ...] = ()  # what the trace lacks for this step (dropped records), one sentence each
    host: HostRecord | None = field(repr=False, default=None)  # what the profiler recorded on its host lane
    # per GPU event: its op's `op_signature` ('' unknown), where the trace recorded shapes
    op_signatures: tuple[str, ...] | None = field(repr=False, default=None)
    # per GPU event: stamped before its launch call began (clocks that disagree), so its launch delay is unknown
    stamped_early: np.ndarray | None = field(repr=False, default=None)

    @property
    def kernels(self) -> int:
        return len(self.timeline.gpu_start)

    @property
    def kernel_names(self) -> tuple[str, ...]:
        return self.timeline.gpu_names

    @property
    def kernels_per_step(self) -> int:  # the probe's name for it
        return self.kernels

    @property
    def metrics(self) -> StepMetrics:
        cached = self.__dict__.get("_metrics")
        if cached is None:
            cached = self.timeline.metrics()
            object.__setattr__(self, "_metrics", cached)
        return cached

    @property
    def gpu_streams(self) -> int:
        return len(self.timeline.streams)

    def gpu_time_by_kind(self) -> dict[str, float]:
        """Summed GPU time of each kind of work (kernels, communication, copies, memsets), µs."""
        kinds = self.timeline.gpu_kinds
        return {k: float(self.timeline.gpu_dur[kinds == k].sum()) for k in GPU_KINDS}

    def launch_delay(self) -> dict[str, float | None]:
        """Median, p90 and largest launch delay (µs) over the step's GPU events with a launch call and a time
        stamp after it; None where no event has both (every kernel stamped before its call: clocks disagree)."""
        mine = np.isfinite(self.launch_delay_us)  # events with a launch call
        if self.stamped_early is not None:
            mine &= ~self.stamped_early
        d = self.launch_delay_us[mine]
        if not len(d):
            return {"median_us": None, "p90_us": None, "max_us": None}
        med, p90 = np.percentile(d, [50, 90])
        return {"median_us": float(med), "p90_us": float(p90), "max_us": float(d.max())}

    def summary(self) -> dict:
        """The step's readouts as plain numbers (the CLI's JSON, the page's table)."""
        m = self.metrics
        return {
            "index": self.index,
            "step_us": m.step_us,
            "gpu_busy_us": m.gpu_busy_us,
            "kernels": self.kernels,
            "launches": self.launches,
            "graph_launches": self.graph_launches,
            "gpu_streams": self.gpu_streams,
            "utilisation": m.utilisation,
            "bound_by": m.bound_by,
            "cpu_launch_us": m.cpu_launch_us,
            "idle_us": m.idle_us,
            "gpu_us_by_kind": self.gpu_time_by_kind(),
            "launch_delay": self.launch_delay(),
        }


def step_timeline(
    trace: Trace, window: StepWindow, label: str = "", merge_graph_inputs: bool = True
) -> TraceStep:
    """The lanes of one step, and its counts.

    A trace with dropped records (the profiler drops them under load) still makes consistent lanes: a
    launch whose GPU events are missing stays on the CPU lane; a GPU event whose launch call is missing
    joins the step it ran in with `launched_by` -1; a GPU event stamped before the call that launched
    it (clocks that disagree, an edited file) is drawn at that call's start. `notes` counts each."""
    idx = launch_index(trace)
    calls = window.calls
    call_start = trace.call_ts[calls] - window.t0
    call_end = call_start + trace.call_dur[calls]
    gpu_rows, owner = _gpu_rows(trace, idx, window, call_end)
    known, launcher = owner >= 0, np.maximum(owner, 0)
    names = _launch_labels(trace, calls, gpu_rows[known], owner[known])
    cpu = _cpu_lane(trace, idx, window, call_start, call_end, names, merge_graph_inputs)
    gpu_start = trace.gpu_ts[gpu_rows] - window.t0
    early = known & (gpu_start < call_start[launcher])
    gpu_start = np.where(known, np.maximum(gpu_start, call_start[launcher]), np.maximum(gpu_start, 0.0))
    timeline = Timeline(
        cpu_start=cpu.start,
        cpu_dur=cpu.end - cpu.start,
        cpu_names=cpu.names,
        gpu_start=gpu_start,
        gpu_dur=trace.gpu_dur[gpu_rows],
        gpu_names=tuple(trace.name_of(n) for n in trace.gpu_name[gpu_rows]),
        launched_by=np.where(known, cpu.interval_of_call[launcher], -1),
        source="measured",
        label=label,
        gpu_stream=trace.gpu_stream[gpu_rows],
        cpu_thread=cpu.thread,
    )
    return TraceStep(
        index=window.index,
        timeline=timeline,
        launches=len(calls),
        graph_launches=int(idx.is_graph[idx.position[calls]].sum()),
        launch_delay_us=np.where(known, gpu_start - call_end[launcher], np.nan),
        stamped_early=early,
        host_per_launch_us=np.where(known, cpu.host_of_call[launcher], 0.0),
        gpu_bytes=trace.gpu_bytes[gpu_rows],
        op_bytes=trace.gpu_op_bytes[gpu_rows],
        op_signatures=tuple(
            trace.names[k] if k >= 0 else ""
            for k in (trace.gpu_op_signature[gpu_rows] if trace.gpu_op_signature is not None else ())
        )
        or None,
        notes=_notes(trace, calls, owner, early),
        host=cpu.host,
    )


def _gpu_rows(trace: Trace, idx: LaunchIndex, window: StepWindow, call_end) -> tuple[np.ndarray, np.ndarray]:
    """(the step's GPU event rows in time order, per row the launch that owns it: its index among the step's
    calls, -1 none): the events its launches own, and those no launch owns that started inside its span."""
    at = idx.position[window.calls]  # the step's calls are consecutive launches
    lo, hi = np.searchsorted(idx.owner_sorted, [at[0], at[-1] + 1], side="left")
    rows = idx.gpu_by_owner[lo:hi]
    owned = idx.owner_sorted[lo:hi] - at[0]
    t0 = window.t0
    # Unowned GPU events that started inside the step's span (its start to its last call or owned event).
    span_end = max(
        float(call_end.max()), float((trace.gpu_ts[rows] + trace.gpu_dur[rows]).max(initial=-np.inf) - t0)
    )
    o_lo, o_hi = np.searchsorted(trace.gpu_ts[idx.orphans], [t0, t0 + span_end], side="left")
    orphans = idx.orphans[o_lo:o_hi]
    if not len(rows) and not len(orphans):
        unusable = np.isin(trace.call_corr[window.calls], trace.unusable_corr).sum()
        raise TraceError(
            f"{trace.name}: no GPU events belong to step {window.index}'s launches "
            + (
                f"(the GPU events of {unusable:,} of them have an unusable time stamp or stream id)"
                if unusable
                else "(was CUDA profiled?)"
            )
        )
    rows = np.concatenate((rows, orphans))
    order = np.argsort(rows, kind="stable")  # GPU rows are sorted by start: row order is time order
    return rows[order], np.concatenate((owned, np.full(len(orphans), -1, np.int64)))[order]


def _launch_labels(trace: Trace, calls, owned_rows, owner) -> list[str]:
    """'cudaLaunchKernel: gemv' per launch call, after the first kernel it launched (the call's name alone where
    it launched none): one string per distinct pair, shared (a million launches, few names)."""
    first_kernel = {}
    for row, o in zip(owned_rows.tolist(), owner.tolist()):
        first_kernel.setdefault(o, int(trace.gpu_name[row]))
    labels: dict[tuple, str] = {}
    out = []
    for i, api in enumerate(trace.call_name[calls].tolist()):
        pair = (api, first_kernel.get(i, -1))
        label = labels.get(pair)
        if label is None:
            label = labels[pair] = (
                # As the recorded runs name their launches, so a probe trace read now draws what its run drew.
                f"{trace.names[api]}: {short_kernel_name(trace.names[pair[1]], namespaces=False)}"
                if pair[1] >= 0
                else trace.names[api]
            )
        out.append(label)
    return out


@dataclass(frozen=True, eq=False)
class _CpuLane:
    """A step's CPU intervals, and what the GPU lane and the readouts need of them."""

    start: np.ndarray
    end: np.ndarray
    names: tuple[str, ...]
    thread: np.ndarray
    interval_of_call: np.ndarray  # per launch call: the interval it is part of
    host_of_call: np.ndarray  # per launch call: its own host time (its tile of the lane, before any merge)
    host: HostRecord


def _cpu_lane(
    trace: Trace, idx: LaunchIndex, window: StepWindow, call_start, call_end, names, merge
) -> _CpuLane:
    """One interval per launch call with the host time before it; where `merge`, a graph launch with the input
    copies right before it as one."""
    calls = window.calls
    at = idx.position[calls]
    thread = trace.call_thread[calls]
    tile_start = _host_intervals(trace, idx, window, call_start, call_end, thread)
    is_graph = idx.is_graph[at]
    interval_of_call = np.arange(len(calls))
    start, end, lane_thread = tile_start, call_end, thread
    if merge and is_graph.any():
        start, end, names, lane_thread, interval_of_call = _merge_graph_inputs(
            is_graph, idx.is_copy[at], tile_start, call_end, names, thread
        )
    last_call = np.zeros(len(start), np.int64)  # each interval ends with its last call
    np.maximum.at(last_call, interval_of_call, np.arange(len(calls)))
    owner_thread = window.range_thread if window.range_thread >= 0 else int(thread[0])
    kernel_calls = trace.call_dur[calls][idx.is_kernel_launch[at]]
    host = host_record(
        trace, idx, window.t0, start, end, lane_thread, call_start[last_call], owner_thread, kernel_calls
    )
    return _CpuLane(start, end, tuple(names), lane_thread, interval_of_call, call_end - tile_start, host)


def _notes(trace: Trace, calls, owner, early) -> tuple[str, ...]:
    """What the step lacks: its launch calls with no GPU event (unusable, or dropped), GPU events with no launch
    call, events stamped before their call."""
    known = owner >= 0
    has_event = np.zeros(len(calls), bool)
    has_event[owner[known]] = True
    unusable = np.isin(trace.call_corr[calls[~has_event]], trace.unusable_corr)
    return dropped_notes(int((~unusable).sum()), int((~known).sum()), int(early.sum()), int(unusable.sum()))


def _host_intervals(trace, idx, window, call_start, call_end, thread) -> np.ndarray:
    """Where each launch's host interval starts: the end of the previous launch call on its thread, or
    the step's start (for the thread that owns the step; another thread's first launch is its call
    alone), or the end of a synchronisation in between, whichever is latest."""
    tile_start = call_start.copy()
    sync_end = trace.call_ts[idx.sync] + trace.call_dur[idx.sync] - window.t0
    sync_thread = trace.call_thread[idx.sync]
    owner_thread = window.range_thread if window.range_thread >= 0 else int(thread[0])
    for th in np.unique(thread):
        rows = np.flatnonzero(thread == th)
        prev = np.concatenate(([0.0], call_end[rows[:-1]]))
        if th != owner_thread:
            prev[0] = call_start[rows[0]]
        th_sync = np.sort(sync_end[sync_thread == th])
        if len(th_sync):  # the latest synchronisation ending before each call starts
            k = np.searchsorted(th_sync, call_start[rows], side="right") - 1
            prev = np.maximum(prev, np.where(k >= 0, th_sync[np.maximum(k, 0)], -np.inf))
        tile_start[rows] = np.minimum(np.maximum(prev, 0.0), call_start[rows])
    return tile_start


def _merge_graph_inputs(is_graph, is_copy, start, end, names, thread):
    """Each graph launch and the copy launches right before it on its thread (the inputs going into the
    graph's static buffers) become one CPU interval, named like '2 input copies + cudaGraphLaunch'.

    Returns the merged lanes and, per original call, the index of the interval it ended up in.
    """
    group = np.arange(len(is_graph))
    for g in np.flatnonzero(is_graph):
        j = g - 1
        while j >= 0 and is_copy[j] and not is_graph[j] and thread[j] == thread[g] and group[j] == j:
            group[j] = g
            j -= 1
    heads, inverse = np.unique(group, return_inverse=True)
    new_start = np.minimum.reduceat(
        start[np.argsort(group, kind="stable")], np.searchsorted(np.sort(group), heads)
    )
    new_names = []
    for h in heads:
        n_copies = int((group == h).sum()) - 1
        if is_graph[h]:
            new_names.append(f"{n_copies} input copies + cudaGraphLaunch" if n_copies else "cudaGraphLaunch")
        else:
            new_names.append(names[h])
    return new_start, end[heads], new_names, thread[heads], inverse
