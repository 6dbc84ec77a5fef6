"""The step without the profiler: what a traced step takes when nothing records it.

torch.profiler spends host time on every event it records, so a traced host-bound step runs slower than the
same step untraced. Where the trace carries the step timed without the profiler (gpu_probe/recorder.py's block,
or the probe's own run for its traces), that figure is quoted and the lanes are this step with the profiler's
cost taken out of each host row, scaled to match it. Otherwise the step is estimated: each host row
(`core.trace.HostRecord`) less the profiler's fitted cost of the events recorded in it, the rest of its host
work as much faster as the profiler slows it (`sim.timing.ProfilerCost`), the kernels rescheduled by the one
recurrence. The what-ifs (`sim.trace.whatif`) start from this step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from core.timeline import Timeline
from core.trace import EVENT_KINDS, TraceReport, TraceStep
from core.trace.kernels import launch_costs
from sim.timing import PROFILER_COST, ProfilerCost, schedule_starts
from sim.trace.whatif import ESTIMATE, eager_habits

METADATA = "metadata"  # the recorder's measured step, carried by the trace
PROBE = "probe"  # the probe's own trace: its run's median step, timed without the profiler (ui.trace.tab)
SOURCES = {METADATA: "measured by the recorder", PROBE: "measured by the probe", ESTIMATE: "estimated"}
# A recorded median this far from the traced step was not measured on this loop (or not on this machine).
_ABSURD_ABOVE, _ABSURD_BELOW_BUSY = 3.0, 0.5


@dataclass(frozen=True, eq=False)
class Untraced:
    """The step as it runs without the profiler: the figure quoted, where it comes from, and its lanes."""

    step: TraceStep  # the step re-timed with the profiler's cost taken out of its host lane
    step_us: float  # the figure quoted: the recorder's median where the trace carries one, else step's
    source: str  # METADATA, PROBE or ESTIMATE
    profiler_us: float  # host time taken out of the step's host lane, all threads
    scale: float  # the multiple of the fitted costs the lanes were drawn with (1 for an estimate)
    notes: tuple[str, ...] = ()

    @property
    def source_label(self) -> str:
        return SOURCES[self.source]


@dataclass(frozen=True, eq=False)
class _Rows:
    """One step's host rows (core.trace.HostRecord) and GPU events, as the re-timing needs them."""

    waits: np.ndarray  # per row: it waits for GPU work (a synchronisation, a copy that returns when done)
    slowed: np.ndarray  # per row: its own host work is slowed by the profiler (all but a graph launch)
    blocking: np.ndarray  # per row: a launch call that returned only once its own copy was done
    awaited: np.ndarray  # per GPU event: the first wait row that waits for it (-1: none)
    pre: np.ndarray  # per row: traced host time before its call (a wait row) or in all (any other row)
    # per wait row: traced time from the end of the work it waited for (or its call's start, if later) to its end
    tail: np.ndarray
    anchor_row: np.ndarray  # per GPU event: the row its ready time moves with (-1: fixed)
    lat: np.ndarray  # per GPU event: its ready time after that row's anchor
    gap: np.ndarray  # per GPU event: the GPU's gap before it, after the event before it on its stream
    streams: list  # per stream: its GPU events in order


def _launch_rows(step: TraceStep) -> np.ndarray:
    """Per GPU event: the host row of the launch call that submitted it (-1: none in the trace)."""
    tl, host = step.timeline, step.host
    row_of = np.full(len(tl.cpu_start), -1, np.int64)
    row_of[host.interval[host.interval >= 0]] = np.flatnonzero(host.interval >= 0)
    owner = tl.launched_by
    return np.where(owner >= 0, row_of[np.maximum(owner, 0)], -1)


def _waits(step: TraceStep, launcher: np.ndarray):
    """(waits, blocking, awaited, tail) of `_Rows`: which host rows wait for GPU work, and for which."""
    tl, host = step.timeline, step.host
    n_rows, n_gpu = len(host.end), len(tl.gpu_start)
    gpu_end = tl.gpu_end
    # A launch call that returned after its own copies were done waited for them (a copy to pageable memory).
    own_end = np.full(n_rows, -np.inf)
    np.maximum.at(own_end, launcher[launcher >= 0], gpu_end[launcher >= 0])
    not_copy = np.zeros(n_rows, bool)
    np.logical_or.at(
        not_copy, launcher[launcher >= 0], ~np.isin(tl.gpu_kinds[launcher >= 0], ("memcpy", "memset"))
    )
    blocking = (host.interval >= 0) & np.isfinite(own_end) & ~not_copy & (host.end >= own_end)
    # A synchronisation waits for the GPU work launched before it started.
    sync = host.interval < 0
    awaited_end = np.where(blocking, own_end, -np.inf)
    awaited = np.full(n_gpu, -1, np.int64)
    known = launcher >= 0
    for r in np.flatnonzero(sync).tolist():
        before = known & (host.end[np.maximum(launcher, 0)] <= host.call_start[r])
        awaited_end[r] = gpu_end[before].max(initial=-np.inf)
    waits = np.isfinite(awaited_end)
    for r in np.flatnonzero(waits)[::-1].tolist():  # each event: the first wait row that waits for it
        mine = (
            (launcher == r)
            if blocking[r]
            else known & (host.end[np.maximum(launcher, 0)] <= host.call_start[r])
        )
        awaited[mine] = r
    tail = np.where(waits, host.end - np.maximum(awaited_end, host.call_start), 0.0)
    return waits, blocking, awaited, tail


