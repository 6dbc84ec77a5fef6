"""The profiler's own cost per recorded event, fitted on paired traced/untraced steps, and checked.

    python tools/profiler_cost_fit.py            # the fitted costs and the validation table
    python tools/profiler_cost_fit.py --json     # the same as JSON

CPU only (numpy and the standard library); it parses the traces itself (json/gzip), so the model is
specified here in full for the lead to move into `core/trace.py` (the counting) and `sim/timing.py`
(the cost term).

## The model

`torch.profiler` adds host time to every event it records. Per step, on the thread that owns the step
(the thread of its `ProfilerStep#N` / `decode_step` range; for traces without step ranges, the thread
with the most `cpu_op` events), every event whose start lies in the step's window is counted, by kind:

| kind     | what is counted                                                                      |
| -------- | ------------------------------------------------------------------------------------ |
| `op`     | `cat == "cpu_op"`, and `user_annotation` ranges other than `ProfilerStep#N` itself    |
| `runtime`| `cat == "cuda_runtime"` (every CUDA runtime call: launches, copies, syncs, attributes) |
| `driver` | `cat == "cuda_driver"` (`cuLaunchKernel(Ex)` from Triton and cuBLASLt, ...)           |
| `python` | `cat == "python_function"` (only when `with_stack=True`)                              |
| `shapes` | `cpu_op` events whose `args` hold `"Input Dims"` (only when `record_shapes=True`)     |

The profiler's cost of a step is `sum(count[k] * cost[k])`. The step without the profiler is the step
re-timed with that cost taken out of the host lane:

1. host: the thread's events in start order are knots; the traced time between two knots shrinks by
   the cost of the events started so far and not yet taken out (never below 10 % of the gap: a cost
   larger than the gap carries over to the next gap). A time inside a gap maps linearly.
2. GPU: per stream in traced order, a kernel (memcpy, memset) starts at
   `max(its launch call's corrected end + latency, the previous one's corrected end)`; the latency is
   the kernel's own traced `start - launch end` when the GPU was idle before it, else that capped at
   the step's median idle-GPU latency; kernels of one launch (a graph replay) keep their traced gaps.
3. host waits (`cudaStreamSynchronize`, `cudaDeviceSynchronize`, `cudaEventSynchronize`, and memcpy
   calls whose copy is device-to-host) that outlast the GPU work launched before them end at
   `max(their corrected start, that work's corrected end) + their traced tail` (the tail: the call's
   end after the work's end); the host lane continues from there and no cost carries over a wait.
4. the step: from its start to the later of the last GPU event's end and the last launch call's end
   (`core.trace`'s step), both corrected.

A GPU-bound step comes out unchanged (its waits absorb the host's saving); a host-bound step shrinks by
about the cost.

## The data (all real, none edited)

- `tests/data/profiler/`: `tools/profiler_cost.py`'s run on the H200 (torch 2.11): one-event loops
  (`micro_*`) and Llama-3.2-1B-shaped eager at batch 1; untraced medians from the run's JSON.
- `tests/data/hf/`: `tools/hf_traces.py`'s Hugging Face traces with `hf_*_measured.json`.
- `gpu_probe/recorded/`: the probe's runs (`h200*.json`: per mode and batch the untraced median and one
  profiled step's timeline) and full traces (`trace_*`). The runs' timelines carry launches only: each
  launch's events are taken from the full trace of the same preset and mode family (eager: the eager
  trace's events per launch; graph, fused+graph: the fused+graph trace's events per step). Modes with no
  full trace to count from (fused, compile) are not scored.

Fitted by non-negative least squares on the relative error of the host-bound pairs (traced step minus
untraced step against the counted events), checked leave-one-model-out.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("op", "runtime", "driver", "python", "shapes", "graph_node")  # what is counted
PARAMS = ("op", "api", "python", "shapes", "graph_node")  # what is costed: runtime and driver calls alike
# KINDS -> PARAMS: a runtime call and a driver call cost the same (CUPTI's callback on each API call)
TO_PARAMS = np.array(
    [
        [1, 0, 0, 0, 0],
        [0, 1, 0, 0, 0],
        [0, 1, 0, 0, 0],
        [0, 0, 1, 0, 0],
        [0, 0, 0, 1, 0],
        [0, 0, 0, 0, 1],
    ],
    dtype=float,
)
SYNC_CALLS = {
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "cuEventSynchronize",
}
LAUNCH = re.compile(
    r"^(cudaLaunch|cuLaunch|cudaGraphLaunch|cuGraphLaunch|cudaMemcpy|cuMemcpy|cudaMemset|cuMemset)"
)
GRAPH_LAUNCHES = {"cudaGraphLaunch", "cuGraphLaunch"}
STEP_RANGE = re.compile(r"^ProfilerStep#\d+$")
MIN_KEEP = 0.10  # a gap between host events never shrinks below this share of itself
DEFAULT_PARAMS = ("op", "api", "python", "shapes")  # graph_node: see --graph-nodes
HOST_BOUND = 0.5  # a pair is fitted on when the traced GPU busy time is below this share of the step
GPU_BOUND = 0.8  # and counted GPU-bound (goal: changed by <= 3 %) above this share


# -- one step, as the estimate needs it --------------------------------------------------------------
@dataclass
class Step:
    t0: float
    host_ts: np.ndarray  # the step thread's events, sorted by start
    host_end: np.ndarray
    host_kind: np.ndarray  # (n, len(KINDS)) counts per event
    wait_target: np.ndarray  # per host event: traced end of the GPU work it waits for, else -inf
    gpu_ts: np.ndarray
    gpu_dur: np.ndarray
    gpu_stream: np.ndarray
    gpu_launch: np.ndarray  # index into host arrays, -1 if launched elsewhere
    launch_ends: np.ndarray  # the step's launch calls' ends

    @property
    def counts(self) -> np.ndarray:
        return self.host_kind.sum(axis=0)

    @property
    def traced_us(self) -> float:
        end = max(self.gpu_end.max(initial=self.t0), self.launch_ends.max(initial=self.t0))
        return float(end - self.t0)

    @property
    def gpu_end(self) -> np.ndarray:
        return self.gpu_ts + self.gpu_dur

    @property
    def gpu_busy_us(self) -> float:
        order = np.argsort(self.gpu_ts)
        busy, reach = 0.0, -math.inf
        for s, e in zip(self.gpu_ts[order], self.gpu_end[order]):
            if e > reach:
                busy += e - max(s, reach)
                reach = e
        return busy


def estimate(step: Step, cost: np.ndarray) -> float:
    """The step's time without the profiler (µs): the module docstring's steps 1-4."""
    per_event = step.host_kind @ (TO_PARAMS @ np.asarray(cost, dtype=float))
    first = min(step.t0, float(step.host_ts[0])) if len(step.host_ts) else step.t0
    knots_t, knots_c = [first], [first]
    pending = 0.0
    n_gpu = len(step.gpu_ts)
    new_start = np.full(n_gpu, np.nan)
    # GPU events in traced order per stream, scheduled lazily up to the host time reached
    order = np.lexsort((step.gpu_ts, step.gpu_stream))
    lat_idle = _idle_latencies(step, order)
    typical = float(np.median(lat_idle)) if len(lat_idle) else 5.0
    state = {"next": 0, "prev": {}, "shift": {}}  # per stream: (traced end, corrected end); per launch: shift
    launch_start = np.where(step.gpu_launch >= 0, step.host_ts[np.maximum(step.gpu_launch, 0)], step.gpu_ts)
    by_launch_time = order[np.argsort(launch_start[order], kind="stable")]

    def map_time(t: float) -> float:
        k = np.searchsorted(knots_t, t, side="right") - 1
        k = max(k, 0)
        if k + 1 < len(knots_t) and knots_t[k + 1] > knots_t[k]:
            ratio = (knots_c[k + 1] - knots_c[k]) / (knots_t[k + 1] - knots_t[k])
        else:
            ratio = 1.0
        return knots_c[k] + (t - knots_t[k]) * ratio

    def schedule(until: float) -> None:
        """Schedule every GPU event whose launch started before `until` (traced time)."""
        while state["next"] < n_gpu:
            g = by_launch_time[state["next"]]
            if launch_start[g] > until:
                break
            state["next"] += 1
            _place(step, g, new_start, state, map_time, typical)

    host_n = len(step.host_ts)
    for i in range(host_n):
        ts = step.host_ts[i]
        gap = max(ts - knots_t[-1], 0.0)
        shrink = min(pending, gap * (1.0 - MIN_KEEP))
        pending -= shrink
        knots_t.append(ts)
        knots_c.append(knots_c[-1] + gap - shrink)
        target = step.wait_target[i]
        if target > ts:  # a host wait for the GPU
            schedule(ts)
            done = [new_start[g] + step.gpu_dur[g] for g in range(n_gpu) if not np.isnan(new_start[g])]
            g_new = max(done) if done else target
            tail = max(step.host_end[i] - target, 0.0)
            end_c = max(knots_c[-1], g_new) + tail
            knots_t.append(step.host_end[i])
            knots_c.append(max(end_c, knots_c[-1]))
            pending = 0.0
        else:
            pending += per_event[i]
    # close the lane: the time after the last knot shrinks by what is still pending
    last_t = max(step.host_end.max(initial=step.t0), step.launch_ends.max(initial=step.t0))
    if last_t > knots_t[-1]:
        gap = last_t - knots_t[-1]
        knots_c.append(knots_c[-1] + gap - min(pending, gap * (1.0 - MIN_KEEP)))
        knots_t.append(last_t)
    schedule(math.inf)
    gpu_end = np.nanmax(new_start + step.gpu_dur) if n_gpu else step.t0
    launch_end = max((map_time(t) for t in step.launch_ends), default=step.t0)
    return float(max(gpu_end, launch_end) - map_time(step.t0))


def _idle_latencies(step: Step, order: np.ndarray) -> np.ndarray:
    lat, prev_end, prev_stream = [], -math.inf, None
    for g in order:
        if step.gpu_stream[g] != prev_stream:
            prev_end, prev_stream = -math.inf, step.gpu_stream[g]
        if step.gpu_launch[g] >= 0 and step.gpu_ts[g] > prev_end + 1.0:
            lat.append(step.gpu_ts[g] - step.host_end[step.gpu_launch[g]])
        prev_end = max(prev_end, step.gpu_ts[g] + step.gpu_dur[g])
    lat = np.asarray(lat)
    return lat[lat >= 0]


def _place(step, g, new_start, state, map_time, typical) -> None:
    s, d, stream, launch = step.gpu_ts[g], step.gpu_dur[g], step.gpu_stream[g], step.gpu_launch[g]
    p_end_t, p_end_c = state["prev"].get(stream, (-math.inf, -math.inf))
    idle = s > p_end_t + 1.0  # the GPU (this stream) was idle before it: it waited for its launch
    # never closer to the previous one than traced (an overlap stays an overlap), and an idle gap may close
    chain = p_end_c + (min(s - p_end_t, 0.0) if idle else s - p_end_t)
    if launch < 0:
        start = max(map_time(s), chain)
    elif launch in state["shift"]:  # a later kernel of the same launch (a graph replay): moves with the first
        start = s + state["shift"][launch]
    else:
        launch_end = step.host_end[launch]
        lat = s - launch_end if idle else min(s - launch_end, typical)
        start = max(map_time(launch_end) + lat, chain)  # lat < 0: the work began before its call returned
        state["shift"][launch] = start - s
    new_start[g] = start
    state["prev"][stream] = (max(s + d, p_end_t), max(start + d, p_end_c))


# -- reading traces -----------------------------------------------------------------------------------
def load(path: Path):
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt") as f:
        return json.load(f)


def _kind_row(e) -> np.ndarray | None:
    cat = e.get("cat")
    row = np.zeros(len(KINDS))
    if cat == "cpu_op":
        row[0] = 1
        args = e.get("args")
        if isinstance(args, dict) and "Input Dims" in args:
            row[4] = 1
    elif cat == "user_annotation":
        if STEP_RANGE.match(str(e.get("name", ""))):
            return None
        row[0] = 1
    elif cat == "cuda_runtime":
        row[1] = 1
    elif cat == "cuda_driver":
        row[2] = 1
    elif cat == "python_function":
        row[3] = 1
    else:
        return None
    return row


def trace_steps(trace: dict, step_range: str | None = None) -> list[Step]:
    """The steps of a trace: its `ProfilerStep#N` (or `step_range`) ranges, else the stretches of the
    busiest thread between host waits that hold launches."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    corr_gpu = {}
    for e in gpu:
        corr_gpu.setdefault((e.get("args") or {}).get("correlation"), []).append(e)
    ranges = [
        e
        for e in events
        if e.get("cat") == "user_annotation"
        and (STEP_RANGE.match(str(e.get("name", ""))) if step_range is None else e.get("name") == step_range)
    ]
    if step_range is None and not ranges:
        ranges = [e for e in events if e.get("cat") == "user_annotation" and e.get("name") == "decode_step"]
    if ranges:
        windows = [(r["tid"], r["ts"], r["ts"] + r["dur"]) for r in sorted(ranges, key=lambda r: r["ts"])]
    else:
        windows = _sync_windows(events, corr_gpu)
    steps = []
    for tid, t0, t1 in windows:
        step = _step(events, corr_gpu, tid, t0, t1, from_first_launch=not ranges)
        if step is not None:
            steps.append(step)
    return steps


