"""Where the Your trace tab's traces come from: the traces that ship with the app, and this session's uploads.

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
from ui import uploads
from ui.common import code, plain
from ui.trace.analysis import drawn

ROOT = Path(__file__).resolve().parents[2]
UPLOAD_MB = 500  # the uploader's limit, stated on the page (server.maxUploadSize, 512, allows it)
MAX_SESSION_TRACES = 3  # uploads a session keeps (the oldest goes first)
# Parsed uploads with what the page drew from them, all sessions together: a 1.4 M-kernel trace fully drawn
# is ~0.7 GB. The newest upload stays even alone over budget while it is shown.
RESIDENT_MB = 500
MAX_RESIDENT = 8  # and at most this many uploads


TRACES = ROOT / "data" / "traces"  # the traces the app ships (data/traces/README.md), besides the probe's own
RECORDED = RECORDED_PATH.parent
# title -> (the trace, what it is, the file that says which command made it). The GPU and the date are read from the
# trace itself (its deviceProperties and clock), the command from that file: nothing here names a GPU.
EXAMPLES = {
    "HF Llama-1B eager": (
        TRACES / "hf" / "hf_llama_eager_profilerstep.json.gz",
        "Hugging Face transformers: a Llama-3.2-1B-shaped LlamaForCausalLM (random weights, static cache) "
        "decoding at batch 1, eager, steps marked by ProfilerStep#N, shapes recorded",
        TRACES / "hf" / "hf_llama_measured.json",
    ),
    "HF Llama-1B CUDA graph": (
        TRACES / "hf" / "hf_llama_graph.json.gz",
        "the same model's decode step captured once with torch.cuda.graph and replayed, no step marks",
        TRACES / "hf" / "hf_llama_measured.json",
    ),
    "HF Llama-1B torch.compile": (
        TRACES / "hf" / "hf_llama_compile.json.gz",
        "the same model under torch.compile(mode='reduce-overhead'), ProfilerStep#N",
        TRACES / "hf" / "hf_llama_measured.json",
    ),
    "HF Llama-1B eager, no step marks": (
        TRACES / "hf" / "hf_llama_eager_sync.json.gz",
        "the same eager loop profiled without ProfilerStep#N: its steps are told apart by host synchronisation",
        TRACES / "hf" / "hf_llama_measured.json",
    ),
    "HF Llama-1B eager, busy second stream": (
        TRACES / "hf" / "hf_llama_two_streams.json.gz",
        "the same eager loop with a second CUDA stream running matmuls during each step",
        TRACES / "hf" / "hf_llama_measured.json",
    ),
    "HF Qwen2-0.5B eager, with the recorder's timing": (
        TRACES / "qwen2_eager_b1_recorder.json.gz",
        "Hugging Face transformers: a Qwen2.5-0.5B-shaped Qwen2ForCausalLM (random weights, static cache) decoding "
        "at batch 1, eager, one ProfilerStep#N, written by gpu_probe/recorder.py: the trace carries the step "
        "timed without the profiler",
        TRACES / "qwen2_eager_b1_recorder.provenance.json",
    ),
    "Probe 0.5B eager": (
        RECORDED / "trace_eager_b1.json.gz",
        "this app's probe decoder (small preset), eager PyTorch at batch 1: the profiled step of the recorded run "
        "small.json",
        RECORDED / "small.json",
    ),
    f"Probe 0.5B {FUSED_GRAPH.title}": (
        RECORDED / f"trace_{FUSED_GRAPH.slug}_b1.json",
        "this app's probe decoder (small preset), fused Triton kernels replayed as a CUDA graph, batch 1: the "
        "profiled step of the recorded run small.json",
        RECORDED / "small.json",
    ),
    "Probe 1B eager": (
        RECORDED / "trace_1b_eager_b1.json.gz",
        "this app's probe decoder (1b preset), eager PyTorch at batch 1: the profiled step of the recorded run "
        "1b.json",
        RECORDED / "1b.json",
    ),
    f"Probe 1B {FUSED_GRAPH.title}": (
        RECORDED / f"trace_1b_{FUSED_GRAPH.slug}_b1.json",
        "this app's probe decoder (1b preset), fused Triton kernels replayed as a CUDA graph, batch 1: the "
        "profiled step of the recorded run 1b.json",
        RECORDED / "1b.json",
    ),
}
# The probe's own traces: the recorded run whose profiled step each one is (its mode and batch). Its median step,
# timed without the profiler, is the trace's step without the profiler: the figure the Live GPU probe tab shows
# for the same step, where an estimate would put a second value under that name.
PROBE_RUNS = {  # title -> (mode, batch) in the run EXAMPLES names
    "Probe 0.5B eager": (BASELINE.name, 1),
    f"Probe 0.5B {FUSED_GRAPH.title}": (FUSED_GRAPH.name, 1),
    "Probe 1B eager": (BASELINE.name, 1),
    f"Probe 1B {FUSED_GRAPH.title}": (FUSED_GRAPH.name, 1),
}


def probe_run(title: str) -> tuple[str, str, int] | None:
    """(result file name, mode, batch) of the run a probe trace `title` comes from, or None (not a probe trace)."""
    if title not in PROBE_RUNS:
        return None
    return (EXAMPLES[title][2].name, *PROBE_RUNS[title])


@st.cache_data(show_spinner=False, max_entries=len(EXAMPLES) + 4)
def made_with(companion: str) -> str:
    """The command that made a shipped trace, as the file beside it says ('' where it does not)."""
    import json

    try:
        command = json.loads(Path(companion).read_text()).get("command")
    except (OSError, ValueError, AttributeError):
        return ""
    return command if isinstance(command, str) else ""


def provenance(title: str, trace) -> str:
    """'NVIDIA H200, 01 Dec 2026 20:53 UTC, made with `python tools/hf_traces.py …`': where and when a trace was
    recorded, read from the trace (its device and clock), and the command from the file beside a shipped one.
    Markdown: what comes from a file is escaped."""
    when = when_recorded(trace.recorded_at)
    where = f"{plain(trace.device) if trace.device else 'a GPU the file does not name'}, " + (
        when or "on a date the file does not give"
    )
    if title in EXAMPLES:
        command = made_with(str(EXAMPLES[title][2]))
        return f"{where}, made with {code(command)}" if command else where
    return f"{where}; the command that made it is not in the file"


def when_recorded(iso: str) -> str:
    """'01 Dec 2026 20:53 UTC' from an ISO 8601 time ('' stays '')."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(iso).strftime("%d %b %Y %H:%M UTC")
    except ValueError:
        return ""


