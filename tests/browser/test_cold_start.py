"""Issue 15, item 5: twenty pages opened at once on a freshly started server all draw, none shows a
traceback. Before ui/warmup.py, 4 of 6 such trials showed `partially initialized module 'pandas'`
on 12-15 of the 20 pages: Plotly found pandas in sys.modules while another session's thread was
still importing it."""

from __future__ import annotations

import time

import harness
import pytest

pytestmark = pytest.mark.browser
PAGES = 20
TABS = ("Simulator", "Live GPU probe", "Bucketing", "Calibration")  # the tabs that draw Plotly charts
EXCEPTION = "[data-testid=stException]"


def test_twenty_pages_at_once_on_a_fresh_server(tmp_path):
    log = tmp_path / "server.log"
    with harness.app_server(log_path=log) as base, harness.chromium() as browser:
        pages = []
        for _ in range(PAGES):
            context = harness.new_context(browser)
            context.set_default_timeout(180_000)
            pages.append(context.new_page())
        # Navigate all twenty before waiting for any: their first script runs overlap on the server.
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
    assert "Traceback" not in log.read_text(errors="replace")
