"""The persistent decode-step kernel (gpu_probe/kernels/persistent*.py) against the fused path.

CPU: Triton's interpreter runs programs one after another, so the kernel runs as ONE program (its
barriers then pass at once) on the tiny preset and a tiny GQA shape with a tied LM head; a grid of two
programs must hit the spin limit, set the error flag and return rather than hang. CUDA (marked): the small
and 1b presets on the GPU -- logits per batch 1..8, graph replay == eager per bucket with the KV canary,
25 calls per shape bit-identical, 1,000 steps without an error, an oversized grid refused.
"""

import functools

import pytest
import torch
from padded_batch import pad_batch

from gpu_probe.config import get_config
from gpu_probe.decode_batch import DecodeBatch, make_batch
from gpu_probe.kernels.persistent import (
    MAX_ROWS,
    PersistentConfig,
    PersistentDecoder,
    PersistentKernelError,
    co_resident_blocks_per_sm,
    phase_plan,
    step_layout,
)
from gpu_probe.kernels.persistent_trace import lanes, read_trace
from gpu_probe.kv_cache import PAD_SLOT
from gpu_probe.measure import logit_tolerance, rel_err
from gpu_probe.model import ProbeModel

ONE_PROGRAM = PersistentConfig(max_programs=1, attention_tokens=16)


def tiny_model(gqa: bool) -> ProbeModel:
    overrides = {"n_heads": 8, "n_kv_heads": 2, "tie_embeddings": True} if gqa else {}
    model = ProbeModel(get_config("tiny", **overrides), num_blocks=40, fused=True)
    model.kv_cache.fill_random_(seed=1)
    return model


@functools.cache
def tiny_setup(gqa: bool) -> tuple[ProbeModel, DecodeBatch]:
    """One model and batch per shape for the whole module: every step below restores the KV cache it found."""
    model = tiny_model(gqa)
    return model, make_batch(model, MAX_ROWS, seed=2, context=13)


@pytest.fixture(scope="module", params=[False, True], ids=["tiny", "tiny-gqa-tied"])
def setup(request):
    return tiny_setup(request.param)


@pytest.fixture(scope="module")
def gqa_setup():
    """The 1b preset's traits in tiny (GQA, tied LM head): one shape for the slower interpreter checks."""
    return tiny_setup(True)


_STEPS: dict = {}  # (path, model's id, inputs, config) -> (logits, KV after): a step takes seconds here


def _step(path: str, model, inputs: DecodeBatch, config: PersistentConfig, before: torch.Tensor):
    """One step of the fused or persistent path from the cache `before`, shared by the tests that take the same
    step from the same cache (the cache is put back after each)."""
    fields = (
        inputs.input_ids,
        inputs.positions,
        inputs.block_tables,
        inputs.slot_mapping,
        inputs.context_lens,
    )
    key = (
        path,
        id(model),
        *(tuple(t.flatten().tolist()) for t in fields),
        repr(config) if path == "p" else "",
    )
    if key not in _STEPS or not torch.equal(_STEPS[key][0], before):
        out = (
            model.fused_forward(inputs) if path == "f" else PersistentDecoder(model, config)(inputs)
        ).clone()
        _STEPS[key] = (before, out, model.kv_cache.kv.clone())
        model.kv_cache.kv.copy_(before)
    return _STEPS[key][1:]


def fused_and_persistent(
    model, inputs: DecodeBatch, config: PersistentConfig = ONE_PROGRAM, fused_too: bool = True
):
    """Logits and KV caches after one step of each path from the same cache (the fused path's None unless
    fused_too: in the interpreter each path's step takes seconds, so a step already taken is shared)."""
    before = model.kv_cache.kv.clone()
    fused, fused_kv = _step("f", model, inputs, config, before) if fused_too else (None, None)
    persistent, persistent_kv = _step("p", model, inputs, config, before)
    return before, fused, fused_kv, persistent, persistent_kv


