"""The profiler's own cost per recorded event, fitted on paired traced/untraced steps, and checked.

    python tools/profiler_cost_fit.py            # the fitted costs and the validation tables
    python tools/profiler_cost_fit.py --json     # the same as JSON

CPU only. The traces are read by the project's one reader (`core.trace`: each step's host rows and the
events the profiler recorded in each, by kind) and re-timed by the one timing model
(`sim.trace.untraced.untraced`, `sim.timing.ProfilerCost`); this script only pairs them with the step
measured without the profiler, fits the costs and prints how well the re-timed step matches.

## The model (sim.timing.ProfilerCost, sim.trace.untraced.untraced)

`torch.profiler` adds host time to every event it records, and slows the host's own work between them. Per
host row of a step (one launch interval of the CPU lane, or a synchronisation between two), `core.trace`
counts the events recorded on its thread between the previous row's end and its own, by kind: `op` (aten ops
and record_function ranges), `triton` (Inductor's range around a Triton launch), `runtime` (CUDA runtime
calls), `driver` (CUDA driver calls), `python` (Python calls, with_stack=True), `shapes` (ops with input
shapes, record_shapes=True; an Inductor range with shapes costs `triton_shapes` more); and, for Python calls,
the measured growth of the host time before each call with its place in a long caller (the profiler's line
lookup: `core.trace.read._python_line_us`). A row's profiler cost is `counts @ cost + line_scale * line_us`;
without the profiler the row takes its traced time less that cost, the rest `1 + slowdown` times faster
(never below 10 % of it). The rows are laid end to end again, each thread's in order; a row that waits for
the GPU (a synchronisation, a copy that returns when done) ends when the work it waits for ends on the
re-timed GPU; the kernels are rescheduled by the one recurrence (`sim.timing.schedule_starts`). A graph
launch's cost per replayed node is not taken out, nor is it slowed, so graph replays stay as traced.

## The data (all real, none edited)

- `tests/data/profiler/h200/`: `tools/profiler_cost.py`'s full run on the H200 (torch 2.11, 2026-12-03): Llama,
  Qwen2 and TinyLlama shapes × eager / torch.compile without graphs / a replayed CUDA graph × batch 1, 4, 16 ×
  default / record_shapes / with_stack, one profiled step each (`trim.py`), and `profiler_cost.json` with
  every untraced median, timed just before and just after each profile. The pair's untraced step is the mean
  of the two; a pair whose two medians differ by more than 15 % is flagged unreliable (the VM's host speed
  drifts) and is not fitted on. The loops with no GPU work (`micro_view`, `micro_frames`) cannot be read
  by the reader (it needs GPU events) and are left out.
- `tests/data/profiler/`: the same tool's first H200 run (Llama eager batch 1, one untraced median).
- `data/traces/hf/`: `tools/hf_traces.py`'s Hugging Face traces with `hf_*_measured.json` (measured in the same
  session as the traces, not back to back with each profile).
- `gpu_probe/recorded/`: the probe's full traces against their runs' untraced medians (same run, not back to
  back). These and the Hugging Face pairs are unreliable where the untraced p10 and p90 differ by more than
  15 %.

Fitted by non-negative least absolute relative error on the reliable, consistent (untraced below traced),
host-bound (GPU busy under half the step) pairs of the H200 run without graph launches: `traced - untraced =
counts @ cost + line_scale * line_us + slowdown * untraced`, per step (a host-bound step's untraced time is
nearly all host work). Checked leave-one-model-out: costs fitted on two of the three model shapes, every pair
of the third re-timed with them; and on a second run the fit never saw (`--check-dir`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.step_plan import FUSED_GRAPH  # noqa: E402
from core.trace import EVENT_KINDS, TraceStep, analyse, count_events, read_trace  # noqa: E402
from sim.timing import PROFILER_COST, ProfilerCost  # noqa: E402
from sim.trace.untraced import untraced  # noqa: E402
from sim.trace.whatif import default_replay_cost, graphs_whatif  # noqa: E402

# What is fitted (the field of sim.timing.ProfilerCost each sets): a cost per event of each kind (a runtime and a
# driver call alike: CUPTI's callbacks on an API call), Inductor's ranges with shapes apart, the line lookups'
# scale, and the share by which the profiler slows the host's own work.
FIELDS = {
    "op": "op_us",
    "triton": "triton_us",
    "api": "api_us",
    "python": "python_us",
    "shapes": "shapes_us",
    "triton_shapes": "triton_shapes_us",
    "line": "line_scale",
    "slowdown": "slowdown",
}
PARAMS = tuple(FIELDS)
PRICES = PARAMS[:-1]  # what `ProfilerCost.host_us` charges; the slowdown is `ProfilerCost.untraced_us`'s
HOST_BOUND = 0.5  # a pair is host-bound when the traced GPU busy time is below this share of its step
GPU_BOUND = 0.5  # and GPU-bound (goal: changed by <= 3 %) from this share, or where it replays a graph
# Untraced steps that differ by more than this: the medians timed before and after a profile, or the p10 and
# p90 of one timing (the host changed speed while it was timed).
UNRELIABLE = 0.15
MODELS = ("llama", "qwen2", "tinyllama")  # the model shapes left out one at a time


@dataclass
class Case:
    """One traced step against the step measured without the profiler."""

    name: str
    model: str  # the group left out together
    mode: str  # eager, compile, graph, ...
    setting: str  # default, shapes, stack
    batch: int
    source: str
    untraced_us: float
    steps: tuple[TraceStep, ...]
    recorded: dict | None = None  # the trace's own recorder block
    note: str = ""
    reliable: bool = True

    @property
    def traced_us(self) -> float:
        return float(np.median([s.metrics.step_us for s in self.steps]))

    @property
    def gpu_share(self) -> float:
        return float(np.median([s.metrics.gpu_busy_us / s.metrics.step_us for s in self.steps]))

    @property
    def graphs(self) -> bool:
        return any(s.graph_launches for s in self.steps)

    @property
    def counts(self) -> np.ndarray:
        """Median per step of the events by kind (EVENT_KINDS), and the line lookups (µs)."""
        rows = [[*s.host.counts.sum(axis=0), s.host.line_us.sum()] for s in self.steps]
        return np.median(np.array(rows, float), axis=0)

    @property
    def launch_call_us(self) -> float:
        return float(np.median([s.host.launch_call_us for s in self.steps]))

    def features(self, launch_ref_us: float) -> np.ndarray:
        """What the fit prices (PARAMS order): each price's share of the step's profiler cost at its host speed
        (`priced`), and the untraced step (the host work the slowdown applies to, near enough when host-bound)."""
        per_step = [
            priced(s.host.counts, s.host.line_us, s.host.launch_call_us, s.host.launch_calls, launch_ref_us)
            for s in self.steps
        ]
        return np.append(np.median(per_step, axis=0), self.untraced_us)

    def estimate(self, cost: ProfilerCost) -> float:
        return float(np.median([untraced(s, cost).step_us for s in self.steps]))

    def host_bound(self) -> bool:
        return self.gpu_share < HOST_BOUND and not self.graphs

    def gpu_bound(self) -> bool:
        return self.gpu_share >= GPU_BOUND or self.graphs


def priced(counts, line_us, launch_call_us=float("nan"), launch_calls=0, launch_ref_us=float("nan")):
    """Per price (PRICES order): the profiler's cost of the rows (`ProfilerCost.host_us`, summed) with that price
    1 and the others 0, so that the cost is `priced(...) @ prices` by the model's own formula."""
    out = []
    for p in PRICES:
        unit = ProfilerCost(
            **{f: float(f == FIELDS[p]) for f in FIELDS.values()}, launch_ref_us=launch_ref_us
        )
        speed = unit.speed(launch_call_us, launch_calls)
        out.append(float(unit.host_us(counts, line_us, EVENT_KINDS, speed).sum()))
    return np.array(out)


