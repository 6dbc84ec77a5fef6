"""The unfused step's elementwise and normalisation ops, one kernel each, as an engine's eager path runs them.

vLLM's eager decode launches RMSNorm, rotary embedding, the KV-cache write (`reshape_and_cache`) and
SiLU-and-mul as one custom kernel each, between cuBLAS projections and a paged attention kernel. These
are the same four, in Triton, so the probe's unfused layer is the chapter's per-op layer: each op reads
its inputs from HBM and writes its output back, and nothing is merged. `gpu_probe.kernels.linear` and
`attention` hold the fused kernels that merge them.

Each kernel has a plain-PyTorch twin with the same rounding points (the model dtype after each op):
`gpu_probe.model.TORCH_OPS`, which runs on machines without Triton and which the tests compare with.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpu_probe.kernels import launch


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, N, stride_x, stride_o, eps, BLOCK: tl.constexpr):
    """One row: fp32 statistics, normalised x rounded to the model dtype, then times the weight (Llama's order)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    normed = (x * inv_rms).to(out_ptr.dtype.element_ty)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * stride_o + cols, (w * normed).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_kernel(
    q_ptr,
    k_ptr,
    pos_ptr,
    cos_ptr,
    sin_ptr,
    stride_q,
    stride_k,
    max_pos,
    N_Q_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    """Rotate one head of q or k in place (rotate-half): program (row, head), the k heads after the q heads."""
    row = tl.program_id(0)
    head = tl.program_id(1)
    HALF: tl.constexpr = HEAD_DIM // 2
    d = tl.arange(0, HALF)
    pos = tl.minimum(tl.maximum(tl.load(pos_ptr + row), 0), max_pos)
    cos = tl.load(cos_ptr + pos * HALF + d)
    sin = tl.load(sin_ptr + pos * HALF + d)
    if head < N_Q_HEADS:
        base = q_ptr + row * stride_q + head * HEAD_DIM
    else:
        base = k_ptr + row * stride_k + (head - N_Q_HEADS) * HEAD_DIM
    lo = tl.load(base + d).to(tl.float32)
    hi = tl.load(base + HALF + d).to(tl.float32)
    tl.store(base + d, (lo * cos - hi * sin).to(base.dtype.element_ty))
    tl.store(base + HALF + d, (hi * cos + lo * sin).to(base.dtype.element_ty))


@triton.jit
def _write_kv_kernel(
    k_ptr,
    v_ptr,
    slot_ptr,
    k_cache_ptr,
    v_cache_ptr,
    stride_k,
    stride_v,
    stride_slot,
    WIDTH: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """One row's new K and V into the paged cache at its slot; a slot < 0 (a padded row) writes nothing."""
    row = tl.program_id(0)
    slot = tl.load(slot_ptr + row).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = (cols < WIDTH) & (slot >= 0)
    k = tl.load(k_ptr + row * stride_k + cols, mask=mask)
    v = tl.load(v_ptr + row * stride_v + cols, mask=mask)
    tl.store(k_cache_ptr + slot * stride_slot + cols, k, mask=mask)
    tl.store(v_cache_ptr + slot * stride_slot + cols, v, mask=mask)


@triton.jit
def _silu_mul_kernel(gate_ptr, up_ptr, out_ptr, N, stride_g, stride_u, stride_o, BLOCK: tl.constexpr):
    """silu(gate) * up over one block of one row: SwiGLU's activation, after its two projections."""
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    gate = tl.load(gate_ptr + row * stride_g + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(up_ptr + row * stride_u + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(
        out_ptr + row * stride_o + cols,
        (gate * tl.sigmoid(gate) * up).to(out_ptr.dtype.element_ty),
        mask=mask,
    )


# One plan per op and key (`gpu_probe.kernels.launch`): a key holds every layout, dtype and scalar its plan
# reads, so the checks and the launch arguments below are worked out once per shape, not per call.
_PLANS: dict[str, dict] = {"rms_norm": {}, "rope": {}, "write_kv": {}, "silu_mul": {}}


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of each row of x[M, N]: one program a row."""
    out = torch.empty_like(x)
    key = (x.shape, x.stride(), x.dtype, weight.shape, weight.stride(), weight.dtype, x.get_device(), eps)
    plans = _PLANS["rms_norm"]
    plan = plans.get(key)
    if plan is None or launch.VERIFY:
        plan = launch.remember(plans, key, _rms_norm_plan(x, weight, out, eps))
    plan(x, weight, out)
    return out


def _rms_norm_plan(x, weight, out, eps: float) -> launch.Launch:
    m, n = x.shape
    if x.stride(1) != 1 or tuple(weight.shape) != (n,) or weight.stride(0) != 1:
        raise ValueError(
            f"rms_norm: x [{m}, {n}] needs contiguous rows and weight [{n}], got {list(weight.shape)}"
        )
    args = (None, None, None, n, x.stride(0), out.stride(0), eps)
    return launch.Launch(_rms_norm_kernel, (m,), args, {"BLOCK": triton.next_power_of_2(n)}, slots=(0, 1, 2))


def rope_(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    head_dim: int,
) -> None:
    """Rotate q[M, Hq * D] and k[M, Hkv * D] in place at each row's position (cos/sin: [max_pos, D/2], fp32)."""
    key = (
        q.shape,
        q.stride(),
        q.dtype,
        k.shape,
        k.stride(),
        k.dtype,
        positions.dtype,
        cos.shape,
        cos.stride(),
        cos.dtype,
        sin.dtype,
        head_dim,
        q.get_device(),
    )
    plans = _PLANS["rope"]
    plan = plans.get(key)
    if plan is None or launch.VERIFY:
        plan = launch.remember(plans, key, _rope_plan(q, k, cos, head_dim))
    plan(q, k, positions, cos, sin)


def _rope_plan(q, k, cos, head_dim: int) -> launch.Launch:
    m = q.shape[0]
    n_q, n_k = q.shape[1] // head_dim, k.shape[1] // head_dim
    if q.stride(1) != 1 or k.stride(1) != 1 or tuple(cos.stride()) != (head_dim // 2, 1):
        raise ValueError(
            "rope_: q and k need contiguous rows, cos and sin [max_pos, head_dim / 2] contiguous"
        )
    args = (None, None, None, None, None, q.stride(0), k.stride(0), cos.shape[0] - 1)
    meta = {"N_Q_HEADS": n_q, "HEAD_DIM": head_dim}
    return launch.Launch(_rope_kernel, (m, n_q + n_k), args, meta, slots=(0, 1, 2, 3, 4))


def write_kv(
    k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor
) -> None:
    """k, v [M, Hkv * D] into [num_blocks, block_size, Hkv, D] caches at slot_mapping (-1: no write)."""
    key = (
        k.shape,
        k.stride(),
        k.dtype,
        v.shape,
        v.stride(),
        v.dtype,
        slot_mapping.dtype,
        k_cache.stride(),
        k_cache.dtype,
        v_cache.stride(),
        v_cache.dtype,
        k.get_device(),
    )
    plans = _PLANS["write_kv"]
    plan = plans.get(key)
    if plan is None or launch.VERIFY:
        plan = launch.remember(plans, key, _write_kv_plan(k, v, k_cache, v_cache))
    plan(k, v, slot_mapping, k_cache, v_cache)


def _write_kv_plan(k, v, k_cache, v_cache) -> launch.Launch:
    width = k.shape[1]
    if (
        k_cache.stride(1) != width
        or v_cache.stride() != k_cache.stride()
        or k.stride(1) != 1
        or v.stride(1) != 1
        or v.shape != k.shape
    ):
        raise ValueError("write_kv: k and v [M, Hkv * D] with contiguous rows into caches of one layout")
    args = (None, None, None, None, None, k.stride(0), v.stride(0), k_cache.stride(1))
    meta = {"WIDTH": width, "BLOCK": triton.next_power_of_2(width)}
    return launch.Launch(_write_kv_kernel, (k.shape[0],), args, meta, slots=(0, 1, 2, 3, 4))


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, both [M, F]."""
    out = torch.empty_like(gate)
    key = (gate.shape, gate.stride(), gate.dtype, up.shape, up.stride(), up.dtype, gate.get_device())
    plans = _PLANS["silu_mul"]
    plan = plans.get(key)
    if plan is None or launch.VERIFY:
        plan = launch.remember(plans, key, _silu_mul_plan(gate, up, out))
    plan(gate, up, out)
    return out


def _silu_mul_plan(gate, up, out) -> launch.Launch:
    m, n = gate.shape
    if up.shape != gate.shape or gate.stride(1) != 1 or up.stride(1) != 1:
        raise ValueError(f"silu_mul: gate and up [{m}, {n}] with contiguous rows, got up {list(up.shape)}")
    block = min(1024, triton.next_power_of_2(n))
    args = (None, None, None, n, gate.stride(0), up.stride(0), out.stride(0))
    return launch.Launch(
        _silu_mul_kernel, (m, triton.cdiv(n, block)), args, {"BLOCK": block}, slots=(0, 1, 2)
    )
