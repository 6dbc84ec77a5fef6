"""What the reader says when a trace cannot be read, or can be read only in part: one sentence each, for the page
and the CLI."""


class TraceError(ValueError):
    """A trace that cannot be read or has no step; the message is one sentence for the page."""


NSIGHT = (
    "This is an Nsight Systems report, not a PyTorch profiler trace: record the steps with torch.profiler "
    "and export_chrome_trace (or the engine's torch-profiler option) and upload that JSON."
)


def dropped_notes(silent: int, unowned: int, early: int, unusable: int = 0) -> tuple[str, ...]:
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
