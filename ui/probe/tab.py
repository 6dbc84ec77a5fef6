"""The "Live GPU probe" tab: the simulator's picture, measured on a real GPU.

Without CUDA the page shows every recorded run (labelled from its file: GPU, date, command) and accepts a result
file made on the reader's own GPU. With CUDA, "Measure on this GPU" runs the probe here;
torch is imported only then (through `gpu_probe.live`), never by the other tabs.
Where results come from is `ui.probe_results` (shared with the Calibration tab), the live
measurement `ui.probe.live`, and the tables under the lanes `ui.probe.tables`.
"""

from __future__ import annotations

import streamlit as st

from core import step_plan
from core.step_plan import BASELINE, FUSED_GRAPH, MODES
from core.tp_result import TPResult
from ui.charts import FIRST_LAUNCHES, format_us, lanes_figure
from ui.common import (
    UNTRACED,
    chrome_trace_download,
    code,
    counts_text,
    format_utilisation,
    gpu_counts,
    plain,
    profiled_against_median,
    show_readouts,
)
from ui.host_index import (
    HOST_SPEC,
    INPUT_LABEL,
    SPREAD_SENTENCE,
    OnHost,
    host_line,
    host_phrase,
    host_sentence,
    launch_us,
    own_index,
    your_host,
)
from ui.probe import tp_view
from ui.probe.charts import batch_axis_figure, mark_profiler_stretch, share_time_axis, step_split_figure
from ui.probe.live import LIVE_BATCHES, LIVE_DURATION, MODEL_CHOICES, measure_live, pick_model
from ui.probe.tables import fusion_table, modes_table, reference_note, run_facts
from ui.probe_results import (
    available_results,
    describe,
    fallback_note,
    recorded,
    run_picker,
    upload_widget,
)
from ui.tables import Column, show_table

MODE_NAMES = tuple(step_plan.MODES)

# URL key -> spec, read by ui.url_params before any widget.
PROBE_PARAMS: dict[str, tuple] = {
    "pr_live": ("bool",),
    "pr_live_model": ("choice", MODEL_CHOICES),  # what "Measure on this GPU" measures (ui.probe.live)
    "pr_mode": ("choice", MODE_NAMES),
    "pr_batch": ("int", 1, 65536),
    "pr_whole": ("bool",),
    "pr_run": (
        "text",
        300,
    ),  # a run's label; checked against the runs there are by ui.probe_results.run_picker
    "pr_host_us": HOST_SPEC,  # the reader's host, µs a torch launch (ui.host_index)
    **tp_view.TP_PARAMS,  # the tensor-parallel view's controls (ui.probe.tp_view)
}


# -- the page ------------------------------------------------------------------------
def _cuda() -> bool:
    from gpu_probe import live

    return live.cuda_available()


def _pick_result(live_area):
    """The result to show, and how it was obtained ('live', 'uploaded', 'recorded'); a live run's controls,
    progress and first answer go to `live_area` (the page's width, under the pickers)."""
    if _cuda():
        if st.toggle(
            "Measure on this GPU",
            key="pr_live",
            bind="query-params",
            help=f"Runs the probe on a preset or your config.json in all {len(step_plan.probe_modes())} modes at "
            f"batch {', '.join(map(str, LIVE_BATCHES))}, with the graph captures and correctness checks: batch 1's "
            f"{BASELINE.title} and {FUSED_GRAPH.title} steps first, drawn within seconds, then the rest as they "
            f"finish. The whole takes {LIVE_DURATION} Progress shows below; the result is kept for every session "
            "on this server.",
        ):
            with live_area:
                model = pick_model()
                result = measure_live(model, draw=_first_answer) if model is not None else None
            if result is not None:
                return result, "live"
    options = {**available_results(), **tp_view.uploaded_options()}  # a TP run is shown by ui.probe.tp_view
    if not options:
        _, why = recorded()
        st.warning(f"No recorded run could be read ({plain(why)}). Upload a result file (below) to see one.")
        return None, None
    label = run_picker(
        "Run",
        options,
        "pr_run",
        'Every recorded run ships with the app (listed with its GPU, date and command under "The recorded runs" below); '
        "uploaded files and live runs stay in your session.",
    )
    return options[label]


