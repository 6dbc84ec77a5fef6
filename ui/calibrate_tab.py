"""The "Calibration" tab: fit the simulator to a probe run and check its predictions.

The fit and the leave-one-out predictions come from `sim.calibrate` (the same code as
`python -m sim calibrate`, so the page and the CLI print the same median error). A
calibration is cached per result for every session: it takes a second or two.
"""

from __future__ import annotations

import hashlib

import numpy as np
import streamlit as st

from core.probe_result import MODES
from sim.calibrate import FIT_MODES, PARAMS, Calibration, calibrate, missing_effects
from sim.config import Preset
from sim.probe_preset import calibrated_preset
from ui.calibrate_charts import predicted_vs_measured_figure
from ui.charts import format_us, lanes_figure
from ui.probe_results import available_results, recorded, run_picker, upload_widget

CALIBRATE_PARAMS: dict[str, tuple] = {
    "cal_mode": ("choice", MODES),
    "cal_batch": ("int", 1, 65536),
    "cal_whole": ("bool",),
}
GOAL, STRETCH = 0.10, 0.05
LOO_LABEL = "Median step-time error (leave-one-out)"


def result_key(result) -> str:
    """A short id of a result's content, for caching its calibration across sessions."""
    digest = hashlib.sha1()
    for r in result.runs:
        digest.update(
            f"{r.mode}|{r.batch}|{r.step_us_median}|{r.cpu_launch_us}|{r.gpu_busy_us}|"
            f"{r.kernels_per_step}|{r.enqueue_us_median}".encode()
        )
    return f"{result.device}|{result.created}|{digest.hexdigest()[:16]}"


@st.cache_resource(max_entries=8, show_spinner="Fitting the simulator to the run…")
def calibration_for(key: str, _result) -> Calibration:
    return calibrate(_result)


@st.cache_resource(max_entries=8, show_spinner=False)
def _fit_for(key: str, _result) -> Calibration:
    # Without the leave-one-out refits (a twentieth of the time): for pictures and presets.
    return calibrate(_result, loo=False)


@st.cache_resource(max_entries=8, show_spinner=False)
def _preset_for(key: str, _result) -> Preset:
    return calibrated_preset(_result, _fit_for(key, _result))


def calibration_of(result) -> Calibration:
    return calibration_for(result_key(result), result)


def preset_for(result) -> Preset:
    """The simulator preset calibrated to `result`: fitted once per run for every session."""
    return _preset_for(result_key(result), result)


def calibrated_presets() -> dict[str, Preset]:
    """Presets fitted to the runs this session can see (recorded first), for the simulator's picker.

    key -> Preset, titled "probe decoder on <GPU>"; cached per run, so cheap to call on every rerun.
    """
    out = {}
    for result, _ in available_results().values():
        try:
            preset = preset_for(result)
        except ValueError:
            continue
        out.setdefault(preset.key, preset)  # two runs on one GPU (small and 1b): the first, recorded, wins
    return out


def probe_sim_step(result, mode: str, batch: int):
    """(simulated Timeline, title) of a measured setting from the calibrated simulator, or (None, why)."""
    try:
        cal = _fit_for(result_key(result), result)
    except ValueError as err:
        return None, f"The simulator cannot be fitted to this run: {err}"
    if mode not in FIT_MODES:
        return None, (
            "torch.compile's step is not a simulator mode: Inductor generates its own kernels, "
            "so there is no simulated picture for it."
        )
    index = next((i for i, p in enumerate(cal.points) if p.mode == mode and p.batch == batch), None)
    if index is None:
        return None, "This setting was not measured."
    return cal.timeline(index), "calibrated to this run, same kernel count"


# -- page -------------------------------------------------------------------------
def _pick():
    upload_widget("cal_upload", "cal_run")
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
            "constrained by the runs": cal.fitted[p.name],
        }
        for p in PARAMS
    ]
    st.dataframe(rows, hide_index=True, width="stretch", height=35 * (len(rows) + 1) + 3)
    st.caption(
        "Fitted by bounded least squares (Levenberg-Marquardt on the logarithms, projected onto the "
        "bounds) to the logarithm of every run's step, CPU launch and GPU busy time; step time "
        "weighs twice as much. The simulator runs each point with the measured kernel count."
    )


