"""The peer to beat: torch.compile(unfused model, mode="reduce-overhead", fullgraph=True).

Inductor fuses what it can and, in "reduce-overhead" mode, replays the step from CUDA
graphs (cudagraph trees). It only does so if nothing disqualifies the graph: a mutated
*input* would ("skipping cudagraphs due to mutated inputs"), which is why the paged KV
cache is a registered buffer of the model rather than an argument. Whether graphs were
really used is read from Inductor's own log and skip counter while compiling, and
recorded in the result (`checks.compile_cudagraphs`) with the compile time.

The peer runs the model's own `unfused_forward` (same weights, same code) with `COMPILE_OPS`: the
norms, RoPE, KV write and SiLU x up as plain PyTorch, which Inductor fuses as it sees fit, and the
attention as one opaque custom op around the probe's paged attention kernel (Inductor cannot write a
paged attention of its own, and a gather of the whole block table would be a different attention,
not a different compiler). The KV cache is a copy held as one K and one V buffer per layer, as
gpt-fast does: with the probe's single all-layer buffer, every layer's cache is a *view* of one base,
and Inductor's functionalization rebuilt the whole base around each write (730 ms per step on the H200).

The write itself matters too: an index_put_ on the layer's cache tensor at (block, offset)
(`gpu_probe.model.write_kv`), not an index_copy_ through a flat view of it. Inductor (torch 2.11)
did not reinplace the view form and copied the whole layer buffer before and after each write;
an index_put_ on a buffer of the module is the pattern it reinplaces into a scatter of the batch's
rows (tests/test_probe_compile_peer.py checks the CPU output code: no cache-sized temporaries).
"""

from __future__ import annotations

import functools
import logging
import time

import torch
from torch import nn

from gpu_probe import model as probe_model

SKIP_MARKER = "skipping cudagraphs"


@torch.library.custom_op("launch_bound::paged_attention", mutates_args=())
def paged_attention_op(
    q: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
    splits: int,
) -> torch.Tensor:
    """The unfused step's attention as one op Inductor leaves alone: the Triton kernel on a GPU, plain
    PyTorch on a CPU (the compile tests)."""
    if q.is_cuda:
        from gpu_probe.kernels.attention import paged_attention

        return paged_attention(q, block_tables, context_lens, k_cache, v_cache, n_heads, n_kv_heads, splits)
    return probe_model.paged_attention(q, block_tables, context_lens, k_cache, v_cache, n_heads, n_kv_heads)


@paged_attention_op.register_fake
def _(q, block_tables, context_lens, k_cache, v_cache, n_heads, n_kv_heads, splits):
    return torch.empty_like(q)


COMPILE_OPS = probe_model.UnfusedOps(
    "compile",
    probe_model.linear,
    probe_model.rms_norm,
    probe_model.rope,
    probe_model.write_kv,
    paged_attention_op,
    probe_model.silu_mul,
)


class _LogCapture(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(record.getMessage())
        except Exception:  # a malformed record must not break compilation
            self.lines.append(str(record.msg))


class PerLayerKVCache(nn.Module):
    """The paged cache's contents as one registered K and V buffer per layer (same layout per layer)."""

    def __init__(self, cache):
        super().__init__()
        self.block_size, self.num_blocks = cache.block_size, cache.num_blocks
        self.max_blocks_per_seq = cache.max_blocks_per_seq
        self.n_layers = cache.kv.shape[0]
        for index in range(self.n_layers):
            k, v = cache.layer(index)
            self.register_buffer(f"k{index}", k.clone(), persistent=False)
            self.register_buffer(f"v{index}", v.clone(), persistent=False)

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return getattr(self, f"k{index}"), getattr(self, f"v{index}")


def with_per_layer_cache(model):
    """A shallow twin of `model` (shared weights) whose kv_cache is a PerLayerKVCache copy."""
    twin = object.__new__(type(model))
    twin.__dict__.update(model.__dict__)
    twin._modules = dict(model._modules)
    twin._modules["kv_cache"] = PerLayerKVCache(model.kv_cache)
    return twin


class CompilePeer:
    """Compiled unfused decode step; one static-shape compile and graph per batch size."""

    def __init__(self, model, dynamic: bool = False, per_layer_cache: bool = True):
        self.model = with_per_layer_cache(model) if per_layer_cache else model
        self.dynamic, self.per_layer_cache = dynamic, per_layer_cache
        self.compile_s: dict[int, float] = {}
        self._log = _LogCapture()
        self._fn = torch.compile(
            functools.partial(self.model.unfused_forward, ops=COMPILE_OPS),
            mode="reduce-overhead",
            fullgraph=True,
            dynamic=dynamic,
        )

    def __call__(self, batch) -> torch.Tensor:
        # Tells cudagraph trees a new step begins, so the previous step's outputs may be overwritten.
        torch.compiler.cudagraph_mark_step_begin()
        return self._fn(batch)

    def warm(self, batch, calls: int = 3) -> float:
        """Compile for this batch size (the first call) and run until the graph is recorded."""
        with self._logging():
            t0 = time.perf_counter()
            with torch.no_grad():
                self(batch)
            torch.cuda.synchronize()
            self.compile_s[batch.size] = time.perf_counter() - t0
            with torch.no_grad():
                for _ in range(calls):
                    self(batch)
            torch.cuda.synchronize()
        return self.compile_s[batch.size]

    def _logging(self):
        peer = self

        class _Scope:
            def __enter__(self):
                # Both artifacts carry the skip message in some torch version.
                torch._logging.set_logs(cudagraphs=True, perf_hints=True)
                self.loggers = [logging.getLogger("torch._inductor"), logging.getLogger("torch._dynamo")]
                for logger in self.loggers:
                    logger.addHandler(peer._log)
                self.skips0 = _skip_count()

            def __exit__(self, *exc):
                for logger in self.loggers:
                    logger.removeHandler(peer._log)
                torch._logging.set_logs()
                peer._skips = getattr(peer, "_skips", 0) + _skip_count() - self.skips0
                return False

        return _Scope()

    def check(self, graph_launches_seen: bool | None = None) -> dict:
        """The result's `compile_cudagraphs` check: no skip in the log or counter, graphs replayed."""
        skip_lines = [line for line in self._log.lines if SKIP_MARKER in line.lower()]
        skips = getattr(self, "_skips", 0)
        passed = not skip_lines and skips == 0 and graph_launches_seen is not False
        detail = (
            f"inductor log: {len(self._log.lines)} lines captured while compiling, "
            f"{len(skip_lines)} saying '{SKIP_MARKER}', skip counter {skips}"
        )
        if graph_launches_seen is not None:
            detail += (
                "; profiled steps show cudaGraphLaunch"
                if graph_launches_seen
                else "; profiled steps show NO cudaGraphLaunch"
            )
        return {
            "compile_cudagraphs": {
                "passed": passed,
                "detail": detail,
                "skip_messages": skip_lines[:5],
                "compile_s": {str(k): round(v, 3) for k, v in self.compile_s.items()},
                "compile_s_total": round(sum(self.compile_s.values()), 3),
                "dynamic": self.dynamic,
                "kv_cache": "one buffer per layer" if self.per_layer_cache else "one buffer for all layers",
                "cache_write": "index_put_ at (block, offset)",
            }
        }


def _skip_count() -> int:
    try:
        from torch._dynamo.utils import counters

        return int(counters["inductor"]["cudagraph_skips"])
    except Exception:  # the counter moved in some torch version: the log check still stands
        return 0
