"""Calibration: on runs the simulator itself generated, the fit recovers the parameters."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from core.probe_result import load_result
from sim.calibrate import (
    NAMES,
    PARAMS,
    ProbeSimulator,
    calibrate,
    main,
    points_from_result,
    synthetic_result,
)
from sim.config import PRESETS, HardwareConfig, Preset
from sim.least_squares import bounded_least_squares
from sim.kernels import step_kernels
from sim.probe_preset import calibrated_preset
from sim.schedule import StepSettings, simulate_step

from synthetic_params import KNOWN_PARAMS  # tests/synthetic_params.py

ROOT = Path(__file__).resolve().parents[1]
MODEL = PRESETS["probe-0.5b-h200"].model.with_layers(8)  # fewer layers: same physics, faster tests
TRUE = KNOWN_PARAMS
# The probe's eager step launches many more kernels than the chapter's 11 per layer.
EXTRA = {"eager": 8 * 30, "graph": 8 * 30 + 3, "fused": 8, "fused+graph": 10}


@pytest.fixture(scope="module")
def synthetic():
    return load_result(synthetic_result(TRUE, MODEL, extra_kernels=EXTRA))


@pytest.fixture(scope="module")
def calibration(synthetic):
    return calibrate(synthetic)


def test_fit_recovers_known_parameters(calibration):
    for name in NAMES:
        assert calibration.params[name] == pytest.approx(TRUE[name], rel=1e-4), name
        assert calibration.fitted[name], name
    assert calibration.median_loo_error < 1e-4
    assert np.abs(calibration.errors()).max() < 1e-4


def test_simulated_kernel_counts_follow_the_measured_ones(calibration):
    sim = calibration.simulator
    for i, p in enumerate(sim.points):
        tl = sim.timeline(calibration.theta, i)
        assert tl.metrics().kernels == p.kernels
        assert tl.metrics().launches == (1 if p.graphs else p.kernels)
    n_eager = len(step_kernels(MODEL, False)) + EXTRA["eager"]
    assert next(p for p in sim.points if p.mode == "eager").kernels == n_eager


def test_predictor_agrees_with_the_simulator_schedule():
    # No extra kernels, one launch cost and the simulator's own KV traffic: exactly `simulate_step`.
    params = dict(
        TRUE,
        fused_launch_us=TRUE["eager_launch_us"],
        kv_traffic_unfused=1.0,
        kv_traffic_fused=1.0,
        fused_hbm_GBps=TRUE["hbm_GBps"],
        graph_launch_per_node_us=1e-6,
    )
    hw = HardwareConfig(
        name="test",
        hbm_GBps=params["hbm_GBps"],
        matrix_TFLOPs=params["matrix_TFLOPs"],
        min_kernel_us=params["min_kernel_us"],
        eager_launch_us=params["eager_launch_us"],
        graph_launch_us=params["graph_launch_us"],
        graph_node_gap_us=params["graph_node_gap_us"],
    )
    result = load_result(synthetic_result(params, MODEL, batches=(1, 64)))
    sim = ProbeSimulator(MODEL, points_from_result(result))
    predicted = sim.predict(np.array([params[n] for n in NAMES]))
    for p, pred in zip(sim.points, predicted):
        step = simulate_step(MODEL, hw, StepSettings(batch=p.batch, fusion=p.fused, graphs=p.graphs)).metrics
        assert pred == pytest.approx([step.step_us, step.cpu_launch_us, step.gpu_busy_us], rel=1e-5)
        # and the drawn timeline agrees with the fast path
        tl = sim.timeline(np.array([params[n] for n in NAMES]), sim.points.index(p)).metrics()
        assert tl.step_us == pytest.approx(pred[0], rel=1e-9)


def test_recovery_with_noise_stays_close():
    noisy = load_result(synthetic_result(TRUE, MODEL, extra_kernels=EXTRA, noise=0.02, seed=3))
    cal = calibrate(noisy)
    # The host costs are pinned by every point; the predictions stay within the noise.
    for name in ("eager_launch_us", "fused_launch_us", "graph_launch_us"):
        assert cal.params[name] == pytest.approx(TRUE[name], rel=0.1), name
    assert cal.median_loo_error < 0.04


def test_leave_one_out_predicts_without_the_point():
    data = synthetic_result(TRUE, MODEL, extra_kernels=EXTRA)
    bad = next(r for r in data["runs"] if r["mode"] == "fused+graph" and r["batch"] == 8)
    bad["step_us_median"] *= 1.5  # one outlier the other points cannot explain
    bad["step_us_p90"] *= 1.6
    cal = calibrate(load_result(data))
    i = next(i for i, p in enumerate(cal.points) if p.mode == "fused+graph" and p.batch == 8)
    loo = cal.loo_errors()
    # Fitted without it, the point is predicted from its neighbours: about 1/1.5 - 1 = -33 %.
    assert loo[i] == pytest.approx(1 / 1.5 - 1, abs=0.03)
    assert abs(loo[i]) > abs(cal.errors()[i, 0])  # the in-sample fit hides part of the miss
    others = np.delete(np.abs(loo), i)
    assert np.median(others) < 0.05
    assert cal.median_loo_error == pytest.approx(np.median(np.abs(loo)))


def test_parameters_the_runs_do_not_constrain_are_held():
    only_eager = synthetic_result(TRUE, MODEL, modes=("eager",), extra_kernels=EXTRA)
    cal = calibrate(load_result(only_eager), loo=False)
    assert cal.fitted["eager_launch_us"] and not cal.fitted["graph_launch_us"]
    assert not cal.fitted["fused_launch_us"] and not cal.fitted["kv_traffic_fused"]
    assert cal.params["eager_launch_us"] == pytest.approx(TRUE["eager_launch_us"], rel=1e-3)


def test_bounded_solver_stops_at_the_bound():
    # Minimise (u - 3)^2 with u <= 1: the answer is the bound.
    u, cost, fitted = bounded_least_squares(
        lambda u: np.array([u[0] - 3.0, 0.0 * u[1]]), [0.0, 0.5], np.array([-5.0, -5.0]), np.array([1.0, 5.0])
    )
    assert u[0] == pytest.approx(1.0) and u[1] == 0.5 and cost == pytest.approx(4.0)
    assert fitted.tolist() == [True, False]


def test_fitted_values_respect_the_parameter_bounds(calibration):
    for p in PARAMS:
        assert p.low <= calibration.params[p.name] <= p.high


def test_calibrated_preset_follows_the_fused_kernels(synthetic, calibration):
    preset = calibrated_preset(synthetic, calibration)
    assert isinstance(preset, Preset) and preset.title == "probe decoder on synthetic GPU"
    sim_fused = len(step_kernels(MODEL, True))
    # The simulator has one figure of each: the fused family's, with the probe's extra kernels'
    # host time spread over its own launches, and the KV traffic as an effective context.
    assert preset.hardware.hbm_GBps == pytest.approx(TRUE["fused_hbm_GBps"], rel=1e-4)
    assert preset.hardware.eager_launch_us == pytest.approx(
        TRUE["fused_launch_us"] * (sim_fused + EXTRA["fused"]) / sim_fused, rel=1e-4
    )
    assert preset.hardware.graph_launch_us == pytest.approx(
        25.0 + 0.05 * (sim_fused + EXTRA["fused+graph"]), rel=1e-4
    )
    assert preset.model.n_layers == MODEL.n_layers
    assert preset.model.context_len == round(MODEL.context_len * TRUE["kv_traffic_fused"])
    # Its fused steps take the calibrated times, less the extra kernels' GPU time (here up to 10
    # kernels of 2.5 µs + 0.8 µs gap in a step of 290 µs at batch 1: 11 %).
    for point, predicted in zip(calibration.points, calibration.predicted):
        if point.fused:
            settings = StepSettings(batch=point.batch, fusion=True, graphs=point.graphs)
            step = simulate_step(preset.model, preset.hardware, settings).metrics
            assert step.step_us == pytest.approx(predicted[0], rel=0.12), point
            assert step.cpu_launch_us == pytest.approx(predicted[1], rel=1e-3), point
    assert "'vs unoptimised', are not the probe's" in preset.note
    step = simulate_step(preset.model, preset.hardware, StepSettings(batch=512, fusion=True, graphs=True))
    assert step.metrics.step_us > 0


def test_calibrated_preset_of_an_unfused_run_follows_the_unfused_kernels():
    run = load_result(synthetic_result(TRUE, MODEL, modes=("eager", "graph"), extra_kernels=EXTRA))
    preset = calibrated_preset(run)
    assert preset.hardware.hbm_GBps == pytest.approx(TRUE["hbm_GBps"], rel=1e-3)
    assert preset.model.context_len == round(MODEL.context_len * TRUE["kv_traffic_unfused"])
    assert "Kernel fusion off" in preset.note


def test_cli_prints_parameters_table_and_loo_line(tmp_path, capsys):
    path = tmp_path / "synthetic.json"
    path.write_text(json.dumps(synthetic_result(TRUE, MODEL, batches=(1, 8, 64), extra_kernels=EXTRA)))
    assert main([str(path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "median abs error: 0.0% (leave-one-out)"
    assert any(line.split()[:2] == ["hbm_GBps", "3600"] and "GB/s" in line for line in out)
    assert sum(line.startswith("fused+graph") for line in out) == 3


def test_cli_rejects_a_bad_file(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text('{"device": 3}')
    assert main([str(path)]) == 2
    assert "device" in capsys.readouterr().err


def test_a_run_without_model_fields_is_a_named_error():
    data = synthetic_result(TRUE, MODEL, batches=(1, 8), modes=("eager",))
    del data["model"]["config"]["ffn"]
    with pytest.raises(ValueError, match="model.config: missing field 'ffn'"):
        calibrate(load_result(data))


def test_calibration_imports_neither_torch_nor_scipy():
    code = (
        "import sys, sim.calibrate, core.probe_result; "
        "assert 'torch' not in sys.modules and 'scipy' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
