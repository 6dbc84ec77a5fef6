"""Twenty sessions at once moving the batch slider, measured in Chromium against one server.

    python bench/twenty_sessions.py [--sessions 20] [--rounds 5] [--server-cpus 0 --browser-cpus 1]
                                    [--py-spy profile.txt]

Starts `streamlit run app.py`, opens `--sessions` pages on the Simulator tab (each its own browser
context, so its own Streamlit session), focuses each page's "Batch size" slider, then for each of
`--rounds` rounds presses ArrowRight in every page, one right after another, and waits until all
of them have redrawn. Each move is timed in its own page as bench/interaction_speed.py times one
(keydown to the last change in the lanes chart or the readouts, the script idle, the chart visible,
then a quiet period), so Playwright's round trips are not counted.

Prints every move's latency as median and p90 (the goal: p90 <= 1 s), the server's peak resident
memory (VmHWM), and where the CPU went during the moves: CPU seconds of the server process and of
Chromium's processes against the wall time, and the server's script runs (wall and CPU time of
each rerun, from bench/timed_server.py, which starts the server with every run timed). `--server-cpus` / `--browser-cpus` pin the server and
this script with its Chromium to CPU sets (as taskset does), to see what the server needs when the
browsers cannot take its core. `--py-spy FILE` records the server's stacks during the moves
(py-spy from PyPI) and prints the functions it spent the most samples in.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "browser"))
sys.path.insert(0, str(ROOT / "bench"))
import harness  # noqa: E402
from interaction_speed import LANES, MEASURE_JS, QUIET_MS, percentile  # noqa: E402

GOAL_P90_MS = 1000.0
# Twenty pages polling every 10 ms while they wait would cost the shared cores the bench measures.
POLL_MS = 100
CHART = "[data-testid=stPlotlyChart]"
TICKS = os.sysconf("SC_CLK_TCK")


# --app minimal: the least a Streamlit page can do per slider move -- a slider, one metric and a
# three-bar Plotly chart in a fragment -- timed the same way, for the floor under any page's cost.
MINIMAL_APP = """
import plotly.graph_objects as go
import streamlit as st

st.title("minimal")


@st.fragment
def step():
    batch = st.select_slider("Batch size", list(range(1, 65)), key="batch")
    st.metric("Step time", f"{batch * 1.5:.1f} µs")
    bars = go.Figure(go.Bar(x=[batch, 2 * batch, 3], y=["CPU", "GPU", "idle"], orientation="h"))
    st.plotly_chart(bars.update_layout(height=200), key="sim_lanes", width="stretch")


step()
"""


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (Chromium's renderers, GPU and network processes)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def browser_cpu_seconds() -> float:
    """CPU time of every process this script started (Playwright's driver and Chromium's processes)."""
    return sum(cpu_seconds(p) for p in descendants(os.getpid()))


def cpus(text: str | None) -> set[int] | None:
    return {int(c) for c in text.split(",")} if text else None


def open_pages(browser, base: str, n: int) -> list:
    pages = []
    for _ in range(n):
        page = harness.new_context(browser).new_page()
        harness.open_app(page, base, wait_for=CHART)
        pages.append(page)
    for page in pages:  # every chart drawn, every page idle, before the clock starts
        harness.wait_idle(page)
        page.wait_for_selector(f"{LANES} .js-plotly-plot")
        harness.slider_input(page, "Batch size").focus()
    return pages


def one_round(pages, key: str) -> list[float | None]:
    """`key` in every page, one right after another; then each page's time to redraw (None: not in 30 s)."""
    for page in pages:
        page.evaluate(MEASURE_JS, [QUIET_MS, LANES, POLL_MS])
    for page in pages:
        page.keyboard.press(key)
    return [page.evaluate("() => window.__lbMeasure") for page in pages]


