"""A kernel set on the simulator's side: one object per name the modes table gives (`Mode.kernels`).

A mode's row (`core.step_plan.MODES`) names its kernel set. Everything the simulator and the calibration
make of that name is the set's `KernelSet` in `SETS`, and nothing else branches on it:

- `layer`: the kernels one layer launches, in order, each with its work (`sim.step.ops`); the kernels
  around them and the sharding over several GPUs are `sim.step.kernels.step_kernels`'s, for every set;
- `submission`: how the host hands a step of them to the GPU for a row (eager or replayed) on a
  hardware (`sim.step.submission`: a launch or a node per kernel, or one persistent kernel);
- `probe`: the probe's kernels of the set, as the calibration reads a run of it (`ProbeKernels`):
  which kernel family runs each op at a batch (so the work each family does), the activations its
  kernels move that the ops count elsewhere, whether they chain with PDL in a graph, the rows it
  runs at, and its kernels' names in a synthetic run. The family names are `sim.calibration.families`'s;
  each family's host launch kind is the family's own.

A new kernel set is its name in `core.step_plan.KERNEL_SETS` and its rows in `MODES`, one `KernelSet`
here, and on the probe's side how the step is built and captured (`tests/test_a_new_mode.py` adds
one, a toy, from outside both files). Inductor's set (`torch.compile`) has no object: the timing model
does not represent it (its rows are not `modelled`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from core.step_plan import FUSED_KERNELS, PERSISTENT_KERNELS, UNFUSED_KERNELS, Mode
from sim.config import ModelConfig
from sim.step.ops import KEPT_ON_CHIP, Intermediate, Op, fused_layer, unfused_layer
from sim.step.submission import Submission, as_one_kernel, kernel_by_kernel

# -- the probe's choices by rows (sim imports no torch: tests check them against gpu_probe.kernels) ------
GEMV_MAX_ROWS = 4  # gpu_probe.kernels.linear.GEMV_MAX_ROWS; cuBLAS also switches to GEMV-shaped tiles there
TILE_MAX_ROWS = 64  # gpu_probe.kernels.linear.TILE_MAX_ROWS: above it both paths' GEMMs are cuBLAS's
SPLIT_MAX_ROWS = 8  # up to here the probe's attention splits the context (one merge kernel a layer)
PERSISTENT_MAX_ROWS = 8  # gpu_probe.kernels.persistent.MAX_ROWS: above it the probe runs the fused kernels


@dataclass(frozen=True)
class ProbeKernels:
    """The probe's kernels of a kernel set, as the calibration reads a run of it (`sim.calibration`)."""

    # rows -> (the family that runs each op, "gemm" for the matmul family at those rows, and any family
    # the set's kernels run in place of another; the activations its kernels move that the ops count
    # elsewhere: (an op or a family, {dimension: elements per row and layer})). An op it lacks is not run.
    path: Callable[[int], tuple[dict, tuple]]
    kept: tuple[Intermediate, ...]  # the intermediates its kernels keep on chip
    # (model, rows, memsets) -> the names of a synthetic step's kernels, as the profiler reports them
    # (`memsets`: cuBLAS's split-K workspace zeroed before the LM head above TILE_MAX_ROWS)
    names: Callable[[ModelConfig, int, bool], tuple[str, ...]]
    # In a graph, up to the run's `pdl_max_rows`, its kernels chain with programmatic dependent launch: no
    # node gap, and those of a PDL family hide part of their latency.
    pdl: bool = False
    node_gaps: bool = True  # a replay's kernels queue a node gap apart, which the fit reads off them
    max_rows: int | None = None  # the most rows the probe runs it at; above, the step runs `without_graphs`
    flop_rows: Callable[[int], float] = float  # rows its products compute at `rows` rows (a tile's padding)


