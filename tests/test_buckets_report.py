"""Layout comparison: time lost to padding, eager fallback, graph memory, the budget form and the CLI."""

import numpy as np
import pytest

from core.step_plan import BASELINE, FUSED_GRAPH, GRAPH, StepPlan, toggled
from sim.buckets import layouts as bk
from sim.buckets import memory as bm
from sim.buckets import report as br
from sim.buckets.workloads import Workload, geometric, uniform
from sim.config import PRESETS
from sim.step.schedule import simulate_step

PRESET = PRESETS["chapter"]
MODEL, HW = PRESET.model, PRESET.hardware


@pytest.fixture(scope="module")
def times():
    return br.time_model(MODEL, HW, 300)


def test_time_model_agrees_with_simulate_step(times):
    for batch in (1, 24, 200):
        graph = simulate_step(MODEL, HW, StepPlan(GRAPH, batch, buckets=(batch,)))
        eager = simulate_step(MODEL, HW, StepPlan(BASELINE, batch))
        assert times.graph_step_us[batch] == pytest.approx(graph.metrics.step_us)
        assert times.graph_busy_us[batch] == pytest.approx(graph.metrics.gpu_busy_us)
        assert times.eager_step_us[batch] == pytest.approx(eager.metrics.step_us)


def test_analyse_by_hand(times):
    wl = Workload("two sizes", [3, 300], [3, 1])
    memory = br.memory_model(MODEL)
    s = br.analyse("x", (4, 8), wl, times, memory, budget_bytes=1e12)
    # Batch 3 pads one row into bucket 4 (3 of 4 steps); batch 300 runs eager.
    assert s.padded_rows == pytest.approx(0.75)
    assert s.waste_pct == pytest.approx(25.0)
    # The padded row costs its matmul rows but reads no KV cache (kv_row_us of GPU time).
    assert 0 < times.kv_row_us < times.graph_busy_us[4] - times.graph_busy_us[3]
    padded_busy = times.graph_busy_us[4] - times.kv_row_us
    assert s.padding_gpu_us == pytest.approx(0.75 * (padded_busy - times.graph_busy_us[3]))
    assert s.eager_sizes == 1 and s.eager_share == pytest.approx(0.25)
    assert s.eager_cost_us == pytest.approx(0.25 * (times.eager_step_us[300] - times.graph_step_us[300]))
    assert s.eager_cost_us > 0  # the chapter's model is launch-bound: eager is slower
    padded_step = times.graph_step_us[4] - times.kv_row_us
    assert s.step_us == pytest.approx(0.75 * padded_step + 0.25 * times.eager_step_us[300])
    assert s.graphs == 2 and s.fits_budget is True
    assert s.memory_bytes == pytest.approx(bm.graph_memory_bytes((4, 8), memory), abs=1)


def test_graph_memory_model_by_hand():
    m = bm.GraphMemoryModel(
        static_bytes_per_row=100, pool_bytes_per_row=1000, nodes_per_graph=10, node_bytes=5
    )
    parts = m.breakdown((1, 4, 8))
    assert parts["static"] == 100 * 13  # each graph pins its own static rows
    assert parts["nodes"] == 3 * 10 * 5
    assert parts["pool"] == 1000 * 8  # one shared pool, sized by the largest graph
    shared = bm.GraphMemoryModel(100, 1000, 10, 5, static_per_graph=False)
    assert shared.breakdown((1, 4, 8))["static"] == 100 * 8
    assert bm.graph_memory_bytes((1, 4, 8), m) == 1300 + 150 + 8000
    with pytest.raises(ValueError, match="nodes_per_graph"):
        bm.GraphMemoryModel(1, 1, 0)


def test_memory_model_for_a_preset_counts_kernels():
    unfused, fused = br.memory_model(MODEL, GRAPH), br.memory_model(MODEL, FUSED_GRAPH)
    assert unfused.nodes_per_graph == 32 * 11 + 4
    assert fused.nodes_per_graph == 32 * 4 + 4
    # More graphs pin more memory; the dense layout is the most expensive.
    sizes = {name: bm.graph_memory_bytes(bk.layout(name, 256), unfused) for name in bk.LAYOUTS}
    assert sizes["dense"] == max(sizes.values()) and sizes["powers of two"] == min(sizes.values())


