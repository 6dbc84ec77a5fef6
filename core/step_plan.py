"""How a decode step runs: the one table of modes, and the step plan every engine reads.

- A **mode** is a way to run a step, one row of `MODES`: its one name, which kernels run (its
  kernel set), whether the host replays a graph captured for the batch's bucket, what the host
  pays per eager launch relative to the hardware's figure, whether the timing model represents
  it and whether the simulator and the probe offer it. What follows from a row is derived from it
  once: its title (`Mode.title`), whether it is fused, the mode it runs as above its largest
  bucket (`without_graphs`). What the simulator makes of its kernel set (its kernels, how the host
  submits them, the probe's kernels of it for the calibration) is that set's object,
  `sim.step.kernel_sets`. Every subset the code needs is read from the table (`modes(...)`), so
  adding a mode is one row here (a new kernel set also needs its name in `KERNEL_SETS` and its
  objects: the simulator's, the probe's).
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

# A mode's kernel set: which kernels run. The probe's own, unfused (its PyTorch ops, one kernel each) or
# fused (its Triton kernels); Inductor's (torch.compile builds its own); or the probe's one persistent
# kernel (gpu_probe/kernels/persistent/): the fused kernels as phases of one launch, separated by grid
# barriers instead of kernel boundaries. Each layer keys its own object per set by this name: the
# simulator's (its kernels, its submission, its calibration family) in `sim.step.kernel_sets`; the probe's (how
# a step of it is built and captured) in `gpu_probe.kernel_sets`.
UNFUSED_KERNELS = "unfused"
FUSED_KERNELS = "fused"
INDUCTOR_KERNELS = "inductor"
PERSISTENT_KERNELS = "persistent"
KERNEL_SETS = (UNFUSED_KERNELS, FUSED_KERNELS, INDUCTOR_KERNELS, PERSISTENT_KERNELS)
# The sets a rank of the tensor-parallel probe runs (`gpu_probe.tensor_parallel` shards the probe's own model,
# whose two forwards these are): what a two-GPU result file may hold (`core.tp_result.tp_modes`).
SHARDED_KERNEL_SETS = (UNFUSED_KERNELS, FUSED_KERNELS)

# A title is the name with its words spelled out: "fused+graph" is titled "fusion + graphs".
TITLE_WORDS = {
    "fused": "fusion",
    "graph": "graphs",
    "compile": "torch.compile",
    "persistent": "persistent kernel",
}


@dataclass(frozen=True, slots=True)
class Mode:
    name: str  # its one name: result files, URLs, the CLI, the tools; the page titles it (`title`)
    kernels: str  # its kernel set (KERNEL_SETS)
    graphs: bool  # the host replays one captured CUDA graph per step (when the batch fits a bucket)
    modelled: bool = True  # the timing model represents it: simulated, fitted by the calibration
    probed: bool = True  # the live probe runs it
    toggles: bool = True  # the Simulator's two toggles (Kernel fusion, CUDA graphs) select it
    launch_scale: float = 1.0  # host cost of an eager launch, relative to the hardware's figure
    colour: str = "#7a7a7a"  # its colour wherever modes are drawn side by side

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("Mode.name: must be a non-empty string")
        if self.kernels not in KERNEL_SETS:
            raise ValueError(f"Mode.kernels: must be one of {', '.join(KERNEL_SETS)}, got {self.kernels!r}")
        if not (isinstance(self.launch_scale, (int, float)) and 0 < self.launch_scale <= 100):
            raise ValueError(f"Mode.launch_scale: must be above 0 and at most 100, got {self.launch_scale!r}")

    @property
    def fused(self) -> bool:
        """Fusion on: fewer, bigger kernels than the unfused layer's."""
        return self.kernels != UNFUSED_KERNELS

    @property
    def slug(self) -> str:
        """Its name where a '+' does not belong (file names, JSON keys of summaries): "fused_graph"."""
        return self.name.replace("+", "_")

    @property
    def title(self) -> str:
        """How the page titles it: its name with the words spelled out ("fusion + graphs")."""
        return " + ".join(TITLE_WORDS.get(word, word) for word in self.name.split("+"))


# The one table, in the order every table and chart lists modes.
MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode("eager", UNFUSED_KERNELS, False, colour="#d1495b"),
        Mode("fused", FUSED_KERNELS, False, colour="#edae49"),
        Mode("graph", UNFUSED_KERNELS, True, colour="#00798c"),
        Mode("fused+graph", FUSED_KERNELS, True, colour="#30638e"),
        Mode("compile", INDUCTOR_KERNELS, True, modelled=False, toggles=False, colour="#7a7a7a"),
        Mode("persistent", PERSISTENT_KERNELS, True, toggles=False, colour="#6a4c93"),
    )
}
FIELDS = frozenset(Mode.__slots__) | {"fused"}  # what `modes(...)` can select by


def modes(**where) -> tuple[Mode, ...]:
    """The table's rows, in order, whose fields equal `where`: `modes(modelled=True)`, `modes(graphs=True)`.

    Read the table on every call (never cache a subset at import), so a mode added to it is seen
    everywhere."""
    unknown = set(where) - FIELDS
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
PERSISTENT = modes(kernels=PERSISTENT_KERNELS)[0]


def without_graphs(m: Mode) -> Mode:
    """What a graph mode runs above its largest bucket: the table's row with its kernels launched eagerly, or
    else the probe's own kernels of its fusion (the persistent kernel and torch.compile: the fused kernels,
    which the probe's decoder falls back to)."""
    if not m.graphs:
        return m
    for kernels in (m.kernels, FUSED_KERNELS if m.fused else UNFUSED_KERNELS):
        same = modes(graphs=False, kernels=kernels, launch_scale=m.launch_scale)
        if same:
            return same[0]
    return replace(m, graphs=False)


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
        text = f"{model_name}{gpus} · batch {self.batch} · {self.runs_as.title}"
        if self.eager_fallback:
            text += " (above the largest bucket: eager)"
        elif self.padded_rows:
            text += f" (padded to bucket {self.bucket})"
        return text
