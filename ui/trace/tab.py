"""The "Your trace" tab: a torch.profiler trace of your own model, drawn as the page draws a decode step.

Upload a trace (vLLM, SGLang, Hugging Face, torch.compile or your own code; several files at once are
ranks) or pick one of the traces recorded on an H200 that ship with the app. The reader is
`core.trace` (the probe's own), the what-ifs `sim.trace.whatif` (the simulator's timing model).

Memory (ui/uploads.py): a trace is read one event at a time from the upload and kept as compact columns;
the upload's bytes are dropped from the server as soon as they are read or refused. One trace is read at a
time on the server. The parsed traces of all sessions, with the steps, what-ifs and tables drawn from them,
share one budget of `RESIDENT_MB`, least recently shown first out; a session's uploads go when it ends.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import replace
from functools import partial
from pathlib import Path

import streamlit as st

from core import trace as reader
from core.probe_result import RECORDED_PATH
from core.step_plan import BASELINE, FUSED_GRAPH
from ui import probe_results, uploads
from ui.charts import FIRST_LAUNCHES, format_us, lanes_figure
from ui.common import (
    TRACED,
    chrome_trace_download,
    format_utilisation,
    plain,
    show_readouts,
    show_time_split,
)

ROOT = Path(__file__).resolve().parents[2]
UPLOAD_MB = 500  # the uploader's limit, stated on the page (server.maxUploadSize, 512, allows it)
MAX_SESSION_TRACES = 3  # uploads a session keeps (the oldest goes first)
# Parsed uploads with what the page drew from them, all sessions together: a 1.4 M-kernel trace fully drawn
# is ~0.7 GB. The newest upload stays even alone over budget while it is shown.
RESIDENT_MB = 500
MAX_RESIDENT = 8  # and at most this many uploads

# What to draw beside the trace: the option (what the URL holds) -> sim.trace.whatif's name for it.
WHATIFS = {
    "the trace alone": None,
    "with CUDA graphs": "graphs",
    "with fusion": "fusion",
    "with fusion + graphs": "fusion + graphs",
}
# title (what the picker shows and the URL holds) -> (file, what it is, the range marking its steps or None)
EXAMPLES = {
    "HF Llama-1B eager": (
        "tests/data/hf/hf_llama_eager_profilerstep.json.gz",
        "Hugging Face transformers: a Llama-3.2-1B-shaped LlamaForCausalLM (random weights, static cache) "
        "decoding at batch 1, eager, steps marked by ProfilerStep#N, shapes recorded",
        None,
    ),
    "HF Llama-1B CUDA graph": (
        "tests/data/hf/hf_llama_graph.json.gz",
        "the same model's decode step captured once with torch.cuda.graph and replayed, no step marks",
        None,
    ),
    "HF Llama-1B torch.compile": (
        "tests/data/hf/hf_llama_compile.json.gz",
        "the same model under torch.compile(mode='reduce-overhead'), ProfilerStep#N",
        None,
    ),
    "HF Llama-1B eager, no step marks": (
        "tests/data/hf/hf_llama_eager_sync.json.gz",
        "the same eager loop profiled without ProfilerStep#N: its steps are told apart by host synchronisation",
        None,
    ),
    "HF Llama-1B eager, busy second stream": (
        "tests/data/hf/hf_llama_two_streams.json.gz",
        "the same eager loop with a second CUDA stream running matmuls during each step",
        None,
    ),
    "HF Qwen2-0.5B eager, with the recorder's timing": (
        "tests/data/profiler/h200/qwen2_eager_b1_default.json.gz",
        "Hugging Face transformers: a Qwen2.5-0.5B-shaped Qwen2ForCausalLM (random weights, static cache) decoding "
        "at batch 1, eager, one ProfilerStep#N, written by gpu_probe/recorder.py: the trace carries the step "
        "timed without the profiler",
        None,
    ),
    "Probe 0.5B eager": (
        "gpu_probe/recorded/trace_eager_b1.json.gz",
        "this app's probe decoder (small preset), eager PyTorch at batch 1, from the recorded H200 run",
        reader.STEP_ANNOTATION,
    ),
    "Probe 0.5B fused + CUDA graph": (
        "gpu_probe/recorded/trace_fused_graph_b1.json",
        "this app's probe decoder (small preset), fused Triton kernels replayed as a CUDA graph, batch 1",
        reader.STEP_ANNOTATION,
    ),
    "Probe 1B eager": (
        "gpu_probe/recorded/trace_1b_eager_b1.json.gz",
        "this app's probe decoder (1b preset), eager PyTorch at batch 1, from the recorded H200 run",
        reader.STEP_ANNOTATION,
    ),
    "Probe 1B fused + CUDA graph": (
        "gpu_probe/recorded/trace_1b_fused_graph_b1.json",
        "this app's probe decoder (1b preset), fused Triton kernels replayed as a CUDA graph, batch 1",
        reader.STEP_ANNOTATION,
    ),
}
# The probe's own traces: the recorded run whose profiled step each one is (result file, mode, batch). Its median
# step, timed without the profiler, is the trace's step without the profiler: the figure the Live GPU probe tab
# shows for the same step, where an estimate would put a second value under that name.
PROBE_RUNS = {  # title -> (which shipped run: 0 the default one, 1 the first of MORE_RECORDED; mode; batch)
    "Probe 0.5B eager": (0, BASELINE.name, 1),
    "Probe 0.5B fused + CUDA graph": (0, FUSED_GRAPH.name, 1),
    "Probe 1B eager": (1, BASELINE.name, 1),
    "Probe 1B fused + CUDA graph": (1, FUSED_GRAPH.name, 1),
}


def probe_run(title: str) -> tuple[str, str, int] | None:
    """(result file, mode, batch) of the run a probe trace `title` comes from, or None (not a probe trace, or the
    run is not shipped): the files are read from ui.probe_results' list when asked, so they follow a rename."""
    if title not in PROBE_RUNS:
        return None
    which, mode, batch = PROBE_RUNS[title]
    files = (RECORDED_PATH.name, *probe_results.MORE_RECORDED)
    return (files[which], mode, batch) if which < len(files) else None


