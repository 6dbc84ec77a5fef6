"""How a decode step runs: the one table of modes, and the step plan every engine reads.

- A **mode** is a way to run a step, one row of `MODES`: which kernels run (the probe's unfused
  or fused kernels, or Inductor's), how the host submits them (a launch per kernel, or one
  replay of a graph captured for the batch's bucket), what the host pays per eager launch
  relative to the hardware's figure, whether the timing model represents it, whether the
  simulator and the probe offer it, and the names the page gives it. Every subset the code
  needs is derived from the table (`modes(...)`); no other module spells a mode's name or
  lists modes, so adding a mode is one row here plus its kernels.
- A **step plan** (`StepPlan`) is one mode at one batch on `tp` GPUs with a bucket list: it
  says which bucket a graph mode replays (the smallest that holds the batch; above the
  largest the step runs eagerly), how many rows are padding, and what the step is compared
  with (`baseline`). The simulator's schedule and sweep, the tensor-parallel step, the
  calibration, the trace what-ifs, the probe and the page all take one.
- A **bucket list** is the batch sizes captured as graphs; `CHAPTER_BUCKETS` is the chapter's,
  the default of the simulator and the probe; `check_buckets` is the one validation.

numpy only: `gpu_probe` imports it without streamlit or plotly, `sim` without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

# Whose kernels a mode runs: the probe's own (its unfused PyTorch ops or its fused Triton
# kernels: the simulator's kernel lists model them), Inductor's (torch.compile builds its own), or
# the probe's one persistent kernel (the whole step in one launch, gpu_probe/kernels/persistent.py).
PROBE_KERNELS = "probe"
INDUCTOR_KERNELS = "inductor"
PERSISTENT_KERNELS = "persistent"


@dataclass(frozen=True, slots=True)
class Mode:
    name: str  # as result files, URLs and the CLI spell it
    label: str  # as the page names it in prose and tables: "fused + graph"
    title: str  # as the simulator's sweep and tables title it: "fusion + graphs"
    short: str  # as a drawn step's label names it: "fusion+graphs"
    fused: bool  # fusion on: the fused kernel set (fewer, bigger kernels)
    graphs: bool  # the host replays one captured CUDA graph per step (when the batch fits a bucket)
    kernels: str = PROBE_KERNELS
    modelled: bool = True  # the timing model represents it: simulated, fitted by the calibration
    probed: bool = True  # the live probe runs it
    toggles: bool = True  # the Simulator's two toggles (Kernel fusion, CUDA graphs) select it
    launch_scale: float = 1.0  # host cost of an eager launch, relative to the hardware's figure
    colour: str = "#7a7a7a"  # its colour wherever modes are drawn side by side
    # The whole step is one kernel: its fused kernels become phases of one launch, separated by grid
    # barriers instead of kernel boundaries (a replay is then a graph of one node).
    one_kernel: bool = False

    def __post_init__(self) -> None:
        if self.kernels not in (PROBE_KERNELS, INDUCTOR_KERNELS, PERSISTENT_KERNELS):
            raise ValueError(
                f"Mode.kernels: must be {PROBE_KERNELS!r}, {INDUCTOR_KERNELS!r} or {PERSISTENT_KERNELS!r}"
            )
        if self.one_kernel and not (self.fused and self.graphs):
            raise ValueError("Mode.one_kernel: one persistent kernel is fused and replayed as a graph")
        if not (isinstance(self.launch_scale, (int, float)) and 0 < self.launch_scale <= 100):
            raise ValueError(f"Mode.launch_scale: must be above 0 and at most 100, got {self.launch_scale!r}")


# The one table, in the order every table and chart lists modes.
MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode("eager", "eager (unfused)", "unoptimised", "eager", False, False, colour="#d1495b"),
        Mode("fused", "fused", "fusion", "fusion", True, False, colour="#edae49"),
        Mode("graph", "graph (unfused)", "graphs", "graphs", False, True, colour="#00798c"),
        Mode(
            "fused+graph", "fused + graph", "fusion + graphs", "fusion+graphs", True, True, colour="#30638e"
        ),
        Mode(
            "compile",
            "torch.compile",
            "torch.compile",
            "compile",
            True,
            True,
            kernels=INDUCTOR_KERNELS,
            modelled=False,
            toggles=False,
            colour="#7a7a7a",
        ),
        Mode(
            "persistent",
            "persistent kernel",
            "persistent kernel",
            "persistent",
            True,
            True,
            kernels=PERSISTENT_KERNELS,
            toggles=False,
            one_kernel=True,
            colour="#6a4c93",
        ),
    )
}


def modes(**where) -> tuple[Mode, ...]:
    """The table's rows, in order, whose fields equal `where`: `modes(modelled=True)`, `modes(graphs=True)`.

    Read the table on every call (never cache a subset at import), so a mode added to it is seen
    everywhere."""
    unknown = set(where) - set(Mode.__slots__)
    if unknown:
        raise TypeError(f"modes: no Mode field {sorted(unknown)}")
    return tuple(m for m in MODES.values() if all(getattr(m, k) == v for k, v in where.items()))


def names(rows) -> tuple[str, ...]:
    return tuple(m.name for m in rows)


def probe_modes() -> tuple[str, ...]:
    """The modes the live probe runs, by name, in the table's order ("all" on its command line)."""
    return names(modes(probed=True))


