"""Bucket layouts for CUDA-graph capture, the padding they cost, and the optimal layout.

A captured graph only fits the batch size it was captured at, so an engine captures a
list of sizes (a *layout*) and pads each real batch up to the smallest bucket that holds
it. Batches above the largest bucket run eager. Everything here is plain numpy over
arrays of batch sizes and weights (a workload: how often each batch size occurs).

`optimal_buckets` solves the chapter's first exercise exactly: a dynamic programme over
the sorted batch sizes, because the best bucket for any contiguous run of sizes is the
largest size in the run (anything above it only adds padding).
"""

from __future__ import annotations

import re

import numpy as np

from core.step_plan import CHAPTER_BUCKETS, bucket_array

# Guard rails for user-typed layouts: beyond these the page would only slow down.
MAX_BUCKET_SIZE = 4096
MAX_LAYOUT_LEN = 1024
MAX_LAYOUT_TEXT = 20_000
MAX_DP_SIZES = 2048  # the optimiser holds a few m×m float arrays: 2048² × 8 B = 32 MiB each

LAYOUTS = ("chapter", "powers of two", "vLLM", "SGLang", "nano-vllm", "dense")

# Where each engine's default list comes from (read in the engines' sources).
LAYOUT_SOURCES = {
    "chapter": "the chapter's BUCKETS list (S13, code/s13_cuda_graphs.py excerpt)",
    "powers of two": "1, 2, 4, 8, ... up to the maximum batch",
    "vLLM": "vllm-project/vllm, vllm/config/vllm.py VllmConfig._set_cudagraph_sizes: "
    "[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16), capped at the max capture size",
    "SGLang": "sgl-project/sglang, python/sglang/srt/server_args.py _generate_cuda_graph_batch_sizes: "
    "[1, 2, 4, 8, 12] + range(16, 257, 8) + range(272, 512, 16) + range(512, max + 1, 32), "
    "cut at cuda_graph_max_bs, which is appended if missing",
    "nano-vllm": "GeeeekExplorer/nano-vllm, nanovllm/engine/model_runner.py capture_cudagraph: "
    "[1, 2, 4, 8] + range(16, max_bs + 1, 16)",
    "dense": "every batch size from 1 to the maximum: no padding, one graph per size",
}


def _check_max_batch(max_batch) -> int:
    if isinstance(max_batch, bool) or not isinstance(max_batch, (int, np.integer)):
        raise ValueError(f"max_batch must be an integer, got {max_batch!r}")
    if not 1 <= max_batch <= MAX_BUCKET_SIZE:
        raise ValueError(f"max_batch must be between 1 and {MAX_BUCKET_SIZE}, got {max_batch}")
    return int(max_batch)


def layout(name: str, max_batch: int) -> tuple[int, ...]:
    """The bucket sizes layout `name` captures when the engine's maximum batch is `max_batch`.

    Each engine's own rule for the top end is kept: vLLM, nano-vllm, the chapter and powers
    of two stop at the last size ≤ max_batch (batches above it run eager); SGLang appends
    max_batch itself.
    """
    m = _check_max_batch(max_batch)
    if name == "chapter":
        sizes = list(CHAPTER_BUCKETS)
    elif name == "powers of two":
        sizes = [1 << i for i in range(m.bit_length())]
    elif name == "vLLM":
        # vllm/config/vllm.py: "1, 2, 4, then multiples of 8 up to 256 and then multiples of 16".
        sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, m + 1, 16))
    elif name == "SGLang":
        # server_args.py, the non-speculative branch.
        sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16))
        sizes += list(range(512, m + 1, 32))
        sizes = [s for s in sizes if s <= m]
        if m not in sizes:
            sizes.append(m)
    elif name == "nano-vllm":
        # model_runner.capture_cudagraph: graph_bs = [1, 2, 4, 8] + range(16, max_bs + 1, 16).
        sizes = [1, 2, 4, 8] + list(range(16, m + 1, 16))
    elif name == "dense":
        sizes = list(range(1, m + 1))
    else:
        raise ValueError(f"unknown layout {name!r}; choose one of {', '.join(LAYOUTS)}")
    return tuple(sorted({s for s in sizes if s <= m}))


_SEPARATORS = re.compile(r"[\s,;]+")


