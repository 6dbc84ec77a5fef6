"""Bucket layouts compared for one model, GPU and workload: padding, eager fallback, time, memory.

Used by the page's Bucketing tab and by `python -m sim buckets`, so both show the same
table. Times come from the simulator's per-kernel model (`sim.step.schedule.sweep`): a padded
step runs every kernel at the bucket's rows, but its dummy rows read no KV cache (as in the
simulator, `TimeModel`), so the time lost to padding is the padded step's GPU time minus that
of a graph of exactly the real batch; a batch above the largest bucket runs eager, and costs
the eager step minus the graph step it would have had. The optimiser minimises the same times.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np

from core.step_plan import FUSED_GRAPH, GRAPH, Mode, without_graphs
from sim.buckets import layouts as bk
from sim.buckets import memory as bm
from sim.buckets import workloads as wl
from sim.buckets.workloads import Workload, uniform
from sim.config import PRESETS, HardwareConfig, ModelConfig
from sim.step.kernels import step_kernels
from sim.step.schedule import sweep

MIB = 1024 * 1024
COMPARE_DEFAULT = ("powers of two", "chapter", "dense")  # the chapter's "Run it locally" comparison
OPTIMAL_NAME = "optimal under budget"
OPTIMAL_UNBOUNDED = "optimal, no budget"


@dataclass(frozen=True, eq=False)
class MeasuredGraphMemory:
    """Pinned graph memory from a probe's captures, in the same form as `GraphMemoryModel`.

    Each capture reports `graph_mem_bytes` (the drop in free device memory across it) and,
    where known, `pool_bytes` (how much the shared pool grew). Captured largest first, the
    pool grows mostly at the first (largest) graph, so the two parts are treated apart: per
    graph, the non-pool bytes, linear in the bucket size between measured buckets and
    extrapolated along the end segments; once per layout, the pool, scaled by the layout's
    largest bucket from the pool measured at the probe's largest bucket.
    """

    buckets: np.ndarray
    graph_bytes: np.ndarray  # per graph, the pool's growth taken out
    pool_bytes_per_row: float
    source: str = "measured"

    @classmethod
    def from_captures(cls, captures, source: str = "measured") -> MeasuredGraphMemory:
        points: dict[int, tuple[float, float]] = {}
        for c in captures:
            total = float(c["graph_mem_bytes"])
            pool = min(float(c.get("pool_bytes", 0.0) or 0.0), total)
            points[int(c["bucket"])] = (total - pool, pool)
        if len(points) < 2:
            raise ValueError("captures: need graph memory measured at two or more buckets")
        sizes = np.array(sorted(points), dtype=np.float64)
        graph = np.array([points[int(s)][0] for s in sizes])
        pool_total = sum(p for _, p in points.values())
        return cls(sizes, graph, pool_total / sizes[-1], source)

    def per_graph_bytes(self, sizes) -> np.ndarray:
        x = np.asarray(sizes, dtype=np.float64)
        xs, ys = self.buckets, self.graph_bytes
        inside = np.interp(x, xs, ys)
        low = ys[0] + (x - xs[0]) * (ys[1] - ys[0]) / (xs[1] - xs[0])
        high = ys[-1] + (x - xs[-1]) * (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        out = np.where(x < xs[0], low, np.where(x > xs[-1], high, inside))
        return np.maximum(out, 0.0)

    def breakdown(self, buckets) -> dict[str, float]:
        sizes = np.unique(np.asarray(buckets))
        graphs = float(self.per_graph_bytes(sizes).sum())
        pool = self.pool_bytes_per_row * float(sizes[-1])
        return {"static": 0.0, "nodes": graphs, "pool": pool, "total": graphs + pool}


@dataclass(frozen=True, slots=True)
class LayoutStats:
    name: str
    buckets: tuple[int, ...]
    padded_rows: float  # expected dummy rows per step
    waste_pct: float  # share of rows computed on graphs that are padding
    padding_gpu_us: float  # expected GPU time per step spent on dummy rows
    eager_sizes: int  # occurring batch sizes above the largest bucket
    eager_share: float  # share of steps that run eager
    eager_cost_us: float  # expected extra time per step from running those eager
    step_us: float  # expected step time over the workload
    memory_bytes: float  # pinned graph memory
    fits_budget: bool | None  # None when no budget was given

    @property
    def graphs(self) -> int:
        return len(self.buckets)

    @property
    def is_optimum(self) -> bool:
        return self.name in (OPTIMAL_NAME, OPTIMAL_UNBOUNDED)


@dataclass(frozen=True, eq=False)
class TimeModel:
    """Per-size step times for one model, GPU and fusion setting (index = batch size).

    A batch of n real rows replayed in a graph of B rows is the simulator's padded step: the
    B-row step less what its B - n dummy rows skip, their KV-cache reads (`kv_row_us` each:
    engines point them at a scratch slot, `sim.step.kernels.KernelGroup.us` takes their KV bytes off).
    That is exactly the simulator's figure while the KV-reading kernels are memory-bound and the
    replayed GPU does not wait for the host between nodes (a decode step's attention reads bytes
    far faster than it can compute on them; tests check it against `simulate_step`).
    """

    graph_step_us: np.ndarray  # a graph captured at exactly this size
    graph_busy_us: np.ndarray  # GPU busy time of that step
    eager_step_us: np.ndarray  # no graph at all
    kv_row_us: float = 0.0  # GPU time a real row's KV-cache reads take, which a dummy row skips

    def padded_step_us(self, sizes, buckets) -> np.ndarray:
        """Step time of `sizes` real rows replayed in graphs of `buckets` rows (each >= its size)."""
        sizes, buckets = np.asarray(sizes), np.asarray(buckets)
        return self.graph_step_us[buckets] - (buckets - sizes) * self.kv_row_us

    def padded_busy_us(self, sizes, buckets) -> np.ndarray:
        sizes, buckets = np.asarray(sizes), np.asarray(buckets)
        return self.graph_busy_us[buckets] - (buckets - sizes) * self.kv_row_us

    def padding_cost(self, sizes) -> np.ndarray:
        """The optimiser's cost per bucket size: Σ w·(cost(bucket) - cost(n)) is then the time the
        padded rows add, Σ w·(padded_step(n, bucket) - graph_step(n)), with the KV-read saving in it.
        Made non-decreasing for the dynamic programme (flat only where the host, not the GPU, sets
        the step: padding then costs nothing)."""
        sizes = np.asarray(sizes)
        return np.maximum.accumulate(self.graph_step_us[sizes] - sizes * self.kv_row_us)


def kv_row_us(model: ModelConfig, hw: HardwareConfig, mode: Mode = GRAPH) -> float:
    """GPU time of one row's KV-cache reads and appends over the step: what a padded row skips."""
    return float(step_kernels(model, mode).kv_bytes_per_row / (hw.hbm_GBps * 1e3))  # GB/s = 1e3 B/µs


