"""The profiler's own cost: events counted per host row by the reader, the step re-timed without it, the fit.

On the recorded H200 traces (tests/data/profiler/h200, data/traces/hf, gpu_probe/recorded) and the fit tool
(tools/profiler_cost_fit.py), which reads them with the same reader and re-times them with the same model."""

import gzip
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from core.trace import EVENT_KINDS, analyse, read_trace
from sim.timing import PROFILER_COST, ProfilerCost
from sim.trace.untraced import _rows, _untraced_step, untraced

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import profiler_cost_fit as pcf  # noqa: E402

H200 = ROOT / "tests" / "data" / "profiler" / "h200"
HF = ROOT / "data" / "traces" / "hf"
RECORDED = ROOT / "gpu_probe" / "recorded"
ZERO = ProfilerCost(0.0, 0.0, 0.0, 0.0, 0.0, line_scale=0.0)
TRACES = (
    (H200 / "qwen2_eager_b1_default.json.gz", None),
    (H200 / "llama_compile_b4_stack.json.gz", None),
    (H200 / "tinyllama_graph_b16_default.json.gz", None),
    (H200 / "micro_add_shapes.json.gz", None),
    (HF / "hf_llama_eager_sync.json.gz", None),
    (HF / "hf_llama_two_streams.json.gz", None),
    (HF / "hf_llama_graph.json.gz", None),
    (RECORDED / "trace_fused_graph_b1.json", "decode_step"),
)


def _steps(path, step_range=None):
    return analyse(path, step_range=step_range).steps


@pytest.mark.parametrize("path, step_range", TRACES, ids=lambda v: getattr(v, "name", str(v)))
def test_no_cost_leaves_every_recorded_step_exactly_as_traced(path, step_range):
    for step in _steps(path, step_range):
        same, taken = _untraced_step(step, ZERO, 1.0)
        assert taken == 0.0
        assert same.timeline.cpu_start == pytest.approx(step.timeline.cpu_start, abs=1e-6)
        assert same.timeline.cpu_dur == pytest.approx(step.timeline.cpu_dur, abs=1e-6)
        assert same.timeline.gpu_start == pytest.approx(step.timeline.gpu_start, abs=1e-6)


@pytest.mark.parametrize("path, step_range", TRACES, ids=lambda v: getattr(v, "name", str(v)))
def test_the_rows_tile_each_host_thread(path, step_range):
    for step in _steps(path, step_range):
        host = step.host
        assert sorted(host.interval[host.interval >= 0].tolist()) == list(range(len(step.timeline.cpu_start)))
        for th in np.unique(host.thread):
            rows = np.flatnonzero(host.thread == th)
            assert host.start[rows[1:]] == pytest.approx(host.end[rows[:-1]])
            assert np.all(host.start[rows] <= host.call_start[rows] + 1e-9)
            assert np.all(host.call_start[rows] <= host.end[rows])


def _independent_counts(path) -> dict:
    """The step's events on its thread from its start to its last launch call's end, counted from the JSON."""
    trace = json.loads(gzip.decompress(path.read_bytes()))
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    (rng,) = [
        e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    ]
    (step,) = _steps(path)
    end = rng["ts"] + step.host.end.max()
    mine = [e for e in events if e.get("tid") == rng["tid"] and rng["ts"] <= e["ts"] < end and e is not rng]
    cats = [e.get("cat") for e in mine]
    ops = [e for e in mine if e.get("cat") in ("cpu_op", "user_annotation")]
    return {
        "op": sum(not e["name"].startswith("triton_") for e in ops),
        "triton": sum(e["name"].startswith("triton_") for e in ops),
        "runtime": cats.count("cuda_runtime"),
        "driver": cats.count("cuda_driver"),
        "python": cats.count("python_function"),
        "shapes": sum("Input Dims" in (e.get("args") or {}) for e in ops),
    }


