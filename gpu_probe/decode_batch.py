"""The decode step's inputs as one batch."""

from __future__ import annotations

from dataclasses import dataclass

import torch

INPUT_NAMES = ("input_ids", "positions", "block_tables", "slot_mapping", "context_lens")


@dataclass(frozen=True, slots=True)
class DecodeBatch:
    """The five decode inputs for `size` real rows (all on the model's device)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    block_tables: torch.Tensor
    slot_mapping: torch.Tensor
    context_lens: torch.Tensor

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    def head(self, n: int) -> DecodeBatch:
        """The first n rows (the same sequences, so smaller batches reuse one allocation)."""
        if not 1 <= n <= self.size:
            raise ValueError(f"n must be in [1, {self.size}], got {n}")
        return DecodeBatch(*(getattr(self, name)[:n] for name in INPUT_NAMES))

    def as_dict(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in INPUT_NAMES}


def make_batch(model, n: int, seed: int = 0, context: int | None = None) -> DecodeBatch:
    """n fresh sequences of `context` cached tokens (default: the preset's prefill) re-decoding
    their last token: repeatable steps that always write the same slots."""
    cache, cfg = model.kv_cache, model.cfg
    seq_ids = [cache.add_sequence(context or cfg.prefill_len) for _ in range(n)]
    inputs = cache.decode_inputs(seq_ids, advance=False)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab, (n,), generator=gen).to(model.device)
    return DecodeBatch(input_ids=ids, **inputs)