def _first_answer(result, done: int, total: int) -> None:
    """While a live run is measured part by part: its smallest batch's eager and fused+graph steps (the first
    part), each with its readouts and lanes as the tab draws a step, on one time axis; then every mode across
    the batches measured so far. The pickers and the rest of the tab follow once the last part is in."""
    first = min(result.batches)
    runs = [r for r in (result.run(m, first) for m in (BASELINE.name, FUSED_GRAPH.name)) if r is not None]
    st.caption(
        f"Measured so far, {done} of {total} parts: "
        + ", ".join(f"{MODES[r.mode].title} at batch {r.batch}" for r in result.runs)
        + ". Every mode and batch, with the pickers, is drawn here once the last part is measured."
    )
    figures = [lanes_figure(r.timeline) for r in runs]
    if figures:
        share_time_axis(figures, max(r.timeline.first_launches(FIRST_LAUNCHES).step_us for r in runs))
    for run, figure in zip(runs, figures):
        st.markdown(f"**Measured** (live) · {MODES[run.mode].title} · batch {run.batch}")
        _readouts(result, run)
        st.plotly_chart(
            figure,
            width="stretch",
            key=f"pr_live_lanes_{done}_{MODES[run.mode].slug}",  # a chart a part: drawn again after each
            theme=None,
            config={"displaylogo": False, "scrollZoom": True},
        )
    if len(result.batches) > 1:
        st.plotly_chart(
            batch_axis_figure(result, fallback_note=lambda r: fallback_note(result, r)),
            width="stretch",
            key=f"pr_live_batch_axis_{done}",
            theme=None,
            config={"displaylogo": False},
        )


def _readouts(result, run) -> None:
    base = result.run(BASELINE.name, run.batch)
    fallback = fallback_note(result, run)
    if fallback:  # the figures below are of the step that ran instead: said before any of them
        st.warning(
            f"**{MODES[run.mode].title} at batch {run.batch}** "
            f"({fallback}): every figure below is of that step, not of the {MODES[run.mode].title}.",
            icon=":material/call_split:",
        )
    # Without the profiler, from one source: the median step, the median host enqueue, the kernels' GPU time.
    metrics = run.untraced_metrics()
    show_readouts(
        metrics,
        base.step_us_median / run.step_us_median if base else None,
        speedup_help="Median eager step time at this batch divided by this mode's (no fusion, no "
        "graphs, same model and GPU).",
        basis=UNTRACED,
        counts=gpu_counts(run.timeline),
        step_help=step_time_help(run),
    )


def step_time_help(run) -> str:
    """The step-time readout's help: which statistic it is, and its spread."""
    return (
        f"The median of the run's timed steps, each started on an idle GPU (p10 {format_us(run.step_us_p10)}, "
        f"p90 {format_us(run.step_us_p90)}). {SPREAD_SENTENCE}: a host-bound step's spread, and its median from "
        "one machine to the next, is largely the host's."
    )


def _on_your_host(result, run, index: float | None) -> OnHost | None:
    """One short line beside the lanes' heading (no height of its own on the first screen): this run's host, and
    where the reader gave theirs, this step on it as the calibrated timing model puts it (`ui.host_index.OnHost`).
    Returns the model on that host, for the table under the modes table."""
    if index is None:
        hint = (
            f" {SPREAD_SENTENCE}: give yours under *{INPUT_LABEL}* to see this step there."
            if own_index(result)
            else ""
        )
        st.caption(host_line(result) + hint)
        return None
    from ui.calibration_cache import calibration_of

    try:
        on = OnHost.of(calibration_of(result), index)
    except ValueError as err:
        st.caption(f"{host_line(result)} The timing model cannot be fitted to this run: {plain(err)}")
        return None
    i = on.at(run.mode, run.batch)
    where = f"**On your host** ({index:g} µs a torch launch; this run's: {launch_us(on.own)})"
    if i is None:
        why = (
            f"the timing model does not model the {MODES[run.mode].title}"
            if run.mode not in MODES or not MODES[run.mode].modelled
            else "the calibration leaves this step out (it ran other kernels than its mode's)"
        )
        st.caption(
            f"{where}: no prediction for this step, since {why}; the modelled modes are below the modes table."
        )
        return on
    here, there = on.here[i], on.there[i]
    st.caption(
        f"{where}: the calibrated model puts this step at **{format_us(there[0])}**, "
        f"{100 * (there[0] / here[0] - 1):+.0f} % against its {format_us(here[0])} on this run's host "
        f"(measured {format_us(run.step_us_median)}); bound by {on.bound_there(i)} there."
    )
    return on


