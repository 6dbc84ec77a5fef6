"""Adding a mode is one row of the modes table.

Two toy modes are put in `core.step_plan.MODES` and nowhere else:

- ONE_LAUNCH changes the schedule: the persistent kernel launched once, without a graph. No mode had
  this schedule (one eager launch, then the fused kernels as phases back to back, each paying a
  barrier), and nothing in the simulator names it: both schedulers derive the host's calls, when the
  phases may start and what separates them from the row (`sim.step.submission`), and must agree.
- HALF_LAUNCH changes a cost: fused, no graphs, half the launch cost. The calibration reads the
  launch scale from the row.
"""

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest
from synthetic_params import KNOWN_PARAMS

from core import step_plan
from core.probe_result import load_result
from core.step_plan import FUSED, FUSED_KERNELS, PERSISTENT, PERSISTENT_KERNELS, Mode, StepPlan, modes
from sim.calibration import calibrate, synthetic_result
from sim.config import PRESETS
from sim.step.schedule import simulate_step, sweep

APP = str(Path(__file__).resolve().parents[1] / "app.py")
CHAPTER = PRESETS["chapter"]
ONE_LAUNCH = Mode(
    "one-launch", PERSISTENT_KERNELS, graphs=False, probed=False, toggles=False, colour="#2a9d55"
)
HALF_LAUNCH = Mode("half-launch", FUSED_KERNELS, graphs=False, probed=False, toggles=False, launch_scale=0.5)


@pytest.fixture
def one_launch(monkeypatch):
    monkeypatch.setitem(step_plan.MODES, ONE_LAUNCH.name, ONE_LAUNCH)
    return ONE_LAUNCH


@pytest.fixture
def half_launch(monkeypatch):
    monkeypatch.setitem(step_plan.MODES, HALF_LAUNCH.name, HALF_LAUNCH)
    return HALF_LAUNCH


def _step(m, batch: int = 1):
    return simulate_step(CHAPTER.model, CHAPTER.hardware, StepPlan(m, batch))


def test_the_table_lists_it(one_launch):
    assert one_launch in modes(modelled=True) and one_launch not in modes(toggles=True)
    assert one_launch not in modes(probed=True) and step_plan.mode("one-launch") is one_launch
    assert one_launch.fused and one_launch.one_kernel and one_launch.title == "one-launch"


def test_the_simulator_schedules_it_as_its_row_says(one_launch):
    hw = CHAPTER.hardware
    one, fused, persistent = _step(one_launch), _step(FUSED), _step(PERSISTENT)
    tl = one.timeline
    # One host call, an eager launch (not a graph replay's cost), where fused launches every kernel.
    assert len(tl.cpu_start) == one.metrics.launches == 1 < fused.metrics.launches
    assert tl.cpu_dur[0] == hw.eager_launch_us != persistent.timeline.cpu_dur[0]
    # The fused kernels as phases: each costs a barrier, as the persistent kernel's phases do, not a
    # kernel's latency; the first starts once the launch is submitted, the rest back to back, no gap.
    assert tl.gpu_names == fused.timeline.gpu_names
    np.testing.assert_allclose(tl.gpu_dur, persistent.timeline.gpu_dur)
    assert not np.allclose(tl.gpu_dur, fused.timeline.gpu_dur)
    assert tl.gpu_start[0] == pytest.approx(hw.eager_launch_us)
    np.testing.assert_allclose(tl.gpu_start[1:], tl.gpu_start[:-1] + tl.gpu_dur[:-1])
    assert one.metrics.step_us == pytest.approx(hw.eager_launch_us + tl.gpu_dur.sum())
    assert one.timeline.label.endswith("· one-launch")


def test_the_sweep_schedules_it_as_the_step_does(one_launch):
    batches = np.array([1, 3, 8, 17, 64, 100, 300, 512])
    sw = sweep(CHAPTER.model, CHAPTER.hardware, batches)
    s = sw[one_launch]
    assert (s.launches == 1).all() and not s.replayed.any()
    for i, b in enumerate(batches):
        step = _step(one_launch, int(b)).metrics
        assert s.step_us[i] == pytest.approx(step.step_us, rel=1e-12)
        assert s.cpu_launch_us[i] == pytest.approx(step.cpu_launch_us, rel=1e-12)
        assert s.gpu_busy_us[i] == pytest.approx(step.gpu_busy_us, rel=1e-12)
    assert sw.crossover["one-launch"] == 1  # one launch never outlasts the kernels


def test_the_calibration_fits_a_cost_read_from_the_row(half_launch):
    """A run with the half-launch mode among its points: the fit reads the mode's launch scale from the table."""
    model = PRESETS["probe-0.5b-h200"].model.with_layers(8)
    result = load_result(synthetic_result(KNOWN_PARAMS, model, batches=(1, 8, 64)))
    assert "half-launch" in result.modes
    cal = calibrate(result)
    rows = [r for r in cal.rows() if r["mode"] == "half-launch"]
    assert len(rows) == 3 and all(abs(r["step error %"]) < 1.0 for r in rows)
    fused_host = {p.batch: p.host_us for p in cal.points if p.mode is FUSED}
    for p in cal.points:
        if p.mode is half_launch:
            assert p.host_us == pytest.approx(fused_host[p.batch] / 2)
    assert cal.params["triton_launch_us"] == pytest.approx(KNOWN_PARAMS["triton_launch_us"], rel=0.02)
    assert np.isfinite(cal.mode_loo_error("half-launch"))


def test_the_page_offers_it(one_launch):
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    choice = at.selectbox(key="mode")
    assert one_launch.title in choice.options  # shown by its title
    choice.set_value(one_launch.title).run()
    assert not at.exception, at.exception
    expected = _step(one_launch).metrics
    shown = {m.label: m.value for m in at.metric}
    assert shown["Kernels / step"] == f"1 · {expected.kernels:,} phases"
    sweep_chart = next(c for c in at.get("plotly_chart") if c.key == "sim_sweep")
    assert f"{one_launch.title} (current)" in sweep_chart.proto.spec
