"""The step timed without the profiler, as gpu_probe/recorder.py writes it into a trace: the block read back, each
field checked, or one sentence on why it is not used (the step without the profiler is then estimated)."""

import math

from core.trace.fields import shown_text

# gpu_probe/recorder.py writes the step timed without the profiler under this top-level key (its schema).
UNTRACED_KEY = "launch_bound_untraced"
_UNTRACED_TIMERS = ("cuda_events", "host_clock")
_MAX_UNTRACED_US = 1e9  # a step over 1,000 s is no decode step: the block is absurd
MALFORMED = object()  # what the reader keeps of a block that is not JSON


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

    if block is MALFORMED:
        return refused("it is not valid JSON")
    if not isinstance(block, dict):
        return refused(f"it is {json_kind(block)}, not an object")
    if type(block.get("schema")) is not int or block["schema"] != 1:
        return refused(f"schema {shown_text(repr(block.get('schema')), 40)}, not 1")
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
            f"timer {shown_text(repr(block.get('timer')), 40)} is not one of {', '.join(_UNTRACED_TIMERS)}"
        )
    return block, ""
