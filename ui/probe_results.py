"""Where the probe tab's results come from: the shipped recorded run, uploads, live runs.

Shared by the "Live GPU probe" and "Calibration" tabs. Results the session has loaded live
in `st.session_state[RESULTS_KEY]`, so the Calibration tab can fit the simulator to the
same run the probe tab shows.
"""

from __future__ import annotations

from datetime import datetime

import streamlit as st

from core import probe_result, tp_result
from core.step_plan import MODES, without_graphs
from ui.common import plain
from ui.host_index import host_phrase
from ui.uploads import files_go_with_the_session, release_upload

RESULTS_KEY = "probe_results"  # session: label -> ProbeResult (uploaded and live runs)
TP_RESULTS_KEY = "probe_tp_results"  # session: label -> TPResult (uploaded TP runs; probe tab only)
MAX_SESSION_UPLOADS = 4  # uploads a session keeps (the oldest goes first): memory per session stays bounded
# What each shipped run is for (gpu_probe/recorded/README.md); its GPU, date and command are read from the file.
RECORDED_PURPOSE = {
    "small.json": "the 0.5 B decoder in every mode at batch 1, 8, 64 and 256, with Hugging Face's Llama of the same "
    "shape: the run the page opens on",
    "1b.json": "Llama-3.2-1B's shape in every mode at batch 1, 8, 64 and 256, with Hugging Face's Llama of that shape",
    "1b-persistent.json": "the persistent kernel beside fusion + graphs at batch 1, 2, 3, 4, 6 and 8 (1b preset)",
    "small-b1.json": "the four modes the Simulator's toggles select, at batch 1 (small preset)",
    "small-persistent.json": "the persistent kernel beside fusion + graphs at batch 1 (small preset)",
    "small-holdout.json": "small.json's command again six minutes later on the same machine, without the reference: "
    "how much a run moves from one run to the next (never fitted)",
    "1b-second.json": "1b.json's command again on a fresh machine: its host-bound steps moved by up to half, its "
    "GPU-bound ones by under 1 %",
}


def _shipped_files() -> tuple[str, ...]:
    """Every run file shipped beside the default one (the traces are not runs), in RECORDED_PURPOSE's order."""
    folder = probe_result.RECORDED_PATH.parent
    found = (
        {f.name for f in folder.glob("*.json") if not f.name.startswith("trace")}
        if folder.is_dir()
        else set()
    )
    found.discard(probe_result.RECORDED_PATH.name)
    return tuple(n for n in RECORDED_PURPOSE if n in found) + tuple(sorted(found - set(RECORDED_PURPOSE)))


# The other shipped runs, offered after the default one (probe_result.RECORDED_PATH): every run file beside it.
MORE_RECORDED = _shipped_files()


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


@st.cache_resource(show_spinner=False)
def _more_recorded(names: tuple[str, ...]) -> tuple[tuple, tuple]:
    out, refused = [], []
    for name in names:
        try:
            out.append(
                probe_result.load_result(
                    probe_result.RECORDED_PATH.with_name(name), timeline_source="recorded"
                )
            )
        except (ValueError, OSError) as err:
            refused.append((name, str(err)))
    return tuple(out), tuple(refused)


def more_recorded() -> tuple:
    """The other shipped runs that can be read (`not_offered` says why one cannot)."""
    return _more_recorded(MORE_RECORDED)[0]


def not_offered() -> tuple[tuple[str, str], ...]:
    """(file name, why) of each shipped run the page cannot read, so it says why it is not in the Run menus."""
    rec, why = recorded()
    mine = () if rec is not None else ((probe_result.RECORDED_PATH.name, why),)
    return mine + _more_recorded(MORE_RECORDED)[1]


def shipped_name(result) -> str:
    """The file a shipped run was read from ('1b.json'), '' for any other result."""
    rec, _ = recorded()
    if rec is not None and result is rec:
        return probe_result.RECORDED_PATH.name
    refused = {name for name, _ in _more_recorded(MORE_RECORDED)[1]}
    for name, run in zip([n for n in MORE_RECORDED if n not in refused], more_recorded()):
        if run is result:
            return name
    return ""


