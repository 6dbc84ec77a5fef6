"""The probe tab's "Measure on this GPU": the probe run live, one run at a time per server.

The model, its KV pool and the captured CUDA graphs are built once per server and kept
(st.cache_resource); every session measures with them under one lock, because the graphs'
static input and output buffers are shared. torch is imported only here, and only when a
measurement starts (through `gpu_probe.live`).
"""

from __future__ import annotations

import threading

import streamlit as st

from core.step_plan import probe_modes
from ui.common import plain
from ui.probe_results import describe, session_results, with_host

LIVE_BATCHES = (1, 8, 64, 256)
# Measured, not hoped: the recorded H200 run (these batches, all modes) took 225-231 s from the CLI,
# and torch.compile compiles once per batch size (about 30 s each).
LIVE_DURATION = (
    "several minutes (about 3¾ on an H200, where torch.compile alone takes about 30 s per batch size)."
)


@st.cache_resource(show_spinner=False)
def _live_store() -> dict:
    # Shared by every session: the graphs' static buffers are too, so one lock serialises
    # capture and replay, and a finished measurement is kept for the next reader.
    return {"lock": threading.Lock(), "results": {}}


@st.cache_resource(show_spinner=False, max_entries=1)  # one model + graph set on the GPU at a time
def _probe_session(preset: str, rows: int, _progress):
    from gpu_probe import live

    return live.open_session(preset, rows=rows, progress=_progress)


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
                status.update(label="Warming up…")
                status.write(
                    f"Measuring all {len(probe_modes())} modes at {len(key)} batch sizes takes {LIVE_DURATION}"
                )

                def progress(message: str) -> None:
                    status.update(label=_phase(message))
                    status.write(plain(message))  # text: never markdown

                try:
                    # Built under the lock, once: sized for the default batches, so other settings reuse it.
                    session = _probe_session("small", max(256, *key), progress)
                    store["results"][key] = live.measure(
                        "small", batches=key, modes=probe_modes(), progress=progress, session=session
                    )
                    if getattr(session, "errors", None):
                        _probe_session.clear()  # built only in part (e.g. out of memory): build afresh next time
                except Exception as err:
                    if "out of memory" in str(err).lower() or type(err).__name__ == "OutOfMemoryError":
                        status.update(label="Out of GPU memory", state="error")
                        st.error(
                            "The GPU ran out of memory while measuring. Free memory held by other "
                            "processes, or measure smaller batches with `python -m gpu_probe`."
                        )
                    else:
                        status.update(label="The measurement failed", state="error")
                        st.error(f"The measurement failed: {plain(err)}")
                    return None
        status.update(label="Measured on this GPU", state="complete", expanded=False)
    result = store["results"][key]
    session_results()[with_host(f"live: {describe(result)}", result)] = result
    return result
