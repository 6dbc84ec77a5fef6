"""A torch.profiler trace -> its decode steps, each a `core.timeline.Timeline` with its readouts.

The one trace reader of this project: the probe's own traces, and any trace a user brings
(vLLM, SGLang, Hugging Face transformers, torch.compile, their own code). numpy and the
standard library only, so the page reads traces on machines without torch.

Reading (`read_trace`): `.json`, `.json.gz`, `.pt.trace.json(.gz)`, from a path, bytes or a
binary file object, gzip recognised by its magic bytes. The JSON is decoded one event at a time
from a stream, and only the events the lanes need are kept, in compact columns: a 300 MB trace
is never held as Python objects. Kept are
- launch calls: the runtime and driver APIs that submit GPU work (`cudaLaunchKernel`,
  `cudaLaunchKernelExC`, `cuLaunchKernel(Ex)` as Triton uses, cooperative launches,
  `cudaGraphLaunch`, memcpy and memset), from every host thread, plus any other API call whose
  correlation id a GPU event carries;
- host synchronisation calls (`cudaDeviceSynchronize`, `cudaStreamSynchronize`, ...);
- GPU events (kernels, memcpys, memsets) with their stream and correlation id: one graph launch
  correlates with every kernel it replays;
- CPU ranges (`ProfilerStep#N`, `record_function` names).

Steps (`find_steps`), by the first rule that applies: the CPU range the caller names
(`step_range`; the probe names `decode_step`); the profiler's `ProfilerStep#N` ranges; one step
per `cudaGraphLaunch` group; host synchronisation between steps; else the whole trace. The rule
used is reported with the steps.

A step's lanes (`step_timeline`): time 0 is the step range's start, or where there is no range,
the step's first launch call. A CPU interval is one launch call plus the host time before it on
its thread since the previous launch (or the step's start, or the end of a synchronisation):
the host's whole cost of building that launch -- Python, the dispatcher, argument packing and
the call itself. Where a step replays a graph, the copies issued right before the graph launch
(its inputs going into the static buffers) merge with it into one interval, as the simulator
draws a replay. Each CUDA stream is a GPU lane of its own.

Step readouts (`TraceStep`): kernels, launches, graph launches, streams, step time (time 0 to
the end of the last GPU event, or of the last launch call if later), GPU busy (the union over
all streams), utilisation, bound by, CPU launch time, GPU time by kind, and the launch delay:
how long after its launch call ended each GPU event started.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from core.timeline import GPU_KINDS, StepMetrics, Timeline

STEP_ANNOTATION = "decode_step"  # the probe's record_function around one step

# -- limits: what one trace may make the reader hold or do ------------------------------------
MAX_TEXT_CHARS = 2 * 10**9  # decompressed JSON characters read (a gzip bomb stops here)
# A 300 MB trace of 114 steps × 1,200 kernels holds about 0.8 M events, 137 k of them kernels
# (bench/trace_speed.py); these bounds keep the worst file a 500 MB upload can be to seconds of reading.
MAX_EVENTS = 5_000_000  # events read, all kinds
MAX_GPU_EVENTS = 1_500_000
MAX_CALLS = 1_500_000
MAX_EVENT_CHARS = 64 * 2**20  # one event object (a 64 MB event is not a profiler's)
MAX_STEPS = 10_000
_CHUNK = 4 * 2**20
_SPILL_ROWS = 65_536

# -- what the trace's names and categories mean -------------------------------------------------
_API_CATS = ("cuda_runtime", "cuda_driver", "runtime", "driver")
_GPU_CATS = {"kernel": 0, "gpu_memcpy": 1, "memcpy": 1, "gpu_memset": 2, "memset": 2}
_LAUNCH_PREFIXES = (
    "cudaLaunch",  # cudaLaunchKernel, cudaLaunchKernelExC, cudaLaunchCooperativeKernel(Multidevice)
    "cuLaunch",  # cuLaunchKernel(Ex), cuLaunchCooperativeKernel: Triton and other driver-API launchers
    "cudaGraphLaunch",
    "cuGraphLaunch",
    "cudaMemcpy",
    "cuMemcpy",
    "cudaMemset",
    "cuMemset",
)
_GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")
_SYNC_CALLS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
    }
)
_PROFILER_STEP = re.compile(r"ProfilerStep#(\d+)$")
# A kernel that only copies: the input copies a graph runner issues before its replay
# (torch._foreach_copy_, `copy_`, dtype casts) look like this.
_COPY_KERNEL = re.compile(r"copy", re.IGNORECASE)

# What the profiler records on a host thread, each at a cost of its own (sim.timing.ProfilerCost): aten ops and
# record_function ranges; the range Inductor opens around each Triton launch while a profiler runs (an op
# named triton_*, built in Python for each launch); CUDA runtime and driver calls; Python calls
# (with_stack=True); and ops' input shapes (record_shapes=True: an op with shapes counts as shapes too).
EVENT_KINDS = ("op", "triton", "runtime", "driver", "python", "shapes")
_OP, _TRITON, _RUNTIME, _DRIVER, _PYTHON = range(5)  # a host event's kind code
_SHAPES = 8  # or'ed into an op's code where it carries its input shapes
# The calls whose traced duration tells the host's speed (HostRecord.launch_call_us): kernel launches.
_KERNEL_LAUNCHES = (
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cudaLaunchCooperativeKernel",
    "cuLaunchCooperativeKernel",
)
# gpu_probe/recorder.py writes the step timed without the profiler under this top-level key (its schema).
UNTRACED_KEY = "launch_bound_untraced"
_UNTRACED_TIMERS = ("cuda_events", "host_clock")
_MAX_UNTRACED_US = 1e9  # a step over 1,000 s is no decode step: the block is absurd
# A Python function that makes at least this many calls is checked for the profiler's line lookup.
LINE_MIN_CALLS = 64

RULES = {
    "range": "the CPU range named {name!r}",
    "profiler": "the profiler's ProfilerStep#N ranges",
    "graph": "one step per cudaGraphLaunch",
    "sync": "host synchronisation between steps",
    "whole": "the whole trace as one step",
}


class TraceError(ValueError):
    """A trace that cannot be read or has no step; the message is one sentence for the page."""


# -- reading ----------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Trace:
    """The events of one trace file that the lanes need, as columns (times in µs)."""

    name: str
    device: str  # the first GPU's name where the trace has deviceProperties, else ''
    names: tuple[str, ...]  # every kept event's name, once: the columns below index into it
    # launch and synchronisation calls, sorted by start
    call_ts: np.ndarray
    call_dur: np.ndarray
    call_thread: np.ndarray  # index into `threads`
    call_name: np.ndarray
    call_corr: np.ndarray  # -1 where none
    # GPU events, sorted by start
    gpu_ts: np.ndarray
    gpu_dur: np.ndarray
    gpu_stream: np.ndarray  # the CUDA stream id (device * 1_000_000 + stream where a file has several GPUs)
    gpu_name: np.ndarray
    gpu_corr: np.ndarray
    gpu_bytes: np.ndarray  # memcpy / memset size, 0 for kernels
    gpu_op_bytes: np.ndarray  # largest tensor input of the op that launched it (record_shapes), 0 unknown
    # CPU ranges (record_function, ProfilerStep#N), sorted by start
    range_ts: np.ndarray
    range_dur: np.ndarray
    range_thread: np.ndarray
    range_name: np.ndarray
    threads: tuple[str, ...]  # 'pid/tid' of each host thread
    events: int  # events in the file, all kinds
    # What the profiler recorded on the host besides API calls (ops, record_function ranges, Python calls),
    # in no particular order: for counting, per step, the events whose cost the profiler added.
    host_ts: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    host_thread: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.int32))
    host_kind: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.int8))  # _OP, ...
    host_line_us: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))  # `_python_line_us`
    # The recorder's untraced timing (gpu_probe/recorder.py), where the trace carries a sound one.
    recorded_untraced: dict | None = None
    recorded_note: str = ""  # why a block the trace carries is not used (one sentence), else ''
    # GPU events left out for a time stamp or stream id no profiler writes (NaN, text, 400 digits): their
    # correlation ids, sorted, so that their launch calls are explained by that and not by dropped records.
    unusable_corr: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.int64))
    # Per GPU event: the `op_signature` of the op that launched it (record_shapes) as an index into `names`, -1 unknown.
    gpu_op_signature: np.ndarray | None = field(repr=False, default=None)

    def name_of(self, index) -> str:
        return self.names[int(index)]


class _Columns:
    """Rows of one event kind as tuples (appending to arrays one value at a time is slow), turned into
    numpy columns every `_SPILL_ROWS` rows: a Python tuple of floats costs ~30 times its numbers' bytes,
    so a 1.4 M-kernel trace would hold ~0.5 GB of tuples while being read."""

    def __init__(self, dtypes: dict, *fields: str):
        self.fields, self.dtypes = fields, dtypes
        self.rows: list[tuple] = []
        self.add = self.rows.append  # add((value, ...)): one tuple per event, in `fields` order
        self.chunks: list[list[np.ndarray]] = []
        self.spilled = 0

    def spill_if_full(self) -> None:
        if len(self.rows) >= _SPILL_ROWS:
            self._spill()

    def _spill(self) -> None:
        columns = zip(*self.rows) if self.rows else ([] for _ in self.fields)
        self.chunks.append(
            [np.asarray(c, self.dtypes.get(f, np.float64)) for f, c in zip(self.fields, columns)]
        )
        self.spilled += len(self.rows)
        del self.rows[:]  # in place: `add` is bound to this list

    def __len__(self) -> int:
        return self.spilled + len(self.rows)

    def arrays(self, order_by: str) -> dict:
        self._spill()
        out = {f: np.concatenate([chunk[k] for chunk in self.chunks]) for k, f in enumerate(self.fields)}
        self.chunks = []
        order = np.argsort(out[order_by], kind="stable")
        return {f: a[order] for f, a in out.items()}


def read_trace(source, name: str | None = None, host_only: bool = False) -> Trace:
    """Read a Chrome trace written by torch.profiler; `TraceError` says in one sentence what is wrong.

    `host_only`: a trace with no GPU work is read too (only `count_events` can use it: it has no steps)."""
    label = name or (Path(source).name if isinstance(source, (str, Path)) else "trace")
    if isinstance(source, (str, Path)) and Path(source).suffix in (".nsys-rep", ".qdrep", ".sqlite"):
        raise TraceError(_NSIGHT)
    with _open_binary(source) as raw:
        head = raw.peek(16)[:16] if hasattr(raw, "peek") else b""
        binary = gzip.GzipFile(fileobj=raw) if head[:2] == b"\x1f\x8b" else raw
        try:
            text = io.TextIOWrapper(binary, encoding="utf-8-sig", errors="strict")
            return _collect(_events(text), label, host_only)
        except EOFError:
            raise TraceError(
                f"{label} ends early: the gzip stream is truncated (was the copy complete?)"
            ) from None
        except (gzip.BadGzipFile, zlib.error, OSError) as err:
            raise TraceError(f"{label} is not a readable gzip file ({err})") from None
        except UnicodeDecodeError:
            if b"NSYS" in head.upper() or b"QDSTRM" in head.upper():
                raise TraceError(_NSIGHT) from None
            raise TraceError(f"{label} is not a JSON trace: it is not UTF-8 text") from None


_NSIGHT = (
    "This is an Nsight Systems report, not a PyTorch profiler trace: record the steps with torch.profiler "
    "and export_chrome_trace (or the engine's torch-profiler option) and upload that JSON."
)


def _open_binary(source):
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise TraceError(f"no such file: {str(path)[:300]}")
        return io.BufferedReader(open(path, "rb"), buffer_size=_CHUNK)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return io.BufferedReader(io.BytesIO(source))
    if hasattr(source, "read"):
        if hasattr(source, "seek"):
            source.seek(0)
        return io.BufferedReader(_Unclosing(source), buffer_size=_CHUNK)
    raise TraceError(f"cannot read a trace from a {type(source).__name__}")


class _Unclosing(io.RawIOBase):
    """A caller's file object (an upload) read through without closing it."""

    def __init__(self, inner):
        self.inner = inner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.inner.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


