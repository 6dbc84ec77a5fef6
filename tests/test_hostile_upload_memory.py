"""Issue 24, item 2: what the server holds for uploads is released -- the bytes once read or refused, a
session's files and parsed traces when the session ends however it ended, freed memory back to the OS --
and the parsed traces of all sessions stay within a byte budget (ui/uploads.py). The server's RSS under
the issue's two scenarios is measured by bench/upload_memory.py."""

from __future__ import annotations

import gc
import threading

import numpy as np
from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager
from streamlit.runtime.uploaded_file_manager import UploadedFile, UploadedFileRec

import ui.uploads as uploads


def _manager_with(session_id: str, *files: tuple[str, bytes]) -> MemoryUploadedFileManager:
    manager = MemoryUploadedFileManager("/upload")
    for file_id, data in files:
        manager.add_file(session_id, UploadedFileRec(file_id, f"{file_id}.json", "application/json", data))
    return manager


def test_an_upload_read_or_refused_leaves_streamlits_file_manager(monkeypatch):
    manager = _manager_with("s", ("big", b" " * 10**6), ("kept", b"{}"))
    monkeypatch.setattr(uploads, "_session", lambda: ("s", manager))
    (rec,) = manager.get_files("s", ["big"])
    uploads.release_upload(UploadedFile(rec, None))
    assert manager.get_files("s", ["big"]) == [] and len(manager.get_files("s", ["kept"])) == 1


def test_a_sessions_files_and_holdings_go_when_its_state_is_collected(monkeypatch):
    """Streamlit drops a disconnected session from its storage after server.disconnectedSessionTTL without
    shutting it down, so its uploaded files stayed in the manager for good; the page's hook removes them."""
    manager = _manager_with("s", ("refused", b" " * 10**6))
    monkeypatch.setattr(uploads, "_session", lambda: ("s", manager))
    budget = uploads.ByteBudget(10**9, 8)
    budget.put("upload-1", object(), 100)
    state: dict = {}
    ids = {"upload-1"}
    uploads.when_session_ends(state, "tr_uploads", lambda: budget.drop(ids))
    uploads.when_session_ends(state, "tr_uploads", lambda: budget.drop(ids))  # a rerun registers nothing new
    assert len(state["_session_end"].callbacks) == 1
    del state
    gc.collect()
    for thread in [t for t in threading.enumerate() if t.name == "session-end"]:
        thread.join(timeout=10)
    assert manager.get_files("s", ["refused"]) == [] and len(budget) == 0


def test_the_byte_budget_drops_the_least_recently_used_first_and_keeps_the_newest():
    budget = uploads.ByteBudget(250, 8)
    for key in "abc":
        budget.put(key, key, 100)
    assert budget.get("a") is None and budget.get("b") == "b"  # "b" now the most recently used
    budget.put("d", "d", 100)
    assert budget.get("c") is None and {budget.get("b"), budget.get("d")} == {"b", "d"}
    budget.put("huge", "huge", 10**6)  # over budget alone: it stays, everything else goes
    assert len(budget) == 1 and budget.get("huge") == "huge"
    small = uploads.ByteBudget(10**9, 2)  # and at most max_entries
    for key in "abc":
        small.put(key, key, 1)
    assert len(small) == 2


def test_deep_nbytes_counts_buffers_once_and_strings():
    column = np.zeros(1_000_000)
    held = {"column": column, "view": column[10:], "names": ("kernel",) * 1000}
    counted = uploads.deep_nbytes(held)
    assert 8_000_000 <= counted < 8_000_000 + 20_000  # the view shares the column's buffer


def test_freed_memory_goes_back_without_error():
    uploads.return_freed_memory()  # glibc's malloc_trim; a no-op where there is none


def test_a_traces_download_button_does_not_keep_its_step_alive(monkeypatch):
    """Streamlit keeps a download button's callable for the whole session: the trace tab's must not hold the
    step (a 1.4 M-kernel step is ~0.2 GB), or an upload dropped from the budget stays in memory per session."""
    import json

    import streamlit as st

    from core.timeline import Timeline
    from ui.common import chrome_trace_download

    kept = {}
    monkeypatch.setattr(st, "download_button", lambda label, data, **kw: kept.setdefault("data", data))
    timeline = Timeline([0.0], [1.0], ["launch"], [1.0], [1.0], ["k"], launched_by=[0])
    chrome_trace_download(timeline, "Download", "x.json", "k", weak=True)
    assert "traceEvents" in kept["data"]()  # while the step is held, the download is the step
    del timeline
    gc.collect()
    assert "no longer held" in json.loads(kept["data"]())["error"]


def test_room_is_made_before_a_large_read():
    budget = uploads.ByteBudget(1000, 8)
    for key in "abc":
        budget.put(key, key, 300)
    budget.make_room(500)  # 900 held + 500 coming: the two oldest go
    assert len(budget) == 1 and budget.get("c") == "c"
    budget.make_room(5000)  # larger than the budget: nothing else is held while it is read
    assert len(budget) == 0
