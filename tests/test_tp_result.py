"""The tensor-parallel result loader (core/tp_result.py): a good file as the writer makes it, and
hostile fields, each refused with a ValueError naming the field."""

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from tp_synthetic import (
    BATCHES,
    EAGER_ALPHA,
    EAGER_GBPS,
    GRAPH_ALPHA,
    GRAPH_GBPS,
    SWEEP_BYTES,
    synthetic_tp_result,
)

from core import tp_result
from core.probe_result import MAX_RESULT_BYTES, ProbeResult
from core.tp_result import TPResult, load_any_result, load_tp_result, tp_modes
from sim.step.tensor_parallel import fitted_allreduce

ROOT = Path(__file__).resolve().parents[1]
GOOD = synthetic_tp_result()


def good() -> dict:
    return copy.deepcopy(GOOD)


def test_a_good_file_loads_with_every_part():
    result = load_tp_result(json.dumps(GOOD).encode())
    assert isinstance(result, TPResult) and result.tp == 2 and result.all_checks_passed
    assert result.device == "2 × NVIDIA Test GPU" and result.modes == tp_modes() and result.batches == BATCHES
    assert [r.rank for r in result.ranks] == [0, 1]
    assert len(result.ranks[1].runs) == len(tp_modes()) * len(BATCHES)
    run = result.run(1, "fused+graph", 1)
    assert run.timeline.source == "measured" and "communication" in set(run.timeline.gpu_kinds)
    assert len(run.timeline.streams) == 2  # NCCL on a stream of its own
    assert result.tp_step_us("graph", 4) == max(r.run("graph", 4).step_us_median for r in result.ranks)
    assert result.tp1_step_us("eager", 1) == result.tp1_runs[0].step_us_median
    nbytes, us = result.sweep(captured=True)
    assert len(nbytes) == 2 * len(SWEEP_BYTES) and (us > 0).all()
    assert len(result.checks()) == 2 * len(GOOD["ranks"][0]["checks"])


def test_the_fit_of_a_loaded_file_recovers_the_sweeps_alpha_and_beta():
    result = load_tp_result(GOOD)
    graph, eager = fitted_allreduce(result, captured=True), fitted_allreduce(result, captured=False)
    assert graph.latency_us == pytest.approx(GRAPH_ALPHA) and graph.GBps == pytest.approx(GRAPH_GBPS)
    assert eager.latency_us == pytest.approx(EAGER_ALPHA) and eager.GBps == pytest.approx(EAGER_GBPS)
    assert graph.tp == 2 and "14 measured points (captured in a CUDA graph)" in graph.source
    noisy = fitted_allreduce(load_tp_result(synthetic_tp_result(noise=0.03)))
    assert noisy.latency_us == pytest.approx(GRAPH_ALPHA, rel=0.1)


def test_load_any_result_dispatches_on_kind(recorded):
    assert isinstance(load_any_result(json.dumps(GOOD).encode()), TPResult)
    assert isinstance(load_any_result(recorded.to_dict()), ProbeResult)
    with pytest.raises(ValueError, match="kind"):
        load_tp_result(recorded.to_dict())


def test_failed_checks_load_and_say_so():
    data = synthetic_tp_result(failed="kv_canary (graph)")
    result = load_tp_result(data)
    assert not result.all_checks_passed
    assert [(rank, name) for rank, name, c in result.checks() if not c["passed"]] == [
        (1, "kv_canary (graph)")
    ]


