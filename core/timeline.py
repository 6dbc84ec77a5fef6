"""One decode step as two lanes of intervals: the type both engines produce.

The simulator (`sim.step.schedule`) and the trace reader (`core.trace`) both return a
`Timeline`, so one chart function draws either and the two can be overlaid. All
times are microseconds from the start of the step (the first CPU interval starts
at 0 for a simulated step; a measured step is shifted so that it does too).

A CPU interval is the host building and submitting one launch: an eager kernel
launch, or one `cudaGraphLaunch` that submits a whole captured step. A GPU
interval is one kernel (or copy, or memset) executing. `launched_by[i]` is the CPU
interval that submitted kernel i (-1 where unknown), which the Chrome-trace export
turns into flow arrows.

A measured step can use several host threads and several CUDA streams: `cpu_thread`
and `gpu_stream` say which (all 0 for a simulated step), and the lanes chart draws one
lane each. What kind of work a GPU interval is (a compute kernel, a communication
kernel, a copy, a memset) is read off its name by `gpu_kind`, the one classifier.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

CPU_BOUND = "CPU launch"
GPU_BOUND = "GPU"
SOURCES = ("simulated", "measured", "recorded")

# What a GPU interval is. Copies and memsets carry CUPTI's names ("Memcpy HtoD (Pageable -> Device)",
# "Memset (Device)"); communication kernels are NCCL's, the engines' custom all-reduces (vLLM's and
# SGLang's cross_device_reduce, torch's symmetric-memory one_shot/two_shot_all_reduce) and the simulator's.
GPU_KINDS = ("kernel", "communication", "memcpy", "memset")
_COMM_MARKERS = (
    "nccl",
    "all_reduce",
    "allreduce",
    "all_gather",
    "allgather",
    "reduce_scatter",
    "reducescatter",
    "cross_device_reduce",
    "alltoall",
    "all_to_all",
)


def gpu_kind(name: str) -> str:
    """'kernel', 'communication', 'memcpy' or 'memset' for a GPU interval's name."""
    if name.startswith(("Memcpy", "memcpy")):
        return "memcpy"
    if name.startswith(("Memset", "memset")):
        return "memset"
    lowered = name.lower()
    return "communication" if any(m in lowered for m in _COMM_MARKERS) else "kernel"


@dataclass(frozen=True, slots=True)
class StepMetrics:
    """The readouts of one step, computed identically for simulated and measured steps."""

    kernels: int  # GPU kernels executed in the step
    launches: int  # CPU submissions (eager launches, or graph launches)
    cpu_launch_us: float  # host time spent building and submitting launches
    gpu_busy_us: float  # union of kernel intervals
    step_us: float  # first CPU submission to last kernel end
    idle_us: float  # step_us - gpu_busy_us: the bubbles
    utilisation: float  # gpu_busy_us / step_us, in (0, 1]
    bound_by: str  # CPU_BOUND when the host needs longer than the GPU, else GPU_BOUND

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}


