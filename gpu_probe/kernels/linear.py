"""One GEMM, y = x @ W^T, with the fusions a decoder layer needs around its projections.

- rms_eps: x is the un-normalised residual stream and W already holds the RMSNorm weight
  (folded per input column). The kernel accumulates sum(x^2) from the x tiles it streams
  anyway and scales each output row by 1/rms in the epilogue: the normalised x never exists.
- swiglu: W is [gate; up] packed along the output dim (2F rows); each program computes the
  same F-columns of gate and up with two accumulators and stores silu(gate) * up.
- residual: the epilogue adds a residual tensor (the o_proj and down_proj residual adds).
- bias: the epilogue adds a bias per output column (Qwen2's q, k and v), after the norm's 1/rms scale:
  (x / rms * g) @ W^T + b == (x @ (W * g)^T) / rms + b. A constexpr flag: without it the kernels are the
  ones they were, the bias pointer an unused stand-in.

Two kernels share those epilogues. At batch <= GEMV_MAX_ROWS a GEMV on CUDA cores with a few
output rows per program (hundreds of programs, all resident) streams W. Above it a tensor-core
tile computes W_tile @ x_tile^T ("swap AB", as decode GEMM kernels do): the weight rows fill the
MMA's wide side and the batch rows, padded to 16, its narrow side, so a batch of 5 costs the same
weight stream as a batch of 16, and the tile can be as narrow in weight rows as keeps every SM
streaming (`_tile_config`). Accumulation is fp32 in both.

Split K: a tile of 64 weight rows gives the 1b preset's QKV, O and down projections only 32-64 programs on
132 SMs, and a short grid cannot pull the weights at the copy bandwidth (QKV at 8 rows: 1.7 of 4.1 TB/s on
the H200). Such GEMMs split K over up to SPLIT_K_MAX programs per tile: each writes its fp32 partial sums to
a workspace and takes a ticket from the tile's counter; the last to arrive adds the partials in split order
(the same bits whichever finishes last), runs the epilogue and sets the counter back to zero for the next
call or graph replay. The norm's sum of squares is split the same way.

pdl (programmatic dependent launch, Hopper+): the kernel may start while the previous kernel in
the stream is still finishing. Everything it reads before `gdc_wait` must not depend on that
kernel -- here only W: both kernels load their first weight tile, then wait for x.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from gpu_probe.kernels import launch

GEMV_MAX_ROWS = 4  # above this the 3-D broadcast of the GEMV costs more registers than it saves
# Above this the fused step's GEMMs are cuBLAS's (`wide_step` in gpu_probe.model): there the tile lost to cuBLAS
# and its graph replays stopped being bit-identical to eager steps (kernels/NOTES.md, "linear.py's constants").
TILE_MAX_ROWS = 64
# (n_out, k, swiglu) -> (weight rows per program, warps) for the 1b preset's projections at batch <= 2, where
# they beat the rule's (at batch 4 they lost, so the rule keeps batches 3-4; kernels/NOTES.md). The small
# preset's shapes have other K and never match.
GEMV_TILES_1B = {(3072, 2048, False): (2, 1), (8192, 2048, True): (2, 1), (2048, 8192, False): (4, 4)}
# Shapes the tensor-core kernel runs unpipelined (num_stages=1), each (n_out, k, swiglu). The previous
# tile (x rows on the MMA's wide side, W loaded K-major into a transposed tile) gave different bits from
# call to call when software-pipelined, for every SwiGLU shape and the 1b LM head (kernels/NOTES.md, run 6);
# `tools/kernel_sweep.py` checks each candidate tile of this kernel for that before it is chosen.
UNPIPELINED: frozenset[tuple[int, int, bool]] = frozenset()
# (n_out, k, swiglu, batch tile) -> (weight rows per program, BLOCK_K, warps, stages): the fastest tile of
# `tools/kernel_sweep.py` that gave the same bits five times over, for both presets' GEMMs at 16, 32 and 64 rows:
# wide tiles stream W faster than the narrow ones the rule picks to give every SM a program (kernels/NOTES.md).
TILES: dict[tuple[int, int, bool, int], tuple[int, int, int, int]] = {
    (1024, 1024, False, 16): (64, 256, 4, 3),
    (1024, 1024, False, 32): (64, 256, 4, 3),
    (1024, 1024, False, 64): (64, 128, 4, 3),
    (1024, 2816, False, 16): (64, 256, 4, 3),
    (1024, 2816, False, 32): (64, 256, 4, 3),
    (1024, 2816, False, 64): (64, 128, 4, 3),
    (2048, 2048, False, 16): (64, 256, 4, 3),
    (2048, 2048, False, 32): (64, 256, 4, 3),
    (2048, 2048, False, 64): (64, 128, 4, 3),
    (2048, 8192, False, 16): (32, 256, 4, 3),
    (2048, 8192, False, 32): (32, 256, 4, 3),
    (2048, 8192, False, 64): (64, 128, 4, 3),
    (2816, 1024, True, 16): (64, 128, 4, 3),
    (2816, 1024, True, 32): (64, 128, 4, 3),
    (2816, 1024, True, 64): (64, 128, 4, 3),
    (3072, 1024, False, 16): (64, 256, 4, 3),
    (3072, 1024, False, 32): (64, 256, 4, 3),
    (3072, 1024, False, 64): (64, 64, 4, 3),
    (3072, 2048, False, 16): (64, 256, 4, 3),
    (3072, 2048, False, 32): (64, 256, 4, 3),
    (3072, 2048, False, 64): (64, 128, 4, 3),
    (8192, 2048, True, 16): (64, 128, 4, 3),
    (8192, 2048, True, 32): (64, 128, 4, 3),
    (8192, 2048, True, 64): (64, 128, 4, 3),
    (32000, 1024, False, 16): (64, 128, 4, 1),
    (32000, 1024, False, 32): (64, 128, 4, 3),
    (32000, 1024, False, 64): (128, 64, 8, 3),
    (128256, 2048, False, 16): (64, 128, 4, 3),
    (128256, 2048, False, 32): (64, 128, 4, 3),
}
# The tensor-core tile loads its first W tile before its PDL wait, as the GEMV does.
TILE_PDL = True
SMEM_BUDGET = 160 * 1024  # bytes of pipelined tiles a tensor-core program may stage (of ~228 KB on Hopper)
SPLIT_K_MAX = 8  # more splits than this and the partials' traffic starts to count against what they save
# (n_out, k, swiglu, batch tile) -> splits where `tools/split_k_sweep.py` found another count than the rule's
# (`split_k`) over 3 % faster per launch; the small preset's QKV and O unsplit and its down in 4 are where the
# rule's splits lost in the whole step (kernels/NOTES.md).
SPLITS: dict[tuple[int, int, bool, int], int] = {
    (1024, 1024, False, 64): 1,
    (1024, 2816, False, 64): 4,
    (2048, 2048, False, 16): 3,
    (2048, 8192, False, 16): 8,
    (2048, 8192, False, 32): 6,
    (3072, 1024, False, 16): 1,
    (3072, 1024, False, 32): 1,
    (3072, 1024, False, 64): 1,
    (3072, 2048, False, 16): 1,
    (3072, 2048, False, 64): 4,
}


def runs_unpipelined(n_out: int, k: int, swiglu: bool) -> bool:
    """Whether the tensor-core kernel runs this shape unpipelined (a result file records it per shape)."""
    return (n_out, k, swiglu) in UNPIPELINED


def unpipelined_gemms(cfg) -> list[list]:
    """[n_out, k, swiglu] of the decoder's fused GEMMs (QKV, O, gate/up, down, LM head) that run
    unpipelined: a probe result names them (`settings.unpipelined_gemms`) for the calibration."""
    h, q, kv, f = cfg.hidden, cfg.q_dim, cfg.kv_dim, cfg.ffn
    shapes = ((q + 2 * kv, h, False), (h, q, False), (f, h, True), (h, f, False), (cfg.vocab, h, False))
    return [list(shape) for shape in dict.fromkeys(shapes) if runs_unpipelined(*shape)]


def split_k_gemms(cfg, device: torch.device) -> list[list]:
    """[n_out, k, swiglu, batch tile, splits] of the decoder's fused GEMMs that split K on `device`: a probe
    result names them (`settings.split_k_gemms`)."""
    num_sms = _num_sms(torch.device(device))
    h, q, kv, f = cfg.hidden, cfg.q_dim, cfg.kv_dim, cfg.ffn
    shapes = ((q + 2 * kv, h, False), (h, q, False), (f, h, True), (h, f, False), (cfg.vocab, h, False))
    out = []
    for n, k, swiglu in dict.fromkeys(shapes):
        for rows in (16, 32, 64):
            splits = _tile_config(rows, n, k, swiglu, num_sms)["SPLIT_K"]
            if splits > 1:
                out.append([n, k, swiglu, rows, splits])
    return out


@triton.jit
def _epilogue(
    acc,
    acc_up,
    sum_sq,
    offs_m,
    offs_n,
    mask_m,
    mask_n,
    K,
    eps,
    out_ptr,
    res_ptr,
    bias_ptr,
    stride_om,
    stride_rm,
    NORM: tl.constexpr,
    SWIGLU: tl.constexpr,
    RESIDUAL: tl.constexpr,
    BIAS: tl.constexpr,
):
    if NORM:
        inv_rms = tl.rsqrt(sum_sq / K + eps)
        acc = acc * inv_rms[:, None]
        acc_up = acc_up * inv_rms[:, None]
    if BIAS:  # after the norm's scale: the bias belongs to the projection of the normalised x
        acc = acc + tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    if SWIGLU:
        acc = acc * tl.sigmoid(acc) * acc_up
    mask_out = mask_m[:, None] & mask_n[None, :]
    if RESIDUAL:
        res = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :], mask=mask_out, other=0.0)
        acc = acc + res.to(tl.float32)
    tl.store(
        out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
        acc.to(out_ptr.dtype.element_ty),
        mask=mask_out,
    )


@triton.jit
def _weight_tile(w_rows, up_shift, offs_k, mask_n, K, SWIGLU: tl.constexpr):
    """One [BLOCK_N, BLOCK_K] tile of W, K-contiguous (and of the up half when SWIGLU; else W again, unused):
    both kernels stream W this way."""
    mask = mask_n[:, None] & (offs_k < K)[None, :]
    w = tl.load(w_rows + offs_k[None, :], mask=mask, other=0.0)
    up = w
    if SWIGLU:
        up = tl.load(w_rows + up_shift + offs_k[None, :], mask=mask, other=0.0)
    return w, up


@triton.jit
def _gemv_accumulate(
    a_ptr,
    stride_am,
    offs_m,
    mask_m,
    offs_k,
    K,
    w,
    up,
    acc,
    acc_up,
    sum_sq,
    NORM: tl.constexpr,
    SWIGLU: tl.constexpr,
):
    a = tl.load(
        a_ptr + offs_m[:, None] * stride_am + offs_k[None, :],
        mask=mask_m[:, None] & (offs_k < K)[None, :],
        other=0.0,
    ).to(tl.float32)
    if NORM:
        sum_sq += tl.sum(a * a, axis=1)
    acc += tl.sum(a[:, None, :] * w.to(tl.float32)[None, :, :], axis=2)
    if SWIGLU:
        acc_up += tl.sum(a[:, None, :] * up.to(tl.float32)[None, :, :], axis=2)
    return acc, acc_up, sum_sq


@triton.jit
def _gemv_kernel(
    a_ptr,
    w_ptr,
    out_ptr,
    res_ptr,
    bias_ptr,
    M,
    N,
    K,
    up_offset,
    stride_am,
    stride_wn,
    stride_om,
    stride_rm,
    eps,
    NORM: tl.constexpr,
    SWIGLU: tl.constexpr,
    RESIDUAL: tl.constexpr,
    BIAS: tl.constexpr,
    PDL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    w_rows = w_ptr + offs_n[:, None] * stride_wn
    up_shift = up_offset * stride_wn
    if PDL:
        gdc_launch_dependents()  # let the next kernel start its own weight loads too
    w, up = _weight_tile(w_rows, up_shift, offs_k, mask_n, K, SWIGLU)  # before the wait: W is not an input
    if PDL:
        gdc_wait()  # x and the residual come from earlier kernels
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc, acc_up, sum_sq = _gemv_accumulate(
        a_ptr, stride_am, offs_m, mask_m, offs_k, K, w, up, acc, acc_up, sum_sq, NORM, SWIGLU
    )
    for k0 in range(BLOCK_K, K, BLOCK_K):
        w, up = _weight_tile(w_rows, up_shift, k0 + offs_k, mask_n, K, SWIGLU)
        acc, acc_up, sum_sq = _gemv_accumulate(
            a_ptr, stride_am, offs_m, mask_m, k0 + offs_k, K, w, up, acc, acc_up, sum_sq, NORM, SWIGLU
        )
    _epilogue(
        acc,
        acc_up,
        sum_sq,
        offs_m,
        offs_n,
        mask_m,
        mask_n,
        K,
        eps,
        out_ptr,
        res_ptr,
        bias_ptr,
        stride_om,
        stride_rm,
        NORM,
        SWIGLU,
        RESIDUAL,
        BIAS,
    )


@triton.jit
def _tile_accumulate(
    a_rows,
    offs_k,
    mask_m,
    K,
    w,
    up,
    acc,
    acc_up,
    sum_sq,
    NORM: tl.constexpr,
    SWIGLU: tl.constexpr,
    IEEE: tl.constexpr,
):
    """acc[BLOCK_N, BLOCK_M] += W_tile @ x_tile^T (and the up half), and each x row's sum of squares."""
    x = tl.load(a_rows + offs_k[None, :], mask=mask_m[:, None] & (offs_k < K)[None, :], other=0.0)
    if NORM:
        x32 = x.to(tl.float32)
        sum_sq += tl.sum(x32 * x32, axis=1)
    x_t = tl.trans(x)
    if IEEE:
        acc = tl.dot(w, x_t, acc, input_precision="ieee")
    else:
        acc = tl.dot(w, x_t, acc)
    if SWIGLU:
        if IEEE:
            acc_up = tl.dot(up, x_t, acc_up, input_precision="ieee")
        else:
            acc_up = tl.dot(up, x_t, acc_up)
    return acc, acc_up, sum_sq


