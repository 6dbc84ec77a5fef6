"""Paged KV cache: one pool of fixed-size blocks for every layer, block tables, slot mapping.

Layout: one tensor `kv[layer, 0 = K | 1 = V, block, slot_in_block, kv_head, head_dim]`, held as
a registered buffer so the model (and torch.compile's CUDA graphs) see a static address.

A sequence owns a list of blocks (its block table); token t of it lives in block
`table[t // block_size]` at offset `t % block_size`, i.e. at the flat *slot*
`table[t // block_size] * block_size + t % block_size`.

Padding convention (what makes padded rows of a captured batch harmless):
- block `SCRATCH_BLOCK` (= 0) is never handed to a sequence; a padded row gets a block table
  full of SCRATCH_BLOCK, a slot inside the scratch block (e.g. slot 0) and a
  context length of 1, so it writes and reads only scratch memory;
- a slot of `PAD_SLOT` (= -1, vLLM's convention) is also accepted: the fused kernel skips the
  write, the unfused path redirects it to slot 0, which is in the scratch block.
"""

from __future__ import annotations

import torch
from torch import nn

from gpu_probe.config import ProbeModelConfig

SCRATCH_BLOCK = 0
PAD_SLOT = -1


class PagedKVCache(nn.Module):
    """The block pool (a buffer) plus a small host-side allocator for sequences."""

    def __init__(
        self,
        cfg: ProbeModelConfig,
        num_blocks: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        num_blocks = cfg.num_blocks if num_blocks is None else int(num_blocks)
        if num_blocks < 2:
            raise ValueError(f"num_blocks must be at least 2 (one is the scratch block), got {num_blocks}")
        self.cfg = cfg
        self.block_size = cfg.block_size
        self.num_blocks = num_blocks
        self.max_blocks_per_seq = cfg.max_blocks_per_seq
        dtype = dtype or getattr(torch, cfg.dtype)
        shape = (cfg.n_layers, 2, num_blocks, cfg.block_size, cfg.n_kv_heads, cfg.head_dim)
        self.register_buffer("kv", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        # Host-side bookkeeping; never touched inside forward.
        self._free: list[int] = list(range(num_blocks - 1, SCRATCH_BLOCK, -1))  # pop() hands out 1, 2, ...
        self._tables: dict[int, list[int]] = {}
        self._lengths: dict[int, int] = {}
        self._next_id = 0

    # ---- views ---------------------------------------------------------------------------------
    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(k_cache, v_cache) of one layer, each [num_blocks, block_size, kv_heads, head_dim]."""
        return self.kv[index, 0], self.kv[index, 1]

    def fill_random_(self, seed: int = 0, std: float = 1.0) -> PagedKVCache:
        """Random K/V everywhere: stands in for a prefill (the values do not matter for timing)."""
        gen = torch.Generator(device=self.kv.device).manual_seed(seed)
        self.kv.normal_(0.0, std, generator=gen)
        return self

    # ---- allocator ------------------------------------------------------------------------------
    def add_sequence(self, n_tokens: int) -> int:
        """Allocate blocks for a sequence whose first n_tokens are already cached; returns its id."""
        if n_tokens < 0 or n_tokens > self.max_blocks_per_seq * self.block_size:
            raise ValueError(
                f"n_tokens must be in [0, {self.max_blocks_per_seq * self.block_size}], got {n_tokens}"
            )
        need = -(-n_tokens // self.block_size)
        if need > len(self._free):
            raise RuntimeError(f"KV pool exhausted: need {need} blocks, {len(self._free)} free")
        seq_id = self._next_id
        self._next_id += 1
        self._tables[seq_id] = [self._free.pop() for _ in range(need)]
        self._lengths[seq_id] = n_tokens
        return seq_id

    def append_slot(self, seq_id: int) -> int:
        """Reserve the slot of the sequence's next token (allocating a block when one fills up)."""
        table, length = self._tables[seq_id], self._lengths[seq_id]
        if length >= self.max_blocks_per_seq * self.block_size:
            raise RuntimeError(f"sequence {seq_id} reached max_context ({length} tokens)")
        if length == len(table) * self.block_size:
            if not self._free:
                raise RuntimeError("KV pool exhausted")
            table.append(self._free.pop())
        self._lengths[seq_id] = length + 1
        return table[length // self.block_size] * self.block_size + length % self.block_size

    def free(self, seq_id: int) -> None:
        self._free.extend(reversed(self._tables.pop(seq_id)))
        del self._lengths[seq_id]

    def block_table(self, seq_id: int) -> list[int]:
        return list(self._tables[seq_id])

    def length(self, seq_id: int) -> int:
        return self._lengths[seq_id]

    def slot_of(self, seq_id: int, position: int) -> int:
        table = self._tables[seq_id]
        return table[position // self.block_size] * self.block_size + position % self.block_size

    # ---- decode inputs --------------------------------------------------------------------------
    def decode_inputs(self, seq_ids: list[int], advance: bool = True) -> dict[str, torch.Tensor]:
        """positions, block_tables, slot_mapping, context_lens for one decode step of seq_ids.

        With advance=True each sequence gets a new slot for the token being decoded (its length
        grows by one); with advance=False the step re-decodes the last cached token, writing the
        same slot again (what a timing loop wants: repeatable, no growth).
        """
        positions, slots, lens, tables = [], [], [], []
        for seq_id in seq_ids:
            if advance:
                slot = self.append_slot(seq_id)
            else:
                if self._lengths[seq_id] == 0:
                    raise ValueError(f"sequence {seq_id} is empty: nothing to re-decode")
                slot = self.slot_of(seq_id, self._lengths[seq_id] - 1)
            n = self._lengths[seq_id]
            positions.append(n - 1)
            slots.append(slot)
            lens.append(n)
            table = self._tables[seq_id]
            tables.append(table + [SCRATCH_BLOCK] * (self.max_blocks_per_seq - len(table)))
        device = self.kv.device
        return {
            "positions": torch.tensor(positions, dtype=torch.long, device=device),
            "block_tables": torch.tensor(tables, dtype=torch.int32, device=device).reshape(
                -1, self.max_blocks_per_seq
            ),
            "slot_mapping": torch.tensor(slots, dtype=torch.long, device=device),
            "context_lens": torch.tensor(lens, dtype=torch.int32, device=device),
        }