def _set(data: dict, path: str, value) -> dict:
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is DELETE:
        del node[int(last) if last.isdigit() else last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return data


DELETE = object()
LONG = "x" * 5000


@pytest.mark.parametrize(
    "path,value,named",
    [
        ("schema", 2, "schema"),
        ("schema", True, "schema"),
        ("tp", 1, "tp"),
        ("tp", 3, "ranks: 2 entries for tp 3"),
        ("tp", "2", "tp"),
        ("tp", 2.5, "tp"),
        ("tp", 10**400, "tp"),
        ("preset.n_layers", 0, "preset.n_layers"),
        ("preset.n_layers", DELETE, "preset.n_layers"),
        ("preset.name", LONG, "preset.name"),
        ("preset", [], "preset"),
        ("command", LONG, "command"),
        ("created", "yesterday", "created"),
        ("torch", "", "torch"),
        ("nccl", 2, "nccl"),
        ("cuda", "c" * 600, "cuda"),
        ("batches", [], "batches"),
        ("batches", [1, 1], "batches"),
        ("batches", [0], "batches[0]"),
        ("batches", list(range(1, 70)), "batches"),
        ("modes", ["compile"], "modes"),
        ("modes", ["eager", "eager"], "modes"),
        ("buckets", ["8"], "buckets[0]"),
        ("ranks", "two", "ranks"),
        ("ranks.1.rank", 0, "ranks[1].rank"),
        ("ranks.0.device", LONG, "ranks[0].device"),
        ("ranks.0.device", None, "ranks[0].device"),
        ("ranks.0.runs.0.step_us_p90", -1, "ranks[0].runs[0].step_us_p90"),
        ("ranks.1.runs.3.mode", "nonsense", "ranks[1].runs[3].mode"),
        ("ranks.1.runs.1.batch", 99, "ranks[1].runs[1].batch"),  # eager, batch 4: not one of the batches
        ("ranks.0.runs.1.batch", 1, "ranks[0].runs[1]: a second run"),  # eager at batch 1, as runs[0]
        ("ranks.0.runs.0.timeline.label", LONG, "ranks[0].runs[0].timeline.label"),
        ("ranks.0.runs.0.timeline.gpu.name", [1, 2], "ranks[0].runs[0].timeline.gpu.name"),
        ("ranks.0.runs.0.timeline.gpu.start_us", [float("nan")], "ranks[0].runs[0].timeline"),
        ("ranks.0.runs.0.bound_by", "disk", "ranks[0].runs[0].bound_by"),
        ("ranks.0.checks", [], "ranks[0].checks"),
        ("ranks.0.checks.kv_canary (graph).passed", "yes", "ranks[0].checks.kv_canary (graph)"),
        ("ranks.0.checks.kv_canary (graph).detail", LONG, "ranks[0].checks.kv_canary (graph).detail"),
        ("ranks.0.checks.big", {"passed": True, "blob": "x" * 300_000}, "ranks[0].checks"),
        ("ranks.0.allreduce", {}, "ranks[0].allreduce"),
        ("ranks.0.allreduce.0.bytes", 0, "ranks[0].allreduce[0].bytes"),
        ("ranks.0.allreduce.1.bytes", 512, "ranks[0].allreduce: message sizes must increase"),
        ("ranks.0.allreduce.2.eager_us_per_call", 0, "ranks[0].allreduce[2]"),
        ("ranks.0.allreduce.2.graph_us_per_call", 1e9, "ranks[0].allreduce[2].graph_us_per_call"),
        ("ranks.0.allreduce.2.graph_us_per_call", float("inf"), "ranks[0].allreduce[2].graph_us_per_call"),
        ("ranks.0.allreduce_bytes_per_row", -4, "ranks[0].allreduce_bytes_per_row"),
        ("tp1_runs", None, "tp1_runs"),
        ("tp1_runs.0.utilisation", 7, "tp1_runs[0].utilisation"),
        ("all_checks_passed", False, "all_checks_passed: disagrees"),
        ("all_checks_passed", "true", "all_checks_passed"),
        ("wall_s", -1, "wall_s"),
    ],
)
def test_a_hostile_field_is_named(path, value, named):
    data = _set(good(), path, value)
    with pytest.raises(ValueError) as err:
        load_tp_result(json.dumps(data).encode())
    assert named in str(err.value)


def test_sizes_are_bounded():
    data = good()
    data["ranks"][0]["allreduce"] = [
        {"bytes": 512 + i, "eager_us_per_call": 5.0, "graph_us_per_call": 4.0} for i in range(65)
    ]
    with pytest.raises(ValueError, match=r"ranks\[0\].allreduce: 65 entries"):
        load_tp_result(data)
    data = good()
    data["ranks"][0]["runs"] = data["ranks"][0]["runs"] * 9  # 72 runs
    with pytest.raises(ValueError, match=r"ranks\[0\].runs: 72 entries"):
        load_tp_result(data)
    data = good()
    data["tp"], data["ranks"] = 9, data["ranks"] * 5
    with pytest.raises(ValueError, match="tp"):
        load_tp_result(data)
    data = good()
    run = data["ranks"][0]["runs"][0]
    run["timeline"]["gpu"]["name"] = ["k"] * 10_000
    with pytest.raises(ValueError, match=r"ranks\[0\].runs\[0\].timeline.gpu.name: 10,000 entries"):
        load_tp_result(data)
    with pytest.raises(ValueError, match="larger than"):
        load_tp_result(b" " * (MAX_RESULT_BYTES + 1))


def test_total_runs_are_bounded():
    data = good()
    data["tp"] = 8
    data["ranks"] = [copy.deepcopy(data["ranks"][0]) for _ in range(8)]
    for i, rank in enumerate(data["ranks"]):
        rank["rank"] = i
        rank["runs"] = rank["runs"] * 6  # 36 a rank: under the per-rank bound, 288 in all
    with pytest.raises(ValueError, match="runs in all"):
        load_tp_result(data)


@pytest.mark.parametrize("raw", [b"[1, 2]", b"\x00", b'{"kind": "tensor_parallel"', b'"tensor_parallel"'])
def test_not_a_result(raw):
    with pytest.raises(ValueError, match="result"):
        load_tp_result(raw)


def test_lone_surrogates_are_refused():
    data = json.dumps(GOOD).replace('"NVIDIA Test GPU"', '"\\ud800 GPU"', 1)
    with pytest.raises(ValueError, match="surrogate"):
        load_tp_result(data.encode())


def test_core_and_sim_import_without_torch():
    code = "import sys; sys.modules['torch'] = None; import core.tp_result, sim.step.tensor_parallel; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_limits_sentence_names_the_bounds():
    assert str(tp_result.MAX_RANKS) in tp_result.LIMITS and str(tp_result.MAX_SWEEP) in tp_result.LIMITS
