"""The whole decode step -- every layer, the final norm and the LM head -- as ONE persistent Triton kernel.

Why: the fused+graph step pays ~2 µs at each of its ~100 kernel boundaries (drain, launch, load; see
kernels/NOTES.md). Here a step is one launch of at most one program per SM (or `programs_per_sm`), all
co-resident, that walks the step's phases itself:

    embed | per layer: norm+QKV -> attention (RoPE, KV write, split context) -> O + merge + residual
          -> norm + gate/up + SwiGLU -> down + residual | final norm + LM head

Every phase is split over all programs by a fixed rule (a program always gets the same weight rows and
attention items), so the arithmetic -- and its bits -- do not depend on timing. Between phases the
programs meet at a grid-wide barrier made of one monotonic arrival counter in device memory (after
Inductor's `x_grid_barrier`, but never reset: phase p of a step waits until the counter reaches
base + p * programs, where base is the count at the step's start, so a counter needs no reset node in
the graph and a fast program may run ahead into the next barrier without confusing a slow one).

Weight streaming overlaps the synchronisation: a program arrives, then loads the first weight tile of its
next phase into registers and asks the L2 for the first `prefetch_bytes` of its weight rows
(`cp.async.bulk.prefetch.L2`, Hopper) -- none of which depends on the barrier -- and only then waits.
Inside a phase each program keeps one tile in flight ahead of the one it multiplies (register double
buffering) and the L2 prefetch `prefetch_bytes` ahead of its loads. A tile is [rows, chunks, 256 columns]
with the warps along the rows, so every product is reduced inside a warp: no CTA barrier per tile.

Safety: a barrier wait spins at most `spin_limit` times; on timeout the program records the phase it was
waiting for in an error word of the state buffer and goes on without waiting (later waits see the word and
skip), so a bug gives a wrong result and a flag (`PersistentDecoder.check_error`), never a hung GPU.
Every program still arrives at every barrier, so the counter stays consistent. The grid is refused
(ValueError) when larger than the compiled kernel can keep co-resident, and launched cooperatively where
the driver supports it, so an oversized grid also fails at launch.

Numerics mirror the fused path (kernels/linear.py, attention.py): bf16 activations between phases, fp32
accumulation, the RMSNorm weight folded into the packed weights, the split context merged by log-sum-exp
(here by each O program into a scratch row before its first tile, so the merge costs no barrier).

Timing inside the kernel (`trace=True`): each program writes three %globaltimer stamps (ns) per phase into
an int64 buffer [programs, phases, 3]: when it began waiting for the phase's inputs (after its prefetches),
when the wait ended (work starts), when its work ended (before it arrives). `persistent_trace.read_trace`
turns that into per-phase times per program. Phase order: `phase_plan(cfg.n_layers)`.

Batches 1-8 (a kernel is compiled per power-of-two bucket of rows); larger batches fall back to the fused
path (`PersistentDecoder.last_fallback`).

Measured on an H200 (kernels/NOTES.md, run 7; `tools/persistent_check.py`): correct everywhere the probe checks
(logits within 2.6 % of the fused path, graph == eager, KV canary, 25 calls bit-identical, 1,000 steps), but
slower than fused+graph: 1b batch 1 862 µs back to back (1.456x the read floor; fused+graph 788), batch 8 3,147 µs.
Each program streams its weights at the copy bandwidth; what is left is the attention/merge chain (~140 µs), the
barriers' release (~0.9 µs each) and imbalance (0.5-2 µs a phase), and at batch >= 4 CUDA-core products that
are instruction-bound.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

from gpu_probe.kernels.attention import LOG2E, NEG_BIG, _attend_tile, _load_kv_tile

MAX_ROWS = 8  # the largest batch the kernel runs; above it the fused path does (labelled)
LAYER_PHASES = ("qkv", "attention", "o", "gate_up", "down")
PHASE_KINDS = ("embed", *LAYER_PHASES, "lm_head")

# The state buffer (int64 words): the arrival counter, the error word and the interpreter's stand-in clock,
# 256 bytes apart so polling the counter does not share a line with the error word.
STATE_COUNTER = tl.constexpr(0)
STATE_ERROR = tl.constexpr(32)
STATE_CLOCK = tl.constexpr(64)
STATE_WORDS = 96
DEFAULT_SPIN_LIMIT = 1 << 22  # polls (~0.5-1 µs each on an H200): a few seconds before a wait gives up


@dataclass(frozen=True, slots=True)
class PhaseInfo:
    index: int
    kind: str
    layer: int | None  # None for embed and lm_head

    @property
    def name(self) -> str:
        return self.kind if self.layer is None else f"L{self.layer} {self.kind}"


def phase_plan(n_layers: int) -> list[PhaseInfo]:
    """The kernel's phases in order: embed, five per layer, the LM head (trace rows and error codes)."""
    phases = [PhaseInfo(0, "embed", None)]
    for layer in range(n_layers):
        phases += [PhaseInfo(len(phases), kind, layer) for kind in LAYER_PHASES]
    return phases + [PhaseInfo(len(phases), "lm_head", None)]


@dataclass(frozen=True, slots=True)
class PersistentConfig:
    """How the kernel is laid out. Defaults are for the H200; every field is a variant the check script tries."""

    programs_per_sm: int = 1
    max_programs: int | None = None  # cap on the grid (CPU tests: 1 or 2)
    num_warps: int = 8
    rows_per_block: int = 8  # weight rows per tile and block (SwiGLU: gate/up pairs); one per warp at 8 warps
    tile_elements: int = 16384  # weight elements per tile (32 KB of bf16), fewer at large batch
    merge_elements: int = 2048  # batch rows x K columns per chunk of the O phase's split merge
    prefetch_bytes: int = 65536  # how far ahead of its loads each program asks the L2 for its weights
    attention_tokens: int = 64  # cached tokens per attention tile
    max_splits: int = 4  # context splits per (sequence, KV head) at most
    splits: int | None = None  # force a split count (tests); None: enough items to cover the grid
    spin_limit: int = DEFAULT_SPIN_LIMIT
    cooperative: bool = True  # cooperative launch where the driver takes it (also inside graph capture)
    tiles: dict = field(default_factory=dict)  # kind -> (weight rows per block, column chunks per tile)

    def __post_init__(self) -> None:
        for name in ("programs_per_sm", "num_warps", "rows_per_block", "tile_elements", "merge_elements"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"PersistentConfig.{name}: must be a positive int, got {value!r}")
        for name in ("num_warps", "rows_per_block", "attention_tokens"):
            value = getattr(self, name)
            if value & (value - 1):
                raise ValueError(f"PersistentConfig.{name}: must be a power of two, got {value}")
        if self.attention_tokens < 16:
            raise ValueError("PersistentConfig.attention_tokens: at least 16 (a tensor-core tile)")
        if self.max_programs is not None and self.max_programs < 1:
            raise ValueError(f"PersistentConfig.max_programs: must be >= 1, got {self.max_programs}")
        if self.splits is not None and not 1 <= self.splits <= 64:
            raise ValueError(f"PersistentConfig.splits: must be in [1, 64], got {self.splits}")
        if not 1 <= self.max_splits <= 64:
            raise ValueError(f"PersistentConfig.max_splits: must be in [1, 64], got {self.max_splits}")
        if not 0 <= self.prefetch_bytes <= 1 << 22 or self.prefetch_bytes % 16:
            raise ValueError("PersistentConfig.prefetch_bytes: a multiple of 16 in [0, 4 MiB]")
        if self.spin_limit < 0:
            raise ValueError("PersistentConfig.spin_limit: must be >= 0")

    def describe(self) -> str:
        tiles = f" tiles={self.tiles}" if self.tiles else ""
        return (
            f"{self.programs_per_sm}/SM x {self.num_warps} warps, {self.rows_per_block} rows/block, "
            f"tile {self.tile_elements} el, L2 prefetch {self.prefetch_bytes // 1024} KB, "
            f"attention {self.attention_tokens} tok, splits<={self.splits or self.max_splits}{tiles}"
        )


