"""The Simulator tab driven through Streamlit's AppTest: controls move the readouts they should."""

import base64
import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import streamlit as st
from app_pages import as_read, fake_run
from probe_results import host_block
from streamlit.testing.v1 import AppTest

from core import probe_result
from core.step_plan import BASELINE, FUSED, FUSED_GRAPH, GRAPH, StepPlan, toggled
from sim.calibration import calibrate, calibrated_preset
from sim.config import PRESETS
from sim.step.schedule import simulate_step
from ui.charts import format_us
from ui.common import READOUT_LABELS
from ui.simulator.presets import CALIBRATED_KEY, CALIBRATED_TITLE, PRESET_TITLES, preset_of
from ui.simulator.tab import (
    BATCH_STOPS,
    BYTES_INPUT,
    HARDWARE_INPUTS,
    MODEL_INPUTS,
    SIM_PARAMS,
    nearest_stop,
    note_paragraphs,
)

APP = str(Path(__file__).resolve().parents[1] / "app.py")
CHAPTER = PRESETS["chapter"]


def fresh() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def readouts(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric if m.label in READOUT_LABELS}


def lanes_spec(at: AppTest) -> dict:
    return json.loads(at.get("plotly_chart")[0].proto.spec)


def values(array) -> np.ndarray:
    """A trace array from a chart spec; plotly sends numeric arrays as base64 ('bdata')."""
    if isinstance(array, dict) and "bdata" in array:
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"])
    return np.asarray(array)


def warnings(at: AppTest) -> list[str]:
    return [w.value for w in at.warning]


@pytest.fixture(scope="module")
def start() -> AppTest:
    return fresh()


def test_opens_on_the_chapter_step_launch_bound(start):
    at = start
    expected = simulate_step(CHAPTER.model, CHAPTER.hardware, StepPlan(BASELINE, 1)).metrics
    assert readouts(at) == {
        "Kernels / step": str(expected.kernels),
        "Step time": format_us(expected.step_us),
        "Bound by": "CPU launch",
        "vs unoptimised": "1.00×",
        "GPU utilisation": f"{expected.utilisation * 100:.0f}%",
    }
    assert 0.4 <= expected.utilisation <= 0.6  # the chapter's "nearly half idle"
    assert at.number_input(key="batch").value == 1 and at.slider(key="layers").value == 32
    assert at.toggle(key="fusion").value is False and at.toggle(key="graphs").value is False
    assert at.selectbox(key="preset").value == "chapter"
    assert not warnings(at) and not at.error


def test_default_lanes_show_the_first_18_launches_with_idle_gaps(start):
    traces = {t["name"]: t for t in lanes_spec(start)["data"]}
    assert set(traces) == {"CPU launch", "GPU kernel", "idle"}
    assert len(values(traces["CPU launch"]["x"])) == 18
    assert len(values(traces["idle"]["x"])) >= 17  # a bubble before nearly every kernel
    assert "Where the time goes" in [h.value for h in start.subheader]


def test_whole_step_toggle_draws_every_kernel():
    at = fresh()
    at.toggle(key="whole_step").set_value(True).run()
    traces = {t["name"]: t for t in lanes_spec(at)["data"]}
    assert len(values(traces["GPU kernel"]["x"])) == int(readouts(at)["Kernels / step"])


def test_fusion_cuts_kernels_and_speeds_up_the_step():
    at = fresh()
    before = readouts(at)
    at.toggle(key="fusion").set_value(True).run()
    after = readouts(at)
    assert int(after["Kernels / step"]) < int(before["Kernels / step"])
    assert float(after["vs unoptimised"].rstrip("×")) > 1.5


def test_fusion_and_graphs_make_the_step_gpu_bound():
    at = fresh()
    at.toggle(key="fusion").set_value(True)
    at.toggle(key="graphs").set_value(True).run()
    values = readouts(at)
    assert values["Bound by"] == "GPU"
    assert float(values["GPU utilisation"].rstrip("%")) > 90
    assert any("no rows are padding" in i.value for i in at.info)