def _anchors(step: TraceStep, launcher: np.ndarray, waits: np.ndarray, blocking: np.ndarray):
    """(anchor_row, lat, gap) of `_Rows`: GPU events are ready after their launch row's end (a blocking copy:
    after its call's start), as late after it as traced when the host set their start, else no later than
    the step's habit."""
    tl, host = step.timeline, step.host
    habits = eager_habits(step)
    anchor_row = launcher.copy()
    anchor_t = np.where(blocking, host.call_start, host.end)
    orphan = launcher < 0  # no launch call in the trace: moves with the last row (not a wait) before it
    plain_end = np.where(waits, np.inf, host.end)
    by_end = np.argsort(plain_end, kind="stable")
    before = np.searchsorted(plain_end[by_end], tl.gpu_start[orphan], side="right") - 1
    anchor_row[orphan] = np.where(before >= 0, by_end[np.maximum(before, 0)], -1)
    base = np.where(anchor_row >= 0, anchor_t[np.maximum(anchor_row, 0)], 0.0)
    lat = tl.gpu_start - base
    waited = habits.waited | orphan
    lat = np.where(waited | (anchor_row < 0), lat, np.minimum(lat, habits.latency_us))
    lat = np.where(~waited & blocking[np.maximum(anchor_row, 0)] & (anchor_row >= 0), 0.0, lat)
    since = tl.gpu_start - habits.prev_end
    gap = np.where(waited, np.minimum(since, habits.queued_gap_us), since)
    gap = np.where(np.isfinite(gap), gap, 0.0)
    return anchor_row, lat, gap


def _rows(step: TraceStep) -> _Rows:
    cached = step.__dict__.get("_untraced_rows")
    if cached is not None:
        return cached
    tl, host = step.timeline, step.host
    launcher = _launch_rows(step)
    waits, blocking, awaited, tail = _waits(step, launcher)
    anchor_row, lat, gap = _anchors(step, launcher, waits, blocking)
    replay = np.zeros(len(tl.cpu_start), bool)  # per CPU interval: it launched a graph
    replay[tl.launched_by[launch_costs(step).replayed]] = True
    out = _Rows(
        waits=waits,
        slowed=~((host.interval >= 0) & replay[np.maximum(host.interval, 0)]),
        blocking=blocking,
        awaited=awaited,
        pre=np.where(waits, host.call_start - host.start, host.end - host.start),
        tail=tail,
        anchor_row=anchor_row,
        lat=lat,
        gap=gap,
        streams=[np.flatnonzero(tl.gpu_stream == s) for s in tl.streams],
    )
    object.__setattr__(step, "_untraced_rows", out)
    return out


class _GpuRetiming:
    """A step's GPU events rescheduled by the one recurrence, stream by stream, as far as the re-timed host has
    got: `anchor` (per host row, when its GPU work may start) is filled in by the caller as it goes."""

    def __init__(self, step: TraceStep, rows: _Rows, anchor: np.ndarray):
        self.tl, self.r, self.anchor = step.timeline, rows, anchor
        self.start = step.timeline.gpu_start.copy()
        self.end = step.timeline.gpu_end.copy()  # traced until rescheduled
        self.done = [0] * len(rows.streams)
        self.last_end = [-np.inf] * len(rows.streams)

    def schedule(self, limit: int) -> None:
        """Reschedule the GPU events whose rows are below `limit` (in stream order)."""
        r, dur = self.r, self.tl.gpu_dur
        for k, rows in enumerate(r.streams):
            todo = rows[self.done[k] :]
            if not len(todo):
                continue
            blocked = r.anchor_row[todo] >= limit
            todo = todo[: int(np.argmax(blocked))] if blocked.any() else todo
            if not len(todo):
                continue
            ready = np.where(r.anchor_row[todo] >= 0, self.anchor[np.maximum(r.anchor_row[todo], 0)], 0.0)
            ready = ready + r.lat[todo]
            ready[0] = max(ready[0], self.last_end[k] + r.gap[todo[0]])
            start = np.maximum(schedule_starts(ready, dur[todo], r.gap[todo]), 0.0)
            self.start[todo] = start
            self.end[todo] = start + dur[todo]
            self.last_end[k] = float(self.end[todo[-1]])
            self.done[k] += len(todo)


