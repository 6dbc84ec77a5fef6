"""A static preset against a run of its decoder (`sim.calibration.preset.check_preset`): the figures the
Simulator's calibrated preset quotes as "uncalibrated, off by …"."""

from dataclasses import replace

import numpy as np
import pytest

from core.probe_result import recorded_result
from core.step_plan import StepPlan
from sim.calibration import model_from_result, points_from_result
from sim.calibration.preset import check_preset
from sim.config import PRESETS
from sim.step.schedule import simulate_step


@pytest.fixture(scope="module")
def run():
    return recorded_result()


def test_each_step_the_toggles_draw_is_the_preset_simulated_on_the_runs_context(run):
    preset = PRESETS["probe-0.5b-h200"]  # the shipped run's decoder: 32 layers, hidden 1024
    check = check_preset(preset, run)
    assert check is not None
    model = replace(preset.model, context_len=model_from_result(run).context_len)
    measured = {(p.mode, p.batch): p.step_us for p in points_from_result(run)}
    for mode, batch, meas, pred in check.steps:
        assert mode.toggles  # torch.compile and the persistent kernel are no toggle state
        assert meas == measured[(mode, batch)]
        assert pred == simulate_step(model, preset.hardware, StepPlan(mode, batch)).metrics.step_us
    # every toggle state at every batch of the run that replayed where the preset's buckets would
    assert {m.name for m, *_ in check.steps} == {"eager", "fused", "graph", "fused+graph"}
    errors = check.errors
    assert np.allclose(errors, [pred / meas - 1 for *_, meas, pred in check.steps])
    worst = check.summary()["worst_point"]["error"]
    assert abs(worst) == np.abs(errors).max()


def test_a_preset_of_another_decoder_is_not_checked(run):
    assert check_preset(PRESETS["chapter"], run) is None
    assert check_preset(PRESETS["llama3-8b-h100"], run) is None
