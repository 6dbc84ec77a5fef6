"""Browser-test plumbing: one app server and one Chromium per session, a browser context of its own
for every page a test opens (its own visitor: its own cookies, storage and Streamlit session), and a
full-page screenshot in artifacts/ whenever a test fails.

The contexts are kept warm between tests (`ContextPool`): once a test is done with one, its page goes
back to about:blank with cookies, storage and permissions cleared, and the next test that asks for a
page gets it. Streamlit starts a new session for every page load, so a reused page is a new visitor to
the server; only Chromium's renderer and HTTP cache stay warm, which makes a page load about a third
as long on the 2-core machine (median 3.3 s -> 1.2 s to the drawn Simulator, 2026-12-03).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # the app's packages: sim, ui
import harness

ARTIFACTS = harness.ROOT / "artifacts"
HERE = Path(__file__).resolve().parent
CLIPBOARD = ["clipboard-read", "clipboard-write"]


def pytest_collection_modifyitems(config, items):
    missing = harness.missing_requirements()
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.browser)
            if missing:
                item.add_marker(pytest.mark.skip(reason=f"browser tests need Chromium: {missing}"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # Keep each phase's report on the item so the page fixture knows whether the test failed.
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(scope="session")
def app_url():
    ARTIFACTS.mkdir(exist_ok=True)
    with harness.app_server(log_path=ARTIFACTS / "browser-server.log") as base:
        yield base


@pytest.fixture(scope="session")
def browser():
    with harness.chromium() as b:
        yield b


class ContextPool:
    """Browser contexts with one page each, handed out one per visitor and taken back clean."""

    def __init__(self, browser):
        self.browser = browser
        self.idle: list = []

    def take(self):
        context = self.idle.pop() if self.idle else harness.new_context(self.browser)
        context.set_default_timeout(30_000)
        return context, context.pages[0] if context.pages else context.new_page()

    def give_back(self, context) -> None:
        """Reset the context (the page leaves the app, nothing of the visitor stays) and keep it."""
        try:
            pages = context.pages
            for extra in pages[1:]:
                extra.close()
            page = pages[0]
            if page.url.startswith("http"):
                page.evaluate("() => { localStorage.clear(); sessionStorage.clear(); }")
            page.goto("about:blank")
            context.clear_cookies()
            context.clear_permissions()
        except Exception:
            context.close()  # anything odd: the next visitor gets a fresh context instead
            return
        self.idle.append(context)

    def close(self) -> None:
        for context in self.idle:
            context.close()


@pytest.fixture(scope="session")
def context_pool(browser):
    pool = ContextPool(browser)
    yield pool
    pool.close()


@pytest.fixture
def new_page(context_pool, app_url, request):
    """Factory for pages, each in its own browser context (its own visitor and Streamlit session).

    `new_page(clipboard=True)` also lets the page read and write the clipboard (for the app's origin).
    """
    contexts = []

    def make(clipboard: bool = False):
        context, page = context_pool.take()
        contexts.append(context)
        if clipboard:  # everywhere (the Copy link button is in an iframe) and for the app's origin
            context.grant_permissions(CLIPBOARD)
            context.grant_permissions(CLIPBOARD, origin=app_url.rstrip("/"))
        return page

    yield make
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for i, context in enumerate(contexts):
        if failed:
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
            for j, page in enumerate(context.pages):
                try:
                    page.screenshot(path=str(ARTIFACTS / f"{name}-{i}{j}.png"), full_page=True)
                except Exception:
                    pass
            context.close()  # a failed test's visitor is not reused
        else:
            context_pool.give_back(context)


@pytest.fixture
def page(new_page):
    return new_page()
