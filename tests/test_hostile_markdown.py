"""Issue 15, item 4: strings from an uploaded file (device, versions, command, errors, check
details, the file's own name) render as text. A device name made of a markdown image and link
must not become a live image or link anywhere: the probe tab's info box and warnings, the
Calibration preset's title and caption, the upload error."""

from __future__ import annotations

import json
import re

from app_pages import as_read, fake_run
from test_hostile_uploads import good_result, page_on

from ui.common import code, plain

HOSTILE = (
    "![x](http://127.0.0.1:9/pixel.png) [click me](https://example.com) <b>bold</b> :red[red] # head "
    "https://evil.example/x www.evil.example me@evil.example"  # bare: GitHub's autolinks (issue 24)
)
LIVE = re.compile(r"(?<!\\)(\]\(|!\[|<http|:red\[|:material/)")  # unescaped link, image, autolink, directive
# What Streamlit's markdown links when bare, backslash escapes or not: read with the escapes removed.
BARE_LINK = re.compile(r"(?i)\b(https?|ftp)://|\bwww\.|[\w.+-]@[\w-]")


def live_markdown(text: str) -> bool:
    """Would this markdown source show a link, an image, HTML or a directive?"""
    return bool(LIVE.search(text) or BARE_LINK.search(re.sub(r"\\(.)", r"\1", text)))


def page_text(at) -> list[str]:
    """Every string the page sent: markdown sources (markdown, captions, alerts, subheaders) and plain text."""
    kinds = ("markdown", "caption", "info", "warning", "error", "success", "subheader", "text")
    return [el.value for kind in kinds for el in at.get(kind)]


def assert_inert(at, where: str) -> None:
    assert not at.exception, f"{where}: {[e.message for e in at.exception]}"
    texts = page_text(at)
    assert any("click me" in t for t in texts), f"{where}: the hostile string is not shown at all"
    as_text = [el.value for el in at.get("text")]  # st.text: never parsed as markdown
    live = [t for t in texts if live_markdown(t) and "click me" in t and t not in as_text]
    assert not live, f"{where}: rendered as markdown: {live}"


def test_plain_escapes_every_markdown_construct():
    assert live_markdown(HOSTILE) and BARE_LINK.search("see www.example.com or https://e.com/x")
    assert not live_markdown(plain(HOSTILE))
    for bare in (
        "https://evil.example/x",
        "HTTP://E.COM",
        "www.evil.example",
        "WWW.E.COM",
        "a@b.c",
        "mailto:a@b.c",
    ):
        assert not live_markdown(plain(bare)), bare
        assert as_read(plain(bare)).replace("\u2060", "") == bare  # reads the same: only a word joiner added
    assert plain("a\nb\r\n# c") == "a b \\# c"  # no new block from a line break
    assert code("python -m gpu_probe") == "`python -m gpu_probe`"
    assert not live_markdown(code("`x` " + HOSTILE))


def test_probe_tab_shows_file_strings_as_text():
    data = good_result()
    data["device"] = HOSTILE
    data["torch"] = "[t](https://example.com/t)"
    data["errors"] = [HOSTILE]
    data["checks"] = {"c": {"passed": False, "detail": HOSTILE}}
    at = page_on("Live GPU probe")
    at.file_uploader(key="pr_upload").set_value(
        ("x.json", json.dumps(data).encode(), "application/json")
    ).run()
    assert_inert(at, "probe tab")
    assert any("During this run" in w.value for w in at.warning)


def test_upload_error_names_the_file_as_text():
    at = page_on("Live GPU probe")
    at.file_uploader(key="pr_upload").set_value((f"{HOSTILE}.json", b"not json", "application/json")).run()
    assert_inert(at, "upload error")


def test_calibration_title_and_caption_are_text():
    data = fake_run(device=HOSTILE)
    at = page_on("Calibration", cal_view="As a simulator preset")
    at.file_uploader(key="cal_upload").set_value(
        ("c.json", json.dumps(data).encode(), "application/json")
    ).run()
    assert_inert(at, "calibration tab")
    assert any(
        "click me" in t.value for t in at.text
    )  # the preset title, with the file's device name, as text


def test_calibrated_preset_device_name_is_text_on_the_simulator_tab(monkeypatch):
    """The calibrated preset's hardware name is the recorded file's device (Advanced's caption)."""
    import streamlit as st

    import core.probe_result as probe_result
    import ui.probe_results

    res = probe_result.load_result(fake_run(device=HOSTILE), timeline_source="recorded")
    monkeypatch.setattr(probe_result, "recorded_result", lambda: res)
    monkeypatch.setattr(ui.probe_results, "MORE_RECORDED", ())
    st.cache_resource.clear()
    try:
        at = page_on("Simulator", preset="probe-h200-calibrated")
        assert_inert(at, "simulator tab, calibrated preset")
        assert any("click me" in c.value and "Hardware figures" in c.value for c in at.caption)
    finally:
        st.cache_resource.clear()


def test_an_unreadable_recorded_run_says_why_as_text(monkeypatch):
    import streamlit as st

    import core.probe_result as probe_result

    def broken():
        raise ValueError(HOSTILE)

    monkeypatch.setattr(probe_result, "recorded_result", broken)
    st.cache_resource.clear()
    try:
        at = page_on("Live GPU probe")
        assert_inert(at, "probe tab without a recorded run")
        assert any("No recorded run could be read" in w.value for w in at.warning)
    finally:
        st.cache_resource.clear()


def test_live_measurement_messages_are_text(monkeypatch):
    """Progress lines and a failure's message from the live probe (its text is the exception's)."""
    import streamlit as st

    import gpu_probe.live
    import ui.probe.tab

    monkeypatch.setattr(ui.probe.tab, "_cuda", lambda: True)
    monkeypatch.setattr(gpu_probe.live, "open_session", lambda *a, progress=None, **k: progress(HOSTILE))

    def fails(*args, **kwargs):
        raise RuntimeError(HOSTILE)

    monkeypatch.setattr(gpu_probe.live, "measure", fails)
    st.cache_resource.clear()
    try:
        at = page_on("Live GPU probe", pr_live="true")
        assert_inert(at, "live probe failure")
        assert any("The measurement failed" in e.value for e in at.error)
    finally:
        st.cache_resource.clear()


def test_padding_demo_failure_is_text(monkeypatch):
    import ui.buckets.padding_demo
    from ui.buckets.tab import VIEWS

    def fails(pad_rows_to):
        raise RuntimeError(HOSTILE)

    monkeypatch.setattr(ui.buckets.padding_demo, "_cached_demo", fails)
    at = page_on("Bucketing", bk_view=VIEWS[1])
    assert_inert(at, "padding demo failure")
    assert any("The demo could not run" in e.value for e in at.error)