def time_model(model: ModelConfig, hw: HardwareConfig, max_size: int, mode: Mode = GRAPH) -> TimeModel:
    """Step times of a graph `mode` at every size 1..max_size, from the simulator's vectorised sweep."""
    sizes = np.arange(1, int(max_size) + 1)
    eager_mode = without_graphs(mode)
    # Every size is its own bucket.
    sw = sweep(model, hw, sizes, buckets=tuple(int(s) for s in sizes), among=(mode, eager_mode))
    pad = np.array([np.nan])  # index 0 is no batch size
    graph, eager = sw[mode], sw[eager_mode]
    return TimeModel(
        np.concatenate((pad, graph.step_us)),
        np.concatenate((pad, graph.gpu_busy_us)),
        np.concatenate((pad, eager.step_us)),
        kv_row_us(model, hw, mode),
    )


def memory_model(model: ModelConfig, mode: Mode = GRAPH, **kwargs) -> bm.GraphMemoryModel:
    return bm.GraphMemoryModel.for_model(model, len(step_kernels(model, mode)), **kwargs)


def analyse(
    name: str, buckets, workload: Workload, times: TimeModel, memory, budget_bytes=None
) -> LayoutStats:
    sizes, w = workload.batch_sizes, workload.weights
    lay = tuple(int(b) for b in np.unique(np.asarray(buckets)))
    chosen = bk.bucket_sizes_for(lay, sizes)
    covered = chosen > 0
    pad = np.where(covered, chosen - sizes, 0)
    rows_on_graphs = float(np.dot(w[covered], chosen[covered]))
    at_bucket = np.where(covered, chosen, sizes)  # eager sizes stand in as their own bucket (masked below)
    step = np.where(covered, times.padded_step_us(sizes, at_bucket), times.eager_step_us[sizes])
    lost = np.where(covered, times.padded_busy_us(sizes, at_bucket) - times.graph_busy_us[sizes], 0.0)
    eager_extra = np.where(covered, 0.0, times.eager_step_us[sizes] - times.graph_step_us[sizes])
    memory_bytes = float(memory.breakdown(lay)["total"])
    return LayoutStats(
        name=name,
        buckets=lay,
        padded_rows=float(np.dot(w, pad)),
        waste_pct=100.0 * float(np.dot(w, pad)) / rows_on_graphs if rows_on_graphs > 0 else 0.0,
        padding_gpu_us=float(np.dot(w, lost)),
        eager_sizes=int(np.count_nonzero(~covered & (w > 0))),
        eager_share=float(w[~covered].sum()),
        eager_cost_us=float(np.dot(w, eager_extra)),
        step_us=float(np.dot(w, step)),
        memory_bytes=memory_bytes,
        fits_budget=None if budget_bytes is None else memory_bytes <= budget_bytes,
    )


