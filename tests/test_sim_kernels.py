"""Kernel accounting (11 → 4 per layer) and the roofline time of each kernel."""

import numpy as np
import pytest

from core.step_plan import toggled
from sim.config import PRESETS
from sim.step import kernels as sk
from sim.step.ops import FUSED_PER_LAYER, FUSIONS, UNFUSED_PER_LAYER, fusion_table
from sim.timing import kernel_us

CHAPTER = PRESETS["chapter"]


def step_kernels(model, fusion: bool):
    """Every kernel of a one-GPU step, fused or not, with its work (`KernelSpec`s, in launch order)."""
    return sk.step_kernels(model, toggled(fusion, False)).specs


def kernel_times_us(kernels, hw, batches):
    """Each KernelSpec's GPU time at each batch, from the one kernel cost: [n_batches, n_kernels]."""
    rows = np.asarray(batches, np.float64).reshape(-1, 1)
    weight = np.array([k.weight_bytes for k in kernels])
    per_row = np.array([k.act_bytes_per_row + k.kv_bytes_per_row for k in kernels])
    flops = np.array([k.flops_per_row for k in kernels])
    return kernel_us(weight + rows * per_row, rows * flops, hw.min_kernel_us, hw.hbm_GBps, hw.matrix_TFLOPs)


def intermediate_bytes(model, fu):
    """Bytes per token the fusion's kept intermediates cost when they do round-trip HBM."""
    dims = {"hidden": model.hidden, "q_dim": model.q_dim, "kv_dim": model.kv_dim, "ffn": model.ffn}
    return sum((t.writes + t.reads) * dims[t.dim] for t in fu.kept_on_chip) * model.bytes_per_el


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
def test_the_grouped_arrays_match_the_kernel_list(fusion):
    """A step's (before, one layer, after) arrays time every kernel as its own work says."""
    model = PRESETS["probe-0.5b-h200"].model.with_layers(3)
    hw = PRESETS["probe-0.5b-h200"].hardware
    kernels = sk.step_kernels(model, toggled(fusion, False))
    specs = kernels.specs
    assert kernels.names == tuple(k.name for k in specs) and len(kernels) == len(specs)
    for rows in (1, 7, 256):
        np.testing.assert_allclose(kernels.us(hw, None, rows), kernel_times_us(specs, hw, [rows])[0])


def _work(kernels):
    return np.array(
        [sum(getattr(k, f) for k in kernels) for f in ("weight_bytes", "kv_bytes_per_row", "flops_per_row")]
    )


@pytest.mark.parametrize("unfused, fused", [(11, 4), (51, 6), (20, 4), (11, 1), (30, 2), (11, 11)])
def test_kernels_per_layer_keep_the_layers_work(unfused, fused):
    from dataclasses import replace

    model = replace(CHAPTER.model.with_layers(3), unfused_per_layer=unfused, fused_per_layer=fused)
    for fusion, per_layer in ((False, unfused), (True, fused)):
        kernels = step_kernels(model, fusion)
        assert len(kernels) == 3 * per_layer + 4
        assert {sum(k.layer == i for k in kernels) for i in range(3)} == {per_layer}
        np.testing.assert_allclose(_work(kernels), _work(step_kernels(CHAPTER.model.with_layers(3), False)))
        extras = [k for k in kernels if k.op.startswith("elementwise_")]
        assert len(extras) == 3 * (per_layer - (11 if not fusion else min(fused, 4)))
        assert all(
            k.weight_bytes == k.act_bytes_per_row == k.kv_bytes_per_row == k.flops_per_row == 0
            for k in extras
        )
        names = [k.op for k in kernels if k.layer == 0]
        assert len(set(names)) == len(names)  # every kernel of a layer named apart
        # Each extra kernel pays the latency (and, eager, a launch): more kernels never run faster.
        t = kernel_times_us(kernels, CHAPTER.hardware, [1])[0]
        assert t[[k.op.startswith("elementwise_") for k in kernels]] == pytest.approx(
            CHAPTER.hardware.min_kernel_us
        )
    rows = fusion_table(model)
    assert sum(r["launches_saved_per_layer"] for r in rows) == unfused - fused
    unfused_act = sum(k.act_bytes_per_row for k in step_kernels(model, False))
    fused_act = sum(k.act_bytes_per_row for k in step_kernels(model, True))
    assert sum(r["bytes_saved_per_token_all_layers"] for r in rows) == pytest.approx(unfused_act - fused_act)


def test_extra_kernels_are_spread_between_the_ops():
    from dataclasses import replace

    model = replace(CHAPTER.model.with_layers(1), unfused_per_layer=33)
    ops = [k.op for k in step_kernels(model, False) if k.layer == 0]
    assert [op for op in ops if not op.startswith("elementwise_")] == list(SEED_ELEVEN)
    assert ops[-1].startswith("elementwise_") and ops[1].startswith("elementwise_")  # two after each op
    assert ops.count("q_proj") == 1 and ops.index("q_proj") == 3


