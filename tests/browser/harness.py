"""Start the app for real and drive Debian's Chromium with Playwright.

Shared by the browser tests (`tests/browser/`), the interaction benchmark
(`bench/interaction_speed.py`) and the README screenshot (`tools/screenshot.py`),
so all three see the app exactly as a visitor does.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("LAUNCH_BOUND_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
VIEWPORT = {"width": 1400, "height": 1000}
STARTUP_TIMEOUT_S = 90
IDLE_TIMEOUT_MS = 60_000


def missing_requirements() -> str | None:
    """Why the browser tests cannot run here, or None if they can."""
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} not found (apt-get install -y chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -r requirements-dev.txt)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def app_server(log_path: Path | None = None, extra_args: tuple[str, ...] = ()):
    """`streamlit run app.py` on a free port; yields the base URL, stops the server afterwards."""
    with app_server_process(log_path, extra_args) as (base, _proc):
        yield base


def rss_mb(pid: int) -> tuple[float, float]:
    """(resident now, peak resident since start) of a process, in MB (Linux /proc)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


@contextmanager
def app_server_process(
    log_path: Path | None = None,
    extra_args: tuple[str, ...] = (),
    prefix: tuple[str, ...] = (),
    launcher: tuple[str, ...] = ("-m", "streamlit"),
    env: dict | None = None,
    script: str = "app.py",
):
    """As app_server, yielding (base URL, the server's Popen) for benches that watch the process.

    `prefix` goes before the interpreter (e.g. `taskset -c 0`), `launcher` after it (a script that
    wraps streamlit's CLI, e.g. bench/timed_server.py), `extra_args` after `app.py`'s options, and
    `env` is added to the server's environment, and `script` is the page to run (default app.py).
    """
    port = free_port()
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(
        [
            *prefix,
            sys.executable,
            *launcher,
            "run",
            script,
            "--server.headless",
            "true",
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--server.fileWatcherType",
            "none",
            "--browser.gatherUsageStats",
            "false",
            *extra_args,
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **env} if env else None,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with code {proc.returncode} before it was healthy")
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"streamlit was not healthy within {STARTUP_TIMEOUT_S} s")
            time.sleep(0.25)
        yield base, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log is not subprocess.DEVNULL:
            log.close()


