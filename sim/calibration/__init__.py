"""Fitting the timing model (`sim.timing`) to a measured probe run.

- `families`: the probe's kernels by family, and each family's work in a step;
- `model`: the timing model applied to a run's measured points (`ProbeModel`);
- `fit`: the fit, leave-one-out, and a fit predicting another run (`calibrate`, `Calibration`);
- `report`: the text / JSON report and `python -m sim calibrate`;
- `preset`: a calibration as a simulator preset;
- `synthetic`: results made by the model with known parameters (tests, demos);
- `least_squares`: the bounded solver.
"""

from functools import lru_cache

from sim.calibration.fit import GOAL, WORST_GOAL, Calibration, calibrate
from sim.calibration.model import NAMES, PARAMS, graph_cost, model_from_result, points_from_result
from sim.calibration.preset import calibrated_preset
from sim.calibration.synthetic import synthetic_result
from sim.timing import GraphReplayCost


def graph_cost_from_result(result) -> GraphReplayCost:
    """The replay cost calibrated to `result` (raises ValueError when it cannot be calibrated)."""
    return calibrate(result, loo=False).graph_cost


@lru_cache(maxsize=1)
def recorded_calibration() -> Calibration:
    """The shipped recorded run's calibration (gpu_probe/recorded/small.json), without leave-one-out; cached."""
    from core.probe_result import recorded_result

    return calibrate(recorded_result(), loo=False)


@lru_cache(maxsize=8)
def recorded_graph_cost(host_index: float | None = None) -> GraphReplayCost:
    """The replay cost calibrated to the shipped recorded run; with `host_index` (µs a torch launch), carried to
    that host (`Calibration.on_host`: the run's own where it measured no index). Cached."""
    cal = recorded_calibration()
    if not (host_index and cal.host_index):
        return cal.graph_cost
    return graph_cost(dict(zip(NAMES, cal.on_host(host_index).tolist())))


__all__ = [
    "GOAL",
    "NAMES",
    "PARAMS",
    "WORST_GOAL",
    "Calibration",
    "GraphReplayCost",
    "calibrate",
    "calibrated_preset",
    "graph_cost_from_result",
    "model_from_result",
    "points_from_result",
    "recorded_calibration",
    "recorded_graph_cost",
    "synthetic_result",
]
