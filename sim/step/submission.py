"""How the host hands one step's kernels to the GPU: one `Submission`, for both schedulers.

A mode's kernel set says which way it is submitted (`sim.step.kernel_sets`: `kernel_by_kernel`, or
`as_one_kernel`), its row (`core.step_plan.Mode`) whether a graph is replayed and what an eager launch
costs. On one hardware that fixes everything the schedule needs besides the kernels' own work:

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
    phases: bool = False  # the GPU lane's intervals are the phases of one kernel, not kernels

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


def _replayed(
    hw: HardwareConfig, nodes: int, gap_us: float, latency_us: float, what: str, bucket, phases: bool = False
) -> Submission:
    """One graph replay of `nodes` nodes (`bucket`: the size captured, for the CPU lane's name)."""
    host = float(hw.replay_cost.host_us(nodes))
    name = f"cudaGraphLaunch (bucket {bucket}, {what})"
    return Submission(1, host, 0.0, host, gap_us, latency_us, name, phases)


def kernel_by_kernel(
    hw: HardwareConfig, m: Mode, n_kernels: int, bucket: int | None = None, latency_us: float | None = None
) -> Submission:
    """Each kernel its own launch (eager), or its own node of one replayed graph: the node gap between any two,
    each paying a kernel's latency (or `latency_us`)."""
    latency = hw.min_kernel_us if latency_us is None else latency_us
    gap = hw.graph_node_gap_us
    if m.graphs:
        return _replayed(hw, n_kernels, gap, latency, f"{n_kernels} nodes", bucket)
    launch = hw.eager_launch_us * m.launch_scale
    return Submission(n_kernels, n_kernels * launch, launch, 0.0, gap, latency, "")


def as_one_kernel(hw: HardwareConfig, m: Mode, n_phases: int, bucket: int | None = None) -> Submission:
    """The step as one persistent kernel of `n_phases` phases: one launch (or a graph of one node), then the
    phases back to back, no gap between them, each paying a grid barrier (`HardwareConfig.barrier_us`)."""
    if m.graphs:
        return _replayed(hw, 1, 0.0, hw.barrier_us, "one persistent kernel", bucket, phases=True)
    launch = hw.eager_launch_us * m.launch_scale
    return Submission(1, launch, 0.0, launch, 0.0, hw.barrier_us, "launch persistent kernel", phases=True)