def test_graphs_pad_the_batch_to_its_bucket_and_fall_back_above_the_largest():
    at = fresh()
    at.toggle(key="graphs").set_value(True)
    at.number_input(key="batch").set_value(5).run()
    assert any("captured for 8" in i.value and "3 of its 8 rows are padding" in i.value for i in at.info)
    at.number_input(key="batch").set_value(300).run()
    assert any("falls back to eager" in i.value for i in at.info)
    assert readouts(at)["vs unoptimised"] == "1.00×"  # eager above the buckets: same as unoptimised


def test_batch_128_closes_the_gaps_without_any_toggle():
    at = fresh()
    at.number_input(key="batch").set_value(128).run()
    values = readouts(at)
    assert values["Bound by"] == "GPU"
    assert values["Kernels / step"] == readouts(fresh())["Kernels / step"]


def test_layers_scale_the_kernel_count():
    at = fresh()
    at.slider(key="layers").set_value(1).run()
    one = int(readouts(at)["Kernels / step"])
    at.slider(key="layers").set_value(2).run()
    assert int(readouts(at)["Kernels / step"]) - one == 11  # eleven unfused kernels per layer


def test_launch_cost_moves_step_time():
    at = fresh()
    before = readouts(at)["Step time"]
    at.number_input(key="launch_us").set_value(12.0).run()
    assert readouts(at)["Step time"] != before
    assert readouts(at)["Bound by"] == "CPU launch"


def test_changing_the_preset_resets_the_hardware_figures():
    at = fresh()
    at.number_input(key="hbm_GBps").set_value(1000.0).run()
    at.selectbox(key="preset").set_value("probe-0.5b-h200").run()
    assert not at.exception
    probe = PRESETS["probe-0.5b-h200"].hardware
    assert at.number_input(key="hbm_GBps").value == probe.hbm_GBps
    assert at.number_input(key="tflops").value == probe.matrix_TFLOPs
    expected = simulate_step(PRESETS["probe-0.5b-h200"].model, probe, StepPlan(BASELINE, 1)).metrics
    assert readouts(at)["Step time"] == format_us(expected.step_us)


def test_zero_bandwidth_and_costly_graph_launch_warn_and_are_clamped():
    at = fresh()
    at.number_input(key="hbm_GBps").set_value(0.0).run()
    assert not at.exception
    assert any("HBM GB/s must be above 0" in w for w in warnings(at))
    at = fresh()
    at.toggle(key="graphs").set_value(True)
    at.number_input(key="graph_launch_us").set_value(10000.0).run()
    assert any("more than launching the whole step eagerly" in w for w in warnings(at))
    # Clamped to the eager step's whole launch time (kernels × 6 µs).
    eager = simulate_step(CHAPTER.model, CHAPTER.hardware, StepPlan(BASELINE, 1)).metrics
    clamped = replace(CHAPTER.hardware, graph_launch_us=eager.kernels * CHAPTER.hardware.eager_launch_us)
    expected = simulate_step(CHAPTER.model, clamped, StepPlan(GRAPH, 1)).metrics
    assert readouts(at)["Step time"] == format_us(expected.step_us)


EXTREMES = [
    ("batch", 1),
    ("batch", 512),
    ("layers", 1),
    ("layers", 128),
    *[(key, SIM_PARAMS[key][1]) for key, *_ in HARDWARE_INPUTS],
    *[(key, SIM_PARAMS[key][2]) for key, *_ in HARDWARE_INPUTS],
    *[(key, SIM_PARAMS[key][1]) for key, *_ in (*MODEL_INPUTS, BYTES_INPUT)],
    *[(key, SIM_PARAMS[key][2]) for key, *_ in (*MODEL_INPUTS, BYTES_INPUT)],
]


