"""Export a `Timeline` as Chrome trace JSON, the format Perfetto and chrome://tracing open.

Layout in the viewer (one process per lane, so each gets a labelled group):

    pid 1  "CPU (host)"  tid 1  "CPU thread: building + submitting launches"
    pid 2  "GPU"         tid 1  "GPU stream: kernels"

A measured step with several host threads or CUDA streams gets a track for each ("CPU thread 2: …",
"GPU stream 7: kernels").

Every interval becomes one complete ("X") event with its name and duration in µs.
Each kernel with a known launcher (`timeline.launched_by[i] >= 0`) gets a flow
arrow: an "s" event inside the launch slice and an "f" event (binding point
"e", enclosing slice) inside the kernel slice, sharing one id.

The JSON importer needs the slices on one track to nest, never to partly overlap.
Measured kernels can overlap (the profiler's clock, or a second stream), so
overlapping intervals are spread over extra tracks ("GPU stream: kernels (2)"),
greedily: each interval takes the first track that is free at its start.
"""

from __future__ import annotations

import json

import numpy as np

from core.timeline import Timeline

CPU_PID, GPU_PID = 1, 2
CPU_TRACK = "CPU thread: building + submitting launches"
GPU_TRACK = "GPU stream: kernels"
# Flow endpoints sit 1 ns into their slice: inside it (so the importer binds the
# arrow to the right slice even when slices touch end to start), and visually at
# its left edge. Chrome trace times are µs, so 1 ns is 0.001.
_ANCHOR_US = 0.001
# Intervals that touch within this slack (rounding in measured data) do not count as overlapping.
_TOUCH_US = 1e-6


