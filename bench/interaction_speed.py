"""How fast the page answers a slider move, measured in Chromium.

    python bench/interaction_speed.py [--changes 20]

Starts `streamlit run app.py`, opens the Simulator tab in headless Chromium, focuses
the "Batch size" slider and presses ArrowRight/ArrowLeft `--changes` times (each
press is a new batch value: nothing is served from a previous identical run).
For each press the clock starts in the page at the keydown event and stops at the
last DOM change it caused in the lanes chart or the readouts (the app's script has
finished, the chart is visible and nothing has changed for a quiet period), measured
with the page's `performance.now()` so that Playwright's own round trips are not counted.

The lanes chart is followed by its element key (`sim_lanes`), not by its DOM node:
Streamlit gives a Plotly chart a new element id whenever its figure changes, so every
slider move unmounts the old chart and mounts a new one, which Plotly then draws twice
(hidden at its autosize width, then at the measured width). Watching the old node only
would stop the clock at its removal, which can come before the new chart is drawn.

Prints the median and p90 in ms; the goal is a median of at most 300 ms on a
2-core machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "browser"))
import harness  # noqa: E402

GOAL_MEDIAN_MS = 300.0
QUIET_MS = 150  # no further change for this long after the run ends: the redraw is complete

LANES = ".st-key-sim_lanes"  # the element container of the lanes chart (st.plotly_chart key="sim_lanes")

# Arms a one-shot measurement: keydown starts the clock; mutations inside the lanes chart's
# container and the metric row, and a lanes container or metric being added or removed, move the
# end mark; the result resolves once the server has sent the rerun (counted by
# harness.WEBSOCKET_JS), the script is idle, the lanes have changed and are visible, and the page
# has been quiet for quietMs. The end mark is the last change's own time, so the poll interval
# (pollMs, default 10) only delays noticing it, never moves it.
MEASURE_JS = """([quietMs, lanesSel, pollMs = 10]) => { window.__lbMeasure = new Promise((resolve) => {
  const app = document.querySelector('[data-testid=stApp]');
  const main = document.querySelector('[data-testid=stMain]');
  const watched = lanesSel + ', [data-testid=stMetric]';
  const before = window.__lbMessages;
  let start = null, last = null, lanesChanged = false;
  document.addEventListener('keydown', () => { if (start === null) start = performance.now(); },
                            {capture: true, once: true});
  const holds = (node, sel) => node.nodeType === 1 && (node.matches(sel) || node.querySelector(sel) !== null);
  const changes = new MutationObserver((records) => {
    if (start === null) return;
    for (const r of records) {
      const el = r.target.nodeType === 1 ? r.target : r.target.parentElement;
      let hit = el !== null && el.closest(watched) !== null;
      let lanes = hit && el.closest(lanesSel) !== null;
      for (const node of [...r.addedNodes, ...r.removedNodes]) {
        if (holds(node, watched)) { hit = true; lanes = lanes || holds(node, lanesSel); }
      }
      if (hit) { last = performance.now(); lanesChanged = lanesChanged || lanes; }
    }
  });
  changes.observe(main, {subtree: true, childList: true, attributes: true, characterData: true});
  const visible = () => {
    const plots = document.querySelectorAll(lanesSel + ' .js-plotly-plot');
    return plots.length > 0 && [...plots].every((gd) => gd._fullLayout && gd.style.visibility !== 'hidden');
  };
  const poll = () => {
    const now = performance.now();
    const settled = window.__lbMessages > before && lanesChanged
      && app.getAttribute('data-test-script-state') === 'notRunning'
      && last !== null && now - Math.max(last, window.__lbLastMessageAt) >= quietMs && visible();
    if (settled || (start !== null && now - start > 30000)) {
      changes.disconnect();
      resolve(settled ? last - start : null);
    } else {
      setTimeout(poll, pollMs);
    }
  };
  poll();
}); }"""


def measure(base: str, changes: int, warmup: int = 3) -> list[float]:
    timings = []
    with harness.chromium() as browser:
        page = harness.new_context(browser).new_page()
        harness.open_app(page, base, wait_for="[data-testid=stPlotlyChart]")
        page.wait_for_timeout(1000)
        slider = harness.slider_input(page, "Batch size")
        slider.focus()
        for i in range(warmup + changes):
            # Up for the first half, down for the second: every value is new to this session.
            key = "ArrowRight" if i < (warmup + changes + 1) // 2 + 2 else "ArrowLeft"
            page.evaluate(MEASURE_JS, [QUIET_MS, LANES])
            page.keyboard.press(key)
            elapsed = page.evaluate("() => window.__lbMeasure")
            if i >= warmup and elapsed is not None:
                timings.append(float(elapsed))
    return timings


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=20, help="slider changes to time (default 20)")
    args = parser.parse_args(argv)
    missing = harness.missing_requirements()
    if missing:
        print(f"cannot run: {missing}")
        return 2
    started = time.monotonic()
    with harness.app_server() as base:
        timings = measure(base, args.changes)
    if len(timings) < args.changes:
        print(f"{args.changes - len(timings)} of {args.changes} changes were not redrawn within 30 s")
    if not timings:
        return 1
    median, p90 = statistics.median(timings), percentile(timings, 0.9)
    print(
        f"slider change -> redrawn chart/readouts, {len(timings)} changes in Chromium "
        f"({time.monotonic() - started:.0f} s total, load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} cores)"
    )
    print(
        f"median {median:.0f} ms   p90 {p90:.0f} ms   min {min(timings):.0f} ms   max {max(timings):.0f} ms"
    )
    print(f"goal: median <= {GOAL_MEDIAN_MS:.0f} ms -> {'met' if median <= GOAL_MEDIAN_MS else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
