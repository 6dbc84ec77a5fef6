"""`python -m sim trace FILE [FILE ...] [--step-range NAME] [--json]`: a profiler trace's steps and what-ifs.

`python -m sim trace BEFORE AFTER --diff [--json]`: two traces before and after a change, kernel families
compared (`core.trace.diff`).

Each FILE is one rank (a `.json`, `.json.gz` or `.pt.trace.json(.gz)` written by torch.profiler:
vLLM, SGLang, Hugging Face, torch.compile, your own code). The text report gives the rule that
found the steps, every step's readouts, their median and spread, the kernels that take the GPU's
time, the step as it runs without the profiler (the recorder's measured figure where the trace
carries one, else an estimate: `sim.trace.untraced.untraced`), and what CUDA graphs and fusion would make
of that step (an estimate, from the one timing model). `--json` prints one object:

    {"rule", "steps": [{index, step_us, step_us_untraced, untraced_source, profiler_us, gpu_busy_us,
      kernels, launches, graph_launches, gpu_streams, utilisation, bound_by, cpu_launch_us, ...}],
     "median", "spread", "untraced": {source, median_us, notes},
     "whatif": {"graphs": {step_us, speedup, vs_trace, ...}, "fusion": {...}, "fusion + graphs": {...}},
     "ranks": [the same for every FILE]}

with the top-level fields those of the first FILE and the what-ifs as the median over its steps.
`step_us` is the step as traced; `step_us_untraced` the step without the profiler, `untraced_source`
"metadata" (measured by gpu_probe/recorder.py, carried by the trace) or "estimate"; a what-if's
`speedup` is against the step without the profiler, `vs_trace` against the traced step.
Bad input exits with code 2 and one sentence.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from core.step_plan import FUSED
from core.trace import TraceError, TraceReport, analyse
from core.trace.kernels import kernel_lines, kernel_table
from sim.trace.untraced import SOURCES, untraced_steps
from sim.trace.whatif import default_replay_cost, whatifs

_NOTES = 6  # notes on dropped records the text report prints; --json has every one
WHATIF_KEYS = ("step_us", "gpu_busy_us", "cpu_launch_us", "kernels", "launches", "utilisation")


def median_whatifs(report: TraceReport, cost) -> dict:
    """Each what-if's readouts as the median over the steps (the bound-by of the median step), made from each
    step without the profiler; `speedup` against that step, `vs_trace` against the traced one."""
    untraced = untraced_steps(report)
    per_step = [whatifs(u.step, cost) for u in untraced]
    untraced_us = float(np.median([u.step_us for u in untraced]))
    out = {}
    for name in per_step[0]:
        rows = [w[name].summary() for w in per_step if name in w]
        median = {k: float(np.median([r[k] for r in rows])) for k in WHATIF_KEYS}
        middle = rows[int(np.argsort([r["step_us"] for r in rows])[len(rows) // 2])]
        median.update(bound_by=middle["bound_by"], bytes_saved=middle["bytes_saved"], kind=middle["kind"])
        median["speedup"] = untraced_us / median["step_us"]
        median["vs_trace"] = report.median("step_us") / median["step_us"]
        out[name] = median
    folded = per_step[len(per_step) // 2][FUSED.title].folded
    out[FUSED.title]["folded"] = [
        {"name": f.name, "count": f.count, "gpu_us": f.gpu_us, "host_us": f.host_us} for f in folded
    ]
    # The bytes saved, group by group (their sum is bytes_saved): the ops fused and what stays on chip.
    out[FUSED.title]["groups"] = [
        {
            "first_kernel": g.first,
            "ops": list(g.ops),
            "intermediates": [
                {"op": op, "shape": list(shape), "dtype": dtype, "bytes": size}
                for op, shape, dtype, size in g.intermediates
            ],
            "bytes_saved": g.bytes_saved,
        }
        for g in per_step[len(per_step) // 2][FUSED.title].groups
    ]
    return out


def untraced_summary(report: TraceReport) -> dict:
    """Each step's untraced figures (keyed by step index), their median, source and notes."""
    untraced = untraced_steps(report)
    notes = [report.trace.recorded_note] if report.trace.recorded_note else []
    notes += [f"step {s.index}: {n}" for s, u in zip(report.steps, untraced) for n in u.notes]
    return {
        "steps": {
            s.index: {
                "step_us_untraced": u.step_us,
                "untraced_source": u.source,
                "profiler_us": u.profiler_us,
            }
            for s, u in zip(report.steps, untraced)
        },
        "source": untraced[0].source if len({u.source for u in untraced}) == 1 else "mixed",
        "median_us": float(np.median([u.step_us for u in untraced])),
        "notes": notes,
    }


