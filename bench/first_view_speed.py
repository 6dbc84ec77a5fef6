"""How fast the page answers a newcomer's first views, measured in Chromium (issue 14, item 5; issue 24, item 6).

    python bench/first_view_speed.py [--runs 5] [--changes 6] [--only load,calibration,calibration-warm,controls]
                                     [--baseline DIR]

Goals, each checked on the median of several runs:
- cold page load to the first readout <= 1.3 x a minimal Streamlit page's, measured side by side:
  each run starts a fresh server for this app and one for the minimal page (`bench/twenty_sessions.py`'s:
  a slider, one metric, a three-bar Plotly chart), in alternating order, and loads each in a new
  browser context; from navigation start to the first `st.metric` value on the page. The minimal
  page is what Streamlit and Chromium cost on this machine before any app code, so the ratio is what
  the app adds, whatever the machine's load. Also shown: the same for a second visitor to the same
  server, and when the first chart is drawn (the charts come after the readouts, by design);
- first Calibration tab open <= 1.0 s and <= 0.6 x a minimal page's cold load, measured side by side
  (issue 29, item 7): a fresh server each run (no fit cached), the Simulator tab loaded, then a click
  on "Calibration"; to the last change the click causes in the page (the leave-one-out readout shown,
  every chart drawn, then a quiet period); in turn with it, the minimal page loaded on a fresh server
  of its own, to its first readout;
- the Calibration tab in a new session on a warm server <= 0.6 x a minimal page's cold load (issue 37): one server,
  warmed by a first visitor who opened the page and then the Calibration tab (the fit is cached); then each run a
  new visitor (a new browser context: a new Streamlit session) opens the page, waits for its first readout and
  clicks "Calibration" at once, timed as above to the leave-one-out readout, every chart drawn and a quiet period;
  in turn with it, the minimal page's cold load on a fresh server of its own (`--only calibration-warm`);
- every other control change <= 300 ms, on one server, each timed the same way from the action:
  the Live GPU probe's "Show the whole step" toggle (on and off in turn), its batch -> 256 with the
  whole step shown, and the Bucketing tab's graph-memory budget (one step of its slider, up and
  down in turn).

Python's bytecode cache: this machine's environment sets PYTHONDONTWRITEBYTECODE=1, so a server
would compile every module of the app from source at its first import (0.1-0.2 s of a cold first
run here), which no installed app does. The servers get a bytecode cache in a temporary folder
instead, compiled before the runs (`--compile-each-start` leaves it off).

`--baseline DIR` adds a third page to the loads, interleaved with the other two: the app of another
checkout (e.g. `git archive main | tar -x -C DIR`), for before/after numbers from one run.

Times are taken in the page (`performance.now()`), so Playwright's round trips are not counted.
Prints each measurement's median, worst and runs, the ratio to the minimal page or to the goal, and
the machine's load average beside them (the numbers are noisy on a shared 2-core machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "browser"))
import harness  # noqa: E402
from twenty_sessions import MINIMAL_APP  # noqa: E402 - bench/, this script's own folder

GOAL_RATIO = 1.3  # first readout: at most this times the minimal page's, measured side by side
CALIBRATION_RATIO = (
    0.6  # first Calibration open: at most this times the minimal page's cold load (issue 29, item 7)
)
MINIMAL = "minimal Streamlit page"
QUIET_MS = 300  # a chart draws a moment after the run; nothing for this long: the view is complete
POLL_MS = 20
CHART = "[data-testid=stPlotlyChart]"
LOO_METRIC = ("[data-testid=stMetricLabel]", "leave-one-out")  # (selector, text it holds)

# Installed before the page loads: the times (from navigation start) of the first readout value and
# of the first Plotly chart drawn.
FIRST_READOUT_JS = """(() => {
  window.__lbFirstReadout = null;
  window.__lbFirstChart = null;
  const seen = () => {
    const now = performance.now();
    const v = document.querySelector('[data-testid=stMetricValue]');
    if (v && v.textContent.trim() && window.__lbFirstReadout === null) window.__lbFirstReadout = now;
    if (window.__lbFirstChart === null && document.querySelector('[data-testid=stPlotlyChart] .main-svg')) {
      window.__lbFirstChart = now;
    }
    return window.__lbFirstReadout !== null && window.__lbFirstChart !== null;
  };
  const watch = new MutationObserver(() => { if (seen()) watch.disconnect(); });
  document.addEventListener('DOMContentLoaded', () => {
    watch.observe(document.body, {subtree: true, childList: true, characterData: true});
  });
})()"""

# Armed before an action: the clock starts at the action's first pointer or key event; every change
# in the main area moves the end mark; done once the server has answered (harness.WEBSOCKET_JS),
# the script is idle, `need` ([selector, text], or null) is on the page, every chart is drawn and
# visible, and nothing has changed for quietMs. Resolves to end - start in ms, or null after 30 s
# (60 s from arming when the action never came).
ACTION_JS = """([quietMs, pollMs, need]) => { window.__lbAction = new Promise((resolve) => {
  const app = document.querySelector('[data-testid=stApp]');
  const main = document.querySelector('[data-testid=stMain]');
  const before = window.__lbMessages;
  let start = null, last = null;
  const armed = performance.now();
  window.__lbNeedAt = null;
  const needed = () => {
    const found = !need || [...document.querySelectorAll(need[0])].some((el) => el.textContent.includes(need[1]));
    if (found && need && start !== null && window.__lbNeedAt === null) window.__lbNeedAt = performance.now() - start;
    return found;
  };
  const begin = () => { if (start === null) { start = performance.now(); last = start; } };
  for (const type of ['pointerdown', 'keydown']) {
    document.addEventListener(type, begin, {capture: true, once: true});
  }
  const changes = new MutationObserver(() => { if (start !== null) { last = performance.now(); needed(); } });
  changes.observe(main, {subtree: true, childList: true, attributes: true, characterData: true});
  const drawn = () => [...main.querySelectorAll('.js-plotly-plot')].every(
    (gd) => gd._fullLayout && gd.style.visibility !== 'hidden');
  const poll = () => {
    const now = performance.now();
    const settled = start !== null && window.__lbMessages > before
      && app.getAttribute('data-test-script-state') === 'notRunning'
      && needed() && drawn()
      && now - Math.max(last, window.__lbLastMessageAt) >= quietMs;
    if (settled || (start !== null && now - start > 30000) || now - armed > 60000) {
      changes.disconnect();
      resolve(settled ? last - start : null);
    } else {
      setTimeout(poll, pollMs);
    }
  };
  poll();
}); }"""


def timed(page, action, need: tuple[str, str] | None = None) -> float | None:
    """ms from `action`'s first pointer/key event to the end of what it changed on the page."""
    page.evaluate(ACTION_JS, [QUIET_MS, POLL_MS, list(need) if need else None])
    action()
    return page.evaluate("() => window.__lbAction")


