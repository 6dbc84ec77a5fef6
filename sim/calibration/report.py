"""`python -m sim calibrate RUN [--check OTHER] [--json]`: the calibration as text or JSON.

RUN (and OTHER) is `recorded` (the shipped recorded run, small.json), a result JSON, or a `.json.gz` of one.
The text report lists the fitted parameters, every point measured / predicted / left out,
the median leave-one-out error per mode, and the worst mode and the worst point beside it.
With `--check`, OTHER's points are predicted by the fit on RUN (fit on one run, predict
another). numpy only.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys

import numpy as np

from core.step_plan import FUSED_GRAPH, modes
from sim.calibration.fit import GOAL, WORST_GOAL, Calibration, calibrate
from sim.calibration.model import NAMES, PARAMS


def load_run(source: str):
    """`recorded`, a result JSON path, or a gzipped one: a checked ProbeResult."""
    from core.probe_result import load_result, recorded_result  # torch-free

    if source == "recorded":
        return recorded_result()
    if str(source).endswith(".gz"):
        try:
            with gzip.open(source, "rb") as fh:
                return load_result(
                    fh
                )  # reads at most the result size limit + 1 byte: a gzip bomb stops there
        except (OSError, EOFError) as err:
            raise ValueError(f"{source}: not a readable .json.gz ({err})") from None
    return load_result(source)


def format_param(name: str, value: float) -> str:
    unit = PARAMS[NAMES.index(name)].unit
    return f"{name} = {value:.4g} {unit}" if unit != "×" else f"{name} = {value:.3g}×"


def summary(errors: dict) -> dict:
    """{mode: median |error|}, each mode's (median, worst batch, its error), the worst mode and point and
    fused+graph batch 1, of {(mode, batch): error}."""
    by_mode = {
        m.name: float(np.median([abs(e) for (mm, _), e in errors.items() if mm == m.name]))
        for m in modes(modelled=True)
        if any(mm == m.name for mm, _ in errors)
    }
    worst_mode = max(by_mode, key=by_mode.get)
    worst = max(errors, key=lambda k: abs(errors[k]))
    worst_of = {m: max((k for k in errors if k[0] == m), key=lambda k: abs(errors[k])) for m in by_mode}
    return {
        "median_by_mode": by_mode,
        "by_mode": {m: (e, worst_of[m][1], errors[worst_of[m]]) for m, e in by_mode.items()},
        "median": float(np.median(np.abs(list(errors.values())))),
        "worst_mode": {"mode": worst_mode, "median_error": by_mode[worst_mode]},
        "worst_point": {"mode": worst[0], "batch": worst[1], "error": errors[worst]},
        f"{FUSED_GRAPH.slug}_b1": errors.get((FUSED_GRAPH.name, 1)),
    }


def verdict(s: dict, what: str) -> str:
    """One sentence: the median, the worst mode and the worst point, against the goals."""
    wm, wp, b1 = s["worst_mode"], s["worst_point"], s[f"{FUSED_GRAPH.slug}_b1"]
    met = wm["median_error"] <= GOAL and abs(wp["error"]) <= WORST_GOAL and (b1 is None or abs(b1) <= GOAL)
    text = (
        f"{what}: median error {100 * s['median']:.1f} %; worst mode {wm['mode']} "
        f"({100 * wm['median_error']:.1f} % median); worst point {wp['mode']} at batch {wp['batch']} "
        f"({100 * wp['error']:+.1f} %)"
    )
    if b1 is not None:
        text += f"; fused+graph at batch 1 {100 * b1:+.1f} %"
    goal = f"every mode ≤ {100 * GOAL:.0f} %, no point beyond {100 * WORST_GOAL:.0f} %, fused+graph b1 ≤ {100 * GOAL:.0f} %"
    return text + (f". Meets the goals ({goal})." if met else f". Misses the goals ({goal}).")


def loo_summary(cal: Calibration, of: str = "step") -> dict:
    """`summary` of the points left out of their fits: their step times, or (`of="host"`) host times."""
    errors = cal.loo_errors(of)
    return summary({(p.mode.name, p.batch): float(e) for p, e in zip(cal.points, errors) if np.isfinite(e)})


def check_summary(points: list[dict], of: str = "step") -> dict:
    """`summary` of another run's points as a fit predicts them (`Calibration.check`): step or host."""
    return summary(
        {(p["mode"], p["batch"]): p[f"{of}_us_predicted"] / p[f"{of}_us_measured"] - 1 for p in points}
    )


def by_mode(s: dict) -> str:
    """Each mode's median error and its worst point: "eager 9.3 % (b1 -27.0 %), fused ..."."""
    return ", ".join(f"{m} {100 * e:.1f} % (b{b} {100 * w:+.1f} %)" for m, (e, b, w) in s["by_mode"].items())