@triton.jit
def _split_k_reduce(
    acc,
    acc_up,
    sum_sq,
    partials_ptr,
    sum_sq_ptr,
    tickets_ptr,
    SWIGLU: tl.constexpr,
    NORM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    """Store this split's partials, take a ticket; the tile's last split returns (True, the sums over every
    split in split order), the others (False, their own partials)."""
    tile = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
    tiles = tl.num_programs(0) * tl.num_programs(1)
    cell = tl.arange(0, BLOCK_N)[:, None] * BLOCK_M + tl.arange(0, BLOCK_M)[None, :]
    slot = (tl.program_id(2) * tiles + tile).to(tl.int64)
    up_half = (SPLIT_K * tiles).to(tl.int64) * (BLOCK_N * BLOCK_M)  # the up accumulators follow the gate's
    tl.store(partials_ptr + slot * (BLOCK_N * BLOCK_M) + cell, acc)
    if SWIGLU:
        tl.store(partials_ptr + up_half + slot * (BLOCK_N * BLOCK_M) + cell, acc_up)
    if NORM:
        tl.store(sum_sq_ptr + slot * BLOCK_M + tl.arange(0, BLOCK_M), sum_sq)
    tl.debug_barrier()  # every thread's partials are written before the ticket releases them
    ticket = tl.atomic_add(tickets_ptr + tile, 1, sem="acq_rel", scope="gpu")
    last = ticket == SPLIT_K - 1
    if last:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        acc_up = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for split in tl.static_range(SPLIT_K):  # in split order, not arrival order: the same bits every call
            at = (split * tiles + tile).to(tl.int64)
            acc += tl.load(partials_ptr + at * (BLOCK_N * BLOCK_M) + cell, cache_modifier=".cg")
            if SWIGLU:
                acc_up += tl.load(
                    partials_ptr + up_half + at * (BLOCK_N * BLOCK_M) + cell, cache_modifier=".cg"
                )
            if NORM:
                sum_sq += tl.load(sum_sq_ptr + at * BLOCK_M + tl.arange(0, BLOCK_M), cache_modifier=".cg")
        tl.atomic_xchg(tickets_ptr + tile, 0, sem="relaxed", scope="gpu")  # ready for the next call
    return last, acc, acc_up, sum_sq


@triton.jit
def _fused_linear_kernel(
    a_ptr,
    w_ptr,
    out_ptr,
    res_ptr,
    bias_ptr,
    M,
    N,
    K,
    up_offset,
    stride_am,
    stride_wn,
    stride_om,
    stride_rm,
    eps,
    partials_ptr,
    sum_sq_ptr,
    tickets_ptr,
    k_per_split,
    NORM: tl.constexpr,
    SWIGLU: tl.constexpr,
    RESIDUAL: tl.constexpr,
    BIAS: tl.constexpr,
    IEEE: tl.constexpr,
    PDL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    """Program (weight-row block, batch-row block, K split): out[rows, cols] for BLOCK_N output columns
    (with SPLIT_K > 1, the partial sums of its share of K; the tile's last split writes out)."""
    pid_n = tl.program_id(0)  # N first: neighbouring programs share the same x rows
    pid_m = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if SPLIT_K == 1:
        k_start = 0
        k_end = K
    else:  # k_per_split is a multiple of BLOCK_K: no K tile straddles two splits
        k_start = tl.program_id(2) * k_per_split
        k_end = tl.minimum(K, k_start + k_per_split)
    offs_k = k_start + tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    w_rows = w_ptr + offs_n[:, None] * stride_wn
    a_rows = a_ptr + offs_m[:, None] * stride_am
    up_shift = up_offset * stride_wn
    if PDL:
        gdc_launch_dependents()
    w, up = _weight_tile(w_rows, up_shift, offs_k, mask_n, K, SWIGLU)  # before the wait: W is not an input
    if PDL:
        gdc_wait()
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc, acc_up, sum_sq = _tile_accumulate(
        a_rows, offs_k, mask_m, K, w, up, acc, acc_up, sum_sq, NORM, SWIGLU, IEEE
    )
    for k0 in range(BLOCK_K, k_end - k_start, BLOCK_K):
        w, up = _weight_tile(w_rows, up_shift, k0 + offs_k, mask_n, K, SWIGLU)
        acc, acc_up, sum_sq = _tile_accumulate(
            a_rows, k0 + offs_k, mask_m, K, w, up, acc, acc_up, sum_sq, NORM, SWIGLU, IEEE
        )
    if SPLIT_K > 1:  # only the tile's last split goes on to write out
        last, acc, acc_up, sum_sq = _split_k_reduce(
            acc,
            acc_up,
            sum_sq,
            partials_ptr,
            sum_sq_ptr,
            tickets_ptr,
            SWIGLU,
            NORM,
            BLOCK_M,
            BLOCK_N,
            SPLIT_K,
        )
        mask_m = mask_m & last
    _epilogue(
        tl.trans(acc),
        tl.trans(acc_up),
        sum_sq,
        offs_m,
        offs_n,
        mask_m,
        mask_n,
        K,
        eps,
        out_ptr,
        res_ptr,
        bias_ptr,
        stride_om,
        stride_rm,
        NORM,
        SWIGLU,
        RESIDUAL,
        BIAS,
    )


@functools.cache  # shared by every fused_linear key of one shape (and by the sweeps and tests)
def _tile_config(m: int, n: int, k: int, swiglu: bool, num_sms: int, element_size: int = 2) -> dict:
    """Kernel and tiles by shape (no autotuning: deterministic, and nothing to tune inside a capture).

    GEMV (m <= GEMV_MAX_ROWS), from an H200 sweep (tools/kernel_sweep.py, per launch inside a graph,
    with PDL): small programs win -- 2 weight rows each for 1024-row matrices, 4 for 3-6k rows, 8
    for the LM head -- with one warp per 4k weight elements, and BLOCK_K covering all of K so the
    whole tile is requested before the wait (down_proj: 2 x 2816 in one go).
    Above it (to TILE_MAX_ROWS), the swap-AB tensor-core tile: batch rows padded to a power of two (16 to
    64), with `TILES`' measured tile for the shape, else the sweep's usual winner.
    """
    if m <= GEMV_MAX_ROWS:
        return _gemv_config(m, n, k, swiglu, num_sms)
    block_m = max(16, min(64, triton.next_power_of_2(m)))
    tuned = TILES.get((n, k, swiglu, block_m))
    # The sweep's winner for most shapes: 64 weight rows a program, K tiles of 256 while the batch tile is
    # narrow, 128 at 64 rows, three pipeline stages (`TILES` holds each measured shape's own).
    block_n, block_k, warps, stages = tuned or (64, 256 if block_m <= 32 else 128, 4, 3)
    # Shared memory holds `stages` copies of the W tile(s) and the x tile: narrower K tiles for wide elements
    # (the fp32 test preset) or shapes the sweep never saw, so a tile always fits the SM (228 KB on Hopper).
    while (
        stages * (block_n * (2 if swiglu else 1) + block_m) * block_k * element_size > SMEM_BUDGET
        and block_k > 32
    ):
        block_k //= 2
    tiles = triton.cdiv(n, block_n) * triton.cdiv(m, block_m)
    return {
        "kernel": "dot",
        "BLOCK_M": block_m,
        "BLOCK_N": block_n,
        "BLOCK_K": block_k,
        "num_warps": warps,
        "num_stages": 1 if runs_unpipelined(n, k, swiglu) else stages,
        "SPLIT_K": SPLITS.get((n, k, swiglu, block_m)) or split_k(tiles, k, block_k, num_sms, swiglu),
    }


def split_k(tiles: int, k: int, block_k: int, num_sms: int, swiglu: bool = False) -> int:
    """Programs per output tile, each over its share of K: as many as keep the grid within one wave (a
    pipelined tile program fills an SM's shared memory), at most SPLIT_K_MAX, each with a K tile or more.
    Never for SwiGLU: its two accumulators double the partials, and every split of the sweep lost (1b
    gate/up at 8 rows: 24.5 µs whole, 30.6 in two)."""
    if swiglu:
        return 1
    k_tiles = triton.cdiv(k, block_k)
    wanted = max(1, min(SPLIT_K_MAX, num_sms // tiles, k_tiles))
    return triton.cdiv(k_tiles, triton.cdiv(k_tiles, wanted))  # no split left without a K tile


def _gemv_config(m: int, n: int, k: int, swiglu: bool, num_sms: int) -> dict:
    rows = n * (2 if swiglu else 1)  # weight rows; a SwiGLU program reads its gate and up rows
    rows_per_program = 2 if rows <= 16 * num_sms else 4 if rows <= 64 * num_sms else 8
    tuned = GEMV_TILES_1B.get((n, k, swiglu)) if m <= 2 else None
    if tuned:
        rows_per_program = tuned[0]
    block_n = max(1, rows_per_program // (2 if swiglu else 1))
    block_m, block_k = triton.next_power_of_2(m), min(triton.next_power_of_2(k), 4096)
    while block_m * rows_per_program * block_k > 32768 and block_k > 64:
        block_k //= 2
    warps = tuned[1] if tuned else min(8, max(1, rows_per_program * block_k // 4096))
    return {"kernel": "gemv", "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "num_warps": warps}


_SMS: dict[int, int] = {}
# (device, partial sums, sums of squares, tiles) -> (partials, sums of squares, tickets) for split-K
# GEMMs. Kept for the process: a captured graph holds their addresses, and the tickets must start at zero
# (each call leaves them there). Calls in one stream run one after another, so shapes may share them.
_SPLIT_BUFFERS: dict[tuple, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def _split_buffers(device: torch.device, partials: int, sums: int, tiles: int):
    key = (device, partials, sums, tiles)
    if key not in _SPLIT_BUFFERS:
        _SPLIT_BUFFERS[key] = (
            torch.empty(partials, dtype=torch.float32, device=device),
            torch.empty(max(1, sums), dtype=torch.float32, device=device),
            torch.zeros(tiles, dtype=torch.int32, device=device),
        )
    return _SPLIT_BUFFERS[key]


_UNUSED: dict[tuple, torch.Tensor] = {}


def _unused(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A 16-byte aligned tensor for the split buffers' arguments of a GEMM that does not split K."""
    key = (device, dtype)
    if key not in _UNUSED:
        _UNUSED[key] = torch.zeros(16, dtype=dtype, device=device)
    return _UNUSED[key]


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 1  # Triton's CPU interpreter runs programs one by one: the fewer, the faster
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SMS:
        _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SMS[index]


@functools.cache
def pdl_supported(device: torch.device) -> bool:
    """Programmatic dependent launch needs a Hopper-or-newer GPU (the interpreter has no such thing)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


class _LinearPlan:
    """fused_linear at one key: its launch (x, weight, out, residual, bias at slots 0-4) and, where the caller gives
    no `out`, the template its output is allocated from."""

    __slots__ = ("launch", "out_like")

    def __init__(self, launch_: launch.Launch, out_like: torch.Tensor | None):
        self.launch, self.out_like = launch_, out_like

    def describe(self) -> tuple:
        like = self.out_like
        return self.launch.describe(), None if like is None else (tuple(like.shape), like.dtype, like.device)


# (layouts of x, weight, residual and out, the options) -> _LinearPlan: see `gpu_probe.kernels.launch`.
_LINEAR_PLANS: dict[tuple, _LinearPlan] = {}


def fused_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    rms_eps: float | None = None,
    swiglu: bool = False,
    residual: torch.Tensor | None = None,
    config: dict | None = None,
    out: torch.Tensor | None = None,
    pdl: bool = False,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """x[M, K] @ weight[N (or 2F when swiglu), K]^T with the fusions of the module doc; returns [M, N or F].

    bias: [N] added per output column after the norm's scale (not with swiglu).

    out: write the result there (shape [M, N or F], weight's dtype, rows contiguous) instead of a new
    tensor -- e.g. a graph runner's static logits buffer, which lives outside the graph's pool.
    config: a `_tile_config`-shaped dict to override the choice of kernel and tiles (sweeps, tests).
    pdl: launch with programmatic dependent launch (ignored where `pdl_supported` is False, and for the
    tensor-core kernel unless TILE_PDL).
    The kernel, tiles and launch arguments are worked out once per key (the layouts and options) and the
    kernel launched through its bound launcher (`gpu_probe.kernels.launch`).
    """
    key = (
        x.shape,
        x.stride(),
        x.dtype,
        weight.shape,
        weight.stride(),
        weight.dtype,
        x.get_device(),
        rms_eps,
        swiglu,
        pdl,
        None if residual is None else (residual.shape, residual.stride(), residual.dtype),
        None if out is None else (out.shape, out.stride(), out.dtype, out.get_device()),
        None if bias is None else (bias.shape, bias.stride(), bias.dtype),
    )
    if config is not None:
        plan = _linear_plan(x, weight, rms_eps, swiglu, residual, out, pdl, config, bias)
    else:
        plan = _LINEAR_PLANS.get(key)
        if plan is None or launch.VERIFY:
            plan = launch.remember(
                _LINEAR_PLANS, key, _linear_plan(x, weight, rms_eps, swiglu, residual, out, pdl, None, bias)
            )
    if out is None:
        out = torch.empty_like(plan.out_like)
    plan.launch(x, weight, out, residual if residual is not None else out, bias if bias is not None else out)
    return out


def _linear_plan(x, weight, rms_eps, swiglu, residual, out, pdl, config, bias=None) -> _LinearPlan:
    """The kernel, tiles, grid and arguments of one fused_linear key (`config`: a one-off override)."""
    m, k = x.shape
    n_out = weight.shape[0] // 2 if swiglu else weight.shape[0]
    if x.stride(1) != 1 or weight.stride(1) != 1 or weight.shape[1] != k:
        raise ValueError(
            f"fused_linear: x [{m}, {k}] and weight [N, {k}] need contiguous rows, got weight "
            f"{list(weight.shape)} with strides {weight.stride()}"
        )
    if bias is not None and (
        swiglu or tuple(bias.shape) != (n_out,) or bias.stride(0) != 1 or bias.dtype != weight.dtype
    ):
        raise ValueError(
            f"fused_linear: bias must be a contiguous [{n_out}] {weight.dtype} tensor and not with swiglu, got "
            f"{list(bias.shape)} {bias.dtype}{' with swiglu' if swiglu else ''}"
        )
    out_like = None
    if out is None:
        out_like = launch.empty_template((m, n_out), weight.dtype, weight.device)
        out_stride = n_out
    elif (
        tuple(out.shape) != (m, n_out)
        or out.dtype != weight.dtype
        or out.device != weight.device
        or out.stride(1) != 1
    ):
        raise ValueError(
            f"out must be a [{m}, {n_out}] {weight.dtype} tensor on {weight.device} with contiguous "
            f"rows, got {list(out.shape)} {out.dtype} on {out.device} with strides {out.stride()}"
        )
    else:
        out_stride = out.stride(0)
    cfg = dict(
        config or _tile_config(m, n_out, k, swiglu, _num_sms(weight.device), weight.element_size())
    )  # a copy: the cache is shared
    if config is None and weight.device.type != "cuda" and cfg["kernel"] == "gemv":
        # Triton's CPU interpreter runs one program after another: fewer, wider GEMV programs keep the CPU
        # tests fast. The GPU's tiles are the ones the tests marked cuda run, where they run.
        cfg["BLOCK_N"] = max(cfg["BLOCK_N"], min(32, triton.next_power_of_2(n_out)))
    kernel = cfg.pop("kernel")
    args = (
        None,  # x, weight, out, the residual and the bias (out again without them): the launch's slots
        None,
        None,
        None,
        None,
        m,
        n_out,
        k,
        n_out,
        x.stride(0),
        weight.stride(0),
        out_stride,
        residual.stride(0) if residual is not None else out_stride,
        rms_eps if rms_eps is not None else 0.0,
    )
    flags = dict(
        NORM=rms_eps is not None, SWIGLU=swiglu, RESIDUAL=residual is not None, BIAS=bias is not None
    )
    pdl = pdl and pdl_supported(weight.device) and (kernel == "gemv" or TILE_PDL)
    if pdl:
        cfg["launch_pdl"] = True  # only named when set: the CPU interpreter knows no such option
    bind = config is None
    slots = (0, 1, 2, 3, 4)  # x, weight, out, the residual and the bias, given per call
    if kernel == "gemv":
        grid = (triton.cdiv(n_out, cfg["BLOCK_N"]),)
        return _LinearPlan(
            launch.Launch(_gemv_kernel, grid, args, {**flags, "PDL": pdl, **cfg}, slots, bind), out_like
        )
    splits = cfg.pop("SPLIT_K", 1)
    grid = (triton.cdiv(n_out, cfg["BLOCK_N"]), triton.cdiv(m, cfg["BLOCK_M"]), splits)
    k_per_split = triton.cdiv(triton.cdiv(k, cfg["BLOCK_K"]), splits) * cfg["BLOCK_K"]
    if triton.cdiv(k, k_per_split) != splits:
        raise ValueError(f"{splits} K splits of {k} leave one without a K tile of {cfg['BLOCK_K']}")
    if splits > 1:
        tiles = grid[0] * grid[1]
        cells = splits * tiles * cfg["BLOCK_N"] * cfg["BLOCK_M"]
        sums = splits * tiles * cfg["BLOCK_M"] if flags["NORM"] else 0
        split = _split_buffers(weight.device, cells * (2 if swiglu else 1), sums, tiles)
    else:  # never read: a fixed tensor of out's dtype stands in (the same specialisation as out itself)
        split = (_unused(weight.device, weight.dtype),) * 3
    meta = {**flags, "IEEE": weight.dtype == torch.float32, "PDL": pdl, "SPLIT_K": splits, **cfg}
    tile = launch.Launch(_fused_linear_kernel, grid, (*args, *split, k_per_split), meta, slots, bind)
    return _LinearPlan(tile, out_like)


@triton.jit
def _rms_swiglu_kernel(
    gu_ptr,
    x_ptr,
    out_ptr,
    F,
    H,
    stride_gu,
    stride_x,
    stride_o,
    eps,
    BLOCK_H: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """silu(gate / rms(x)) * (up / rms(x)) for one block of one row of gu = x @ [gate; up]^T (norm weight folded
    in): the epilogue of the wide path's gate/up GEMM as a kernel of its own."""
    row = tl.program_id(0)
    h = tl.arange(0, BLOCK_H)
    x = tl.load(x_ptr + row * stride_x + h, mask=h < H, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / H + eps)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < F
    gate = tl.load(gu_ptr + row * stride_gu + cols, mask=mask, other=0.0).to(tl.float32) * inv_rms
    up = tl.load(gu_ptr + row * stride_gu + F + cols, mask=mask, other=0.0).to(tl.float32) * inv_rms
    tl.store(
        out_ptr + row * stride_o + cols,
        (gate * tl.sigmoid(gate) * up).to(out_ptr.dtype.element_ty),
        mask=mask,
    )


_RMS_SWIGLU_PLANS: dict[tuple, _LinearPlan] = {}


def rms_swiglu(
    gate_up: torch.Tensor, x: torch.Tensor, eps: float, out: torch.Tensor | None = None
) -> torch.Tensor:
    """gate_up [M, 2F] (from x [M, H] with the norm weight folded into the weights) -> silu(gate) * up, [M, F]."""
    key = (
        gate_up.shape,
        gate_up.stride(),
        gate_up.dtype,
        x.shape,
        x.stride(),
        x.dtype,
        gate_up.get_device(),
        eps,
        None if out is None else (out.shape, out.stride(), out.dtype),
    )
    plan = _RMS_SWIGLU_PLANS.get(key)
    if plan is None or launch.VERIFY:
        plan = launch.remember(_RMS_SWIGLU_PLANS, key, _rms_swiglu_plan(gate_up, x, eps, out))
    if out is None:
        out = torch.empty_like(plan.out_like)
    plan.launch(gate_up, x, out)
    return out


def _rms_swiglu_plan(gate_up, x, eps: float, out) -> _LinearPlan:
    m, two_f = gate_up.shape
    f = two_f // 2
    if gate_up.stride(1) != 1 or x.stride(1) != 1 or x.shape[0] != m:
        raise ValueError(f"rms_swiglu: gate_up [{m}, 2F] and x [{m}, H] need contiguous rows")
    out_like = None
    if out is None:
        out_like = launch.empty_template((m, f), gate_up.dtype, gate_up.device)
        out_stride = f
    elif tuple(out.shape) != (m, f) or out.stride(1) != 1 or out.dtype != gate_up.dtype:
        raise ValueError(f"rms_swiglu: out must be a [{m}, {f}] {gate_up.dtype} tensor with contiguous rows")
    else:
        out_stride = out.stride(0)
    block = min(1024, triton.next_power_of_2(f))
    args = (None, None, None, f, x.shape[1], gate_up.stride(0), x.stride(0), out_stride, eps)
    meta = {"BLOCK_H": triton.next_power_of_2(x.shape[1]), "BLOCK": block}
    grid = (m, triton.cdiv(f, block))
    return _LinearPlan(launch.Launch(_rms_swiglu_kernel, grid, args, meta, slots=(0, 1, 2)), out_like)


# ---- plain-PyTorch references ------------------------------------------------------------------
def fused_linear_reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    rms_eps: float | None = None,
    swiglu: bool = False,
    residual: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """The same function, one op at a time in fp32."""
    a = x.float()
    y = a @ weight.float().t()
    if rms_eps is not None:
        y = y * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + rms_eps)
    if bias is not None:
        y = y + bias.float()
    if swiglu:
        gate, up = y.chunk(2, dim=-1)
        y = torch.nn.functional.silu(gate) * up
    if residual is not None:
        y = y + residual.float()
    return y.to(weight.dtype)
