"""Issue 15, item 6: memory per upload and per session is bounded, and the limits are on the page.
10 MB strings and a 19 MB settings block are refused by the schema; the bucketing CSV uploader has
a limit of its own (not Streamlit's 200 MB); a session keeps only its latest few probe uploads."""

from __future__ import annotations

import copy
import json

import pytest
from test_hostile_uploads import good_result, messages, page_on, picker_options

from core.probe_result import LIMITS, MAX_RESULT_BYTES, load_result

TEN_MB = "x" * (10 * 2**20)


def edited(edit) -> dict:
    data = copy.deepcopy(good_result())
    edit(data)
    return data


BIG = {  # name -> (result, the field its message names)
    "error_10MB": (edited(lambda d: d.__setitem__("errors", [TEN_MB])), "errors"),
    "detail_10MB": (
        edited(lambda d: d.__setitem__("checks", {"c": {"passed": True, "detail": TEN_MB}})),
        "checks",
    ),
    "kernel_name_10MB": (
        edited(lambda d: d["runs"][0]["timeline"]["gpu"].__setitem__("name", [TEN_MB, "k"])),
        "runs[0].timeline.gpu.name",
    ),
    "device_10MB": (edited(lambda d: d.__setitem__("device", TEN_MB)), "device"),
    "settings_19MB": (edited(lambda d: d.__setitem__("settings", {"pad": "y" * (19 * 2**20)})), "settings"),
    "many_errors": (edited(lambda d: d.__setitem__("errors", ["e"] * 10_000)), "errors"),
    "config_blob": (edited(lambda d: d["model"]["config"].__setitem__("blob", "z" * 100_000)), "model"),
}


@pytest.mark.parametrize("name", list(BIG))
def test_oversized_fields_are_refused_by_the_schema(name):
    data, field = BIG[name]
    raw = json.dumps(data).encode()
    assert len(raw) <= MAX_RESULT_BYTES  # within the file limit: the field's own limit must catch it
    with pytest.raises(ValueError) as err:
        load_result(raw)
    assert str(err.value).startswith(field), str(err.value)
    assert len(str(err.value)) < 300


def test_uploaders_state_their_limits():
    at = page_on("Bucketing", bk_workload="uploaded CSV")
    csv = at.file_uploader(key="bk_csv_file")
    assert csv.proto.max_upload_size_mb == 1  # not Streamlit's default 200 MB
    assert "1,000,000 bytes" in csv.proto.help
    probe = page_on("Live GPU probe").file_uploader(key="pr_upload")
    assert probe.proto.max_upload_size_mb == MAX_RESULT_BYTES // 2**20
    assert LIMITS in probe.proto.help


def test_a_session_keeps_its_latest_four_uploads():
    at = page_on("Live GPU probe")
    for i in range(6):
        data = good_result()
        data["device"] = f"Upload GPU {i}"
        at.file_uploader(key="pr_upload").set_value(
            (f"u{i}.json", json.dumps(data).encode(), "application/json")
        ).run()
        assert not at.exception
    options = picker_options(at, "pr_run")
    uploaded = [o for o in options if o.startswith("uploaded")]
    assert [o.split("(")[1].split(",")[0] for o in uploaded] == [f"Upload GPU {i}" for i in range(2, 6)]
    assert at.selectbox(key="pr_run").value == uploaded[-1]
    assert not messages(at)


def test_the_server_limit_covers_the_largest_uploader():
    """Streamlit enforces a widget's max_upload_size in the browser only; the server takes up to
    server.maxUploadSize from any client. The trace uploader needs a few hundred MB."""
    import tomllib
    from pathlib import Path

    config = tomllib.loads((Path(__file__).resolve().parents[1] / ".streamlit" / "config.toml").read_text())
    assert config["server"]["maxUploadSize"] == 512
    at = page_on("Bucketing", bk_workload="uploaded CSV")
    sizes = [u.proto.max_upload_size_mb for u in at.file_uploader]
    sizes += [u.proto.max_upload_size_mb for u in page_on("Live GPU probe").file_uploader]
    assert sizes and max(sizes) <= config["server"]["maxUploadSize"]


def test_limits_are_stated_on_the_page_not_only_in_tooltips():
    for tab, params, needle in (
        ("Live GPU probe", {}, f"{MAX_RESULT_BYTES // 2**20} MB and"),
        ("Calibration", {}, f"{MAX_RESULT_BYTES // 2**20} MB and"),
        ("Bucketing", {"bk_workload": "uploaded CSV"}, "1,000,000 bytes and 10,000 rows"),
    ):
        at = page_on(tab, **params)
        assert any(needle in c.value and c.value.startswith("Limits:") for c in at.caption), tab


def test_an_oversized_probe_upload_is_refused_unread(monkeypatch):
    """A client that ignores the browser's 20 MB limit gets the same one-line refusal; the file is
    neither hashed for the cache nor parsed."""
    import ui.probe_results

    def never(data):
        raise AssertionError("an oversized file was read")

    monkeypatch.setattr(ui.probe_results, "_parse_upload", never)
    for tab, key in (("Live GPU probe", "pr_upload"), ("Calibration", "cal_upload")):
        at = page_on(tab)
        at.file_uploader(key=key).set_value(
            ("big.json", b" " * (MAX_RESULT_BYTES + 1), "application/json")
        ).run()
        assert not at.exception, tab
        assert "big.json" in messages(at) and "larger than 20 MB (20.0 MB)" in messages(at), messages(at)


def test_an_oversized_csv_is_refused_unread(monkeypatch):
    import sim.buckets.workloads

    def never(*args, **kwargs):
        raise AssertionError("an oversized CSV was parsed")

    monkeypatch.setattr(sim.buckets.workloads, "parse_histogram_csv", never)
    at = page_on("Bucketing", bk_workload="uploaded CSV")
    at.file_uploader(key="bk_csv_file").set_value(
        ("big.csv", b"batch,count\n" + b"1,1\n" * 300_000, "text/csv")
    ).run()
    assert not at.exception
    assert "too large (1,200,012 bytes; at most 1,000,000)" in messages(at)
