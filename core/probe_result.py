"""The probe's result file: schema, loading with checks, and the shipped H200 run (the roofline floor a run
gives is `core.roofline`'s, asked of the run through `ProbeResult.roofline`).

Torch-free on purpose: the app shows recorded and uploaded results on machines with
no GPU and no torch. `load_result` accepts a path, raw bytes, a file-like object or
an already-parsed dict, and raises `ValueError` with a message that names the bad
field (`runs[3].step_us_p90: ...`), so the page can show it instead of a traceback.

Layout of the JSON (times in microseconds, sizes in bytes):

    device, torch, cuda, created (ISO 8601), command      strings
    model: {config: {...}, n_params, weight_bytes, read_bytes?}
    hbm_copy_GBps        device-to-device copy, bytes read + bytes written per second
    matmul_TFLOPs        one large bf16 matrix product (optional): with the copy bandwidth, the roofline floor
    runs: [{mode, batch, bucket, padded_rows, eager_fallback,
            step_us_median, step_us_p10, step_us_p90   CUDA-event step time over many steps
            enqueue_us_median                          host time to enqueue one step, unprofiled
            step_us_back_to_back                       per-step time with no sync between steps (optional)
            enqueue_us_p10, enqueue_us_p90,            optional: the spread of both, and how many rounds the
            step_us_back_to_back_p10, _p90,            modes and batches were timed in, taking turns
            timing_rounds                              (older files: None)
            kernels_per_step, kernels_per_layer        counted in the profiled step's trace
            cpu_launch_us, gpu_busy_us, utilisation, bound_by   Timeline.metrics() of that step
            timeline}]                                 Timeline.to_dict() of the profiled step
    captures: [{bucket, capture_ms, graph_mem_bytes, ...}]   one per captured graph
    checks: {name: {passed: bool, detail: str, ...}}         correctness checks of the run
    errors: [str]        what failed (e.g. out of memory during capture); the rest still holds
    settings: {...}      buckets, steps, warm-up, context length used
    reference: {...}     optional: Hugging Face transformers' Llama of the same shape in the same run
                         (name, transformers, attention, cache, runs: [{mode: eager|graph, batch, the
                         timing and profiled-step figures of a run, no timeline}], errors), or {skipped}
    host: {...}          optional: how fast the run's host launched (`HostSpeed`; older files: None, "host
                         not measured"): cpu, python, torch, triton, launches, torch_launch_us,
                         triton_launch_us, triton_bound_launch_us ({median, p10, p90} each),
                         graph_launch_us ({nodes, median, p10, p90}: lists), graph_fixed_us,
                         graph_per_node_us, and samples: [{when, the same costs}] (before and after the steps)

`cpu_launch_us`, `gpu_busy_us`, `utilisation` and `bound_by` come from the profiled
step's timeline through `Timeline.metrics()`, exactly as the simulator computes them,
so the readouts always agree with the lanes drawn. The profiler adds some host time
to each launch; `enqueue_us_median` is the same host cost measured without it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from core.phase_stamps import PhaseStamps, parse_phases
from core.result_fields import (
    MAX_RESULT_BYTES,
    MAX_US,
    bounded_block,
    list_field,
    number_field,
    object_field,
    read_json,
    text_field,
)
from core.roofline import Roofline
from core.step_plan import BASELINE, GRAPH, MODES
from core.timeline import CPU_BOUND, GPU_BOUND, StepMetrics, Timeline

RECORDED_PATH = Path(__file__).resolve().parent.parent / "gpu_probe" / "recorded" / "small.json"
SCHEMA_VERSION = 1

# Sanity limits: anything outside these is a corrupt or hand-made file, not a measurement (and MAX_US).
_MAX_BATCH = 65536
_MAX_GBPS = 1e5  # 100 TB/s: beyond any memory system today
_MAX_TFLOPS = 1e5  # 100 PFLOP/s on one device: beyond any today

# Bounds on the work one file can cause (the page fits, draws and keeps every upload). The
# calibration's leave-one-out refits grow with the square of the runs: 64 take about 5 s on
# 2 cores. The recorded H200 run has 20 runs and at most 56 kernels per layer plus 18.
MAX_RUNS = 64  # one per (mode, batch size)
MAX_KERNELS_PER_LAYER = 128
MAX_KERNELS_OUTSIDE_LAYERS = 256  # embedding, final norm, LM head, sampling, copies
MAX_LAYERS = 1024
MAX_CAPTURES = 256
MAX_ERRORS = 64
MAX_STRING = 4000  # characters in one error, check name or kernel name (C++ template names run to ~1,000)
MAX_HEADER_STRING = 500  # device, torch, cuda, created
LIMITS = (
    f"Up to {MAX_RESULT_BYTES // 2**20} MB and {MAX_RUNS} runs (one per mode and batch size); each step at "
    f"most {MAX_KERNELS_PER_LAYER} kernels per layer plus {MAX_KERNELS_OUTSIDE_LAYERS}, and strings of at most "
    f"{MAX_STRING:,} characters."
)

# Known fields of model.config: (low, high) for whole numbers, None for a short string.
_CONFIG_FIELDS = {
    "n_layers": (1, MAX_LAYERS),
    "hidden": (1, 65_536),
    "n_heads": (1, 1024),
    "n_kv_heads": (1, 1024),
    "ffn": (1, 262_144),
    "vocab": (1, 1_048_576),
    "context_len": (1, 1_048_576),
    "prefill_len": (1, 1_048_576),
    "max_context": (1, 1_048_576),
    "block_size": (1, 65_536),
    "max_batch": (1, _MAX_BATCH),
    "name": None,
    "dtype": None,
    "model_type": None,  # a run of a config.json's decoder (2026-12, issue 39): its architecture
    "source": None,  # and the file it was read from ("" for a preset)
}
# What a config.json's decoder adds (older files have none of them): RoPE's base and the norm's epsilon,
# and Llama 3's RoPE scaling, an object of these numbers (or null).
_CONFIG_NUMBERS = {"rope_theta": (1e-6, 1e12), "norm_eps": (1e-12, 1.0)}
_ROPE_SCALING = {
    "factor": (1e-6, 1e6),
    "low_freq_factor": (1e-6, 1e6),
    "high_freq_factor": (1e-6, 1e6),
    "original_max_position": (1, 1 << 30),
}
_SETTINGS_INTS = {"context_len": (1, 1_048_576), "steps": (0, 10**9), "warmup": (0, 10**9)}


# A run's optional spread of its unprofiled times (written only where measured).
SPREAD_FIELDS = (
    "enqueue_us_p10",
    "enqueue_us_p90",
    "step_us_back_to_back_p10",
    "step_us_back_to_back_p90",
    "timing_rounds",
)


@dataclass(frozen=True, slots=True)
class ProbeRun:
    """One (mode, batch) setting: step-time statistics plus one profiled step."""

    mode: str
    batch: int
    step_us_median: float
    step_us_p10: float
    step_us_p90: float
    kernels_per_step: int
    kernels_per_layer: float
    cpu_launch_us: float
    gpu_busy_us: float
    utilisation: float
    bound_by: str
    timeline: Timeline
    bucket: int | None = None  # graph bucket replayed (None: eager, or above the largest bucket)
    padded_rows: int = 0
    eager_fallback: bool = False  # a graph mode whose batch exceeded the largest bucket
    enqueue_us_median: float | None = None
    launches: int = 0
    # The same steps enqueued back to back: the host's work for one overlaps the GPU's for the last.
    step_us_back_to_back: float | None = None
    # A persistent kernel's in-kernel stamps (`PhaseStamps`), where the run recorded them.
    phases: PhaseStamps | None = None
    # The spread of the enqueue and back-to-back times, and the rounds they were timed in (SPREAD_FIELDS).
    enqueue_us_p10: float | None = None
    enqueue_us_p90: float | None = None
    step_us_back_to_back_p10: float | None = None
    step_us_back_to_back_p90: float | None = None
    timing_rounds: int | None = None

    def untraced_metrics(self) -> StepMetrics:
        """The step's readouts without the profiler, from one source: the median step and the median host
        enqueue time, both timed unprofiled, and the GPU's busy time from the profiled step (the profiler
        slows the host, not the kernels). Utilisation and bound-by follow from those, as for any step.
        A file without the unprofiled host time falls back to the profiled step's host time."""
        host = self.enqueue_us_median if self.enqueue_us_median is not None else self.cpu_launch_us
        busy = min(self.gpu_busy_us, self.step_us_median)
        return StepMetrics(
            kernels=self.kernels_per_step,
            launches=self.launches or self.timeline.metrics().launches,
            cpu_launch_us=host,
            gpu_busy_us=busy,
            step_us=self.step_us_median,
            idle_us=max(self.step_us_median - busy, 0.0),
            utilisation=busy / self.step_us_median if self.step_us_median > 0 else 0.0,
            bound_by=CPU_BOUND if host > busy else GPU_BOUND,
        )

    @property
    def replays(self) -> bool:
        """The step was one replay of a captured graph (a graph mode within its largest bucket)."""
        return MODES[self.mode].graphs and not self.eager_fallback

    def to_dict(self) -> dict:
        out = {
            name: getattr(self, name)
            for name in self.__slots__
            if name not in ("timeline", "phases")
            and (name not in SPREAD_FIELDS or getattr(self, name) is not None)
        }
        out["timeline"] = self.timeline.to_dict()
        if self.phases is not None:
            out["phases"] = self.phases.to_dict()
        return out

    def phase_timeline(self) -> Timeline | None:
        """The persistent kernel's inside on the step's time axis (None without stamps): the profiled step's
        CPU lane and input copies, and a GPU lane per group of SMs with each phase's work; the gaps between
        phases are the programs waiting at the grid barriers. The stamps start where the profiled kernel does."""
        if self.phases is None:
            return None
        tl, ph = self.timeline, self.phases
        main = int(tl.gpu_dur.argmax())  # the persistent kernel; the rest are the step's input copies
        start = float(tl.gpu_start[main])
        others = [i for i in range(len(tl.gpu_start)) if i != main]
        s_list = [float(tl.gpu_start[i]) for i in others]
        d_list = [float(tl.gpu_dur[i]) for i in others]
        names = [tl.gpu_names[i] for i in others]
        streams = [0] * len(others)
        by = [int(tl.launched_by[i]) for i in others]
        launch = int(tl.launched_by[main])
        for lane, (work_start, work_end) in enumerate(zip(ph.start_us, ph.end_us), start=1):
            for name, a, b in zip(ph.names, work_start, work_end):
                s_list.append(start + a)
                d_list.append(max(b - a, 0.0))
                names.append(name)
                streams.append(lane)
                by.append(launch)
        lane_names = ((0, "GPU · input copies"),) * bool(others) + tuple(
            (k, f"SMs {lo}-{hi}") for k, (lo, hi) in enumerate(ph.lane_programs, start=1)
        )
        return Timeline(
            cpu_start=tl.cpu_start,
            cpu_dur=tl.cpu_dur,
            cpu_names=tl.cpu_names,
            gpu_start=s_list,
            gpu_dur=d_list,
            gpu_names=tuple(names),
            launched_by=by,
            source=tl.source,
            label=f"{tl.label} · inside the persistent kernel",
            gpu_stream=streams,
            cpu_thread=tl.cpu_thread,
            stream_names=lane_names,
        )


