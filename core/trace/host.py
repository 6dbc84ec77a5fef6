"""The host lane as the profiler recorded it, row by row: for taking the profiler's own cost out of a step.

The profiler adds host time for every event it records (an op, a Python call, a runtime call, ...). Each row of
a step's host lane -- a CPU interval, or a synchronisation between them -- counts the events recorded on its
thread in its span, by kind (`EVENT_KINDS`), with the line lookups of its Python calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.trace.calls import LaunchIndex
from core.trace.read import (
    EVENT_KINDS,
    KIND_DRIVER,
    KIND_OP,
    KIND_PYTHON,
    KIND_RUNTIME,
    KIND_SHAPES,
    KIND_TRITON,
    Trace,
)


@dataclass(frozen=True, eq=False)
class _HostIndex:
    """Every event the profiler recorded on the host (ops, ranges, Python calls, API calls), sorted by thread
    and start, with running counts by kind: a row of the host lane counts its events by two look-ups."""

    ts: np.ndarray
    bounds: dict  # thread -> (first, last + 1) row of its events
    counts: np.ndarray  # (events + 1, len(EVENT_KINDS)): events before each row, by kind
    line_us: np.ndarray  # (events + 1,): `_python_line_us` before each row


def _host_index(trace: Trace) -> _HostIndex:
    cached = trace.__dict__.get("_host_index")
    if cached is not None:
        return cached
    driver = np.array([n.startswith("cu") and not n.startswith("cuda") for n in trace.names], bool)
    call_kind = np.where(driver[trace.call_name], KIND_DRIVER, KIND_RUNTIME) if len(trace.call_name) else []
    ts = np.concatenate((trace.host_ts, trace.call_ts))
    thread = np.concatenate((trace.host_thread, trace.call_thread))
    kind = np.concatenate((trace.host_kind, call_kind)).astype(np.int8)
    line = np.concatenate((trace.host_line_us, np.zeros(len(trace.call_ts))))
    order = np.lexsort((ts, thread))
    ts, thread, kind, line = ts[order], thread[order], kind[order], line[order]
    one_hot = np.zeros((len(ts) + 1, len(EVENT_KINDS)), np.int32)
    for column, code in enumerate((KIND_OP, KIND_TRITON, KIND_RUNTIME, KIND_DRIVER, KIND_PYTHON)):
        one_hot[1:, column] = (kind & ~KIND_SHAPES) == code
    one_hot[1:, EVENT_KINDS.index("shapes")] = (kind & KIND_SHAPES) != 0
    threads, first = np.unique(thread, return_index=True)
    last = np.concatenate((first[1:], [len(ts)]))
    out = _HostIndex(
        ts=ts,
        bounds={int(t): (int(a), int(b)) for t, a, b in zip(threads, first, last)},
        counts=np.cumsum(one_hot, axis=0, dtype=np.int32),
        line_us=np.concatenate(([0.0], np.cumsum(line))),
    )
    object.__setattr__(trace, "_host_index", out)
    return out


@dataclass(frozen=True, eq=False)
class HostRecord:
    """The step's host lane as the profiler recorded it, row by row, for taking the profiler's own cost out of it
    (`sim.trace.untraced`).

    One row per CPU interval of the step's timeline and per host synchronisation between them, each thread's
    rows in time order and tiling its lane: a row's host time runs from the previous row's end on its thread
    (`start`; the step's start for the thread that owns the step, the call's own start for another thread's
    first row) through its call (`call_start` to `end`). Times are µs from the step's start, rows sorted by end."""

    interval: np.ndarray  # the row's CPU interval (index into the timeline's CPU lane); -1: a synchronisation
    thread: np.ndarray  # its host thread (the timeline's cpu_thread)
    start: np.ndarray
    call_start: np.ndarray
    end: np.ndarray
    counts: np.ndarray  # (rows, len(EVENT_KINDS)): the events recorded on its thread in [start, end), by kind
    line_us: np.ndarray  # per row: `_python_line_us` of its Python calls, summed
    # The step's kernel launch calls' median traced duration (NaN: none) and their number: how fast the host
    # ran while traced.
    launch_call_us: float = float("nan")
    launch_calls: int = 0