def totals(host) -> dict[str, int]:
    """A step's recorded events by kind (EVENT_KINDS)."""
    return dict(zip(EVENT_KINDS, host.counts.sum(axis=0).tolist()))


@pytest.mark.parametrize(
    "name",
    [
        "qwen2_eager_b1_shapes",
        "llama_compile_b1_default",
        "tinyllama_eager_b4_stack",
        "qwen2_compile_b4_stack",
    ],
)
def test_events_are_counted_by_kind_as_the_json_holds_them(name):
    path = H200 / f"{name}.json.gz"
    (step,) = _steps(path)
    counts = totals(step.host)
    assert set(counts) == set(EVENT_KINDS)
    assert counts == _independent_counts(path)
    assert counts["op"] > 0 and counts["runtime"] > 0


def test_inductor_ranges_shapes_and_python_calls_are_told_apart():
    (compile_default,) = _steps(H200 / "qwen2_compile_b4_default.json.gz")
    (eager_shapes,) = _steps(H200 / "qwen2_eager_b4_shapes.json.gz")
    (eager_stack,) = _steps(H200 / "qwen2_eager_b4_stack.json.gz")
    assert (
        totals(compile_default.host)["triton"] == 244
    )  # one range per Triton launch, only under torch.compile
    assert totals(eager_shapes.host)["triton"] == 0
    assert totals(eager_shapes.host)["shapes"] == totals(eager_shapes.host)["op"]  # every op has shapes
    assert totals(compile_default.host)["shapes"] == totals(eager_stack.host)["shapes"] == 0
    assert totals(eager_stack.host)["python"] > 4000 and totals(eager_shapes.host)["python"] == 0


def test_the_line_lookups_grow_in_inductors_long_function_and_not_in_a_loop():
    """with_stack: the host time before each call of Inductor's generated `call` grows with its place in it;
    measured from the gaps, it is what those gaps add up to. A loop's calls show no growth."""
    path = H200 / "tinyllama_compile_b4_stack.json.gz"
    trace = json.loads(gzip.decompress(path.read_bytes()))
    py = [e for e in trace["traceEvents"] if e.get("cat") == "python_function"]
    by_parent = {}
    for e in py:
        by_parent.setdefault(e["args"]["Python parent id"], []).append(e)
    calls = sorted(max(by_parent.values(), key=len), key=lambda e: e["ts"])
    gaps = sum(b["ts"] - (a["ts"] + a["dur"]) for a, b in zip(calls, calls[1:]))
    (step,) = _steps(path)
    assert step.host.line_us.sum() == pytest.approx(gaps, rel=0.1)
    loop = read_trace(H200 / "micro_frames_stack.json.gz", host_only=True)
    assert len(loop.host_ts) > 2000 and loop.host_line_us.sum() == 0.0
    (eager,) = _steps(H200 / "qwen2_eager_b1_stack.json.gz")  # Hugging Face's forward: no long function
    assert eager.host.line_us.sum() == 0.0


EVENTS_ONLY = replace(PROFILER_COST, slowdown=0.0)  # the cost of the recorded events alone


def test_a_host_bound_step_loses_the_cost_of_its_events_and_the_slowdown_of_the_rest():
    (step,) = _steps(H200 / "qwen2_eager_b1_default.json.gz")
    speed = PROFILER_COST.speed(step.host.launch_call_us, step.host.launch_calls)
    cost = float(PROFILER_COST.host_us(step.host.counts, step.host.line_us, EVENT_KINDS, speed).sum())
    events = untraced(step, EVENTS_ONLY)
    # All of it, but where an interval would keep less than 10 % of itself (a few short ones).
    assert 0.9 * cost < events.profiler_us <= cost
    u = untraced(step, PROFILER_COST)
    host = _rows(step).pre.sum()  # the host time the rows took, traced
    # What the events leave runs 1 + slowdown times faster (1 %: the few short intervals that keep 10 %).
    assert PROFILER_COST.slowdown > 0.1
    assert host - u.profiler_us == pytest.approx(
        (host - events.profiler_us) / (1 + PROFILER_COST.slowdown), rel=0.01
    )
    assert step.metrics.step_us - u.step_us == pytest.approx(u.profiler_us, rel=0.01)  # the GPU waited for it
    assert u.source == "estimate" and u.scale == 1.0


