"""One GEMM kernel, y = x @ W^T, with the fusions a decoder layer needs around its projections.

- rms_eps: x is the un-normalised residual stream and W already holds the RMSNorm weight
  (folded per input column). The kernel accumulates sum(x^2) from the x tiles it streams
  anyway and scales each output row by 1/rms in the epilogue: the normalised x never exists.
- swiglu: W is [gate; up] packed along the output dim (2F rows); each program computes the
  same F-columns of gate and up with two accumulators and stores silu(gate) * up.
- residual: the epilogue adds a residual tensor (the o_proj and down_proj residual adds).
- split_lse: x is [M, S, K] fp32 attention partials with their log2-sum-exp [M, S, heads];
  the prologue merges the S splits into the attention output before it meets W.

Accumulation is fp32 (tl.dot); at batch 1 this is a GEMV padded to a 16-row tile, which
costs nothing extra because the step is bound by reading W.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

# "Minus infinity" that stays finite, so exp2(a - b) never computes inf - inf.
NEG_BIG = tl.constexpr(-1.0e30)


@triton.jit
def _fused_linear_kernel(a_ptr, w_ptr, out_ptr, res_ptr, lse_ptr,
                         M, N, K, up_offset,
                         stride_am, stride_as, stride_wn, stride_om, stride_rm, stride_lm,
                         n_splits, head_dim, eps,
                         NORM: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
                         MERGE: tl.constexpr, IEEE: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_n = tl.program_id(0)  # N first: neighbouring programs share the same x rows
    pid_m = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask_k = offs_k < K
        mask_a = mask_m[:, None] & mask_k[None, :]
        if MERGE:
            # Online log-sum-exp merge of the attention splits, per (row, head) lane.
            run_max = tl.full((BLOCK_M, BLOCK_K), NEG_BIG, dtype=tl.float32)
            run_sum = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
            merged = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
            for s in range(n_splits):
                lse = tl.load(lse_ptr + offs_m[:, None] * stride_lm + s * (K // head_dim) + offs_k[None, :] // head_dim,
                              mask=mask_a, other=NEG_BIG)
                part = tl.load(a_ptr + offs_m[:, None] * stride_am + s * stride_as + offs_k[None, :],
                               mask=mask_a, other=0.0)
                new_max = tl.maximum(run_max, lse)
                alpha = tl.exp2(run_max - new_max)
                beta = tl.exp2(lse - new_max)
                merged = merged * alpha + part * beta
                run_sum = run_sum * alpha + beta
                run_max = new_max
            a = (merged / run_sum).to(w_ptr.dtype.element_ty)
        else:
            a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :], mask=mask_a, other=0.0)
        if NORM:
            a32 = a.to(tl.float32)
            sum_sq += tl.sum(a32 * a32, axis=1)
        w_tile = tl.load(w_ptr + offs_n[None, :] * stride_wn + offs_k[:, None],
                         mask=mask_n[None, :] & mask_k[:, None], other=0.0)
        if IEEE:
            acc = tl.dot(a, w_tile, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, w_tile, acc)
        if SWIGLU:
            up_tile = tl.load(w_ptr + (offs_n[None, :] + up_offset) * stride_wn + offs_k[:, None],
                              mask=mask_n[None, :] & mask_k[:, None], other=0.0)
            if IEEE:
                acc_up = tl.dot(a, up_tile, acc_up, input_precision="ieee")
            else:
                acc_up = tl.dot(a, up_tile, acc_up)
    if NORM:
        inv_rms = tl.rsqrt(sum_sq / K + eps)
        acc = acc * inv_rms[:, None]
        acc_up = acc_up * inv_rms[:, None]
    if SWIGLU:
        acc = acc * tl.sigmoid(acc) * acc_up
    mask_out = mask_m[:, None] & mask_n[None, :]
    if RESIDUAL:
        res = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :], mask=mask_out, other=0.0)
        acc = acc + res.to(tl.float32)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=mask_out)


def _tile_config(m: int, n: int, k: int, swiglu: bool, num_sms: int) -> dict:
    """Tiles by shape (no autotuning: deterministic, and nothing to tune inside a graph capture).

    Small M is a GEMV: one 16-row tile and output tiles narrow enough to give every SM work,
    since the time is all in streaming W.
    """
    block_m = 16 if m <= 16 else 32 if m <= 32 else 64
    m_tiles = -(-m // block_m)
    block_n = 16
    for candidate in (128, 64, 32):
        if m_tiles * -(-n // candidate) >= num_sms:
            block_n = candidate
            break
    if swiglu:
        block_n = min(block_n, 64)
    block_k = 128 if m <= 32 else 64
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "num_warps": 4, "num_stages": 4}


_SMS: dict[int, int] = {}


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 1  # Triton's CPU interpreter runs programs one by one: the fewer, the faster
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SMS:
        _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SMS[index]


def fused_linear(x: torch.Tensor, weight: torch.Tensor, *, rms_eps: float | None = None, swiglu: bool = False,
                 residual: torch.Tensor | None = None, split_lse: torch.Tensor | None = None,
                 config: dict | None = None) -> torch.Tensor:
    """x[M, K] (or partials [M, S, K] with split_lse [M, S, heads]) @ weight[N or 2F, K]^T, fused; see module doc."""
    n_out = weight.shape[0] // 2 if swiglu else weight.shape[0]
    k = weight.shape[1]
    if split_lse is not None:
        m, n_splits = x.shape[0], x.shape[1]
        head_dim = k // split_lse.shape[2]
        stride_am, stride_as, stride_lm = x.stride(0), x.stride(1), split_lse.stride(0)
    else:
        m, n_splits, head_dim = x.shape[0], 1, 1
        stride_am, stride_as, stride_lm = x.stride(0), 0, 0
    assert x.stride(-1) == 1 and weight.stride(1) == 1 and x.shape[-1] == k
    out = torch.empty((m, n_out), dtype=weight.dtype, device=weight.device)
    cfg = config or _tile_config(m, n_out, k, swiglu, _num_sms(weight.device))
    grid = (triton.cdiv(n_out, cfg["BLOCK_N"]), triton.cdiv(m, cfg["BLOCK_M"]))
    res = residual if residual is not None else out
    lse = split_lse if split_lse is not None else out
    _fused_linear_kernel[grid](
        x, weight, out, res, lse, m, n_out, k, n_out,
        stride_am, stride_as, weight.stride(0), out.stride(0), res.stride(0), stride_lm,
        n_splits, head_dim, rms_eps if rms_eps is not None else 0.0,
        NORM=rms_eps is not None, SWIGLU=swiglu, RESIDUAL=residual is not None, MERGE=split_lse is not None,
        IEEE=weight.dtype == torch.float32, **cfg)
    return out


# ---- plain-PyTorch references ------------------------------------------------------------------
def merge_splits_reference(partial: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """Combine split attention outputs [M, S, heads*D] weighted by their log2-sum-exp [M, S, heads]."""
    m, s, width = partial.shape
    heads = lse.shape[2]
    weights = torch.softmax(lse.float() * torch.log(torch.tensor(2.0)), dim=1)  # 2^lse normalised over S
    merged = (partial.float().view(m, s, heads, width // heads) * weights[..., None]).sum(1)
    return merged.reshape(m, width)


def fused_linear_reference(x: torch.Tensor, weight: torch.Tensor, *, rms_eps: float | None = None,
                           swiglu: bool = False, residual: torch.Tensor | None = None,
                           split_lse: torch.Tensor | None = None) -> torch.Tensor:
    """The same function, one op at a time in fp32."""
    a = merge_splits_reference(x, split_lse) if split_lse is not None else x.float()
    y = a @ weight.float().t()
    if rms_eps is not None:
        y = y * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + rms_eps)
    if swiglu:
        gate, up = y.chunk(2, dim=-1)
        y = torch.nn.functional.silu(gate) * up
    if residual is not None:
        y = y + residual.float()
    return y.to(weight.dtype)
