"""A torch.profiler Chrome trace of one decode step -> `core.timeline.Timeline`.

Works on the exported JSON (plain dicts, no torch needed), so the parser is tested on a
real trace recorded on the H200 and checked into `tests/data/`.

How the lanes are built:

- The step is the CPU range annotated `STEP_ANNOTATION` (`record_function` around one
  step plus its synchronize); time 0 is that range's start.
- CPU lane: the runtime/driver calls that submit GPU work (`cudaLaunchKernel*`,
  `cuLaunchKernel*` for Triton, `cudaGraphLaunch`, `cudaMemcpyAsync`, `cudaMemsetAsync`, or any
  call whose correlation id a GPU event carries). Interval i spans from the end of launch
  i-1's call (or the step start) to the end of launch i's call: the host's whole cost of
  building and submitting that launch -- Python, the dispatcher, argument packing and the
  runtime call itself. The intervals therefore tile the host's time up to the last launch.
- A graph step: every launch up to and including the (last) `cudaGraphLaunch` merges into one
  interval named after the input copies and the graph launch, as the simulator draws it.
- GPU lane: kernel, memcpy and memset events whose correlation id belongs to one of the
  step's launches (kernels replayed from a graph carry the graph launch's id).
  `launched_by` maps each to its CPU interval.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.timeline import Timeline

STEP_ANNOTATION = "decode_step"
API_CATEGORIES = ("cuda_runtime", "cuda_driver")
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
_LAUNCH_PREFIXES = (
    "cudaLaunch",
    "cuLaunch",
    "cudaGraphLaunch",
    "cuGraphLaunch",
    "cudaMemcpyAsync",
    "cuMemcpyAsync",
    "cudaMemsetAsync",
    "cuMemsetAsync",
    "cuMemcpyDtoDAsync",
    "cuMemcpyHtoDAsync",
)
_GRAPH_LAUNCH = ("cudaGraphLaunch", "cuGraphLaunch")


@dataclass(frozen=True, slots=True)
class TraceStep:
    """One profiled step: its timeline plus the counts read off the trace."""

    timeline: Timeline
    kernels_per_step: int  # GPU events in the step (kernels, copies, memsets)
    launches: int  # CPU launch calls before merging a graph step into one interval
    graph_launches: int
    kernel_names: tuple[str, ...]


def load_trace(source) -> dict:
    """A Chrome trace as a dict, from a path (optionally .gz), bytes or an already-parsed dict."""
    if isinstance(source, dict):
        return source
    if isinstance(source, (str, Path)):
        path = Path(source)
        raw = path.read_bytes()
        if path.suffix == ".gz":
            import gzip

            raw = gzip.decompress(raw)
    else:
        raw = bytes(source)
    return json.loads(raw)


def _corr(event: dict) -> int | None:
    value = (event.get("args") or {}).get("correlation")
    return int(value) if isinstance(value, (int, float)) else None


def _is_launch_name(name: str) -> bool:
    return name.startswith(_LAUNCH_PREFIXES)


def parse_step(
    trace, label: str = "", step_name: str = STEP_ANNOTATION, merge_graph: bool = True
) -> TraceStep:
    """Build the timeline of the (last) annotated step in a Chrome trace."""
    events = [e for e in load_trace(trace).get("traceEvents", []) if e.get("ph") == "X"]
    steps = [e for e in events if e.get("name") == step_name and e.get("cat") == "user_annotation"]
    if not steps:
        raise ValueError(f"trace: no CPU range named {step_name!r}")
    step = max(steps, key=lambda e: float(e["ts"]))
    t0, t1 = float(step["ts"]), float(step["ts"]) + float(step.get("dur", 0))

    gpu = [e for e in events if e.get("cat") in GPU_CATEGORIES and _corr(e) is not None]
    gpu_corrs = {_corr(e) for e in gpu}
    api = [
        e
        for e in events
        if e.get("cat") in API_CATEGORIES
        and t0 <= float(e["ts"]) <= t1
        and (_is_launch_name(e.get("name", "")) or _corr(e) in gpu_corrs)
    ]
    launches = _outermost(sorted(api, key=lambda e: float(e["ts"])))
    if not launches:
        raise ValueError("trace: the step has no launch calls")

    launch_corrs = {_corr(e): i for i, e in enumerate(launches) if _corr(e) is not None}
    gpu = sorted((e for e in gpu if _corr(e) in launch_corrs), key=lambda e: float(e["ts"]))
    if not gpu:
        raise ValueError("trace: no GPU events belong to the step's launches (was CUDA profiled?)")
    first_kernel = {}
    for e in gpu:
        first_kernel.setdefault(_corr(e), e.get("name", "?"))

    ends = np.array([float(e["ts"]) + float(e.get("dur", 0)) for e in launches]) - t0
    starts = np.concatenate(([0.0], ends[:-1]))
    names = [_launch_label(e, first_kernel.get(_corr(e))) for e in launches]
    owner = np.array([launch_corrs[_corr(e)] for e in gpu], np.int64)

    graph_idx = [i for i, e in enumerate(launches) if e.get("name", "").startswith(_GRAPH_LAUNCH)]
    if merge_graph and graph_idx:
        last = graph_idx[-1]
        copies = last + 1 - len(graph_idx)
        merged = f"{copies} input copies + cudaGraphLaunch" if copies else "cudaGraphLaunch"
        if len(graph_idx) > 1:
            merged = f"{copies} input copies + {len(graph_idx)} cudaGraphLaunch"
        starts = np.concatenate(([0.0], starts[last + 1 :]))
        ends = np.concatenate(([ends[last]], ends[last + 1 :]))
        names = [merged] + names[last + 1 :]
        owner = np.where(owner <= last, 0, owner - last)

    gpu_start = np.array([float(e["ts"]) for e in gpu]) - t0
    timeline = Timeline(
        cpu_start=starts,
        cpu_dur=ends - starts,
        cpu_names=tuple(names),
        gpu_start=np.maximum(gpu_start, 0.0),
        gpu_dur=np.array([float(e.get("dur", 0)) for e in gpu]),
        gpu_names=tuple(e.get("name", "?") for e in gpu),
        launched_by=owner,
        source="measured",
        label=label,
    )
    return TraceStep(
        timeline=timeline,
        kernels_per_step=len(gpu),
        launches=len(launches),
        graph_launches=len(graph_idx),
        kernel_names=tuple(e.get("name", "?") for e in gpu),
    )


def _outermost(api: list[dict]) -> list[dict]:
    """Drop calls nested inside another kept call (a runtime launch can show its driver call too)."""
    kept, end = [], -np.inf
    for e in api:
        ts = float(e["ts"])
        if ts < end:
            continue
        kept.append(e)
        end = ts + float(e.get("dur", 0))
    return kept


def _launch_label(event: dict, kernel: str | None) -> str:
    api = event.get("name", "?")
    return f"{api}: {short_kernel_name(kernel)}" if kernel else api


def short_kernel_name(name: str, limit: int = 60) -> str:
    """A kernel's name without return type, template arguments and parameter list."""
    if name.startswith("void "):
        name = name[5:]
    depth, out = 0, []
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    short = "".join(out).strip() or name
    return short if len(short) <= limit else short[: limit - 1] + "…"