_DECODER = json.JSONDecoder()
_SKIP = re.compile(r"[\s,]*")
_MALFORMED = object()  # a top-level value that is not JSON


@dataclass(frozen=True, slots=True)
class _Meta:
    """A top-level key of the trace object the reader keeps (not an event)."""

    key: str
    value: object


def _events(text):
    """Every object of the trace's event array, decoded one at a time from the text stream.

    Handles the object form ({"traceEvents": [...], ...}; other keys are skipped) and the bare
    array form of the Chrome trace format.
    """
    buf, pos, total, eof = "", 0, 0, False

    def fill() -> bool:
        nonlocal buf, pos, total, eof
        if eof:
            return False
        more = text.read(_CHUNK)
        total += len(more)
        if total > MAX_TEXT_CHARS:
            raise TraceError(
                f"the trace is larger than {MAX_TEXT_CHARS / 1e9:.0f} GB of JSON once decompressed"
            )
        if not more:
            eof = True
            return False
        buf, pos = buf[pos:] + more, 0
        return True

    def skip() -> str:
        nonlocal pos
        while True:
            pos = _SKIP.match(buf, pos).end()
            if pos < len(buf):
                return buf[pos]
            if not fill():
                return ""

    def value():
        nonlocal pos
        skip()
        while True:
            try:
                obj, end = _DECODER.raw_decode(buf, pos)
            except json.JSONDecodeError as err:
                if len(buf) - pos > MAX_EVENT_CHARS:
                    raise TraceError(
                        "the trace has an event larger than 64 MB: not a profiler trace"
                    ) from None
                if fill():
                    continue
                raise TraceError(
                    f"the trace is not valid JSON near character {total - len(buf) + err.pos:,}"
                ) from None
            except RecursionError:
                raise TraceError("the trace is not valid JSON (nested too deeply)") from None
            except (
                ValueError
            ):  # Python's limit on an integer literal's digits (4,300): no profiler writes one
                raise TraceError(
                    "the trace has a number thousands of digits long: not a profiler trace"
                ) from None
            # A number or word cut at the chunk's end decodes as a shorter one: read on and decode again.
            if end == len(buf) and not eof and fill():
                continue
            pos = end
            return obj

    first = skip()
    if first == "[":
        pos += 1
    elif first == "{":
        pos += 1
        while True:
            ch = skip()
            if ch == "}" or not ch:
                raise TraceError("the trace has no traceEvents: not a Chrome trace from torch.profiler")
            key = value()
            if skip() != ":":
                raise TraceError("the trace is not valid JSON (expected ':' after a key)")
            pos += 1
            if key == "traceEvents":
                if skip() != "[":
                    raise TraceError("traceEvents is not a list")
                pos += 1
                break
            meta = value()
            if key == "deviceProperties":
                yield _Meta("device", meta)
            elif key == UNTRACED_KEY:
                yield _Meta("untraced", meta)
    else:
        raise TraceError("the file is not a JSON trace: it does not start with '{' or '['")
    while True:
        ch = skip()
        if ch == "]":
            break
        if not ch:
            raise TraceError("the trace ends early: its event list is not closed (was the copy complete?)")
        event = value()
        if isinstance(event, dict):
            yield event
    # Keys after the event list (deviceProperties, traceName) are read for the device name and the
    # recorder's block only.
    rest = ""
    while fill() or pos < len(buf):
        rest += buf[pos:]
        pos = len(buf)
        if len(rest) > MAX_EVENT_CHARS:
            break
    found = re.search(r'"deviceProperties"\s*:\s*\[\s*\{[^{}]*?"name"\s*:\s*"([^"]{1,200})"', rest)
    if found:
        yield _Meta("device", [{"name": found.group(1)}])
    found = re.search(rf'"{UNTRACED_KEY}"\s*:\s*', rest)
    if found:
        try:
            yield _Meta("untraced", _DECODER.raw_decode(rest, found.end())[0])
        except (ValueError, RecursionError):
            yield _Meta("untraced", _MALFORMED)


