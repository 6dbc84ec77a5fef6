"""Which kernels one decode step launches, what work each does, and how long each runs on the GPU.

The work of a step is written once, here, per **logical op** (`layer_ops`, `model_ops`):
weights read once per step, activations and KV-cache bytes per batch row, FLOPs per row.
Everything else is derived from it: the simulator's kernels, the fusion table, and the
calibration's work per probe kernel family (`sim.calibration.families.family_work`).

Unfused, a layer is the chapter's eleven ops, one kernel each. Two elementwise steps are
assumed to ride in an epilogue even unfused (as they do in any serving engine's eager path):
the residual adds (in the o_proj and down_proj epilogues) and SiLU·mul (in the up_proj
epilogue, which reads the gate output back).

Fused, a layer is four kernels (`FUSIONS`); every boundary between them is a real grid-wide
dependency (attention needs all of q/k/v, the FFN norm needs the whole attention output
summed into the residual, down_proj needs the whole SwiGLU output). A fused kernel does the
work of the ops it merges, less the intermediates it keeps on chip (each written once by its
producer and read once by each consumer), so the fusion table's bytes saved are exactly the
difference the simulator times.

**Kernels per layer** are the model's (`ModelConfig.unfused_per_layer`, `fused_per_layer`),
because a real eager PyTorch layer launches far more than eleven kernels (the probe measured
about 51: the residual adds, casts, SiLU and multiply, the cache bookkeeping). The layer's
work stays that of its ops; the kernels beyond the eleven (or the four, fused) are small
elementwise kernels, `elementwise_1`, `elementwise_2`, ..., spread evenly between the ops,
that move no bytes of their own but each pay the kernel latency and, eager, a launch. Fewer
than four fused kernels merge neighbouring fused kernels (a persistent kernel across their
grid-wide dependency; no further intermediates are counted as kept on chip).

**A step's kernels** (`step_kernels(model, mode, tp)`) are built once for every mode and GPU
count: the mode's kernel set picks the layer (`LAYERS`); on `tp` GPUs the same kernels are sharded
Megatron-style and an all-reduce follows each row-parallel kernel (`_sharded`). They come as
(before the layers, one layer, after the layers), so a sweep works on one layer's columns.

GPU time per kernel is `sim.timing.kernel_us`: a fixed latency plus the larger of bytes moved
over bandwidth and FLOPs over the matrix rate (`KernelGroup.us`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from core.decoder import kv_elements
from core.step_plan import FUSED_KERNELS, PERSISTENT_KERNELS, UNFUSED_KERNELS, Mode
from sim.config import HardwareConfig, ModelConfig
from sim.timing import AllReduceCost, kernel_us

UNFUSED_PER_LAYER = 11  # the chapter's ops, one kernel each: the smallest unfused layer
FUSED_PER_LAYER = 4  # the chapter's fused layer (FUSIONS)
MODEL_LEVEL = ("embedding", "final_norm", "lm_head", "sampling")
EXTRA = "elementwise"  # name of the small kernels beyond the ops: elementwise_1, elementwise_2, ...


@dataclass(frozen=True, slots=True)
class Op:
    """One logical op's work, in elements (× bytes per element for bytes)."""

    name: str
    weight: float  # weight elements, read once per step whatever the batch
    act: float  # activation elements read + written, per batch row
    kv: float  # KV-cache elements read and appended, per batch row
    flops: float  # per batch row


@dataclass(frozen=True, slots=True)
class KernelSpec:
    name: str  # as shown in the lanes: "L3 q_proj", "lm_head"
    op: str  # the unfused op or fused kernel it is an instance of
    layer: int  # -1 outside the layers
    weight_bytes: float  # read once per step
    act_bytes_per_row: float  # activations read + written, per batch row
    kv_bytes_per_row: float  # KV-cache reads and appends, per batch row
    flops_per_row: float


