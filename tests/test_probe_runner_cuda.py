"""On a GPU: captured graphs == eager per bucket, the KV canary, padding assertion, graph traces."""

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.cuda

BUCKETS = (1, 2, 4, 8)


@pytest.fixture(scope="module", params=[False, True], ids=["unfused", "fused"])
def setup(request):
    from gpu_probe.config import get_config
    from gpu_probe.decode_batch import make_batch
    from gpu_probe.graph_runner import GraphRunner
    from gpu_probe.model import ProbeModel

    cfg = get_config("tiny")
    model = ProbeModel(cfg, device="cuda", fused=request.param)
    model.kv_cache.fill_random_(seed=3)
    batch = make_batch(model, 8, seed=4)
    runner = GraphRunner(model, buckets=BUCKETS)
    return model, batch, runner


def test_one_graph_per_bucket_with_measured_stats(setup):
    model, batch, runner = setup
    assert sorted(runner.graphs) == list(BUCKETS)
    assert [c.bucket for c in runner.captures] == list(BUCKETS)
    assert all(c.capture_ms > 0 and c.graph_mem_bytes >= 0 and c.pool_bytes >= 0 for c in runner.captures)
    assert runner.pool is not None


def test_logits_live_outside_the_pool_so_smaller_captures_reuse_it(setup):
    model, _, runner = setup
    base = runner.static_logits.data_ptr()
    assert all(runner.outputs[b].data_ptr() == base for b in BUCKETS)  # every graph writes the static buffer
    assert runner.static_buffer_bytes >= BUCKETS[-1] * model.cfg.vocab * runner.static_logits.element_size()
    # Captured largest first: once no graph keeps an output alive in the pool, the smaller ones add nothing.
    assert [c.pool_bytes for c in runner.captures if c.bucket != BUCKETS[-1]] == [0] * (len(BUCKETS) - 1)


def test_graph_equals_eager_per_bucket_and_canary_quiet(setup):
    from gpu_probe.measure import check_graph_vs_eager

    model, batch, runner = setup
    checks = check_graph_vs_eager(runner, model, batch)
    assert checks["graph_vs_eager"]["passed"], checks["graph_vs_eager"]["buckets"]
    assert checks["kv_canary"]["passed"]
    assert all(b["bit_exact_vs_padded_eager"] for b in checks["graph_vs_eager"]["buckets"])


def test_padding_assertion_with_graphs(setup):
    from gpu_probe.padding import check_padding_assertion

    model, batch, runner = setup
    pad = check_padding_assertion(runner, batch)["padding_assertion"]
    assert pad["passed"], pad["detail"]
    assert pad["canary_fired"] == [3, 7]


def test_replay_returns_real_rows_only(setup):
    model, batch, runner = setup
    out = runner.run(batch.head(5))
    assert out.shape == (5, model.cfg.vocab) and runner.last_bucket == 8
    assert torch.isfinite(out).all()


def test_profiled_graph_step_has_one_launch_and_all_kernels(setup):
    from gpu_probe.measure import profile_step

    model, batch, runner = setup
    rows = batch.head(3)
    eager = profile_step(lambda: runner.eager(runner.views(4)), label="eager")
    graph = profile_step(lambda: runner.run(rows), label="graph")
    assert graph.graph_launches == 1 and graph.timeline.metrics().launches == 1
    # The replayed kernels are in the trace: as many as an eager step at the same bucket, plus input copies.
    assert graph.kernels_per_step >= eager.kernels_per_step
    assert graph.kernels_per_step - eager.kernels_per_step <= 5
    assert eager.timeline.metrics().launches == eager.kernels_per_step