def _number(value, default=0.0) -> float:
    """A finite float from a number or numeric string; `default` for anything else (400 digits included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return default
    try:
        out = float(value)
    except (ValueError, OverflowError):
        return default
    return out if math.isfinite(out) else default


_ID_LIMIT = 2**62
_MAX_US = 1e17


def _id(value, default: int = -1) -> int:
    """An integer id (correlation, stream, External id) that fits the columns; `default` if it does not."""
    out = _number(value, np.nan)
    return int(out) if abs(out) < _ID_LIMIT else default  # NaN compares False


def _text(value, limit: int) -> str:
    """A name as the page can show it: at most `limit` characters, lone surrogates (an escaped \\ud800 in
    the JSON) replaced, since neither the page nor a UTF-8 terminal can encode them."""
    text = value[:limit]
    if not text.isascii():
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _thread_key(event: dict) -> tuple:
    """(pid, tid) of a host event as a dictionary key: an int or a short string (a list or NaN in an edited
    file becomes its text)."""
    pid, tid = event.get("pid"), event.get("tid")
    if type(pid) is int and type(tid) is int:  # what a profiler writes: the fast path of every host event
        return pid, tid
    return tuple(
        v if isinstance(v, int) else v[:100] if isinstance(v, str) else repr(v)[:100] for v in (pid, tid)
    )


_ELEMENT_BYTES = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4, "short int": 2,
    "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
}  # fmt: skip


_SHORT_TYPES = {"c10::BFloat16": "bf16", "c10::Half": "f16", "float": "f32", "double": "f64", "long int": "i64",
                "int": "i32", "bool": "bool"}  # fmt: skip


def op_signature(name: str, dims, types) -> str:
    """'aten::mul [1, 32, 1, 64] bf16, [1, 1, 1, 64] bf16': an op and its inputs' shapes and types as record_shapes
    wrote them (a scalar or a list of tensors as 'scalar', 'list'), at most 400 characters. `op_inputs` reads it back."""
    parts = []
    for shape, kind in zip(dims if isinstance(dims, list) else (), types if isinstance(types, list) else ()):
        if isinstance(shape, list) and shape and all(type(d) is int and 0 <= d < 2**40 for d in shape):
            kind = _SHORT_TYPES.get(kind, kind) if isinstance(kind, str) else "?"
            parts.append(f"[{', '.join(map(str, shape))}] {_text(kind, 40)}")
        else:
            parts.append("list" if isinstance(shape, list) and shape else "scalar")
    return _text(f"{name} {', '.join(parts)}".strip(), 400)


_INPUT = re.compile(r"\[([\d, ]*)\] ([^\s,]+)|(scalar|list)")


def op_inputs(signature: str) -> tuple[str, list[tuple[tuple[int, ...], str] | None]]:
    """(op name, [(shape, short dtype), or None for a scalar or a list, per input]) of an `op_signature`."""
    name, _, rest = signature.partition(" ")
    inputs = []
    for m in _INPUT.finditer(rest):
        if m.group(3):
            inputs.append(None)
        else:
            inputs.append((tuple(int(d) for d in m.group(1).split(",") if d.strip()), m.group(2)))
    return name, inputs


def _largest_tensor_bytes(dims, types, skip_first: bool = False) -> int:
    """The largest tensor input of an op, in bytes, from record_shapes' 'Input Dims' / 'Input type'."""
    if not isinstance(dims, list) or not isinstance(types, list):
        return 0
    best = 0
    for k, (shape, kind) in enumerate(zip(dims, types)):
        if skip_first and k == 0:
            continue
        if not isinstance(shape, list) or not shape or not isinstance(kind, str):
            continue
        size = _ELEMENT_BYTES.get(kind, 1 if kind.startswith("c10::Float8") else 0)
        if size and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40 for d in shape):
            best = max(best, size * math.prod(shape))
    return min(best, 2**62)