DEFAULT_TRACE = "HF Llama-1B eager"
NOTHING = "nothing"

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
}

LIMITS = (
    f"Limits: {UPLOAD_MB} MB per file, {reader.MAX_GPU_EVENTS:,} GPU events and "
    f"{reader.MAX_TEXT_CHARS / 1e9:.0f} GB of decompressed JSON per trace. The file leaves the server once "
    f"read; what was read from all visitors' uploads shares {RESIDENT_MB} MB ({MAX_RESIDENT} traces) on this server (the least "
    "recently shown goes first: upload it again) and goes when your session ends."
)

_READ_LOCK = threading.Lock()  # one trace read at a time: the server's memory stays bounded
_RESIDENT = uploads.ByteBudget(RESIDENT_MB * 2**20, MAX_RESIDENT)  # upload id -> ranks, server-wide


# -- where traces come from -----------------------------------------------------------------------------
@st.cache_resource(show_spinner=False, max_entries=2 * len(EXAMPLES))
def _example_ranks(title: str, digest: str) -> tuple:
    del digest  # part of the key: the file's whole content, so an edited file is read again
    path = ROOT / EXAMPLES[title][0]
    trace = reader.read_trace(path, name=path.name)
    measured = probe_measured(title)
    return (replace(trace, recorded_untraced=measured) if measured else trace,)


def probe_measured(title: str) -> dict | None:
    """The probe's own trace `title`: its run's step timed without the profiler, as a recorder block (source
    'probe'), where the recorded run is shipped and holds that step; else None."""
    found = probe_run(title)
    if found is None:
        return None
    from core.probe_result import load_result

    name, mode, batch = found
    try:
        run = load_result(RECORDED_PATH.with_name(name)).run(mode, batch)
    except (ValueError, OSError):
        return None
    if run is None:
        return None
    return {
        "median_us": run.step_us_median,
        "p10_us": run.step_us_p10,
        "p90_us": run.step_us_p90,
        "timer": "cuda_events",
        "source": "probe",
        "run": f"{name}, {mode} at batch {batch}",
    }


def _example(title: str) -> tuple:
    path = ROOT / EXAMPLES[title][0]
    return _example_ranks(title, hashlib.sha256(path.read_bytes()).hexdigest())


def _session_uploads() -> dict:
    return st.session_state.setdefault("tr_uploads", {})  # title -> upload id


def _drawn(ranks: tuple) -> int:
    """How many analyses the page has cached on an upload (reports, untraced steps, what-ifs, kernel tables)."""
    count = 0
    for trace in ranks:
        for report in trace.__dict__.get("_reports", {}).values():
            count += 1 + sum(
                ("_whatifs" in s.__dict__)
                + ("_kernel_rows" in s.__dict__)
                + len(s.__dict__.get("_untraced", ()))
                for s in report.steps
            )
    return count