# The reference's two ways to run its step, as the modes table names the probe's own: launched op by op, and
# one CUDA graph of that step (Hugging Face's kernels either way).
REFERENCE_KINDS = (BASELINE.name, GRAPH.name)


@dataclass(frozen=True, slots=True)
class ReferenceRun:
    """One step of the Hugging Face reference: eager, or one CUDA graph of its eager step."""

    mode: str  # one of REFERENCE_KINDS
    batch: int
    step_us_median: float
    step_us_p10: float
    step_us_p90: float
    kernels_per_step: int
    kernels_per_layer: float
    cpu_launch_us: float
    gpu_busy_us: float
    launches: int = 0
    enqueue_us_median: float | None = None
    step_us_back_to_back: float | None = None
    enqueue_us_p10: float | None = None
    enqueue_us_p90: float | None = None
    step_us_back_to_back_p10: float | None = None
    step_us_back_to_back_p90: float | None = None
    timing_rounds: int | None = None

    @property
    def host_us_per_launch(self) -> float | None:
        """The profiled step's host time per launch call (None where no launch was recorded)."""
        return self.cpu_launch_us / self.launches if self.launches else None

    def to_dict(self) -> dict:
        return {
            name: getattr(self, name)
            for name in self.__slots__
            if name not in SPREAD_FIELDS or getattr(self, name) is not None
        }