@dataclass(frozen=True, slots=True)
class Intermediate:
    tensor: str
    dim: str  # "hidden", "q_dim", "kv_dim" or "ffn": elements per token
    producer: str  # the op that writes it (once)
    consumers: tuple[str, ...]  # the ops that read it (once each)

    @property
    def writes(self) -> int:
        return 1

    @property
    def reads(self) -> int:
        return len(self.consumers)


@dataclass(frozen=True, slots=True)
class Fusion:
    kernel: str
    merges: tuple[str, ...]  # unfused ops it replaces, in order
    kept_on_chip: tuple[Intermediate, ...]  # tensors that no longer round-trip HBM
    why: str


FUSIONS: tuple[Fusion, ...] = (
    Fusion(
        kernel="norm_qkv",
        merges=("attn_norm", "q_proj", "k_proj", "v_proj"),
        kept_on_chip=(
            Intermediate("normed hidden state", "hidden", "attn_norm", ("q_proj", "k_proj", "v_proj")),
        ),
        why="RMSNorm recomputed in the GEMV prologue (a decode row is a few KB, every CTA can afford "
        "it) feeding one packed QKV weight: 4 launches become 1.",
    ),
    Fusion(
        kernel="rope_attn_o",
        merges=("rope", "attention", "o_proj"),
        kept_on_chip=(
            Intermediate("rotated q", "q_dim", "rope", ("attention",)),
            Intermediate("rotated k", "kv_dim", "rope", ("attention",)),
            Intermediate("attention output", "q_dim", "attention", ("o_proj",)),
        ),
        why="RoPE in the attention prologue; each head's slice of W_o applied in the epilogue and "
        "summed into the residual by split-K atomics, which also carry the residual add.",
    ),
    Fusion(
        kernel="norm_gate_up",
        merges=("ffn_norm", "gate_proj", "up_proj"),
        kept_on_chip=(
            Intermediate("normed hidden state", "hidden", "ffn_norm", ("gate_proj", "up_proj")),
            Intermediate("gate output", "ffn", "gate_proj", ("up_proj",)),
        ),
        why="RMSNorm in the prologue, gate and up as one packed GEMV, SwiGLU (SiLU(gate)·up) in the "
        "epilogue: only the SwiGLU output is written.",
    ),
    Fusion(
        kernel="down_proj",
        merges=("down_proj",),
        kept_on_chip=(),
        why="Already one kernel with the residual add in its epilogue; it stays separate because it "
        "needs the whole SwiGLU output of every CTA before it can start.",
    ),
)
KEPT_ON_CHIP: tuple[Intermediate, ...] = tuple(t for fu in FUSIONS for t in fu.kept_on_chip)


# -- the work, written once ----------------------------------------------------------
def layer_ops(m: ModelConfig) -> tuple[Op, ...]:
    """The chapter's eleven ops of one layer, in order, with their work."""
    h, q, kv, f, ctx = m.hidden, m.q_dim, m.kv_dim, m.ffn, m.context_len
    kv_cache = kv_elements(kv, ctx + 1)  # read K and V for every cached token, append this token's
    attn_flops = 4 * q * ctx  # q·K and p·V over the context, every head
    return (
        Op("attn_norm", h, 2 * h, 0, 4 * h),
        Op("q_proj", h * q, h + q, 0, 2 * h * q),
        Op("k_proj", h * kv, h + kv, 0, 2 * h * kv),
        Op("v_proj", h * kv, h + kv, 0, 2 * h * kv),
        Op("rope", 0, 2 * (q + kv), 0, 6 * (q + kv)),
        Op("attention", 0, 2 * q + 2 * kv, kv_cache, attn_flops),  # reads q, k, v; writes its output
        Op("o_proj", q * h, q + 2 * h, 0, 2 * q * h),  # + residual read and write (epilogue add)
        Op("ffn_norm", h, 2 * h, 0, 4 * h),
        Op("gate_proj", h * f, h + f, 0, 2 * h * f),
        Op("up_proj", h * f, h + 2 * f, 0, 2 * h * f),  # reads the gate output back for SiLU·mul
        Op("down_proj", f * h, f + 2 * h, 0, 2 * f * h),  # + residual read and write
    )