def _as_f64(values, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: every value must be a finite number")
    return arr


@dataclass(frozen=True, eq=False)
class Timeline:
    cpu_start: np.ndarray
    cpu_dur: np.ndarray
    cpu_names: tuple[str, ...]
    gpu_start: np.ndarray
    gpu_dur: np.ndarray
    gpu_names: tuple[str, ...]
    launched_by: np.ndarray = field(default=None)  # int index into the CPU lane per kernel
    source: str = "simulated"
    label: str = ""
    gpu_stream: np.ndarray = field(default=None)  # CUDA stream of each GPU interval (None: all on stream 0)
    cpu_thread: np.ndarray = field(default=None)  # host thread of each CPU interval (None: all on thread 0)
    # What a GPU lane shows where it is not a CUDA stream: (stream id, name) pairs, e.g. a persistent
    # kernel's groups of SMs drawn from its in-kernel stamps.
    stream_names: tuple[tuple[int, str], ...] = ()

    def __post_init__(self) -> None:
        # Validate here so that an uploaded or hand-built timeline fails with a message
        # naming the field instead of drawing nonsense.
        for lane in ("cpu", "gpu"):
            start = _as_f64(getattr(self, f"{lane}_start"), f"{lane}_start")
            dur = _as_f64(getattr(self, f"{lane}_dur"), f"{lane}_dur")
            names = tuple(str(n) for n in getattr(self, f"{lane}_names"))
            if not (len(start) == len(dur) == len(names)):
                raise ValueError(
                    f"{lane}_start, {lane}_dur and {lane}_names must have equal lengths "
                    f"(got {len(start)}, {len(dur)}, {len(names)})"
                )
            if np.any(dur < 0):
                raise ValueError(f"{lane}_dur: durations must not be negative")
            if np.any(start < -1e-6):
                raise ValueError(f"{lane}_start: times must not be before the step's start (0)")
            object.__setattr__(self, f"{lane}_start", start)
            object.__setattr__(self, f"{lane}_dur", dur)
            object.__setattr__(self, f"{lane}_names", names)
        if len(self.gpu_start) == 0:
            raise ValueError("gpu_start: a step needs at least one kernel")
        by = self.launched_by
        by = (
            np.full(len(self.gpu_start), -1, np.int64) if by is None else np.asarray(by, np.int64).reshape(-1)
        )
        if len(by) != len(self.gpu_start):
            raise ValueError("launched_by: needs one entry per GPU kernel")
        if np.any((by < -1) | (by >= max(len(self.cpu_start), 1))):
            raise ValueError("launched_by: each entry must index a CPU interval or be -1")
        object.__setattr__(self, "launched_by", by)
        for name, n in (("gpu_stream", len(self.gpu_start)), ("cpu_thread", len(self.cpu_start))):
            ids = getattr(self, name)
            ids = np.zeros(n, np.int64) if ids is None else np.asarray(ids, np.int64).reshape(-1)
            if len(ids) != n:
                raise ValueError(
                    f"{name}: needs one entry per {'GPU' if name == 'gpu_stream' else 'CPU'} interval"
                )
            if np.any(ids < 0):
                raise ValueError(f"{name}: ids must not be negative")
            object.__setattr__(self, name, ids)
        if self.source not in SOURCES:
            raise ValueError(f"source: must be one of {SOURCES}, got {self.source!r}")

    # -- derived quantities -------------------------------------------------
    @property
    def gpu_kinds(self) -> np.ndarray:
        """The kind of each GPU interval (`gpu_kind` of its name), as an array of GPU_KINDS strings."""
        kinds = self.__dict__.get("_gpu_kinds")
        if kinds is None:
            by_name = {name: gpu_kind(name) for name in set(self.gpu_names)}
            kinds = np.array([by_name[name] for name in self.gpu_names], dtype=object)
            object.__setattr__(self, "_gpu_kinds", kinds)
        return kinds

    @property
    def streams(self) -> tuple[int, ...]:
        """The CUDA streams the step's GPU work ran on, in ascending order."""
        return tuple(int(s) for s in np.unique(self.gpu_stream))

    @property
    def threads(self) -> tuple[int, ...]:
        """The host threads that launched the step's work, in ascending order."""
        return tuple(int(t) for t in np.unique(self.cpu_thread))

    @property
    def cpu_end(self) -> np.ndarray:
        return self.cpu_start + self.cpu_dur

    @property
    def gpu_end(self) -> np.ndarray:
        return self.gpu_start + self.gpu_dur

    @property
    def step_us(self) -> float:
        ends = [self.gpu_end.max()] + ([self.cpu_end.max()] if len(self.cpu_start) else [])
        return float(max(ends))

    def gpu_busy_intervals(self) -> tuple[np.ndarray, np.ndarray]:
        """GPU intervals merged where they overlap (measured kernels can overlap)."""
        order = np.argsort(self.gpu_start, kind="stable")
        start, end = self.gpu_start[order], self.gpu_end[order]
        running_end = np.maximum.accumulate(end)
        new_block = np.ones(len(start), bool)
        new_block[1:] = start[1:] > running_end[:-1]
        block = np.cumsum(new_block) - 1
        merged_start = start[new_block]
        merged_end = np.zeros(len(merged_start))
        np.maximum.at(merged_end, block, end)
        return merged_start, merged_end

    def idle_intervals(self) -> tuple[np.ndarray, np.ndarray]:
        """(start, duration) of every stretch in [0, step] where no kernel runs."""
        busy_start, busy_end = self.gpu_busy_intervals()
        gap_start = np.concatenate(([0.0], busy_end))
        gap_end = np.concatenate((busy_start, [self.step_us]))
        keep = gap_end - gap_start > 1e-9
        return gap_start[keep], (gap_end - gap_start)[keep]

    def metrics(self) -> StepMetrics:
        busy_start, busy_end = self.gpu_busy_intervals()
        busy = float(np.sum(busy_end - busy_start))
        step = self.step_us
        cpu = float(np.sum(self.cpu_dur))
        return StepMetrics(
            kernels=len(self.gpu_start),
            launches=len(self.cpu_start),
            cpu_launch_us=cpu,
            gpu_busy_us=busy,
            step_us=step,
            idle_us=max(step - busy, 0.0),
            utilisation=busy / step if step > 0 else 1.0,
            bound_by=CPU_BOUND if cpu > busy else GPU_BOUND,
        )

    def first_launches(self, n: int) -> Timeline:
        """The step cut down to its first n CPU launches and the kernels they submitted.

        With graphs there is a single launch, so the cut is on kernels instead.
        """
        n = max(int(n), 1)
        by = self.launched_by
        if len(self.cpu_start) > n:
            submitting = np.unique(by[by >= 0])
            if len(submitting) and submitting[0] >= n:
                # The first n launches submitted nothing the trace kept (dropped kernel records): cut after
                # the n-th launch that did, so the view still shows kernels, and the empty launches before.
                n = int(submitting[min(n, len(submitting)) - 1]) + 1
            keep_cpu = np.arange(n)
            launched = (by >= 0) & (by < n)
            # Kernels whose launch the trace lacks (-1) are shown where they ran inside the cut.
            cut_end = max(self.cpu_end[:n].max(), self.gpu_end[launched].max(initial=0.0))
            keep_gpu = np.flatnonzero(launched | ((by < 0) & (self.gpu_start < cut_end)))
            if len(keep_gpu) == 0:  # nothing launched in the cut, nothing ran in it: the first kernels
                keep_gpu = np.flatnonzero(by < 0)[:n]
        else:
            keep_cpu = np.arange(len(self.cpu_start))
            keep_gpu = np.arange(min(n, len(self.gpu_start)))
        return Timeline(
            cpu_start=self.cpu_start[keep_cpu],
            cpu_dur=self.cpu_dur[keep_cpu],
            cpu_names=tuple(self.cpu_names[i] for i in keep_cpu),
            gpu_start=self.gpu_start[keep_gpu],
            gpu_dur=self.gpu_dur[keep_gpu],
            gpu_names=tuple(self.gpu_names[i] for i in keep_gpu),
            launched_by=self.launched_by[keep_gpu],
            source=self.source,
            label=self.label,
            gpu_stream=self.gpu_stream[keep_gpu],
            cpu_thread=self.cpu_thread[keep_cpu],
            stream_names=self.stream_names,
        )

    # -- serialisation (the probe's JSON holds one of these per run) ----------
    def to_dict(self) -> dict:
        out = {
            "source": self.source,
            "label": self.label,
            "cpu": {
                "start_us": _rounded(self.cpu_start),
                "dur_us": _rounded(self.cpu_dur),
                "name": list(self.cpu_names),
            },
            "gpu": {
                "start_us": _rounded(self.gpu_start),
                "dur_us": _rounded(self.gpu_dur),
                "name": list(self.gpu_names),
                "launched_by": self.launched_by.tolist(),
            },
        }
        # Streams and threads only where there is more than the one default: older files have neither.
        if self.gpu_stream.any():
            out["gpu"]["stream"] = self.gpu_stream.tolist()
        if self.cpu_thread.any():
            out["cpu"]["thread"] = self.cpu_thread.tolist()
        return out

    @classmethod
    def from_dict(cls, data: dict, source: str | None = None) -> Timeline:
        """Rebuild a timeline from `to_dict` output; raises ValueError naming a bad field."""
        if not isinstance(data, dict):
            raise ValueError("timeline: expected an object")
        try:
            cpu, gpu = data["cpu"], data["gpu"]
            return cls(
                cpu_start=cpu["start_us"],
                cpu_dur=cpu["dur_us"],
                cpu_names=tuple(cpu["name"]),
                gpu_start=gpu["start_us"],
                gpu_dur=gpu["dur_us"],
                gpu_names=tuple(gpu["name"]),
                launched_by=gpu.get("launched_by"),
                gpu_stream=gpu.get("stream"),
                cpu_thread=cpu.get("thread"),
                source=source or data.get("source", "measured"),
                label=str(data.get("label", "")),
            )
        except KeyError as missing:
            raise ValueError(f"timeline: missing field {missing}") from None
        except (TypeError, OverflowError) as err:
            raise ValueError(f"timeline: malformed values ({err})") from None


def _rounded(values: np.ndarray) -> list[float]:
    # Nanosecond resolution is all a profiler gives; rounding keeps the JSON small.
    return [round(float(v), 3) for v in values]


def regime(metrics: StepMetrics, balance_band: float = 0.15) -> str:
    """'CPU-bound', 'GPU-bound' or 'balanced' (CPU and GPU time within the band of each other)."""
    cpu, gpu = metrics.cpu_launch_us, metrics.gpu_busy_us
    if math.isclose(cpu, gpu, rel_tol=balance_band):
        return "balanced"
    return "CPU-bound" if cpu > gpu else "GPU-bound"