@dataclass(frozen=True)
class KernelSet:
    name: str  # as the modes table names it (`Mode.kernels`)
    layer: Callable[[ModelConfig], tuple[Op, ...]]  # one layer's kernels, in launch order, with their work
    # (hardware, mode, kernels in the step, the bucket replayed) -> how the host submits the step
    submission: Callable[..., Submission]
    probe: ProbeKernels


# -- which probe family runs each op ----------------------------------------------------------------
# "gemm" is the probe's GEMV, tensor-core tile or cuBLAS matmul by rows (`sim.calibration.families.gemm_family`).
# Fused: RMSNorm folded into the GEMMs that read its output (and the final norm into the LM head's), RoPE
# inside the paged attention; the probe returns logits, so no sampling kernel.
# Unfused: the norms and RoPE one Triton kernel each (SiLU x up rides in up_proj's work, as the simulator
# counts it; the KV write in the attention's).
_GEMM_OPS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")
FUSED_PATH = {
    **dict.fromkeys(_GEMM_OPS, "gemm"),
    **dict.fromkeys(("attn_norm", "ffn_norm", "final_norm"), "gemm"),
    "rope": "attention",
    "attention": "attention",
    "embedding": "aten",
}
UNFUSED_PATH = {
    **dict.fromkeys(_GEMM_OPS, "gemm"),
    **dict.fromkeys(("attn_norm", "ffn_norm", "final_norm", "rope"), "triton_op"),
    "attention": "attention",
    "embedding": "aten",
}
# Above TILE_MAX_ROWS the fused step's GEMMs are cuBLAS's, without the Triton GEMMs' prologues and epilogues
# (gpu_probe.model._wide_fused_forward): the final norm is a one-op kernel of its own.
WIDE_FUSED_PATH = {**FUSED_PATH, "final_norm": "triton_op"}
# The probe's fused attention writes its output and o_proj reads it back: the simulator's rope_attn_o
# keeps it on chip, the probe does not.
PROBE_KEPT = tuple(t for t in KEPT_ON_CHIP if t.tensor != "attention output")

# Where the probe's kernels move activations the simulator's ops count elsewhere (`sim.step.ops` rides the
# residual adds and SiLU x up in GEMM epilogues, and the KV write in the attention).
UNFUSED_MOVES = (
    # the residual adds are ATen kernels of their own (each reads the residual and the projection, writes h)
    ("o_proj", {"hidden": -1}),
    ("down_proj", {"hidden": -1}),
    ("aten", {"hidden": 6}),
    # SiLU x up is a one-op kernel: it reads gate and up and writes their product (up_proj no longer reads gate)
    ("up_proj", {"ffn": -1}),
    ("triton_op", {"ffn": 3}),
    # the KV write is a one-op kernel reading k and v; the attention reads q and the cache
    ("attention", {"kv_dim": -2}),
    ("triton_op", {"kv_dim": 2}),
)
WIDE_FUSED_MOVES = (
    ("attention", {"hidden": 1}),  # reads the rows to scale q, k and v by their 1/rms
    ("gate_proj", {"ffn": 1}),  # cuBLAS writes gate and up out (the tile kept gate on chip)
    ("triton_op", {"ffn": 3, "hidden": 1}),  # _rms_swiglu_kernel: reads gate, up and the row, writes SwiGLU
)


def _unfused_path(rows: int) -> tuple[dict, tuple]:
    return UNFUSED_PATH, UNFUSED_MOVES


def _fused_path(rows: int) -> tuple[dict, tuple]:
    return (WIDE_FUSED_PATH, WIDE_FUSED_MOVES) if rows > TILE_MAX_ROWS else (FUSED_PATH, ())


def in_one_family(family: str, path_of) -> Callable[[int], tuple[dict, tuple]]:
    """`path_of`'s ops, with every op, every family its moves name and the split merge run in `family`."""

    def path(rows: int) -> tuple[dict, tuple]:
        ops, moves = path_of(rows)
        return {**dict.fromkeys(ops, family), **{t: family for t, _ in moves}, "split_merge": family}, moves

    return path


