"""Hostile uploads through the page (AppTest): a probe result on the probe and calibration tabs,
a batch-size histogram on the bucketing tab. Each bad file gets a message and no traceback, and
what the page already held (an earlier good upload, the other controls) is still there."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from probe_results import probe_result
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")
MB = 2**20


def good_result() -> dict:
    """A small, valid probe result (the schema of core.probe_result)."""
    return probe_result(device="Hostile Test GPU")


def variant(edit) -> bytes:
    data = copy.deepcopy(good_result())
    edit(data)
    return json.dumps(data).encode()  # json.dumps writes NaN/Infinity tokens: hostile on purpose


def run_field(name, value):
    return lambda d: d["runs"][0].__setitem__(name, value)


BAD_RESULTS = {
    "not_json.json": b"this is not JSON at all",
    "binary.json": bytes(range(256)) * 64,
    "empty.json": b"",
    "top_level_list.json": b"[1, 2, 3]",
    "nested_bomb.json": b"[" * 200_000 + b"]" * 200_000,
    "huge.json": b'{"pad": "' + b"x" * (21 * MB) + b'"}',
    "nan_step.json": variant(run_field("step_us_median", float("nan"))),
    "negative_step.json": variant(run_field("step_us_median", -5.0)),
    "absurd_step.json": variant(run_field("step_us_median", 1e300)),
    "infinite_busy.json": variant(run_field("gpu_busy_us", float("inf"))),
    "string_batch.json": variant(run_field("batch", "lots")),
    "unknown_mode.json": variant(run_field("mode", "warp-speed")),
    "no_runs.json": variant(lambda d: d.pop("runs")),
    "runs_not_list.json": variant(lambda d: d.__setitem__("runs", {"a": 1})),
    "bad_timeline.json": variant(
        lambda d: d["runs"][0]["timeline"]["gpu"].__setitem__("launched_by", [5, 9])
    ),
    "negative_duration.json": variant(
        lambda d: d["runs"][0]["timeline"]["cpu"].__setitem__("dur_us", [-1, 5])
    ),
}


def page_on(tab: str, **params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["tab"] = tab
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def messages(at: AppTest) -> str:
    """The page's errors and warnings as a reader sees them (markdown escapes removed)."""
    return re.sub(r"\\(.)", r"\1", " ".join(m.value for m in list(at.error) + list(at.warning)))


def assert_no_traceback(at: AppTest, what: str) -> None:
    assert not at.exception, f"{what}: {[e.message for e in at.exception]}"
    assert at.title and at.title[0].value == "launch-bound"


@pytest.fixture(scope="module")
def probe_page_with_good_upload():
    pytest.importorskip("core.probe_result")
    at = page_on("Live GPU probe")
    assert_no_traceback(at, "probe tab")
    at.file_uploader(key="pr_upload").set_value(
        ("good.json", json.dumps(good_result()).encode(), "application/json")
    ).run()
    assert_no_traceback(at, "good upload")
    assert not [e for e in at.error if "good.json" in e.value], "the valid result was rejected"
    return at


def picker_options(at: AppTest, key: str) -> list[str]:
    for widget in list(at.selectbox) + list(at.radio):
        if widget.key == key:
            return list(widget.options)
    return []


@pytest.mark.parametrize("name", list(BAD_RESULTS))
def test_bad_probe_result_is_named_and_the_good_one_stays(probe_page_with_good_upload, name):
    at = probe_page_with_good_upload
    at.file_uploader(key="pr_upload").set_value((name, BAD_RESULTS[name], "application/json")).run()
    assert_no_traceback(at, name)
    assert name in messages(at), f"no message names {name}"
    # The earlier good upload is still one of the runs to pick from.
    assert any("Hostile Test GPU" in option for option in picker_options(at, "pr_run"))


def test_bad_probe_result_on_the_calibration_tab():
    pytest.importorskip("core.probe_result")
    at = page_on("Calibration")
    assert_no_traceback(at, "calibration tab")
    for name in ("nested_bomb.json", "nan_step.json", "binary.json"):
        at.file_uploader(key="cal_upload").set_value((name, BAD_RESULTS[name], "application/json")).run()
        assert_no_traceback(at, name)
        assert name in messages(at)


BAD_CSVS = {
    "words.csv": b"hello world\nthis is, not a histogram\n",
    "binary.csv": bytes(range(256)) * 64,
    "empty.csv": b"",
    "header_only.csv": b"batch,count\n",
    "negative.csv": b"batch,count\n1,10\n-4,5\n",
    "nan.csv": b"batch,count\n1,nan\n2,5\n",
    "inf.csv": b"batch,count\n1,inf\n",
    "huge_batch.csv": b"batch,count\n99999999999999999999,1\n",
    "zero_total.csv": b"batch,count\n1,0\n2,0\n",
    "fractional_batch.csv": b"batch,count\n1.5,3\n",
    "too_big.csv": b"batch,count\n" + b"1,1\n" * (3 * MB),
    "many_columns.csv": b"batch,count,x\n1,2,3,4,5\n",
    "formula.csv": b'batch,count\n=HYPERLINK("http://example.com"),1\n',
}


@pytest.fixture(scope="module")
def bucketing_page():
    at = page_on("Bucketing", bk_workload="uploaded CSV")
    assert_no_traceback(at, "bucketing tab")
    assert [u for u in at.file_uploader if u.key == "bk_csv_file"], "no CSV uploader on the bucketing tab"
    return at


@pytest.mark.parametrize("name", list(BAD_CSVS))
def test_bad_histogram_csv_gets_a_message(bucketing_page, name):
    at = bucketing_page
    at.file_uploader(key="bk_csv_file").set_value((name, BAD_CSVS[name], "text/csv")).run()
    assert_no_traceback(at, name)
    assert "CSV cannot be used" in messages(at), name
    assert "](http" not in messages(at)  # nothing from the file became a link
    # The rest of the tab is still drawn.
    assert len(at.get("plotly_chart")) >= 1