def kernels_per_layer(names, n_layers: int) -> tuple[int, bool]:
    """Kernels per decoder layer, read off the step's kernel sequence.

    Finds the longest block of kernel names that repeats `n_layers` times in a row (the layers
    run identical kernels), so everything before and after -- embedding, input copies, final
    norm, LM head -- is left out without knowing which kernel is which. Longest, not shortest:
    two equal neighbours inside a layer must not pass for a period of 1. Longer false periods
    cannot occur: n_layers repeats of a longer block would not fit in the step. Where the
    first or last layer differs (a compiler fusing across the boundary), n_layers - 1 or - 2
    repeats are accepted with exact=False; the repeats must cover at least half the step.
    With no such repeat the answer is
    len(names) // n_layers, exact=False.
    """
    names = list(names)
    total = len(names)
    for repeats in (n_layers, n_layers - 1, n_layers - 2):
        if repeats < 2:
            break
        # The layers are most of a step: a repeat covering less than half of it is a coincidence.
        for period in range(total // repeats, -(-total // (2 * repeats)) - 1, -1):
            if period and _repeats_somewhere(names, period, repeats):
                return period, repeats == n_layers
    return total // max(n_layers, 1), False


def _repeats_somewhere(names: list, period: int, repeats: int) -> bool:
    span = period * repeats
    for offset in range(0, len(names) - span + 1):
        if names[offset : offset + span - period] == names[offset + period : offset + span]:
            return True
    return False


def write_trace_copy(trace: dict, path) -> None:
    Path(path).write_text(json.dumps(trace), encoding="utf-8")