def json_kind(value) -> str:
    """What a JSON value is, as a message names it: 'a number', 'a list', 'a string', 'true or false', 'null'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    kinds = ((int, "a number"), (float, "a number"), (str, "a string"), (list, "a list"), (dict, "an object"))
    return next((word for kind, word in kinds if isinstance(value, kind)), f"a {type(value).__name__}")


def untraced_block(block) -> tuple[dict | None, str]:
    """(the recorder's block, '') where `block` is a sound one (gpu_probe/recorder.py's schema 1), else (None,
    one sentence on what is wrong) -- '' too where the trace carries none."""
    if block is None:
        return None, ""

    def refused(why: str) -> tuple[None, str]:
        return None, (
            f"The trace's {UNTRACED_KEY} block is not used ({why}): the step without the profiler is estimated."
        )

    if block is _MALFORMED:
        return refused("it is not valid JSON")
    if not isinstance(block, dict):
        return refused(f"it is {json_kind(block)}, not an object")
    if type(block.get("schema")) is not int or block["schema"] != 1:
        return refused(f"schema {_text(repr(block.get('schema')), 40)}, not 1")
    for key in ("median_us", "p10_us", "p90_us"):
        v = block.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return refused(f"{key} is not a number")
        if v <= 0:
            return refused(f"{key} is not positive")
        if v > _MAX_UNTRACED_US:
            return refused(f"{key} is {v:.3g} µs, absurd for a step")
    if not block["p10_us"] <= block["median_us"] <= block["p90_us"]:
        return refused("its median is not between its p10 and p90")
    steps = block.get("steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        return refused("steps is not a positive whole number")
    if block.get("timer") not in _UNTRACED_TIMERS:
        return refused(
            f"timer {_text(repr(block.get('timer')), 40)} is not one of {', '.join(_UNTRACED_TIMERS)}"
        )
    return block, ""


def _python_line_us(p: dict) -> np.ndarray:
    """Per Python call (with_stack=True): how much more host time its caller took before it than before its first
    calls. The profiler looks up the caller's line for every call it records, scanning the caller's bytecode up
    to the call, so the cost grows with the call's place in a long function: in Inductor's generated `call`
    (1,088 calls, H200) the host time between two calls grows from 2.5 µs to 23 µs. A loop calls from one place
    and shows no growth. Measured per caller from the gaps between its calls: the growth from the first to the
    last quarter of them, where it at least doubles the gap, spread linearly over the calls."""
    out = np.zeros(len(p["ts"]))
    known = np.flatnonzero(p["parent"] >= 0)
    if len(known) < LINE_MIN_CALLS:
        return out
    order = known[np.lexsort((p["ts"][known], p["parent"][known]))]
    bounds = np.flatnonzero(np.diff(p["parent"][order])) + 1
    first_row, last_row = np.concatenate(([0], bounds)), np.concatenate((bounds, [len(order)]))
    end = p["ts"] + p["dur"]
    for lo, hi in zip(first_row.tolist(), last_row.tolist()):
        if hi - lo < LINE_MIN_CALLS:
            continue
        rows = order[lo:hi]
        gaps = p["ts"][rows[1:]] - end[rows[:-1]]
        q = len(gaps) // 4
        first, last = float(np.median(gaps[:q])), float(np.median(gaps[-q:]))
        if last > 2 * max(first, 0.0) + 1.0:
            out[rows] = (last - first) / (len(gaps) - q) * np.arange(len(rows))
    return out


def _collect(events, label: str, host_only: bool = False) -> Trace:
    names: dict[str, int] = {}
    threads: dict[tuple, int] = {}
    ints = dict.fromkeys(("thread", "name", "corr", "stream", "bytes", "device", "ext", "sig"), np.int64)
    calls = _Columns(ints, "ts", "dur", "thread", "name", "corr")
    gpu = _Columns(ints, "ts", "dur", "stream", "name", "corr", "bytes", "device", "ext")
    ranges = _Columns(ints, "ts", "dur", "thread", "name")
    # With record_shapes: each op's largest tensor input, and its signature (`op_signature`) as a name id.
    ops = _Columns(ints, "ext", "bytes", "sig")
    # What the profiler recorded on the host besides API calls (whose cost it adds): ops and ranges, Python calls.
    host = _Columns({"thread": np.int32, "kind": np.int8}, "ts", "thread", "kind")
    python = _Columns({"thread": np.int32, "parent": np.int64}, "ts", "dur", "thread", "parent")
    device, count, unusable_gpu, untraced = "", 0, 0, None
    unusable_corr: list[int] = []  # of the GPU events left out for their time stamp or stream id

    def name_id(text: str) -> int:
        return names.setdefault(_text(text, 4000), len(names))

    for event in events:
        count += 1
        if count > MAX_EVENTS:
            raise TraceError(f"the trace has more than {MAX_EVENTS:,} events: profile fewer steps")
        if isinstance(event, _Meta):
            props = event.value
            if event.key == "untraced":
                untraced = props
            elif not device and isinstance(props, list) and props and isinstance(props[0], dict):
                device = _text(str(props[0].get("name", "")), 200)
            continue
        if event.get("ph") != "X":
            continue
        cat = event.get("cat")
        cat = cat.lower() if isinstance(cat, str) else ""
        name = event.get("name")
        ts, dur = _number(event.get("ts"), np.nan), min(max(_number(event.get("dur")), 0.0), _MAX_US)
        args = event.get("args")
        args = args if isinstance(args, dict) else {}
        # No name, or a time that is NaN or past any clock a profiler keeps (µs since the epoch are ~1.8e15).
        if not isinstance(name, str) or not abs(ts) < _MAX_US:
            if cat in _GPU_CATS:
                unusable_gpu += 1
                unusable_corr.append(_id(args.get("correlation")))
            continue
        if cat in _GPU_CATS:
            corr = args.get("correlation")
            device_id = _id(args.get("device", event.get("pid")), 0)
            # Kineto names the stream in args; without it the event's tid, or 0. A profiler writes no id below 0.
            stream = _id(args["stream"], -1) if "stream" in args else max(_id(event.get("tid"), 0), 0)
            if stream < 0:  # NaN, text, a negative or 400-digit id: it is on no stream the trace names
                unusable_gpu += 1
                unusable_corr.append(_id(corr))
                continue
            gpu.add(
                (
                    ts,
                    dur,
                    stream,
                    name_id(name),
                    _id(corr),
                    max(_id(args.get("bytes"), 0), 0),
                    device_id,
                    _id(args.get("External id")),
                )
            )
            gpu.spill_if_full()
            if len(gpu) > MAX_GPU_EVENTS:
                raise TraceError(
                    f"the trace has more than {MAX_GPU_EVENTS:,} GPU events: profile fewer steps"
                )
        elif cat in _API_CATS:
            thread = threads.setdefault(_thread_key(event), len(threads))
            calls.add((ts, dur, thread, name_id(name), _id(args.get("correlation"))))
            calls.spill_if_full()
            if len(calls) > MAX_CALLS:
                raise TraceError(f"the trace has more than {MAX_CALLS:,} runtime calls: profile fewer steps")
        elif cat == "user_annotation" or (cat == "cpu_op" and _PROFILER_STEP.match(name)):
            thread = threads.setdefault(_thread_key(event), len(threads))
            ranges.add((ts, dur, thread, name_id(name)))
            ranges.spill_if_full()
            if not _PROFILER_STEP.match(name):  # a record_function range costs what an op costs
                host.add((ts, thread, _OP | (_SHAPES if "Input Dims" in args else 0)))
                host.spill_if_full()
        elif cat == "cpu_op":
            thread = threads.setdefault(_thread_key(event), len(threads))
            shapes = "Input Dims" in args
            kind = _TRITON if name.startswith("triton_") else _OP
            host.add((ts, thread, kind | (_SHAPES if shapes else 0)))
            host.spill_if_full()
            if shapes:
                # An in-place op's first input is its destination (a whole KV cache for index_copy_): skip it.
                largest = _largest_tensor_bytes(
                    args.get("Input Dims"), args.get("Input type"), name.endswith("_")
                )
                if largest:
                    signature = op_signature(name, args.get("Input Dims"), args.get("Input type"))
                    ops.add((_id(args.get("External id")), largest, name_id(signature)))
                    ops.spill_if_full()
        elif cat == "python_function":
            thread = threads.setdefault(_thread_key(event), len(threads))
            python.add((ts, dur, thread, _id(args.get("Python parent id"))))
            python.spill_if_full()

    if count == 0:
        raise TraceError(f"{label} has no events")
    if host_only:
        pass
    elif not len(gpu) and unusable_gpu:
        raise TraceError(
            f"{label}: none of its {unusable_gpu:,} GPU events has a name, a usable time stamp ('ts') and a "
            "usable stream id"
        )
    elif not len(gpu):
        raise TraceError(
            f"{label} has no GPU events: it is a CPU-only profile (profile with ProfilerActivity.CUDA as well)"
        )
    elif not len(calls):
        raise TraceError(f"{label} has GPU events but no CUDA runtime calls: the host side was not profiled")
    c, g, r = calls.arrays("ts"), gpu.arrays("ts"), ranges.arrays("ts") if len(ranges) else None
    if (g["corr"] < 0).all() and not host_only:
        raise TraceError(
            f"{label}: its GPU events carry no correlation ids, so kernels cannot be matched to their launches"
        )
    # Each GPU event gets the largest tensor input of the op that launched it (0: not recorded).
    op_bytes = np.zeros(len(g["ts"]), np.int64)
    op_sig = np.full(len(g["ts"]), -1, np.int64)
    if len(ops):
        o = ops.arrays("ext")
        at = np.minimum(np.searchsorted(o["ext"], g["ext"]), len(o["ext"]) - 1)
        found = (o["ext"][at] == g["ext"]) & (g["ext"] >= 0)
        op_bytes[found] = o["bytes"][at[found]]
        op_sig[found] = o["sig"][at[found]]
    stream = g["stream"]
    devices, device_index = np.unique(g["device"], return_inverse=True)
    if len(devices) > 1:  # one process driving several GPUs: keep their streams apart
        stream = device_index * 1_000_000 + stream % 1_000_000
    empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0)
    thread_names = tuple(f"{pid}/{tid}" for pid, tid in threads)
    h = host.arrays("ts") if len(host) else None
    p = python.arrays("ts") if len(python) else None
    recorded, recorded_note = untraced_block(untraced)
    return Trace(
        name=label,
        device=device,
        names=tuple(names),
        call_ts=c["ts"],
        call_dur=c["dur"],
        call_thread=c["thread"],
        call_name=c["name"],
        call_corr=c["corr"],
        gpu_ts=g["ts"],
        gpu_dur=g["dur"],
        gpu_stream=stream,
        gpu_name=g["name"],
        gpu_corr=g["corr"],
        gpu_bytes=g["bytes"],
        gpu_op_bytes=op_bytes,
        gpu_op_signature=op_sig,
        range_ts=r["ts"] if r else empty_f,
        range_dur=r["dur"] if r else empty_f,
        range_thread=r["thread"] if r else empty_i,
        range_name=r["name"] if r else empty_i,
        threads=thread_names,
        events=count,
        host_ts=np.concatenate((h["ts"] if h else empty_f, p["ts"] if p else empty_f)),
        host_thread=np.concatenate((h["thread"] if h else empty_i, p["thread"] if p else empty_i)).astype(
            np.int32
        ),
        host_kind=np.concatenate(
            (h["kind"] if h else empty_i, np.full(len(p["ts"]) if p else 0, _PYTHON))
        ).astype(np.int8),
        host_line_us=np.concatenate(
            (np.zeros(len(h["ts"]) if h else 0), _python_line_us(p) if p else empty_f)
        ),
        recorded_untraced=recorded,
        recorded_note=recorded_note,
        unusable_corr=np.unique(np.array([c for c in unusable_corr if c >= 0], np.int64)),
    )


# -- which calls are launches ------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class _Index:
    """What the step finder and the lanes need to look up fast, built once per trace."""

    launch: np.ndarray  # call indices of the launch calls (outermost per thread), sorted by start
    position: np.ndarray  # per call: its position in `launch` (-1: not a launch)
    is_graph: np.ndarray  # per launch: a graph launch?
    is_copy: np.ndarray  # per launch: does it only copy inputs in (no copy to the host)?
    is_kernel_launch: np.ndarray  # per launch: a kernel launch call (not a graph launch, copy or memset)?
    sync: np.ndarray  # call indices of host synchronisation calls, sorted by start
    gpu_by_owner: np.ndarray  # GPU event rows ordered by the position of the launch that owns them
    owner_sorted: np.ndarray  # that position, for each row of gpu_by_owner (-1: no launch owns it)
    orphans: (
        np.ndarray
    )  # GPU event rows no launch call owns (its record dropped, or before the profile), by start


def _index(trace: Trace) -> _Index:
    cached = trace.__dict__.get("_index")
    if cached is not None:
        return cached
    names = trace.names
    is_launch = np.array([n.startswith(_LAUNCH_PREFIXES) for n in names], bool)
    is_sync = np.array([n in _SYNC_CALLS for n in names], bool)
    is_graph = np.array([n.startswith(_GRAPH_LAUNCHES) for n in names], bool)
    is_copy_call = np.array(
        [n.startswith(("cudaMemcpy", "cuMemcpy", "cudaMemset", "cuMemset")) for n in names]
    )
    # A copy back to the host (the sampled token) is a step's output, never a graph's input.
    is_copy_kernel = np.array(
        [
            (bool(_COPY_KERNEL.search(n)) or n.startswith(("Memcpy", "Memset"))) and "DtoH" not in n
            for n in names
        ]
    )
    name = trace.call_name
    n_calls = len(name)

    # Which call each GPU event's correlation id belongs to.
    gpu_corr = trace.gpu_corr
    known = np.unique(gpu_corr[gpu_corr >= 0])
    correlated = np.isin(trace.call_corr, known) & (trace.call_corr >= 0)
    candidate = (is_launch[name] | correlated) & ~is_sync[name]

    # A runtime call can show the driver call it makes as a second event inside it: keep the outermost
    # one, per host thread (launches on two threads overlap in time legitimately). Intervals on one
    # thread either nest or are disjoint, so "starts before an earlier call has ended" means nested; a
    # nested call's GPU work belongs to the call around it.
    outermost = np.arange(n_calls)
    keep = candidate.copy()
    for thread in np.unique(trace.call_thread[candidate]):
        rows = np.flatnonzero(candidate & (trace.call_thread == thread))
        running = np.maximum.accumulate(trace.call_ts[rows] + trace.call_dur[rows])
        nested = np.zeros(len(rows), bool)
        nested[1:] = trace.call_ts[rows[1:]] < running[:-1]
        keep[rows[nested]] = False
        last_outer = np.maximum.accumulate(np.where(nested, 0, np.arange(len(rows))))
        outermost[rows] = rows[last_outer]
    launch = np.flatnonzero(keep)
    position = np.full(n_calls, -1, np.int64)
    position[launch] = np.arange(len(launch))

    owner = np.full(len(gpu_corr), -1, np.int64)
    calls_with_corr = np.flatnonzero(candidate & correlated)
    if len(calls_with_corr):
        order = np.argsort(trace.call_corr[calls_with_corr], kind="stable")
        corr_sorted = trace.call_corr[calls_with_corr][order]
        at = np.minimum(np.searchsorted(corr_sorted, gpu_corr), len(corr_sorted) - 1)
        hit = (corr_sorted[at] == gpu_corr) & (gpu_corr >= 0)
        owner[hit] = position[outermost[calls_with_corr[order][at[hit]]]]
    gpu_by_owner = np.argsort(owner, kind="stable")
    owner_sorted = owner[gpu_by_owner]

    # A launch copies inputs in when all its GPU work does; without GPU work its name decides.
    mine = owner >= 0
    work = np.bincount(owner[mine], minlength=len(launch))
    copies = np.bincount(owner[mine], weights=is_copy_kernel[trace.gpu_name[mine]], minlength=len(launch))
    is_copy = np.where(work > 0, copies == work, is_copy_call[name[launch]])
    out = _Index(
        launch=launch,
        position=position,
        is_graph=is_graph[name[launch]],
        is_copy=is_copy.astype(bool),
        is_kernel_launch=np.array([n.startswith(_KERNEL_LAUNCHES) for n in names], bool)[name[launch]],
        sync=np.flatnonzero(is_sync[name]),
        gpu_by_owner=gpu_by_owner,
        owner_sorted=owner_sorted,
        orphans=gpu_by_owner[owner_sorted < 0],
    )
    object.__setattr__(trace, "_index", out)
    return out


@dataclass(frozen=True, eq=False)
class _HostIndex:
    """Every event the profiler recorded on the host (ops, ranges, Python calls, API calls), sorted by thread
    and start, with running counts by kind: a row of the host lane counts its events by two look-ups."""

    ts: np.ndarray
    bounds: dict  # thread -> (first, last + 1) row of its events
    counts: np.ndarray  # (events + 1, len(EVENT_KINDS)): events before each row, by kind
    line_us: np.ndarray  # (events + 1,): `_python_line_us` before each row


def _host_index(trace: Trace) -> _HostIndex:
    cached = trace.__dict__.get("_host_index")
    if cached is not None:
        return cached
    driver = np.array([n.startswith("cu") and not n.startswith("cuda") for n in trace.names], bool)
    call_kind = np.where(driver[trace.call_name], _DRIVER, _RUNTIME) if len(trace.call_name) else []
    ts = np.concatenate((trace.host_ts, trace.call_ts))
    thread = np.concatenate((trace.host_thread, trace.call_thread))
    kind = np.concatenate((trace.host_kind, call_kind)).astype(np.int8)
    line = np.concatenate((trace.host_line_us, np.zeros(len(trace.call_ts))))
    order = np.lexsort((ts, thread))
    ts, thread, kind, line = ts[order], thread[order], kind[order], line[order]
    one_hot = np.zeros((len(ts) + 1, len(EVENT_KINDS)), np.int32)
    for column, code in enumerate((_OP, _TRITON, _RUNTIME, _DRIVER, _PYTHON)):
        one_hot[1:, column] = (kind & ~_SHAPES) == code
    one_hot[1:, EVENT_KINDS.index("shapes")] = (kind & _SHAPES) != 0
    threads, first = np.unique(thread, return_index=True)
    last = np.concatenate((first[1:], [len(ts)]))
    out = _HostIndex(
        ts=ts,
        bounds={int(t): (int(a), int(b)) for t, a, b in zip(threads, first, last)},
        counts=np.cumsum(one_hot, axis=0, dtype=np.int32),
        line_us=np.concatenate(([0.0], np.cumsum(line))),
    )
    object.__setattr__(trace, "_host_index", out)
    return out


@dataclass(frozen=True, eq=False)
class HostRecord:
    """The step's host lane as the profiler recorded it, row by row, for taking the profiler's own cost out of it
    (`sim.trace.whatif.untraced`).

    One row per CPU interval of the step's timeline and per host synchronisation between them, each thread's
    rows in time order and tiling its lane: a row's host time runs from the previous row's end on its thread
    (`start`; the step's start for the thread that owns the step, the call's own start for another thread's
    first row) through its call (`call_start` to `end`). Times are µs from the step's start, rows sorted by end."""

    interval: np.ndarray  # the row's CPU interval (index into the timeline's CPU lane); -1: a synchronisation
    thread: np.ndarray  # its host thread (the timeline's cpu_thread)
    start: np.ndarray
    call_start: np.ndarray
    end: np.ndarray
    counts: np.ndarray  # (rows, len(EVENT_KINDS)): the events recorded on its thread in [start, end), by kind
    line_us: np.ndarray  # per row: `_python_line_us` of its Python calls, summed
    # The step's kernel launch calls' median traced duration (NaN: none) and their number: how fast the host
    # ran while traced.
    launch_call_us: float = float("nan")
    launch_calls: int = 0

    def totals(self) -> dict[str, int]:
        """The step's recorded events by kind (EVENT_KINDS)."""
        return dict(zip(EVENT_KINDS, self.counts.sum(axis=0).tolist()))


