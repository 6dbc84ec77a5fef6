"""Where a trace's decode steps are: the launch calls of each, and its time 0.

By the first rule that applies: the CPU range the caller names (`step_range`); the probe's `decode_step` ranges;
the profiler's `ProfilerStep#N` ranges; one step per `cudaGraphLaunch` group; host synchronisation between
steps; else the whole trace. The rule used is reported with the steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.trace.calls import LaunchIndex, launch_index
from core.trace.messages import TraceError
from core.trace.read import PROFILER_STEP, Trace

STEP_ANNOTATION = "decode_step"  # the probe's record_function around one step
MAX_STEPS = 10_000

RULES = {
    "range": "the CPU range named {name!r}",
    "profiler": "the profiler's ProfilerStep#N ranges",
    "graph": "one step per cudaGraphLaunch",
    "sync": "host synchronisation between steps",
    "whole": "the whole trace as one step",
}


@dataclass(frozen=True, slots=True)
class StepWindow:
    """One step: which launch calls belong to it, and where its time 0 is."""

    index: (
        int  # ProfilerStep's N, else 1, 2, 3, ... (its place in the file: 'Step 1 of 3' however it is found)
    )
    calls: np.ndarray  # indices into the trace's call columns, launches only, sorted by start
    t0: float  # the step's time 0 (trace µs)
    range_thread: int = -1  # the thread owning the step's range (-1: none)


def find_steps(trace: Trace, step_range: str | None = None) -> tuple[str, list[StepWindow]]:
    """(the rule used, the steps). `step_range` names a CPU range that marks each step."""
    launches = launch_index(trace)
    if not len(launches.launch):
        raise TraceError(f"{trace.name} has no kernel launch calls")
    if step_range:
        if not isinstance(step_range, str) or len(step_range) > 200:
            raise TraceError("the step range must be a name of at most 200 characters")
        windows = _range_windows(trace, launches, lambda n: n == step_range, numbered=False)
        if not windows:
            raise TraceError(f"{trace.name} has no CPU range named {step_range!r} with launches in it")
        return RULES["range"].format(name=step_range), windows
    # The probe's own range before the profiler's: inside ProfilerStep#N it marks the step itself (time 0 at its
    # start, as the probe's run reads it), so a probe trace reads the same however it arrives.
    windows = _range_windows(trace, launches, lambda n: n == STEP_ANNOTATION, numbered=False)
    if windows:
        return RULES["range"].format(name=STEP_ANNOTATION), windows
    windows = _range_windows(trace, launches, PROFILER_STEP.match, numbered=True)
    if windows:
        return RULES["profiler"], windows
    if launches.is_graph.any():
        return RULES["graph"], _graph_windows(trace, launches)
    windows = _sync_windows(trace, launches)
    if len(windows) > 1:
        return RULES["sync"], windows
    calls = launches.launch
    return RULES["whole"], [StepWindow(index=1, calls=calls, t0=float(trace.call_ts[calls[0]]))]


def _range_windows(trace: Trace, launches: LaunchIndex, match, numbered: bool) -> list[StepWindow]:
    hits = [i for i in range(len(trace.range_ts)) if match(trace.name_of(trace.range_name[i]))]
    out, last_end = [], -np.inf
    starts = trace.call_ts[launches.launch]
    for i in hits:
        t0, t1 = float(trace.range_ts[i]), float(trace.range_ts[i] + trace.range_dur[i])
        if t0 < last_end:  # nested inside the previous range of the same name: the outer one stands
            continue
        last_end = t1
        lo, hi = np.searchsorted(starts, [t0, t1], side="left")
        calls = launches.launch[lo:hi]
        if not len(calls):
            continue
        number = PROFILER_STEP.match(trace.name_of(trace.range_name[i])) if numbered else None
        index = int(number.group(1)) if number else len(out) + 1
        out.append(StepWindow(index=index, calls=calls, t0=t0, range_thread=int(trace.range_thread[i])))
        if len(out) > MAX_STEPS:
            raise TraceError(f"the trace has more than {MAX_STEPS:,} steps: profile fewer")
    return out


def _split(trace: Trace, calls: np.ndarray, cut_after: list[int]) -> list[StepWindow]:
    """Steps made by cutting the sorted launch list after the given positions."""
    bounds = [0] + [c + 1 for c in cut_after] + [len(calls)]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if hi > lo:
            part = calls[lo:hi]
            out.append(StepWindow(index=len(out) + 1, calls=part, t0=float(trace.call_ts[part[0]])))
    if len(out) > MAX_STEPS:
        raise TraceError(f"the trace has more than {MAX_STEPS:,} steps: profile fewer")
    return out


def _syncs_between(trace: Trace, launches: LaunchIndex, t0: float, t1: float) -> np.ndarray:
    sync_ts = trace.call_ts[launches.sync]
    lo, hi = np.searchsorted(sync_ts, [t0, t1], side="left")
    return launches.sync[lo:hi]


def _graph_windows(trace: Trace, launches: LaunchIndex) -> list[StepWindow]:
    """One step per graph launch: it takes the launches since the previous step ended, where a step
    ends at the last synchronisation before the next graph launch, or else just before the copies
    that feed the next graph launch (its inputs), or else right before it."""
    calls, graph_pos, copies = launches.launch, np.flatnonzero(launches.is_graph), launches.is_copy
    starts, ends = trace.call_ts[calls], trace.call_ts[calls] + trace.call_dur[calls]
    cut_after = []
    # Before the first graph launch: warm-up and set-up work up to the last synchronisation is not a step.
    first = 0
    syncs = _syncs_between(trace, launches, -np.inf, starts[graph_pos[0]])
    if len(syncs):
        first = int(np.searchsorted(starts, trace.call_ts[syncs[-1]], side="right"))
        if first > 0:
            cut_after.append(first - 1)
    for a, b in zip(graph_pos[:-1], graph_pos[1:]):
        syncs = _syncs_between(trace, launches, ends[a], starts[b])
        if len(syncs):
            cut = int(np.searchsorted(starts, trace.call_ts[syncs[-1]], side="right")) - 1
        else:
            cut = b - 1
            while cut > a and copies[cut]:
                cut -= 1
        cut_after.append(max(cut, a))
    last = graph_pos[-1]
    syncs = _syncs_between(trace, launches, ends[last], np.inf)
    if len(syncs):
        tail = int(np.searchsorted(starts, trace.call_ts[syncs[0]], side="right")) - 1
        if tail < len(calls) - 1:
            cut_after.append(max(tail, last))
    windows = _split(trace, calls, sorted(set(cut_after)))
    # Keep only steps that replay a graph: the pieces cut off before the first and after the last are not steps.
    graph_calls = set(calls[graph_pos].tolist())
    kept = [w for w in windows if graph_calls.intersection(w.calls.tolist())]
    return [StepWindow(index=i, calls=w.calls, t0=w.t0) for i, w in enumerate(kept)]


def _sync_windows(trace: Trace, launches: LaunchIndex) -> list[StepWindow]:
    calls = launches.launch
    if not len(launches.sync):
        return []
    starts = trace.call_ts[calls]
    cuts = np.searchsorted(starts, trace.call_ts[launches.sync], side="right") - 1
    cuts = sorted({int(c) for c in cuts if 0 <= c < len(calls) - 1})
    return _split(trace, calls, cuts)
