"""Page pieces shared by the simulator and probe tabs: readouts, regime text, time split.

The readout labels are part of the product (tests and the README refer to them), so
they live here once and every tab shows a step with the same five metrics.
"""

from __future__ import annotations

import json
import re
import weakref

import streamlit as st

from core.timeline import GPU_BOUND, StepMetrics, regime
from ui.charts import CPU_COLOUR, GPU_COLOUR, format_us

KERNELS_LABEL = "Kernels / step"
STEP_LABEL = "Step time"
BOUND_LABEL = "Bound by"
SPEEDUP_LABEL = "vs unoptimised"
UTILISATION_LABEL = "GPU utilisation"
READOUT_LABELS = (KERNELS_LABEL, STEP_LABEL, BOUND_LABEL, SPEEDUP_LABEL, UTILISATION_LABEL)
# What the profiler-dependent readouts are of, where a step can be read two ways (`show_readouts`' basis).
TRACED, UNTRACED = "as traced", "no profiler"
_ON_BASIS = (STEP_LABEL, BOUND_LABEL, UTILISATION_LABEL)  # the readouts the profiler changes


def readout_labels(basis: str = "") -> tuple[str, ...]:
    """The five readouts' labels as `show_readouts(..., basis=basis)` shows them."""
    return tuple(f"{label} ({basis})" if basis and label in _ON_BASIS else label for label in READOUT_LABELS)


_MARKDOWN_SPECIALS = "\\`*_{}[]()<>#+-.!|~$:="
# Streamlit's markdown links bare `https://…`, `www.…` and `name@host` text (GitHub's autolink extension),
# backslash escapes or not. A word joiner (U+2060: zero width, no break) inside each pattern stops that
# and reads the same.
_WORD_JOINER = "\u2060"
_BARE_LINK = re.compile(r"(?i)(?<=[a-z])(?=://)|(?<=\bwww)(?=\.)|(?=@)")


def plain(text) -> str:
    """A string from a file or URL, escaped for st.markdown/caption/info/warning/error and widget help: it
    never becomes a link (bare URLs included), an image, a heading, HTML or a colour/icon directive. Line
    breaks become spaces (no new blocks)."""
    flat = _BARE_LINK.sub(_WORD_JOINER, " ".join(str(text).splitlines()))
    return "".join("\\" + ch if ch in _MARKDOWN_SPECIALS else ch for ch in flat)


def code(text) -> str:
    """A string from a file shown as inline code when it can be (no backtick or line break in it), else plain."""
    text = str(text)
    return f"`{text}`" if "`" not in text and "\n" not in text and "\r" not in text else plain(text)


def format_speedup(speedup: float | None) -> str:
    """'3.20×'; '—' when there is nothing to compare with."""
    if speedup is None:
        return "—"
    return f"{speedup:.2f}×" if speedup < 10 else f"{speedup:.1f}×"


def faster_or_slower(before_us: float, after_us: float, than: str) -> str:
    """'2.9× faster than <than>', '1.3× slower than <than>' or 'as fast as <than>': a comparison whose word and
    figure both come from the two times it compares (`after_us` against `before_us`)."""
    if not (before_us > 0 and after_us > 0):
        return f"not comparable with {than}"
    ratio = before_us / after_us
    if abs(ratio - 1) < 0.005:
        return f"as fast as {than}"
    if ratio > 1:
        return f"{format_speedup(ratio)} faster than {than}"
    return f"{format_speedup(1 / ratio)} slower than {than}"


def profiled_against_median(profiled_us: float, median_us: float) -> str:
    """The profiled step beside the median step timed without the profiler (the one the readouts and the fit use):
    which is longer, and by how much, from the two figures (the profiler adds host time to every launch, but a
    median over many steps can be the longer)."""
    ratio = profiled_us / median_us
    if abs(ratio - 1) < 0.005:
        return f"The profiled step takes as long as the median step without the profiler ({format_us(median_us)})."
    longer = ratio > 1
    return (
        f"The profiled step ({format_us(profiled_us)}) runs {abs(ratio - 1):.0%} "
        f"{'slower' if longer else 'faster'} than the median step without the profiler ({format_us(median_us)})"
        + (
            ": the profiler adds host time to every launch."
            if longer
            else ": the profiler adds host time to every launch, but this is a single step, while the median is "
            "over many steps whose host time varied."
        )
    )


def format_utilisation(utilisation: float) -> str:
    return f"{utilisation * 100:.0f}%"