def hottest(profile: Path, top: int = 12) -> list[tuple[str, float]]:
    """The frames py-spy saw most often (collapsed stacks: 'a;b;c count'), inclusive, as shares of samples."""
    inclusive, total = Counter(), 0
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        total += int(count)
        for frame in set(stack.split(";")):
            inclusive[frame] += int(count)
    return [(frame, n / total) for frame, n in inclusive.most_common(top)] if total else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5, help="slider moves per session (default 5)")
    parser.add_argument("--server-cpus", help="pin the server to these CPUs, e.g. 0")
    parser.add_argument("--browser-cpus", help="pin this script and Chromium to these CPUs, e.g. 1")
    parser.add_argument("--py-spy", metavar="FILE", help="record the server's stacks during the moves")
    parser.add_argument(
        "--app",
        choices=("launch-bound", "minimal"),
        default="launch-bound",
        help="the page to drive: this app's Simulator tab, or a minimal slider + metric + chart page",
    )
    args = parser.parse_args(argv)
    missing = harness.missing_requirements()
    if missing:
        print(f"cannot run: {missing}")
        return 2
    if args.browser_cpus:
        os.sched_setaffinity(0, cpus(args.browser_cpus))  # inherited by Playwright's driver and Chromium
    prefix = ("taskset", "-c", args.server_cpus) if args.server_cpus else ()
    load_before = os.getloadavg()[0]
    run_log = Path(tempfile.mkstemp(prefix="lb-runs-", suffix=".txt")[1])
    script = "app.py"
    if args.app == "minimal":
        script = tempfile.mkstemp(prefix="lb-minimal-", suffix=".py")[1]
        Path(script).write_text(MINIMAL_APP)
    server_run = harness.app_server_process(
        prefix=prefix,
        launcher=(str(ROOT / "bench" / "timed_server.py"),),
        env={"LB_RUN_LOG": str(run_log)},
        script=script,
    )
    with server_run as (base, server), harness.chromium() as browser:
        started = time.monotonic()
        pages = open_pages(browser, base, args.sessions)
        opened_s = time.monotonic() - started
        one_round(pages, "ArrowRight")  # a first move each, untimed: the fragment's first rerun
        spy = None
        if args.py_spy:
            spy = subprocess.Popen(
                ["py-spy", "record", "-p", str(server.pid), "-o", args.py_spy, "-f", "raw", "-r", "50", "-t"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)
        runs_before = len(run_log.read_text().splitlines())
        cpu0, browser0, wall0 = cpu_seconds(server.pid), browser_cpu_seconds(), time.monotonic()
        timings, missed = [], 0
        for _ in range(args.rounds):
            for t in one_round(pages, "ArrowRight"):
                if t is None:
                    missed += 1
                else:
                    timings.append(float(t))
        wall = time.monotonic() - wall0
        server_cpu, browsers_cpu = cpu_seconds(server.pid) - cpu0, browser_cpu_seconds() - browser0
        runs = [tuple(map(float, line.split())) for line in run_log.read_text().splitlines()[runs_before:]]
        if spy is not None:
            spy.send_signal(2)  # SIGINT: py-spy writes its file and exits
            spy.wait(timeout=30)
        _, peak = harness.rss_mb(server.pid)
    if not timings:
        print("no move was redrawn")
        return 1
    median, p90 = statistics.median(timings), percentile(timings, 0.9)
    pinned = f"server on CPUs {args.server_cpus or 'any'}, browsers on CPUs {args.browser_cpus or 'any'}"
    print(
        f"{args.sessions} sessions x {args.rounds} slider moves, {args.app} page, in Chromium ({pinned}; "
        f"{opened_s:.0f} s to open "
        f"the pages; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, {os.cpu_count()} cores)"
    )
    print(
        f"per move: median {median:.0f} ms   p90 {p90:.0f} ms   min {min(timings):.0f} ms   "
        f"max {max(timings):.0f} ms   ({len(timings)} moves{f', {missed} not redrawn in 30 s' if missed else ''})"
    )
    print(
        f"during the moves ({wall:.1f} s): server {server_cpu:.1f} CPU s ({server_cpu / wall:.0%} of a core), "
        f"Chromium and Playwright {browsers_cpu:.1f} CPU s ({browsers_cpu / wall:.0%} of a core)"
    )
    if runs:
        run_wall = [1000 * r[1] for r in runs]
        run_cpu = [1000 * r[2] for r in runs]
        print(
            f"server script runs during the moves: {len(runs)}, wall median {statistics.median(run_wall):.0f} ms "
            f"p90 {percentile(run_wall, 0.9):.0f} ms, CPU median {statistics.median(run_cpu):.0f} ms "
            f"(wall - CPU: waiting for the GIL and the cores)"
        )
    run_log.unlink(missing_ok=True)
    if script != "app.py":
        Path(script).unlink(missing_ok=True)
    print(f"server peak RSS {peak:,.0f} MB")
    print(f"goal: p90 <= {GOAL_P90_MS:.0f} ms -> {'met' if p90 <= GOAL_P90_MS else 'NOT met'}")
    if args.py_spy and Path(args.py_spy).exists():
        print(f"server's hottest frames (inclusive share of py-spy samples, {args.py_spy}):")
        for frame, share in hottest(Path(args.py_spy)):
            print(f"  {share:6.1%}  {frame[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