# -- the probe's kernel names in a synthetic step (gpu_probe.model), the graph's input copies aside ----------
def _common_names(rows: int, memsets: bool) -> tuple[str, tuple, tuple]:
    """(a GEMM's name at `rows`, the split merge after the attention, the LM head with any memset before it)."""
    wide = rows > TILE_MAX_ROWS
    gemm = "_gemv_kernel" if rows <= GEMV_MAX_ROWS else "nvjet_tst" if wide else "_fused_linear_kernel"
    merge = ("_merge_splits_kernel",) if rows <= SPLIT_MAX_ROWS else ()
    return gemm, merge, (("Memset (Device)",) if memsets and wide else ()) + (gemm,)


EMBEDDING = ("indexSelectSmallIndex",)


def _unfused_names(model: ModelConfig, rows: int, memsets: bool) -> tuple[str, ...]:
    gemm, merge, lm_head = _common_names(rows, memsets)
    add = "vectorized_elementwise_kernel"
    layer = (
        *("_rms_norm_kernel", gemm, gemm, gemm, "_rope_kernel", "_write_kv_kernel"),
        *("_paged_attention_plain_kernel", *merge, gemm, add),
        *("_rms_norm_kernel", gemm, gemm, "_silu_mul_kernel", gemm, add),
    )
    return EMBEDDING + layer * model.n_layers + ("_rms_norm_kernel", *lm_head)


def _fused_names(model: ModelConfig, rows: int, memsets: bool) -> tuple[str, ...]:
    gemm, merge, lm_head = _common_names(rows, memsets)
    if rows > TILE_MAX_ROWS:
        layer = (gemm, "_paged_attention_kernel", *merge, gemm, gemm, "_rms_swiglu_kernel", gemm)
        return EMBEDDING + layer * model.n_layers + ("_rms_norm_kernel", *lm_head)
    layer = (gemm, "_paged_attention_kernel", *merge, gemm, gemm, gemm)
    return EMBEDDING + layer * model.n_layers + lm_head


def _padded_rows(rows: int) -> float:
    """The persistent kernel computes a power-of-two row tile (gpu_probe.kernels.persistent: 3 rows cost 4):
    past a few rows its products on CUDA cores are bound by instructions, so the padded rows count."""
    return float(1 << (int(rows) - 1).bit_length())


# -- the kernel sets -----------------------------------------------------------------------------------
UNFUSED_SET = KernelSet(
    UNFUSED_KERNELS, unfused_layer, kernel_by_kernel, ProbeKernels(_unfused_path, (), _unfused_names)
)
FUSED_SET = KernelSet(
    FUSED_KERNELS,
    fused_layer,
    kernel_by_kernel,
    ProbeKernels(_fused_path, PROBE_KEPT, _fused_names, pdl=True),
)
# The fused kernels as the phases of one launch, separated by grid barriers; in the probe one kernel of its
# own family (`_decode_step_kernel`), which inside a graph follows the input copies with no node gap.
PERSISTENT_SET = KernelSet(
    PERSISTENT_KERNELS,
    fused_layer,
    as_one_kernel,
    replace(
        FUSED_SET.probe,
        path=in_one_family("persistent", _fused_path),
        names=lambda model, rows, memsets: ("_decode_step_kernel",),
        node_gaps=False,
        max_rows=PERSISTENT_MAX_ROWS,
        flop_rows=_padded_rows,
    ),
)
SETS: dict[str, KernelSet] = {s.name: s for s in (UNFUSED_SET, FUSED_SET, PERSISTENT_SET)}


def kernel_set(m) -> KernelSet:
    """The simulator's side of a mode's kernel set (a `Mode`, or a set's name), or ValueError naming those it has."""
    name = m.kernels if isinstance(m, Mode) else m
    found = SETS.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"kernels: the simulator models {', '.join(SETS)}, not {name!r}")
    return found
