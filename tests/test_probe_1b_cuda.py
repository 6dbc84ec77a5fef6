"""On a GPU: the 1b preset (Llama-3.2-1B's shape) captured at every default bucket replays bit-exact.

The tensor-core kernel's pipelining once gave graph != eager at buckets 96-256 for this preset only
(gpu_probe/kernels/NOTES.md); the recorded run checks it, and so does this test, on every CUDA run.
"""

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.cuda


def test_1b_fused_graphs_equal_eager_at_every_default_bucket():
    from core.step_plan import CHAPTER_BUCKETS
    from gpu_probe.config import get_config
    from gpu_probe.decode_batch import make_batch
    from gpu_probe.graph_runner import GraphRunner
    from gpu_probe.measure import check_graph_vs_eager
    from gpu_probe.model import ProbeModel

    model = ProbeModel(get_config("1b"), device="cuda", fused=True)
    model.kv_cache.fill_random_(seed=5)
    batch = make_batch(model, CHAPTER_BUCKETS[-1], seed=6)
    runner = GraphRunner(model, buckets=CHAPTER_BUCKETS)
    checks = check_graph_vs_eager(runner, model, batch)
    failed = [b for b in checks["graph_vs_eager"]["buckets"] if not b["passed"]]
    assert not failed, failed
    assert checks["kv_canary"]["passed"]
