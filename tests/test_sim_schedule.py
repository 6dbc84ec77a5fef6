"""The schedule of one step: invariants, the chapter's figures, buckets, and the vectorised sweep."""

import numpy as np
import pytest

from core.step_plan import CHAPTER_BUCKETS, FUSED_GRAPH, GRAPH, StepPlan, modes, toggled
from core.timeline import CPU_BOUND, GPU_BOUND
from sim.config import PRESETS, HardwareConfig, ModelConfig
from sim.step.kernels import step_kernels
from sim.step.schedule import simulate_step, sweep

COMBOS = ((False, False), (True, False), (False, True), (True, True))  # (fusion, graphs), as the page toggles

CHAPTER = PRESETS["chapter"]


def chapter_step(batch=1, fusion=False, graphs=False, **kw):
    return simulate_step(CHAPTER.model, CHAPTER.hardware, StepPlan(toggled(fusion, graphs), batch, **kw))


@pytest.mark.parametrize("key", sorted(PRESETS))
@pytest.mark.parametrize("n_layers", [1, 32, 128])
def test_invariants(key, n_layers):
    preset = PRESETS[key]
    model = preset.model.with_layers(n_layers)
    for batch in (1, 7, 64, 300, 512):
        for fusion, graphs in COMBOS:
            step = simulate_step(model, preset.hardware, StepPlan(toggled(fusion, graphs), batch))
            m, tl = step.metrics, step.timeline
            assert m.idle_us == pytest.approx(m.step_us - m.gpu_busy_us)
            assert 0 < m.utilisation <= 1
            assert m.step_us >= m.cpu_launch_us - 1e-9 and m.step_us >= m.gpu_busy_us - 1e-9
            assert m.kernels == (model.fused_per_layer if fusion else model.unfused_per_layer) * n_layers + 4
            assert np.all(tl.launched_by >= 0)
            assert np.all(tl.gpu_start[1:] >= tl.gpu_end[:-1])  # one stream: kernels never overlap
            if graphs and batch <= CHAPTER_BUCKETS[-1]:
                assert m.launches == 1 and not step.plan.eager_fallback
                # A node never starts before the replay call has submitted it (they go in turn).
                ready = preset.hardware.replay_cost.ready_us(m.kernels)
                assert np.all(tl.gpu_start >= ready - 1e-9) and tl.cpu_end[0] >= ready[-1] - 1e-9
            else:
                # A kernel never starts before the host call that submitted it has finished.
                assert m.launches == m.kernels
                assert np.all(tl.gpu_start >= tl.cpu_end[tl.launched_by] - 1e-9)
            assert step.speedup == pytest.approx(step.baseline.step_us / m.step_us)


def test_eager_schedule_matches_a_step_by_step_reference():
    model = ModelConfig("tiny", n_layers=2, hidden=256, n_heads=4, n_kv_heads=2, ffn=512, vocab=1000)
    hw = HardwareConfig(
        "toy",
        hbm_GBps=50.0,
        matrix_TFLOPs=10.0,
        min_kernel_us=1.0,
        eager_launch_us=3.0,
        graph_launch_us=5.0,
        graph_node_gap_us=0.5,
    )
    tl = simulate_step(model, hw, StepPlan(batch=4)).timeline
    dur = step_kernels(model, toggled(False, False)).us(hw, None, 4)
    assert len(set(np.round(dur, 6))) > 2  # a mix of long and short kernels, so both cases occur
    end = -np.inf
    for i, d in enumerate(dur):
        start = max((i + 1) * hw.eager_launch_us, end + hw.graph_node_gap_us)
        assert tl.gpu_start[i] == pytest.approx(start)
        assert tl.cpu_start[i] == pytest.approx(i * hw.eager_launch_us)
        end = start + d
    # Graph replay: one host call, then the nodes back to back with the node gap.
    g = simulate_step(model, hw, StepPlan(GRAPH, 4)).timeline
    assert g.cpu_dur.tolist() == [5.0]
    expected = 5.0 + np.concatenate(([0.0], np.cumsum(dur + 0.5)[:-1]))
    np.testing.assert_allclose(g.gpu_start, expected)