def _keep_resident(upload_id: str, ranks: tuple) -> None:
    """Hold an upload (or count it again): its bytes are its columns and every analysis cached on them."""
    _RESIDENT.put(upload_id, (ranks, _drawn(ranks)), uploads.deep_nbytes(ranks))


def _recount(upload_id: str | None) -> None:
    """After a run drew an upload: count its bytes again where new analyses were cached on it."""
    found = _RESIDENT.get(upload_id) if upload_id else None
    if found is not None and _drawn(found[0]) != found[1]:
        _keep_resident(upload_id, found[0])


def _resident(upload_id: str):
    found = _RESIDENT.get(upload_id)
    return found[0] if found is not None else None


def _expected_bytes(f) -> int:
    """About what a trace file becomes in memory, read and drawn: a gzipped one ~40 times its size (16 MB held
    1.4 M kernels, ~0.7 GB drawn), plain JSON about half its size."""
    f.seek(0)
    gzipped = f.read(2) == b"\x1f\x8b"
    f.seek(0)
    return f.size * 40 if gzipped else f.size // 2


def _read_upload(files) -> tuple:
    """The uploaded files as ranks; TraceError names the first that cannot be used."""
    for f in files:
        if f.size > UPLOAD_MB * 2**20:  # the browser checks this too, a hand-made request need not
            raise reader.TraceError(f"{f.name[:120]} is larger than {UPLOAD_MB} MB")
    with _READ_LOCK:
        _RESIDENT.make_room(sum(_expected_bytes(f) for f in files))  # the peak: what is held plus this read
        ranks = []
        for f in files:
            trace = reader.read_trace(f, name=f.name[:200])
            reader.find_steps(trace)  # a trace without steps is refused now, not on every rerun
            ranks.append(trace)
    return tuple(ranks)


def _upload_widget() -> None:
    """The uploader. A new upload is read once, kept as columns, and becomes the trace shown."""
    generation = st.session_state.setdefault("tr_upload_generation", 0)
    files = st.file_uploader(
        "Your torch.profiler trace (.json, .json.gz, .pt.trace.json.gz; several files at once are ranks)",
        # MIME types among them: the file picker still offers these files, and Streamlit skips its own name
        # check, which a hand-made upload under another name would turn into an exception box. An Nsight
        # report is let in so that the reader can say what it is; every file's content is checked anyway.
        type=["application/json", "application/gzip", "application/x-gzip", "json", "gz", "nsys-rep"],
        accept_multiple_files=True,
        key=f"tr_upload_{generation}",
        max_upload_size=UPLOAD_MB,
        help=f"Read on this server and kept in your session only (its {MAX_SESSION_TRACES} latest uploads); "
        "the file itself is released once it has been read.",
    )
    st.caption(LIMITS)
    problem = st.session_state.pop("tr_upload_problem", None)
    if problem:
        st.error(problem, icon=":material/error:")
    if not files:
        return
    names = [f.name for f in files]
    try:
        with st.spinner("Reading the trace…"):
            ranks = _read_upload(files)
    except reader.TraceError as err:
        st.session_state["tr_upload_problem"] = plain(err)
    else:
        upload_id = (
            f"{generation}-{hashlib.sha256(chr(0).join(names).encode()).hexdigest()[:12]}-{id(ranks):x}"
        )
        _keep_resident(upload_id, ranks)
        label = ", ".join(n[:60] for n in names[:3]) + (
            f" and {len(names) - 3} more" if len(names) > 3 else ""
        )
        held = _session_uploads()
        title = f"uploaded: {label}"
        _forget([held.pop(title, None)])  # the same name again: the newest upload wins
        held[title] = upload_id
        _forget([held.pop(old) for old in list(held)[:-MAX_SESSION_TRACES]])
        _session_upload_ids().add(upload_id)
        st.session_state["_tr_trace_uploaded"] = title  # the picker above takes it on the next run (`_pick`)
    finally:
        # The file's bytes leave the server now, read or refused; a fresh uploader takes the next file.
        uploads.release_upload(*files)
        del files
        uploads.return_freed_memory()  # what reading it took (rows, decompression) goes back to the OS
    st.session_state["tr_upload_generation"] = generation + 1
    st.rerun()