def test_a_slower_host_pays_more_for_each_event():
    (step,) = _steps(H200 / "qwen2_eager_b1_default.json.gz")
    slow = replace(step, host=replace(step.host, launch_call_us=2 * PROFILER_COST.launch_ref_us))
    fast = replace(step, host=replace(step.host, launch_call_us=PROFILER_COST.launch_ref_us))
    taken = [untraced(s, EVENTS_ONLY).profiler_us for s in (fast, slow)]
    assert taken[1] == pytest.approx(2 * taken[0], rel=0.03)  # short intervals keep 10 % of themselves
    few = replace(
        slow, host=replace(slow.host, launch_calls=3)
    )  # three launch calls tell nothing of the host
    assert untraced(few, EVENTS_ONLY).profiler_us == pytest.approx(taken[0], rel=0.01)
    # The slowdown is a share of the host's own work, which the trace measured at its own speed.
    assert untraced(slow, PROFILER_COST).profiler_us > untraced(fast, PROFILER_COST).profiler_us


def test_inductor_ranges_are_priced_apart_where_they_carry_shapes():
    only = ProfilerCost(0.0, 0.0, 0.0, triton_shapes_us=1.0, line_scale=0.0)  # counts the ranges with shapes
    for name, ranges in (("llama_compile_b1_shapes", 164), ("llama_compile_b1_default", 0)):
        (step,) = _steps(H200 / f"{name}.json.gz")
        assert totals(step.host)["triton"] == 164
        assert only.host_us(step.host.counts, step.host.line_us, EVENT_KINDS).sum() == ranges
    (eager,) = _steps(H200 / "qwen2_eager_b4_shapes.json.gz")  # shapes, but no Inductor range
    assert only.host_us(eager.host.counts, eager.host.line_us, EVENT_KINDS).sum() == 0


def test_a_graph_launch_is_not_slowed_and_every_eager_row_is():
    (replay,) = _steps(H200 / "llama_graph_b1_default.json.gz")
    launch = replay.host.interval == 0  # '2 input copies + cudaGraphLaunch'
    assert "cudaGraphLaunch" in replay.timeline.cpu_names[0]
    assert _rows(replay).slowed.tolist() == (~launch).tolist()
    (eager,) = _steps(H200 / "qwen2_eager_b1_default.json.gz")
    assert _rows(eager).slowed.all()


def test_no_multiple_of_the_cost_is_the_traced_step():
    """The recorder's figure is matched by a multiple of the whole cost, the slowdown included: 0 is the trace."""
    (step,) = _steps(H200 / "qwen2_eager_b1_default.json.gz")
    same, taken = _untraced_step(step, PROFILER_COST, 0.0)
    assert taken == 0.0 and same.metrics.step_us == pytest.approx(step.metrics.step_us, abs=1e-6)


@pytest.mark.parametrize(
    "path",
    [*sorted(H200.glob("*_graph_*.json.gz")), HF / "hf_llama_graph.json.gz", HF / "hf_qwen2_graph.json.gz"],
    ids=lambda p: p.name,
)
def test_graph_replays_change_by_at_most_3_percent(path):
    for step in _steps(path):
        assert untraced(step, PROFILER_COST).step_us / step.metrics.step_us - 1 == pytest.approx(
            0.0, abs=0.03
        )