def parse_layout(text: str) -> tuple[int, ...]:
    """Parse a typed bucket list such as "1, 2, 4, 8, 16" (brackets optional).

    Strict: every item must be a positive whole number written in digits. Returns the
    sizes sorted with duplicates removed. Raises ValueError with a message a user can act on.
    """
    if not isinstance(text, str):
        raise ValueError("the bucket list must be text such as 1, 2, 4, 8")
    if len(text) > MAX_LAYOUT_TEXT:
        raise ValueError(f"the bucket list is too long (over {MAX_LAYOUT_TEXT:,} characters)")
    body = text.strip()
    if body[:1] in "[(" and body[-1:] in "])":
        body = body[1:-1]
    items = [item for item in _SEPARATORS.split(body) if item]
    if not items:
        raise ValueError("the bucket list is empty: type sizes such as 1, 2, 4, 8")
    if len(items) > MAX_LAYOUT_LEN:
        raise ValueError(f"too many buckets ({len(items)}); at most {MAX_LAYOUT_LEN} are allowed")
    sizes = []
    for position, item in enumerate(items, start=1):
        if not item.isascii() or not item.isdigit():
            shown = item if len(item) <= 20 else item[:20] + "…"
            raise ValueError(f"item {position} ({shown!r}) is not a positive whole number")
        value = int(item)
        if value < 1:
            raise ValueError(f"item {position} is {value}: bucket sizes must be at least 1")
        if value > MAX_BUCKET_SIZE:
            raise ValueError(f"item {position} is {value}: bucket sizes must be at most {MAX_BUCKET_SIZE}")
        sizes.append(value)
    return tuple(sorted(set(sizes)))


def format_layout(buckets, limit: int = 12) -> str:
    """Short human form: "1, 2, 4, … 256 (36 sizes)"."""
    sizes = [int(b) for b in buckets]
    if len(sizes) <= limit:
        return ", ".join(map(str, sizes))
    head = ", ".join(map(str, sizes[: limit - 2]))
    return f"{head}, … {sizes[-1]} ({len(sizes)} sizes)"


def _as_workload(batch_sizes, weights) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.asarray(batch_sizes, dtype=np.int64).reshape(-1)
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if sizes.size == 0:
        raise ValueError("batch_sizes: need at least one batch size")
    if sizes.shape != w.shape:
        raise ValueError(f"batch_sizes and weights must have equal lengths ({sizes.size} vs {w.size})")
    if np.any(sizes < 1):
        raise ValueError("batch_sizes: every batch size must be at least 1")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights: every weight must be a finite number ≥ 0")
    if not w.sum() > 0:
        raise ValueError("weights: at least one weight must be positive")
    return sizes, w


def bucket_sizes_for(buckets, batch_sizes) -> np.ndarray:
    """The bucket each batch size is padded up to; 0 where it exceeds the largest (eager)."""
    arr = bucket_array(buckets)
    sizes = np.asarray(batch_sizes, dtype=np.int64).reshape(-1)
    index = np.searchsorted(arr, sizes, side="left")
    eager = index >= arr.size
    return np.where(eager, 0, arr[np.minimum(index, arr.size - 1)])


def padded_rows(buckets, batch_sizes) -> np.ndarray:
    """Dummy rows added at each batch size (0 for batches that run eager)."""
    sizes = np.asarray(batch_sizes, dtype=np.int64).reshape(-1)
    chosen = bucket_sizes_for(buckets, sizes)
    return np.where(chosen > 0, chosen - sizes, 0)


def padding_waste(buckets, batch_sizes, weights) -> float:
    """Expected padded rows per decode step: Σ wₙ·(bucket(n) − n) / Σ wₙ.

    `weights` are how often each batch size occurs (counts or probabilities; they are
    normalised). Batch sizes above the largest bucket run eager and add no padding; count
    them separately (`eager_share`).
    """
    sizes, w = _as_workload(batch_sizes, weights)
    return float(np.dot(w, padded_rows(buckets, sizes)) / w.sum())


def eager_share(buckets, batch_sizes, weights) -> float:
    """Fraction of steps whose batch is above the largest bucket and so runs eager."""
    sizes, w = _as_workload(batch_sizes, weights)
    return float(w[sizes > bucket_array(buckets)[-1]].sum() / w.sum())


def _dp_tables(sizes: np.ndarray, w: np.ndarray, cost: np.ndarray, max_buckets: int):
    """f[k, i]: least cost covering sizes[0..i] with k+1 buckets, the last one at sizes[i]."""
    m = sizes.size
    prefix_w = np.concatenate(([0.0], np.cumsum(w)))
    prefix_wc = np.concatenate(([0.0], np.cumsum(w * cost)))
    # seg[j, i] = cost of one bucket at sizes[i] serving sizes[j+1..i] (j = -1 .. i-1, shifted by one).
    seg = cost[None, :] * (prefix_w[1:][None, :] - prefix_w[:-1][:, None])
    seg -= prefix_wc[1:][None, :] - prefix_wc[:-1][:, None]
    # Row j of `seg` holds the run starting at sizes[j]; the previous bucket then ends at j - 1.
    upper = np.triu(np.ones((m, m), dtype=bool))
    seg = np.where(upper, seg, np.inf)
    f = np.full((max_buckets, m), np.inf)
    parent = np.full((max_buckets, m), -1, dtype=np.int64)
    f[0] = seg[0]
    for k in range(1, max_buckets):
        # Previous bucket at j-1 (j ≥ 1), this run covers sizes[j..i].
        total = f[k - 1][:-1, None] + seg[1:, :]
        best = np.argmin(total, axis=0)
        f[k] = total[best, np.arange(m)]
        parent[k] = best  # index of the previous bucket
    return f, parent