def _session_upload_ids() -> set:
    """The ids of this session's uploads in the server-wide budget: dropped from it when the session ends."""
    ids = st.session_state.setdefault("tr_upload_ids", set())
    uploads.when_session_ends(st.session_state, "tr_uploads", partial(_RESIDENT.drop, ids))
    return ids


def _forget(upload_ids) -> None:
    """Uploads this session no longer lists: out of the server's memory too."""
    gone = [i for i in upload_ids if i]
    _session_upload_ids().difference_update(gone)
    _RESIDENT.drop(gone)


def _options() -> list[str]:
    """The titles to pick from: the shipped examples, then this session's uploads."""
    return [*EXAMPLES, *_session_uploads()]


def _ranks(title: str) -> tuple | None:
    """The trace files (ranks) behind a title, or None where an upload is no longer held."""
    if title in EXAMPLES:
        return _example(title)
    upload_id = _session_uploads().get(title)
    return _resident(upload_id) if upload_id else None


# -- analysis, cached on the trace itself -------------------------------------------------------------------
def _report(trace: reader.Trace, step_range: str | None) -> reader.TraceReport:
    cache = trace.__dict__.setdefault("_reports", {})
    if step_range not in cache:
        cache[step_range] = reader.analyse(trace, step_range=step_range)
    return cache[step_range]


def _untraced(report: reader.TraceReport, step: reader.TraceStep):
    """The step without the profiler (sim.trace.untraced.Untraced): the trace's recorded figure, else an estimate."""
    from sim.trace.untraced import untraced_of

    return untraced_of(step, report.trace.recorded_untraced)


def _whatifs(report: reader.TraceReport, step: reader.TraceStep) -> dict:
    """The what-ifs of the step without the profiler (what graphs and fusion would make of the step as it runs)."""
    cached = step.__dict__.get("_whatifs")
    if cached is None:
        from sim.trace.whatif import default_replay_cost, whatifs

        cached = whatifs(_untraced(report, step).step, default_replay_cost())
        object.__setattr__(step, "_whatifs", cached)
    return cached


def _kernel_rows(report: reader.TraceReport, step: reader.TraceStep) -> list[dict]:
    cached = step.__dict__.get("_kernel_rows")
    if cached is None:
        from core.trace.kernels import kernel_table

        cached = kernel_table(report, step.index)
        object.__setattr__(step, "_kernel_rows", cached)
    return cached


# -- the page ---------------------------------------------------------------------------------------------
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
        f"Step {step.index} of {len(report.steps)}, found by {plain(report.rule)}. Over all steps: median "
        f"{format_us(report.median('step_us'))}, fastest {format_us(lo)}, slowest {format_us(hi)}. A step runs "
        "from its start (its range's start where a range marks it, else its first launch call) to the end of its "
        "last GPU work; the profiler adds host time to every launch."
    )


def _gpu_time_by_kind(step: reader.TraceStep) -> None:
    by_kind = {k: v for k, v in step.gpu_time_by_kind().items() if v > 0}
    if len(by_kind) > 1:
        st.caption(
            "GPU time by kind: " + ", ".join(f"{k} {format_us(us)}" for k, us in by_kind.items()) + "."
        )


