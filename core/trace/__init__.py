"""A torch.profiler trace -> its decode steps, each a `core.timeline.Timeline` with its readouts.

The one trace reader of this project: the probe's own traces, and any trace a user brings (vLLM, SGLang,
Hugging Face transformers, torch.compile, their own code). numpy and the standard library only, so the probe
and the page read traces on machines without torch, and nothing here needs the simulator's timing model (what
that makes of a trace is `sim.trace`).

`analyse(file)` reads a trace and cuts it into steps. On the way (each module one step of it, each importing only
the ones above it):

- `events`: the file -> its events, one at a time (gzip, streamed JSON, the limits on a file);
  `fields`, `shapes`, `recorded`: an event's fields made safe, record_shapes' inputs, the recorder's block;
- `read`: the events -> `Trace`, the columns the lanes need;
- `calls`: which calls are launches, and which launch submitted each GPU event;
- `steps`: where the steps are (`find_steps`: a named range, ProfilerStep#N, graph launches, synchronisation);
- `host`: each host row's recorded events, for taking the profiler's cost out (`HostRecord`);
- `lanes`: one step's lanes and readouts (`step_timeline` -> `TraceStep`);
- `messages`: `TraceError` and the notes on a step whose trace lacks records; `names`: kernels by name.

On a read trace, needing only the trace: `families` (what a kernel is, from its name), `kernels` (per kernel:
calls, time, launch cost; graph replays told apart), `diff` (two traces by kernel family). And `chrome` writes
any `Timeline` back out as a Chrome trace. Below, the names the rest of the project imports from `core.trace`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.trace.events import MAX_TEXT_CHARS
from core.trace.host import HostRecord, count_events
from core.trace.lanes import TraceStep, step_timeline
from core.trace.messages import TraceError
from core.trace.names import kernels_per_layer, short_kernel_name
from core.trace.read import EVENT_KINDS, MAX_EVENTS, MAX_GPU_EVENTS, Trace, read_trace
from core.trace.recorded import UNTRACED_KEY, untraced_block
from core.trace.shapes import op_inputs, op_signature
from core.trace.steps import STEP_ANNOTATION, StepWindow, find_steps

__all__ = [
    "EVENT_KINDS",
    "MAX_EVENTS",
    "MAX_GPU_EVENTS",
    "MAX_TEXT_CHARS",
    "STEP_ANNOTATION",
    "UNTRACED_KEY",
    "HostRecord",
    "StepWindow",
    "Trace",
    "TraceError",
    "TraceReport",
    "TraceStep",
    "analyse",
    "count_events",
    "find_steps",
    "kernels_per_layer",
    "op_inputs",
    "op_signature",
    "read_trace",
    "short_kernel_name",
    "step_timeline",
    "untraced_block",
]


@dataclass(frozen=True, eq=False)
class TraceReport:
    """Every step of one trace file (one rank), with the rule that found them."""

    trace: Trace
    rule: str
    steps: tuple[TraceStep, ...]

    def median(self, key: str) -> float:
        return float(np.median([s.summary()[key] for s in self.steps]))

    def spread(self, key: str) -> tuple[float, float]:
        """(smallest, largest) of a step readout over the steps."""
        values = [s.summary()[key] for s in self.steps]
        return float(min(values)), float(max(values))

    def notes(self) -> list[str]:
        """What the trace lacks, step by step: 'step 3: 40 launch calls ... have no GPU event ...'."""
        return [f"step {s.index}: {note}" for s in self.steps for note in s.notes]

    def summary(self) -> dict:
        keys = ("step_us", "gpu_busy_us", "cpu_launch_us", "utilisation", "kernels", "launches")
        return {
            "file": self.trace.name,
            "device": self.trace.device,
            "rule": self.rule,
            "steps": [s.summary() for s in self.steps],
            "median": {k: self.median(k) for k in keys},
            "spread": {k: list(self.spread(k)) for k in keys},
            "notes": self.notes(),
        }


def analyse(
    source, step_range: str | None = None, name: str | None = None, label: str | None = None
) -> TraceReport:
    """Read a trace and cut it into steps: the reader's one entry point for a file.

    `label` names every step's timeline (default: the file name and the step's index)."""
    trace = source if isinstance(source, Trace) else read_trace(source, name=name)
    rule, windows = find_steps(trace, step_range)
    steps = []
    for w in windows:
        try:
            steps.append(step_timeline(trace, w, label=label or f"{trace.name} · step {w.index}"))
        except TraceError:
            continue  # a window whose launches have no GPU events (warm-up host work) is not a step
    if not steps:
        raise TraceError(f"{trace.name}: none of its steps has GPU events matched to its launches")
    return TraceReport(trace=trace, rule=rule, steps=tuple(steps))
