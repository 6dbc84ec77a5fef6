"""Every simulator, recorded-run, calibration and trace figure the page shows is what it was when last
written on purpose (`tests/behaviour_figures.py`): a refactor that moves one fails here, naming it."""

import json
import math

from behaviour_figures import SNAPSHOT, figures


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
        if not (
            math.isclose(expected, actual, rel_tol=1e-9, abs_tol=1e-9)
            or (expected != expected and actual != actual)
        ):
            out.append(f"{where}: {expected!r}, now {actual!r}")
    elif expected != actual:
        out.append(f"{where}: {expected!r}, now {actual!r}")
    return out


def test_every_figure_is_what_it_was():
    expected = json.loads(SNAPSHOT.read_text())
    differences = _differences(expected, figures())
    assert not differences, "\n".join(differences)
