"""Fitting the timing model (`sim.timing`) to a measured probe run."""

from sim.calibration.replay import graph_cost_from_result, recorded_graph_cost

__all__ = ["graph_cost_from_result", "recorded_graph_cost"]