def _on_your_host_table(result, batch: int, on: OnHost) -> None:
    """Every mode at this batch on the reader's host, as the calibrated model puts it, beside what it puts it at on
    the run's own host and what was measured."""
    st.markdown(
        f"**On your host** ({on.index:g} µs a torch launch; this run's: {launch_us(on.own)}), calibrated model"
    )
    rows = []
    for mode in MODES:
        r = result.run(mode, batch)
        if r is None:
            continue
        i = on.at(mode, batch)
        here, there = (on.here[i], on.there[i]) if i is not None else ((None,) * 3, (None,) * 3)
        rows.append(
            {
                "mode": mode,
                "measured median (µs)": r.step_us_median,
                "model, this run's host (µs)": here[0],
                "model, your host (µs)": there[0],
                "change %": 100 * (there[0] / here[0] - 1) if i is not None else None,
                "host, your host (µs)": there[1],
                "GPU busy (µs)": there[2],
                "bound by, your host": on.bound_there(i) if i is not None else "not modelled",
            }
        )
    show_table(
        rows,
        {
            **{k: k for k in rows[0]},
            "change %": Column(
                "change %", "{:+.0f}", "Model on your host / model on this run's host, less 1."
            ),
        }
        if rows
        else None,
        key="pr_on_host",
    )
    st.caption(
        "The fit's launch and replay costs scaled by your host's index over this run's (Calibration.on_host) and "
        "every step predicted again, its GPU times kept: a host-bound step moves with the host, a GPU-bound one "
        "only by the host time before its GPU work starts (a graph's input copies and launch). A mode the timing "
        "model does not model, or a step that fell back to other kernels, has no prediction."
    )


def _readout_notes(result, run) -> None:
    """Below the lanes: what the readouts are of, and the step against the floor."""
    traced = run.timeline.metrics()  # as Your trace reads the same step: one function for both
    with st.expander("How these readouts are measured, and the step as traced"):
        st.caption(
            f"Without the profiler: the step time is the median of the measured steps (p10 "
            f"{format_us(run.step_us_p10)}, p90 {format_us(run.step_us_p90)}), the GPU utilisation the profiled "
            "step's GPU busy time over it (the profiler slows the host, not the kernels), and bound-by sets that "
            f"busy time against the host's median enqueue time. The lanes are the profiled step: "
            f"{format_us(traced.step_us)} as traced, GPU utilisation {format_utilisation(traced.utilisation)} as "
            f"traced. {profiled_against_median(traced.step_us, run.step_us_median)}"
        )
    floor_col, hbm_col, _ = st.columns([1, 1, 3])
    floor_col.metric(
        "× floor",
        f"{result.times_floor(run):.2f}×",
        help=f"Median step time over the floor at this batch, {format_us(result.floor_us(run.batch))} "
        f"({result.floor_bound(run.batch)}-bound): the larger of the bytes the step must read (the weights and the "
        "KV cache at the run's context) at the measured copy bandwidth and its FLOPs at the measured matrix rate. "
        "1× is the fastest this GPU could run it.",
    )
    hbm_col.metric(
        "HBM bandwidth used",
        f"{result.hbm_used_GBps(run):,.0f} GB/s",
        help=f"The bytes this step must read over its median time: {result.hbm_used_GBps(run) / result.hbm_copy_GBps:.0%} "
        f"of the {result.hbm_copy_GBps:,.0f} GB/s a large copy reaches on this GPU.",
    )


