"""The Bucketing tab: which batch sizes to capture, what padding costs, and the best layout.

Every control is bound to the URL (keys in `BUCKET_PARAMS`, read by `ui.url_params`).
The numbers come from `sim.buckets.report`, the same code as `python -m sim buckets`. The
padding-corruption demo lives in a sub-tab of its own, so PyTorch loads only when it opens.
"""

from __future__ import annotations

import csv
import io

import numpy as np
import streamlit as st

from core.step_plan import Mode, toggled
from sim.buckets import layouts as bk
from sim.buckets import report as br
from sim.buckets import workloads as wl
from sim.config import DEFAULT_PRESET, PRESETS
from ui import uploads
from ui.buckets import padding_demo
from ui.buckets.charts import padding_figure, tradeoff_figure
from ui.common import plain
from ui.tables import Column, show_table

# One checkbox per layout: a URL can carry a yes/no per key, and a link stays readable.
LAYOUT_KEYS = {
    "chapter": "bk_chapter",
    "powers of two": "bk_pow2",
    "vLLM": "bk_vllm",
    "SGLang": "bk_sglang",
    "nano-vllm": "bk_nano",
    "dense": "bk_dense",
}
LAYOUT_DEFAULTS = {"chapter": True, "powers of two": True, "vLLM": True}
CUSTOM = "custom"
DEFAULT_CUSTOM = "1, 2, 4, 8, 16, 32, 64, 128, 256"
WORKLOADS = ("uniform", "geometric", "Poisson", "uploaded CSV")
OBJECTIVES = ("step time", "padded rows")
MEMORY_SOURCES = ("modelled", "measured by the probe")
VIEWS = ("Layouts", "Padding-corruption demo")
MAX_BATCH_RANGE = (1, 512)
BUDGET_RANGE = (0, 4096)  # MiB
GRAPHS_RANGE = (1, 128)
CUSTOM_MAX_CHARS = 4000  # room for every size up to 512 typed out, short enough for a link
# The uploader's own limit, which the browser enforces; the server accepts up to server.maxUploadSize
# (.streamlit/config.toml) from any client, so _workload checks the size itself before reading.
CSV_UPLOAD_MB = 1
CSV_LIMITS = f"Limits: {wl.MAX_CSV_BYTES:,} bytes and {wl.MAX_CSV_ROWS:,} rows."

BUCKET_PARAMS: dict[str, tuple] = {
    "bk_view": ("choice", VIEWS),
    # A link holds the shown title (format_func); the short keys are accepted as aliases.
    "bk_preset": (
        "choice",
        tuple(p.title for p in PRESETS.values()),
        {k: p.title for k, p in PRESETS.items()},
    ),
    "bk_fusion": ("bool",),
    "bk_max_batch": ("int", *MAX_BATCH_RANGE),
    **{key: ("bool",) for key in LAYOUT_KEYS.values()},
    "bk_custom_on": ("bool",),
    "bk_custom": ("text", CUSTOM_MAX_CHARS),  # free text: parse_layout checks it in the page
    "bk_workload": ("choice", WORKLOADS),
    "bk_mean": ("float", 1, MAX_BATCH_RANGE[1]),
    "bk_budget": ("int", *BUDGET_RANGE),
    "bk_max_graphs": ("int", *GRAPHS_RANGE),
    "bk_objective": ("choice", OBJECTIVES),
    "bk_memory": ("choice", MEMORY_SOURCES),
    **padding_demo.DEMO_PARAMS,
}


@st.cache_data(max_entries=64, show_spinner=False)
def _comparison(
    preset_key: str,
    fusion: bool,
    layouts: tuple,
    sizes: tuple,
    weights: tuple,
    name: str,
    budget_mib: float,
    max_graphs: int,
    objective: str,
    captures: tuple | None,
):
    preset = PRESETS[preset_key]
    workload = wl.Workload(name, np.array(sizes), np.array(weights))
    memory = _measured_memory(captures)
    return br.compare(
        preset.model,
        preset.hardware,
        dict(layouts),
        workload,
        mode=_graph_mode(fusion),
        memory=memory,
        budget_bytes=budget_mib * br.MIB,
        max_buckets=max_graphs,
        objective="time" if objective == "step time" else "rows",
    )


