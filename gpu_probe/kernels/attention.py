"""Decode attention over a paged KV cache, with RoPE and the K/V cache write folded in.

One program per (sequence, KV head, context split). It reads q, k, v of the new token straight
from the packed QKV output, rotates q and k in registers (rotate-half RoPE: the two halves of
head_dim are held as separate tiles), and

- the last split's program writes the rotated k and v at slot_mapping (skipped for slot < 0)
  and counts the new token itself, from registers;
- every program runs an online softmax (base 2) over its share of the cached tokens
  [0, context_len - 1), gathering them through the block table, for all query heads of its
  KV head at once (GQA: K/V are read once per group).

Output: per split, the normalised partial output [B, S, heads*D] (fp32) and its log2-sum-exp
[B, S, heads]; gpu_probe.kernels.linear merges the splits in the o_proj prologue. At batch >=
~2 * SMs / kv_heads there is a single split and the merge is the identity.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

NEG_BIG = tl.constexpr(-1.0e30)
LOG2E = 1.4426950408889634


@triton.jit
def _paged_attention_kernel(qkv_ptr, pos_ptr, table_ptr, slot_ptr, ctx_ptr, k_ptr, v_ptr, cos_ptr, sin_ptr,
                            out_ptr, lse_ptr,
                            stride_qkv, stride_table, stride_slot, max_pos, n_splits, qk_scale,
                            N_HEADS: tl.constexpr, N_KV_HEADS: tl.constexpr, GROUP: tl.constexpr,
                            GROUP_P2: tl.constexpr, HALF: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                            BLOCK_N: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    HEAD_DIM: tl.constexpr = 2 * HALF
    g = tl.arange(0, GROUP_P2)
    mask_g = g < GROUP
    heads = kv_head * GROUP + g
    d = tl.arange(0, HALF)

    pos = tl.minimum(tl.maximum(tl.load(pos_ptr + seq), 0), max_pos)
    cos = tl.load(cos_ptr + pos * HALF + d)
    sin = tl.load(sin_ptr + pos * HALF + d)
    row = qkv_ptr + seq * stride_qkv
    q_lo = tl.load(row + heads[:, None] * HEAD_DIM + d[None, :], mask=mask_g[:, None], other=0.0).to(tl.float32)
    q_hi = tl.load(row + heads[:, None] * HEAD_DIM + HALF + d[None, :], mask=mask_g[:, None], other=0.0).to(tl.float32)
    # Rotate and fold the softmax scale (in log2 units) into q once.
    q_rot_lo = (q_lo * cos[None, :] - q_hi * sin[None, :]) * qk_scale
    q_rot_hi = (q_hi * cos[None, :] + q_lo * sin[None, :]) * qk_scale

    k_row = row + (N_HEADS + kv_head) * HEAD_DIM
    v_row = row + (N_HEADS + N_KV_HEADS + kv_head) * HEAD_DIM
    k_lo = tl.load(k_row + d).to(tl.float32)
    k_hi = tl.load(k_row + HALF + d).to(tl.float32)
    k_rot_lo = k_lo * cos - k_hi * sin
    k_rot_hi = k_hi * cos + k_lo * sin
    v_lo = tl.load(v_row + d).to(tl.float32)
    v_hi = tl.load(v_row + HALF + d).to(tl.float32)

    # The new token belongs to the last split: it is written to the cache and scored from registers.
    is_last = split == n_splits - 1
    slot = tl.load(slot_ptr + seq).to(tl.int64)
    write = is_last & (slot >= 0) & (d < HALF)
    head_off = kv_head * HEAD_DIM
    tl.store(k_ptr + slot * stride_slot + head_off + d, k_rot_lo.to(k_ptr.dtype.element_ty), mask=write)
    tl.store(k_ptr + slot * stride_slot + head_off + HALF + d, k_rot_hi.to(k_ptr.dtype.element_ty), mask=write)
    tl.store(v_ptr + slot * stride_slot + head_off + d, v_lo.to(v_ptr.dtype.element_ty), mask=write)
    tl.store(v_ptr + slot * stride_slot + head_off + HALF + d, v_hi.to(v_ptr.dtype.element_ty), mask=write)

    score_new = tl.sum(q_rot_lo * k_rot_lo[None, :] + q_rot_hi * k_rot_hi[None, :], axis=1)  # [GROUP_P2]
    run_max = tl.where(is_last, score_new, NEG_BIG)
    run_sum = tl.where(is_last, 1.0, 0.0) + tl.zeros((GROUP_P2,), dtype=tl.float32)
    acc_lo = tl.where(is_last, 1.0, 0.0) * v_lo[None, :] + tl.zeros((GROUP_P2, HALF), dtype=tl.float32)
    acc_hi = tl.where(is_last, 1.0, 0.0) * v_hi[None, :] + tl.zeros((GROUP_P2, HALF), dtype=tl.float32)

    # This split's share of the cached tokens, in whole BLOCK_N tiles.
    n_cached = tl.load(ctx_ptr + seq) - 1
    share = tl.cdiv(tl.cdiv(n_cached, n_splits), BLOCK_N) * BLOCK_N
    lo = split * share
    hi = tl.minimum(lo + share, n_cached)
    for start in range(lo, hi, BLOCK_N):
        t = start + tl.arange(0, BLOCK_N)
        mask_t = t < hi
        block = tl.load(table_ptr + seq * stride_table + t // BLOCK_SIZE, mask=mask_t, other=0).to(tl.int64)
        addr = (block * BLOCK_SIZE + t % BLOCK_SIZE) * stride_slot + head_off
        kc_lo = tl.load(k_ptr + addr[:, None] + d[None, :], mask=mask_t[:, None], other=0.0).to(tl.float32)
        kc_hi = tl.load(k_ptr + addr[:, None] + HALF + d[None, :], mask=mask_t[:, None], other=0.0).to(tl.float32)
        vc_lo = tl.load(v_ptr + addr[:, None] + d[None, :], mask=mask_t[:, None], other=0.0).to(tl.float32)
        vc_hi = tl.load(v_ptr + addr[:, None] + HALF + d[None, :], mask=mask_t[:, None], other=0.0).to(tl.float32)
        scores = (tl.sum(q_rot_lo[:, None, :] * kc_lo[None, :, :], axis=2)
                  + tl.sum(q_rot_hi[:, None, :] * kc_hi[None, :, :], axis=2))  # [GROUP_P2, BLOCK_N]
        scores = tl.where(mask_t[None, :], scores, NEG_BIG)
        new_max = tl.maximum(run_max, tl.max(scores, axis=1))
        alpha = tl.exp2(run_max - new_max)
        p = tl.where(mask_t[None, :], tl.exp2(scores - new_max[:, None]), 0.0)
        run_sum = run_sum * alpha + tl.sum(p, axis=1)
        acc_lo = acc_lo * alpha[:, None] + tl.sum(p[:, :, None] * vc_lo[None, :, :], axis=1)
        acc_hi = acc_hi * alpha[:, None] + tl.sum(p[:, :, None] * vc_hi[None, :, :], axis=1)
        run_max = new_max

    has_any = run_sum > 0
    norm = tl.where(has_any, run_sum, 1.0)
    lse = tl.where(has_any, run_max + tl.log2(norm), NEG_BIG)
    out_row = out_ptr + (seq * n_splits + split) * (N_HEADS * HEAD_DIM)
    tl.store(out_row + heads[:, None] * HEAD_DIM + d[None, :], acc_lo / norm[:, None], mask=mask_g[:, None])
    tl.store(out_row + heads[:, None] * HEAD_DIM + HALF + d[None, :], acc_hi / norm[:, None], mask=mask_g[:, None])
    tl.store(lse_ptr + (seq * n_splits + split) * N_HEADS + heads, lse, mask=mask_g)


def paged_decode_attention(qkv: torch.Tensor, positions: torch.Tensor, block_tables: torch.Tensor,
                           slot_mapping: torch.Tensor, context_lens: torch.Tensor, k_cache: torch.Tensor,
                           v_cache: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_heads: int,
                           n_kv_heads: int, n_splits: int = 1, block_n: int | None = None
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE + paged K/V write + split decode attention; returns (partial [B, S, H*D] fp32, lse [B, S, H])."""
    batch = qkv.shape[0]
    num_blocks, block_size, kv_heads, head_dim = k_cache.shape
    assert kv_heads == n_kv_heads and qkv.shape[1] == (n_heads + 2 * n_kv_heads) * head_dim
    assert k_cache.stride(0) == block_size * k_cache.stride(1) and k_cache.stride(1) == kv_heads * head_dim
    assert v_cache.stride() == k_cache.stride() and qkv.stride(1) == 1 and block_tables.stride(1) == 1
    partial = torch.empty((batch, n_splits, n_heads * head_dim), dtype=torch.float32, device=qkv.device)
    lse = torch.empty((batch, n_splits, n_heads), dtype=torch.float32, device=qkv.device)
    group = n_heads // n_kv_heads
    if block_n is None:
        block_n = 32 if n_splits > 1 else 64
    grid = (batch, n_kv_heads, n_splits)
    _paged_attention_kernel[grid](
        qkv, positions, block_tables, slot_mapping, context_lens, k_cache, v_cache, cos, sin, partial, lse,
        qkv.stride(0), block_tables.stride(0), k_cache.stride(1), cos.shape[0] - 1, n_splits,
        LOG2E / math.sqrt(head_dim),
        N_HEADS=n_heads, N_KV_HEADS=n_kv_heads, GROUP=group, GROUP_P2=triton.next_power_of_2(group),
        HALF=head_dim // 2, BLOCK_SIZE=block_size, BLOCK_N=block_n, num_warps=4)
    return partial, lse


def paged_decode_attention_reference(qkv, positions, block_tables, slot_mapping, context_lens, k_cache, v_cache,
                                     cos, sin, n_heads: int, n_kv_heads: int) -> torch.Tensor:
    """Plain PyTorch, fp32, one sequence at a time: rotate, write the cache, attend. Returns [B, H*D]."""
    batch = qkv.shape[0]
    head_dim = k_cache.shape[-1]
    half = head_dim // 2
    flat_k = k_cache.view(-1, n_kv_heads, head_dim)
    flat_v = v_cache.view(-1, n_kv_heads, head_dim)
    q, k, v = qkv.float().split([n_heads * head_dim, n_kv_heads * head_dim, n_kv_heads * head_dim], dim=1)

    def rope(x, c, s):
        lo, hi = x[..., :half], x[..., half:]
        return torch.cat([lo * c - hi * s, hi * c + lo * s], dim=-1)

    c, s = cos[positions][:, None, :].float(), sin[positions][:, None, :].float()
    q = rope(q.view(batch, n_heads, head_dim), c, s)
    k = rope(k.view(batch, n_kv_heads, head_dim), c, s)
    v = v.view(batch, n_kv_heads, head_dim)
    for row in range(batch):
        if int(slot_mapping[row]) >= 0:
            flat_k[int(slot_mapping[row])] = k[row].to(k_cache.dtype)
            flat_v[int(slot_mapping[row])] = v[row].to(v_cache.dtype)
    out = torch.empty(batch, n_heads, head_dim, dtype=torch.float32, device=qkv.device)
    group = n_heads // n_kv_heads
    block_size = k_cache.shape[1]
    for row in range(batch):
        n = int(context_lens[row])
        t = torch.arange(n, device=qkv.device)
        slots = block_tables[row].long()[t // block_size] * block_size + t % block_size
        keys = flat_k[slots].float().repeat_interleave(group, dim=1)  # [n, H, D]
        values = flat_v[slots].float().repeat_interleave(group, dim=1)
        keys[-1], values[-1] = k[row].repeat_interleave(group, dim=0), v[row].repeat_interleave(group, dim=0)
        probs = torch.softmax(torch.einsum("hd,thd->ht", q[row], keys) / math.sqrt(head_dim), dim=-1)
        out[row] = torch.einsum("ht,thd->hd", probs, values)
    return out.reshape(batch, n_heads * head_dim)