def fallback_note(result, run) -> str | None:
    """'fused step, eager: the persistent kernel stops at 8 rows': what a run that fell back ran instead of its
    mode, and why, both read from the file (the limit: `ProbeResult.kernel_rows`, `largest_bucket`); None where
    the run ran as its mode."""
    if not run.eager_fallback or run.mode not in MODES:
        return None
    mode = MODES[run.mode]
    ran = "fused" if without_graphs(mode).fused else "unfused"
    # Above the largest graph captured, any graph mode runs eagerly; below it, the mode's own kernels stopped.
    largest, rows = result.largest_bucket, result.kernel_rows(run.mode)
    if largest and run.batch > largest:
        why = f"no graph was captured above {largest} rows"
    elif rows:
        why = f"the {mode.title} stops at {rows} rows"
    else:
        why = f"the {mode.title} did not run at this batch"
    return f"{ran} step, eager: {why}"


def preset_of(result) -> str:
    """The probe preset a run measured ('small', '1b'), or '' where the file does not say."""
    config = result.model.get("config")
    name = config.get("name") if isinstance(config, dict) else None
    return name if isinstance(name, str) else ""


@st.cache_resource(max_entries=8, show_spinner=False)
def _parse_upload(data: bytes):
    # Keyed by the whole file (Streamlit hashes every byte), shared read-only: a ProbeResult is frozen,
    # and a cache_resource hands out the object itself instead of unpickling 20 MB on every rerun.
    # A tensor-parallel result ("kind": "tensor_parallel") is read by its own loader.
    return tp_result.load_any_result(data)


def too_large(size: int, limit: int, what: str) -> str | None:
    """'result: file is larger than 20 MB (512.0 MB)', or None when `size` is within `limit`.

    Every upload handler calls this before it reads the file: Streamlit enforces a widget's
    `max_upload_size` in the browser only, and its server takes up to `server.maxUploadSize`
    (.streamlit/config.toml) from any client for any uploader.
    """
    if size <= limit:
        return None
    return f"{what}: file is larger than {limit / 2**20:g} MB ({size / 2**20:,.1f} MB)"


def session_results() -> dict:
    return st.session_state.setdefault(RESULTS_KEY, {})


def session_tp_results() -> dict:
    return st.session_state.setdefault(TP_RESULTS_KEY, {})


def _pending(select_key: str) -> str:
    return f"_{select_key}_uploaded"


def upload_widget(key: str, select_key: str, accepts_tp: bool = False) -> None:
    """A result-file uploader; a bad file is named in an error and changes nothing else.

    A newly uploaded run becomes the one shown (`select_key` is the run picker's key). A
    tensor-parallel result is kept apart (`session_tp_results`) where `accepts_tp`, else refused.
    """
    file = st.file_uploader(
        "Probe result made on your GPU (`python -m gpu_probe --out results.json`)",
        # A MIME type among them: the browser's file picker still offers JSON files only, and Streamlit
        # skips its own name check, which a hand-made request with another name would turn into an
        # exception box in place of the uploader. The content is checked anyway (load_result).
        type=["application/json", "json"],
        key=key,
        max_upload_size=probe_result.MAX_RESULT_BYTES // 2**20,
        help=f"Schema-checked. {probe_result.LIMITS} It stays in this browser session only, which keeps "
        f"its {MAX_SESSION_UPLOADS} most recent uploads."
        + (
            f" A tensor-parallel result (`torchrun ... -m gpu_probe --tp 2`) is read too: {tp_result.LIMITS}"
            if accepts_tp
            else ""
        ),
    )
    st.caption(f"Limits: {probe_result.LIMITS[0].lower()}{probe_result.LIMITS[1:]}")
    if file is None:
        return
    seen_key = f"_{key}_seen"  # the upload already handled: a rerun neither re-reads nor re-checks it
    if st.session_state.get(seen_key, (None,))[0] == file.file_id:
        why = st.session_state[seen_key][1]
        if why:
            st.error(why, icon=":material/error:")
        return
    why = None
    files_go_with_the_session(st.session_state)
    try:
        big = too_large(file.size, probe_result.MAX_RESULT_BYTES, "result")
        if big:  # refused unread and unhashed: the browser's limit binds only a browser
            release_upload(file)  # and its bytes leave the server now
            raise ValueError(big)
        result = _parse_upload(file.getvalue())
        is_tp = isinstance(result, tp_result.TPResult)
        if is_tp and not accepts_tp:
            raise ValueError("it is a tensor-parallel result; the Live GPU probe tab shows it")
    except ValueError as err:  # the reader's sentence names the fault; the file is named here
        why = f"**{plain(file.name)}** cannot be shown: {plain(str(err).removeprefix('result: '))}"
        st.error(why, icon=":material/error:")
    else:
        label = with_host(f"uploaded: {file.name[:120]} ({describe(result)})", result)
        uploads = session_tp_results() if is_tp else session_results()
        if label not in uploads:
            uploads[label] = result
            stale = [k for k in uploads if k.startswith("uploaded")][:-MAX_SESSION_UPLOADS]
            for old in stale:
                del uploads[old]
        # The run picker may already be drawn above: the new run becomes the one shown on the next run.
        st.session_state[_pending(select_key)] = label
    st.session_state[seen_key] = (file.file_id, why)
    if why is None:
        st.rerun()