@pytest.mark.parametrize("toggles", [(False, False), (True, True)], ids=["eager", "fused+graph"])
def test_no_exception_at_control_extremes(toggles):
    at = fresh()
    at.toggle(key="fusion").set_value(toggles[0])
    at.toggle(key="graphs").set_value(toggles[1])
    for key, value in EXTREMES:
        widget = at.slider(key=key) if key == "layers" else at.number_input(key=key)
        default = widget.value
        widget.set_value(value).run()
        assert not at.exception, (key, value, at.exception)
        assert not at.error, (key, value)
        assert set(readouts(at)) == set(READOUT_LABELS), (key, value)
        widget.set_value(default)


@pytest.mark.parametrize("preset", list(PRESET_TITLES))
def test_every_preset_draws_at_both_batch_extremes(preset):
    st.cache_resource.clear()  # the calibrated one: the shipped run, not another test's fake
    at = fresh()
    at.selectbox(key="preset").set_value(preset).run()
    for batch in (512, 1):
        at.number_input(key="batch").set_value(batch).run()
        assert not at.exception, at.exception
        assert {"sim_lanes", "sim_sweep"} <= {chart.key for chart in at.get("plotly_chart")}
    assert readouts(at)["Bound by"] in ("CPU launch", "GPU")


def test_sim_params_cover_every_bound_widget():
    assert set(SIM_PARAMS) == {
        "preset",
        "batch",
        "fusion",
        "graphs",
        "layers",
        "whole_step",
        "tp",
        "mode",  # a mode beyond the two toggles
        "host_us",  # the reader's host, for the calibrated preset
        "launch_us",
        "graph_launch_us",
        "graph_node_us",
        "node_gap_us",
        "hbm_GBps",
        "tflops",
        "min_kernel_us",
        # "Your model" (Advanced)
        "hidden",
        "heads",
        "kv_heads",
        "ffn",
        "vocab",
        "context",
        "bytes_per_el",
        "kernels_unfused",
        "kernels_fused",
    }
    assert SIM_PARAMS["batch"] == ("int", 1, 512) and SIM_PARAMS["layers"] == ("int", 1, 128)


# -- the preset calibrated to the recorded probe run (issue 5) ------------------------------------
needs_recorded = pytest.mark.skipif(
    not probe_result.RECORDED_PATH.is_file(), reason="the recorded probe run is not shipped"
)


@pytest.fixture()
def clean_caches():
    st.cache_resource.clear()  # other modules' tests fit fake runs; start from the shipped one
    yield
    st.cache_resource.clear()


@pytest.fixture(scope="module")
def calibrated():
    """(preset, calibration) of the shipped run, computed here without the page."""
    result = probe_result.recorded_result()
    cal = calibrate(result, loo=False)
    return calibrated_preset(result, cal), cal


def pick_calibrated() -> AppTest:
    at = fresh()
    at.selectbox(key="preset").set_value(CALIBRATED_KEY).run()
    assert not at.exception, at.exception
    return at


def test_calibrated_preset_is_declared_under_a_stable_key_and_title():
    _, options, aliases = SIM_PARAMS["preset"]
    assert CALIBRATED_TITLE in options and aliases[CALIBRATED_KEY] == CALIBRATED_TITLE
    assert "H100" not in CALIBRATED_TITLE and "H200" not in CALIBRATED_TITLE  # the note names the run's GPU
    assert aliases["probe-h200-calibrated"] == CALIBRATED_TITLE  # a link from before the re-recording


@needs_recorded
def test_default_page_never_fits_and_the_preset_fits_once(clean_caches, monkeypatch):
    from ui import calibration_cache

    calls = []

    def counting(result, loo=True):
        calls.append(loo)
        return calibrate(result, loo=loo)

    monkeypatch.setattr(calibration_cache, "calibrate", counting)
    at = fresh()
    at.number_input(key="batch").set_value(64).run()
    assert calls == []  # the default page does not pay for the fit
    assert CALIBRATED_TITLE in at.selectbox(key="preset").options
    at.selectbox(key="preset").set_value(CALIBRATED_KEY).run()
    at.number_input(key="batch").set_value(8).run()
    at.toggle(key="fusion").set_value(True).run()
    assert calls == [False]  # one fit without leave-one-out, then cached