class PersistentKernelError(RuntimeError):
    """A barrier wait inside the persistent kernel gave up: the step's results are not to be trusted."""


# ---- device helpers: clock, barrier, prefetch --------------------------------------------------------
@triton.jit
def _now(state_ptr, USE_PTX: tl.constexpr):
    if USE_PTX:
        t = tl.inline_asm_elementwise(
            "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
        )
    else:  # the interpreter has no PTX: a shared counter stands in for the clock (ordered, not timed)
        t = tl.atomic_add(state_ptr + STATE_CLOCK, 1)
    return t


@triton.jit
def _mark(stamp_ptr, state_ptr, TRACE: tl.constexpr, USE_PTX: tl.constexpr):
    if TRACE:
        tl.store(stamp_ptr, _now(state_ptr, USE_PTX))


@triton.jit
def _arrive(state_ptr):
    tl.debug_barrier()  # every thread's stores are issued before thread 0 publishes them (release)
    tl.atomic_add(state_ptr + STATE_COUNTER, 1, sem="release", scope="gpu")


@triton.jit
def _wait(state_ptr, target, spin_limit, code):
    """Spin until the arrival counter reaches target, at most spin_limit polls; on timeout record code.

    A scalar atomic runs in one thread and is broadcast to the others through shared memory, so every
    thread sees the same value and leaves the loop together.
    """
    failed = tl.atomic_add(state_ptr + STATE_ERROR, 0, sem="relaxed", scope="gpu")
    limit = tl.where(failed == 0, spin_limit, 0)  # once anything timed out, nobody waits any more
    seen = tl.atomic_add(state_ptr + STATE_COUNTER, 0, sem="acquire", scope="gpu")
    spins = 0
    while (seen < target) & (spins < limit):
        seen = tl.atomic_add(state_ptr + STATE_COUNTER, 0, sem="acquire", scope="gpu")
        spins += 1
    if seen < target:
        tl.atomic_cas(
            state_ptr + STATE_ERROR, tl.cast(0, tl.int64), tl.cast(code, tl.int64), sem="relaxed", scope="gpu"
        )


@triton.jit
def _l2_prefetch(ptr, nbytes, USE_PTX: tl.constexpr):
    """Ask the L2 for nbytes (a multiple of 16) at ptr (16-byte aligned): one bulk request from thread 0
    (Hopper's cp.async.bulk.prefetch.L2). It only starts the transfer; the program goes on at once."""
    if USE_PTX:
        tl.inline_asm_elementwise(
            "{ .reg .pred p; .reg .b32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0; "
            "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
            "=r,l,r",
            [ptr.to(tl.int64), nbytes.to(tl.int32)],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )


@triton.jit
def _prefetch_span(w_ptr, lo, hi, end, USE_PTX: tl.constexpr):
    """L2-prefetch bytes [lo, min(hi, end)) of a weight matrix (byte offsets), if any are left."""
    if lo < end:
        _l2_prefetch(w_ptr.to(tl.pointer_type(tl.int8)) + lo, tl.minimum(hi, end) - lo, USE_PTX)


# ---- GEMV phases ---------------------------------------------------------------------------------------
# A tile is [BN weight rows, KR chunks, C columns] of W: rows rb*BN.., columns kb*KR*C + kr*C + c. Triton
# gives it a layout with the warps along the rows and each warp's lanes along C (8 contiguous elements a
# thread), so every product is reduced within a warp (shuffles, no CTA barrier) and the input rows, loaded
# with the same 3-D shape (broadcast over the rows), land in the same layout: nothing goes through shared
# memory. Accumulators are [BN, BM] (weight rows x batch rows) in the layout the reductions leave.
@triton.jit
def _weight_tile(
    w_ptr,
    rb,
    kb,
    valid,
    N,
    K: tl.constexpr,
    BN: tl.constexpr,
    KR: tl.constexpr,
    C: tl.constexpr,
    SWIGLU: tl.constexpr,
):
    """One tile of W (gate half) and of its up half (SWIGLU; else W again, unused). Streamed once: kept out of L1."""
    rows = rb * BN + tl.arange(0, BN)
    cols = kb * (KR * C) + tl.arange(0, KR)[None, :, None] * C + tl.arange(0, C)[None, None, :]
    mask = ((rows < N) & valid)[:, None, None] & (cols < K)
    ptrs = w_ptr + rows[:, None, None] * K + cols
    w = tl.load(ptrs, mask=mask, other=0.0, cache_modifier=".cg")
    up = w
    if SWIGLU:
        up = tl.load(ptrs + N * K, mask=mask, other=0.0, cache_modifier=".cg")
    return w, up


@triton.jit
def _input_row(
    x_ptr, stride_x, i, kb, batch, K: tl.constexpr, BN: tl.constexpr, KR: tl.constexpr, C: tl.constexpr
):
    """Batch row i's columns of tile column block kb, as fp32 [BN, KR, C] (the same values for every weight
    row: the loads of a CTA's warps meet in L1)."""
    cols = kb * (KR * C) + tl.arange(0, KR)[None, :, None] * C + tl.arange(0, C)[None, None, :]
    ptrs = x_ptr + i * stride_x + cols + 0 * tl.arange(0, BN)[:, None, None]
    return tl.load(ptrs, mask=(cols < K) & (i < batch), other=0.0).to(tl.float32)


@triton.jit
def _merged_input_tile(
    part_ptr,
    lse_ptr,
    kb,
    valid,
    batch,
    K: tl.constexpr,
    BM: tl.constexpr,
    BK: tl.constexpr,
    N_SPLITS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    N_HEADS: tl.constexpr,
    WS_ROWS: tl.constexpr,
):
    """Columns [kb*BK, +BK) of the attention output, merged from its context splits by log-sum-exp
    (part[s, row] is split s's normalised output, lse[s, row, head] its log2-sum-exp); fp32, not rounded."""
    m = tl.arange(0, BM)
    cols = kb * BK + tl.arange(0, BK)
    mask = ((m < batch) & valid)[:, None] & (cols < K)[None, :]
    heads = cols // HEAD_DIM
    merged = tl.zeros((BM, BK), dtype=tl.float32)
    total = tl.zeros((BM, BK), dtype=tl.float32)
    top = tl.full((BM, BK), NEG_BIG, dtype=tl.float32)
    for s in tl.static_range(N_SPLITS):
        row = s * WS_ROWS + m
        part = tl.load(part_ptr + row[:, None] * K + cols[None, :], mask=mask, other=0.0)
        lse = tl.load(lse_ptr + row[:, None] * N_HEADS + heads[None, :], mask=mask, other=NEG_BIG)
        new_top = tl.maximum(top, lse)
        scale = tl.exp2(top - new_top)
        weight = tl.exp2(lse - new_top)
        merged = merged * scale + part * weight
        total = total * scale + weight
        top = new_top
    return merged / tl.where(total > 0, total, 1.0)


