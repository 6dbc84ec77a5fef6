"""Hold a tab's heavy parts until the browser has shown its first screen, so the readouts never wait for them.

Streamlit's browser draws most elements (every widget, `st.metric`, charts, tables, downloads) with a
script of their own, loaded when such an element first appears, behind a React Suspense placeholder
each (`stSkeleton`); Chromium fetches those scripts six at a time. In traces of cold loads of the
old page (`python bench/first_view_trace.py --page DIR`), the readouts appeared 1.5-4.8 s after
their own script had arrived: React revealed the tab's ~33 placeholders together, once the last
script of the burst (the fusion table's, ~20 files) had come, and in one trace only after Plotly's
4.7 MB script had run, a 3 s task on this 2-core machine. No order of elements within one script
run avoids that: whatever the run sends, the browser asks for all of it at once.

So a tab's first run draws its first screen only (for the Simulator: the controls and the readouts,
a skeleton where the lanes go) and mounts `_REPORTER` after it: an invisible component whose script
runs in the page and reports back once an element of the first screen (`once_shown`, a CSS selector)
is on screen. The rerun that follows, with `seen()` now True, draws everything. Plotly's script is
not asked for before the readouts are on screen (tests/browser/test_first_view_order.py).

Without a browser on the other end (AppTest, bare mode) nothing would report: `seen()` is True from
the start and everything is drawn in one run, as before.

While the first screen is up, a value the server gives a widget in answer to a reader's move (the
Simulator's batch box and slider following each other, a new preset's Advanced figures) is held
back: `write` holds it, `value` reads it, `apply_held` writes it in the first run of the whole page.
(What a link's first run settles needs no holding: the report leaves after that run has come back.)
The report reruns the script with every widget's value as the browser holds it when it reports; a
value the server had written in between (the slider following a batch typed a moment earlier, or
the number box following the slider) would not be in the browser yet, would come back as the old
one, look like a move, and undo the reader's batch (tests/test_first_paint.py,
tests/browser/test_first_view_order.py). With no such write to miss, what the report brings is the
reader's own.
"""

from __future__ import annotations

import streamlit as st

SEEN = "_first_screen_seen"  # session key: the browser has reported its first screen
HELD = "_first_screen_held"  # session key: {widget key: (value to write, the widget's value then)}
COMPLETING = "_first_screen_completing"  # session key: this run is the one the report started

# Components v2 run their script in the app's own document (no iframe). This one waits for the first
# screen's element to be in the page, lets the browser paint it (the next frame), then reports: the
# trigger reruns the script.
_JS = """
export default function ({ data, setTriggerValue }) {
  let done = false, timer = null;
  const report = () => {
    if (done || !document.querySelector(data.once_shown)) return false;
    done = true;
    requestAnimationFrame(() => { timer = setTimeout(() => setTriggerValue("shown", true), data.delay_ms || 0); });
    return true;
  };
  const watch = new MutationObserver(() => { if (report()) watch.disconnect(); });
  if (!report()) watch.observe(document.body, { subtree: true, childList: true, characterData: true });
  // Unmounted before it reported (the reader opened another tab first): no report, so the rest of this tab,
  // Plotly's script with it, is never asked for while the other tab draws.
  return () => { watch.disconnect(); if (timer !== null) clearTimeout(timer); };
}
"""
_REPORTER = st.components.v2.component("launch_bound.first_screen", js=_JS)


def _mark_seen(scope: str = "") -> None:
    st.session_state[SEEN + scope] = True
    st.session_state[COMPLETING] = True


def just_reported() -> bool:
    """Whether this run is the one the browser's report started: the first screen becoming the whole page
    (what the first screen showed once, such as a link's notice, is shown again). True once: the caller
    takes it (ui/url_params.py, at the top of every run)."""
    return bool(st.session_state.pop(COMPLETING, False))


def _browser_attached() -> bool:
    """Whether a browser is on the other end: it reports the page's address (None under AppTest)."""
    return st.context.url is not None


def seen(scope: str = "") -> bool:
    """Whether this session's browser has shown the first screen (always True with no browser attached).
    `scope`: another tab's own first screen ('calibration'), reported apart from the Simulator's."""
    return bool(st.session_state.get(SEEN + scope)) or not _browser_attached()


REACTION_MS = (
    250  # the Simulator's report waits this long after its first screen: a reader's first click beats it
)


def report(once_shown: str, scope: str = "", delay_ms: int = 0) -> None:
    """Mount the reporter while `seen(scope)` is False; it reports once an element matching `once_shown` is on
    screen, and the report reruns the script (outside any fragment, so the whole script).

    Mount it right after the first screen's last element, in the same run: its element then comes in the
    same burst of messages, and the browser asks for its scripts after the first screen's. `delay_ms`: how long
    after the first screen is painted it reports; a tab opened before then unmounts it, and it never does."""
    _REPORTER(
        key="first_screen" + (f"_{scope}" if scope else ""),
        data={"once_shown": once_shown, "delay_ms": delay_ms},
        on_shown_change=lambda: _mark_seen(scope),
        height=0,
    )


def write(key: str, value) -> None:
    """Set widget `key` to `value`: now once the first screen has been shown, else held for the run that
    shows the whole page (see the module's doc). Call it where the widget's value may be written: in a
    callback, or before the widget in the run."""
    if seen():
        st.session_state[key] = value
        return
    held = st.session_state.setdefault(HELD, {})
    if st.session_state.get(key) == value:
        held.pop(key, None)
    else:
        held[key] = (value, st.session_state.get(key))


def value(key: str, shown):
    """Widget `key`'s value for this run: a write held back for it, unless the reader has changed the
    widget since (then `shown`, what the widget returned, and the held write is dropped)."""
    held = st.session_state.get(HELD) or {}
    if key in held:
        wanted, then = held[key]
        if shown == then:
            return wanted
        del held[key]
    return shown


def apply_held() -> None:
    """Once the first screen has been shown: write what was held back, before any widget of the run is drawn
    (a held write whose widget the reader has changed since is dropped)."""
    if not seen() or HELD not in st.session_state:
        return
    for key, (wanted, then) in st.session_state.pop(HELD).items():
        if st.session_state.get(key) == then:
            st.session_state[key] = wanted
