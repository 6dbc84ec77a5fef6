"""The probe tab's "Measure on this GPU": the probe run live on a preset or an uploaded config.json, in parts.

A run is measured in parts (`parts_of`): batch 1's eager and fused+graph steps first, drawn as soon as they are
in (the first answer, in seconds), then the other modes and batches, torch.compile last (it compiles for each
batch size). Each part is one `gpu_probe.live.measure` call on the same `ProbeSession` (model, KV pool, graphs:
the first part captures only its own graphs, a later part those it needs), and the parts are merged into one
result of the CLI's format (`core.probe_result.merge_results`), downloadable as JSON.

The session is built once per server and kept in its store (st.cache_resource); every session of the page
measures with it under one lock, because the graphs' static input and output buffers are shared. A finished
result is kept for the next reader, keyed by what it was computed from (the model, its batches and modes); the
parts of a run that stopped half-way are kept too, so a rerun goes on from where it stopped. torch is imported
only when a measurement starts (through `gpu_probe.live`).

Compiled kernels survive the page's runs without anything here: Triton caches its own in ~/.triton/cache and
Inductor's in /tmp/torchinductor_$USER (their defaults when TRITON_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR are
unset; neither dies with a run), and Inductor compiles in a pool of worker processes by default.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

import streamlit as st

from core.hf_config import MAX_CONFIG_BYTES, too_large
from core.probe_result import merge_results
from core.step_plan import BASELINE, CHAPTER_BUCKETS, FUSED_GRAPH, MODES, probe_modes
from gpu_probe.config import DEFAULT_PRESET, PRESETS
from ui.common import plain
from ui.probe_results import describe, session_results, with_host
from ui.uploads import release_upload

LIVE_BATCHES = (1, 8, 64, 256)
LIVE_MODES: tuple[str, ...] | None = None  # None: every mode the probe runs ("all")
# Measured, not hoped: the recorded H200 run (these batches, all modes) took 225-231 s from the CLI,
# and torch.compile compiles once per batch size (about 30 s each).
LIVE_DURATION = (
    "several minutes (about 3¾ on an H200, where torch.compile alone takes about 30 s per batch size)."
)
FIRST_MODES = (BASELINE.name, FUSED_GRAPH.name)  # the first answer, at the smallest batch

CONFIG_CHOICE = "config.json"  # the model picker's entry for an uploaded config
MODEL_KEY = "pr_live_model"
UPLOAD_KEY = "pr_live_config"
_READ = "pr_live_config_read"  # ("read", ProbeModelConfig) or ("refused", message) of the last upload
MODEL_CHOICES = (DEFAULT_PRESET, *(p for p in PRESETS if p != DEFAULT_PRESET), CONFIG_CHOICE)


# -- what to measure -------------------------------------------------------------------
def pick_model():
    """The model picker: a preset's name, the ProbeModelConfig of an uploaded config.json, or None (nothing to
    measure: no config uploaded yet, or one refused, with its message shown as text)."""
    model_col, upload_col = st.columns([1.3, 3], vertical_alignment="bottom")
    choice = model_col.selectbox(
        "Model to measure",
        MODEL_CHOICES,
        key=MODEL_KEY,
        bind="query-params",  # its options are the URL's values: no format_func
        help="A preset of the probe's (small: a 0.48 B Llama-style decoder; 1b: Llama-3.2-1B's shape; tiny: for "
        "tests), or a Hugging Face config.json of the Llama family, built with random weights.",
    )
    if choice != CONFIG_CHOICE:
        cfg = PRESETS[choice]
        upload_col.caption(
            f"The {choice} preset: {cfg.n_params / 1e9:.2f} B parameters, {cfg.n_layers} layers, hidden "
            f"{cfg.hidden}, {cfg.dtype}, random weights. Pick {CONFIG_CHOICE} to upload your own model's."
        )
        return choice
    upload_col.file_uploader(
        "Its config.json",
        type=["json"],
        key=UPLOAD_KEY,
        on_change=_read_config,
        help="A config.json of the Llama family (Llama 2-3.2, Qwen2/2.5, Mistral). One the probe cannot run "
        "is refused, naming the field, before anything is allocated on the GPU.",
    )
    said = st.session_state.get(_READ)
    if said is None:
        st.info("Upload a config.json to measure its decoder here.", icon=":material/upload_file:")
        return None
    kind, value = said
    if kind == "refused":
        st.error(f"Not measured: {plain(value)}")
        return None
    st.caption(
        plain(
            f"{value.source}: {value.model_type}, {value.n_layers} layers, hidden {value.hidden}, {value.n_heads} "
            f"heads over {value.n_kv_heads} KV heads, FFN {value.ffn}, vocabulary {value.vocab}, {value.dtype}, "
            f"{value.n_params / 1e9:.2f} B parameters (random weights)."
        )
    )
    return value


def _read_config() -> None:
    """The uploaded config.json read once (gpu_probe.config.from_bytes: refused there, naming the field), and its
    bytes let go of (what was read is kept for the session)."""
    from gpu_probe.config import from_bytes

    upload = st.session_state.get(UPLOAD_KEY)
    if upload is None:  # the file was removed
        st.session_state.pop(_READ, None)
        return
    where = str(upload.name)[:100]
    try:
        if upload.size > MAX_CONFIG_BYTES:  # refused by its size, unread
            raise too_large(where, upload.size)
        st.session_state[_READ] = ("read", from_bytes(upload.getvalue(), where))
    except ValueError as err:  # ConfigError, or the probe's own limits
        st.session_state[_READ] = ("refused", str(err))
    finally:
        release_upload(upload)


# -- in what order -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Part:
    """One `measure` call of a live run: these modes at these batches."""

    modes: tuple[str, ...]
    batches: tuple[int, ...]
    compiles: bool = False  # its modes compile a step per batch size (torch.compile)

    def describe(self) -> str:
        titles = [MODES[m].title for m in self.modes]
        what = f"{', '.join(titles[:-1])} and {titles[-1]}" if len(titles) > 1 else titles[0]
        batches = ", ".join(map(str, self.batches))
        return f"{what} at batch {batches}"


def parts_of(batches, modes) -> list[Part]:
    """The parts a live run of `modes` at `batches` is measured in, in order: the smallest batch's eager and
    fused+graph steps (the first answer), the rest of that batch's modes, each larger batch's, and last the modes
    whose steps compile per batch size (torch.compile's: their kernel set replays graphs of its own), a batch
    at a time."""
    from gpu_probe.kernel_sets import kernel_set  # torch-free

    batches = sorted(batches)
    compiled = [m for m in modes if MODES[m].graphs and not kernel_set(MODES[m]).captured]
    rest = [m for m in modes if m not in compiled]
    first = [m for m in rest if m in FIRST_MODES] or rest[:1]
    plan = [Part(tuple(first), (batches[0],))] if first else []
    if [m for m in rest if m not in first]:
        plan.append(Part(tuple(m for m in rest if m not in first), (batches[0],)))
    plan += [Part(tuple(rest), (b,)) for b in batches[1:] if rest]
    plan += [Part((m,), (b,), compiles=True) for m in compiled for b in batches]
    return plan


# -- measuring ------------------------------------------------------------------------------
@st.cache_resource(show_spinner=False)
def _live_store() -> dict:
    # Shared by every session: the graphs' static buffers are too, so one lock serialises capture and replay.
    # results: finished runs; parts: the parts of a run not finished yet; failed: why a run stopped (its parts
    # are kept, and shown); session: (its key, the ProbeSession held), one model and graph set on the GPU at a
    # time. The session is held here rather than by a cached function of its own: such a function records the
    # status lines its build writes and replays them into a later run's page, where their block no longer
    # exists (CacheReplayClosureError on the second part).
    return {"lock": threading.Lock(), "results": {}, "parts": {}, "failed": {}, "session": None}


def _drop_session(store: dict) -> None:
    """Let the held ProbeSession go (built only in part, or another model's next) and its memory with it."""
    from gpu_probe import live

    store["session"] = None
    live.release_gpu_memory()


def model_key(cfg) -> str:
    """What a run's model is keyed by: a preset's name, else the whole config it was built from."""
    if PRESETS.get(cfg.name) == cfg:
        return cfg.name
    return json.dumps(cfg.to_dict(), sort_keys=True)


def _phase(message: str) -> str:
    text = message.lower()
    if "captur" in text:
        return "Capturing CUDA graphs"
    if "compil" in text:
        return "Compiling"
    if "profil" in text:
        return "Profiling"
    if "timing" in text or "measuring" in text:
        return "Measuring"
    return "Building the model" if "building" in text else "Warming up"


def _label(i: int, plan: list[Part], part: Part, phase: str) -> str:
    return f"Part {i + 1} of {len(plan)}: {phase} · {part.describe()}…"


def _command(cfg, req: dict, parts: int) -> str:
    """The CLI command a live run stands for, and how it was run."""
    model = (
        f"--preset {cfg.name}" if model_key(cfg) == cfg.name else f"--config {cfg.source or 'config.json'}"
    )
    modes = "all" if list(req["modes"]) == list(probe_modes()) else " ".join(req["modes"])
    batches = " ".join(map(str, req["batches"]))
    return f"python -m gpu_probe {model} --batch {batches} --modes {modes} (Measure on this GPU, in {parts} parts)"


def _failure_message(err: Exception) -> str:
    if "out of memory" in str(err).lower() or type(err).__name__ == "OutOfMemoryError":
        return (
            "The GPU ran out of memory while measuring. Free memory held by other processes, or measure a "
            "smaller model or fewer batches with python -m gpu_probe."
        )
    return f"The measurement failed: {err}"


def measure_live(model=DEFAULT_PRESET, draw=None, batches=None, modes=None):
    """Measure `model` (a preset's name or a ProbeModelConfig) live, part by part, and return the result (None
    where nothing was measured). `draw(result, done, total)` draws the parts measured so far while the rest are
    measured (the page's first answer); a run that stopped half-way returns its parts, with the reason shown."""
    from gpu_probe import live  # imports torch only when a run starts

    try:  # refused before anything is allocated: a bad batch, a mode the model cannot run
        req = live.validate_request(
            model, batches or LIVE_BATCHES, modes or LIVE_MODES or "all", CHAPTER_BUCKETS, 100, 10
        )
        cfg = live.model_config(model)
    except ValueError as err:
        st.error(f"Not measured: {plain(err)}")
        return None
    key = (model_key(cfg), tuple(req["batches"]), tuple(req["modes"]))
    plan = parts_of(req["batches"], req["modes"])
    store = _live_store()
    status = st.status("Waiting for the GPU (another session may be measuring)…", expanded=True)
    preview = st.empty()
    with store["lock"]:
        result = store["results"].get(key)
        if result is None and key not in store["failed"]:
            _measure_parts(live, model, cfg, req, key, plan, store, status, preview, draw)
            result = store["results"].get(key)
    preview.empty()
    if result is None:
        parts = store["parts"].get(key) or []
        why = store["failed"].get(key, "The measurement stopped.")
        status.update(label="Stopped", state="error", expanded=False)
        st.error(
            plain(why)
            + (f" Shown: the {len(parts)} of {len(plan)} parts measured before it stopped." if parts else "")
        )
        st.button("Measure again", key="pr_live_again", on_click=_retry, args=(key,))
        if not parts:
            return None
        result = merge_results(parts, command=_command(cfg, req, len(parts)))
        label = f"live, {len(parts)} of {len(plan)} parts: {describe(result)}"
    else:
        status.update(label="Measured on this GPU", state="complete", expanded=False)
        label = f"live: {describe(result)}"
    session_results()[with_host(label, result)] = result
    _download(result)
    return result


def _retry(key) -> None:
    store = _live_store()
    with store["lock"]:
        store["failed"].pop(key, None)  # its parts stay: the next run goes on from the part that failed
        _drop_session(store)


def _measure_parts(live, model, cfg, req, key, plan, store, status, preview, draw) -> None:
    """Measure the parts of `plan` not measured yet (under the store's lock), drawing the parts so far after each;
    the finished result goes to store["results"], a failure's message to store["failed"]."""
    parts = store["parts"].setdefault(key, [])
    status.write(
        f"Measuring {len(req['modes'])} modes at {len(req['batches'])} batch sizes in {len(plan)} parts: "
        f"{plan[0].describe()} first, drawn as soon as they are measured, then the rest as they finish "
        f"(torch.compile last). The whole takes {LIVE_DURATION}"
    )
    for mode, why in req.get("modes_left_out", {}).items():
        status.write(plain(f"{MODES[mode].title}: left out ({why})"))
    session = None
    for i, part in enumerate(plan):
        if i < len(parts):
            continue  # measured by an earlier run of the page that stopped half-way

        def progress(message: str, i=i, part=part) -> None:
            status.update(label=_label(i, plan, part, _phase(message)))
            status.write(plain(message))  # text: never markdown

        status.update(label=_label(i, plan, part, "Compiling" if part.compiles else "Warming up"))
        try:
            session = _session(live, model, cfg, req, plan, store, progress)
            ceilings = None
            if parts:  # measured by the first part: not again beside the model, and the floors do not move
                ceilings = {"hbm_copy_GBps": parts[0].hbm_copy_GBps, "matmul_TFLOPs": parts[0].matmul_TFLOPs}
            measured = live.measure(
                model,
                batches=part.batches,
                modes=part.modes,
                progress=progress,
                session=session,
                ceilings=ceilings,
            )
        except Exception as err:
            refused = isinstance(err, ValueError) and session is None  # before anything was allocated
            store["failed"][key] = f"Not measured: {err}" if refused else _failure_message(err)
            if not refused:
                _drop_session(store)  # it may be built only in part: build it afresh next time
            return
        parts.append(measured)
        if draw is not None and len(parts) < len(plan):
            with preview.container():
                draw(merge_results(parts), len(parts), len(plan))
    store["results"][key] = merge_results(
        parts, command=_command(cfg, req, len(plan)), settings=_left_out(req)
    )
    store["parts"].pop(key, None)
    if getattr(session, "errors", None):
        _drop_session(store)  # built only in part (e.g. out of memory): build afresh next time


def _left_out(req: dict) -> dict:
    return {"modes_left_out": req["modes_left_out"]} if req.get("modes_left_out") else {}


def _session(live, model, cfg, req, plan, store, progress):
    """The server's ProbeSession for this model (built on first use, capturing only the first part's graphs;
    checked against the GPU's free memory for all of them first). Another model's is let go of first."""
    rows = live.rows_of(req)
    key = (model_key(cfg), rows)
    held = store["session"]
    if held is not None and held[0] == key:
        return held[1]
    if held is not None:
        _drop_session(store)  # its memory goes before the new one is checked against what is free
    first = [m for m in live.captured_modes() if m in plan[0].modes]
    session = live.open_session(model, rows=rows, progress=progress, capture=tuple(first))
    store["session"] = (key, session)
    return session


def _download(result) -> None:
    """The run as the CLI writes it (core.probe_result's format), serialised only when clicked."""
    name = str(result.model.get("config", {}).get("name", "run"))[:40]
    st.download_button(
        "Download this run (JSON, the CLI's format)",
        data=lambda: json.dumps(result.to_dict(), allow_nan=False, separators=(",", ":")),
        file_name=f"probe-live-{''.join(c if c.isalnum() or c in '-.' else '_' for c in name)}.json",
        mime="application/json",
        on_click="ignore",
        key="pr_live_download",
    )