def _lanes(result, run, source: str, whole: bool) -> None:
    from ui.calibration_cache import probe_sim_step  # the calibrated model's picture of the same settings

    measured = lanes_figure(run.timeline, whole_step=whole)
    step, title, why = probe_sim_step(result, run.mode, run.batch)
    simulated = lanes_figure(step, whole_step=whole) if step is not None else None
    # One time axis for both, so a step twice as long looks twice as long.
    shown = [t if whole else t.first_launches(FIRST_LAUNCHES) for t in (run.timeline, step) if t is not None]
    share_time_axis([f for f in (measured, simulated) if f is not None], max(t.step_us for t in shown))
    stretch = len(run.timeline.cpu_start) == 1 and run.enqueue_us_median is not None
    if stretch:  # a graph replay: one host interval, which the profiler stretches
        mark_profiler_stretch(measured, run.enqueue_us_median, float(run.timeline.cpu_end[0]))
    measured_col, sim_col = st.columns(2, gap="medium")
    with measured_col:
        fallback = fallback_note(result, run)
        st.markdown(
            f"**Measured** ({source}) · {run.mode} · batch {run.batch}"
            + (f" ({fallback})" if fallback else "")
        )
        st.plotly_chart(
            measured,
            width="stretch",
            key="pr_lanes",
            theme=None,  # lanes carry their own styles (ui/charts.py)
            config={"displaylogo": False, "scrollZoom": True},
        )
        if stretch and run.timeline.cpu_end[0] > run.enqueue_us_median:
            st.caption(
                f"Shaded: the profiler's stretch. {host_time_phrase(run).capitalize()}; under the profiler, "
                f"{format_us(float(run.timeline.cpu_end[0]))}. The GPU lane waits for that launch, so its idle "
                "start is mostly the profiler's: the measured step is bound by the GPU."
            )
    with sim_col:
        st.markdown(f"**Simulated** · {plain(title) if step is not None else 'no picture'}")
        if step is None:
            st.info(plain(title))
        else:
            st.plotly_chart(
                simulated,
                width="stretch",
                key="pr_sim_lanes",
                theme=None,  # lanes carry their own styles (ui/charts.py)
                config={"displaylogo": False, "scrollZoom": True},
            )
            st.caption(f"{why} The same kernels as the measured step, timed by the model fitted to this run.")
    chrome_trace_download(
        run.timeline,
        "Download the measured step as a Chrome trace (open in Perfetto)",
        f"probe-{run.mode.replace('+', '_')}-b{run.batch}.json",
        "pr_trace_download",
    )


def _model_line(result) -> str:
    """'1.24 B parameters, 16 layers, 2.47 GB read per step': the measured model, from the file."""
    config = result.model.get("config")
    layers = config.get("n_layers") if isinstance(config, dict) else None
    params = result.model.get("n_params")
    parts = [
        f"{params / 1e9:.2f} B parameters" if isinstance(params, (int, float)) else None,
        f"{layers} layers" if isinstance(layers, int) else None,
        f"{result.read_bytes(1) / 1e9:.2f} GB read per batch-1 step",
    ]
    return "Model of this run: " + ", ".join(p for p in parts if p) + "."


def host_time_phrase(run) -> str:
    """'the input copies and the graph launch take 164 µs of host time, median without the profiler': the host's
    time for a replay, in the one wording every figure of it uses (the GPU's wait for it is `step_split`'s)."""
    return (
        f"the input copies and the graph launch take {format_us(run.enqueue_us_median)} of host time, median "
        "without the profiler"
    )


HOST_WAIT = "the GPU's wait for the host's input copies and graph launch"


def host_wait_phrase(split) -> str:
    """ "the GPU's wait for the host's input copies and graph launch, 137 µs": `step_split`'s host share, named as
    what it is (the part of the host's time the step waits for), 'at most' where the run cannot tell."""
    bound = "at most " if split["host_from"] == "enqueue" else ""
    return f"{HOST_WAIT}, {bound}{format_us(split['host_us'])}"


def _host_share_source(run, split) -> str:
    """How the split's host share was obtained, in words."""
    if split["host_from"] == "back to back":
        b2b = format_us(run.step_us_back_to_back)
        how = {
            None: f"the median less the step enqueued back to back, {b2b}",
            "to the floor": f"the median less the floor: back to back the step took {b2b}, below the floor",
            "to zero": f"none: back to back the step took {b2b}, no faster",
        }[split["host_clamped"]]
        spent = (
            f" ({host_time_phrase(run)}; the rest overlaps the GPU's work)"
            if run.enqueue_us_median and run.enqueue_us_median > split["host_us"]
            else ""
        )
        return (
            f"{how}{spent}: each timed step starts on an idle GPU, which waits through the host's work; back to "
            "back, that work hides under the previous step"
        )
    return (
        "at most its median enqueue time, since this run has no back-to-back timing to tell how much of it "
        "the GPU waits for: each timed step starts on an idle GPU, which waits through at most that"
    )


