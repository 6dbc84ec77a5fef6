"""The "Calibration" tab: fit the simulator to a probe run and check its predictions.

The fit and the leave-one-out predictions come from `sim.calibration` (the same code as
`python -m sim calibrate`, so the page and the CLI print the same figures); the caches
are in `ui.calibration_cache`.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from core.step_plan import MODES, modes
from sim.calibration import PARAMS, Calibration
from sim.calibration.report import loo_summary, verdict
from ui import first_paint
from ui.calibration.charts import predicted_vs_measured_figure
from ui.calibration_cache import (
    CALIBRATED_TITLE,
    calibration_of,
    preset_for,
    result_key,
    verdict_sentence,
    verdict_title,
)
from ui.charts import format_us, lanes_figure
from ui.common import counts_text, gpu_counts, plain, profiled_against_median
from ui.host_index import NOT_MEASURED, host_phrase
from ui.probe_results import available_results, fallback_note, recorded, run_picker, upload_widget
from ui.tables import Column, show_table

# Below the lanes, one view at a time (only the open one runs: the first open of the tab draws two charts and one
# small table, not two charts and four tables; issue 29, item 7).
VIEWS = (
    "Errors by mode",
    "Predicted vs measured",
    "Every point",
    "Fitted parameters",
    "As a simulator preset",
)
CALIBRATE_PARAMS: dict[str, tuple] = {
    "cal_view": ("choice", VIEWS),
    "cal_mode": ("choice", tuple(MODES)),
    "cal_batch": ("int", 1, 65536),
    "cal_whole": ("bool",),
    "cal_run": ("text", 300),  # a run's label; checked by ui.probe_results.run_picker
}
LOO_LABEL = "Median step-time error (leave-one-out)"
SCOPE = "calibration"  # this tab's own first screen (ui/first_paint.py)
READOUT = ".st-key-cal_headline [data-testid=stMetricValue]"  # on screen: the first screen is shown


def host_fitted(result) -> str:
    """One line beside the lanes' title: the run's host, whose launch and replay costs the fit learned."""
    phrase = host_phrase(result)
    if phrase == NOT_MEASURED:
        return (
            "Host not measured: the fit's launch and replay costs are this run's host's, however fast it was."
        )
    return f"{phrase[0].upper()}{phrase[1:]}: the fit's launch and replay costs are this host's."


STEP_TIME_TO_READ = (
    "**Which step time to read:** the *leave-one-out* errors: each step's median time, predicted by a fit that "
    "never saw that step."
)


# -- page -------------------------------------------------------------------------
def _pick():
    options = available_results()
    if not options:
        st.warning("No probe run to calibrate against: the recorded run is missing and nothing was uploaded.")
        return None
    label = run_picker(
        "Probe run to fit",
        options,
        "cal_run",
        "The recorded run, or one you uploaded or measured in this session.",
    )
    return options[label][0]


def _params_view(cal: Calibration) -> None:
    rows = [
        {
            "parameter": p.name,
            "fitted": float(f"{cal.params[p.name]:.4g}"),
            "unit": p.unit,
            "what it is": p.what,
            "what the runs say of it": cal.pins[p.name].describe(p.unit),
        }
        for p in PARAMS
    ]
    show_table(
        rows, {**{k: k for k in rows[0]}, "fitted": Column("fitted", "{:.4g}")}, key="cal_params", height=None
    )
    st.caption(
        "Each kernel family's latency, bandwidth and matrix rate are fitted (bounded least squares on "
        "the logarithms) to the GPU time its kernels add in each profiled step; the host costs to the "
        "unprofiled host times (least absolute deviations); the node gap is read off the profiled "
        "graph steps. The step time is not fitted: the schedule predicts it from those. A GPU figure is "
        "pinned where its 95 % interval lies inside the range it may take; one the runs leave free (a bandwidth "
        "whose bytes cost nothing measurable, say) is held at its prior or at the bound the runs lean to, and "
        "the rest fitted with it there, so no figure is wherever the solver happened to stop."
    )


def _headline(cal: Calibration) -> None:
    """The three headline figures: the median and worst step-time errors left out, the median in the fit."""
    fit_err = float(np.median(np.abs(cal.errors()[:, 0])))
    summary = loo_summary(cal)
    point, worst = summary["worst_point"], summary["worst_point"]["error"]
    a, b, c = st.container(key="cal_headline").columns(3)
    a.metric(
        LOO_LABEL,
        f"{100 * summary['median']:.1f}%",
        help="Each run predicted by a fit that never saw it, then the median of |predicted / measured - 1|.",
    )
    b.metric(
        "Worst point (leave-one-out)",
        f"{100 * worst:+.1f}%",
        help=f"{point['mode']} at batch {point['batch']}",
    )
    c.metric("Median step-time error (fit)", f"{100 * fit_err:.1f}%")


def _by_mode(cal: Calibration, result) -> None:
    """Each mode's errors, and the verdict against the goals."""
    summary = loo_summary(cal)
    per_mode = [
        {
            "mode": m.name,
            "median |error|, fit %": 100
            * float(np.median(np.abs([e for p, e in zip(cal.points, cal.errors()[:, 0]) if p.mode == m]))),
            "median |error|, leave-one-out %": 100 * cal.mode_loo_error(m),
            "worst |error|, leave-one-out %": 100
            * max(abs(e) for p, e in zip(cal.points, cal.loo_errors()) if p.mode == m),
        }
        for m in modes(modelled=True)
        if any(p.mode == m for p in cal.points)
    ]
    # A few rows: a static table, not the interactive grid (which costs the first open of the tab ~0.1 s to mount).
    show_table(per_mode, key="cal_by_mode", stretch=False)
    text = verdict(summary, "Leave-one-out")
    (st.success if ". Meets the goals" in text else st.warning)(text)
    left_out(result)