def format_report(cal: Calibration, check: list[dict] | None = None) -> str:
    lines = [f"Calibration of the timing model to a probe run on {cal.device}", "", "Fitted parameters:"]
    for p in PARAMS:
        pin = cal.pins[p.name]
        note = "" if pin.status == "read" else f"  ({pin.describe(p.unit)})"
        lines.append(f"  {p.name:<24} {cal.params[p.name]:>10.4g} {p.unit:<8} {p.what}{note}")
    lines += [
        "",
        (
            f"{'mode':<12}{'batch':>6}{'kernels':>8}  {'step meas':>10}{'pred':>10}{'err':>8}{'LOO':>8}"
            f"  {'CPU meas':>10}{'pred':>10}{'err':>8}  {'busy meas':>10}{'pred':>10}{'err':>8}"
        ),
    ]
    for r in cal.rows():
        loo = f"{r['step LOO error %']:+7.1f}%" if np.isfinite(r["step LOO error %"]) else "     n/a"
        lines.append(
            f"{r['mode']:<12}{r['batch']:>6}{r['kernels']:>8}  {r['step measured (µs)']:>10.1f}"
            f"{r['step predicted (µs)']:>10.1f}{r['step error %']:+7.1f}%{loo}  "
            f"{r['CPU measured (µs)']:>10.1f}{r['CPU predicted (µs)']:>10.1f}{r['CPU error %']:+7.1f}%  "
            f"{r['GPU busy measured (µs)']:>10.1f}{r['GPU busy predicted (µs)']:>10.1f}"
            f"{r['GPU busy error %']:+7.1f}%"
        )
    lines.append("(times in µs; err = predicted / measured - 1; LOO = predicted by a fit without that point)")
    if np.isfinite(cal.loo_step_us).any():
        s = loo_summary(cal)
        lines.append("leave-one-out step error by mode, median (worst point): " + by_mode(s))
        lines.append(
            "leave-one-out host error by mode, median (worst point): " + by_mode(loo_summary(cal, "host"))
        )
        lines.append(verdict(s, "Leave-one-out"))
    if check:
        lines += ["", "Fit on this run, predicting the other run's points:"]
        for p in check:
            err = p["step_us_predicted"] / p["step_us_measured"] - 1
            lines.append(
                f"  {p['mode']:<12}{p['batch']:>6}  {p['step_us_measured']:>10.1f}"
                f"{p['step_us_predicted']:>10.1f}{100 * err:+7.1f}%"
            )
        s = check_summary(check)
        lines.append("step error by mode, median (worst point): " + by_mode(s))
        lines.append("host error by mode, median (worst point): " + by_mode(check_summary(check, "host")))
        lines.append(verdict(s, "Fit on one run, predict the other"))
        unfitted = sorted({n for p in check for n in p.get("unfitted", ())})
        if unfitted:
            lines.append(
                f"Note: the other run has kernels in families this fit had no data for ({', '.join(unfitted)}); "
                "their figures are the held defaults, so those points are guesses."
            )
    return "\n".join(lines)


def to_json(cal: Calibration, check: list[dict] | None = None) -> dict:
    """The CLI's --json: the points (OTHER's with --check), the parameters and the summary."""
    if check is not None:
        points = [dict(p, step_us_loo=None) for p in check]
        s = check_summary(check)
    else:
        points = [
            {
                "mode": p.mode.name,
                "batch": p.batch,
                "step_us_measured": p.step_us,
                "step_us_predicted": float(pred[0]),
                "step_us_loo": float(loo) if np.isfinite(loo) else None,
            }
            for p, pred, loo in zip(cal.points, cal.predicted, cal.loo_step_us)
        ]
        s = loo_summary(cal)
    return {"device": cal.device, "points": points, "params": cal.params, "summary": s}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sim calibrate",
        description="Fit the timing model to a probe result and report predicted vs measured, "
        "with leave-one-out errors; with --check, predict another run's points from this fit.",
    )
    parser.add_argument(
        "run", help="'recorded' (the shipped recorded run), a probe result JSON, or a .json.gz of one"
    )
    parser.add_argument("--check", metavar="OTHER", help="another run (same forms) to predict with this fit")
    parser.add_argument("--json", action="store_true", help="print JSON: {points: [...], params, summary}")
    args = parser.parse_args(argv)
    try:
        result = load_run(args.run)
        other = load_run(args.check) if args.check else None
        cal = calibrate(result, loo=other is None or not args.json)
        check = cal.check(other) if other is not None else None
    except ValueError as err:
        print(f"python -m sim calibrate: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(to_json(cal, check), indent=1))
    else:
        print(format_report(cal, check))
    return 0
