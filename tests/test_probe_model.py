"""The probe decoder on CPU (tiny preset, fp32): config, paged-cache bookkeeping, decode semantics,
scratch-block safety, and fused (Triton interpreter) == unfused on the same weights."""

import math

import pytest
import torch
import torch.nn.functional as F
from padded_batch import pad_batch

from gpu_probe.compile_peer import COMPILE_OPS
from gpu_probe.config import PRESETS, ProbeModelConfig, get_config
from gpu_probe.decode_batch import DecodeBatch
from gpu_probe.kernels import launch
from gpu_probe.kv_cache import PAD_SLOT, SCRATCH_BLOCK, PagedKVCache
from gpu_probe.model import (
    FUSED_KERNELS_PER_LAYER,
    UNFUSED_OPS,
    ProbeModel,
    fusion_report,
    rms_norm,
    rotate_half,
)


@pytest.fixture(autouse=True)
def _verify_launch_plans(monkeypatch):
    """Every kernel call rebuilds its launch plan and checks it against the one kept for its key."""
    monkeypatch.setattr(launch, "VERIFY", True)


@pytest.fixture(scope="module")
def shared_model():
    return ProbeModel("tiny")


@pytest.fixture
def model(shared_model):
    """One tiny model for the module, its unfused ops back to the CPU default after each test."""
    yield shared_model
    shared_model.ops = "torch"


# ---- config --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field, value",
    [
        ("n_layers", 0),
        ("hidden", -4),
        ("n_kv_heads", 3),
        ("dtype", "int8"),
        ("prefill_len", 64),
        ("block_size", 2.5),
        ("vocab", True),
    ],
)
def test_config_rejects_bad_field_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        get_config("tiny", **{field: value})


def test_config_rejects_non_power_of_two_head_dim():
    with pytest.raises(ValueError, match="head_dim"):
        ProbeModelConfig(name="x", n_layers=1, hidden=48, n_heads=2, n_kv_heads=1, ffn=8, vocab=8)


def test_presets_have_the_issue_shapes():
    small = PRESETS["small"]
    assert (small.n_layers, small.hidden, small.n_heads, small.ffn, small.vocab, small.dtype) == (
        32,
        1024,
        16,
        2816,
        32000,
        "bfloat16",
    )
    assert 0.47e9 < small.n_params < 0.49e9
    assert small.max_blocks_per_seq == 40 and small.num_blocks == 1 + 256 * 40
    with pytest.raises(ValueError, match="preset"):
        get_config("huge")


def test_1b_preset_is_llama_3_2_1b_shaped():
    cfg = PRESETS["1b"]
    assert (
        cfg.n_layers,
        cfg.hidden,
        cfg.n_heads,
        cfg.n_kv_heads,
        cfg.head_dim,
        cfg.ffn,
        cfg.vocab,
        cfg.dtype,
    ) == (16, 2048, 32, 8, 64, 8192, 128256, "bfloat16")
    assert cfg.tie_embeddings and 1.23e9 < cfg.n_params < 1.24e9
    assert cfg.weight_bytes == cfg.n_params * 2  # the tied table is read whole, as the LM head


def test_config_is_the_shared_decoder_shape():
    from dataclasses import replace

    from core.decoder import DecoderShape

    cfg = PRESETS["small"]
    assert isinstance(cfg, DecoderShape) and (cfg.q_size, cfg.kv_size) == (cfg.q_dim, cfg.kv_dim)
    assert cfg.to_dict()["tie_embeddings"] is False and set(cfg.to_dict()) >= {"dtype", "seed", "n_kv_heads"}
    with pytest.raises(ValueError, match="ProbeModelConfig.n_heads: must divide hidden"):
        replace(cfg, n_heads=3)
    assert not hasattr(cfg, "kv_cache_bytes")  # the pool's size is PagedKVCache's to say


def test_tiny_model_counts_its_parameters(model):
    assert model.n_params == model.cfg.n_params
    assert model.weight_bytes == (model.cfg.n_params - 256 * 64) * 4


def tied_gqa_model(num_blocks: int = 12) -> ProbeModel:
    """Tiny, with the 1b preset's traits: 4 query heads per KV head and the LM head tied to the embedding."""
    return ProbeModel(get_config("tiny", n_heads=8, n_kv_heads=2, tie_embeddings=True), num_blocks=num_blocks)


def test_tied_model_shares_one_table_and_counts_it_once():
    model = tied_gqa_model()
    assert model.lm_head is model.tok_embeddings
    untied = get_config("tiny", n_heads=8, n_kv_heads=2)
    assert model.n_params == model.cfg.n_params == untied.n_params - 256 * 64
    assert model.weight_bytes == model.cfg.weight_bytes == model.n_params * 4


