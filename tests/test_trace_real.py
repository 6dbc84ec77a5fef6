"""core.trace and the what-ifs on real traces recorded on the H200.

- The probe's own traces (gpu_probe/recorded/, tests/data/probe_trace_*.json) must give the numbers the
  recorded runs hold, which the probe tab shows.
- Hugging Face transformers decode steps (data/traces/hf/, made by `python tools/hf_traces.py --out
  data/traces/hf` on the H200: code this project did not write): eager with ProfilerStep#N and with plain
  synchronisation between steps, replayed with torch.cuda.graph, under torch.compile(reduce-overhead), and
  with a second stream busy during the step. Their step times measured without the profiler are in
  hf_llama_measured.json.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from core.probe_result import load_result
from core.timeline import CPU_BOUND, GPU_BOUND, Timeline
from core.trace import TraceError, analyse, kernels_per_layer
from sim.trace.whatif import default_replay_cost, whatifs

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
HF = ROOT / "data" / "traces" / "hf"
RECORDED = ROOT / "gpu_probe" / "recorded"
MEASURED = json.loads((HF / "hf_llama_measured.json").read_text())
HF_LAYERS = MEASURED["model"]["layers"]


def _union(start, end) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(zip(start, end)):
        if cur_e is None or s > cur_e:
            total += 0.0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s)


# -- the probe's own traces ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("result", "trace", "mode"),
    [
        ("small.json", "trace_fused_graph_b1.json", "fused+graph"),
        ("small.json", "trace_eager_b1.json.gz", "eager"),
        ("1b.json", "trace_1b_fused_graph_b1.json", "fused+graph"),
        ("1b.json", "trace_1b_eager_b1.json.gz", "eager"),
    ],
)
def test_probe_traces_give_the_numbers_of_the_recorded_runs(result, trace, mode):
    run = load_result(RECORDED / result).run(mode, 1)
    step = analyse(RECORDED / trace, step_range="decode_step").steps[-1]
    m = step.metrics
    assert step.kernels == run.kernels_per_step and step.launches == run.launches
    assert m.cpu_launch_us == pytest.approx(run.cpu_launch_us, abs=1e-2)
    assert m.gpu_busy_us == pytest.approx(run.gpu_busy_us, abs=1e-2)
    assert m.utilisation == pytest.approx(run.utilisation, abs=1e-6) and m.bound_by == run.bound_by
    # The run's stored lanes are the reader's, to the profiler's nanosecond.
    np.testing.assert_allclose(step.timeline.gpu_start, run.timeline.gpu_start, atol=2e-3)
    assert step.timeline.cpu_names == run.timeline.cpu_names


def test_probe_test_traces_steps_and_layers():
    eager = analyse(DATA / "probe_trace_tiny_eager_b1.json", step_range="decode_step").steps[-1]
    assert eager.kernels == eager.launches == 106 and eager.metrics.bound_by == CPU_BOUND
    assert kernels_per_layer(eager.kernel_names, 2) == (46, True)
    graphed = analyse(DATA / "probe_trace_tiny_fused_graph_b3.json", step_range="decode_step").steps[-1]
    assert graphed.timeline.cpu_names == ("5 input copies + cudaGraphLaunch",) and graphed.launches == 6
    assert kernels_per_layer(graphed.kernel_names, 2) == (6, True)
    small = analyse(DATA / "probe_trace_small_fused_graph_b1.json", step_range="decode_step").steps[-1]
    assert small.kernels == 196 and small.metrics.bound_by == GPU_BOUND
    assert Timeline.from_dict(small.timeline.to_dict()).metrics().kernels == 196


def test_probe_eager_trace_what_if_graphs_is_close_to_the_measured_graph_mode():
    """The eager batch-1 trace replayed in the what-if against the graph mode the same run measured."""
    for result, trace in (
        ("small.json", "trace_eager_b1.json.gz"),
        ("1b.json", "trace_1b_eager_b1.json.gz"),
    ):
        measured = load_result(RECORDED / result).run("graph", 1).step_us_median
        step = analyse(RECORDED / trace, step_range="decode_step").steps[-1]
        predicted = whatifs(step, default_replay_cost())["graphs"].metrics.step_us
        assert predicted == pytest.approx(measured, rel=0.15), (result, predicted, measured)


# -- Hugging Face transformers -----------------------------------------------------------------------
def test_hf_traces_are_small_real_h200_traces():
    files = sorted(HF.glob("hf_llama_*.json.gz"))
    assert len(files) == 5 and sum(f.stat().st_size for f in files) < 3_000_000
    for f in files:
        assert analyse(f).trace.device == "NVIDIA H200"
    assert MEASURED["device"] == "NVIDIA H200" and "transformers" in MEASURED


@pytest.mark.parametrize(
    ("name", "rule", "steps", "graphs", "streams"),
    [
        ("eager_profilerstep", "the profiler's ProfilerStep#N ranges", 3, 0, 1),
        ("eager_sync", "host synchronisation between steps", 3, 0, 1),
        ("graph", "one step per cudaGraphLaunch", 3, 1, 1),
        ("compile", "the profiler's ProfilerStep#N ranges", 3, 1, 1),
        ("two_streams", "the profiler's ProfilerStep#N ranges", 3, 0, 2),
    ],
)
def test_hf_steps_found_by_the_right_rule(name, rule, steps, graphs, streams):
    report = analyse(HF / f"hf_llama_{name}.json.gz")
    assert report.rule == rule and len(report.steps) == steps
    kernels = {s.kernels for s in report.steps}
    assert len(kernels) == 1, "every decode step runs the same kernels"
    for s in report.steps:
        assert s.graph_launches == graphs and s.gpu_streams == streams
        tl = s.timeline
        assert s.metrics.gpu_busy_us == pytest.approx(_union(tl.gpu_start, tl.gpu_end), rel=1e-9)
        m = s.metrics
        assert m.bound_by == (CPU_BOUND if m.cpu_launch_us > m.gpu_busy_us else GPU_BOUND)


def test_hf_eager_and_graph_steps_are_the_same_model():
    eager = analyse(HF / "hf_llama_eager_sync.json.gz").steps[0]
    graph = analyse(HF / "hf_llama_graph.json.gz").steps[0]
    # Same GPU work: the eager step's kernels are the replayed graph's nodes, plus the same copies.
    assert eager.kernels == graph.kernels
    assert (
        kernels_per_layer(eager.kernel_names, HF_LAYERS)[0]
        == kernels_per_layer(graph.kernel_names, HF_LAYERS)[0]
    )
    # Eager is launch-bound at batch 1; the replay is not.
    assert eager.metrics.bound_by == CPU_BOUND and graph.metrics.bound_by == GPU_BOUND
    assert graph.launches < 10 < eager.launches
    # The graph step's input copies are named as such; the copy back of the token is its own launch.
    assert graph.timeline.cpu_names[0] == "2 input copies + cudaGraphLaunch"
    assert graph.timeline.cpu_names[-1].startswith("cudaMemcpyAsync")


def test_hf_two_streams_step_draws_both_streams():
    step = analyse(HF / "hf_llama_two_streams.json.gz").steps[0]
    tl = step.timeline
    assert len(tl.streams) == 2
    side = min(tl.streams, key=lambda s: int((tl.gpu_stream == s).sum()))  # the side stream runs few kernels
    on_side = tl.gpu_stream == side
    side_kernels = [
        n for n, k in zip(np.array(tl.gpu_names)[on_side], tl.gpu_kinds[on_side]) if k == "kernel"
    ]
    assert len(side_kernels) == 6 and all(
        "nvjet" in n or "gemm" in n.lower() for n in side_kernels
    )  # the 6 matmuls
    # The streams overlap: busy time is less than the sum of the kernel times.
    assert step.metrics.gpu_busy_us < tl.gpu_dur.sum()


@pytest.mark.parametrize("name", ["eager_profilerstep", "eager_sync"])
def test_hf_graphs_what_if_from_the_eager_trace_is_within_15_percent_of_the_measured_graph_step(name):
    """The issue's check: the eager trace, replayed by the timing model, against the real torch.cuda.graph
    step timed with CUDA events and no profiler."""
    measured = MEASURED["modes"]["graph"]["step_us_median"]
    cost = default_replay_cost()
    predicted = [
        whatifs(s, cost)["graphs"].metrics.step_us for s in analyse(HF / f"hf_llama_{name}.json.gz").steps
    ]
    assert float(np.median(predicted)) == pytest.approx(measured, rel=0.15)


@pytest.mark.xfail(
    strict=True,
    reason="issue 35: the graphs what-if's replay cost is fitted to the shipped probe run (H200, 2026-12-07), whose "
    "graphs hold no memset node and whose host replays them in ~50 µs whatever their size; Hugging Face's graphs are "
    "submitted in pieces (a 1.1 ms call for 832 nodes), so the estimate comes out 21 % short on both models "
    "(bench/whatif_check.py). The previous fit, to a slow host, met this by its per-node cost.",
)
def test_hf_graphs_what_if_holds_on_another_machine_and_another_model():
    """Not fitted to either: the same model's graph step measured on another H200 machine, and a second
    model (Qwen2.5-0.5B's shape: 24 thin layers, 1,233 kernels a step) traced and measured likewise."""
    cost = default_replay_cost()
    eager = [
        whatifs(s, cost)["graphs"].metrics.step_us for s in analyse(HF / "hf_llama_eager_sync.json.gz").steps
    ]
    other = json.loads((HF / "hf_llama_measured_first_machine.json").read_text())["modes"]["graph"]
    assert float(np.median(eager)) == pytest.approx(other["step_us_median"], rel=0.15)
    qwen = json.loads((HF / "hf_qwen2_measured.json").read_text())
    assert qwen["model"]["arch"] == "qwen2" and qwen["device"] == "NVIDIA H200"
    predicted = [
        whatifs(s, cost)["graphs"].metrics.step_us for s in analyse(HF / "hf_qwen2_eager_sync.json.gz").steps
    ]
    assert float(np.median(predicted)) == pytest.approx(qwen["modes"]["graph"]["step_us_median"], rel=0.15)


def test_a_replayed_step_is_the_hosts_enqueue_then_the_gpus_span():
    """Why the replay model starts a graph's nodes only once its launch call has returned: unprofiled, the
    measured step is the host's enqueue time plus the GPU's own span of the step, within a few per cent."""
    for name in ("hf_llama_measured.json", "hf_qwen2_measured.json"):
        graph = json.loads((HF / name).read_text())["modes"]["graph"]
        assert graph["step_us_median"] == pytest.approx(
            graph["enqueue_us_median"] + graph["gpu_span_us_median"], rel=0.05
        )
    for name in ("hf_llama_graph.json.gz", "hf_qwen2_graph.json.gz"):
        for step in analyse(HF / name).steps:
            tl = step.timeline
            kernels = np.flatnonzero(tl.gpu_kinds != "memcpy")
            assert tl.gpu_start[kernels[0]] >= 0.97 * tl.cpu_end[0]  # in the call's last few per cent


def test_hf_fusion_what_if_folds_elementwise_and_norm_kernels_only():
    step = analyse(HF / "hf_llama_eager_profilerstep.json.gz").steps[0]
    fused = whatifs(step, default_replay_cost())["fusion"]
    names = [f.name for f in fused.folded]
    assert names and all("elementwise" in n or "reduce" in n or "Cat" in n for n in names)
    # Every GEMM and attention kernel stays; the kernels that go are gone from the timeline.
    kept = fused.timeline.gpu_names
    assert sum("nvjet" in n for n in kept) == sum("nvjet" in n for n in step.kernel_names)
    assert fused.kernels == step.kernels - sum(f.count for f in fused.folded)
    assert fused.bytes_saved is not None and fused.bytes_saved > 0  # this trace recorded shapes
    # Fewer launches: less host time, so a launch-bound step gets faster.
    assert fused.metrics.step_us < step.metrics.step_us and fused.launches < step.launches


def test_hf_compiled_step_has_little_left_to_fuse_or_graph():
    step = analyse(HF / "hf_llama_compile.json.gz").steps[0]
    out = whatifs(step, default_replay_cost())
    assert "graphs" not in out  # it already replays a graph
    assert out["fusion"].kernels > 0.9 * step.kernels


def test_cpu_only_profile_is_refused_in_one_sentence():
    with pytest.raises(TraceError, match="CPU-only profile"):
        analyse(HF / "cpu_only_eager_sync.json.gz")


# -- issue 29, item 4: what fusion saves at batch 1 is intermediate activations, group by group ------------------
def test_fusion_saves_the_intermediates_its_groups_keep_on_chip_not_a_kv_cache():
    """The Hugging Face Llama-1B eager step at batch 1: every intermediate a fused group keeps on chip is an
    activation (at most the FFN's width in fp32 a row) read by a later member of its group, and the figure the
    page quotes is the groups' sum. It said 674.5 MB: 2 × the KV cache that repeat_kv's copies expand for the
    attention, which the attention reads whatever is fused, counted as if fusion saved it."""
    step = analyse(HF / "hf_llama_eager_profilerstep.json.gz").steps[0]
    fused = whatifs(step, default_replay_cost())["fusion"]
    activation = MEASURED["model"]["ffn"] * 4  # bytes: the widest activation of one row, in fp32
    assert fused.groups and fused.bytes_saved == sum(g.bytes_saved for g in fused.groups)
    assert all(b <= activation for g in fused.groups for *_, b in g.intermediates)
    layers = MEASURED["model"]["layers"]
    assert (
        0 < fused.bytes_saved <= 2 * layers * 16 * activation
    )  # 16 intermediates a layer at the most: a few MB
    assert (
        f"that is {fused.bytes_saved / 1e6:.2f} MB a step" in (ROOT / "docs" / "trace-reader.md").read_text()
    )


def test_a_fused_group_counts_what_a_later_member_reads():
    from sim.trace.whatif import fused_group

    kv = "[1, 8, 4, 2560, 64] bf16"
    repeat = fused_group(0, (f"aten::copy_ {kv}, {kv}, scalar", f"aten::copy_ {kv}, {kv}, scalar"))
    assert repeat.intermediates == ()  # two copies the attention reads: written either way
    norm = fused_group(
        0,
        (
            "aten::copy_ [1, 1, 2048] f32, [1, 1, 2048] bf16, scalar",  # the cast to fp32: read by pow and mul
            "aten::pow [1, 1, 2048] f32, scalar",
            "aten::mean [1, 1, 2048] f32, scalar, scalar, scalar",  # a reduction: its output shape is not recorded
            "aten::mul [1, 1, 2048] f32, [1, 1, 1] f32",
        ),
    )
    assert [(op, shape, size) for op, shape, _, size in norm.intermediates] == [
        ("aten::copy_", (1, 1, 2048), 8192),
        ("aten::pow", (1, 1, 2048), 8192),
    ]
    assert norm.bytes_saved == 2 * (8192 + 8192)