@cache
def _steps(path: Path, step_range: str | None = None) -> tuple[tuple[TraceStep, ...], dict | None]:
    report = analyse(path, step_range=step_range)
    return report.steps, report.trace.recorded_untraced


def _parts(label: str) -> tuple[str, str, int]:
    """'llama_eager_b4' -> ('llama', 'eager', 4); a one-event loop 'micro_add' -> ('micro', 'add', 1)."""
    if label.startswith("micro_"):
        return "micro", label.removeprefix("micro_"), 1
    model, mode, batch = label.split("_")
    return model, mode, int(batch.removeprefix("b"))


def cases_profiler_run(folder: Path, source: str, labels: tuple[str, ...] = ()) -> list[Case]:
    """Every model's pair of the run; with `labels`, only those recordings (`micro_add`, the loop of 400
    `torch.add`: an op and a kernel launch each, with none of a model's Python around them)."""
    run = json.loads((folder / "profiler_cost.json").read_text())
    out = []
    for t in run["traces"]:
        path = folder / (t.get("trace") or "")
        if (t["label"] not in labels if labels else t["label"].startswith("micro")) or not path.is_file():
            continue  # the loops with no GPU work (micro_view, micro_frames) are `loops`, as the reader needs GPU work
        model, mode, batch = _parts(t["label"])
        before = t["untraced"]["median_us"]
        after = (t.get("untraced_after") or {}).get("median_us")
        untraced_us = before if after is None else (before + after) / 2
        drift = 0.0 if after is None else abs(after / before - 1)
        note = (
            "no untraced median after"
            if after is None
            else f"untraced {before:,.0f} before, {after:,.0f} after"
        )
        steps, recorded = _steps(path)
        out.append(
            Case(
                f"{t['label']}_{t['setting']}",
                model,
                mode,
                t["setting"],
                batch,
                source,
                untraced_us,
                steps,
                recorded,
                note,
                drift <= UNRELIABLE,
            )
        )
    return out


