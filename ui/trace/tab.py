"""The "Your trace" tab: a torch.profiler trace of your own model, drawn as the page draws a decode step.

Upload a trace (vLLM, SGLang, Hugging Face, torch.compile or your own code; several files at once are
ranks) or pick one of the traces that ship with the app (`sources`), each labelled with the GPU, date and
command its files name. The reader is
`core.trace` (the probe's own), the what-ifs `sim.trace` (the simulator's timing model, `whatif_view`).
"""

from __future__ import annotations

import streamlit as st

from core import trace as reader
from core.timeline import gpu_kind
from ui.charts import FIRST_LAUNCHES, format_us, lanes_figure
from ui.common import (
    TRACED,
    chrome_trace_download,
    counts_text,
    format_utilisation,
    gpu_counts,
    plain,
    show_readouts,
    show_time_split,
)
from ui.host_index import HOST_SPEC, your_host
from ui.tables import Column, show_table
from ui.trace import sources
from ui.trace.analysis import kernel_rows, report_of, whatifs_of
from ui.trace.sources import DEFAULT_TRACE, EXAMPLES
from ui.trace.whatif_view import WHATIFS, whatif_table, without_profiler

NOTHING = "nothing"
STEP_TIME_TO_READ = (
    "**Which step time to read:** *Step time (no profiler)*, below the lanes: the readouts here are the step as "
    "traced, which pays the profiler's own host cost."
)

# URL key -> spec, read by ui.url_params before any widget. Trace titles are checked here, not there:
# an upload's title exists only in the session that made it.
TRACE_PARAMS: dict[str, tuple] = {
    "tr_trace": ("text", 200),
    "tr_compare": ("text", 200),
    "tr_step": ("int", 0, 10**9),
    "tr_range": ("text", 200),
    "tr_whole": ("bool",),
    "tr_whatif": ("choice", tuple(WHATIFS), {v: k for k, v in WHATIFS.items() if v}),
    "tr_rank": ("int", 0, 1023),
    "tr_host_us": HOST_SPEC,  # the reader's host for the graphs what-ifs' replay, µs a torch launch
}


def _pick(label: str, key: str, options: list[str], default: str, help_text: str) -> str:
    """A bound selectbox of trace titles; a title this session does not have falls back, with a word."""
    uploaded = st.session_state.pop(f"_{key}_uploaded", None)  # an upload made at the bottom of the tab
    if uploaded in options:
        st.session_state[key] = uploaded
    # On a session's first run the bound widget has no state yet: what the link asked for is in the URL.
    wanted = st.session_state.get(key) or st.query_params.get(key)
    if wanted not in options:
        if wanted:
            st.warning(
                f"The link names a trace that is not here ({plain(str(wanted)[:60])}): uploads stay in the "
                "session that made them. Showing a recorded one.",
                icon=":material/warning:",
            )
        st.session_state[key] = default
    return st.selectbox(label, options, key=key, bind="query-params", help=help_text)


def _step_picker(report: reader.TraceReport, key: str) -> reader.TraceStep:
    """The step to draw, by its index (ProfilerStep#N's N where the profiler marked the steps)."""
    steps = {s.index: s for s in report.steps}
    if st.session_state.get(key) not in steps:
        st.session_state[key] = report.steps[0].index
    if len(steps) == 1:
        return report.steps[0]
    help_text = f"{len(steps)} steps, found by {plain(report.rule)}."  # the rule names a range from the URL
    if len(steps) <= 12:
        index = st.radio("Step", list(steps), key=key, bind="query-params", horizontal=True, help=help_text)
    else:
        index = st.select_slider("Step", list(steps), key=key, bind="query-params", help=help_text)
    return steps[index]


def _readouts(report: reader.TraceReport, step: reader.TraceStep) -> None:
    show_readouts(
        step.metrics,
        None,
        basis=TRACED,
        counts=gpu_counts(step.timeline),
        speedup_help="A trace has no unoptimised twin to compare with: the what-ifs below say what graphs and "
        "fusion would make of this step.",
    )


