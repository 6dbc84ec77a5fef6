"""Two traces compared, before and after a change (eager against compiled, a fix against the code before it):
what each family of kernels costs per step in each, and which kernels disappeared, merged or appeared.

Per step means the median over each trace's own steps, so traces with different numbers of steps compare.
Kernels are grouped by family (`core.trace.families.family`: GEMM/GEMV, attention, elementwise,
reduction/norm, copies/memsets, communication, Triton generated, other) and named by `short_kernel_name`.
For each family and each kernel, per step: how many ran, their GPU time, and the host time of their
launches (each launch call counted once; kernels a CUDA graph replays have no launch of their own, so the
graph launches are a line of their own, `core.trace.kernels.launch_costs`).

The kernels whose count changed are told apart as
- **appeared**: not in the before trace at all;
- **merged**: ran fewer times after (or not at all) while fused kernels appeared -- Triton generated
  kernels (`triton_poi_/red/per_`) or kernels named `fused` that the before trace lacks -- and the kernel
  is of a family such a kernel takes over (elementwise, reduction/norm, a copy kernel) whose count fell.
  The profiler does not record which eager kernels a fused kernel replaced, so this is an inference
  from names and counts, not a lineage: the merged kernels' work is in the new fused kernels somewhere;
- **disappeared**: gone, and not merged; **fewer** / **more**: still there, a different number of times.

Two unrelated traces compare too: the family table is what there is to read then.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.timeline import gpu_kind
from core.trace import TraceReport, short_kernel_name
from core.trace.families import (
    COPY_FAMILY,
    ELEMENTWISE_FAMILY,
    FAMILIES,
    REDUCTION_FAMILY,
    TRITON_FAMILY,
    family,
)
from core.trace.kernels import launch_costs

CHANGES = ("disappeared", "merged", "appeared", "fewer", "more")
MERGEABLE = (ELEMENTWISE_FAMILY, REDUCTION_FAMILY, COPY_FAMILY)  # what a generated kernel takes over
MERGED_RULE = (
    "merged: ran fewer times (or not at all) while fused kernels (Triton generated, or named 'fused') "
    "appeared, and is an elementwise, reduction/norm or copy kernel whose family ran fewer times; the "
    "profiler does not record which kernels a fused kernel replaced, so this is inferred from names and counts"
)
NAME_CHARS = None  # as the per-kernel table: names kept whole (the page wraps them)


@dataclass(frozen=True, slots=True)
class Tally:
    """Per step (the median over a trace's steps): how many, their GPU time, their launches' host time."""

    count: float
    gpu_us: float
    host_us: float

    def minus(self, other: Tally) -> Tally:
        return Tally(self.count - other.count, self.gpu_us - other.gpu_us, self.host_us - other.host_us)

    def to_dict(self) -> dict:
        return {"count": self.count, "gpu_us": self.gpu_us, "host_us": self.host_us}


NONE = Tally(0.0, 0.0, 0.0)


@dataclass(frozen=True, eq=False)
class TraceKernels:
    """One trace's kernels per step, by family and by (family, short name)."""

    file: str
    rule: str
    steps: int
    step_us: float  # median step as traced
    launches: float
    graph_launches: Tally  # count and host time of its graph launches (no GPU time of their own)
    total: Tally  # every GPU event; host time includes the graph launches'
    families: dict[str, Tally]
    kernels: dict[tuple[str, str], Tally]  # (family, short name) -> tally

    def to_dict(self) -> dict:
        return {
            "file": self.file,
            "rule": self.rule,
            "steps": self.steps,
            "step_us": self.step_us,
            "launches": self.launches,
            "graph_launches": self.graph_launches.count,
            "graph_launch_host_us": self.graph_launches.host_us,
            "kernels": self.total.count,
            "gpu_us": self.total.gpu_us,
            "host_us": self.total.host_us,
        }


def trace_kernels(report: TraceReport) -> TraceKernels:
    """Count, GPU time and host time per step of every family and kernel of a trace (medians over its steps)."""
    keys: dict[tuple[str, str], int] = {}
    by_name: dict[str, int] = {}
    ids, gpu, host, graphs = [], [], [], []
    for step in report.steps:
        for name in set(step.timeline.gpu_names) - by_name.keys():
            key = (family(name), short_kernel_name(name, NAME_CHARS))
            by_name[name] = keys.setdefault(key, len(keys))
        costs = launch_costs(step)
        ids.append(np.array([by_name[n] for n in step.timeline.gpu_names], np.int64))
        gpu.append(step.timeline.gpu_dur)
        host.append(costs.host_us)
        graphs.append(costs.graph_host_us)
    n = len(keys)
    # rows: steps; columns: keys. Small: a trace has hundreds of kernel names, not millions.
    count = np.array([np.bincount(i, minlength=n) for i in ids], float).reshape(len(ids), n)
    gpu_us = np.array([np.bincount(i, weights=g, minlength=n) for i, g in zip(ids, gpu)]).reshape(len(ids), n)
    host_us = np.array([np.bincount(i, weights=h, minlength=n) for i, h in zip(ids, host)]).reshape(
        len(ids), n
    )
    fam_of = np.array([FAMILIES.index(k[0]) for k in keys], np.int64)

    def tally(columns) -> Tally:
        return Tally(*(float(np.median(a[:, columns].sum(axis=1))) for a in (count, gpu_us, host_us)))

    graph_count = np.array([len(g) for g in graphs], float)
    graph_host = np.array([float(g.sum()) for g in graphs])
    total_host = host_us.sum(axis=1) + graph_host
    return TraceKernels(
        file=report.trace.name,
        rule=report.rule,
        steps=len(report.steps),
        step_us=report.median("step_us"),
        launches=report.median("launches"),
        graph_launches=Tally(float(np.median(graph_count)), 0.0, float(np.median(graph_host))),
        total=Tally(
            float(np.median(count.sum(axis=1))),
            float(np.median(gpu_us.sum(axis=1))),
            float(np.median(total_host)),
        ),
        families={f: tally(fam_of == k) for k, f in enumerate(FAMILIES) if (fam_of == k).any()},
        kernels={key: tally(np.array([j])) for key, j in keys.items()},
    )


@dataclass(frozen=True, slots=True)
class FamilyRow:
    family: str
    before: Tally
    after: Tally

    @property
    def change(self) -> Tally:
        return self.after.minus(self.before)


@dataclass(frozen=True, slots=True)
class KernelChange:
    name: str
    family: str
    change: str  # one of CHANGES
    before: Tally
    after: Tally

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "family": self.family,
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
        }


