"""The probe's result schema: a valid file loads; every kind of bad value is named."""

import copy
import json
import sys
from pathlib import Path

import pytest
from probe_results import host_block, probe_result, probe_run

from core.probe_result import MAX_RESULT_BYTES, ProbeResult, dump_result, load_result
from core.step_plan import MODES

RECORDED = Path(__file__).resolve().parents[1] / "gpu_probe" / "recorded"


def valid_result(**fields) -> dict:
    """An eager run at batch 1 and a fused+graph run at batch 3 padded to bucket 4, with a capture and a check;
    `fields` add or replace top-level fields."""
    graph_run = probe_run(
        mode="fused+graph", batch=3, bucket=4, padded_rows=1, cpu_launch_us=4.0, bound_by="GPU"
    )
    return probe_result(
        [probe_run(), graph_run],
        device="NVIDIA H200",
        command="python -m gpu_probe --preset small",
        model={
            "config": {"name": "small", "n_layers": 32},
            "n_params": 477_000_000,
            "weight_bytes": 954_000_000,
            "read_bytes": 888_000_000,
        },
        captures=[{"bucket": 4, "capture_ms": 12.5, "graph_mem_bytes": 2_097_152}],
        checks={"graph_vs_eager": {"passed": True, "detail": "13 buckets"}},
        settings={"steps": 100},
        **fields,
    )


def test_valid_result_loads_with_all_fields():
    res = load_result(valid_result())
    assert isinstance(res, ProbeResult)
    assert res.device == "NVIDIA H200" and res.hbm_copy_GBps == 4200.0
    assert [r.mode for r in res.runs] == ["eager", "fused+graph"]
    run = res.run("fused+graph", 3)
    assert run.bucket == 4 and run.padded_rows == 1 and run.bound_by == "GPU"
    assert run.timeline.metrics().kernels == 2
    assert res.run("graph", 3) is None
    # read_bytes / (GB/s * 1e3) gives microseconds.
    assert res.weight_floor_us == pytest.approx(888_000_000 / 4.2e6)
    assert res.all_checks_passed and res.modes == ("eager", "fused+graph") and res.batches == (1, 3)
    assert tuple(MODES) == ("eager", "fused", "graph", "fused+graph", "compile", "persistent")


def test_round_trip_through_json_file(tmp_path):
    res = load_result(valid_result())
    path = tmp_path / "r.json"
    dump_result(res, path)
    again = load_result(path)
    assert again.to_dict() == res.to_dict()
    assert load_result(path.read_bytes()).runs[0].step_us_p90 == 17.5
    with open(path, "rb") as fh:
        assert load_result(fh).command == res.command
    assert load_result(path, timeline_source="recorded").runs[0].timeline.source == "recorded"


@pytest.mark.parametrize(
    "path, value, field",
    [
        (("runs", 0, "step_us_median"), float("nan"), "runs[0].step_us_median"),
        (("runs", 0, "step_us_p10"), -1.0, "runs[0].step_us_p10"),
        (("runs", 1, "step_us_p90"), 5e9, "runs[1].step_us_p90"),
        (("runs", 0, "utilisation"), 1.7, "runs[0].utilisation"),
        (("runs", 0, "mode"), "turbo", "runs[0].mode"),
        (("runs", 0, "batch"), 0, "runs[0].batch"),
        (("runs", 0, "batch"), 2.5, "runs[0].batch"),
        (("runs", 0, "kernels_per_step"), "many", "runs[0].kernels_per_step"),
        (("runs", 0, "bound_by"), "GPU", "runs[0].bound_by"),  # disagrees with cpu > gpu
        (("runs", 1, "bucket"), 2, "runs[1].bucket"),  # a bucket smaller than the batch
        (("hbm_copy_GBps",), 1e9, "hbm_copy_GBps"),
        (("hbm_copy_GBps",), float("inf"), "hbm_copy_GBps"),
        (("model", "weight_bytes"), -5, "model.weight_bytes"),
        (("captures", 0, "capture_ms"), -0.1, "captures[0].capture_ms"),
        (("captures", 0, "graph_mem_bytes"), float("nan"), "captures[0].graph_mem_bytes"),
        (("checks", "graph_vs_eager", "passed"), "yes", "checks.graph_vs_eager"),
        (("created",), "yesterday", "created"),
        (("device",), "", "device"),
        (("schema",), 999, "schema"),  # a newer probe's file: refused, not guessed at
        (("schema",), True, "schema"),
    ],
)
def test_bad_values_are_rejected_naming_the_field(path, value, field):
    data = copy.deepcopy(valid_result())
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ValueError) as err:
        load_result(data)
    assert str(err.value).startswith(field), str(err.value)


