"""Adding a mode is one row of the modes table plus its kernels.

A toy mode, "fused, no graphs, half the launch cost", is put in `core.step_plan.MODES` and nowhere
else. The simulator, the sweep, the calibration and the page then all know it: each reads the table.
"""

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest
from synthetic_params import KNOWN_PARAMS

from core import step_plan
from core.probe_result import load_result
from core.step_plan import FUSED, Mode, StepPlan, modes
from sim.calibration import calibrate, synthetic_result
from sim.config import PRESETS
from sim.schedule import simulate_step, sweep

APP = str(Path(__file__).resolve().parents[1] / "app.py")
CHAPTER = PRESETS["chapter"]
TOY = Mode(
    "toy",
    "fused, half the launch cost",
    "toy: fused at half the launch cost",
    "toy",
    fused=True,
    graphs=False,
    probed=False,  # no probe runs it: only the timing model knows it
    toggles=False,
    launch_scale=0.5,
    colour="#2a9d55",
)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(step_plan.MODES, TOY.name, TOY)
    return TOY


def test_the_table_lists_it(toy):
    assert toy in modes(modelled=True) and toy not in modes(toggles=True) and toy not in modes(probed=True)
    assert step_plan.mode("toy") is toy


def test_the_simulator_runs_it(toy):
    fused = simulate_step(CHAPTER.model, CHAPTER.hardware, StepPlan(FUSED, 1))
    step = simulate_step(CHAPTER.model, CHAPTER.hardware, StepPlan(toy, 1))
    assert step.metrics.kernels == fused.metrics.kernels  # the fused kernel set
    assert step.metrics.cpu_launch_us == pytest.approx(fused.metrics.cpu_launch_us / 2)
    assert step.metrics.gpu_busy_us == pytest.approx(fused.metrics.gpu_busy_us)
    assert step.timeline.label.endswith("· toy") and step.speedup > fused.speedup


def test_the_sweep_draws_it(toy):
    sw = sweep(CHAPTER.model, CHAPTER.hardware, np.arange(1, 129))
    assert "toy" in sw.series
    np.testing.assert_allclose(sw[toy].cpu_launch_us, sw[FUSED].cpu_launch_us / 2)
    for b in (1, 8, 100):
        at_b = simulate_step(CHAPTER.model, CHAPTER.hardware, StepPlan(toy, b)).metrics.step_us
        assert sw[toy].step_us[b - 1] == pytest.approx(at_b, rel=1e-9)
    assert sw.crossover["toy"] <= sw.crossover[FUSED.name]  # cheaper launches: GPU-bound no later


def test_the_calibration_fits_it(toy):
    """A run with the toy mode among its points: the fit reads the mode's launch scale from the table."""
    model = PRESETS["probe-0.5b-h200"].model.with_layers(8)
    result = load_result(synthetic_result(KNOWN_PARAMS, model, batches=(1, 8, 64)))
    assert "toy" in result.modes
    cal = calibrate(result)
    rows = [r for r in cal.rows() if r["mode"] == "toy"]
    assert len(rows) == 3 and all(abs(r["step error %"]) < 1.0 for r in rows)
    fused_host = {p.batch: p.host_us for p in cal.points if p.mode is FUSED}
    for p in cal.points:
        if p.mode is toy:
            assert p.host_us == pytest.approx(fused_host[p.batch] / 2)
    assert cal.params["triton_launch_us"] == pytest.approx(KNOWN_PARAMS["triton_launch_us"], rel=0.02)
    assert np.isfinite(cal.mode_loo_error("toy"))


def test_the_page_offers_it(toy):
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    choice = at.selectbox(key="mode")
    assert TOY.label in choice.options  # shown by its label
    choice.set_value(TOY.label).run()
    assert not at.exception, at.exception
    expected = simulate_step(CHAPTER.model, CHAPTER.hardware, StepPlan(toy, 1)).metrics
    shown = {m.label: m.value for m in at.metric}
    assert shown["Kernels / step"] == f"{expected.kernels:,}"
    sweep_chart = next(c for c in at.get("plotly_chart") if c.key == "sim_sweep")
    assert f"{TOY.title} (current)" in sweep_chart.proto.spec
