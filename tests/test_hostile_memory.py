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
