"""Calibration: on runs the timing model itself generated, the fit reproduces them; on the recorded runs, the goals."""

import gzip
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from recorded_fits import recorded_fit  # tests/recorded_fits.py: each shipped run fitted once
from synthetic_params import KNOWN_PARAMS  # tests/synthetic_params.py

from core.probe_result import RECORDED_PATH, load_result, recorded_result
from core.step_plan import FUSED_GRAPH, PERSISTENT, StepPlan, modes
from sim.calibration import PARAMS, calibrate, calibrated_preset, recorded_graph_cost, synthetic_result
from sim.calibration.least_squares import bounded_least_squares, fit_pinned, log_sigmas
from sim.calibration.model import model_from_result
from sim.calibration.report import loo_summary, main
from sim.config import PRESETS, Preset
from sim.step.schedule import simulate_step

ROOT = Path(__file__).resolve().parents[1]
MODEL = PRESETS["probe-0.5b-h200"].model.with_layers(8)  # fewer layers: same physics, faster tests
TRUE = KNOWN_PARAMS
RECORDED = ROOT / "gpu_probe" / "recorded"
# Identifiable from family totals at the synthetic batches: the GEMV and the tiles run in both paths, with other
# kernel counts (the unfused step's seven projections a layer, the fused step's four), so their latencies and
# bandwidths come apart; batch 32 gives the wider tiles a third batch. cuBLAS runs at batch 256 only, and no
# GEMM is compute-bound: the matrix rates and cuBLAS's figures are not here.
BATCHES = (1, 8, 32, 64, 256)
LAUNCH_SHARES = tuple(f"{k}_launch_share" for k in ("start", "aten", "cublas", "attention", "merge", "op"))
RECOVERED = (
    "gemv_latency_us",
    "gemv_GBps",
    "tile_gemm_latency_us",
    "tile_gemm_GBps",
    "tile_gemm_wide_latency_us",
    "tile_gemm_wide_GBps",
    "attention_latency_us",
    "attention_GBps",
    "triton_op_latency_us",
    "triton_op_GBps",
    "aten_latency_us",
    "aten_GBps",
    "split_merge_latency_us",
    "persistent_latency_us",
    "persistent_GBps",
    "pdl_hidden_share",
    "triton_launch_us",
    *LAUNCH_SHARES,
    "replay_us",
    "replay_per_node_us",
    "replay_per_row_us",
    "node_gap_us",
)


@pytest.fixture(scope="module")
def synthetic():
    # With split-K memsets above batch 4, as the probe's cuBLAS: its unfused graphs replay in pieces.
    return load_result(synthetic_result(TRUE, MODEL, batches=BATCHES, memsets=True))


@pytest.fixture(scope="module")
def calibration(synthetic):
    return calibrate(synthetic)


@pytest.fixture(scope="module")
def recorded_cal():
    return recorded_fit(RECORDED_PATH.name)


def test_fit_recovers_known_parameters(calibration):
    # The synthetic timelines are stored to the nanosecond (Timeline.to_dict), a few 1e-4 of a small
    # kernel; the wide tile GEMM's latency and bandwidth come from memory-bound batches whose bytes
    # differ only by their activations, which magnifies that rounding about tenfold.
    loose = {"tile_gemm_wide_latency_us": 3e-3, "tile_gemm_wide_GBps": 3e-3}
    for name in RECOVERED:
        assert calibration.params[name] == pytest.approx(TRUE[name], rel=loose.get(name, 1e-3)), name
        assert calibration.fitted[name], name
    assert calibration.median_loo_error < 1e-3
    assert np.abs(calibration.errors()).max() < 1e-3


def test_predicted_timeline_agrees_with_the_fast_path(calibration):
    for i, point in enumerate(calibration.points):
        tl = calibration.timeline(i)
        assert tl.metrics().kernels == point.kernels
        assert tl.metrics().launches == (1 if point.replays else point.kernels)
        assert tl.step_us == pytest.approx(calibration.predicted[i, 0], rel=1e-9)


def _with_a_host_outlier() -> dict:
    """The synthetic run with its eager step at batch 8 1.5 x slower on the host: an outlier the other points
    cannot explain."""
    data = synthetic_result(TRUE, MODEL)
    bad = next(r for r in data["runs"] if r["mode"] == "eager" and r["batch"] == 8)
    bad["enqueue_us_median"] *= 1.5
    for key in ("step_us_median", "step_us_p10", "step_us_p90"):
        bad[key] *= 1.5
    return data


def test_leave_one_out_predicts_without_the_point():
    data = _with_a_host_outlier()
    cal = calibrate(load_result(data))
    i = next(i for i, p in enumerate(cal.points) if p.mode.name == "eager" and p.batch == 8)
    loo = cal.loo_errors()
    assert loo[i] == pytest.approx(1 / 1.5 - 1, abs=0.03)  # predicted from the other eager steps
    assert np.median(np.abs(np.delete(loo, i))) < 0.02  # least absolute deviations ignore the outlier
    worst = loo_summary(cal)["worst_point"]
    assert (worst["mode"], worst["batch"]) == ("eager", 8) and worst["error"] == pytest.approx(loo[i])


