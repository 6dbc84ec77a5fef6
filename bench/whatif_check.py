"""How close the trace what-if "with CUDA graphs" comes to graph steps measured without the profiler.

    python bench/whatif_check.py

Reads the eager decode-step traces that ship with the repository (Hugging Face steps in
data/traces/hf/, recorded on an H200; the probe's batch-1 steps in gpu_probe/recorded/, on an H100), runs
the graphs what-if on every step of each, taken without the profiler's own cost as the page and the
CLI take it (`sim.trace.untraced.untraced_steps`), with the replay cost calibrated to the probe's
recorded run (`sim.trace.whatif.default_replay_cost`), and prints the median over the steps against the
graph step the same session measured without the profiler (CUDA events, each step on an idle GPU):
`hf_*_measured.json`, or the probe run's graph mode at batch 1. The replay cost's parameters are
fitted to the small preset's recorded run (gpu_probe/recorded/small.json) only, so its row is marked
as that run's; the other rows are traces the fit never saw. Last, the median and the worst error
over those, and the Llama trace against the same model's graph step measured on a second H200.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HF = ROOT / "data" / "traces" / "hf"
RECORDED = ROOT / "gpu_probe" / "recorded"

# (label, trace, step range or None, where the measured graph step is, fitted-to run?)
ROWS = (
    (
        "Hugging Face Llama-1B shape, ProfilerStep#N, with shapes",
        HF / "hf_llama_eager_profilerstep.json.gz",
        None,
        HF / "hf_llama_measured.json",
        False,
    ),
    (
        "the same, steps by synchronisation",
        HF / "hf_llama_eager_sync.json.gz",
        None,
        HF / "hf_llama_measured.json",
        False,
    ),
    (
        "Hugging Face Qwen2.5-0.5B shape",
        HF / "hf_qwen2_eager_sync.json.gz",
        None,
        HF / "hf_qwen2_measured.json",
        False,
    ),
    (
        "the probe's 1b preset, batch 1",
        RECORDED / "trace_1b_eager_b1.json.gz",
        "decode_step",
        RECORDED / "1b.json",
        False,
    ),
    (
        "the probe's small preset, batch 1",
        RECORDED / "trace_eager_b1.json.gz",
        "decode_step",
        RECORDED / "small.json",
        True,
    ),
)
OTHER_MACHINE = HF / "hf_llama_measured_first_machine.json"


@cache
def predicted_us(trace: Path, step_range: str | None) -> float:
    """The graphs what-if's step time, median over the trace's steps, each without the profiler (as the page
    and the CLI make it: `sim.trace.untraced.untraced_steps`)."""
    from core.trace import analyse
    from sim.trace.untraced import untraced_steps
    from sim.trace.whatif import default_replay_cost, graphs_whatif

    cost = default_replay_cost()
    steps = untraced_steps(analyse(trace, step_range=step_range))
    return float(np.median([graphs_whatif(u.step, cost).metrics.step_us for u in steps]))


def measured_us(source: Path) -> float:
    """The graph step measured without the profiler (median over its timed steps)."""
    if "_measured" in source.name:
        return json.loads(source.read_text())["modes"]["graph"]["step_us_median"]
    from core.probe_result import load_result

    return load_result(source).run("graph", 1).step_us_median


def compare(rows: tuple = ROWS) -> list[dict]:
    """One dict per trace of `rows`: label, predicted, measured, error (predicted / measured − 1), fitted."""
    out = []
    for label, trace, step_range, source, fitted in rows:
        p, m = predicted_us(trace, step_range), measured_us(source)
        out.append({"label": label, "predicted": p, "measured": m, "error": p / m - 1, "fitted": fitted})
    return out


def unseen_summary(rows: list[dict]) -> dict:
    """Median |error| and the worst row over the traces the replay cost was not fitted to."""
    unseen = [r for r in rows if not r["fitted"]]
    worst = max(unseen, key=lambda r: abs(r["error"]))
    return {"median": float(np.median([abs(r["error"]) for r in unseen])), "worst": worst, "n": len(unseen)}


def other_machine_error() -> float:
    """The Llama trace (steps by synchronisation) against the graph step measured on a second H200."""
    return predicted_us(ROWS[1][1], None) / measured_us(OTHER_MACHINE) - 1


def main() -> int:
    rows = compare()
    print(f"{'eager trace (H200)':<58}{'what-if µs':>11}{'measured µs':>13}{'error':>9}")
    for r in rows:
        note = "  (the run the replay cost was fitted to)" if r["fitted"] else ""
        print(
            f"{r['label']:<58}{r['predicted']:>11,.0f}{r['measured']:>13,.0f}{100 * r['error']:>+8.1f} %{note}"
        )
    s = unseen_summary(rows)
    print(
        f"{s['n']} traces the fit never saw: median |error| {100 * s['median']:.1f} %, "
        f"worst {100 * s['worst']['error']:+.1f} % ({s['worst']['label']})"
    )
    print(
        f"Llama, steps by synchronisation, against a second H200's graph step: {100 * other_machine_error():+.1f} %"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