HF_PAIRS = {  # trace -> (measured file, its mode)
    "hf_llama_eager_profilerstep.json.gz": ("hf_llama_measured.json", "eager"),
    "hf_llama_eager_sync.json.gz": ("hf_llama_measured.json", "eager"),
    "hf_llama_graph.json.gz": ("hf_llama_measured.json", "graph"),
    "hf_llama_compile.json.gz": ("hf_llama_measured.json", "compile"),
    "hf_qwen2_eager_sync.json.gz": ("hf_qwen2_measured.json", "eager"),
    "hf_qwen2_graph.json.gz": ("hf_qwen2_measured.json", "graph"),
}


def _spread(timed: dict) -> tuple[str, bool]:
    """A measured timing's note and whether it is reliable: its p10 and p90 within UNRELIABLE of each other."""
    p10, p90 = timed["step_us_p10"], timed["step_us_p90"]
    return f"untraced p10 {p10:,.0f}, p90 {p90:,.0f}", p90 / p10 - 1 <= UNRELIABLE


def cases_hf(folder: Path) -> list[Case]:
    out = []
    for trace, (measured, mode) in HF_PAIRS.items():
        timed = json.loads((folder / measured).read_text())["modes"][mode]
        steps, recorded = _steps(folder / trace)
        setting = "shapes" if "profilerstep" in trace else "default"
        name = trace.removesuffix(".json.gz")
        mode = "reduce-overhead" if mode == "compile" else mode
        note, reliable = _spread(timed)
        out.append(
            Case(
                name,
                name.split("_")[1],
                mode,
                setting,
                1,
                "hf",
                timed["step_us_median"],
                steps,
                recorded,
                f"same session, {note}",
                reliable,
            )
        )
    return out


PROBE = {  # trace -> (run, mode)
    "trace_eager_b1.json.gz": ("small.json", "eager"),
    f"trace_{FUSED_GRAPH.slug}_b1.json": ("small.json", FUSED_GRAPH.name),
    "trace_1b_eager_b1.json.gz": ("1b.json", "eager"),
    f"trace_1b_{FUSED_GRAPH.slug}_b1.json": ("1b.json", FUSED_GRAPH.name),
}


def cases_probe(folder: Path) -> list[Case]:
    out = []
    for trace, (run, mode) in PROBE.items():
        runs = json.loads((folder / run).read_text())["runs"]
        (timed,) = [r for r in runs if r["mode"] == mode and r["batch"] == 1]
        steps, recorded = _steps(folder / trace, "decode_step")
        model = "probe-1b" if "1b" in trace else "probe-small"
        note, reliable = _spread(timed)
        out.append(
            Case(
                trace,
                model,
                mode,
                "default",
                1,
                "probe run",
                timed["step_us_median"],
                steps,
                recorded,
                f"same run, {note}",
                reliable,
            )
        )
    return out


def all_cases(args) -> list[Case]:
    return (
        cases_profiler_run(args.profiler_dir, "H200 run")
        + cases_profiler_run(args.first_run_dir, "first H200 run")
        + cases_hf(args.hf_dir)
        + cases_probe(args.probe_dir)
    )