def _inside_the_kernel(result, run) -> None:
    """The persistent kernel's phases per group of SMs (its in-kernel stamps), above fused+graph's step at the
    same batch on one time axis, and where its time goes beyond the floor."""
    st.subheader("Inside the persistent kernel")
    inside = run.phase_timeline()
    peer = result.run(FUSED_GRAPH.name, run.batch)
    # The SM lanes bare, the overlay named by its mode (both steps' labels are their graph launches).
    figure = lanes_figure(
        inside, overlay=peer.timeline if peer else None, whole_step=True, tags=("", FUSED_GRAPH.title)
    )
    st.plotly_chart(figure, width="stretch", key="pr_phases", theme=None, config={"displaylogo": False})
    ph = run.phases
    st.caption(
        f"One launch, {len(ph.names)} phases, {ph.programs} programs (one per SM) in {len(ph.lane_programs)} "
        "lanes of consecutive SMs, each lane its programs' median stamps (%globaltimer, written by the kernel "
        "itself in a traced step). A gap in a lane is its SMs waiting at a grid barrier for the slowest "
        "program of the phase before. "
        + (
            f"Below: {FUSED_GRAPH.title} at batch {run.batch}, the same step as {counts_text(gpu_counts(peer.timeline))}."
            if peer
            else ""
        )
    )
    rows = [
        {
            "phase": kind,
            "phases": int(v.get("phases", 0)),
            "on the critical path (µs)": v.get("critical_us", 0.0),
            "barrier release, median (µs)": v.get("release_us", 0.0),
            "work, median (µs)": v.get("work_us", 0.0),
            "imbalance, median (µs)": v.get("imbalance_us", 0.0),
        }
        for kind, v in ph.by_kind.items()
        if isinstance(v, dict)
    ]
    if rows:
        show_table(rows, key="pr_phase_kinds")
    split = result.step_split(run)
    barriers = sum(r["phases"] * r["barrier release, median (µs)"] for r in rows)
    imbalance = sum(r["phases"] * r["imbalance, median (µs)"] for r in rows)
    parts = split["floor_us"] + split["host_us"] + barriers + imbalance
    st.markdown(
        f"**Where its {format_us(run.step_us_median)} go** (median step at batch {run.batch}): the floor "
        f"{format_us(split['floor_us'])}, {host_wait_phrase(split)} (while {host_time_phrase(run)}), "
        f"the barriers' release after the last arrival {format_us(barriers)} and the programs' imbalance "
        f"{format_us(imbalance)}: {format_us(parts)} together. {remainder_sentence(run.step_us_median, parts)}"
    )


def signed_us(us: float) -> str:
    """'+44.2 µs', '−44.2 µs': a remainder with its sign."""
    return ("+" if us >= 0 else "−") + format_us(abs(us))


def remainder_sentence(step_us: float, parts_us: float) -> str:
    """What the step's time less its named parts is, signed: the rest of the step, or the parts' over-count."""
    rest = step_us - parts_us
    if rest >= 0:
        return (
            f"The rest of the step, {signed_us(rest)}, is the attention chain and phases whose work runs slower "
            "than the copy bandwidth."
        )
    return (
        f"That is {format_us(-rest)} more than the step (remainder {signed_us(rest)}): the parts overlap, since "
        "each is a median over the phases and a barrier's wait can fall within time the floor counts too."
    )


