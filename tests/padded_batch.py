"""A decode batch padded eagerly with harmless rows, as the graph runner pads its static buffers: the tests'
way to run a padded step without a runner."""

import torch

from gpu_probe.decode_batch import DecodeBatch
from gpu_probe.kv_cache import SCRATCH_BLOCK


def pad_batch(batch: DecodeBatch, rows: int, block_size: int = 1) -> DecodeBatch:
    """`batch` padded to `rows` rows aimed at the scratch block: token 0, position 0, a block table full of
    the scratch block, a slot inside it (spread over its slots) and a context of one token."""
    pad = rows - batch.size
    if pad < 0:
        raise ValueError(f"rows ({rows}) is fewer than the batch's ({batch.size})")
    device, width = batch.positions.device, batch.block_tables.shape[1]
    slots = [SCRATCH_BLOCK * block_size + r % block_size for r in range(pad)]
    return DecodeBatch(
        input_ids=torch.cat([batch.input_ids, torch.zeros(pad, dtype=batch.input_ids.dtype, device=device)]),
        positions=torch.cat([batch.positions, torch.zeros(pad, dtype=torch.long, device=device)]),
        block_tables=torch.cat(
            [batch.block_tables, torch.full((pad, width), SCRATCH_BLOCK, dtype=torch.int32, device=device)]
        ),
        slot_mapping=torch.cat([batch.slot_mapping, torch.tensor(slots, dtype=torch.long, device=device)]),
        context_lens=torch.cat([batch.context_lens, torch.ones(pad, dtype=torch.int32, device=device)]),
    )
