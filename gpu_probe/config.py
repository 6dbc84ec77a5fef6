"""The probe decoder's shape: a frozen, validated dataclass and its presets.

"tiny" exists for the CPU tests (fp32, seconds under Triton's interpreter); "small" is the
GPU default, large enough to be realistic (about 0.48 B parameters, 0.95 GB of bf16
weights) and small enough that a batch-1 decode step is launch-bound when run eagerly.
"1b" has Llama-3.2-1B's shape (GQA, tied embeddings, 1.24 B parameters, 2.47 GB of bf16):
what people serve at batch 1, where a step is mostly the weight read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from core.decoder import DecoderShape, check_int

DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True, slots=True)
class ProbeModelConfig(DecoderShape):
    """A decoder's shape (`core.decoder.DecoderShape`, tie_embeddings included) plus what the probe builds."""

    dtype: str = "bfloat16"
    # Paged KV cache: tokens per block, the longest sequence a block table can address,
    # and how many tokens of (random) context the measurement pretends were prefilled.
    block_size: int = 16
    max_context: int = 640
    prefill_len: int = 512
    # Sizes the KV pool: enough blocks for max_batch sequences of max_context tokens.
    max_batch: int = 256
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    seed: int = 0

    def __post_init__(self) -> None:
        DecoderShape.__post_init__(self)
        owner = "ProbeModelConfig"
        for field_name in ("block_size", "max_context", "prefill_len", "max_batch"):
            check_int(owner, field_name, getattr(self, field_name), 1, 1_048_576)
        head_dim = self.hidden // self.n_heads
        # RoPE rotates pairs (d, d + head_dim/2); the kernels load each half as a power-of-two tile.
        if head_dim % 2 or head_dim & (head_dim - 1):
            raise ValueError(f"{owner}.hidden / n_heads (head_dim {head_dim}): must be a power of two >= 2")
        if self.dtype not in DTYPES:
            raise ValueError(f"{owner}.dtype: must be one of {DTYPES}, got {self.dtype!r}")
        if self.prefill_len >= self.max_context:
            raise ValueError(
                f"{owner}.prefill_len ({self.prefill_len}): must be below max_context ({self.max_context})"
            )
        if not (self.rope_theta > 0 and math.isfinite(self.rope_theta)):
            raise ValueError(f"{owner}.rope_theta: must be a positive number, got {self.rope_theta!r}")
        if not (0 < self.norm_eps < 1):
            raise ValueError(f"{owner}.norm_eps: must be in (0, 1), got {self.norm_eps!r}")

    @property
    def q_size(self) -> int:
        return self.q_dim

    @property
    def kv_size(self) -> int:
        return self.kv_dim

    @property
    def max_blocks_per_seq(self) -> int:
        """Width of a block table: blocks needed to address max_context tokens."""
        return -(-self.max_context // self.block_size)

    @property
    def num_blocks(self) -> int:
        """KV pool size: every sequence of a full batch at max_context, plus the scratch block."""
        return 1 + self.max_batch * self.max_blocks_per_seq

    @property
    def bytes_per_el(self) -> int:
        return 4 if self.dtype == "float32" else 2

    @property
    def weight_bytes(self) -> int:
        """Bytes one decode step must read at least once: every weight (an untied embedding table is
        only gathered one row per token, ignored; a tied one is read whole as the LM head)."""
        return self.read_params * self.bytes_per_el

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


PRESETS: dict[str, ProbeModelConfig] = {
    # Two layers, GQA (2 query heads per KV head), an FFN width that is not a tile multiple
    # and a 4-token block so short test sequences still span several blocks.
    "tiny": ProbeModelConfig(
        name="tiny",
        n_layers=2,
        hidden=64,
        n_heads=4,
        n_kv_heads=2,
        ffn=172,
        vocab=256,
        dtype="float32",
        block_size=4,
        max_context=64,
        prefill_len=12,
        max_batch=8,
    ),
    # The GPU default: a Llama-shaped 0.48 B model; 512 tokens of context, 128 to spare.
    "small": ProbeModelConfig(
        name="small",
        n_layers=32,
        hidden=1024,
        n_heads=16,
        n_kv_heads=16,
        ffn=2816,
        vocab=32000,
        dtype="bfloat16",
    ),
    # Llama-3.2-1B's shape with random weights: 32 query heads over 8 KV heads (head dim 64).
    "1b": ProbeModelConfig(
        name="1b",
        n_layers=16,
        hidden=2048,
        n_heads=32,
        n_kv_heads=8,
        ffn=8192,
        vocab=128256,
        dtype="bfloat16",
        rope_theta=500000.0,
        tie_embeddings=True,
    ),
}
DEFAULT_PRESET = "small"


def get_config(name: str, **overrides) -> ProbeModelConfig:
    """A preset by name, optionally with fields replaced (validated again)."""
    if name not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {name!r}")
    return replace(PRESETS[name], **overrides) if overrides else PRESETS[name]
