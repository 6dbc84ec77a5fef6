"""Issue 22, item 5: graph-replayed kernels in the per-kernel table (core/trace/kernels.py). The replay's host
cost once, in a row of its own; replayed kernels with the gap to the previous kernel on their stream, no
launch delay and no host time; eager steps as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.trace import analyse, short_kernel_name
from core.trace.kernels import GRAPH_LAUNCH, kernel_table, launch_costs
from sim.trace.report import format_report, main
from sim.trace.whatif import default_replay_cost

ROOT = Path(__file__).resolve().parents[1]
HF = ROOT / "data" / "traces" / "hf"
RECORDED = ROOT / "gpu_probe" / "recorded"
GRAPHED = [
    (HF / "hf_llama_graph.json.gz", None),
    (HF / "hf_llama_compile.json.gz", None),
    (HF / "hf_qwen2_graph.json.gz", None),
    (RECORDED / "trace_fused_graph_b1.json", "decode_step"),
]


@pytest.mark.parametrize(("path", "step_range"), GRAPHED, ids=lambda p: getattr(p, "name", p))
def test_a_replay_shows_its_host_cost_once_and_its_kernels_their_gaps(path, step_range):
    report = analyse(path, step_range=step_range)
    step = report.steps[-1]
    rows = kernel_table(report, step.index)
    graph, kernels = rows[0], rows[1:]
    costs = launch_costs(step)
    assert graph["graph_launch"] and graph["kernel"].startswith(GRAPH_LAUNCH)
    assert graph["calls"] == step.graph_launches == 1 and not any(r["graph_launch"] for r in kernels)
    # The graph launch's own call: its host time, and every replayed node's host_per_launch_us says the same.
    assert graph["host_per_launch_us"] == pytest.approx(float(step.host_per_launch_us[costs.replayed][0]))
    assert graph["total_us"] == 0 and sum(r["calls"] for r in kernels) == step.kernels
    replayed = [r for r in kernels if r["replayed"] == r["calls"]]
    assert sum(r["replayed"] for r in kernels) == int(costs.replayed.sum()) > 0.9 * step.kernels
    for r in replayed:
        assert r["launch_delay_us"] is None and r["host_per_launch_us"] is None and r["gap_us"] is not None
    # Before, each carried the replay's host time and a "delay" of hundreds of µs: nodes follow within µs.
    busiest = max(replayed, key=lambda r: r["total_us"])
    assert abs(busiest["gap_us"]) < 10


def test_the_gap_is_the_time_since_the_previous_kernel_on_the_stream_ended():
    report = analyse(HF / "hf_llama_graph.json.gz")
    step = report.steps[0]
    tl, costs = step.timeline, launch_costs(step)
    i = int(np.flatnonzero(costs.replayed)[10])
    prev = np.flatnonzero(tl.gpu_stream[:i] == tl.gpu_stream[i])[-1]
    assert costs.gap_us[i] == pytest.approx(tl.gpu_start[i] - tl.gpu_end[prev])
    name = short_kernel_name(tl.gpu_names[i], None)
    rows = {r["kernel"]: r for r in kernel_table(report, step.index)}
    mine = costs.replayed & (np.array([short_kernel_name(n, None) for n in tl.gpu_names]) == name)
    assert rows[name]["gap_us"] == pytest.approx(float(np.nanmean(costs.gap_us[mine])))


def test_pdl_kernels_can_start_before_the_previous_one_ends():
    """The probe's fused GEMVs use programmatic dependent launch: a negative gap is what happened."""
    report = analyse(RECORDED / "trace_fused_graph_b1.json", step_range="decode_step")
    rows = {r["kernel"]: r for r in kernel_table(report, report.steps[0].index)}
    assert rows["_gemv_kernel"]["gap_us"] < 0


def test_input_copies_before_a_replay_stay_eager_launches():
    report = analyse(HF / "hf_llama_compile.json.gz")
    step = report.steps[0]
    costs = launch_costs(step)
    copies = np.array([n.startswith("Memcpy HtoD") for n in step.timeline.gpu_names])
    assert copies.any() and not costs.replayed[copies].any()
    assert np.isfinite(costs.delay_us[copies]).all() and (costs.host_us[copies] > 0).all()
    row = next(r for r in kernel_table(report, step.index) if r["kernel"].startswith("Memcpy HtoD"))
    assert row["replayed"] == 0 and row["launch_delay_us"] is not None and row["host_per_launch_us"] > 0


def test_eager_steps_are_unchanged():
    report = analyse(HF / "hf_llama_eager_profilerstep.json.gz")
    step = report.steps[1]
    rows = kernel_table(report, step.index)
    assert not any(r["graph_launch"] or r["replayed"] or r["gap_us"] is not None for r in rows)
    names = np.array([short_kernel_name(n, None) for n in step.timeline.gpu_names])
    for r in rows:
        mine = names == r["kernel"]
        assert r["calls"] == int(mine.sum())
        assert r["launch_delay_us"] == pytest.approx(float(np.mean(step.launch_delay_us[mine])))
        assert r["host_per_launch_us"] == pytest.approx(float(np.mean(step.host_per_launch_us[mine])))


def test_the_cli_prints_the_graph_launch_once_and_gaps_for_its_kernels(capsys):
    report = analyse(HF / "hf_llama_graph.json.gz")
    text = format_report([report], default_replay_cost())
    table = text.split("kernels by GPU time")[1].splitlines()[1:]
    assert "graph launch" in table[0] and GRAPH_LAUNCH in table[0]
    assert all(" gap " in line and "delay" not in line for line in table[1:9])
    assert main([str(HF / "hf_llama_eager_sync.json.gz")]) == 0
    eager = capsys.readouterr().out.split("kernels by GPU time")[1].splitlines()[1:13]
    assert all(" delay " in line and "graph launch" not in line for line in eager)
