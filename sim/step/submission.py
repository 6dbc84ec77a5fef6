"""How the host hands one step's kernels to the GPU: derived from the mode once, for both schedulers.

A mode's row (`core.step_plan.Mode`) says which kernels run and whether a graph is replayed. On
one hardware that fixes everything the schedule needs besides the kernels' own work:

- the host's calls: a launch per kernel (eager), or one call for the whole step (a graph replay,
  or the one launch of a persistent kernel) -- the CPU lane;
- when each kernel may start (the synchronisation): an eager kernel once its own launch is
  submitted; a replayed node or a persistent kernel's phase once the one call has returned;
- what separates two kernels on the GPU: the node gap between kernels (queued or replayed), none
  between the phases of one kernel;
- each kernel's fixed cost: a kernel's latency, or a grid barrier between phases.

`sim.step.schedule` draws one step from it (`timeline`) and sweeps many batches with the same figures
(`Submission.step_end_us`), so the two schedulers cannot disagree about a mode.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.step_plan import Mode
from core.timeline import Timeline
from sim.config import HardwareConfig
from sim.timing import eager_timeline, one_call_timeline, stream_end_us


@dataclass(frozen=True, slots=True)
class Submission:
    host_calls: int  # intervals on the CPU lane: one per kernel, or one for the step
    host_us: float  # the CPU lane's total
    launch_us: float  # host time per kernel before it is ready (eager launches); 0 after one call
    first_ready_us: float  # when the first kernel may start beyond its own launch (the one call's end)
    gap_us: float  # GPU time between two kernels (a node gap; none between one kernel's phases)
    latency_us: float  # each kernel's fixed GPU cost: a kernel's latency, or a barrier between phases
    host_name: str  # the one call's name on the CPU lane ("" with a launch per kernel)

    @property
    def per_kernel(self) -> bool:
        """The host launches each kernel itself."""
        return self.launch_us > 0

    def timeline(self, dur_us, names, label: str = "") -> Timeline:
        """One step: these kernels, submitted this way."""
        if self.per_kernel:
            return eager_timeline(dur_us, names, self.launch_us, self.gap_us, label=label)
        return one_call_timeline(dur_us, names, self.host_us, self.gap_us, self.host_name, label=label)

    def step_end_us(self, segments) -> np.ndarray:
        """A step's time from its kernels as repeated segments [(dur_us, repeats)], without drawing it: the
        last kernel's end or the host's, whichever is later (`sim.timing.stream_end_us`)."""
        parts = [(self.launch_us, dur, self.gap_us, repeats) for dur, repeats in segments]
        return np.maximum(stream_end_us(self.first_ready_us, parts), self.host_us)


def submission(hw: HardwareConfig, m: Mode, n_kernels: int, bucket: int | None = None) -> Submission:
    """How `m` submits a step of `n_kernels` kernels on `hw`. A graph mode replays (`bucket`: the size
    captured, for the CPU lane's name); a plan above its largest bucket passes the mode it runs as."""
    latency = hw.barrier_us if m.one_kernel else hw.min_kernel_us
    gap = 0.0 if m.one_kernel else hw.graph_node_gap_us
    nodes = 1 if m.one_kernel else n_kernels
    if m.graphs:
        host = float(hw.replay_cost.host_us(nodes))
        what = "one persistent kernel" if m.one_kernel else f"{nodes} nodes"
        name = f"cudaGraphLaunch (bucket {bucket}, {what})"
        return Submission(1, host, 0.0, host, gap, latency, name)
    launch = hw.eager_launch_us * m.launch_scale
    if m.one_kernel:  # one launch, its phases back to back once it is submitted
        return Submission(1, launch, 0.0, launch, gap, latency, "launch persistent kernel")
    return Submission(n_kernels, n_kernels * launch, launch, 0.0, gap, latency, "")
