"""Browser-test plumbing: one app server and one Chromium per session, a fresh context per test,
and a full-page screenshot in artifacts/ whenever a test fails."""

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


@pytest.fixture
def new_page(browser, request):
    """Factory for pages, each in its own browser context (its own Streamlit session)."""
    contexts = []

    def make():
        context = harness.new_context(browser)
        context.set_default_timeout(30_000)
        contexts.append(context)
        return context.new_page()

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
        context.close()


@pytest.fixture
def page(new_page):
    return new_page()