# -- the fit ------------------------------------------------------------------------------------------
def fittable(c: Case) -> bool:
    """A pair the costs are fitted on: the H200 run's, host-bound, reliable and consistent (the profiler only adds
    host time: an untraced median above the traced step was timed at another host speed)."""
    return c.source == "H200 run" and c.host_bound() and c.reliable and c.traced_us > c.untraced_us


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares by trying every support (a handful of columns)."""
    best, best_x = math.inf, np.zeros(a.shape[1])
    cols = [j for j in range(a.shape[1]) if np.any(a[:, j])]
    for r in range(len(cols) + 1):
        for support in itertools.combinations(cols, r):
            x = np.zeros(a.shape[1])
            if support:
                sol, *_ = np.linalg.lstsq(a[:, support], b, rcond=None)
                if np.any(sol < 0):
                    continue
                x[list(support)] = sol
            err = float(np.sum((a @ x - b) ** 2))
            if err < best - 1e-12:
                best, best_x = err, x
    return best_x


def nnls_l1(a: np.ndarray, b: np.ndarray, iters: int = 50) -> np.ndarray:
    """Non-negative least absolute deviations (iteratively reweighted): one bad pair cannot pull the costs."""
    w = np.ones(len(b))
    x = np.zeros(a.shape[1])
    for _ in range(iters):
        x = nnls(a * w[:, None], b * w)
        w = 1.0 / np.sqrt(np.maximum(np.abs(a @ x - b), 1e-3))
    return x


@dataclass(frozen=True)
class Loop:
    """One of the run's one-event loops with no GPU work (`micro_view`, `micro_frames`): each profiled step's
    range, its events counted by the reader, against the untraced median. The host speed is the fitted one."""

    name: str
    counts: np.ndarray  # PRICES order (`priced`), median over the steps
    traced_us: float
    untraced_us: float

    @property
    def features(self) -> np.ndarray:
        return np.append(self.counts, self.untraced_us)

    def estimate(self, cost: ProfilerCost) -> float:
        return float(cost.untraced_us(self.traced_us, self.counts @ _vector(cost)[:-1]))


def loops(folder: Path) -> list[Loop]:
    run = json.loads((folder / "profiler_cost.json").read_text())
    out = []
    for t in run["traces"]:
        if t["label"] not in ("micro_view", "micro_frames") or not (folder / t["trace"]).exists():
            continue
        trace = read_trace(folder / t["trace"], host_only=True)
        names = [trace.name_of(n) for n in trace.range_name]
        rows = [i for i, n in enumerate(names) if n.startswith("ProfilerStep#")]
        counts, line = count_events(
            trace,
            int(trace.range_thread[rows[0]]),
            trace.range_ts[rows],
            trace.range_ts[rows] + trace.range_dur[rows],
        )
        before, after = t["untraced"]["median_us"], t["untraced_after"]["median_us"]
        out.append(
            Loop(
                f"{t['label']}_{t['setting']}",
                np.median([priced(c, lu) for c, lu in zip(counts, line)], axis=0),
                float(np.median(trace.range_dur[rows])),
                (before + after) / 2,
            )
        )
    return out


def launch_ref(cases: list[Case]) -> float:
    """The fitted host's kernel launch call (µs): the median over the pairs fitted on."""
    return round(float(np.median([c.launch_call_us for c in cases if fittable(c)])), 2)


def fit(cases: list[Case], loops_: list[Loop] = (), source: str = "") -> ProfilerCost:
    """The costs from the fittable pairs and the loops: least absolute relative error of
    `traced - untraced = features @ cost` (the slowdown's feature the untraced step itself)."""
    rows = [c for c in cases if fittable(c)]
    ref = launch_ref(cases) if rows else float("nan")
    a = [c.features(ref) / c.untraced_us for c in rows] + [lp.features / lp.untraced_us for lp in loops_]
    b = [(c.traced_us - c.untraced_us) / c.untraced_us for c in rows]
    b += [(lp.traced_us - lp.untraced_us) / lp.untraced_us for lp in loops_]
    x = nnls_l1(np.array(a), np.array(b)) if a else np.zeros(len(PARAMS))
    return ProfilerCost(
        **{FIELDS[k]: round(float(v), 3) for k, v in zip(PARAMS, x)},
        launch_ref_us=ref,
        source=source,
    )


