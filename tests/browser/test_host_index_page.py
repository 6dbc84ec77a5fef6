"""Issue 35 in Chromium: a run with a host index uploaded on the probe tab shows its host beside the lanes, the
batch axis draws each step's spread, and a host typed into "Your host" puts this step on it, in the link too,
with the lanes still on the first screen."""

from __future__ import annotations

import json

import pytest
from app_pages import fake_run
from harness import VIEWPORT, eventually, open_app, query_params, rerun_after
from probe_results import host_block

pytestmark = pytest.mark.browser
LANES = ".st-key-pr_lanes [data-testid=stPlotlyChart]"


def indexed_file() -> bytes:
    data = fake_run(device="Browser Host GPU")
    data["host"] = host_block()  # 6.1 µs a torch launch, p10 5.8, p90 7.0
    for run in data["runs"]:
        med = run["step_us_median"]
        run.update(
            step_us_back_to_back=0.9 * med, step_us_back_to_back_p10=0.8 * med, step_us_back_to_back_p90=med
        )
    return json.dumps(data).encode()


def test_the_host_beside_the_lanes_the_spread_and_your_host(page, app_url):
    open_app(page, app_url, "tab=Live+GPU+probe", wait_for=f"{LANES} .main-svg")
    upload = page.locator("[data-testid=stFileUploader] input[type=file]").first
    rerun_after(
        page,
        lambda: upload.set_input_files(
            files=[{"name": "host.json", "mimeType": "application/json", "buffer": indexed_file()}]
        ),
    )
    page.get_by_text("Browser Host GPU").first.wait_for()
    page.get_by_text("This run's host: 6.1 µs a torch launch (p10–p90 5.8–7.0).").first.wait_for()
    box = page.get_by_label("Your host: µs a launch", exact=True).and_(page.locator("input"))
    assert box.get_attribute("placeholder") == "this run's: 6.1"
    # Every mode's steps have a spread here: the batch axis draws a bar at each point.
    page.locator(".st-key-pr_batch_axis .main-svg").first.wait_for()
    assert page.locator(".st-key-pr_batch_axis g.errorbar").count() >= 16  # 4 modes x 4 batches, left panel
    box.fill("3.05")
    rerun_after(page, lambda: box.press("Enter"))
    page.get_by_text("On your host").first.wait_for()
    assert eventually(lambda: query_params(page).get("pr_host_us") == "3.05")
    assert page.locator("[data-testid=stException]").count() == 0
    page.evaluate("window.scrollTo(0, 0)")
    lanes = page.locator(LANES).first.bounding_box()
    assert lanes["y"] + lanes["height"] <= VIEWPORT["height"], lanes  # the line sits beside the heading
