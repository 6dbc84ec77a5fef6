"""Calibration: on runs the timing model itself generated, the fit reproduces them; on the H200 run, the goals."""

import gzip
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from synthetic_params import KNOWN_PARAMS  # tests/synthetic_params.py

from core.probe_result import load_result, recorded_result
from core.step_plan import FUSED_GRAPH, StepPlan, modes
from sim.calibration import PARAMS, calibrate, calibrated_preset, recorded_graph_cost, synthetic_result
from sim.calibration.least_squares import bounded_least_squares
from sim.calibration.model import model_from_result
from sim.calibration.report import loo_summary, main
from sim.config import PRESETS, Preset
from sim.step.schedule import simulate_step

ROOT = Path(__file__).resolve().parents[1]
MODEL = PRESETS["probe-0.5b-h200"].model.with_layers(8)  # fewer layers: same physics, faster tests
TRUE = KNOWN_PARAMS
# Identifiable from family totals at the synthetic batches (the GEMV and the 16-row tile GEMM each run at
# one batch only, so their latency and bandwidth trade against each other; no cuBLAS or GEMV kernel is
# compute-bound). Batch 32 gives the wider tiles a third batch.
BATCHES = (1, 8, 32, 64, 256)
RECOVERED = (
    "tile_gemm_wide_latency_us",
    "tile_gemm_wide_GBps",
    "tile_gemm_wide_TFLOPs",
    "attention_latency_us",
    "attention_GBps",
    "cublas_latency_us",
    "cublas_GBps",
    "aten_latency_us",
    "aten_GBps",
    "pdl_hidden_us",
    "aten_launch_us",
    "triton_launch_us",
    "merge_launch_share",
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
    return calibrate(recorded_result())


def test_fit_recovers_known_parameters(calibration):
    # The synthetic timelines are stored to the nanosecond (Timeline.to_dict), a few 1e-4 of a small
    # kernel; the wide tile GEMM's latency and bandwidth come from memory-bound batches whose bytes
    # differ only by their activations, which magnifies that rounding about tenfold.
    loose = {"tile_gemm_wide_latency_us": 3e-3, "tile_gemm_wide_GBps": 3e-3, "tile_gemm_wide_TFLOPs": 3e-3}
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


def test_leave_one_out_predicts_without_the_point():
    data = synthetic_result(TRUE, MODEL)
    bad = next(r for r in data["runs"] if r["mode"] == "eager" and r["batch"] == 8)
    bad["enqueue_us_median"] *= 1.5  # a host outlier the other points cannot explain
    for key in ("step_us_median", "step_us_p10", "step_us_p90"):
        bad[key] *= 1.5
    cal = calibrate(load_result(data))
    i = next(i for i, p in enumerate(cal.points) if p.mode.name == "eager" and p.batch == 8)
    loo = cal.loo_errors()
    assert loo[i] == pytest.approx(1 / 1.5 - 1, abs=0.03)  # predicted from the other eager steps
    assert np.median(np.abs(np.delete(loo, i))) < 0.02  # least absolute deviations ignore the outlier
    worst = loo_summary(cal)["worst_point"]
    assert (worst["mode"], worst["batch"]) == ("eager", 8) and worst["error"] == pytest.approx(loo[i])


def test_parameters_the_runs_do_not_constrain_are_held():
    cal = calibrate(load_result(synthetic_result(TRUE, MODEL, modes=("eager",))), loo=False)
    assert cal.fitted["aten_launch_us"] and not cal.fitted["triton_launch_us"]
    assert not cal.fitted["replay_us"] and not cal.fitted["tile_gemm_latency_us"]
    assert cal.params["aten_launch_us"] == pytest.approx(TRUE["aten_launch_us"], rel=1e-3)


def test_bounded_solver_stops_at_the_bound():
    # Minimise (u - 3)^2 with u <= 1: the answer is the bound.
    u, cost, fitted = bounded_least_squares(
        lambda u: np.array([u[0] - 3.0, 0.0 * u[1]]), [0.0, 0.5], np.array([-5.0, -5.0]), np.array([1.0, 5.0])
    )
    assert u[0] == pytest.approx(1.0) and u[1] == 0.5 and cost == pytest.approx(4.0)
    assert fitted.tolist() == [True, False]


def test_fitted_values_respect_the_parameter_bounds(recorded_cal):
    for p in PARAMS:
        assert p.low <= recorded_cal.params[p.name] <= p.high


def test_recorded_run_meets_the_goals_where_the_data_allows(recorded_cal):
    # Goals (issue 12): every mode's median leave-one-out error <= 10 %, fused+graph batch 1 within 10 %.
    for mode in ("eager", "fused", "graph", "fused+graph"):
        assert recorded_cal.mode_loo_error(mode) <= 0.10, mode
    assert abs(loo_summary(recorded_cal)["fused_graph_b1"]) <= 0.10
    # The one point beyond 25 % is the eager batch-1 step, whose host took 23.7 µs a launch where the
    # other eager steps took 16.9-18.7: run-to-run host noise the model cannot predict from the others.
    errs = {(p.mode.name, p.batch): e for p, e in zip(recorded_cal.points, recorded_cal.loo_errors())}
    assert all(abs(e) <= 0.25 for k, e in errs.items() if k != ("eager", 1))


def test_recorded_graph_cost_is_the_calibrated_one_and_cached(recorded_cal):
    cost = recorded_graph_cost()
    assert cost is recorded_graph_cost()
    assert cost == recorded_cal.graph_cost
    assert 0 < cost.node_gap_us < 2 and 0 < cost.per_node_host_us < 2
    assert 60 < cost.host_us(180) < 140  # the fused+graph replays: ~100 µs for ~180 nodes


def test_calibrated_preset_follows_the_fused_kernels(recorded_cal):
    preset = calibrated_preset(recorded_result(), recorded_cal)
    assert isinstance(preset, Preset) and preset.title == "probe decoder on H200"
    assert preset.hardware.hbm_GBps == pytest.approx(recorded_cal.params["gemv_GBps"])
    # The fused+graph batch-1 step, the page's headline, lands near the measured 646 µs.
    step = simulate_step(preset.model, preset.hardware, StepPlan(FUSED_GRAPH, 1))
    assert step.metrics.step_us == pytest.approx(646.4, rel=0.25)


def test_cli_prints_parameters_points_and_the_worst_point(tmp_path, capsys):
    path = tmp_path / "synthetic.json"
    path.write_text(json.dumps(synthetic_result(TRUE, MODEL, batches=(1, 8, 64))))
    assert main([str(path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("Leave-one-out: median error 0.0 %; worst mode")
    assert "worst point" in out[-1] and out[-1].endswith(
        "Meets the goals (every mode ≤ 10 %, no point beyond 25 %, fused+graph b1 ≤ 10 %)."
    )
    assert any(line.split()[:2] == ["aten_launch_us", "7"] for line in out)
    assert sum(line.startswith("fused+graph") for line in out) == 3


def test_cli_json_and_check_on_a_gzipped_run(tmp_path, capsys):
    one, other = tmp_path / "one.json", tmp_path / "other.json.gz"
    one.write_text(json.dumps(synthetic_result(TRUE, MODEL, batches=(1, 8, 64))))
    other.write_bytes(gzip.compress(json.dumps(synthetic_result(TRUE, MODEL, batches=(1, 16))).encode()))
    assert main([str(one), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["points"]) == 3 * len(modes(modelled=True))  # every modelled mode at three batches
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
    # sim.calibration.families restates three of gpu_probe.kernels.linear's rules (sim imports no torch):
    # the GEMV's row limit, the 16-row tile, the shapes that run unpipelined. They must agree.
    linear = pytest.importorskip("gpu_probe.kernels.linear")
    from gpu_probe.config import get_config
    from sim.calibration import families

    assert families.GEMV_MAX_ROWS == linear.GEMV_MAX_ROWS
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
    # Files made before the rule changed: the 1b preset's gate/up and LM head, no small-preset shape.
    assert families.unpipelined_gemms(recorded_result()) == {(8192, 2048, True), (128256, 2048, False)}


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
    from core.probe_result import load_result as load
    from sim.calibration.families import classify_step, unpipelined_gemms
    from sim.calibration.model import model_from_result

    one_b = load(ROOT / "gpu_probe" / "recorded" / "1b.json")
    model = model_from_result(one_b)
    run = one_b.run("fused+graph", 64)
    old = unpipelined_gemms(one_b)
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
        f
        for f in classify_step(
            small_model, small.timeline.gpu_names, 64, unpipelined=unpipelined_gemms(recorded_result())
        )
        if "gemm" in f
    } == {"tile_gemm_wide"}


def test_the_1b_runs_fused_graph_steps_are_predicted_within_10_percent_left_out():
    # One tile-GEMM family could not fit both 16- and 64-row tiles, nor the unpipelined gate/up and LM
    # head: fused+graph was 24.7 % off in median, 29.7 % at batch 8, left out.
    cal = calibrate(load_result(ROOT / "gpu_probe" / "recorded" / "1b.json"))
    errors = [e for p, e in zip(cal.points, cal.loo_errors()) if p.mode is FUSED_GRAPH]
    assert len(errors) == 4 and max(abs(e) for e in errors) <= 0.10


def test_a_check_names_the_families_the_fit_had_no_data_for():
    # A run made after the kernel change (gate/up unpipelined) predicted by a fit on one made before it.
    from sim.calibration.report import format_report

    cal = calibrate(recorded_result(), loo=False)
    before = load_result(ROOT / "gpu_probe" / "recorded" / "small-holdout.json")
    assert not any(p["unfitted"] for p in cal.check(before))
    after = json.loads((ROOT / "gpu_probe" / "recorded" / "small-holdout.json").read_text())
    after["settings"]["unpipelined_gemms"] = [[2816, 1024, True]]
    check = cal.check(load_result(after))
    assert {
        tuple(p["unfitted"]) for p in check if p["mode"] in ("fused", "fused+graph") and p["batch"] > 4
    } == {("unpiped_gemm",), ("unpiped_gemm_wide",)}  # batch 8: the 16-row tile; 64 and 256: wider tiles
    assert not any(p["unfitted"] for p in check if p["mode"] in ("eager", "graph") or p["batch"] <= 4)
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
    replays = {(p.mode.name, p.batch): p.in_pieces for p in pieces.points if p.replays}
    assert {k for k, v in replays.items() if v} == {("graph", 8), ("graph", 64), ("graph", 256)}
    assert np.abs(pieces.errors()[:, :2]).max() < 1e-3
    # Without memset nodes no replay is made in pieces: nothing constrains the term, which stays at 0.
    whole = calibrate(load_result(synthetic_result(params, MODEL)), loo=False)
    assert not whole.fitted["replay_per_row_us"] and whole.params["replay_per_row_us"] == 0.0


def test_the_split_merge_launch_share_is_read_off_the_profiled_steps():
    # The synthetic profile has no profiler cost: the share is the one it was made with.
    synthetic = calibrate(load_result(synthetic_result(TRUE, MODEL, batches=(1, 64))), loo=False)
    assert (
        synthetic.params["merge_launch_share"] == pytest.approx(0.5)
        and synthetic.fitted["merge_launch_share"]
    )
    # The H200 runs: less than half a Triton launch, once the profiler's own cost per launch is taken off.
    cals = {n: calibrate(load_result(ROOT / "gpu_probe" / "recorded" / n), loo=False) for n in RECORDED_RUNS}
    assert all(0.3 < c.params["merge_launch_share"] < 0.5 for c in cals.values())
    # At that share the fused steps' host time is flat in the batch (their kernels but the merges are
    # the same at every batch): within 5 % of the fit at every point, where counting a merge as a whole
    # launch was up to 12 % off (the 1b run's batch 256). Not the hold-out, whose batch 256 ran slow.
    for name in ("small.json", "1b.json"):
        fused = [i for i, p in enumerate(cals[name].points) if p.mode.name == "fused"]
        assert np.abs(cals[name].errors()[fused, 1]).max() < 0.05, name


def test_replays_are_in_pieces_exactly_where_the_profiled_gpu_starts_before_the_call_returns():
    from sim.calibration.model import INPUT_COPY

    early = {}
    for name in (*RECORDED_RUNS, "small-b1.json"):
        result = load_result(ROOT / "gpu_probe" / "recorded" / name)
        runs = {(r.mode, r.batch): r for r in result.runs}
        for p in calibrate(result, loo=False).points:
            if p.replays:
                tl = runs[(p.mode.name, p.batch)].timeline
                nodes = np.array([INPUT_COPY not in n for n in tl.gpu_names])
                early[(name, p.mode.name, p.batch)] = (
                    p.in_pieces,
                    tl.cpu_end.max() - tl.gpu_start[nodes].min(),
                )
    pieces = [lead for in_pieces, lead in early.values() if in_pieces]
    whole = {k: lead for k, (in_pieces, lead) in early.items() if not in_pieces}
    assert len(pieces) == 10 and min(pieces) > 900  # µs of the call still to go when the GPU starts
    # One exception, as GraphReplayCost says: that small-preset graph at batch 1 once started early.
    assert {k for k, lead in whole.items() if lead > 0} == {("small-b1.json", "graph", 1)}
    assert len(whole) == 16 and min(whole.values()) > -6


def test_one_eager_step_in_three_runs_is_further_apart_than_any_prediction_can_be():
    # The same code, preset and batch: no single figure is within 25 % of all three (docs/calibration.md).
    steps = [
        load_result(ROOT / "gpu_probe" / "recorded" / n).run("eager", 1).step_us_median
        for n in ("small.json", "small-holdout.json", "small-b1.json")
    ]
    assert [round(s / 1e3, 1) for s in steps] == [39.2, 23.6, 46.6]
    assert 0.75 * max(steps) > 1.25 * min(steps)


# -- the figures docs/calibration.md quotes ----------------------------------------------------------
DOC_RUNS = {
    "recorded": "small.json",
    "hold-out": "small-holdout.json",
    "1b": "1b.json",
    "small b1": "small-b1.json",
    "1b persistent": "1b-persistent.json",
}


def _doc_table(heading: str) -> dict[str, list[str]]:
    """The rows of the table under the doc's `### heading`: first cell -> the others."""
    lines = (ROOT / "docs" / "calibration.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("### ") and heading in line)
    table = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("| ") and not line.startswith("| ---"):
            table.append([c.strip() for c in line.strip().strip("|").split("|")])
    return {cells[0]: cells[1:] for cells in table[1:]}  # below the header row


def _cells(s: dict, with_b1: bool = True) -> list[str]:
    """A summary as the doc's cells: each mode's median (worst point), then fused+graph at batch 1."""
    cells = [f"{100 * e:.1f} % (b{b} {100 * w:+.1f} %)" for e, b, w in s["by_mode"].values()]
    if with_b1:
        cells.append(f"{100 * s['fused_graph_b1']:+.1f} %")
    return [c.replace("-", "−") for c in cells]


@pytest.fixture(scope="module")
def doc_cals():
    return {
        name: calibrate(load_result(ROOT / "gpu_probe" / "recorded" / DOC_RUNS[name]))
        for name in ("recorded", "hold-out", "1b")
    }


def test_the_docs_left_out_figures_are_the_fits(doc_cals):
    rows = _doc_table("Step time, left out")
    # The replaced 1b run's row is checked by hand (it is in git history only, docs/calibration.md says how).
    shipped = {name.split(" (")[0]: cells for name, cells in rows.items() if "replaced" not in name}
    assert set(shipped) == set(doc_cals)
    for name, cells in shipped.items():
        assert cells == _cells(loo_summary(doc_cals[name])), name


def test_the_docs_cross_run_figures_are_the_fits(doc_cals):
    from sim.calibration.report import check_summary

    rows = _doc_table("Step time, fit on one run, predict another")
    assert len(rows) == 4
    for name, cells in rows.items():
        fit_on, other = name.split(" → ")
        check = doc_cals[fit_on].check(load_result(ROOT / "gpu_probe" / "recorded" / DOC_RUNS[other]))
        assert cells == _cells(check_summary(check)), name


def test_the_docs_host_figures_are_the_fits(doc_cals):
    from sim.calibration.report import check_summary

    rows = _doc_table("Host time alone")
    assert len(rows) == 5
    for name, cells in rows.items():
        if name.endswith(", left out"):
            s = loo_summary(doc_cals[name.removesuffix(", left out")], "host")
        else:
            fit_on, other = name.split(" → ")
            s = check_summary(
                doc_cals[fit_on].check(load_result(ROOT / "gpu_probe" / "recorded" / DOC_RUNS[other])), "host"
            )
        assert cells == _cells(s, with_b1=False), name


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

    path = ROOT / "gpu_probe" / "recorded" / DOC_RUNS["1b persistent"]
    if not path.is_file():
        pytest.skip("the persistent kernel's recorded run is not shipped")
    cal = calibrate(load_result(path))
    mine = [i for i, p in enumerate(cal.points) if p.mode.name == "persistent"]
    assert len(mine) >= 3
    assert cal.mode_loo_error("persistent") <= GOAL
    assert all(abs(cal.loo_errors()[i]) <= WORST_GOAL for i in mine)
    assert all(cal.holds_at(i) and cal.verdict_at(i).startswith("calibrated to this run") for i in mine)


def test_a_point_the_fit_misses_is_labelled_a_model_off_by_its_error():
    data = synthetic_result(TRUE, MODEL)
    bad = next(r for r in data["runs"] if r["mode"] == "eager" and r["batch"] == 8)
    bad["enqueue_us_median"] *= 1.5  # a host outlier the other points cannot explain
    for key in ("step_us_median", "step_us_p10", "step_us_p90"):
        bad[key] *= 1.5
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
    (name, cells), *others = _doc_table("Step time, left out, the persistent run").items()
    assert not others and name.startswith("1b persistent")
    cal = calibrate(load_result(ROOT / "gpu_probe" / "recorded" / DOC_RUNS["1b persistent"]))
    assert cells == _cells(loo_summary(cal))