@dataclass(frozen=True, slots=True)
class Reference:
    """Hugging Face transformers' decoder of the run's shape, measured in the same run (`gpu_probe.hf_reference`)."""

    name: str = ""
    transformers: str = ""
    attention: str = ""
    cache: str = ""
    runs: tuple[ReferenceRun, ...] = ()
    errors: tuple[str, ...] = ()
    skipped: str | None = None  # why there is none (transformers not installed)

    def run(self, mode: str, batch: int) -> ReferenceRun | None:
        return next((r for r in self.runs if r.mode == mode and r.batch == batch), None)

    def to_dict(self) -> dict:
        if self.skipped is not None:
            return {"skipped": self.skipped}
        return {
            "name": self.name,
            "transformers": self.transformers,
            "attention": self.attention,
            "cache": self.cache,
            "runs": [r.to_dict() for r in self.runs],
            "errors": list(self.errors),
        }


# The host speed index (`gpu_probe.host_speed`): what a launch cost the run's host, in µs.
MAX_LAUNCH_US = 10_000.0  # 10 ms for one launch: no host takes that; a file that says so is not a measurement
HOST_KINDS = ("torch_launch_us", "triton_launch_us", "triton_bound_launch_us")  # torch's is required
MAX_GRAPH_SIZES = 16
MAX_HOST_SAMPLES = 16


@dataclass(frozen=True, slots=True)
class LaunchCost:
    """One kind of launch's host time: median, p10 and p90 over many launches, in µs."""

    median: float
    p10: float
    p90: float


@dataclass(frozen=True, slots=True)
class LaunchCosts:
    """What each kind of launch cost the host at one time (a sample) or over the whole run (the index)."""

    torch_launch_us: LaunchCost  # torch.add on tiny tensors, out= given
    triton_launch_us: LaunchCost | None  # a trivial Triton kernel through kernel[grid](...)
    triton_bound_launch_us: LaunchCost | None  # the same kernel through the probe's bound launcher
    graph_nodes: tuple[int, ...]  # graphs of that many trivial kernels, replayed
    graph_launch_us: tuple[LaunchCost, ...]  # CUDAGraph.replay()'s host time for each
    graph_fixed_us: float  # graph_launch_us ~ fixed + per node x nodes
    graph_per_node_us: float


@dataclass(frozen=True, slots=True)
class HostSpeed:
    """How fast the run's host launched, measured in the run's process (`gpu_probe.host_speed`): the index
    over every launch of the run's samples, and each sample (`when`: before or after the steps)."""

    cpu: str
    python: str
    torch: str
    triton: str | None
    launches: int  # launches of each kind per sample
    index: LaunchCosts
    samples: tuple[tuple[str, LaunchCosts], ...]
    raw: dict  # the block as read, for to_dict

    @property
    def torch_launch_us(self) -> float:
        """The index in one figure: the median host time of a torch launch, in µs."""
        return self.index.torch_launch_us.median

    def to_dict(self) -> dict:
        return self.raw


