"""The Live GPU probe tab's view of a tensor-parallel result (`core.tp_result.TPResult`).

A TP result comes from `torchrun --nproc-per-node 2 -m gpu_probe --tp 2 ...`; NO TWO-GPU RUN SHIPS
WITH THE APP (none has been made: no two-GPU machine was available), so this view shows only
files the reader uploads. It draws:
- each rank's profiled step as lanes (`ui.charts.lanes_figure`, one per rank on one time axis;
  the all-reduce kernels are "communication" by `core.timeline.gpu_kind`, in a colour of their own);
- all-reduce time per call against message size, eager and captured, every rank's points, with
  the fitted α + bytes/β line (`sim.step.tensor_parallel.fitted_allreduce`) and the published
  SGLang custom all-reduce and NCCL NVLS figures for reference;
- step time TP1 (the unsharded model on rank 0's GPU) against TPn, per mode and batch;
- every rank's checks.
Strings from the file reach the page through `plain` / `code` only; in the figures, kernel names
go through `lanes_figure`'s own hover text and nothing else from the file is drawn.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from core.step_plan import FUSED_GRAPH, MODES
from core.timeline import Timeline
from core.tp_result import TPResult, tp_modes
from sim.step.tensor_parallel import (
    NCCL_NVLS_TREE_2XH100_US,
    SGLANG_H100_CUSTOM_ALLREDUCE_US,
    fitted_allreduce,
    published_allreduce,
)
from ui.charts import COMM_COLOUR, FIRST_LAUNCHES, format_us, lanes_figure
from ui.common import code, plain
from ui.probe.charts import share_time_axis
from ui.probe_results import describe, session_tp_results
from ui.tables import show_table

# URL key -> spec (ui.url_params), merged into the probe tab's PROBE_PARAMS.
TP_PARAMS: dict[str, tuple] = {
    "pr_tp_mode": ("choice", tp_modes()),
    "pr_tp_batch": ("int", 1, 65536),
    "pr_tp_whole": ("bool",),
}
TP_COMMAND = (
    "torchrun --nproc-per-node 2 -m gpu_probe --tp 2 --preset 1b --batch 1 8 64 256 --out h200x2-tp2.json"
)
NO_RUN_NOTE = (
    "No two-GPU run ships with the app: none has been made yet (no two-GPU machine was available). "
    f"A tensor-parallel result made with `{TP_COMMAND}` can be uploaded here and is drawn per rank."
)
_CHART_CONFIG = {"displaylogo": False}
_EAGER_COLOUR, _GRAPH_COLOUR = "rgba(224, 123, 57, 0.95)", "rgba(58, 118, 176, 0.95)"


def uploaded_options() -> dict:
    """label -> (TPResult, 'uploaded') for the run picker: this session's TP uploads."""
    return {label: (res, "uploaded") for label, res in session_tp_results().items()}


def render(result: TPResult) -> None:
    st.info(
        f"**Uploaded tensor-parallel run** (TP {result.tp}) on {plain(describe(result))}: torch "
        f"{plain(result.torch)}, CUDA {plain(result.cuda)}, NCCL {plain(result.nccl)}. Made with "
        f"{code(result.command)}. No two-GPU run ships with the app: this one is from your file.",
        icon=":material/upload_file:",
    )
    name = result.preset.get("name")
    layers = result.preset.get("n_layers")
    st.caption(
        f"Model: the {plain(name) if isinstance(name, str) else 'unnamed'} preset, {layers} layers, sharded "
        f"Megatron-style over {result.tp} GPUs: two all-reduces per layer, after o_proj and after down_proj."
    )
    mode_col, batch_col, whole_col = st.columns([2, 2, 1.2], vertical_alignment="bottom")
    mode = mode_col.selectbox("Mode", result.modes, key="pr_tp_mode", bind="query-params")
    batch = batch_col.selectbox("Batch size", result.batches, key="pr_tp_batch", bind="query-params")
    whole = whole_col.toggle("Show the whole step", key="pr_tp_whole", bind="query-params")
    _lanes(result, mode, batch, whole)
    _allreduce(result)
    _step_times(result)
    _checks(result)


# -- per-rank lanes ----------------------------------------------------------------------
def comm_us(timeline: Timeline) -> float:
    """GPU time of the step's communication kernels (all-reduces), summed."""
    return float(timeline.gpu_dur[timeline.gpu_kinds == "communication"].sum())


