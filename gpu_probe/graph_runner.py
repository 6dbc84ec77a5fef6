"""Bucketed CUDA-graph capture and replay of the decode step: the mechanics.

After nano-vllm's `capture_cudagraph`: static input buffers and a static logits buffer
allocated once at the largest bucket (outside the graphs' pool), one graph per bucket captured
largest first into one shared memory pool, replay at the smallest bucket that fits, eager
above the largest. The LM head writes straight into the static logits, so no graph keeps an
output alive in the pool and each smaller capture reuses the blocks of the larger ones.

A graph records addresses, not values, so every step copies its real rows into the same
buffers and the padded rows must be made harmless: they get a block table full of the scratch
block, a slot inside it and a context of one token, so they read and write only scratch memory.
What checks that (the assertion before a replay, the KV canary after it) and the chapter's bug on
purpose (`pad_rows_to="real"`) are beside the runner, in `gpu_probe.padding`; `run(check=...)`
calls the checks.

`use_graphs=False` runs the same bookkeeping eagerly over the static buffers: the CPU
version the tests and the page's padding demo use.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from core.step_plan import CHAPTER_BUCKETS, bucket_for, check_buckets
from gpu_probe import padding
from gpu_probe.decode_batch import INPUT_NAMES, DecodeBatch
from gpu_probe.kv_cache import SCRATCH_BLOCK
from gpu_probe.padding import PaddingCorruption

__all__ = [
    "CaptureStats",
    "GraphRunner",
    "PaddingCorruption",
]  # the page's padding demo imports all three here
PAD_POLICIES = ("scratch", "real")  # where padded rows point: the scratch block, or (the bug) a real block
CHECKS = (False, True, "before", "after", "both")


@dataclass(frozen=True, slots=True)
class CaptureStats:
    bucket: int
    capture_ms: float  # torch.cuda.graph(...) block: capture + instantiate (after one warm-up step)
    warmup_ms: float  # the eager step before capture (Triton compiles, cuBLAS handles)
    graph_mem_bytes: int  # drop in free device memory across the capture (pool growth + graph exec);
    # the static input and logits buffers are allocated before any capture and are not in it
    pool_bytes: int  # growth of the caching allocator's reserved memory (the shared pool)

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}


class GraphRunner:
    def __init__(
        self,
        model,
        kv_cache=None,
        buckets=CHAPTER_BUCKETS,
        use_graphs: bool = True,
        pad_rows_to: str = "scratch",
        progress=None,
    ):
        if pad_rows_to not in PAD_POLICIES:
            raise ValueError(f"pad_rows_to must be one of {PAD_POLICIES}, got {pad_rows_to!r}")
        self.model, self.kv_cache = model, kv_cache if kv_cache is not None else model.kv_cache
        self.buckets = check_buckets(buckets, allow_empty=False)
        self.max_bucket = self.buckets[-1]
        self.use_graphs, self.pad_rows_to = bool(use_graphs), pad_rows_to
        # The variant (fused or not) is fixed at capture; eager paths must run the same one.
        self.fused = bool(getattr(model, "fused", False))
        if self.use_graphs and model.device.type != "cuda":
            raise ValueError("use_graphs=True needs the model on a CUDA device")
        self.block_size = self.kv_cache.block_size
        self.scratch_slot = SCRATCH_BLOCK * self.block_size
        dev, width, big = model.device, self.kv_cache.max_blocks_per_seq, self.max_bucket
        # Allocated once at the largest bucket; every graph reads views of these addresses.
        self.static = DecodeBatch(
            input_ids=torch.zeros(big, dtype=torch.long, device=dev),
            positions=torch.zeros(big, dtype=torch.long, device=dev),
            block_tables=torch.full((big, width), SCRATCH_BLOCK, dtype=torch.int32, device=dev),
            slot_mapping=torch.full((big,), self.scratch_slot, dtype=torch.long, device=dev),
            context_lens=torch.ones(big, dtype=torch.int32, device=dev),
        )
        # Inputs grouped by dtype: `load` copies each group with one launch (torch._foreach_copy_).
        groups: dict[torch.dtype, list[str]] = {}
        for name in INPUT_NAMES:
            groups.setdefault(getattr(self.static, name).dtype, []).append(name)
        self._copy_groups = tuple(tuple(names) for names in groups.values())
        # The LM head's output, also at a fixed address: every bucket's graph writes rows [0, bucket).
        self.static_logits = torch.zeros((big, model.cfg.vocab), dtype=model.dtype, device=dev)
        # The fused step's widest activations too (see ProbeModel.fused_workspace): outside the pool.
        self.workspace = (
            model.fused_workspace(big) if self.fused and hasattr(model, "fused_workspace") else {}
        )
        self.dirty = 0  # rows [0, dirty) may hold a previous batch's real rows
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.captures: list[CaptureStats] = []
        self.pool = None
        self.last_bucket: int | None = None
        self.last_eager_fallback = False
        if self.use_graphs:
            self.capture_all(progress)

    @property
    def static_input_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.static.as_dict().values())

    @property
    def static_logits_bytes(self) -> int:
        return self.static_logits.numel() * self.static_logits.element_size()

    @property
    def workspace_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.workspace.values())

    @property
    def static_buffer_bytes(self) -> int:
        """Inputs, logits, workspace: allocated once, shared by every bucket, not in graph memory."""
        return self.static_input_bytes + self.static_logits_bytes + self.workspace_bytes

    def views(self, bucket: int) -> DecodeBatch:
        """The static buffers' first `bucket` rows: what the bucket's graph reads."""
        return self.static.head(bucket)

    # ---- capture -------------------------------------------------------------------------------
    @torch.no_grad()
    def capture_all(self, progress=None) -> list[CaptureStats]:
        """Capture every bucket, largest first, so smaller graphs reuse the pool's blocks."""
        self._reset_padding(self.max_bucket)  # warm-up and capture write only to scratch
        for bucket in reversed(self.buckets):
            if progress:
                progress(f"capturing bucket {bucket}")
            self.captures.append(self._capture(bucket))
        self.captures.sort(key=lambda c: c.bucket)
        return self.captures

    def _capture(self, bucket: int) -> CaptureStats:
        t0 = time.perf_counter()
        self._step(bucket)
        torch.cuda.synchronize()
        warmup_ms = (time.perf_counter() - t0) * 1e3
        torch.cuda.empty_cache()  # so the free-memory delta sees only what the capture takes
        free0, reserved0 = torch.cuda.mem_get_info()[0], torch.cuda.memory_reserved()
        graph = torch.cuda.CUDAGraph()
        t0 = time.perf_counter()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self._step(bucket)
        torch.cuda.synchronize()
        capture_ms = (time.perf_counter() - t0) * 1e3
        free1, reserved1 = torch.cuda.mem_get_info()[0], torch.cuda.memory_reserved()
        if self.pool is None:
            self.pool = graph.pool()
        self.graphs[bucket], self.outputs[bucket] = graph, out
        return CaptureStats(
            bucket=bucket,
            capture_ms=capture_ms,
            warmup_ms=warmup_ms,
            graph_mem_bytes=max(free0 - free1, 0),
            pool_bytes=max(reserved1 - reserved0, 0),
        )

    # ---- replay --------------------------------------------------------------------------------
    @torch.no_grad()
    def run(self, batch: DecodeBatch, check=False) -> torch.Tensor:
        """Logits of the real rows: a view of static_logits (rows [0, n)), valid until the next run;
        above the largest bucket a fresh tensor from an eager step.

        check: True/"both" checks the padded rows before replay and the KV canary after it;
        "before" or "after" one of them; False nothing (the timing path).
        """
        if check not in CHECKS:
            raise ValueError(f"check must be one of {CHECKS}, got {check!r}")
        n = batch.size
        bucket = bucket_for(n, self.buckets)
        self.last_bucket, self.last_eager_fallback = bucket, bucket is None
        if bucket is None:
            return self.eager(batch)
        self.load(batch, bucket)
        if check in (True, "both", "before"):
            padding.check_padding(self, n, bucket)
        canary = padding.canary_before(self, n) if check in (True, "both", "after") else None
        if self.use_graphs:
            self.graphs[bucket].replay()
            out = self.outputs[bucket]
        else:
            out = self._step(bucket)
        if canary is not None:
            padding.canary_after(self, canary, n, bucket)
        return out[:n]

    def check_padding(self, n: int, bucket: int) -> None:
        """`gpu_probe.padding.check_padding` on the loaded buffers (the page's padding demo asks the runner)."""
        padding.check_padding(self, n, bucket)

    def eager(self, batch: DecodeBatch, logits_out=None, workspace=None) -> torch.Tensor:
        """The captured model's step, launched eagerly (with the variant it was captured with)."""
        if hasattr(self.model, "fused"):
            self.model.fused = self.fused
        return self.model(batch, logits_out, workspace)

    def _step(self, bucket: int) -> torch.Tensor:
        """One step over the static buffers at this bucket, logits into static_logits[:bucket]."""
        return self.eager(self.views(bucket), self.static_logits[:bucket], self.workspace or None)

    def load(self, batch: DecodeBatch, bucket: int) -> None:
        """Copy the real rows into the static buffers and make rows [n, bucket) padding."""
        n = batch.size
        # One copy launch per dtype rather than per input: at batch 1 the GPU idles through the
        # host time of every launch before the graph (5 copies -> 2).
        for names in self._copy_groups:
            torch._foreach_copy_(
                [getattr(self.static, name)[:n] for name in names],
                [getattr(batch, name) for name in names],
                non_blocking=True,
            )
        if self.pad_rows_to == "real":
            padding.aim_at_real_block(self, n, bucket)  # the bug on purpose
        else:
            if self.dirty > n:
                # Rows a previous, larger batch left behind would write into its sequences' blocks.
                self._reset_padding(self.dirty, start=n)
            self.dirty = n

    def _reset_padding(self, stop: int, start: int = 0) -> None:
        s = self.static
        s.input_ids[start:stop] = 0
        s.positions[start:stop] = 0
        s.block_tables[start:stop] = SCRATCH_BLOCK
        s.slot_mapping[start:stop] = self.scratch_slot
        s.context_lens[start:stop] = 1
        self.dirty = min(self.dirty, start)