def gpu_counts(timeline) -> dict[str, int]:
    """How many of a step's GPU intervals are kernels (communication kernels included), copies and memsets."""
    kinds = timeline.gpu_kinds
    return {
        "kernels": int(((kinds == "kernel") | (kinds == "communication")).sum()),
        "copies": int((kinds == "memcpy").sum()),
        "memsets": int((kinds == "memset").sum()),
    }


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def not_kernels(counts: dict[str, int]) -> str:
    """'3 copies and 1 memset' (the GPU work a step does that is not a kernel), '' where there is none."""
    copies, memsets = counts.get("copies", 0), counts.get("memsets", 0)
    parts = [f"{copies:,} cop{'y' if copies == 1 else 'ies'}"] * bool(copies)
    parts += [_plural(memsets, "memset")] * bool(memsets)
    return " and ".join(parts)


def counts_text(counts: dict[str, int]) -> str:
    """'828 kernels, 3 copies and 1 memset': a step's GPU work counted by kind."""
    rest = not_kernels(counts)
    return _plural(counts["kernels"], "kernel") + (f", {rest}" if rest else "")


def show_readouts(
    metrics: StepMetrics,
    speedup: float | None,
    *,
    speedup_help: str | None = None,
    phases: bool = False,
    basis: str = "",
    counts: dict[str, int] | None = None,
    step_help: str | None = None,
) -> None:
    """The five headline numbers of one step, in one row of `st.metric`s (`phases`: the GPU intervals are
    the phases of one persistent kernel). `basis` ('as traced', 'no profiler') is put on the labels of the
    figures the profiler changes, so that a step read two ways never shows two values under one name.
    `counts` (`gpu_counts`): the step's kernels, copies and memsets, counted apart (else every GPU interval of
    `metrics` is a kernel, as in a simulated step). `step_help`: what the step time is of, where it is a statistic
    of measured steps."""
    labels = dict(zip(READOUT_LABELS, readout_labels(basis)))
    kernels, step, bound, versus, util = st.columns(5)
    if phases:
        kernels.metric(
            KERNELS_LABEL,
            f"1 · {metrics.kernels:,} phases",
            help="One persistent kernel runs the whole step; its phases are separated by grid barriers.",
        )
    else:
        counts = counts or {"kernels": metrics.kernels}
        rest = not_kernels(counts)
        kernels.metric(
            KERNELS_LABEL,
            f"{counts['kernels']:,}",
            help=f"GPU kernels only{f' (the step also ran {rest}, counted apart)' if rest else ''}; "
            f"{metrics.launches:,} CPU launch call(s) submit the step's GPU work.",
        )
        if rest:
            kernels.caption(f"kernels only; the step also ran {rest}")
    step.metric(
        labels[STEP_LABEL],
        format_us(metrics.step_us),
        help=step_help or "From the first CPU launch to the end of the last kernel: one decode token.",
    )
    bound.metric(
        labels[BOUND_LABEL],
        metrics.bound_by,
        help="Whichever side needs longer: the CPU building and submitting launches, "
        "or the GPU executing kernels.",
    )
    versus.metric(
        SPEEDUP_LABEL,
        format_speedup(speedup),
        help=speedup_help
        or "Step time with fusion and graphs off (same model and batch) divided by this step time.",
    )
    util.metric(
        labels[UTILISATION_LABEL],
        format_utilisation(metrics.utilisation),
        help="Share of the step in which a kernel is running; the rest is idle bubbles.",
    )