def _lanes(result: TPResult, mode: str, batch: int, whole: bool) -> None:
    runs = [(rank.rank, rank.run(mode, batch)) for rank in result.ranks]
    runs = [(i, r) for i, r in runs if r is not None]
    st.subheader(f"Per-rank lanes · {mode} · batch {batch}")
    if not runs:
        st.warning(f"No rank measured {mode} at batch {batch}.")
        return
    rows = []
    for i, run in runs:
        m = run.timeline.metrics()
        kinds = run.timeline.gpu_kinds
        rows.append(
            {
                "rank": i,
                "step median (µs)": round(run.step_us_median, 1),
                "kernels": run.kernels_per_step,
                "all-reduce kernels": int((kinds == "communication").sum()),
                "all-reduce GPU time (µs)": round(comm_us(run.timeline), 1),
                "GPU utilisation": f"{m.utilisation:.0%}",
                "bound by": run.bound_by,
            }
        )
    show_table(rows, key="pr_tp_ranks")
    figures = [lanes_figure(run.timeline, whole_step=whole) for _, run in runs]
    shown = [run.timeline if whole else run.timeline.first_launches(FIRST_LAUNCHES) for _, run in runs]
    share_time_axis(figures, max(t.step_us for t in shown))
    for (i, _), fig in zip(runs, figures):
        st.markdown(f"**Rank {i}** ({plain(result.ranks[i].device)})")
        st.plotly_chart(fig, width="stretch", key=f"pr_tp_lanes_{i}", theme=None, config=_CHART_CONFIG)
    st.caption(
        "One profiled step per rank, on one time axis; a lane per CUDA stream. All-reduce kernels are "
        "drawn in the communication colour (NCCL runs them on a stream of its own, so they get a lane). "
        "Step time is the median of many unprofiled steps; the profiler adds host time to each launch."
        + (
            ""
            if whole
            else f" The first {FIRST_LAUNCHES} launches (or kernels, for a graph replay) are drawn."
        )
    )


# -- all-reduce time per call against message size -------------------------------------------
def allreduce_figure(result: TPResult) -> go.Figure:
    """Measured points (every rank, eager and captured), the fitted lines, the published figures."""
    traces = []
    sizes = np.geomspace(*_size_range(result), 60)
    for captured, colour, what in (
        (False, _EAGER_COLOUR, "eager"),
        (True, _GRAPH_COLOUR, "captured in a graph"),
    ):
        nbytes, us = result.sweep(captured)
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "x": nbytes.tolist(),
                "y": us.tolist(),
                "name": f"measured, {what}",
                "marker": {"color": colour, "size": 8},
                "hovertemplate": "%{x:,.0f} B: %{y:.2f} µs per call<extra></extra>",
            }
        )
        fit = fitted_allreduce(result, captured)
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": sizes.tolist(),
                "y": fit.us(sizes).tolist(),
                "name": f"fit, {what}: {fit.latency_us:.2f} µs + bytes / {_gbps(fit.GBps)}",
                "line": {"color": colour, "width": 2},
                "hoverinfo": "skip",
            }
        )
    traces += _published_lines(result.tp, sizes)
    layout = {
        "height": 420,
        "margin": {"l": 60, "r": 10, "t": 30, "b": 50},
        "xaxis": {"type": "log", "title": {"text": "message size (bytes, log scale)"}},
        "yaxis": {"type": "log", "title": {"text": "µs per all-reduce call (log scale)"}},
        "legend": {"orientation": "h", "yanchor": "top", "y": -0.18, "x": 0},
        "font": {"family": "Source Sans Pro, sans-serif", "size": 13, "color": "#31333F"},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
    }
    return go.Figure({"data": traces, "layout": layout})


def _published_lines(tp: int, sizes: np.ndarray) -> list[dict]:
    """The published figures for `tp` GPUs where there are some: SGLang's custom all-reduce on H100s, and for
    two GPUs NCCL's NVLS tree at small messages."""
    out = []
    if tp in SGLANG_H100_CUSTOM_ALLREDUCE_US:
        pub = published_allreduce(tp)
        out.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": sizes.tolist(),
                "y": pub.us(sizes).tolist(),
                "name": f"published: SGLang custom all-reduce, {tp}×H100 (sglang #2904)",
                "line": {"color": "#555555", "width": 1.5, "dash": "dash"},
                "hoverinfo": "skip",
            }
        )
    if tp == 2:
        small = sizes[sizes <= 65536]
        out.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": small.tolist(),
                "y": [NCCL_NVLS_TREE_2XH100_US] * len(small),
                "name": "published: NCCL NVLS tree, 2×H100, small messages (nccl #1259)",
                "line": {"color": COMM_COLOUR, "width": 1.5, "dash": "dot"},
                "hoverinfo": "skip",
            }
        )
    return out


def _size_range(result: TPResult) -> tuple[float, float]:
    nbytes = np.concatenate([result.sweep(False)[0], [512.0, 2.0**21]])
    return float(nbytes.min()), float(nbytes.max())


def _gbps(GBps: float) -> str:
    return "∞ GB/s" if not np.isfinite(GBps) else f"{GBps:,.1f} GB/s"