def test_parameters_the_runs_do_not_constrain_are_held():
    from sim.calibration.model import LAUNCH_SHARE_START

    cal = calibrate(load_result(synthetic_result(TRUE, MODEL, modes=("eager",))), loo=False)
    # The unfused step at batches 1 to 256 launches every kind (cuBLAS's matmuls at 256): all are read off.
    assert cal.fitted["triton_launch_us"] and all(cal.fitted[n] for n in LAUNCH_SHARES)
    assert cal.params["triton_launch_us"] == pytest.approx(TRUE["triton_launch_us"], rel=1e-3)
    # No replay, no PDL chain, no persistent kernel: their figures stay where a fit starts.
    for name in ("replay_us", "node_gap_us", "pdl_hidden_share", "persistent_latency_us"):
        assert not cal.fitted[name], name
        assert cal.params[name] == next(p.start for p in PARAMS if p.name == name), name
    # A fused step alone launches no cuBLAS matmul, one-op kernel or ATen op but its start: those shares are held.
    fused = calibrate(load_result(synthetic_result(TRUE, MODEL, batches=(1, 8), modes=("fused",))), loo=False)
    held = {"cublas", "op", "aten"}
    for kind in ("start", "aten", "cublas", "attention", "merge", "op"):
        name = f"{kind}_launch_share"
        assert fused.fitted.get(name, False) == (kind not in held), name
        expected = LAUNCH_SHARE_START[kind] if kind in held else TRUE[name]
        assert fused.params[name] == pytest.approx(expected, rel=1e-3), name


def test_bounded_solver_stops_at_the_bound():
    # Minimise (u - 3)^2 with u <= 1: the answer is the bound.
    u, cost, fitted = bounded_least_squares(
        lambda u: np.array([u[0] - 3.0, 0.0 * u[1]]), [0.0, 0.5], np.array([-5.0, -5.0]), np.array([1.0, 5.0])
    )
    assert u[0] == pytest.approx(1.0) and u[1] == 0.5 and cost == pytest.approx(4.0)
    assert fitted.tolist() == [True, False]


# -- what the data pins (issue 36): the figures a fit reports do not depend on where a solver stopped ------------
def _kernel_times(latency, bandwidth, sizes):
    """log of a kernel's time at each size, latency + bytes / bandwidth: the model's shape, in log parameters."""
    return np.log(np.exp(latency) + sizes / np.exp(bandwidth))


def test_a_parameter_the_data_does_not_pin_is_held_where_every_start_agrees():
    """Two rates that the data sees only as their product (log a + log b, fitted to three noisy times): the
    plain solver stops anywhere along that valley, in a place that moves with the start (as it moved with the
    CPU's BLAS kernels on the recorded runs); fit_pinned holds one at its prior, so every start gives the same
    figures."""
    measured = np.log(6.0) + np.array([0.02, -0.01, -0.01])
    low, high, prior = np.log([0.01, 0.01]), np.log([100.0, 100.0]), np.log([2.0, 1.5])

    def residuals(u):
        return np.full(3, u[0] + u[1]) - measured

    starts = [np.log([1.0, 1.0]), np.log([10.0, 0.5]), np.log([0.2, 40.0])]
    plain = [bounded_least_squares(residuals, u0, low, high)[0] for u0 in starts]
    assert np.ptp([u[0] for u in plain]) > 1.0  # the same fit quality a factor e apart
    fits = [fit_pinned(residuals, [u0], low, high, prior) for u0 in starts]
    for f in fits:
        assert f.held.sum() == 1 and np.isfinite(f.sigma[~f.held]).all()
        assert np.exp(f.u.sum()) == pytest.approx(6.0, rel=1e-3)
    assert np.ptp([f.u for f in fits], axis=0).max() < 1e-7


def test_a_bandwidth_whose_bytes_cost_nothing_is_held_at_its_bound():
    """Sizes so small that the bytes cost nothing beside the latency: the data asks for a high bandwidth and
    tells nothing more. Held exactly at its upper bound ("at least 20,000 GB/s"); the latency, pinned, is the
    truth."""
    sizes = np.array([1.0, 2.0, 3.0])
    measured = _kernel_times(np.log(2.0), np.log(1e9), sizes)
    low, high, prior = np.log([0.05, 10.0]), np.log([200.0, 20_000.0]), np.log([2.0, 3000.0])

    def residuals(u):
        return _kernel_times(u[0], u[1], sizes) - measured

    fit = fit_pinned(residuals, [np.log([1.0, 500.0])], low, high, prior)
    assert fit.held.tolist() == [False, True] and fit.u[1] == high[1]
    assert np.exp(fit.u[0]) == pytest.approx(2.0, rel=1e-3)


def test_two_parameters_pinned_only_together_are_pinned_once_one_is_held():
    """One size only: latency + bytes / bandwidth is pinned, neither alone (an infinite interval for both). The
    wider is held at its prior, and the other then comes out pinned, with a finite interval."""
    sizes = np.array([100.0])
    measured = _kernel_times(np.log(2.0), np.log(50.0), sizes)
    low, high, prior = np.log([0.05, 10.0]), np.log([200.0, 20_000.0]), np.log([1.0, 3000.0])

    def residuals(u):
        return _kernel_times(u[0], u[1], sizes) - measured

    sigma = log_sigmas(residuals, np.log([2.0, 50.0]), np.array([True, True]))
    assert np.isinf(sigma).all()
    fit = fit_pinned(residuals, [np.log([2.0, 3000.0])], low, high, prior)
    assert fit.held.sum() == 1 and np.isfinite(fit.sigma[~fit.held]).all()
    assert np.exp(residuals(fit.u)).tolist() == pytest.approx([1.0], abs=1e-6)  # the one time is still met