@needs_recorded
def test_calibrated_preset_brings_the_fitted_figures_and_its_note(clean_caches, calibrated):
    preset, _ = calibrated
    at = pick_calibrated()
    for key, _, field, *_ in HARDWARE_INPUTS:
        assert at.number_input(key=key).value == pytest.approx(getattr(preset.hardware, field)), key
    assert any("which is not the probe's eager step" in t.value for t in at.text)
    assert not at.warning and not at.error
    expected = simulate_step(preset.model, preset.hardware, StepPlan(BASELINE, 1)).metrics
    assert readouts(at)["Step time"] == format_us(expected.step_us)
    # Where it came from, read from the run (never a constant), and how far the same decoder's static preset was.
    from core.probe_result import recorded_result
    from ui.probe_results import describe

    caption = " ".join(c.value for c in at.caption if "Fitted to the recorded probe run" in c.value)
    assert describe(recorded_result()).split(",")[0] in caption.replace("\\", "")
    assert f"Uncalibrated, the preset “{PRESETS['probe-0.5b-h200'].title}” puts the run's" in caption


@needs_recorded
@pytest.mark.parametrize("toggles", [(False, False), (True, True)], ids=["eager", "fused+graph"])
def test_calibrated_preset_at_batch_and_layer_extremes(clean_caches, calibrated, toggles):
    preset, _ = calibrated
    at = pick_calibrated()
    at.toggle(key="fusion").set_value(toggles[0])
    at.toggle(key="graphs").set_value(toggles[1])
    for batch, layers in ((1, 1), (512, 1), (512, 128), (1, 128), (300, 64)):
        at.number_input(key="batch").set_value(batch)
        at.slider(key="layers").set_value(layers).run()
        assert not at.exception and not at.error, (batch, layers)
        settings = StepPlan(toggled(toggles[0], toggles[1]), batch)
        expected = simulate_step(preset.model.with_layers(layers), preset.hardware, settings).metrics
        assert readouts(at)["Step time"] == format_us(expected.step_us), (batch, layers)
        assert readouts(at)["Kernels / step"] == f"{expected.kernels:,}"


@needs_recorded
def test_calibrated_fused_steps_follow_the_calibration_tabs_predictions(clean_caches, calibrated):
    # The preset follows the fused kernels at batch 1 (the GEMV chain, the page's headline). Above
    # batch 4 the probe's tensor-core GEMM is slower than the simulator's one bandwidth (the note says so).
    preset, cal = calibrated
    at = pick_calibrated()
    at.toggle(key="fusion").set_value(True)
    fused = [(i, p) for i, p in enumerate(cal.points) if p.mode in (FUSED, FUSED_GRAPH) and p.batch <= 4]
    assert len(fused) == 2
    for i, point in fused:
        at.toggle(key="graphs").set_value(point.replays)
        at.number_input(key="batch").set_value(point.batch).run()
        step_us, cpu_us, _ = cal.predicted[i]
        expected = simulate_step(
            preset.model, preset.hardware, StepPlan(toggled(True, point.replays), point.batch)
        ).metrics
        shown = readouts(at)
        assert shown["Step time"] == format_us(expected.step_us)
        assert expected.step_us == pytest.approx(step_us, rel=0.12), point
        # Against the measurement the preset adds no error of its own to the fit's at that point (the fused
        # eager step's host time moves 25-48 % between runs minutes apart: docs/calibration.md).
        fit_error = abs(step_us / point.step_us - 1)
        assert abs(expected.step_us / point.step_us - 1) <= fit_error + 0.02, point
        assert expected.cpu_launch_us == pytest.approx(cpu_us, rel=0.12), point


