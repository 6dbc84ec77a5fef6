"""The words the simulator, the probe and the page share: modes, toggle combinations, bucket lists.

- A probe **mode** is how a step is run: `eager` (plain PyTorch, one kernel per op), `fused`
  (Triton kernels), `graph` / `fused+graph` (the same, captured and replayed as a CUDA graph per
  bucket) and `compile` (torch.compile's reduce-overhead: Inductor's own kernels in a graph).
  `MODE_INFO` says what each one means in the simulator's terms: fusion on or off, graphs on or
  off, and whether the timing model represents it (`compile` is Inductor's kernels, not ours).
- A simulator **combination** is the page's two toggles, (fusion, graphs): `COMBOS`, each with a
  short label (`combo_label`, as the lanes name a step) and a title (`combo_title`, as the sweep
  chart and tables name it); `mode_of` names the probe mode it corresponds to.
- A **bucket list** is the batch sizes captured as graphs; a batch is padded up to the smallest
  bucket that holds it (`bucket_for`) and runs eagerly above the largest. `CHAPTER_BUCKETS` is
  the chapter's list, the default of both the simulator and the probe; `check_buckets` is the
  one validation.

numpy only: `gpu_probe` imports it without streamlit or plotly, `sim` without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Mode:
    name: str
    fusion: bool  # runs the fused kernels
    graphs: bool  # replays a captured CUDA graph (when the batch fits a bucket)
    modelled: bool  # the timing model represents it (fitted by the calibration)
    label: str  # how the page names it in prose


MODE_INFO: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode("eager", False, False, True, "eager (unfused)"),
        Mode("fused", True, False, True, "fused"),
        Mode("graph", False, True, True, "graph (unfused)"),
        Mode("fused+graph", True, True, True, "fused + graph"),
        Mode("compile", True, True, False, "torch.compile"),
    )
}
MODES = tuple(MODE_INFO)  # the probe's modes, in the order every table lists them
FIT_MODES = tuple(m for m in MODES if MODE_INFO[m].modelled)  # what the timing model represents
FUSED_MODES = tuple(m for m in MODES if MODE_INFO[m].fusion)
GRAPH_MODES = tuple(m for m in MODES if MODE_INFO[m].graphs)

# The simulator's toggle combinations (fusion, graphs), in the order its sweep draws them.
COMBOS = ((False, False), (True, False), (False, True), (True, True))
_COMBO_LABELS = {
    (False, False): "eager",
    (True, False): "fusion",
    (False, True): "graphs",
    (True, True): "fusion+graphs",
}
_COMBO_TITLES = {
    (False, False): "unoptimised",
    (True, False): "fusion",
    (False, True): "graphs",
    (True, True): "fusion + graphs",
}


def combo_label(fusion: bool, graphs: bool) -> str:
    """Short name of a combination in a step's label: 'eager', 'fusion', 'graphs', 'fusion+graphs'."""
    return _COMBO_LABELS[(bool(fusion), bool(graphs))]


def combo_title(fusion: bool, graphs: bool) -> str:
    """Name of a combination as the sweep chart and tables title it ('unoptimised', ...)."""
    return _COMBO_TITLES[(bool(fusion), bool(graphs))]


def mode_of(fusion: bool, graphs: bool) -> str:
    """The probe mode a simulator combination corresponds to ('eager', 'fused', 'graph', 'fused+graph')."""
    return next(m.name for m in MODE_INFO.values() if m.modelled and (m.fusion, m.graphs) == (fusion, graphs))


# -- bucket lists ----------------------------------------------------------------------
# The chapter's capture sizes: dense where batches are common, sparse where they are rare.
CHAPTER_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
MAX_BUCKET = 65_536  # no engine captures more rows than this; a larger size is a typo or an attack


def check_buckets(buckets, owner: str = "buckets", allow_empty: bool = True) -> tuple[int, ...]:
    """Sorted, distinct bucket sizes (integers from 1 to MAX_BUCKET), or ValueError naming `owner`.

    An empty list is allowed where it means "no graphs: every batch runs eagerly" (the simulator),
    refused where a graph runner must capture something (`allow_empty=False`).
    """
    if isinstance(buckets, (str, bytes)):
        raise ValueError(f"{owner}: must be a sequence of batch sizes, got {buckets!r}")
    try:
        values = tuple(np.asarray(buckets).reshape(-1)) if isinstance(buckets, np.ndarray) else tuple(buckets)
    except TypeError:
        raise ValueError(f"{owner}: must be a sequence of batch sizes") from None
    for b in values:
        if (
            isinstance(b, (bool, np.bool_))
            or not isinstance(b, (int, np.integer))
            or not 1 <= b <= MAX_BUCKET
        ):
            raise ValueError(f"{owner}: each bucket must be an integer from 1 to {MAX_BUCKET}, got {b!r}")
    if not values and not allow_empty:
        raise ValueError(f"{owner}: the list must contain at least one batch size")
    return tuple(sorted({int(b) for b in values}))


def bucket_array(buckets, owner: str = "buckets") -> np.ndarray:
    """A non-empty bucket list as a sorted int64 array (for vectorised padding sums)."""
    return np.array(check_buckets(buckets, owner, allow_empty=False), dtype=np.int64)


def bucket_for(batch: int, buckets) -> int | None:
    """The smallest bucket that holds `batch`; None above the largest (that batch runs eagerly)."""
    return min((int(b) for b in buckets if b >= batch), default=None)
