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
