"""The persistent kernel's in-kernel stamps, turned into per-phase times per program.

The kernel (kernels/persistent_kernel.py, `trace=True`) writes an int64 buffer [programs, phases, 3] of
%globaltimer nanoseconds; for program p and phase i (order: `persistent.phase_plan`):
    [p, i, 0] wait_begin: it has issued the phase's first weight loads and prefetches and starts waiting
                          for the phase's inputs (the barrier); for the embed phase, the program's start;
    [p, i, 1] start:      the wait is over, its work on the phase starts;
    [p, i, 2] end:        its work is done (it then arrives at the next barrier).

`read_trace` returns a plain dict (JSON-ready; times in µs from the earliest stamp):
    programs, t0_ns (that earliest stamp, %globaltimer ns: to line the lanes up with other clocks),
    timer_resolution_ns (smallest non-zero step seen between two stamps), total_us,
    phases:    [{index, kind, layer, name}] in kernel order,
    wait_begin_us / start_us / end_us: [program][phase] lists of floats,
    per_phase: [{index, kind, layer, name, critical_us, release_us, work_us, work_max_us, wait_us,
                 imbalance_us}], where
        critical_us  = last program's end of this phase - last program's end of the previous phase
                       (the phase's share of the kernel's time: they add up to total_us),
        release_us   = median start - last end of the previous phase (barrier latency after the last arrival),
        work_us      = median (end - start) over programs, work_max_us its maximum,
        wait_us      = median (start - wait_begin): the bubble each program sat in,
        imbalance_us = last end - median end of this phase (what the slowest program adds);
    by_kind: {kind: {phases, critical_us (sum over its phases), critical_us_median, release_us, work_us,
                     work_max_us, wait_us, imbalance_us (medians over its phases)}}.
`lanes(trace, n_lanes)` groups programs into lanes for drawing: per lane and phase a "wait" segment
(median wait_begin -> median start) and a "work" segment (median start -> median end).
"""

from __future__ import annotations

import numpy as np


def read_trace(stamps, phases) -> dict:
    """stamps: the [programs, phases, 3] int64 buffer (a tensor or array); phases: PhaseInfo list."""
    arr = np.asarray(stamps.cpu() if hasattr(stamps, "cpu") else stamps, dtype=np.int64)
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.shape[1] != len(phases):
        raise ValueError(f"stamps must be [programs, {len(phases)}, 3], got {list(arr.shape)}")
    if (arr < 0).any():
        raise ValueError("stamps hold unwritten entries (-1): was the step run with trace on?")
    t0 = int(arr.min())
    rel = (arr - t0) / 1e3  # µs
    wait_begin, start, end = rel[:, :, 0], rel[:, :, 1], rel[:, :, 2]
    steps = np.diff(np.sort(arr.reshape(-1)))
    positive = steps[steps > 0]
    per_phase = []
    previous_end = float(wait_begin[:, 0].min())
    for i, ph in enumerate(phases):
        last_end = float(end[:, i].max())
        per_phase.append(
            {
                "index": ph.index,
                "kind": ph.kind,
                "layer": ph.layer,
                "name": ph.name,
                "critical_us": last_end - previous_end,
                "release_us": float(np.median(start[:, i])) - previous_end if i else 0.0,
                "work_us": float(np.median(end[:, i] - start[:, i])),
                "work_max_us": float((end[:, i] - start[:, i]).max()),
                "wait_us": float(np.median(start[:, i] - wait_begin[:, i])),
                "imbalance_us": last_end - float(np.median(end[:, i])),
            }
        )
        previous_end = last_end
    by_kind: dict[str, dict] = {}
    for kind in dict.fromkeys(ph.kind for ph in phases):
        rows = [r for r in per_phase if r["kind"] == kind]
        summary = {"phases": len(rows), "critical_us": sum(r["critical_us"] for r in rows)}
        for key in ("critical_us", "release_us", "work_us", "work_max_us", "wait_us", "imbalance_us"):
            summary[key + ("_median" if key == "critical_us" else "")] = float(
                np.median([r[key] for r in rows])
            )
        by_kind[kind] = summary
    return {
        "programs": int(arr.shape[0]),
        "t0_ns": t0,
        "timer_resolution_ns": int(positive.min()) if positive.size else 0,
        "total_us": float(end.max() - wait_begin[:, 0].min()),
        "phases": [{"index": p.index, "kind": p.kind, "layer": p.layer, "name": p.name} for p in phases],
        "wait_begin_us": wait_begin.tolist(),
        "start_us": start.tolist(),
        "end_us": end.tolist(),
        "per_phase": per_phase,
        "by_kind": by_kind,
    }


def lanes(trace: dict, n_lanes: int = 8) -> list[dict]:
    """Segments to draw, one lane per group of consecutive programs: {lane, programs: [first, last],
    index, kind, layer, what: "wait" | "work", start_us, end_us} (medians over the lane's programs)."""
    programs = trace["programs"]
    n_lanes = max(1, min(n_lanes, programs))
    bounds = np.linspace(0, programs, n_lanes + 1).round().astype(int)
    wait_begin, start, end = (np.asarray(trace[k]) for k in ("wait_begin_us", "start_us", "end_us"))
    segments = []
    for lane in range(n_lanes):
        lo, hi = int(bounds[lane]), int(bounds[lane + 1])
        for i, ph in enumerate(trace["phases"]):
            w, s, e = (float(np.median(a[lo:hi, i])) for a in (wait_begin, start, end))
            base = {
                "lane": lane,
                "programs": [lo, hi - 1],
                "index": ph["index"],
                "kind": ph["kind"],
                "layer": ph["layer"],
            }
            if s > w:
                segments.append({**base, "what": "wait", "start_us": w, "end_us": s})
            segments.append({**base, "what": "work", "start_us": s, "end_us": max(e, s)})
    return segments


def compact(trace: dict, n_lanes: int = 12) -> dict:
    """What a probe result keeps of a `read_trace` dict (`core.probe_result` reads it back): the kernel's
    phases, and per lane of consecutive programs the median stamps of each phase, as arrays."""
    programs = trace["programs"]
    n_lanes = max(1, min(n_lanes, programs))
    bounds = np.linspace(0, programs, n_lanes + 1).round().astype(int)
    stamps = {k: np.asarray(trace[k]) for k in ("wait_begin_us", "start_us", "end_us")}
    lanes = []
    for lane in range(n_lanes):
        lo, hi = int(bounds[lane]), int(bounds[lane + 1])
        lanes.append(
            {"programs": [lo, hi - 1]}
            | {k: np.round(np.median(a[lo:hi], axis=0), 3).tolist() for k, a in stamps.items()}
        )
    return {
        "programs": programs,
        "t0_ns": trace.get("t0_ns", 0),
        "timer_resolution_ns": trace.get("timer_resolution_ns", 0),
        "total_us": trace["total_us"],
        "names": [p["name"] for p in trace["phases"]],
        "kinds": [p["kind"] for p in trace["phases"]],
        "lanes": lanes,
        "by_kind": trace["by_kind"],
    }