def test_a_parameter_pinned_past_a_kink_is_not_held():
    """A time that is max(a, b): near the kink the local interval of `a` reaches its bound, but holding it at
    its prior makes the fit worse than the data allows, so it stays free (pinned)."""
    measured = np.array([np.log(5.0), np.log(5.0) + 0.5])

    def residuals(u):
        return np.array([max(u[0], u[1]), u[0] + 0.5]) - measured

    low, high, prior = np.array([-5.0, -5.0]), np.array([5.0, np.log(5.0) - 1e-3]), np.array([0.0, 0.0])
    fit = fit_pinned(residuals, [np.array([1.0, 1.0])], low, high, prior)
    assert not fit.held[0] and fit.u[0] == pytest.approx(np.log(5.0), abs=1e-6)


def test_the_recorded_fit_says_what_the_data_pins(recorded_cal):
    pins = recorded_cal.pins
    assert set(pins) == {p.name for p in PARAMS}
    # The small run's split merges are a few µs each: their bytes cost nothing measurable (at least the bound).
    merge = pins["split_merge_GBps"]
    assert merge.status == "held" and merge.held_at == "upper bound"
    assert recorded_cal.params["split_merge_GBps"] == next(p.high for p in PARAMS if p.name == merge_name())
    gemv = pins["gemv_GBps"]
    assert gemv.status == "pinned" and gemv.low < recorded_cal.params["gemv_GBps"] < gemv.high
    assert pins["cublas_gemv_latency_us"].status == "no data"  # no step ran cuBLAS at batch 1-4
    assert "pinned: " in gemv.describe("GB/s") and "upper bound" in merge.describe("GB/s")


def merge_name() -> str:
    return "split_merge_GBps"


def test_fitted_values_respect_the_parameter_bounds(recorded_cal):
    for p in PARAMS:
        assert p.low <= recorded_cal.params[p.name] <= p.high


def _loo_by_mode(cal) -> dict[str, list[float]]:
    out = {}
    for p, e in zip(cal.points, cal.loo_errors()):
        out.setdefault(p.mode.name, []).append(float(e))
    return out


def _meets(errors: list[float]) -> bool:
    """Issue 28's goal for one mode: its median leave-one-out error within 10 %, no point beyond 25 %."""
    from sim.calibration import GOAL, WORST_GOAL

    return float(np.median(np.abs(errors))) <= GOAL and max(abs(e) for e in errors) <= WORST_GOAL


def test_recorded_run_meets_the_goals_where_the_data_allows(recorded_cal):
    # Goals (issue 28): every mode's median leave-one-out error <= 10 %, no point beyond 25 %. On the small run
    # the four modes the toggles select meet them; the persistent kernel, measured at two batches of its own
    # (1 and 8; above 8 rows the mode runs the fused step), does not: each is predicted from the other alone.
    by_mode = _loo_by_mode(recorded_cal)
    assert all(_meets(by_mode[m]) for m in ("eager", "fused", "graph", "fused+graph")), by_mode
    assert not _meets(by_mode["persistent"])


def test_the_1b_run_meets_the_goals_in_its_gpu_bound_modes():
    """The 1b run (H200, 2026-12-07): its GPU-bound modes and its fused (eager) mode meet issue 28's goals left
    out; its eager mode's median misses (its host time at batches 1-64 comes out 14-16 % short of the measured:
    the launch kinds' shares are read off profiled steps). The persistent kernel ran at two batches, and its
    family has four figures: a point left out is predicted from the other alone (docs/calibration.md), so the
    mode misses; its two fallback steps (the fused kernels run eagerly above eight rows) are not the mode's,
    and not points (issue 37)."""
    from sim.calibration import GOAL, WORST_GOAL

    cal = recorded_fit("1b.json")
    by_mode = _loo_by_mode(cal)
    assert _meets(by_mode["graph"]) and _meets(by_mode["fused+graph"]) and _meets(by_mode["fused"])
    assert abs(loo_summary(cal)[f"{FUSED_GRAPH.slug}_b1"]) <= GOAL
    assert not _meets(by_mode["eager"]) and max(abs(e) for e in by_mode["eager"]) <= WORST_GOAL
    kernel = [
        (p.batch, e)
        for p, e in zip(cal.points, cal.loo_errors())
        if p.mode is PERSISTENT and p.runs is PERSISTENT
    ]
    fallback = [p.batch for p in cal.points if p.mode is PERSISTENT and p.runs is not PERSISTENT]
    assert [b for b, _ in kernel] == [1, 8] and all(abs(e) > WORST_GOAL for _, e in kernel)
    assert fallback == [] and [
        r.batch for r in load_result(RECORDED / "1b.json").runs if r.eager_fallback
    ] == [64, 256]


def test_recorded_graph_cost_is_the_calibrated_one_and_cached(recorded_cal):
    cost = recorded_graph_cost()
    assert cost is recorded_graph_cost()
    assert cost == recorded_cal.graph_cost
    assert 0 < cost.node_gap_us < 2 and 0 < cost.per_node_host_us < 2
    assert 30 < cost.host_us(180) < 80  # the fused+graph replays: 40-47 µs for ~200 nodes (H200, 2026-12-07)


def test_calibrated_preset_follows_the_fused_kernels(recorded_cal):
    result = recorded_result()
    preset = calibrated_preset(result, recorded_cal)
    assert (
        isinstance(preset, Preset)
        and preset.title == f"probe decoder on {result.device.replace('NVIDIA ', '')}"
    )
    assert preset.hardware.hbm_GBps == pytest.approx(recorded_cal.params["gemv_GBps"])
    # The fused+graph batch-1 step, the page's headline, lands near the measured one.
    step = simulate_step(preset.model, preset.hardware, StepPlan(FUSED_GRAPH, 1))
    assert step.metrics.step_us == pytest.approx(result.run(FUSED_GRAPH.name, 1).step_us_median, rel=0.25)