def _headline(cal: Calibration) -> None:
    in_goal = [p.in_fit for p in cal.points]
    fit_err = float(np.median(np.abs(cal.errors()[in_goal, 0])))
    loo = cal.median_loo_error
    a, b, c = st.columns(3)
    a.metric(
        LOO_LABEL,
        f"{100 * loo:.1f}%",
        help="Each run predicted by a fit that never saw it, then the median of |predicted / measured - 1|.",
    )
    b.metric("Median step-time error (fit)", f"{100 * fit_err:.1f}%")
    c.metric(
        "Runs fitted",
        f"{sum(in_goal)}",
        help=f"Modes {', '.join(FIT_MODES)}. torch.compile runs are not a simulator mode (Inductor's own "
        "kernels) and are left out.",
    )
    per_mode = [
        {
            "mode": m,
            "median |error|, fit %": 100
            * float(np.median(np.abs([e for p, e in zip(cal.points, cal.errors()[:, 0]) if p.mode == m]))),
            "median |error|, leave-one-out %": 100 * cal.mode_loo_error(m),
        }
        for m in FIT_MODES
        if any(p.mode == m for p in cal.points)
    ]
    st.dataframe(
        per_mode,
        hide_index=True,
        column_config={
            k: st.column_config.NumberColumn(format="%.1f")
            for k in ("median |error|, fit %", "median |error|, leave-one-out %")
        },
    )
    verdict = (
        "meets the 5 % stretch goal"
        if loo <= STRETCH
        else "meets the 10 % goal"
        if loo <= GOAL
        else "misses the 10 % goal"
    )
    (st.success if loo <= GOAL else st.warning)(f"Leave-one-out, the calibrated simulator {verdict}.")
    for text in missing_effects(cal, GOAL):
        st.warning(text)


def _table(cal: Calibration) -> None:
    rows = cal.rows()
    fmt = {
        k: st.column_config.NumberColumn(format="%.1f")
        for k in rows[0]
        if k.endswith(("(µs)", "%", "(points)"))
    }
    st.dataframe(rows, hide_index=True, width="stretch", column_config=fmt, height=35 * (len(rows) + 1) + 3)
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


def _overlay(cal: Calibration, result) -> None:
    modes = tuple(m for m in MODES if any(p.mode == m for p in cal.points))
    mode_col, batch_col, whole_col = st.columns([2, 2, 1.2], vertical_alignment="bottom")
    mode = mode_col.selectbox("Mode", modes, key="cal_mode", bind="query-params")
    batches = tuple(sorted({p.batch for p in cal.points if p.mode == mode}))
    batch = batch_col.selectbox("Batch size", batches, key="cal_batch", bind="query-params")
    whole = whole_col.toggle("Show the whole step", key="cal_whole", bind="query-params")
    index = next(i for i, p in enumerate(cal.points) if p.mode == mode and p.batch == batch)
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
        f"Top: the profiled step ({m.kernels} kernels, {format_us(m.step_us)}); bottom: the calibrated "
        f"simulator ({s.kernels} kernels, {format_us(s.step_us)}). The profiled step runs slower than the "
        "median step the fit uses, because the profiler adds host time to every launch."
    )


def render() -> None:
    st.subheader("Calibrate the simulator to a measured run")
    st.caption(
        "Fit the simulator's launch costs, node gap and roofline to a probe run, then check how well it "
        "predicts each run, including runs it was not fitted to."
    )
    result = _pick()
    if result is None:
        return
    try:
        cal = calibration_of(result)
    except ValueError as err:
        st.error(f"This run cannot be calibrated: {err}")
        return
    _headline(cal)
    st.markdown("**Fitted parameters**")
    _params_view(cal)
    st.markdown("**Predicted vs measured**")
    st.plotly_chart(
        predicted_vs_measured_figure(cal), width="stretch", key="cal_scatter", config={"displaylogo": False}
    )
    st.caption(
        "Each dot is one measured run, labelled with its batch size; on the dotted line the prediction "
        "is exact. Measured step time is the median over many steps; CPU launch time is the host's "
        "median time to enqueue a step; GPU busy time comes from the profiled step; utilisation is GPU "
        "busy over the median step."
    )
    _table(cal)
    st.markdown("**Simulated over measured lanes**")
    _overlay(cal, result)
    preset = preset_for(result)
    st.markdown(f"**As a simulator preset: “{preset.title}”**")
    rec, _ = recorded()
    if rec is not None and result_key(rec) == result_key(result):
        from ui.sim_presets import CALIBRATED_TITLE

        st.caption(
            f"The Simulator tab offers it as “{CALIBRATED_TITLE}”: batch sizes and layer counts this run "
            "never measured."
        )
    st.caption(preset.note)