def test_median_outside_percentiles_rejected():
    data = valid_result()
    data["runs"][0]["step_us_median"] = 20.0  # above p90
    with pytest.raises(ValueError, match=r"runs\[0\].step_us_median"):
        load_result(data)


def test_missing_and_malformed_timeline_named():
    data = valid_result()
    del data["runs"][1]["timeline"]["gpu"]
    with pytest.raises(ValueError, match=r"runs\[1\].timeline: missing field 'gpu'"):
        load_result(data)
    data = valid_result()
    data["runs"][0]["timeline"]["gpu"]["dur_us"] = [1.0, -2.0]
    with pytest.raises(ValueError, match=r"runs\[0\].timeline.gpu_dur"):
        load_result(data)


def test_missing_top_level_field_named():
    for key in ("runs", "model", "captures", "checks", "hbm_copy_GBps", "torch"):
        data = valid_result()
        del data[key]
        with pytest.raises(ValueError, match=f"^{key}"):
            load_result(data)


def test_nan_in_json_text_is_rejected():
    text = json.dumps(valid_result()).replace('"hbm_copy_GBps": 4200.0', '"hbm_copy_GBps": NaN')
    with pytest.raises(ValueError, match="hbm_copy_GBps"):
        load_result(text.encode())


def test_size_cap_and_garbage(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (MAX_RESULT_BYTES + 1))
    with pytest.raises(ValueError, match="larger than 20 MB"):
        load_result(big)
    with pytest.raises(ValueError, match="larger than 20 MB"):
        load_result(b"{" + b" " * MAX_RESULT_BYTES)
    with pytest.raises(ValueError, match="not JSON"):
        load_result(b"\x89PNG garbage")
    with pytest.raises(ValueError, match="top level"):
        load_result(b"[1, 2]")
    with pytest.raises(ValueError, match="no such file"):
        load_result(tmp_path / "absent.json")


def test_dump_refuses_nan(tmp_path):
    data = valid_result()
    data["hbm_copy_GBps"] = float("nan")
    with pytest.raises(ValueError):
        dump_result(data, tmp_path / "x.json")


def test_result_module_does_not_import_torch():
    import subprocess

    code = (
        "import sys, core.probe_result as r; r.load_result(__import__('json').loads(sys.argv[1]));"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(valid_result())],
        capture_output=True,
        text=True,
        cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]),
    )
    assert proc.returncode == 0, proc.stderr


def test_read_floor_adds_the_kv_cache_at_the_runs_context():
    data = valid_result()
    data["model"]["config"] = {
        "name": "1b",
        "n_layers": 16,
        "hidden": 2048,
        "n_heads": 32,
        "n_kv_heads": 8,
        "dtype": "bfloat16",
    }
    data["settings"] = {"context_len": 512}
    res = load_result(data)
    kv_per_sequence = 16 * 2 * 512 * 8 * 64 * 2  # layers x (K, V) x tokens x KV heads x head dim x bytes
    assert res.kv_read_bytes(1) == kv_per_sequence and res.kv_read_bytes(4) == 4 * kv_per_sequence
    assert res.read_bytes(4) == 888_000_000 + 4 * kv_per_sequence
    assert res.read_floor_us(1) == pytest.approx(res.read_bytes(1) / (res.hbm_copy_GBps * 1e3))
    assert res.read_floor_us(1) > res.weight_floor_us
    del data["settings"]["context_len"]  # a file that does not say: the weights alone
    assert load_result(data).read_floor_us(1) == pytest.approx(load_result(data).weight_floor_us)


