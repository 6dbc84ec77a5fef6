"""Batch-size workloads: how often each decode batch size occurs.

Continuous batching changes the batch size every step, so the cost of a bucket layout
depends on the mix of sizes a server actually sees. A `Workload` is that mix: distinct
batch sizes with non-negative weights (counts or probabilities; users normalise nothing).
Three sources: uniform over 1..N, one around a mean (geometric: small batches most common; or Poisson), and
a histogram uploaded as CSV.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass

import numpy as np

MAX_BATCH = 1024  # largest batch size a workload may hold (the optimiser is O(m²) in distinct sizes)
MAX_CSV_BYTES = 1_000_000
MAX_CSV_ROWS = 10_000
TAIL_CUTOFF = 1e-12  # generated workloads drop sizes rarer than this share of steps
KINDS = ("uniform", "geometric", "poisson", "csv")
_INTEGER = re.compile(r"-?[0-9]+")


@dataclass(frozen=True, eq=False)
class Workload:
    """Distinct batch sizes (ascending) and their weights (summing to 1)."""

    name: str
    batch_sizes: np.ndarray
    weights: np.ndarray

    def __post_init__(self) -> None:
        sizes = np.asarray(self.batch_sizes, dtype=np.int64).reshape(-1)
        w = np.asarray(self.weights, dtype=np.float64).reshape(-1)
        if sizes.size == 0:
            raise ValueError("batch_sizes: a workload needs at least one batch size")
        if sizes.shape != w.shape:
            raise ValueError(f"batch_sizes and weights must have equal lengths ({sizes.size} vs {w.size})")
        if np.any(sizes < 1) or np.any(sizes > MAX_BATCH):
            raise ValueError(f"batch_sizes: every batch size must be between 1 and {MAX_BATCH}")
        if np.unique(sizes).size != sizes.size:
            raise ValueError("batch_sizes: each batch size may appear only once")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("weights: every weight must be a finite number ≥ 0")
        if not w.sum() > 0:
            raise ValueError("weights: at least one weight must be positive")
        order = np.argsort(sizes)
        object.__setattr__(self, "batch_sizes", sizes[order])
        object.__setattr__(self, "weights", w[order] / w.sum())

    @property
    def max_batch(self) -> int:
        """Largest batch size that actually occurs (positive weight)."""
        return int(self.batch_sizes[self.weights > 0].max())

    @property
    def mean(self) -> float:
        return float(np.dot(self.batch_sizes, self.weights))

    def to_csv(self) -> str:
        rows = ["batch,probability"]
        rows += [f"{b},{p:.6g}" for b, p in zip(self.batch_sizes, self.weights, strict=True)]
        return "\n".join(rows) + "\n"


def _check_range(value, name: str, low, high) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")


def uniform(max_batch: int) -> Workload:
    """Every batch size 1..max_batch equally often."""
    _check_range(max_batch, "max_batch", 1, MAX_BATCH)
    n = int(max_batch)
    return Workload(f"uniform 1–{n}", np.arange(1, n + 1), np.ones(n))


def geometric(mean: float, max_batch: int) -> Workload:
    """P(n) ∝ (1 − p)^(n−1) on 1..max_batch with p = 1/mean: small batches most common."""
    _check_range(max_batch, "max_batch", 1, MAX_BATCH)
    _check_range(mean, "mean", 1, MAX_BATCH)
    n = np.arange(1, int(max_batch) + 1)
    p = 1.0 / float(mean)
    # In log space so a long tail never underflows to an all-zero vector.
    log_w = (n - 1) * math.log1p(-p) if p < 1 else np.where(n == 1, 0.0, -np.inf)
    return Workload(f"geometric, mean ≈ {mean:g}", n, _trim(log_w))


def _trim(log_w: np.ndarray) -> np.ndarray:
    """Weights from log-weights, with sizes rarer than one step in 10¹² set to exactly 0.

    A step that happens once in a trillion is not a batch size the server sees: left in, it
    would count as an eager fallback size and tie the optimiser to a graph for it.
    """
    w = np.exp(log_w - np.max(log_w))
    w[w < TAIL_CUTOFF * w.sum()] = 0.0
    return w


def poisson(mean: float, max_batch: int) -> Workload:
    """P(n) ∝ λⁿ e^(−λ) / n! on 1..max_batch: batch sizes clustered around the mean λ."""
    _check_range(max_batch, "max_batch", 1, MAX_BATCH)
    _check_range(mean, "mean", 1, MAX_BATCH)
    n = np.arange(1, int(max_batch) + 1)
    log_factorial = np.cumsum(np.log(n))
    log_w = n * math.log(float(mean)) - log_factorial
    return Workload(f"Poisson, mean {mean:g}", n, _trim(log_w))


def _csv_text(data) -> str:
    """An uploaded file's text: UTF-8, not too large, no binary data."""
    if isinstance(data, (bytes, bytearray)):
        if len(data) > MAX_CSV_BYTES:
            raise ValueError(f"the file is too large ({len(data):,} bytes; at most {MAX_CSV_BYTES:,})")
        try:
            text = bytes(data).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ValueError("the file is not UTF-8 text; save it as a plain CSV") from exc
    elif isinstance(data, str):
        text = data.removeprefix("\ufeff")
        if len(text) > MAX_CSV_BYTES:
            raise ValueError(f"the file is too large (over {MAX_CSV_BYTES:,} characters)")
    else:
        raise ValueError("expected the CSV file's text or bytes")
    if "\x00" in text:
        raise ValueError("the file contains binary data; expected a plain CSV")
    return text


