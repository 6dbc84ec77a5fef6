"""The "Your trace" tab in Chromium: upload a trace, pick a step, see the lanes, readouts and the what-if."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import eventually, lanes, metric_value, open_app, query_params_when, rerun_after

from core.trace import analyse

pytestmark = pytest.mark.browser

HF = Path(__file__).resolve().parents[2] / "data" / "traces" / "hf"


def test_upload_a_trace_pick_a_step_and_see_lanes_readouts_and_the_what_if(page, app_url):
    trace = HF / "hf_llama_eager_sync.json.gz"
    steps = analyse(trace).steps
    open_app(page, app_url, "tab=Your+trace", wait_for=".st-key-tr_lanes .main-svg")
    upload = page.locator("[data-testid=stFileUploader] input[type=file]").first
    rerun_after(
        page,
        lambda: upload.set_input_files(
            files=[
                {
                    "name": "my_model.pt.trace.json.gz",
                    "mimeType": "application/gzip",
                    "buffer": trace.read_bytes(),
                }
            ]
        ),
    )
    page.get_by_text("uploaded: my_model.pt.trace.json.gz").first.wait_for()
    assert page.locator("[data-testid=stException]").count() == 0
    kernels = int((steps[0].timeline.gpu_kinds == "kernel").sum())  # copies and memsets are counted apart
    assert metric_value(page, "Kernels / step") == f"{kernels:,}"
    assert metric_value(page, "Bound by") == "CPU launch"

    # Pick the last step: the URL follows, the readouts are that step's.
    rerun_after(page, lambda: page.locator(".st-key-tr_step [role=radiogroup] label").nth(2).click())
    query_params_when(page, lambda q: q.get("tr_step") == str(steps[2].index))
    assert metric_value(page, "Step time") == f"{steps[2].metrics.step_us / 1e3:.1f} ms"

    # The what-if beside it: a second pair of lanes, the replayed step, with far fewer launches.
    select = page.locator(".st-key-tr_whatif input[role=combobox]")
    select.click()
    rerun_after(page, lambda: page.get_by_role("option", name="with CUDA graphs").click())
    drawn = eventually(lambda: lanes(page) if any("simulated" in k for k in lanes(page)) else None)
    assert drawn["CPU launch · simulated"][0] < drawn["CPU launch · measured"][0]
    page.get_by_text("with CUDA graphs (estimate)").first.wait_for(
        state="attached"
    )  # a cell of the what-if table
    assert page.locator("[data-testid=stException]").count() == 0


EVIL = "https://evil.example/x www.evil.example me@evil.example"


def test_bare_urls_in_a_trace_and_its_name_show_as_text_with_no_link(page, app_url):
    """Issue 24: Streamlit's markdown links bare URLs, escaped or not. The device name from the file, the
    file's name and a link naming a trace are on the page as text, and the DOM has no link to them."""
    import gzip
    import json

    events = json.loads(gzip.decompress((HF / "hf_llama_eager_sync.json.gz").read_bytes()))
    events["deviceProperties"] = [{"id": 0, "name": EVIL}]
    open_app(page, app_url, "tab=Your+trace&tr_trace=www.evil.example", wait_for=".st-key-tr_lanes .main-svg")
    upload = page.locator("[data-testid=stFileUploader] input[type=file]").first
    rerun_after(
        page,
        lambda: upload.set_input_files(
            files=[
                {
                    "name": "www.evil.example.json",
                    "mimeType": "application/json",
                    "buffer": json.dumps(events).encode(),
                }
            ]
        ),
    )
    info = page.locator("[data-testid=stAlertContentInfo]").filter(has_text="evil.example")
    info.first.wait_for()
    shown = info.first.inner_text().replace("\u2060", "")
    assert "https://evil.example/x www.evil.example me@evil.example" in shown  # the text, as it was
    assert "www.evil.example.json" in shown
    # Where each link on the page goes (the page's own heading anchors carry the URL's query: not these).
    targets = page.locator("a").evaluate_all("links => links.map(a => a.protocol + a.hostname + a.pathname)")
    assert not [t for t in targets if "evil" in t or t.startswith("mailto")], targets
    assert page.locator("[data-testid=stException]").count() == 0


def test_the_step_without_the_profiler_is_drawn_beside_the_traced_one(page, app_url):
    """A trace written by gpu_probe/recorder.py: its measured step is quoted as measured, and its lanes are drawn
    at the corrected host times beside the traced ones, both on one time axis."""
    from ui.charts import format_us

    trace = (
        Path(__file__).resolve().parents[1] / "data" / "profiler" / "h200" / "qwen2_eager_b1_default.json.gz"
    )
    report = analyse(trace)
    median = report.trace.recorded_untraced["median_us"]
    open_app(page, app_url, "tab=Your+trace", wait_for=".st-key-tr_lanes .main-svg")
    upload = page.locator("[data-testid=stFileUploader] input[type=file]").first
    rerun_after(
        page,
        lambda: upload.set_input_files(
            files=[{"name": "recorded.json.gz", "mimeType": "application/gzip", "buffer": trace.read_bytes()}]
        ),
    )
    page.get_by_text("uploaded: recorded.json.gz").first.wait_for()
    page.locator(".st-key-tr_untraced_lanes .main-svg").first.wait_for()
    assert page.locator("[data-testid=stException]").count() == 0
    assert metric_value(page, "Step time (as traced)") == format_us(report.steps[0].metrics.step_us)
    assert metric_value(page, "Step time (no profiler)") == format_us(median)
    page.get_by_text("measured by the recorder").first.wait_for()
    both = lanes(page, 1)  # the step's own lanes come first; then the two steps on one time axis
    traced, untraced = both["CPU launch · as traced"], both["CPU launch · without the profiler"]
    assert untraced[0] == traced[0]  # the same launches, drawn shorter
    assert untraced[1] < 0.9 * traced[1]
    assert both["GPU kernel · without the profiler"][0] == both["GPU kernel · as traced"][0]
