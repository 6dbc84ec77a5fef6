"""Device memory a bucket layout pins when every bucket is captured as a CUDA graph.

A model per graph (static buffers, per-node overhead, one shared pool), fed either from a
simulator model's shapes (`GraphMemoryModel.for_model`) or, in sim/buckets/report.py, from a
probe's measured captures. `sim.buckets.layouts.best_layout_under_budget` takes it as the memory function.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.step_plan import bucket_array

# Assumed device memory per captured kernel node (the driver's copy of its launch parameters
# and the executable graph's bookkeeping). Only its order is known from engine logs (a few MiB
# for a graph of a few hundred kernels); the probe's measured per-graph figures replace it.
NODE_BYTES = 8 * 1024
KV_BLOCK_SIZE = 16  # tokens per paged-KV block, as in vLLM and nano-vllm


@dataclass(frozen=True, slots=True)
class GraphMemoryModel:
    """Device memory a bucket layout pins, modelled per graph.

    - static buffers: what replay reads and writes at fixed addresses, per captured row:
      token id and position (int64), slot mapping and context length (int32), a block-table
      row (int32 per KV block of the longest context) and the output hidden state.
      `static_per_graph=True` is the chapter's model (each graph pins its own); engines such
      as nano-vllm allocate them once at the largest bucket and slice (False).
    - per-node overhead: `node_bytes` for each of the `nodes_per_graph` kernels in a graph.
    - the shared pool: graphs are captured largest first into one memory pool, so the
      intermediates of the largest graph (one layer's live activations: the caching
      allocator reuses them layer to layer) are the pool, and smaller graphs fit inside it.
    """

    static_bytes_per_row: float
    pool_bytes_per_row: float
    nodes_per_graph: int
    node_bytes: float = NODE_BYTES
    static_per_graph: bool = True

    def __post_init__(self) -> None:
        for name in ("static_bytes_per_row", "pool_bytes_per_row", "node_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e12:
                raise ValueError(f"GraphMemoryModel.{name}: must be a number from 0 to 1e12, got {value!r}")
        if (
            isinstance(self.nodes_per_graph, bool)
            or not isinstance(self.nodes_per_graph, int)
            or not 1 <= self.nodes_per_graph <= 1_000_000
        ):
            raise ValueError(
                f"GraphMemoryModel.nodes_per_graph: must be an integer ≥ 1, got {self.nodes_per_graph!r}"
            )

    @classmethod
    def for_model(
        cls, model, nodes_per_graph: int, node_bytes: float = NODE_BYTES, static_per_graph: bool = True
    ) -> GraphMemoryModel:
        """Per-row sizes from a `sim.config.ModelConfig` (duck-typed: its shape fields)."""
        act = float(model.bytes_per_el)
        blocks = -(-int(model.context_len) // KV_BLOCK_SIZE)
        static = 8 + 8 + 4 + 4 + 4 * blocks + act * model.hidden
        head_dim = model.hidden // model.n_heads
        qkv = (model.n_heads + 2 * model.n_kv_heads) * head_dim
        # residual + normed input + qkv + attention output + gate/up + activated FFN.
        pool = act * (2 * model.hidden + qkv + model.n_heads * head_dim + 3 * model.ffn)
        return cls(static, pool, int(nodes_per_graph), node_bytes, static_per_graph)

    def breakdown(self, buckets) -> dict[str, float]:
        arr = bucket_array(buckets)
        rows = float(arr.sum()) if self.static_per_graph else float(arr[-1])
        static = self.static_bytes_per_row * rows
        nodes = float(self.node_bytes) * self.nodes_per_graph * arr.size
        pool = self.pool_bytes_per_row * float(arr[-1])
        return {"static": static, "nodes": nodes, "pool": pool, "total": static + nodes + pool}


def graph_memory_bytes(buckets, memory: GraphMemoryModel) -> int:
    """Bytes pinned by capturing every bucket of the layout (see GraphMemoryModel)."""
    return int(round(memory.breakdown(buckets)["total"]))