def _what_graphs_leave(result, run) -> None:
    split = result.step_split(run)
    st.subheader("What CUDA graphs leave on the table")
    st.plotly_chart(
        step_split_figure(
            split,
            run.step_us_median,
            HOST_WAIT + (" (at most)" if split["host_from"] == "enqueue" else ""),
            counts_text(gpu_counts(run.timeline)),
        ),
        width="stretch",
        key="pr_split",
        theme=None,
        config={"displaylogo": False},
    )
    st.caption(
        f"The {format_us(run.step_us_median)} median step at batch {run.batch}: the floor "
        f"({format_us(split['floor_us'])}, the bytes this step must read at the measured copy bandwidth, or its "
        "FLOPs at the measured matrix rate where those take longer), "
        f"{host_wait_phrase(split)} ({_host_share_source(run, split)}), and the "
        f"rest, {format_us(split['boundaries_us'])}, spread over the step's {counts_text(gpu_counts(run.timeline))} "
        f"({split['kernels']} boundaries): {split['per_kernel_us']:.2f} µs per boundary, where one "
        "kernel drains, the next starts, waits for its inputs and fills the memory pipe again (the GPU's side of "
        "the input copies and the gap between two graph launches are counted here too)."
    )
    st.markdown(
        "**The next step.** A graph removes the host from the loop but keeps every kernel boundary. "
        "*Programmatic dependent launch* (Hopper and newer; the probe's fused kernels use it up to 64 rows) lets "
        "the next kernel start and put its weight loads in flight while the previous one drains, so part of each "
        "boundary overlaps. A *persistent megakernel* goes further: one kernel runs the whole step, with "
        "per-tile dependencies instead of kernel boundaries, so weights stream without gaps.\n\n"
        "Published figures for Llama-3.2-1B at batch 1 (short contexts, not this probe's 512 tokens): on an "
        "H200, CUDA graphs with programmatic dependent launch take 794.7 µs per step, about 1.35× the weight-read "
        "floor (2.47 GB at ~4.2 TB/s), against 759.8 µs for Hazy Research's megakernel "
        "([msaroufim/megakernels-vs-cuda-graphs, llama/docs/RESULTS.md]"
        "(https://github.com/msaroufim/megakernels-vs-cuda-graphs/blob/main/llama/docs/RESULTS.md)). On an H100, "
        "vLLM and SGLang use at most 50 % of the memory bandwidth for this workload, around a hundred kernels "
        "per step, and the megakernel 78 % "
        '([Hazy Research, "Look Ma, No Bubbles!", 2025](https://hazyresearch.stanford.edu/blog/2025-05-27-no-bubbles)).'
    )


def saturation_table(result) -> list[dict]:
    """Per mode (its own steps, fallbacks left out) and per Hugging Face reference: where tokens/s saturates over the
    batches the run measured (`ui.throughput`), or that it does not by the largest; tokens/s and ms per output token
    there, and what the last doubling still adds."""
    from ui.probe.tables import throughput_us
    from ui.throughput import gain_per_doubling, ms_per_token, saturation, tokens_per_s

    series = [
        (MODES[m].title, [r for r in result.runs if r.mode == m and not r.eager_fallback])
        for m in result.modes
    ]
    if result.reference is not None:
        series += [
            (f"Hugging Face {kind} (ref.)", [r for r in result.reference.runs if r.mode == kind])
            for kind in dict.fromkeys(r.mode for r in result.reference.runs)
        ]
    rows = []
    for title, runs in series:
        runs = sorted(runs, key=lambda r: r.batch)
        if len(runs) < 2:
            continue
        b = [r.batch for r in runs]
        us = [throughput_us(r) for r in runs]
        rate = tokens_per_s(b, us)
        at = saturation(b, rate)
        i = b.index(at) if at is not None else len(b) - 1
        rows.append(
            {
                "mode": title,
                "saturates at batch": at if at is not None else f"not by {b[-1]}",
                "tokens/s there": float(rate[i]),
                "ms per output token there": float(ms_per_token(us[i])),
                "last doubling adds %": float(100 * gain_per_doubling(b, rate)[-1]),
                "batches measured": ", ".join(map(str, b)),
            }
        )
    return rows