@dataclass(frozen=True, slots=True)
class ProbeResult:
    device: str
    torch: str
    cuda: str
    created: str
    command: str
    model: dict
    hbm_copy_GBps: float
    runs: tuple[ProbeRun, ...]
    captures: tuple[dict, ...]
    checks: dict
    errors: tuple[str, ...] = ()
    settings: dict = field(default_factory=dict)
    matmul_TFLOPs: float | None = None  # the bf16 matrix rate measured in the run (older files: None)
    reference: Reference | None = None
    host: HostSpeed | None = None  # None: the host was not measured (every file before the index)

    @property
    def roofline(self) -> Roofline:
        """The floor of a step of this run (`core.roofline`): the weights it reads (`read_bytes`, else all weight
        bytes), the two ceilings it measured, the model's shape and the context from the file."""
        cfg = self.model.get("config") or {}
        return Roofline(
            weight_read_bytes=self.model.get("read_bytes") or self.model["weight_bytes"],
            copy_GBps=self.hbm_copy_GBps,
            matmul_TFLOPs=self.matmul_TFLOPs,
            element=4 if cfg.get("dtype") == "float32" else 2,
            context=_int_or_none(self.settings, "context_len"),
            **{k: _int_or_none(cfg, k) for k in ("n_layers", "hidden", "n_heads", "n_kv_heads")},
        )

    # The roofline's figures, asked of the run (the page, the bench and the CLI read them here).
    @property
    def weight_floor_us(self) -> float:
        return self.roofline.weight_floor_us

    def kv_read_bytes(self, batch: int) -> int:
        return self.roofline.kv_read_bytes(batch)

    def read_bytes(self, batch: int) -> int:
        return self.roofline.read_bytes(batch)

    def read_floor_us(self, batch: int) -> float:
        return self.roofline.read_floor_us(batch)

    def step_flops(self, batch: int) -> float:
        return self.roofline.step_flops(batch)

    def compute_floor_us(self, batch: int) -> float | None:
        return self.roofline.compute_floor_us(batch)

    def floor_us(self, batch: int) -> float:
        return self.roofline.floor_us(batch)

    def floor_bound(self, batch: int) -> str:
        return self.roofline.floor_bound(batch)

    def times_floor(self, run) -> float:
        return self.roofline.times_floor(run)

    def hbm_used_GBps(self, run: ProbeRun) -> float:
        return self.roofline.hbm_used_GBps(run)

    def step_split(self, run: ProbeRun) -> dict:
        return self.roofline.step_split(run)

    def kernel_rows(self, mode: str) -> int | None:
        """The most rows `mode`'s own kernels ran in this run, as the file records it: where a mode fell back
        to other kernels above some batch (`eager_fallback`), the largest graph captured for it, else its largest
        batch that did not fall back. None where the mode never fell back (no limit to report)."""
        runs = [r for r in self.runs if r.mode == mode]
        if not any(r.eager_fallback for r in runs):
            return None
        own = [r.batch for r in runs if not r.eager_fallback]
        captured = [int(c["bucket"]) for c in self.captures if c.get("variant") == mode]
        return max(captured or own or [0]) or None

    @property
    def largest_bucket(self) -> int | None:
        """The largest batch this run captured graphs for (`settings.buckets`, else its captures)."""
        buckets = self.settings.get("buckets")
        sizes = [int(b) for b in buckets if isinstance(b, int)] if isinstance(buckets, list) else []
        sizes = sizes or [int(c["bucket"]) for c in self.captures]
        return max(sizes) if sizes else None

    @property
    def modes(self) -> tuple[str, ...]:
        """The modes the file has runs of, in the modes table's order."""
        return tuple(m for m in MODES if any(r.mode == m for r in self.runs))

    @property
    def batches(self) -> tuple[int, ...]:
        return tuple(sorted({r.batch for r in self.runs}))

    def run(self, mode: str, batch: int) -> ProbeRun | None:
        return next((r for r in self.runs if r.mode == mode and r.batch == batch), None)

    @property
    def all_checks_passed(self) -> bool:
        return all(bool(c.get("passed")) for c in self.checks.values())

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA_VERSION,
            "device": self.device,
            "torch": self.torch,
            "cuda": self.cuda,
            "created": self.created,
            "command": self.command,
            "model": self.model,
            "hbm_copy_GBps": self.hbm_copy_GBps,
            "runs": [r.to_dict() for r in self.runs],
            "captures": list(self.captures),
            "checks": self.checks,
            "errors": list(self.errors),
            "settings": self.settings,
            **({"matmul_TFLOPs": self.matmul_TFLOPs} if self.matmul_TFLOPs is not None else {}),
            **({"reference": self.reference.to_dict()} if self.reference is not None else {}),
            **({"host": self.host.to_dict()} if self.host is not None else {}),
        }


def _int_or_none(d: dict, key: str) -> int | None:
    """d[key] as an int, or None where the file does not say (or says something else)."""
    try:
        return int(d[key])
    except (KeyError, TypeError, ValueError):
        return None


# -- loading -----------------------------------------------------------------
def load_result(source, timeline_source: str | None = None) -> ProbeResult:
    """Parse and check a probe result; `ValueError` names the first bad field."""
    return _parse(result_object(read_json(source)), timeline_source)


def result_object(data) -> dict:
    """Parsed JSON that can be a result file (an object with a result's keys), or ValueError saying what it is."""
    if not isinstance(data, dict):
        kind = {list: "list", str: "string", bool: "true/false"}.get(
            type(data), "number" if data is not None else "null"
        )
        raise ValueError(
            f"result: JSON but not a probe result: a {kind} at the top level, where a result is an object "
            "(device, runs, ...)"
        )
    if "traceEvents" in data:
        raise ValueError("result: a profiler trace, not a probe result: open it on the Your trace tab")
    if not {"device", "runs", "kind", "ranks"} & set(data):
        shown = ", ".join(repr(str(k)[:30]) for k in list(data)[:5])
        what = f"none of its keys ({shown}) is a result's" if shown else "it is an empty object"
        raise ValueError(f"result: JSON but not a probe result: {what}")
    return data


def recorded_result() -> ProbeResult:
    """The shipped H200 run (its timelines are labelled 'recorded')."""
    return load_result(RECORDED_PATH, timeline_source="recorded")


def dump_result(result: ProbeResult | dict, path) -> None:
    """Write a result as JSON (strict: NaN or infinity raise instead of being written)."""
    data = result.to_dict() if isinstance(result, ProbeResult) else result
    text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    Path(path).write_text(text, encoding="utf-8")


