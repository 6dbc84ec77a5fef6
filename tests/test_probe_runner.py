"""Graph runner bookkeeping on the CPU (tiny model, use_graphs=False): buckets, padding, the bug."""

import inspect

import pytest
import torch

from core.step_plan import CHAPTER_BUCKETS as DEFAULT_BUCKETS
from core.step_plan import bucket_for, check_buckets
from gpu_probe.config import get_config
from gpu_probe.decode_batch import make_batch
from gpu_probe.graph_runner import GraphRunner, PaddingCorruption
from gpu_probe.kv_cache import SCRATCH_BLOCK
from gpu_probe.model import ProbeModel

MAX_ROWS = 256


@pytest.fixture(scope="module")
def setup():
    # Tiny ops on a shared 2-core box: more threads only spin against each other (30x slower here).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    cfg = get_config("tiny")
    blocks_per_seq = -(-cfg.prefill_len // cfg.block_size)
    model = ProbeModel(cfg, num_blocks=1 + MAX_ROWS * blocks_per_seq)
    model.kv_cache.fill_random_(seed=1)
    batch = make_batch(model, MAX_ROWS, seed=2)
    yield model, batch
    torch.set_num_threads(threads)


def test_bucket_choice_matches_the_chapter():
    assert DEFAULT_BUCKETS == (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
    assert inspect.signature(GraphRunner).parameters["buckets"].default == DEFAULT_BUCKETS
    assert [bucket_for(n, DEFAULT_BUCKETS) for n in (1, 2, 3, 5, 17, 25, 33, 49, 65, 97, 129, 193, 256)] == [
        1,
        2,
        4,
        8,
        24,
        32,
        48,
        64,
        96,
        128,
        192,
        256,
        256,
    ]
    assert bucket_for(257, DEFAULT_BUCKETS) is None
    assert check_buckets([8, 1, 4, 4], allow_empty=False) == (1, 4, 8)
    for bad in ([], [0, 2], [1.5], ["x"], [-4]):
        with pytest.raises(ValueError, match="buckets"):
            check_buckets(bad, allow_empty=False)


def test_padding_points_at_scratch_and_outputs_match_eager(setup):
    model, batch = setup
    runner = GraphRunner(model, buckets=(1, 4, 8), use_graphs=False)
    small = batch.head(3)
    out = runner.run(small, check=True)
    assert out.shape == (3, model.cfg.vocab) and runner.last_bucket == 4
    padded = runner.views(4)
    assert padded.block_tables[3].eq(SCRATCH_BLOCK).all()
    assert int(padded.slot_mapping[3]) // model.cfg.block_size == SCRATCH_BLOCK
    assert int(padded.context_lens[3]) == 1
    assert torch.equal(padded.slot_mapping[:3], small.slot_mapping)
    ref = model(small)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_stale_rows_of_a_larger_batch_are_reset(setup):
    model, batch = setup
    runner = GraphRunner(model, buckets=(8,), use_graphs=False)
    runner.run(batch.head(8))
    runner.run(batch.head(2), check="before")  # rows 2..7 held real sequences a step ago
    assert runner.views(8).block_tables[2:].eq(SCRATCH_BLOCK).all()


def test_above_largest_bucket_runs_eager(setup):
    model, batch = setup
    runner = GraphRunner(model, buckets=(1, 2), use_graphs=False)
    out = runner.run(batch.head(5))
    assert out.shape[0] == 5 and runner.last_eager_fallback and runner.last_bucket is None
    assert out.data_ptr() != runner.static_logits.data_ptr()  # not squeezed into the 2-row buffer
    torch.testing.assert_close(out, model(batch.head(5)), rtol=1e-5, atol=1e-5)


def test_logits_land_in_one_static_buffer_sized_for_the_largest_bucket(setup):
    model, batch = setup
    runner = GraphRunner(model, buckets=(1, 4, 8), use_graphs=False)
    assert runner.static_logits.shape == (8, model.cfg.vocab) and runner.static_logits.dtype == model.dtype
    assert runner.static_logits_bytes == 8 * model.cfg.vocab * 4
    assert runner.static_buffer_bytes == runner.static_input_bytes + runner.static_logits_bytes
    out = runner.run(batch.head(3))
    assert out.shape == (3, model.cfg.vocab) and out.data_ptr() == runner.static_logits.data_ptr()
    torch.testing.assert_close(out, model(batch.head(3)), rtol=1e-5, atol=1e-5)
    first = out.clone()
    again = runner.run(batch.head(1))  # the next run overwrites the buffer: callers clone what they keep
    assert again.data_ptr() == out.data_ptr() and torch.equal(out[:1], again)
    torch.testing.assert_close(out[:1], first[:1], rtol=1e-5, atol=1e-5)  # same sequence, same token


def test_fused_runner_keeps_its_widest_activations_in_a_static_workspace():
    from gpu_probe.measure import check_graph_vs_eager

    model = ProbeModel(get_config("tiny"), num_blocks=1 + 4 * 3, fused=True)
    model.kv_cache.fill_random_(seed=5)
    batch = make_batch(model, 4, seed=6)
    runner = GraphRunner(model, buckets=(1, 4), use_graphs=False)
    cfg = model.cfg
    assert {k: tuple(v.shape) for k, v in runner.workspace.items()} == {
        "qkv": (4, cfg.q_size + 2 * cfg.kv_size),
        "act": (4, cfg.ffn),
    }
    assert (
        runner.static_buffer_bytes
        == runner.static_input_bytes + runner.static_logits_bytes + runner.workspace_bytes
    )
    out = runner.run(batch.head(3), check=True)
    torch.testing.assert_close(out, model(batch.head(3)), rtol=1e-5, atol=1e-5)
    checks = check_graph_vs_eager(runner, model, batch)  # bit-exact with the workspace-free eager step
    assert checks["graph_vs_eager"]["passed"] and checks["kv_canary"]["passed"]
    assert (
        GraphRunner(ProbeModel(get_config("tiny"), num_blocks=4), buckets=(2,), use_graphs=False).workspace
        == {}
    )


def test_bug_fires_exactly_where_padding_is_needed(setup):
    model, batch = setup
    runner = GraphRunner(model, buckets=DEFAULT_BUCKETS, use_graphs=False, pad_rows_to="real")
    fired = set()
    for n in range(1, MAX_ROWS + 1):
        try:
            runner.run(batch.head(n), check="before")
        except PaddingCorruption as err:
            assert (
                err.kind == "block_table" and err.batch == n and err.bucket == bucket_for(n, DEFAULT_BUCKETS)
            )
            fired.add(n)
    assert fired == set(range(1, MAX_ROWS + 1)) - set(DEFAULT_BUCKETS)


def test_canary_catches_the_write_and_the_output_changes(setup):
    model, batch = setup
    cache = model.kv_cache
    saved = cache.kv.clone()
    try:
        runner = GraphRunner(model, buckets=(4,), use_graphs=False, pad_rows_to="real")
        small = batch.head(3)
        with pytest.raises(PaddingCorruption) as err:
            runner.run(small, check="after")
        assert err.value.kind == "canary"
        victim_slot = int(small.block_tables[0, 0]) * model.cfg.block_size
        assert victim_slot in err.value.slots
        # What a user would see: sequence 0 now attends over a garbage first token.
        corrupted = model(small).clone()
        cache.kv.copy_(saved)
        clean = model(small)
        assert not torch.allclose(corrupted[0], clean[0])
        torch.testing.assert_close(corrupted[1:], clean[1:])  # the others are untouched
    finally:
        cache.kv.copy_(saved)


def test_safe_padding_never_fires(setup):
    model, batch = setup
    saved = model.kv_cache.kv.clone()
    runner = GraphRunner(model, buckets=DEFAULT_BUCKETS, use_graphs=False)
    for n in list(range(1, 70)) + [95, 96, 97, 127, 129, 191, 193, 255, 256]:
        runner.run(batch.head(n), check=True)
    # Only the slots the real rows were meant to write may change (re-written with the same token).
    written = torch.zeros(model.kv_cache.kv[0, 0].flatten(0, 1).shape[0], dtype=torch.bool)
    written[batch.slot_mapping] = True
    written[: model.cfg.block_size] = True  # the scratch block
    flat_now = model.kv_cache.kv.flatten(2, 3)
    flat_then = saved.flatten(2, 3)
    assert torch.equal(flat_now[:, :, ~written], flat_then[:, :, ~written])


def test_safe_padding_check_before_every_size(setup):
    model, batch = setup
    runner = GraphRunner(model, buckets=DEFAULT_BUCKETS, use_graphs=False)
    for n in range(1, MAX_ROWS + 1):
        bucket = bucket_for(n, DEFAULT_BUCKETS)
        runner.load(batch.head(n), bucket)
        runner.check_padding(n, bucket)


def test_invalid_arguments(setup):
    model, _ = setup
    with pytest.raises(ValueError, match="pad_rows_to"):
        GraphRunner(model, use_graphs=False, pad_rows_to="zeros")
    with pytest.raises(ValueError, match="CUDA"):
        GraphRunner(model, use_graphs=True)
    with pytest.raises(ValueError, match="check"):
        GraphRunner(model, buckets=(1,), use_graphs=False).run(setup[1].head(1), check="sometimes")


def test_run_checks_pass_on_cpu_and_catch_the_bug(setup):
    from gpu_probe.measure import check_graph_vs_eager
    from gpu_probe.padding import check_padding_assertion

    model, batch = setup
    runner = GraphRunner(model, buckets=(1, 2, 4, 8, 16, 24), use_graphs=False)
    checks = check_graph_vs_eager(runner, model, batch)
    assert checks["graph_vs_eager"]["passed"] and checks["kv_canary"]["passed"]
    assert [b["batch"] for b in checks["graph_vs_eager"]["buckets"]] == [1, 2, 3, 5, 9, 17]
    saved = model.kv_cache.kv.clone()
    pad = check_padding_assertion(runner, batch)["padding_assertion"]
    assert pad["passed"], pad["detail"]
    assert pad["sizes_needing_padding"] == 24 - 6 and pad["fired_with_bug"] == 18
    assert pad["fired_with_fix"] == 0 and pad["canary_fired"] == [3, 7, 15, 23]
    # The bug's damage was undone: only the real rows' own slots and the scratch block differ.
    written = torch.zeros(model.kv_cache.kv[0, 0].flatten(0, 1).shape[0], dtype=torch.bool)
    written[batch.slot_mapping] = True
    written[: model.cfg.block_size] = True
    assert torch.equal(model.kv_cache.kv.flatten(2, 3)[:, :, ~written], saved.flatten(2, 3)[:, :, ~written])
    assert runner.pad_rows_to == "scratch"


def test_compile_peer_twin_has_one_cache_buffer_per_layer(setup):
    from gpu_probe.compile_peer import PerLayerKVCache, with_per_layer_cache

    model, batch = setup
    twin = with_per_layer_cache(model)
    assert isinstance(twin.kv_cache, PerLayerKVCache) and model.kv_cache is not twin.kv_cache
    assert twin.lm_head is model.lm_head and twin.layers is model.layers  # weights shared, not copied
    names = dict(twin.kv_cache.named_buffers())
    assert sorted(names) == sorted(f"{kv}{i}" for kv in "kv" for i in range(model.cfg.n_layers))
    for i in range(model.cfg.n_layers):
        k, v = twin.kv_cache.layer(i)
        assert k.data_ptr() != model.kv_cache.layer(i)[0].data_ptr()
        assert torch.equal(k, model.kv_cache.layer(i)[0]) and torch.equal(v, model.kv_cache.layer(i)[1])
    rows = batch.head(3)
    torch.testing.assert_close(twin.unfused_forward(rows), model.unfused_forward(rows))
