"""The persistent kernel's device side: the whole decode step as ONE Triton kernel (`_decode_step_kernel`).

Its host side -- layout, launch, the decoder the probe runs -- is `gpu_probe.kernels.persistent`, which says
why it exists and how it is used. Here a step is one launch of at most one program per SM (or
`programs_per_sm`), all co-resident, that walks the step's phases itself:

    embed | per layer: norm+QKV -> attention (RoPE, KV write, split context) -> O + merge + residual
          -> norm + gate/up + SwiGLU -> down + residual | final norm + LM head

Every phase is split over all programs by a fixed rule (a program always gets the same weight rows and
attention items), so the arithmetic -- and its bits -- do not depend on timing. Between phases the
programs meet at a grid-wide barrier made of one monotonic arrival counter in device memory (after
Inductor's `x_grid_barrier`, but never reset: phase p of a step waits until the counter reaches
base + p * programs, where base is the count at the step's start, so a counter needs no reset node in
the graph and a fast program may run ahead into the next barrier without confusing a slow one).

Weight streaming overlaps the synchronisation: a program arrives, then loads the first weight tile of its
next phase into registers and asks the L2 for the first `PF_BYTES` of its weight rows
(`cp.async.bulk.prefetch.L2`, Hopper) -- none of which depends on the barrier -- and only then waits.
Inside a phase each program keeps one tile in flight ahead of the one it multiplies (register double
buffering) and the L2 prefetch `PF_BYTES` ahead of its loads. A tile is [rows, chunks, 256 columns]
with the warps along the rows, so every product is reduced inside a warp: no CTA barrier per tile.

Safety: a barrier wait spins at most `spin_limit` times; on timeout the program records the phase it was
waiting for in the state buffer's error word and goes on without waiting (later waits see the word and
skip), so a bug gives a wrong result and a flag, never a hung GPU. Every program still arrives at every
barrier, so the counter stays consistent.

Numerics mirror the fused path (kernels/linear.py, attention.py): bf16 activations between phases, fp32
accumulation, the RMSNorm weight folded into the packed weights, the split context merged by log-sum-exp
(here by each O program into a scratch row before its first tile, so the merge costs no barrier).

Timing inside the kernel (`TRACE`): each program writes three %globaltimer stamps (ns) per phase into an
int64 buffer [programs, phases, 3]: when it began waiting for the phase's inputs (after its prefetches),
when the wait ended (work starts), when its work ended (before it arrives).
"""

from __future__ import annotations

import triton
import triton.language as tl

from gpu_probe.kernels.attention import NEG_BIG, _attend_tile, _load_kv_tile

# The state buffer (int64 words): the arrival counter, the error word and the interpreter's stand-in clock,
# 256 bytes apart so polling the counter does not share a line with the error word.
STATE_COUNTER = tl.constexpr(0)
STATE_ERROR = tl.constexpr(32)
STATE_CLOCK = tl.constexpr(64)
STATE_WORDS = 96


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
def _phase(grid, p):
    """What phase p of the step needs of the grid: this program, the programs, the state buffer, the
    barrier count it waits for, the spin limit, its error code and its stamps."""
    pid, n_programs, state_ptr, base, spin_limit, stamps = grid
    return pid, n_programs, state_ptr, base + p * n_programs, spin_limit, p + 1, stamps + 3 * p