def test_chapter_batch1_is_launch_bound_at_half_utilisation():
    step = chapter_step()
    m = step.metrics
    layer_launches = sum(name.startswith("launch L") for name in step.timeline.cpu_names)
    assert layer_launches == 352
    assert layer_launches * 6.0 == pytest.approx(2112.0)  # the chapter's "2.1 ms"
    assert m.launches == 356 and 2050 <= m.cpu_launch_us <= 2200
    assert m.bound_by == CPU_BOUND
    assert 0.4 <= m.utilisation <= 0.6
    assert 900 <= m.gpu_busy_us <= 1200  # kernels of "a few microseconds" each
    assert 2 <= m.gpu_busy_us / m.kernels <= 4
    assert step.speedup == 1.0 and step.baseline == m


def test_fusion_then_graphs_move_the_bottleneck_to_the_gpu():
    off, fused, graphs, both = (chapter_step(fusion=f, graphs=g) for f, g in COMBOS)
    assert fused.metrics.cpu_launch_us < off.metrics.cpu_launch_us
    assert fused.metrics.step_us < off.metrics.step_us
    assert graphs.metrics.bound_by == GPU_BOUND and both.metrics.bound_by == GPU_BOUND
    assert both.metrics.launches == 1 and both.metrics.utilisation > 0.9
    assert both.speedup > 2.2 and both.speedup > fused.speedup > 1


def test_batch_128_closes_the_gaps_on_its_own():
    m = chapter_step(batch=128).metrics
    assert m.bound_by == GPU_BOUND and m.utilisation > 0.95


def test_bucket_padding():
    step = chapter_step(batch=17, graphs=True)
    assert (step.plan.bucket, step.plan.padded_rows, step.plan.eager_fallback) == (24, 7, False)
    at_bucket = chapter_step(batch=24, graphs=True)
    # The dummy rows cost their matmul rows, but read no KV cache: only the attention is shorter.
    attention = np.array([name.endswith(" attention") for name in step.timeline.gpu_names])
    np.testing.assert_allclose(step.timeline.gpu_dur[~attention], at_bucket.timeline.gpu_dur[~attention])
    assert np.all(step.timeline.gpu_dur[attention] < at_bucket.timeline.gpu_dur[attention])
    assert step.metrics.step_us < at_bucket.metrics.step_us
    assert step.metrics.gpu_busy_us > chapter_step(batch=17).metrics.gpu_busy_us  # padding costs GPU time
    exact = chapter_step(batch=24, graphs=True)
    assert exact.plan.padded_rows == 0


def test_eager_fallback_above_the_largest_bucket():
    step = chapter_step(batch=257, graphs=True)
    assert step.plan.eager_fallback and step.plan.bucket is None and step.plan.padded_rows == 0
    assert step.metrics.launches == 356
    assert step.metrics.step_us == pytest.approx(chapter_step(batch=257).metrics.step_us)
    custom = chapter_step(batch=3, graphs=True, buckets=(4,))
    assert custom.plan.bucket == 4 and custom.plan.padded_rows == 1
    none = chapter_step(batch=1, graphs=True, buckets=())
    assert none.plan.eager_fallback and none.metrics.launches == 356
    assert not chapter_step(batch=300).plan.eager_fallback  # graphs off is not a fallback


@pytest.mark.parametrize("key", sorted(PRESETS))
def test_sweep_matches_simulate_step(key):
    preset = PRESETS[key]
    rng = np.random.default_rng(7)
    batches = np.unique(np.concatenate(([1, 2, 24, 25, 256, 257, 512], rng.integers(1, 513, 12))))
    for n_layers in (1, 32):
        model = preset.model.with_layers(n_layers)
        sw = sweep(model, preset.hardware, batches)
        assert sw.batches.tolist() == batches.tolist()
        for combo in COMBOS:
            for i, b in enumerate(batches):
                m = simulate_step(model, preset.hardware, StepPlan(toggled(*combo), int(b))).metrics
                s = sw[toggled(*combo)]
                assert s.step_us[i] == pytest.approx(m.step_us, rel=1e-9)
                assert s.cpu_launch_us[i] == pytest.approx(m.cpu_launch_us, rel=1e-9)
                assert s.gpu_busy_us[i] == pytest.approx(m.gpu_busy_us, rel=1e-9)
                assert s.utilisation[i] == pytest.approx(m.utilisation, rel=1e-9)
                assert s.bound_by[i] == m.bound_by
                assert sw.series[toggled(*combo).name].step_us[i] == s.step_us[i]


