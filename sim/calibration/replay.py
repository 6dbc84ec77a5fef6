"""What a CUDA graph replay costs, read off a probe run's graph modes.

- Host: the unprofiled enqueue time of every graph-mode step (input copies + one
  cudaGraphLaunch) against its node count, by least squares: fixed + per node.
  The fixed part is split into the input copies and the launch in the proportion the
  profiled step shows (where the second copy kernel starts within the host interval).
- GPU: the median gap between consecutive replayed kernels that do not overlap
  (kernels launched with programmatic dependent launch overlap their predecessor; their
  fill and drain is hidden, and their measured durations already carry what is left).

numpy only; the result goes through `core.probe_result`.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from core.probe_result import recorded_result
from sim.timing import GraphReplayCost

_GRAPH_MODES = ("graph", "fused+graph")  # the replays of the probe's own graphs (compile's are Inductor's)
_INPUT_COPY_KERNEL = "multi_tensor_apply_kernel"  # torch._foreach_copy_ of the inputs before the replay


def graph_cost_from_result(result) -> GraphReplayCost:
    """The replay cost of `result`'s graph-mode runs (raises ValueError without two of them)."""
    runs = [r for r in result.runs if r.mode in _GRAPH_MODES and not r.eager_fallback and r.enqueue_us_median]
    if len({r.kernels_per_step for r in runs}) < 2:
        raise ValueError("runs: a replay cost needs graph runs with at least two different node counts")
    nodes = np.array([_graph_nodes(r.timeline) for r in runs], float)
    host = np.array([r.enqueue_us_median for r in runs], float)
    per_node, fixed = np.polyfit(nodes, host, 1)
    per_node = max(float(per_node), 0.0)
    fixed = max(float(np.median(host - per_node * nodes)), 0.0)
    copy_share = float(np.median([_copy_share(r.timeline) for r in runs]))
    gaps = np.concatenate([_node_gaps(r.timeline) for r in runs])
    return GraphReplayCost(
        launch_us=fixed * (1 - copy_share),
        per_node_host_us=per_node,
        node_gap_us=float(np.median(gaps)) if len(gaps) else 0.0,
        input_copy_us=fixed * copy_share,
    )


@lru_cache(maxsize=1)
def recorded_graph_cost() -> GraphReplayCost:
    """The replay cost fitted to the shipped H200 run (gpu_probe/recorded/h200.json); cached."""
    return graph_cost_from_result(recorded_result())


def _graph_nodes(tl) -> int:
    return sum(_INPUT_COPY_KERNEL not in name for name in tl.gpu_names)


def _copy_share(tl) -> float:
    """Share of the profiled host interval spent before the input copies were both submitted."""
    copies = [s for s, name in zip(tl.gpu_start, tl.gpu_names) if _INPUT_COPY_KERNEL in name]
    host = float(tl.cpu_dur.sum())
    if len(copies) < 2 or host <= 0:
        return 0.0
    return float(np.clip(copies[-1] / host, 0.0, 1.0))


def _node_gaps(tl) -> np.ndarray:
    keep = np.array([_INPUT_COPY_KERNEL not in name for name in tl.gpu_names])
    start, end = tl.gpu_start[keep], tl.gpu_end[keep]
    gaps = start[1:] - end[:-1]
    return gaps[gaps >= 0]
