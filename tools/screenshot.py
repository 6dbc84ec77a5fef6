"""Take the README screenshot: the app at its defaults, 1400 px wide, down to the end of the lanes chart.

    python tools/screenshot.py [--out docs/screenshot.png] [--query "batch=1"]

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshot.png")
    parser.add_argument("--query", default="", help="query string for a non-default view, e.g. 'fusion=true'")
    args = parser.parse_args(argv)
    missing = harness.missing_requirements()
    if missing:
        print(f"cannot take the screenshot: {missing}")
        return 2
    width, height = take(args.out, args.query)
    print(f"wrote {args.out} ({width}x{height})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
