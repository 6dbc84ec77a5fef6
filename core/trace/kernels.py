"""Per kernel of a step read from a trace: what its launch cost the host, how it reached the GPU, and the
per-kernel table the page and `python -m sim trace` show.

An eager kernel has a launch call of its own: its host time is that call's (with the host work since the
previous launch, as the lanes draw it) and its launch delay is how long after the call returned it
started. A kernel replayed by a CUDA graph has neither: one `cudaGraphLaunch` submits hundreds, so
charging each node the replay's host time and a "delay" from the end of that one call (~1 ms for the
last node) says nothing about the node. For replayed kernels the table gives instead the gap to the
previous GPU event on their stream (what the GPU lost between nodes) and no host time; the graph launches
get a row of their own, with their host time counted once. Eager steps are unchanged.

Which kernels a graph launch replayed: the reader (`core.trace`) merges each graph launch with the input
copies just before it into one CPU interval, named '... cudaGraphLaunch'. A GPU event launched by such an
interval is a replayed node, not an input copy, when its own launch call ended where the interval ends
(the graph launch is the group's last call): its start minus its launch delay is the interval's end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from core.trace import TraceReport, TraceStep, short_kernel_name

GRAPH_LAUNCH = "cudaGraphLaunch"
_GRAPH_INTERVAL = re.compile(r"(cuda|cu)GraphLaunch")
_SAME_TIME_US = 1e-3  # the reader's times are float µs: a nanosecond apart is the same instant


@dataclass(frozen=True, eq=False)
class LaunchCosts:
    """Per GPU event of one step (arrays in the timeline's GPU order)."""

    replayed: np.ndarray  # bool: a node of a graph replay
    host_us: np.ndarray  # its own call's host time, on the call's first event only; 0 if replayed
    delay_us: np.ndarray  # launch delay of an eager event; NaN where replayed or the call is missing
    gap_us: np.ndarray  # replayed: start minus the end of the previous GPU event on its stream; else NaN
    graph_host_us: np.ndarray  # host time of each graph launch of the step, once each

    @property
    def graph_launches(self) -> int:
        return len(self.graph_host_us)


def _early(step: TraceStep) -> np.ndarray:
    early = step.stamped_early
    return np.zeros(len(step.launch_delay_us), bool) if early is None else early


def launch_costs(step: TraceStep) -> LaunchCosts:
    """Host time, launch delay and inter-node gap per GPU event of a step, with graph replays told apart."""
    tl = step.timeline
    by = tl.launched_by
    known = by >= 0
    launcher = np.maximum(by, 0)
    call_end = tl.gpu_start - np.nan_to_num(step.launch_delay_us)  # the end of each event's own call
    replayed = np.zeros(len(by), bool)
    if step.graph_launches:
        graph_interval = np.array([bool(_GRAPH_INTERVAL.search(n)) for n in tl.cpu_names], bool)
        replayed = (
            known
            & graph_interval[launcher]
            & (np.abs(call_end - tl.cpu_end[launcher]) < _SAME_TIME_US)
            & np.isfinite(step.launch_delay_us)
        )
    # One launch call may own several GPU events (a graph launch all its nodes): its host time counts once.
    first = np.zeros(len(by), bool)
    rows = np.flatnonzero(known)
    calls = np.column_stack((launcher[rows], np.round(call_end[rows] / _SAME_TIME_US)))
    first[rows[np.unique(calls, axis=0, return_index=True)[1]]] = True
    host = np.where(first, step.host_per_launch_us, 0.0)
    prev_end = np.full(len(by), np.nan)
    for s in tl.streams:
        rows = np.flatnonzero(tl.gpu_stream == s)
        prev_end[rows[1:]] = tl.gpu_end[rows[:-1]]
    return LaunchCosts(
        replayed=replayed,
        host_us=np.where(replayed, 0.0, host),
        # An event stamped before its launch call (clocks that disagree) has no launch delay to show.
        delay_us=np.where(replayed | _early(step), np.nan, step.launch_delay_us),
        gap_us=np.where(replayed, tl.gpu_start - prev_end, np.nan),
        graph_host_us=host[first & replayed],
    )


def _mean_or_none(total: float, n: float) -> float | None:
    return float(total / n) if n else None


def _per_kernel(steps) -> dict:
    """Every GPU event of `steps`, as arrays in order: its short name, time, launch delay, host time per
    launch, gap to the previous kernel, whether a graph replayed it; and each graph launch's host time."""
    names, dur, delay, host, gap, replayed, graph_host = [], [], [], [], [], [], []
    for s in steps:
        costs = launch_costs(s)
        names += [short_kernel_name(n, None) for n in s.timeline.gpu_names]  # whole: the page wraps it
        dur.append(s.timeline.gpu_dur)
        delay.append(costs.delay_us)
        # Eager launches keep the host time of their own call, as before; replayed nodes have none.
        host.append(np.where(costs.replayed, 0.0, s.host_per_launch_us))
        gap.append(costs.gap_us)
        replayed.append(costs.replayed)
        graph_host.append(costs.graph_host_us)
    columns = {
        "dur": dur,
        "delay": delay,
        "host": host,
        "gap": gap,
        "replayed": replayed,
        "graph_host": graph_host,
    }
    return {"names": names, **{k: np.concatenate(v) for k, v in columns.items()}}


def _graph_launch_row(k: dict, per: int) -> dict:
    """The first row of a step that replays graphs: its graph launches' count and host time per launch."""
    nodes = int(k["replayed"].sum()) // per
    return {
        "kernel": f"{GRAPH_LAUNCH} (replays {nodes:,} kernels, listed below)",
        "calls": len(k["graph_host"]) // per,
        "total_us": 0.0,
        "mean_us": 0.0,
        "share": 0.0,
        "launch_delay_us": None,
        "host_per_launch_us": float(k["graph_host"].mean()),
        "replayed": 0,
        "gap_us": None,
        "graph_launch": True,
    }


def kernel_table(report: TraceReport, step_index: int | None = None, limit: int | None = None) -> list[dict]:
    """Per kernel name over one step (or per step over all steps): calls, GPU time, share, and for eager
    launches the launch delay and host time per launch, for replayed ones the gap to the previous kernel.

    A step that replays graphs gets a first row for its graph launches (`graph_launch` True): their
    count and host time per launch, no GPU time (their kernels have rows of their own)."""
    steps = report.steps if step_index is None else [s for s in report.steps if s.index == step_index]
    per = max(len(steps), 1) if step_index is None else 1
    k = _per_kernel(steps)
    dur, delay, gap, replayed = k["dur"], k["delay"], k["gap"], k["replayed"]
    keys, inverse = np.unique(np.array(k["names"], dtype=object), return_inverse=True)

    def per_key(weights) -> np.ndarray:
        return np.bincount(inverse, weights=weights, minlength=len(keys))

    calls = np.bincount(inverse, minlength=len(keys))
    total = per_key(dur)
    timed = np.isfinite(delay)  # NaN: replayed, or the trace lacks the event's launch call
    delay_sum, delay_calls = per_key(np.where(timed, delay, 0.0)), per_key(timed)
    eager_calls, host_sum = per_key(~replayed), per_key(k["host"])
    gapped = np.isfinite(gap)
    gap_sum, gap_calls = per_key(np.where(gapped, gap, 0.0)), per_key(gapped)
    replayed_calls = per_key(replayed)
    busy = float(dur.sum()) or 1.0
    rows = [
        {
            "kernel": str(keys[i]),
            "calls": int(calls[i]) // per,
            "total_us": float(total[i]) / per,
            "mean_us": float(total[i] / calls[i]),
            "share": float(total[i]) / busy,
            "launch_delay_us": _mean_or_none(delay_sum[i], delay_calls[i]),
            "host_per_launch_us": _mean_or_none(host_sum[i], eager_calls[i]),
            "replayed": int(replayed_calls[i]) // per,
            "gap_us": _mean_or_none(gap_sum[i], gap_calls[i]),
            "graph_launch": False,
        }
        for i in np.argsort(-total)
    ]
    if len(k["graph_host"]):
        rows.insert(0, _graph_launch_row(k, per))
    return rows[:limit] if limit else rows


def _us(value: float | None, width: int = 7) -> str:
    return f"{value:{width}.1f}" if value is not None else f"{'—':>{width}}"


def kernel_lines(rows: list[dict]) -> list[str]:
    """The text report's lines for `kernel_table` rows: eager kernels with their launch delay and host time,
    replayed ones with their gap to the previous kernel, the graph launches with their host time."""
    lines = []
    for row in rows:
        if row["graph_launch"]:
            lines.append(
                f"  {'':>6}  {row['calls']:>6,} × graph launch    host {_us(row['host_per_launch_us'])} µs  "
                f"{row['kernel']}"
            )
            continue
        head = f"  {100 * row['share']:5.1f}%  {row['calls']:>6,} × {row['mean_us']:8.2f} µs  "
        if row["host_per_launch_us"] is None:  # every call replayed
            lines.append(f"{head}gap   {_us(row['gap_us'])} µs  host {_us(None, 6)} µs  {row['kernel']}")
        else:
            lines.append(
                f"{head}delay {_us(row['launch_delay_us'])} µs  host {_us(row['host_per_launch_us'], 6)} µs  "
                f"{row['kernel']}"
            )
    return lines
