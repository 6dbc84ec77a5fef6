"""Issue 15, item 5: pages opened at once on a freshly started server all draw, none shows a
traceback. Before ui/warmup.py, 4 of 6 trials of twenty such pages showed `partially initialized
module 'pandas'` on 12-15 of them: Plotly found pandas in sys.modules while another session's
thread was still importing it.

Eight pages (two per Plotly tab) are enough to catch it: with app.py's warm-up import taken out,
8 pages failed 4 trials of 4 (1-3 pages each, the Bucketing tab's every time), while 4 pages failed
only 2 of 4 (2026-12-03). Twenty took three to four times as long on the 2-core machine. The server
is fresh; the browser need not be (each page is its own context, so nothing is cached for it)."""

from __future__ import annotations

import time

import harness
import pytest

pytestmark = pytest.mark.browser
PAGES = 8
TABS = ("Simulator", "Live GPU probe", "Bucketing", "Calibration")  # the tabs that draw Plotly charts
EXCEPTION = "[data-testid=stException]"


def test_pages_opened_at_once_on_a_fresh_server_all_draw(browser, tmp_path):
    log = tmp_path / "server.log"
    with harness.app_server(log_path=log) as base:
        contexts = [harness.new_context(browser) for _ in range(PAGES)]
        try:
            pages = []
            for context in contexts:
                context.set_default_timeout(180_000)
                pages.append(context.new_page())
            # Navigate all of them before waiting for any: their first script runs overlap on the server.
            for i, page in enumerate(pages):
                page.goto(f"{base}/?tab={TABS[i % len(TABS)].replace(' ', '+')}", wait_until="commit")
            started = time.monotonic()
            failures = []
            for i, page in enumerate(pages):
                # Drawn (a chart or a readout) or failed (a traceback), whichever comes first.
                page.wait_for_selector(f"[data-testid=stPlotlyChart], [data-testid=stMetric], {EXCEPTION}")
                harness.wait_idle(page, timeout_ms=180_000)
                if page.locator(EXCEPTION).count():
                    failures.append((i, page.locator(EXCEPTION).first.inner_text()[:300]))
            assert not failures, failures
            assert time.monotonic() - started < 180
        finally:
            for context in contexts:
                context.close()
    assert "Traceback" not in log.read_text(errors="replace")