def _measured_memory(captures: tuple | None) -> br.MeasuredGraphMemory | None:
    """The probe's captures (bucket, graph bytes, pool bytes) as graph memory, or None for the model's."""
    if not captures:
        return None
    return br.MeasuredGraphMemory.from_captures(
        [{"bucket": b, "graph_mem_bytes": g, "pool_bytes": p} for b, g, p in captures]
    )


@st.cache_data(max_entries=64, show_spinner=False)
def _binding(
    preset_key: str,
    fusion: bool,
    sizes: tuple,
    weights: tuple,
    name: str,
    budget_mib: float,
    max_graphs: int,
    objective: str,
    captures: tuple | None,
) -> br.Binding | None:
    """Which limit binds the optimum (the graph count, the budget, both or neither); same inputs as _comparison."""
    preset = PRESETS[preset_key]
    memory = _measured_memory(captures)
    return br.binding_limits(
        preset.model,
        preset.hardware,
        wl.Workload(name, np.array(sizes), np.array(weights)),
        mode=_graph_mode(fusion),
        memory=memory,
        budget_bytes=budget_mib * br.MIB,
        max_buckets=max_graphs,
        objective="time" if objective == "step time" else "rows",
    )


def _graph_mode(fused: bool) -> Mode:
    """The graph mode whose buckets the tab studies: the fused or the unfused kernels, replayed."""
    return toggled(fused, True)


@st.cache_data(max_entries=4, show_spinner=False)
def _probe_captures(fused: bool) -> tuple | None:
    """(bucket, graph bytes, pool bytes) of the shipped probe run's fused or unfused graphs; None if unavailable.

    The run captures both variants; mixing them would price unfused graphs at the fused ones' memory.
    """
    try:
        from core.probe_result import recorded_result  # torch-free, but optional for this tab

        variant = "fused" if fused else "unfused"
        rows = tuple(
            (int(c["bucket"]), int(c["graph_mem_bytes"]), int(c.get("pool_bytes", 0) or 0))
            for c in recorded_result().captures
            if c.get("variant", variant) == variant
        )
        return rows if len({r[0] for r in rows}) >= 2 else None
    except Exception:
        return None


