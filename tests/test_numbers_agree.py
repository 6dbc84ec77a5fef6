"""Issue 24, items 4 and 5: each figure the page shows comes from one source, and a newcomer is told why.

Each test was written against the page before its fix and failed there.
"""

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from core.probe_result import load_result
from core.step_plan import BASELINE, FUSED_GRAPH, GRAPH, StepPlan
from core.timeline import CPU_BOUND, GPU_BOUND, StepMetrics
from sim.calibration import calibrated_preset
from sim.config import PRESETS
from sim.step.kernels import step_kernels
from sim.step.schedule import simulate_step, sweep
from ui.common import regime_explanation

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
RECORDED = ROOT / "gpu_probe" / "recorded"


def test_a_graph_modes_crossover_is_not_broken_by_its_eager_fallback():
    """The probe's decoder with graphs is GPU-bound at every batch it replays (the readout says GPU at batch 1),
    and the eager steps above the largest bucket are CPU-bound: the crossover is batch 1, the fallback apart."""
    preset = PRESETS["probe-0.5b-h200"]
    sw = sweep(preset.model, preset.hardware, np.arange(1, 513))
    readout = simulate_step(preset.model, preset.hardware, StepPlan(GRAPH, 1)).metrics.bound_by
    assert readout == GPU_BOUND and sw.crossover[GRAPH.name] == 1
    assert sw.fallback_cpu_bound[GRAPH.name] == 257  # the first eager step above the largest bucket
    assert sw.fallback_cpu_bound[BASELINE.name] is None  # no fallback without graphs
    for b in range(1, 257):  # every batch from the crossover on is GPU-bound, as the caption says
        assert sw[GRAPH].bound_by[b - 1] == GPU_BOUND


def test_the_sweep_caption_says_where_the_fallback_starts():
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["preset"] = "probe-0.5b-h200"
    at.run()
    captions = " ".join(c.value for c in at.caption)
    assert "graphs: GPU-bound from batch 1 up to 256; above it the step runs eagerly, CPU-bound from 257" in (
        captions
    )


@pytest.mark.parametrize("name", ["1b.json", "small.json"])
def test_a_probe_rows_figures_come_from_one_step(name):
    """Step time, host time, utilisation and bound-by are all the step without the profiler."""
    result = load_result(RECORDED / name)
    for run in result.runs:
        m = run.untraced_metrics()
        assert m.step_us == run.step_us_median and m.cpu_launch_us == run.enqueue_us_median
        assert m.utilisation == pytest.approx(min(run.gpu_busy_us, run.step_us_median) / run.step_us_median)
        assert m.bound_by == (CPU_BOUND if run.enqueue_us_median > m.gpu_busy_us else GPU_BOUND)
    eager = result.run(BASELINE.name, 1).untraced_metrics()
    # The profiled eager step is ~3x the untraced one on the 1b run; utilisation is the untraced step's.
    assert eager.utilisation == pytest.approx(result.run(BASELINE.name, 1).gpu_busy_us / eager.step_us)


def test_the_calibrated_preset_launches_the_kernels_the_probe_measured():
    result = load_result(RECORDED / "small.json")
    preset = calibrated_preset(result)
    measured = result.run(FUSED_GRAPH.name, 1).kernels_per_step
    assert len(step_kernels(preset.model, FUSED_GRAPH)) == measured == 196


def test_a_balanced_step_names_the_side_it_is_bound_by():
    for cpu, gpu, side in ((100.0, 95.0, "CPU launches"), (95.0, 100.0, "the GPU")):
        bound = CPU_BOUND if cpu > gpu else GPU_BOUND
        m = StepMetrics(10, 10, cpu, gpu, max(cpu, gpu), 5.0, 0.9, bound)
        name, text = regime_explanation(m)
        assert name == "balanced" and f"bound by {side}" in text


def test_a_typed_batch_out_of_range_is_put_back_and_the_page_says_why():
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.number_input(key="batch").set_value(600).run()
    assert not at.exception
    assert at.number_input(key="batch").value == 512
    assert any("Batch size must be from 1 to 512 (got 600); using 512." in w.value for w in at.warning)
    at.number_input(key="batch").set_value(0).run()
    assert at.number_input(key="batch").value == 1
    assert any("(got 0); using 1" in w.value for w in at.warning)


def test_a_batch_between_stops_shows_as_approximately_the_nearest():
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.number_input(key="batch").set_value(33).run()
    slider = at.select_slider(key="batch_stops")
    assert slider.value == 32 and slider.format_func(32) == "≈32" and slider.format_func(48) == "48"
    at.number_input(key="batch").set_value(32).run()
    assert at.select_slider(key="batch_stops").format_func(32) == "32"  # exact: no ≈