def _retime(step: TraceStep, row_cost: np.ndarray, cost: ProfilerCost):
    """(cpu_start, cpu_end, gpu_start, host time taken out) of the step with `row_cost` taken out of its host rows.

    The host rows of each thread are laid end to end again, each shortened by its cost and the profiler's
    slowdown of the rest (`ProfilerCost.untraced_us`);
    a row that waits for the GPU ends when the work it waits for ends on the re-timed GPU, plus the time it
    took after that in the trace. The kernels are rescheduled by the one recurrence, stream by stream, as far as
    the host has got at each wait (`schedule_starts`)."""
    tl, host, r = step.timeline, step.host, _rows(step)
    n_rows = len(host.end)
    shrunk = cost.untraced_us(r.pre, row_cost, r.slowed)  # a wait row: the host time before its call
    new_end, anchor, base = np.zeros(n_rows), np.zeros(n_rows), np.zeros(n_rows)
    gpu = _GpuRetiming(step, r, anchor)
    cursor: dict[int, float] = {}
    done = 0
    for w in [*np.flatnonzero(r.waits).tolist(), n_rows]:
        seg = np.arange(done, w)
        for th in np.unique(host.thread[seg]).tolist():
            rows = seg[host.thread[seg] == th]
            first = cursor.get(th, float(host.start[rows[0]]))
            ends = first + np.cumsum(shrunk[rows])
            base[rows] = np.concatenate(([first], ends[:-1]))
            new_end[rows] = anchor[rows] = ends
            cursor[th] = float(ends[-1])
        if w < n_rows:
            th = int(host.thread[w])
            base[w] = cursor.get(th, float(host.start[w]))
            arrival = base[w] + shrunk[w]
            anchor[w] = arrival  # its own copies are issued once its call has begun
            gpu.schedule(w + 1 if r.blocking[w] else w)
            awaited = gpu.end[r.awaited == w].max(initial=-np.inf)
            new_end[w] = max(arrival, awaited) + r.tail[w]
            if not r.blocking[w]:
                anchor[w] = new_end[w]
            cursor[th] = float(new_end[w])
        done = w + 1
    gpu.schedule(n_rows + 1)
    cpu_start, cpu_end = tl.cpu_start.copy(), tl.cpu_end.copy()
    rows = np.flatnonzero(host.interval >= 0)
    cpu_start[host.interval[rows]] = base[rows]
    cpu_end[host.interval[rows]] = new_end[rows]
    taken = float((r.pre - shrunk).sum())
    return cpu_start, cpu_end, gpu.start, taken


def _untraced_step(step: TraceStep, cost: ProfilerCost, scale: float) -> tuple[TraceStep, float]:
    """The step re-timed with `scale` × the profiler's cost taken out, as a TraceStep the what-ifs read."""
    tl = step.timeline
    host = step.host
    cost = cost.scaled(scale)
    speed = cost.speed(host.launch_call_us, host.launch_calls)
    row_cost = cost.host_us(host.counts, host.line_us, EVENT_KINDS, speed)
    cpu_start, cpu_end, gpu_start, taken = _retime(step, row_cost, cost)
    owner = tl.launched_by
    known = owner >= 0
    launcher = np.maximum(owner, 0)
    moved_start = gpu_start - tl.gpu_start
    moved_end = (cpu_end - tl.cpu_end)[launcher]
    ratio = np.divide(cpu_end - cpu_start, tl.cpu_dur, out=np.ones(len(tl.cpu_dur)), where=tl.cpu_dur > 0)
    timeline = Timeline(
        cpu_start=cpu_start,
        cpu_dur=cpu_end - cpu_start,
        cpu_names=tl.cpu_names,
        gpu_start=gpu_start,
        gpu_dur=tl.gpu_dur,
        gpu_names=tl.gpu_names,
        launched_by=owner,
        source="simulated",
        label=f"{tl.label} · without the profiler ({ESTIMATE})",
        gpu_stream=tl.gpu_stream,
        cpu_thread=tl.cpu_thread,
        stream_names=tl.stream_names,
    )
    return (
        replace(
            step,
            timeline=timeline,
            launch_delay_us=np.where(known, step.launch_delay_us + moved_start - moved_end, np.nan),
            host_per_launch_us=np.where(known, step.host_per_launch_us * ratio[launcher], 0.0),
            host=None,
        ),
        taken,
    )