@dataclass(frozen=True, eq=False)
class TraceDiff:
    before: TraceKernels
    after: TraceKernels
    families: tuple[FamilyRow, ...]  # in FAMILIES order, those either trace has
    kernels: tuple[KernelChange, ...]  # every kernel whose count per step changed
    fused: tuple[str, ...]  # the fused kernels that appeared: where the merged kernels went

    def changed(self, change: str) -> tuple[KernelChange, ...]:
        return tuple(k for k in self.kernels if k.change == change)

    @property
    def speedup(self) -> float | None:
        """How many times as fast the after trace's median step is, both as traced."""
        return self.before.step_us / self.after.step_us if self.after.step_us > 0 else None

    def to_dict(self) -> dict:
        return {
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "speedup_as_traced": self.speedup,
            "families": [
                {
                    "family": r.family,
                    "before": r.before.to_dict(),
                    "after": r.after.to_dict(),
                    "change": r.change.to_dict(),
                }
                for r in self.families
            ],
            "graph_launches": {
                "before": self.before.graph_launches.to_dict(),
                "after": self.after.graph_launches.to_dict(),
            },
            "total": {
                "before": self.before.total.to_dict(),
                "after": self.after.total.to_dict(),
                "change": self.after.total.minus(self.before.total).to_dict(),
            },
            "kernels": {c: [k.to_dict() for k in self.changed(c)] for c in CHANGES},
            "merged_into": list(self.fused),
            "merged_rule": MERGED_RULE,
        }


def _is_fused(key: tuple[str, str]) -> bool:
    return key[0] == TRITON_FAMILY or "fused" in key[1].lower()


