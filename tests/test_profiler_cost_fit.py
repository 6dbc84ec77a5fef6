"""tools/profiler_cost_fit.py: the event counts, the re-timed step and the fit, on recorded and synthetic steps."""

import gzip
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import profiler_cost_fit as pcf  # noqa: E402

from gpu_probe.recorder import METADATA_KEY, read_untraced  # noqa: E402

DATA = ROOT / "tests" / "data" / "profiler"
HF = ROOT / "tests" / "data" / "hf"
COST = np.array([1.2, 0.9, 0.33, 0.32, 0.0])  # op, api, python, shapes, graph_node (µs)


def _steps(path, **kw):
    return pcf.trace_steps(pcf.load(path), **kw)


def _synthetic(n=100, gap=10.0, kernel=2.0, sync=True, ops=1) -> pcf.Step:
    """n launches, each after `ops` ops, `gap` µs apart on the host; each kernel runs `kernel` µs once
    launched; then a host wait for the GPU (a stream synchronise) when `sync`."""
    host_ts, host_end, kinds, wait = [], [], [], []
    gpu_ts, gpu_dur, launch = [], [], []
    t, gpu_free = 0.0, 0.0
    for _ in range(n):
        host_ts.append(t)
        host_end.append(t + 1.0)
        kinds.append([ops, 0, 0, 0, 0, 0])  # the ops (one event standing for `ops` of them)
        wait.append(-math.inf)
        host_ts.append(t + 2.0)
        host_end.append(t + 4.0)
        kinds.append([0, 1, 0, 0, 0, 0])  # its launch call
        wait.append(-math.inf)
        start = max(t + 4.0 + 3.0, gpu_free)
        gpu_ts.append(start)
        gpu_dur.append(kernel)
        launch.append(len(host_ts) - 1)
        gpu_free = start + kernel
        t += gap
    launch_ends = np.array(host_end)[launch]
    if sync:
        host_ts.append(t)
        host_end.append(max(t, gpu_free) + 5.0)
        kinds.append([0, 1, 0, 0, 0, 0])
        wait.append(gpu_free)
    return pcf.Step(
        t0=0.0,
        host_ts=np.array(host_ts),
        host_end=np.array(host_end),
        host_kind=np.array(kinds, dtype=float),
        wait_target=np.array(wait),
        gpu_ts=np.array(gpu_ts),
        gpu_dur=np.array(gpu_dur),
        gpu_stream=np.zeros(n, dtype=int),
        gpu_launch=np.array(launch),
        launch_ends=launch_ends,
    )


def test_no_cost_leaves_every_recorded_step_as_traced():
    for path, kw in (
        (DATA / "micro_add_default.json.gz", {}),
        (DATA / "llama_eager_b1_default.json.gz", {}),
        (HF / "hf_llama_graph.json.gz", {}),
        (HF / "hf_llama_eager_sync.json.gz", {}),
        (ROOT / "gpu_probe/recorded/trace_fused_graph_b1.json", {"step_range": "decode_step"}),
    ):
        steps = _steps(path, **kw)
        assert steps, path.name
        for step in steps:
            assert pcf.estimate(step, np.zeros(len(pcf.PARAMS))) == pytest.approx(step.traced_us, abs=0.05)


def test_events_are_counted_by_kind_per_step():
    (view,) = {tuple(s.counts) for s in _steps(DATA / "micro_view_shapes.json.gz")}
    assert dict(zip(pcf.KINDS, view)) == {
        "op": 400,
        "runtime": 2,  # the recorder's synchronise after the loop
        "driver": 0,
        "python": 0,
        "shapes": 400,  # record_shapes: every op carries "Input Dims"
        "graph_node": 0,
    }
    frames = _steps(DATA / "micro_frames_stack.json.gz")[1]
    assert frames.counts[3] > 2000  # with_stack: four Python frames a call, and the loop's own
    llama = _steps(DATA / "llama_eager_b1_default.json.gz")
    assert [tuple(s.counts[:3]) for s in llama] == [(3122, 804, 146)] * 4
    graph = _steps(HF / "hf_llama_graph.json.gz")
    assert [s.counts[5] for s in graph] == [829] * 3  # one graph launch: its 828 kernels and a memset


def test_a_host_bound_step_shrinks_by_its_cost():
    step = _synthetic(gap=10.0, kernel=2.0)
    est = pcf.estimate(step, COST)
    saved = step.traced_us - est
    per_launch = COST[0] + COST[1]  # one op and one launch call
    assert saved == pytest.approx(100 * per_launch, rel=0.05)


def test_a_gpu_bound_step_is_unchanged():
    step = _synthetic(gap=10.0, kernel=50.0)
    assert pcf.estimate(step, COST) == pytest.approx(step.traced_us, rel=0.002)


def test_a_graph_replay_keeps_its_timing_and_only_moves_with_its_launch():
    (step, *_) = _steps(HF / "hf_llama_graph.json.gz")
    assert pcf.estimate(step, COST) / step.traced_us - 1 == pytest.approx(0.0, abs=0.01)
    with_nodes = COST.copy()
    with_nodes[4] = 1.0
    # a cost per node takes 829 µs off the graph launch: every kernel starts that much earlier
    assert step.traced_us - pcf.estimate(step, with_nodes) == pytest.approx(829.0, rel=0.05)


def test_the_fit_recovers_costs_that_made_the_pairs():
    truth = np.array([1.0, 2.0, 0.0, 0.0, 0.0])
    cases = []
    for n, gap, ops in ((50, 20.0, 1), (100, 15.0, 3), (200, 30.0, 2)):
        step = _synthetic(n=n, gap=gap, ops=ops)
        untraced = pcf.estimate(step, truth)
        cases.append(pcf.Case(f"s{n}", "synthetic", "eager", "default", "test", untraced, [step]))
    cost = pcf.fit(cases)
    assert cost[:2] == pytest.approx(truth[:2], rel=0.05)


def test_the_device_trace_carries_the_recorded_untraced_time():
    """The recorder's block landed in the H200 trace (torch 2.11) as a top-level key, before the events."""
    with gzip.open(DATA / "llama_eager_b1_default.json.gz", "rb") as f:
        text = f.read()
    trace = json.loads(text)
    run = json.loads((DATA / "profiler_cost.json").read_text())
    (entry,) = [t for t in run["traces"] if t["label"] == "llama_eager_b1"]
    assert read_untraced(trace) == entry["untraced"]
    assert trace[METADATA_KEY]["torch"].startswith("2.11") and trace[METADATA_KEY]["timer"] == "cuda_events"
    assert text.index(f'"{METADATA_KEY}"'.encode()) < text.index(b'"traceEvents"')
