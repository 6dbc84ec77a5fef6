"""Two runs of the same probe command on two machines: what reproduces, and what only does per host.

    python bench/lease_check.py gpu_probe/recorded/1b.json gpu_probe/recorded/1b-second.json

For every (mode, batch) both runs measured, side by side:

- GPU-bound steps (the graph modes, back to back): the ratio of the two runs' times; issue 35's goal is
  within 3 %.
- host-bound steps (eager and fused, and a graph mode's eager fallback above its buckets; the step as timed,
  its median and its p10): the ratio as measured and
  after dividing each run's step by its own host speed index (the median host time of a torch launch,
  `ProbeResult.host`); the goal is within 10 % after dividing. A run without the index (every file
  before 2026-12-07) gets the raw ratio only.
- the calibration, fitted on each run and predicting the other's steps, as the fit carries the host over
  (`Calibration.check`, which rescales the host's costs by the two indices where both runs have one);
  the goal is a median within 10 %.

Each summary is printed with its worst point beside it. Reads the two files only; no GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.probe_result import load_result
from core.step_plan import mode as mode_named

HOST_BOUND = ("eager", "fused")


def _index(res) -> float | None:
    return res.host.torch_launch_us if res.host is not None else None


def _worst(ratios: dict) -> str:
    if not ratios:
        return "—"
    key = max(ratios, key=lambda k: abs(ratios[k] - 1))
    med = float(np.median([abs(r - 1) for r in ratios.values()]))
    return f"median {100 * med:.1f} % apart, worst {key[0]} b{key[1]} {100 * (ratios[key] - 1):+.1f} %"


def compare(a, b) -> list[str]:
    """The comparison's lines (a table, then the summaries)."""
    ia, ib = _index(a), _index(b)
    lines = [
        f"A: {a.device}, {a.created}, host {ia if ia is None else f'{ia:.2f} µs a torch launch'}",
        f"B: {b.device}, {b.created}, host {ib if ib is None else f'{ib:.2f} µs a torch launch'}",
        "",
        f"{'mode':<12}{'batch':>6}  {'A µs':>10}{'B µs':>10}{'B/A':>8}{'B/A per host':>14}  {'p10 B/A':>8}",
    ]
    gpu, host_raw, host_scaled, host_p10 = {}, {}, {}, {}
    for run_a in a.runs:
        run_b = b.run(run_a.mode, run_a.batch)
        if run_b is None:
            continue
        key = (run_a.mode, run_a.batch)
        graphs = mode_named(run_a.mode).graphs and not (run_a.eager_fallback or run_b.eager_fallback)
        if graphs and run_a.step_us_back_to_back and run_b.step_us_back_to_back:
            sa, sb = run_a.step_us_back_to_back, run_b.step_us_back_to_back
            gpu[key] = sb / sa
            scaled = ""
        else:
            sa, sb = run_a.step_us_median, run_b.step_us_median
            scaled = ""
            if run_a.mode in HOST_BOUND or run_a.eager_fallback:
                host_raw[key] = sb / sa
                host_p10[key] = run_b.step_us_p10 / run_a.step_us_p10
                if ia and ib:
                    host_scaled[key] = (sb / ib) / (sa / ia)
                    scaled = f"{host_scaled[key]:.3f}"
        p10 = f"{host_p10[key]:.3f}" if key in host_p10 else ""
        lines.append(f"{key[0]:<12}{key[1]:>6}  {sa:>10.1f}{sb:>10.1f}{sb / sa:>8.3f}{scaled:>14}  {p10:>8}")
    lines += [
        "",
        f"GPU-bound steps (graph modes, back to back): {_worst(gpu)} (goal: within 3 %)",
        f"host-bound steps (eager, fused; median as timed): {_worst(host_raw)}",
        f"host-bound steps, p10: {_worst(host_p10)}",
    ]
    if host_scaled:
        lines.append(
            f"host-bound steps over each run's host index: {_worst(host_scaled)} (goal: within 10 %)"
        )
    else:
        lines.append("host-bound steps over each run's host index: one run has no index (not measured)")
    lines += _calibration_lines(a, b)
    return lines


def _calibration_lines(a, b) -> list[str]:
    from sim.calibration import calibrate

    out = []
    for name, fit_on, other in (("A -> B", a, b), ("B -> A", b, a)):
        cal = calibrate(fit_on, loo=False)
        errors = {
            (p["mode"], p["batch"]): p["step_us_predicted"] / p["step_us_measured"] for p in cal.check(other)
        }
        host = {k: e for k, e in errors.items() if k[0] in HOST_BOUND}
        how = (
            "its host's costs rescaled by the two indices"
            if cal.host_index and _index(other)
            else "as fitted"
        )
        out.append(
            f"calibration fitted on {name[0]}, predicting {name[-1]} ({how}): every point {_worst(errors)}; "
            f"eager and fused {_worst(host)} (goal: median 10 %)"
        )
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        a, b = (load_result(Path(p)) for p in argv)
    except (OSError, ValueError) as err:
        print(f"lease_check: {err}", file=sys.stderr)
        return 2
    print("\n".join(compare(a, b)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