def diff(before: TraceKernels, after: TraceKernels) -> TraceDiff:
    """What changed from `before` to `after`, by family and by kernel."""
    fused = [k for k in after.kernels if k not in before.kernels and _is_fused(k)]
    shrank = {f for f in MERGEABLE if after.families.get(f, NONE).count < before.families.get(f, NONE).count}
    changes = []
    for key in [*before.kernels, *(k for k in after.kernels if k not in before.kernels)]:
        b, a = before.kernels.get(key, NONE), after.kernels.get(key, NONE)
        if a.count == b.count:
            continue
        if b.count == 0:
            change = "appeared"
        elif a.count > b.count:
            change = "more"
        elif fused and key[0] in shrank and gpu_kind(key[1]) == "kernel":
            change = "merged"
        else:
            change = "disappeared" if a.count == 0 else "fewer"
        changes.append(KernelChange(key[1], key[0], change, b, a))
    # The largest first: before's GPU time for what went, after's for what came.
    changes.sort(key=lambda k: -(k.after.gpu_us if k.change in ("appeared", "more") else k.before.gpu_us))
    rows = tuple(
        FamilyRow(f, before.families.get(f, NONE), after.families.get(f, NONE))
        for f in FAMILIES
        if f in before.families or f in after.families
    )
    return TraceDiff(before, after, rows, tuple(changes), tuple(k[1] for k in fused))


def diff_reports(before: TraceReport, after: TraceReport) -> TraceDiff:
    return diff(trace_kernels(before), trace_kernels(after))


# -- as text: the CLI's report, and the cells the page shows -----------------------------------------------
def count_text(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def us_text(value: float) -> str:
    if value == 0:
        return "0"
    return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"


def change_text(value: float, fmt=us_text) -> str:
    return "0" if abs(value) < 0.05 else ("+" if value > 0 else "−") + fmt(abs(value))


def table_rows(d: TraceDiff) -> list[tuple[str, Tally, Tally, bool]]:
    """The family table: (name, before, after, has GPU time) for each family either trace has, the graph
    launches (host time only) where either trace replays a graph, and the total."""
    rows = [(r.family, r.before, r.after, True) for r in d.families]
    if d.before.graph_launches.count or d.after.graph_launches.count:
        rows.append(("graph launches", d.before.graph_launches, d.after.graph_launches, False))
    return [*rows, ("total", d.before.total, d.after.total, True)]


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def format_diff(d: TraceDiff, top: int = 8) -> str:
    """The diff as text: the two traces, the family table, and the kernels that disappeared, merged, appeared."""
    lines = []
    for label, side in (("before", d.before), ("after", d.after)):
        graphs = side.graph_launches.count
        lines.append(
            f"{label + ':':<8}{side.file}: {_plural(side.steps, 'step')} ({side.rule}), median step "
            f"{us_text(side.step_us)} µs, {count_text(side.total.count)} kernels, {count_text(side.launches)} "
            "launches" + (f" ({count_text(graphs)} of them graph launches)" if graphs else "")
        )
    if d.speedup is not None:
        lines.append(f"after / before: the median step as traced runs {d.speedup:.2f}× as fast")
    lines += ["", "per step (median over each trace's steps):"]
    lines.append(f"{'':<20} {'kernels':^22} {'GPU µs':^26} {'host µs':^26}")
    lines.append(
        f"{'family':<20}"
        + f" {'before':>7} {'after':>6} {'change':>7}"
        + f" {'before':>8} {'after':>8} {'change':>8}" * 2
    )
    for name, b, a, gpu in table_rows(d):
        c = a.minus(b)
        gpu_cells = (b.gpu_us, a.gpu_us) if gpu else None
        lines.append(
            f"{name:<20} {count_text(b.count):>7} {count_text(a.count):>6} {change_text(c.count, count_text):>7}"
            + (
                f" {us_text(b.gpu_us):>8} {us_text(a.gpu_us):>8} {change_text(c.gpu_us):>8}"
                if gpu_cells
                else f" {'—':>8} {'—':>8} {'—':>8}"
            )
            + f" {us_text(b.host_us):>8} {us_text(a.host_us):>8} {change_text(c.host_us):>8}"
        )
    for change in CHANGES:
        found = d.changed(change)
        if not found:
            continue
        title = f"{change} ({len(found)})"
        if change == "merged":
            title += f", into {len(d.fused)} fused kernels that appeared"
        lines += ["", title + ":"]
        for k in found[:top]:
            lines.append(
                f"  {count_text(k.before.count):>6} → {count_text(k.after.count):<6} × {us_text(k.before.gpu_us):>7} → "
                f"{us_text(k.after.gpu_us):<7} GPU µs  {k.family:<17} {k.name}"
            )
        if len(found) > top:
            lines.append(f"  and {len(found) - top} more (--json lists them all)")
    if d.changed("merged"):
        lines += ["", f"note: {MERGED_RULE}."]
    if not d.kernels:
        lines += ["", "The same kernels, as many times per step in both."]
    return "\n".join(lines)
