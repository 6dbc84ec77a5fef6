"""How well the timing model predicts the H200: leave-one-out on each run, and fit-on-one, predict-the-other.

    python bench/calibration_check.py

Runs `sim.calibration` (the same code as `python -m sim calibrate`) on the recorded run
(gpu_probe/recorded/h200.json, 2026-11-30) and the hold-out (h200-holdout.json, made with
the same CLI on the same H200 the day after, never fitted), and prints for each: every
mode's median leave-one-out error, the worst mode and point, fused+graph at batch 1; then the
fit on each run predicting the other's points; then leave-one-out on the 1b preset's run
(h200-1b.json, 2026-12-01: Llama-3.2-1B's shape, another decoder, so only its own fit). Goals (issue 12): every mode ≤ 10 % median,
no point beyond 25 %, fused+graph batch 1 within 10 %.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.calibration import calibrate  # noqa: E402
from sim.calibration.report import check_summary, load_run, loo_summary, verdict  # noqa: E402

RUNS = {"recorded": "recorded", "hold-out": str(ROOT / "gpu_probe" / "recorded" / "h200-holdout.json")}
OTHER_MODELS = {"1b": str(ROOT / "gpu_probe" / "recorded" / "h200-1b.json")}  # another decoder: its own fit


def _line(s: dict) -> str:
    return ", ".join(f"{m} {100 * e:.1f} %" for m, e in s["median_by_mode"].items())


def main() -> int:
    results = {name: load_run(source) for name, source in RUNS.items()}
    cals = {name: calibrate(r) for name, r in results.items()}
    for name, cal in cals.items():
        s = loo_summary(cal)
        print(f"{name}: leave-one-out median by mode: {_line(s)}")
        print("  " + verdict(s, "Leave-one-out"))
    for fit_on, other in (("recorded", "hold-out"), ("hold-out", "recorded")):
        s = check_summary(cals[fit_on].check(results[other]))
        print(f"fit on {fit_on}, predict {other}: median by mode: {_line(s)}")
        print("  " + verdict(s, "Fit on one run, predict the other"))
    for name, source in OTHER_MODELS.items():
        s = loo_summary(calibrate(load_run(source)))
        print(f"{name}: leave-one-out median by mode: {_line(s)}")
        print("  " + verdict(s, "Leave-one-out"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