def assign_tracks(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Track number (0, 1, ...) per interval such that no two intervals on a track overlap."""
    order = np.argsort(start, kind="stable")
    track_of = np.zeros(len(start), np.int64)
    track_free_at: list[float] = []  # end time of the last interval on each track
    for i in order:
        s, e = float(start[i]), float(start[i] + dur[i])
        for t, free_at in enumerate(track_free_at):
            if s >= free_at - _TOUCH_US:
                track_of[i], track_free_at[t] = t, e
                break
        else:
            track_of[i] = len(track_free_at)
            track_free_at.append(e)
    return track_of


def _anchor(start: float, dur: float) -> float:
    return start + min(dur / 2.0, _ANCHOR_US)


def lane_tracks(ids: np.ndarray, start: np.ndarray, dur: np.ndarray, base_name: str, kind: str):
    """(track per interval, track labels): a lane per host thread or CUDA stream (`ids`), each spread
    over as many tracks as its overlapping intervals need ("GPU stream 7: kernels (2)")."""
    track = np.zeros(len(start), np.int64)
    labels: list[str] = []
    lanes = np.unique(ids) if len(ids) else np.zeros(1, np.int64)
    for lane in lanes:
        rows = np.flatnonzero(ids == lane)
        local = assign_tracks(start[rows], dur[rows]) if len(rows) else np.zeros(0, np.int64)
        track[rows] = len(labels) + local
        name = base_name if len(lanes) == 1 else base_name.replace(kind, f"{kind} {int(lane)}", 1)
        labels += [name if t == 0 else f"{name} ({t + 1})" for t in range(int(local.max(initial=0)) + 1)]
    return track, labels


def _lane_events(
    pid: int, labels: list[str], category: str, start, dur, names, tracks, extra_args
) -> tuple[list[dict], list[dict]]:
    meta, slices = [], []
    for t, label in enumerate(labels):
        meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": t + 1, "args": {"name": label}})
        meta.append(
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": t + 1, "args": {"sort_index": t}}
        )
    for i in range(len(start)):
        slices.append(
            {
                "ph": "X",
                "cat": category,
                "name": names[i],
                "pid": pid,
                "tid": int(tracks[i]) + 1,
                "ts": float(start[i]),
                "dur": float(dur[i]),
                "args": {"index": i, **extra_args(i)},
            }
        )
    return meta, slices


def _process_events(title: str) -> list[dict]:
    """The two processes, the host above the GPU, named after the step."""
    return [
        {
            "ph": "M",
            "name": "process_name",
            "pid": CPU_PID,
            "tid": 0,
            "args": {"name": f"CPU (host): {title}"},
        },
        {"ph": "M", "name": "process_sort_index", "pid": CPU_PID, "tid": 0, "args": {"sort_index": 0}},
        {"ph": "M", "name": "process_name", "pid": GPU_PID, "tid": 0, "args": {"name": f"GPU: {title}"}},
        {"ph": "M", "name": "process_sort_index", "pid": GPU_PID, "tid": 0, "args": {"sort_index": 1}},
    ]


def _flow_events(tl: Timeline, cpu_tracks: np.ndarray, gpu_tracks: np.ndarray) -> list[dict]:
    """One arrow per kernel, from the launch that submitted it."""
    events = []
    for k, launch in enumerate(tl.launched_by.tolist()):
        if launch < 0:
            continue
        flow_id = k + 1  # ids must be unique per arrow; 0 reads as "unset" in some viewers
        events.append(
            {
                "ph": "s",
                "cat": "launch",
                "name": "launch",
                "id": flow_id,
                "pid": CPU_PID,
                "tid": int(cpu_tracks[launch]) + 1,
                "ts": _anchor(tl.cpu_start[launch], tl.cpu_dur[launch]),
            }
        )
        events.append(
            {
                "ph": "f",
                "bp": "e",
                "cat": "launch",
                "name": "launch",
                "id": flow_id,
                "pid": GPU_PID,
                "tid": int(gpu_tracks[k]) + 1,
                "ts": _anchor(tl.gpu_start[k], tl.gpu_dur[k]),
            }
        )
    return events


def to_chrome_trace(timeline: Timeline, name: str = "decode step") -> dict:
    """The step as a Chrome trace object: {"traceEvents": [...], "displayTimeUnit": "ns", ...}."""
    tl = timeline
    cpu_tracks, cpu_labels = lane_tracks(tl.cpu_thread, tl.cpu_start, tl.cpu_dur, CPU_TRACK, "thread")
    gpu_tracks, gpu_labels = lane_tracks(tl.gpu_stream, tl.gpu_start, tl.gpu_dur, GPU_TRACK, "stream")
    title = f"{name} ({tl.source})" + (f": {tl.label}" if tl.label else "")

    # Which kernels each launch submitted, for the launch slice's args.
    submitted = {}
    for k, launch in enumerate(tl.launched_by.tolist()):
        if launch >= 0:
            submitted.setdefault(launch, []).append(k)

    cpu_meta, cpu_slices = _lane_events(
        CPU_PID,
        cpu_labels,
        "launch",
        tl.cpu_start,
        tl.cpu_dur,
        tl.cpu_names,
        cpu_tracks,
        lambda i: {"kernels_submitted": len(submitted.get(i, ()))},
    )
    gpu_meta, gpu_slices = _lane_events(
        GPU_PID,
        gpu_labels,
        "kernel",
        tl.gpu_start,
        tl.gpu_dur,
        tl.gpu_names,
        gpu_tracks,
        lambda i: {"launched_by": int(tl.launched_by[i])},
    )
    events = _process_events(title) + cpu_meta + gpu_meta + cpu_slices + gpu_slices
    events += _flow_events(tl, cpu_tracks, gpu_tracks)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "name": name,
            "source": tl.source,
            "label": tl.label,
            "exported_by": "launch-bound",
            "time_unit": "us",
            **tl.metrics().to_dict(),
        },
    }


def to_chrome_trace_json(timeline: Timeline, name: str = "decode step") -> str:
    """`to_chrome_trace` as a compact JSON string (what the download buttons serve)."""
    # allow_nan=False: a Timeline is finite by construction, and a NaN would make the file unreadable.
    return json.dumps(to_chrome_trace(timeline, name=name), separators=(",", ":"), allow_nan=False)
