"""The padded rows of a captured batch: the check that they are harmless, the KV canary, and the chapter's bug
on purpose, beside the graph runner's mechanics (`gpu_probe.graph_runner`).

A graph records addresses, not values, so every step copies its real rows into the same buffers and the
runner makes the padded rows harmless: a block table full of the scratch block, a slot inside it and a
context of one token, so they read and write only scratch memory. Here, what shows that it did:

- `check_padding` (before a replay): the padded rows of the loaded buffers reference the scratch block only;
- the KV canary (`canary_before`, `canary_after`, around a replay): no slot of a real sequence changed except
  the ones the step was meant to write;
- `aim_at_real_block`, the bug on purpose (a runner with `pad_rows_to="real"`): padded rows aimed at the
  first block of the batch's first sequence, as if the scratch block had never been reserved, so they
  overwrite that sequence's cached first token at exactly the batch sizes that need padding;
- `check_padding_assertion`, a check of a probe run: with the bug on, the assertion fires for exactly those
  sizes and the canary catches the write; off, neither fires.

Each raises `PaddingCorruption`. The functions take the runner: its static buffers, its KV cache.
"""

from __future__ import annotations

import torch

from core.step_plan import bucket_for
from gpu_probe.kv_cache import PAD_SLOT, SCRATCH_BLOCK

# Above this many bytes of real KV the canary keeps per-slot checksums instead of a full copy.
EXACT_CANARY_BYTES = 512 * 2**20


class PaddingCorruption(AssertionError):
    """Padded rows aimed at, or wrote into, a real sequence's KV blocks."""

    def __init__(self, message: str, kind: str, batch: int, bucket: int, slots: tuple[int, ...] = ()):
        super().__init__(message)
        self.kind, self.batch, self.bucket, self.slots = kind, batch, bucket, slots


def aim_at_real_block(runner, n: int, bucket: int) -> None:
    """The bug: the padded rows [n, bucket) aimed at the first block of the batch's first sequence (slot 0 of
    it), as the loaded real rows leave it."""
    s = runner.static
    if bucket > n:
        victim = s.block_tables[0, 0]
        s.block_tables[n:bucket] = victim
        s.slot_mapping[n:bucket] = victim.long() * runner.block_size
        s.positions[n:bucket] = 0
        s.context_lens[n:bucket] = 1
    runner.dirty = max(runner.dirty, bucket)


