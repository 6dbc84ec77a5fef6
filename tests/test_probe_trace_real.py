"""Trace -> timeline on REAL torch.profiler traces recorded on the H200 (tests/data/probe_trace_*.json).

Recorded by `python -m gpu_probe --preset tiny --batch 1 3 --modes all --buckets 1 2 4 --steps 20
--trace-dir ...` (2-layer fp32 model) and, for the 32-layer one, by the small-preset run.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from core.timeline import CPU_BOUND, Timeline
from gpu_probe.trace import kernels_per_layer, parse_step

DATA = Path(__file__).resolve().parent / "data"


def _trace(name):
    return json.loads((DATA / f"probe_trace_{name}.json").read_text())


def test_checked_in_traces_are_small_and_from_the_h200():
    files = sorted(DATA.glob("probe_trace_*.json"))
    assert len(files) == 4 and sum(f.stat().st_size for f in files) < 1_000_000
    for f in files:
        assert json.loads(f.read_text())["deviceProperties"][0]["name"] == "NVIDIA H200"


def test_eager_step_one_cpu_interval_per_launch():
    step = parse_step(_trace("tiny_eager_b1"), label="eager")
    tl = step.timeline
    m = tl.metrics()
    # Every runtime launch submitted exactly one kernel or copy: 104 kernels + 2 copies in this step.
    assert step.kernels_per_step == 106 and step.launches == 106 and step.graph_launches == 0
    assert m.launches == 106 and m.kernels == 106
    assert tl.launched_by.tolist() == list(range(106))
    # The CPU intervals tile the host's time: each starts where the previous launch call ended.
    assert tl.cpu_start[0] == 0.0
    np.testing.assert_allclose(tl.cpu_start[1:], tl.cpu_end[:-1])
    # No kernel starts before the host began building its launch.
    assert np.all(tl.gpu_start >= tl.cpu_start[tl.launched_by] - 1e-3)
    assert all(n.startswith(("cudaLaunchKernel", "cudaMemcpyAsync")) for n in tl.cpu_names)
    assert m.bound_by == CPU_BOUND and m.utilisation < 0.2  # a 2-layer eager step is launch-bound
    assert kernels_per_layer(step.kernel_names, 2) == (46, True)


def test_graph_step_single_launch_and_replayed_kernels_in_the_trace():
    step = parse_step(_trace("tiny_fused_graph_b3"))
    tl = step.timeline
    assert tl.cpu_names == ("5 input copies + cudaGraphLaunch",)
    assert step.graph_launches == 1 and step.launches == 6
    # The replayed graph's kernels appear in the trace, attributed to the one graph launch.
    names = list(tl.gpu_names)
    assert sum(n.startswith("Memcpy DtoD") for n in names) == 5
    assert sum("_fused_linear_kernel" in n for n in names) == 2 * 4 + 1  # 4 GEMMs per layer + LM head
    assert sum("_paged_attention_kernel" in n for n in names) == 2
    assert tl.launched_by.tolist() == [0] * len(names)
    # Kernels run after the graph launch call ends (minus rounding), input copies before it.
    replayed = [i for i, n in enumerate(names) if not n.startswith("Memcpy")]
    assert tl.gpu_start[replayed].min() >= tl.cpu_end[0] - 5.0
    assert kernels_per_layer(step.kernel_names, 2) == (6, True)


def test_compile_step_uses_cuda_graphs():
    step = parse_step(_trace("tiny_compile_b1"))
    assert step.graph_launches == 1 and step.timeline.metrics().launches == 1
    assert any(n.startswith("triton_") for n in step.kernel_names)


def test_small_model_fused_graph_step():
    step = parse_step(_trace("small_fused_graph_b1"), label="fused+graph · batch 1")
    m = step.timeline.metrics()
    assert step.kernels_per_step == 196 and m.launches == 1  # 6 x 32 + embedding + LM head + 2 input copies
    assert kernels_per_layer(step.kernel_names, 32) == (6, True)
    assert m.gpu_busy_us > m.cpu_launch_us and m.bound_by == "GPU"
    again = Timeline.from_dict(step.timeline.to_dict())
    assert again.metrics().kernels == 196 and again.label == "fused+graph · batch 1"


def test_idle_gaps_are_consistent_with_the_metrics():
    tl = parse_step(_trace("tiny_eager_b1")).timeline
    m = tl.metrics()
    _, gap = tl.idle_intervals()
    assert gap.sum() == pytest.approx(m.idle_us, rel=1e-9)
    assert m.step_us == pytest.approx(m.gpu_busy_us + m.idle_us)
