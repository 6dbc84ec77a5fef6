"""How fast this host launches work on the GPU: the index a probe result carries (`host`), measured in the
same process as the probe's steps, before them and after them, so a drift during the run shows.

Each cost is the host time of one call, read with `time.perf_counter_ns` around it (the clock read, tens
of ns, included):

- `torch_launch_us`: `torch.add` of two 16-element fp32 tensors into a third (`out=` given: nothing is
  allocated), the cheapest kernel launch eager PyTorch makes;
- `triton_launch_us`: the same add as a one-program Triton kernel through `kernel[grid](...)`: Triton's
  binder, cache key and launcher;
- `triton_bound_launch_us`: that kernel through the probe's bound launcher (`gpu_probe.kernels.launch`),
  where this process can bind one (a GPU and the Triton it was written against);
- `graph_launch_us`: `CUDAGraph.replay()` (cudaGraphLaunch) of graphs of N such adds, N in GRAPH_NODES,
  synchronised after each replay so the launch queue never fills; fitted as `graph_fixed_us` +
  `graph_per_node_us` x N over the medians (least squares, the slope kept >= 0).

Launches go in rounds (`per_round` launches with no synchronisation inside a round, a trivial kernel
finishing long before the next launch, and one between rounds), the kinds taking turns round by round.
Median, p10 and p90 over every launch of a sample, and over every launch of all samples for the index.
"""

from __future__ import annotations

import platform
import time

import numpy as np
import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # the torch and graph launches are measured all the same
    triton = None

GRAPH_NODES = (1, 16, 64, 256)
KINDS = ("torch_launch_us", "triton_launch_us", "triton_bound_launch_us")

if triton is not None:

    @triton.jit
    def trivial_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
        """c = a + b over one block: the trivial kernel whose launch is timed."""
        offs = tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


class _bound_launches:
    """The bound launcher on while the index is measured, whatever the run launches its steps with."""

    def __enter__(self):
        from gpu_probe.kernels import launch

        self.previous = launch.set_bound(True)

    def __exit__(self, *exc):
        from gpu_probe.kernels import launch

        launch.set_bound(self.previous)
        return False


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what `platform` says, else "unknown"."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name") and ":" in line:
                    name = " ".join(line.split(":", 1)[1].split())
                    if name:
                        return name[:200]
    except OSError:
        pass
    return (platform.processor() or platform.machine() or "unknown")[:200]


def stats(values) -> dict:
    """{median, p10, p90} of host times in µs."""
    p10, med, p90 = np.percentile(np.asarray(values, dtype=float), [10, 50, 90])
    return {"median": float(med), "p10": float(p10), "p90": float(p90)}


def fit_graph(nodes, medians) -> tuple[float, float]:
    """(fixed µs, µs per node) of a replay's host time, least squares over the medians, the slope >= 0."""
    x, y = np.asarray(nodes, dtype=float), np.asarray(medians, dtype=float)
    slope = float(np.polyfit(x, y, 1)[0]) if len(x) > 1 else 0.0
    slope = max(slope, 0.0)
    fixed = float(np.mean(y - slope * x))
    if fixed <= 0:  # a slope that explains more than all of it: the smallest graph's time is the fixed part
        fixed, slope = float(y.min()), max(0.0, float((y.max() - y.min()) / max(x.max() - x.min(), 1.0)))
    return fixed, slope