def _csv_rows(text: str) -> list[tuple[int, list[str]]]:
    """(line number, cells) of every row with anything in it."""
    rows = []
    reader = csv.reader(io.StringIO(text))
    try:
        for number, row in enumerate(reader, start=1):
            if any(cell.strip() for cell in row):
                rows.append((number, row))
    except csv.Error as err:  # a bare carriage return inside a row, an unclosed quote at the end
        raise ValueError(f"row {reader.line_num}: not a CSV row ({err})") from None
    return rows


def parse_histogram_csv(data, name: str = "uploaded histogram") -> Workload:
    """Parse a `batch,count` CSV (one header line, then integer rows) into a Workload.

    Every problem raises ValueError naming the row and field: a missing or wrong header,
    a non-integer, a batch below 1 or above MAX_BATCH, a negative count, a repeated batch,
    no positive count, or a file that is too large.
    """
    rows = _csv_rows(_csv_text(data))
    if not rows:
        raise ValueError("the file is empty; expected a header `batch,count` and one row per batch size")
    header_line, header = rows[0]
    header = [cell.strip().lower() for cell in header]
    if header != ["batch", "count"]:
        got = ",".join(header)
        raise ValueError(f"row {header_line}: the header must be exactly `batch,count`, got `{got}`")
    body = rows[1:]
    if not body:
        raise ValueError("no data rows after the header `batch,count`")
    if len(body) > MAX_CSV_ROWS:
        raise ValueError(f"too many rows ({len(body):,}); at most {MAX_CSV_ROWS:,}")
    seen: dict[int, int] = {}
    sizes, counts = [], []
    for line, row in body:
        if len(row) != 2:
            raise ValueError(f"row {line}: expected 2 fields (batch,count), got {len(row)}")
        batch = _parse_int(row[0], line, "batch")
        count = _parse_int(row[1], line, "count")
        if not 1 <= batch <= MAX_BATCH:
            raise ValueError(f"row {line}: batch must be between 1 and {MAX_BATCH}, got {batch}")
        if count < 0:
            raise ValueError(f"row {line}: count must not be negative, got {count}")
        if batch in seen:
            raise ValueError(f"row {line}: batch {batch} already appeared on row {seen[batch]}")
        seen[batch] = line
        sizes.append(batch)
        counts.append(count)
    if sum(counts) <= 0:
        raise ValueError("every count is 0: at least one batch size needs a positive count")
    return Workload(name, np.array(sizes), np.array(counts, dtype=np.float64))


def _parse_int(cell: str, line: int, field: str) -> int:
    text = cell.strip()
    if not _INTEGER.fullmatch(text) or len(text) > 12:
        shown = text if len(text) <= 20 else text[:20] + "…"
        raise ValueError(f"row {line}, field {field}: {shown!r} is not a whole number")
    return int(text)
