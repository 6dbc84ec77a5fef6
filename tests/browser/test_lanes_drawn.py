"""Issue 29, item 1: lanes are checked as Chromium draws them, not as the figure describes them.

Each lane's band is found from its label's position on the page, and the screenshot's pixels along the band's
middle are compared with the intervals the lane should show: a chart whose marks land elsewhere (the persistent
kernel's inside drew every segment in one strip below its last lane) fails here, whatever its figure holds.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
import pytest
from harness import VIEWPORT, app_server_process, chart_png, lane_bands, open_app, painted_share

from core import probe_result
from core.step_plan import FUSED_GRAPH, PERSISTENT
from ui.charts import CPU_COLOUR, GPU_COLOUR
from ui.probe_results import MORE_RECORDED

pytestmark = pytest.mark.browser
# The shipped run with the persistent kernel's stamps, whatever its file is named (ui.probe_results lists it).
PERSISTENT_RUN = probe_result.RECORDED_PATH.with_name(next(n for n in MORE_RECORDED if "persistent" in n))
TALL = {"width": VIEWPORT["width"], "height": 1600}  # the inside chart is ~1,050 px: one screenshot holds it
LANES_PAGE = Path(__file__).resolve().parent / "lanes_page.py"
# A drawn interval's edges fall inside a pixel column, and a barrier gap under a pixel wide is painted over:
# each lane's painted share may differ from its intervals' share by the sub-pixel edges of its intervals.
EDGE_PX = 1.0


def on_white(rgba: str) -> tuple[int, int, int]:
    """A bar colour 'rgba(r, g, b, a)' as it shows on the chart's white background."""
    *rgb, alpha = (float(v) for v in re.findall(r"[\d.]+", rgba))
    return tuple(round(alpha * c + (1 - alpha) * 255) for c in rgb)


def covered(start: np.ndarray, end: np.ndarray, lo: float, hi: float) -> tuple[float, int]:
    """(share of [lo, hi] the intervals cover, overlaps counted once; how many separate pieces they make)."""
    order = np.argsort(start)
    total, reach, pieces = 0.0, lo, 0
    for s, e in zip(np.clip(start[order], lo, hi), np.clip(end[order], lo, hi)):
        if e > reach:
            pieces += s > reach or pieces == 0
            total += e - max(s, reach)
            reach = e
    return total / (hi - lo), pieces


def check_lane(image, bands, y: float, start, end, colour, label: str) -> None:
    lo, hi = bands["range"]
    width = bands["x1"] - bands["x0"]
    expected, pieces = covered(np.asarray(start, float), np.asarray(end, float), lo, hi)
    drawn = painted_share(image, y, bands["x0"], bands["x1"], colour)
    slack = 2 * EDGE_PX * pieces / width + 0.01  # two edges a piece, and 1 % for the smoothing at the ends
    assert expected > 0.05, f"{label}: nothing to draw in the test data"
    assert abs(drawn - expected) <= slack, (
        f"{label}: painted {drawn:.1%} of its band, its intervals {expected:.1%} (±{slack:.1%})"
    )


@pytest.fixture(scope="module")
def persistent_result():
    if not PERSISTENT_RUN.is_file():
        pytest.skip("the persistent kernel's recorded run is not shipped")
    return probe_result.load_result(PERSISTENT_RUN, timeline_source="recorded")


def test_every_sm_lane_inside_the_persistent_kernel_is_drawn_in_its_band(page, app_url, persistent_result):
    from ui.probe_results import recorded_label

    run = next(r for r in persistent_result.runs if r.phases is not None)
    inside = run.phase_timeline()
    page.set_viewport_size(TALL)
    try:
        query = {"tab": "Live GPU probe", "pr_run": recorded_label(persistent_result), "pr_mode": run.mode}
        open_app(page, app_url, urlencode({**query, "pr_batch": run.batch}), wait_for=".js-plotly-plot")
        index = next(
            i
            for i in range(page.locator(".js-plotly-plot").count())
            if any(t.startswith("SMs ") for t, _ in lane_bands(page, i)["ticks"])
        )
        image = chart_png(page, index)
        bands = lane_bands(page, index)
    finally:
        page.set_viewport_size(VIEWPORT)
    labels = [t for t, _ in bands["ticks"]]
    sm_lanes = {k: name for k, name in inside.stream_names if name.startswith("SMs ")}
    # Labels: the lanes' own names, the title never glued on; the overlay named by its mode.
    assert [t for t in labels if t.startswith("SMs ")] == list(sm_lanes.values())
    assert len(sm_lanes) == len(run.phases.lane_programs)
    assert not any(inside.label in t or run.timeline.label in t for t in labels), labels
    assert labels[-2:] == [f"CPU · {FUSED_GRAPH.title}", f"GPU · {FUSED_GRAPH.title}"]
    centre = dict(bands["ticks"])
    for stream, name in sm_lanes.items():
        rows = inside.gpu_stream == stream
        check_lane(
            image,
            bands,
            centre[name],
            inside.gpu_start[rows],
            inside.gpu_end[rows],
            on_white(GPU_COLOUR),
            name,
        )
    assert run.mode == PERSISTENT.name


def test_a_long_step_drawn_as_webgl_segments_lands_in_its_lanes(browser):
    """Past MAX_BARS intervals the lanes are WebGL segments (ui.charts._segment_trace): drawn on a page of
    their own (tests/browser/lanes_page.py), every lane's segments are in that lane's band."""
    from harness import new_context
    from lanes_page import long_step

    from ui.charts import MAX_BARS, lanes_figure

    step = long_step()
    assert lanes_figure(step, whole_step=True).data[0].type == "scattergl"
    assert len(step.gpu_start) * 3 > MAX_BARS
    context = new_context(browser)
    try:
        page = context.new_page()
        with app_server_process(script=str(LANES_PAGE)) as (base, _):
            open_app(page, base, wait_for=".js-plotly-plot")
            page.wait_for_timeout(500)  # WebGL draws a frame after the SVG
            image, bands = chart_png(page, 0), lane_bands(page, 0)
    finally:
        context.close()
    centre = dict(bands["ticks"])
    assert list(centre) == ["CPU", "GPU"]  # top to bottom
    assert centre["CPU"] < centre["GPU"]
    check_lane(image, bands, centre["CPU"], step.cpu_start, step.cpu_end, on_white(CPU_COLOUR), "CPU")
    check_lane(image, bands, centre["GPU"], step.gpu_start, step.gpu_end, on_white(GPU_COLOUR), "GPU")