def test_measured_memory_interpolates_and_extrapolates():
    measured = br.MeasuredGraphMemory.from_captures(
        [
            {"bucket": 1, "graph_mem_bytes": 100},
            {"bucket": 5, "graph_mem_bytes": 500},
            {"bucket": 9, "graph_mem_bytes": 700},
        ]
    )
    assert list(measured.per_graph_bytes([1, 3, 7, 13])) == [100, 300, 600, 900]
    assert measured.breakdown((1, 5))["total"] == 600
    with pytest.raises(ValueError, match="two or more"):
        br.MeasuredGraphMemory.from_captures([{"bucket": 1, "graph_mem_bytes": 1}])


def test_measured_memory_separates_the_shared_pool():
    # Captured largest first: the pool grows at bucket 8 (800 bytes), the graphs cost 10 + 2/row.
    captures = [
        {"bucket": 8, "graph_mem_bytes": 826, "pool_bytes": 800},
        {"bucket": 4, "graph_mem_bytes": 18, "pool_bytes": 0},
        {"bucket": 2, "graph_mem_bytes": 14, "pool_bytes": 0},
    ]
    measured = br.MeasuredGraphMemory.from_captures(captures)
    parts = measured.breakdown((2, 4, 8))
    assert parts["nodes"] == pytest.approx(14 + 18 + 26)
    assert parts["pool"] == pytest.approx(800)
    assert parts["total"] == pytest.approx(sum(c["graph_mem_bytes"] for c in captures))
    # A layout topping out at 4 needs only half the pool (100 bytes per row).
    assert measured.breakdown((2, 4))["pool"] == pytest.approx(400)


@pytest.mark.parametrize("budget_mib", [3, 30, 60, 200, 10_000])
def test_budget_form_respects_the_budget(times, budget_mib):
    wl = geometric(12, 256)
    memory = br.memory_model(MODEL)
    layout = br.optimise(wl, times, memory, budget_mib * br.MIB, max_buckets=64, objective="rows")
    if layout is None:
        assert memory.breakdown((wl.batch_sizes.max(),))["total"] > budget_mib * br.MIB
        return
    assert memory.breakdown(layout)["total"] <= budget_mib * br.MIB
    assert layout[-1] == 256 and len(layout) <= 64
    # No layout from the exact per-count optima that fits the budget pads less.
    fitting = [
        c
        for lay, c in bk.optimal_layouts(wl.batch_sizes, wl.weights, 64)
        if memory.breakdown(lay)["total"] <= budget_mib * br.MIB
    ]
    assert bk.padding_waste(layout, wl.batch_sizes, wl.weights) == pytest.approx(min(fitting))


def test_more_budget_never_hurts(times):
    wl = uniform(256)
    memory = br.memory_model(MODEL)
    steps = []
    for mib in (20, 50, 100, 400):
        layout = br.optimise(wl, times, memory, mib * br.MIB)
        steps.append(br.analyse("o", layout, wl, times, memory).step_us)
    assert all(b <= a + 1e-9 for a, b in zip(steps[:-1], steps[1:], strict=True))
    assert steps[-1] < steps[0]


def test_compare_adds_the_optimum_and_beats_presets():
    wl = geometric(16, 256)
    layouts = {n: bk.layout(n, 256) for n in ("chapter", "powers of two")}
    stats = br.compare(MODEL, HW, layouts, wl, budget_bytes=200 * br.MIB)
    names = [s.name for s in stats]
    assert names == ["chapter", "powers of two", br.OPTIMAL_NAME]
    best = stats[-1]
    assert best.fits_budget and best.step_us <= min(s.step_us for s in stats[:2] if s.fits_budget)
    rows = br.table_rows(stats)
    assert rows[0]["layout"] == "chapter" and rows[0]["graphs"] == 13 and rows[0]["fits budget"] == "yes"
    full = br.table_rows(stats, full_buckets=True)
    assert full[0]["buckets"] == "1 2 4 8 16 24 32 48 64 96 128 192 256"
    assert "…" in rows[0]["buckets"]


def test_format_layout_comparison_has_the_chapters_three_layouts():
    text = br.format_layout_comparison(MODEL, HW, max_batch=256)
    for name in ("powers of two", "chapter", "dense", "graph MiB", "padding waste %"):
        assert name in text
    assert br.OPTIMAL_UNBOUNDED in text  # no budget: the optimum over up to 64 graphs
    assert "Memory budget 512 MiB" in br.format_layout_comparison(MODEL, HW, 256, budget_mib=512)


