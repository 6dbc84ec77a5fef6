"""Issue 24, item 6, in Chromium: on a first visit the readouts are on screen before any Plotly chart
exists and before Plotly's script is even requested (ui/first_paint.py); once the browser has reported
it, everything is there: the lanes, the sweep, the fusion table and the Advanced inputs. The order is
by construction, not by timing, so the test holds on a slow machine as on a fast one."""

from __future__ import annotations

import pytest
from harness import eventually, lanes, metric_value, open_app, query_params

from core.step_plan import BASELINE, StepPlan
from sim.config import DEFAULT_PRESET, PRESETS
from sim.schedule import simulate_step
from ui.charts import format_us

pytestmark = pytest.mark.browser
CHART = "[data-testid=stPlotlyChart] .main-svg"

# Installed before the page loads: what the page holds when the first readout appears.
AT_FIRST_READOUT_JS = """(() => {
  window.__lbAtReadout = null;
  const look = () => {
    if (window.__lbAtReadout !== null || !document.querySelector('[data-testid=stMetricValue]')) return;
    window.__lbAtReadout = {
      charts: document.querySelectorAll('[data-testid=stPlotlyChart]').length,
      plotlyRequested: performance.getEntriesByType('resource').some((e) => e.name.includes('/PlotlyChart.')),
      tables: document.querySelectorAll('[data-testid=stDataFrame]').length,
    };
  };
  document.addEventListener('DOMContentLoaded', () => {
    new MutationObserver(look).observe(document.body, {subtree: true, childList: true, characterData: true});
  });
})()"""


@pytest.mark.parametrize("query", ["", "batch=33&fusion=true&graphs=true"])
def test_the_readouts_come_before_any_chart(new_page, app_url, query):
    page = new_page()
    page.context.add_init_script(AT_FIRST_READOUT_JS)
    open_app(page, app_url, query, wait_for=CHART)
    assert page.evaluate("() => window.__lbAtReadout") == {"charts": 0, "plotlyRequested": False, "tables": 0}

    # Then the whole page: lanes drawn, the sweep, the fusion table, the Advanced inputs, no placeholder.
    drawn = eventually(lambda: lanes(page))
    assert {"CPU launch", "GPU kernel"} <= set(drawn)
    eventually(lambda: page.locator("[data-testid=stPlotlyChart]").count() == 2)
    eventually(lambda: page.locator("[data-testid=stDataFrame]").count() == 1)
    assert page.locator(".st-key-hidden input").count() == 1  # an Advanced input, in the collapsed expander
    assert page.locator("[data-testid=stMain] [data-testid=stSkeleton]").count() == 0
    expected = dict(pair.split("=") for pair in query.split("&")) if query else {}
    assert {k: v for k, v in query_params(page).items() if k != "tab"} == expected


def test_a_batch_moved_before_the_report_is_kept(new_page, app_url):
    """A reader quick enough to type a batch before the charts come still gets that batch's lanes."""
    page = new_page()
    open_app(page, app_url)  # the first run only: the report may not have come yet
    box = page.locator(".st-key-batch input")
    box.fill("64")
    box.press("Enter")
    eventually(lambda: query_params(page).get("batch") == "64")
    page.wait_for_selector(CHART, timeout=60_000)
    eventually(lambda: page.locator("[data-testid=stPlotlyChart]").count() == 2)
    preset = PRESETS[DEFAULT_PRESET]
    step = simulate_step(preset.model, preset.hardware, StepPlan(BASELINE, 64))
    eventually(lambda: metric_value(page, "Step time") == format_us(step.metrics.step_us))
    assert page.locator(".st-key-batch input").input_value() == "64"
    assert lanes(page)["GPU kernel"][0] > 0