def mode(name) -> Mode:
    """The table's row named `name` (a Mode passes through), or ValueError listing the names."""
    if isinstance(name, Mode):
        return name
    found = MODES.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"mode: must be one of {', '.join(MODES)}, got {name!r}")
    return found


def toggled(fused: bool, graphs: bool) -> Mode:
    """The mode the Simulator's two toggles select."""
    return next(m for m in modes(toggles=True) if (m.fused, m.graphs) == (bool(fused), bool(graphs)))


# The rows other modules name: the unoptimised step everything is compared with, and the headline.
BASELINE = toggled(False, False)
FUSED = toggled(True, False)
GRAPH = toggled(False, True)
FUSED_GRAPH = toggled(True, True)
COMPILE = modes(kernels=INDUCTOR_KERNELS)[0]
PERSISTENT = modes(one_kernel=True)[0]


def without_graphs(m: Mode) -> Mode:
    """What a graph mode runs above its largest bucket: the table's row with its kernels launched eagerly (the
    persistent kernel: the probe's fused kernels, which its decoder falls back to)."""
    if not m.graphs:
        return m
    for kernels in (m.kernels, PROBE_KERNELS):
        same = modes(graphs=False, fused=m.fused, kernels=kernels, launch_scale=m.launch_scale)
        if same:
            return same[0]
    return replace(m, graphs=False, one_kernel=False)


# -- bucket lists ----------------------------------------------------------------------
# The chapter's capture sizes: dense where batches are common, sparse where they are rare.
CHAPTER_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
MAX_BUCKET = 65_536  # no engine captures more rows than this; a larger size is a typo or an attack
MAX_BATCH = MAX_BUCKET  # the simulator's and the probe's largest batch
TP_CHOICES = (1, 2, 4, 8)  # GPUs a step can be split over (tensor parallel)


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


def bucket_rows(batches: np.ndarray, buckets: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """`bucket_for` over an array of batches: (rows each replays, whether it fits a bucket at all)."""
    batches = np.asarray(batches)
    if not buckets:
        return batches.copy(), np.zeros(batches.shape, bool)
    fits = batches <= buckets[-1]
    rows = np.asarray(buckets)[np.minimum(np.searchsorted(buckets, batches), len(buckets) - 1)]
    return np.where(fits, rows, batches), fits


# -- the step plan ----------------------------------------------------------------------
def check_tp(tp) -> int:
    if isinstance(tp, (bool, np.bool_)) or not isinstance(tp, (int, np.integer)) or int(tp) not in TP_CHOICES:
        raise ValueError(f"tp: must be one of {TP_CHOICES}, got {tp!r}")
    return int(tp)


@dataclass(frozen=True, slots=True)
class StepPlan:
    """One decode step: `mode` at `batch` sequences on `tp` GPUs, graphs captured for `buckets`."""

    mode: Mode = BASELINE
    batch: int = 1
    tp: int = 1
    buckets: tuple[int, ...] = CHAPTER_BUCKETS
    bucket: int | None = field(init=False)  # the captured size replayed; None when launched eagerly

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", mode(self.mode))
        if isinstance(self.batch, (bool, np.bool_)) or not isinstance(self.batch, (int, np.integer)):
            raise ValueError(f"StepPlan.batch: must be an integer, got {self.batch!r}")
        if not 1 <= self.batch <= MAX_BATCH:
            raise ValueError(f"StepPlan.batch: must be from 1 to {MAX_BATCH}, got {self.batch}")
        object.__setattr__(self, "batch", int(self.batch))
        object.__setattr__(self, "tp", check_tp(self.tp))
        object.__setattr__(self, "buckets", check_buckets(self.buckets, "StepPlan.buckets"))
        bucket = bucket_for(self.batch, self.buckets) if self.mode.graphs else None
        object.__setattr__(self, "bucket", bucket)

    @property
    def replays(self) -> bool:
        """The host submits the step as one graph replay."""
        return self.bucket is not None

    @property
    def eager_fallback(self) -> bool:
        """Graphs asked for, but the batch is above the largest bucket: launched eagerly."""
        return self.mode.graphs and self.bucket is None

    @property
    def runs_as(self) -> Mode:
        """The mode the step really runs as (a graph mode above its largest bucket runs without graphs)."""
        return without_graphs(self.mode) if self.eager_fallback else self.mode

    @property
    def rows(self) -> int:
        """Rows the GPU computes: the bucket when a graph replays a padded batch."""
        return self.bucket if self.bucket is not None else self.batch

    @property
    def padded_rows(self) -> int:
        return self.rows - self.batch

    def with_mode(self, other) -> StepPlan:
        return replace(self, mode=mode(other))

    @property
    def baseline(self) -> StepPlan:
        """The same step unoptimised (fusion and graphs off): what 'vs unoptimised' divides."""
        return self.with_mode(BASELINE)

    def label(self, model_name: str) -> str:
        """How a drawn step names itself: model, GPUs, batch, the mode it runs as, padding or fallback."""
        gpus = f" · {self.tp} GPUs (tensor parallel), one GPU's lanes" if self.tp > 1 else ""
        text = f"{model_name}{gpus} · batch {self.batch} · {self.runs_as.short}"
        if self.eager_fallback:
            text += " (above the largest bucket: eager)"
        elif self.padded_rows:
            text += f" (padded to bucket {self.bucket})"
        return text