def _backtrack(sizes: np.ndarray, parent: np.ndarray, k: int) -> tuple[int, ...]:
    i = sizes.size - 1
    chosen = []
    while k >= 0 and i >= 0:
        chosen.append(int(sizes[i]))
        i = int(parent[k, i]) if k > 0 else -1
        k -= 1
    return tuple(sorted(chosen))


def optimal_layouts(batch_sizes, weights, max_buckets: int, cost=None) -> list[tuple[tuple[int, ...], float]]:
    """The exact optimum for every bucket count 1..max_buckets: [(layout, expected cost), ...].

    `cost` (optional, one value per batch size, non-decreasing in size) replaces the padded
    rows by a general per-size cost: Σ wₙ·(cost(bucket(n)) − cost(n)), e.g. the GPU time of a
    step at that size. Only sizes with positive weight (plus the largest) are candidates: any
    other bucket could be lowered to the largest size it serves at no loss.
    """
    sizes, w = _as_workload(batch_sizes, weights)
    if isinstance(max_buckets, bool) or not isinstance(max_buckets, (int, np.integer)) or max_buckets < 1:
        raise ValueError(f"max_buckets must be a positive integer, got {max_buckets!r}")
    values = sizes.astype(np.float64) if cost is None else np.asarray(cost, dtype=np.float64).reshape(-1)
    if values.shape != sizes.shape or not np.all(np.isfinite(values)):
        raise ValueError("cost: need one finite value per batch size")
    order = np.argsort(sizes, kind="stable")
    sizes, w, values = sizes[order], w[order], values[order]
    uniq, first = np.unique(sizes, return_index=True)
    w = np.add.reduceat(w, first)
    values = values[first]
    if np.any(np.diff(values) < 0):
        raise ValueError("cost: must not decrease as the batch size grows")
    keep = (w > 0) | (np.arange(uniq.size) == uniq.size - 1)
    uniq, w, values = uniq[keep], w[keep], values[keep]
    if uniq.size > MAX_DP_SIZES:
        raise ValueError(
            f"batch_sizes: at most {MAX_DP_SIZES} distinct sizes can be optimised, got {uniq.size}"
        )
    k_max = min(int(max_buckets), uniq.size)
    f, parent = _dp_tables(uniq, w, values, k_max)
    total_w = w.sum()
    return [(_backtrack(uniq, parent, k), float(f[k, -1] / total_w)) for k in range(k_max)]


def optimal_buckets(batch_sizes, weights, max_buckets: int, cost=None) -> tuple[int, ...]:
    """The layout of at most `max_buckets` sizes minimising Σ wₙ·(bucket(n) − n).

    Exact: a dynamic programme over the sorted distinct batch sizes (O(K·m²) work,
    vectorised over the inner minimum). The largest batch size is always a bucket, so
    nothing falls back to eager. Among equally good layouts the one with the fewest
    buckets is returned (fewer graphs pin less memory).
    """
    layouts = optimal_layouts(batch_sizes, weights, max_buckets, cost)
    best = min(c for _, c in layouts)
    tol = 1e-12 * max(1.0, abs(best))
    return next(lay for lay, c in layouts if c <= best + tol)


def best_layout_under_budget(
    batch_sizes, weights, memory_bytes, budget_bytes: float, max_buckets: int, cost=None
):
    """The memory-budget form of `optimal_buckets`.

    For every bucket count k ≤ max_buckets take the exact optimum (`optimal_layouts`, by padded
    rows or by `cost`, e.g. GPU time per step at each size), keep those whose pinned memory
    `memory_bytes(layout)` fits `budget_bytes`, and return the best as (layout, expected cost);
    None when not even one graph fits. Memory rises with the graph count, so this is the most
    buckets that fit the budget, each count's layout exact. What it does not do is trade, within
    one count, padding for smaller buckets' static buffers: a count whose optimum just misses
    the budget is dropped rather than bent to fit.
    """
    best = None
    for lay, expected in optimal_layouts(batch_sizes, weights, max_buckets, cost):
        if memory_bytes(lay) <= budget_bytes and (best is None or expected < best[1] - 1e-12 * abs(best[1])):
            best = (lay, expected)
    return best
