"""What the server holds for uploads, and when it lets go: the bytes, what was parsed from them, freed memory.

Streamlit keeps every uploaded file's bytes in its uploaded-file manager until the browser deletes the file
or the session shuts down. A session whose browser went away is kept for `server.disconnectedSessionTTL`
(2 minutes) to reconnect and then dropped without shutting down, so its files were never removed: 5 refused
200 MB uploads stayed in the server for good (issue 24). Here:

- `release_upload`: the bytes go as soon as the page has read (or refused) them;
- `when_session_ends`: a callback run when the session's state is collected, however the session ended; it
  removes the session's files from the manager, and the page's own per-session holdings with them;
- `ByteBudget`: a server-wide LRU of parsed uploads bounded by bytes (`deep_nbytes`), not by count;
- `return_freed_memory`: glibc keeps freed arenas mapped; `malloc_trim` hands them back to the OS, so
  the server's resident memory falls back once a large trace has been read or dropped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable

import numpy as np


def _session():
    """(session id, Streamlit's uploaded-file manager) of the running script, or (None, None) outside one."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx(suppress_warning=True)
    if ctx is None:
        return None, None
    return ctx.session_id, getattr(ctx, "uploaded_file_mgr", None)


def release_upload(*files) -> None:
    """Drop these uploaded files' bytes from Streamlit's manager now (the widget then reads as empty)."""
    session_id, manager = _session()
    remove = getattr(manager, "remove_file", None)  # the in-memory manager has it; others keep theirs
    if remove is None:
        return
    for f in files:
        file_id = getattr(f, "file_id", None)
        if file_id:
            remove(session_id=session_id, file_id=file_id)


class _SessionEnd:
    """Kept in a session's state: collected with it, when its finalizer runs the session's clean-ups."""

    def __init__(self, session_id: str, manager) -> None:
        self.callbacks: list[Callable[[], None]] = []
        weakref.finalize(self, _session_ended, session_id, manager, self.callbacks)


def _session_ended(session_id, manager, callbacks) -> None:
    # A finalizer runs wherever the collector happens to run, perhaps inside a lock the clean-up needs
    # (the file manager's, the budget's): the clean-up runs on a thread of its own.
    threading.Thread(
        target=_clean_up, args=(session_id, manager, callbacks), name="session-end", daemon=True
    ).start()


def _clean_up(session_id, manager, callbacks) -> None:
    """What AppSession.shutdown releases, for a session dropped without it, and the page's own holdings."""
    for callback in callbacks:
        callback()
    if manager is not None and session_id is not None:
        manager.remove_session_files(session_id)
        from streamlit import runtime

        if runtime.exists():  # the session's media and deferred downloads (their callables hold steps)
            media = runtime.get_instance().media_file_mgr
            media.clear_session_refs(session_id)
            media.remove_orphaned_files()
    return_freed_memory()


def files_go_with_the_session(state) -> _SessionEnd:
    """However this session ends, its uploaded files leave Streamlit's manager when its state is collected.
    `state` is st.session_state; call it wherever a session receives a file."""
    token = state.get("_session_end")
    if token is None:
        session_id, manager = _session()
        token = state["_session_end"] = _SessionEnd(session_id, manager)
    return token


def when_session_ends(state, key: str, callback: Callable[[], None]) -> None:
    """Run `callback` (once) when this session's state is collected, and drop its files. `key` names the
    callback so that a rerun does not register it twice. The callback must not refer to the session."""
    token = files_go_with_the_session(state)
    registered = state.setdefault("_session_end_keys", set())
    if key not in registered:
        registered.add(key)
        token.callbacks.append(callback)


# -- parsed uploads held server-wide, bounded by bytes ----------------------------------------------------
class ByteBudget:
    """key -> value, least recently used first out while the values' bytes exceed `budget` or there are more
    than `max_entries`. The newest entry stays even alone over budget (the page is drawing it)."""

    def __init__(self, budget: int, max_entries: int):
        self.budget, self.max_entries = budget, max_entries
        self._entries: OrderedDict[str, tuple[object, int]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def total(self) -> int:
        with self._lock:
            return sum(n for _, n in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str):
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: str, value, nbytes: int) -> None:
        with self._lock:
            self._entries[key] = (value, nbytes)
            self._entries.move_to_end(key)
            dropped = self._evict()
        if dropped:
            return_freed_memory()

    def make_room(self, nbytes: int) -> None:
        """Before something of about `nbytes` is read: the least recently used go until it would fit."""
        with self._lock:
            dropped = 0
            while self._entries and sum(n for _, n in self._entries.values()) + nbytes > self.budget:
                self._entries.popitem(last=False)
                dropped += 1
        if dropped:
            return_freed_memory()

    def drop(self, keys) -> None:
        with self._lock:
            dropped = [self._entries.pop(k, None) for k in list(keys)]
        if any(d is not None for d in dropped):
            return_freed_memory()

    def clear(self) -> None:
        self.drop(list(self._entries))

    def _evict(self) -> int:
        dropped = 0
        while len(self._entries) > self.max_entries or (
            len(self._entries) > 1 and sum(n for _, n in self._entries.values()) > self.budget
        ):
            self._entries.popitem(last=False)
            dropped += 1
        return dropped


def deep_nbytes(obj) -> int:
    """What an object holds in memory: numpy buffers (each counted once, views by their base), strings,
    numbers and the containers, dataclasses and objects' attributes around them."""
    seen: set[int] = set()
    total = 0
    stack = [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, np.ndarray):
            base = o
            while isinstance(base.base, np.ndarray):
                base = base.base
            if base is not o and id(base) in seen:
                continue
            seen.add(id(base))
            total += base.nbytes + 112
            if base.dtype == object:
                stack.extend(base.ravel().tolist())
        elif isinstance(o, (str, bytes, int, float, bool)) or o is None:
            total += sys.getsizeof(o)
        elif isinstance(o, (tuple, list, set, frozenset)):
            total += sys.getsizeof(o)
            try:  # a million kernel names are mostly the same few strings: each distinct one once
                stack.extend(set(o))
            except TypeError:  # unhashable items
                stack.extend(o)
        elif isinstance(o, dict):
            total += sys.getsizeof(o)
            stack.extend(o.keys())
            stack.extend(o.values())
        else:
            total += sys.getsizeof(o)
            stack.extend(getattr(o, "__dict__", {}).values())
            for slot in getattr(type(o), "__slots__", ()):
                stack.append(getattr(o, slot, None))
    return total


# -- freed memory back to the OS --------------------------------------------------------------------------
_LIBC = ctypes.CDLL(ctypes.util.find_library("c")) if sys.platform.startswith("linux") else None


def return_freed_memory() -> None:
    """glibc's malloc_trim(0): memory Python freed goes back to the OS (a no-op elsewhere)."""
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)