DEFAULT_TRACE = "HF Llama-1B eager"

LIMITS = (
    f"Limits: {UPLOAD_MB} MB per file, {reader.MAX_GPU_EVENTS:,} GPU events and "
    f"{reader.MAX_TEXT_CHARS / 1e9:.0f} GB of decompressed JSON per trace. The file leaves the server once "
    f"read; what was read from all visitors' uploads shares {RESIDENT_MB} MB ({MAX_RESIDENT} traces) on this server (the least "
    "recently shown goes first: upload it again) and goes when your session ends."
)

_READ_LOCK = threading.Lock()  # one trace read at a time: the server's memory stays bounded
_RESIDENT = uploads.ByteBudget(RESIDENT_MB * 2**20, MAX_RESIDENT)  # upload id -> ranks, server-wide


@st.cache_resource(show_spinner=False, max_entries=2 * len(EXAMPLES))
def _example_ranks(title: str, digest: str) -> tuple:
    del digest  # part of the key: the file's whole content, so an edited file is read again
    path = EXAMPLES[title][0]
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
    path = EXAMPLES[title][0]
    return _example_ranks(title, hashlib.sha256(path.read_bytes()).hexdigest())


def _session_uploads() -> dict:
    return st.session_state.setdefault("tr_uploads", {})  # title -> upload id


def _keep_resident(upload_id: str, ranks: tuple) -> None:
    """Hold an upload (or count it again): its bytes are its columns and every analysis cached on them."""
    _RESIDENT.put(upload_id, (ranks, drawn(ranks)), uploads.deep_nbytes(ranks))


def _recount(upload_id: str | None) -> None:
    """After a run drew an upload: count its bytes again where new analyses were cached on it."""
    found = _RESIDENT.get(upload_id) if upload_id else None
    if found is not None and drawn(found[0]) != found[1]:
        _keep_resident(upload_id, found[0])


def recount(*titles: str) -> None:
    """After a run drew the traces `titles`: what it cached on an upload counts against the server's budget."""
    for title in titles:
        _recount(_session_uploads().get(title))


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


def options() -> list[str]:
    """The titles to pick from: the shipped examples, then this session's uploads."""
    return [*EXAMPLES, *_session_uploads()]


def ranks(title: str) -> tuple | None:
    """The trace files (ranks) behind a title, or None where an upload is no longer held."""
    if title in EXAMPLES:
        return _example(title)
    upload_id = _session_uploads().get(title)
    return _resident(upload_id) if upload_id else None


def your_trace() -> None:
    st.subheader("Your own trace")
    st.caption(
        "Record a few decode steps with torch.profiler (CPU and CUDA activities) and upload the trace: vLLM "
        "(VLLM_TORCH_PROFILER_DIR, then /start_profile and /stop_profile), SGLang (SGLANG_TORCH_PROFILER_DIR, one "
        "file per rank), Hugging Face, torch.compile or your own loop (prof.export_chrome_trace). The steps are "
        "found by a range you name, the probe's decode_step range, ProfilerStep#N, graph launches or host synchronisation, in "
        "that order. The "
        "trace becomes the one drawn at the top of the tab."
    )
    _upload_widget()