@contextmanager
def chromium():
    """A headless Chromium (Debian's, never a Playwright download)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS), headless=True)
        try:
            yield browser
        finally:
            browser.close()


def wait_idle(page, timeout_ms: int = IDLE_TIMEOUT_MS) -> None:
    """Wait until the app is connected and its script has finished running."""
    page.wait_for_selector(
        "[data-testid=stApp][data-test-connection-state=CONNECTED][data-test-script-state=notRunning]",
        timeout=timeout_ms,
    )


def open_app(page, url: str, query: str = "", wait_for: str | None = None) -> None:
    """Load the app at `url` (a base URL or a full link), plus `query` if given, and wait for its first run."""
    page.goto(f"{url.rstrip('/')}/?{query.lstrip('?')}" if query else url)
    page.wait_for_selector("[data-testid=stApp]")
    wait_idle(page)
    if wait_for:
        page.wait_for_selector(wait_for, timeout=IDLE_TIMEOUT_MS)


def metric_value(page, label: str) -> str:
    """The shown value of the `st.metric` with this label (first match on the page)."""
    metric = (
        page.locator("[data-testid=stMetric]")
        .filter(has=page.locator("[data-testid=stMetricLabel]", has_text=label))
        .first
    )
    return metric.locator("[data-testid=stMetricValue]").inner_text().strip()


def slider_thumb(page, label: str):
    slider = page.locator("[data-testid=stSlider]").filter(has_text=label).first
    return slider.locator("[role=slider]")


def toggle(page, label: str):
    """The checkbox input behind the `st.toggle` with this label."""
    return page.locator("[data-testid=stCheckbox]").filter(has_text=label).first


def query_params(page) -> dict[str, str]:
    from urllib.parse import parse_qsl, urlsplit

    return dict(parse_qsl(urlsplit(page.url).query, keep_blank_values=True))


def query_params_when(page, check, timeout_s: float = 10.0) -> dict[str, str]:
    """The address bar's query parameters once `check(params)` holds; fails showing the last ones seen.

    The page writes its own URL as bound widgets change, apart from the rerun that follows,
    so a test polls it instead of reading it once right after an action.
    """
    seen: dict[str, str] = {}

    def holds() -> bool:
        nonlocal seen
        seen = query_params(page)
        return bool(check(seen))

    try:
        eventually(holds, timeout_s)
    except AssertionError:
        raise AssertionError(f"query parameters still {seen} after {timeout_s} s") from None
    return seen


def slider_input(page, label: str):
    """The (visually hidden) range input of the `st.slider` with this label: focus it for the keyboard."""
    return page.locator("[data-testid=stSlider]").filter(has_text=label).first.locator("input[type=range]")


def slider_value(page, label: str) -> int:
    return int(float(slider_input(page, label).get_attribute("aria-valuetext")))


def drag_slider(page, label: str, fraction: float) -> None:
    """Drag the slider's thumb with the mouse to `fraction` (0..1) of its track."""
    slider = page.locator("[data-testid=stSlider]").filter(has_text=label).first
    thumb = slider.locator("[data-testid=stSliderThumbValue]").locator("..")
    track = thumb.locator("..")
    thumb_box, track_box = thumb.bounding_box(), track.bounding_box()
    y = thumb_box["y"] + thumb_box["height"] / 2
    page.mouse.move(thumb_box["x"] + thumb_box["width"] / 2, y)
    page.mouse.down()
    target = track_box["x"] + fraction * track_box["width"]
    page.mouse.move(target, y, steps=8)
    page.mouse.up()


def toggle_state(page, label: str) -> bool:
    return toggle(page, label).locator("input[role=switch]").is_checked()


def click_toggle(page, label: str) -> None:
    toggle(page, label).locator("label").first.click()


# In the page: the traces of the n-th Plotly chart as name -> (bars, summed bar lengths).
LANES_JS = """(index) => {
  const charts = document.querySelectorAll('[data-testid=stPlotlyChart] .js-plotly-plot');
  const gd = charts[index];
  if (!gd || !gd._fullData) return null;
  const out = {};
  for (const t of gd._fullData) {
    const x = Array.from(t.x || []);
    if (t.type === 'bar') {
      out[t.name] = [x.length, x.reduce((a, b) => a + Number(b), 0)];
    } else {  // scattergl segments: start, end, null per interval
      let n = 0, total = 0;
      for (let i = 0; i + 1 < x.length; i += 3) { n += 1; total += Number(x[i + 1]) - Number(x[i]); }
      out[t.name] = [n, total];
    }
  }
  return out;
}"""


def lanes(page, index: int = 0) -> dict[str, tuple[int, float]]:
    """name -> (bars, total µs) for each trace of the index-th chart on the page (the lanes come first)."""
    return {k: (int(v[0]), float(v[1])) for k, v in (page.evaluate(LANES_JS, index) or {}).items()}


# Installed in every page before the app loads: counts the messages the server sends over the
# websocket and notes when the last one arrived. A rerun always sends some, so "a message came after
# the action, the script is idle, and nothing has arrived for a moment" means the rerun is done.
# (Watching the script-state attribute flip is not enough: when the run is quick, React can apply
# "running" and "notRunning" in one render and the attribute never changes.)
WEBSOCKET_JS = """(() => {
  window.__lbMessages = 0;
  window.__lbLastMessageAt = 0;
  window.__lbFirstMessageAt = null;
  const add = WebSocket.prototype.addEventListener;
  WebSocket.prototype.addEventListener = function (type, listener, ...rest) {
    if (type !== 'message') return add.call(this, type, listener, ...rest);
    const counted = (event) => {
      window.__lbMessages += 1;
      window.__lbLastMessageAt = performance.now();
      if (window.__lbFirstMessageAt === null) window.__lbFirstMessageAt = window.__lbLastMessageAt;
      return listener(event);
    };
    return add.call(this, type, counted, ...rest);
  };
})()"""
QUIET_MS = 150

