"""A trace file -> its events, one at a time.

`.json`, `.json.gz`, `.pt.trace.json(.gz)`, from a path, bytes or a binary file object, gzip recognised by its
magic bytes. The JSON is decoded one event at a time from a stream (a 300 MB trace is never held as Python
objects), in the object form ({"traceEvents": [...], ...}) or the bare array form of the Chrome trace format.
Three top-level keys are kept besides the events, as `Meta`: the device's properties, the recorder's block and
the clock's base (`baseTimeNanoseconds`: with the events' times, when the trace was recorded).
"""

import gzip
import io
import json
import re
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core.trace.messages import NSIGHT, TraceError
from core.trace.recorded import MALFORMED, UNTRACED_KEY

MAX_TEXT_CHARS = 2 * 10**9  # decompressed JSON characters read (a gzip bomb stops here)
MAX_EVENT_CHARS = 64 * 2**20  # one event object (a 64 MB event is not a profiler's)
_CHUNK = 4 * 2**20
_NSIGHT_SUFFIXES = (".nsys-rep", ".qdrep", ".sqlite")


@contextmanager
def opened(source, label: str):
    """The trace's text; what goes wrong while it is read (a truncated or broken gzip stream, bytes that are not
    UTF-8, an Nsight report) is said as a `TraceError` naming `label`."""
    if isinstance(source, (str, Path)) and Path(source).suffix in _NSIGHT_SUFFIXES:
        raise TraceError(NSIGHT)
    with _open_binary(source) as raw:
        head = raw.peek(16)[:16] if hasattr(raw, "peek") else b""
        binary = gzip.GzipFile(fileobj=raw) if head[:2] == b"\x1f\x8b" else raw
        try:
            yield io.TextIOWrapper(binary, encoding="utf-8-sig", errors="strict")
        except EOFError:
            raise TraceError(
                f"{label} ends early: the gzip stream is truncated (was the copy complete?)"
            ) from None
        except (gzip.BadGzipFile, zlib.error, OSError) as err:
            raise TraceError(f"{label} is not a readable gzip file ({err})") from None
        except UnicodeDecodeError:
            if b"NSYS" in head.upper() or b"QDSTRM" in head.upper():
                raise TraceError(NSIGHT) from None
            raise TraceError(f"{label} is not a JSON trace: it is not UTF-8 text") from None


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


@dataclass(frozen=True, slots=True)
class Meta:
    """A top-level key of the trace object the reader keeps (not an event)."""

    key: str  # "device", "untraced" or "base_ns"
    value: object


_DECODER = json.JSONDecoder()
_SKIP = re.compile(r"[\s,]*")


