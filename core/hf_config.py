"""A Hugging Face `config.json` of the Llama family, read and checked: the decoder the probe and the simulator build.

People have their models on disk as a directory with a `config.json`; this reads the fields that fix a
decode step's shape and cost -- layers, widths, heads and KV heads, vocabulary, tied embeddings, bias on
q/k/v (Qwen2), RoPE's base and Llama 3's frequency scaling, the norm's epsilon, the dtype -- for the
architectures whose layer is the probe's (RMSNorm, grouped-query attention with RoPE, SwiGLU): Llama 2, 3,
3.1 and 3.2, Qwen2 and 2.5, Mistral. What the probe cannot run is refused here, before anything is
built, with a message that names the field and its value: a mixture of experts, a sliding window shorter
than the context it attends over, an activation other than SiLU, a head size its kernels do not have, a
bias on the MLP, an unknown RoPE scaling.

Plain Python: `gpu_probe` reads it without numpy, `sim` without torch. `data/configs/` holds the configs of
five published models (their shapes; no weights), which the page offers as presets.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from core.decoder import LIMITS, DecoderShape

MAX_CONFIG_BYTES = 1 << 20  # a config.json is 1-2 KB; a file of a megabyte is not one
CONFIGS_DIR = Path(__file__).resolve().parent.parent / "data" / "configs"
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM"}
HEAD_DIMS = (64, 128)  # what the probe's attention and RoPE kernels are built and tested for
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# The keys a mixture of experts names its experts by (Mixtral, Qwen2-MoE, DeepSeek, ...).
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")
_FIELDS = {  # our name: the config's
    "n_layers": "num_hidden_layers",
    "hidden": "hidden_size",
    "n_heads": "num_attention_heads",
    "ffn": "intermediate_size",
    "vocab": "vocab_size",
}


@dataclass(frozen=True, slots=True)
class RopeScaling:
    """Llama 3's RoPE frequency scaling (`rope_type: "llama3"`): long wavelengths divided by `factor`, short
    ones kept, those between blended."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position: int


