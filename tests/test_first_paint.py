"""Issue 24, item 6: the Simulator's first screen (controls and readouts) comes in a run of its own; the
charts, the tables and the Advanced inputs come in the run after the browser reports it has shown it
(ui/first_paint.py). AppTest has no browser: `_browser_attached` is patched to say there is one, and
the browser's report is the session key it sets. tests/browser/test_first_view_order.py checks the
same in Chromium, report included."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import ui.first_paint as first_paint
from ui.common import READOUT_LABELS
from ui.simulator.tab import BYTES_INPUT, HARDWARE_INPUTS, MODEL_INPUTS

APP = str(Path(__file__).resolve().parents[1] / "app.py")
ADVANCED_KEYS = {key for key, *_ in (*MODEL_INPUTS, BYTES_INPUT, *HARDWARE_INPUTS)}


def first_run(**params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, at.exception
    return at


def readouts(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric if m.label in READOUT_LABELS}


def drawn(at: AppTest) -> dict[str, object]:
    return {
        "charts": sorted(chart.proto.id.rsplit("-", 1)[-1] for chart in at.get("plotly_chart")),
        "tables": len(at.dataframe),
        "advanced": sorted(ADVANCED_KEYS & {n.key for n in at.number_input}),
        "reporter": [e.key for e in at.get("bidi_component")],
    }


def report(at: AppTest) -> None:
    """What the reporter's callback sets (ui/first_paint.py), before the run its report starts."""
    at.session_state[first_paint.SEEN] = True
    at.session_state[first_paint.COMPLETING] = True


@pytest.fixture
def browser_attached(monkeypatch):
    monkeypatch.setattr(first_paint, "_browser_attached", lambda: True)


def test_the_charts_wait_for_the_browsers_report(browser_attached):
    at = first_run()
    assert len(readouts(at)) == len(READOUT_LABELS)
    assert drawn(at) == {"charts": [], "tables": 0, "advanced": [], "reporter": ["first_screen"]}
    assert len(at.get("skeleton")) == 1  # where the lanes go, so nothing below them moves
    first_screen = readouts(at)

    report(at)
    at.run()
    assert not at.exception, at.exception
    assert drawn(at) == {
        "charts": ["sim_lanes", "sim_sweep"],
        "tables": 1,
        "advanced": sorted(ADVANCED_KEYS),
        "reporter": [],
    }
    assert not at.get("skeleton")
    assert readouts(at) == first_screen


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"batch": "33", "fusion": "true", "graphs": "true"},
        {"preset": "llama3-8b-h100", "layers": "12", "tp": "2"},
        {"preset": "probe-h200-calibrated", "fusion": "true"},
        {"hidden": "2048", "launch_us": "9"},  # an Advanced figure in the link: drawn on the first screen
    ],
)
def test_the_first_screens_readouts_are_the_whole_pages(params, monkeypatch):
    whole = readouts(first_run(**params))  # no browser: everything in one run, as before
    monkeypatch.setattr(first_paint, "_browser_attached", lambda: True)
    assert readouts(first_run(**params)) == whole


def test_an_advanced_figure_in_the_url_is_on_the_first_screen(browser_attached):
    at = first_run(hidden="2048", launch_us="9")
    assert drawn(at)["advanced"] == sorted(ADVANCED_KEYS)
    assert at.number_input(key="hidden").value == 2048
    assert drawn(at)["charts"] == []


def test_without_a_browser_everything_is_drawn_at_once():
    at = first_run()
    assert drawn(at)["charts"] == ["sim_lanes", "sim_sweep"]
    assert drawn(at)["reporter"] == []


# The report reruns the script with the widgets' values as the browser held them when it reported. A
# batch typed (or a slider moved) just before it is in that view, but not what the server made of it
# (the other control following), which the browser had not received yet: each test below sends that
# view with the report, as Chromium did in tests/browser/test_first_view_order.py.
def report_with_the_browsers_view(at: AppTest, **shown) -> None:
    for key, value in shown.items():
        widget = at.select_slider(key=key) if key == "batch_stops" else at.number_input(key=key)
        widget.set_value(value)
    report(at)
    at.run()
    assert not at.exception, at.exception


def test_a_batch_typed_before_the_report_is_kept(browser_attached):
    at = first_run()
    at.number_input(key="batch").set_value(64).run()
    assert readouts(at) == readouts(first_run(batch="64"))
    report_with_the_browsers_view(at, batch_stops=1)  # the slider as the browser still showed it
    assert at.number_input(key="batch").value == 64
    assert at.select_slider(key="batch_stops").value == 64
    assert readouts(at) == readouts(first_run(batch="64"))


def test_a_slider_moved_before_the_report_is_kept(browser_attached):
    at = first_run()
    at.select_slider(key="batch_stops").set_value(16).run()
    assert readouts(at) == readouts(first_run(batch="16"))  # the first screen follows the slider at once
    report_with_the_browsers_view(at, batch=1)  # the number box as the browser still showed it
    assert at.number_input(key="batch").value == 16
    assert at.select_slider(key="batch_stops").value == 16
    assert readouts(at) == readouts(first_run(batch="16"))


def test_a_batch_typed_after_the_slider_on_the_first_screen_wins(browser_attached):
    at = first_run()
    at.select_slider(key="batch_stops").set_value(16).run()
    at.number_input(key="batch").set_value(40).run()
    report_with_the_browsers_view(at)
    assert at.number_input(key="batch").value == 40
    assert at.select_slider(key="batch_stops").value == 40


def test_a_links_notice_stays_on_the_whole_page(browser_attached):
    """The first screen's run cleans the link (so the report's run finds nothing to clean); the notice it
    showed is shown again on the whole page, then goes with the next change as before."""
    at = first_run(batch="-5", fusion="maybe")
    notice = [w.value for w in at.warning if "link were changed" in w.value]
    assert len(notice) == 1 and "fusion" in notice[0]
    report(at)
    at.run()
    assert not at.exception, at.exception
    assert [w.value for w in at.warning if "link were changed" in w.value] == notice
    assert drawn(at)["charts"] == ["sim_lanes", "sim_sweep"]
    at.toggle(key="graphs").set_value(True).run()
    assert not [w.value for w in at.warning if "link were changed" in w.value]
