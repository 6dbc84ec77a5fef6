"""The Your trace tab's estimates: the step without the profiler beside the step as traced, and what CUDA graphs
and fusion would make of it (`sim.trace`: the trace's own kernel times rescheduled by the simulator's timing
model), with what fusion would fold away and keep on chip."""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from core import trace as reader
from ui.charts import format_us, lanes_figure
from ui.common import faster_or_slower, gpu_counts, plain
from ui.host_index import INPUT_LABEL, host_phrase, launch_us, own_index
from ui.tables import Column, show_table
from ui.trace.analysis import untraced_step, whatifs_of

# What to draw beside the trace: the option (what the URL holds) -> sim.trace.whatif's name for it.
WHATIFS = {
    "the trace alone": None,
    "with CUDA graphs": "graphs",
    "with fusion": "fusion",
    "with fusion + graphs": "fusion + graphs",
}


def whatif_table(report: reader.TraceReport, step: reader.TraceStep, host: float | None = None) -> None:
    """The step as traced, without the profiler and in each what-if (a replay priced on the host `host`, None:
    the recorded probe run's); then what fusion would fold away."""
    outs = whatifs_of(report, step, host)
    untraced = untraced_step(report, step)
    base, real = step.metrics.step_us, untraced.step_us
    labels = {v: k for k, v in WHATIFS.items()}
    show_table(_whatif_rows(step, untraced, outs, labels), key="tr_whatifs")
    if step.graph_launches:
        st.caption("This step already replays a CUDA graph, so only fusion is estimated.")
    quoted = [
        f"**{labels[name]}**: {faster_or_slower(real, w.metrics.step_us, 'your step without the profiler')} "
        f"({faster_or_slower(base, w.metrics.step_us, 'the traced step')})."
        for name, w in outs.items()
    ]
    notes = [plain(note) for w in outs.values() for note in w.notes]
    st.markdown(" ".join(quoted))
    st.caption(
        "Estimates: the step without the profiler, its own kernel times rescheduled by the simulator's timing "
        "model. " + " ".join(dict.fromkeys(notes)) + " " + replay_host(host)
    )
    _folded(outs["fusion"])


def replay_host(host: float | None) -> str:
    """Whose host a graph replay is priced on: the recorded probe run's (named by its index), or the reader's."""
    from core.probe_result import recorded_result

    try:
        run = recorded_result()
    except (OSError, ValueError):
        return ""
    if host is not None and own_index(run):
        return (
            f"A graph replay is priced on your host ({host:g} µs a torch launch): the recorded probe run's replay "
            f"cost scaled by your index over its {launch_us(own_index(run))} (Calibration.on_host)."
        )
    return (
        f"A graph replay is priced on the recorded probe run's host ({host_phrase(run)}); give yours under "
        f"*{INPUT_LABEL}* above to price it there."
        if own_index(run)
        else "A graph replay is priced on the recorded probe run's host (host not measured)."
    )


def _whatif_rows(step: reader.TraceStep, untraced, outs: dict, labels: dict) -> list[dict]:
    base, real = step.metrics.step_us, untraced.step_us

    def row(name: str, us: float, counts: dict, launches: int, bound: str) -> dict:
        return {
            "the step": name,
            "step time": format_us(us),
            "vs your step without the profiler": f"{real / us:.2f}×",
            "vs the traced step": f"{base / us:.2f}×",
            "kernels": counts["kernels"],
            "copies, memsets": counts["copies"] + counts["memsets"],
            "launch calls": launches,
            "bound by": bound,
        }

    m = step.metrics
    mine = gpu_counts(step.timeline)
    rows = [
        row("as traced", base, mine, step.launches, m.bound_by),
        row(f"without the profiler ({untraced.source_label})", real, mine, step.launches, m.bound_by),
    ]
    for name, w in outs.items():
        rows.append(
            row(
                f"{labels[name]} (estimate)",
                w.metrics.step_us,
                gpu_counts(w.timeline),
                w.launches,
                w.metrics.bound_by,
            )
        )
    return rows


def _folded(fusion) -> None:
    """What the fusion what-if folds away, kernel by kernel, and the HBM traffic its groups keep on chip."""
    folded = fusion.folded
    if not folded:
        return
    with st.expander(
        f"What fusion would fold away: {sum(f.count for f in folded):,} kernels, group by group"
    ):
        _folded_tables(fusion, folded)


def _folded_tables(fusion, folded) -> None:
    show_table(
        [{"kernel": f.name, "count": f.count, "GPU µs": f.gpu_us, "host µs": f.host_us} for f in folded],
        {"kernel": Column("kernel", long=True), "count": "count", "GPU µs": "GPU µs", "host µs": "host µs"},
        key="tr_folded",
    )
    saved = fusion.bytes_saved
    st.caption(
        f"{sum(f.count for f in folded):,} launches fewer, in {len(fusion.groups):,} fused groups. "
        + (
            f"About {format_bytes(saved)} less HBM traffic: each intermediate a group keeps on chip is neither "
            "written out nor read back (2 × its bytes). Group by group below, with the shapes the trace recorded: "
            "an intermediate is a member's output that a later member reads; a group's own output, and a copy the "
            "next kernel reads (a KV cache expanded for the attention), are written either way."
            if saved is not None
            else "Bytes saved need shapes: record with torch.profiler.profile(record_shapes=True)."
        )
    )
    if saved is not None:
        _fused_groups(fusion.groups)