def model_ops(m: ModelConfig) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """(before the layers, after them): the embedding gather; the final norm, LM head and sampling."""
    h, v = m.hidden, m.vocab
    before = (Op("embedding", 0, 2 * h, 0, 0),)  # gathers one row per token: the table is not read whole
    after = (
        Op("final_norm", h, 2 * h, 0, 4 * h),
        Op("lm_head", v * h, h + v, 0, 2 * v * h),  # the tied embedding table, when tied: the same bytes
        Op("sampling", 0, v + 1, 0, 5 * v),  # softmax + top-p over the logits, one token out
    )
    return before, after


def _dim(model: ModelConfig, dim: str) -> int:
    return {"hidden": model.hidden, "q_dim": model.q_dim, "kv_dim": model.kv_dim, "ffn": model.ffn}[dim]


def ops_keeping(m: ModelConfig, kept=KEPT_ON_CHIP) -> dict[str, Op]:
    """Every op of a layer and of the model, its activations less the `kept` intermediates it writes or reads."""
    before, after = model_ops(m)
    ops = {op.name: op for op in (*before, *layer_ops(m), *after)}
    saved = dict.fromkeys(ops, 0.0)
    for t in kept:
        saved[t.producer] += _dim(m, t.dim)
        for consumer in t.consumers:
            saved[consumer] += _dim(m, t.dim)
    return {name: Op(name, op.weight, op.act - saved[name], op.kv, op.flops) for name, op in ops.items()}


def _merged(name: str, ops: list[Op]) -> Op:
    return Op(name, *(sum(getattr(op, k) for op in ops) for k in ("weight", "act", "kv", "flops")))


