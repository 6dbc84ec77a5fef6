"""How well the timing model predicts the probe's runs: leave-one-out on each run, and fit-on-one, predict-the-other.

    python bench/calibration_check.py

Runs `sim.calibration` (the same code as `python -m sim calibrate`) on the shipped runs
(gpu_probe/recorded/, docs/probe-runs.md): the small preset's recorded run (small.json) and its
hold-out (small-holdout.json, the same command five minutes later on the same H100 lease), the 1b
preset's run (1b.json, the same lease: Llama-3.2-1B's shape, another decoder, so only its own fit),
the small preset at batch 1 only (small-b1.json: one point a mode, too few for a fit of its own, so
only predicted) and the persistent kernel's 1b run (1b-persistent.json, an H200 on 2026-12-03). It
prints, as docs/calibration.md's tables (each mode's median |error| and its worst point):

- per run, each point left out of its fit, against the goals (issues 28 and 29: every mode's
  median <= 10 %, no point beyond 25 %; fused+graph at batch 1 within 10 %);
- the fit on each small-preset run predicting the other's points, and the batch-1 run's;
- the host side alone (the unprofiled enqueue time), left out and across runs;
- the host's speed that sets the eager misses: each eager step's host time over its launches at
  their fitted shares (µs a Triton GEMM launch), per run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.step_plan import FUSED_GRAPH, modes  # noqa: E402
from sim.calibration import calibrate  # noqa: E402
from sim.calibration.report import check_summary, load_run, loo_summary, verdict  # noqa: E402

RECORDED = ROOT / "gpu_probe" / "recorded"
RUNS = {  # fitted on their own: leave-one-out
    "recorded": "small.json",
    "hold-out": "small-holdout.json",
    "1b": "1b.json",
}
CROSS = (
    ("recorded", "hold-out"),
    ("hold-out", "recorded"),
    ("recorded", "small b1"),
    ("hold-out", "small b1"),
)
PREDICTED_ONLY = {"small b1": "small-b1.json"}  # batch 1 only: one point a mode
PERSISTENT_RUN = {"1b persistent": "1b-persistent.json"}
MODES = [m.name for m in modes(modelled=True)]


def cells(s: dict, columns=MODES, with_b1: bool = True) -> list[str]:
    """A summary as docs/calibration.md's cells: each mode's median (worst point), "—" for a mode the run has
    none of, then fused+graph at batch 1."""
    out = []
    for m in columns:
        if m in s["by_mode"]:
            e, b, w = s["by_mode"][m]
            out.append(f"{100 * e:.1f} % (b{b} {100 * w:+.1f} %)")
        else:
            out.append("—")
    if with_b1:
        b1 = s[f"{FUSED_GRAPH.slug}_b1"]
        out.append("—" if b1 is None else f"{100 * b1:+.1f} %")
    return [c.replace("-", "−") for c in out]


def row(name: str, values: list[str]) -> str:
    return "| " + " | ".join([name, *values]) + " |"


def header(columns, with_b1: bool = True) -> str:
    names = [*columns, f"{FUSED_GRAPH.name} b1"] if with_b1 else list(columns)
    return row("run", names) + "\n|" + " --- |" * (len(names) + 1)


def main() -> int:
    results = {
        name: load_run(str(RECORDED / f)) for name, f in {**RUNS, **PREDICTED_ONLY, **PERSISTENT_RUN}.items()
    }
    cals = {name: calibrate(results[name]) for name in (*RUNS, *PERSISTENT_RUN)}
    print("### Step time, left out")
    print(header(MODES))
    for name in RUNS:
        print(row(f"{name} ({RUNS[name]})", cells(loo_summary(cals[name]))))
    for name in RUNS:
        print("  " + verdict(loo_summary(cals[name]), f"{name}, left out"))
    print(
        "  over every point of a run at once: "
        + ", ".join(f"{n} {100 * cals[n].median_loo_error:.1f} %" for n in RUNS)
    )
    print("\n### Step time, fit on one run, predict another")
    print(header(MODES))
    overall = []
    for fit_on, other in CROSS:
        s = check_summary(cals[fit_on].check(results[other]))
        print(row(f"{fit_on} → {other}", cells(s)))
        overall.append(f"{fit_on} → {other} {100 * s['median']:.1f} %")
    print("  over every point: " + ", ".join(overall))
    print("\n### Step time, left out, the persistent run")
    columns = [FUSED_GRAPH.name, "persistent"]
    print(header(columns))
    for name, f in PERSISTENT_RUN.items():
        print(row(f"{name} ({f})", cells(loo_summary(cals[name]), columns)))
    print("\n### Host time alone (the unprofiled enqueue time), left out and across runs")
    print(header(MODES, with_b1=False))
    for name in RUNS:
        print(row(f"{name}, left out", cells(loo_summary(cals[name], "host"), with_b1=False)))
    for fit_on, other in CROSS[:2]:
        s = check_summary(cals[fit_on].check(results[other]), "host")
        print(row(f"{fit_on} → {other}", cells(s, with_b1=False)))
    print("\nThe host's speed at each eager point: its host time over its launches at the fitted shares")
    print("(µs a Triton GEMM launch; the fit's triton_launch_us follows the typical point)")
    for name in RUNS:
        speed = cals[name].host_speeds()
        lo, hi = min(speed.values()), max(speed.values())
        listed = ", ".join(f"{m} b{b} {v:.1f}" for (m, b), v in speed.items())
        print(f"  {name}: {listed}")
        print(
            f"    fitted {cals[name].params['triton_launch_us']:.1f}; {hi / lo:.2f} x from the fastest to the "
            f"slowest point: "
            + (
                f"no one figure is within 25 % of every point (it would have to be at least {0.75 * hi:.1f} "
                f"and at most {1.25 * lo:.1f})"
                if 0.75 * hi > 1.25 * lo
                else "one figure can be within 25 % of every point"
            )
        )
    shares = {n: {p: cals[n].params[p] for p in cals[n].params if p.endswith("_launch_share")} for n in RUNS}
    print("  the launch kinds' shares of a Triton GEMM launch, per run:")
    for kind in shares["1b"]:
        print(f"    {kind}: " + ", ".join(f"{n} {shares[n][kind]:.2f}" for n in RUNS))
    for name in RUNS:
        gaps = [p.unprofiled_gap_us for p in cals[name].points if np.isfinite(p.unprofiled_gap_us)]
        print(
            f"  {name}: gap between replayed kernels {cals[name].params['node_gap_us']:.3f} µs (unprofiled, "
            f"{min(gaps):.2f}-{max(gaps):.2f} over {len(gaps)} graphs)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
