"""Cut each trace of the H200 run down to one profiled step, deterministically.

    python tests/data/profiler/h200/trim.py SOURCE_DIR tests/data/profiler/h200

For every `SOURCE_DIR/*.json.gz` (the traces `tools/profiler_cost.py` wrote, `ProfilerStep#1..4` each),
writes `<name>.json.gz` here holding, unchanged:
- every top-level key but `traceEvents` (`launch_bound_untraced`, `deviceProperties`, ...), in order;
- the metadata events (`ph: "M"`: process and thread names);
- of the step whose `ProfilerStep#N` range (CPU) lasts the median time of the trace's steps (the
  lower one of the two middle steps where they are even), every event that starts inside its range on
  the host, every GPU event whose correlation id is one of those events' (the step's kernels run past
  the range's end), the GPU events and flow events inside the range, and its GPU-side range.

Nothing else: the other steps go. No event is edited; the kept ones are written compactly and the
file is gzip'd with no timestamp, so the output is the same byte for byte on every run. Standard
library only.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

STEP = re.compile(r"ProfilerStep#\d+$")
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}


def step_range(events: list[dict]) -> dict:
    """The CPU ProfilerStep#N range of median duration (the lower middle one for an even count)."""
    steps = [e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    steps = sorted((e for e in steps if STEP.match(str(e.get("name", "")))), key=lambda e: e["ts"])
    if not steps:
        raise SystemExit("no ProfilerStep#N range")
    by_dur = sorted(steps, key=lambda e: (e["dur"], e["ts"]))
    return by_dur[(len(by_dur) - 1) // 2]


def trim(trace: dict) -> dict:
    events = trace["traceEvents"]
    rng = step_range(events)
    t0, t1 = rng["ts"], rng["ts"] + rng["dur"]

    def inside(e) -> bool:
        return isinstance(e.get("ts"), (int, float)) and t0 <= e["ts"] <= t1

    host = [e for e in events if e.get("ph") == "X" and e.get("cat") not in GPU_CATS and inside(e)]
    corr = {(e.get("args") or {}).get("correlation") for e in host} - {None}
    keep = []
    for e in events:
        cat, ph = e.get("cat"), e.get("ph")
        if ph == "M":
            keep.append(e)
        elif ph == "X" and cat not in GPU_CATS:
            if inside(e):
                keep.append(e)
        elif ph == "X" and cat == "gpu_user_annotation":
            if e.get("name") == rng["name"]:
                keep.append(e)
        elif ph == "X":
            if (e.get("args") or {}).get("correlation") in corr or inside(e):
                keep.append(e)
        elif ph in ("s", "f"):
            if e.get("id") in corr:
                keep.append(e)
    return {k: (keep if k == "traceEvents" else v) for k, v in trace.items()}


def main(argv: list[str]) -> int:
    source, out = Path(argv[0]), Path(argv[1])
    for path in sorted(source.glob("*.json.gz")):
        trace = json.loads(gzip.decompress(path.read_bytes()))
        text = json.dumps(trim(trace), separators=(",", ":"), ensure_ascii=False).encode()
        (out / path.name).write_bytes(gzip.compress(text, compresslevel=9, mtime=0))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
