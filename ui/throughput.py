"""Throughput for someone who serves models: tokens a second and time per output token against the batch, and the
batch where each mode saturates. Shared by the Simulator's batch sweep and the probe's batch axis.

A decode step gives each of its `batch` sequences one token, so at batch b a step of t µs makes b tokens: b × 10⁶ / t
tokens a second (on all the GPUs the step runs on; per GPU, divided by their count), and each sequence waits t µs for
its next token (the time per output token, TPOT, in ms). A bigger batch reads the weights once for more tokens, so
tokens/s grows with it until the step's own work grows as fast as the batch: there the mode saturates.
"""

from __future__ import annotations

import numpy as np

SATURATION_GAIN = (
    0.10  # a doubling of the batch that adds less than this much tokens/s is not worth its latency
)
SATURATION_RULE = (
    f"a mode saturates at the smallest batch from which every doubling of the batch adds less than "
    f"{100 * SATURATION_GAIN:.0f} % tokens/s"
)


def tokens_per_s(batches, step_us) -> np.ndarray:
    """Tokens a second: one token per sequence per step."""
    return np.asarray(batches, float) * 1e6 / np.asarray(step_us, float)


def ms_per_token(step_us) -> np.ndarray:
    """Time per output token, ms: each sequence gets one token a step."""
    return np.asarray(step_us, float) / 1e3


def gain_per_doubling(batches, rate) -> np.ndarray:
    """Between consecutive batches, the relative tokens/s gain per doubling of the batch:
    (rate₂ / rate₁) ^ (1 / log₂(b₂ / b₁)) − 1 (one entry fewer than the batches)."""
    b, r = np.asarray(batches, float), np.asarray(rate, float)
    return (r[1:] / r[:-1]) ** (1.0 / np.log2(b[1:] / b[:-1])) - 1.0


def saturation(batches, rate) -> int | None:
    """The batch where tokens/s saturates (`SATURATION_RULE`), or None where the last step still gains at least
    SATURATION_GAIN per doubling (or fewer than two batches). On a dense sweep (every batch), the gain at b is
    that from b to 2b, where both were swept; on a few measured batches, that to the next one."""
    b, r = np.asarray(batches), np.asarray(rate, float)
    if len(b) < 2:
        return None
    dense = len(b) > 8 and np.all(np.diff(b) == 1)
    if dense:
        index = {int(x): i for i, x in enumerate(b)}
        has_double = np.array([int(2 * x) in index for x in b])
        doubled = np.array([r[index[int(2 * x)]] if ok else np.nan for x, ok in zip(b, has_double)])
        gains = doubled / r - 1.0
        b, gains = b[has_double], gains[has_double]
    else:
        gains = gain_per_doubling(b, r)
        b = b[:-1]
    slow = gains < SATURATION_GAIN
    if not len(slow) or not slow[-1]:
        return None
    last_fast = np.flatnonzero(~slow)
    first = last_fast[-1] + 1 if len(last_fast) else 0
    return int(b[first])