# -- the checks ----------------------------------------------------------------------------------------
def row(c: Case, cost: ProfilerCost) -> dict:
    est = c.estimate(cost)
    return {
        "case": c.name,
        "model": c.model,
        "mode": c.mode,
        "setting": c.setting,
        "batch": c.batch,
        "source": c.source,
        "gpu_share": round(c.gpu_share, 3),
        "traced_us": round(c.traced_us, 1),
        "untraced_us": round(c.untraced_us, 1),
        "estimate_us": round(est, 1),
        "error": round(est / c.untraced_us - 1, 4),
        "change": round(est / c.traced_us - 1, 4),
        "host_bound": c.host_bound(),
        "gpu_bound": c.gpu_bound(),
        "reliable": c.reliable,
        "consistent": c.traced_us > c.untraced_us,
        "fitted_on": fittable(c),
        "counts": dict(zip((*EVENT_KINDS, "line_us"), np.round(c.counts, 1).tolist())),
        "note": c.note,
    }


def speedup_rows(cases: list[Case], cost: ProfilerCost, replay=None, source: str = "H200 run") -> list[dict]:
    """The graphs what-if's speed-up on each eager pair of a paired run (the what-if on the re-timed step against
    the re-timed step) against the measured one: untraced eager against the untraced graph replay of the same
    model and batch (default profiler)."""
    replay = replay or default_replay_cost()
    graph = {
        (c.model, c.batch): c
        for c in cases
        if c.source == source and c.mode == "graph" and c.setting == "default"
    }
    out = []
    for c in cases:
        g = graph.get((c.model, c.batch))
        if c.source != source or c.mode != "eager" or g is None:
            continue
        est, what = [], []
        for s in c.steps:
            u = untraced(s, cost)
            est.append(u.step_us)
            what.append(graphs_whatif(u.step, replay).metrics.step_us)
        ours = float(np.median(est)) / float(np.median(what))
        true = c.untraced_us / g.untraced_us
        out.append(
            {
                "case": c.name,
                "model": c.model,
                "whatif_us": round(float(np.median(what)), 1),
                "graph_untraced_us": round(g.untraced_us, 1),
                "speedup": round(ours, 3),
                "true_speedup": round(true, 3),
                "vs_trace": round(c.traced_us / float(np.median(what)), 3),
                "error": round(ours / true - 1, 4),
                "reliable": c.reliable and c.traced_us > c.untraced_us and g.reliable,
            }
        )
    return out


def summary(rows: list[dict], key: str = "error") -> dict:
    if not rows:
        return {"n": 0}
    errs = np.array([r[key] for r in rows])
    worst = rows[int(np.argmax(np.abs(errs)))]
    return {
        "n": len(rows),
        "median": round(float(np.median(np.abs(errs))), 4),
        "worst": worst[key],
        "worst_case": worst["case"],
        "within_15": int((np.abs(errs) <= 0.15).sum()),
    }


def by_batch(rows: list[dict]) -> dict:
    """Per mode (eager, compile): the median error at each batch and its trend, the Theil-Sen slope against
    log2(batch) with a bootstrap 95 % interval (2,000 resamples, seeded): is a batch-dependent cost missing?"""
    out = {}
    for mode in ("eager", "compile"):
        mine = [r for r in rows if r["mode"] == mode]
        if len({r["batch"] for r in mine}) < 2:
            continue  # no trend to read
        x = np.log2([r["batch"] for r in mine])
        y = np.array([r["error"] for r in mine])

        def slope(i):
            a, b = np.triu_indices(len(i), 1)
            dx = x[i][b] - x[i][a]
            return float(np.median((y[i][b] - y[i][a])[dx != 0] / dx[dx != 0]))

        rng = np.random.default_rng(0)
        boot = [slope(i) for i in (rng.integers(0, len(x), len(x)) for _ in range(2000)) if np.ptp(x[i]) > 0]
        out[mode] = {
            "n": len(mine),
            "median_by_batch": {
                int(b): round(float(np.median([r["error"] for r in mine if r["batch"] == b])), 4)
                for b in sorted({r["batch"] for r in mine})
            },
            "slope_per_doubling": round(slope(np.arange(len(x))), 4),
            "slope_95": [round(float(v), 4) for v in np.percentile(boot, [2.5, 97.5])],
        }
    return out


