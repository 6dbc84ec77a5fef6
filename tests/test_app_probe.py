"""The "Live GPU probe" tab without CUDA: the recorded run, uploads, and every control's extremes."""

import json

import pytest
import streamlit as st
from app_pages import as_read, fake_run, metrics, open_tab, tables

import core.probe_result as probe_result
from core.step_plan import probe_modes
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


@pytest.fixture()
def stub_gpu(recorded, monkeypatch):
    """Pretend CUDA is present; `measure` returns a canned run (the real path runs on the H200)."""
    import gpu_probe.live as live

    calls, sessions = [], []

    class FakeSession:
        errors: list = []

    def fake_open_session(preset, rows, progress=None):
        sessions.append((preset, rows))
        return FakeSession()

    def fake_measure(preset, batches, modes, progress, session=None):
        assert isinstance(session, FakeSession)  # measured with the cached model and graphs
        for message in (
            "measuring HBM copy bandwidth",
            "unfused: capturing bucket 8",
            "eager: timing batch 1",
        ):
            progress(message)
        calls.append((preset, tuple(batches), tuple(modes)))
        if getattr(fake_measure, "fail", None):
            raise fake_measure.fail
        return probe_result.load_result(fake_run(device="Live Stub GPU"))

    monkeypatch.setattr(live, "cuda_available", lambda: True)
    monkeypatch.setattr(live, "measure", fake_measure)
    monkeypatch.setattr(live, "open_session", fake_open_session)
    fake_measure.sessions = sessions
    return fake_measure, calls


def test_measure_on_this_gpu_runs_once_and_is_shared(stub_gpu):
    _, calls = stub_gpu
    at = probe_page(pr_live="true")
    assert not at.exception
    assert calls == [("small", (1, 8, 64, 256), probe_modes())]
    assert any("Measured live" in i.body and "Live Stub GPU" in i.body for i in at.info)
    assert at.status[0].proto.label == "Measured on this GPU"
    assert metrics(at)["Kernels / step"]
    at.run()
    again = probe_page(pr_live="true")  # another session: the cached measurement, not a new one
    assert not again.exception and len(calls) == 1


def test_a_new_measurement_reuses_the_model_and_graphs(stub_gpu, monkeypatch):
    fake_measure, calls = stub_gpu
    from ui.probe import live as probe_live

    assert not probe_page(pr_live="true").exception
    monkeypatch.setattr(probe_live, "LIVE_BATCHES", (1, 8))  # other settings: measured again...
    assert not probe_page(pr_live="true").exception
    assert [c[1] for c in calls] == [(1, 8, 64, 256), (1, 8)]
    assert fake_measure.sessions == [("small", 256)]  # ...with the model and graphs built once


def test_out_of_memory_while_measuring_is_a_clear_message(stub_gpu):
    fake_measure, _ = stub_gpu

    class OutOfMemoryError(RuntimeError):
        pass

    fake_measure.fail = OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    at = probe_page(pr_live="true")
    assert not at.exception
    assert any("ran out of memory" in e.body for e in at.error)
    assert any("Recorded run" in i.body for i in at.info)  # the page carries on with the recorded run


def test_measure_help_says_how_long_it_really_takes(stub_gpu):
    # The recorded H200 run of these settings took about 225 s; torch.compile alone ~30 s per batch size.
    at = probe_page()
    help_text = at.toggle(key="pr_live").help
    assert "several minutes" in help_text and "3¾" in help_text and "about a minute" not in help_text
    at.toggle(key="pr_live").set_value(True).run()
    assert any("takes several minutes" in m.value for m in at.markdown)