# ---- CPU, through the interpreter ----------------------------------------------------------------
@pytest.mark.parametrize("batch", [1, 3, 8])
def test_logits_match_the_fused_path_on_cpu(setup, batch):
    model, rows = setup
    _, fused, _, persistent, _ = fused_and_persistent(model, rows.head(batch))
    assert persistent.shape == fused.shape == (batch, model.cfg.vocab)
    assert rel_err(persistent, fused) <= logit_tolerance(model)


def test_split_context_is_merged_like_the_fused_path_on_cpu(gqa_setup):
    # 12 cached tokens in 16-token tiles: with 3 splits of 16 the last two are empty (only the new token).
    # Three rows: the fused step is the logits test's.
    model, rows = gqa_setup
    config = PersistentConfig(max_programs=1, attention_tokens=16, splits=3)
    _, fused, _, persistent, _ = fused_and_persistent(model, rows.head(3), config)
    assert rel_err(persistent, fused) <= logit_tolerance(model)


def test_kv_written_exactly_where_the_fused_path_writes_it_on_cpu(gqa_setup):
    model, rows = gqa_setup
    inputs = rows.head(3)  # a partial batch (the kernel's rows run to 4): both steps are the logits test's
    before, _, fused_kv, _, persistent_kv = fused_and_persistent(model, inputs)
    changed_fused = (fused_kv != before).any(-1)
    assert torch.equal((persistent_kv != before).any(-1), changed_fused)
    assert int(changed_fused.sum()) == 3 * 2 * model.cfg.n_layers * model.cfg.n_kv_heads
    assert rel_err(persistent_kv[changed_fused], fused_kv[changed_fused]) < 1e-5


def test_padded_rows_write_only_scratch_and_pad_slot_writes_nothing_on_cpu(gqa_setup):
    model, rows = gqa_setup
    cfg = model.cfg
    padded = pad_batch(rows.head(2), 4, cfg.block_size)  # two real rows, two padding rows (the bucket of 3)
    before, _, fused_kv, _, persistent_kv = fused_and_persistent(model, padded)
    assert torch.equal((persistent_kv != before).any(-1), (fused_kv != before).any(-1))
    padded.slot_mapping[1] = PAD_SLOT  # a real row with vLLM's padding slot: no write at all
    before, _, _, _, persistent_kv = fused_and_persistent(model, padded, fused_too=False)
    flat = lambda kv: kv.view(cfg.n_layers, 2, -1, cfg.n_kv_heads, cfg.head_dim)  # noqa: E731
    changed = (flat(persistent_kv) != flat(before)).any(-1).any(-1).any(0).any(0)
    assert not bool(changed[int(rows.slot_mapping[1])])
    assert int(changed.sum()) == len(set(padded.slot_mapping.tolist()) - {PAD_SLOT})


def test_batches_above_the_kernel_fall_back_to_the_fused_path_on_cpu():
    model = tiny_model(False)
    batch = make_batch(model, MAX_ROWS + 1, seed=3, context=9)
    decoder = PersistentDecoder(model, ONE_PROGRAM)
    before = model.kv_cache.kv.clone()
    out = decoder(batch)
    assert decoder.last_fallback
    model.kv_cache.kv.copy_(before)
    assert torch.equal(out, model.fused_forward(batch))
    decoder(batch.head(1))
    assert not decoder.last_fallback


def test_a_barrier_that_cannot_complete_sets_the_flag_instead_of_hanging_on_cpu():
    # The interpreter runs program 0 to its end before program 1 starts: program 0's first wait can
    # never be met. It must give up after spin_limit polls, flag phase 1 and let both programs finish.
    model = tiny_model(True)
    batch = make_batch(model, 2, seed=4, context=9)
    decoder = PersistentDecoder(model, PersistentConfig(max_programs=2, spin_limit=5, attention_tokens=16))
    out = decoder(batch)
    assert out.shape == (2, model.cfg.vocab)
    phase = decoder.error_phase()
    assert phase is not None and (phase.index, phase.kind, phase.layer) == (1, "qkv", 0)
    with pytest.raises(PersistentKernelError, match="L0 qkv"):
        decoder.check_error()
    # Both programs arrived at every barrier even so: the counter stays a whole number of steps.
    steps = int(decoder.state[0]) / ((len(decoder.phases) - 1) * decoder.programs)
    assert steps == 1
    decoder.reset_error()
    decoder.check_error()
    assert decoder.error_phase() is None


