"""Kernel accounting (11 → 4 per layer) and the roofline time of each kernel."""

import numpy as np
import pytest

from sim.config import PRESETS
from sim.kernels import (
    FUSED_PER_LAYER,
    FUSIONS,
    UNFUSED_PER_LAYER,
    fusion_table,
    intermediate_bytes,
    kernel_times_us,
    step_kernels,
)

CHAPTER = PRESETS["chapter"]
SEED_ELEVEN = (
    "attn_norm",
    "q_proj",
    "k_proj",
    "v_proj",
    "rope",
    "attention",
    "o_proj",
    "ffn_norm",
    "gate_proj",
    "up_proj",
    "down_proj",
)


def test_unfused_step_is_the_chapters_eleven_per_layer_plus_four():
    kernels = step_kernels(CHAPTER.model, fusion=False)
    assert len(kernels) == 32 * 11 + 4 == 356
    assert UNFUSED_PER_LAYER == 11 and FUSED_PER_LAYER == 4
    assert tuple(k.op for k in kernels if k.layer == 5) == SEED_ELEVEN
    assert [k.name for k in kernels if k.layer < 0] == ["embedding", "final_norm", "lm_head", "sampling"]
    assert kernels[1].name == "L0 attn_norm" and kernels[-4].name == "L31 down_proj"


def test_fusion_cuts_kernels_per_layer_to_four():
    for n_layers in (1, 32, 128):
        model = CHAPTER.model.with_layers(n_layers)
        fused = step_kernels(model, fusion=True)
        assert len(fused) == 4 * n_layers + 4
        per_layer = [sum(k.layer == i for k in fused) for i in range(n_layers)]
        assert set(per_layer) == {4}


def test_fusions_partition_the_eleven_in_order():
    merged = tuple(op for fu in FUSIONS for op in fu.merges)
    assert merged == SEED_ELEVEN
    assert [fu.kernel for fu in FUSIONS] == [k.op for k in step_kernels(CHAPTER.model, True) if k.layer == 0]


def test_fusion_keeps_weights_and_kv_reads_but_cuts_activation_bytes():
    for preset in PRESETS.values():
        unfused, fused = step_kernels(preset.model, False), step_kernels(preset.model, True)
        assert sum(k.weight_bytes for k in fused) == pytest.approx(sum(k.weight_bytes for k in unfused))
        kv_unfused = sum(k.kv_bytes_per_row for k in unfused)
        assert sum(k.kv_bytes_per_row for k in fused) == pytest.approx(kv_unfused)
        assert sum(k.act_bytes_per_row for k in fused) < sum(k.act_bytes_per_row for k in unfused)


def test_fusion_table_bytes_saved():
    m = CHAPTER.model
    rows = fusion_table(m)
    assert [r["fused_kernel"] for r in rows] == ["norm_qkv", "rope_attn_o", "norm_gate_up", "down_proj"]
    assert sum(r["launches_saved_per_layer"] for r in rows) == 7
    # Each row's saving is exactly its intermediates' writes + reads.
    for row, fu in zip(rows, FUSIONS):
        assert row["bytes_saved_per_token"] == pytest.approx(intermediate_bytes(m, fu))
    # By hand: normed 4h, rotated q/k 2q + 2kv, attention output 2q, normed 3h, gate output 2f (bf16).
    h, q, kv, f = 2048, 2048, 512, 3584
    assert [r["bytes_saved_per_token"] for r in rows] == [8 * h, 2 * (4 * q + 2 * kv), 2 * (3 * h + 2 * f), 0]
    total = sum(r["bytes_saved_per_token_all_layers"] for r in rows)
    assert total == 32 * 2 * (7 * h + 4 * q + 2 * kv + 2 * f)
    # The saving in the table is the saving in the kernels the simulator times.
    unfused = sum(k.act_bytes_per_row for k in step_kernels(m, False))
    fused = sum(k.act_bytes_per_row for k in step_kernels(m, True))
    assert unfused - fused == pytest.approx(total)


def test_roofline_times():
    hw = CHAPTER.hardware
    kernels = step_kernels(CHAPTER.model, False)
    batches = [1, 2, 16, 128, 512]
    t = kernel_times_us(kernels, hw, batches)
    assert t.shape == (5, 356)
    assert np.all(t >= hw.min_kernel_us)
    assert np.all(np.diff(t, axis=0) >= 0)  # never faster with more rows
    q_proj = [i for i, k in enumerate(kernels) if k.name == "L0 q_proj"][0]
    # 2048 × 2048 bf16 weights over 3000 GB/s, plus 2 × 2048 × 2 bytes of activations.
    assert t[0, q_proj] == pytest.approx(
        hw.min_kernel_us + (2048 * 2048 * 2 + 4096 * 2) / 3000e3
    )  # latency + bytes
    rms = [i for i, k in enumerate(kernels) if k.name == "L0 attn_norm"][0]
    assert t[0, rms] == pytest.approx(hw.min_kernel_us, rel=0.01)  # tiny kernels: about the latency alone
    attention = [i for i, k in enumerate(kernels) if k.name == "L0 attention"][0]
    # At batch 512 attention reads 512 × 1024 tokens × 512 × (K, V) × 2 bytes of KV cache.
    kv_bytes = 512 * 1024 * 512 * 2 * 2
    assert t[-1, attention] > kv_bytes / 3000e3


def test_compute_bound_at_huge_batch():
    hw = CHAPTER.hardware
    lm_head = [k for k in step_kernels(CHAPTER.model, False) if k.name == "lm_head"]
    t = kernel_times_us(lm_head, hw, [8192])[0, 0]
    assert t == pytest.approx(hw.min_kernel_us + 8192 * 2 * 32000 * 2048 / 700e6)


@pytest.mark.parametrize("fusion", [False, True])
def test_cached_arrays_match_the_kernel_list(fusion):
    from sim.kernels import kernel_arrays

    model = PRESETS["probe-0.5b-h200"].model.with_layers(3)
    specs = step_kernels(model, fusion)
    weight, per_row, flops, names = kernel_arrays(model, fusion)
    assert names == tuple(k.name for k in specs)
    np.testing.assert_allclose(weight, [k.weight_bytes for k in specs])
    np.testing.assert_allclose(per_row, [k.act_bytes_per_row + k.kv_bytes_per_row for k in specs])
    np.testing.assert_allclose(flops, [k.flops_per_row for k in specs])
