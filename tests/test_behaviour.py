"""Every simulator, recorded-run, calibration and trace figure the page shows is what it was when last
written on purpose (`tests/behaviour_figures.py`): a refactor that moves one fails here, naming it.

Figures are compared as what they are. Counts, labels and verdicts (ints, strings, booleans; which fitted
parameters the data pins and where the others are held) must be equal. Floats are measured or fitted values:
the calibration's least-squares fit, solved with another CPU's BLAS kernels, lands up to 5e-8 relative away
(the largest difference over every figure between OpenBLAS's Haswell, Sandybridge and Prescott kernels on one
machine, 2026-12-07; CI runs this test under two of them), so floats agree when within `REL_TOL` relative (or
`ABS_TOL` for figures that are zero or nearly so). A parameter the data does not pin would land anywhere along
its flat direction (1e-3 apart between two CPUs before the fit held them: `sim/calibration/least_squares.py`);
held, it is exact. A change of behaviour moves a figure by far more: a refit, a new cost or a changed schedule
moves it in the third or fourth digit, which still fails.
"""

import json
import math
import random

from behaviour_figures import SNAPSHOT, figures

# 20x the cross-CPU spread of a fitted float, 1000x below the smallest change a real edit makes.
REL_TOL = 1e-6
# Figures are µs, %, bytes or fractions: one millionth of a unit is below anything the page shows.
ABS_TOL = 1e-6


def _floats_agree(expected: float, actual: float) -> bool:
    if expected != expected:  # NaN is a figure too: it stays NaN
        return actual != actual
    return math.isclose(expected, actual, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def _differences(expected, actual, where: str = "", out=None) -> list[str]:
    out = [] if out is None else out
    if len(out) >= 20:
        return out
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(set(expected) | set(actual)):
            if key not in actual or key not in expected:
                out.append(f"{where}/{key}: only in {'the snapshot' if key in expected else 'the code'}")
            else:
                _differences(expected[key], actual[key], f"{where}/{key}", out)
    elif isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            out.append(f"{where}: {len(expected)} items, now {len(actual)}")
        for i, (e, a) in enumerate(zip(expected, actual)):
            _differences(e, a, f"{where}[{i}]", out)
    elif isinstance(expected, float) and isinstance(actual, (int, float)) and not isinstance(actual, bool):
        if not _floats_agree(expected, float(actual)):
            out.append(f"{where}: {expected!r}, now {actual!r}")
    elif type(expected) is not type(actual) or expected != actual:
        out.append(f"{where}: {expected!r}, now {actual!r}")
    return out


def _perturbed(value, rng: random.Random, rel: float):
    """`value` with every float moved by `rel` relative, in a random direction."""
    if isinstance(value, dict):
        return {k: _perturbed(v, rng, rel) for k, v in value.items()}
    if isinstance(value, list):
        return [_perturbed(v, rng, rel) for v in value]
    if isinstance(value, float):
        return value * (1 + rng.choice((-rel, rel)))
    return value


def test_every_figure_is_what_it_was():
    expected = json.loads(SNAPSHOT.read_text())
    differences = _differences(expected, figures())
    assert not differences, "\n".join(differences)


def test_a_refit_on_another_machine_passes_and_a_moved_figure_fails():
    """The tolerance, shown on the snapshot itself: every float nudged by 1e-7 (twice the spread seen between
    CPUs) still agrees; one figure moved by 1e-3, or one count or label changed, is named."""
    snapshot = json.loads(SNAPSHOT.read_text())
    assert not _differences(snapshot, _perturbed(snapshot, random.Random(0), 1e-7))

    rows = snapshot["calibration"]["1b.json"]["rows"]
    key = next(k for k, v in rows[2].items() if isinstance(v, float) and abs(v) > 1e-3)
    moved = json.loads(json.dumps(snapshot))
    moved["calibration"]["1b.json"]["rows"][2][key] *= 1 + 1e-3
    assert _differences(snapshot, moved) == [
        f"/calibration/1b.json/rows[2]/{key}: {rows[2][key]!r}, now {rows[2][key] * (1 + 1e-3)!r}"
    ]

    relabelled = json.loads(json.dumps(snapshot))
    relabelled["sim"]["chapter"]["crossover"]["unoptimised"] += 1
    assert len(_differences(snapshot, relabelled)) == 1
    assert not _differences({"n": 3}, {"n": 3}) and _differences({"n": 3}, {"n": 3.0000001})