def needed_at(page) -> float | None:
    """After `timed(..., need=...)`: ms from the action to when `need` was first on the page."""
    return page.evaluate("() => window.__lbNeedAt")


def new_page(browser):
    context = harness.new_context(browser)
    context.add_init_script(FIRST_READOUT_JS)
    return context.new_page()


# Where a load's time goes: the page's own files parsed (DOMContentLoaded), the server's first
# message over the websocket, the first readout, the first chart drawn.
PHASES_JS = """() => [performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd,
  window.__lbFirstMessageAt, window.__lbFirstReadout, window.__lbFirstChart]"""
PHASES = ("page files parsed", "the server's first message", "first readout", "first chart drawn")
READOUT, CHART_DRAWN = 2, 3  # indexes in PHASES
VISITS = ("cold", "second")  # a fresh server's first visitor, then a second visitor to the same server


def cold_loads(browser, runs: int, scripts: dict[str, str]) -> dict[str, dict[str, list[list[float]]]]:
    """{page: {visit: [ms from navigation start to each of PHASES] per run}}. Each run starts a fresh
    server for each page in `scripts` ({name: script the server runs}), in an order that rotates
    from run to run, and loads it twice: its first visitor, then a second one."""
    out = {name: {visit: [] for visit in VISITS} for name in scripts}
    names = list(scripts)
    for run in range(runs):
        for name in names[run % len(names) :] + names[: run % len(names)]:
            with harness.app_server_process(script=scripts[name]) as (base, _server):
                for visit in VISITS:
                    page = new_page(browser)
                    page.goto(base)
                    page.wait_for_function(
                        "() => window.__lbFirstReadout !== null && window.__lbFirstChart !== null",
                        timeout=90_000,
                    )
                    out[name][visit].append([float(v or 0) for v in page.evaluate(PHASES_JS)])
                    harness.wait_idle(page)
                    page.context.close()
    return out


def side_by_side(what: str, pages: dict[str, list[list[float]]], phase: int, goal: float | None) -> None:
    """Each page's median and worst of one phase, and each page's ratio to the minimal page's."""
    load = os.getloadavg()
    print(f"{what} (load average {load[0]:.1f} now, {load[2]:.1f} over 15 min):")
    floor = [r[phase] for r in pages[MINIMAL]]
    for name, runs in pages.items():
        got = [r[phase] for r in runs]
        median, worst = statistics.median(got), max(got)
        line = f"  {name:<34} median {median:6.0f} ms  worst {worst:6.0f} ms"
        if name != MINIMAL:
            ratio, worst_ratio = median / statistics.median(floor), worst / max(floor)
            line += f"   / minimal: median {ratio:4.2f} x  worst {worst_ratio:4.2f} x"
            if goal is not None:
                line += f"  goal <= {goal:.1f} x: {'met' if ratio <= goal else 'MISSED'}"
        print(f"{line}   runs: {', '.join(f'{v:.0f}' for v in got)}")