# -- a layer's kernels, from the model's counts ----------------------------------------
def _spread(kernels: list[Op], n_extra: int) -> list[Op]:
    """`n_extra` zero-work elementwise kernels spread evenly after the kernels, in order."""
    out, made, n = [], 0, len(kernels)
    for i, k in enumerate(kernels):
        out.append(k)
        for _ in range((i + 1) * n_extra // n - i * n_extra // n):
            made += 1
            out.append(Op(f"{EXTRA}_{made}", 0, 0, 0, 0))
    return out


def fused_groups(n_kernels: int) -> tuple[tuple[Fusion, ...], ...]:
    """FUSIONS as `min(n_kernels, 4)` kernels: neighbours merged, in order, as evenly as possible."""
    groups = min(int(n_kernels), len(FUSIONS))
    bounds = [round(i * len(FUSIONS) / groups) for i in range(groups + 1)]
    return tuple(FUSIONS[a:b] for a, b in zip(bounds, bounds[1:]))


def unfused_layer(model: ModelConfig) -> tuple[Op, ...]:
    """The unfused layer: the chapter's eleven ops, one kernel each, and the model's small kernels beyond them."""
    return tuple(_spread(list(layer_ops(model)), model.unfused_per_layer - UNFUSED_PER_LAYER))


def fused_layer(model: ModelConfig) -> tuple[Op, ...]:
    """The fused layer: FUSIONS as the model's fused kernel count, each doing the work of the ops it merges."""
    ops = ops_keeping(model)
    groups = fused_groups(model.fused_per_layer)
    kernels = [
        _merged("+".join(fu.kernel for fu in g), [ops[op] for fu in g for op in fu.merges]) for g in groups
    ]
    return tuple(_spread(kernels, model.fused_per_layer - len(groups)))


# The layer each kernel set the simulator models runs (`core.step_plan.KERNEL_SETS`): the persistent
# kernel's phases are the fused kernels, each boundary a grid barrier (`sim.step.submission`).
LAYERS = {UNFUSED_KERNELS: unfused_layer, FUSED_KERNELS: fused_layer, PERSISTENT_KERNELS: fused_layer}


@lru_cache(maxsize=64)
def layer_kernels(model: ModelConfig, kernels: str) -> tuple[Op, ...]:
    """One layer's kernels of a kernel set in launch order, each with its work (`Op`, the kernel's name as name)."""
    if kernels not in LAYERS:
        raise ValueError(f"kernels: the simulator models {', '.join(LAYERS)}, not {kernels!r}")
    return LAYERS[kernels](model)


# -- a step's kernels: the one builder, tensor parallelism included ----------------------
# Megatron-style sharding over tp GPUs (as the probe's sharded model does it): every projection,
# the attention and its KV cache are split over the GPUs, so a layer kernel's weight bytes, KV
# bytes and FLOPs divide by tp; its activations per row stay whole (a few KB, an upper bound);
# the two RMSNorms and the model-level kernels are replicated. After each row-parallel kernel
# every GPU holds a partial sum, so an all-reduce of one hidden-wide row per batch row follows.
REPLICATED_OPS = frozenset({"attn_norm", "ffn_norm"})
ROW_PARALLEL_OPS = frozenset({"o_proj", "rope_attn_o", "down_proj"})
ALLREDUCE = "all_reduce"


def kv_share(model: ModelConfig, tp: int) -> float:
    """The fraction of the KV cache one of `tp` GPUs holds: with more GPUs than KV heads, each keeps
    one KV head whole (vLLM replicates them)."""
    return 1.0 / min(int(tp), model.n_kv_heads)


def _row_parallel(kernel: str) -> bool:
    """A row-parallel kernel (or one merging one, fewer fused kernels a layer): an all-reduce follows."""
    return any(part in ROW_PARALLEL_OPS for part in kernel.split("+"))


@dataclass(frozen=True, eq=False)
class KernelGroup:
    """Kernels in launch order with their work as arrays: one layer's, or those before or after the layers."""

    names: tuple[str, ...]
    weight: np.ndarray  # bytes read once per step
    per_row: np.ndarray  # activation and KV-cache bytes per batch row
    act: np.ndarray  # of which activation bytes per row
    kv: np.ndarray  # of which KV-cache bytes per row (a padded dummy row skips them)
    flops: np.ndarray  # per batch row
    comm: np.ndarray  # an all-reduce: costed by the all-reduce's α and β, not the GPU's roofline

    def __len__(self) -> int:
        return len(self.names)

    def us(
        self, hw: HardwareConfig, allreduce: AllReduceCost | None, rows, padded=0, latency_us=None
    ) -> np.ndarray:
        """[n_batches, n_kernels] GPU time of each kernel, `rows` per batch (`padded` of them dummies).

        `sim.timing.kernel_us`, the one kernel cost: the GPU's latency (`latency_us`, a kernel's by
        default: `sim.step.submission` gives a mode's) + max(bytes / bandwidth, FLOPs / matrix
        rate), where a padded dummy row costs its matmul rows but reads no KV cache (engines point it at
        a scratch slot); an all-reduce, α + bytes / β."""
        rows = np.asarray(rows, dtype=np.float64).reshape(-1, 1)
        dummy = np.asarray(padded, dtype=np.float64).reshape(-1, 1)
        moved = self.weight + rows * self.per_row - dummy * self.kv
        latency = hw.min_kernel_us if latency_us is None else latency_us
        out = kernel_us(moved, rows * self.flops, latency, hw.hbm_GBps, hw.matrix_TFLOPs)
        if self.comm.any():
            out = np.where(self.comm, allreduce.us(rows * self.per_row), out)
        return out


@dataclass(frozen=True, eq=False)
class StepKernels:
    """Every kernel of one GPU's decode step, as (before the layers, one layer, after the layers)."""

    before: KernelGroup
    layer: KernelGroup
    after: KernelGroup
    n_layers: int
    bytes_per_el: float

    @property
    def groups(self) -> tuple[KernelGroup, KernelGroup, KernelGroup]:
        return self.before, self.layer, self.after

    @property
    def repeats(self) -> tuple[int, int, int]:
        return 1, self.n_layers, 1

    def __len__(self) -> int:
        return len(self.before) + self.n_layers * len(self.layer) + len(self.after)

    @property
    def names(self) -> tuple[str, ...]:
        """Every kernel's name in launch order ("L3 q_proj")."""
        return _step_names(self.before.names, self.layer.names, self.after.names, self.n_layers)

    def us(
        self, hw: HardwareConfig, allreduce: AllReduceCost | None, rows: int, padded: int = 0, latency_us=None
    ) -> np.ndarray:
        """Every kernel's GPU time over the whole step, in launch order (one step of `rows` rows)."""
        before, layer, after = (g.us(hw, allreduce, [rows], [padded], latency_us)[0] for g in self.groups)
        return np.concatenate((before, np.tile(layer, self.n_layers), after))

    def busy_us(self, group_us) -> np.ndarray:
        """GPU busy time of a step from its groups' [n_batches, n_kernels] times (each layer alike)."""
        before, layer, after = group_us
        return before.sum(axis=1) + self.n_layers * layer.sum(axis=1) + after.sum(axis=1)

    @property
    def weight_bytes(self) -> float:
        return float(
            self.before.weight.sum() + self.n_layers * self.layer.weight.sum() + self.after.weight.sum()
        )

    @property
    def kv_bytes_per_row(self) -> float:
        """KV-cache bytes one batch row reads and appends over the step: what a padded row skips."""
        return float(self.before.kv.sum() + self.n_layers * self.layer.kv.sum() + self.after.kv.sum())

    @property
    def specs(self) -> tuple[KernelSpec, ...]:
        """Every kernel with its work, in launch order."""
        out = []
        for layer, group in (
            [(-1, self.before)] + [(i, self.layer) for i in range(self.n_layers)] + [(-1, self.after)]
        ):
            for k, name in enumerate(group.names):
                out.append(
                    KernelSpec(
                        name=f"L{layer} {name}" if layer >= 0 else name,
                        op=ALLREDUCE if group.comm[k] else name,
                        layer=layer,
                        weight_bytes=float(group.weight[k]),
                        act_bytes_per_row=float(group.act[k]),
                        kv_bytes_per_row=float(group.kv[k]),
                        flops_per_row=float(group.flops[k]),
                    )
                )
        return tuple(out)


@lru_cache(maxsize=64)
def _step_names(before, layer, after, n_layers: int) -> tuple[str, ...]:
    return (*before, *(f"L{i} {name}" for i in range(n_layers) for name in layer), *after)


def _frozen(values) -> np.ndarray:
    arr = np.array(values, dtype=np.float64)
    arr.setflags(write=False)  # cached: shared by every caller
    return arr


def _group(ops: tuple[Op, ...], b: float) -> KernelGroup:
    return KernelGroup(
        names=tuple(op.name for op in ops),
        weight=_frozen([op.weight * b for op in ops]),
        per_row=_frozen([(op.act + op.kv) * b for op in ops]),
        act=_frozen([op.act * b for op in ops]),
        kv=_frozen([op.kv * b for op in ops]),
        flops=_frozen([op.flops for op in ops]),
        comm=np.zeros(len(ops), bool),
    )


def _sharded(group: KernelGroup, model: ModelConfig, tp: int, replicated: bool) -> KernelGroup:
    """One GPU's share of a group's work, the all-reduces after its row-parallel kernels."""
    share = np.array([1.0 if (replicated or n in REPLICATED_OPS) else 1.0 / tp for n in group.names])
    kv_gpu = group.kv * kv_share(model, tp)  # only the attention kernels read KV; they are sharded
    per_row = group.per_row - group.kv + kv_gpu
    names, rows = [], []
    message = model.hidden * model.bytes_per_el  # one hidden-wide activation per batch row
    for k, name in enumerate(group.names):
        names.append(name)
        rows.append(
            (
                group.weight[k] * share[k],
                per_row[k],
                group.act[k],
                kv_gpu[k],
                group.flops[k] * share[k],
                False,
            )
        )
        if not replicated and _row_parallel(name):
            names.append(f"{ALLREDUCE} ({name})")
            rows.append((0.0, message, message, 0.0, 0.0, True))
    columns = list(zip(*rows)) if rows else [()] * 6
    return KernelGroup(
        names=tuple(names),
        weight=_frozen(columns[0]),
        per_row=_frozen(columns[1]),
        act=_frozen(columns[2]),
        kv=_frozen(columns[3]),
        flops=_frozen(columns[4]),
        comm=np.array(columns[5], bool),
    )


@lru_cache(maxsize=128)
def step_kernels(model: ModelConfig, mode: Mode, tp: int = 1) -> StepKernels:
    """One GPU's kernels of a decode step run in `mode` on `tp` GPUs: the layer of its kernel set."""
    b = model.bytes_per_el
    before, after = model_ops(model)
    groups = [_group(before, b), _group(layer_kernels(model, mode.kernels), b), _group(after, b)]
    if tp > 1:
        if model.n_heads % tp:
            raise ValueError(f"tp: {tp} GPUs must divide the {model.n_heads} attention heads")
        groups = [_sharded(g, model, tp, replicated=i != 1) for i, g in enumerate(groups)]
    return StepKernels(*groups, n_layers=model.n_layers, bytes_per_el=b)


# -- the fusion table ------------------------------------------------------------------
def fusion_table(model: ModelConfig) -> list[dict]:
    """One row per fused kernel of the model's fused layer: what it merged, what stays on chip, bytes saved.

    Bytes saved is the drop in activation traffic between the merged unfused ops and the fused
    kernel, per layer and per token (multiply by batch for a step); the intermediates listed
    account for it exactly (each written once and read once by each consumer). When the model's
    counts add small elementwise kernels, a last row says how many fusion removes.
    """
    unfused = {op.name: op.act for op in layer_ops(model)}
    fused = {k.name: k for k in fused_layer(model)}
    rows = []
    for group in fused_groups(model.fused_per_layer):
        kernel = "+".join(fu.kernel for fu in group)
        merges = tuple(op for fu in group for op in fu.merges)
        kept = tuple(t for fu in group for t in fu.kept_on_chip)
        saved = (sum(unfused[op] for op in merges) - fused[kernel].act) * model.bytes_per_el
        rows.append(
            {
                "fused_kernel": kernel,
                "merges": merges,
                "launches_saved_per_layer": len(merges) - 1,
                "kept_on_chip": tuple(
                    f"{t.tensor} ({_dim(model, t.dim)} el, {t.writes}w+{t.reads}r)" for t in kept
                ),
                "bytes_saved_per_token": float(saved),
                "bytes_saved_per_token_all_layers": float(saved * model.n_layers),
                "why": " ".join(fu.why for fu in group)
                + (
                    ""
                    if len(group) == 1
                    else " Merged further: one persistent kernel across these boundaries."
                ),
            }
        )
    extra_unfused = model.unfused_per_layer - UNFUSED_PER_LAYER
    extra_fused = model.fused_per_layer - len(rows)
    if extra_unfused or extra_fused:
        rows.append(
            {
                "fused_kernel": EXTRA,
                "merges": (f"{extra_unfused} small kernels ({extra_fused} left fused)",),
                "launches_saved_per_layer": extra_unfused - extra_fused,
                "kept_on_chip": (),
                "bytes_saved_per_token": 0.0,
                "bytes_saved_per_token_all_layers": 0.0,
                "why": f"The model's layer launches {model.unfused_per_layer} kernels unfused and "
                f"{model.fused_per_layer} fused: beyond the ops, small elementwise kernels (residual adds, "
                "casts, SiLU and multiply, cache bookkeeping) that move next to nothing but each pay "
                "the kernel latency and, eager, a launch.",
            }
        )
    return rows