def test_calibrated_preset_without_a_readable_run_says_why(clean_caches, monkeypatch):
    def unreadable():
        raise ValueError("result: no such file 'gpu_probe/recorded/small.json'")

    monkeypatch.setattr(probe_result, "recorded_result", unreadable)
    at = pick_calibrated()
    assert not at.error
    (notice,) = [w for w in warnings(at) if CALIBRATED_TITLE in w]
    assert "could not be read" in notice and "no such file" in notice and "Chapter" in notice
    expected = simulate_step(CHAPTER.model, CHAPTER.hardware, StepPlan(BASELINE, 1)).metrics
    assert readouts(at)["Step time"] == format_us(expected.step_us)


@needs_recorded
def test_a_link_to_the_calibrated_preset_opens_it(clean_caches, calibrated):
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["preset"] = CALIBRATED_KEY
    at.run()
    assert not at.exception and not at.warning
    assert at.selectbox(key="preset").value == CALIBRATED_KEY
    assert at.number_input(key="hbm_GBps").value == pytest.approx(calibrated[0].hardware.hbm_GBps)


@pytest.fixture()
def indexed_run(monkeypatch):
    """A synthetic run with a host index (6.1 µs a torch launch) served as the recorded one."""
    import ui.probe_results

    data = fake_run()
    data["host"] = host_block()
    result = probe_result.load_result(data, timeline_source="recorded")
    monkeypatch.setattr(probe_result, "recorded_result", lambda: result)
    monkeypatch.setattr(ui.probe_results, "MORE_RECORDED", ())
    st.cache_resource.clear()
    yield result
    st.cache_resource.clear()


def test_the_calibrated_preset_on_your_host_moves_its_launch_costs_only(indexed_run):
    """Issue 35: the calibrated preset on the reader's host (`calibrated_preset(..., host_index)`, through
    `Calibration.on_host`): the launch and replay costs follow the host, the GPU's figures stay the run's."""
    cal = calibrate(indexed_run, loo=False)
    own, there = calibrated_preset(indexed_run, cal), calibrated_preset(indexed_run, cal, 3.05)
    at = pick_calibrated()
    assert not at.number_input(key="host_us").proto.disabled
    shown_before = readouts(at)["Step time"]
    at.number_input(key="host_us").set_value(3.05).run()
    assert not at.exception and not at.warning
    for key, _, field, *_ in HARDWARE_INPUTS:
        assert at.number_input(key=key).value == pytest.approx(getattr(there.hardware, field)), key
    assert at.number_input(key="launch_us").value == pytest.approx(own.hardware.eager_launch_us / 2)
    assert at.number_input(key="hbm_GBps").value == pytest.approx(own.hardware.hbm_GBps)
    model = there.model.with_layers(at.slider(key="layers").value)
    expected = simulate_step(model, there.hardware, StepPlan(BASELINE, 1)).metrics
    assert readouts(at)["Step time"] == format_us(expected.step_us) != shown_before
    assert any("On your host (3.05 µs a torch launch; the run's: 6.1)" in c.value for c in at.caption)
    # A link with a value that is no host: refused with a notice, the preset on the run's own host.
    linked = AppTest.from_file(APP, default_timeout=60)
    linked.query_params.update(preset=CALIBRATED_KEY, host_us="0")
    linked.run()
    assert not linked.exception
    assert any(
        "Your host: µs a launch: a launch takes some time, got 0 µs" in as_read(w) for w in warnings(linked)
    )
    assert linked.number_input(key="launch_us").value == pytest.approx(own.hardware.eager_launch_us)


def test_the_calibrated_preset_of_a_run_without_an_index_cannot_be_moved(recorded):
    at = pick_calibrated()
    box = at.number_input(key="host_us")
    assert box.proto.disabled and box.proto.placeholder == "not measured"
    assert any("Host not measured" in c.value for c in at.caption)


