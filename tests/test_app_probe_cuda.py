"""The probe tab's live path on a real GPU: "Measure on this GPU" switched on (skipped without CUDA)."""

from pathlib import Path

import pytest

pytestmark = pytest.mark.cuda

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def test_measure_on_this_gpu_draws_the_measured_step(monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("streamlit")  # the GPU machine has none unless its wheels are carried (README)
    from streamlit.testing.v1 import AppTest

    from ui.common import UNTRACED, readout_labels
    from ui.probe import live as probe_live

    monkeypatch.setattr(probe_live, "LIVE_BATCHES", (1, 8))  # two batches keep the run short
    at = AppTest.from_file(APP, default_timeout=600)
    at.query_params["tab"] = "Live GPU probe"
    at.query_params["pr_live"] = "true"
    at.run()
    assert not at.exception
    assert not at.error, [e.body for e in at.error]
    assert any("Measured live" in i.body for i in at.info)
    shown = {m.label: m.value for m in at.metric}
    assert all(label in shown for label in readout_labels(UNTRACED))
    assert shown["Bound by (no profiler)"] == "CPU launch"  # eager at batch 1 on a 32-layer decoder
    at.selectbox(key="pr_mode").set_value("fused+graph").run()
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["Bound by (no profiler)"] == "GPU"