def phases(name: str, runs: list[list[float]]) -> None:
    """The median of each phase of one page's loads."""
    medians = [statistics.median(r[i] for r in runs) for i in range(len(PHASES))]
    print(
        f"    {name}: " + ", ".join(f"{what} {ms:.0f}" for what, ms in zip(PHASES, medians)) + " ms (medians)"
    )


def bytecode_cache(checkouts: list[Path]) -> None:
    """Give every server started from here a bytecode cache of the checkouts' packages, compiled now."""
    os.environ["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="lb-pycache-")
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    for checkout in checkouts:
        packages = [str(checkout / d) for d in ("core", "sim", "ui", "gpu_probe") if (checkout / d).is_dir()]
        subprocess.run([sys.executable, "-m", "compileall", "-q", *packages], check=True)


def tab(page, label: str):
    return page.locator("[data-testid=stTab]", has_text=label).first


def first_calibration_opens(browser, runs: int, minimal: str) -> tuple[list[float | None], list[float]]:
    """(first Calibration opens, the minimal page's cold loads to its first readout), run by run in turn: each
    open on a fresh server, the Simulator loaded, then a click on the tab; each minimal load on a fresh server."""
    opens, loads = [], []
    for _ in range(runs):
        with harness.app_server_process(script=minimal) as (base, _server):
            page = new_page(browser)
            page.goto(base)
            page.wait_for_function("() => window.__lbFirstReadout !== null", timeout=90_000)
            loads.append(float(page.evaluate("() => window.__lbFirstReadout")))
            page.context.close()
        with harness.app_server() as base:
            page = new_page(browser)
            harness.open_app(page, base, wait_for=CHART)
            page.wait_for_timeout(500)
            opens.append(timed(page, lambda: tab(page, "Calibration").click(), need=LOO_METRIC))
            page.context.close()
    return opens, loads


def warm_calibration_opens(browser, runs: int, minimal: str) -> tuple[list, list, list[float]]:
    """(to the leave-one-out readout, to the last change: Calibration opens in a new session on a warm server; the
    minimal page's cold loads), run by run in turn."""
    readouts, opens, loads = [], [], []
    with harness.app_server() as base:
        warm = new_page(browser)  # the server's first visitor: its caches and the fit are made now
        harness.open_app(warm, base, wait_for=CHART)
        timed(warm, lambda: tab(warm, "Calibration").click(), need=LOO_METRIC)
        warm.context.close()
        for _ in range(runs):
            with harness.app_server_process(script=minimal) as (minimal_base, _server):
                page = new_page(browser)
                page.goto(minimal_base)
                page.wait_for_function("() => window.__lbFirstReadout !== null", timeout=90_000)
                loads.append(float(page.evaluate("() => window.__lbFirstReadout")))
                page.context.close()
            page = new_page(browser)
            page.goto(base)
            page.wait_for_function("() => window.__lbFirstReadout !== null", timeout=90_000)
            opens.append(timed(page, lambda page=page: tab(page, "Calibration").click(), need=LOO_METRIC))
            readouts.append(needed_at(page))
            page.context.close()
    return readouts, opens, loads


def ratio_line(loads: list[float], opens: list[float | None]) -> None:
    got = [v for v in opens if v is not None]
    if not got:
        return
    ratio, worst = statistics.median(got) / statistics.median(loads), max(got) / statistics.median(loads)
    print(
        f"{'  / the minimal page cold load to its first readout':<58} median {statistics.median(loads):6.0f} ms"
        f"  ratio {ratio:4.2f} x (worst {worst:4.2f} x)  goal <= {CALIBRATION_RATIO:.1f} x: "
        f"{'met' if ratio <= CALIBRATION_RATIO else 'MISSED'}  runs: {', '.join(f'{v:.0f}' for v in loads)}"
    )


def control_changes(browser, changes: int) -> dict[str, list[float | None]]:
    results: dict[str, list[float | None]] = {}
    with harness.app_server() as base:
        page = new_page(browser)
        harness.open_app(page, base, "tab=Live+GPU+probe", wait_for=CHART)
        page.wait_for_timeout(500)
        whole = results.setdefault("probe: Show the whole step (on, off in turn)", [])
        for _ in range(changes):
            whole.append(timed(page, lambda: harness.click_toggle(page, "Show the whole step")))
        if not harness.toggle_state(page, "Show the whole step"):
            harness.rerun_after(page, lambda: harness.click_toggle(page, "Show the whole step"))
        batch = results.setdefault("probe: batch -> 256 with the whole step shown", [])
        box = page.locator("[data-testid=stSelectbox]").filter(has_text="Batch size").first
        for i in range(changes):
            target = "256" if i % 2 == 0 else "1"
            box.click()
            option = page.locator("[role=option]", has_text=target).first
            option.wait_for()
            elapsed = timed(page, option.click)
            if target == "256":
                batch.append(elapsed)
            else:
                page.wait_for_timeout(200)

        budget = results.setdefault("bucketing: graph memory budget, one slider step", [])
        harness.open_app(page, base, "tab=Bucketing", wait_for=CHART)
        page.wait_for_timeout(500)
        slider = harness.slider_input(page, "Graph memory budget (MiB)")
        slider.focus()
        for i in range(changes):
            key = "ArrowRight" if i % 2 == 0 else "ArrowLeft"
            budget.append(timed(page, lambda key=key: page.keyboard.press(key)))
        page.context.close()
    return results


def report(what: str, values: list[float | None], goal_ms: float) -> None:
    got = [v for v in values if v is not None]
    if not got:
        print(f"{what:<58} no run finished within 30 s")
        return
    median = statistics.median(got)
    verdict = "met" if median <= goal_ms else "MISSED"
    runs = ", ".join("-" if v is None else f"{v:.0f}" for v in values)
    print(
        f"{what:<58} median {median:6.0f} ms  goal <= {goal_ms:.0f} ms  {median / goal_ms:4.2f} x  "
        f"{verdict:<6}  runs: {runs}  (load {os.getloadavg()[0]:.1f})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh-server runs for the first views (5)")
    parser.add_argument("--changes", type=int, default=6, help="changes of each control (6)")
    parser.add_argument(
        "--only",
        default="load,calibration,calibration-warm,controls",
        help="which measurements (load: this app's and the minimal page's loads, side by side)",
    )
    parser.add_argument("--baseline", metavar="DIR", help="also load the app of the checkout in DIR")
    parser.add_argument(
        "--compile-each-start",
        action="store_true",
        help="no bytecode cache: every fresh server compiles the app's modules (as PYTHONDONTWRITEBYTECODE=1 does)",
    )
    args = parser.parse_args(argv)
    missing = harness.missing_requirements()
    if missing:
        print(f"cannot run: {missing}")
        return 2
    only = set(args.only.split(","))
    if not args.compile_each_start:
        bytecode_cache([ROOT, *([Path(args.baseline).resolve()] if args.baseline else [])])
    print(f"Chromium at {harness.VIEWPORT['width']}x{harness.VIEWPORT['height']}, {os.cpu_count()} cores")
    with harness.chromium() as browser:
        if "load" in only:
            minimal = tempfile.mkstemp(prefix="lb-minimal-", suffix=".py")[1]
            Path(minimal).write_text(MINIMAL_APP)
            scripts = {"launch-bound (this checkout)": "app.py", MINIMAL: minimal}
            if args.baseline:
                scripts[f"launch-bound ({args.baseline})"] = str(Path(args.baseline).resolve() / "app.py")
            try:
                loads = cold_loads(browser, args.runs, scripts)
            finally:
                Path(minimal).unlink(missing_ok=True)
            for visit, what in zip(VISITS, ("cold page load (fresh server)", "page load (second visitor)")):
                pages = {name: loads[name][visit] for name in scripts}
                side_by_side(f"{what} -> first readout, {args.runs} runs each", pages, READOUT, GOAL_RATIO)
                side_by_side(f"{what} -> first chart drawn", pages, CHART_DRAWN, None)
                for name, runs in pages.items():
                    phases(name, runs)
        if "calibration" in only:
            minimal = tempfile.mkstemp(prefix="lb-minimal-", suffix=".py")[1]
            Path(minimal).write_text(MINIMAL_APP)
            try:
                opens, loads = first_calibration_opens(browser, args.runs, minimal)
            finally:
                Path(minimal).unlink(missing_ok=True)
            report("first Calibration tab open (fresh server)", opens, 1000)
            ratio_line(loads, opens)
        if "calibration-warm" in only:
            minimal = tempfile.mkstemp(prefix="lb-minimal-", suffix=".py")[1]
            Path(minimal).write_text(MINIMAL_APP)
            try:
                readouts, opens, loads = warm_calibration_opens(browser, args.runs, minimal)
            finally:
                Path(minimal).unlink(missing_ok=True)
            report("Calibration, new session, warm server: to the LOO readout", readouts, 1000)
            ratio_line(loads, readouts)
            report("Calibration, new session, warm server: to the last change", opens, 1000)
            ratio_line(loads, opens)
        if "controls" in only:
            for what, values in control_changes(browser, args.changes).items():
                report(what, values, 300)
    return 0


if __name__ == "__main__":
    sys.exit(main())