def test_fewer_than_four_fused_kernels_merge_neighbours():
    from dataclasses import replace

    one = replace(CHAPTER.model.with_layers(2), fused_per_layer=1)
    layer = [k.op for k in step_kernels(one, True) if k.layer == 0]
    assert layer == ["norm_qkv+rope_attn_o+norm_gate_up+down_proj"]
    two = [k.op for k in step_kernels(replace(one, fused_per_layer=2), True) if k.layer == 0]
    assert two == ["norm_qkv+rope_attn_o", "norm_gate_up+down_proj"]


@pytest.mark.parametrize(
    "field, value", [("unfused_per_layer", 10), ("unfused_per_layer", 257), ("fused_per_layer", 0)]
)
def test_kernel_counts_are_validated(field, value):
    from dataclasses import replace

    with pytest.raises(ValueError, match=f"ModelConfig.{field}"):
        replace(CHAPTER.model, **{field: value})
    with pytest.raises(ValueError, match="ModelConfig.fused_per_layer: must be from 1 to 20"):
        replace(CHAPTER.model, unfused_per_layer=20, fused_per_layer=21)


def test_the_calibrations_family_work_is_the_simulators_work():
    # sim.calibration.families adds up sim.step.kernels' ops by the probe family that runs them: the same
    # bytes and FLOPs, written once.
    from core.step_plan import PERSISTENT
    from sim.calibration.families import INDEX, UNPIPELINED_BEFORE_2026_12_02, family_work

    model = PRESETS["probe-0.5b-h200"].model
    b = model.bytes_per_el
    for fused in (False, True):
        mode = toggled(fused, False)
        at = {
            rows: family_work(model, [rows], [mode], unpipelined=UNPIPELINED_BEFORE_2026_12_02)
            for rows in (0, 1)
        }
        weights = at[0][0][0]
        gemm = ("gemv", "tile_gemm")  # both paths run the probe's own GEMM kernels to 64 rows
        # Every weight a step reads whole, once, in the matmul family that runs at these rows (the norms'
        # too, fused; unfused they are one-op kernels); the wider kernels' family none.
        expected = model.read_params - (0 if fused else 2 * model.hidden * model.n_layers + model.hidden)
        assert weights[INDEX[gemm[0]]] == pytest.approx(expected * b) and weights[INDEX[gemm[1]]] == 0
        wide = family_work(model, [64], [mode], unpipelined=UNPIPELINED_BEFORE_2026_12_02)[0][0]
        assert wide[INDEX["tile_gemm_wide"]] > expected * b
        widest = family_work(model, [65], [mode], unpipelined=UNPIPELINED_BEFORE_2026_12_02)[0][0]
        assert widest[INDEX["cublas"]] > expected * b  # above 64 rows both paths' GEMMs are cuBLAS's
        # FLOPs: the simulator's unfused step's, less sampling (the probe stops at the logits).
        sim_flops = sum(k.flops_per_row for k in step_kernels(model, False) if k.op != "sampling")
        families = ["attention", gemm[0], "aten"] + ([] if fused else ["triton_op"])
        assert sum(at[1][1][0][INDEX[f]] for f in families) == pytest.approx(sim_flops)
    kv = sum(k.kv_bytes_per_row for k in step_kernels(model, True))
    fused = toggled(True, False)
    per_row = (
        family_work(model, [1], [fused], unpipelined=UNPIPELINED_BEFORE_2026_12_02)[0][0]
        - family_work(model, [0], [fused], unpipelined=UNPIPELINED_BEFORE_2026_12_02)[0][0]
    )
    assert per_row[INDEX["attention"]] > kv  # the KV cache, plus q, k, v in and the output out
    # The persistent kernel does the fused step's whole work in its one family.
    fused_work, fused_flops = family_work(model, [3], [fused], unpipelined=UNPIPELINED_BEFORE_2026_12_02)
    one, one_flops = family_work(model, [3], [PERSISTENT], unpipelined=UNPIPELINED_BEFORE_2026_12_02)
    assert one[0][INDEX["persistent"]] == pytest.approx(fused_work[0].sum()) and one[0].sum() == one[0][-1]
    # ... and computes a power-of-two row tile: 3 rows cost the FLOPs of 4 (gpu_probe.kernels.persistent).
    four_flops = family_work(model, [4], [fused], unpipelined=UNPIPELINED_BEFORE_2026_12_02)[1]
    assert one_flops[0][INDEX["persistent"]] == pytest.approx(four_flops[0].sum())
    assert one_flops[0][INDEX["persistent"]] > fused_flops[0].sum()


def test_every_modelled_mode_has_its_kernel_set_and_only_those():
    from core.step_plan import COMPILE, KERNEL_SETS, modes
    from sim.step.kernel_sets import SETS, kernel_set

    assert {kernel_set(m).name for m in modes(modelled=True)} == set(SETS) <= set(KERNEL_SETS)
    # Inductor's set is not modelled: asked for, the error names the sets the simulator has.
    with pytest.raises(ValueError, match="the simulator models unfused, fused, persistent, not 'inductor'"):
        sk.step_kernels(CHAPTER.model, COMPILE)