def _whatif_table(report: reader.TraceReport, step: reader.TraceStep) -> None:
    outs = _whatifs(report, step)
    untraced = _untraced(report, step)
    base, real = step.metrics.step_us, untraced.step_us
    labels = {v: k for k, v in WHATIFS.items()}

    def row(name: str, us: float, kernels: int, launches: int, bound: str) -> dict:
        return {
            "the step": name,
            "step time": format_us(us),
            "vs your step without the profiler": f"{real / us:.2f}×",
            "vs the traced step": f"{base / us:.2f}×",
            "kernels": kernels,
            "launches": launches,
            "bound by": bound,
        }

    m = step.metrics
    rows = [
        row("as traced", base, step.kernels, step.launches, m.bound_by),
        row(f"without the profiler ({untraced.source_label})", real, step.kernels, step.launches, m.bound_by),
    ]
    for name, w in outs.items():
        rows.append(
            row(f"{labels[name]} (estimate)", w.metrics.step_us, w.kernels, w.launches, w.metrics.bound_by)
        )
    st.dataframe(rows, hide_index=True, width="stretch")
    if step.graph_launches:
        st.caption("This step already replays a CUDA graph, so only fusion is estimated.")
    quoted = [
        f"{labels[name]}: {real / w.metrics.step_us:.1f}× faster than your step without the profiler; "
        f"{base / w.metrics.step_us:.1f}× vs the traced step"
        for name, w in outs.items()
    ]
    notes = " ".join(dict.fromkeys(note for w in outs.values() for note in w.notes))
    st.caption(
        "; ".join(quoted).capitalize() + ". Estimates: the step without the profiler, its own kernel times "
        "rescheduled by the simulator's timing model. " + notes
    )
    fusion = outs["fusion"]
    folded = fusion.folded
    if not folded:
        return
    st.markdown("**What fusion would fold away**")
    st.dataframe(
        [
            {"kernel": f.name, "count": f.count, "GPU µs": round(f.gpu_us, 1), "host µs": round(f.host_us, 1)}
            for f in folded
        ],
        hide_index=True,
        width="stretch",
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
    st.dataframe(
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
        hide_index=True,
        width="stretch",
        height=min(36 * (len(groups) + 1) + 4, 320),
    )


def _lanes(
    report: reader.TraceReport,
    step: reader.TraceStep,
    whatif: str | None,
    whole: bool,
    key: str,
    x_max: float | None = None,
) -> None:
    overlay = _whatifs(report, step).get(whatif) if whatif else None
    fig = lanes_figure(step.timeline, overlay.timeline if overlay is not None else None, whole_step=whole)
    if x_max is not None:
        fig.update_xaxes(range=[0, x_max * 1.02], autorange=False)
    st.plotly_chart(
        fig, width="stretch", key=key, theme=None, config={"displaylogo": False, "scrollZoom": True}
    )
    if whatif and overlay is None:
        st.caption("This step already replays a CUDA graph: there is no graphs what-if to draw.")


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


def _without_profiler(report: reader.TraceReport, step: reader.TraceStep, whole: bool) -> None:
    """The step as traced beside the step without the profiler: both sets of lanes on one time axis."""
    untraced = _untraced(report, step)
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
    st.caption(f"{source} {_why_slow()}")
    notes = [report.trace.recorded_note, *untraced.notes]
    for note in filter(None, notes):
        st.caption(plain(note))


def _kernels_table(report: reader.TraceReport, step: reader.TraceStep) -> None:
    rows = _kernel_rows(report, step)
    replays = any(r["replayed"] for r in rows)
    st.dataframe(
        [
            {
                "kernel": r["kernel"],
                "calls": r["calls"],
                "total µs": None if r["graph_launch"] else round(r["total_us"], 1),
                "mean µs": None if r["graph_launch"] else round(r["mean_us"], 2),
                "share": "" if r["graph_launch"] else f"{100 * r['share']:.1f}%",
                "launch delay µs": _rounded(r["launch_delay_us"], 1),
                **({"gap µs (replayed)": _rounded(r["gap_us"], 1)} if replays else {}),
                "host µs / launch": _rounded(r["host_per_launch_us"], 1),
            }
            for r in rows
        ],
        hide_index=True,
        width="stretch",
        height=min(36 * (len(rows) + 1) + 4, 420),
    )
    st.caption(
        "Per kernel name in this step: calls, GPU time, its share of the kernels' time, the mean delay from the "
        "end of its launch call to its start, and the host time of its launch."
        + (
            " Kernels replayed by a CUDA graph have no launch of their own: the graph launch's host time is its "
            "own first row, and each replayed kernel shows instead the gap from the end of the previous kernel "
            "on its stream to its start (negative: it began before that one ended, as with programmatic "
            "dependent launch)."
            if replays
            else ""
        )
    )


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _side_title(title: str, step: reader.TraceStep) -> None:
    m = step.metrics
    st.markdown(f"**{plain(title)}** · step {step.index}")
    st.caption(
        f"{m.kernels:,} kernels, {step.launches:,} launches, {format_us(m.step_us)} as traced, bound by "
        f"{m.bound_by} as traced, GPU utilisation {format_utilisation(m.utilisation)} as traced."
    )


def _compared(title: str, position: int):
    """(report, step) of the trace to compare with, at the same position, or None."""
    ranks = _ranks(title)
    if ranks is None:
        st.warning("The trace to compare with is no longer held on this server: upload it again.")
        return None
    try:
        report = _report(ranks[0], EXAMPLES[title][2] if title in EXAMPLES else None)
    except reader.TraceError as err:
        st.error(plain(err), icon=":material/error:")
        return None
    return report, report.steps[min(position, len(report.steps) - 1)]


def render() -> None:
    st.subheader("Your trace: your own model's decode steps, drawn the same way")
    st.caption(
        "A torch.profiler trace of a decode loop, drawn as the page draws a step: one of the H200 traces that ship "
        "with the app, or yours (upload it at the bottom of the tab)."
    )
    options = _options()
    pick_col, compare_col, whatif_col, whole_col = st.columns(
        [2.4, 2.4, 1.6, 1.2], vertical_alignment="bottom"
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
    ranks = _ranks(title)
    if ranks is None:
        st.warning(
            "That upload is no longer held on this server (it keeps its latest uploads only): upload it again."
        )
        _your_trace()
        return
    # The picture goes here, above the controls that refine it (issue 29, item 6): the step, its readouts and lanes.
    picture = st.container()
    range_col, rank_col, _ = st.columns([2, 1, 3.2], vertical_alignment="bottom")
    default_range = EXAMPLES[title][2] if title in EXAMPLES else None
    typed = range_col.text_input(
        "Step range (optional)",
        key="tr_range",
        bind="query-params",
        max_chars=200,
        placeholder=default_range or "e.g. decode_step",
        help="The name of a CPU range (record_function) around each step. Empty: the reader's own rules.",
    )
    step_range = typed.strip() or default_range
    rank = 0
    if len(ranks) > 1:
        rank = int(
            rank_col.number_input(
                "Rank", min_value=0, max_value=len(ranks) - 1, step=1, key="tr_rank", bind="query-params"
            )
        )
    trace = ranks[min(rank, len(ranks) - 1)]
    try:
        report = _report(trace, step_range)
    except reader.TraceError as err:
        picture.error(plain(err), icon=":material/error:")
        _your_trace()
        return
    with picture:
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
            _lanes(report, step, whatif, whole, "tr_lanes")
        else:
            shown = [
                s.timeline if whole else s.timeline.first_launches(FIRST_LAUNCHES) for s in (step, other[1])
            ]
            x_max = max(t.step_us for t in shown)
            left, right = st.columns(2, gap="medium")
            with left:
                _side_title(title, step)
                _lanes(report, step, whatif, whole, "tr_lanes", x_max)
            with right:
                _side_title(compare, other[1])
                _lanes(other[0], other[1], None, whole, "tr_compare_lanes", x_max)
            st.caption("Both on one time axis, so a step twice as long looks twice as long.")
    described = f"recorded on an H200: {EXAMPLES[title][1]}" if title in EXAMPLES else title
    st.info(
        f"**{plain(described)}**"
        + (f" · rank {rank} of {len(ranks)}" if len(ranks) > 1 else "")
        + (f" · {plain(trace.device)}" if trace.device else "")
        + f" · {trace.events:,} events, {len(report.steps)} steps",
        icon=":material/timeline:",
    )
    _more_readouts(report, step)
    if other is not None:
        from ui.trace.diff_view import show_diff  # before/after by kernel family (core.trace.diff)

        show_diff(title, report, compare, other[0])
    _gpu_time_by_kind(step)
    _without_profiler(report, step, whole)
    st.markdown("**Where the time goes**")
    show_time_split(step.metrics)
    st.subheader("What CUDA graphs and fusion would save")
    _whatif_table(report, step)
    st.subheader("Kernels")
    _kernels_table(report, step)
    _download(step)
    _your_trace()
    for shown in (title, compare):  # what this run cached on an upload counts against the server's budget
        _recount(_session_uploads().get(shown))


def _your_trace() -> None:
    st.subheader("Your own trace")
    st.caption(
        "Record a few decode steps with torch.profiler (CPU and CUDA activities) and upload the trace: vLLM "
        "(VLLM_TORCH_PROFILER_DIR, then /start_profile and /stop_profile), SGLang (SGLANG_TORCH_PROFILER_DIR, one "
        "file per rank), Hugging Face, torch.compile or your own loop (prof.export_chrome_trace). The steps are "
        "found by ProfilerStep#N, a range you name, graph launches or host synchronisation, in that order. The "
        "trace becomes the one drawn at the top of the tab."
    )
    _upload_widget()


def _download(step: reader.TraceStep) -> None:
    chrome_trace_download(
        step.timeline,
        "Download this step as drawn (Chrome trace, opens in Perfetto)",
        f"trace-step-{step.index}.json",
        "tr_download",
        weak=True,  # an upload's step must not outlive its place in the server's budget
    )