def test_cli_prints_parameters_points_and_the_worst_point(tmp_path, capsys):
    path = tmp_path / "synthetic.json"
    path.write_text(json.dumps(synthetic_result(TRUE, MODEL, batches=(1, 8, 64))))
    assert main([str(path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("Leave-one-out: median error 0.0 %; worst mode")
    assert "worst point" in out[-1] and out[-1].endswith(
        "Meets the goals (every mode ≤ 10 %, no point beyond 25 %, fused+graph b1 ≤ 10 %)."
    )
    assert any(line.split()[:2] == ["triton_launch_us", f"{TRUE['triton_launch_us']:.4g}"] for line in out)
    assert sum(line.startswith("fused+graph") for line in out) == 3


def test_cli_json_and_check_on_a_gzipped_run(tmp_path, capsys):
    one, other = tmp_path / "one.json", tmp_path / "other.json.gz"
    one.write_text(json.dumps(synthetic_result(TRUE, MODEL, batches=(1, 8, 64))))
    other.write_bytes(gzip.compress(json.dumps(synthetic_result(TRUE, MODEL, batches=(1, 16))).encode()))
    assert main([str(one), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # Every modelled mode at three batches, but the persistent mode at 64, its fallback: not its own step.
    assert len(data["points"]) == 3 * len(modes(modelled=True)) - 1
    assert set(data["points"][0]) == {"mode", "batch", "step_us_measured", "step_us_predicted", "step_us_loo"}
    assert main([str(one), "--check", str(other), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert sorted({p["batch"] for p in data["points"]}) == [1, 16]  # OTHER's points
    for p in data["points"]:
        assert p["step_us_predicted"] == pytest.approx(p["step_us_measured"], rel=1e-3)
    assert main([str(one), "--check", str(other)]) == 0
    assert "Fit on one run, predict the other" in capsys.readouterr().out


def test_cli_rejects_a_bad_file(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text('{"device": 3}')
    assert main([str(path)]) == 2
    assert "device" in capsys.readouterr().err
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"not gzip")
    assert main([str(bad)]) == 2


def test_a_run_without_model_fields_is_a_named_error():
    data = synthetic_result(TRUE, MODEL, batches=(1, 8), modes=("eager",))
    del data["model"]["config"]["ffn"]
    with pytest.raises(ValueError, match="model.config: missing field 'ffn'"):
        calibrate(load_result(data))


def test_calibration_imports_neither_torch_nor_scipy():
    code = (
        "import sys, sim.calibration, sim.calibration.report, core.probe_result; "
        "assert 'torch' not in sys.modules and 'scipy' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_families_follow_the_probe_kernels_choices():
    # sim.calibration.families and sim.step.kernel_sets restate the probe kernels' rules (sim imports no torch):
    # the GEMV's row limit, the 16-row tile, cuBLAS above the tiles' rows, the persistent kernel's rows, the
    # shapes that run unpipelined. They must agree.
    linear = pytest.importorskip("gpu_probe.kernels.linear")
    persistent = pytest.importorskip("gpu_probe.kernels.persistent")
    from gpu_probe.config import get_config
    from sim.calibration import families
    from sim.step import kernel_sets

    assert kernel_sets.GEMV_MAX_ROWS == linear.GEMV_MAX_ROWS
    assert kernel_sets.TILE_MAX_ROWS == linear.TILE_MAX_ROWS
    assert kernel_sets.PERSISTENT_SET.probe.max_rows == persistent.MAX_ROWS
    for preset in ("small", "1b"):
        cfg = get_config(preset)
        # What a result file records is what the kernel does, read back as the calibration reads it.
        named = families.unpipelined_gemms(
            SimpleNamespace(settings={"unpipelined_gemms": linear.unpipelined_gemms(cfg)})
        )
        model = model_from_result(SimpleNamespace(model={"config": cfg.to_dict()}, settings={}))
        for gemm in ("qkv", "o", "gate_up", "down", "lm_head"):
            n, k, swiglu = families.gemm_shape(model, gemm)
            # One tile configuration from GEMV_MAX_ROWS + 1 up to TILE_ROWS rows, another just above.
            configs = [linear._tile_config(m, n, k, swiglu, 132) for m in range(5, families.TILE_ROWS + 2)]
            assert all(c == configs[0] for c in configs[:-1]) and configs[-1] != configs[0]
            assert (linear._tile_config(64, n, k, swiglu, 132)["num_stages"] == 1) == (
                (n, k, swiglu) in named
            )
    # A file names its shapes (the recorded runs: none); files made before the rule changed read as the 1b
    # preset's gate/up and LM head, no small-preset shape.
    named = recorded_result().settings["unpipelined_gemms"]
    assert families.unpipelined_gemms(recorded_result()) == {tuple(shape) for shape in named}
    assert families.unpipelined_gemms(SimpleNamespace(settings={})) == {
        (8192, 2048, True),
        (128256, 2048, False),
    }


@pytest.mark.parametrize(
    "bad",
    [
        {"a": 1},
        [[1, 2]],
        [[1, 2, "yes"]],
        [[0, 2, True]],
        [[1.5, 2, True]],
        [[True, 2, True]],
        [[1, 2, True]] * 17,
    ],
)
def test_a_malformed_unpipelined_gemms_entry_is_named(bad):
    from sim.calibration.families import unpipelined_gemms

    with pytest.raises(ValueError, match=r"settings\.unpipelined_gemms"):
        unpipelined_gemms(SimpleNamespace(settings={"unpipelined_gemms": bad}))


def test_the_1b_runs_gemms_are_told_apart_by_shape():
    # The tile's name is one for every shape: a fused step's GEMMs are counted off in the probe's order, so a run
    # whose gate/up and LM head ran unpipelined (the rule before 2026-12-02) puts those in families of their own.
    from core.probe_result import load_result as load
    from sim.calibration.families import UNPIPELINED_BEFORE_2026_12_02, classify_step, unpipelined_gemms
    from sim.calibration.model import model_from_result

    one_b = load(RECORDED / "1b.json")
    model = model_from_result(one_b)
    run = one_b.run("fused+graph", 64)
    assert unpipelined_gemms(one_b) == {tuple(shape) for shape in one_b.settings["unpipelined_gemms"]}
    old = UNPIPELINED_BEFORE_2026_12_02
    fams = [f for f in classify_step(model, run.timeline.gpu_names, 64, unpipelined=old) if "gemm" in f]
    assert fams[:4] == [
        "tile_gemm_wide",
        "tile_gemm_wide",
        "unpiped_gemm_wide",
        "tile_gemm_wide",
    ]  # qkv, o, gate/up, down
    assert (
        fams[-1] == "unpiped_gemm_wide" and fams.count("unpiped_gemm_wide") == model.n_layers + 1
    )  # + LM head
    at_8 = [
        f
        for f in classify_step(model, one_b.run("fused", 8).timeline.gpu_names, 8, unpipelined=old)
        if "gemm" in f
    ]
    assert set(at_8) == {"tile_gemm", "unpiped_gemm"}
    small = recorded_result().run("fused+graph", 64)
    small_model = model_from_result(recorded_result())
    assert {
        f for f in classify_step(small_model, small.timeline.gpu_names, 64, unpipelined=old) if "gemm" in f
    } == {"tile_gemm_wide"}  # no small-preset shape in that rule
    # Above 64 rows both paths' GEMMs are cuBLAS's, whatever the rule.
    for mode in ("eager", "fused"):
        wide = classify_step(model, one_b.run(mode, 256).timeline.gpu_names, 256, unpipelined=old)
        assert "cublas" in wide and not any("gemm" in f for f in wide), mode


def test_a_check_names_the_families_the_fit_had_no_data_for():
    # A run made after the kernel change (gate/up unpipelined) predicted by a fit on one made before it.
    from sim.calibration.families import gemm_shape
    from sim.calibration.report import format_report
    from sim.step.kernel_sets import GEMV_MAX_ROWS, PERSISTENT_MAX_ROWS, TILE_MAX_ROWS

    cal = recorded_fit(RECORDED_PATH.name, loo=False)
    before = load_result(RECORDED / "small-holdout.json")
    assert not any(p["unfitted"] for p in cal.check(before))
    after = json.loads((RECORDED / "small-holdout.json").read_text())
    after["settings"]["unpipelined_gemms"] = [list(gemm_shape(cal.model, "gate_up"))]
    check = cal.check(load_result(after))

    # The fused kernels between the GEMV's rows and cuBLAS's (the persistent mode's fallback at 64 included):
    # batch 8, the 16-row tile; batch 64, the wider tiles.
    def runs_fused_tiles(p: dict) -> bool:
        fallback = p["mode"] == "persistent" and p["batch"] > PERSISTENT_MAX_ROWS
        return (p["mode"] in ("fused", "fused+graph") or fallback) and GEMV_MAX_ROWS < p[
            "batch"
        ] <= TILE_MAX_ROWS

    tiled = [p for p in check if runs_fused_tiles(p)]
    assert {tuple(p["unfitted"]) for p in tiled} == {("unpiped_gemm",), ("unpiped_gemm_wide",)}
    assert not any(p["unfitted"] for p in check if p not in tiled)
    assert "no data for (unpiped_gemm, unpiped_gemm_wide)" in format_report(cal, check)


# -- the host side (issue 22, item 6) ----------------------------------------------------------------
RECORDED_RUNS = ("small.json", "small-holdout.json", "1b.json")


def test_a_replay_in_pieces_starts_its_nodes_as_the_call_reaches_them():
    from sim.timing import GraphReplayCost, graph_replay_timeline

    cost = GraphReplayCost(
        launch_us=30.0, per_node_host_us=0.5, node_gap_us=0.4, input_copy_us=9.0, per_row_host_us=2.0
    )
    dur, names = np.full(100, 2.0), ["k"] * 100
    whole = graph_replay_timeline(dur, names, cost, rows=64)
    pieces = graph_replay_timeline(dur, names, cost, rows=64, in_pieces=True)
    # Without memset nodes: no per-row cost, and the nodes wait for the call (9 + 30 + 100 × 0.5 µs).
    assert whole.cpu_dur[0] == pytest.approx(89.0) and whole.gpu_start[0] == pytest.approx(89.0)
    # In pieces: the call grows by 2 µs a row, and the first node starts once the call has reached it.
    assert pieces.cpu_dur[0] == pytest.approx(89.0 + 2.0 * 64)
    assert pieces.gpu_start[0] == pytest.approx(9.0 + 30.0 + 0.5)
    assert pieces.step_us == pytest.approx(39.5 + 100 * 2.0 + 99 * 0.4)  # GPU-bound from the first node
    for tl, in_pieces in ((whole, False), (pieces, True)):
        assert tl.step_us == pytest.approx(cost.step_us(dur, rows=64, in_pieces=in_pieces))
    # A host-bound replay in pieces ends with its call.
    assert cost.step_us(np.full(10, 0.1), rows=256, in_pieces=True) == pytest.approx(
        cost.host_us(10, 256, True)
    )


def test_the_new_host_terms_leave_every_simulator_preset_as_it_was():
    # Their defaults add nothing: a replay not made in pieces pays no per-row cost at any batch.
    for preset in PRESETS.values():
        cost = preset.hardware.replay_cost
        assert cost.per_row_host_us == 0.0
        fixed = preset.hardware.graph_launch_us + 200 * preset.hardware.graph_node_host_us
        assert cost.host_us(200) == cost.host_us(200, rows=256) == pytest.approx(fixed)
        np.testing.assert_array_equal(cost.ready_us(200), np.full(200, cost.host_us(200)))


def test_a_per_row_replay_cost_is_recovered_only_where_graphs_replay_in_pieces():
    params = dict(TRUE, replay_per_row_us=3.0)
    pieces = calibrate(load_result(synthetic_result(params, MODEL, memsets=True)), loo=False)
    assert pieces.params["replay_per_row_us"] == pytest.approx(3.0, rel=1e-3)
    assert pieces.params["replay_us"] == pytest.approx(TRUE["replay_us"], rel=1e-3)
    from sim.calibration.families import TILE_MAX_ROWS

    replays = {(p.mode.name, p.batch): p.in_pieces for p in pieces.points if p.replays}
    # cuBLAS's split-K memset before the LM head, above the tiles' rows: those graphs replay in pieces.
    assert {k for k, v in replays.items() if v} == {k for k in replays if k[1] > TILE_MAX_ROWS}
    assert len([k for k in replays if k[1] > TILE_MAX_ROWS]) == 2
    assert np.abs(pieces.errors()[:, :2]).max() < 1e-3
    # Without memset nodes no replay is made in pieces: nothing constrains the term, which stays at 0.
    whole = calibrate(load_result(synthetic_result(params, MODEL)), loo=False)
    assert not whole.fitted["replay_per_row_us"] and whole.params["replay_per_row_us"] == 0.0


def test_the_launch_kinds_shares_are_read_off_the_profiled_steps():
    # The synthetic profile has no profiler cost: each share is the one it was made with.
    synthetic = calibrate(load_result(synthetic_result(TRUE, MODEL)), loo=False)
    for name in LAUNCH_SHARES:
        assert synthetic.params[name] == pytest.approx(TRUE[name], rel=1e-6) and synthetic.fitted[name], name
    # The recorded runs launched the same way (settings.launcher "bound": the H200 runs of 2026-12-07): each kind
    # costs about the same share of a Triton GEMM's launch in both, within 1.6x. The older hold-out
    # launched through kernel[grid]: there a Triton launch cost 45 µs, and every share is another.
    cals = {n: recorded_fit(n, loo=False) for n in RECORDED_RUNS}
    bound = [c for n, c in cals.items() if load_result(RECORDED / n).settings.get("launcher") == "bound"]
    assert len(bound) == 2
    for name in LAUNCH_SHARES:
        if name == "merge_launch_share":  # read off the small run; the 1b run's steps never link it to a GEMM
            continue
        shares = [c.params[name] for c in bound]
        assert all(c.fitted[name] for c in bound) and max(shares) < 1.6 * min(shares), (name, shares)
    # How steadily: the eager and fused host times the fit misses by over 10 %. The small runs' at batch 1 at most
    # (the hold-out's fastest points); the 1b run's at the eager steps and the fused step at 256 rows, where
    # cuBLAS's wide launches cost the host more than their share says (docs/calibration.md).
    off = {
        n: {(p.mode.name, p.batch) for p, e in zip(c.points, c.errors()[:, 1]) if abs(e) > 0.10}
        & {(p.mode.name, p.batch) for p in c.points if p.mode.name in ("eager", "fused")}
        for n, c in cals.items()
    }
    assert all(off[n] <= {("eager", 1), ("fused", 1)} for n in ("small.json", "small-holdout.json")), off
    assert off["1b.json"] <= {("eager", b) for b in (1, 8, 64, 256)} | {("fused", 256)}, off


def test_the_node_gap_is_read_off_the_unprofiled_graph_steps():
    """The profiler widens the gaps between replayed kernels it records; the fit reads the gap off the unprofiled
    steps instead: (step - host call - busy) / gaps over the replays whose nodes queue after the call."""
    for name in RECORDED_RUNS:
        cal = recorded_fit(name, loo=False)
        unprofiled = [p.unprofiled_gap_us for p in cal.points if np.isfinite(p.unprofiled_gap_us)]
        profiled = np.concatenate([p.node_gaps for p in cal.points if p.replays and not p.pdl_chain])
        assert len(unprofiled) >= 3 and cal.fitted["node_gap_us"], name
        assert cal.params["node_gap_us"] == pytest.approx(np.median(unprofiled)), name
        assert max(unprofiled) < np.median(profiled), name  # every graph's, below the profiled median


def test_a_memset_is_launched_by_its_matmul_call():
    """cuBLAS's split-K memset comes out of the matmul call, which its launch interval holds; the matmul's own kernel
    launch right after it costs next to nothing. So the memset takes cuBLAS's launch kind, not an ATen op's."""
    from sim.calibration.families import HOSTS, INDEX
    from sim.calibration.model import host_kinds

    names = ("embedding", "Memset (Device)", "nvjet_tst", "vectorized_elementwise_kernel")
    kinds = host_kinds(
        np.array([INDEX["aten"], INDEX["aten"], INDEX["cublas"], INDEX["aten"]]), names, eager=True
    )
    assert [HOSTS[k] for k in kinds] == ["start", "cublas", "cublas", "aten"]
    assert [HOSTS[k] for k in host_kinds(np.array([INDEX["aten"]] * 2), names[:2], eager=False)] == [
        "aten",
        "cublas",
    ]


def test_replays_start_their_nodes_once_the_call_has_submitted_their_piece():
    """A replay's first node starts once the call has returned; one holding a memset node, once the call has
    submitted the piece before it (`piece_ready_us`). In the runs of 2026-12-06 the only memset is cuBLAS's before
    the 1b LM head above 64 rows, so its first piece is nearly the whole graph: every replay's first node starts
    within 7 µs of when the model has it ready. Node by node (`GraphReplayCost.ready_us`, right for the older runs'
    memset in every layer), the in-pieces replays' first node would have been ready tens of µs earlier."""
    from sim.calibration.model import INPUT_COPY, graph_cost, piece_ready_us

    lag, pieces, early = {}, [], []
    for name in (*RECORDED_RUNS, "small-b1.json"):
        result = load_result(RECORDED / name)
        runs = {(r.mode, r.batch): r for r in result.runs}
        cal = calibrate(result, loo=False)
        cost = graph_cost(cal.params)
        for p in cal.points:
            if not p.replays:
                continue
            tl = runs[(p.mode.name, p.batch)].timeline
            nodes = np.array([INPUT_COPY not in n for n in tl.gpu_names])
            first = int(np.flatnonzero(nodes)[0])
            measured = tl.gpu_start[first] - tl.cpu_end.max()  # after the call's end: > 0
            host = cost.host_us(p.kernels, p.rows, p.in_pieces)
            ready = piece_ready_us(cost, p.piece_nodes)[first] if p.in_pieces else host
            lag[(name, p.mode.name, p.batch)] = measured - (ready - host)
            if p.in_pieces:
                pieces.append((name, p.mode.name, p.batch))
                early.append(host - cost.ready_us(p.kernels, p.rows, True)[first])
    assert pieces == [("1b.json", "graph", 256), ("1b.json", "fused+graph", 256)]
    steady = {k: v for k, v in lag.items() if k not in pieces}
    assert all(-1.0 < v < 7.0 for v in steady.values()), steady
    # In pieces, the first node starts within the steady replays' window of its piece's predicted readiness.
    assert all(-1.0 < lag[k] < 7.0 for k in pieces), {k: lag[k] for k in pieces}
    # Node by node it would have been ready earlier than any steady replay's lag allows: 6-8 µs on the H200 run's
    # quick host (a ~50 µs call; 19-46 µs on the slow H100 host of 2026-12-06, whose call took ~200 µs).
    assert min(early) > max(steady.values()), (early, max(steady.values()))


# -- the figures docs/calibration.md quotes ----------------------------------------------------------
DOC_RUNS = {
    "recorded": "small.json",
    "hold-out": "small-holdout.json",
    "1b": "1b.json",
    "small b1": "small-b1.json",
    "1b persistent": "1b-persistent.json",
}


def _doc_table(heading: str, header: bool = False):
    """The rows of the table under the doc's `### heading`: first cell -> the others (with `header`, also the
    header row's columns after the first)."""
    lines = (ROOT / "docs" / "calibration.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("### ") and heading in line)
    table = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("| ") and not line.startswith("| ---"):
            table.append([c.strip() for c in line.strip().strip("|").split("|")])
    rows = {cells[0]: cells[1:] for cells in table[1:]}  # below the header row
    return (rows, table[0][1:]) if header else rows


STEP_COLUMNS = [*(m.name for m in modes(modelled=True)), f"{FUSED_GRAPH.name} b1"]


def _cells(s: dict, columns=STEP_COLUMNS) -> list[str]:
    """A summary as the doc's cells: each mode's median (worst point), "—" for a mode the run has no point of,
    and fused+graph at batch 1 where the columns end with it."""
    cells = []
    for column in columns:
        if column == f"{FUSED_GRAPH.name} b1":
            cells.append(
                f"{100 * s[f'{FUSED_GRAPH.slug}_b1']:+.1f} %"
                if s[f"{FUSED_GRAPH.slug}_b1"] is not None
                else "—"
            )
        elif column in s["by_mode"]:
            e, b, w = s["by_mode"][column]
            cells.append(f"{100 * e:.1f} % (b{b} {100 * w:+.1f} %)")
        else:
            cells.append("—")
    return [c.replace("-", "−") for c in cells]


@pytest.fixture(scope="module")
def doc_cals():
    return {name: recorded_fit(DOC_RUNS[name]) for name in ("recorded", "hold-out", "1b")}


def test_the_docs_left_out_figures_are_the_fits(doc_cals):
    rows, columns = _doc_table("Step time, left out", header=True)
    assert columns == STEP_COLUMNS  # every mode the fit represents, then the headline
    shipped = {name.split(" (")[0]: cells for name, cells in rows.items()}
    assert set(shipped) == set(doc_cals)
    for name, cells in shipped.items():
        assert name + f" ({DOC_RUNS[name]})" in rows  # each row names its file
        assert cells == _cells(loo_summary(doc_cals[name])), name


def test_the_docs_cross_run_figures_are_the_fits(doc_cals):
    from sim.calibration.report import check_summary

    rows, columns = _doc_table("Step time, fit on one run, predict another", header=True)
    assert len(rows) == 4 and columns == STEP_COLUMNS
    for name, cells in rows.items():
        fit_on, other = name.split(" → ")
        check = doc_cals[fit_on].check(load_result(RECORDED / DOC_RUNS[other]))
        assert cells == _cells(check_summary(check)), name


def test_the_docs_host_figures_are_the_fits(doc_cals):
    from sim.calibration.report import check_summary

    rows, columns = _doc_table("Host time alone", header=True)
    assert len(rows) == 5 and columns == STEP_COLUMNS[:-1]
    for name, cells in rows.items():
        if name.endswith(", left out"):
            s = loo_summary(doc_cals[name.removesuffix(", left out")], "host")
        else:
            fit_on, other = name.split(" → ")
            s = check_summary(doc_cals[fit_on].check(load_result(RECORDED / DOC_RUNS[other])), "host")
        assert cells == _cells(s, columns), name


# -- issue 29, item 3: the persistent kernel is instruction-bound past batch 2 -----------------------------------
def test_an_instruction_bound_persistent_kernel_is_fitted_and_predicted_left_out():
    """Generated with the persistent kernel's FMAs at 9.5 TFLOP/s and its other instructions at 9 TB/s of bytes:
    memory-bound at batch 1, instruction-bound from batch 2 on (as the 1b run's kernel, at other figures). The fit
    reproduces every step, and predicts each instruction-bound one from the others when left out. (Its latency and
    the bytes' share of the instructions are one sum here, each step streaming about the same bytes: the test
    checks the steps, not those two.)"""
    known = {**TRUE, "persistent_latency_us": 5.0, "persistent_TFLOPs": 9.5, "persistent_issue_GBps": 9000.0}
    data = synthetic_result(known, MODEL, batches=(1, 2, 4, 8), modes=(FUSED_GRAPH.name, "persistent"))
    cal = calibrate(load_result(data))
    assert np.abs(cal.errors()).max() < 1e-3
    bound = [i for i, p in enumerate(cal.points) if p.mode.name == "persistent" and p.batch >= 2]
    assert np.abs(cal.loo_errors()[bound]).max() < 1e-3


def test_the_persistent_run_meets_the_goal_at_its_persistent_kernels_points():
    """The 1b persistent run (H200): left out of the fit, each persistent-kernel step is predicted within the
    calibration goal (its mode's median within GOAL, no point beyond WORST_GOAL); it missed by 58 % (median)
    when the model had no instruction-bound term. Its points are labelled 'calibrated' on the page."""
    from sim.calibration import GOAL, WORST_GOAL

    path = RECORDED / DOC_RUNS["1b persistent"]
    if not path.is_file():
        pytest.skip("the persistent kernel's recorded run is not shipped")
    cal = recorded_fit(path.name)
    mine = [i for i, p in enumerate(cal.points) if p.mode.name == "persistent"]
    assert len(mine) >= 3
    assert cal.mode_loo_error("persistent") <= GOAL
    assert all(abs(cal.loo_errors()[i]) <= WORST_GOAL for i in mine)
    assert all(cal.holds_at(i) and cal.verdict_at(i).startswith("calibrated to this run") for i in mine)


def test_a_point_the_fit_misses_is_labelled_a_model_off_by_its_error():
    data = _with_a_host_outlier()
    cal = calibrate(load_result(data))
    i = next(i for i, p in enumerate(cal.points) if p.mode.name == "eager" and p.batch == 8)
    err = cal.loo_errors()[i]
    assert not cal.holds_at(i) and abs(err) > 0.25
    assert cal.verdict_at(i).startswith(f"model, off by {100 * err:+.1f} % at this point")
    assert (
        calibrate(load_result(data), loo=False)
        .verdict_at(i)
        .startswith("model fitted to this run (not checked")
    )
    assert f"is predicted {100 * err:+.1f} % off" in cal.verdict_detail(i)


def test_the_docs_persistent_run_figures_are_the_fit():
    rows, columns = _doc_table("Step time, left out, the persistent run", header=True)
    (name, cells), *others = rows.items()
    assert not others and name == f"1b persistent ({DOC_RUNS['1b persistent']})"
    cal = recorded_fit(DOC_RUNS["1b persistent"])
    assert columns == [FUSED_GRAPH.name, "persistent", f"{FUSED_GRAPH.name} b1"]
    assert cells == _cells(loo_summary(cal), columns)


# -- issue 35: a run's host speed carried over to another host --------------------------------------------------
def test_a_fit_predicts_a_faster_hosts_run_at_that_hosts_speed():
    """Two synthetic runs of one GPU, the second's host twice as fast in every launch (its Triton launch and its
    replays cost half) and its index half: the fit on the slow run, carried to the fast one by the indices,
    predicts the fast run's host times as measured; without the indices it predicts them twice as long."""
    from probe_results import host_block

    fast_params = {
        **TRUE,
        **{name: TRUE[name] / 2 for name in ("triton_launch_us", "replay_us", "replay_per_node_us")},
        "replay_per_row_us": TRUE["replay_per_row_us"] / 2,
    }
    slow = synthetic_result(TRUE, MODEL, batches=(1, 8, 64))
    fast = synthetic_result(fast_params, MODEL, batches=(1, 8, 64))
    slow["host"], fast["host"] = host_block(), host_block()
    fast["host"]["torch_launch_us"] = {"median": 3.05, "p10": 2.9, "p90": 3.5}
    cal = calibrate(load_result(slow), loo=False)
    assert cal.host_index == pytest.approx(6.1)
    carried = cal.check(load_result(fast))
    for p in carried:
        assert p["host_us_predicted"] == pytest.approx(p["host_us_measured"], rel=1e-3), p
    del fast["host"]
    as_fitted = cal.check(load_result(fast))
    ratios = [p["host_us_predicted"] / p["host_us_measured"] for p in as_fitted]
    assert ratios == pytest.approx([2.0] * len(ratios), rel=1e-3)