def test_the_floor_is_the_roofline_of_bytes_and_flops():
    """The floor at a batch is the larger of the step's bytes over the copy bandwidth and its FLOPs (2 a weight a
    row, plus 4 x hidden x context a layer a row for the attention) over the run's matrix rate."""
    data = valid_result()
    data["model"]["config"] = {
        "n_layers": 16,
        "hidden": 2048,
        "n_heads": 32,
        "n_kv_heads": 8,
        "dtype": "bfloat16",
    }
    data["settings"] = {"context_len": 512}
    data["hbm_copy_GBps"] = 4_000.0
    assert load_result(data).compute_floor_us(256) is None  # no matrix rate in the file: bytes alone
    assert load_result(data).floor_us(256) == load_result(data).read_floor_us(256)
    data["matmul_TFLOPs"] = 20.0  # a slow matrix rate, so that the FLOPs set the floor from some batch on
    res = load_result(data)
    weights = 888_000_000 / 2  # bf16 elements read
    flops_per_row = 2 * weights + 4 * 2048 * 512 * 16
    assert res.step_flops(8) == pytest.approx(8 * flops_per_row)
    assert res.compute_floor_us(8) == pytest.approx(8 * flops_per_row / 20e6)  # TFLOP/s = 1e6 FLOP/µs
    assert res.floor_bound(1) == "memory" and res.floor_us(1) == pytest.approx(res.read_floor_us(1))
    assert res.floor_bound(256) == "compute" and res.floor_us(256) == pytest.approx(res.compute_floor_us(256))
    run = res.runs[0]
    assert res.times_floor(run) == pytest.approx(run.step_us_median / res.floor_us(run.batch))
    assert (
        ProbeResult.to_dict(res)["matmul_TFLOPs"] == 20.0 and load_result(res.to_dict()).matmul_TFLOPs == 20.0
    )


@pytest.mark.parametrize("bad", [0, -1.0, "770", 1e400, float("nan")])
def test_the_matrix_rate_must_be_a_positive_rate(bad):
    data = valid_result()
    data["matmul_TFLOPs"] = bad
    with pytest.raises(ValueError, match="matmul_TFLOPs"):
        load_result(data)


def _split_case(**fields) -> dict:
    """A valid result whose fused+graph batch-3 run is a 400 µs step of 100 kernels, 60 µs enqueue, 4 TB/s."""
    data = valid_result()
    data["hbm_copy_GBps"] = 4_000.0
    data["runs"][1].update(
        step_us_median=400.0,
        step_us_p10=390.0,
        step_us_p90=420.0,
        enqueue_us_median=60.0,
        kernels_per_step=100,
        **fields,
    )
    return data


def test_step_split_adds_up_to_the_step():
    res = load_result(_split_case())
    run = res.run("fused+graph", 3)
    split = res.step_split(run)
    assert split["floor_us"] == pytest.approx(222.0)  # 888 MB at 4 TB/s
    assert split["host_us"] == 60.0 and split["kernels"] == 100
    assert split["floor_us"] + split["host_us"] + split["boundaries_us"] == pytest.approx(400.0)
    assert split["per_kernel_us"] == pytest.approx(1.18)
    assert res.hbm_used_GBps(run) == pytest.approx(888_000_000 / 400e3)


def test_step_split_measures_the_host_share_when_the_run_has_back_to_back_times():
    data = _split_case(step_us_back_to_back=310.0)
    res = load_result(data)
    split = res.step_split(res.run("fused+graph", 3))
    # The idle start costs median - back to back (90 µs), not the enqueue time (60 µs).
    assert split["host_from"] == "back to back" and split["host_us"] == pytest.approx(90.0)
    assert split["boundaries_us"] == pytest.approx(310.0 - 222.0)
    assert split["floor_us"] + split["host_us"] + split["boundaries_us"] == pytest.approx(400.0)
    # Back to back below the floor (a clock glitch, a crafted file): the host share stops at the floor.
    data["runs"][1]["step_us_back_to_back"] = 100.0
    split = load_result(data).step_split(load_result(data).run("fused+graph", 3))
    assert split["host_us"] == pytest.approx(400.0 - 222.0) and split["boundaries_us"] == pytest.approx(0.0)
    del data["runs"][1]["step_us_back_to_back"]  # an older file: the enqueue time stands in
    split = load_result(data).step_split(load_result(data).run("fused+graph", 3))
    assert split["host_from"] == "enqueue" and split["host_us"] == 60.0


@pytest.mark.parametrize("bad", [0, -5.0, "310", [310.0], 1e400, float("nan")])
def test_back_to_back_must_be_a_positive_time(bad):
    data = valid_result()
    data["runs"][1]["step_us_back_to_back"] = bad
    with pytest.raises(ValueError, match=r"runs\[1\]\.step_us_back_to_back"):
        load_result(data)


# ---- the host speed index and the spread of the unprofiled times ------------------------------------
def test_a_result_without_the_host_index_loads_as_not_measured():
    assert load_result(valid_result()).host is None
    # A shipped run from before the index (H100, 2026-12-06): it loads, its host not measured.
    older = load_result(RECORDED / "small-holdout.json")
    assert older.host is None and "host" not in older.to_dict()
    assert all(r.enqueue_us_p10 is None and r.timing_rounds is None for r in older.runs)


