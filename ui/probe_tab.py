"""The "Live GPU probe" tab: the simulator's picture, measured on a real GPU.

Without CUDA the page shows the recorded H200 run (labelled as such) and accepts a result
file made on the reader's own GPU. With CUDA, "Measure on this GPU" runs the probe here;
torch is imported only then (through `gpu_probe.live`), never by the other tabs.
Results the session has loaded live in `st.session_state[RESULTS_KEY]`, so the
Calibration tab can fit the simulator to the same run.
"""

from __future__ import annotations

import threading
from datetime import datetime

import streamlit as st

from gpu_probe import result as probe_result
from sim.timeline import StepMetrics
from ui.charts import FIRST_LAUNCHES, format_us, lanes_figure
from ui.common import show_readouts

MODES = probe_result.MODES
SIM_EQUIVALENT = {
    "eager": (False, False),
    "fused": (True, False),
    "graph": (False, True),
    "fused+graph": (True, True),
    "compile": (True, True),
}
RESULTS_KEY = "probe_results"  # session: label -> ProbeResult (uploaded and live runs)
LIVE_BATCHES = (1, 8, 64, 256)

# URL key -> spec, read by ui.url_params before any widget.
PROBE_PARAMS: dict[str, tuple] = {
    "pr_live": ("bool",),
    "pr_mode": ("choice", MODES),
    "pr_batch": ("int", 1, 65536),
    "pr_whole": ("bool",),
}


# -- where results come from ------------------------------------------------------
def describe(result) -> str:
    """'NVIDIA H200, 30 Nov 2026 10:12 UTC': the GPU and date a run was made on."""
    try:
        when = datetime.fromisoformat(result.created.replace("Z", "+00:00")).strftime("%d %b %Y %H:%M %Z")
    except ValueError:
        when = result.created
    return f"{result.device}, {when.strip()}"


@st.cache_resource(show_spinner=False)
def recorded() -> tuple:
    """(result, None) for the shipped run, or (None, why it could not be read)."""
    try:
        return probe_result.recorded_result(), None
    except (ValueError, OSError) as err:
        return None, str(err)


@st.cache_data(max_entries=16, show_spinner=False)
def _parse_upload(data: bytes):
    return probe_result.load_result(data)


def session_results() -> dict:
    return st.session_state.setdefault(RESULTS_KEY, {})


def upload_widget(key: str, select_key: str) -> None:
    """A result-file uploader; a bad file is named in an error and changes nothing else.

    A newly uploaded run becomes the one shown (`select_key` is the run picker's key).
    """
    file = st.file_uploader(
        "Probe result made on your GPU (`python -m gpu_probe --out results.json`)",
        type=["json"],
        key=key,
        max_upload_size=20,
        help="Schema-checked; up to 20 MB. It stays in this browser session only.",
    )
    if file is None:
        return
    try:
        result = _parse_upload(file.getvalue())
    except ValueError as err:
        st.error(f"**{file.name}** is not a usable probe result: {err}", icon=":material/error:")
        return
    label = f"uploaded: {file.name} ({describe(result)})"
    if label not in session_results():
        session_results()[label] = result
        st.session_state[select_key] = label


def available_results() -> dict:
    """label -> (result, source): the recorded run, then this session's uploads and live runs."""
    out = {}
    rec, _ = recorded()
    if rec is not None:
        out[f"recorded: {describe(rec)}"] = (rec, "recorded")
    for label, res in session_results().items():
        out[label] = (res, "live" if label.startswith("live") else "uploaded")
    return out


# -- measuring live ----------------------------------------------------------------
@st.cache_resource(show_spinner=False)
def _live_store() -> dict:
    # Shared by every session: the graphs' static buffers are too, so one lock serialises
    # capture and replay, and a finished measurement is kept for the next reader.
    return {"lock": threading.Lock(), "results": {}}


def _phase(message: str) -> str:
    text = message.lower()
    if "captur" in text:
        return "Capturing CUDA graphs…"
    if "timing" in text or "compil" in text:
        return "Measuring steps…"
    return "Warming up…"


def measure_live(batches=None):
    from gpu_probe import live  # imports torch

    store = _live_store()
    key = tuple(batches or LIVE_BATCHES)
    with st.status("Waiting for the GPU (another session may be measuring)…", expanded=True) as status:
        with store["lock"]:
            if key not in store["results"]:

                def progress(message: str) -> None:
                    status.update(label=_phase(message))
                    status.write(message)

                try:
                    store["results"][key] = live.measure("small", batches=key, modes=MODES, progress=progress)
                except Exception as err:  # noqa: BLE001 - the page must say what happened, not trace back
                    if "out of memory" in str(err).lower() or type(err).__name__ == "OutOfMemoryError":
                        status.update(label="Out of GPU memory", state="error")
                        st.error(
                            "The GPU ran out of memory while measuring. Free memory held by other "
                            "processes, or measure smaller batches with `python -m gpu_probe`."
                        )
                    else:
                        status.update(label="The measurement failed", state="error")
                        st.error(f"The measurement failed: {err}")
                    return None
        status.update(label="Measured on this GPU", state="complete", expanded=False)
    result = store["results"][key]
    session_results()[f"live: {describe(result)}"] = result
    return result


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
            f"{', '.join(map(str, LIVE_BATCHES))}: about a minute.",
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


