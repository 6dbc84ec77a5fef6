"""The decoder's shape, one dataclass for the simulator and the probe.

A Llama-style decoder (RMSNorm, grouped-query attention with RoPE, SwiGLU FFN) is fixed by
its layer count, widths, head counts and vocabulary, and by whether the LM head reuses the
embedding table (Llama-3.2-1B does). `sim.config.ModelConfig` adds what the simulator needs
(bytes per element, context, kernels per layer); `gpu_probe.config.ProbeModelConfig` adds
what the probe builds with (dtype, paged-cache sizes, RoPE base, seed). Both validate the
shape here, at construction, with messages that name the field
(`ModelConfig.n_kv_heads: must divide n_heads (32) ...`).

Plain Python: `gpu_probe` imports it without numpy's simulator, `sim` without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

# What a shape field may be: beyond these it is a typo or a hand-edited link, not a model.
LIMITS = {
    "n_layers": (1, 1024),
    "hidden": (1, 65_536),
    "n_heads": (1, 1024),
    "n_kv_heads": (1, 1024),
    "ffn": (1, 262_144),
    "vocab": (1, 1_048_576),
}


def check_int(owner: str, name: str, value, low: int, high: int) -> None:
    """ValueError naming `owner.name` unless value is an integer from low to high (bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{owner}.{name}: must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{owner}.{name}: must be from {low} to {high}, got {value}")


def kv_elements(kv_dim: int, tokens: int, layers: int = 1) -> int:
    """What a KV cache holds for `tokens` tokens in `layers` layers: each token's K and V, `kv_dim` wide."""
    return 2 * kv_dim * tokens * layers


@dataclass(frozen=True, slots=True)
class DecoderShape:
    name: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    ffn: int
    vocab: int
    tie_embeddings: bool = False  # the LM head is the embedding table (one table, read whole by the head)

    def __post_init__(self) -> None:
        owner = type(self).__name__
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"{owner}.name: must be a non-empty string")
        for field_name, (low, high) in LIMITS.items():
            check_int(owner, field_name, getattr(self, field_name), low, high)
        if self.hidden % self.n_heads:
            raise ValueError(f"{owner}.n_heads: must divide hidden ({self.hidden}), got {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"{owner}.n_kv_heads: must divide n_heads ({self.n_heads}) for grouped-query attention, "
                f"got {self.n_kv_heads}"
            )
        if not isinstance(self.tie_embeddings, bool):
            raise ValueError(f"{owner}.tie_embeddings: must be True or False, got {self.tie_embeddings!r}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.n_heads

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    def kv_cache_elements(self, sequences: int, context: int) -> int:
        """The KV cache of `sequences` sequences of `context` tokens each, every layer."""
        return kv_elements(self.kv_dim, sequences * context, self.n_layers)

    @property
    def layer_params(self) -> int:
        """One layer's weights: q, k, v, o, gate, up, down and the two RMSNorm weights."""
        h = self.hidden
        return h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h + 3 * h * self.ffn + 2 * h

    @property
    def n_params(self) -> int:
        """Every parameter: the layers, the final norm, the embedding table and (untied) the LM head."""
        tables = 1 if self.tie_embeddings else 2
        return self.n_layers * self.layer_params + tables * self.vocab * self.hidden + self.hidden

    @property
    def read_params(self) -> int:
        """Parameters one decode step reads whole: all but an untied embedding table (gathered a row a token)."""
        return self.n_params - (0 if self.tie_embeddings else self.vocab * self.hidden)
