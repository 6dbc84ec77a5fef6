"""The "Live GPU probe" tab without CUDA: the recorded run, uploads, and every control's extremes."""

import json

import pytest
import streamlit as st
from app_pages import as_read, fake_run, metrics, open_tab, tables

import core.probe_result as probe_result
from ui.common import UNTRACED, readout_labels


def probe_page(**params):
    return open_tab("Live GPU probe", **params)


def test_recorded_run_is_shown_and_labelled(recorded):
    at = probe_page()
    assert not at.exception
    info = " ".join(i.body for i in at.info)
    assert "Recorded run" in info and "NVIDIA Test GPU" in info and "30 Nov 2026" in info
    shown = metrics(at)
    assert all(label in shown for label in readout_labels(UNTRACED))
    eager1 = recorded.run("eager", 1)
    assert shown["Kernels / step"] == f"{eager1.kernels_per_step:,}"
    assert shown["Bound by (no profiler)"] == "CPU launch" and shown["vs unoptimised"] == "1.00×"
    assert shown["HBM copy bandwidth"] == "3,600 GB/s"
    charts = at.get("plotly_chart")
    assert len(charts) == 3  # measured lanes beside the simulator's, and every mode across the batch axis
    measured = json.loads(charts[0].proto.spec)
    assert any(t.get("name") == "GPU kernel" for t in measured["data"])
    drawn = [t.value for t in tables(at)]
    modes = next(t for t in drawn if "mode" in t.columns)
    assert list(modes["mode"]) == ["eager", "fused", "graph", "fused+graph"]
    assert modes["step median (µs)"].iloc[0] == pytest.approx(eager1.step_us_median)
    checks = next(t for t in drawn if "check" in t.columns)
    assert list(checks["passed"]) == [True, False]
    assert any("Some checks failed" in e.body for e in at.error)
    assert at.download_button  # the Chrome-trace export


def test_bad_upload_names_the_problem_and_keeps_the_page(recorded):
    at = probe_page()
    bad = fake_run()
    bad["runs"][2]["step_us_p90"] = -1
    at.file_uploader(key="pr_upload").set_value(("mine.json", json.dumps(bad).encode(), "application/json"))
    at.run()
    assert not at.exception
    errors = as_read(" ".join(e.body for e in at.error))
    assert "mine.json" in errors and "runs[2].step_us_p90" in errors
    assert "Recorded run" in " ".join(i.body for i in at.info)
    assert all(label in metrics(at) for label in readout_labels(UNTRACED))
    at.file_uploader(key="pr_upload").set_value(("junk.json", b"\x00not json", "application/json"))
    at.run()
    assert not at.exception and any("junk.json" in as_read(e.body) and "JSON" in e.body for e in at.error)


def test_a_good_upload_is_shown_as_uploaded(recorded):
    at = probe_page()
    mine = fake_run(device="My RTX 4090", noise=0.0)
    at.file_uploader(key="pr_upload").set_value(("mine.json", json.dumps(mine).encode(), "application/json"))
    at.run()
    assert not at.exception
    assert at.selectbox(key="pr_run").value.startswith("uploaded: mine.json (My RTX 4090")
    assert any("Uploaded run" in i.body and "My RTX 4090" in i.body for i in at.info)


@pytest.mark.parametrize(
    "mode,batch,whole",
    [
        ("fused+graph", 256, "true"),
        ("graph", 1, "false"),
        ("compile", 99999, "true"),
        ("nonsense", -5, "maybe"),
    ],
)
def test_controls_at_their_extremes(recorded, mode, batch, whole):
    at = probe_page(pr_mode=mode, pr_batch=str(batch), pr_whole=whole)
    assert not at.exception
    assert at.selectbox(key="pr_mode").value in recorded.modes
    assert at.selectbox(key="pr_batch").value in recorded.batches
    # Measured and simulated lanes; fused+graph adds its step split.
    # The two lanes, the batch-axis chart, and for fused + graph the split of its step.
    assert len(at.get("plotly_chart")) == 3 + (at.selectbox(key="pr_mode").value == "fused+graph")


def test_without_a_recorded_run_the_page_asks_for_a_file(monkeypatch):
    def missing():
        raise ValueError("result: no such file 'gpu_probe/recorded/small.json'")

    monkeypatch.setattr(probe_result, "recorded_result", missing)
    st.cache_resource.clear()
    at = probe_page()
    assert not at.exception
    assert any("No recorded run" in w.body for w in at.warning)
    assert at.file_uploader(key="pr_upload") is not None
    st.cache_resource.clear()