def optimise(
    workload: Workload,
    times: TimeModel,
    memory,
    budget_bytes: float | None,
    max_buckets: int = 64,
    objective: str = "time",
):
    """The exact optimum under the budget: least expected step time ("time") or padded rows ("rows").

    Returns the layout, or None when not even one graph fits the budget.
    """
    sizes, w = workload.batch_sizes, workload.weights
    cost = times.padding_cost(sizes) if objective == "time" else None
    budget = np.inf if budget_bytes is None else budget_bytes
    found = bk.best_layout_under_budget(
        sizes, w, lambda lay: memory.breakdown(lay)["total"], budget, max_buckets, cost=cost
    )
    return None if found is None else found[0]


def compare(
    model: ModelConfig,
    hw: HardwareConfig,
    layouts: dict,
    workload: Workload,
    mode: Mode = GRAPH,
    memory=None,
    budget_bytes=None,
    max_buckets: int = 64,
    objective: str = "time",
) -> list[LayoutStats]:
    """Stats for each named layout of graph `mode`, then the optimiser's layout under the budget (if any fits)."""
    top = max([workload.batch_sizes.max()] + [max(lay) for lay in layouts.values()])
    times = time_model(model, hw, int(top), mode)
    memory = memory or memory_model(model, mode)
    rows = [analyse(name, lay, workload, times, memory, budget_bytes) for name, lay in layouts.items()]
    best = optimise(workload, times, memory, budget_bytes, max_buckets, objective)
    if best is not None:
        name = OPTIMAL_UNBOUNDED if budget_bytes is None else OPTIMAL_NAME
        rows.append(analyse(name, best, workload, times, memory, budget_bytes))
    return rows


