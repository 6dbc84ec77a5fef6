"""Exported Chrome traces, loaded back: tracks, slices, times and launch->kernel flows."""

import json

import numpy as np
import pytest

from core.step_plan import StepPlan, toggled
from core.timeline import Timeline
from core.trace.chrome import CPU_PID, GPU_PID, assign_tracks, to_chrome_trace_json


def eager_timeline() -> Timeline:
    # Three launches of 6 µs, each kernel starts when its launch ends and runs 2 µs: launch-bound.
    return Timeline(
        cpu_start=[0, 6, 12],
        cpu_dur=[6, 6, 6],
        cpu_names=["launch rms_norm", "launch qkv_proj", "launch rope"],
        gpu_start=[6, 12, 18],
        gpu_dur=[2, 2, 2],
        gpu_names=["rms_norm", "qkv_proj", "rope"],
        launched_by=[0, 1, 2],
        label="eager",
    )


def graph_timeline() -> Timeline:
    # One graph launch submits four back-to-back kernels (each ends exactly where the next starts).
    return Timeline(
        cpu_start=[0],
        cpu_dur=[8],
        cpu_names=["cudaGraphLaunch"],
        gpu_start=[8, 10, 13, 14],
        gpu_dur=[2, 3, 1, 4],
        gpu_names=["a", "b", "c", "d"],
        launched_by=[0, 0, 0, 0],
        source="recorded",
    )


def overlapping_timeline() -> Timeline:
    # Measured kernels that partly overlap, and one with an unknown launcher.
    return Timeline(
        cpu_start=[0, 5],
        cpu_dur=[5, 5],
        cpu_names=["launch x", "launch y"],
        gpu_start=[5, 7, 30],
        gpu_dur=[4, 4, 1],
        gpu_names=["x", "y", "memcpy"],
        launched_by=[0, 1, -1],
        source="measured",
    )


def load(timeline: Timeline, name: str = "step") -> dict:
    text = to_chrome_trace_json(timeline, name=name)
    return json.loads(text)


def slices(trace: dict, pid: int) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == pid]


def enclosing_slice(trace: dict, pid: int, tid: int, ts: float) -> dict:
    """The slice a viewer binds a flow endpoint at (pid, tid, ts) to; exactly one must enclose it."""
    hits = [e for e in slices(trace, pid) if e["tid"] == tid and e["ts"] <= ts <= e["ts"] + e["dur"]]
    assert len(hits) == 1, f"flow endpoint at {ts} is inside {len(hits)} slices on {pid}/{tid}"
    return hits[0]


def assert_tracks_nest(trace: dict) -> None:
    # Perfetto's JSON importer needs slices on one track to nest; ours must not overlap at all.
    by_track = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            by_track.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for track, spans in by_track.items():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end - 1e-9, f"slices overlap on track {track}"


@pytest.mark.parametrize("make", [eager_timeline, graph_timeline, overlapping_timeline])
def test_slices_reproduce_the_timeline_intervals(make):
    tl = make()
    trace = load(tl)
    cpu = sorted(slices(trace, CPU_PID), key=lambda e: e["args"]["index"])
    gpu = sorted(slices(trace, GPU_PID), key=lambda e: e["args"]["index"])
    assert [e["name"] for e in cpu] == list(tl.cpu_names)
    assert [e["name"] for e in gpu] == list(tl.gpu_names)
    np.testing.assert_allclose([e["ts"] for e in cpu], tl.cpu_start)
    np.testing.assert_allclose([e["dur"] for e in cpu], tl.cpu_dur)
    np.testing.assert_allclose([e["ts"] for e in gpu], tl.gpu_start)
    np.testing.assert_allclose([e["dur"] for e in gpu], tl.gpu_dur)
    assert {e["cat"] for e in cpu} == {"launch"} and {e["cat"] for e in gpu} == {"kernel"}
    assert_tracks_nest(trace)


def test_named_cpu_thread_and_gpu_stream_tracks():
    trace = load(eager_timeline(), name="chapter preset")
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert processes[CPU_PID].startswith("CPU (host): chapter preset (simulated)")
    assert processes[GPU_PID].startswith("GPU: chapter preset")
    assert threads == {
        (CPU_PID, 1): "CPU thread: building + submitting launches",
        (GPU_PID, 1): "GPU stream: kernels",
    }
    # Every slice lives on a named track.
    assert {(e["pid"], e["tid"]) for e in trace["traceEvents"] if e["ph"] == "X"} <= set(threads)