def _more_readouts(report: reader.TraceReport, step: reader.TraceStep) -> None:
    """Below the lanes: the step's launches, graph launches, streams and launch delay, and where it sits."""
    delay = step.launch_delay()
    launches, graphs, streams, lag = st.columns(4)
    launches.metric(
        "Launches",
        f"{step.launches:,}",
        help="Launch calls on the host: kernels, copies, memsets, graph launches.",
    )
    graphs.metric("Graph launches", f"{step.graph_launches:,}", help="cudaGraphLaunch calls in this step.")
    streams.metric("GPU streams", f"{step.gpu_streams}", help="CUDA streams this step's GPU work ran on.")
    known = delay["median_us"] is not None
    lag.metric(
        "Launch delay",
        f"{delay['median_us']:.1f} µs" if known else "—",
        help=(
            f"How long after its launch call ended a kernel started: median {delay['median_us']:.1f} µs, p90 "
            f"{delay['p90_us']:.1f} µs, largest {delay['max_us']:.1f} µs. Near zero: the GPU was waiting for the "
            "host. Large: kernels queued up behind each other, and the GPU set the pace."
            if known
            else "Unknown for this step: none of its GPU events has a launch call that ended before it started "
            "(see the note above)."
        ),
    )
    lo, hi = report.spread("step_us")
    st.caption(
        f"{step_label(report, step)}, found by {plain(report.rule)}. Over all steps: median "
        f"{format_us(report.median('step_us'))}, fastest {format_us(lo)}, slowest {format_us(hi)}. A step runs "
        "from its start (its range's start where a range marks it, else its first launch call) to the end of its "
        "last GPU work; the profiler adds host time to every launch."
    )


def step_label(report: reader.TraceReport, step: reader.TraceStep) -> str:
    """'Step 2 of 3': the step's place in the file, counted from 1 whatever rule found the steps (and however the
    file arrived); the profiler's own number beside it where it differs ('Step 1 of 3 (ProfilerStep#5)')."""
    position = report.steps.index(step) + 1
    own = (
        f" (ProfilerStep#{step.index})"
        if report.rule.startswith("the profiler's") and step.index != position
        else ""
    )
    return f"Step {position} of {len(report.steps)}{own}"


def _gpu_time_by_kind(step: reader.TraceStep) -> None:
    by_kind = {k: v for k, v in step.gpu_time_by_kind().items() if v > 0}
    if len(by_kind) > 1:
        st.caption(
            "GPU time by kind: " + ", ".join(f"{k} {format_us(us)}" for k, us in by_kind.items()) + "."
        )


def _lanes(
    report: reader.TraceReport,
    step: reader.TraceStep,
    whatif: str | None,
    whole: bool,
    key: str,
    x_max: float | None = None,
    host: float | None = None,
) -> None:
    overlay = whatifs_of(report, step, host).get(whatif) if whatif else None
    fig = lanes_figure(step.timeline, overlay.timeline if overlay is not None else None, whole_step=whole)
    if x_max is not None:
        fig.update_xaxes(range=[0, x_max * 1.02], autorange=False)
    st.plotly_chart(
        fig, width="stretch", key=key, theme=None, config={"displaylogo": False, "scrollZoom": True}
    )
    if whatif and overlay is None:
        st.caption("This step already replays a CUDA graph: there is no graphs what-if to draw.")


def _kernels_table(report: reader.TraceReport, step: reader.TraceStep) -> None:
    rows = kernel_rows(report, step)
    replays = any(r["replayed"] for r in rows)
    show_table(
        [
            {
                "kernel": r["kernel"],
                "kind": "graph launch" if r["graph_launch"] else gpu_kind(r["kernel"]),
                "calls": r["calls"],
                "total µs": None if r["graph_launch"] else r["total_us"],
                "mean µs": None if r["graph_launch"] else r["mean_us"],
                "share": None if r["graph_launch"] else 100 * r["share"],
                "launch delay µs": r["launch_delay_us"],
                **({"gap µs (replayed)": r["gap_us"]} if replays else {}),
                "host µs / launch": r["host_per_launch_us"],
            }
            for r in rows
        ],
        {
            "kernel": Column("kernel", long=True),
            "kind": Column("kind", help="A kernel, a copy (memcpy) or a memset: GPU work counted apart."),
            "calls": Column("calls"),
            "total µs": Column("total µs"),
            "mean µs": Column("mean µs", "{:,.2f}"),
            "share": Column("share %", "{:.1f}", "Its share of the step's GPU time."),
            "launch delay µs": Column("launch delay µs"),
            **({"gap µs (replayed)": Column("gap µs (replayed)")} if replays else {}),
            "host µs / launch": Column("host µs / launch"),
        },
        key="tr_kernels",
        height=420,
    )
    st.caption(
        "Per kernel name in this step (copies and memsets are rows of their own, their kind said): calls, GPU time, "
        "its share of the step's GPU time, the mean delay from the end of its launch call to its start, and the host "
        "time of its launch."
        + (
            " Kernels replayed by a CUDA graph have no launch of their own: the graph launch's host time is its "
            "own first row, and each replayed kernel shows instead the gap from the end of the previous kernel "
            "on its stream to its start (negative: it began before that one ended, as with programmatic "
            "dependent launch)."
            if replays
            else ""
        )
    )


