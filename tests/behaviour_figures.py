"""Every figure the page derives from the simulator, the recorded runs, the calibration and the traces.

`figures()` computes them; `tests/data/behaviour_figures.json` holds what the code gave when it was
last written on purpose (`python tests/behaviour_figures.py --write`), and `tests/test_behaviour.py`
holds `figures()` to it. A refactor must leave every number where it was; a change of behaviour
rewrites the file in the same commit and says why.

The calls into the engines sit in the small adapters at the top (`_step`, `_sweep`), so that an API
change touches them and nothing else.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from functools import cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.probe_result import load_result  # noqa: E402
from core.trace import analyse  # noqa: E402
from sim.calibration import calibrate, calibrated_preset  # noqa: E402
from sim.config import PRESETS  # noqa: E402
from sim.step.ops import fusion_table  # noqa: E402
from sim.trace.report import median_whatifs, untraced_summary  # noqa: E402
from sim.trace.whatif import default_replay_cost  # noqa: E402

COMBOS = ((False, False), (True, False), (False, True), (True, True))  # (fusion, graphs), as the page toggles
SNAPSHOT = ROOT / "tests" / "data" / "behaviour_figures.json"
RECORDED = ROOT / "gpu_probe" / "recorded"
RUNS = ("small.json", "small-holdout.json", "1b.json", "small-b1.json")
BATCHES = (1, 2, 3, 5, 8, 17, 33, 64, 100, 256, 257, 300, 512)
SWEEP_BATCHES = np.unique(np.r_[1:65, 64:513:7, 512])  # every batch where the story happens, then a sample
TPS = (2, 4, 8)
TRACES = (
    "gpu_probe/recorded/trace_eager_b1.json.gz",
    "gpu_probe/recorded/trace_fused_graph_b1.json",
    "gpu_probe/recorded/trace_1b_eager_b1.json.gz",
    "gpu_probe/recorded/trace_1b_fused_graph_b1.json",
    "data/traces/hf/hf_llama_eager_profilerstep.json.gz",
    "data/traces/hf/hf_llama_eager_sync.json.gz",
    "data/traces/hf/hf_llama_graph.json.gz",
    "data/traces/hf/hf_llama_compile.json.gz",
    "data/traces/hf/hf_llama_two_streams.json.gz",
    "data/traces/hf/hf_qwen2_eager_sync.json.gz",
    "data/traces/hf/hf_qwen2_graph.json.gz",
    "tests/data/profiler/h200/qwen2_eager_b1_default.json.gz",  # carries the recorder's untraced step
    "tests/data/profiler/h200/qwen2_compile_b4_stack.json.gz",  # Inductor's ranges, Python calls, line lookups
)


# -- the adapters: the only calls that know the engines' signatures ------------------------------
def _step(model, hw, batch: int, fusion: bool, graphs: bool, tp: int = 1):
    from core.step_plan import StepPlan, toggled
    from sim.step.schedule import simulate_step

    return simulate_step(model, hw, StepPlan(toggled(fusion, graphs), batch, tp))


# The snapshot's key for each toggled mode's sweep: what the page titled them when it was written.
SWEEP_KEYS = {"eager": "unoptimised", "fused": "fusion", "graph": "graphs", "fused+graph": "fusion + graphs"}


def _sweep(model, hw):
    """{mode's key: (step_us, cpu_launch_us, gpu_busy_us)} and {mode's key: crossover}."""
    from core.step_plan import toggled
    from sim.step.schedule import sweep

    sw = sweep(model, hw, SWEEP_BATCHES)
    keys = {SWEEP_KEYS[m.name]: m for m in (toggled(*c) for c in COMBOS)}
    series = {
        key: [sw[m].step_us.tolist(), sw[m].cpu_launch_us.tolist(), sw[m].gpu_busy_us.tolist()]
        for key, m in keys.items()
    }
    return series, {key: sw.crossover[m.name] for key, m in keys.items()}


# -- the figures -------------------------------------------------------------------------------------
def _timeline_digest(tl) -> list:
    return [
        len(tl.cpu_start),
        len(tl.gpu_start),
        float(tl.cpu_start.sum()),
        float(tl.cpu_dur.sum()),
        float(tl.gpu_start.sum()),
        float(tl.gpu_dur.sum()),
        float((tl.gpu_start * np.arange(1, len(tl.gpu_start) + 1)).sum()),  # order matters
        "|".join(tl.gpu_names[:12]) + f"…{len(set(tl.gpu_names))}",
        tl.label,
    ]


def _fields(config) -> dict:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


def _metrics(m) -> dict:
    return {k: (v if isinstance(v, str) else float(v)) for k, v in m.to_dict().items()}


@cache
def _result(name: str):
    return load_result(RECORDED / name, timeline_source="recorded")


def _presets() -> dict:
    out = dict(PRESETS)
    for run in ("small.json", "1b.json"):
        out[f"calibrated:{run}"] = calibrated_preset(_result(run))
    return out


def sim_figures() -> dict:
    out = {}
    for key, preset in _presets().items():
        model, hw = preset.model, preset.hardware
        steps = {}
        for batch in BATCHES:
            for fusion, graphs in COMBOS:
                s = _step(model, hw, batch, fusion, graphs)
                steps[f"b{batch} f{int(fusion)} g{int(graphs)}"] = {
                    "metrics": _metrics(s.metrics),
                    "baseline": _metrics(s.baseline),
                    "bucket": s.plan.bucket,
                    "padded": s.plan.padded_rows,
                    "fallback": s.plan.eager_fallback,
                    "timeline": _timeline_digest(s.timeline),
                }
        for tp in TPS:
            if model.n_heads % tp:
                continue
            for batch in (1, 8, 300):
                for fusion, graphs in COMBOS:
                    s = _step(model, hw, batch, fusion, graphs, tp)
                    steps[f"tp{tp} b{batch} f{int(fusion)} g{int(graphs)}"] = {
                        "metrics": _metrics(s.metrics),
                        "baseline": _metrics(s.baseline),
                        "timeline": _timeline_digest(s.timeline),
                    }
        series, crossover = _sweep(model, hw)
        out[key] = {
            "model": _fields(model),
            "hardware": _fields(hw),
            "steps": steps,
            "sweep": series,
            "crossover": crossover,
            "fusion_table": fusion_table(model),
        }
    return out


def calibration_figures() -> dict:
    out = {}
    for name in RUNS:
        result = _result(name)
        try:
            cal = calibrate(result)
        except ValueError as err:
            out[name] = {"error": str(err)}
            continue
        out[name] = {
            "params": cal.params,
            "pins": {n: [pin.status, pin.held_at] for n, pin in cal.pins.items()},
            "rows": [{k: (v if isinstance(v, str) else float(v)) for k, v in r.items()} for r in cal.rows()],
            "replay": [cal.graph_cost.launch_us, cal.graph_cost.per_node_host_us, cal.graph_cost.node_gap_us],
            "timelines": [_timeline_digest(cal.timeline(i)) for i in range(len(cal.points))],
        }
    for fit_on, other in (("small.json", "small-holdout.json"), ("small-holdout.json", "small.json")):
        cal = calibrate(_result(fit_on), loo=False)
        out[f"{fit_on} -> {other}"] = cal.check(_result(other))
    return out


def recorded_figures() -> dict:
    out = {}
    for name in RUNS:
        result = _result(name)
        runs = {}
        for run in result.runs:
            runs[f"{run.mode} b{run.batch}"] = {
                "metrics": _metrics(run.timeline.metrics()),
                "read_floor_us": result.read_floor_us(run.batch),
                "split": result.step_split(run) if run.mode in ("fused+graph", "graph") else None,
            }
        out[name] = {"weight_floor_us": result.weight_floor_us, "runs": runs}
    return out


def trace_figures() -> dict:
    cost = default_replay_cost()
    out = {}
    for path in TRACES:
        report = analyse(ROOT / path)
        out[path] = {
            "rule": report.rule,
            "steps": [s.summary() for s in report.steps],
            "whatif": median_whatifs(report, cost),
            "untraced": untraced_summary(report),
        }
    return out


def figures() -> dict:
    data = {
        "sim": sim_figures(),
        "calibration": calibration_figures(),
        "recorded": recorded_figures(),
        "traces": trace_figures(),
    }
    return json.loads(json.dumps(data, default=_plain))  # tuples -> lists, numpy -> float, as on disk


def _plain(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"cannot store {type(value).__name__}")


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        print("usage: python tests/behaviour_figures.py --write", file=sys.stderr)
        return 2
    SNAPSHOT.write_text(json.dumps(figures(), indent=None, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT.relative_to(ROOT)} ({SNAPSHOT.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