@triton.jit
def _gemv_epilogue(
    acc,
    acc_up,
    sum_sq,
    rb,
    out_ptr,
    stride_out,
    batch,
    N,
    eps,
    K: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    NORM: tl.constexpr,
    SWIGLU: tl.constexpr,
    RESIDUAL: tl.constexpr,
):
    """As linear._epilogue, on [BN, BM] (weight rows x batch rows): 1/rms of the input rows, silu(gate) * up,
    + the residual (read in place)."""
    m = tl.arange(0, BM)
    rows = rb * BN + tl.arange(0, BN)
    if NORM:
        inv_rms = tl.rsqrt(sum_sq / K + eps)
        acc = acc * inv_rms
        acc_up = acc_up * inv_rms
    if SWIGLU:
        acc = acc * tl.sigmoid(acc) * acc_up
    mask = (rows < N)[:, None] & (m < batch)[None, :]
    ptrs = out_ptr + m[None, :] * stride_out + rows[:, None]
    if RESIDUAL:
        acc = acc + tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gemv_phase(
    w_ptr,
    x_ptr,
    stride_x,
    part_ptr,
    lse_ptr,
    out_ptr,
    stride_out,
    batch,
    N,
    eps,
    pid,
    n_programs,
    state_ptr,
    target,
    spin_limit,
    code,
    stamps,
    K: tl.constexpr,
    NORM: tl.constexpr,
    SWIGLU: tl.constexpr,
    RESIDUAL: tl.constexpr,
    MERGE: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    KR: tl.constexpr,
    C: tl.constexpr,
    MBK: tl.constexpr,
    PF_BYTES: tl.constexpr,
    W_BYTES: tl.constexpr,
    N_SPLITS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    N_HEADS: tl.constexpr,
    WS_ROWS: tl.constexpr,
    TRACE: tl.constexpr,
    USE_PTX: tl.constexpr,
):
    """out[:batch, rows] = epilogue(x @ W^T) for this program's row blocks, after waiting for `target`.

    N is the output width (SwiGLU: F, with W holding 2F rows). The program's row blocks are a fixed,
    contiguous share of the N / BN blocks; it walks them tile by tile, with the next tile's loads issued
    before the current one is multiplied, and asks the L2 for its weight bytes PF_BYTES ahead.
    """
    BK: tl.constexpr = KR * C
    KT: tl.constexpr = (K + BK - 1) // BK
    TILE_BYTES: tl.constexpr = BN * BK * W_BYTES
    ROW_BYTES: tl.constexpr = K * W_BYTES
    n_blocks = tl.cdiv(N, BN)
    rb_lo = pid * n_blocks // n_programs
    rb_hi = (pid + 1) * n_blocks // n_programs
    n_tiles = (rb_hi - rb_lo) * KT
    # This program's rows are one contiguous span of W (and of its up half): [first, end) in bytes.
    first = rb_lo * BN * ROW_BYTES
    end = tl.minimum(rb_hi * BN, N) * ROW_BYTES
    # Nothing up to the wait depends on the phase we wait for: only this phase's weights.
    w, up = _weight_tile(w_ptr, rb_lo, 0, n_tiles > 0, N, K, BN, KR, C, SWIGLU)
    if PF_BYTES > 0:
        _prefetch_span(w_ptr, first, first + PF_BYTES, end, USE_PTX)
        if SWIGLU:
            _prefetch_span(w_ptr + N * K, first, first + PF_BYTES, end, USE_PTX)
    _mark(stamps, state_ptr, TRACE, USE_PTX)
    _wait(state_ptr, target, spin_limit, code)
    _mark(stamps + 1, state_ptr, TRACE, USE_PTX)
    if MERGE:  # x_ptr is this program's scratch: merge the attention output there once, in the model dtype
        rows_m = tl.arange(0, BM)
        for kb in range((K + MBK - 1) // MBK):
            cols = kb * MBK + tl.arange(0, MBK)
            merged = _merged_input_tile(
                part_ptr, lse_ptr, kb, True, batch, K, BM, MBK, N_SPLITS, HEAD_DIM, N_HEADS, WS_ROWS
            )
            mask = (rows_m < batch)[:, None] & (cols < K)[None, :]
            tl.store(
                x_ptr + rows_m[:, None] * stride_x + cols[None, :],
                merged.to(w_ptr.dtype.element_ty),
                mask=mask,
            )
        tl.debug_barrier()  # the CTA's stores are visible to its own threads after this
    m = tl.arange(0, BM)
    acc = tl.zeros((BN, BM), dtype=tl.float32)
    acc_up = tl.zeros((BN, BM), dtype=tl.float32)
    sum_sq = tl.zeros((BN, BM), dtype=tl.float32)
    for t in range(n_tiles):
        rb = rb_lo + t // KT
        kb = t % KT
        nxt = t + 1
        w_next, up_next = _weight_tile(
            w_ptr, rb_lo + nxt // KT, nxt % KT, nxt < n_tiles, N, K, BN, KR, C, SWIGLU
        )
        if PF_BYTES > 0:  # keep the L2 PF_BYTES ahead of what this tile consumes
            ahead = first + t * TILE_BYTES + PF_BYTES
            _prefetch_span(w_ptr, ahead, ahead + TILE_BYTES, end, USE_PTX)
            if SWIGLU:
                _prefetch_span(w_ptr + N * K, ahead, ahead + TILE_BYTES, end, USE_PTX)
        w32 = w.to(tl.float32)
        up32 = up.to(tl.float32)
        for i in tl.static_range(BM):
            x = _input_row(x_ptr, stride_x, i, kb, batch, K, BN, KR, C)
            part = tl.sum(tl.sum(w32 * x, axis=1), axis=1)  # the chunks in-thread, then C across the warp
            acc = tl.where(m[None, :] == i, acc + part[:, None], acc)
            if SWIGLU:
                part_up = tl.sum(tl.sum(up32 * x, axis=1), axis=1)
                acc_up = tl.where(m[None, :] == i, acc_up + part_up[:, None], acc_up)
            if NORM:  # the first row block sweeps all of K once: the rows' sums of squares
                if t < KT:
                    sq = tl.sum(tl.sum(x * x, axis=1), axis=1)
                    sum_sq = tl.where(m[None, :] == i, sum_sq + sq[:, None], sum_sq)
        if kb == KT - 1:
            _gemv_epilogue(
                acc, acc_up, sum_sq, rb, out_ptr, stride_out, batch, N, eps, K, BM, BN, NORM, SWIGLU, RESIDUAL
            )
        acc = tl.where(kb == KT - 1, 0.0, acc)
        acc_up = tl.where(kb == KT - 1, 0.0, acc_up)
        w, up = w_next, up_next
    _mark(stamps + 2, state_ptr, TRACE, USE_PTX)


# ---- attention phase ----------------------------------------------------------------------------------
@triton.jit
def _item_range(
    item, n_items, ctx_ptr, N_KV_HEADS: tl.constexpr, N_SPLITS: tl.constexpr, BLOCK_T: tl.constexpr
):
    """Item -> (sequence, KV head, split) and the split's share [lo, hi) of the cached tokens
    [0, context_len - 1); an item past the end gets an empty range."""
    valid = item < n_items
    seq = item // (N_KV_HEADS * N_SPLITS)
    kv_head = (item // N_SPLITS) % N_KV_HEADS
    split = item % N_SPLITS
    n_cached = tl.load(ctx_ptr + seq, mask=valid, other=1) - 1
    share = tl.cdiv(tl.cdiv(n_cached, N_SPLITS), BLOCK_T) * BLOCK_T
    lo = split * share
    hi = tl.where(valid, tl.minimum(lo + share, n_cached), lo)
    return seq, kv_head, split, lo, hi


@triton.jit
def _item_inputs(item, n_items, table_ptr, stride_table, pos_ptr, slot_ptr, ctx_ptr, cos_ptr, sin_ptr, k_ptr,
                 v_ptr, max_pos, stride_slot, N_KV_HEADS: tl.constexpr, N_SPLITS: tl.constexpr,
                 HEAD_DIM: tl.constexpr, KV_BLOCK: tl.constexpr, BLOCK_T: tl.constexpr):  # fmt: skip
    """An attention item's inputs that do not come from this layer's QKV phase: its range, the RoPE factors
    of its position (cos, sign * sin), its slot, and its first tile of cached K/V."""
    HALF: tl.constexpr = HEAD_DIM // 2
    seq, kv_head, split, lo, hi = _item_range(item, n_items, ctx_ptr, N_KV_HEADS, N_SPLITS, BLOCK_T)
    valid = item < n_items
    d = tl.arange(0, HEAD_DIM)
    pos = tl.minimum(tl.maximum(tl.load(pos_ptr + seq, mask=valid, other=0), 0), max_pos)
    cos = tl.load(cos_ptr + pos * HALF + d % HALF)
    sin = tl.load(sin_ptr + pos * HALF + d % HALF) * tl.where(d < HALF, -1.0, 1.0)
    slot = tl.load(slot_ptr + seq, mask=valid, other=-1).to(tl.int64)
    keys, values, mask_t = _load_kv_tile(
        table_ptr + seq * stride_table, k_ptr, v_ptr, lo + tl.arange(0, BLOCK_T), hi, d, kv_head * HEAD_DIM,
        stride_slot, KV_BLOCK,
    )  # fmt: skip
    return seq, kv_head, split, lo, hi, cos, sin, slot, keys, values, mask_t


@triton.jit
def _attention_phase(
    qkv_ptr,
    k_ptr,
    v_ptr,
    table_ptr,
    stride_table,
    pos_ptr,
    slot_ptr,
    ctx_ptr,
    cos_ptr,
    sin_ptr,
    part_ptr,
    lse_ptr,
    batch,
    max_pos,
    qk_scale,
    stride_slot,
    pid,
    n_programs,
    state_ptr,
    target,
    spin_limit,
    code,
    stamps,
    N_SPLITS: tl.constexpr,
    N_HEADS: tl.constexpr,
    N_KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,
    ROWS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    KV_BLOCK: tl.constexpr,
    BLOCK_T: tl.constexpr,
    WS_ROWS: tl.constexpr,
    IEEE: tl.constexpr,
    TRACE: tl.constexpr,
    USE_PTX: tl.constexpr,
):
    """RoPE + the new token's K/V write + decode attention over one layer's paged cache, as in
    attention._paged_attention_kernel, one item (sequence, KV head, context split) at a time: items
    pid, pid + n_programs, ... Each item writes its normalised output and log2-sum-exp for the O phase."""
    QKV_N: tl.constexpr = (N_HEADS + 2 * N_KV_HEADS) * HEAD_DIM
    HALF: tl.constexpr = HEAD_DIM // 2
    n_items = batch * N_KV_HEADS * N_SPLITS
    d = tl.arange(0, HEAD_DIM)
    g = tl.arange(0, ROWS)
    mask_g = g < GROUP
    d_swap = (d + HALF) % HEAD_DIM
    # Before the wait, everything of the first item that the QKV phase does not write: its range, position,
    # RoPE factors, slot and first tile of cached K/V.
    seq, kv_head, split, lo, hi, cos, sin, slot, keys, values, mask_t = _item_inputs(
        pid, n_items, table_ptr, stride_table, pos_ptr, slot_ptr, ctx_ptr, cos_ptr, sin_ptr, k_ptr, v_ptr,
        max_pos, stride_slot, N_KV_HEADS, N_SPLITS, HEAD_DIM, KV_BLOCK, BLOCK_T,
    )  # fmt: skip
    _mark(stamps, state_ptr, TRACE, USE_PTX)
    _wait(state_ptr, target, spin_limit, code)
    _mark(stamps + 1, state_ptr, TRACE, USE_PTX)
    for item in range(pid, n_items, n_programs):
        head_off = kv_head * HEAD_DIM
        heads = kv_head * GROUP + g
        row = qkv_ptr + seq * QKV_N
        q = tl.load(row + heads[:, None] * HEAD_DIM + d[None, :], mask=mask_g[:, None], other=0.0)
        q_sw = tl.load(row + heads[:, None] * HEAD_DIM + d_swap[None, :], mask=mask_g[:, None], other=0.0)
        q_rot = (q.to(tl.float32) * cos[None, :] + q_sw.to(tl.float32) * sin[None, :]) * qk_scale
        k_row = row + (N_HEADS + kv_head) * HEAD_DIM
        v_row = row + (N_HEADS + N_KV_HEADS + kv_head) * HEAD_DIM
        k_new = tl.load(k_row + d).to(tl.float32) * cos + tl.load(k_row + d_swap).to(tl.float32) * sin
        v_new = tl.load(v_row + d).to(tl.float32)
        # The new token belongs to the last split: written to the cache (not for PAD_SLOT), scored from registers.
        is_last = split == N_SPLITS - 1
        write = is_last & (slot >= 0) & (d < HEAD_DIM)
        tl.store(k_ptr + slot * stride_slot + head_off + d, k_new.to(k_ptr.dtype.element_ty), mask=write)
        tl.store(v_ptr + slot * stride_slot + head_off + d, v_new.to(v_ptr.dtype.element_ty), mask=write)
        score_new = tl.sum(q_rot * k_new[None, :], axis=1)
        run_max = tl.where(is_last, score_new, NEG_BIG)
        run_sum = tl.where(is_last, 1.0, 0.0) + tl.zeros((ROWS,), dtype=tl.float32)
        acc = tl.where(is_last, 1.0, 0.0) * v_new[None, :] + tl.zeros((ROWS, HEAD_DIM), dtype=tl.float32)
        q_dot = q_rot.to(k_ptr.dtype.element_ty)
        table_row = table_ptr + seq * stride_table
        for start in range(lo, hi, BLOCK_T):  # the tile at `start` is in (keys, values); load the next
            keys_next, values_next, mask_next = _load_kv_tile(
                table_row, k_ptr, v_ptr, start + BLOCK_T + tl.arange(0, BLOCK_T), hi, d, head_off, stride_slot,
                KV_BLOCK,
            )  # fmt: skip
            run_max, run_sum, acc = _attend_tile(q_dot, keys, values, mask_t, run_max, run_sum, acc, IEEE)
            keys, values, mask_t = keys_next, values_next, mask_next
        has_any = run_sum > 0
        norm = tl.where(has_any, run_sum, 1.0)
        out_row = split * WS_ROWS + seq
        tl.store(
            part_ptr + out_row * (N_HEADS * HEAD_DIM) + heads[:, None] * HEAD_DIM + d[None, :],
            acc / norm[:, None],
            mask=mask_g[:, None],
        )
        lse = tl.where(has_any, run_max + tl.log2(norm), NEG_BIG)
        tl.store(lse_ptr + out_row * N_HEADS + heads, lse, mask=mask_g)
        # The next item's inputs (none past the end).
        seq, kv_head, split, lo, hi, cos, sin, slot, keys, values, mask_t = _item_inputs(
            item + n_programs, n_items, table_ptr, stride_table, pos_ptr, slot_ptr, ctx_ptr, cos_ptr, sin_ptr,
            k_ptr, v_ptr, max_pos, stride_slot, N_KV_HEADS, N_SPLITS, HEAD_DIM, KV_BLOCK, BLOCK_T,
        )  # fmt: skip
    _mark(stamps + 2, state_ptr, TRACE, USE_PTX)


# ---- the kernel ---------------------------------------------------------------------------------------
@triton.jit
def _decode_step_kernel(
    ids_ptr,
    pos_ptr,
    table_ptr,
    slot_ptr,
    ctx_ptr,
    emb_ptr,
    w_qkv_ptr,
    w_o_ptr,
    w_gate_up_ptr,
    w_down_ptr,
    w_lm_ptr,
    kv_ptr,
    cos_ptr,
    sin_ptr,
    h_ptr,
    qkv_ptr,
    act_ptr,
    part_ptr,
    lse_ptr,
    logits_ptr,
    xs_ptr,
    state_ptr,
    trace_ptr,
    batch,
    n_layers,
    stride_table,
    stride_logits,
    kv_stride_layer,
    kv_stride_kv,
    kv_stride_slot,
    max_pos,
    eps,
    qk_scale,
    spin_limit,
    HIDDEN: tl.constexpr,
    H_P2: tl.constexpr,
    FFN: tl.constexpr,
    VOCAB: tl.constexpr,
    N_HEADS: tl.constexpr,
    N_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    ROWS: tl.constexpr,
    KV_BLOCK: tl.constexpr,
    BM: tl.constexpr,
    N_SPLITS: tl.constexpr,
    WS_ROWS: tl.constexpr,
    BLOCK_T: tl.constexpr,
    C: tl.constexpr,
    BN_QKV: tl.constexpr,
    KR_QKV: tl.constexpr,
    BN_O: tl.constexpr,
    KR_O: tl.constexpr,
    BN_GU: tl.constexpr,
    KR_GU: tl.constexpr,
    BN_DOWN: tl.constexpr,
    KR_DOWN: tl.constexpr,
    BN_LM: tl.constexpr,
    KR_LM: tl.constexpr,
    MBK: tl.constexpr,
    PF_BYTES: tl.constexpr,
    W_BYTES: tl.constexpr,
    TRACE: tl.constexpr,
    USE_PTX: tl.constexpr,
    IEEE: tl.constexpr,
):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    GROUP: tl.constexpr = N_HEADS // N_KV_HEADS
    Q_SIZE: tl.constexpr = N_HEADS * HEAD_DIM
    QKV_N: tl.constexpr = Q_SIZE + 2 * N_KV_HEADS * HEAD_DIM
    n_phases = 2 + 5 * n_layers
    stamps = trace_ptr + pid * n_phases * 3  # this program's [phase, 3] stamps
    # Phase p waits for base + p * n_programs arrivals; base is the count before this step's first arrival
    # (every step adds (n_phases - 1) * n_programs, whatever happens inside it).
    per_step = (n_phases - 1) * n_programs
    base = (tl.atomic_add(state_ptr + STATE_COUNTER, 0, sem="acquire", scope="gpu") // per_step) * per_step

    # Phase 0: the embedding rows of the step's tokens become the residual stream h.
    _mark(stamps, state_ptr, TRACE, USE_PTX)
    _mark(stamps + 1, state_ptr, TRACE, USE_PTX)
    cols = tl.arange(0, H_P2)
    for b in range(pid, batch, n_programs):
        token = tl.load(ids_ptr + b)
        row = tl.load(emb_ptr + token * HIDDEN + cols, mask=cols < HIDDEN)
        tl.store(h_ptr + b * HIDDEN + cols, row, mask=cols < HIDDEN)
    _mark(stamps + 2, state_ptr, TRACE, USE_PTX)
    _arrive(state_ptr)

    for layer in range(n_layers):
        p = 1 + 5 * layer
        lw = tl.cast(layer, tl.int64)
        k_ptr = kv_ptr + lw * kv_stride_layer
        v_ptr = k_ptr + kv_stride_kv
        _gemv_phase(w_qkv_ptr + lw * (QKV_N * HIDDEN), h_ptr, HIDDEN, part_ptr, lse_ptr, qkv_ptr, QKV_N, batch,
                    QKV_N, eps, pid, n_programs, state_ptr, base + p * n_programs, spin_limit, p + 1, stamps + 3 * p,
                    K=HIDDEN, NORM=True, SWIGLU=False, RESIDUAL=False, MERGE=False, BN=BN_QKV, KR=KR_QKV,
                    BM=BM, C=C, MBK=MBK, PF_BYTES=PF_BYTES, W_BYTES=W_BYTES, N_SPLITS=N_SPLITS, HEAD_DIM=HEAD_DIM,
                    N_HEADS=N_HEADS, WS_ROWS=WS_ROWS, TRACE=TRACE, USE_PTX=USE_PTX)  # fmt: skip
        _arrive(state_ptr)
        _attention_phase(qkv_ptr, k_ptr, v_ptr, table_ptr, stride_table, pos_ptr, slot_ptr, ctx_ptr, cos_ptr,
                         sin_ptr, part_ptr, lse_ptr, batch, max_pos, qk_scale, kv_stride_slot, pid, n_programs,
                         state_ptr, base + (p + 1) * n_programs, spin_limit, p + 2, stamps + 3 * (p + 1),
                         N_SPLITS=N_SPLITS, N_HEADS=N_HEADS, N_KV_HEADS=N_KV_HEADS, GROUP=GROUP, ROWS=ROWS,
                         HEAD_DIM=HEAD_DIM, KV_BLOCK=KV_BLOCK, BLOCK_T=BLOCK_T, WS_ROWS=WS_ROWS, IEEE=IEEE,
                         TRACE=TRACE, USE_PTX=USE_PTX)  # fmt: skip
        _arrive(state_ptr)
        _gemv_phase(w_o_ptr + lw * (HIDDEN * Q_SIZE), xs_ptr + pid * (BM * Q_SIZE), Q_SIZE, part_ptr, lse_ptr, h_ptr,
                    HIDDEN, batch, HIDDEN, eps, pid, n_programs, state_ptr, base + (p + 2) * n_programs, spin_limit,
                    p + 3, stamps + 3 * (p + 2), K=Q_SIZE, NORM=False, SWIGLU=False, RESIDUAL=True, MERGE=True,
                    BN=BN_O, KR=KR_O,
                    BM=BM, C=C, MBK=MBK, PF_BYTES=PF_BYTES, W_BYTES=W_BYTES, N_SPLITS=N_SPLITS, HEAD_DIM=HEAD_DIM,
                    N_HEADS=N_HEADS, WS_ROWS=WS_ROWS, TRACE=TRACE, USE_PTX=USE_PTX)  # fmt: skip
        _arrive(state_ptr)
        _gemv_phase(w_gate_up_ptr + lw * (2 * FFN * HIDDEN), h_ptr, HIDDEN, part_ptr, lse_ptr, act_ptr, FFN, batch,
                    FFN, eps, pid, n_programs, state_ptr, base + (p + 3) * n_programs, spin_limit, p + 4,
                    stamps + 3 * (p + 3), K=HIDDEN, NORM=True, SWIGLU=True, RESIDUAL=False, MERGE=False, BN=BN_GU,
                    KR=KR_GU,
                    BM=BM, C=C, MBK=MBK, PF_BYTES=PF_BYTES, W_BYTES=W_BYTES, N_SPLITS=N_SPLITS, HEAD_DIM=HEAD_DIM,
                    N_HEADS=N_HEADS, WS_ROWS=WS_ROWS, TRACE=TRACE, USE_PTX=USE_PTX)  # fmt: skip
        _arrive(state_ptr)
        _gemv_phase(w_down_ptr + lw * (HIDDEN * FFN), act_ptr, FFN, part_ptr, lse_ptr, h_ptr, HIDDEN, batch, HIDDEN,
                    eps, pid, n_programs, state_ptr, base + (p + 4) * n_programs, spin_limit, p + 5,
                    stamps + 3 * (p + 4), K=FFN, NORM=False, SWIGLU=False, RESIDUAL=True, MERGE=False, BN=BN_DOWN,
                    KR=KR_DOWN,
                    BM=BM, C=C, MBK=MBK, PF_BYTES=PF_BYTES, W_BYTES=W_BYTES, N_SPLITS=N_SPLITS, HEAD_DIM=HEAD_DIM,
                    N_HEADS=N_HEADS, WS_ROWS=WS_ROWS, TRACE=TRACE, USE_PTX=USE_PTX)  # fmt: skip
        _arrive(state_ptr)

    last = n_phases - 1
    _gemv_phase(w_lm_ptr, h_ptr, HIDDEN, part_ptr, lse_ptr, logits_ptr, stride_logits, batch, VOCAB, eps, pid,
                n_programs, state_ptr, base + last * n_programs, spin_limit, last + 1, stamps + 3 * last, K=HIDDEN,
                NORM=True, SWIGLU=False, RESIDUAL=False, MERGE=False, BN=BN_LM, KR=KR_LM,
                BM=BM, C=C, MBK=MBK, PF_BYTES=PF_BYTES, W_BYTES=W_BYTES, N_SPLITS=N_SPLITS, HEAD_DIM=HEAD_DIM,
                N_HEADS=N_HEADS, WS_ROWS=WS_ROWS, TRACE=TRACE, USE_PTX=USE_PTX)  # fmt: skip


# ---- host side ------------------------------------------------------------------------------------------
def _floor_pow2(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


def co_resident_blocks_per_sm(
    n_regs: int,
    shared_bytes: int,
    num_warps: int,
    regs_per_sm: int = 65536,
    smem_per_sm: int = 233472,
    max_threads_per_sm: int = 2048,
    max_blocks_per_sm: int = 32,
    reserved_smem_per_block: int = 1024,
) -> int:
    """Programs of a compiled kernel one SM holds at once (registers are given out per warp in 256s;
    Hopper keeps 1 KB of shared memory per block for the system). Defaults: an H100/H200 SM."""
    threads = num_warps * 32
    by_threads = max_threads_per_sm // threads
    regs_per_warp = -(-max(n_regs, 1) * 32 // 256) * 256
    by_regs = (regs_per_sm // regs_per_warp) // num_warps
    by_smem = smem_per_sm // (shared_bytes + reserved_smem_per_block)
    return max(0, min(by_threads, by_regs, by_smem, max_blocks_per_sm))


@dataclass(frozen=True, slots=True)
class StepLayout:
    """The compile-time shape of one kernel: batch rows (a power of two), context splits, the column chunk C
    (one 16-byte load per thread across a warp), and per GEMV phase (weight rows per block, chunks per tile)."""

    rows: int
    splits: int
    chunk: int
    tiles: dict
    merge_k: int  # K columns per chunk of the O phase's split merge


def step_layout(cfg, config: PersistentConfig, programs: int, batch: int) -> StepLayout:
    """The compile-time shape a batch runs with on `programs` programs."""
    if not 1 <= batch <= MAX_ROWS:
        raise ValueError(f"the persistent kernel runs 1..{MAX_ROWS} rows, got {batch}")
    rows = triton.next_power_of_2(batch)
    # Enough (sequence, KV head, split) items to give most programs one, at most max_splits per sequence.
    splits = config.splits or max(1, min(config.max_splits, programs // (rows * cfg.n_kv_heads)))
    el = torch.finfo(getattr(torch, cfg.dtype)).bits // 8
    chunk = min(32 * 16 // el, triton.next_power_of_2(min(cfg.hidden, cfg.ffn)))
    # Each batch row adds the tile's worth of products per thread: smaller tiles as the batch grows, and
    # more weight rows per warp, so each input element loaded is used more often. The widths keep enough
    # row blocks for every program (QKV and the N = hidden phases have the fewest rows).
    elements = max(config.tile_elements // max(1, rows // 2), config.rows_per_block * chunk)
    wide = min(2, rows)

    def tile(kind: str, k: int, rows_per_warp: int, swiglu: bool = False) -> tuple[int, int]:
        if kind in config.tiles:
            return tuple(config.tiles[kind])
        bn = config.rows_per_block * rows_per_warp
        weight_rows = 2 * bn if swiglu else bn
        chunks = max(1, elements // (weight_rows * chunk))
        return bn, min(_floor_pow2(chunks), triton.next_power_of_2(-(-k // chunk)))

    tiles = {
        "qkv": tile("qkv", cfg.hidden, 1),
        "o": tile("o", cfg.q_size, min(2, wide)),
        "gate_up": tile("gate_up", cfg.hidden, wide, swiglu=True),
        "down": tile("down", cfg.ffn, min(2, wide)),
        "lm_head": tile("lm_head", cfg.hidden, wide),
    }
    merge_k = max(16, min(_floor_pow2(config.merge_elements // rows), triton.next_power_of_2(cfg.q_size)))
    return StepLayout(rows=rows, splits=splits, chunk=chunk, tiles=tiles, merge_k=merge_k)


def kernel_constexprs(
    cfg,
    config: PersistentConfig,
    lay: StepLayout,
    dtype: torch.dtype,
    *,
    hopper: bool,
    ptx: bool,
    trace: bool,
) -> dict:
    """The kernel's compile-time arguments (and launch options) for a layout. hopper: the bulk L2 prefetch
    is there; ptx: inline PTX runs at all (not in the interpreter)."""
    el = torch.finfo(dtype).bits // 8
    # The bulk L2 prefetch needs Hopper and rows of whole 16-byte units.
    prefetch = config.prefetch_bytes if hopper and ptx else 0
    if (cfg.hidden * el) % 16 or (cfg.ffn * el) % 16:
        prefetch = 0
    t = lay.tiles
    return dict(
        HIDDEN=cfg.hidden,
        H_P2=triton.next_power_of_2(cfg.hidden),
        FFN=cfg.ffn,
        VOCAB=cfg.vocab,
        N_HEADS=cfg.n_heads,
        N_KV_HEADS=cfg.n_kv_heads,
        HEAD_DIM=cfg.head_dim,
        ROWS=max(16, triton.next_power_of_2(cfg.n_heads // cfg.n_kv_heads)),
        KV_BLOCK=cfg.block_size,
        BM=lay.rows,
        N_SPLITS=lay.splits,
        WS_ROWS=MAX_ROWS,
        BLOCK_T=config.attention_tokens,
        C=lay.chunk,
        BN_QKV=t["qkv"][0],
        KR_QKV=t["qkv"][1],
        BN_O=t["o"][0],
        KR_O=t["o"][1],
        BN_GU=t["gate_up"][0],
        KR_GU=t["gate_up"][1],
        BN_DOWN=t["down"][0],
        KR_DOWN=t["down"][1],
        BN_LM=t["lm_head"][0],
        KR_LM=t["lm_head"][1],
        MBK=lay.merge_k,
        PF_BYTES=prefetch,
        W_BYTES=el,
        TRACE=trace,
        USE_PTX=ptx,
        IEEE=dtype == torch.float32,
        num_warps=config.num_warps,
        num_stages=1,  # the loops double-buffer by hand; Triton's pipeliner is not wanted here
    )


def launch_scalars(
    cfg, config: PersistentConfig, batch: int, kv_strides: tuple, table_stride: int, logits_stride: int
) -> dict:
    """The kernel's integer and float arguments by name (kv_strides: the cache tensor's six strides)."""
    return {
        "batch": batch,
        "n_layers": cfg.n_layers,
        "stride_table": table_stride,
        "stride_logits": logits_stride,
        "kv_stride_layer": kv_strides[0],
        "kv_stride_kv": kv_strides[1],
        "kv_stride_slot": kv_strides[3],
        "max_pos": cfg.max_context - 1,  # the RoPE tables have max_context rows
        "eps": cfg.norm_eps,
        "qk_scale": LOG2E / math.sqrt(cfg.head_dim),
        "spin_limit": config.spin_limit,
    }


def kernel_args(tensors: dict, scalars: dict) -> tuple:
    """The kernel's runtime arguments in its order, from tensors and scalars given by argument name."""
    names = [n for n in _decode_step_kernel.arg_names if n in tensors or n in scalars]
    if len(names) != len(tensors) + len(scalars):
        raise ValueError(f"unknown kernel arguments: {sorted(set(tensors) | set(scalars) - set(names))}")
    return tuple(tensors[n] if n in tensors else scalars[n] for n in names)


TENSOR_DTYPES = {  # the kernel's tensor arguments that are not in the model dtype
    "ids_ptr": torch.int64,
    "pos_ptr": torch.int64,
    "table_ptr": torch.int32,
    "slot_ptr": torch.int64,
    "ctx_ptr": torch.int32,
    "cos_ptr": torch.float32,
    "sin_ptr": torch.float32,
    "part_ptr": torch.float32,
    "lse_ptr": torch.float32,
    "state_ptr": torch.int64,
    "trace_ptr": torch.int64,
}


def precompile(
    cfg, config: PersistentConfig, batch: int, num_blocks: int, programs: int, trace: bool = False
) -> None:
    """Compile (not run) the kernel a PersistentDecoder over a model of `cfg` with a `num_blocks` KV pool would
    launch at this batch, into Triton's on-disk cache: run it in worker processes to compile variants in parallel
    (GPU needed; the arguments are stand-ins with the same dtypes and specialisations as the real ones)."""
    from triton.runtime.jit import MockTensor

    dtype = getattr(torch, cfg.dtype)
    names = [n for n in _decode_step_kernel.arg_names if n.endswith("_ptr")]
    tensors = {n: MockTensor(TENSOR_DTYPES.get(n, dtype)) for n in names}
    kv = torch.empty(
        (cfg.n_layers, 2, num_blocks, cfg.block_size, cfg.n_kv_heads, cfg.head_dim), device="meta"
    )
    scalars = launch_scalars(cfg, config, batch, tuple(kv.stride()), cfg.max_blocks_per_seq, cfg.vocab)
    lay = step_layout(cfg, config, programs, batch)
    hopper = torch.cuda.get_device_capability()[0] >= 9
    kwargs = kernel_constexprs(cfg, config, lay, dtype, hopper=hopper, ptx=True, trace=trace)
    if config.cooperative:
        kwargs["launch_cooperative_grid"] = True
    _decode_step_kernel.warmup(*kernel_args(tensors, scalars), grid=(programs,), **kwargs)


def _precompile_job(job: tuple) -> str | None:
    preset, batch, num_blocks, programs, trace = job
    try:
        from gpu_probe.config import get_config

        precompile(get_config(preset), PersistentConfig(), batch, num_blocks, programs, trace)
        return None
    except Exception as err:  # reported, not raised: the launch then compiles it in this process
        return f"{type(err).__name__}: {str(err)[:300]}"


def precompile_in_workers(preset: str, batches, num_blocks: int, programs: int, trace: bool = False) -> list:
    """Compile the default layout's kernels for these batches in parallel worker processes (a kernel takes
    ~10-20 s to compile; Triton's on-disk cache then serves the real launches). Returns the errors."""
    import concurrent.futures as cf
    import multiprocessing as mp

    jobs = [(preset, b, num_blocks, programs, t) for b in batches for t in ({False, trace})]
    workers = max(1, min(len(jobs), (os.cpu_count() or 2) - 2, 14))
    with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        return [err for err in pool.map(_precompile_job, jobs) if err]


class PersistentDecoder:
    """A ProbeModel's decode step as one persistent kernel launch: call it like the model.

    decoder(input_ids, positions, block_tables, slot_mapping, context_lens, logits_out=None, trace=False)
    -> logits [B, vocab]. Static buffers (workspace, the barrier state) are allocated here, once, so a
    call allocates nothing but an eager call's logits and can be captured in a CUDA graph. Holds its own
    per-layer stacked copies of the fused path's packed weights (`repack()` after editing the model's).
    Batches above MAX_ROWS run the model's fused path (`last_fallback` says so).
    """

    def __init__(
        self, model, config: PersistentConfig | None = None, weights_from: PersistentDecoder | None = None
    ):
        """weights_from: another decoder of the same model whose stacked weights to share (variants)."""
        self.model, self.config = model, config or PersistentConfig()
        self.cfg, self.dtype, self.kv_cache = model.cfg, model.dtype, model.kv_cache
        cfg, dev = self.cfg, model.device
        if cfg.q_size != cfg.hidden:
            raise ValueError("the persistent kernel needs n_heads * head_dim == hidden")
        self.on_gpu = dev.type == "cuda"
        if not self.on_gpu and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError(
                "the persistent kernel needs CUDA, or TRITON_INTERPRET=1 set before triton is imported"
            )
        self.phases = phase_plan(cfg.n_layers)
        if weights_from is not None and weights_from.model is model:
            self.w_qkv, self.w_o = weights_from.w_qkv, weights_from.w_o
            self.w_gate_up, self.w_down = weights_from.w_gate_up, weights_from.w_down
        else:
            self.repack()
        rows, splits = MAX_ROWS, self.config.splits or self.config.max_splits
        self.workspace = {
            "h": torch.zeros((rows, cfg.hidden), dtype=self.dtype, device=dev),
            "qkv": torch.zeros((rows, cfg.q_size + 2 * cfg.kv_size), dtype=self.dtype, device=dev),
            "act": torch.zeros((rows, cfg.ffn), dtype=self.dtype, device=dev),
            "part": torch.zeros((splits, rows, cfg.q_size), dtype=torch.float32, device=dev),
            "lse": torch.zeros((splits, rows, cfg.n_heads), dtype=torch.float32, device=dev),
        }
        # Per program: the O phase's merged attention input ([programs, 16 rows, q_size]).
        self.scratch = torch.zeros((self.programs, 16, cfg.q_size), dtype=self.dtype, device=dev)
        self.state = torch.zeros(STATE_WORDS, dtype=torch.int64, device=dev)
        self.trace_buffer: torch.Tensor | None = None
        self.last_fallback = False
        self.cooperative = self.config.cooperative and self.on_gpu
        self.cooperative_note = "" if self.on_gpu else "no cooperative launch in the interpreter"
        self._ready: set = set()  # compiled layouts whose grid was checked for co-residency
        self.compiled: dict = {}  # layout key -> {"n_regs", "n_spills", "shared", "co_resident"}

    # ---- bookkeeping ------------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.model.device

    @torch.no_grad()
    def repack(self) -> None:
        """Stack the fused path's per-layer packed weights into one tensor per projection (the kernel walks
        the layers by offset)."""
        layers = self.model.layers
        self.w_qkv = torch.stack([layer.w_qkv_folded for layer in layers]).contiguous()
        self.w_o = torch.stack([layer.wo for layer in layers]).contiguous()
        self.w_gate_up = torch.stack([layer.w_gate_up_folded for layer in layers]).contiguous()
        self.w_down = torch.stack([layer.w_down for layer in layers]).contiguous()

    @property
    def weight_bytes(self) -> int:
        """Bytes of the stacked copies this decoder holds beside the model's own weights."""
        return sum(w.numel() * w.element_size() for w in (self.w_qkv, self.w_o, self.w_gate_up, self.w_down))

    @property
    def programs(self) -> int:
        """Grid size: programs_per_sm per SM on a GPU (one on the interpreter), capped by max_programs."""
        cap = self.config.max_programs
        if not self.on_gpu:
            return cap or 1
        sms = torch.cuda.get_device_properties(self.device).multi_processor_count
        return min(cap or sms * self.config.programs_per_sm, sms * self.config.programs_per_sm)

    def layout(self, batch: int) -> StepLayout:
        """The kernel shape a batch runs with (one compiled kernel per power-of-two bucket of rows)."""
        return step_layout(self.cfg, self.config, self.programs, batch)

    # ---- the step -----------------------------------------------------------------------------------------
    @torch.no_grad()
    def __call__(
        self,
        input_ids,
        positions,
        block_tables,
        slot_mapping,
        context_lens,
        logits_out: torch.Tensor | None = None,
        workspace: dict | None = None,
        trace: bool | torch.Tensor = False,
    ) -> torch.Tensor:
        """workspace: ignored (the decoder owns its buffers; the graph runner's signature passes one).
        trace: True (the decoder's own buffer, `trace_buffer`) or an int64 tensor [programs, phases, 3]."""
        cfg, batch = self.cfg, input_ids.shape[0]
        self.last_fallback = batch > MAX_ROWS
        if self.last_fallback:
            return self.model.fused_forward(
                input_ids, positions, block_tables, slot_mapping, context_lens, logits_out
            )
        if logits_out is None:
            logits_out = torch.empty((batch, cfg.vocab), dtype=self.dtype, device=self.device)
        elif tuple(logits_out.shape) != (batch, cfg.vocab) or logits_out.stride(1) != 1:
            raise ValueError(f"logits_out must be [{batch}, {cfg.vocab}] with contiguous rows")
        if block_tables.stride(1) != 1:
            raise ValueError("block_tables must have contiguous rows")
        trace_buffer = self._trace_buffer(trace)
        lay = self.layout(batch)
        kv = self.kv_cache.kv  # [layer, K|V, block, slot_in_block, kv_head, head_dim]
        tensors = {
            "ids_ptr": input_ids,
            "pos_ptr": positions,
            "table_ptr": block_tables,
            "slot_ptr": slot_mapping,
            "ctx_ptr": context_lens,
            "emb_ptr": self.model.tok_embeddings,
            "w_qkv_ptr": self.w_qkv,
            "w_o_ptr": self.w_o,
            "w_gate_up_ptr": self.w_gate_up,
            "w_down_ptr": self.w_down,
            "w_lm_ptr": self.model.lm_head_folded,
            "kv_ptr": kv,
            "cos_ptr": self.model.rope_cos,
            "sin_ptr": self.model.rope_sin,
            **{f"{name}_ptr": buf for name, buf in self.workspace.items()},
            "logits_ptr": logits_out,
            "xs_ptr": self.scratch,
            "state_ptr": self.state,
            "trace_ptr": trace_buffer if trace_buffer is not None else self.state,
        }
        scalars = launch_scalars(
            cfg, self.config, batch, tuple(kv.stride()), block_tables.stride(0), logits_out.stride(0)
        )
        args = kernel_args(tensors, scalars)
        kwargs = self._constexprs(lay, trace_buffer is not None)
        grid = (self.programs,)
        if self.on_gpu:
            self._prepare(lay, args, kwargs, grid)
            if self.cooperative:  # only named on a GPU: the interpreter knows no such option
                kwargs["launch_cooperative_grid"] = True
        _decode_step_kernel[grid](*args, **kwargs)
        return logits_out

    def _constexprs(self, lay: StepLayout, trace: bool) -> dict:
        hopper = self.on_gpu and torch.cuda.get_device_capability(self.device)[0] >= 9
        return kernel_constexprs(
            self.cfg, self.config, lay, self.dtype, hopper=hopper, ptx=self.on_gpu, trace=trace
        )

    def _trace_buffer(self, trace) -> torch.Tensor | None:
        if trace is False or trace is None:
            return None
        shape = (self.programs, len(self.phases), 3)
        if isinstance(trace, torch.Tensor):
            if tuple(trace.shape) != shape or trace.dtype != torch.int64 or not trace.is_contiguous():
                raise ValueError(f"trace must be a contiguous int64 tensor of shape {list(shape)}")
            return trace
        if self.trace_buffer is None or tuple(self.trace_buffer.shape) != shape:
            self.trace_buffer = torch.full(shape, -1, dtype=torch.int64, device=self.device)
        return self.trace_buffer

    def _prepare(self, lay: StepLayout, args: tuple, kwargs: dict, grid: tuple) -> None:
        """Once per compiled kernel: compile it, refuse a grid it cannot keep co-resident, and (once) find out
        whether a cooperative launch can be captured in a CUDA graph here."""
        key = (repr(lay), kwargs["TRACE"], grid)
        if key in self._ready:
            return
        launch = {"launch_cooperative_grid": True} if self.cooperative else {}
        compiled = _decode_step_kernel.warmup(*args, grid=grid, **kwargs, **launch)
        compiled._init_handles()
        props = torch.cuda.get_device_properties(self.device)
        per_sm = co_resident_blocks_per_sm(
            compiled.n_regs,
            compiled.metadata.shared,
            self.config.num_warps,
            regs_per_sm=getattr(props, "regs_per_multiprocessor", 65536),
            smem_per_sm=getattr(props, "shared_memory_per_multiprocessor", 233472),
            max_threads_per_sm=getattr(props, "max_threads_per_multi_processor", 2048),
        )
        co_resident = per_sm * props.multi_processor_count
        self.compiled[key] = {
            "n_regs": compiled.n_regs,
            "n_spills": compiled.n_spills,
            "shared": compiled.metadata.shared,
            "co_resident": co_resident,
        }
        if grid[0] > co_resident:
            raise ValueError(
                f"grid of {grid[0]} programs is larger than can be co-resident ({per_sm} per SM x "
                f"{props.multi_processor_count} SMs at {compiled.n_regs} registers/thread, "
                f"{compiled.metadata.shared} B shared memory, {self.config.num_warps} warps): its barriers "
                f"would wait for programs that cannot start"
            )
        if self.cooperative and not torch.cuda.is_current_stream_capturing():
            self._probe_cooperative_capture(args, {**kwargs, **launch}, grid)
        self._ready.add(key)

    def _probe_cooperative_capture(self, args: tuple, kwargs: dict, grid: tuple) -> None:
        """Capture (not run) one cooperative launch: if the driver refuses it inside a graph, launch plainly
        (the co-residency check above still holds the grid to what fits)."""
        graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        try:
            with torch.cuda.graph(graph, stream=stream):
                _decode_step_kernel[grid](*args, **kwargs)
        except Exception as err:  # the driver's refusal arrives as whatever Triton's launcher raises
            self.cooperative = False
            self.cooperative_note = f"cooperative launch not capturable here ({type(err).__name__}: {err})"[
                :300
            ]
        else:
            self.cooperative_note = "cooperative launch, also inside CUDA graphs"
        finally:
            del graph
            torch.cuda.current_stream(self.device).wait_stream(stream)

    # ---- the error flag ---------------------------------------------------------------------------------
    def error_phase(self) -> PhaseInfo | None:
        """The phase whose barrier wait first timed out since the last reset, or None (reads the device)."""
        code = int(self.state[STATE_ERROR.value].item())
        return self.phases[code - 1] if code else None

    def check_error(self) -> None:
        """Raise PersistentKernelError if a barrier wait timed out (a sync with the device: call it in checks,
        not on every step)."""
        phase = self.error_phase()
        if phase is not None:
            raise PersistentKernelError(
                f"a barrier wait gave up after {self.config.spin_limit} polls before phase {phase.index} "
                f"({phase.name}): some program did not arrive; the step's results are not valid"
            )

    def reset_error(self) -> None:
        self.state[STATE_ERROR.value] = 0