def count_events(trace: Trace, thread: int, start, end) -> tuple[np.ndarray, np.ndarray]:
    """The events the profiler recorded on `thread` (an index into `trace.threads`) in each [start, end) (trace µs):
    their counts by kind (rows × EVENT_KINDS) and their line lookups (µs, `_python_line_us`) per row."""
    host = _host_index(trace)
    start, end = np.atleast_1d(np.asarray(start, np.float64)), np.atleast_1d(np.asarray(end, np.float64))
    if thread not in host.bounds:
        return np.zeros((len(start), len(EVENT_KINDS)), np.int64), np.zeros(len(start))
    a, b = host.bounds[thread]
    lo = a + np.searchsorted(host.ts[a:b], start, side="left")
    hi = a + np.searchsorted(host.ts[a:b], end, side="left")
    return (host.counts[hi] - host.counts[lo]).astype(np.int64), host.line_us[hi] - host.line_us[lo]


def _host_record(
    trace, idx, t0, cpu_start, cpu_end, cpu_thread, call_start, owner_thread, launch_call_us
) -> HostRecord:
    """The rows of `HostRecord` for one step's CPU lane (`call_start`: each interval's launch call's start;
    `launch_call_us`: the step's kernel launch calls' traced durations)."""
    sync_start = trace.call_ts[idx.sync] - t0
    sync_end = sync_start + trace.call_dur[idx.sync]
    sync_thread = trace.call_thread[idx.sync]
    columns = {k: [] for k in ("interval", "thread", "start", "call_start", "end")}
    for th in np.unique(cpu_thread).tolist():
        rows = np.flatnonzero(cpu_thread == th)
        last = float(cpu_end[rows].max())
        mine = np.flatnonzero((sync_thread == th) & (sync_start >= 0) & (sync_end <= last))
        interval = np.concatenate((rows, np.full(len(mine), -1)))
        begin = np.concatenate((call_start[rows], sync_start[mine]))
        end = np.concatenate((cpu_end[rows], sync_end[mine]))
        order = np.lexsort((interval < 0, begin))
        interval, begin, end = interval[order], begin[order], end[order]
        # A synchronisation inside a launch call (a blocking copy's own wait) is part of that call's row.
        inside = np.zeros(len(end), bool)
        inside[1:] = (interval[1:] < 0) & (begin[1:] < np.maximum.accumulate(end)[:-1])
        interval, begin, end = interval[~inside], begin[~inside], end[~inside]
        start = np.concatenate(([0.0 if th == owner_thread else float(begin[0])], end[:-1]))
        start[interval >= 0] = cpu_start[interval[interval >= 0]]  # the lane's own tiling, as drawn
        for key, value in zip(columns, (interval, np.full(len(end), th), start, begin, end)):
            columns[key].append(value)
    interval, thread, start, begin, end = (np.concatenate(columns[k]) for k in columns)
    counts = np.zeros((len(end), len(EVENT_KINDS)), np.int64)
    line = np.zeros(len(end))
    for th in np.unique(thread).tolist():
        rows = np.flatnonzero(thread == th)
        counts[rows], line[rows] = count_events(trace, th, start[rows] + t0, end[rows] + t0)
    order = np.argsort(end, kind="stable")
    return HostRecord(
        interval=interval[order],
        thread=thread[order],
        start=start[order],
        call_start=begin[order],
        end=end[order],
        counts=counts[order],
        line_us=line[order],
        launch_call_us=float(np.median(launch_call_us)) if len(launch_call_us) else float("nan"),
        launch_calls=len(launch_call_us),
    )