def test_small_batches_are_one_slider_stop_apart_and_the_number_box_takes_any_batch():
    # Issue 14: the story happens at batch 1-64, so each of 1, 2, 3, 4, 8, 16 is a stop of its own.
    stops = list(BATCH_STOPS)
    assert stops[:8] == list(range(1, 9)) and stops[-1] == 512 and stops == sorted(set(stops))
    assert {16, 24, 32, 48, 64, 96, 128, 192, 256} <= set(stops)
    assert max(b / a for a, b in itertools.pairwise(stops[7:])) <= 1.25  # from 8 on, four stops per doubling
    assert nearest_stop(33) == 32 and nearest_stop(500) == 512 and nearest_stop(1) == 1
    at = fresh()
    at.select_slider(key="batch_stops").set_value(4).run()
    assert at.number_input(key="batch").value == 4 and at.query_params["batch"] == "4"
    assert readouts(at)["Step time"] == format_us(
        simulate_step(CHAPTER.model, CHAPTER.hardware, StepPlan(BASELINE, 4)).metrics.step_us
    )
    at.number_input(key="batch").set_value(33).run()  # not a stop: the slider shows the nearest one
    assert at.select_slider(key="batch_stops").value == 32  # (the browser writes a typed value to the URL)
    assert readouts(at)["Step time"] == format_us(
        simulate_step(CHAPTER.model, CHAPTER.hardware, StepPlan(BASELINE, 33)).metrics.step_us
    )


def test_the_cuda_graphs_note_is_always_there_so_the_lanes_never_jump():
    at = fresh()
    assert [i.value for i in at.info if i.value.startswith("CUDA graphs off")]
    at.toggle(key="graphs").set_value(True).run()
    assert [i.value for i in at.info if i.value.startswith("CUDA graphs: batch 1 ")]


def test_preset_notes_read_as_paragraphs_not_hard_wrapped_lines():
    note = "First line of a paragraph\nwrapped here.\n- an item\ncontinued\n\nNew paragraph."
    assert note_paragraphs(note) == [
        "First line of a paragraph wrapped here.",
        "- an item continued",
        "New paragraph.",
    ]
    for preset in PRESET_TITLES:
        for paragraph in note_paragraphs(preset_of(preset)[0].note):
            assert "\n" not in paragraph


# -- "Your model" (issue 12) ----------------------------------------------------------------------
def test_your_model_is_simulated_and_reads_as_a_custom_model():
    at = fresh()
    assert not any(m.value.startswith("**Custom model") for m in at.markdown)
    for key, value in (
        ("hidden", 4096),
        ("heads", 32),
        ("kv_heads", 8),
        ("ffn", 14336),
        ("vocab", 128256),
        ("context", 2048),
        ("bytes_per_el", 1.0),
        ("kernels_unfused", 40),
        ("kernels_fused", 6),
    ):
        at.number_input(key=key).set_value(value)
    at.number_input(key="launch_us").set_value(15.0).run()
    assert not at.exception and not at.error and not warnings(at)
    model = replace(
        CHAPTER.model,
        name="custom-chapter-1.2b",
        hidden=4096,
        n_heads=32,
        n_kv_heads=8,
        ffn=14336,
        vocab=128256,
        context_len=2048,
        bytes_per_el=1.0,
        unfused_per_layer=40,
        fused_per_layer=6,
    )
    hw = replace(CHAPTER.hardware, eager_launch_us=15.0)
    expected = simulate_step(model, hw, StepPlan(BASELINE, 1)).metrics
    assert readouts(at)["Kernels / step"] == f"{40 * 32 + 4:,}"
    assert readouts(at)["Step time"] == format_us(expected.step_us)
    (title,) = [m.value for m in at.markdown if m.value.startswith("**Custom model")]
    assert "40 kernels/layer (6 fused)" in title and "15 µs/launch" in title and "hidden 4,096" in title
    assert "Chapter: 32 layers" in title  # which preset it started from
    # The step and its download are named as the custom model, not the preset's.
    from ui.simulator.tab import _as_custom

    named, named_hw = _as_custom(CHAPTER, replace(model, name=CHAPTER.model.name), hw)
    assert named.name == "custom-chapter-1.2b" and named_hw.name.endswith(", edited")
    assert _as_custom(CHAPTER, CHAPTER.model, CHAPTER.hardware) == (CHAPTER.model, CHAPTER.hardware)
    assert "Kernel fusion: 40 → 6 kernels per layer" in [h.value for h in at.subheader]


