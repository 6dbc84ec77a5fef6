"""The work of a decode step, written once per **logical op**, and the layers built from it.

`layer_ops` and `model_ops` give each op's work: weights read once per step, activations and KV-cache
bytes per batch row, FLOPs per row. Everything else is derived from it: the layers a kernel set runs
(`sim.step.kernel_sets`), the simulator's kernels (`sim.step.kernels`), the fusion table, and the
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
grid-wide dependency; no further intermediates are counted as kept on chip): `merged_kernels`.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.decoder import kv_elements
from sim.config import ModelConfig

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


def merged_kernels(model: ModelConfig, groups) -> tuple[Op, ...]:
    """One kernel per group of fusions ("norm_qkv+rope_attn_o"), doing the work of the ops they merge."""
    ops = ops_keeping(model)
    return tuple(
        _merged("+".join(fu.kernel for fu in g), [ops[op] for fu in g for op in fu.merges]) for g in groups
    )


def fused_layer(model: ModelConfig) -> tuple[Op, ...]:
    """The fused layer: FUSIONS as the model's fused kernel count, each doing the work of the ops it merges."""
    groups = fused_groups(model.fused_per_layer)
    return tuple(_spread(list(merged_kernels(model, groups)), model.fused_per_layer - len(groups)))


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
