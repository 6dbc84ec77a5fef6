"""The Simulator tab in Chromium: slider by mouse and keyboard, both toggles, readouts and lanes.

The tab as it opens (batch 1, both toggles off: launch-bound, a bubble before every kernel, a clean
link) is test_eight_tasks.py's test_a_idle_gpu_at_batch_1, which checks all this file did there."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import (
    click_toggle,
    drag_slider,
    eventually,
    lanes,
    metric_value,
    open_app,
    query_params_when,
    rerun_after,
    slider_input,
    slider_value,
    toggle_state,
)

from core.step_plan import StepPlan, toggled
from sim.config import DEFAULT_PRESET, PRESETS
from sim.step.schedule import simulate_step
from ui.charts import format_us
from ui.simulator.tab import BATCH_STOPS

pytestmark = pytest.mark.browser
CHART = "[data-testid=stPlotlyChart]"


def expected(batch: int, fusion: bool = False, graphs: bool = False):
    """The simulator's own answer for the default preset, to hold the page's readouts against."""
    preset = PRESETS[DEFAULT_PRESET]
    return simulate_step(preset.model, preset.hardware, StepPlan(toggled(fusion, graphs), batch))


def readouts(page) -> dict[str, str]:
    return {label: metric_value(page, label) for label in ("Kernels / step", "Step time", "Bound by")}


def assert_readouts_match(page, step) -> None:
    eventually(
        lambda: (
            readouts(page)
            == {
                "Kernels / step": f"{step.metrics.kernels:,}",
                "Step time": format_us(step.metrics.step_us),
                "Bound by": step.metrics.bound_by,
            }
        )
    )


def test_keyboard_moves_the_batch_slider(page, app_url):
    open_app(page, app_url, wait_for=CHART)
    before = eventually(lambda: lanes(page))
    handle = slider_input(page, "Batch size")
    handle.focus()
    for _ in range(2):
        rerun_after(page, lambda: page.keyboard.press("ArrowRight"))
    assert slider_value(page, "Batch size") == 3
    assert_readouts_match(page, expected(3))
    query_params_when(page, lambda q: q.get("batch") == "3")

    rerun_after(page, lambda: page.keyboard.press("End"))
    assert slider_value(page, "Batch size") == 512
    query_params_when(page, lambda q: q.get("batch") == "512")
    assert_readouts_match(page, expected(512))
    assert metric_value(page, "Bound by") == "GPU"
    # The kernels grew long enough to hide the launches: far less idle, far more kernel time.
    after = eventually(lambda: (d := lanes(page)) and d["GPU kernel"][1] > 10 * before["GPU kernel"][1] and d)
    assert after["idle"][1] < before["idle"][1]

    rerun_after(page, lambda: page.keyboard.press("Home"))
    assert slider_value(page, "Batch size") == 1
    assert metric_value(page, "Bound by") == "CPU launch"
    query_params_when(page, lambda q: "batch" not in q)


def test_mouse_drag_moves_the_batch_slider(page, app_url):
    open_app(page, app_url, wait_for=CHART)
    before = eventually(lambda: lanes(page))
    rerun_after(page, lambda: drag_slider(page, "Batch size", 0.25))
    batch = slider_value(page, "Batch size")
    # The slider is log-spaced: a quarter of the way along lands near its ninth stop (10), not at 128.
    assert abs(BATCH_STOPS.index(batch) - 0.25 * (len(BATCH_STOPS) - 1)) <= 1, batch
    query_params_when(page, lambda q: q.get("batch") == str(batch))
    step = expected(batch)
    assert_readouts_match(page, step)
    after = eventually(lambda: (d := lanes(page)) and d["GPU kernel"][1] > before["GPU kernel"][1] and d)
    first = step.timeline.first_launches(18)
    assert after["GPU kernel"][1] == pytest.approx(float(first.gpu_dur.sum()), rel=1e-6)
    assert after["idle"][1] < before["idle"][1]


def test_a_batch_move_redraws_the_step_and_leaves_the_sections_below(page, app_url):
    open_app(page, app_url, wait_for=CHART)
    # A rerun that reaches the sweep marks its element stale and back, which an observer sees.
    page.evaluate("""() => { window.__sweepChanges = 0;
      new MutationObserver((records) => { window.__sweepChanges += records.length; })
        .observe(document.querySelector('.st-key-sim_sweep'),
                 {subtree: true, childList: true, attributes: true, characterData: true}); }""")
    slider_input(page, "Batch size").focus()
    rerun_after(page, lambda: page.keyboard.press("ArrowRight"))
    assert_readouts_match(page, expected(2))
    assert page.evaluate("() => window.__sweepChanges") == 0  # only the step reran
    # Any other control reruns the whole tab: the sweep marks the new combination as current.
    rerun_after(page, lambda: click_toggle(page, "Kernel fusion"))
    assert_readouts_match(page, expected(2, fusion=True))
    eventually(lambda: page.locator(".st-key-sim_sweep").get_by_text("fusion (current)").count() == 1)


def test_fusion_then_graphs_moves_the_bottleneck_to_the_gpu(page, app_url):
    open_app(page, app_url, wait_for=CHART)
    rerun_after(page, lambda: click_toggle(page, "Kernel fusion"))
    assert toggle_state(page, "Kernel fusion")
    assert_readouts_match(page, expected(1, fusion=True))
    query_params_when(page, lambda q: q == {"fusion": "true"})

    rerun_after(page, lambda: click_toggle(page, "CUDA graphs"))
    assert toggle_state(page, "CUDA graphs")
    both = expected(1, fusion=True, graphs=True)
    assert both.metrics.bound_by == "GPU"
    assert_readouts_match(page, both)
    query_params_when(page, lambda q: q == {"fusion": "true", "graphs": "true"})
    # One graph launch on the CPU lane; the GPU lane runs back to back with almost no bubbles.
    drawn = eventually(lambda: (d := lanes(page)) and d["CPU launch"][0] == 1 and d)
    assert drawn["idle"][1] < 0.2 * drawn["GPU kernel"][1]

    rerun_after(page, lambda: click_toggle(page, "Kernel fusion"))
    assert not toggle_state(page, "Kernel fusion")
    rerun_after(page, lambda: click_toggle(page, "CUDA graphs"))
    assert not toggle_state(page, "CUDA graphs")
    # The readout is redrawn a moment after the rerun's messages settle (later on a loaded machine).
    eventually(lambda: metric_value(page, "Bound by") == "CPU launch")
    query_params_when(page, lambda q: q == {})


def test_downloaded_chrome_trace_is_the_step_on_screen(page, app_url):
    import json

    open_app(page, app_url, "batch=4&fusion=true", wait_for=CHART)
    button = page.get_by_role("button", name="Download this step as a Chrome trace")
    with page.expect_download(timeout=30_000) as download:
        button.click()
    trace = json.loads(Path(download.value.path()).read_text())
    step = expected(4, fusion=True)
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    kernels = [e for e in slices if e["cat"] == "kernel"]
    launches = [e for e in slices if e["cat"] == "launch"]
    assert len(kernels) == step.metrics.kernels and len(launches) == step.metrics.launches
    assert [e["name"] for e in sorted(kernels, key=lambda e: e["args"]["index"])] == list(
        step.timeline.gpu_names
    )
    assert sum(e["dur"] for e in kernels) == pytest.approx(float(step.timeline.gpu_dur.sum()), rel=1e-6)
    assert len([e for e in trace["traceEvents"] if e["ph"] == "f"]) == step.metrics.kernels
    assert trace["otherData"]["bound_by"] == metric_value(page, "Bound by")