class HostSpeed:
    """Trivial launches set up once on the current GPU; `sample(when)` times them; `block()` is the result's
    `host` (None before any sample)."""

    def __init__(self, rounds: int = 10, per_round: int = 300, graph_per_round: int = 8, device="cuda"):
        """device: "cpu" only for the tests (Triton's interpreter; the graphs stood in for)."""
        self.rounds, self.per_round, self.graph_per_round = rounds, per_round, graph_per_round
        self.sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
        self.a, self.b, self.c = (torch.ones(16, device=device) for _ in range(3))
        self.kinds = {"torch_launch_us": lambda: torch.add(self.a, self.b, out=self.c)}
        bound = None
        if triton is not None:
            from gpu_probe.kernels import launch

            self.kinds["triton_launch_us"] = lambda: trivial_kernel[(1,)](
                self.a, self.b, self.c, 16, BLOCK=16
            )
            if launch.bound_available():
                bound = launch.Launch(
                    trivial_kernel, (1,), (None, None, None, 16), {"BLOCK": 16}, slots=(0, 1, 2)
                )
                self.kinds["triton_bound_launch_us"] = lambda: bound(self.a, self.b, self.c)
        with _bound_launches():
            for fn in self.kinds.values():  # compile, bind, warm the allocator and the driver
                for _ in range(5):
                    fn()
        if bound is not None and not bound.bound:
            del self.kinds["triton_bound_launch_us"]  # it did not bind: what it times would be kernel[grid]
        self.graphs = {n: self._capture(n) for n in GRAPH_NODES}
        self.samples: list[dict] = []
        self._pooled: dict[str, list[float]] = {}

    def _capture(self, nodes: int) -> torch.cuda.CUDAGraph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.add(self.a, self.b, out=self.c)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(nodes):
                torch.add(self.a, self.b, out=self.c)
        graph.replay()
        torch.cuda.synchronize()
        return graph

    def _rounds(self, raw: dict, graph_raw: dict) -> None:
        clock, sync = time.perf_counter_ns, self.sync
        for _ in range(self.rounds):
            for name, fn in self.kinds.items():
                times = raw[name]
                sync()
                for _ in range(self.per_round):
                    t0 = clock()
                    fn()
                    times.append(clock() - t0)
            for n, graph in self.graphs.items():
                times = graph_raw[n]
                for _ in range(self.graph_per_round):
                    sync()
                    t0 = clock()
                    graph.replay()
                    times.append(clock() - t0)
        sync()

    def sample(self, when: str) -> dict:
        """Time every kind of launch now (`when`: "before" or "after" the steps); returns the sample."""
        raw: dict[str, list[int]] = {name: [] for name in self.kinds}
        graph_raw: dict[int, list[int]] = {n: [] for n in self.graphs}
        with _bound_launches():
            self._rounds(raw, graph_raw)
        out: dict = {"when": when}
        for name, times in raw.items():
            us = [t / 1e3 for t in times]
            out[name] = stats(us)
            self._pooled.setdefault(name, []).extend(us)
        out["graph_launch_us"] = self._graph_stats({n: [t / 1e3 for t in ts] for n, ts in graph_raw.items()})
        for n, ts in graph_raw.items():
            self._pooled.setdefault(f"graph{n}", []).extend(t / 1e3 for t in ts)
        out["graph_fixed_us"], out["graph_per_node_us"] = fit_graph(
            out["graph_launch_us"]["nodes"], out["graph_launch_us"]["median"]
        )
        self.samples.append(out)
        return out

    @staticmethod
    def _graph_stats(per_node: dict[int, list[float]]) -> dict:
        nodes = sorted(per_node)
        each = [stats(per_node[n]) for n in nodes]
        return {"nodes": nodes, **{k: [s[k] for s in each] for k in ("median", "p10", "p90")}}

    def block(self) -> dict | None:
        """The result's `host` block: the CPU, the versions, the index pooled over every sample, each sample."""
        if not self.samples:
            return None
        pooled = {name: stats(self._pooled[name]) for name in self.kinds}
        graph = self._graph_stats({n: self._pooled[f"graph{n}"] for n in self.graphs})
        fixed, per_node = fit_graph(graph["nodes"], graph["median"])
        return {
            "cpu": cpu_name(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            **({"triton": str(triton.__version__)} if triton is not None else {}),
            "launches": self.rounds * self.per_round,
            **pooled,
            "graph_launch_us": graph,
            "graph_fixed_us": fixed,
            "graph_per_node_us": per_node,
            "samples": list(self.samples),
        }

    def close(self) -> None:
        """Let the graphs and buffers go."""
        self.graphs.clear()
        self.kinds.clear()
