"""An event's fields as the reader's columns can hold them: a finite number, an id that fits 64 bits, a name of
bounded length the page can show, a thread's key. A trace is a file anyone can edit: a field may be text, NaN,
a list or 400 digits long, and each is read here without an exception."""

import math

import numpy as np

# A time past any clock a profiler keeps (µs since the epoch are ~1.8e15), and an id too large for the columns.
MAX_US = 1e17
ID_LIMIT = 2**62


def number(value, default=0.0) -> float:
    """A finite float from a number or numeric string; `default` for anything else (400 digits included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return default
    try:
        out = float(value)
    except (ValueError, OverflowError):
        return default
    return out if math.isfinite(out) else default


def ident(value, default: int = -1) -> int:
    """An integer id (correlation, stream, External id) that fits the columns; `default` if it does not."""
    out = number(value, np.nan)
    return int(out) if abs(out) < ID_LIMIT else default  # NaN compares False


def shown_text(value, limit: int) -> str:
    """A name as the page can show it: at most `limit` characters, lone surrogates (an escaped \\ud800 in
    the JSON) replaced, since neither the page nor a UTF-8 terminal can encode them."""
    text = value[:limit]
    if not text.isascii():
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def thread_key(event: dict) -> tuple:
    """(pid, tid) of a host event as a dictionary key: an int or a short string (a list or NaN in an edited
    file becomes its text)."""
    pid, tid = event.get("pid"), event.get("tid")
    if type(pid) is int and type(tid) is int:  # what a profiler writes: the fast path of every host event
        return pid, tid
    return tuple(
        v if isinstance(v, int) else v[:100] if isinstance(v, str) else repr(v)[:100] for v in (pid, tid)
    )