@st.cache_data(max_entries=4, show_spinner=False)
def _probe_nodes(fused: bool) -> int | None:
    """Kernel nodes in one of the recorded run's graphs (its median over the measured batches)."""
    try:
        from core.probe_result import recorded_result

        counts = sorted(
            r.kernels_per_step for r in recorded_result().runs if r.mode == _graph_mode(fused).name
        )
        return int(counts[len(counts) // 2]) if counts else None
    except Exception:
        return None


def _memory_gap_note(preset_key: str, fusion: bool, captures: tuple) -> str:
    """Why modelled and measured graph memory differ, with both per-graph figures side by side."""
    preset = PRESETS[preset_key]
    model = br.memory_model(preset.model, _graph_mode(fusion))
    measured = br.MeasuredGraphMemory.from_captures(
        [{"bucket": b, "graph_mem_bytes": g, "pool_bytes": p} for b, g, p in captures]
    )
    per_graph = float(np.mean(measured.graph_bytes))
    nodes = _probe_nodes(fusion)
    modelled = model.node_bytes * model.nodes_per_graph + model.static_bytes_per_row * 32
    text = (
        f"Measured on the probe's 0.5 B model (recorded H200 run, its {'fused' if fusion else 'unfused'} "
        f"graphs, to match Kernel fusion): {per_graph / br.MIB:.1f} MiB a graph on average"
    )
    if nodes:
        text += f" for {nodes:,} kernel nodes, {per_graph / nodes / 1024:.1f} KiB a node"
    text += (
        f", plus the shared pool. The model charges {model.node_bytes / 1024:.0f} KiB a node (an assumption "
        f"of the right order, from engine logs) for this preset's {model.nodes_per_graph:,} nodes plus "
        f"static buffers: {modelled / br.MIB:.1f} MiB for a graph of 32 rows. Measured graph memory is the "
        "drop in free device memory, which moves in 2 MiB pages, so many small captures read 0, and it "
        "belongs to the probe's model whatever preset is chosen: the two differ by model, kernel count "
        "and per-node cost, not by a bug in either."
    )
    return text


def _workload(max_batch: int) -> wl.Workload:
    kind = st.session_state.get("bk_workload", WORKLOADS[0])
    if kind == "uploaded CSV":
        upload = st.file_uploader(
            "Batch-size histogram (CSV with a `batch,count` header)",
            type=["text/csv", "csv", "txt"],  # a MIME type: see ui/probe_results.py upload_widget
            key="bk_csv_file",
            max_upload_size=CSV_UPLOAD_MB,
            help=f"Up to {wl.MAX_CSV_BYTES:,} bytes and {wl.MAX_CSV_ROWS:,} rows; "
            "it stays in this browser session only.",
        )
        st.caption(CSV_LIMITS)
        if upload is None:
            st.info(
                "Upload a CSV such as `batch,count` / `1,120` / `8,40` … Until then: uniform 1–max batch."
            )
            return wl.uniform(max_batch)
        uploads.files_go_with_the_session(st.session_state)
        try:
            if upload.size > wl.MAX_CSV_BYTES:  # refused unread: a client need not honour the browser's limit
                uploads.release_upload(upload)  # and its bytes leave the server now
                raise ValueError(
                    f"the file is too large ({upload.size:,} bytes; at most {wl.MAX_CSV_BYTES:,})"
                )
            return wl.parse_histogram_csv(upload.getvalue(), name=upload.name[:60])
        except (ValueError, csv.Error) as err:  # csv.Error: a bare CR inside a row escapes the parser
            st.error(f"That CSV cannot be used: {plain(err)}. Showing a uniform workload instead.")
            return wl.uniform(max_batch)
    if kind == "uniform":
        return wl.uniform(max_batch)
    mean = min(float(st.session_state.get("bk_mean", 16.0)), float(max_batch))
    return wl.geometric(mean, max_batch) if kind == "geometric" else wl.poisson(mean, max_batch)


def _controls() -> tuple[dict, int]:
    left, mid, right = st.columns(3)
    left.selectbox(
        "Model and GPU",
        tuple(PRESETS),
        format_func=lambda k: PRESETS[k].title,
        key="bk_preset",
        bind="query-params",
        index=tuple(PRESETS).index(DEFAULT_PRESET),
    )
    max_batch = mid.slider(
        "Maximum batch",
        *MAX_BATCH_RANGE,
        value=256,
        key="bk_max_batch",
        bind="query-params",
        help="The largest batch the engine schedules; presets are generated up to it.",
    )
    right.toggle(
        "Kernel fusion",
        value=False,
        key="bk_fusion",
        bind="query-params",
        help="Fused kernels (4 per layer instead of 11): fewer graph nodes, less per-graph memory.",
    )
    st.markdown("**Layouts to compare**")
    cols = st.columns(len(LAYOUT_KEYS) + 1)
    chosen = {}
    for col, (name, key) in zip(cols[:-1], LAYOUT_KEYS.items(), strict=True):
        if col.checkbox(
            name,
            value=LAYOUT_DEFAULTS.get(name, False),
            key=key,
            bind="query-params",
            help=bk.LAYOUT_SOURCES[name],
        ):
            chosen[name] = bk.layout(name, max_batch)
    if cols[-1].checkbox("custom", value=False, key="bk_custom_on", bind="query-params"):
        text = st.text_input(
            "Custom bucket list",
            value=DEFAULT_CUSTOM,
            key="bk_custom",
            bind="query-params",
            max_chars=CUSTOM_MAX_CHARS,
            help="Positive whole numbers, separated by commas.",
        )
        try:
            chosen[CUSTOM] = bk.parse_layout(text)
        except ValueError as err:
            st.warning(f"Custom bucket list ignored: {plain(err)}.")
    return chosen, max_batch


def _csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _optimum_summary(stats: list, budget_mib: float, binding: br.Binding | None, max_graphs: int) -> None:
    best = next((s for s in stats if s.is_optimum), None)
    if best is None:
        st.warning(
            f"Not even one graph fits in {budget_mib:g} MiB: every step would run eager. Raise the budget."
        )
        return
    fitting = [s for s in stats if not s.is_optimum and s.fits_budget]
    a, b, c, d = st.columns(4)
    a.metric("Optimal layout", f"{best.graphs} graphs", help=bk.format_layout(best.buckets, limit=40))
    b.metric("Expected step time", f"{best.step_us:,.1f} µs")
    c.metric("Pinned graph memory", f"{best.memory_bytes / br.MIB:,.1f} MiB")
    if fitting:
        rival = min(fitting, key=lambda s: s.step_us)
        gain = rival.step_us - best.step_us
        d.metric(
            "Gain vs best preset within budget",
            f"{gain:,.1f} µs/step",
            delta=f"{100 * gain / rival.step_us:+.1f}% vs {rival.name}",
            delta_color="normal",
            help="Expected step time of the fastest chosen layout that fits the budget minus the "
            "optimum's; positive means the optimum is faster.",
        )
        if gain < 0:
            st.caption(
                f"{rival.name} uses {rival.graphs} graphs, more than the optimiser may use: raise "
                '"Most graphs the optimiser may use" to let it match or beat that.'
            )
    else:
        d.metric("Gain vs best preset within budget", "—", help="No chosen layout fits the budget.")
    if binding is not None:
        st.info(binding.sentence(max_graphs, best, budget_mib * br.MIB), icon=":material/info:")
    st.markdown(
        f"**The optimal layout's {best.graphs} buckets** (copy them with the icon at the right, or paste "
        "them into *custom* to compare):"
    )
    st.code(", ".join(map(str, best.buckets)), language=None, wrap_lines=True)


@st.fragment
def _layouts_view() -> None:
    """Every control of the layouts view reruns only this (not the page around it): a budget or workload
    change costs the optimiser and the two charts, nothing else (bench/first_view_speed.py)."""
    layouts, max_batch = _controls()
    workload = _workload_row(max_batch)
    budget, max_graphs, objective = _optimiser_row()
    preset = st.session_state.get("bk_preset", DEFAULT_PRESET)
    fusion = bool(st.session_state.get("bk_fusion"))
    captures = _captures(preset, fusion)
    if not layouts:
        st.info("Tick at least one layout to compare; the optimiser's layout is shown on its own.")
    sizes = tuple(int(s) for s in workload.batch_sizes)
    weights = tuple(float(x) for x in workload.weights)
    stats = _comparison(
        preset,
        fusion,
        tuple(layouts.items()),
        sizes,
        weights,
        workload.name,
        float(budget),
        int(max_graphs),
        objective,
        captures,
    )
    binding = _binding(
        preset, fusion, sizes, weights, workload.name, float(budget), int(max_graphs), objective, captures
    )
    _optimum_summary(stats, budget, binding, int(max_graphs))
    optimum = next((s.buckets for s in stats if s.is_optimum), None)
    st.markdown("**Padding at each batch size** (ticks on the axis: the buckets; shaded: no graph, eager)")
    st.plotly_chart(
        padding_figure(layouts, workload, max_batch, optimum), width="stretch", key="bk_padding_chart"
    )
    rows = br.table_rows(stats)
    show_table(
        rows,
        {**{k: k for k in rows[0]}, "padded rows/step": Column("padded rows/step", "{:,.2f}")},
        key="bk_layouts",
    )
    st.download_button(
        "Download the comparison (CSV)",
        _csv(br.table_rows(stats, full_buckets=True)),
        file_name="bucket_layouts.csv",
        mime="text/csv",
        on_click="ignore",
        key="bk_download",
    )
    st.markdown("**Step time against pinned graph memory**")
    st.plotly_chart(tradeoff_figure(stats, budget), width="stretch", key="bk_tradeoff_chart")
    with st.expander("How the numbers are computed"):
        st.markdown(_EXPLAINER)


def _workload_row(max_batch: int):
    """The workload, its mean batch and where graph memory comes from; the workload (sim.buckets.workloads)."""
    w1, w2, w3 = st.columns(3)
    w1.selectbox(
        "Workload",
        WORKLOADS,
        key="bk_workload",
        bind="query-params",
        help="How often each batch size occurs in your server's decode steps.",
    )
    w2.slider(
        "Mean batch (geometric / Poisson)",
        1.0,
        float(MAX_BATCH_RANGE[1]),
        value=16.0,
        step=1.0,
        key="bk_mean",
        bind="query-params",
        disabled=st.session_state.get("bk_workload", WORKLOADS[0]) not in ("geometric", "Poisson"),
    )
    w3.selectbox(
        "Graph memory",
        MEMORY_SOURCES,
        key="bk_memory",
        bind="query-params",
        help="Modelled per graph (see below), or the probe's measured per-graph memory.",
    )
    return _workload(max_batch)


def _optimiser_row() -> tuple:
    """(the graph memory budget in MiB, the most graphs, what to optimise for)."""
    o1, o2, o3 = st.columns(3)
    budget = o1.slider(
        "Graph memory budget (MiB)", *BUDGET_RANGE, value=256, step=16, key="bk_budget", bind="query-params"
    )
    max_graphs = o2.slider(
        "Most graphs the optimiser may use", *GRAPHS_RANGE, value=64, key="bk_max_graphs", bind="query-params"
    )
    objective = o3.radio("Optimise for", OBJECTIVES, key="bk_objective", bind="query-params", horizontal=True)
    return budget, max_graphs, objective


def _captures(preset: str, fusion: bool):
    """The probe's measured per-graph memory where the reader asked for it and a run has it, else None (the
    model's)."""
    captures = None
    if st.session_state.get("bk_memory") == MEMORY_SOURCES[1]:
        captures = _probe_captures(fusion)
        if captures is None:
            st.info("No probe measurement of graph memory is available here; using the model instead.")
        else:
            st.caption(_memory_gap_note(preset, fusion, captures))
    return captures


_EXPLAINER = """\
- **Padded rows / step**: Σ wₙ·(bucket(n) − n) over the workload's batch sizes n with weights wₙ.
  **Padding waste %**: padded rows as a share of all rows computed on graphs.
- **GPU µs lost to padding**: the simulator's per-kernel time at the bucket minus at the real batch.
- **Eager sizes / eager cost**: batches above the largest bucket get no graph; the cost is the eager step
  minus the graph step it would have had.
- **Graph memory (modelled)**: per graph, its static buffers (token ids, positions, slot mapping, context
  lengths, a block-table row and the output hidden state per row) plus 8 KiB per kernel node; once per
  layout, the shared pool: graphs are captured largest first into one pool, so it holds the largest
  graph's intermediates (one layer's worth: the allocator reuses them layer to layer). The per-node figure
  is an assumption of the right order; "measured by the probe" replaces the model with real captures
  of the probe's own 0.5 B model (fused or unfused, following Kernel fusion). The recorded H200 run
  measures 2.5-4 KiB a node, so the model overstates per-graph memory a few times over, and the
  measurement counts the drop in free device memory, which moves in 2 MiB pages.
- **What binds**: the optimiser is re-run with one more graph allowed and with no budget; whichever
  of the two changes its answer is the limit that binds.
- **Optimal layout**: an exact dynamic programme over the sorted batch sizes for each graph count
  (the best bucket for a run of sizes is its largest size), then the best of those that fit the budget.
  Optimising step time often drops the smallest buckets: while a step is memory-bound, padding 1 row
  up to 4 costs almost nothing, so those graphs are better spent where padding is expensive.
"""


def render() -> None:
    st.subheader("Bucketing: which batch sizes to capture")
    st.markdown(
        "A CUDA graph replays exactly the shapes it was captured with, so an engine captures a list of batch "
        "sizes and pads each real batch up to the next one. More buckets mean less padding but more pinned "
        "memory; batches above the largest bucket fall back to eager launches."
    )
    st.markdown(
        "**Which step time to read:** *step µs* in the comparison table, the simulated step averaged over the "
        "workload's batch sizes, padding and eager fallbacks included: what a list of buckets costs your traffic, "
        "not one batch's step."
    )
    layouts_tab, demo_tab = st.tabs(VIEWS, key="bk_view", bind="query-params")
    if layouts_tab.open:
        with layouts_tab:
            _layouts_view()
    if demo_tab.open:
        with demo_tab:
            padding_demo.render()