@dataclass(frozen=True, slots=True)
class Binding:
    """Which limit holds the optimiser back: the most graphs it may use, the memory budget, both, or neither."""

    graphs: bool  # one more graph allowed would give a better layout within the budget
    budget: bool  # a larger budget would give a better layout with the same graph limit
    relaxed: LayoutStats | None  # the optimum with the binding limit(s) raised by one graph / no budget

    def sentence(self, max_buckets: int, best: LayoutStats, budget_bytes: float) -> str:
        """What binds, in one or two sentences for the page and the CLI."""
        used = f"{best.memory_bytes / MIB:,.1f} of the {budget_bytes / MIB:,.0f} MiB budget"
        relaxed = self.relaxed
        then = (
            ""
            if relaxed is None
            else f" ({relaxed.graphs} graphs, {relaxed.step_us:,.1f} µs per step, {relaxed.memory_bytes / MIB:,.1f} MiB)"
        )
        if self.graphs and not self.budget:
            return (
                f"The limit that binds is the most graphs the optimiser may use ({max_buckets}): its layout "
                f"pins {used}, so a larger budget changes nothing; allowing one more graph gives a better "
                f"layout{then}."
            )
        if self.budget and not self.graphs:
            return (
                f"The limit that binds is the memory budget: the optimum pins {used} with {best.graphs} of "
                f"the {max_buckets} graphs allowed; without the budget it would use more memory{then}."
            )
        if self.budget and self.graphs:
            return (
                f"Both limits bind: the optimum uses all {max_buckets} graphs allowed and pins {used}; "
                f"raising both gives a better layout{then}."
            )
        return (
            f"Neither limit binds: the optimum uses {best.graphs} of the {max_buckets} graphs allowed and "
            f"pins {used}; more graphs would not lower the expected "
            "step time for this workload."
        )


def binding_limits(
    model: ModelConfig,
    hw: HardwareConfig,
    workload: Workload,
    mode: Mode = GRAPH,
    memory=None,
    budget_bytes: float | None = None,
    max_buckets: int = 64,
    objective: str = "time",
) -> Binding | None:
    """Which of `compare`'s two limits binds its optimum: re-optimise with each raised (None: nothing fits)."""
    times = time_model(model, hw, int(workload.batch_sizes.max()), mode)
    memory = memory or memory_model(model, mode)

    def best(budget, count):
        return optimise(workload, times, memory, budget, count, objective)

    found = best(budget_bytes, max_buckets)
    if found is None:
        return None
    more_graphs = best(budget_bytes, max_buckets + 1)
    no_budget = best(None, max_buckets) if budget_bytes is not None else found
    graphs, budget = more_graphs != found, no_budget != found
    relaxed = more_graphs if graphs else no_budget if budget else None
    if not graphs and not budget and budget_bytes is not None:
        both = best(None, max_buckets + 1)
        if both != found:
            graphs = budget = True
            relaxed = both
    stats = None if relaxed is None else analyse("relaxed", relaxed, workload, times, memory)
    return Binding(graphs, budget, stats)


def table_rows(stats: list[LayoutStats], full_buckets: bool = False) -> list[dict]:
    """The comparison as plain rows (the page's table, its CSV download and the CLI print these).

    `full_buckets` lists every bucket (for the CSV) instead of an abbreviated list.
    """
    out = []
    for s in stats:
        row = {
            "layout": s.name,
            "graphs": s.graphs,
            "largest": s.buckets[-1],
            "padded rows/step": round(s.padded_rows, 2),
            "padding waste %": round(s.waste_pct, 1),
            "GPU µs lost to padding": round(s.padding_gpu_us, 1),
            "eager sizes": s.eager_sizes,
            "eager steps %": round(100 * s.eager_share, 1),
            "eager cost µs": round(s.eager_cost_us, 1),
            "step µs": round(s.step_us, 1),
            "graph MiB": round(s.memory_bytes / MIB, 1),
        }
        if s.fits_budget is not None:
            row["fits budget"] = "yes" if s.fits_budget else "no"
        row["buckets"] = " ".join(map(str, s.buckets)) if full_buckets else bk.format_layout(s.buckets)
        out.append(row)
    return out


def format_table(rows: list[dict]) -> str:
    if not rows:
        return "(no layouts)"
    columns = list(rows[0])
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = [
        "  ".join(
            c.ljust(widths[i]) if i in (0, len(columns) - 1) else c.rjust(widths[i])
            for i, c in enumerate(columns)
        )
    ]
    for row in cells:
        lines.append(
            "  ".join(
                v.ljust(widths[i]) if i in (0, len(columns) - 1) else v.rjust(widths[i])
                for i, v in enumerate(row)
            )
        )
    return "\n".join(lines)