@dataclass(frozen=True, slots=True)
class HFDecoder(DecoderShape):
    """A decoder as its config.json describes it (`core.decoder.DecoderShape`, plus what the layer computes)."""

    model_type: str = "llama"
    qkv_bias: bool = False  # Qwen2's q, k and v projections add a bias
    rope_theta: float = 10_000.0
    rope_scaling: RopeScaling | None = None
    norm_eps: float = 1e-5
    dtype: str = "bfloat16"
    max_position: int = 4096  # the longest context the model was built for (max_position_embeddings)

    @property
    def bytes_per_el(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def layer_params(self) -> int:
        return DecoderShape.layer_params.fget(self) + (self.q_dim + 2 * self.kv_dim if self.qkv_bias else 0)

    def weight_bytes(self) -> int:
        return self.n_params * self.bytes_per_el

    def kv_cache_bytes(self, sequences: int, context: int) -> int:
        return self.kv_cache_elements(sequences, context) * self.bytes_per_el


class ConfigError(ValueError):
    """A config the probe cannot build: the message names the file, the field and its value."""


def _int(config: dict, key: str, where: str, default=None) -> int:
    value = config.get(key, default)
    if value is None:
        raise ConfigError(f"{where}: {key} is missing")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: {key} must be an integer, got {value!r}")
    return value


def _float(config: dict, key: str, where: str, default: float, low: float, high: float) -> float:
    value = config.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: {key} must be a number, got {value!r}")
    if not low < value < high:
        raise ConfigError(f"{where}: {key} must be above {low:g} and below {high:g}, got {value!r}")
    return float(value)


def _refuse_what_the_probe_cannot_run(config: dict, where: str, context: int) -> None:
    for key in _EXPERT_KEYS:
        if config.get(key):
            raise ConfigError(
                f"{where}: {key} = {config[key]!r}: a mixture of experts; the probe's layer has one dense MLP"
            )
    model_type = config.get("model_type")
    if model_type not in ARCHITECTURES:
        known = ", ".join(ARCHITECTURES)
        raise ConfigError(f"{where}: model_type {model_type!r} is not one the probe builds ({known})")
    act = config.get("hidden_act", "silu")
    if act != "silu":
        raise ConfigError(f"{where}: hidden_act {act!r}: the probe's MLP is SwiGLU (hidden_act 'silu')")
    if config.get("mlp_bias"):
        raise ConfigError(f"{where}: mlp_bias = true: the probe's MLP projections have no bias")
    window = config.get("sliding_window")
    uses_window = config.get("use_sliding_window", window is not None)
    if uses_window and window is not None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ConfigError(f"{where}: sliding_window must be a positive integer or null, got {window!r}")
        if window < context:
            raise ConfigError(
                f"{where}: sliding_window = {window}: shorter than the {context} tokens the probe attends "
                "over, and its attention reads the whole context"
            )


def _rope_scaling(config: dict, where: str) -> RopeScaling | None:
    scaling = config.get("rope_scaling")
    if scaling is None:
        return None
    if not isinstance(scaling, dict):
        raise ConfigError(f"{where}: rope_scaling must be an object or null, got {scaling!r}")
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        return None
    if kind != "llama3":
        raise ConfigError(f"{where}: rope_scaling.rope_type {kind!r}: the probe knows 'llama3' and 'default'")
    sub = f"{where}: rope_scaling"
    return RopeScaling(
        factor=_float(scaling, "factor", sub, 1.0, 0.0, 1e6),
        low_freq_factor=_float(scaling, "low_freq_factor", sub, 1.0, 0.0, 1e6),
        high_freq_factor=_float(scaling, "high_freq_factor", sub, 4.0, 0.0, 1e6),
        original_max_position=_int(scaling, "original_max_position_embeddings", sub, 8192),
    )


def from_dict(config, name: str, where: str = "config.json", context: int = 640) -> HFDecoder:
    """The decoder `config` describes, or ConfigError naming the field (`where`: the file, for the message).
    `context`: the most tokens a step attends over (a sliding window shorter than that is refused)."""
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: a config.json is one JSON object, got {type(config).__name__}")
    _refuse_what_the_probe_cannot_run(config, where, context)
    dims = {ours: _int(config, theirs, where) for ours, theirs in _FIELDS.items()}
    for ours, theirs in _FIELDS.items():
        low, high = LIMITS[ours]
        if not low <= dims[ours] <= high:
            raise ConfigError(f"{where}: {theirs} must be from {low} to {high}, got {dims[ours]}")
    heads = dims["n_heads"]
    kv_heads = _int(config, "num_key_value_heads", where, heads)
    if not 1 <= kv_heads <= heads or heads % kv_heads:
        raise ConfigError(
            f"{where}: num_key_value_heads must divide num_attention_heads ({heads}), got {kv_heads}"
        )
    if dims["hidden"] % heads:
        raise ConfigError(
            f"{where}: num_attention_heads ({heads}) must divide hidden_size ({dims['hidden']})"
        )
    head_dim = dims["hidden"] // heads
    named = config.get("head_dim")
    if named is not None and named != head_dim:
        raise ConfigError(
            f"{where}: head_dim = {named!r}: the probe's heads are hidden_size / num_attention_heads ({head_dim})"
        )
    if head_dim not in HEAD_DIMS:
        raise ConfigError(
            f"{where}: head_dim {head_dim} (hidden_size / num_attention_heads): the probe's kernels have "
            f"{' and '.join(map(str, HEAD_DIMS))}"
        )
    dtype = config.get("torch_dtype", config.get("dtype", "bfloat16"))
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"{where}: torch_dtype {dtype!r}: the probe builds {', '.join(DTYPE_BYTES)}")
    model_type = config["model_type"]
    tie = config.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise ConfigError(f"{where}: tie_word_embeddings must be true or false, got {tie!r}")
    bias = model_type == "qwen2" or bool(config.get("attention_bias", False))
    try:
        return HFDecoder(
            name=name,
            **dims,
            n_kv_heads=kv_heads,
            tie_embeddings=tie,
            model_type=model_type,
            qkv_bias=bias,
            rope_theta=_float(config, "rope_theta", where, 10_000.0, 0.0, 1e12),
            rope_scaling=_rope_scaling(config, where),
            norm_eps=_float(config, "rms_norm_eps", where, 1e-5, 0.0, 1.0),
            dtype=dtype,
            max_position=_int(config, "max_position_embeddings", where, 4096),
        )
    except ValueError as err:  # DecoderShape's own checks, in the config's words
        raise ConfigError(f"{where}: {err}") from None


def from_bytes(data: bytes, name: str, where: str = "config.json", context: int = 640) -> HFDecoder:
    """The decoder an uploaded or read config.json describes; ConfigError for an empty file, a file too large
    to be one, not JSON, or a config the probe cannot build."""
    if len(data) > MAX_CONFIG_BYTES:
        raise too_large(where, len(data))
    if not data.strip():
        raise ConfigError(f"{where}: the file is empty")
    try:
        config = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not text (a config.json is UTF-8 JSON)") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{where}: not JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
    return from_dict(config, name, where, context)


def from_file(path, context: int = 640) -> HFDecoder:
    """The decoder a config.json on disk describes (ConfigError as `from_bytes`); a file larger than a config can
    be is refused by its size, unread."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_CONFIG_BYTES:
                raise too_large(path.name, size)
            data = f.read(MAX_CONFIG_BYTES + 1)  # from_bytes refuses a file that grew meanwhile
    except OSError as err:
        raise ConfigError(f"{path.name}: cannot be read ({err.strerror or err})") from None
    return from_bytes(data, _name(path), path.name, context)


def too_large(where: str, size: int) -> ConfigError:
    """The refusal of a file too large to be a config.json, by its size (the page's upload: before reading it)."""
    return ConfigError(
        f"{where}: {size / 2**20:.1f} MB is not a config.json (at most {MAX_CONFIG_BYTES >> 10} KB)"
    )


def _name(path: Path) -> str:
    """A model's name from its config's path: the file's stem, or its directory's name for a config.json."""
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem


def shipped() -> dict[str, Path]:
    """The configs that ship with the app (`data/configs/`), by name."""
    return {p.stem: p for p in sorted(CONFIGS_DIR.glob("*.json"))}
