"""The probe tab's "Measure on this GPU" without a GPU: `gpu_probe.live.measure` stood in for by parts of the shipped
recorded run (gpu_probe/recorded/small.json), so the page's order, drawing, sharing, download and failures are
checked through AppTest (tests/test_app_probe_cuda.py runs the real thing on a GPU)."""

import copy
import json

import pytest
from app_pages import as_read, metrics, open_tab

import core.probe_result as probe_result
from core.step_plan import BASELINE, FUSED_GRAPH, probe_modes
from ui.common import UNTRACED, readout_labels

RECORDED = probe_result.load_result(probe_result.RECORDED_PATH).to_dict()
FIRST = (BASELINE.name, FUSED_GRAPH.name)


def recorded_part(batches, modes) -> probe_result.ProbeResult:
    """What `measure` returns for one part: the recorded run's runs of these modes at these batches."""
    part = {k: v for k, v in RECORDED.items() if k not in ("runs", "reference")}
    part["runs"] = [r for r in RECORDED["runs"] if r["mode"] in modes and r["batch"] in batches]
    part["settings"] = {**copy.deepcopy(RECORDED["settings"]), "batches": list(batches), "modes": list(modes)}
    return probe_result.load_result(part)


@pytest.fixture()
def stub_gpu(recorded, monkeypatch):
    """Pretend CUDA is present; `measure` returns parts of the recorded run; what the page drew meanwhile is
    noted after each part (`drawn`: the (done, runs) of each first-answer drawing)."""
    import streamlit as st

    import gpu_probe.live as live
    import ui.probe.tab as tab

    calls, sessions, drawn, downloads = [], [], [], {}

    class FakeSession:
        errors: list = []

    def fake_open_session(model, rows, progress=None, capture=None):
        # The real one reports while it builds (model, graphs): the page's status must take those writes on
        # every part, as it does on a GPU (a session kept by st.cache_resource replayed them into a status
        # block of an earlier run and failed the second part on the H200, 2026-12-07).
        if progress is not None:
            progress(f"building the {getattr(model, 'name', model)} model")
        sessions.append((model, rows, capture))
        return FakeSession()

    def fake_measure(model, batches, modes, progress, session=None, ceilings=None):
        assert isinstance(session, FakeSession)  # measured with the cached model and graphs
        fake_measure.ceilings.append(ceilings)
        progress(f"{modes[0]}: timing batch {batches[0]}")
        calls.append((model, tuple(batches), tuple(modes), "measured"))
        fail = getattr(fake_measure, "fail", None)
        if fail is not None and len(calls) == fail[0]:
            calls[-1] = (*calls[-1][:3], "failed")
            raise fail[1]
        return recorded_part(batches, modes)

    first_answer = tab._first_answer

    def spy(result, done, total):
        drawn.append((len(calls), done, total, {(r.mode, r.batch) for r in result.runs}))
        first_answer(result, done, total)

    real_download = st.download_button

    def download(label, data=None, **kwargs):
        downloads[kwargs.get("key")] = data
        return real_download(label, data=data, **kwargs)

    monkeypatch.setattr(live, "cuda_available", lambda: True)
    monkeypatch.setattr(live, "measure", fake_measure)
    monkeypatch.setattr(live, "open_session", fake_open_session)
    monkeypatch.setattr(live, "release_gpu_memory", lambda: None)
    monkeypatch.setattr(tab, "_first_answer", spy)
    monkeypatch.setattr(st, "download_button", download)
    fake_measure.sessions, fake_measure.drawn, fake_measure.downloads = sessions, drawn, downloads
    fake_measure.ceilings = []
    return fake_measure, calls


def probe_page(**params):
    return open_tab("Live GPU probe", **params)


def test_the_first_answer_is_batch_1_eager_and_fused_graph_drawn_before_the_rest(stub_gpu):
    fake_measure, calls = stub_gpu
    at = probe_page(pr_live="true")
    assert not at.exception and not at.error, [e.body for e in at.error]
    assert calls[0] == ("small", (1,), FIRST, "measured")
    assert fake_measure.sessions == [("small", 256, (FUSED_GRAPH.name,))]  # only the first part's graphs
    first_ceilings = {"hbm_copy_GBps": RECORDED["hbm_copy_GBps"], "matmul_TFLOPs": RECORDED["matmul_TFLOPs"]}
    assert fake_measure.ceilings == [None] + [first_ceilings] * 8  # measured once, by the first part
    # Drawn after the first part, before the second was measured; then again after each part but the last.
    done, parts, total, runs = fake_measure.drawn[0]
    assert (done, parts) == (1, 1) and runs == {(m, 1) for m in FIRST}
    assert [d[:2] for d in fake_measure.drawn] == [(i, i) for i in range(1, total)] and total == len(calls)
    assert calls[-1][2] == ("compile",)  # torch.compile last, one batch a part
    assert [c[1] for c in calls if c[2] == ("compile",)] == [(1,), (8,), (64,), (256,)]
    measured = {(m, b) for _, batches, modes, _ in calls for m in modes for b in batches}
    assert measured == {(m, b) for m in probe_modes() for b in (1, 8, 64, 256)}