def batch_axis_caption(result, rows: list[dict]) -> str:
    """What the batch-axis chart draws, and which modes saturate within the run's batches (from `rows`)."""
    from ui.probe.tables import spread_statistic
    from ui.throughput import SATURATION_RULE

    fell = sorted({r.batch for r in result.runs if r.eager_fallback})
    done = [
        f"{r['mode']} at {r['saturates at batch']}" for r in rows if isinstance(r["saturates at batch"], int)
    ]
    largest = max(result.batches)
    return (
        "Left: the time each sequence waits for its next token, which is the step time (back to back where the run "
        "timed it, as a decode loop runs); right: the tokens a second that gives, one GPU; against the roofline "
        "floor and, where the run has it, Hugging Face's own Llama of the same shape on the same GPU. "
        + f"{SPREAD_SENTENCE}: {spread_statistic(result)}. "
        + (
            f"Hollow markers on a dashed line are fallbacks (batch {', '.join(map(str, fell))}): the mode ran other "
            "kernels there (hover one for which). "
            if fell
            else ""
        )
        + f"{SATURATION_RULE[0].upper()}{SATURATION_RULE[1:]} (◆): "
        + (
            f"here {', '.join(done)}; the others not by batch {largest}."
            if done
            else f"none does by batch {largest}, the largest measured: each doubling still adds tokens/s (below)."
        )
    )


_COUNT = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def intro() -> str:
    """The tab's first line: the decoder and the ways the probe runs it, read from the modes table."""
    ways = [step_plan.MODES[m].title for m in step_plan.probe_modes()]
    return (
        "A Llama-style decoder with random weights (the 0.5 B small preset, or the 1b preset shaped like "
        f"Llama-3.2-1B) run {_COUNT.get(len(ways), len(ways))} ways: {', '.join(ways[:-1])} and {ways[-1]}. "
        "Fused runs the probe's Triton kernels, a graph replays a step captured as a CUDA graph, and the "
        "persistent kernel runs the whole step in one launch. Each run in the Run menu names the modes it measured."
    )


def _about_the_run(result, source: str) -> None:
    if source == "recorded":
        st.info(
            f"**Recorded run** on {plain(describe(result))} (torch {plain(result.torch)}, CUDA "
            f"{plain(result.cuda)}), shipped with the app. Made with {code(result.command)}. "
            f"{host_sentence(result)}",
            icon=":material/history:",
        )
    elif source == "live":
        st.info(
            f"**Measured live** on this GPU: {plain(describe(result))} (torch {plain(result.torch)}, CUDA "
            f"{plain(result.cuda)}), made with {code(result.command)}. {host_sentence(result)}",
            icon=":material/bolt:",
        )
    elif source == "uploaded":
        st.info(
            f"**Uploaded run** on {plain(describe(result))} (torch {plain(result.torch)}, CUDA {plain(result.cuda)}), "
            f"made with {code(result.command)}. {host_sentence(result)}",
            icon=":material/upload_file:",
        )


def _your_run() -> None:
    """Last on the tab: a result file from the reader's own GPU (it becomes the run shown)."""
    st.subheader("Your own run")
    upload_widget("pr_upload", "pr_run", accepts_tp=True)
    st.caption(tp_view.NO_RUN_NOTE)


STEP_TIME_TO_READ = (
    "**Which step time to read:** *Step time (no profiler)*, the median of the run's steps timed with CUDA events, "
    "each started on an idle GPU; the lanes are one profiled step, slower where the profiler adds host time, and a "
    "decode loop's pace (tokens/s) is the back-to-back time in the table below."
)


