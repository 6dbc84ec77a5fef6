"""Where one page load's time goes, in Chromium: the timeline behind bench/first_view_speed.py's numbers.

    python bench/first_view_trace.py [--page app|minimal|DIR] [--second-visitor] [--all-scripts]

Starts a fresh server for the page (this checkout's app.py, the minimal page of
bench/twenty_sessions.py, or the app of the checkout in DIR), loads it once in a new browser context
(`--second-visitor`: after a first visitor has loaded it) and prints, in ms from navigation start:
the server's messages (bursts of them on one line, with their bytes), each script the page loads for
an element (Streamlit's browser loads widgets, metrics, charts and tables from scripts of their
own, on first use, behind a React Suspense placeholder each: `stSkeleton`), with when it was asked
for, when a connection took it (Chromium opens six per host) and when it had arrived; the page's long
tasks (50 ms or more: running a large script such as Plotly's 4.7 MB); each React commit that changed
the number of placeholders on the page (read through React's devtools hook); and when the first
readout (`st.metric` value) and the first chart drawn appeared. `--all-scripts` lists every script,
not only the elements' own (`Metric.…js`, `PlotlyChart.…js`, …).

Times are from `performance.now()` in the page; the numbers move with the machine's load, the order
of events much less.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "browser"))
import harness  # noqa: E402
from twenty_sessions import MINIMAL_APP  # noqa: E402 - bench/, this script's own folder

# Installed before the page loads: an event log in window.__lbEvents, [ms, text] pairs.
TIMELINE_JS = """(() => {
  const log = window.__lbEvents = [];
  const at = (what, t = performance.now()) => log.push([t, what]);
  let commits = 0, placeholders = -1, readout = false, chart = false;
  const look = () => {
    if (!readout && document.querySelector('[data-testid=stMetricValue]')) { readout = true; at('FIRST READOUT'); }
    if (!chart && document.querySelector('[data-testid=stPlotlyChart] .main-svg')) { chart = true; at('FIRST CHART DRAWN'); }
  };
  // React calls this hook on every commit when it finds it (as React's devtools do).
  window.__REACT_DEVTOOLS_GLOBAL_HOOK__ = {
    supportsFiber: true, renderers: new Map(), isDisabled: false,
    inject() { return 1; }, checkDCE() {}, onScheduleFiberRoot() {}, onCommitFiberUnmount() {},
    onPostCommitFiberRoot() {},
    onCommitFiberRoot() {
      commits += 1;
      const n = document.querySelectorAll('[data-testid=stMain] [data-testid=stSkeleton]').length;
      if (n !== placeholders) {
        at(`React commit ${commits}: ${n} placeholders`
          + ` (${document.querySelectorAll('[data-testid=stElementContainer]').length} elements)`);
        placeholders = n;
      }
      look();
    },
  };
  const add = WebSocket.prototype.addEventListener;
  WebSocket.prototype.addEventListener = function (type, listener, ...rest) {
    if (type !== 'message') return add.call(this, type, listener, ...rest);
    return add.call(this, type, (e) => { at(`message ${e.data.byteLength || e.data.size || 0}`); return listener(e); }, ...rest);
  };
  new PerformanceObserver((list) => list.getEntries().forEach((e) => {
    at(`long task ${e.duration.toFixed(0)} ms`, e.startTime);
  })).observe({type: 'longtask', buffered: true});
  new PerformanceObserver((list) => list.getEntries().forEach((e) => {
    if (!e.name.endsWith('.js')) return;
    at(`script ${e.name.split('/').pop()}: asked ${e.startTime.toFixed(0)}, connection ${e.requestStart.toFixed(0)},`
      + ` ${(e.encodedBodySize / 1024).toFixed(0)} kB`, e.responseEnd);
  })).observe({type: 'resource', buffered: true});
  document.addEventListener('DOMContentLoaded', () => {
    at('page files parsed (DOMContentLoaded)');
    new MutationObserver(look).observe(document.body, {subtree: true, childList: true, characterData: true});
  });
})()"""

# The scripts Streamlit loads for an element of its own (React.lazy in its index.js), by file name.
ELEMENT_SCRIPTS = (
    "BidiComponent",
    "Checkbox",
    "DataFrame",
    "DownloadButton",
    "Html",
    "IFrame",
    "Metric",
    "NumberInput",
    "PlotlyChart",
    "Radio",
    "Selectbox",
    "Slider",
)


def timeline(script: str, second_visitor: bool) -> list[tuple[float, str]]:
    with harness.app_server_process(script=script) as (base, _server), harness.chromium() as browser:
        if second_visitor:
            first = harness.new_context(browser).new_page()
            harness.open_app(first, base, wait_for="[data-testid=stPlotlyChart] .main-svg")
            first.context.close()
        context = harness.new_context(browser)
        context.add_init_script(TIMELINE_JS)
        page = context.new_page()
        page.goto(base)
        page.wait_for_selector("[data-testid=stPlotlyChart] .main-svg", timeout=90_000)
        harness.wait_idle(page)
        page.wait_for_timeout(1000)
        events = sorted((float(t), what) for t, what in page.evaluate("() => window.__lbEvents"))
        context.close()
    return events


def show(events: list[tuple[float, str]], all_scripts: bool) -> None:
    burst: list[tuple[float, int]] = []

    def flush() -> None:
        if burst:
            size = sum(n for _, n in burst)
            span = f"{burst[0][0]:7.0f}-{burst[-1][0]:.0f}" if len(burst) > 1 else f"{burst[0][0]:7.0f}"
            print(f"{span:>12}  {len(burst)} server message(s), {size / 1024:.1f} kB")
            burst.clear()

    for t, what in events:
        if what.startswith("message "):
            if burst and t - burst[-1][0] > 20:
                flush()
            burst.append((t, int(what.split()[1])))
            continue
        if what.startswith("script ") and not all_scripts:
            if not what.split()[1].startswith(tuple(f"{name}." for name in ELEMENT_SCRIPTS)):
                continue
        flush()
        print(f"{t:12.0f}  {what}")
    flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--page", default="app", help="app (this checkout), minimal, or a checkout's folder")
    parser.add_argument("--second-visitor", action="store_true", help="load it after a first visitor has")
    parser.add_argument("--all-scripts", action="store_true", help="list every script the page loads")
    args = parser.parse_args(argv)
    missing = harness.missing_requirements()
    if missing:
        print(f"cannot run: {missing}")
        return 2
    script, temporary = "app.py", None
    if args.page == "minimal":
        script = temporary = tempfile.mkstemp(prefix="lb-minimal-", suffix=".py")[1]
        Path(script).write_text(MINIMAL_APP)
    elif args.page != "app":
        script = str(Path(args.page).resolve() / "app.py")
    try:
        events = timeline(script, args.second_visitor)
    finally:
        if temporary:
            Path(temporary).unlink(missing_ok=True)
    visit = "a second visitor" if args.second_visitor else "a fresh server's first visitor"
    print(f"{args.page}, {visit}; ms from navigation start (load average {os.getloadavg()[0]:.1f})")
    show(events, args.all_scripts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