def _allreduce(result: TPResult) -> None:
    st.subheader("All-reduce time per call against message size")
    if len(np.unique(result.sweep(True)[0])) < 2:
        st.warning("This run's all-reduce sweep has fewer than two message sizes: there is nothing to fit.")
        return
    st.plotly_chart(
        allreduce_figure(result), width="stretch", key="pr_tp_allreduce", theme=None, config=_CHART_CONFIG
    )
    graph, eager = fitted_allreduce(result, True), fitted_allreduce(result, False)
    per_row = result.ranks[0].allreduce_bytes_per_row
    parts = [
        f"Fitted by least squares on the relative error (`sim.step.tensor_parallel.fit_allreduce`): captured in a "
        f"graph α = {graph.latency_us:.2f} µs, β = {_gbps(graph.GBps)}; eager α = {eager.latency_us:.2f} µs, "
        f"β = {_gbps(eager.GBps)}. A decode step's all-reduce carries {per_row:,} bytes per batch row "
        f"({format_us(float(graph.us(per_row)))} a call at batch 1, captured)."
    ]
    if result.tp in SGLANG_H100_CUSTOM_ALLREDUCE_US:
        small_us = SGLANG_H100_CUSTOM_ALLREDUCE_US[result.tp][0]
        measured = float(graph.us(512))
        parts.append(
            f"At 512 B the captured fit is {measured / small_us:.1f}× the published {small_us} µs of SGLang's "
            f"custom all-reduce on {result.tp} H100s (the issue's goal: within 2×)."
        )
    parts.append(
        "The Simulator's tensor-parallel model uses the published figures; `simulate_tp_step(..., "
        "allreduce=fitted_allreduce(result))` puts these in their place."
    )
    st.caption(" ".join(parts))


# -- step time TP1 against TPn ------------------------------------------------------------
def step_rows(result: TPResult) -> list[dict]:
    rows = []
    for mode in result.modes:
        for batch in result.batches:
            one, many = result.tp1_step_us(mode, batch), result.tp_step_us(mode, batch)
            if one is None and many is None:
                continue
            rows.append(
                {
                    "mode": mode,
                    "batch": batch,
                    "TP1 (µs)": round(one, 1) if one is not None else None,
                    f"TP{result.tp} (µs)": round(many, 1) if many is not None else None,
                    f"TP{result.tp} speed-up": round(one / many, 2) if one and many else None,
                }
            )
    return rows


def step_time_figure(result: TPResult) -> go.Figure:
    """Median step time per batch: a bar per mode and TP degree (TP1 faded)."""
    traces = []
    x = [str(b) for b in result.batches]
    for mode in result.modes:
        for tp, times, opacity in (
            (1, [result.tp1_step_us(mode, b) for b in result.batches], 0.45),
            (result.tp, [result.tp_step_us(mode, b) for b in result.batches], 1.0),
        ):
            traces.append(
                {
                    "type": "bar",
                    "x": x,
                    "y": times,
                    "name": f"{mode}, TP{tp}",
                    "marker": {"color": MODES[mode].colour, "opacity": opacity},
                    "hovertemplate": f"{mode}, TP{tp}, batch %{{x}}: %{{y:,.1f}} µs<extra></extra>",
                }
            )
    layout = {
        "barmode": "group",
        "height": 380,
        "margin": {"l": 60, "r": 10, "t": 30, "b": 50},
        "xaxis": {"type": "category", "title": {"text": "batch size"}},
        "yaxis": {"type": "log", "title": {"text": "median step time (µs, log scale)"}},
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        "font": {"family": "Source Sans Pro, sans-serif", "size": 13, "color": "#31333F"},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
    }
    return go.Figure({"data": traces, "layout": layout})


def _step_times(result: TPResult) -> None:
    st.subheader(f"Step time: TP1 against TP{result.tp}")
    if not result.tp1_runs:
        st.warning("This run holds no TP1 baseline (rank 0 times the unsharded model).")
    st.plotly_chart(
        step_time_figure(result), width="stretch", key="pr_tp_steps", theme=None, config=_CHART_CONFIG
    )
    show_table(step_rows(result), key="pr_tp_steps")
    one, many = result.tp1_step_us(FUSED_GRAPH.name, 1), result.tp_step_us(FUSED_GRAPH.name, 1)
    goal = ""
    if one and many:
        verdict = (
            "faster: the issue's goal is met" if many < one else "not faster: the issue's goal is missed"
        )
        goal = f" {FUSED_GRAPH.title.capitalize()} at batch 1: TP{result.tp} {format_us(many)} against TP1 {format_us(one)}, {verdict}."
    st.caption(
        f"Median step time over many steps. TP{result.tp} is the slowest rank's median (every rank waits in "
        "each all-reduce); TP1 is the unsharded model on rank 0's GPU, measured in the same run." + goal
    )


# -- checks ------------------------------------------------------------------------------
def _checks(result: TPResult) -> None:
    st.subheader("Correctness checks, per rank")
    rows = [
        {"rank": rank, "check": name, "passed": bool(c["passed"]), "detail": str(c.get("detail", ""))}
        for rank, name, c in result.checks()
    ]
    if not rows:
        st.caption("This run recorded no checks.")
        return
    show_table(rows, key="pr_tp_checks")
    failed = sum(not r["passed"] for r in rows)
    if failed:
        st.error(f"{failed} of {len(rows)} checks failed: see the table.")
    else:
        st.success(f"All {len(rows)} checks passed on every rank.")
