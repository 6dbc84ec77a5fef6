"""The probe decoder's shape: a frozen, validated dataclass, built from a Hugging Face config or a preset.

A `ProbeModelConfig` is a `core.hf_config.HFDecoder`'s shape and what its layer computes (dtype, RoPE's base
and Llama 3's frequency scaling, a bias on q, k and v, the norm's epsilon) plus what the probe builds with
(the paged cache's sizes, the seed). `from_decoder` makes one from a config.json read by `core.hf_config`
(`from_file`: read and refused there, naming the field); the presets are written the same way, as decoders:

"tiny" exists for the CPU tests (fp32, seconds under Triton's interpreter); "small" is the
GPU default, large enough to be realistic (about 0.48 B parameters, 0.95 GB of bf16
weights) and small enough that a batch-1 decode step is launch-bound when run eagerly.
"1b" has Llama-3.2-1B's shape (GQA, tied embeddings, 1.24 B parameters, 2.47 GB of bf16):
what people serve at batch 1, where a step is mostly the weight read. It is data/configs/llama-3.2-1b.json
without its RoPE scaling (`preset_vs_config`): its recorded runs were measured without it, and the
scaling changes RoPE's tables, not a kernel, a launch or a byte.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from core.decoder import DecoderShape, check_int
from core.hf_config import ARCHITECTURES, HFDecoder, RopeScaling
from core.hf_config import from_bytes as read_bytes
from core.hf_config import from_file as read_config

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
    # What the layer computes beyond the chapter's Llama (from a config.json; the presets have neither).
    qkv_bias: bool = False  # a bias on q, k and v (Qwen2), added after the projections
    rope_scaling: RopeScaling | None = None  # Llama 3's frequency scaling of RoPE (Llama 3.1, 3.2)
    model_type: str = "llama"  # the architecture Hugging Face builds for it (core.hf_config.ARCHITECTURES)
    source: str = ""  # the config file it was read from ("" for a preset)

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
        if not isinstance(self.qkv_bias, bool):
            raise ValueError(f"{owner}.qkv_bias: must be True or False, got {self.qkv_bias!r}")
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScaling):
            raise ValueError(
                f"{owner}.rope_scaling: must be a RopeScaling or None, got {self.rope_scaling!r}"
            )
        if self.model_type not in ARCHITECTURES:
            raise ValueError(
                f"{owner}.model_type: must be one of {tuple(ARCHITECTURES)}, got {self.model_type!r}"
            )
        if not isinstance(self.source, str) or len(self.source) > 100:
            raise ValueError(f"{owner}.source: must be a file name of at most 100 characters")

    @classmethod
    def from_decoder(cls, decoder: HFDecoder, source: str = "", **probe) -> ProbeModelConfig:
        """The probe's decoder for a Hugging Face config's (`core.hf_config.HFDecoder`): its shape, dtype, RoPE
        (base and scaling), bias and norm epsilon; `probe`: the probe's own fields (cache sizes, seed)."""
        shape = {f.name: getattr(decoder, f.name) for f in fields(DecoderShape)}
        return cls(
            **shape,
            dtype=decoder.dtype,
            rope_theta=decoder.rope_theta,
            norm_eps=decoder.norm_eps,
            qkv_bias=decoder.qkv_bias,
            rope_scaling=decoder.rope_scaling,
            model_type=decoder.model_type,
            source=source,
            **probe,
        )

    @property
    def q_size(self) -> int:
        return self.q_dim

    @property
    def kv_size(self) -> int:
        return self.kv_dim

    @property
    def layer_params(self) -> int:
        """One layer's weights, the bias on q, k and v included where there is one (HFDecoder's count)."""
        return HFDecoder.layer_params.fget(self)

    @property
    def max_blocks_per_seq(self) -> int:
        """Width of a block table: blocks needed to address max_context tokens."""
        return -(-self.max_context // self.block_size)

    @property
    def num_blocks(self) -> int:
        """KV pool size: every sequence of a full batch at max_context, plus the scratch block."""
        return 1 + self.max_batch * self.max_blocks_per_seq

    def pool_blocks(self, rows: int) -> int:
        """The KV pool a probe run builds for `rows` sequences of prefill_len tokens, plus the scratch block."""
        return 1 + rows * -(-self.prefill_len // self.block_size)

    @property
    def bytes_per_el(self) -> int:
        return 4 if self.dtype == "float32" else 2

    @property
    def weight_bytes(self) -> int:
        """Bytes one decode step must read at least once: every weight (an untied embedding table is
        only gathered one row per token, ignored; a tied one is read whole as the LM head)."""
        return self.read_params * self.bytes_per_el

    def to_dict(self) -> dict:
        """Every field, as a result file records the model (rope_scaling as an object, or None)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["rope_scaling"] = None if self.rope_scaling is None else asdict(self.rope_scaling)
        return out


def from_file(path, **probe) -> ProbeModelConfig:
    """The probe's decoder from a Hugging Face config.json (`core.hf_config`: a config it cannot run is refused
    there, ConfigError naming the file, the field and its value), with the probe's fields `probe`."""
    max_context = probe.get("max_context", _field_default("max_context"))
    return _from_decoder(read_config(path, context=max_context), Path(path).name, probe)


def from_bytes(data: bytes, where: str = "config.json", **probe) -> ProbeModelConfig:
    """The probe's decoder from an uploaded config.json's bytes (`where`: its file name), refused as `from_file`
    refuses a file (ConfigError from `core.hf_config`, ValueError for the probe's own limits, naming the file)."""
    where = str(where)[:100] or "config.json"
    max_context = probe.get("max_context", _field_default("max_context"))
    decoder = read_bytes(data, Path(where).stem or "config", where, context=max_context)
    return _from_decoder(decoder, where, probe)


def _field_default(name: str):
    # The class attribute is a slot descriptor, not the default: read the default from the field.
    return next(f.default for f in fields(ProbeModelConfig) if f.name == name)


def _from_decoder(decoder: HFDecoder, where: str, probe: dict) -> ProbeModelConfig:
    try:
        return ProbeModelConfig.from_decoder(decoder, source=where[:100], **probe)
    except ValueError as err:  # the probe's own limits, named as the file's
        raise ValueError(f"{where}: {err}") from None


def _preset(probe: dict | None = None, **decoder) -> ProbeModelConfig:
    """A preset written as a config.json's decoder would be read (`HFDecoder`), plus the probe's fields."""
    return ProbeModelConfig.from_decoder(HFDecoder(**decoder), **(probe or {}))


PRESETS: dict[str, ProbeModelConfig] = {
    # Two layers, GQA (2 query heads per KV head), an FFN width that is not a tile multiple
    # and a 4-token block so short test sequences still span several blocks.
    "tiny": _preset(
        dict(block_size=4, max_context=64, prefill_len=12, max_batch=8),
        name="tiny",
        n_layers=2,
        hidden=64,
        n_heads=4,
        n_kv_heads=2,
        ffn=172,
        vocab=256,
        dtype="float32",
    ),
    # The GPU default: a Llama-shaped 0.48 B model; 512 tokens of context, 128 to spare.
    "small": _preset(
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
    "1b": _preset(
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


def preset_vs_config(preset: ProbeModelConfig, config: ProbeModelConfig) -> dict:
    """{field: (the preset's value, the config's)} for every field the two decoders differ in (name and source
    aside): what a preset leaves out of the published config it is the shape of."""
    a, b = preset.to_dict(), config.to_dict()
    return {k: (a[k], b[k]) for k in a if k not in ("name", "source") and a[k] != b[k]}
