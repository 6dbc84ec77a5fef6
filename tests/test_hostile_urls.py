"""Hostile links: every bad query parameter is clamped or dropped with a notice naming it, never an exception.

Three layers: `check()` on single values (fast, exhaustive), the mechanics against real bound
widgets in a small page, and the whole app with a list of hostile URLs.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ui import url_params
from ui.url_params import Spec, as_spec, check

APP = str(Path(__file__).resolve().parents[1] / "app.py")
BATCH = Spec("int", 1, 512)
LAUNCH = Spec("float", 0.5, 50.0)
TABS = Spec("choice", options=url_params.TAB_LABELS)


# -- single values ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "spec, raw, kept, changed",
    [
        (BATCH, "64", "64", False),
        (BATCH, " 64 ", "64", False),
        (BATCH, "64.0", "64", False),
        (BATCH, "-5", "1", True),
        (BATCH, "0", "1", True),
        (BATCH, "99999", "512", True),
        (BATCH, "9" * 90, "512", True),
        (BATCH, "1e308", "512", True),
        (BATCH, "inf", "512", True),
        (BATCH, "-inf", "1", True),
        (BATCH, "3.7", "4", True),
        (BATCH, "nan", None, True),
        (BATCH, "NaN", None, True),
        (BATCH, "abc", None, True),
        (BATCH, "0x10", None, True),
        (BATCH, "", None, True),
        (BATCH, "   ", None, True),
        (BATCH, "1" * 10_000, None, True),
        (LAUNCH, "7.25", "7.25", False),
        (LAUNCH, "-1", "0.5", True),
        (LAUNCH, "1e400", "50", True),
        (Spec("bool"), "true", "true", False),
        (Spec("bool"), "TRUE", "true", False),
        (Spec("bool"), "yes", "true", True),
        (Spec("bool"), "0", "false", True),
        (Spec("bool"), "maybe", None, True),
        (TABS, "Bucketing", "Bucketing", False),
        (TABS, "check-yourself", "Check yourself", False),
        (TABS, "LIVE_GPU_PROBE", "Live GPU probe", False),
        (TABS, "Admin", None, True),
    ],
)
def test_check_clamps_or_drops(spec, raw, kept, changed):
    value, reason = check(spec, raw)
    assert value == kept
    assert (reason is not None) == changed


def test_as_spec_reads_every_declared_shape():
    assert as_spec(("int", 1, 512)) == Spec("int", 1.0, 512.0)
    assert as_spec(("bool", (False, True))).kind == "bool"
    assert as_spec("bool").kind == "bool"
    assert as_spec(("select", ["a", "b"])).options == ("a", "b")
    assert as_spec({"kind": "float", "min": 0, "max": 2}).hi == 2.0
    assert as_spec(("choice", ("Long title",), {"short": "Long title"})).aliases == (("short", "Long title"),)
    with pytest.raises(ValueError, match="lo"):
        Spec("int", 5, 1)
    with pytest.raises(ValueError, match="aliases"):
        Spec("choice", options=("a",), aliases=(("b", "c"),))


def test_every_tab_declaration_parses():
    specs = url_params.all_specs()
    assert specs["tab"].options == url_params.TAB_LABELS
    for declared, prefix in url_params.SPEC_SOURCES:
        for key, _raw in declared.items():
            assert key in specs, f"{key!r} did not parse"
            if prefix:
                assert key.startswith(prefix), f"{key!r} lacks the tab's prefix {prefix!r}"


# -- against real bound widgets -------------------------------------------------------------
def bound_widgets_page():
    import streamlit as st

    from ui import url_params

    url_params.sanitise(
        {
            "tab": ("choice", ("One", "Two")),
            "batch": ("int", 1, 512),
            "launch_us": ("float", 0.5, 50.0),
            "fusion": ("bool",),
            "preset": ("choice", ("Chapter preset", "Other"), {"chapter": "Chapter preset"}),
        }
    )
    one, two = st.tabs(["One", "Two"], key="tab", bind="query-params")
    if one.open:
        with one:
            st.slider("Batch size", 1, 512, 1, key="batch", bind="query-params")
            st.number_input("Launch", 0.5, 50.0, 6.0, key="launch_us", bind="query-params")
            st.toggle("Kernel fusion", key="fusion", bind="query-params")
            st.selectbox("Preset", ["Other", "Chapter preset"], key="preset", bind="query-params")
    if two.open:
        with two:
            st.write("second tab")


def run_bound(**params) -> AppTest:
    at = AppTest.from_function(bound_widgets_page, default_timeout=30)
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


@pytest.mark.parametrize(
    "params, widget, value, url",
    [
        ({"batch": "99999"}, "batch", 512, {"batch": "512"}),  # Streamlit alone would reset to 1
        ({"batch": "3.7"}, "batch", 4, {"batch": "4"}),
        ({"batch": ["3", "70"]}, "batch", 70, {"batch": "70"}),
        ({"batch": "nan"}, "batch", 1, {}),
        ({"launch_us": "-1"}, "launch_us", 0.5, {"launch_us": "0.5"}),
        ({"fusion": "yes"}, "fusion", True, {"fusion": "true"}),
        ({"preset": "chapter"}, "preset", "Chapter preset", {"preset": "Chapter preset"}),
    ],
)
def test_widgets_seed_from_the_corrected_value(params, widget, value, url):
    at = run_bound(**params)
    assert not at.exception
    shown = {"batch": at.slider, "launch_us": at.number_input, "fusion": at.toggle, "preset": at.selectbox}
    assert shown[widget](key=widget).value == value
    assert dict(at.query_params) == url  # the address bar is rewritten to the cleaned link
    if widget != "preset":
        assert any(f"`{widget}`" in w.value for w in at.warning)


def test_valid_links_pass_untouched_and_quietly():
    at = run_bound(batch="64", fusion="true", launch_us="7.25")
    assert not at.warning and not at.exception
    assert at.slider(key="batch").value == 64 and at.toggle(key="fusion").value is True
    assert at.number_input(key="launch_us").value == 7.25


def test_tab_spelling_is_forgiven_and_unknown_tab_is_reported():
    assert run_bound(tab="two").markdown[-1].value == "second tab"
    at = run_bound(tab="Admin")
    assert any("`tab`" in w.value for w in at.warning) and at.slider(key="batch").value == 1


# -- the whole app ----------------------------------------------------------------------------
TEN_KB = "x" * 10_000
HOSTILE_URLS = [
    # (query params, key the notice must name)
    ({"batch": "-5"}, "batch"),
    ({"batch": "99999"}, "batch"),
    ({"batch": "abc"}, "batch"),
    ({"batch": "NaN"}, "batch"),
    ({"batch": "inf"}, "batch"),
    ({"batch": ""}, "batch"),
    ({"batch": TEN_KB}, "batch"),
    ({"batch": ["2", "9999"]}, "batch"),
    ({"layers": "1e12"}, "layers"),
    ({"fusion": "perhaps", "graphs": "2"}, "fusion"),
    ({"launch_us": "-inf"}, "launch_us"),
    ({"hbm_GBps": "nan"}, "hbm_GBps"),
    ({"tab": "Admin"}, "tab"),
    ({"tab": TEN_KB}, "tab"),
    ({"utm_source": "mail"}, "utm_source"),
    ({TEN_KB: "1"}, "xxxxxxxx"),
    ({"[x](http://example.com)": "<script>alert(1)</script>"}, "[x](http://example.com)"),
    # Several bad keys in one link (tests/browser/test_links_and_sessions.py sends the markup and repeated-key
    # links through Chromium; these, where the browser adds nothing, are checked here).
    ({"batch": "-5", "fusion": "maybe", "layers": "inf"}, "fusion"),
    ({"batch": "NaN", "graphs": "", "tab": "Admin", "utm_source": "x"}, "utm_source"),
]


def run_app(params: dict) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def assert_page_alive(at: AppTest) -> None:
    assert not at.exception, [e.message for e in at.exception]
    assert at.title and at.title[0].value == "launch-bound"
    assert set(url_params.TAB_LABELS) <= {t.label for t in at.tabs}


@pytest.mark.parametrize("params, key", HOSTILE_URLS, ids=lambda v: str(v)[:30])
def test_hostile_url_shows_a_notice_and_keeps_the_page(params, key):
    at = run_app(params)
    assert_page_alive(at)
    notices = [w.value for w in at.warning if "Some settings in this link" in w.value]
    assert len(notices) == 1
    assert key in notices[0]
    assert "](http" not in notices[0].replace("`[x](http://example.com)`", "")  # no live link
    assert len(notices[0]) < 2_000  # a 10 kB value is quoted, not echoed


def test_clamped_values_reach_the_simulator():
    at = run_app({"batch": "99999", "layers": "0", "fusion": "yes"})
    assert_page_alive(at)
    assert at.number_input(key="batch").value == 512
    assert at.slider(key="layers").value == 1
    assert at.toggle(key="fusion").value is True


def test_many_unknown_keys_make_one_short_notice():
    at = run_app({f"junk{i}": str(i) for i in range(300)})
    assert_page_alive(at)
    (notice,) = [w.value for w in at.warning if "Some settings" in w.value]
    assert "and 292 more" in notice


def test_every_declared_key_survives_hostile_values():
    # Each tab's own keys, from its declaration: NaN for numbers, too long for text, junk for the rest.
    # Sent a few keys per link (the notice names up to MAX_NOTICES keys), on the tab that owns them.
    specs = url_params.all_specs()
    tab_of_prefix = {"bk_": "Bucketing", "pr_": "Live GPU probe", "cal_": "Calibration"}
    by_tab: dict[str, list[str]] = {}
    for key in specs:
        if key != "tab":
            tab = next((t for p, t in tab_of_prefix.items() if key.startswith(p)), "Simulator")
            by_tab.setdefault(tab, []).append(key)
    for tab, keys in by_tab.items():
        for i in range(0, len(keys), url_params.MAX_NOTICES):
            chunk = keys[i : i + url_params.MAX_NOTICES]
            too_long = {k: "x" * (int(specs[k].hi or 0) + 1) for k in chunk}
            params = {
                k: {"int": "nan", "float": "nan", "text": too_long[k]}.get(specs[k].kind, "\u202e<junk>")
                for k in chunk
            }
            at = run_app({"tab": tab, **params})
            assert_page_alive(at)
            notice = " ".join(w.value for w in at.warning)
            for key in chunk:
                assert f"`{key}`" in notice, (tab, key)


def test_nan_never_reaches_a_number():
    # Sanity of the premise: float() happily parses these, so they must be caught explicitly.
    assert math.isnan(float("nan")) and math.isinf(float("1e400"))


# -- every control is bound, and the sanitiser knows its real range ---------------------------
CONTROL_TYPES = (
    "slider",
    "select_slider",
    "toggle",
    "checkbox",
    "selectbox",
    "number_input",
    "radio",
    "text_input",
    "text_area",
    "multiselect",
    "date_input",
    "color_picker",
    "button_group",
)
# Controls that must not be in a link: the quiz's answers are per session. (The run and trace pickers are
# bound: a link carries a shipped run or trace; an upload's, which exists only in its session, falls back.)
UNBOUND_ON_PURPOSE = (
    "quiz_",
    "batch_stops",
    "tr_upload_",
)  # batch_stops follows the bound "batch" box; tr_upload_ is the trace uploader
VIEWS = [
    ("Simulator", {}),
    ("Bucketing", {}),
    ("Bucketing", {"bk_view": "Padding-corruption demo"}),
    ("Live GPU probe", {}),
    ("Your trace", {}),
    ("Calibration", {}),
    ("Check yourself", {}),
]


# Number boxes with no bounds in the browser (which would drop an out-of-range value silently): the page
# clamps the value to the declared range itself and says why (tests/test_numbers_agree.py).
UNBOUNDED_IN_THE_BROWSER = frozenset({"batch"})


@pytest.mark.parametrize("tab, extra", VIEWS, ids=[f"{t}{'+' if e else ''}" for t, e in VIEWS])
def test_every_control_is_bound_and_declared_with_its_real_range(tab, extra):
    specs = url_params.all_specs()
    at = run_app({"tab": tab, **extra})
    assert_page_alive(at)
    for kind in CONTROL_TYPES:
        for widget in at.get(kind):
            proto, key = widget.proto, getattr(widget, "key", None) or widget.proto.id
            bound = proto.query_param_key if proto.HasField("query_param_key") else None
            if bound is None:
                assert key.startswith(UNBOUND_ON_PURPOSE), f"{tab}: {kind} {key!r} is not bound to the URL"
                continue
            spec = specs.get(bound)
            assert spec is not None, f"{tab}: {bound!r} is bound but no *_PARAMS declares it"
            if kind in ("slider", "number_input") and spec.kind in ("int", "float"):
                if (
                    bound in UNBOUNDED_IN_THE_BROWSER
                ):  # the page puts an out-of-range value back, and says why
                    assert proto.min < spec.lo and proto.max > spec.hi  # Streamlit sends its widest range
                    continue
                assert (spec.lo, spec.hi) == (proto.min, proto.max), f"{bound}: declared range differs"
            if kind in ("selectbox", "radio"):
                shown = list(widget.options)  # what Streamlit writes into the link
                if spec.kind == "choice":
                    missing = [o for o in shown if o not in spec.options]
                    assert not missing, f"{bound}: options {missing} would be dropped from a link"
                elif spec.kind == "text":  # a title or label the page checks itself
                    assert all(len(o) <= spec.hi for o in shown), bound
                else:
                    assert all(spec.lo <= float(o) <= spec.hi for o in shown), bound
