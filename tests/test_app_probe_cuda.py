"""The probe tab's live path on a real GPU: "Measure on this GPU" on a preset and on an uploaded config.json, drawn
from the fresh measurement and downloaded in the CLI's format (skipped without CUDA; the GPU machine needs the
page's wheels carried: docs/benchmarks.md). Batches and modes are cut down to keep the two runs to a few minutes;
tests/test_app_probe_live.py checks the page's order and failures without a GPU."""

from pathlib import Path

import pytest

pytestmark = pytest.mark.cuda

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")


@pytest.fixture()
def live_page(monkeypatch):
    """AppTest on the probe tab with "Measure on this GPU" on, batches 1 and 8; the download buttons' data and
    the first answers drawn (the runs each held) are noted."""
    pytest.importorskip("torch")
    pytest.importorskip("streamlit")  # the GPU machine has none unless its wheels are carried (README)
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    import ui.probe.tab as tab
    from ui.probe import live as probe_live

    noted = {"downloads": {}, "drawn": []}
    real_download, first_answer = st.download_button, tab._first_answer

    def download(label, data=None, **kwargs):
        noted["downloads"][kwargs.get("key")] = data
        return real_download(label, data=data, **kwargs)

    def spy(result, done, total):
        noted["drawn"].append((done, total, {(r.mode, r.batch) for r in result.runs}))
        first_answer(result, done, total)

    monkeypatch.setattr(st, "download_button", download)
    monkeypatch.setattr(tab, "_first_answer", spy)
    monkeypatch.setattr(probe_live, "LIVE_BATCHES", (1, 8))  # two batches keep the runs short
    st.cache_resource.clear()

    def open_page(**params):
        at = AppTest.from_file(APP, default_timeout=600)
        at.query_params["tab"] = "Live GPU probe"
        at.query_params["pr_live"] = "true"
        for key, value in params.items():
            at.query_params[key] = value
        return at

    yield open_page, noted, monkeypatch
    st.cache_resource.clear()  # the model and its graphs go


def _downloaded(noted):
    from core.probe_result import load_result

    return load_result(noted["downloads"]["pr_live_download"]().encode())


def test_a_preset_measured_live_draws_the_fresh_measurement(live_page):
    import torch

    from ui.common import UNTRACED, readout_labels
    from ui.probe import live as probe_live

    open_page, noted, monkeypatch = live_page
    # Two modes (torch.compile's part is bench/live_first_answer.py's, and compile's own tests'): two parts.
    monkeypatch.setattr(probe_live, "LIVE_MODES", ("eager", "fused+graph"))
    at = open_page().run()
    assert not at.exception
    assert not at.error, [e.body for e in at.error]
    assert at.status[0].proto.label == "Measured on this GPU"
    assert any("Measured live" in i.body for i in at.info)
    # The first answer, drawn before the rest was measured: batch 1's eager and fused+graph steps.
    assert noted["drawn"][0][:2] == (1, 2) and noted["drawn"][0][2] == {("eager", 1), ("fused+graph", 1)}
    shown = {m.label: m.value for m in at.metric}
    assert all(label in shown for label in readout_labels(UNTRACED))
    assert shown["Bound by (no profiler)"] == "CPU launch"  # eager at batch 1 on a 32-layer decoder
    at.selectbox(key="pr_mode").set_value("fused+graph").run()
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["Bound by (no profiler)"] == "GPU"
    result = _downloaded(noted)
    assert result.device == torch.cuda.get_device_name()  # measured here, not a recorded run
    assert {(r.mode, r.batch) for r in result.runs} == {
        (m, b) for m in ("eager", "fused+graph") for b in (1, 8)
    }
    assert result.model["config"]["name"] == "small" and result.all_checks_passed, result.checks


def test_an_uploaded_config_is_measured_live(live_page):
    from ui.common import UNTRACED, readout_labels
    from ui.probe import live as probe_live

    open_page, noted, monkeypatch = live_page
    monkeypatch.setattr(probe_live, "LIVE_MODES", ("eager", "fused+graph"))
    at = open_page(pr_live_model="config.json").run()
    assert not at.exception
    config = (ROOT / "data" / "configs" / "qwen2.5-0.5b.json").read_bytes()
    at.file_uploader(key="pr_live_config").set_value(("qwen2.5-0.5b.json", config, "application/json")).run()
    assert not at.exception
    assert not at.error, [e.body for e in at.error]
    assert any("Measured live" in i.body for i in at.info)
    assert all(label in {m.label for m in at.metric} for label in readout_labels(UNTRACED))
    result = _downloaded(noted)
    assert result.model["config"]["model_type"] == "qwen2" and result.model["config"]["qkv_bias"]
    assert result.batches == (1, 8) and set(result.modes) == {"eager", "fused+graph"}
    assert result.all_checks_passed, result.checks
