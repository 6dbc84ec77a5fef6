"""Hold a tab's heavy parts until the browser has shown its first screen, so the readouts never wait for them.

Streamlit's browser draws most elements (every widget, `st.metric`, charts, tables, downloads) with a
script it loads when the element first appears, each behind its own React Suspense boundary. React 18
reveals those boundaries together, once the scripts in flight have loaded, and no sooner than 500 ms
after it last showed a new placeholder: one element arriving late, or with a slow script, holds back
every other. Plotly's script is 4.7 MB, and running it blocks the page for 1-3 s on this 2-core
machine. In a Chromium trace of a cold Simulator load (bench/first_view_speed.py's numbers, the
probe in docs/benchmarks.md) the readouts' script had loaded 2.5 s before they appeared: their
reveal waited for the fusion table's 20 scripts, then for Plotly's to run. Nothing inside one script
run orders that, however late in the run the charts are sent.

So a tab's first run draws its first screen only (for the Simulator: the controls and the readouts,
a skeleton where the lanes go), and mounts `_REPORTER` first: an invisible component whose script
runs in the page and reports back once an element of the first screen (`once_shown`, a CSS
selector) is on screen. The rerun that follows, with `seen()` now True, draws everything. Plotly's
script is not even requested before the readouts are on screen.

Without a browser on the other end (AppTest, bare mode) nothing would report: `seen()` is True from
the start and everything is drawn in one run, as before.
"""

from __future__ import annotations

import streamlit as st

SEEN = "_first_screen_seen"  # session key: the browser has reported its first screen

# Components v2 run their script in the app's own document (no iframe). This one waits for the first
# screen's element to be in the page, lets the browser paint it (the next frame), then reports: the
# trigger reruns the script.
_JS = """
export default function ({ data, setTriggerValue }) {
  let done = false;
  const report = () => {
    if (done || !document.querySelector(data.once_shown)) return false;
    done = true;
    requestAnimationFrame(() => setTimeout(() => setTriggerValue("shown", true), 0));
    return true;
  };
  if (report()) return;
  const watch = new MutationObserver(() => { if (report()) watch.disconnect(); });
  watch.observe(document.body, { subtree: true, childList: true, characterData: true });
  return () => watch.disconnect();
}
"""
_REPORTER = st.components.v2.component("launch_bound.first_screen", js=_JS)


def _mark_seen() -> None:
    st.session_state[SEEN] = True


def _browser_attached() -> bool:
    """Whether a browser is on the other end: it reports the page's address (None under AppTest)."""
    return st.context.url is not None


def seen() -> bool:
    """Whether this session's browser has shown the first screen (always True with no browser attached)."""
    return bool(st.session_state.get(SEEN)) or not _browser_attached()


def report(once_shown: str) -> None:
    """Mount the reporter, first thing in the run, while `seen()` is False (its script, like any element's,
    is fetched when it arrives: early, it loads with the rest of the first screen's). It reports once an
    element matching `once_shown` is on screen, and the report reruns the script."""
    _REPORTER(key="first_screen", data={"once_shown": once_shown}, on_shown_change=_mark_seen, height=0)