def test_the_whole_run_is_on_the_page_and_downloads_as_a_result(stub_gpu):
    fake_measure, _ = stub_gpu
    at = probe_page(pr_live="true")
    assert not at.exception
    assert at.status[0].proto.label == "Measured on this GPU"
    assert any("Measured live" in i.body and "NVIDIA H200" in i.body for i in at.info)
    assert "in 9 parts" in as_read(" ".join(i.body for i in at.info))  # the command it stands for
    assert tuple(at.selectbox(key="pr_mode").options) == probe_modes()
    assert all(label in metrics(at) for label in readout_labels(UNTRACED))
    for mode in probe_modes():
        at.selectbox(key="pr_mode").set_value(mode).run()
        assert [int(b) for b in at.selectbox(key="pr_batch").options] == [1, 8, 64, 256], mode
    assert not at.exception
    downloaded = probe_result.load_result(fake_measure.downloads["pr_live_download"]().encode())
    assert len(downloaded.runs) == 24 and downloaded.batches == (1, 8, 64, 256)
    assert downloaded.settings["modes"] == list(probe_modes())
    whole = probe_result.load_result(RECORDED)
    assert downloaded.run("eager", 1).step_us_median == whole.run("eager", 1).step_us_median


def test_a_measurement_is_shared_and_other_settings_reuse_the_model(stub_gpu, monkeypatch):
    fake_measure, calls = stub_gpu
    from ui.probe import live as probe_live

    assert not probe_page(pr_live="true").exception
    again = probe_page(pr_live="true")  # another session: the finished result, not a new measurement
    assert not again.exception and len(calls) == 9
    monkeypatch.setattr(probe_live, "LIVE_BATCHES", (1, 8))  # other settings: measured again...
    assert not probe_page(pr_live="true").exception
    assert len(calls) == 9 + 5 and calls[9] == ("small", (1,), FIRST, "measured")
    assert len(fake_measure.sessions) == 1  # ...with the model and graphs built once
    assert not probe_page(pr_live="true", pr_live_model="1b").exception  # another model: another session
    assert [s[0] for s in fake_measure.sessions] == ["small", "1b"]


def test_an_uploaded_config_is_measured_and_a_bad_one_refused_unmeasured(stub_gpu):
    fake_measure, calls = stub_gpu
    at = probe_page(pr_live="true", pr_live_model="config.json")
    assert not at.exception and not calls and any("Upload a config.json" in i.body for i in at.info)
    qwen = (probe_result.RECORDED_PATH.parents[2] / "data" / "configs" / "qwen2.5-0.5b.json").read_bytes()
    base = json.loads(qwen)
    bad = [
        ("moe.json", json.dumps({**base, "num_local_experts": 8}).encode(), "num_local_experts"),
        ("not-json.json", b"{hidden_size: 1", "not JSON"),
        ("flat.json", json.dumps({**base, "num_hidden_layers": 0}).encode(), "num_hidden_layers"),
        ("heads.json", json.dumps({**base, "num_attention_heads": 10**9}).encode(), "num_attention_heads"),
        ("huge.json", b" " * (2 << 20), "is not a config.json"),
    ]
    for name, data, named in bad:
        at.file_uploader(key="pr_live_config").set_value((name, data, "application/json")).run()
        assert not at.exception
        errors = [as_read(e.body) for e in at.error if "Not measured" in e.body]
        assert len(errors) == 1 and name in errors[0] and named in errors[0], errors
        assert not calls and not fake_measure.sessions  # nothing measured, nothing allocated
        assert any("Recorded run" in i.body for i in at.info)  # the page carries on with the recorded run
    at.file_uploader(key="pr_live_config").set_value(("qwen2.5-0.5b.json", qwen, "application/json")).run()
    assert not at.exception and not at.error, [e.body for e in at.error]
    model = calls[0][0]
    assert model.source == "qwen2.5-0.5b.json" and model.model_type == "qwen2" and model.qkv_bias
    # The persistent kernel has no bias on q, k and v: left out, and said so; the rest measured.
    assert {m for c in calls for m in c[2]} == set(probe_modes()) - {"persistent"}
    assert any("persistent kernel: left out" in as_read(m.value) for m in at.markdown)
    assert any("Measured live" in i.body for i in at.info)
    at.selectbox(key="pr_mode").set_value("eager").run()  # the config is kept for the session's reruns
    assert not at.exception and len(fake_measure.sessions) == 1


def test_out_of_memory_half_way_keeps_the_parts_measured(stub_gpu):
    fake_measure, calls = stub_gpu

    class OutOfMemoryError(RuntimeError):
        pass

    fake_measure.fail = (3, OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    at = probe_page(pr_live="true")
    assert not at.exception
    assert any("ran out of memory" in e.body and "2 of 9 parts" in e.body for e in at.error)
    assert any("Measured live" in i.body for i in at.info)  # what was measured stays on the page
    assert tuple(at.selectbox(key="pr_mode").options) == probe_modes()[:4] + ("persistent",)
    assert [int(b) for b in at.selectbox(key="pr_batch").options] == [1]
    assert all(label in metrics(at) for label in readout_labels(UNTRACED))
    assert "pr_live_download" in fake_measure.downloads
    at.run()  # a rerun shows the same, without measuring again
    assert len(calls) == 3 and any("ran out of memory" in e.body for e in at.error)
    fake_measure.fail = None
    at.button(key="pr_live_again").click().run()  # goes on from the part that failed
    assert not at.exception and not at.error
    assert calls[3] == calls[2][:3] + ("measured",) and len(calls) == 10
    assert at.status[0].proto.label == "Measured on this GPU"


def test_the_measure_help_says_what_comes_first_and_how_long_the_whole_takes(stub_gpu):
    # The recorded H200 run of these settings took about 225 s; torch.compile alone ~30 s per batch size.
    at = probe_page()
    help_text = at.toggle(key="pr_live").help
    assert "drawn within seconds" in help_text and "several minutes" in help_text and "3¾" in help_text
    at.toggle(key="pr_live").set_value(True).run()
    assert any("takes several minutes" in m.value for m in at.markdown)
    assert any("eager and fusion + graphs at batch 1 first" in m.value for m in at.markdown)