def _side_title(title: str, report: reader.TraceReport, step: reader.TraceStep) -> None:
    m = step.metrics
    st.markdown(f"**{plain(title)}** · {step_label(report, step).lower()}")
    st.caption(
        f"{counts_text(gpu_counts(step.timeline))}, {step.launches:,} launch calls, {format_us(m.step_us)} as traced, "
        f"bound by {m.bound_by} as traced, GPU utilisation {format_utilisation(m.utilisation)} as traced."
    )


def _compared(title: str, position: int):
    """(report, step) of the trace to compare with, at the same position, or None."""
    ranks = sources.ranks(title)
    if ranks is None:
        st.warning("The trace to compare with is no longer held on this server: upload it again.")
        return None
    try:
        report = report_of(ranks[0], None)
    except reader.TraceError as err:
        st.error(plain(err), icon=":material/error:")
        return None
    return report, report.steps[min(position, len(report.steps) - 1)]


def render() -> None:
    st.subheader("Your trace: your own model's decode steps, drawn the same way")
    st.markdown(STEP_TIME_TO_READ)
    st.caption(
        "A torch.profiler trace of a decode loop, drawn as a step: one that ships with the app (labelled with its "
        "GPU, date and command) or yours (upload it at the bottom)."
    )
    title, compare, whatif, whole, step_col = _controls()
    ranks = sources.ranks(title)
    if ranks is None:
        st.warning(
            "That upload is no longer held on this server (it keeps its latest uploads only): upload it again."
        )
        sources.your_trace()
        return
    # The picture goes here, above the controls that refine it (issue 29, item 6): the step, its readouts and lanes.
    picture = st.container()
    found = _read(title, ranks, picture)
    if found is None:
        sources.your_trace()
        return
    trace, rank, report, host = found
    with picture:
        step, other = _picture(report, title, compare, whatif, whole, step_col, host)
    described = EXAMPLES[title][1] if title in EXAMPLES else title
    st.info(
        f"**{plain(described)}**"
        + (f" · rank {rank} of {len(ranks)}" if len(ranks) > 1 else "")
        + f" · recorded on {sources.provenance(title, trace)}"
        + f" · {trace.events:,} events, {len(report.steps)} steps",
        icon=":material/timeline:",
    )
    _more_readouts(report, step)
    if other is not None:
        from ui.trace.diff_view import show_diff  # before/after by kernel family (core.trace.diff)

        show_diff(title, report, compare, other[0])
    _gpu_time_by_kind(step)
    without_profiler(report, step, whole)
    st.markdown("**Where the time goes**")
    show_time_split(step.metrics)
    st.subheader("What CUDA graphs and fusion would save")
    whatif_table(report, step, host)
    st.subheader("Kernels")
    _kernels_table(report, step)
    _download(step)
    sources.your_trace()
    sources.recount(title, compare)  # what this run cached on an upload counts against the server's budget