def test_editing_only_the_launch_cost_drops_the_presets_title():
    at = fresh()
    at.number_input(key="launch_us").set_value(20.0).run()
    (title,) = [m.value for m in at.markdown if m.value.startswith("**Custom model")]
    assert "20 µs/launch" in title and "6 µs/launch”" in title  # the preset it came from, then the edit


@pytest.mark.parametrize(
    "edits, fragment",
    [
        ({"hidden": 1000}, "Attention heads (16) must divide the hidden size (1000)"),
        ({"kv_heads": 5}, "KV heads (5) must divide the attention heads (16)"),
        ({"kv_heads": 32}, "KV heads (32) must divide the attention heads (16)"),
        ({"kernels_fused": 30}, "Kernels per layer, fused (30) cannot be more than unfused (11)"),
        ({"bytes_per_el": 0.0}, "Bytes per element must be from 0.125"),
    ],
)
def test_invalid_model_combinations_warn_and_never_raise(edits, fragment):
    at = fresh()
    for key, value in edits.items():
        at.number_input(key=key).set_value(value)
    at.run()
    assert not at.exception and not at.error
    assert any(fragment in w for w in warnings(at)), warnings(at)
    assert set(readouts(at)) == set(READOUT_LABELS)


def test_a_link_with_a_custom_model_opens_it_and_hostile_values_are_clamped():
    at = AppTest.from_file(APP, default_timeout=60)
    link = {
        "hidden": "1536",
        "heads": "12",
        "kv_heads": "4",
        "ffn": "4096",
        "vocab": "50000",
        "kernels_fused": "7",
        "graph_node_us": "0.5",
        "kernels_unfused": "99999",
        "context": "-5",
        "bytes_per_el": "nan",
    }
    at.query_params.update(link)
    at.run()
    assert not at.exception and not at.error
    assert at.number_input(key="hidden").value == 1536 and at.number_input(key="heads").value == 12
    assert at.number_input(key="kernels_unfused").value == 256  # clamped to the widget's range
    assert [at.number_input(key=k).value for k in ("ffn", "vocab", "kernels_fused", "graph_node_us")] == [
        4096,
        50000,
        7,
        0.5,
    ]
    notices = " ".join(warnings(at))
    assert "kernels_unfused" in notices and "context" in notices and "bytes_per_el" in notices
    assert any(m.value.startswith("**Custom model") for m in at.markdown)


def test_a_new_preset_resets_your_model():
    at = fresh()
    at.number_input(key="hidden").set_value(4096)
    at.number_input(key="kernels_unfused").set_value(60).run()
    at.selectbox(key="preset").set_value("llama3-8b-h100").run()
    llama = PRESETS["llama3-8b-h100"].model
    assert at.number_input(key="hidden").value == llama.hidden
    assert at.number_input(key="kernels_unfused").value == llama.unfused_per_layer == 16
    assert not any(m.value.startswith("**Custom model") for m in at.markdown)
    expected = simulate_step(llama, PRESETS["llama3-8b-h100"].hardware, StepPlan(BASELINE, 1)).metrics
    assert readouts(at)["Step time"] == format_us(expected.step_us)
    assert readouts(at)["Bound by"] == "CPU launch"  # 16 kernels a layer at 30 µs: launch-bound at batch 1
