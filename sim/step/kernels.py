"""Which kernels one decode step launches, what work each does, and how long each runs on the GPU.

**A step's kernels** (`step_kernels(model, mode, tp)`) are built once for every mode and GPU
count: the kernels before the layers and after them (`sim.step.ops.model_ops`) around the layer of
the mode's kernel set (`sim.step.kernel_sets`); on `tp` GPUs the same kernels are sharded
Megatron-style and an all-reduce follows each row-parallel kernel (`_sharded`). They come as
(before the layers, one layer, after the layers), so a sweep works on one layer's columns. The work
of each op is written once, in `sim.step.ops`.

GPU time per kernel is `sim.timing.kernel_us`: a fixed latency plus the larger of bytes moved
over bandwidth and FLOPs over the matrix rate (`KernelGroup.us`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from core.step_plan import Mode
from sim.config import HardwareConfig, ModelConfig
from sim.step.kernel_sets import kernel_set
from sim.step.ops import Op, model_ops
from sim.timing import AllReduceCost, kernel_us


@dataclass(frozen=True, slots=True)
class KernelSpec:
    name: str  # as shown in the lanes: "L3 q_proj", "lm_head"
    op: str  # the unfused op or fused kernel it is an instance of
    layer: int  # -1 outside the layers
    weight_bytes: float  # read once per step
    act_bytes_per_row: float  # activations read + written, per batch row
    kv_bytes_per_row: float  # KV-cache reads and appends, per batch row
    flops_per_row: float


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
    groups = [_group(before, b), _group(kernel_set(mode).layer(model), b), _group(after, b)]
    if tp > 1:
        if model.n_heads % tp:
            raise ValueError(f"tp: {tp} GPUs must divide the {model.n_heads} attention heads")
        groups = [_sharded(g, model, tp, replicated=i != 1) for i, g in enumerate(groups)]
    return StepKernels(*groups, n_layers=model.n_layers, bytes_per_el=b)