def left_out(result) -> None:
    """The runs that are not points of the fit because they ran other kernels than their mode's, said with why."""
    fell = [r for r in result.runs if r.eager_fallback and r.mode in MODES and MODES[r.mode].modelled]
    if fell:
        st.caption(
            "Not points of the fit: "
            + "; ".join(f"{r.mode} at batch {r.batch} ({fallback_note(result, r)})" for r in fell)
            + ". Each ran other kernels than its mode's, so its errors would not be the mode's."
        )


def _table(cal: Calibration, result) -> None:
    rows = []
    for row in cal.rows():
        # The fit counts every GPU interval of a step; the page counts kernels, copies and memsets apart.
        counts = gpu_counts(result.run(row["mode"], row["batch"]).timeline)
        at = list(row).index("kernels")
        items = list(row.items())
        items[at : at + 1] = [
            ("kernels", counts["kernels"]),
            ("copies, memsets", counts["copies"] + counts["memsets"]),
        ]
        rows.append(dict(items))
    show_table(rows, key="cal_points", height=None)
    csv = ",".join(rows[0]) + "\n" + "\n".join(",".join(str(v) for v in r.values()) for r in rows) + "\n"
    st.download_button(
        "Download the table as CSV",
        data=csv,
        file_name="calibration.csv",
        mime="text/csv",
        on_click="ignore",
        icon=":material/download:",
        key="cal_csv",
    )


def _pickers(cal: Calibration, columns) -> tuple:
    """The point to draw and whether the whole step: (mode, batch, whole, its index in the fit's points)."""
    fitted = tuple(m for m in MODES if any(p.mode.name == m for p in cal.points))
    mode_col, batch_col, whole_col = columns
    mode = mode_col.selectbox("Mode", fitted, key="cal_mode", bind="query-params")
    batches = tuple(sorted({p.batch for p in cal.points if p.mode.name == mode}))
    batch = batch_col.selectbox("Batch size", batches, key="cal_batch", bind="query-params")
    whole = whole_col.toggle("Show the whole step", key="cal_whole", bind="query-params")
    index = next(i for i, p in enumerate(cal.points) if p.mode.name == mode and p.batch == batch)
    return mode, batch, whole, index