_SETTLED_JS = """([before, quietMs]) => {
  const app = document.querySelector('[data-testid=stApp]');
  return window.__lbMessages > before
    && app && app.getAttribute('data-test-script-state') === 'notRunning'
    && performance.now() - window.__lbLastMessageAt >= quietMs;
}"""


def new_context(browser, **options):
    """A browser context (its own cookies: its own Streamlit session) with the websocket counter installed."""
    context = browser.new_context(viewport=VIEWPORT, **options)
    context.add_init_script(WEBSOCKET_JS)
    return context


def rerun_after(page, action, timeout_ms: int = IDLE_TIMEOUT_MS) -> None:
    """Do `action` (a click, a key press, a drag) and wait for the rerun it causes to finish."""
    before = page.evaluate("() => window.__lbMessages")
    if before is None:
        raise RuntimeError("rerun_after needs a page from harness.new_context (websocket counter missing)")
    action()
    page.wait_for_function(_SETTLED_JS, arg=[before, QUIET_MS], timeout=timeout_ms, polling=50)


def eventually(check, timeout_s: float = 10.0, interval_s: float = 0.1):
    """Retry `check()` until it returns a truthy value (charts finish drawing a moment after the run)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
            if value:
                return value
            error = None
        except AssertionError as err:
            error = err
        if time.monotonic() > deadline:
            if error:
                raise error
            raise AssertionError(f"condition still false after {timeout_s} s")
        time.sleep(interval_s)


# In the page: where the n-th Plotly chart put its lanes. Each y tick (a lane's label) with its centre, and the
# plot area, in CSS pixels from the chart's top-left corner; the x axis's range in µs.
LANE_BANDS_JS = """(index) => {
  const gd = document.querySelectorAll('[data-testid=stPlotlyChart] .js-plotly-plot')[index];
  if (!gd || !gd._fullLayout) return null;
  const box = gd.getBoundingClientRect();
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  const ticks = Array.from(gd.querySelectorAll('.ytick text')).map((t) => {
    const r = t.getBoundingClientRect();
    return [t.textContent, r.y + r.height / 2 - box.y];
  }).sort((a, b) => a[1] - b[1]);  // top to bottom, as a reader goes
  return {ticks, x0: xa._offset, x1: xa._offset + xa._length, y0: ya._offset, y1: ya._offset + ya._length,
          range: xa.range.map(Number)};
}"""


def lane_bands(page, index: int) -> dict:
    """The index-th chart's lanes as drawn: {'ticks': [(label, centre y)] top to bottom, 'x0', 'x1', 'y0', 'y1',
    'range'}."""
    found = page.evaluate(LANE_BANDS_JS, index)
    if found is None:
        raise AssertionError(f"no drawn Plotly chart at index {index}")
    return found


def chart_png(page, index: int):
    """A screenshot of the index-th Plotly chart as an RGB image (PIL), one pixel per CSS pixel."""
    from io import BytesIO

    from PIL import Image

    chart = page.locator("[data-testid=stPlotlyChart] .js-plotly-plot").nth(index)
    chart.scroll_into_view_if_needed()
    return Image.open(BytesIO(chart.screenshot(animations="disabled", scale="css"))).convert("RGB")


def painted_share(image, y: float, x0: float, x1: float, colour: tuple, tolerance: int = 40) -> float:
    """Share of the pixel columns from x0 to x1 whose pixel on row y is within `tolerance` of `colour`
    (each RGB channel): how much of a lane's band a kind of bar covers, read off the screenshot."""
    row = round(y)
    columns = range(round(x0), round(x1))
    hits = sum(
        all(abs(a - b) <= tolerance for a, b in zip(image.getpixel((x, row)), colour)) for x in columns
    )
    return hits / max(len(columns), 1)
