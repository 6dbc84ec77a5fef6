"""The one timing model: what a kernel costs, when it starts, and what a graph replay adds.

Every engine of this project that predicts a step uses these functions: the page's
simulator (`sim.step.schedule`), the calibrated probe model (`sim.calibration`) and the
what-ifs on an uploaded trace.

- A kernel costs a fixed latency for its family (launch on the GPU, fill and drain of
  its grid) plus the larger of bytes over the family's bandwidth and FLOPs over its
  matrix rate: `kernel_us`. An all-reduce on several GPUs costs its own latency α plus its bytes
  over its bandwidth β: `AllReduceCost` (the sharded kernels of `sim.step.kernels` and the fits of
  `sim.step.tensor_parallel` both use it).
- Kernels of one stream run in order: kernel i starts when it is ready (submitted by the
  host) and the one before it has ended, plus the gap between them: `schedule_starts` gives
  every start, `stream_end_us` only the last kernel's end, for a stream of repeated segments
  (a step's layers) without expanding them -- the same recurrence, unrolled (a test checks
  one against the other).
- A CUDA graph replay is one host call, fixed plus a little per node, after the step's
  inputs are copied into the graph's static buffers; the nodes start once the call has
  returned (a graph holding memset nodes is submitted in pieces instead: its nodes start as
  the call reaches them, and the call grows with the batch), and run back to back, `node_gap_us`
  apart (fill and drain between dependent kernels, which
  programmatic dependent launch partly hides, so it may be negative: the next kernel's
  prologue overlaps the previous one's tail): `GraphReplayCost`, `graph_replay_timeline`.
- A profiled step pays `torch.profiler`'s own host cost for every event it records (an op, an API call, a
  Python call, an op's shapes), and its own host work runs slower: `ProfilerCost`. Taking it out of each host
  interval, the step's own kernels rescheduled by `schedule_starts`, gives the step as it runs without the
  profiler (`sim.trace.untraced.untraced`).

numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from core.timeline import Timeline


# -- one kernel ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KernelFamilyCost:
    """How fast one family of kernels (GEMV, tiled GEMM, attention, elementwise, ...) runs."""

    latency_us: float  # an empty kernel of this family: launch on the GPU, fill and drain
    GBps: float  # effective bandwidth of its memory traffic
    TFLOPs: float = float("inf")  # effective matrix rate (inf: never compute-bound)


def kernel_us(
    bytes_moved, flops, latency_us, GBps, TFLOPs=float("inf"), issue_GBps=float("inf")
) -> np.ndarray:
    """GPU time of a kernel: latency + max(bytes / bandwidth, FLOPs / matrix rate + bytes / issue rate).
    Broadcasts.

    The issue rate is for a product on CUDA cores (a GEMV, the persistent kernel's phases): besides one FMA
    per FLOP pair, it issues a few instructions per byte it streams (loads, conversions, addresses), and
    once the rows make the FMAs many, the instructions, not the memory, set its pace (inf: never)."""
    bytes_moved = np.asarray(bytes_moved, np.float64)
    memory_us = bytes_moved / (np.asarray(GBps, np.float64) * 1e3)  # GB/s = 1e3 B/µs
    math_us = np.asarray(flops, np.float64) / (np.asarray(TFLOPs, np.float64) * 1e6)  # TFLOP/s = 1e6 FLOP/µs
    math_us = math_us + bytes_moved / (np.asarray(issue_GBps, np.float64) * 1e3)
    return np.asarray(latency_us, np.float64) + np.maximum(memory_us, math_us)


def family_kernel_us(bytes_moved, flops, family: KernelFamilyCost) -> np.ndarray:
    return kernel_us(bytes_moved, flops, family.latency_us, family.GBps, family.TFLOPs)


@dataclass(frozen=True, slots=True)
class AllReduceCost:
    """α + bytes / β for one all-reduce on `tp` GPUs, and where α and β come from (`sim.step.tensor_parallel`
    gives the published figures and fits them to a probe run)."""

    tp: int
    latency_us: float  # α
    GBps: float  # β: message bytes per second beyond α (not bus bandwidth)
    source: str

    def us(self, nbytes) -> np.ndarray:
        return family_kernel_us(nbytes, 0.0, KernelFamilyCost(self.latency_us, self.GBps))


# -- one stream ------------------------------------------------------------------------
def schedule_starts(ready_us, dur_us, gap_us=0.0) -> np.ndarray:
    """Start of each kernel of one stream (last axis): start[i] = max(ready[i], end[i-1] + gap[i]).

    `ready` is when the host has submitted kernel i; `gap[i]` is the GPU's cost between
    kernel i-1 and kernel i (gap[0] is unused). Unrolled without a loop: with offsets
    C_0 = 0, C_i = C_{i-1} + dur[i-1] + gap[i], start_i = C_i + max_{j<=i}(ready_j - C_j).
    Leading axes broadcast (one row per batch size, say).
    """
    ready = np.asarray(ready_us, np.float64)
    dur = np.asarray(dur_us, np.float64)
    shape = np.broadcast_shapes(ready.shape, dur.shape, np.shape(gap_us))
    ready, dur = np.broadcast_to(ready, shape), np.broadcast_to(dur, shape)
    gap = np.broadcast_to(np.asarray(gap_us, np.float64), shape)
    step = np.zeros(shape)
    step[..., 1:] = dur[..., :-1] + gap[..., 1:]
    offset = np.cumsum(step, axis=-1)
    return offset + np.maximum.accumulate(ready - offset, axis=-1)


def stream_end_us(first_ready_us, segments) -> np.ndarray:
    """End of the last kernel of one stream, the stream given as repeated segments: no kernel loop.

    The same recurrence as `schedule_starts` (its last kernel's end), for a step whose layers
    repeat: `segments` is a sequence of (host_us, dur_us, gap_us, repeats), each segment's
    kernels run `repeats` times in a row. The host submits kernel i at
    ready_i = first_ready + Σ_{k<=i} host_k (eager: `first_ready` 0 and host_k each launch's
    cost; a graph replay: the call's fixed cost and the per-node cost, as `GraphReplayCost`).
    The last kernel ends at max_i (ready_i + d_i + Σ_{k>i} (gap_k + d_k)): the last kernel that
    waited for the host, then the rest back to back. With Q_i = Σ_{k<=i} (host_k - gap_k - d_k)
    that is first_ready + Σ_k (d_k + gap_k) + max_i (Q_i + d_i), and a segment repeated r times
    adds r times its sum to Q, so its maximum is its first copy's plus max(0, (r-1)·sum).
    Leading axes of `dur_us` (one row per batch size, say) broadcast.
    """
    total, lead, best = 0.0, 0.0, -np.inf  # Σ (d + gap); Q before the segment; max (Q_i + d_i)
    for host_us, dur_us, gap_us, repeats in segments:
        dur = np.asarray(dur_us, np.float64)
        if dur.shape[-1] == 0 or repeats < 1:
            continue
        gap = np.broadcast_to(np.asarray(gap_us, np.float64), dur.shape)
        q = np.cumsum(np.asarray(host_us, np.float64) - gap - dur, axis=-1)
        step = q[..., -1]  # what one copy of the segment adds to Q
        best = np.maximum(best, lead + (q + dur).max(axis=-1) + np.maximum(0.0, (repeats - 1) * step))
        lead = lead + repeats * step
        total = total + repeats * (dur + gap).sum(axis=-1)
    return np.asarray(first_ready_us, np.float64) + total + best


def eager_host_us(launch_us, n) -> np.ndarray | float:
    """Host time of n eager launches at `launch_us` each: the CPU lane of an eager step."""
    return n * launch_us


def eager_ready_us(launch_us, n: int) -> np.ndarray:
    """When each of n eager launches has been submitted: the host issues them back to back.

    `launch_us` is one cost, one per launch, or [..., n] (one step per row)."""
    launch = np.asarray(launch_us, np.float64)
    launch = np.broadcast_to(launch, launch.shape[:-1] + (n,) if launch.ndim else (n,))
    return np.cumsum(launch, axis=-1)


@lru_cache(maxsize=32)
def _launch_names(kernel_names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"launch {k}" for k in kernel_names)


def eager_timeline(kernel_dur_us, kernel_names, launch_us, gap_us=0.0, label: str = "") -> Timeline:
    """An eager step: the host launches each kernel in turn (`launch_us` each, or one per kernel)."""
    dur = np.asarray(kernel_dur_us, np.float64)
    n = len(dur)
    ready = eager_ready_us(launch_us, n)
    launch = np.broadcast_to(np.asarray(launch_us, np.float64), (n,))
    names = tuple(kernel_names)
    return Timeline(
        cpu_start=ready - launch,
        cpu_dur=launch,
        cpu_names=_launch_names(names),
        gpu_start=schedule_starts(ready, dur, gap_us),
        gpu_dur=dur,
        gpu_names=names,
        launched_by=np.arange(n),
        source="simulated",
        label=label,
    )


# -- a graph replay --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GraphReplayCost:
    """What replaying a captured step costs beyond its kernels.

    `in_pieces`: the graph holds memset nodes (cuBLAS's split-K GEMMs zero their workspace with one),
    and the driver submits it in pieces. In all 10 such profiled replays of the shipped probe runs (the
    unfused graph above batch 1, and at every batch in the 1b preset) the first kernel starts 0.2-0.5 ms
    into a 1.3-2.6 ms call, and 37-594 kernels have started by its end; in 15 of the 16 without one (every
    fused graph, the small preset's unfused graph at batch 1) the first kernel starts 0.7-5.4 µs after
    the call returns (the exception: that unfused graph in small-b1.json, 1.0 ms before). Such a call
    also lasts longer the larger the batch (`per_row_host_us`: unprofiled, 0.45-0.75 ms more at batch
    256 than at 1 in every run), which a graph without memset nodes does not (the fused graphs: 89-104
    µs at every batch of both small-preset runs but one)."""

    launch_us: float  # host: one cudaGraphLaunch, fixed
    per_node_host_us: float = 0.0  # host: added per node of the graph
    node_gap_us: float = 0.0  # GPU: between dependent replayed kernels (PDL hides part; may be < 0)
    input_copy_us: float = 0.0  # host: copying a step's inputs into the static buffers
    per_row_host_us: float = 0.0  # host: added per row of the bucket to a call made in pieces

    def call_us(self, n_nodes, rows=1, in_pieces=False) -> np.ndarray | float:
        """Host time of the cudaGraphLaunch call alone for a graph of n nodes (`rows` rows; arrays broadcast)."""
        per_row = self.per_row_host_us * np.asarray(rows, np.float64) * np.asarray(in_pieces, bool)
        return self.launch_us + self.per_node_host_us * np.asarray(n_nodes, np.float64) + per_row

    def host_us(self, n_nodes, rows=1, in_pieces=False) -> np.ndarray | float:
        """Host time of one replay of a graph of n nodes, input copies included."""
        return self.input_copy_us + self.call_us(n_nodes, rows, in_pieces)

    def ready_us(self, n_nodes: int, rows=1, in_pieces=False) -> np.ndarray:
        """When each node can start on the GPU: once the replay call has returned, input copies included;
        in pieces, node i once the call has reached it (the fixed cost, then i + 1 nodes' cost).

        A graph without memset nodes does not trickle out while cudaGraphLaunch runs. In every profiled
        replay of one here but one (above) the first node starts as the call returns (the probe's; Hugging Face's
        torch.cuda.graph steps, 5-30 µs before a 1-2.4 ms call returns), and unprofiled, a replayed step
        takes the host's enqueue time plus the GPU's own span: HF Llama 3,496 µs against 576 + 2,944, HF
        Qwen2 3,978 against 865 + 3,146 (tools/hf_traces.py, data/traces/hf)."""
        if in_pieces:
            return self.input_copy_us + self.launch_us + self.per_node_host_us * np.arange(1.0, n_nodes + 1)
        return np.full(n_nodes, float(self.host_us(n_nodes, rows, in_pieces)))

    def step_us(self, kernel_dur_us, rows=1, in_pieces=False) -> np.ndarray | float:
        """Step time of one replay (no Timeline built): the last node's end, or the host call's.

        Leading axes of `kernel_dur_us` broadcast (one step per row)."""
        dur = np.asarray(kernel_dur_us, np.float64)
        n = dur.shape[-1]
        host = self.host_us(n, rows, in_pieces)
        if n == 0:
            return float(host)
        if in_pieces:
            first = self.input_copy_us + self.launch_us
            end = stream_end_us(first, [(self.per_node_host_us, dur, self.node_gap_us, 1)])
        else:
            end = stream_end_us(host, [(0.0, dur, self.node_gap_us, 1)])
        step = np.maximum(end, host)
        return float(step) if step.ndim == 0 else step


def graph_replay_timeline(
    kernel_dur_us,
    kernel_names,
    cost: GraphReplayCost,
    label: str = "",
    host_name: str | None = None,
    nodes: int | None = None,
    rows: int = 1,
    in_pieces: bool = False,
) -> Timeline:
    """One graph launch on the CPU lane (`host_name`); the kernels back to back on the GPU, `node_gap_us` apart.

    `nodes`: the graph's nodes when fewer than the intervals drawn (one persistent kernel's phases);
    `rows`, `in_pieces`: as `GraphReplayCost.host_us`."""
    dur = np.asarray(kernel_dur_us, np.float64)
    n = len(dur)
    host = float(cost.host_us(n if nodes is None else nodes, rows, in_pieces))
    ready = cost.ready_us(n, rows, in_pieces) if in_pieces else None
    name = host_name or f"cudaGraphLaunch ({n} nodes)"
    return one_call_timeline(dur, kernel_names, host, cost.node_gap_us, name, label, ready)


def one_call_timeline(
    kernel_dur_us,
    kernel_names,
    host_us: float,
    gap_us=0.0,
    host_name: str = "",
    label: str = "",
    ready_us=None,
) -> Timeline:
    """One host call on the CPU lane, [0, host_us]: a graph replay, or the one launch of a persistent kernel.
    The kernels run back to back on the GPU, `gap_us` apart, once the call has returned (or each at its
    `ready_us`: a graph submitted in pieces)."""
    dur = np.asarray(kernel_dur_us, np.float64)
    names = tuple(kernel_names)
    n = len(dur)
    ready = np.full(n, host_us) if ready_us is None else ready_us
    start = schedule_starts(ready, dur, gap_us)
    start = np.maximum(start, 0.0)  # a negative gap never starts a kernel before the step
    return Timeline(
        cpu_start=np.zeros(1),
        cpu_dur=np.array([host_us]),
        cpu_names=(host_name,),
        gpu_start=start,
        gpu_dur=dur,
        gpu_names=names,
        launched_by=np.zeros(n, np.int64),
        source="simulated",
        label=label,
    )


# -- the profiler's own cost ----------------------------------------------------------------
MIN_SPEED_CALLS = 32  # kernel launch calls a step needs for its host speed to be read off them
_PRICE = {"runtime": "api_us", "driver": "api_us"}  # event kinds priced by a field not named after them
# The fields a multiple of the profiler's cost multiplies (`ProfilerCost.scaled`).
_PRICES = (
    "op_us",
    "triton_us",
    "api_us",
    "python_us",
    "shapes_us",
    "triton_shapes_us",
    "line_scale",
    "slowdown",
)


@dataclass(frozen=True, slots=True)
class ProfilerCost:
    """What `torch.profiler` adds to the host: per event it records (µs), by the kinds `core.trace` counts, and
    a share of the host's own work between them.

    The host time of a recorded interval without the profiler is its traced time less its events' cost, the
    rest `slowdown` faster, never below `keep` of it (`untraced_us`): a cost larger than the interval means the
    costs do not fit this host, and the interval keeps a share of its time rather than vanishing."""

    op_us: float  # an aten op or record_function range: RecordFunction's callbacks at its start and end
    triton_us: float  # Inductor's range around a Triton launch, made (in Python) only while a profiler runs
    api_us: float  # a CUDA runtime or driver call: CUPTI's callbacks on entry and exit
    python_us: float = 0.0  # a Python call, recorded with with_stack=True
    shapes_us: float = 0.0  # an op's input shapes and types, recorded with record_shapes=True
    # Added for an Inductor range with shapes: it records its kernel's arguments and metadata (file, hash,
    # block sizes), built in Python for each launch.
    triton_shapes_us: float = 0.0
    line_scale: float = 1.0  # × the measured growth of the host time before Python calls (core.trace)
    # The host's own work (an op's dispatch, a launch's driver call, the Python around them) runs this share
    # slower while profiled. Not a graph launch's: its profiled slowness is per replayed node, left in.
    slowdown: float = 0.0
    # The costs hold on a host whose kernel launch calls take this long traced (median, µs); a step whose
    # launch calls take longer ran on a slower host (the VM's speed drifts), and each event costs that much more.
    launch_ref_us: float = float("nan")  # NaN: the costs as they are, whatever the host
    keep: float = 0.1  # an interval keeps at least this share of its traced time
    source: str = ""  # where the figures come from

    def per_event_us(self, kinds) -> np.ndarray:
        """The cost of one event of each kind named in `kinds` (core.trace.EVENT_KINDS)."""
        return np.array([getattr(self, _PRICE.get(k, f"{k}_us")) for k in kinds], np.float64)

    def speed(self, launch_call_us: float, launch_calls: int) -> float:
        """How much slower than the fitted host a step's host ran, from its kernel launch calls' median traced
        duration (1: as fitted, or too few calls to tell: a graph replay's one copy launch is no measure)."""
        ratio = launch_call_us / self.launch_ref_us
        if launch_calls < MIN_SPEED_CALLS or not np.isfinite(ratio) or ratio <= 0:
            return 1.0
        return float(np.clip(ratio, 0.25, 4.0))

    def scaled(self, k: float) -> ProfilerCost:
        """The profiler's cost `k` times over: every price and the slowdown (a recorded step matched)."""
        return replace(self, **{f: k * getattr(self, f) for f in _PRICES})

    def host_us(self, counts, line_us, kinds, speed: float = 1.0) -> np.ndarray:
        """The profiler's cost of each interval's events: counts (intervals × kinds) priced at the step's host
        `speed`, plus the line lookups (measured on the step itself, so at its speed already). A record_shapes
        trace gives every op its shapes, so an interval's Inductor ranges with shapes are the fewer of the two."""
        counts = np.asarray(counts, np.float64).reshape(-1, len(kinds))
        kinds = list(kinds)
        with_shapes = np.minimum(counts[:, kinds.index("triton")], counts[:, kinds.index("shapes")])
        priced = (counts @ self.per_event_us(kinds) + self.triton_shapes_us * with_shapes) * speed
        return priced + self.line_scale * np.asarray(line_us, np.float64)

    def untraced_us(self, traced_us, cost_us, slowed=True) -> np.ndarray:
        """Host time of intervals without the profiler: traced less cost, the rest `slowdown` faster where
        `slowed` (not a graph launch), at least `keep` of traced."""
        traced = np.asarray(traced_us, np.float64)
        slow = 1.0 + self.slowdown * np.asarray(slowed, np.float64)
        return np.maximum((traced - np.asarray(cost_us, np.float64)) / slow, self.keep * traced)


# Fitted by `python tools/profiler_cost_fit.py` on the H200 run in tests/data/profiler/h200 (torch 2.11.0+cu130,
# 2026-12-03): its reliable host-bound pairs (Llama, Qwen2 and TinyLlama shapes, eager and torch.compile without
# graphs, batch 1-16, three profiler settings) and its one-event loops. tests/test_profiler_cost_fit.py fits again.
# The fit cannot tell a cost per API call from a share of the host's own time (each launch's own time is much
# the same in these steps); the share fits the loops and the held-out run better, and takes the API calls' cost.
PROFILER_COST = ProfilerCost(
    op_us=0.673,
    triton_us=3.16,
    api_us=0.0,
    python_us=0.353,
    shapes_us=0.681,
    triton_shapes_us=5.922,
    line_scale=1.082,
    slowdown=0.277,
    launch_ref_us=5.64,
    source="fitted on paired traced/untraced H200 steps (torch 2.11): tools/profiler_cost_fit.py",
)