def test_the_shipped_run_has_its_host_index_and_spreads():
    from core.probe_result import recorded_result

    recorded = recorded_result()
    assert recorded.host is not None and recorded.host.torch_launch_us > 0
    assert [when for when, _ in recorded.host.samples] == ["before", "after"]
    assert all(r.enqueue_us_p10 <= r.enqueue_us_median <= r.enqueue_us_p90 for r in recorded.runs)


def test_the_host_index_loads_and_round_trips(tmp_path):
    res = load_result(valid_result(host=host_block()))
    host = res.host
    assert host.cpu.startswith("Intel") and host.triton == "3.6.0" and host.launches == 3000
    assert host.torch_launch_us == 6.1 and host.index.triton_launch_us.p90 == 11.5
    assert host.index.graph_nodes == (1, 16, 64, 256) and host.index.graph_launch_us[3].median == 10.4
    assert [when for when, _ in host.samples] == ["before", "after"]
    assert host.samples[1][1].torch_launch_us.median == pytest.approx(6.1 * 1.02)
    path = tmp_path / "r.json"
    dump_result(res, path)
    assert load_result(path).to_dict() == res.to_dict() and res.to_dict()["host"] == host_block()


def test_a_host_index_without_triton_loads():
    block = host_block()
    for key in ("triton", "triton_launch_us", "triton_bound_launch_us"):
        del block[key]
        for sample in block["samples"]:
            sample.pop(key, None)
    host = load_result(valid_result(host=block)).host
    assert host.triton is None and host.index.triton_launch_us is None and host.torch_launch_us == 6.1


@pytest.mark.parametrize(
    "path, value, field",
    [
        (("torch_launch_us", "median"), 0, "host.torch_launch_us.median: a launch takes some time"),
        (("torch_launch_us", "p10"), -1.0, "host.torch_launch_us.p10: a launch takes some time"),
        (("triton_launch_us", "median"), float("nan"), "host.triton_launch_us.median: must be a finite"),
        (
            ("triton_bound_launch_us", "p90"),
            20_000.0,
            "host.triton_bound_launch_us.p90: 20000 µs for one launch is absurd",
        ),
        (("torch_launch_us", "median"), 8.0, "host.torch_launch_us.median: must lie between p10 and p90"),
        (("torch_launch_us", "median"), "6.1", "host.torch_launch_us.median: expected a number"),
        (("torch_launch_us",), None, "host.torch_launch_us: missing"),
        (("graph_fixed_us",), 0.0, "host.graph_fixed_us: a launch takes some time"),
        (("graph_per_node_us",), -0.5, "host.graph_per_node_us: -0.5 is outside"),
        (
            ("graph_launch_us", "median"),
            [4.0, 4.4],
            "host.graph_launch_us.median: expected one time per node count",
        ),
        (
            ("graph_launch_us", "nodes"),
            [16, 1, 64, 256],
            "host.graph_launch_us.nodes: expected 1 to 16 increasing",
        ),
        (
            ("graph_launch_us", "p90"),
            [4.6, 5.0, 6.2, 1e5],
            "host.graph_launch_us.p90[3]: 100000 µs for one launch",
        ),
        (
            ("samples", 1, "torch_launch_us", "median"),
            1e6,
            "host.samples[1].torch_launch_us.median: 1e+06 µs",
        ),
        (("samples", 0, "when"), "", "host.samples[0].when: expected a non-empty string"),
        (("samples",), {"when": "before"}, "host.samples: expected a list"),
        (("cpu",), 3, "host.cpu: expected a non-empty string"),
        (("launches",), 0, "host.launches: 0 is outside"),
        ((), "fast", "host: expected an object"),
    ],
)
def test_a_bad_host_index_is_refused_naming_the_field(path, value, field):
    data = valid_result(host=host_block())
    load_result(copy.deepcopy(data))  # the block itself is fine
    if not path:
        data["host"] = value
    else:
        target = data["host"]
        for key in path[:-1]:
            target = target[key]
        if value is None:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    with pytest.raises(ValueError) as err:
        load_result(data)
    assert str(err.value).startswith(field), str(err.value)