def run_picker(title: str, options: dict, key: str, help_text: str) -> str:
    # Seeded through session state (not `index`) so that a new upload can select itself.
    if st.session_state.get(key) not in options:
        st.session_state[key] = next(iter(options))
    return st.selectbox(title, tuple(options), key=key, help=help_text)


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
    from ui.calibrate_tab import probe_sim_step  # the simulator's picture of the same settings

    measured_col, sim_col = st.columns(2, gap="medium")
    with measured_col:
        st.markdown(f"**Measured** ({source}) · {run.mode} · batch {run.batch}")
        st.plotly_chart(
            lanes_figure(run.timeline, whole_step=whole),
            width="stretch",
            key="pr_lanes",
            config={"displaylogo": False, "scrollZoom": True},
        )
    with sim_col:
        step, title = probe_sim_step(result, run.mode, run.batch)
        st.markdown(f"**Simulated** · {title if step is not None else 'no picture'}")
        if step is None:
            st.info(title)
        else:
            st.plotly_chart(
                lanes_figure(step, whole_step=whole),
                width="stretch",
                key="pr_sim_lanes",
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


def _modes_table(result, batch: int) -> None:
    base = result.run("eager", batch)
    rows = []
    for mode in MODES:
        r = result.run(mode, batch)
        if r is None:
            continue
        rows.append(
            {
                "mode": mode,
                "kernels / step": r.kernels_per_step,
                "kernels / layer": r.kernels_per_layer,
                "step p10 (µs)": r.step_us_p10,
                "step median (µs)": r.step_us_median,
                "step p90 (µs)": r.step_us_p90,
                "host enqueue (µs)": r.enqueue_us_median,
                "CPU launch, profiled (µs)": r.cpu_launch_us,
                "GPU busy (µs)": r.gpu_busy_us,
                "GPU utilisation %": 100 * r.utilisation,
                "bound by": r.bound_by,
                "vs eager": (base.step_us_median / r.step_us_median) if base else None,
                "× weight-read floor": r.step_us_median / result.weight_floor_us,
                "graph bucket": str(r.bucket)
                if r.bucket is not None
                else ("above the largest: eager" if r.eager_fallback else "—"),
            }
        )
    st.dataframe(
        rows,
        hide_index=True,
        width="stretch",
        column_config={
            k: st.column_config.NumberColumn(format="%.1f")
            for k in (
                "step p10 (µs)",
                "step median (µs)",
                "step p90 (µs)",
                "host enqueue (µs)",
                "CPU launch, profiled (µs)",
                "GPU busy (µs)",
                "GPU utilisation %",
            )
        }
        | {
            "vs eager": st.column_config.NumberColumn(format="%.2f×"),
            "× weight-read floor": st.column_config.NumberColumn(format="%.2f×"),
        },
    )
    st.caption(
        "Host enqueue: the host's time to submit one step, median, without the profiler. CPU launch, "
        "profiled: the same from the profiled step drawn above, which the profiler slows down."
    )


def _run_facts(result) -> None:
    bw, floor, fg = st.columns(3)
    bw.metric(
        "HBM copy bandwidth",
        f"{result.hbm_copy_GBps:,.0f} GB/s",
        help="A large device-to-device copy, bytes read plus bytes written per second.",
    )
    floor.metric(
        "Weight-read floor",
        format_us(result.weight_floor_us),
        help="Bytes of weights one decode step must read, over the copy bandwidth: no step can be faster.",
    )
    best = result.run("fused+graph", 1)
    fg.metric(
        "fused+graph at batch 1",
        f"{best.step_us_median / result.weight_floor_us:.2f}× the floor" if best else "not measured",
    )
    caps, checks = st.columns(2, gap="large")
    with caps:
        st.markdown("**Captured graphs**")
        if result.captures:
            st.dataframe(
                _capture_rows(result.captures),
                hide_index=True,
                width="stretch",
                height="auto" if len(result.captures) <= 16 else 360,
            )
            total = sum(float(c["capture_ms"]) for c in result.captures)
            st.caption(
                f"{len(result.captures)} graphs captured in {total / 1000:.2f} s in all; graph memory is "
                "what each capture added to the shared pool."
            )
        else:
            st.caption("No graphs were captured in this run.")
    with checks:
        st.markdown("**Correctness checks**")
        if result.checks:
            st.dataframe(
                [
                    {"check": name, "passed": bool(c.get("passed")), "detail": str(c.get("detail", ""))}
                    for name, c in result.checks.items()
                ],
                hide_index=True,
                width="stretch",
                column_config={"detail": st.column_config.TextColumn(width="large")},
            )
            (st.success if result.all_checks_passed else st.error)(
                "All checks passed." if result.all_checks_passed else "Some checks failed: see the table."
            )
        else:
            st.caption("This run recorded no checks.")
    for err in result.errors:
        st.warning(f"During this run: {err}")


def _capture_rows(captures) -> list[dict]:
    """One row per bucket, a column pair per variant (unfused, fused) where the run captured both."""
    rows = {}
    for c in captures:
        row = rows.setdefault(int(c["bucket"]), {"bucket": int(c["bucket"])})
        variant = f" {c['variant']}" if c.get("variant") else ""
        row[f"capture{variant} (ms)"] = round(float(c["capture_ms"]), 1)
        row[f"graph{variant} (MiB)"] = round(c["graph_mem_bytes"] / 2**20, 2)
    return [rows[b] for b in sorted(rows)]


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
            f"**Recorded run** on {describe(result)} (torch {result.torch}, CUDA {result.cuda}), shipped "
            f"with the app. Made with `{result.command}`.",
            icon=":material/history:",
        )
    elif source == "live":
        st.info(
            f"**Measured live** on this GPU: {describe(result)} (torch {result.torch}, CUDA {result.cuda}).",
            icon=":material/bolt:",
        )
    elif source == "uploaded":
        st.info(f"**Uploaded run** on {describe(result)}.", icon=":material/upload_file:")
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
    _modes_table(result, run.batch)
    _run_facts(result)