def modes_of(result) -> str:
    """'fusion + graphs, persistent kernel': the modes a run measured, as the page names them."""
    return ", ".join(MODES[m].title for m in result.modes)


def recorded_label(result) -> str:
    """'recorded: 1b preset · fusion + graphs, persistent kernel · NVIDIA H200, 03 Dec 2026 08:58 UTC · host: 5.9 µs a
    torch launch (5.2–7.1)': a shipped run as the Run menus name it, its modes included so that a run can be found
    by what it measured, and its host's speed (`ui.host_index`)."""
    return with_host(_label_before_host(result), result)


def with_host(label: str, result) -> str:
    """A run's label with its host's speed beside it: '… · host: 5.9 µs a torch launch (5.2–7.1)', or '… · host
    not measured' for a file without the index."""
    return f"{label} · {host_phrase(result)}"


def _label_before_host(result) -> str:
    """A shipped run's label before the labels named its host: links made then still open their run."""
    preset = preset_of(result)
    return f"recorded: {preset + ' preset · ' if preset else ''}{modes_of(result)} · {describe(result)}"


def _label_before_modes(result) -> str:
    """A shipped run's label before the labels named the modes: links made then still open their run."""
    preset = preset_of(result)
    return f"recorded: {preset + ' preset, ' if preset else ''}{describe(result)}"


def available_results() -> dict:
    """label -> (result, source): the recorded run, then this session's uploads and live runs."""
    out = {}
    rec, _ = recorded()
    # The other shipped runs come with the default one (a page without it asks for a file).
    for run in (rec, *more_recorded()) if rec is not None else ():
        label = recorded_label(run)
        if label in out:  # two runs alike to the minute: the file tells them apart
            label += f" · {shipped_name(run)}"
        out[label] = (run, "recorded")
    for label, res in session_results().items():
        out[label] = (res, "live" if label.startswith("live") else "uploaded")
    return out


def run_picker(title: str, options: dict, key: str, help_text: str) -> str:
    """A run picker bound to the URL, so a link opens the same run (an upload's label exists only in the
    session that made it: such a link falls back to the first run). Seeded through session state (not
    `index`) so that a new upload can select itself."""
    uploaded = st.session_state.pop(_pending(key), None)  # a run uploaded below the picker, the last run
    if uploaded in options:
        st.session_state[key] = uploaded
    wanted = st.session_state.get(key) or st.query_params.get(key)  # a session's first run: the link's
    if wanted not in options:
        before = {
            old(v[0]): o
            for o, v in options.items()
            if v[1:] == ("recorded",)
            for old in (_label_before_modes, _label_before_host)
        }
        st.session_state[key] = before.get(wanted, next(iter(options)))
    return st.selectbox(title, tuple(options), key=key, help=help_text, bind="query-params")
