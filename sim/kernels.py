"""Which kernels one decode step launches, and how long each runs on the GPU.

Unfused, a layer is the chapter's eleven kernels. Two elementwise steps are assumed
to ride in an epilogue even unfused (as they do in any serving engine's eager path):
the residual adds (in the o_proj and down_proj epilogues) and SiLU·mul (in the
up_proj epilogue, which reads the gate output back). A naive PyTorch eager step
launches those as kernels of their own, so a measured eager count is higher.

Fused, a layer is four kernels; every boundary between them is a real grid-wide
dependency (attention needs all of q/k/v, the FFN norm needs the whole attention
output summed into the residual, down_proj needs the whole SwiGLU output).

GPU time per kernel is `sim.timing.kernel_us`: a fixed latency plus the larger of bytes
moved over bandwidth and FLOPs over the matrix rate. Weights are read
once per step whatever the batch; activations and KV-cache reads grow with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from sim.config import HardwareConfig, ModelConfig
from sim.timing import kernel_us

UNFUSED_PER_LAYER = 11
FUSED_PER_LAYER = 4
MODEL_LEVEL = ("embedding", "final_norm", "lm_head", "sampling")


@dataclass(frozen=True, slots=True)
class KernelSpec:
    name: str  # as shown in the lanes: "L3 q_proj", "lm_head"
    op: str  # the unfused op or fused kernel it is an instance of
    layer: int  # -1 outside the layers
    weight_bytes: float  # read once per step
    act_bytes_per_row: float  # activations read + written, per batch row
    kv_bytes_per_row: float  # KV-cache reads and appends, per batch row
    flops_per_row: float


@dataclass(frozen=True, slots=True)
class Intermediate:
    tensor: str
    dim: str  # "hidden", "q_dim", "kv_dim" or "ffn": elements per token
    writes: int
    reads: int


@dataclass(frozen=True, slots=True)
class Fusion:
    kernel: str
    merges: tuple[str, ...]  # unfused ops it replaces, in order
    kept_on_chip: tuple[Intermediate, ...]  # tensors that no longer round-trip HBM
    why: str


FUSIONS: tuple[Fusion, ...] = (
    Fusion(
        kernel="norm_qkv",
        merges=("attn_norm", "q_proj", "k_proj", "v_proj"),
        kept_on_chip=(Intermediate("normed hidden state", "hidden", writes=1, reads=3),),
        why="RMSNorm recomputed in the GEMV prologue (a decode row is a few KB, every CTA can afford "
        "it) feeding one packed QKV weight: 4 launches become 1.",
    ),
    Fusion(
        kernel="rope_attn_o",
        merges=("rope", "attention", "o_proj"),
        kept_on_chip=(
            Intermediate("rotated q", "q_dim", writes=1, reads=1),
            Intermediate("rotated k", "kv_dim", writes=1, reads=1),
            Intermediate("attention output", "q_dim", writes=1, reads=1),
        ),
        why="RoPE in the attention prologue; each head's slice of W_o applied in the epilogue and "
        "summed into the residual by split-K atomics, which also carry the residual add.",
    ),
    Fusion(
        kernel="norm_gate_up",
        merges=("ffn_norm", "gate_proj", "up_proj"),
        kept_on_chip=(
            Intermediate("normed hidden state", "hidden", writes=1, reads=2),
            Intermediate("gate output", "ffn", writes=1, reads=1),
        ),
        why="RMSNorm in the prologue, gate and up as one packed GEMV, SwiGLU (SiLU(gate)·up) in the "
        "epilogue: only the SwiGLU output is written.",
    ),
    Fusion(
        kernel="down_proj",
        merges=("down_proj",),
        kept_on_chip=(),
        why="Already one kernel with the residual add in its epilogue; it stays separate because it "
        "needs the whole SwiGLU output of every CTA before it can start.",
    ),
)


def _layer_ops(m: ModelConfig, fusion: bool) -> list[tuple[str, float, float, float, float]]:
    """(op, weight elements, activation elements per row, KV elements per row, FLOPs per row)."""
    h, q, kv, f, ctx = m.hidden, m.q_dim, m.kv_dim, m.ffn, m.context_len
    kv_cache = 2 * kv * ctx + 2 * kv  # read K and V for every cached token, append this token's
    attn_flops = 4 * q * ctx  # q·K and p·V over the context, every head
    if not fusion:
        return [
            ("attn_norm", h, 2 * h, 0, 4 * h),
            ("q_proj", h * q, h + q, 0, 2 * h * q),
            ("k_proj", h * kv, h + kv, 0, 2 * h * kv),
            ("v_proj", h * kv, h + kv, 0, 2 * h * kv),
            ("rope", 0, 2 * (q + kv), 0, 6 * (q + kv)),
            ("attention", 0, 2 * q + 2 * kv, kv_cache, attn_flops),  # reads q, k, v; writes output
            ("o_proj", q * h, q + 2 * h, 0, 2 * q * h),  # + residual read and write (epilogue add)
            ("ffn_norm", h, 2 * h, 0, 4 * h),
            ("gate_proj", h * f, h + f, 0, 2 * h * f),
            ("up_proj", h * f, h + 2 * f, 0, 2 * h * f),  # reads the gate output back for SiLU·mul
            ("down_proj", f * h, f + 2 * h, 0, 2 * f * h),  # + residual read and write
        ]
    return [
        ("norm_qkv", h + h * (q + 2 * kv), h + q + 2 * kv, 0, 4 * h + 2 * h * (q + 2 * kv)),
        ("rope_attn_o", q * h, q + 2 * kv + 2 * h, kv_cache, 6 * (q + kv) + attn_flops + 2 * q * h),
        ("norm_gate_up", h + 2 * h * f, h + f, 0, 4 * h + 4 * h * f),
        ("down_proj", f * h, f + 2 * h, 0, 2 * f * h),
    ]


_MODEL_BEFORE = MODEL_LEVEL[:1]
_MODEL_AFTER = MODEL_LEVEL[1:]


def _model_ops(m: ModelConfig) -> tuple[list, list]:
    h, v = m.hidden, m.vocab
    before = [("embedding", 0, 2 * h, 0, 0)]  # gathers one row per token: weights not read whole
    after = [
        ("final_norm", h, 2 * h, 0, 4 * h),
        ("lm_head", v * h, h + v, 0, 2 * v * h),
        ("sampling", 0, v + 1, 0, 5 * v),  # softmax + top-p over the logits, one token out
    ]
    return before, after


def step_kernels(model: ModelConfig, fusion: bool) -> list[KernelSpec]:
    """Every kernel of one decode step in launch order."""
    return list(_step_kernels(model, bool(fusion)))


@lru_cache(maxsize=64)
def _step_kernels(model: ModelConfig, fusion: bool) -> tuple[KernelSpec, ...]:
    b = model.bytes_per_el
    before, after = _model_ops(model)
    layer = _layer_ops(model, fusion)

    def spec(name, op, idx, w, act, kv, flops):
        return KernelSpec(name, op, idx, w * b, act * b, kv * b, float(flops))

    specs = [spec(op, op, -1, *rest) for op, *rest in before]
    for i in range(model.n_layers):
        specs += [spec(f"L{i} {op}", op, i, *rest) for op, *rest in layer]
    specs += [spec(op, op, -1, *rest) for op, *rest in after]
    return tuple(specs)


@lru_cache(maxsize=16)
def kernel_names(n_layers: int, fusion: bool) -> tuple[str, ...]:
    """Names of every kernel of a step in launch order (they depend on nothing else)."""
    before, after = list(_MODEL_BEFORE), list(_MODEL_AFTER)
    layer = [f.kernel for f in FUSIONS] if fusion else [op for f in FUSIONS for op in f.merges]
    return tuple(before + [f"L{i} {op}" for i in range(n_layers) for op in layer] + after)


@lru_cache(maxsize=64)
def kernel_arrays(model: ModelConfig, fusion: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple]:
    """(weight bytes, bytes per row, FLOPs per row, names) over the whole step, cached per model."""
    before, layer, after = kernel_groups(model, bool(fusion))
    arrays = []
    for i in range(3):
        arr = np.concatenate((before[i], np.tile(layer[i], model.n_layers), after[i]))
        arr.setflags(write=False)
        arrays.append(arr)
    return (*arrays, kernel_names(model.n_layers, bool(fusion)))


@lru_cache(maxsize=64)
def kernel_groups(model: ModelConfig, fusion: bool) -> tuple[tuple[np.ndarray, ...], ...]:
    """(before, one layer, after), each (weight bytes, bytes per row, FLOPs per row).

    Every layer launches the same kernels, so a sweep can work on one layer's worth of
    columns instead of n_layers of them.
    """
    b = model.bytes_per_el
    before, after = _model_ops(model)
    groups = []
    for ops in (before, _layer_ops(model, bool(fusion)), after):
        weight = np.array([w * b for _, w, _, _, _ in ops], dtype=np.float64)
        per_row = np.array([(act + kv) * b for _, _, act, kv, _ in ops], dtype=np.float64)
        flops = np.array([fl for *_, fl in ops], dtype=np.float64)
        for arr in (weight, per_row, flops):
            arr.setflags(write=False)  # cached: shared by every caller
        groups.append((weight, per_row, flops))
    return tuple(groups)


def roofline_us(weight, per_row, flops, hw: HardwareConfig, batches, padded=0, kv_per_row=0.0) -> np.ndarray:
    """[n_batches, n_kernels] GPU time: the kernel latency + max(bytes / bandwidth, FLOPs / matrix rate).

    `sim.timing.kernel_us`, the one kernel cost: every kernel here is in one family (the
    hardware's figures); the calibration fits one per probe kernel family. `padded` rows
    (per batch) are a graph bucket's dummy rows: they cost their matmul rows but read no
    KV cache (engines point them at a scratch slot), so their `kv_per_row` is taken off.
    """
    rows = np.asarray(batches, dtype=np.float64).reshape(-1, 1)
    dummy = np.asarray(padded, dtype=np.float64).reshape(-1, 1)
    moved = weight + rows * per_row - dummy * kv_per_row
    return kernel_us(moved, rows * flops, hw.min_kernel_us, hw.hbm_GBps, hw.matrix_TFLOPs)


@lru_cache(maxsize=64)
def kv_groups(model: ModelConfig, fusion: bool) -> tuple[np.ndarray, ...]:
    """(before, one layer, after) KV-cache bytes per row of each kernel (part of `kernel_groups`' per row)."""
    before, after = _model_ops(model)
    out = []
    for ops in (before, _layer_ops(model, bool(fusion)), after):
        arr = np.array([kv * model.bytes_per_el for _, _, _, kv, _ in ops], dtype=np.float64)
        arr.setflags(write=False)
        out.append(arr)
    return tuple(out)


def kernel_times_us(kernels, hw: HardwareConfig, batches) -> np.ndarray:
    """GPU time of each kernel (list of KernelSpec) at each batch size: [n_batches, n_kernels]."""
    weight = np.array([k.weight_bytes for k in kernels], dtype=np.float64)
    per_row = np.array([k.act_bytes_per_row + k.kv_bytes_per_row for k in kernels], dtype=np.float64)
    flops = np.array([k.flops_per_row for k in kernels], dtype=np.float64)
    return roofline_us(weight, per_row, flops, hw, batches)


def _dim(model: ModelConfig, dim: str) -> int:
    return {"hidden": model.hidden, "q_dim": model.q_dim, "kv_dim": model.kv_dim, "ffn": model.ffn}[dim]


def fusion_table(model: ModelConfig) -> list[dict]:
    """One row per fused kernel: what it merged, what stays on chip, bytes saved per token.

    Bytes saved is the drop in activation traffic between the merged unfused kernels and the
    fused one, per layer and per token (multiply by batch for a step); the intermediates listed
    account for it exactly (each written `writes` times and read `reads` times).
    """
    unfused = {op: act for op, _, act, _, _ in _layer_ops(model, False)}
    fused = {op: act for op, _, act, _, _ in _layer_ops(model, True)}
    rows = []
    for fu in FUSIONS:
        saved_el = sum(unfused[op] for op in fu.merges) - fused[fu.kernel]
        saved = saved_el * model.bytes_per_el
        rows.append(
            {
                "fused_kernel": fu.kernel,
                "merges": fu.merges,
                "launches_saved_per_layer": len(fu.merges) - 1,
                "kept_on_chip": tuple(
                    f"{t.tensor} ({_dim(model, t.dim)} el, {t.writes}w+{t.reads}r)" for t in fu.kept_on_chip
                ),
                "bytes_saved_per_token": float(saved),
                "bytes_saved_per_token_all_layers": float(saved * model.n_layers),
                "why": fu.why,
            }
        )
    return rows


def intermediate_bytes(model: ModelConfig, fu: Fusion) -> float:
    """Bytes per token the listed intermediates cost when they do round-trip HBM."""
    return sum((t.writes + t.reads) * _dim(model, t.dim) for t in fu.kept_on_chip) * model.bytes_per_el