def _controls() -> tuple:
    """(the trace, the trace to compare with, the what-if to draw, whole step?, the column the step picker goes
    in once the trace is read): the tab's first row, so that the lanes stay on the first screen."""
    options = sources.options()
    pick_col, compare_col, whatif_col, step_col, whole_col = st.columns(
        [2.2, 2.2, 1.5, 1.3, 1.2], vertical_alignment="bottom"
    )
    with pick_col:
        title = _pick(
            "Trace",
            "tr_trace",
            options,
            DEFAULT_TRACE,
            "Recorded traces ship with the app; uploads stay in your session.",
        )
    with compare_col:
        compare = _pick(
            "Compare with",
            "tr_compare",
            [NOTHING, *options],
            NOTHING,
            "A second trace drawn beside it, on one time axis.",
        )
    whatif = WHATIFS[
        whatif_col.selectbox(
            "Draw the step",
            tuple(WHATIFS),
            key="tr_whatif",
            bind="query-params",
            help="The what-ifs are estimates: the trace's own kernel times rescheduled by the simulator's timing "
            "model, drawn below the trace.",
        )
    ]
    whole = whole_col.toggle("Show the whole step", key="tr_whole", bind="query-params")
    return title, compare, whatif, whole, step_col


def _your_host(column) -> float | None:
    """The reader's host (µs a torch launch) for the graphs what-ifs' replay cost, or None: the recorded run's."""
    from core.probe_result import recorded_result

    try:
        run = recorded_result()
    except (OSError, ValueError):
        return None  # the what-ifs say where their replay cost comes from
    index, notice = your_host(column, "tr_host_us", run, whose="the probe run's")
    if notice:
        st.warning(notice, icon=":material/warning:")
    return index


def _read(title: str, ranks: tuple, picture):
    """(the rank shown, its number, its steps, the reader's host or None), by the step range, rank and host typed
    below the picture; None (the reason shown in `picture`) where the trace has no steps by that range."""
    range_col, rank_col, host_col, _ = st.columns([2, 1, 1.3, 1.9], vertical_alignment="bottom")
    host = _your_host(host_col)
    # A shipped trace is read by the reader's own rules, as an upload of the same file is: one step numbering.
    typed = range_col.text_input(
        "Step range (optional)",
        key="tr_range",
        bind="query-params",
        max_chars=200,
        placeholder="e.g. decode_step",
        help="The name of a CPU range (record_function) around each step. Empty: the reader's own rules.",
    )
    step_range = typed.strip() or None
    rank = 0
    if len(ranks) > 1:
        rank = int(
            rank_col.number_input(
                "Rank", min_value=0, max_value=len(ranks) - 1, step=1, key="tr_rank", bind="query-params"
            )
        )
    trace = ranks[min(rank, len(ranks) - 1)]
    try:
        return trace, rank, report_of(trace, step_range), host
    except reader.TraceError as err:
        picture.error(plain(err), icon=":material/error:")
        return None


def _picture(
    report: reader.TraceReport, title: str, compare: str, whatif: str | None, whole: bool, step_col, host=None
):
    """The step picked (in `step_col`, the first row's), its readouts and its lanes (beside the compared trace's,
    on one time axis; the what-if's replay on the host `host`): (the step, (report, step) of the compared trace
    or None)."""
    with step_col:
        step = _step_picker(report, "tr_step")
    if step.notes:  # dropped records or clocks that disagree: drawn as the reader left them, and said so
        st.warning(" ".join(step.notes), icon=":material/warning:")
    _readouts(report, step)
    other = _compared(compare, report.steps.index(step)) if compare != NOTHING else None
    replay = step.timeline.metrics().launches == 1
    st.subheader(
        "The whole step" if whole else f"First {FIRST_LAUNCHES} {'kernels' if replay else 'launches'}"
    )
    if other is None:
        _lanes(report, step, whatif, whole, "tr_lanes", host=host)
        return step, None
    shown = [s.timeline if whole else s.timeline.first_launches(FIRST_LAUNCHES) for s in (step, other[1])]
    x_max = max(t.step_us for t in shown)
    left, right = st.columns(2, gap="medium")
    with left:
        _side_title(title, report, step)
        _lanes(report, step, whatif, whole, "tr_lanes", x_max, host)
    with right:
        _side_title(compare, other[0], other[1])
        _lanes(other[0], other[1], None, whole, "tr_compare_lanes", x_max)
    st.caption("Both on one time axis, so a step twice as long looks twice as long.")
    return step, other


def _download(step: reader.TraceStep) -> None:
    chrome_trace_download(
        step.timeline,
        "Download this step as drawn (Chrome trace, opens in Perfetto)",
        f"trace-step-{step.index}.json",
        "tr_download",
        weak=True,  # an upload's step must not outlive its place in the server's budget
    )
