"""Record a trace that carries its own untraced step time.

`torch.profiler` adds its own host cost to every op and launch it records, so a host-bound
(launch-bound) step is traced slower than it runs: 1.3x to 2.3x on an H200 for Hugging Face
decode loops, eager or `torch.compile` without CUDA graphs. This helper times your loop first
*without* the profiler, then profiles a few steps, and writes the untraced timing into the trace
itself, so whoever reads the trace later (this project's page and CLI) quotes the real step.

torch only (no numpy, no project imports)::

    import torch
    from gpu_probe.recorder import record

    def step():                      # one step of YOUR loop, as it runs: build the inputs,
        ids = next_ids.to("cuda", non_blocking=True)   # copy them in, run the model,
        logits = model(ids)                              # read the token back
        return int(logits[:, -1].argmax())

    rec = record(step, "decode.json.gz", steps=50, profile_steps=4)
    print(rec.untraced["median_us"], rec.untraced["timer"], rec.trace_path)

`record(step, trace_path, steps=50, warmup=5, profile_steps=4, device=None, record_shapes=False,
with_stack=False, profile_memory=False)`:

1. runs `warmup` steps untimed, then times `steps` steps one at a time. Each step starts on an idle
   device: on CUDA the recorder synchronises after every step and times it with CUDA events
   recorded on the current stream around the call (`timer: "cuda_events"`); without CUDA it
   reads the host clock around the call (`timer: "host_clock"`). The host clock around the call
   (plus the synchronisation) is kept beside the CUDA events as `host_median_us`.
2. profiles `profile_steps` steps after one profiled warm-up step, marked `ProfilerStep#N`
   (`torch.profiler.schedule(wait=0, warmup=1, active=profile_steps, repeat=1)`), with the
   profiler settings given, and exports the Chrome trace to `trace_path` (`.json`, or `.json.gz`
   written gzip'd).
3. the untraced timing goes into the trace through `prof.add_metadata_json(METADATA_KEY, ...)`.
   The exported JSON then holds it as a top-level key beside `schemaVersion` and
   `deviceProperties` (written before `traceEvents`), on torch 2.11 (CUDA) and 2.13 (CPU) alike::

       {"schemaVersion": 1, "deviceProperties": [...], ...,
        "launch_bound_untraced": {"schema": 1, "steps": 50, "median_us": 7712.4, "p10_us": 7650.1,
            "p90_us": 7801.9, "host_median_us": 7730.2, "timer": "cuda_events",
            "torch": "2.11.0+cu130", "device": "NVIDIA H200", "profiled_steps": 4,
            "record_shapes": false, "with_stack": false},
        "traceEvents": [...]}

   The recorder reads the exported file's head back; if a torch build dropped the block, it is
   inserted there (as the first key) and `Recording.metadata_written_by` says `"recorder"` instead
   of `"profiler"`.

The schema (`schema: 1`): `steps` (int, timed steps), `median_us`, `p10_us`, `p90_us` (floats, µs,
percentiles by linear interpolation), `host_median_us` (float), `timer` (`"cuda_events"` or
`"host_clock"`), `torch` (version string), `device` (its name), `profiled_steps`, `record_shapes`,
`with_stack`. A reader should check `schema == 1` and that the numbers are finite and positive.

The step function is called with no arguments; its return value is ignored (return the token you
read so the work is not optimised away). A loop that already synchronises (`.item()`) is timed as
it is; one that does not is made to wait for the device after each step. Work on streams other
than the current one is waited for (device synchronisation) but CUDA events time the current
stream of the current device: time such loops by the host clock, `timer="host_clock"`.

Bad arguments raise `ValueError` with one sentence saying which and why.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

METADATA_KEY = "launch_bound_untraced"
SCHEMA = 1
TIMERS = ("cuda_events", "host_clock")
MAX_STEPS = 100_000
MAX_PROFILE_STEPS = 1_000
_HEAD_BYTES = 1 << 20  # the metadata block is looked for in the exported file's first MiB


@dataclass(frozen=True)
class Recording:
    """What `record` measured and wrote."""

    untraced: dict  # the metadata block written into the trace (schema above)
    trace_path: Path
    metadata_written_by: str  # "profiler" (add_metadata_json landed) or "recorder" (inserted after export)
    step_us: list = field(repr=False, default_factory=list)  # every timed step, µs, in order
    host_us: list = field(repr=False, default_factory=list)  # host clock per timed step, µs


def percentile(values, q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(float(v) for v in values)
    if not ordered:
        raise ValueError("no values to take a percentile of")
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _count(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, not {type(value).__name__} {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low:,} and {high:,}, not {value:,}")
    return value


def _check(step, trace_path, steps, warmup, profile_steps, device, timer):
    if not callable(step):
        raise ValueError(f"step must be a function of no arguments (one step of your loop), not {step!r}")
    _count("steps", steps, 1, MAX_STEPS)
    _count("warmup", warmup, 0, MAX_STEPS)
    _count("profile_steps", profile_steps, 1, MAX_PROFILE_STEPS)
    if not isinstance(trace_path, (str, os.PathLike)):
        raise ValueError(f"trace_path must be a path ending in .json or .json.gz, not {trace_path!r}")
    path = Path(trace_path)
    if not (path.name.endswith(".json") or path.name.endswith(".json.gz")):
        raise ValueError(f"trace_path must end in .json or .json.gz: {str(path)!r}")
    if device is None:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as err:
            raise ValueError(f"device must name a torch device such as 'cuda' or 'cpu': {err}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device is 'cuda' but this torch sees no CUDA device")
    if timer is None:
        timer = "cuda_events" if device.type == "cuda" else "host_clock"
    if timer not in TIMERS:
        raise ValueError(f"timer must be one of {', '.join(TIMERS)}, not {timer!r}")
    if timer == "cuda_events" and device.type != "cuda":
        raise ValueError("timer 'cuda_events' needs a CUDA device")
    return path, device, timer


def time_untraced(step, steps: int = 50, warmup: int = 5, device=None, timer: str | None = None) -> dict:
    """Time `steps` steps without the profiler; returns the metadata block (no profiler fields) plus
    the per-step lists under `_step_us` and `_host_us` (not written into the trace)."""
    _, device, timer = _check(step, "x.json", steps, warmup, 1, device, timer)
    cuda = device.type == "cuda"

    def wait():
        if cuda:
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        step()
        wait()
    step_us, host_us = [], []
    for _ in range(steps):
        if timer == "cuda_events":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            t0 = time.perf_counter()
            step()
            end.record()
            wait()
            host_us.append((time.perf_counter() - t0) * 1e6)
            step_us.append(start.elapsed_time(end) * 1e3)
        else:
            t0 = time.perf_counter()
            step()
            wait()
            host_us.append((time.perf_counter() - t0) * 1e6)
            step_us.append(host_us[-1])
    return {
        "schema": SCHEMA,
        "steps": steps,
        "median_us": round(percentile(step_us, 50), 3),
        "p10_us": round(percentile(step_us, 10), 3),
        "p90_us": round(percentile(step_us, 90), 3),
        "host_median_us": round(percentile(host_us, 50), 3),
        "timer": timer,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "_step_us": step_us,
        "_host_us": host_us,
    }


def _head_has_key(path: Path, key: str) -> bool:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        head = f.read(_HEAD_BYTES)
    return f'"{key}"'.encode() in head.split(b'"traceEvents"', 1)[0]


def _insert_key(path: Path, key: str, value: dict) -> None:
    """Put `"key": value` first in the exported JSON object (a streamed copy, the trace untouched)."""
    gz = path.name.endswith(".gz")
    opener = gzip.open if gz else open
    fd, tmp = tempfile.mkstemp(suffix=".json.gz" if gz else ".json", dir=path.parent)
    os.close(fd)
    with opener(path, "rb") as src, opener(tmp, "wb") as dst:
        head = src.read(_HEAD_BYTES)
        brace = head.index(b"{")
        dst.write(
            head[: brace + 1] + f"\n  {json.dumps(key)}: {json.dumps(value)},".encode() + head[brace + 1 :]
        )
        shutil.copyfileobj(src, dst)
    os.replace(tmp, path)


def profile_steps_into(
    step,
    trace_path,
    metadata: dict,
    profile_steps: int = 4,
    device=None,
    record_shapes: bool = False,
    with_stack: bool = False,
    profile_memory: bool = False,
) -> str:
    """Profile `profile_steps` steps (after one profiled warm-up step) into `trace_path`, with
    `metadata` under METADATA_KEY. Returns who wrote the block: "profiler" or "recorder"."""
    path, device, _ = _check(step, trace_path, 1, 0, profile_steps, device, None)
    path.parent.mkdir(parents=True, exist_ok=True)
    cuda = device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    text = json.dumps(metadata)
    with torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=profile_steps, repeat=1),
        record_shapes=record_shapes,
        with_stack=with_stack,
        profile_memory=profile_memory,
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for i in range(profile_steps + 1):
            if i in (1, profile_steps):  # while recording (older torch keeps metadata only then)
                prof.add_metadata_json(METADATA_KEY, text)
            step()
            if cuda:
                torch.cuda.synchronize(device)
            prof.step()
    if _head_has_key(path, METADATA_KEY):
        return "profiler"
    _insert_key(path, METADATA_KEY, metadata)
    return "recorder"


def record(
    step,
    trace_path,
    steps: int = 50,
    warmup: int = 5,
    profile_steps: int = 4,
    device=None,
    record_shapes: bool = False,
    with_stack: bool = False,
    profile_memory: bool = False,
    timer: str | None = None,
) -> Recording:
    """Time `steps` steps of `step` without the profiler, then profile `profile_steps` of them into
    `trace_path` with the untraced timing in the trace's metadata (module docstring)."""
    path, device, timer = _check(step, trace_path, steps, warmup, profile_steps, device, timer)
    for name, flag in (
        ("record_shapes", record_shapes),
        ("with_stack", with_stack),
        ("profile_memory", profile_memory),
    ):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be True or False, not {flag!r}")
    timing = time_untraced(step, steps=steps, warmup=warmup, device=device, timer=timer)
    step_us, host_us = timing.pop("_step_us"), timing.pop("_host_us")
    block = {
        **timing,
        "profiled_steps": profile_steps,
        "record_shapes": record_shapes,
        "with_stack": with_stack,
    }
    who = profile_steps_into(
        step,
        path,
        block,
        profile_steps=profile_steps,
        device=device,
        record_shapes=record_shapes,
        with_stack=with_stack,
        profile_memory=profile_memory,
    )
    return Recording(
        untraced=block, trace_path=path, metadata_written_by=who, step_us=step_us, host_us=host_us
    )


def read_untraced(trace: dict) -> dict | None:
    """The metadata block of a loaded trace (the JSON object), if it is there and well formed, else None.

    The same checks as the project's trace reader (core.trace.untraced_block): schema 1, the three figures
    positive finite numbers of at most 1e9 µs in order (p10 <= median <= p90), steps >= 1, a known timer."""
    block = trace.get(METADATA_KEY) if isinstance(trace, dict) else None
    if not isinstance(block, dict) or type(block.get("schema")) is not int or block["schema"] != SCHEMA:
        return None
    nums = [block.get(k) for k in ("p10_us", "median_us", "p90_us")]
    if not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 < v <= 1e9
        for v in nums
    ):
        return None
    if not nums[0] <= nums[1] <= nums[2]:
        return None
    if not isinstance(block.get("steps"), int) or block["steps"] < 1 or block.get("timer") not in TIMERS:
        return None
    return block