def untraced(step: TraceStep, cost: ProfilerCost, recorded: dict | None = None) -> Untraced:
    """The step without the profiler: the recorder's measured median where the trace carries a sound one
    (`core.trace.Trace.recorded_untraced`), its lanes re-timed with the profiler's cost scaled to match it;
    else the step re-timed with the fitted cost, an estimate."""
    if step.host is None:  # not read from a trace (no host record): nothing to take out
        return Untraced(step, step.metrics.step_us, ESTIMATE, 0.0, 0.0, ("No host record to take out.",))
    traced = step.metrics.step_us
    notes = []
    target = None
    if recorded is not None:
        median = float(recorded["median_us"])
        if median > _ABSURD_ABOVE * traced or median < _ABSURD_BELOW_BUSY * step.metrics.gpu_busy_us:
            notes.append(
                f"The trace's recorded step without the profiler ({median:,.0f} µs) is absurd for this step "
                f"(traced {traced:,.0f} µs, GPU busy {step.metrics.gpu_busy_us:,.0f} µs): it is estimated instead."
            )
        else:
            target = median
    if target is None:
        untraced_step, taken = _untraced_step(step, cost, 1.0)
        return Untraced(untraced_step, untraced_step.metrics.step_us, ESTIMATE, taken, 1.0, tuple(notes))
    scale, (untraced_step, taken) = _match(step, cost, target)
    drawn = untraced_step.metrics.step_us
    if abs(drawn - target) > 0.01 * target:
        why = (
            "the host ran slower while the recorder timed it than while it was traced"
            if target >= traced
            else "more than the profiler's cost this model finds on the host lane (a graph replay's profiled "
            "launch, say)"
        )
        notes.append(
            f"The recorded step ({target:,.0f} µs) is quoted as measured; its lanes are drawn at "
            f"{drawn:,.0f} µs: the difference from the traced {traced:,.0f} µs is {why}."
        )
    return Untraced(untraced_step, target, recorded.get("source", METADATA), taken, scale, tuple(notes))


def _match(step: TraceStep, cost: ProfilerCost, target: float) -> tuple[float, tuple[TraceStep, float]]:
    """The multiple of the fitted cost whose re-timed step lasts `target` µs (the step shortens as the
    multiple grows), by regula falsi (Illinois) between 0 and a multiple that overshoots; clamped at either end."""

    def at(scale: float):
        out = _untraced_step(step, cost, scale)
        return out, out[0].metrics.step_us - target

    lo, (lo_out, f_lo) = 0.0, at(0.0)
    if f_lo <= 0:  # the recorded step is not shorter than the traced one: the trace's lanes as they are
        return 0.0, lo_out
    hi, (hi_out, f_hi) = 1.0, at(1.0)
    while f_hi > 0 and hi < 1024:
        lo, lo_out, f_lo = hi, hi_out, f_hi
        hi *= 4
        hi_out, f_hi = at(hi)
    if f_hi > 0:  # even nothing but `keep` of each interval is longer than the recorded step
        return hi, hi_out
    side = 0
    for _ in range(60):
        mid = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
        out, f = at(mid)
        if abs(f) <= 1e-6 * target:
            return mid, out
        if f > 0:
            lo, f_lo = mid, f
            if side == 1:
                f_hi /= 2
            side = 1
        else:
            hi, f_hi, hi_out = mid, f, out
            if side == -1:
                f_lo /= 2
            side = -1
    return hi, hi_out


def untraced_of(
    step: TraceStep, recorded: dict | None = None, cost: ProfilerCost = PROFILER_COST
) -> Untraced:
    """`untraced` with the fitted cost, cached on the step (the page and the CLI ask for it more than once)."""
    if cost is not PROFILER_COST:
        return untraced(step, cost, recorded)
    cache = step.__dict__.setdefault(
        "_untraced", {}
    )  # by the recorded block it was given (None or the trace's)
    key = id(recorded)
    if key not in cache:
        cache[key] = untraced(step, cost, recorded)
    return cache[key]


def untraced_steps(report: TraceReport, cost: ProfilerCost = PROFILER_COST) -> list[Untraced]:
    """Every step of a trace without the profiler: the trace's recorded figure where it carries a sound one."""
    return [untraced_of(s, report.trace.recorded_untraced, cost) for s in report.steps]
