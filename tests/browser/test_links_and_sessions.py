"""Shareable links, hostile links and simultaneous sessions, in Chromium."""

from __future__ import annotations

import pytest
from harness import (
    click_toggle,
    eventually,
    metric_value,
    open_app,
    query_params,
    query_params_when,
    rerun_after,
    slider_input,
    slider_value,
    toggle_state,
)

pytestmark = pytest.mark.browser
CHART = "[data-testid=stPlotlyChart]"
NOTICE = "[data-testid=stAlert]:has-text('Some settings in this link were changed')"


def selected_tab(page) -> str:
    return page.locator("[data-testid=stTab][aria-selected=true]").first.inner_text().strip()


def click_tab(page, label: str) -> None:
    rerun_after(page, lambda: page.locator("[data-testid=stTab]", has_text=label).first.click())


def readouts(page) -> dict[str, str]:
    labels = ("Kernels / step", "Step time", "Bound by", "vs unoptimised", "GPU utilisation")
    return {label: metric_value(page, label) for label in labels}


def test_the_link_carries_the_open_tab(new_page, app_url):
    first = new_page()
    open_app(first, app_url, wait_for=CHART)
    click_tab(first, "Check yourself")
    assert selected_tab(first) == "Check yourself"
    assert query_params(first).get("tab") == "Check yourself"

    second = new_page()
    open_app(second, first.url)
    assert selected_tab(second) == "Check yourself"
    assert second.get_by_text("Question 1 of 6").is_visible()
    # A hand-typed spelling of the tab works too, without a complaint.
    third = new_page()
    open_app(third, f"{app_url}/?tab=bucketing")
    assert selected_tab(third) == "Bucketing" and not third.locator(NOTICE).count()


HOSTILE_QUERIES = [
    # (query, key the notice must name): the links where the browser adds something -- a percent-encoded key and
    # value that must not become markup, a 10 kB value in the address bar, and a repeated key whose clamped value
    # the slider and the cleaned address bar show. Links of several bad plain keys are checked through the whole
    # app without a browser (tests/test_hostile_urls.py, HOSTILE_URLS).
    ("batch=" + "9" * 10_000, "batch"),
    ("%5Bx%5D(javascript:alert(1))=%3Cimg%20src=x%20onerror=alert(1)%3E", "javascript"),
    ("batch=2&batch=700", "batch"),  # last: its clamped value is checked below
]


def test_hostile_links_show_a_notice_and_never_an_exception(page, app_url):
    for query, key in HOSTILE_QUERIES:
        open_app(page, app_url, query, wait_for=CHART)
        notice = page.locator(NOTICE)
        assert notice.count() == 1, query
        assert key in notice.inner_text(), query
        assert page.locator("[data-testid=stException]").count() == 0, query
        assert page.get_by_role("heading", name="launch-bound").is_visible()
        assert metric_value(page, "Bound by") in ("CPU launch", "GPU")  # the simulator still draws
        assert page.locator("img[src=x]").count() == 0  # nothing from the link became markup
    # The repeated batch kept its last value, clamped 700 -> 512, and the address bar shows the cleaned link.
    assert slider_value(page, "Batch size") == 512
    assert eventually(lambda: query_params(page) == {"batch": "512"})


def test_two_sessions_never_share_settings(new_page, app_url):
    sim = new_page()
    probe = new_page()
    open_app(sim, app_url, wait_for=CHART)
    open_app(probe, f"{app_url}/?tab=Live+GPU+probe")
    assert selected_tab(probe) == "Live GPU probe"

    # The simulator session moves away from every default.
    slider_input(sim, "Batch size").focus()
    rerun_after(sim, lambda: sim.keyboard.press("End"))
    rerun_after(sim, lambda: click_toggle(sim, "Kernel fusion"))
    query_params_when(sim, lambda q: q == {"batch": "512", "fusion": "true"})

    # The probe session sees none of it, on its own tab or on the simulator's.
    assert "batch" not in query_params(probe) and "fusion" not in query_params(probe)
    click_tab(probe, "Simulator")
    probe.wait_for_selector(CHART)
    assert slider_value(probe, "Batch size") == 1 and not toggle_state(probe, "Kernel fusion")
    assert metric_value(probe, "Bound by") == "CPU launch"
    slider_input(probe, "Batch size").focus()
    rerun_after(probe, lambda: probe.keyboard.press("ArrowRight"))
    assert slider_value(probe, "Batch size") == 2

    # ...and its change does not leak back into the first session either.
    rerun_after(sim, lambda: click_toggle(sim, "CUDA graphs"))
    assert slider_value(sim, "Batch size") == 512 and toggle_state(sim, "Kernel fusion")
    query_params_when(sim, lambda q: q == {"batch": "512", "fusion": "true", "graphs": "true"})
    assert selected_tab(sim) == "Simulator"


def test_copy_link_copies_the_current_view_and_it_opens_the_same_view(new_page, app_url):
    """Set up a view, click "Copy link" (in its iframe) and read what reached the clipboard: the address
    with every control in it, which reopens the same view, without a notice, in another visitor's
    browser. (The graphs toggle's trip through a copied link is test_eight_tasks.py's test_h.)"""
    first = new_page(clipboard=True)
    open_app(first, app_url, wait_for=CHART)
    slider_input(first, "Batch size").focus()
    for _ in range(3):
        rerun_after(first, lambda: first.keyboard.press("PageUp"))  # big steps along the slider
    rerun_after(first, lambda: click_toggle(first, "Kernel fusion"))
    batch = slider_value(first, "Batch size")
    assert batch > 3
    query_params_when(first, lambda q: q == {"batch": str(batch), "fusion": "true"})
    shown = readouts(first)
    first.evaluate("() => navigator.clipboard.writeText('nothing copied yet')")
    assert first.evaluate("() => navigator.clipboard.readText()") == "nothing copied yet"

    frame = first.frame_locator("[data-testid=stIFrame]").first
    frame.locator("button#copy").click()
    assert eventually(lambda: frame.locator("#label").inner_text() == "Link copied")
    copied = first.evaluate("() => navigator.clipboard.readText()")
    assert copied == first.url
    assert frame.locator("body").get_attribute("data-copied") == copied
    assert query_params(first) == {"batch": str(batch), "fusion": "true"}

    second = new_page()  # another browser context: a different visitor with the copied link
    open_app(second, copied, wait_for=CHART)
    assert slider_value(second, "Batch size") == batch
    assert toggle_state(second, "Kernel fusion") and not toggle_state(second, "CUDA graphs")
    assert eventually(lambda: readouts(second) == shown)
    assert not second.locator(NOTICE).count()