def _parse(d: dict, timeline_source: str | None) -> ProbeResult:
    # A file from a newer probe may mean something else by the same fields: refuse it rather than guess.
    schema = d.get("schema", SCHEMA_VERSION)
    if isinstance(schema, bool) or schema != SCHEMA_VERSION:
        raise ValueError(f"schema: this app reads version {SCHEMA_VERSION} result files, got {schema!r}")
    strings = _header(d)
    model, n_layers = _model(d)
    hbm = number_field(d, "hbm_copy_GBps", 1e-3, _MAX_GBPS)
    matmul = None
    if d.get("matmul_TFLOPs") is not None:
        matmul = number_field(d, "matmul_TFLOPs", 1e-3, _MAX_TFLOPS)
    max_kernels = MAX_KERNELS_PER_LAYER * n_layers + MAX_KERNELS_OUTSIDE_LAYERS
    raw_runs = list_field(d, "runs", MAX_RUNS)
    runs = tuple(parse_run(r, f"runs[{i}]", timeline_source, max_kernels) for i, r in enumerate(raw_runs))
    seen = set()
    for i, r in enumerate(runs):
        if (r.mode, r.batch) in seen:
            raise ValueError(f"runs[{i}]: a second run of mode {r.mode} at batch {r.batch}")
        seen.add((r.mode, r.batch))
    raw_captures = list_field(d, "captures", MAX_CAPTURES)
    captures = tuple(_parse_capture(c, f"captures[{i}]") for i, c in enumerate(raw_captures))
    checks, errors, settings = _checks(d), _errors(d), _settings(d)
    reference = parse_reference(d["reference"], max_kernels) if d.get("reference") is not None else None
    host = parse_host(d["host"]) if d.get("host") is not None else None
    return ProbeResult(
        model=model,
        hbm_copy_GBps=hbm,
        runs=runs,
        captures=captures,
        checks=checks,
        errors=tuple(errors),
        settings=settings,
        matmul_TFLOPs=matmul,
        reference=reference,
        host=host,
        **strings,
    )


def _header(d: dict) -> dict:
    """device, torch, cuda, created (ISO 8601) and command: non-empty strings of bounded length."""
    strings = {
        k: text_field(d, k, MAX_HEADER_STRING if k != "command" else MAX_STRING)
        for k in ("device", "torch", "cuda", "created", "command")
    }
    try:
        datetime.fromisoformat(strings["created"].replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("created: must be an ISO 8601 date and time") from None
    return strings


def _model(d: dict) -> tuple[dict, int]:
    """(the model block, its layer count), its config and sizes checked."""
    model = object_field(d, "model")
    bounded_block(model, "model")
    n_layers = parse_config(object_field(model, "config", "model.config"))
    number_field(model, "n_params", 1, 1e13, "model.n_params", integer=True)
    number_field(model, "weight_bytes", 1, 1e14, "model.weight_bytes", integer=True)
    if model.get("read_bytes") is not None:
        number_field(model, "read_bytes", 1, 1e14, "model.read_bytes", integer=True)
    return model, n_layers


def _checks(d: dict) -> dict:
    """The run's correctness checks: name -> {passed: true or false, detail: text}."""
    checks = object_field(d, "checks")
    bounded_block(checks, "checks")
    for name, check in checks.items():
        if len(name) > MAX_STRING:
            raise ValueError(f"checks: a check name is longer than {MAX_STRING:,} characters")
        if not isinstance(check, dict) or not isinstance(check.get("passed"), bool):
            raise ValueError(f"checks.{name}: expected an object with a true/false 'passed'")
        if not isinstance(check.get("detail", ""), str):
            raise ValueError(f"checks.{name}.detail: expected a string")
    return checks


def _errors(d: dict) -> list[str]:
    errors = d.get("errors", [])
    if not isinstance(errors, list) or not all(isinstance(e, str) for e in errors):
        raise ValueError("errors: expected a list of strings")
    if len(errors) > MAX_ERRORS:
        raise ValueError(f"errors: more than {MAX_ERRORS} entries")
    if any(len(e) > MAX_STRING for e in errors):
        raise ValueError(f"errors: an entry is longer than {MAX_STRING:,} characters")
    return errors


def _settings(d: dict) -> dict:
    settings = d.get("settings", {})
    if not isinstance(settings, dict):
        raise ValueError("settings: expected an object")
    bounded_block(settings, "settings")
    for key, (lo, hi) in _SETTINGS_INTS.items():
        if key in settings:
            number_field(settings, key, lo, hi, f"settings.{key}", integer=True)
    return settings


def parse_reference(v, max_kernels: int) -> Reference:
    """The `reference` block; ValueError names the bad field (`reference.runs[2].batch: ...`)."""
    if not isinstance(v, dict):
        raise ValueError("reference: expected an object")
    bounded_block(v, "reference", 64_000)
    if "skipped" in v:
        return Reference(skipped=text_field(v, "skipped", MAX_HEADER_STRING))
    texts = {
        k: text_field(v, k, MAX_HEADER_STRING) if k in v else ""
        for k in ("name", "transformers", "attention", "cache")
    }
    raw_runs = list_field(v, "runs", MAX_RUNS)
    runs = []
    for i, r in enumerate(raw_runs):
        where = f"reference.runs[{i}]"
        if not isinstance(r, dict):
            raise ValueError(f"{where}: expected an object")
        if r.get("mode") not in REFERENCE_KINDS:
            raise ValueError(f"{where}.mode: must be one of {REFERENCE_KINDS}, got {r.get('mode')!r}")
        times = {
            k: number_field(r, k, 0, MAX_US, f"{where}.{k}")
            for k in ("step_us_median", "step_us_p10", "step_us_p90", "cpu_launch_us", "gpu_busy_us")
        }
        if times["step_us_median"] <= 0:
            raise ValueError(f"{where}.step_us_median: must be positive")
        optional = {
            k: number_field(r, k, 0, MAX_US, f"{where}.{k}") if r.get(k) is not None else None
            for k in ("enqueue_us_median", "step_us_back_to_back")
        }
        optional.update(_spread(r, where, optional["enqueue_us_median"], optional["step_us_back_to_back"]))
        runs.append(
            ReferenceRun(
                mode=r["mode"],
                batch=int(number_field(r, "batch", 1, _MAX_BATCH, f"{where}.batch", integer=True)),
                kernels_per_step=int(
                    number_field(
                        r, "kernels_per_step", 1, max_kernels, f"{where}.kernels_per_step", integer=True
                    )
                ),
                kernels_per_layer=number_field(r, "kernels_per_layer", 0, 1e4, f"{where}.kernels_per_layer"),
                launches=int(number_field(r, "launches", 0, max_kernels, f"{where}.launches", integer=True))
                if "launches" in r
                else 0,
                **times,
                **optional,
            )
        )
    errors = v.get("errors", [])
    if (
        not isinstance(errors, list)
        or len(errors) > MAX_ERRORS
        or not all(isinstance(e, str) and len(e) <= MAX_STRING for e in errors)
    ):
        raise ValueError(f"reference.errors: expected a list of at most {MAX_ERRORS} strings")
    return Reference(runs=tuple(runs), errors=tuple(errors), **texts)


def parse_host(v) -> HostSpeed:
    """The `host` block; ValueError names the bad field (`host.torch_launch_us.median: ...`). A launch time
    that is zero, negative, not finite or over MAX_LAUNCH_US is refused."""
    if not isinstance(v, dict):
        raise ValueError("host: expected an object")
    bounded_block(v, "host", 32_000)
    texts = {k: text_field(v, k, MAX_HEADER_STRING, f"host.{k}") for k in ("cpu", "python", "torch")}
    triton = (
        text_field(v, "triton", MAX_HEADER_STRING, "host.triton") if v.get("triton") is not None else None
    )
    launches = int(number_field(v, "launches", 1, 1e9, "host.launches", integer=True))
    raw_samples = v.get("samples", [])
    if not isinstance(raw_samples, list) or len(raw_samples) > MAX_HOST_SAMPLES:
        raise ValueError(f"host.samples: expected a list of at most {MAX_HOST_SAMPLES} samples")
    samples = []
    for i, sample in enumerate(raw_samples):
        where = f"host.samples[{i}]"
        if not isinstance(sample, dict):
            raise ValueError(f"{where}: expected an object")
        samples.append((text_field(sample, "when", 40, f"{where}.when"), _launch_costs(sample, where)))
    return HostSpeed(
        triton=triton,
        launches=launches,
        index=_launch_costs(v, "host"),
        samples=tuple(samples),
        raw=v,
        **texts,
    )


def _launch_costs(d: dict, where: str) -> LaunchCosts:
    if d.get(HOST_KINDS[0]) is None:
        raise ValueError(f"{where}.{HOST_KINDS[0]}: missing")
    costs = {
        kind: _launch_cost(d[kind], f"{where}.{kind}") if d.get(kind) is not None else None
        for kind in HOST_KINDS
    }
    graph = d.get("graph_launch_us")
    if not isinstance(graph, dict):
        raise ValueError(f"{where}.graph_launch_us: expected an object of lists nodes, median, p10, p90")
    nodes = graph.get("nodes")
    if (
        not isinstance(nodes, list)
        or not 1 <= len(nodes) <= MAX_GRAPH_SIZES
        or not all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 1_000_000 for n in nodes)
        or nodes != sorted(set(nodes))
    ):
        raise ValueError(
            f"{where}.graph_launch_us.nodes: expected 1 to {MAX_GRAPH_SIZES} increasing node counts in [1, 1e6]"
        )
    columns = {}
    for key in ("median", "p10", "p90"):
        values = graph.get(key)
        if not isinstance(values, list) or len(values) != len(nodes):
            raise ValueError(
                f"{where}.graph_launch_us.{key}: expected one time per node count ({len(nodes)})"
            )
        columns[key] = values
    per_graph = tuple(
        _launch_cost({k: columns[k][i] for k in columns}, f"{where}.graph_launch_us", suffix=f"[{i}]")
        for i in range(len(nodes))
    )
    fixed = _launch_us(d, "graph_fixed_us", f"{where}.graph_fixed_us")
    per_node = number_field(d, "graph_per_node_us", 0, MAX_LAUNCH_US, f"{where}.graph_per_node_us")
    return LaunchCosts(
        graph_nodes=tuple(nodes),
        graph_launch_us=per_graph,
        graph_fixed_us=fixed,
        graph_per_node_us=per_node,
        **costs,
    )