def format_bytes(n: int) -> str:
    """'3.06 MB', '76.0 kB', '4 B'."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:,.{2 if n < 10 * size else 1}f} {unit}"
    return f"{n:,} B"


def _fused_groups(groups) -> None:
    """The fusion what-if's groups: their ops with the shapes behind them, what stays on chip, the bytes saved."""
    show_table(
        [
            {
                "group": k + 1,
                "from kernel": g.first + 1,
                "kernels": len(g.ops),
                "stays on chip": "; ".join(
                    f"{op} → [{', '.join(map(str, shape))}] {dtype}"
                    for op, shape, dtype, _ in g.intermediates
                )
                or "nothing: no member's output is read within the group",
                "HBM traffic saved": format_bytes(g.bytes_saved),
                "ops (input shapes)": " → ".join(op or "?" for op in g.ops),
            }
            for k, g in enumerate(groups)
        ],
        {
            "group": "group",
            "from kernel": "from kernel",
            "kernels": "kernels",
            "stays on chip": Column("stays on chip", long=True),
            "HBM traffic saved": "HBM traffic saved",
            "ops (input shapes)": Column("ops (input shapes)", long=True),
        },
        key="tr_fused_groups",
        height=320,
    )


def _why_slow() -> str:
    from sim.timing import PROFILER_COST as c

    return (
        f"Why a traced host-bound step runs slow: torch.profiler spends host time on every event it records, about "
        f"{c.op_us:.1f} µs an aten op, {c.api_us:.1f} µs a CUDA runtime or driver call and {c.triton_us:.0f} µs the "
        f"range Inductor opens around each Triton launch, with {c.shapes_us:.1f} µs more an op under record_shapes "
        "and Python calls under with_stack (fitted on H200 traces, scaled by how fast this trace's host launched "
        "kernels). A host-bound step pays all of it, since its GPU waits for the host; a GPU-bound step hides it "
        "behind kernels that were queued anyway. The what-ifs start from the step without the profiler."
    )


def without_profiler(report: reader.TraceReport, step: reader.TraceStep, whole: bool) -> None:
    """The step as traced beside the step without the profiler: both sets of lanes on one time axis."""
    untraced = untraced_step(report, step)
    traced = step.metrics.step_us
    st.subheader("The step as traced, and without the profiler")
    as_traced, without, ratio = st.columns(3)
    as_traced.metric("Step time (as traced)", format_us(traced), help="The step as the profiler recorded it.")
    measured_by = report.trace.recorded_untraced or {}
    without.metric(
        "Step time (no profiler)" if untraced.source != "estimate" else "Step time (no profiler, estimated)",
        format_us(untraced.step_us),
        help={
            "metadata": "Measured by the recorder (gpu_probe/recorder.py: untraced steps timed before profiling), "
            "carried in the trace's metadata.",
            "probe": "Measured by the probe: the median step of its recorded run "
            f"({plain(measured_by.get('run', ''))}), timed with CUDA events without the profiler; the Live GPU probe "
            "tab shows the same figure.",
        }.get(
            untraced.source,
            "Estimated: each host interval less the profiler's cost of the events recorded in it, the kernels "
            "rescheduled. Record with gpu_probe/recorder.py to carry the measured figure in the trace.",
        ),
    )
    ratio.metric(
        "Traced / without",
        f"{traced / untraced.step_us:.2f}×",
        help="How much slower the profiler made this step.",
    )
    # One chart, the two steps' lanes one above the other on one time axis: a second chart would cost every step
    # change another ~30 ms of drawing in the browser (bench/trace_speed.py).
    both = (
        replace(step.timeline, label="as traced"),
        replace(untraced.step.timeline, source=step.timeline.source, label="without the profiler"),
    )
    st.plotly_chart(
        lanes_figure(*both, whole_step=whole),
        width="stretch",
        key="tr_untraced_lanes",
        theme=None,
        config={"displaylogo": False, "scrollZoom": True},
    )
    source = (
        f"The step without the profiler is {untraced.source_label} ({format_us(untraced.step_us)}); its lanes are "
        "this step with the profiler's cost taken out of each host interval, scaled to match it."
        if untraced.source != "estimate"
        else f"The step without the profiler is estimated: {untraced.profiler_us:,.0f} µs of the profiler's own cost "
        "taken out of the host lane, the kernels rescheduled by the simulator's timing model."
    )
    st.caption(
        f"{source} Without the profiler the step is {faster_or_slower(traced, untraced.step_us, 'as traced')}."
    )
    with st.expander("Why a traced step runs slow"):
        st.caption(_why_slow())
    notes = [report.trace.recorded_note, *untraced.notes]
    for note in filter(None, notes):
        st.caption(plain(note))