def regime_explanation(metrics: StepMetrics) -> tuple[str, str]:
    """(regime, a few sentences on what it means and what would help) for this step."""
    name = regime(metrics)
    cpu, gpu = format_us(metrics.cpu_launch_us), format_us(metrics.gpu_busy_us)
    idle = format_us(metrics.idle_us)
    if name == "CPU-bound" and metrics.launches == 1:
        text = (
            f"**Launch-bound, even with one launch.** Submitting the replay costs the host {cpu}, more "
            f"than the {gpu} the kernels need, so the GPU waits for the submission. With figures like "
            "these, a cheaper replay (fewer input copies before it) or more work per step is what helps."
        )
    elif name == "CPU-bound":
        text = (
            f"**Launch-bound.** The host needs {cpu} to prepare and submit {_launches(metrics.launches)}, "
            f"but the kernels need only {gpu} on the GPU. Each kernel is done before the "
            f"next one has been submitted, so the GPU lane is full of gaps: {idle} of this step is the "
            "GPU waiting for the CPU. A faster GPU would not shorten the step at all. What helps is "
            "fewer launches (fusion) or a cheaper way to submit them (one CUDA graph launch per step)."
        )
    elif name == "GPU-bound":
        text = (
            f"**GPU-bound.** Launches are queued faster than kernels finish ({cpu} of CPU work against "
            f"{gpu} of kernels), so the GPU runs kernel after kernel with almost no gaps. The step now "
            "costs what the kernels cost, mostly streaming weights and KV cache from HBM. Shaving more "
            "launch overhead buys nothing here. Moving fewer bytes does (smaller weights, a shorter KV "
            "cache), and because the weights are read once for the whole batch, more sequences per step "
            "raise tokens per second even though each step takes longer."
        )
    else:
        side = "the GPU" if metrics.bound_by == GPU_BOUND else "CPU launches"
        text = (
            f"**Balanced, bound by {side} by a little.** CPU launch work ({cpu}) and GPU work ({gpu}) are "
            "within about 15 % of each other. Neither side can hide the other, so small delays on either one "
            "open gaps, and shrinking only one of them moves the step time by little before the other takes over."
        )
    return name, text


def _launches(n: int) -> str:
    return "one graph launch" if n == 1 else f"{n:,} launches"


OVERLAP_SENTENCE = (
    "The two sides run at the same time: while the GPU executes one kernel, the CPU is already "
    "building the next launch. A step therefore lasts about as long as the slower side (plus the "
    "short stretch where the other one is starting or finishing), not the two added together, "
    "and only shrinking the slower side makes it faster."
)


def time_split_html(metrics: StepMetrics) -> str:
    """Two bars, CPU launch cost and GPU execution, on one scale, with the step time marked.

    Plain HTML rather than a Plotly figure: it redraws on every slider move, and a chart
    costs the browser far more to rebuild than two divs (bench/interaction_speed.py).
    """
    top = max(metrics.cpu_launch_us, metrics.gpu_busy_us, metrics.step_us) * 1.08 or 1.0
    step_at = 100 * metrics.step_us / top
    rows = []
    for name, value, colour in (
        ("CPU launch cost", metrics.cpu_launch_us, CPU_COLOUR),
        ("GPU execution", metrics.gpu_busy_us, GPU_COLOUR),
    ):
        width = 100 * value / top
        rows.append(
            f'<div style="display:flex;align-items:center;gap:0.6em;margin:0.35em 0">'
            f'<span style="width:8.5em;flex:none">{name}</span>'
            f'<span style="position:relative;flex:1;height:1.5em">'
            f'<span style="position:absolute;left:0;top:0;bottom:0;width:{width:.2f}%;background:{colour};'
            f'border-radius:2px"></span>'
            f'<span style="position:absolute;top:-0.2em;bottom:-0.2em;left:{step_at:.2f}%;'
            f'border-left:2px dotted #222"></span></span>'
            f'<span style="width:5.5em;flex:none;text-align:right">{format_us(value)}</span></div>'
        )
    legend = (
        f'<div style="font-size:0.85em;opacity:0.75">dotted line: step time, '
        f"{format_us(metrics.step_us)}</div>"
    )
    return "".join(rows) + legend


def show_time_split(metrics: StepMetrics) -> None:
    """'Where the time goes': CPU launch cost against GPU execution, and why they do not add."""
    st.html(time_split_html(metrics))
    st.caption(OVERLAP_SENTENCE)


def chrome_trace_download(timeline, label: str, file_name: str, key: str, *, weak: bool = False) -> None:
    """A button that downloads a drawn step as Chrome trace JSON (Perfetto opens it), built only when clicked.

    Streamlit keeps the button's callable for as long as the session lasts: with `weak`, it does not keep
    the timeline alive (an upload's step, which the server may let go of to stay within its memory budget)."""
    from core.trace.chrome import to_chrome_trace_json

    if weak:
        held = weakref.ref(timeline)

        def data():
            alive = held()
            if alive is None:
                return json.dumps({"error": "this trace is no longer held on the server: upload it again"})
            return to_chrome_trace_json(alive)

    else:

        def data():
            return to_chrome_trace_json(timeline)

    st.download_button(
        label,
        data=data,
        on_click="ignore",
        file_name=file_name,
        mime="application/json",
        icon=":material/download:",
        key=key,
    )