# -- steps ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StepWindow:
    """One step: which launch calls belong to it, and where its time 0 is."""

    index: int  # ProfilerStep's N, else 0, 1, 2, ...
    calls: np.ndarray  # indices into the trace's call columns, launches only, sorted by start
    t0: float  # the step's time 0 (trace µs)
    range_thread: int = -1  # the thread owning the step's range (-1: none)


def find_steps(trace: Trace, step_range: str | None = None) -> tuple[str, list[StepWindow]]:
    """(the rule used, the steps). `step_range` names a CPU range that marks each step."""
    launches = _index(trace)
    if not len(launches.launch):
        raise TraceError(f"{trace.name} has no kernel launch calls")
    if step_range:
        if not isinstance(step_range, str) or len(step_range) > 200:
            raise TraceError("the step range must be a name of at most 200 characters")
        windows = _range_windows(trace, launches, lambda n: n == step_range, numbered=False)
        if not windows:
            raise TraceError(f"{trace.name} has no CPU range named {step_range!r} with launches in it")
        return RULES["range"].format(name=step_range), windows
    windows = _range_windows(trace, launches, _PROFILER_STEP.match, numbered=True)
    if windows:
        return RULES["profiler"], windows
    windows = _range_windows(trace, launches, lambda n: n == STEP_ANNOTATION, numbered=False)
    if windows:
        return RULES["range"].format(name=STEP_ANNOTATION), windows
    if launches.is_graph.any():
        return RULES["graph"], _graph_windows(trace, launches)
    windows = _sync_windows(trace, launches)
    if len(windows) > 1:
        return RULES["sync"], windows
    calls = launches.launch
    return RULES["whole"], [StepWindow(index=0, calls=calls, t0=float(trace.call_ts[calls[0]]))]


def _range_windows(trace: Trace, launches: _Index, match, numbered: bool) -> list[StepWindow]:
    hits = [i for i in range(len(trace.range_ts)) if match(trace.name_of(trace.range_name[i]))]
    out, last_end = [], -np.inf
    starts = trace.call_ts[launches.launch]
    for i in hits:
        t0, t1 = float(trace.range_ts[i]), float(trace.range_ts[i] + trace.range_dur[i])
        if t0 < last_end:  # nested inside the previous range of the same name: the outer one stands
            continue
        last_end = t1
        lo, hi = np.searchsorted(starts, [t0, t1], side="left")
        calls = launches.launch[lo:hi]
        if not len(calls):
            continue
        number = _PROFILER_STEP.match(trace.name_of(trace.range_name[i])) if numbered else None
        index = int(number.group(1)) if number else len(out)
        out.append(StepWindow(index=index, calls=calls, t0=t0, range_thread=int(trace.range_thread[i])))
        if len(out) > MAX_STEPS:
            raise TraceError(f"the trace has more than {MAX_STEPS:,} steps: profile fewer")
    return out


def _split(trace: Trace, calls: np.ndarray, cut_after: list[int]) -> list[StepWindow]:
    """Steps made by cutting the sorted launch list after the given positions."""
    bounds = [0] + [c + 1 for c in cut_after] + [len(calls)]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if hi > lo:
            part = calls[lo:hi]
            out.append(StepWindow(index=len(out), calls=part, t0=float(trace.call_ts[part[0]])))
    if len(out) > MAX_STEPS:
        raise TraceError(f"the trace has more than {MAX_STEPS:,} steps: profile fewer")
    return out


def _syncs_between(trace: Trace, launches: _Index, t0: float, t1: float) -> np.ndarray:
    sync_ts = trace.call_ts[launches.sync]
    lo, hi = np.searchsorted(sync_ts, [t0, t1], side="left")
    return launches.sync[lo:hi]


