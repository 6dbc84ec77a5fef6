"""What a probe run will hold on the GPU, estimated before anything is allocated, and the check that it fits.

A run holds, at once: the model's weights and the fused path's folded copies of them (QKV, gate/up and the
LM head with the norm weights folded in); the KV pool, sized for its largest batch (`rows`: the largest
batch or bucket) at the prefill's length; the workspaces (each captured graph's static logits, inputs and
fused activations, a graph pool per captured mode holding a step's temporaries at `rows`, the step's own
temporaries and logits outside a graph); what a kernel set builds beside the model (its object's
`held_bytes`: the persistent kernel's stacked weights, torch.compile's copy of the KV pool). `check_fits` sets
the sum, with `HEADROOM` for what is not counted (cuBLAS's and Triton's workspaces, the allocator's rounding),
against the free memory `torch.cuda.mem_get_info` reports, and refuses in one sentence naming the figures.

With `--reference hf`, Hugging Face's model and its static caches, one per (kind, batch), come on top
(`reference_bytes`). They are not refused, only warned of (`reference_warning`): the reference records a
decoder it cannot build as its own error and the run goes on, and this count of them is the least sure (it
says the small preset's run at batches 1-256 with every mode needs about 87 GiB, and that run completed on an
80 GB H100 on 2026-12-06; the probe's own part, which is refused, is 36 GiB of it).

An estimate, written to err high: every activation counted at the largest batch, as if all were alive at
once. Plain Python (no torch): the CPU tests give it a free-memory figure of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.decoder import kv_elements
from core.step_plan import mode as mode_named
from gpu_probe.kernel_sets import kernel_set

GB = 1e9
HEADROOM = 1 << 30  # cuBLAS's and Triton's workspaces, split-K buffers, the caching allocator's rounding
MEASURE_BYTES = 4 << 30  # the copy-bandwidth probe's two 2 GiB buffers, freed before the model is built
REFERENCE_SLACK = 128  # gpu_probe.hf_reference.DEFAULT_SLACK: its static caches' positions past the prompt
REFERENCE_KINDS = 2  # eager and graph: a decoder and a static cache each, per batch


@dataclass(frozen=True, slots=True)
class Footprint:
    """Bytes by part ("weights", "packed copies", "KV pool", "workspaces", then each kernel set's own and the
    reference's), and the largest transient before the model exists (the bandwidth probe)."""

    parts: dict[str, int]
    transient: int = MEASURE_BYTES

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def needed(self) -> int:
        """What must be free: the larger of the run's parts (plus the headroom) and the transient."""
        return max(self.total + HEADROOM, self.transient)

    def describe(self) -> str:
        return ", ".join(f"{name} {size / GB:.1f} GB" for name, size in self.parts.items() if size)


def activation_bytes(cfg, rows: int) -> int:
    """A step's temporaries at `rows` rows, a layer's widest set and the logits: the residual stream and a
    normed copy, q, k and v (packed and apart), the attention's output and fp32 split partials, gate, up and
    SiLU x up."""
    per_row = 4 * cfg.hidden + 2 * (cfg.q_dim + 2 * cfg.kv_dim) + 3 * cfg.ffn + cfg.vocab
    return rows * (per_row * cfg.bytes_per_el + 2 * cfg.q_dim * 4)


def footprint(cfg, rows: int, modes) -> Footprint:
    """The GPU memory a run of `modes` (names) on a model of `cfg` at up to `rows` rows holds."""
    el = cfg.bytes_per_el
    run = [mode_named(m) for m in modes]
    sets = {kernel_set(m) for m in run}
    folded = cfg.n_layers * cfg.hidden * (cfg.q_dim + 2 * cfg.kv_dim + 2 * cfg.ffn) + cfg.vocab * cfg.hidden
    pool = kv_elements(cfg.kv_dim, cfg.pool_blocks(rows) * cfg.block_size, cfg.n_layers) * el
    captured = [m for m in run if m.graphs and kernel_set(m).captured]
    # Static logits and fused activations, and the five inputs (a block table of max_blocks_per_seq int32s).
    static = rows * (cfg.vocab + cfg.q_dim + 2 * cfg.kv_dim + cfg.ffn) * el + rows * (
        28 + 4 * cfg.max_blocks_per_seq
    )
    parts = {
        "weights": cfg.n_params * el,
        "packed copies": folded * el,
        "KV pool": pool,
        # A graph runner per captured mode (its static buffers and its pool), and a step outside a graph.
        "workspaces": len(captured) * (static + activation_bytes(cfg, rows))
        + 2 * activation_bytes(cfg, rows),
    }
    for kernels in sorted(sets, key=lambda s: s.name):
        held = kernels.held_bytes(cfg, rows, pool)
        if held:
            parts[kernels.name] = held
    return Footprint(parts)


def reference_bytes(cfg, batches) -> int:
    """Hugging Face's model of `cfg` (its weights once) and, per kind and batch, a static cache of the prompt
    plus its slack and a step's temporaries (`gpu_probe.hf_reference.ReferenceSteps` builds them all first)."""
    el = cfg.bytes_per_el
    positions = cfg.prefill_len + REFERENCE_SLACK
    per_kind = sum(
        kv_elements(cfg.kv_dim, b * positions, cfg.n_layers) * el + activation_bytes(cfg, b) for b in batches
    )
    return cfg.n_params * el + REFERENCE_KINDS * per_kind


def check_fits(cfg, rows: int, modes, free_bytes: int) -> Footprint:
    """The run's footprint, or ValueError in one sentence: the model and batch, what it needs by part, what is
    free. Call it before anything of the run is allocated."""
    need = footprint(cfg, rows, modes)
    if need.needed > free_bytes:
        raise ValueError(
            f"{cfg.name} at {rows} rows is too large for this GPU's memory: it needs about "
            f"{need.needed / GB:.1f} GB ({need.describe()}, {HEADROOM / GB:.1f} GB headroom) and "
            f"{free_bytes / GB:.1f} GB is free; measure smaller batches and buckets (--batch, --buckets) or "
            "fewer modes"
        )
    return need


def reference_warning(cfg, batches, probe: Footprint, free_bytes: int) -> str | None:
    """A line saying the Hugging Face reference may not fit beside the probe (None where it does)."""
    ref = reference_bytes(cfg, batches)
    if probe.total + HEADROOM + ref <= free_bytes:
        return None
    return (
        f"the Hugging Face reference needs about {ref / GB:.1f} GB beside the probe's {probe.needed / GB:.1f} GB "
        f"and {free_bytes / GB:.1f} GB is free: its decoders that do not fit are recorded under its errors"
    )


def free_gpu_bytes() -> int:
    """Free memory on the current CUDA device, as the driver reports it (torch imported here)."""
    import torch

    return int(torch.cuda.mem_get_info()[0])