# -- the fit and its validation (the tool reads every pair: seconds) ------------------------------------
@pytest.fixture(scope="module")
def fitted():
    args = pcf.argparse.Namespace(
        profiler_dir=H200,
        first_run_dir=ROOT / "tests/data/profiler",
        hf_dir=HF,
        probe_dir=RECORDED,
        check_dir=H200.with_name("h200-heldout"),
    )
    return pcf.report(args)


def test_the_fit_gives_the_shipped_costs(fitted):
    assert fitted["cost"] == fitted["shipped"]
    assert PROFILER_COST.source.startswith("fitted on paired traced/untraced H200 steps")


def test_leave_one_model_out_on_the_reliable_host_bound_pairs(fitted):
    """The figures docs/trace-reader.md quotes: the estimate on each model's pairs, fitted without them."""
    s = fitted["summary"]["lomo_host_bound_reliable"]
    assert s["n"] == 41 and s["median"] < 0.075 and s["within_15"] >= 36
    assert fitted["summary"]["gpu_bound_change"]["median"] < 0.01
    assert abs(fitted["summary"]["gpu_bound_change"]["worst"]) <= 0.03


def test_an_unreliable_pair_is_flagged_and_not_fitted_on(fitted):
    rows = {r["case"]: r for r in fitted["cases"]}
    shaky = rows["llama_eager_b4_default"]  # untraced 35,065 µs before the profile, 20,382 after
    assert not shaky["reliable"] and not shaky["fitted_on"]
    assert rows["qwen2_eager_b1_default"]["reliable"] and rows["qwen2_eager_b1_default"]["fitted_on"]
    assert not rows["llama_graph_b1_default"]["fitted_on"]  # GPU-bound: nothing to fit on


def test_the_graphs_what_if_speedup_against_the_measured_one(fitted):
    s = fitted["summary"]["speedup_reliable"]
    assert s["n"] >= 20 and s["median"] < 0.06


def test_a_run_nothing_was_fitted_on_with_the_shipped_costs(fitted):
    """Batches 2 and 8, which the fit never saw: what a user's trace gets (docs/trace-reader.md quotes these)."""
    s = fitted["summary"]
    assert s["held_out_host_bound_reliable"]["n"] == 15
    assert s["held_out_host_bound_reliable"]["median"] < 0.05
    assert abs(s["held_out_host_bound_reliable"]["worst"]) <= 0.15  # issue 35's goal: every one within 15 %
    assert abs(s["held_out_gpu_bound_change"]["worst"]) <= 0.03
    # The graphs what-if's speed-up rides on the replay cost fitted to the shipped probe run: 12.4 % with the H200
    # run of 2026-12-07, whose graphs are not submitted in pieces as Hugging Face's are (4.6 % with the H100 run's
    # slow-host fit; docs/trace-reader.md).
    assert s["held_out_speedup_reliable"]["median"] < 0.13
    assert all(r["source"] == "held-out run" and not r["fitted_on"] for r in fitted["held_out"])


def test_the_loop_of_launches_no_one_fitted_on(fitted):
    """400 torch.add, each an op and a kernel launch with no model around it: every profiler setting within 15 %."""
    s = fitted["summary"]["micro_add"]
    assert s["n"] == 3 and abs(s["worst"]) <= 0.15
    assert not any(r["fitted_on"] for r in fitted["micro_add"])


def test_pairs_timed_on_an_unsteady_host_are_flagged(fitted):
    """A run's untraced p10 and p90 more than 15 % apart: the host changed speed while it was timed."""
    rows = {r["case"]: r for r in fitted["cases"]}
    assert not rows["trace_1b_eager_b1.json.gz"]["reliable"]  # p10 8,268 µs, p90 16,628 µs
    assert not rows["hf_qwen2_eager_sync"]["reliable"]
    assert rows["hf_llama_graph"]["reliable"] and rows["trace_1b_fused_graph_b1.json"]["reliable"]
    # Each Hugging Face eager step is unreliable or slower untraced than traced: no speed-up to check on.
    assert not any(r["reliable"] for r in fitted["other_speedup"])