def format_layout_comparison(
    model: ModelConfig,
    hw: HardwareConfig,
    max_batch: int,
    budget_mib=None,
    names=COMPARE_DEFAULT,
    workload: Workload | None = None,
    mode: Mode = GRAPH,
) -> str:
    """Padding waste against pinned graph memory for a few layouts, as printable text."""
    workload = workload or uniform(int(max_batch))
    layouts = {name: bk.layout(name, int(max_batch)) for name in names}
    budget = None if budget_mib is None else float(budget_mib) * MIB
    stats = compare(model, hw, layouts, workload, mode=mode, budget_bytes=budget)
    head = (
        f"Bucket layouts for {model.name} on {hw.name}, workload {workload.name} "
        f"({mode.title}; graph memory modelled per graph)"
    )
    if budget is not None:
        head += f"\nMemory budget {budget_mib:g} MiB"
        if not any(s.is_optimum for s in stats):
            head += ": not even one graph fits"
    return head + "\n" + format_table(table_rows(stats))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sim buckets",
        description="Compare CUDA-graph bucket layouts: padding waste, eager "
        "fallback, step time and pinned graph memory.",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="chapter")
    parser.add_argument("--max-batch", type=int, default=256, help="largest batch the engine runs (1-1024)")
    parser.add_argument(
        "--budget-mib", type=float, default=None, help="graph memory budget for the optimiser"
    )
    parser.add_argument(
        "--layouts",
        default=",".join(bk.LAYOUTS),
        help=f"comma-separated layout names from: {', '.join(bk.LAYOUTS)}",
    )
    parser.add_argument("--custom", default=None, help='an extra layout, e.g. "1,2,4,8,32,128,256"')
    parser.add_argument("--workload", choices=("uniform", "geometric", "poisson"), default="uniform")
    parser.add_argument("--mean", type=float, default=16.0, help="mean batch of a geometric/Poisson workload")
    parser.add_argument("--csv", default=None, help="a batch,count histogram CSV to use as the workload")
    parser.add_argument("--fusion", action="store_true", help="fused kernels (4 per layer instead of 11)")
    parser.add_argument(
        "--max-graphs", type=int, default=64, help="most graphs the optimiser may use (1-128)"
    )
    parser.add_argument(
        "--objective",
        choices=("time", "rows"),
        default="time",
        help="optimise expected step time or expected padded rows",
    )
    return parser


def _workload(args) -> Workload:
    """The workload the arguments name: an uploaded histogram, uniform, or one around a mean."""
    if args.csv:
        with open(args.csv, "rb") as fh:
            return wl.parse_histogram_csv(fh.read(wl.MAX_CSV_BYTES + 1), name=args.csv)
    if args.workload == "uniform":
        return wl.uniform(args.max_batch)
    return getattr(wl, args.workload)(args.mean, args.max_batch)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        if not 1 <= args.max_batch <= wl.MAX_BATCH:
            raise ValueError(f"--max-batch must be from 1 to {wl.MAX_BATCH}")
        if not 1 <= args.max_graphs <= 128:
            raise ValueError("--max-graphs must be from 1 to 128")
        if args.budget_mib is not None and not 0 <= args.budget_mib <= 1e7:
            raise ValueError("--budget-mib must be from 0 to 10,000,000")
        names = [n.strip() for n in args.layouts.split(",") if n.strip()]
        layouts = {n: bk.layout(n, args.max_batch) for n in names}
        if args.custom:
            layouts["custom"] = bk.parse_layout(args.custom)
        workload = _workload(args)
        preset = PRESETS[args.preset]
        budget = None if args.budget_mib is None else args.budget_mib * MIB
        stats = compare(
            preset.model,
            preset.hardware,
            layouts,
            workload,
            mode=FUSED_GRAPH if args.fusion else GRAPH,
            budget_bytes=budget,
            max_buckets=args.max_graphs,
            objective=args.objective,
        )
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{preset.title}; workload: {workload.name} (mean batch {workload.mean:.1f})")
    if budget is not None:
        print(
            f"Graph memory budget: {args.budget_mib:g} MiB"
            + ("" if any(s.is_optimum for s in stats) else " (not even one graph fits)")
        )
    print(format_table(table_rows(stats)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
