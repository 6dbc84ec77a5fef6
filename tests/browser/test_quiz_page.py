"""The quiz in Chromium: the score survives switching tabs (session state) and never enters the link."""

from __future__ import annotations

import pytest
from harness import metric_value, open_app, query_params, rerun_after

from ui.quiz import QUESTIONS

pytestmark = pytest.mark.browser


def test_score_is_kept_for_the_session_but_not_in_the_link(new_page, app_url):
    page = new_page()
    open_app(page, app_url, "tab=Check+yourself")
    assert metric_value(page, "Score") == "0/6"
    q = QUESTIONS[0]
    rerun_after(page, lambda: page.get_by_text(q.options[q.answer], exact=True).click())
    assert metric_value(page, "Score") == "1/6"
    assert page.get_by_text("See it on this page:").first.is_visible()

    # Away to the simulator and back: the lazy tab re-renders, the answer is still there.
    rerun_after(page, lambda: page.locator("[data-testid=stTab]", has_text="Simulator").click())
    rerun_after(page, lambda: page.locator("[data-testid=stTab]", has_text="Check yourself").click())
    assert metric_value(page, "Score") == "1/6"
    assert set(query_params(page)) <= {"tab"}

    # Someone opening the same link starts from zero.
    other = new_page()
    open_app(other, page.url)
    assert metric_value(other, "Score") == "0/6"