def _graph_windows(trace: Trace, launches: _Index) -> list[StepWindow]:
    """One step per graph launch: it takes the launches since the previous step ended, where a step
    ends at the last synchronisation before the next graph launch, or else just before the copies
    that feed the next graph launch (its inputs), or else right before it."""
    calls, graph_pos, copies = launches.launch, np.flatnonzero(launches.is_graph), launches.is_copy
    starts, ends = trace.call_ts[calls], trace.call_ts[calls] + trace.call_dur[calls]
    cut_after = []
    # Before the first graph launch: warm-up and set-up work up to the last synchronisation is not a step.
    first = 0
    syncs = _syncs_between(trace, launches, -np.inf, starts[graph_pos[0]])
    if len(syncs):
        first = int(np.searchsorted(starts, trace.call_ts[syncs[-1]], side="right"))
        if first > 0:
            cut_after.append(first - 1)
    for a, b in zip(graph_pos[:-1], graph_pos[1:]):
        syncs = _syncs_between(trace, launches, ends[a], starts[b])
        if len(syncs):
            cut = int(np.searchsorted(starts, trace.call_ts[syncs[-1]], side="right")) - 1
        else:
            cut = b - 1
            while cut > a and copies[cut]:
                cut -= 1
        cut_after.append(max(cut, a))
    last = graph_pos[-1]
    syncs = _syncs_between(trace, launches, ends[last], np.inf)
    if len(syncs):
        tail = int(np.searchsorted(starts, trace.call_ts[syncs[0]], side="right")) - 1
        if tail < len(calls) - 1:
            cut_after.append(max(tail, last))
    windows = _split(trace, calls, sorted(set(cut_after)))
    # Keep only steps that replay a graph: the pieces cut off before the first and after the last are not steps.
    graph_calls = set(calls[graph_pos].tolist())
    kept = [w for w in windows if graph_calls.intersection(w.calls.tolist())]
    return [StepWindow(index=i, calls=w.calls, t0=w.t0) for i, w in enumerate(kept)]


def _sync_windows(trace: Trace, launches: _Index) -> list[StepWindow]:
    calls = launches.launch
    if not len(launches.sync):
        return []
    starts = trace.call_ts[calls]
    cuts = np.searchsorted(starts, trace.call_ts[launches.sync], side="right") - 1
    cuts = sorted({int(c) for c in cuts if 0 <= c < len(calls) - 1})
    return _split(trace, calls, cuts)


# -- one step's lanes and readouts -------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class TraceStep:
    """One step read off a trace: its lanes and what the page reports about it."""

    index: int
    timeline: Timeline
    launches: int  # launch calls (before a graph's input copies merge with its launch)
    graph_launches: int
    launch_delay_us: np.ndarray  # per GPU event: its start minus the end of its launch call (NaN: no call)
    host_per_launch_us: (
        np.ndarray
    )  # per GPU event: the host time of its launch call's CPU interval (0: no call)
    gpu_bytes: np.ndarray = field(repr=False, default=None)  # per GPU event: memcpy / memset bytes
    op_bytes: np.ndarray = field(
        repr=False, default=None
    )  # per GPU event: its op's largest tensor input (0: unknown)
    notes: tuple[str, ...] = ()  # what the trace lacks for this step (dropped records), one sentence each
    host: HostRecord | None = field(repr=False, default=None)  # what the profiler recorded on its host lane
    # per GPU event: its op's `op_signature` ('' unknown), where the trace recorded shapes
    op_signatures: tuple[str, ...] | None = field(repr=False, default=None)
    # per GPU event: stamped before its launch call began (clocks that disagree), so its launch delay is unknown
    stamped_early: np.ndarray | None = field(repr=False, default=None)

    @property
    def kernels(self) -> int:
        return len(self.timeline.gpu_start)

    @property
    def kernel_names(self) -> tuple[str, ...]:
        return self.timeline.gpu_names

    @property
    def kernels_per_step(self) -> int:  # the probe's name for it
        return self.kernels

    @property
    def metrics(self) -> StepMetrics:
        cached = self.__dict__.get("_metrics")
        if cached is None:
            cached = self.timeline.metrics()
            object.__setattr__(self, "_metrics", cached)
        return cached

    @property
    def gpu_streams(self) -> int:
        return len(self.timeline.streams)

    def gpu_time_by_kind(self) -> dict[str, float]:
        """Summed GPU time of each kind of work (kernels, communication, copies, memsets), µs."""
        kinds = self.timeline.gpu_kinds
        return {k: float(self.timeline.gpu_dur[kinds == k].sum()) for k in GPU_KINDS}

    def launch_delay(self) -> dict[str, float | None]:
        """Median, p90 and largest launch delay (µs) over the step's GPU events with a launch call and a time
        stamp after it; None where no event has both (every kernel stamped before its call: clocks disagree)."""
        mine = np.isfinite(self.launch_delay_us)  # events with a launch call
        if self.stamped_early is not None:
            mine &= ~self.stamped_early
        d = self.launch_delay_us[mine]
        if not len(d):
            return {"median_us": None, "p90_us": None, "max_us": None}
        med, p90 = np.percentile(d, [50, 90])
        return {"median_us": float(med), "p90_us": float(p90), "max_us": float(d.max())}

    def summary(self) -> dict:
        """The step's readouts as plain numbers (the CLI's JSON, the page's table)."""
        m = self.metrics
        return {
            "index": self.index,
            "step_us": m.step_us,
            "gpu_busy_us": m.gpu_busy_us,
            "kernels": self.kernels,
            "launches": self.launches,
            "graph_launches": self.graph_launches,
            "gpu_streams": self.gpu_streams,
            "utilisation": m.utilisation,
            "bound_by": m.bound_by,
            "cpu_launch_us": m.cpu_launch_us,
            "idle_us": m.idle_us,
            "gpu_us_by_kind": self.gpu_time_by_kind(),
            "launch_delay": self.launch_delay(),
        }