def test_the_spread_of_the_unprofiled_times_loads_and_is_checked():
    spread = {
        "enqueue_us_p10": 9.5,
        "enqueue_us_p90": 12.0,
        "step_us_back_to_back": 14.0,
        "step_us_back_to_back_p10": 13.0,
        "step_us_back_to_back_p90": 15.5,
        "timing_rounds": 10,
    }
    data = probe_result([probe_run(**spread)])
    run = load_result(data).runs[0]
    assert (run.enqueue_us_p10, run.enqueue_us_median, run.enqueue_us_p90) == (9.5, 10.5, 12.0)
    assert run.step_us_back_to_back_p90 == 15.5 and run.timing_rounds == 10
    assert load_result(data).to_dict()["runs"][0]["timing_rounds"] == 10
    assert (
        "timing_rounds" not in load_result(probe_result()).to_dict()["runs"][0]
    )  # older files stay as they were
    for key, value, message in (
        ("enqueue_us_p10", 11.0, "runs[0].enqueue_us_p10: above the median"),
        ("step_us_back_to_back_p90", 13.5, "runs[0].step_us_back_to_back_p90: below the median"),
        ("enqueue_us_p90", float("nan"), "runs[0].enqueue_us_p90: must be a finite"),
        ("timing_rounds", 2.5, "runs[0].timing_rounds: must be a whole number"),
    ):
        bad = probe_result([probe_run(**{**spread, key: value})])
        with pytest.raises(ValueError) as err:
            load_result(bad)
        assert str(err.value).startswith(message), str(err.value)


def _part(whole: dict, keep) -> dict:
    """The recorded run cut down to the runs `keep(mode, batch)` selects, as one part of a run measured in parts."""
    part = copy.deepcopy(whole)
    part["runs"] = [r for r in part["runs"] if keep(r["mode"], r["batch"])]
    part["settings"]["batches"] = sorted({r["batch"] for r in part["runs"]})
    part["settings"]["modes"] = [m for m in MODES if any(r["mode"] == m for r in part["runs"])]
    return part


def test_a_run_measured_in_parts_merges_into_the_run():
    """core.probe_result.merge_results: the parts of the recorded run give back its runs, in the modes table's
    order, with the settings' batches and modes of all parts, each capture and error once, a failed check kept
    failed, the first part's header and ceilings, and every part's host samples."""
    from core.probe_result import MAX_HOST_SAMPLES, merge_results

    whole = json.loads((RECORDED / "small.json").read_text())
    whole.pop("reference")
    first = _part(whole, lambda m, b: b == 1 and m in ("eager", "fused+graph"))
    rest = _part(whole, lambda m, b: not (b == 1 and m in ("eager", "fused+graph")))
    rest["hbm_copy_GBps"], rest["created"] = 1.0, "2030-01-01T00:00:00+00:00"
    rest["errors"] = [*whole["errors"], "compile at batch 256: CUDA out of memory"]
    rest["checks"] = {**rest["checks"], "graph_vs_eager": {"passed": False, "detail": "bucket 8 differs"}}
    merged = merge_results([first, rest], command="the page", settings={"note": "merged"})
    assert merged.to_dict() == load_result(merged.to_dict()).to_dict()  # a result file like any other
    expected = load_result(whole)
    assert [(r.mode, r.batch) for r in merged.runs] == sorted(
        ((r.mode, r.batch) for r in expected.runs), key=lambda k: (list(MODES).index(k[0]), k[1])
    )
    assert merged.run("persistent", 64).to_dict() == expected.run("persistent", 64).to_dict()
    assert merged.settings["batches"] == [1, 8, 64, 256] and merged.settings["modes"] == list(expected.modes)
    assert merged.settings["note"] == "merged" and merged.command == "the page"
    assert merged.hbm_copy_GBps == whole["hbm_copy_GBps"] and merged.created == whole["created"]
    assert len(merged.captures) == len(whole["captures"])  # each part carried the session's captures
    assert merged.errors == ("compile at batch 256: CUDA out of memory",)
    assert not merged.checks["graph_vs_eager"]["passed"] and merged.checks["kv_canary"]["passed"]
    assert len(merged.host.samples) == 4 and merged.host.index == expected.host.index
    many = merge_results([first] * (MAX_HOST_SAMPLES + 2))  # more samples than a file holds: both ends kept
    assert len(many.host.samples) == MAX_HOST_SAMPLES
    later = _part(whole, lambda m, b: (m, b) == ("eager", 1))
    later["runs"][0]["step_us_median"] = later["runs"][0]["step_us_p90"]
    assert merge_results([first, later]).run("eager", 1).step_us_median == later["runs"][0]["step_us_p90"]


def test_parts_of_different_runs_do_not_merge():
    from core.probe_result import merge_results

    whole = json.loads((RECORDED / "small.json").read_text())
    other = {**copy.deepcopy(whole), "device": "NVIDIA H100 80GB HBM3"}
    with pytest.raises(ValueError, match="part 1 has another device"):
        merge_results([whole, other])
    with pytest.raises(ValueError, match="no parts"):
        merge_results([])
