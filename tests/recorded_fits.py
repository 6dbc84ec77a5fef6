"""The shipped runs and their calibrations, read and fitted once per test process.

A fit with its leave-one-out refits takes seconds on the 2-core machine (each refit is a fit), and tests in
several files ask for the same few shipped runs. A ProbeResult and a Calibration are frozen: read them, never
change what they hold. A test that builds or edits a run fits it itself.
"""

from __future__ import annotations

from functools import cache

from core.probe_result import RECORDED_PATH, load_result
from sim.calibration import calibrate

RECORDED = RECORDED_PATH.parent


@cache
def recorded_run(name: str):
    """The shipped run gpu_probe/recorded/<name>."""
    return load_result(RECORDED / name)


@cache
def recorded_fit(name: str, loo: bool = True):
    """calibrate() of the shipped run gpu_probe/recorded/<name>."""
    return calibrate(recorded_run(name), loo=loo)