def test_one_program_never_flags_on_cpu(gqa_setup):
    model, rows = gqa_setup
    decoder = PersistentDecoder(model, ONE_PROGRAM)
    before = model.kv_cache.kv.clone()
    for _ in range(2):  # the counter carries over: the second step's barriers are relative to its own base
        decoder(rows.head(1))
    model.kv_cache.kv.copy_(before)
    decoder.check_error()
    assert int(decoder.state[0]) == 2 * (len(decoder.phases) - 1)


def test_trace_buffer_layout_and_reading_on_cpu(gqa_setup):
    model, rows = gqa_setup
    decoder = PersistentDecoder(model, ONE_PROGRAM)
    before = model.kv_cache.kv.clone()
    decoder(rows.head(1), trace=True)
    model.kv_cache.kv.copy_(before)
    stamps = decoder.trace_buffer
    phases = phase_plan(model.cfg.n_layers)
    assert tuple(stamps.shape) == (1, 2 + 5 * model.cfg.n_layers, 3) == (1, len(phases), 3)
    flat = stamps.reshape(-1)
    assert bool((flat >= 0).all()) and bool((flat[1:] >= flat[:-1]).all())  # every stamp, in kernel order
    trace = read_trace(stamps, phases)
    assert [p["name"] for p in trace["phases"]][:3] == ["embed", "L0 qkv", "L0 attention"]
    assert trace["phases"][-1]["kind"] == "lm_head"
    critical = sum(r["critical_us"] for r in trace["per_phase"])
    assert critical == pytest.approx(trace["total_us"])
    assert set(trace["by_kind"]) == {"embed", "qkv", "attention", "o", "gate_up", "down", "lm_head"}
    assert trace["by_kind"]["qkv"]["phases"] == model.cfg.n_layers
    segments = lanes(trace, n_lanes=4)
    assert {s["lane"] for s in segments} == {0} and {s["what"] for s in segments} <= {"wait", "work"}
    assert all(s["end_us"] >= s["start_us"] for s in segments)
    with pytest.raises(ValueError, match="trace must be"):
        decoder(rows.head(1), trace=torch.zeros(2, 2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="unwritten"):
        read_trace(torch.full((1, len(phases), 3), -1), phases)


def test_layout_per_batch_bucket():
    cfg = get_config("1b")
    config = PersistentConfig()
    for batch, rows in ((1, 1), (2, 2), (3, 4), (8, 8)):
        lay = step_layout(cfg, config, 132, batch)
        assert lay.rows == rows and 1 <= lay.splits <= config.max_splits and lay.chunk == 256
        for kind, (bn, chunks) in lay.tiles.items():
            assert bn % config.rows_per_block == 0 and chunks >= 1 and chunks & (chunks - 1) == 0, kind
            weight_rows = bn * (2 if kind == "gate_up" else 1)
            assert weight_rows * chunks * lay.chunk <= max(config.tile_elements, weight_rows * lay.chunk)
    one = step_layout(cfg, config, 132, 1)
    assert one.tiles["qkv"] == (8, 8) and one.tiles["gate_up"] == (8, 4)  # 32 KB tiles covering whole rows
    # Wider blocks at larger batches, never so wide that most programs would have no block.
    lay = step_layout(cfg, config, 132, 8)
    assert min(cfg.hidden // lay.tiles[kind][0] for kind in ("o", "down")) >= 128
    with pytest.raises(ValueError, match="1..8 rows"):
        step_layout(cfg, config, 132, 9)


@pytest.mark.parametrize(
    "field, value",
    [("num_warps", 3), ("rows_per_block", 3), ("attention_tokens", 8), ("splits", 0), ("prefetch_bytes", 8)],
)
def test_config_rejects_bad_fields_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        PersistentConfig(**{field: value})


def test_co_residency_from_registers_shared_memory_and_threads():
    assert co_resident_blocks_per_sm(255, 10240, 8) == 1  # 255 registers x 256 threads: one per SM
    assert co_resident_blocks_per_sm(128, 10240, 8) == 2
    assert co_resident_blocks_per_sm(32, 100_000, 4) == 2  # shared memory limits
    assert co_resident_blocks_per_sm(32, 0, 32) == 2  # threads limit: 2048 per SM
    assert co_resident_blocks_per_sm(255, 0, 32) == 0  # 255 x 1024 registers: does not fit at all


# ---- CUDA ------------------------------------------------------------------------------------------
cuda = pytest.mark.cuda


@pytest.fixture(scope="module", params=["small", "1b"])
def gpu_setup(request):
    model = ProbeModel(request.param, device="cuda", num_blocks=1 + MAX_ROWS * 40, fused=True)
    model.kv_cache.fill_random_(seed=5)
    return model, make_batch(model, MAX_ROWS, seed=6), PersistentDecoder(model)


@cuda
@pytest.mark.parametrize("batch", range(1, MAX_ROWS + 1))
def test_logits_match_the_fused_path_on_cuda(gpu_setup, batch):
    model, rows, decoder = gpu_setup
    inputs = rows.head(batch)
    kv = model.kv_cache.kv  # the slots this step writes get a value no step computes: every write shows
    kv.view(kv.shape[0], 2, -1, *kv.shape[4:])[:, :, inputs.slot_mapping] = 100.0
    before = model.kv_cache.kv.clone()
    fused = model.fused_forward(inputs).clone()
    fused_kv = model.kv_cache.kv.clone()
    model.kv_cache.kv.copy_(before)
    out = decoder(inputs)
    decoder.check_error()
    assert rel_err(out, fused) <= logit_tolerance(model)
    assert torch.equal((model.kv_cache.kv != before).any(-1), (fused_kv != before).any(-1))
    model.kv_cache.kv.copy_(before)


@cuda
def test_graph_replay_equals_eager_per_bucket_and_kv_canary_on_cuda(gpu_setup):
    from gpu_probe.graph_runner import GraphRunner
    from gpu_probe.measure import check_graph_vs_eager

    model, rows, decoder = gpu_setup
    runner = GraphRunner(decoder, buckets=(1, 2, 4, 8))
    checks = check_graph_vs_eager(runner, decoder, rows)
    assert checks["graph_vs_eager"]["passed"], checks["graph_vs_eager"]["buckets"]
    assert checks["kv_canary"]["passed"]
    decoder.check_error()


@cuda
@pytest.mark.parametrize("batch", [1, 2, 4, 8])
def test_25_calls_are_bit_identical_on_cuda(gpu_setup, batch):
    model, rows, decoder = gpu_setup
    inputs = rows.head(batch)  # every call re-decodes the same token into the same slot
    first = decoder(inputs).clone()
    assert all(torch.equal(decoder(inputs), first) for _ in range(24))
    decoder.check_error()


@cuda
def test_1000_steps_without_a_hang_or_an_error_on_cuda(gpu_setup):
    model, rows, decoder = gpu_setup
    inputs = rows.head(1)
    for _ in range(1000):
        decoder(inputs)
    torch.cuda.synchronize()
    decoder.check_error()


@cuda
def test_a_grid_larger_than_co_resident_is_refused_on_cuda(gpu_setup):
    model, rows, _ = gpu_setup
    decoder = PersistentDecoder(model, PersistentConfig(programs_per_sm=8))
    with pytest.raises(ValueError, match="co-resident"):
        decoder(rows.head(1))


@cuda
def test_trace_on_cuda_is_ordered_per_program(gpu_setup):
    model, rows, decoder = gpu_setup
    decoder(rows.head(1), trace=True)
    torch.cuda.synchronize()
    stamps = decoder.trace_buffer.cpu()
    assert bool((stamps[:, :, 1] >= stamps[:, :, 0]).all()) and bool(
        (stamps[:, :, 2] >= stamps[:, :, 1]).all()
    )
    assert bool((stamps[:, 1:, 0] >= stamps[:, :-1, 2]).all())
    trace = read_trace(stamps, decoder.phases)
    assert 0 < trace["total_us"] < 50_000