def step_timeline(
    trace: Trace, window: StepWindow, label: str = "", merge_graph_inputs: bool = True
) -> TraceStep:
    """The lanes of one step, and its counts.

    A trace with dropped records (the profiler drops them under load) still makes consistent lanes: a
    launch whose GPU events are missing stays on the CPU lane; a GPU event whose launch call is missing
    joins the step it ran in with `launched_by` -1; a GPU event stamped before the call that launched
    it (clocks that disagree, an edited file) is drawn at that call's start. `notes` counts each."""
    idx = _index(trace)
    calls = window.calls
    at = idx.position[calls]  # the step's calls are consecutive launches
    lo, hi = np.searchsorted(idx.owner_sorted, [at[0], at[-1] + 1], side="left")
    rows = idx.gpu_by_owner[lo:hi]
    owned = idx.owner_sorted[lo:hi] - at[0]

    t0 = window.t0
    call_start = trace.call_ts[calls] - t0
    call_end = call_start + trace.call_dur[calls]
    # Unowned GPU events that started inside the step's span (its start to its last call or owned event).
    span_end = max(
        float(call_end.max()), float((trace.gpu_ts[rows] + trace.gpu_dur[rows]).max(initial=-np.inf) - t0)
    )
    o_lo, o_hi = np.searchsorted(trace.gpu_ts[idx.orphans], [t0, t0 + span_end], side="left")
    orphans = idx.orphans[o_lo:o_hi]
    if not len(rows) and not len(orphans):
        unusable = np.isin(trace.call_corr[calls], trace.unusable_corr).sum()
        raise TraceError(
            f"{trace.name}: no GPU events belong to step {window.index}'s launches "
            + (
                f"(the GPU events of {unusable:,} of them have an unusable time stamp or stream id)"
                if unusable
                else "(was CUDA profiled?)"
            )
        )
    rows = np.concatenate((rows, orphans))
    order = np.argsort(rows, kind="stable")  # GPU rows are sorted by start: row order is time order
    gpu_rows = rows[order]
    owner = np.concatenate((owned, np.full(len(orphans), -1, np.int64)))[order]
    known = owner >= 0
    thread = trace.call_thread[calls]
    tile_start = _host_intervals(trace, idx, window, call_start, call_end, thread)

    first_kernel = {}
    for row, o in zip(gpu_rows[known].tolist(), owner[known].tolist()):
        first_kernel.setdefault(o, int(trace.gpu_name[row]))
    # 'cudaLaunchKernel: gemv' per launch: one string per distinct pair, shared (a million launches, few names).
    labels: dict[tuple, str] = {}
    cpu_names = []
    for i, api in enumerate(trace.call_name[calls].tolist()):
        pair = (api, first_kernel.get(i, -1))
        label = labels.get(pair)
        if label is None:
            label = labels[pair] = (
                f"{trace.names[api]}: {short_kernel_name(trace.names[pair[1]])}"
                if pair[1] >= 0
                else trace.names[api]
            )
        cpu_names.append(label)
    is_graph = idx.is_graph[at]
    host_of_call = call_end - tile_start
    cpu_keep = np.arange(len(calls))
    cpu_start, cpu_end, cpu_names, cpu_thread = tile_start, call_end, cpu_names, thread
    if merge_graph_inputs and is_graph.any():
        cpu_start, cpu_end, cpu_names, cpu_thread, cpu_keep = _merge_graph_inputs(
            is_graph, idx.is_copy[at], tile_start, call_end, cpu_names, thread
        )
    last_call = np.zeros(len(cpu_start), np.int64)  # each interval ends with its last call
    np.maximum.at(last_call, cpu_keep, np.arange(len(calls)))
    owner_thread = window.range_thread if window.range_thread >= 0 else int(thread[0])
    kernel_calls = trace.call_dur[calls][idx.is_kernel_launch[at]]
    host = _host_record(
        trace,
        idx,
        t0,
        cpu_start,
        cpu_end,
        cpu_thread,
        call_start[last_call],
        owner_thread,
        kernel_calls,
    )
    gpu_start = trace.gpu_ts[gpu_rows] - t0
    launcher = np.maximum(owner, 0)
    early = known & (gpu_start < call_start[launcher])
    gpu_start = np.where(known, np.maximum(gpu_start, call_start[launcher]), np.maximum(gpu_start, 0.0))
    timeline = Timeline(
        cpu_start=cpu_start,
        cpu_dur=cpu_end - cpu_start,
        cpu_names=tuple(cpu_names),
        gpu_start=gpu_start,
        gpu_dur=trace.gpu_dur[gpu_rows],
        gpu_names=tuple(trace.name_of(n) for n in trace.gpu_name[gpu_rows]),
        launched_by=np.where(known, cpu_keep[launcher], -1),
        source="measured",
        label=label,
        gpu_stream=trace.gpu_stream[gpu_rows],
        cpu_thread=cpu_thread,
    )
    has_event = np.zeros(len(calls), bool)
    has_event[owner[known]] = True
    unusable = np.isin(trace.call_corr[calls[~has_event]], trace.unusable_corr)
    return TraceStep(
        index=window.index,
        timeline=timeline,
        launches=len(calls),
        graph_launches=int(is_graph.sum()),
        launch_delay_us=np.where(known, gpu_start - call_end[launcher], np.nan),
        stamped_early=early,
        host_per_launch_us=np.where(known, host_of_call[launcher], 0.0),
        gpu_bytes=trace.gpu_bytes[gpu_rows],
        op_bytes=trace.gpu_op_bytes[gpu_rows],
        op_signatures=tuple(
            trace.names[k] if k >= 0 else ""
            for k in (trace.gpu_op_signature[gpu_rows] if trace.gpu_op_signature is not None else ())
        )
        or None,
        notes=_dropped_notes(
            int((~unusable).sum()), int((~known).sum()), int(early.sum()), int(unusable.sum())
        ),
        host=host,
    )


def _dropped_notes(silent: int, unowned: int, early: int, unusable: int = 0) -> tuple[str, ...]:
    """What the page and the CLI say about a step whose trace lacks records, has GPU events the reader cannot
    place, or has clocks that disagree."""
    notes = []
    if unusable:
        notes.append(
            f"{unusable:,} launch call{'s' if unusable > 1 else ''} in this step launched GPU work whose time stamp "
            "('ts') or stream id is unusable (NaN, text, or a number no profiler writes): that work is left out, "
            "and the call is drawn on the CPU lane with no kernel."
        )
    if silent:
        notes.append(
            f"{silent:,} launch call{'s' if silent > 1 else ''} in this step {'have' if silent > 1 else 'has'} no "
            "GPU event in the trace (records the profiler dropped?): drawn on the CPU lane with no kernel."
        )
    if unowned:
        notes.append(
            f"{unowned:,} GPU event{'s' if unowned > 1 else ''} in this step {'have' if unowned > 1 else 'has'} no "
            "launch call in the trace (records the profiler dropped?): drawn where they ran, launched by no "
            "CPU interval, with no host cost."
        )
    if early:
        notes.append(
            f"{early:,} GPU event{'s' if early > 1 else ''} start{'' if early > 1 else 's'} before the call that "
            f"launched {'them' if early > 1 else 'it'} in the trace (clocks that disagree, or an edited file): drawn "
            "at that call's start, with no launch delay."
        )
    return tuple(notes)


def _host_intervals(trace, idx, window, call_start, call_end, thread) -> np.ndarray:
    """Where each launch's host interval starts: the end of the previous launch call on its thread, or
    the step's start (for the thread that owns the step; another thread's first launch is its call
    alone), or the end of a synchronisation in between, whichever is latest."""
    tile_start = call_start.copy()
    sync_end = trace.call_ts[idx.sync] + trace.call_dur[idx.sync] - window.t0
    sync_thread = trace.call_thread[idx.sync]
    owner_thread = window.range_thread if window.range_thread >= 0 else int(thread[0])
    for th in np.unique(thread):
        rows = np.flatnonzero(thread == th)
        prev = np.concatenate(([0.0], call_end[rows[:-1]]))
        if th != owner_thread:
            prev[0] = call_start[rows[0]]
        th_sync = np.sort(sync_end[sync_thread == th])
        if len(th_sync):  # the latest synchronisation ending before each call starts
            k = np.searchsorted(th_sync, call_start[rows], side="right") - 1
            prev = np.maximum(prev, np.where(k >= 0, th_sync[np.maximum(k, 0)], -np.inf))
        tile_start[rows] = np.minimum(np.maximum(prev, 0.0), call_start[rows])
    return tile_start


def _merge_graph_inputs(is_graph, is_copy, start, end, names, thread):
    """Each graph launch and the copy launches right before it on its thread (the inputs going into the
    graph's static buffers) become one CPU interval, named like '2 input copies + cudaGraphLaunch'.

    Returns the merged lanes and, per original call, the index of the interval it ended up in.
    """
    group = np.arange(len(is_graph))
    for g in np.flatnonzero(is_graph):
        j = g - 1
        while j >= 0 and is_copy[j] and not is_graph[j] and thread[j] == thread[g] and group[j] == j:
            group[j] = g
            j -= 1
    heads, inverse = np.unique(group, return_inverse=True)
    new_start = np.minimum.reduceat(
        start[np.argsort(group, kind="stable")], np.searchsorted(np.sort(group), heads)
    )
    new_names = []
    for h in heads:
        n_copies = int((group == h).sum()) - 1
        if is_graph[h]:
            new_names.append(f"{n_copies} input copies + cudaGraphLaunch" if n_copies else "cudaGraphLaunch")
        else:
            new_names.append(names[h])
    return new_start, end[heads], new_names, thread[heads], inverse


# -- the whole trace -----------------------------------------------------------------------------------------
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


# -- names ---------------------------------------------------------------------------------------------------
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
    With no such repeat the answer is len(names) // n_layers, exact=False.
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