def _vector(cost: ProfilerCost) -> np.ndarray:
    return np.array([getattr(cost, FIELDS[k]) for k in PARAMS])


def _costs(cost: ProfilerCost) -> dict:
    return {**dict(zip(PARAMS, _vector(cost).tolist())), "launch_ref_us": cost.launch_ref_us}


def report(args) -> dict:
    cases = all_cases(args)
    loops_ = loops(args.profiler_dir)
    cost = fit(cases, loops_, source="tools/profiler_cost_fit.py")
    rows = [row(c, cost) for c in cases]
    lomo, speed = [], []
    for model in MODELS:
        c_fit = fit([c for c in cases if c.model != model], loops_)
        for c in cases:
            if c.model == model and c.source == "H200 run":
                r = row(c, c_fit)
                r["fitted_without"] = model
                lomo.append(r)
        speed += [r for r in speedup_rows(cases, c_fit) if r["model"] == model]  # fitted without it too
    host = [r for r in lomo if r["host_bound"]]
    # Pairs not timed back to back with their profile (the first run, Hugging Face's session, the probe's runs):
    # costs fitted on every H200 pair, as a user's trace gets them.
    other = [r for r in rows if r["source"] != "H200 run" and r["host_bound"]]
    other_speed = speedup_rows(cases, cost, source="hf")
    micro = [row(c, cost) for c in cases_profiler_run(args.profiler_dir, "loop", ("micro_add",))]
    held_out = held_out_report(args.check_dir) if args.check_dir else {}
    reliable = [
        r
        for r in host + held_out.get("held_out", [])
        if r["host_bound"] and r["reliable"] and r["consistent"]
    ]
    return {
        "params": list(PARAMS),
        "cost": _costs(cost),
        "shipped": _costs(PROFILER_COST),
        "loops": [
            {
                "case": lp.name,
                "traced_us": lp.traced_us,
                "untraced_us": lp.untraced_us,
                "estimate_us": round(lp.estimate(cost), 1),
            }
            for lp in loops_
        ],
        "cases": rows,
        "leave_one_model_out": lomo,
        "speedup": speed,
        "other_speedup": other_speed,
        "micro_add": micro,
        "summary": {
            "lomo_host_bound": summary(host),
            "lomo_host_bound_reliable": summary([r for r in host if r["reliable"] and r["consistent"]]),
            **{
                f"lomo_host_bound_{m}": summary([r for r in host if r["model"] == m and r["reliable"]])
                for m in MODELS
            },
            "gpu_bound_change": summary([r for r in rows if r["gpu_bound"]], "change"),
            "speedup": summary(speed),
            "speedup_reliable": summary([r for r in speed if r["reliable"]]),
            "other_host_bound": summary(other),
            "other_host_bound_reliable": summary([r for r in other if r["reliable"] and r["consistent"]]),
            "other_speedup": summary(other_speed),
            "micro_add": summary(micro),
            **held_out.pop("summary", {}),
        },
        **held_out,
        # leave one model out and the held-out run's reliable host-bound pairs, against the batch
        "by_batch": by_batch(reliable),
    }


def held_out_report(folder: Path) -> dict:
    """A paired run nothing was fitted on, re-timed with the costs the page ships (`sim.timing.PROFILER_COST`):
    what a user's trace gets."""
    cases = cases_profiler_run(folder, "held-out run")
    rows = [row(c, PROFILER_COST) for c in cases]
    speed = speedup_rows(cases, PROFILER_COST, source="held-out run")
    host = [r for r in rows if r["host_bound"]]
    return {
        "held_out": rows,
        "held_out_by_batch": by_batch([r for r in host if r["reliable"] and r["consistent"]]),
        "held_out_speedup": speed,
        "summary": {
            "held_out_host_bound": summary(host),
            "held_out_host_bound_reliable": summary([r for r in host if r["reliable"] and r["consistent"]]),
            "held_out_gpu_bound_change": summary([r for r in rows if r["gpu_bound"]], "change"),
            "held_out_speedup": summary(speed),
            "held_out_speedup_reliable": summary([r for r in speed if r["reliable"]]),
        },
    }