def test_cli_prints_the_table(capsys):
    assert br.main(["--max-batch", "256", "--budget-mib", "512"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "Graph memory budget: 512 MiB" in out
    dense = next(line for line in lines if line.startswith("dense"))
    assert " 256 " in dense and " no " in dense  # 256 graphs do not fit 512 MiB
    assert any(line.startswith(br.OPTIMAL_NAME) for line in lines)
    for name in bk.LAYOUTS:
        assert any(line.startswith(name) for line in lines)


def test_cli_rejects_bad_input(capsys, tmp_path):
    assert br.main(["--custom", "1,2,x"]) == 2
    assert "item 3" in capsys.readouterr().err
    assert br.main(["--max-batch", "0"]) == 2
    assert br.main(["--max-graphs", "0"]) == 2
    bad = tmp_path / "h.csv"
    bad.write_text("batch,count\n1,-3\n")
    assert br.main(["--csv", str(bad)]) == 2
    assert "row 2" in capsys.readouterr().err


def test_cli_with_a_csv_workload(capsys, tmp_path):
    good = tmp_path / "h.csv"
    good.write_text("batch,count\n1,50\n7,30\n40,20\n")
    assert br.main(["--csv", str(good), "--layouts", "chapter", "--max-batch", "64"]) == 0
    out = capsys.readouterr().out
    assert "mean batch 10.6" in out
    optimum = next(line for line in out.splitlines() if line.startswith(br.OPTIMAL_UNBOUNDED))
    assert optimum.rstrip().endswith("1, 7, 40")  # three sizes, three graphs, no padding


def test_cli_max_graphs_and_objective(capsys):
    args = ["--layouts", "chapter", "--max-graphs", "5", "--objective", "rows", "--max-batch", "64"]
    assert br.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    optimum = next(line for line in lines if line.startswith(br.OPTIMAL_UNBOUNDED))
    assert optimum.split()[3] == "5"  # "optimal, no budget" then the graph count
    expected = bk.optimal_buckets(np.arange(1, 65), np.ones(64), 5)
    assert optimum.rstrip().endswith(", ".join(map(str, expected)))


def test_binding_limit_names_what_holds_the_optimiser_back():
    w = uniform(256)
    for budget in (256, 512):  # issue 14: both budgets gave 64 graphs, because the graph count binds
        binding = br.binding_limits(MODEL, HW, w, budget_bytes=budget * br.MIB, max_buckets=64)
        assert binding.graphs and not binding.budget and binding.relaxed.graphs == 65
        best = br.compare(MODEL, HW, {}, w, budget_bytes=budget * br.MIB, max_buckets=64)[-1]
        text = binding.sentence(64, best, budget * br.MIB)
        assert "most graphs the optimiser may use (64)" in text and "a larger budget changes nothing" in text
    tight = br.binding_limits(MODEL, HW, w, budget_bytes=100 * br.MIB, max_buckets=64)
    assert tight.budget and not tight.graphs and tight.relaxed.memory_bytes > 100 * br.MIB
    best = br.compare(MODEL, HW, {}, w, budget_bytes=100 * br.MIB, max_buckets=64)[-1]
    assert best.graphs < 64 and "memory budget" in tight.sentence(64, best, 100 * br.MIB)
    # Sixteen distinct sizes and room for all: nothing binds, more graphs would not help.
    free = br.binding_limits(MODEL, HW, geometric(4, 16), budget_bytes=512 * br.MIB, max_buckets=64)
    assert not free.graphs and not free.budget and free.relaxed is None
    assert br.binding_limits(MODEL, HW, w, budget_bytes=0.0, max_buckets=64) is None  # nothing fits


@pytest.mark.parametrize("key", sorted(PRESETS))
@pytest.mark.parametrize("fusion", [False, True])
def test_padded_steps_are_the_simulators(key, fusion):
    # A padded batch costs its matmul rows at the bucket, but its dummy rows read no KV cache: the
    # optimiser's times are simulate_step's, padding included.
    preset = PRESETS[key]
    times = br.time_model(preset.model, preset.hardware, 256, toggled(fusion, True))
    for n, bucket in ((1, 2), (3, 4), (17, 24), (33, 48), (100, 256), (255, 256)):
        step = simulate_step(
            preset.model,
            preset.hardware,
            StepPlan(toggled(fusion, True), n, buckets=(bucket,)),
        )
        assert step.plan.padded_rows == bucket - n
        assert times.padded_step_us(n, bucket) == pytest.approx(step.metrics.step_us, rel=1e-9)
        assert times.padded_busy_us(n, bucket) == pytest.approx(step.metrics.gpu_busy_us, rel=1e-9)


def test_llama_batch_33_in_bucket_48_is_charged_what_the_simulator_charges():
    preset = PRESETS["llama3-8b-h100"]
    wl = Workload("33 only", [33], [1])
    times = br.time_model(preset.model, preset.hardware, 48, FUSED_GRAPH)
    stats = br.analyse("x", (48,), wl, times, br.memory_model(preset.model, FUSED_GRAPH))
    step = simulate_step(preset.model, preset.hardware, StepPlan(FUSED_GRAPH, 33))
    assert step.plan.bucket == 48
    assert stats.step_us == pytest.approx(step.metrics.step_us, rel=1e-9)
    assert stats.step_us < times.graph_step_us[48]  # not the whole 48-row step: 15 rows skip their KV reads
    unpadded = simulate_step(preset.model, preset.hardware, StepPlan(FUSED_GRAPH, 33, buckets=(33,)))
    assert stats.padding_gpu_us == pytest.approx(
        step.metrics.gpu_busy_us - unpadded.metrics.gpu_busy_us, rel=1e-9
    )


def test_the_optimum_is_the_best_layout_by_the_simulators_own_times():
    # Brute force over every layout of at most 3 buckets (the largest size always one of them), each
    # scored with simulate_step's padded steps: the optimiser finds the least expected step time.
    from itertools import combinations

    preset = PRESETS["llama3-8b-h100"]
    model, hw = preset.model.with_layers(2), preset.hardware
    sizes = np.arange(1, 13)
    wl = Workload("skewed", sizes, 1.0 / sizes)
    times = br.time_model(model, hw, 12, FUSED_GRAPH)
    memory = br.memory_model(model, FUSED_GRAPH)
    step = {
        (n, b): simulate_step(model, hw, StepPlan(FUSED_GRAPH, n, buckets=(b,))).metrics.step_us
        for b in sizes
        for n in sizes
        if n <= b
    }

    def expected(layout):
        return sum(w * step[(n, min(b for b in layout if b >= n))] for n, w in zip(sizes, wl.weights))

    layouts = [(*c, 12) for k in range(3) for c in combinations(range(1, 12), k)]
    best = min(layouts, key=expected)
    found = br.optimise(wl, times, memory, None, max_buckets=3)
    assert expected(found) == pytest.approx(expected(best), rel=1e-12)
    assert br.analyse("found", found, wl, times, memory).step_us == pytest.approx(expected(found), rel=1e-9)


def test_the_optimiser_weighs_padding_without_the_dummy_rows_kv_reads():
    # Batch 1 is common, 2 rare, 3 common; one bucket besides 3. Charging a padded row the whole row
    # (graph_step_us alone) pads the rare 2s into 3 (cost 0.05 x 10 < 1 x 1). With the KV reads a dummy
    # row skips (0.95 us of the 1-10 us a row costs), padding a 1 into 2 costs only 0.05: bucket 2 wins.
    times = br.TimeModel(
        graph_step_us=np.array([np.nan, 10.0, 11.0, 21.0]),
        graph_busy_us=np.array([np.nan, 10.0, 11.0, 21.0]),
        eager_step_us=np.array([np.nan, 50.0, 50.0, 50.0]),
        kv_row_us=0.95,
    )
    wl = Workload("1, 2 rarely, 3", [1, 2, 3], [1.0, 0.05, 1.0])
    memory = bm.GraphMemoryModel(0, 0, 1)
    assert br.optimise(wl, times, memory, None, max_buckets=2) == (2, 3)
    steps = {lay: br.analyse("x", lay, wl, times, memory).step_us for lay in ((1, 3), (2, 3))}
    assert steps[(2, 3)] < steps[(1, 3)]
    unaware = br.TimeModel(times.graph_step_us, times.graph_busy_us, times.eager_step_us, kv_row_us=0.0)
    assert br.optimise(wl, unaware, memory, None, max_buckets=2) == (1, 3)
