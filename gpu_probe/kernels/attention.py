"""Decode attention over a paged KV cache, with RoPE and the K/V cache write folded in.

One program per (sequence, KV head, context split). It reads q, k, v of the new token straight
from the packed QKV output, rotates q and k in registers (rotate-half RoPE: x*cos + sign*x[swapped
halves]*sin, the swapped copy loaded with permuted offsets), and

- the last split's program writes the rotated k and v at slot_mapping (skipped for slot < 0)
  and counts the new token itself, from registers;
- every program runs an online softmax (base 2) over its share of the cached tokens
  [0, context_len - 1), gathering them through the block table, for all query heads of its
  KV head at once (GQA: K/V are read once per group).

QK^T and PV run on tensor cores (tl.dot), the query heads of a group padded to 16 rows. With
one split the program writes the attention output directly; with S > 1 splits it writes a
normalised fp32 partial and its log2-sum-exp, and a tiny second kernel merges the S partials
(at batch >= ~2 * SMs / kv_heads one split suffices, so that kernel is only launched at small batch).

The unfused step runs the same attention without RoPE and the write (`paged_attention`, the plain
kernel): its q was rotated and its K/V written by kernels of their own (`gpu_probe.kernels.ops`), as
in vLLM's eager path, so it reads q from HBM and every one of the context's tokens from the cache.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from gpu_probe.kernels import launch
from gpu_probe.kernels.linear import pdl_supported

NEG_BIG = tl.constexpr(-1.0e30)
LOG2E = 1.4426950408889634


@triton.jit
def _load_kv_tile(table_row, k_ptr, v_ptr, t, hi, d, head_off, stride_slot, BLOCK_SIZE: tl.constexpr):
    """Cached K and V of tokens t (masked at hi), gathered through the block table."""
    mask_t = t < hi
    block = tl.load(table_row + t // BLOCK_SIZE, mask=mask_t, other=0).to(tl.int64)
    addr = (block * BLOCK_SIZE + t % BLOCK_SIZE) * stride_slot + head_off
    keys = tl.load(k_ptr + addr[:, None] + d[None, :], mask=mask_t[:, None], other=0.0)
    values = tl.load(v_ptr + addr[:, None] + d[None, :], mask=mask_t[:, None], other=0.0)
    return keys, values, mask_t


@triton.jit
def _attend_tile(q_dot, keys, values, mask_t, run_max, run_sum, acc, IEEE: tl.constexpr):
    """One online-softmax step (base 2) over a tile of cached tokens."""
    if IEEE:
        scores = tl.dot(q_dot, tl.trans(keys), input_precision="ieee")
    else:
        scores = tl.dot(q_dot, tl.trans(keys))  # [ROWS, BLOCK_N], fp32
    scores = tl.where(mask_t[None, :], scores, NEG_BIG)
    new_max = tl.maximum(run_max, tl.max(scores, axis=1))
    alpha = tl.exp2(run_max - new_max)
    p = tl.where(mask_t[None, :], tl.exp2(scores - new_max[:, None]), 0.0)
    run_sum = run_sum * alpha + tl.sum(p, axis=1)
    if IEEE:
        acc = acc * alpha[:, None] + tl.dot(p, values, input_precision="ieee")
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(values.dtype), values)
    return new_max, run_sum, acc


@triton.jit
def _paged_attention_kernel(
    qkv_ptr,
    pos_ptr,
    table_ptr,
    slot_ptr,
    ctx_ptr,
    k_ptr,
    v_ptr,
    cos_ptr,
    sin_ptr,
    out_ptr,
    lse_ptr,
    stride_qkv,
    stride_table,
    stride_slot,
    max_pos,
    n_splits,
    qk_scale,
    x_ptr,
    bias_ptr,
    stride_x,
    hidden,
    eps,
    N_HEADS: tl.constexpr,
    N_KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,
    ROWS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IEEE: tl.constexpr,
    PDL: tl.constexpr,
    NORM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BIAS: tl.constexpr,
):
    if PDL:
        gdc_launch_dependents()  # the next kernel may start streaming its weights now
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    HALF: tl.constexpr = HEAD_DIM // 2
    g = tl.arange(0, ROWS)  # query heads of this KV head, padded to a tensor-core tile
    mask_g = g < GROUP
    heads = kv_head * GROUP + g
    d = tl.arange(0, HEAD_DIM)
    d_swap = (d + HALF) % HEAD_DIM  # rotate_half(x)[d] = sign[d] * x[d_swap]
    sign = tl.where(d < HALF, -1.0, 1.0)
    head_off = kv_head * HEAD_DIM
    table_row = table_ptr + seq * stride_table

    # Up to the wait, nothing here is written by the QKV projection before us: the step's inputs,
    # the RoPE tables and this split's first tile of cached K/V (the new token's slot is not in it).
    pos = tl.minimum(tl.maximum(tl.load(pos_ptr + seq), 0), max_pos)
    cos = tl.load(cos_ptr + pos * HALF + d % HALF)
    sin = tl.load(sin_ptr + pos * HALF + d % HALF) * sign
    slot = tl.load(slot_ptr + seq).to(tl.int64)
    # This split's share of the cached tokens [0, context_len - 1), in whole BLOCK_N tiles.
    n_cached = tl.load(ctx_ptr + seq) - 1
    share = tl.cdiv(tl.cdiv(n_cached, n_splits), BLOCK_N) * BLOCK_N
    lo = split * share
    hi = tl.minimum(lo + share, n_cached)
    keys, values, mask_t = _load_kv_tile(
        table_row, k_ptr, v_ptr, lo + tl.arange(0, BLOCK_N), hi, d, head_off, stride_slot, BLOCK_SIZE
    )
    if PDL:
        gdc_wait()

    # NORM: qkv is x @ W^T of the un-normalised row x (the norm weight folded into W); its 1/rms is
    # applied here, to q, k and v, so the normalised x never exists (the wide path: the GEMM is cuBLAS's).
    inv_rms = 1.0
    if NORM:
        cols = tl.arange(0, BLOCK_H)
        x = tl.load(x_ptr + seq * stride_x + cols, mask=cols < hidden, other=0.0).to(tl.float32)
        inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / hidden + eps)
    row = qkv_ptr + seq * stride_qkv
    q = tl.load(row + heads[:, None] * HEAD_DIM + d[None, :], mask=mask_g[:, None], other=0.0).to(tl.float32)
    q_sw = tl.load(row + heads[:, None] * HEAD_DIM + d_swap[None, :], mask=mask_g[:, None], other=0.0).to(
        tl.float32
    )
    k_row = row + (N_HEADS + kv_head) * HEAD_DIM
    v_row = row + (N_HEADS + N_KV_HEADS + kv_head) * HEAD_DIM
    if BIAS:
        # q, k and v of the normalised row plus their bias (Qwen2), then RoPE: the bias is rotated with them.
        q_bias = bias_ptr + heads[:, None] * HEAD_DIM
        q = q * inv_rms + tl.load(q_bias + d[None, :], mask=mask_g[:, None], other=0.0).to(tl.float32)
        q_sw = q_sw * inv_rms + tl.load(q_bias + d_swap[None, :], mask=mask_g[:, None], other=0.0).to(
            tl.float32
        )
        q_rot = (q * cos[None, :] + q_sw * sin[None, :]) * qk_scale
        k_bias = bias_ptr + (N_HEADS + kv_head) * HEAD_DIM
        v_bias = bias_ptr + (N_HEADS + N_KV_HEADS + kv_head) * HEAD_DIM
        k = tl.load(k_row + d).to(tl.float32) * inv_rms + tl.load(k_bias + d).to(tl.float32)
        k_sw = tl.load(k_row + d_swap).to(tl.float32) * inv_rms + tl.load(k_bias + d_swap).to(tl.float32)
        k_new = k * cos + k_sw * sin
        v_new = tl.load(v_row + d).to(tl.float32) * inv_rms + tl.load(v_bias + d).to(tl.float32)
    else:
        # Rotate, and fold the softmax scale (in log2 units) and the norm's 1/rms into q once.
        q_rot = (q * cos[None, :] + q_sw * sin[None, :]) * (qk_scale * inv_rms)
        k_new = (
            tl.load(k_row + d).to(tl.float32) * cos + tl.load(k_row + d_swap).to(tl.float32) * sin
        ) * inv_rms
        v_new = tl.load(v_row + d).to(tl.float32) * inv_rms

    # The new token belongs to the last split: written to the cache, and scored from registers.
    is_last = split == n_splits - 1
    write = is_last & (slot >= 0) & (d < HEAD_DIM)
    tl.store(k_ptr + slot * stride_slot + head_off + d, k_new.to(k_ptr.dtype.element_ty), mask=write)
    tl.store(v_ptr + slot * stride_slot + head_off + d, v_new.to(v_ptr.dtype.element_ty), mask=write)

    score_new = tl.sum(q_rot * k_new[None, :], axis=1)  # [ROWS]
    run_max = tl.where(is_last, score_new, NEG_BIG)
    run_sum = tl.where(is_last, 1.0, 0.0) + tl.zeros((ROWS,), dtype=tl.float32)
    acc = tl.where(is_last, 1.0, 0.0) * v_new[None, :] + tl.zeros((ROWS, HEAD_DIM), dtype=tl.float32)
    q_dot = q_rot.to(k_ptr.dtype.element_ty)
    run_max, run_sum, acc = _attend_tile(q_dot, keys, values, mask_t, run_max, run_sum, acc, IEEE)
    for start in range(lo + BLOCK_N, hi, BLOCK_N):
        keys, values, mask_t = _load_kv_tile(
            table_row, k_ptr, v_ptr, start + tl.arange(0, BLOCK_N), hi, d, head_off, stride_slot, BLOCK_SIZE
        )
        run_max, run_sum, acc = _attend_tile(q_dot, keys, values, mask_t, run_max, run_sum, acc, IEEE)

    _store_split(
        out_ptr, lse_ptr, seq, split, n_splits, heads, d, mask_g, acc, run_max, run_sum, N_HEADS, HEAD_DIM
    )


@triton.jit
def _merge_splits_kernel(
    part_ptr,
    lse_ptr,
    out_ptr,
    n_splits,
    N_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    SPLITS_P2: tl.constexpr,
    PDL: tl.constexpr,
):
    """out[seq, head] = sum_s 2^(lse_s - lse) * part_s: one program per (sequence, head)."""
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
    seq = tl.program_id(0)
    head = tl.program_id(1)
    s = tl.arange(0, SPLITS_P2)
    d = tl.arange(0, HEAD_DIM)
    mask_s = s < n_splits
    lse = tl.load(lse_ptr + (seq * n_splits + s) * N_HEADS + head, mask=mask_s, other=NEG_BIG)
    weights = tl.exp2(lse - tl.max(lse, axis=0))
    weights = tl.where(mask_s, weights, 0.0)
    part = tl.load(
        part_ptr + ((seq * n_splits + s[:, None]) * N_HEADS + head) * HEAD_DIM + d[None, :],
        mask=mask_s[:, None],
        other=0.0,
    )
    merged = tl.sum(part * weights[:, None], axis=0) / tl.sum(weights, axis=0)
    tl.store(out_ptr + (seq * N_HEADS + head) * HEAD_DIM + d, merged.to(out_ptr.dtype.element_ty))


@triton.jit
def _paged_attention_plain_kernel(
    q_ptr,
    table_ptr,
    ctx_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    lse_ptr,
    stride_q,
    stride_table,
    stride_slot,
    n_splits,
    qk_scale,
    N_HEADS: tl.constexpr,
    GROUP: tl.constexpr,
    ROWS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IEEE: tl.constexpr,
):
    """Decode attention of already-rotated q over tokens [0, context_len) of the paged cache: program
    (sequence, KV head, split), the GQA group's query heads as one tensor-core tile."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    g = tl.arange(0, ROWS)
    mask_g = g < GROUP
    heads = kv_head * GROUP + g
    d = tl.arange(0, HEAD_DIM)
    table_row = table_ptr + seq * stride_table
    n_tokens = tl.load(ctx_ptr + seq)
    share = tl.cdiv(tl.cdiv(n_tokens, n_splits), BLOCK_N) * BLOCK_N
    lo = split * share
    hi = tl.minimum(lo + share, n_tokens)
    q = tl.load(
        q_ptr + seq * stride_q + heads[:, None] * HEAD_DIM + d[None, :], mask=mask_g[:, None], other=0.0
    )
    q_dot = (q.to(tl.float32) * qk_scale).to(k_ptr.dtype.element_ty)
    run_max = tl.zeros((ROWS,), dtype=tl.float32) + NEG_BIG
    run_sum = tl.zeros((ROWS,), dtype=tl.float32)
    acc = tl.zeros((ROWS, HEAD_DIM), dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        keys, values, mask_t = _load_kv_tile(
            table_row,
            k_ptr,
            v_ptr,
            start + tl.arange(0, BLOCK_N),
            hi,
            d,
            kv_head * HEAD_DIM,
            stride_slot,
            BLOCK_SIZE,
        )
        run_max, run_sum, acc = _attend_tile(q_dot, keys, values, mask_t, run_max, run_sum, acc, IEEE)
    _store_split(
        out_ptr, lse_ptr, seq, split, n_splits, heads, d, mask_g, acc, run_max, run_sum, N_HEADS, HEAD_DIM
    )


@triton.jit
def _store_split(
    out_ptr,
    lse_ptr,
    seq,
    split,
    n_splits,
    heads,
    d,
    mask_g,
    acc,
    run_max,
    run_sum,
    N_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    """A split's normalised output and its log2-sum-exp (NEG_BIG for a split with no tokens)."""
    has_any = run_sum > 0
    norm = tl.where(has_any, run_sum, 1.0)
    out_row = out_ptr + (seq * n_splits + split) * (N_HEADS * HEAD_DIM)
    tl.store(
        out_row + heads[:, None] * HEAD_DIM + d[None, :],
        (acc / norm[:, None]).to(out_ptr.dtype.element_ty),
        mask=mask_g[:, None],
    )
    tl.store(
        lse_ptr + (seq * n_splits + split) * N_HEADS + heads,
        tl.where(has_any, run_max + tl.log2(norm), NEG_BIG),
        mask=mask_g,
    )


class _AttentionPlan:
    """One attention call's launches at one key: the attention (and the merge of its splits where it splits),
    and the templates of its output, fp32 partials and log2-sum-exps."""

    __slots__ = ("attend", "merge", "out_like", "partial_like", "lse_like")

    def __init__(self, attend, merge, out_like, partial_like, lse_like):
        self.attend, self.merge = attend, merge
        self.out_like, self.partial_like, self.lse_like = out_like, partial_like, lse_like

    def outputs(self):
        """(out, partial, lse): with one split the kernel writes `out` itself; with more, fp32 partials."""
        out = torch.empty_like(self.out_like)
        partial = out if self.partial_like is None else torch.empty_like(self.partial_like)
        return out, partial, torch.empty_like(self.lse_like)

    def describe(self) -> tuple:
        likes = (self.out_like, self.partial_like, self.lse_like)
        shapes = tuple(None if t is None else (tuple(t.shape), t.dtype, t.device) for t in likes)
        return self.attend.describe(), self.merge.describe() if self.merge else None, shapes


def _plan_outputs(batch: int, n_heads: int, head_dim: int, n_splits: int, like: torch.Tensor):
    """Templates of (out, partial, lse): partial is None with one split (the kernel writes `out`)."""
    width = n_heads * head_dim
    out = launch.empty_template((batch, width), like.dtype, like.device)
    partial = None
    if n_splits > 1:
        partial = launch.empty_template((batch, n_splits, width), torch.float32, like.device)
    return out, partial, launch.empty_template((batch, n_splits, n_heads), torch.float32, like.device)


def _merge_launch(batch: int, n_splits: int, n_heads: int, head_dim: int, options: dict):
    """The merge of the splits' partials into out (slots: partial, lse, out); None with one split."""
    if n_splits == 1:
        return None
    meta = {
        "N_HEADS": n_heads,
        "HEAD_DIM": head_dim,
        "SPLITS_P2": triton.next_power_of_2(n_splits),
        "PDL": "launch_pdl" in options,
        **options,
    }
    return launch.Launch(
        _merge_splits_kernel, (batch, n_heads), (None, None, None, n_splits), meta, (0, 1, 2)
    )


def _check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, n_kv_heads: int, block_tables: torch.Tensor):
    num_blocks, block_size, kv_heads, head_dim = k_cache.shape
    if (
        kv_heads != n_kv_heads
        or block_tables.stride(1) != 1
        or k_cache.stride(0) != block_size * k_cache.stride(1)
        or k_cache.stride(1) != kv_heads * head_dim
        or k_cache.stride(2) != head_dim
        or k_cache.stride(3) != 1
        or v_cache.stride() != k_cache.stride()
        or v_cache.shape != k_cache.shape
    ):
        raise ValueError(
            f"paged attention: K/V caches [blocks, block_size, {n_kv_heads} KV heads, head_dim] of one "
            f"contiguous layout and a block table with contiguous rows, got {list(k_cache.shape)} with "
            f"strides {k_cache.stride()}"
        )
    return block_size, head_dim


_DECODE_PLANS: dict[tuple, _AttentionPlan] = {}
_PLAIN_PLANS: dict[tuple, _AttentionPlan] = {}


def paged_decode_attention(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    block_tables: torch.Tensor,
    slot_mapping: torch.Tensor,
    context_lens: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
    n_splits: int = 1,
    block_n: int | None = None,
    pdl: bool = False,
    norm_input: torch.Tensor | None = None,
    norm_eps: float = 1e-5,
    qkv_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """RoPE + paged K/V write + decode attention; returns [B, n_heads * head_dim] in qkv's dtype.

    n_splits > 1 splits each sequence's context over that many programs (one extra, small
    kernel merges them); n_splits = 1 writes the output directly. pdl: programmatic dependent
    launch (Hopper+; ignored elsewhere), as in linear.py. norm_input: the un-normalised rows x
    that qkv was computed from with the RMSNorm weight folded in: q, k and v are scaled by each
    row's 1/rms(x) here (the wide path, whose QKV GEMM is cuBLAS's). qkv_bias: [(heads + 2 KV heads) *
    head_dim], added to q, k and v after that scale and before RoPE (the wide path of a model with one).
    """
    key = (
        qkv.shape,
        qkv.stride(),
        qkv.dtype,
        positions.dtype,
        block_tables.shape,
        block_tables.stride(),
        block_tables.dtype,
        slot_mapping.dtype,
        context_lens.dtype,
        k_cache.shape,
        k_cache.stride(),
        k_cache.dtype,
        v_cache.shape,
        v_cache.stride(),
        v_cache.dtype,
        cos.shape,
        cos.dtype,
        sin.dtype,
        n_heads,
        n_kv_heads,
        n_splits,
        block_n,
        pdl,
        None if norm_input is None else (norm_input.shape, norm_input.stride(), norm_input.dtype),
        norm_eps,
        None if qkv_bias is None else (qkv_bias.shape, qkv_bias.stride(), qkv_bias.dtype),
        qkv.get_device(),
    )
    plan = _DECODE_PLANS.get(key)
    if plan is None or launch.VERIFY:
        fresh = _decode_plan(
            qkv,
            block_tables,
            k_cache,
            v_cache,
            cos,
            n_heads,
            n_kv_heads,
            n_splits,
            block_n,
            pdl,
            norm_input,
            norm_eps,
            qkv_bias,
        )
        plan = launch.remember(_DECODE_PLANS, key, fresh)
    out, partial, lse = plan.outputs()
    x = norm_input if norm_input is not None else qkv
    bias = qkv_bias if qkv_bias is not None else qkv
    plan.attend(
        qkv,
        positions,
        block_tables,
        slot_mapping,
        context_lens,
        k_cache,
        v_cache,
        cos,
        sin,
        partial,
        lse,
        x,
        bias,
    )
    if plan.merge is not None:
        plan.merge(partial, lse, out)
    return out


def _decode_plan(
    qkv,
    block_tables,
    k_cache,
    v_cache,
    cos,
    n_heads,
    n_kv_heads,
    n_splits,
    block_n,
    pdl,
    norm_input,
    norm_eps,
    qkv_bias=None,
) -> _AttentionPlan:
    batch = qkv.shape[0]
    block_size, head_dim = _check_cache(k_cache, v_cache, n_kv_heads, block_tables)
    if qkv.shape[1] != (n_heads + 2 * n_kv_heads) * head_dim or qkv.stride(1) != 1:
        raise ValueError(
            f"paged_decode_attention: qkv [{batch}, (heads + 2 KV heads) * head_dim] with contiguous rows"
        )
    if qkv_bias is not None and (
        tuple(qkv_bias.shape) != (qkv.shape[1],) or qkv_bias.stride(0) != 1 or qkv_bias.dtype != qkv.dtype
    ):
        raise ValueError(
            f"paged_decode_attention: qkv_bias must be a contiguous [{qkv.shape[1]}] {qkv.dtype} tensor, got "
            f"{list(qkv_bias.shape)} {qkv_bias.dtype}"
        )
    group = n_heads // n_kv_heads
    if block_n is None:
        block_n = 32 if n_splits > 1 else 64
    pdl = pdl and pdl_supported(qkv.device)
    options = (
        {"launch_pdl": True} if pdl else {}
    )  # only named when set: the CPU interpreter knows no such option
    args = (
        *(None,)
        * 11,  # qkv, positions, block_tables, slot_mapping, context_lens, k/v caches, cos, sin, partial, lse
        qkv.stride(0),
        block_tables.stride(0),
        k_cache.stride(1),
        cos.shape[0] - 1,
        n_splits,
        LOG2E / math.sqrt(head_dim),
        None,  # x: the norm's input, else qkv again
        None,  # the bias on q, k and v, else qkv again
        norm_input.stride(0) if norm_input is not None else 0,
        norm_input.shape[1] if norm_input is not None else 1,
        norm_eps,
    )
    meta = {
        "N_HEADS": n_heads,
        "N_KV_HEADS": n_kv_heads,
        "GROUP": group,
        "ROWS": max(16, triton.next_power_of_2(group)),
        "HEAD_DIM": head_dim,
        "BLOCK_SIZE": block_size,
        "BLOCK_N": block_n,
        "IEEE": qkv.dtype == torch.float32,
        "PDL": pdl,
        "NORM": norm_input is not None,
        "BLOCK_H": triton.next_power_of_2(norm_input.shape[1]) if norm_input is not None else 1,
        "BIAS": qkv_bias is not None,
        "num_warps": 4,
        **options,
    }
    slots = (*range(11), 17, 18)
    attend = launch.Launch(_paged_attention_kernel, (batch, n_kv_heads, n_splits), args, meta, slots)
    merge = _merge_launch(batch, n_splits, n_heads, head_dim, options)
    return _AttentionPlan(attend, merge, *_plan_outputs(batch, n_heads, head_dim, n_splits, qkv))


def paged_attention(
    q: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
    n_splits: int = 1,
    block_n: int | None = None,
) -> torch.Tensor:
    """Decode attention of rotated q[B, n_heads * head_dim] over each row's [0, context_len) cached tokens
    (the new token already written); returns [B, n_heads * head_dim] in q's dtype. The unfused step's."""
    key = (
        q.shape,
        q.stride(),
        q.dtype,
        block_tables.shape,
        block_tables.stride(),
        block_tables.dtype,
        context_lens.dtype,
        k_cache.shape,
        k_cache.stride(),
        k_cache.dtype,
        v_cache.shape,
        v_cache.stride(),
        v_cache.dtype,
        n_heads,
        n_kv_heads,
        n_splits,
        block_n,
        q.get_device(),
    )
    plan = _PLAIN_PLANS.get(key)
    if plan is None or launch.VERIFY:
        fresh = _plain_plan(q, block_tables, k_cache, v_cache, n_heads, n_kv_heads, n_splits, block_n)
        plan = launch.remember(_PLAIN_PLANS, key, fresh)
    out, partial, lse = plan.outputs()
    plan.attend(q, block_tables, context_lens, k_cache, v_cache, partial, lse)
    if plan.merge is not None:
        plan.merge(partial, lse, out)
    return out


def _plain_plan(q, block_tables, k_cache, v_cache, n_heads, n_kv_heads, n_splits, block_n) -> _AttentionPlan:
    batch = q.shape[0]
    block_size, head_dim = _check_cache(k_cache, v_cache, n_kv_heads, block_tables)
    if q.shape[1] != n_heads * head_dim or q.stride(1) != 1:
        raise ValueError(f"paged_attention: q [{batch}, {n_heads} heads * {head_dim}] with contiguous rows")
    group = n_heads // n_kv_heads
    args = (
        *(None,) * 7,  # q, block_tables, context_lens, k/v caches, partial, lse
        q.stride(0),
        block_tables.stride(0),
        k_cache.stride(1),
        n_splits,
        LOG2E / math.sqrt(head_dim),
    )
    meta = {
        "N_HEADS": n_heads,
        "GROUP": group,
        "ROWS": max(16, triton.next_power_of_2(group)),
        "HEAD_DIM": head_dim,
        "BLOCK_SIZE": block_size,
        "BLOCK_N": block_n or (32 if n_splits > 1 else 64),
        "IEEE": q.dtype == torch.float32,
        "num_warps": 4,
    }
    attend = launch.Launch(_paged_attention_plain_kernel, (batch, n_kv_heads, n_splits), args, meta, range(7))
    merge = _merge_launch(batch, n_splits, n_heads, head_dim, {})
    return _AttentionPlan(attend, merge, *_plan_outputs(batch, n_heads, head_dim, n_splits, q))


def paged_decode_attention_reference(
    qkv,
    positions,
    block_tables,
    slot_mapping,
    context_lens,
    k_cache,
    v_cache,
    cos,
    sin,
    n_heads: int,
    n_kv_heads: int,
    norm_input=None,
    norm_eps: float = 1e-5,
    qkv_bias=None,
) -> torch.Tensor:
    """Plain PyTorch, fp32, one sequence at a time: rotate, write the cache, attend. Returns [B, H*D]."""
    if norm_input is not None:
        x = norm_input.float()
        qkv = qkv.float() * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm_eps)
    if qkv_bias is not None:
        qkv = qkv.float() + qkv_bias.float()
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