# ---- the assertion that catches it -----------------------------------------------------------------
def check_padding(runner, n: int, bucket: int) -> None:
    """Padded rows [n, bucket) of the loaded buffers may reference the scratch block only."""
    tables = runner.static.block_tables[n:bucket].cpu()
    slots = runner.static.slot_mapping[n:bucket].cpu()
    lens = runner.static.context_lens[n:bucket].cpu()
    bad_rows = torch.nonzero((tables != SCRATCH_BLOCK).any(1)).flatten().tolist()
    if bad_rows:
        row = bad_rows[0]
        block = int(tables[row][tables[row] != SCRATCH_BLOCK][0])
        raise PaddingCorruption(
            f"batch {n} padded to {bucket}: {len(bad_rows)} padded row(s) have a block table pointing at "
            f"real block {block} (first: row {n + row}); they must point at scratch block {SCRATCH_BLOCK}",
            kind="block_table",
            batch=n,
            bucket=bucket,
        )
    in_scratch = (slots == PAD_SLOT) | ((slots // runner.block_size) == SCRATCH_BLOCK)
    if not bool(in_scratch.all()):
        bad = slots[~in_scratch].tolist()
        raise PaddingCorruption(
            f"batch {n} padded to {bucket}: padded rows would write KV slot(s) {bad[:4]} outside the "
            f"scratch block",
            kind="slot_mapping",
            batch=n,
            bucket=bucket,
            slots=tuple(bad),
        )
    if bool((lens > runner.block_size).any()) or bool((lens < 1).any()):
        raise PaddingCorruption(
            f"batch {n} padded to {bucket}: padded rows must attend over 1..{runner.block_size} "
            f"scratch tokens",
            kind="context_lens",
            batch=n,
            bucket=bucket,
        )


# ---- the KV canary: what a replay wrote outside its own slots -----------------------------------------
def _real_slots(runner, n: int) -> torch.Tensor:
    """Every slot of every block the real rows own, minus the slots this step writes (sorted, on the
    model's device; worked out there rather than slot by slot in Python: 131k slots at 256 rows)."""
    tables = runner.static.block_tables[:n].long()
    lens = runner.static.context_lens[:n].long()
    used = (lens + runner.block_size - 1) // runner.block_size
    owned = torch.arange(tables.shape[1], device=tables.device)[None, :] < used[:, None]
    blocks = torch.unique(tables[owned])
    blocks = blocks[blocks != SCRATCH_BLOCK]
    slots = (
        blocks[:, None] * runner.block_size + torch.arange(runner.block_size, device=blocks.device)
    ).flatten()
    written = runner.static.slot_mapping[:n].long()
    return slots[~torch.isin(slots, written)].to(runner.model.device)


def _flat_kv(runner) -> torch.Tensor:
    kv = runner.kv_cache.kv  # [layer, K|V, block, slot_in_block, kv_head, head_dim]
    return kv.view(kv.shape[0], 2, kv.shape[2] * kv.shape[3], -1)


def canary_before(runner, n: int):
    slots = _real_slots(runner, n)
    flat = _flat_kv(runner)
    nbytes = flat.shape[0] * 2 * len(slots) * flat.shape[-1] * flat.element_size()
    if nbytes <= EXACT_CANARY_BYTES:
        return slots, "exact", flat[:, :, slots].clone()
    return slots, "checksum", _checksums(runner, slots)


def _checksums(runner, slots: torch.Tensor) -> torch.Tensor:
    """Per-slot sums of the raw bit patterns, one layer at a time (no full copy of the cache)."""
    flat = _flat_kv(runner)
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()]
    return torch.stack(
        [flat[layer].view(bits).sum(-1, dtype=torch.int64)[:, slots] for layer in range(flat.shape[0])]
    )


def canary_after(runner, canary, n: int, bucket: int) -> None:
    slots, kind, before = canary
    if kind == "exact":
        changed = (_flat_kv(runner)[:, :, slots] != before).any(-1).any(0).any(0)
    else:
        changed = (_checksums(runner, slots) != before).any(0).any(0)
    if bool(changed.any()):
        hit = slots[changed].tolist()
        raise PaddingCorruption(
            f"batch {n} padded to {bucket}: KV canary changed at {len(hit)} slot(s) of real sequences that "
            f"this step was not meant to write (first: block {hit[0] // runner.block_size}, "
            f"offset {hit[0] % runner.block_size})",
            kind="canary",
            batch=n,
            bucket=bucket,
            slots=tuple(hit),
        )


# ---- a check of a probe run: the assertion and the canary catch the bug, and only the bug -------------------
def check_padding_assertion(runner, batch, canary_sizes=None) -> dict:
    """With the bug on, the assertion fires for exactly the sizes that need padding; off, never.

    Restores the cache afterwards (the bug really overwrites a sequence's first token)."""
    sizes = range(1, runner.max_bucket + 1)
    need = {n for n in sizes if bucket_for(n, runner.buckets) != n}
    # The bug writes only into the first block of the batch's first sequence: save just that block.
    victim = int(batch.block_tables[0, 0])
    saved_policy, saved_block = runner.pad_rows_to, runner.kv_cache.kv[:, :, victim].clone()
    fired_bug, fired_safe, canary_hits = set(), set(), set()
    try:
        for policy, fired in (("real", fired_bug), ("scratch", fired_safe)):
            runner.pad_rows_to = policy
            for n in sizes:  # the assertion reads the loaded buffers: no replay needed to see it fire
                bucket = bucket_for(n, runner.buckets)
                runner.load(batch.head(n), bucket)
                try:
                    check_padding(runner, n, bucket)
                except PaddingCorruption:
                    fired.add(n)
        runner.pad_rows_to = "real"
        canary_sizes = sorted(canary_sizes or {b - 1 for b in runner.buckets if b > 1})
        for n in canary_sizes:
            try:
                runner.run(batch.head(n), check="after")
            except PaddingCorruption as err:
                if err.kind == "canary":
                    canary_hits.add(n)
            runner.kv_cache.kv[:, :, victim] = saved_block
    finally:
        runner.pad_rows_to = saved_policy
        runner.kv_cache.kv[:, :, victim] = saved_block
        runner.load(batch.head(runner.max_bucket), runner.max_bucket)  # leave no buggy rows behind
    padded_canary = [n for n in canary_sizes if n in need]
    canary_ok = canary_hits == set(padded_canary)
    passed = fired_bug == need and not fired_safe and canary_ok
    return {
        "padding_assertion": {
            "passed": passed,
            "detail": f"bug on: fired for {len(fired_bug)} of the {len(need)} batch sizes in 1..{runner.max_bucket} that "
            f"need padding and {len(fired_bug - need)} others; bug off: fired {len(fired_safe)} times; "
            f"KV canary caught the write at {len(canary_hits & need)}/{len(padded_canary)} padded sizes tried",
            "sizes_needing_padding": len(need),
            "fired_with_bug": len(fired_bug & need),
            "fired_without_padding": len(fired_bug - need),
            "fired_with_fix": len(fired_safe),
            "canary_sizes": canary_sizes,
            "canary_fired": sorted(canary_hits),
        }
    }