@triton.jit
def _gemv_phase(
    w_ptr, x_ptr, stride_x, out_ptr, stride_out, N, p, grid, step, GEMV: tl.constexpr, SHAPE: tl.constexpr
):
    """out[:batch, rows] = epilogue(x @ W^T) for this program's row blocks, after waiting for `target`.

    N is the output width (SwiGLU: F, with W holding 2F rows). The program's row blocks are a fixed,
    contiguous share of the N / BN blocks; it walks them tile by tile, with the next tile's loads issued
    before the current one is multiplied, and asks the L2 for its weight bytes PF_BYTES ahead.

    Phase `p` of the step (`grid`: see `_phase`); `step`: the split attention's partial outputs and
    log-sum-exps, the batch, the norm's epsilon; GEMV: this phase's compile-time shape and epilogue
    (K, NORM, SWIGLU, RESIDUAL, MERGE, BN, KR); SHAPE: the kernel's (`_decode_step_kernel`).
    """
    pid, n_programs, state_ptr, target, spin_limit, code, stamps = _phase(grid, p)
    part_ptr, lse_ptr, batch, eps = step
    K, NORM, SWIGLU, RESIDUAL, MERGE, BN, KR = GEMV
    BM, C, MBK, PF_BYTES, W_BYTES, N_SPLITS, HEAD_DIM, N_HEADS, WS_ROWS, TRACE, USE_PTX = SHAPE
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
def _item_inputs(item, n_items, cache, k_ptr, v_ptr, ATTENTION: tl.constexpr):
    """An attention item's inputs that do not come from this layer's QKV phase: its range, the RoPE factors
    of its position (cos, sign * sin), its slot, and its first tile of cached K/V."""
    table_ptr, stride_table, pos_ptr, slot_ptr, ctx_ptr, cos_ptr, sin_ptr, max_pos, stride_slot = cache
    N_SPLITS, N_HEADS, N_KV_HEADS, GROUP, ROWS, HEAD_DIM, KV_BLOCK, BLOCK_T, WS_ROWS, IEEE = ATTENTION
    HALF: tl.constexpr = HEAD_DIM // 2
    seq, kv_head, split, lo, hi = _item_range(item, n_items, ctx_ptr, N_KV_HEADS, N_SPLITS, BLOCK_T)
    valid = item < n_items
    d = tl.arange(0, HEAD_DIM)
    pos = tl.minimum(tl.maximum(tl.load(pos_ptr + seq, mask=valid, other=0), 0), max_pos)
    cos = tl.load(cos_ptr + pos * HALF + d % HALF)
    sin = tl.load(sin_ptr + pos * HALF + d % HALF) * tl.where(d < HALF, -1.0, 1.0)
    slot = tl.load(slot_ptr + seq, mask=valid, other=-1).to(tl.int64)
    table_row = table_ptr + seq * stride_table
    tokens = lo + tl.arange(0, BLOCK_T)
    keys, values, mask_t = _load_kv_tile(
        table_row, k_ptr, v_ptr, tokens, hi, d, kv_head * HEAD_DIM, stride_slot, KV_BLOCK
    )
    return seq, kv_head, split, lo, hi, cos, sin, slot, keys, values, mask_t