def _launch_cost(v, where: str, suffix: str = "") -> LaunchCost:
    """{median, p10, p90} of one kind of launch: each a launch time, p10 <= median <= p90."""
    if not isinstance(v, dict):
        raise ValueError(f"{where}: expected an object with median, p10 and p90")
    values = {k: _launch_us(v, k, f"{where}.{k}{suffix}") for k in ("median", "p10", "p90")}
    if not values["p10"] <= values["median"] * (1 + 1e-9) <= values["p90"] * (1 + 2e-9):
        raise ValueError(f"{where}.median{suffix}: must lie between p10 and p90")
    return LaunchCost(**values)


def _launch_us(d: dict, key: str, where: str) -> float:
    if key not in d:
        raise ValueError(f"{where}: missing")
    return launch_us_field(d[key], where)


def launch_us_field(value, where: str) -> float:
    """A host time of one launch (a file's host index, or one a reader types in): positive, finite, at most
    MAX_LAUNCH_US (beyond it, absurd); ValueError names `where`."""
    value = number_field({"v": value}, "v", -math.inf, math.inf, where)
    if value <= 0:
        raise ValueError(f"{where}: a launch takes some time, got {value:g} µs")
    if value > MAX_LAUNCH_US:
        raise ValueError(f"{where}: {value:g} µs for one launch is absurd (more than {MAX_LAUNCH_US:g} µs)")
    return value


