"""sim.timing: the one kernel cost, schedule recurrence and graph-replay model."""

import numpy as np
import pytest

from sim.calibration import graph_cost_from_result
from sim.timing import (
    GraphReplayCost,
    KernelFamilyCost,
    eager_timeline,
    family_kernel_us,
    graph_replay_timeline,
    kernel_us,
    schedule_starts,
    stream_end_us,
)


def _loop_starts(ready, dur, gap):
    gap = np.broadcast_to(np.asarray(gap, float), np.shape(dur))
    start = np.zeros(len(dur))
    for i in range(len(dur)):
        start[i] = ready[i] if i == 0 else max(ready[i], start[i - 1] + dur[i - 1] + gap[i])
    return start


@pytest.mark.parametrize("seed", range(5))
def test_schedule_starts_matches_the_recurrence_written_as_a_loop(seed):
    rng = np.random.default_rng(seed)
    n = 50
    ready = np.sort(rng.uniform(0, 100, n))
    dur = rng.uniform(0.1, 5, n)
    gap = rng.uniform(-0.5, 1.0, n) if seed % 2 else 0.3
    np.testing.assert_allclose(schedule_starts(ready, dur, gap), _loop_starts(ready, dur, gap), atol=1e-9)


@pytest.mark.parametrize("seed", range(8))
def test_stream_end_of_repeated_segments_is_the_expanded_schedules_last_end(seed):
    # Segments of random kernels, some repeated (a step's layers), host costs that sometimes lead and
    # sometimes lag the GPU, gaps that may be negative (PDL): the unrolled end equals the recurrence's.
    rng = np.random.default_rng(seed)
    segments = []
    for _ in range(rng.integers(1, 4)):
        m = int(rng.integers(1, 6))
        segments.append(
            (
                rng.uniform(0.1, 8, m),
                rng.uniform(0.1, 8, (3, m)),
                rng.uniform(-0.5, 1.0, m),
                int(rng.integers(1, 9)),
            )
        )
    first = float(rng.uniform(0, 20))
    host = np.concatenate([np.tile(h, r) for h, _, _, r in segments])
    dur = np.concatenate([np.tile(d, (1, r)) for _, d, _, r in segments], axis=1)
    gap = np.concatenate([np.tile(g, r) for _, _, g, r in segments])
    ready = first + np.cumsum(host)
    for row in range(3):
        expected = _loop_starts(ready, dur[row], gap)[-1] + dur[row, -1]
        assert stream_end_us(first, segments)[row] == pytest.approx(expected, abs=1e-9)
    np.testing.assert_allclose(
        stream_end_us(first, segments), (schedule_starts(ready, dur, gap) + dur)[:, -1]
    )


def test_graph_replay_step_broadcasts_and_matches_its_timeline():
    cost = GraphReplayCost(launch_us=3.0, per_node_host_us=2.0, node_gap_us=0.5)
    dur = np.array([[1.0, 1.0, 1.0], [9.0, 9.0, 9.0]])
    steps = cost.step_us(dur)
    assert steps.shape == (2,)
    for row, step in zip(dur, steps):
        assert graph_replay_timeline(row, "abc", cost).step_us == pytest.approx(step)
    # The nodes start once the call (3 + 3 × 2 µs) has returned, then run back to back 0.5 µs apart.
    assert steps[0] == pytest.approx(3.0 + 3 * 2.0 + 3 * 1.0 + 2 * 0.5)
    assert steps[1] == pytest.approx(3.0 + 3 * 2.0 + 3 * 9.0 + 2 * 0.5)


def test_a_replayed_node_starts_only_once_the_graph_launch_has_returned():
    cost = GraphReplayCost(launch_us=30.0, per_node_host_us=0.5, node_gap_us=0.4, input_copy_us=9.0)
    tl = graph_replay_timeline(np.full(100, 2.0), ["k"] * 100, cost)
    assert tl.cpu_end[0] == pytest.approx(9.0 + 30.0 + 50.0)
    assert tl.gpu_start[0] == pytest.approx(tl.cpu_end[0])  # as every profiled replay shows
    np.testing.assert_allclose(np.diff(tl.gpu_start), 2.4)


def test_schedule_starts_broadcasts_over_leading_axes():
    dur = np.array([[1.0, 2.0, 3.0], [4.0, 4.0, 4.0]])
    starts = schedule_starts(np.zeros(3), dur, 0.5)
    np.testing.assert_allclose(starts, [[0, 1.5, 4.0], [0, 4.5, 9.0]])


def test_kernel_cost_is_latency_plus_the_larger_of_memory_and_math():
    # 4 MB at 2 TB/s = 2 µs; 1 GFLOP at 100 TFLOP/s = 10 µs: compute-bound, plus 3 µs latency.
    assert kernel_us(4e6, 1e9, 3.0, 2000.0, 100.0) == pytest.approx(13.0)
    assert kernel_us(4e6, 0.0, 3.0, 2000.0) == pytest.approx(5.0)
    fam = KernelFamilyCost(latency_us=1.0, GBps=1000.0)
    np.testing.assert_allclose(family_kernel_us([0.0, 1e6], [0.0, 0.0], fam), [1.0, 2.0])


def test_graph_replay_timeline_is_one_launch_then_the_nodes_back_to_back():
    cost = GraphReplayCost(launch_us=10.0, per_node_host_us=0.5, node_gap_us=1.0, input_copy_us=4.0)
    tl = graph_replay_timeline([5.0, 5.0, 5.0], ["a", "b", "c"], cost, label="x")
    assert len(tl.cpu_start) == 1 and tl.cpu_dur[0] == pytest.approx(15.5)  # 4 + 10 + 3 × 0.5
    # The nodes start once the call has returned (15.5 µs), then back to back 1 µs apart.
    np.testing.assert_allclose(tl.gpu_start, [15.5, 21.5, 27.5])
    assert tl.step_us == pytest.approx(cost.step_us([5.0, 5.0, 5.0]))
    assert tl.label == "x" and set(tl.launched_by) == {0}


def test_a_negative_node_gap_overlaps_kernels_as_pdl_does():
    cost = GraphReplayCost(launch_us=1.0, node_gap_us=-2.0)
    tl = graph_replay_timeline([5.0, 5.0], ["a", "b"], cost)
    assert tl.gpu_start[1] == pytest.approx(4.0)
    assert tl.metrics().gpu_busy_us == pytest.approx(8.0)


def test_eager_timeline_waits_for_the_host():
    tl = eager_timeline([1.0, 1.0, 1.0], ["a", "b", "c"], 20.0)
    np.testing.assert_allclose(tl.gpu_start, [20, 40, 60])
    assert tl.metrics().bound_by == "CPU launch"


def test_graph_cost_of_a_run_without_two_runs_is_a_named_error():
    from core.probe_result import recorded_result

    result = recorded_result()
    one = type(result)(
        **{
            **{f: getattr(result, f) for f in result.__slots__},
            "runs": [r for r in result.runs if r.mode == "fused+graph"][:1],
        }
    )
    with pytest.raises(ValueError, match="at least two runs"):
        graph_cost_from_result(one)