def render() -> None:
    # The picture first (issue 29, item 6): the pickers in one row, the readouts, the lanes; notes, tables and
    # the uploader after them, so that at 1400 x 1000 the lanes are on the first screen.
    st.subheader("The same step, measured on a real GPU")
    st.markdown(STEP_TIME_TO_READ)
    run_col, mode_col, batch_col, whole_col, host_col = st.columns(
        [3.4, 1.3, 1.1, 1.3, 1.3], vertical_alignment="bottom"
    )
    live_area = st.container() if _cuda() else None  # none without a GPU: no empty block above the readouts
    with run_col:
        result, source = _pick_result(live_area)
    if result is None or isinstance(result, TPResult) or not result.runs:
        if isinstance(result, TPResult):
            tp_view.render(result)
        elif result is not None:
            st.warning("This result holds no measured runs.")
        _every_recorded_run()
        _your_run()
        return
    modes = result.modes
    mode = mode_col.selectbox("Mode", modes, key="pr_mode", bind="query-params")
    batches = tuple(sorted({r.batch for r in result.runs if r.mode == mode})) or result.batches
    batch = batch_col.selectbox("Batch size", batches, key="pr_batch", bind="query-params")
    whole = whole_col.toggle("Show the whole step", key="pr_whole", bind="query-params")
    index, notice = your_host(host_col, "pr_host_us", result)
    if notice:
        st.warning(notice, icon=":material/warning:")
    run = result.run(mode, batch) or next(r for r in result.runs if r.mode == mode)
    _readouts(result, run)
    heading_col, host_line_col = st.columns([1, 2.3], vertical_alignment="bottom")
    heading_col.subheader(
        "The whole step" if whole else f"First {FIRST_LAUNCHES} {'kernels' if run.replays else 'launches'}"
    )
    with host_line_col:
        on_host = _on_your_host(result, run, index)
    _lanes(result, run, source, whole)
    _readout_notes(result, run)
    _about_the_run(result, source)
    with st.expander("About the probe: the decoder, its modes and its model"):
        st.caption(intro())
        st.caption(_model_line(result))
    if run.phases is not None:
        _inside_the_kernel(result, run)
    elif run.eager_fallback and any(r.phases is not None for r in result.runs if r.mode == run.mode):
        st.subheader("Inside the persistent kernel")
        own = sorted(r.batch for r in result.runs if r.mode == run.mode and r.phases is not None)
        st.info(
            f"Not at batch {run.batch}: this step is the fallback ({fallback_note(result, run)}), so there is no "
            "kernel to look inside."
            + (f" Pick batch {', '.join(map(str, own))} to see its phases." if own else ""),
            icon=":material/info:",
        )
    if run.mode == FUSED_GRAPH.name:
        _what_graphs_leave(result, run)
    st.subheader(f"All modes at batch {run.batch}")
    modes_table(result, run.batch)
    if on_host is not None:
        _on_your_host_table(result, run.batch, on_host)
    note = reference_note(result)
    if note:
        with st.expander("What the Hugging Face reference rows are"):
            st.caption(plain(note))
    st.subheader("Every mode across the batch axis: time per token and tokens/s")
    st.plotly_chart(
        batch_axis_figure(result, fallback_note=lambda r: fallback_note(result, r)),
        width="stretch",
        key="pr_batch_axis",
        theme=None,
        config={"displaylogo": False},
    )
    rows = saturation_table(result)
    st.caption(batch_axis_caption(result, rows))
    with st.expander("Where each mode's tokens/s saturates"):
        show_table(
            rows,
            {
                **{k: k for k in rows[0]},
                "tokens/s there": Column("tokens/s there", "{:,.0f}"),
                "ms per output token there": Column("ms per output token there", "{:.2f}"),
                "last doubling adds %": Column("last doubling adds %", "{:+.0f}"),
            }
            if rows
            else None,
            key="pr_saturation",
        )
    with st.expander("The run in detail: what fusion merges, bandwidth, captured graphs, checks"):
        st.markdown("**What fusion merges**")
        fusion_table(result)
        run_facts(result)
    _every_recorded_run()
    _your_run()


def _every_recorded_run() -> None:
    """Every run that ships with the app, with its GPU, date, command and what it is for, and any the page cannot
    read, with why: each is in the Run menu, or this says why not."""
    from ui.probe_results import RECORDED_PURPOSE, more_recorded, not_offered, shipped_name

    rec, _ = recorded()
    runs = [r for r in (rec, *more_recorded()) if r is not None]
    refused = not_offered()
    title = f"The recorded runs ({len(runs)}{f', {len(refused)} not offered' if refused else ''})"
    with st.expander(title):
        st.caption(
            "Every run that ships with the app is in the Run menu (and the Calibration tab's), labelled with its GPU, "
            "date and host (the median host µs of a torch launch in the run's process, p10–p90 in brackets); each was "
            "made by the command shown, on the machine its file names."
        )
        lines = []
        for r in runs:
            name = shipped_name(r)
            purpose = RECORDED_PURPOSE.get(name, "")
            lines.append(
                f"- **{plain(name)}**: {plain(describe(r))}, made with {code(r.command)}; {plain(host_phrase(r))}"
                + (f". {plain(purpose[0].upper() + purpose[1:])}." if purpose else ".")
            )
        lines += [f"- **{plain(name)}** is not offered: {plain(why)}" for name, why in refused]
        st.markdown("\n".join(lines))
