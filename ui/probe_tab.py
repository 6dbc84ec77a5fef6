"""The "Live GPU probe" tab: the simulator's picture, measured on a real GPU.

Without CUDA the page shows the recorded H200 run (labelled as such) and accepts a result
file made on the reader's own GPU. With CUDA, "Measure on this GPU" runs the probe here;
torch is imported only then (through `gpu_probe.live`), never by the other tabs.
Where results come from is `ui.probe_results` (shared with the Calibration tab), the live
measurement `ui.probe_live`, and the tables under the lanes `ui.probe_tables`.
"""

from __future__ import annotations

import streamlit as st

from core import probe_result
from core.timeline import StepMetrics
from ui.charts import FIRST_LAUNCHES, format_us, lanes_figure
from ui.common import code, plain, show_readouts
from ui.probe_live import LIVE_BATCHES, LIVE_DURATION, measure_live
from ui.probe_results import available_results, describe, recorded, run_picker, upload_widget
from ui.probe_tables import modes_table, run_facts

MODES = probe_result.MODES
SIM_EQUIVALENT = {
    "eager": (False, False),
    "fused": (True, False),
    "graph": (False, True),
    "fused+graph": (True, True),
    "compile": (True, True),
}

# URL key -> spec, read by ui.url_params before any widget.
PROBE_PARAMS: dict[str, tuple] = {
    "pr_live": ("bool",),
    "pr_mode": ("choice", MODES),
    "pr_batch": ("int", 1, 65536),
    "pr_whole": ("bool",),
}


# -- the page ------------------------------------------------------------------------
def _cuda() -> bool:
    from gpu_probe import live

    return live.cuda_available()


def _pick_result():
    """The result to show, and how it was obtained ('live', 'uploaded', 'recorded')."""
    if _cuda():
        if st.toggle(
            "Measure on this GPU",
            key="pr_live",
            bind="query-params",
            help="Runs the probe's 0.5 B decoder in all five modes at batch "
            f"{', '.join(map(str, LIVE_BATCHES))}, with the graph captures and correctness checks: "
            f"{LIVE_DURATION} Progress shows below; the result is kept for every session on this server.",
        ):
            result = measure_live()
            if result is not None:
                return result, "live"
    upload_widget("pr_upload", "pr_run")
    options = available_results()
    if not options:
        _, why = recorded()
        st.warning(f"No recorded run could be read ({why}). Upload a result file to see one.")
        return None, None
    label = run_picker(
        "Run",
        options,
        "pr_run",
        "The recorded run ships with the app; uploaded files and live runs stay in your session.",
    )
    return options[label]


def _readouts(result, run) -> None:
    base = result.run("eager", run.batch)
    m = run.timeline.metrics()
    # Step time is the median over many unprofiled steps; the rest describe the profiled step drawn below.
    metrics = StepMetrics(
        kernels=run.kernels_per_step,
        launches=m.launches,
        cpu_launch_us=run.cpu_launch_us,
        gpu_busy_us=run.gpu_busy_us,
        step_us=run.step_us_median,
        idle_us=max(run.step_us_median - run.gpu_busy_us, 0.0),
        utilisation=run.utilisation,
        bound_by=run.bound_by,
    )
    show_readouts(
        metrics,
        base.step_us_median / run.step_us_median if base else None,
        speedup_help="Median eager step time at this batch divided by this mode's (no fusion, no "
        "graphs, same model and GPU).",
    )
    st.caption(
        f"Step time: median of the measured steps (p10 {format_us(run.step_us_p10)}, "
        f"p90 {format_us(run.step_us_p90)}). Utilisation, bound-by and the lanes come from one "
        "profiled step; the profiler adds some host time to each launch."
    )


def _lanes(result, run, source: str, whole: bool) -> None:
    from ui.calibration_cache import probe_sim_step  # the calibrated model's picture of the same settings

    measured_col, sim_col = st.columns(2, gap="medium")
    with measured_col:
        st.markdown(f"**Measured** ({source}) · {run.mode} · batch {run.batch}")
        st.plotly_chart(
            lanes_figure(run.timeline, whole_step=whole),
            width="stretch",
            key="pr_lanes",
            theme=None,  # lanes carry their own styles (ui/charts.py)
            config={"displaylogo": False, "scrollZoom": True},
        )
    with sim_col:
        step, title = probe_sim_step(result, run.mode, run.batch)
        st.markdown(f"**Simulated** · {plain(title) if step is not None else 'no picture'}")
        if step is None:
            st.info(plain(title))
        else:
            st.plotly_chart(
                lanes_figure(step, whole_step=whole),
                width="stretch",
                key="pr_sim_lanes",
                theme=None,  # lanes carry their own styles (ui/charts.py)
                config={"displaylogo": False, "scrollZoom": True},
            )
    from sim.chrome_trace import to_chrome_trace_json

    timeline = run.timeline
    st.download_button(
        "Download the measured step as a Chrome trace (open in Perfetto)",
        data=lambda: to_chrome_trace_json(timeline),
        on_click="ignore",
        file_name=f"probe-{run.mode.replace('+', '_')}-b{run.batch}.json",
        mime="application/json",
        icon=":material/download:",
        key="pr_trace_download",
    )


def render() -> None:
    st.subheader("The same step, measured on a real GPU")
    st.caption(
        "A 0.5 B-parameter Llama-style decoder (32 layers, random weights) run five ways: eager PyTorch, "
        "fused Triton kernels, CUDA-graph replay of each, and torch.compile's reduce-overhead peer."
    )
    result, source = _pick_result()
    if result is None:
        return
    if source == "recorded":
        st.info(
            f"**Recorded run** on {plain(describe(result))} (torch {plain(result.torch)}, CUDA "
            f"{plain(result.cuda)}), shipped with the app. Made with {code(result.command)}.",
            icon=":material/history:",
        )
    elif source == "live":
        st.info(
            f"**Measured live** on this GPU: {plain(describe(result))} (torch {plain(result.torch)}, CUDA "
            f"{plain(result.cuda)}).",
            icon=":material/bolt:",
        )
    elif source == "uploaded":
        st.info(f"**Uploaded run** on {plain(describe(result))}.", icon=":material/upload_file:")
    if not result.runs:
        st.warning("This result holds no measured runs.")
        return
    modes = result.modes
    mode_col, batch_col, whole_col = st.columns([2, 2, 1.2], vertical_alignment="bottom")
    mode = mode_col.selectbox("Mode", modes, key="pr_mode", bind="query-params")
    batches = tuple(sorted({r.batch for r in result.runs if r.mode == mode})) or result.batches
    batch = batch_col.selectbox("Batch size", batches, key="pr_batch", bind="query-params")
    whole = whole_col.toggle("Show the whole step", key="pr_whole", bind="query-params")
    run = result.run(mode, batch) or next(r for r in result.runs if r.mode == mode)
    _readouts(result, run)
    graph_replay = run.timeline.metrics().launches == 1
    st.subheader(
        "The whole step" if whole else f"First {FIRST_LAUNCHES} {'kernels' if graph_replay else 'launches'}"
    )
    _lanes(result, run, source, whole)
    st.subheader(f"All modes at batch {run.batch}")
    modes_table(result, run.batch)
    run_facts(result)
