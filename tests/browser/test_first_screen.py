"""Issue 24, item 5: at 1400 x 1000 the Simulator's lanes are on the first screen, with no scrolling."""

from __future__ import annotations

import pytest
from harness import VIEWPORT, open_app

pytestmark = pytest.mark.browser
LANES = "[data-testid=stPlotlyChart]"


@pytest.mark.parametrize("query", ["", "batch=33&fusion=true&graphs=true"])
def test_the_lanes_are_above_the_fold(page, app_url, query):
    assert VIEWPORT == {"width": 1400, "height": 1000}
    open_app(page, app_url, query, wait_for=f"{LANES} .main-svg")
    page.wait_for_timeout(500)  # Plotly's layout settles
    box = page.locator(LANES).first.bounding_box()
    assert page.evaluate("window.scrollY") == 0
    assert box["y"] + box["height"] <= VIEWPORT["height"], box


@pytest.mark.parametrize(
    "query, lanes",
    [
        ("tab=Live+GPU+probe", "pr_lanes"),
        ("tab=Your+trace", "tr_lanes"),
        ("tab=Calibration", "cal_lanes"),
    ],
)
def test_every_tabs_lanes_are_above_the_fold(page, app_url, query, lanes):
    """Issue 29, item 6: the other tabs show their lanes in the first screen too (they started at y = 1,240 on the
    probe and trace tabs, 4,085 on Calibration): readouts and lanes first, tables, notes and uploaders after."""
    chart = f".st-key-{lanes} [data-testid=stPlotlyChart]"
    open_app(page, app_url, query, wait_for=f"{chart} .main-svg")
    page.wait_for_timeout(500)  # Plotly's layout settles
    box = page.locator(chart).first.bounding_box()
    assert page.evaluate("window.scrollY") == 0
    assert box["y"] + box["height"] <= VIEWPORT["height"], box