def to_json(reports: list[TraceReport], cost) -> dict:
    ranks = []
    for r in reports:
        rank = r.summary()
        untraced = untraced_summary(r)
        for step in rank["steps"]:
            step.update(untraced["steps"][step["index"]])
        rank["median"]["step_us_untraced"] = untraced["median_us"]
        rank["untraced"] = {k: untraced[k] for k in ("source", "median_us", "notes")}
        rank["whatif"] = median_whatifs(r, cost)
        ranks.append(rank)
    return {**ranks[0], "ranks": ranks}


def _us(v: float) -> str:
    return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def format_report(reports: list[TraceReport], cost, top: int = 12) -> str:
    lines = []
    for r in reports:
        s = r.summary()
        untraced = untraced_summary(r)
        head = f"{r.trace.name}" + (f" ({r.trace.device})" if r.trace.device else "")
        lines += [head, f"steps: {len(r.steps)}, found by {r.rule}", ""]
        lines.append(
            f"{'step':>6} {'step µs':>10} {'no profiler':>12} {'GPU busy':>10} {'CPU launch':>11} {'kernels':>8} "
            f"{'launches':>9} {'graphs':>7} {'streams':>8} {'util':>6}  bound by"
        )
        for st in s["steps"]:
            lines.append(
                f"{st['index']:>6} {_us(st['step_us']):>10} "
                f"{_us(untraced['steps'][st['index']]['step_us_untraced']):>12} {_us(st['gpu_busy_us']):>10} "
                f"{_us(st['cpu_launch_us']):>11} {st['kernels']:>8,} {st['launches']:>9,} {st['graph_launches']:>7} "
                f"{st['gpu_streams']:>8} {100 * st['utilisation']:>5.0f}%  {st['bound_by']}"
            )
        lo, hi = s["spread"]["step_us"]
        lines.append(f"median step {_us(s['median']['step_us'])} µs (fastest {_us(lo)}, slowest {_us(hi)})")
        source = SOURCES.get(untraced["source"], "partly measured, partly estimated")
        lines.append(
            f"without the profiler: median {_us(untraced['median_us'])} µs ({source}; the profiler's own host cost "
            "per recorded op, API call and Python call slows a traced host-bound step)"
        )
        lines += [f"note: {note}" for note in untraced["notes"][:_NOTES]]
        lines += [f"note: {note}" for note in s["notes"][:_NOTES]]
        if len(s["notes"]) > _NOTES:
            lines.append(f"note: and {len(s['notes']) - _NOTES:,} more (--json lists them all)")
        lines += ["", "what-ifs on the median step without the profiler (estimates from the timing model):"]
        for name, w in median_whatifs(r, cost).items():
            lines.append(
                f"  {name:<16} {_us(w['step_us']):>9} µs  {w['speedup']:.2f}× faster than your step without the "
                f"profiler, {w['vs_trace']:.2f}× vs the traced step; {w['kernels']:,.0f} kernels, "
                f"{w['launches']:,.0f} launches, bound by {w['bound_by']}"
            )
            if name == FUSED.title and w["folded"]:
                saved = w["bytes_saved"]
                folded = ", ".join(f"{f['name']} ×{f['count']}" for f in w["folded"][:6])
                lines.append(
                    f"  {'':<16} folds {folded}"
                    + (f"; {saved / 1e6:.2f} MB less HBM traffic" if saved is not None else "")
                )
        lines += ["", f"kernels by GPU time (median step's share), top {top}:"]
        lines += kernel_lines(kernel_table(r, limit=top))
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sim trace",
        description="Read torch.profiler traces (one file per rank): the decode steps as the page draws them, "
        "their readouts, and what CUDA graphs and fusion would save.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help=".json, .json.gz or .pt.trace.json(.gz)")
    parser.add_argument(
        "--step-range",
        metavar="NAME",
        help="a CPU range (record_function) that marks each step, e.g. decode_step",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object (see the module's help)")
    parser.add_argument(
        "--diff",
        action="store_true",
        help="the two files are before and after a change, not ranks: compare their kernels by family "
        "(core.trace.diff)",
    )
    args = parser.parse_args(argv)
    if args.diff and len(args.files) != 2:
        print(
            "python -m sim trace: --diff compares two traces, before and after: give two files",
            file=sys.stderr,
        )
        return 2
    try:
        reports = [analyse(f, step_range=args.step_range) for f in args.files]
    except TraceError as err:
        print(f"python -m sim trace: {err}", file=sys.stderr)
        return 2
    if args.diff:
        from core.trace.diff import diff_reports, format_diff

        found = diff_reports(*reports)
        print(json.dumps(found.to_dict(), indent=1) if args.json else format_diff(found))
        return 0
    cost = default_replay_cost()
    if args.json:
        print(json.dumps(to_json(reports, cost), indent=1))
    else:
        print(format_report(reports, cost))
    return 0


if __name__ == "__main__":
    sys.exit(main())
