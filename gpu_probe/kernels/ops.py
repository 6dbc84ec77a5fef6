"""The unfused step's elementwise and normalisation ops, one kernel each, as an engine's eager path runs them.

vLLM's eager decode launches RMSNorm, rotary embedding, the KV-cache write (`reshape_and_cache`) and
SiLU-and-mul as one custom kernel each, between cuBLAS projections and a paged attention kernel. These
are the same four, in Triton, so the probe's unfused layer is the chapter's per-op layer: each op reads
its inputs from HBM and writes its output back, and nothing is merged. `gpu_probe.kernels.linear` and
`attention` hold the fused kernels that merge them.

Each kernel has a plain-PyTorch reference with the same rounding points (the model dtype after each
op), used on machines without Triton and by the tests.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


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


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of each row of x[M, N]: one program a row."""
    m, n = x.shape
    assert x.stride(1) == 1 and weight.shape == (n,)
    out = torch.empty_like(x)
    _rms_norm_kernel[(m,)](
        x, weight, out, n, x.stride(0), out.stride(0), eps, BLOCK=triton.next_power_of_2(n)
    )
    return out


def rope_(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    head_dim: int,
) -> None:
    """Rotate q[M, Hq * D] and k[M, Hkv * D] in place at each row's position (cos/sin: [max_pos, D/2], fp32)."""
    m = q.shape[0]
    n_q, n_k = q.shape[1] // head_dim, k.shape[1] // head_dim
    assert q.stride(1) == 1 and k.stride(1) == 1 and cos.shape[1] == head_dim // 2
    _rope_kernel[(m, n_q + n_k)](
        q,
        k,
        positions,
        cos,
        sin,
        q.stride(0),
        k.stride(0),
        cos.shape[0] - 1,
        N_Q_HEADS=n_q,
        HEAD_DIM=head_dim,
    )


def write_kv(
    k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor
) -> None:
    """k, v [M, Hkv * D] into [num_blocks, block_size, Hkv, D] caches at slot_mapping (-1: no write)."""
    width = k.shape[1]
    assert k_cache.stride(1) == width and v_cache.stride() == k_cache.stride() and k.stride(1) == 1
    _write_kv_kernel[(k.shape[0],)](
        k,
        v,
        slot_mapping,
        k_cache,
        v_cache,
        k.stride(0),
        v.stride(0),
        k_cache.stride(1),
        WIDTH=width,
        BLOCK=triton.next_power_of_2(width),
    )


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, both [M, F]."""
    m, n = gate.shape
    out = torch.empty_like(gate)
    block = min(1024, triton.next_power_of_2(n))
    _silu_mul_kernel[(m, triton.cdiv(n, block))](
        gate, up, out, n, gate.stride(0), up.stride(0), out.stride(0), BLOCK=block
    )
    return out


# ---- plain-PyTorch references (the model dtype after each op, as the kernels round) ------------------
def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    normed = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return weight * normed


def rope_reference(
    x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_dim: int
) -> torch.Tensor:
    """x[M, H * D] rotated (rotate-half) at each row's position, in x's dtype."""
    m = x.shape[0]
    heads = x.float().view(m, -1, head_dim)
    half = head_dim // 2
    c, s = cos[positions][:, None, :].float(), sin[positions][:, None, :].float()
    lo, hi = heads[..., :half], heads[..., half:]
    return torch.cat([lo * c - hi * s, hi * c + lo * s], dim=-1).reshape(m, -1).to(x.dtype)


def write_kv_reference(k, v, slot_mapping, k_cache, v_cache) -> None:
    """The write as an index_put_ at (block, offset) of the cache tensors themselves (padded rows: the
    scratch block's slot 0), the pattern torch.compile turns into a scatter of the batch's rows."""
    block_size = k_cache.shape[1]
    slots = slot_mapping.clamp(min=0)
    blocks, offsets = slots // block_size, slots % block_size
    k_cache[blocks, offsets] = k.view(k.shape[0], *k_cache.shape[2:])
    v_cache[blocks, offsets] = v.view(v.shape[0], *v_cache.shape[2:])


def silu_mul_reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return (torch.nn.functional.silu(gate.float()) * up.float()).to(gate.dtype)