@triton.jit
def _attention_phase(
    qkv_ptr, k_ptr, v_ptr, p, grid, step, cache, ATTENTION: tl.constexpr, SHAPE: tl.constexpr
):
    """RoPE + the new token's K/V write + decode attention over one layer's paged cache, as in
    attention._paged_attention_kernel, one item (sequence, KV head, context split) at a time: items
    pid, pid + n_programs, ... Each item writes its normalised output and log2-sum-exp for the O phase.

    Phase `p` of the step (`grid`: see `_phase`); `step`: as `_gemv_phase`'s, and the attention's scale;
    `cache`: the block table, positions, slots, context lengths, RoPE tables; ATTENTION: its compile-time
    shape (N_SPLITS, N_HEADS, N_KV_HEADS, GROUP, ROWS, HEAD_DIM, KV_BLOCK, BLOCK_T, WS_ROWS, IEEE)."""
    pid, n_programs, state_ptr, target, spin_limit, code, stamps = _phase(grid, p)
    part_ptr, lse_ptr, batch, qk_scale = step
    table_ptr, stride_table, pos_ptr, slot_ptr, ctx_ptr, cos_ptr, sin_ptr, max_pos, stride_slot = cache
    N_SPLITS, N_HEADS, N_KV_HEADS, GROUP, ROWS, HEAD_DIM, KV_BLOCK, BLOCK_T, WS_ROWS, IEEE = ATTENTION
    TRACE, USE_PTX = SHAPE[9], SHAPE[10]
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
        pid, n_items, cache, k_ptr, v_ptr, ATTENTION
    )
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
            tokens = start + BLOCK_T + tl.arange(0, BLOCK_T)
            keys_next, values_next, mask_next = _load_kv_tile(
                table_row, k_ptr, v_ptr, tokens, hi, d, head_off, stride_slot, KV_BLOCK
            )
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
            item + n_programs, n_items, cache, k_ptr, v_ptr, ATTENTION
        )
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

    # What every phase shares: the grid and its barrier (`_phase`), the step's buffers and sizes, the cache.
    grid = (pid, n_programs, state_ptr, base, spin_limit, stamps)
    gemv_step = (part_ptr, lse_ptr, batch, eps)
    attention_step = (part_ptr, lse_ptr, batch, qk_scale)
    cache = (table_ptr, stride_table, pos_ptr, slot_ptr, ctx_ptr, cos_ptr, sin_ptr, max_pos, kv_stride_slot)
    SHAPE: tl.constexpr = (
        BM,
        C,
        MBK,
        PF_BYTES,
        W_BYTES,
        N_SPLITS,
        HEAD_DIM,
        N_HEADS,
        WS_ROWS,
        TRACE,
        USE_PTX,
    )
    ATTENTION: tl.constexpr = (
        N_SPLITS,
        N_HEADS,
        N_KV_HEADS,
        GROUP,
        ROWS,
        HEAD_DIM,
        KV_BLOCK,
        BLOCK_T,
        WS_ROWS,
        IEEE,
    )
    # Each GEMV phase's compile-time shape and epilogue: (K, NORM, SWIGLU, RESIDUAL, MERGE, BN, KR).
    QKV: tl.constexpr = (HIDDEN, True, False, False, False, BN_QKV, KR_QKV)
    O_PROJ: tl.constexpr = (Q_SIZE, False, False, True, True, BN_O, KR_O)  # the split attention merged first
    GATE_UP: tl.constexpr = (HIDDEN, True, True, False, False, BN_GU, KR_GU)
    DOWN: tl.constexpr = (FFN, False, False, True, False, BN_DOWN, KR_DOWN)
    LM_HEAD: tl.constexpr = (HIDDEN, True, False, False, False, BN_LM, KR_LM)

    for layer in range(n_layers):
        p = 1 + 5 * layer
        lw = tl.cast(layer, tl.int64)
        k_ptr = kv_ptr + lw * kv_stride_layer
        v_ptr = k_ptr + kv_stride_kv
        w = w_qkv_ptr + lw * (QKV_N * HIDDEN)
        _gemv_phase(w, h_ptr, HIDDEN, qkv_ptr, QKV_N, QKV_N, p, grid, gemv_step, QKV, SHAPE)
        _arrive(state_ptr)
        _attention_phase(qkv_ptr, k_ptr, v_ptr, p + 1, grid, attention_step, cache, ATTENTION, SHAPE)
        _arrive(state_ptr)
        w, xs = w_o_ptr + lw * (HIDDEN * Q_SIZE), xs_ptr + pid * (BM * Q_SIZE)  # xs: this program's scratch
        _gemv_phase(w, xs, Q_SIZE, h_ptr, HIDDEN, HIDDEN, p + 2, grid, gemv_step, O_PROJ, SHAPE)
        _arrive(state_ptr)
        w = w_gate_up_ptr + lw * (2 * FFN * HIDDEN)
        _gemv_phase(w, h_ptr, HIDDEN, act_ptr, FFN, FFN, p + 3, grid, gemv_step, GATE_UP, SHAPE)
        _arrive(state_ptr)
        w = w_down_ptr + lw * (HIDDEN * FFN)
        _gemv_phase(w, act_ptr, FFN, h_ptr, HIDDEN, HIDDEN, p + 4, grid, gemv_step, DOWN, SHAPE)
        _arrive(state_ptr)

    last = n_phases - 1
    _gemv_phase(
        w_lm_ptr, h_ptr, HIDDEN, logits_ptr, stride_logits, VOCAB, last, grid, gemv_step, LM_HEAD, SHAPE
    )
