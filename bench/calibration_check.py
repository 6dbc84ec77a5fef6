"""How well the timing model predicts the H200: leave-one-out on each run, and fit-on-one, predict-the-other.

    python bench/calibration_check.py

Runs `sim.calibration` (the same code as `python -m sim calibrate`) on the shipped runs
(gpu_probe/recorded/): the small preset's recorded run (h200.json, 2026-11-30) and its
hold-out (small-holdout.json, the same CLI on another lease the day after), the 1b preset's
run (1b.json, 2026-12-02: Llama-3.2-1B's shape, another decoder, so only its own fit;
it is the only 1b run shipped) and the small preset at batch 1 only (small-b1.json, the
same lease as the 1b run: too few points for a fit of its own, so only predicted). It prints

- per run, each point left out of its fit: every mode's median step error and its worst point,
  fused+graph at batch 1, against the goals (issue 12: every mode ≤ 10 % median, no point
  beyond 25 %, fused+graph batch 1 within 10 %);
- the fit on each small-preset run predicting the other's points, and the batch-1 run's;
- the host side alone (the unprofiled enqueue time), left out and across runs, and the 1b
  fit's host costs (its launch and replay costs; the GPU side is another decoder's) on the
  small runs' host times;
- the host noise that sets the eager misses: the same eager step in the three small runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.calibration import calibrate  # noqa: E402
from sim.calibration.families import unpipelined_gemms  # noqa: E402
from sim.calibration.model import ProbeModel, model_from_result, points_from_result  # noqa: E402
from sim.calibration.report import by_mode, check_summary, load_run, loo_summary, summary, verdict  # noqa: E402

RECORDED = ROOT / "gpu_probe" / "recorded"
RUNS = {  # fitted on their own: leave-one-out
    "recorded": "recorded",
    "hold-out": str(RECORDED / "small-holdout.json"),
    "1b": str(RECORDED / "1b.json"),
}
CROSS = (
    ("recorded", "hold-out"),
    ("hold-out", "recorded"),
    ("recorded", "small b1"),
    ("hold-out", "small b1"),
)
PREDICTED_ONLY = {"small b1": str(RECORDED / "small-b1.json")}  # batch 1 only: one point a mode
SMALL = ("recorded", "hold-out", "small b1")


def host_errors(cal, other) -> dict:
    """The host time of each of `other`'s points from `cal`'s launch and replay costs (any decoder)."""
    points = points_from_result(other)
    sim = ProbeModel(model_from_result(other), points, unpipelined_gemms(other))
    host = sim.host_us(cal.theta)
    return {(p.mode.name, p.batch): h / p.host_us - 1 for p, h in zip(points, host)}


def main() -> int:
    results = {name: load_run(source) for name, source in {**RUNS, **PREDICTED_ONLY}.items()}
    cals = {name: calibrate(results[name]) for name in RUNS}
    print("Step time, each point left out of its run's fit: median by mode (worst point)")
    for name, cal in cals.items():
        s = loo_summary(cal)
        print(f"  {name}: {by_mode(s)}")
        print("    " + verdict(s, "Leave-one-out"))
    print("Step time, fit on one run, predict another's points: median by mode (worst point)")
    for fit_on, other in CROSS:
        s = check_summary(cals[fit_on].check(results[other]))
        print(f"  {fit_on} -> {other}: {by_mode(s)}")
        print("    " + verdict(s, "Fit on one run, predict the other"))
    print("Host time (unprofiled enqueue), left out: median by mode (worst point)")
    for name, cal in cals.items():
        print(f"  {name}: {by_mode(loo_summary(cal, 'host'))}")
    print("Host time, fit on one run, predict another's")
    for fit_on, other in CROSS:
        print(f"  {fit_on} -> {other}: {by_mode(check_summary(cals[fit_on].check(results[other]), 'host'))}")
    for other in SMALL:
        s = summary(host_errors(cals["1b"], results[other]))
        print(f"  1b's launch and replay costs -> {other}: {by_mode(s)}")
    steps = [results[n].run("eager", 1) for n in SMALL]
    ms = ", ".join(f"{r.step_us_median / 1e3:.1f}" for r in steps)
    p10 = ", ".join(f"{r.step_us_p10 / 1e3:.1f}" for r in steps)
    low, high = min(r.step_us_median for r in steps), max(r.step_us_median for r in steps)
    print(
        f"Host noise: the eager step at batch 1 took {ms} ms (median; p10 {p10} ms) in the three small-preset "
        f"runs ({', '.join(SMALL)}): one prediction within 25 % of each would have to be at least "
        f"{0.75 * high / 1e3:.1f} ms and at most {1.25 * low / 1e3:.1f} ms"
        + (", which no prediction is." if 0.75 * high > 1.25 * low else ".")
    )
    per_launch = {
        n: [r.enqueue_us_median / r.kernels_per_step for r in results[n].runs if r.mode == "eager"]
        for n in RUNS
    }
    print(
        "  eager host µs per launch at batches "
        + ", ".join(map(str, results["recorded"].batches))
        + ": "
        + "; ".join(f"{n} " + " ".join(f"{x:.1f}" for x in v) for n, v in per_launch.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