# ---- paged KV bookkeeping ------------------------------------------------------------------------
def test_allocator_never_hands_out_the_scratch_block_and_reuses_freed_blocks():
    cache = PagedKVCache(get_config("tiny"), num_blocks=6)
    a = cache.add_sequence(5)  # 2 blocks of 4
    b = cache.add_sequence(8)  # 2 blocks
    assert SCRATCH_BLOCK not in cache.block_table(a) + cache.block_table(b)
    assert sorted(cache.block_table(a) + cache.block_table(b)) == [1, 2, 3, 4]
    slot = cache.append_slot(a)  # token 5 -> second block, offset 1
    assert slot == cache.block_table(a)[1] * 4 + 1 and cache.length(a) == 6
    cache.append_slot(b)  # token 8 needs a third block: the last free one
    assert len(cache.block_table(b)) == 3
    with pytest.raises(RuntimeError, match="exhausted"):  # no block left
        cache.add_sequence(1)
    freed = cache.block_table(a)
    cache.free(a)
    c = cache.add_sequence(8)
    assert sorted(cache.block_table(c)) == sorted(freed)


def test_decode_inputs_point_at_the_new_token():
    cache = PagedKVCache(get_config("tiny"))
    ids = [cache.add_sequence(n) for n in (0, 7, 4)]
    inputs = cache.decode_inputs(ids)
    assert inputs["positions"].tolist() == [0, 7, 4]
    assert inputs["context_lens"].tolist() == [1, 8, 5]
    assert inputs["block_tables"].shape == (3, cache.max_blocks_per_seq)
    for row, seq in enumerate(ids):
        table = inputs["block_tables"][row].tolist()
        pos = inputs["positions"][row].item()
        assert inputs["slot_mapping"][row].item() == table[pos // 4] * 4 + pos % 4
        assert table[len(cache.block_table(seq)) :] == [SCRATCH_BLOCK] * (
            len(table) - len(cache.block_table(seq))
        )
    again = cache.decode_inputs(ids, advance=False)
    assert torch.equal(again["slot_mapping"], inputs["slot_mapping"])


# ---- semantics -----------------------------------------------------------------------------------
def naive_full_sequence_logits(model, tokens):
    """Textbook causal decoder over the whole sequence (no cache): logits at every position."""
    cfg = model.cfg
    n = len(tokens)
    h = F.embedding(torch.tensor(tokens), model.tok_embeddings)
    pos = torch.arange(n)
    cos = torch.cat([model.rope_cos, model.rope_cos], -1)[pos][:, None]
    sin = torch.cat([model.rope_sin, model.rope_sin], -1)[pos][:, None]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for layer in model.layers:
        x = rms_norm(h, layer.attn_norm, cfg.norm_eps)
        q = (x @ layer.wq.t()).view(n, cfg.n_heads, cfg.head_dim)
        k = (x @ layer.wk.t()).view(n, cfg.n_kv_heads, cfg.head_dim)
        v = (x @ layer.wv.t()).view(n, cfg.n_kv_heads, cfg.head_dim)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        group = cfg.n_heads // cfg.n_kv_heads
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(cfg.head_dim)
        probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        h = h + torch.einsum("hqk,khd->qhd", probs, v).reshape(n, -1) @ layer.wo.t()
        x = rms_norm(h, layer.ffn_norm, cfg.norm_eps)
        h = h + (F.silu(x @ layer.w_gate.t()) * (x @ layer.w_up.t())) @ layer.w_down.t()
    return rms_norm(h, model.final_norm, cfg.norm_eps) @ model.lm_head.t()


# The three ways one model runs a step: the unfused layer as plain PyTorch (CPUs without Triton) and as
# one Triton kernel per op (what a GPU runs, here through Triton's interpreter), and the fused kernels.
PATHS = ["torch", "kernels", "fused"]


def forward_of(model, path: str):
    if path == "fused":
        return model.fused_forward
    model.ops = path
    return model.unfused_forward


@pytest.mark.parametrize("path", PATHS)
def test_token_by_token_decode_equals_full_sequence_attention(path):
    model = ProbeModel("tiny", num_blocks=12)
    model.kv_cache.fill_random_(3)  # garbage everywhere: the decode must only read what it wrote
    tokens = [5, 17, 200, 3, 99]  # 5 tokens over 2 blocks of 4 (a block boundary is crossed)
    seq = model.kv_cache.add_sequence(0)
    expected = naive_full_sequence_logits(model, tokens)
    forward = forward_of(model, path)
    for step, token in enumerate(tokens):
        inputs = model.kv_cache.decode_inputs([seq])
        logits = forward(DecodeBatch(torch.tensor([token]), **inputs))
        torch.testing.assert_close(logits[0], expected[step], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("path", PATHS)
def test_tied_gqa_decode_equals_full_sequence_attention(path):
    model = tied_gqa_model()
    model.kv_cache.fill_random_(7)
    tokens = [11, 2, 250, 40, 8]
    seq = model.kv_cache.add_sequence(0)
    expected = naive_full_sequence_logits(model, tokens)
    forward = forward_of(model, path)
    for step, token in enumerate(tokens):
        logits = forward(DecodeBatch(torch.tensor([token]), **model.kv_cache.decode_inputs([seq])))
        torch.testing.assert_close(logits[0], expected[step], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ops", ["torch", "kernels"])
def test_tied_gqa_fused_equals_unfused_on_a_ragged_batch(ops):
    model = tied_gqa_model(num_blocks=16)
    model.ops = ops
    cache = model.kv_cache.fill_random_(8)
    inputs = cache.decode_inputs([cache.add_sequence(n) for n in (0, 5, 14)])
    ids = torch.tensor([1, 100, 255])
    before = cache.kv.clone()
    unfused = model.unfused_forward(DecodeBatch(ids, **inputs))
    after_unfused = cache.kv.clone()
    cache.kv.copy_(before)
    torch.testing.assert_close(model.fused_forward(DecodeBatch(ids, **inputs)), unfused, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(cache.kv, after_unfused, rtol=1e-5, atol=1e-5)


def _real_blocks_except(cache, kv_before, written_slots):
    """Whether every slot outside the scratch block, except written_slots, is unchanged."""
    flat_before = kv_before.view(kv_before.shape[0], 2, -1, *kv_before.shape[-2:])
    flat_after = cache.kv.view_as(flat_before)
    changed = (flat_before != flat_after).flatten(3).any(-1).any(0).any(0)  # per slot
    changed[SCRATCH_BLOCK * cache.block_size : (SCRATCH_BLOCK + 1) * cache.block_size] = False
    return set(torch.nonzero(changed).flatten().tolist()) <= set(written_slots)


@pytest.mark.parametrize("path", PATHS)
def test_padded_rows_write_only_the_scratch_block(path):
    model = ProbeModel("tiny")
    cache = model.kv_cache.fill_random_(4)
    seqs = [cache.add_sequence(n) for n in (6, 9)]
    real = cache.decode_inputs(seqs)
    padded = pad_batch(DecodeBatch(torch.tensor([1, 2]), **real), 5, cache.block_size)
    padded.slot_mapping[-1] = PAD_SLOT  # vLLM's convention is harmless too
    before = cache.kv.clone()
    forward = forward_of(model, path)
    logits = forward(padded)
    assert _real_blocks_except(cache, before, real["slot_mapping"].tolist())
    # The real rows' results are those of the unpadded batch.
    cache.kv.copy_(before)
    alone = forward(DecodeBatch(torch.tensor([1, 2]), **real))
    torch.testing.assert_close(logits[:2], alone, rtol=1e-5, atol=1e-5)


def test_a_padded_row_aimed_at_a_real_block_corrupts_it(model):
    """The chapter's bug, seen from the model: a padded row's write lands in a real sequence."""
    model.kv_cache.fill_random_(5)
    seq = model.kv_cache.add_sequence(6)
    real = model.kv_cache.decode_inputs([seq])
    victim_slot = model.kv_cache.slot_of(seq, 2)
    bad = pad_batch(DecodeBatch(torch.tensor([7]), **real), 2, 4)
    bad.slot_mapping[1] = victim_slot
    before = model.kv_cache.kv.clone()
    model.unfused_forward(bad)
    assert not _real_blocks_except(model.kv_cache, before, real["slot_mapping"].tolist())
    model.kv_cache.free(seq)


@pytest.mark.parametrize("ops", ["torch", "kernels"])
def test_fused_equals_unfused_on_a_ragged_batch(model, ops):
    model.ops = ops
    cache = model.kv_cache.fill_random_(6)
    seqs = [cache.add_sequence(n) for n in (0, 3, 13, 8)]
    ids = torch.tensor([9, 8, 7, 6])
    inputs = cache.decode_inputs(seqs)
    before = cache.kv.clone()
    unfused = model.unfused_forward(DecodeBatch(ids, **inputs))
    after_unfused = cache.kv.clone()
    cache.kv.copy_(before)
    fused = model.fused_forward(DecodeBatch(ids, **inputs))
    torch.testing.assert_close(fused, unfused, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(cache.kv, after_unfused, rtol=1e-5, atol=1e-5)
    for seq in seqs:
        cache.free(seq)


def test_model_forward_follows_the_fused_flag():
    model = ProbeModel("tiny", num_blocks=8)
    seq = model.kv_cache.add_sequence(2)
    inputs = model.kv_cache.decode_inputs([seq], advance=True)
    a = model(DecodeBatch(torch.tensor([1]), **inputs))
    model.fused = True
    b = model(DecodeBatch(torch.tensor([1]), **inputs))
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert model.attention_splits(1) > 1  # batch 1 on "2 SMs" uses the split path (+1 merge kernel)
    assert model.kernels_per_layer(1) == FUSED_KERNELS_PER_LAYER + 1
    assert model.kernels_per_layer(8) == FUSED_KERNELS_PER_LAYER
    assert model.kernels_per_layer(8, fused=False) == len(UNFUSED_OPS) == 15


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
def test_logits_out_receives_the_lm_head_output(fused):
    model = ProbeModel("tiny", num_blocks=8, fused=fused)
    model.kv_cache.fill_random_(seed=4)
    seqs = [model.kv_cache.add_sequence(n) for n in (2, 5)]
    inputs = model.kv_cache.decode_inputs(seqs, advance=False)
    ids = torch.tensor([3, 11])
    before = model.kv_cache.kv.clone()
    fresh = model(DecodeBatch(ids, **inputs))
    model.kv_cache.kv.copy_(before)
    static = torch.full((4, model.cfg.vocab), float("nan"))
    workspace = {name: buf.fill_(float("nan")) for name, buf in model.fused_workspace(4).items()}
    out = model(DecodeBatch(ids, **inputs), logits_out=static[:2], workspace=workspace)
    assert out.data_ptr() == static.data_ptr() and torch.equal(out, fresh)  # same ops, same bits
    assert torch.isnan(static[2:]).all()
    for name, buf in workspace.items():  # the fused path's activations went there; the unfused one ignores it
        assert bool(torch.isnan(buf[:2]).any()) != fused, name
        assert torch.isnan(buf[2:]).all(), name


def test_fusion_report_counts_what_each_kernel_merged():
    rows = fusion_report()
    assert len(rows) == FUSED_KERNELS_PER_LAYER == 5
    by_kernel = {row["kernel"]: row for row in rows}
    assert by_kernel["paged_attention"]["merges"] == "rope + kv_write + attention"
    assert by_kernel["rmsnorm_gate_up_swiglu"]["ops_merged"] == 4
    assert by_kernel["o_proj_residual"]["merges"] == "o_proj + residual_add"
    assert all(row["intermediates_removed"] >= 1 for row in rows)
    # Every kernel of the unfused layer is merged into exactly one fused kernel: 15 -> 5.
    assert sum(row["ops_merged"] for row in rows) == len(UNFUSED_OPS)


def test_unfused_forward_traces_without_graph_breaks(model):
    """torch.compile(fullgraph=True) needs one graph: no .item(), no data-dependent Python branches."""
    import torch._dynamo

    seq = model.kv_cache.add_sequence(3)
    inputs = model.kv_cache.decode_inputs([seq])
    explanation = torch._dynamo.explain(model.unfused_forward)(
        DecodeBatch(torch.tensor([4]), **inputs), ops=COMPILE_OPS
    )
    model.kv_cache.free(seq)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1


@pytest.mark.parametrize("tied", [False, True])
def test_wide_fused_step_equals_unfused(monkeypatch, tied):
    """Above TILE_MAX_ROWS the fused step runs cuBLAS's GEMMs with the norm folded into the attention and the
    SwiGLU kernel, the residual added by the GEMM: the same function, on a GQA model tied or not."""
    from gpu_probe.kernels import linear

    monkeypatch.setattr(linear, "TILE_MAX_ROWS", 1)
    model = tied_gqa_model(num_blocks=16) if tied else ProbeModel("tiny", num_blocks=16)
    cache = model.kv_cache.fill_random_(9)
    inputs = cache.decode_inputs([cache.add_sequence(n) for n in (0, 5, 14)])
    ids = torch.tensor([1, 100, 255])
    before = cache.kv.clone()
    unfused = model.unfused_forward(DecodeBatch(ids, **inputs))
    after_unfused = cache.kv.clone()
    cache.kv.copy_(before)
    torch.testing.assert_close(model.fused_forward(DecodeBatch(ids, **inputs)), unfused, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(cache.kv, after_unfused, rtol=1e-5, atol=1e-5)