def _spread(r: dict, where: str, median_enqueue, back_to_back) -> dict:
    """The optional spread of a run's enqueue and back-to-back times (SPREAD_FIELDS), each percentile on its
    side of the median it goes with, and the timing rounds."""
    out = {}
    for key in SPREAD_FIELDS[:4]:
        lo = 1e-3 if key.startswith("step") else 0
        out[key] = number_field(r, key, lo, MAX_US, f"{where}.{key}") if r.get(key) is not None else None
    for name, middle in (("enqueue_us", median_enqueue), ("step_us_back_to_back", back_to_back)):
        p10, p90 = out[f"{name}_p10"], out[f"{name}_p90"]
        if middle is not None and p10 is not None and p10 > middle * (1 + 1e-9):
            raise ValueError(f"{where}.{name}_p10: above the median it goes with")
        if middle is not None and p90 is not None and middle > p90 * (1 + 2e-9):
            raise ValueError(f"{where}.{name}_p90: below the median it goes with")
    rounds = r.get("timing_rounds")
    out["timing_rounds"] = (
        int(number_field(r, "timing_rounds", 1, 1e6, f"{where}.timing_rounds", integer=True))
        if rounds is not None
        else None
    )
    return out


def parse_config(config: dict) -> int:
    """Type and range of every model.config field the app reads; returns n_layers."""
    bounded_block(config, "model.config", 16_000)
    for key, bounds in _CONFIG_FIELDS.items():
        if key not in config:
            continue
        if bounds is None:
            value = config[key]
            if not isinstance(value, str) or len(value) > 100:
                raise ValueError(f"model.config.{key}: expected a string of at most 100 characters")
        else:
            number_field(config, key, *bounds, f"model.config.{key}", integer=True)
    for key, bounds in _CONFIG_NUMBERS.items():
        if key in config:
            number_field(config, key, *bounds, f"model.config.{key}")
    if "qkv_bias" in config and not isinstance(config["qkv_bias"], bool):
        raise ValueError("model.config.qkv_bias: expected true or false")
    scaling = config.get("rope_scaling")
    if scaling is not None:
        if not isinstance(scaling, dict):
            raise ValueError("model.config.rope_scaling: expected an object or null")
        for key, bounds in _ROPE_SCALING.items():
            number_field(scaling, key, *bounds, f"model.config.rope_scaling.{key}")
    if "bytes_per_el" in config:
        number_field(config, "bytes_per_el", 1e-3, 8, "model.config.bytes_per_el")
    return int(
        number_field(config, "n_layers", *_CONFIG_FIELDS["n_layers"], "model.config.n_layers", integer=True)
    )


def parse_run(r, where: str, timeline_source: str | None, max_kernels: int) -> ProbeRun:
    """One record of `runs` (a tensor-parallel rank's too): every field checked, the first bad one named."""
    if not isinstance(r, dict):
        raise ValueError(f"{where}: expected an object")
    mode = r.get("mode")
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"{where}.mode: must be one of {tuple(MODES)}, got {mode!r}")
    batch = int(number_field(r, "batch", 1, _MAX_BATCH, f"{where}.batch", integer=True))
    times = _run_times(r, where)
    # Consistent with the model: a step of n layers runs at most MAX_KERNELS_PER_LAYER per layer plus the rest.
    kernels = int(
        number_field(r, "kernels_per_step", 1, max_kernels, f"{where}.kernels_per_step", integer=True)
    )
    per_layer = number_field(r, "kernels_per_layer", 0, 1e4, f"{where}.kernels_per_layer")
    util = number_field(r, "utilisation", 0, 1 + 1e-6, f"{where}.utilisation")
    bound = r.get("bound_by")
    if bound not in (CPU_BOUND, GPU_BOUND):
        raise ValueError(f"{where}.bound_by: must be {CPU_BOUND!r} or {GPU_BOUND!r}, got {bound!r}")
    if (times["cpu_launch_us"] > times["gpu_busy_us"]) != (bound == CPU_BOUND):
        raise ValueError(f"{where}.bound_by: disagrees with cpu_launch_us vs gpu_busy_us")
    _check_timeline_size(r.get("timeline"), f"{where}.timeline", max_kernels)
    try:
        timeline = Timeline.from_dict(r.get("timeline"), source=timeline_source)
    except ValueError as err:
        msg = str(err)
        raise ValueError(
            f"{where}.{msg}" if msg.startswith("timeline") else f"{where}.timeline.{msg}"
        ) from None
    return ProbeRun(
        mode=mode,
        batch=batch,
        kernels_per_step=kernels,
        kernels_per_layer=per_layer,
        utilisation=util,
        bound_by=bound,
        timeline=timeline,
        **_run_extras(r, where, batch, max_kernels),
        **times,
    )


def _run_times(r: dict, where: str) -> dict[str, float]:
    """The step's CUDA-event times (median within p10 and p90) and its profiled CPU launch and GPU busy time."""
    times = {
        k: number_field(r, k, 0, MAX_US, f"{where}.{k}")
        for k in ("step_us_median", "step_us_p10", "step_us_p90", "cpu_launch_us", "gpu_busy_us")
    }
    if not times["step_us_p10"] <= times["step_us_median"] * (1 + 1e-9) <= times["step_us_p90"] * (1 + 2e-9):
        raise ValueError(f"{where}.step_us_median: must lie between step_us_p10 and step_us_p90")
    if times["step_us_median"] <= 0:
        raise ValueError(f"{where}.step_us_median: must be positive")
    return times


