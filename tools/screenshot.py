"""Take the README screenshots: the app at its defaults, 1400 px wide, down to the end of the lanes chart; and the
Your trace tab's step as traced beside the step without the profiler.

    python tools/screenshot.py [--out docs/screenshot.png] [--query "batch=1"]
    python tools/screenshot.py --trace [--out docs/your_trace.png]

Uses the browser tests' harness (`tests/browser/harness.py`): a real `streamlit run`
and Debian's headless Chromium, so the picture is what a visitor sees.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "browser"))
import harness  # noqa: E402

WIDTH = 1400
MARGIN_PX = 4  # below the lanes chart (more would show half of the caption under it)
TOP_PX = 28  # above the title: the empty band of the hidden toolbar is cut off


def take(out: Path, query: str = "") -> tuple[int, int]:
    """Write the screenshot; returns its (width, height) in pixels."""
    with harness.app_server() as base, harness.chromium() as browser:
        page = harness.new_context(browser, device_scale_factor=1).new_page()
        harness.open_app(page, base, query, wait_for="[data-testid=stPlotlyChart] .main-svg")
        harness.eventually(lambda: harness.lanes(page))  # the lanes chart has its data drawn
        page.wait_for_timeout(800)  # let Plotly finish its layout transitions
        lanes_chart = page.locator("[data-testid=stPlotlyChart]").first
        lanes_chart.scroll_into_view_if_needed()
        page.evaluate("window.scrollTo(0, 0)")
        box = lanes_chart.bounding_box()
        height = int(box["y"] + box["height"] + MARGIN_PX)
        page.set_viewport_size({"width": WIDTH, "height": max(height, 600)})
        page.wait_for_timeout(500)
        out.parent.mkdir(parents=True, exist_ok=True)
        title = page.get_by_role("heading", name="launch-bound").first.bounding_box()
        top = max(int(title["y"]) - TOP_PX, 0)
        page.screenshot(path=str(out), clip={"x": 0, "y": top, "width": WIDTH, "height": height - top})
        return WIDTH, height - top


def take_trace(out: Path) -> tuple[int, int]:
    """The Your trace tab at its default trace: from the side-by-side's heading to the end of its chart."""
    with harness.app_server() as base, harness.chromium() as browser:
        page = harness.new_context(browser, device_scale_factor=1).new_page()
        page.set_viewport_size({"width": WIDTH, "height": 1000})
        harness.open_app(page, base, "tab=Your+trace", wait_for="[data-testid=stPlotlyChart] .main-svg")
        chart = page.locator(".st-key-tr_untraced_lanes")
        chart.locator(".main-svg").first.wait_for()
        chart.scroll_into_view_if_needed()
        page.wait_for_timeout(1500)  # Plotly's layout transitions
        heading = page.get_by_role(
            "heading", name="The step as traced, and without the profiler"
        ).bounding_box()
        box = chart.bounding_box()
        top = max(int(heading["y"]) - 12, 0)  # the caption above the heading stays out
        height = int(box["y"] + box["height"] + MARGIN_PX) - top
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), clip={"x": 0, "y": top, "width": WIDTH, "height": height})
        return WIDTH, height


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="docs/screenshot.png, or docs/your_trace.png")
    parser.add_argument("--trace", action="store_true", help="the Your trace tab's side-by-side instead")
    parser.add_argument("--query", default="", help="query string for a non-default view, e.g. 'fusion=true'")
    args = parser.parse_args(argv)
    missing = harness.missing_requirements()
    if missing:
        print(f"cannot take the screenshot: {missing}")
        return 2
    if args.trace:
        args.out = args.out or ROOT / "docs" / "your_trace.png"
        width, height = take_trace(args.out)
    else:
        args.out = args.out or ROOT / "docs" / "screenshot.png"
        width, height = take(args.out, args.query)
    print(f"wrote {args.out} ({width}x{height})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