@pytest.mark.parametrize("make", [eager_timeline, graph_timeline, overlapping_timeline])
def test_flows_join_each_launch_to_the_kernels_it_submitted(make):
    tl = make()
    trace = load(tl)
    starts = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "s"}
    finishes = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "f"}
    expected = int(np.sum(tl.launched_by >= 0))
    assert len(starts) == len(finishes) == expected  # ids are unique, one arrow per launched kernel
    assert set(starts) == set(finishes)
    for flow_id, s in starts.items():
        f = finishes[flow_id]
        assert f["bp"] == "e" and s["pid"] == CPU_PID and f["pid"] == GPU_PID
        launch = enclosing_slice(trace, s["pid"], s["tid"], s["ts"])
        kernel = enclosing_slice(trace, f["pid"], f["tid"], f["ts"])
        assert tl.launched_by[kernel["args"]["index"]] == launch["args"]["index"]
        assert kernel["args"]["launched_by"] == launch["args"]["index"]


def test_graph_launch_fans_out_to_every_kernel():
    trace = load(graph_timeline())
    (launch,) = slices(trace, CPU_PID)
    assert launch["name"] == "cudaGraphLaunch" and launch["args"]["kernels_submitted"] == 4
    assert len([e for e in trace["traceEvents"] if e["ph"] == "f"]) == 4


def test_overlapping_kernels_get_a_second_stream_track():
    trace = load(overlapping_timeline())
    gpu = sorted(slices(trace, GPU_PID), key=lambda e: e["args"]["index"])
    assert [e["tid"] for e in gpu] == [1, 2, 1]
    names = {
        e["tid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == GPU_PID
    }
    assert names == {1: "GPU stream: kernels", 2: "GPU stream: kernels (2)"}
    # The kernel with an unknown launcher gets no arrow.
    assert all(e["id"] != 3 for e in trace["traceEvents"] if e["ph"] in "sf")


def test_metrics_travel_with_the_trace():
    tl = eager_timeline()
    other = load(tl)["otherData"]
    m = tl.metrics()
    assert other["bound_by"] == m.bound_by == "CPU launch"
    assert other["step_us"] == pytest.approx(20.0) and other["kernels"] == 3
    assert other["time_unit"] == "us" and other["label"] == "eager"


def test_assign_tracks_touching_intervals_share_a_track():
    tracks = assign_tracks(np.array([0.0, 2.0, 2.0, 3.0]), np.array([2.0, 2.0, 0.5, 1.0]))
    assert tracks.tolist() == [0, 0, 1, 1]


def test_simulated_step_exports_cleanly():
    schedule = pytest.importorskip("sim.step.schedule")
    config = pytest.importorskip("sim.config")
    preset = config.PRESETS[config.DEFAULT_PRESET]
    for fusion, graphs in [(False, False), (True, True)]:
        step = schedule.simulate_step(preset.model, preset.hardware, StepPlan(toggled(fusion, graphs), 1))
        tl = step.timeline
        trace = load(tl, name="chapter")
        assert len(slices(trace, CPU_PID)) == len(tl.cpu_start)
        assert len(slices(trace, GPU_PID)) == len(tl.gpu_start)
        assert_tracks_nest(trace)
        n_flows = len([e for e in trace["traceEvents"] if e["ph"] == "s"])
        assert n_flows == int(np.sum(tl.launched_by >= 0))


def test_each_stream_and_thread_gets_tracks_of_its_own():
    tl = Timeline(
        cpu_start=[0.0, 1.0, 5.0],
        cpu_dur=[4.0, 2.0, 3.0],
        cpu_names=["a", "b", "c"],
        gpu_start=[5.0, 6.0, 9.0],
        gpu_dur=[3.0, 3.0, 1.0],
        gpu_names=["k7", "k29", "k7b"],
        launched_by=[0, 1, 2],
        source="measured",
        gpu_stream=[7, 29, 7],
        cpu_thread=[0, 1, 0],
    )
    events = json.loads(to_chrome_trace_json(tl))["traceEvents"]
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert sorted(tracks.values()) == [
        "CPU thread 0: building + submitting launches",
        "CPU thread 1: building + submitting launches",
        "GPU stream 29: kernels",
        "GPU stream 7: kernels",
    ]
    kernel_track = {
        e["name"]: tracks[(e["pid"], e["tid"])] for e in events if e.get("cat") == "kernel" and e["ph"] == "X"
    }
    assert kernel_track == {
        "k7": "GPU stream 7: kernels",
        "k7b": "GPU stream 7: kernels",
        "k29": "GPU stream 29: kernels",
    }