def _overlay(cal: Calibration, result, mode: str, batch: int, whole: bool, index: int) -> None:
    title_col, host_col = st.columns([1, 2.3], vertical_alignment="bottom")
    title_col.markdown("**Simulated over measured lanes**")
    host_col.caption(host_fitted(result))  # beside the title: no height of its own
    measured, simulated = result.run(mode, batch).timeline, cal.timeline(index)
    st.plotly_chart(
        lanes_figure(measured, overlay=simulated, whole_step=whole),
        width="stretch",
        key="cal_lanes",
        theme=None,  # lanes carry their own styles (ui/charts.py)
        config={"displaylogo": False, "scrollZoom": True},
    )
    m, s = measured.metrics(), simulated.metrics()
    st.caption(
        f"Top: the profiled step ({counts_text(gpu_counts(measured))}, {format_us(m.step_us)}). Bottom: the model's "
        f"step ({s.kernels:,} kernels, {format_us(s.step_us)}): {verdict_title(cal, index)}. "
        f"{verdict_sentence(cal, index)} {profiled_against_median(m.step_us, cal.points[index].step_us)}"
    )


def render() -> None:
    # The picture first (issue 29, item 6): the pickers in one row, the headline errors, the lanes; one view of the
    # fit below them (VIEWS), and the uploader last, so that at 1400 x 1000 the lanes are on the first screen.
    st.subheader("Calibrate the timing model to a measured run")
    st.markdown(STEP_TIME_TO_READ)
    run_col, *columns = st.columns([3.4, 1.3, 1.1, 1.3], vertical_alignment="bottom")
    with run_col:
        result = _pick()
    if result is None:
        _your_run()
        return
    try:
        cal = calibration_of(result)
    except ValueError as err:
        st.error(f"This run cannot be calibrated: {plain(err)}")
        _your_run()
        return
    _headline(cal)
    picked = _pickers(cal, columns)
    if not first_paint.seen(SCOPE):
        # The tab's first screen in this session: the pickers and the errors, a skeleton where the lanes go. The
        # charts (Plotly's 4.7 MB script, if this browser has not run it yet) come in the run the report starts,
        # so the readout never waits for them (ui/first_paint.py; bench/first_view_speed.py calibration-warm).
        st.skeleton(height=420)
        first_paint.report(once_shown=READOUT, scope=SCOPE)
        return
    _overlay(cal, result, *picked)
    views = dict(zip(VIEWS, st.tabs(VIEWS, key="cal_view", bind="query-params")))
    if views["Errors by mode"].open:
        with views["Errors by mode"]:
            _by_mode(cal, result)
    if views["Predicted vs measured"].open:
        with views["Predicted vs measured"]:
            st.plotly_chart(
                predicted_vs_measured_figure(cal),
                width="stretch",
                key="cal_scatter",
                config={"displaylogo": False},
            )
            st.caption(
                "Each dot is one measured run, labelled with its batch size where the label has room (hover a dot "
                "for its mode and batch); on the dotted line the prediction is exact. Measured step time is the "
                "median over many steps; CPU launch time is the host's median time to enqueue a step; GPU busy time "
                "comes from the profiled step; utilisation is GPU busy over the median step."
            )
    if views["Every point"].open:
        with views["Every point"]:
            _table(cal, result)
    if views["Fitted parameters"].open:
        with views["Fitted parameters"]:
            _params_view(cal)
    if views["As a simulator preset"].open:
        with views["As a simulator preset"]:
            _preset(result)
    _your_run()


def _preset(result) -> None:
    preset = preset_for(result)
    st.text(preset.title)  # the device name comes from the file: text, never markdown
    rec, _ = recorded()
    if rec is not None and result_key(rec) == result_key(result):
        st.caption(
            f"The Simulator tab offers it as “{CALIBRATED_TITLE}”: batch sizes and layer counts this run "
            "never measured."
        )
    st.text(preset.note)


def _your_run() -> None:
    st.markdown("**Your own run**")
    upload_widget("cal_upload", "cal_run")