def _is_wait(e, corr_gpu) -> float:
    """The traced end of the GPU work a host call waits for (-inf if it is no wait)."""
    name = str(e.get("name", ""))
    if e.get("cat") not in ("cuda_runtime", "cuda_driver"):
        return -math.inf
    if name in SYNC_CALLS:
        return math.inf  # resolved against the GPU work launched before it
    if name.startswith(("cudaMemcpy", "cuMemcpy")):
        for g in corr_gpu.get((e.get("args") or {}).get("correlation"), []):
            if "DtoH" in str(g.get("name", "")) or (g.get("args") or {}).get("kind") == "DtoH":
                return g["ts"] + g["dur"]
    return -math.inf


def _sync_windows(events, corr_gpu):
    counts = {}
    for e in events:
        if e.get("cat") == "cpu_op":
            counts[e["tid"]] = counts.get(e["tid"], 0) + 1
    if not counts:
        counts = {e["tid"]: 1 for e in events if e.get("cat") == "cuda_runtime"}
    tid = max(counts, key=counts.get)
    mine = sorted((e for e in events if e["tid"] == tid), key=lambda e: e["ts"])
    cuts = [e["ts"] + e["dur"] for e in mine if _is_wait(e, corr_gpu) > -math.inf]
    bounds = [mine[0]["ts"]] + cuts if mine else []
    return [(tid, a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def _step(events, corr_gpu, tid, t0, t1, from_first_launch: bool) -> Step | None:
    host = sorted(
        (e for e in events if e["tid"] == tid and t0 <= e["ts"] < t1 and _kind_row(e) is not None),
        key=lambda e: e["ts"],
    )
    if not host:
        return None
    launches = [
        i
        for i, e in enumerate(host)
        if e.get("cat") in ("cuda_runtime", "cuda_driver")
        and (LAUNCH.match(str(e.get("name", ""))) or (e.get("args") or {}).get("correlation") in corr_gpu)
        and (e.get("args") or {}).get("correlation") in corr_gpu
    ]
    if not launches and from_first_launch:
        return None
    if from_first_launch:  # no step range: the step starts at its first launch call (core.trace's rule)
        t0 = host[launches[0]]["ts"]
    gpu_rows = []
    for i in launches:
        for g in corr_gpu[(host[i].get("args") or {}).get("correlation")]:
            gpu_rows.append((g["ts"], g["dur"], _stream(g), i))
    gpu_rows.sort()
    host_ts = np.array([e["ts"] for e in host], dtype=float)
    host_end = host_ts + np.array([e.get("dur", 0.0) for e in host], dtype=float)
    wait = np.array([_is_wait(e, corr_gpu) for e in host], dtype=float)
    for i in np.flatnonzero(np.isposinf(wait)):  # a sync waits for everything launched before it
        ends = [r[0] + r[1] for r in gpu_rows if host_ts[r[3]] < host_ts[i]]
        wait[i] = max(ends) if ends else -math.inf
    host_kind = np.array([_kind_row(e) for e in host])
    for i in launches:  # a graph launch: the profiler records every node it runs
        if str(host[i].get("name", "")) in GRAPH_LAUNCHES:
            host_kind[i, 5] = len(corr_gpu[(host[i].get("args") or {}).get("correlation")])
    return Step(
        t0=float(t0),
        host_ts=host_ts,
        host_end=host_end,
        host_kind=host_kind,
        wait_target=wait,
        gpu_ts=np.array([r[0] for r in gpu_rows], dtype=float),
        gpu_dur=np.array([r[1] for r in gpu_rows], dtype=float),
        gpu_stream=np.array([r[2] for r in gpu_rows]),
        gpu_launch=np.array([r[3] for r in gpu_rows], dtype=int),
        # no launch at all (a loop of host-only ops): the step ends with its last host event
        launch_ends=host_end[launches] if launches else host_end.max(keepdims=True),
    )


def _stream(g) -> int:
    args = g.get("args") or {}
    s = args.get("stream", g.get("tid", 0))
    return int(s) if isinstance(s, (int, float)) else hash(s) % 10**6


def timeline_step(timeline: dict, per_launch: np.ndarray) -> Step:
    """A probe run's profiled step (launch intervals and GPU events) with `per_launch` events (a row of
    KINDS counts) on every launch interval."""
    cpu, gpu = timeline["cpu"], timeline["gpu"]
    ts = np.asarray(cpu["start_us"], dtype=float)
    end = ts + np.asarray(cpu["dur_us"], dtype=float)
    order = np.argsort(ts, kind="stable")
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    launched = np.asarray(gpu["launched_by"], dtype=int)
    kind = np.tile(per_launch, (len(ts), 1))
    kind[:, 5] = 0
    for i, name in enumerate(cpu["name"]):  # 'k input copies + cudaGraphLaunch': the graph's nodes
        if "GraphLaunch" in name:
            copies = re.match(r"(\d+) input cop", name)
            kind[i, 5] = max(int((launched == i).sum()) - (int(copies.group(1)) if copies else 0), 0)
    return Step(
        t0=0.0,
        host_ts=ts[order],
        host_end=end[order],
        host_kind=kind[order],
        wait_target=np.full(len(ts), -math.inf),
        gpu_ts=np.asarray(gpu["start_us"], dtype=float),
        gpu_dur=np.asarray(gpu["dur_us"], dtype=float),
        gpu_stream=np.zeros(len(gpu["start_us"]), dtype=int),
        gpu_launch=inverse[launched],
        launch_ends=end,
    )


# -- the pairs ----------------------------------------------------------------------------------------
@dataclass
class Case:
    name: str
    model: str  # the group left out together
    mode: str
    setting: str
    source: str
    untraced_us: float
    steps: list[Step] = field(repr=False)
    note: str = ""

    @property
    def traced_us(self) -> float:
        return float(np.median([s.traced_us for s in self.steps]))

    @property
    def counts(self) -> np.ndarray:
        return np.median([s.counts for s in self.steps], axis=0)

    @property
    def gpu_share(self) -> float:
        return float(np.median([s.gpu_busy_us / max(s.traced_us, 1e-9) for s in self.steps]))

    def estimate(self, cost) -> float:
        return float(np.median([estimate(s, np.asarray(cost, dtype=float)) for s in self.steps]))


def _setting(trace: dict, steps: list[Step]) -> str:
    counts = np.sum([s.counts for s in steps], axis=0)
    parts = [k for k, i in (("shapes", 4), ("stack", 3)) if counts[i] > 0]
    return "+".join(parts) or "default"


def cases_profiler_run(folder: Path) -> list[Case]:
    meta = folder / "profiler_cost.json"
    if not meta.exists():
        return []
    run = json.loads(meta.read_text())
    out = []
    for t in run["traces"]:
        path = folder / (t["trace"] or "")
        if not t["trace"] or not path.exists():
            continue
        steps = trace_steps(load(path))
        model = "micro" if t["label"].startswith("micro") else t["label"].split("_")[0]
        mode = t["label"].split("_")[1]
        before = t["untraced"]["median_us"]
        after = (t.get("untraced_after") or {}).get("median_us")
        # timed just before and just after the profile: their mean (the host drifts)
        untraced = before if after is None else (before + after) / 2
        note = "" if after is None else f"untraced before {before:.0f}, after {after:.0f}"
        name = t["label"] + "_" + t["setting"]
        out.append(Case(name, model, mode, t["setting"], "profiler_cost", untraced, steps, note))
    return out


HF_PAIRS = {  # trace -> (measured file, mode)
    "hf_llama_eager_profilerstep.json.gz": ("hf_llama_measured.json", "eager"),
    "hf_llama_eager_sync.json.gz": ("hf_llama_measured.json", "eager"),
    "hf_llama_graph.json.gz": ("hf_llama_measured.json", "graph"),
    "hf_llama_compile.json.gz": ("hf_llama_measured.json", "compile"),
    "hf_qwen2_eager_sync.json.gz": ("hf_qwen2_measured.json", "eager"),
    "hf_qwen2_graph.json.gz": ("hf_qwen2_measured.json", "graph"),
}


def cases_hf(folder: Path) -> list[Case]:
    out = []
    for trace_name, (measured_name, mode) in HF_PAIRS.items():
        if not (folder / trace_name).exists():
            continue
        measured = json.loads((folder / measured_name).read_text())["modes"].get(mode)
        if not measured:
            continue
        trace = load(folder / trace_name)
        steps = trace_steps(trace)
        model = trace_name.split("_")[1]
        name = trace_name.removesuffix(".json.gz")
        mode_name = "reduce-overhead" if mode == "compile" else mode
        out.append(
            Case(name, model, mode_name, _setting(trace, steps), "hf", measured["step_us_median"], steps)
        )
    return out


PROBE_RUNS = ("h200.json", "h200-holdout.json", "h200-small-b1.json", "h200-1b.json")
PROBE_TRACES = {  # preset -> mode family -> full trace
    "small": {"eager": "trace_eager_b1.json.gz", "graph": "trace_fused_graph_b1.json"},
    "1b": {"eager": "trace_1b_eager_b1.json.gz", "graph": "trace_1b_fused_graph_b1.json"},
}


def cases_probe(folder: Path) -> tuple[list[Case], list[Case]]:
    """(the full traces against their runs' untraced medians, the runs' timelines)."""
    full, timelines = [], []
    families = {}
    for preset, traces in PROBE_TRACES.items():
        for family, name in traces.items():
            path = folder / name
            if path.exists():
                steps = trace_steps(load(path), step_range="decode_step")
                launches = sum(len(s.launch_ends) for s in steps)
                families[(preset, family)] = (
                    steps,
                    np.sum([s.counts for s in steps], axis=0) / max(launches, 1),
                )
    for run_name in PROBE_RUNS:
        path = folder / run_name
        if not path.exists():
            continue
        run = json.loads(path.read_text())
        preset = run["model"]["config"]["name"]
        for r in run["runs"]:
            family = {"eager": "eager", "graph": "graph", "fused+graph": "graph"}.get(r["mode"])
            if family is None or (preset, family) not in families or not r.get("timeline"):
                continue
            steps, per_launch = families[(preset, family)]
            if family == "graph":  # the fused+graph trace's events per step, spread over the step's intervals
                n = len(r["timeline"]["cpu"]["start_us"])
                per_launch = np.sum([s.counts for s in steps], axis=0) / len(steps) / max(n, 1)
            model = f"probe-{preset}"
            label = f"{run_name.removesuffix('.json')} {r['mode']} b{r['batch']}"
            step = timeline_step(r["timeline"], per_launch)
            timelines.append(
                Case(label, model, r["mode"], "default", "probe run", r["step_us_median"], [step])
            )
            if (
                r["batch"] == 1
                and run_name in ("h200.json", "h200-1b.json")
                and r["mode"] in ("eager", "fused+graph")
            ):
                name = PROBE_TRACES[preset][family]
                full.append(
                    Case(name, model, r["mode"], "default", "probe trace", r["step_us_median"], steps)
                )
    return full, timelines


def all_cases(args) -> tuple[list[Case], list[Case]]:
    """Every pair under the three folders (a folder given as "-" is skipped)."""
    skip = Path("-")
    cases = cases_profiler_run(args.profiler_dir) if args.profiler_dir != skip else []
    cases += cases_hf(args.hf_dir) if args.hf_dir != skip else []
    full, timelines = cases_probe(args.probe_dir) if args.probe_dir != skip else ([], [])
    return cases + full, timelines


# -- the fit ------------------------------------------------------------------------------------------
def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares by trying every support (a handful of columns)."""
    best, best_x = math.inf, np.zeros(a.shape[1])
    cols = [j for j in range(a.shape[1]) if np.any(a[:, j])]
    for r in range(len(cols) + 1):
        for support in itertools.combinations(cols, r):
            x = np.zeros(a.shape[1])
            if support:
                sol, *_ = np.linalg.lstsq(a[:, support], b, rcond=None)
                if np.any(sol < 0):
                    continue
                x[list(support)] = sol
            err = float(np.sum((a @ x - b) ** 2))
            if err < best - 1e-12:
                best, best_x = err, x
    return best_x


def nnls_l1(a: np.ndarray, b: np.ndarray, iters: int = 50) -> np.ndarray:
    """Non-negative least absolute deviations (iteratively reweighted NNLS): one bad pair cannot pull
    the costs the way it does under squares."""
    w = np.ones(len(b))
    x = np.zeros(a.shape[1])
    for _ in range(iters):
        x = nnls(a * w[:, None], b * w)
        w = 1.0 / np.sqrt(np.maximum(np.abs(a @ x - b), 1e-3))
    return x


def consistent(c: Case) -> bool:
    """The profiler only adds host time: a pair whose untraced median is not below its traced step was
    timed at another host speed than it was traced at (the device's host drifts), and is not fitted on."""
    return c.traced_us > c.untraced_us


def has_graphs(c: Case) -> bool:
    return bool(c.counts[5] > 0)


def fittable(c: Case) -> bool:
    return c.gpu_share < HOST_BOUND and consistent(c) and not has_graphs(c)


def fit(cases: list[Case]) -> np.ndarray:
    """Costs (µs per event, PARAMS order): op, api, python and shapes from the host-bound pairs without
    graph launches, least absolute relative error of `traced - untraced = counts @ cost`; graph_node is
    left at 0 (see `fit_graph_node`)."""
    rows = [c for c in cases if fittable(c)]
    cost = np.zeros(len(PARAMS))
    if not rows:
        return cost
    mask = np.array([k in DEFAULT_PARAMS for k in PARAMS], dtype=float)
    a = np.array([(c.counts @ TO_PARAMS) * mask / c.untraced_us for c in rows])
    b = np.array([(c.traced_us - c.untraced_us) / c.untraced_us for c in rows])
    return nnls_l1(a, b)


def fit_graph_node(cases: list[Case], cost: np.ndarray) -> float:
    """The cost per node of a graph launch, from the consistent pairs that replay graphs, the other
    costs held: the median of (traced - estimate without it) / nodes per step over those pairs."""
    per_node = []
    for c in cases:
        if has_graphs(c) and consistent(c):
            gap = c.estimate(cost) - c.untraced_us
            per_node.append(gap / c.counts[5])
    return max(float(np.median(per_node)), 0.0) if per_node else 0.0


def table(cases: list[Case], cost, fitted: set | None = None) -> list[dict]:
    """One row per pair; `fitted`: the names of the pairs the costs were fitted on."""
    out = []
    for c in cases:
        est = c.estimate(cost)
        flags = []
        if not consistent(c):
            flags.append("untraced >= traced")
        if c.note:
            flags.append(c.note)
        out.append(
            {
                "case": c.name,
                "model": c.model,
                "mode": c.mode,
                "setting": c.setting,
                "source": c.source,
                "gpu_share": round(c.gpu_share, 3),
                "traced_us": round(c.traced_us, 1),
                "untraced_us": round(c.untraced_us, 1),
                "estimate_us": round(est, 1),
                "traced_over_untraced": round(c.traced_us / c.untraced_us, 3),
                "error": round(est / c.untraced_us - 1, 4),
                "change": round(est / c.traced_us - 1, 4),
                "counts": {k: round(float(v), 1) for k, v in zip(KINDS, c.counts)},
                "fitted_on": c.name in (fitted or set()),
                "note": "; ".join(flags),
            }
        )
    return out


def summary(rows: list[dict], key: str = "error") -> str:
    if not rows:
        return "none"
    errs = np.array([r[key] for r in rows])
    worst = rows[int(np.argmax(np.abs(errs)))]
    return (
        f"{len(rows)} cases, median |{key}| {np.median(np.abs(errs)) * 100:.1f} %, "
        f"worst {worst[key] * 100:+.1f} % ({worst['case']})"
    )


def _print_table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}:")
    print(
        f"  {'case':36s} {'mode':12s} {'setting':8s} {'gpu%':>4s} {'traced':>8s} {'untraced':>8s} "
        f"{'estimate':>8s} {'t/u':>5s} {'error':>7s} {'change':>7s}  note"
    )
    for r in rows:
        print(
            f"  {r['case'][:36]:36s} {r['mode'][:12]:12s} {r['setting'][:8]:8s} {r['gpu_share'] * 100:4.0f} "
            f"{r['traced_us']:8.0f} {r['untraced_us']:8.0f} {r['estimate_us']:8.0f} "
            f"{r['traced_over_untraced']:5.2f} {r['error'] * 100:+6.1f}% {r['change'] * 100:+6.1f}%  "
            f"{'fit ' if r['fitted_on'] else ''}{r['note']}"
        )
    host = [r for r in rows if r["gpu_share"] < HOST_BOUND and r["model"] != "micro"]
    clean = [r for r in host if "untraced >= traced" not in r["note"]]
    gpu = [r for r in rows if r["gpu_share"] >= GPU_BOUND]
    print(f"  host-bound models: {summary(host)}")
    print(f"  host-bound models, consistent pairs only: {summary(clean)}")
    print(
        f"  GPU-bound (GPU busy >= {GPU_BOUND:.0%} of the step), change from the trace: {summary(gpu, 'change')}"
    )


def report(args) -> dict:
    cases, timelines = all_cases(args)
    cost = fit(cases)
    node = fit_graph_node(cases, cost)
    if args.graph_nodes:
        cost[PARAMS.index("graph_node")] = node
    out = {
        "params": list(PARAMS),
        "cost_us": dict(zip(PARAMS, np.round(cost, 3).tolist())),
        "graph_node_us_fitted": round(node, 3),
        "graph_nodes_applied": bool(args.graph_nodes),
        "cases": table(cases, cost, {c.name for c in cases if fittable(c)}),
        "probe_runs": table(timelines, cost),
    }
    lomo = []
    for model in sorted({c.model for c in cases if fittable(c)} - {"micro"}):
        held = [c for c in cases if c.model == model]
        c_fit = fit([c for c in cases if c.model != model])
        if args.graph_nodes:
            c_fit[PARAMS.index("graph_node")] = fit_graph_node([c for c in cases if c.model != model], c_fit)
        for row in table(held, c_fit):
            row["fitted_without"] = model
            row["cost_us"] = dict(zip(PARAMS, np.round(c_fit, 3).tolist()))
            lomo.append(row)
    out["leave_one_model_out"] = lomo
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiler-dir", type=Path, default=ROOT / "tests/data/profiler")
    parser.add_argument("--hf-dir", type=Path, default=ROOT / "tests/data/hf")
    parser.add_argument("--probe-dir", type=Path, default=ROOT / "gpu_probe/recorded")
    parser.add_argument(
        "--graph-nodes",
        action="store_true",
        help="also take a cost per graph node off each graph launch (fitted on the graph pairs)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = report(args)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print("Profiler cost per recorded event (µs), least absolute relative error over the host-bound pairs:")
    print("  " + "  ".join(f"{k} {v:.3f}" for k, v in out["cost_us"].items()))
    print(
        f"  graph_node fitted on the graph pairs: {out['graph_node_us_fitted']:.3f} µs per node "
        f"({'applied' if out['graph_nodes_applied'] else 'not applied; --graph-nodes applies it'})"
    )
    _print_table("Pairs (traced step, untraced median, estimate)", out["cases"])
    _print_table(
        "Leave one model out (each model's pairs, costs fitted without them)", out["leave_one_model_out"]
    )
    _print_table("Probe runs (timelines; events per launch from the preset's full trace)", out["probe_runs"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