def count_events(trace: Trace, thread: int, start, end) -> tuple[np.ndarray, np.ndarray]:
    """The events the profiler recorded on `thread` (an index into `trace.threads`) in each [start, end) (trace µs):
    their counts by kind (rows × EVENT_KINDS) and their line lookups (µs, `_python_line_us`) per row."""
    host = _host_index(trace)
    start, end = np.atleast_1d(np.asarray(start, np.float64)), np.atleast_1d(np.asarray(end, np.float64))
    if thread not in host.bounds:
        return np.zeros((len(start), len(EVENT_KINDS)), np.int64), np.zeros(len(start))
    a, b = host.bounds[thread]
    lo = a + np.searchsorted(host.ts[a:b], start, side="left")
    hi = a + np.searchsorted(host.ts[a:b], end, side="left")
    return (host.counts[hi] - host.counts[lo]).astype(np.int64), host.line_us[hi] - host.line_us[lo]


def host_record(
    trace: Trace,
    idx: LaunchIndex,
    t0,
    cpu_start,
    cpu_end,
    cpu_thread,
    call_start,
    owner_thread,
    launch_call_us,
) -> HostRecord:
    """The rows of `HostRecord` for one step's CPU lane (`call_start`: each interval's launch call's start;
    `launch_call_us`: the step's kernel launch calls' traced durations)."""
    sync_start = trace.call_ts[idx.sync] - t0
    sync_end = sync_start + trace.call_dur[idx.sync]
    sync_thread = trace.call_thread[idx.sync]
    columns = {k: [] for k in ("interval", "thread", "start", "call_start", "end")}
    for th in np.unique(cpu_thread).tolist():
        rows = np.flatnonzero(cpu_thread == th)
        last = float(cpu_end[rows].max())
        mine = np.flatnonzero((sync_thread == th) & (sync_start >= 0) & (sync_end <= last))
        interval = np.concatenate((rows, np.full(len(mine), -1)))
        begin = np.concatenate((call_start[rows], sync_start[mine]))
        end = np.concatenate((cpu_end[rows], sync_end[mine]))
        order = np.lexsort((interval < 0, begin))
        interval, begin, end = interval[order], begin[order], end[order]
        # A synchronisation inside a launch call (a blocking copy's own wait) is part of that call's row.
        inside = np.zeros(len(end), bool)
        inside[1:] = (interval[1:] < 0) & (begin[1:] < np.maximum.accumulate(end)[:-1])
        interval, begin, end = interval[~inside], begin[~inside], end[~inside]
        start = np.concatenate(([0.0 if th == owner_thread else float(begin[0])], end[:-1]))
        start[interval >= 0] = cpu_start[interval[interval >= 0]]  # the lane's own tiling, as drawn
        for key, value in zip(columns, (interval, np.full(len(end), th), start, begin, end)):
            columns[key].append(value)
    interval, thread, start, begin, end = (np.concatenate(columns[k]) for k in columns)
    counts = np.zeros((len(end), len(EVENT_KINDS)), np.int64)
    line = np.zeros(len(end))
    for th in np.unique(thread).tolist():
        rows = np.flatnonzero(thread == th)
        counts[rows], line[rows] = count_events(trace, th, start[rows] + t0, end[rows] + t0)
    order = np.argsort(end, kind="stable")
    return HostRecord(
        interval=interval[order],
        thread=thread[order],
        start=start[order],
        call_start=begin[order],
        end=end[order],
        counts=counts[order],
        line_us=line[order],
        launch_call_us=float(np.median(launch_call_us)) if len(launch_call_us) else float("nan"),
        launch_calls=len(launch_call_us),
    )
