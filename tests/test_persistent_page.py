"""The persistent kernel's run on the page: its in-kernel stamps read, checked and drawn.

The stamps are real: the H200 run of tools/persistent_check.py (gpu_probe/kernels/persistent_h200/), the 1b
preset at batch 1, compacted as the probe's CLI stores them; the rest of the run is synthetic."""

import copy
import json
from pathlib import Path

import pytest
from app_pages import tables
from streamlit.testing.v1 import AppTest
from synthetic_params import KNOWN_PARAMS

import core.probe_result as probe_result
from core.step_plan import FUSED_GRAPH, PERSISTENT
from gpu_probe.kernels.persistent_trace import compact
from sim.calibration import synthetic_result
from sim.config import PRESETS

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
STAMPS = ROOT / "gpu_probe" / "kernels" / "persistent_h200" / "persistent_trace_1b_b1.json"


def _result() -> dict:
    data = synthetic_result(
        KNOWN_PARAMS,
        PRESETS["probe-0.5b-h200"].model.with_layers(4),
        batches=(1, 8),
        modes=(FUSED_GRAPH.name, PERSISTENT.name),
    )
    stamps = compact(json.loads(STAMPS.read_text()))
    for run in data["runs"]:
        if run["mode"] == PERSISTENT.name and run["batch"] == 1:
            run["phases"] = stamps
    return data


def test_the_stamps_load_and_draw_on_the_steps_time_axis():
    run = probe_result.load_result(_result()).run(PERSISTENT.name, 1)
    ph = run.phases
    assert ph.programs == 132 and len(ph.names) == 82 and len(ph.lane_programs) == 12
    assert ph.names[1] == "L0 qkv" and ph.kinds[-1] == "lm_head"
    tl = run.phase_timeline()
    kernel_start = float(run.timeline.gpu_start[run.timeline.gpu_names.index("_decode_step_kernel")])
    assert tl.gpu_start[tl.gpu_stream > 0].min() >= kernel_start  # the phases start with the kernel
    assert dict(tl.stream_names)[1] == "SMs 0-10" and len(tl.streams) == 13  # the copies and 12 lanes
    assert (tl.gpu_stream > 0).sum() == 12 * 82
    again = probe_result.load_result(json.loads(json.dumps(probe_result.load_result(_result()).to_dict())))
    assert again.run(PERSISTENT.name, 1).phases == ph  # written back as it was read


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: p.update(names="x"), "phases.names: expected a list"),
        (lambda p: p["names"].append("extra"), "phases.kinds: 82 entries for 83 phases"),
        (lambda p: p["lanes"][0]["start_us"].pop(), "phases.lanes\\[0\\].start_us: expected 82 numbers"),
        (lambda p: p["lanes"][3]["end_us"].__setitem__(5, -1.0), "phases.lanes\\[3\\].end_us: each must be"),
        (lambda p: p["lanes"][0].update(programs=[5, 500]), "phases.lanes\\[0\\].programs"),
        (lambda p: p["lanes"].extend(p["lanes"] * 6), "phases.lanes: expected a list of 1 to 64"),
        (lambda p: p["lanes"][2]["end_us"].__setitem__(9, 0.0), "a phase ends before it starts"),
        (lambda p: p.update(by_kind=[1, 2]), "phases.by_kind: expected an object"),
    ],
)
def test_bad_stamps_are_a_named_error(damage, message):
    data = _result()
    run = next(r for r in data["runs"] if "phases" in r)
    run["phases"] = copy.deepcopy(run["phases"])
    damage(run["phases"])
    with pytest.raises(ValueError, match=message):
        probe_result.load_result(data)


def test_the_probe_tab_draws_inside_the_kernel(monkeypatch):
    import streamlit as st

    import ui.probe_results

    res = probe_result.load_result(_result(), timeline_source="recorded")
    monkeypatch.setattr(probe_result, "recorded_result", lambda: res)
    monkeypatch.setattr(ui.probe_results, "MORE_RECORDED", ())
    st.cache_resource.clear()
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update({"tab": "Live GPU probe", "pr_mode": PERSISTENT.name, "pr_batch": "1"})
    at.run()
    assert not at.exception, at.exception
    assert "Inside the persistent kernel" in [h.value for h in at.subheader]
    chart = next(c for c in at.get("plotly_chart") if c.key == "pr_phases")
    spec = json.loads(chart.proto.spec)
    lanes = spec["layout"]["yaxis"]["categoryarray"]
    # The SM lanes, and the peer's lanes below them named by its mode.
    assert "SMs 0-10" in lanes and f"GPU · {FUSED_GRAPH.title}" in lanes
    assert any("the barriers' release after the last arrival" in m.value for m in at.markdown)
    assert any("gate_up" in str(t.value) for t in tables(at))
    st.cache_resource.clear()