def _print_rows(title: str, rows: list[dict]) -> None:
    print(f"\n{title}:")
    print(
        f"  {'case':34s} {'gpu%':>4s} {'traced':>8s} {'untraced':>8s} {'estimate':>8s} {'error':>7s} "
        f"{'change':>7s}  note"
    )
    for r in rows:
        flags = ("fit " if r["fitted_on"] else "") + ("" if r["reliable"] else "UNRELIABLE ")
        flags += "" if r["consistent"] else "untraced>=traced "
        print(
            f"  {r['case'][:34]:34s} {r['gpu_share'] * 100:4.0f} {r['traced_us']:8.0f} {r['untraced_us']:8.0f} "
            f"{r['estimate_us']:8.0f} {r['error'] * 100:+6.1f}% {r['change'] * 100:+6.1f}%  {flags}{r['note']}"
        )


def _line(name: str, s: dict) -> str:
    if not s["n"]:
        return f"  {name}: none"
    return (
        f"  {name}: {s['n']} cases, median |error| {s['median'] * 100:.1f} %, worst {s['worst'] * 100:+.1f} % "
        f"({s['worst_case']}), {s['within_15']} within 15 %"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiler-dir", type=Path, default=ROOT / "tests/data/profiler/h200")
    parser.add_argument("--first-run-dir", type=Path, default=ROOT / "tests/data/profiler")
    parser.add_argument("--hf-dir", type=Path, default=ROOT / "data/traces/hf")
    parser.add_argument("--probe-dir", type=Path, default=ROOT / "gpu_probe/recorded")
    parser.add_argument(
        "--check-dir",
        type=Path,
        default=ROOT / "tests/data/profiler/h200-heldout",
        help="a paired run not fitted on, checked with the shipped costs ('-': none)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if str(args.check_dir) == "-":
        args.check_dir = None
    out = report(args)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(
        "Profiler cost (µs an event; line, slowdown: multiples), fitted on the H200 run's reliable host-bound pairs:"
    )
    print("  " + "  ".join(f"{k} {v:.3f}" for k, v in out["cost"].items()))
    print("  shipped in sim/timing.py: " + "  ".join(f"{k} {v:.3f}" for k, v in out["shipped"].items()))
    _print_rows("Every pair, re-timed with the fitted costs", out["cases"])
    _print_rows(
        "Leave one model out (each model's pairs, costs fitted on the other two)", out["leave_one_model_out"]
    )
    _print_rows("The loop of 400 torch.add (not fitted on)", out["micro_add"])
    print(
        "\nThe graphs what-if's speed-up against the re-timed eager step (leave one model out), and the measured one:"
    )
    for r in out["speedup"] + out["other_speedup"]:
        print(
            f"  {r['case'][:34]:34s} what-if {r['whatif_us']:7.0f} µs (graph measured {r['graph_untraced_us']:7.0f}) "
            f"{r['speedup']:5.2f}× (true {r['true_speedup']:5.2f}×, {r['vs_trace']:5.2f}× vs the trace) "
            f"{r['error'] * 100:+6.1f}%{'' if r['reliable'] else '  UNRELIABLE'}"
        )
    if args.check_dir:
        _print_rows(f"Held out ({args.check_dir.name}: not fitted on), the shipped costs", out["held_out"])
        for r in out["held_out_speedup"]:
            print(
                f"  graphs what-if {r['case'][:34]:34s} {r['speedup']:5.2f}× (true {r['true_speedup']:5.2f}×, "
                f"{r['vs_trace']:5.2f}× vs the trace) {r['error'] * 100:+6.1f}%{'' if r['reliable'] else '  UNRELIABLE'}"
            )
    print("\nSummary:")
    for name, s in out["summary"].items():
        print(_line(name, s))
    for key, title in (("by_batch", "leave one model out and held out"), ("held_out_by_batch", "held out")):
        print(f"\nThe error against the batch (reliable host-bound pairs, {title}):")
        for mode, b in out.get(key, {}).items():
            medians = ", ".join(f"b{k} {v * 100:+.1f} %" for k, v in b["median_by_batch"].items())
            lo, hi = b["slope_95"]
            print(
                f"  {mode} ({b['n']}): median {medians}; {b['slope_per_doubling'] * 100:+.1f} % per doubling "
                f"(95 %: {lo * 100:+.1f} to {hi * 100:+.1f})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