class _Stream:
    """The trace's text, read a chunk at a time, and the JSON values decoded from it one at a time."""

    def __init__(self, text):
        self.text = text
        self.buf, self.pos, self.total, self.eof = "", 0, 0, False

    def fill(self) -> bool:
        """The next chunk after what is left of the buffer; False at the end of the text."""
        if self.eof:
            return False
        more = self.text.read(_CHUNK)
        self.total += len(more)
        if self.total > MAX_TEXT_CHARS:
            raise TraceError(
                f"the trace is larger than {MAX_TEXT_CHARS / 1e9:.0f} GB of JSON once decompressed"
            )
        if not more:
            self.eof = True
            return False
        self.buf, self.pos = self.buf[self.pos :] + more, 0
        return True

    def skip(self) -> str:
        """Past white space and commas: the next character ('' at the end of the text)."""
        while True:
            self.pos = _SKIP.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""

    def value(self):
        """The next JSON value, decoded whole (read on where a chunk's end cuts it)."""
        self.skip()
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as err:
                if len(self.buf) - self.pos > MAX_EVENT_CHARS:
                    raise TraceError(
                        "the trace has an event larger than 64 MB: not a profiler trace"
                    ) from None
                if self.fill():
                    continue
                raise TraceError(
                    f"the trace is not valid JSON near character {self.total - len(self.buf) + err.pos:,}"
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
            if end == len(self.buf) and not self.eof and self.fill():
                continue
            self.pos = end
            return obj

    def rest(self) -> str:
        """What follows the event list, at most about MAX_EVENT_CHARS of it."""
        rest = ""
        while self.fill() or self.pos < len(self.buf):
            rest += self.buf[self.pos :]
            self.pos = len(self.buf)
            if len(rest) > MAX_EVENT_CHARS:
                break
        return rest


def events(text, label: str = "the file"):
    """Every object of the trace's event array, decoded one at a time from the text stream, and a `Meta` for
    each top-level key the reader keeps. `label` names the file in what is said about it."""
    stream = _Stream(text)
    first = stream.skip()
    if first == "[":
        stream.pos += 1
    elif first == "{":
        stream.pos += 1
        yield from _keys_before_the_events(stream, label)
    elif not first:
        raise TraceError(f"{label} is empty: it holds no text at all (was the upload or the copy complete?)")
    else:
        start = stream.buf[stream.pos : stream.pos + 16].split("\n")[0]
        scalar = first in '"-0123456789' or start.startswith(("true", "false", "null"))
        what = "is not a trace: it is a single JSON value" if scalar else "is not JSON"
        raise TraceError(f"{label} {what} (it starts with {start!r}); a trace starts with '{{' or '['")
    while True:
        ch = stream.skip()
        if ch == "]":
            break
        if not ch:
            raise TraceError("the trace ends early: its event list is not closed (was the copy complete?)")
        event = stream.value()
        if isinstance(event, dict):
            yield event
    yield from _keys_after_the_events(stream.rest())


def _keys_before_the_events(stream: _Stream, label: str):
    """The trace object's keys up to "traceEvents" (other keys are skipped), the stream left inside its list."""
    keys = []
    while True:
        ch = stream.skip()
        if ch == "}" or not ch:
            raise TraceError(_not_a_trace(label, keys))
        key = stream.value()
        keys.append(key)
        if stream.skip() != ":":
            raise TraceError("the trace is not valid JSON (expected ':' after a key)")
        stream.pos += 1
        if key == "traceEvents":
            if stream.skip() != "[":
                raise TraceError("traceEvents is not a list")
            stream.pos += 1
            return
        meta = stream.value()
        if key == "deviceProperties":
            yield Meta("device", meta)
        elif key == UNTRACED_KEY:
            yield Meta("untraced", meta)
        elif key == "baseTimeNanoseconds":
            yield Meta("base_ns", meta)


def _not_a_trace(label: str, keys: list) -> str:
    """What a JSON object without an event list is, as far as its keys tell."""
    if {"runs", "device", "hbm_copy_GBps"} <= set(keys):
        return f"{label} is a probe result, not a trace: open it on the Live GPU probe tab"
    shown = ", ".join(repr(str(k)[:30]) for k in keys[:5]) + (", …" if len(keys) > 5 else "")
    return (
        f"{label} is JSON but not a trace: it has no traceEvents list"
        + (f" (its keys: {shown})" if keys else " (it is an empty object)")
        + ", where torch.profiler's export_chrome_trace writes one"
    )


def _keys_after_the_events(rest: str):
    """Keys after the event list (deviceProperties, traceName): read for the device name and the recorder's
    block only."""
    found = re.search(r'"deviceProperties"\s*:\s*\[\s*\{[^{}]*?"name"\s*:\s*"([^"]{1,200})"', rest)
    if found:
        yield Meta("device", [{"name": found.group(1)}])
    found = re.search(r'"baseTimeNanoseconds"\s*:\s*(\d{1,20})\b', rest)
    if found:
        yield Meta("base_ns", int(found.group(1)))
    found = re.search(rf'"{UNTRACED_KEY}"\s*:\s*', rest)
    if found:
        try:
            yield Meta("untraced", _DECODER.raw_decode(rest, found.end())[0])
        except (ValueError, RecursionError):
            yield Meta("untraced", MALFORMED)