def _run_extras(r: dict, where: str, batch: int, max_kernels: int) -> dict:
    """The fields a run may lack: the bucket it replayed and its padding, the enqueue and back-to-back times,
    its launches, the eager fallback, the persistent kernel's phase stamps."""
    bucket = r.get("bucket")
    if bucket is not None:
        bucket = int(number_field(r, "bucket", batch, _MAX_BATCH, f"{where}.bucket", integer=True))
    padded = (
        int(number_field(r, "padded_rows", 0, _MAX_BATCH, f"{where}.padded_rows", integer=True))
        if "padded_rows" in r
        else 0
    )
    enqueue = r.get("enqueue_us_median")
    if enqueue is not None:
        enqueue = number_field(r, "enqueue_us_median", 0, MAX_US, f"{where}.enqueue_us_median")
    back_to_back = r.get("step_us_back_to_back")
    if back_to_back is not None:
        back_to_back = number_field(r, "step_us_back_to_back", 1e-3, MAX_US, f"{where}.step_us_back_to_back")
    launches = (
        int(number_field(r, "launches", 0, max_kernels, f"{where}.launches", integer=True))
        if "launches" in r
        else 0
    )
    if not isinstance(r.get("eager_fallback", False), bool):
        raise ValueError(f"{where}.eager_fallback: expected true or false")
    return {
        "bucket": bucket,
        "padded_rows": padded,
        "eager_fallback": bool(r.get("eager_fallback", False)),
        "enqueue_us_median": enqueue,
        "launches": launches,
        "step_us_back_to_back": back_to_back,
        **_spread(r, where, enqueue, back_to_back),
        "phases": parse_phases(r["phases"], f"{where}.phases") if r.get("phases") is not None else None,
    }


def _parse_capture(c, where: str) -> dict:
    if not isinstance(c, dict):
        raise ValueError(f"{where}: expected an object")
    number_field(c, "bucket", 1, _MAX_BATCH, f"{where}.bucket", integer=True)
    number_field(c, "capture_ms", 0, 1e6, f"{where}.capture_ms")
    number_field(c, "graph_mem_bytes", 0, 1e12, f"{where}.graph_mem_bytes", integer=True)
    for key in ("pool_bytes", "warmup_ms"):
        if c.get(key) is not None:
            number_field(c, key, 0, 1e12, f"{where}.{key}")
    if c.get("variant") is not None and (not isinstance(c["variant"], str) or len(c["variant"]) > 40):
        raise ValueError(f"{where}.variant: expected a string of at most 40 characters")
    bounded_block(c, where, 4000)
    return c


def _check_timeline_size(data, where: str, max_kernels: int) -> None:
    """Interval counts within the run's kernel bound and names short, before any array is built."""
    if not isinstance(data, dict):
        return  # Timeline.from_dict names the problem
    for lane in ("cpu", "gpu"):
        part = data.get(lane)
        if not isinstance(part, dict):
            continue
        for key in ("start_us", "dur_us", "name", "launched_by"):
            values = part.get(key)
            if isinstance(values, list) and len(values) > max_kernels:
                raise ValueError(
                    f"{where}.{lane}.{key}: {len(values):,} entries, more than the {max_kernels:,} "
                    "kernels a step of this model may have"
                )
        names = part.get("name")
        if isinstance(names, list):
            if not all(isinstance(n, str) for n in names):
                raise ValueError(f"{where}.{lane}.name: expected a list of strings")
            if any(len(n) > MAX_STRING for n in names):
                raise ValueError(f"{where}.{lane}.name: a name is longer than {MAX_STRING:,} characters")


# -- one run measured in parts -------------------------------------------------------
def merge_results(parts, command: str | None = None, settings: dict | None = None) -> ProbeResult:
    """One result from the parts of one run (the page measures a run in parts, each a result of the same model
    on the same GPU with its own modes and batches), checked as a file is.

    Runs: every part's, in the modes table's order and then by batch (a (mode, batch) in two parts: the later
    part's). Captures, checks and errors: every part's, each once (a check that failed in any part stays failed).
    Settings: the first part's, with the batches and the modes of all (`settings` adds to them). The header, the
    model, the two ceilings and the reference: the first part's, so that the floors do not move as parts arrive.
    The host: the first part's index with every part's samples (the first and the last ones, where there are more
    than a file holds). `command` replaces the first part's. ValueError where there are no parts, or where they
    are of different models or devices."""
    parts = [p.to_dict() if isinstance(p, ProbeResult) else dict(p) for p in parts]
    if not parts:
        raise ValueError("merge_results: no parts to merge")
    first = parts[0]
    for i, part in enumerate(parts[1:], 1):
        for key in ("device", "model"):
            if part.get(key) != first.get(key):
                raise ValueError(f"merge_results: part {i} has another {key} than part 0")
    runs: dict = {}
    for part in parts:
        runs.update({(r["mode"], r["batch"]): r for r in part.get("runs", [])})
    order = {name: i for i, name in enumerate(MODES)}
    captures: dict = {}
    checks: dict = {}
    errors: list[str] = []
    samples: list = []
    for part in parts:
        for c in part.get("captures", []):
            captures.setdefault((c.get("variant"), c["bucket"]), c)
        for name, check in part.get("checks", {}).items():
            if name not in checks or (checks[name].get("passed") and not check.get("passed")):
                checks[name] = check
        errors += [e for e in part.get("errors", []) if e not in errors]
        samples += (part.get("host") or {}).get("samples", [])
    merged = {
        **first,
        "runs": [runs[k] for k in sorted(runs, key=lambda k: (order.get(k[0], len(order)), k[1]))],
        "captures": list(captures.values()),
        "checks": checks,
        "errors": errors[:MAX_ERRORS],
        "settings": {
            **first.get("settings", {}),
            "batches": sorted({b for p in parts for b in p.get("settings", {}).get("batches", [])}),
            "modes": [m for m in MODES if any(m in p.get("settings", {}).get("modes", []) for p in parts)],
            **(settings or {}),
        },
    }
    if command is not None:
        merged["command"] = command
    host = next((p["host"] for p in parts if p.get("host")), None)
    if host is not None:
        half = MAX_HOST_SAMPLES // 2
        merged["host"] = {
            **host,
            "samples": samples if len(samples) <= 2 * half else samples[:half] + samples[-half:],
        }
    return load_result(merged)
