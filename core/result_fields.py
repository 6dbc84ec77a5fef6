"""A result file read: its JSON (`read_json`, bounded in size), then its fields one at a time with their type and
range checked. A file anyone can edit (an upload) fails with a message that names the field
(`runs[3].step_us_p90: ...`), never with a traceback. Shared by the one-GPU result (`core.probe_result`) and
the tensor-parallel one (`core.tp_result`)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

MAX_RESULT_BYTES = 20 * 1024 * 1024
MAX_US = 1e7  # 10 s for one decode step: no time a result holds is longer
BLOCK_CHARS = {"model": 64_000, "settings": 64_000, "checks": 256_000}  # free-form objects, as JSON


def read_json(source):
    if isinstance(source, dict):
        return source
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"result: no such file {str(path)!r}")
        if path.stat().st_size > MAX_RESULT_BYTES:
            raise ValueError(f"result: file is larger than {MAX_RESULT_BYTES // 2**20} MB")
        raw = path.read_bytes()
    elif isinstance(source, (bytes, bytearray, memoryview)):
        raw = bytes(source)
    elif hasattr(source, "read"):
        raw = source.read(MAX_RESULT_BYTES + 1)
        raw = raw.encode() if isinstance(raw, str) else raw
    else:
        raise ValueError(f"result: cannot read a {type(source).__name__}")
    if len(raw) > MAX_RESULT_BYTES:
        raise ValueError(f"result: file is larger than {MAX_RESULT_BYTES // 2**20} MB")
    if not raw.strip():
        raise ValueError("result: the file is empty (was the upload or the copy complete?)")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("result: not JSON: the file is not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"result: {_json_fault(err)}") from None
    except ValueError as err:  # e.g. an integer past Python's 4,300-digit limit
        raise ValueError(f"result: not usable JSON ({str(err)[:200]})") from None
    except RecursionError:  # e.g. "[[[[…": json gives up past Python's recursion limit
        raise ValueError("result: not valid JSON (nested too deeply)") from None
    if _SURROGATE_ESCAPE.search(raw):  # "\ud800" alone decodes to a str that no page or terminal can encode
        try:
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                "result: a string holds a lone UTF-16 surrogate (\\ud800-\\udfff), not text"
            ) from None
        except RecursionError:
            raise ValueError("result: not valid JSON (nested too deeply)") from None
    return data


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _json_fault(err: json.JSONDecodeError) -> str:
    """What is wrong with text that is not JSON, in words (never the decoder's own message)."""
    text = err.doc.lstrip()
    if text[:1] not in "{[":
        return f"not JSON: it starts with {text[:16].splitlines()[0]!r}, where a result starts with '{{'"
    if err.pos >= len(err.doc.rstrip()):
        return f"not valid JSON: it ends early, on line {err.lineno} (was the upload or the copy complete?)"
    return f"not valid JSON: it breaks off on line {err.lineno}, column {err.colno}"


def number_field(
    d: dict, key: str, lo: float, hi: float, where: str | None = None, integer: bool = False
) -> float:
    where = where or key
    if key not in d:
        raise ValueError(f"{where}: missing")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{where}: expected a number, got {type(v).__name__}")
    # Range before anything else: a 400-digit integer compares fine but overflows a float.
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"{where}: must be a finite number, got {v}")
    if not lo <= v <= hi:
        shown = f"{v:g}" if isinstance(v, float) or abs(v) < 10**15 else f"a {len(str(abs(v)))}-digit number"
        raise ValueError(f"{where}: {shown} is outside the plausible range [{lo:g}, {hi:g}]")
    if integer and v != int(v):
        raise ValueError(f"{where}: must be a whole number, got {v}")
    return float(v)


def text_field(d: dict, key: str, limit: int, where: str | None = None) -> str:
    where = where or key
    v = d.get(key)
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"{where}: expected a non-empty string")
    if len(v) > limit:
        raise ValueError(f"{where}: longer than {limit:,} characters")
    return v


def bounded_block(v, where: str, limit: int | None = None) -> None:
    """A free-form object (settings, checks, model) stays small: its JSON at most `limit` characters."""
    limit = limit or BLOCK_CHARS[where]
    try:
        size = len(json.dumps(v, allow_nan=True))
    except (RecursionError, ValueError, TypeError):
        raise ValueError(f"{where}: cannot be read back as JSON") from None
    if size > limit:
        raise ValueError(f"{where}: {size:,} characters of JSON, more than the {limit:,} allowed")


def object_field(d: dict, key: str, where: str | None = None) -> dict:
    v = d.get(key)
    if not isinstance(v, dict):
        raise ValueError(f"{where or key}: expected an object")
    return v


def list_field(d: dict, key: str, limit: int) -> list:
    v = d.get(key)
    if not isinstance(v, list):
        raise ValueError(f"{key}: expected a list")
    if len(v) > limit:
        raise ValueError(f"{key}: {len(v):,} entries, more than the {limit} a result may hold")
    return v