@pytest.mark.parametrize("key", sorted(PRESETS))
def test_step_and_gpu_time_monotone_in_batch(key):
    preset = PRESETS[key]
    for n_layers in (1, 32, 128):
        sw = sweep(preset.model.with_layers(n_layers), preset.hardware, np.arange(1, 513))
        for combo in COMBOS:
            step = np.diff(sw[toggled(*combo)].step_us)
            if combo[1]:
                # Above the largest bucket the step runs eagerly: its launches overlap the GPU, where a
                # replay's whole host call comes before its first kernel, so the step may get shorter there.
                step = np.delete(step, CHAPTER_BUCKETS[-1] - 1)  # from batch 256 to 257
            assert np.all(step >= -1e-9), (n_layers, combo)
            assert np.all(np.diff(sw[toggled(*combo)].gpu_busy_us) >= -1e-9), (n_layers, combo)


def test_crossover():
    sw = sweep(CHAPTER.model, CHAPTER.hardware, np.arange(1, 513))
    x = sw.crossover
    assert 16 < x["eager"] < 128  # launch-bound at small batch, GPU-bound well before 128
    assert x["graph"] == 1 and x["fused+graph"] == 1
    b = x["eager"]
    assert sw["eager"].bound_by[b - 2] == CPU_BOUND and sw["eager"].bound_by[b - 1] == GPU_BOUND
    small = sweep(CHAPTER.model, CHAPTER.hardware, [1, 2, 4])
    assert small.crossover["eager"] is None
    assert tuple(sw.series) == tuple(m.name for m in modes(modelled=True))  # every modelled mode, in order


@pytest.mark.parametrize("batches", [[], [0, 1], [1.5], [[1, 2]], [10**6]])
def test_sweep_rejects_bad_batches(batches):
    with pytest.raises(ValueError, match="batches"):
        sweep(CHAPTER.model, CHAPTER.hardware, batches)


def test_padded_rows_cost_matmul_rows_not_kv_reads():
    # Llama-3-8B at batch 33 is padded to the 48 bucket: 15 dummy rows. Engines point them at a
    # scratch slot, so they read no KV cache; charged full-context reads, the optimised step lost
    # to the unoptimised one ("vs unoptimised 0.88×").
    from sim.config import PRESETS

    preset = PRESETS["llama3-8b-h100"]
    step = simulate_step(preset.model, preset.hardware, StepPlan(FUSED_GRAPH, 33))
    assert step.plan.bucket == 48 and step.plan.padded_rows == 15
    assert step.speedup > 1.0
    exact = simulate_step(preset.model, preset.hardware, StepPlan(FUSED_GRAPH, 48))
    assert step.metrics.step_us < exact.metrics.step_us  # the dummy rows skip the KV reads
    sw = sweep(preset.model, preset.hardware, [33])
    assert sw[FUSED_GRAPH].step_us[0] == pytest.approx(step.metrics.step_us, rel=1e-9)


def test_the_schedule_is_the_one_timing_models():
    # simulate_step draws its lanes with sim.timing's eager and replay timelines, and the sweep asks
    # sim.timing for each step's end: no recurrence of its own.
    import inspect

    import sim.step.schedule
    from sim.timing import eager_timeline, graph_replay_timeline

    source = inspect.getsource(sim.step.schedule)
    assert "cumsum" not in source and "accumulate" not in source
    hw, model = CHAPTER.hardware, CHAPTER.model
    names = step_kernels(model, toggled(False, False)).names
    eager = chapter_step(batch=8)
    same = eager_timeline(eager.timeline.gpu_dur, names, hw.eager_launch_us, hw.graph_node_gap_us)
    np.testing.assert_array_equal(eager.timeline.gpu_start, same.gpu_start)
    graph = chapter_step(batch=8, graphs=True)
    same = graph_replay_timeline(graph.timeline.gpu_dur, names, hw.replay_cost)
    np.testing.assert_array_equal(graph.timeline.gpu_start, same.gpu_start)
    assert graph.timeline.cpu_dur.tolist() == [hw.replay_cost.host_us(len(names))]
