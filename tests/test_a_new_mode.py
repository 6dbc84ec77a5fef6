"""Adding a mode is one row of the modes table; adding a kernel set is one object more.

Two toy modes are put in `core.step_plan.MODES` and nowhere else:

- ONE_LAUNCH changes the schedule: the persistent kernel launched once, without a graph. No mode had
  this schedule (one eager launch, then the fused kernels as phases back to back, each paying a
  barrier), and nothing in the simulator names it: both schedulers derive the host's calls, when the
  phases may start and what separates them from the row and its kernel set's submission
  (`sim.step.kernel_sets`), and must agree.
- HALF_LAUNCH changes a cost: fused, no graphs, half the launch cost. The calibration reads the
  launch scale from the row.

A toy kernel set is put in the table (its name in `KERNEL_SETS`, its rows in `MODES`), in the simulator's
kernel sets (`sim.step.kernel_sets.SETS`) and in the probe's (`gpu_probe.kernel_sets.SETS`), and nowhere else
(`register`):

- PAIRS changes the schedule: the fused layer's four kernels merged pairwise into two launches, each a small
  persistent kernel across the one grid-wide dependency inside it (attention: norm_qkv + rope_attn_o; the
  FFN: norm_gate_up + down_proj), as `sim.step.ops` merges fused kernels where a model has fewer than four.
  Its object says which kernels a layer launches (two, each doing the work of the two it merges), how the
  host submits them (a launch or a node each) and what the probe's kernels of it are for the calibration
  (its two kernels a layer in the persistent kernel's family, the embedding ATen's, the LM head a GEMV;
  their names in a synthetic run).
  The simulator, its sweep, the calibration and the page run it from that object alone.
  Its probe object builds its step as a decoder of its own over the model (on the CPU, the model's PyTorch
  ops), which the probe's session captures for its graph row and calls for its eager row, with a check of its
  own after the capture, a field of its own beside a traced step and a check of its own after the runs: the
  session runs it from that object alone.
"""

import re
from pathlib import Path

import numpy as np
import probe_sessions
import pytest
from streamlit.testing.v1 import AppTest
from synthetic_params import KNOWN_PARAMS

import gpu_probe.kernel_sets as probe_kernel_sets
from core import step_plan
from core.probe_result import load_result
from core.step_plan import FUSED, FUSED_KERNELS, PERSISTENT, PERSISTENT_KERNELS, Mode, StepPlan, modes
from sim.calibration import calibrate, synthetic_result
from sim.calibration.families import INDEX
from sim.config import PRESETS
from sim.step import kernel_sets
from sim.step.kernel_sets import FUSED_PATH, PROBE_KEPT, KernelSet, ProbeKernels, kernel_set
from sim.step.kernels import step_kernels
from sim.step.ops import fused_groups, merged_kernels
from sim.step.schedule import simulate_step, sweep
from sim.step.submission import kernel_by_kernel
from ui.charts import format_us

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
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


# -- the toy kernel set: its object, written as a new kernel set's would be in sim/step/kernel_sets.py ---------
def _pairs_layer(model):
    """The fused layer's kernels merged pairwise: norm_qkv+rope_attn_o, norm_gate_up+down_proj."""
    return merged_kernels(model, fused_groups(2))


def _pairs_path(rows):
    """Its layer's ops in the persistent kernel's family (the split merge too), the embedding ATen's, the final
    norm and the LM head one GEMV."""
    own = {"embedding": "aten", "final_norm": "gemv", "lm_head": "gemv"}
    return {**dict.fromkeys(FUSED_PATH, "persistent"), "split_merge": "persistent", **own}, ()


def _pairs_names(model, rows, memsets):
    return ("indexSelectSmallIndex",) + ("_decode_step_kernel",) * (2 * model.n_layers) + ("_gemv_kernel",)


PAIRS_SET = KernelSet(
    "pairs", _pairs_layer, kernel_by_kernel, ProbeKernels(_pairs_path, PROBE_KEPT, _pairs_names)
)


# -- its probe object, written as a new kernel set's would be in gpu_probe/kernel_sets.py ---------------------
class PairsDecoder:
    """The toy's step on the probe: a decoder of its own over the model, called like it (on the CPU the model's
    PyTorch ops stand in for its two kernels a layer). Counts the rows of each call."""

    def __init__(self, model):
        self.model, self.calls = model, []
        # what the graph runner reads of what it captures
        self.cfg, self.dtype, self.kv_cache, self.device = (
            model.cfg,
            model.dtype,
            model.kv_cache,
            model.device,
        )

    def __call__(self, batch, logits_out=None, workspace=None):
        self.calls.append(batch.size)
        return self.model.unfused_forward(batch, logits_out)


class PairsProbe(probe_kernel_sets.ProbeKernelSet):
    name = "pairs"
    extras = "pair count"

    def decoder(self, session, say):
        decoder = session.decoders.setdefault(self.name, PairsDecoder(session.model))
        return decoder, session.buckets

    def after_capture(self, session, say):
        session.checks["pairs_captured"] = {"passed": True, "detail": "its decoder captured"}

    def profiled_extras(self, session, n):
        return {"pairs": 2 * session.cfg.n_layers}

    def after_runs(self, session, out, modes, say):
        out["checks"]["pairs_ran"] = {"passed": True, "detail": ", ".join(modes)}


PAIRS_PROBE = PairsProbe()


def register(monkeypatch, rows_of, kset: KernelSet, probe=PAIRS_PROBE) -> tuple[tuple[Mode, ...], set]:
    """Put a kernel set in the table and in each layer's kernel sets, as a new one is added: its name in
    `KERNEL_SETS`, its rows in `MODES`, its objects in the simulator's `SETS` and the probe's.
    (the rows, the files that took it)."""
    monkeypatch.setattr(step_plan, "KERNEL_SETS", (*step_plan.KERNEL_SETS, kset.name))
    rows = rows_of()  # a row names a kernel set of the table: made once the name is in it
    for row in rows:
        monkeypatch.setitem(step_plan.MODES, row.name, row)
    monkeypatch.setitem(kernel_sets.SETS, kset.name, kset)
    monkeypatch.setitem(probe_kernel_sets.SETS, probe.name, probe)
    took = (step_plan, kernel_sets, probe_kernel_sets)
    return rows, {Path(m.__file__).relative_to(ROOT).as_posix() for m in took}


@pytest.fixture
def pairs(monkeypatch):
    (row,), _ = register(
        monkeypatch,
        lambda: (Mode("pairs", "pairs", graphs=False, probed=False, toggles=False, colour="#e76f51"),),
        PAIRS_SET,
    )
    return row


def _step(m, batch: int = 1):
    return simulate_step(CHAPTER.model, CHAPTER.hardware, StepPlan(m, batch))


def test_the_table_lists_it(one_launch):
    assert one_launch in modes(modelled=True) and one_launch not in modes(toggles=True)
    assert one_launch not in modes(probed=True) and step_plan.mode("one-launch") is one_launch
    assert one_launch.fused and one_launch.kernels == PERSISTENT_KERNELS and one_launch.title == "one-launch"


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


def test_the_page_offers_it(one_launch, pairs):
    """Both the toy row and the toy kernel set's row, by their titles, drawn as the simulator runs them."""
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    for toy, kernels in ((one_launch, "1 · {:,} phases"), (pairs, "{:,}")):
        choice = at.selectbox(key="mode")
        assert toy.title in choice.options  # shown by its title
        choice.set_value(toy.title).run()
        assert not at.exception, at.exception
        expected = _step(toy).metrics
        shown = {m.label: m.value for m in at.metric}
        assert shown["Kernels / step"] == kernels.format(expected.kernels)
        assert shown["Step time"] == format_us(expected.step_us)
        sweep_chart = next(c for c in at.get("plotly_chart") if c.key == "sim_sweep")
        assert f"{toy.title} (current)" in sweep_chart.proto.spec


# -- the toy kernel set -----------------------------------------------------------------------------
def test_a_kernel_set_is_its_object_and_a_row(monkeypatch):
    (row,), touched = register(monkeypatch, lambda: (Mode("pairs", "pairs", graphs=False),), PAIRS_SET)
    assert kernel_set(row) is PAIRS_SET and row in modes(modelled=True) and step_plan.mode("pairs") is row
    assert probe_kernel_sets.kernel_set(row) is PAIRS_PROBE
    # Three files: the table and one object a layer; the ones docs/architecture.md names for a new kernel set
    # (besides this test).
    doc = (ROOT / "docs" / "architecture.md").read_text()
    bullet = re.search(r"^- \*\*A new kernel set\*\*.*?(?=^- \*\*|^#)", doc, re.M | re.S).group(0)
    named = set(re.findall(r"`([\w/]+\.py)`", bullet))
    assert touched == {"core/step_plan.py", "sim/step/kernel_sets.py", "gpu_probe/kernel_sets.py"}
    assert touched == {f for f in named if not f.startswith("tests/")}, named


# What a kernel set does is its objects': outside them, no module names a set, asks a mode `one_kernel` or
# compares a mode's kernel set with one; nor, in the probe, asks a mode `fused` (which of the model's forwards
# runs is its set's object's to say; the simulator's calibration reads the toggle's `fused` of a toggled row).
BRANCH = re.compile(
    r"\bone_kernel\b|\b(UNFUSED|FUSED|INDUCTOR|PERSISTENT)_KERNELS\b|\.kernels\s*(==|!=|in\b)|\bkernels\s*(==|!=)"
)
ROOMS = {
    "sim": BRANCH,
    "gpu_probe": re.compile(BRANCH.pattern + r"|\b(mode|m|run_mode|graph_mode)\.fused\b"),
    # The page reads what a step is from the simulated step (`SimulatedStep.phases`) or from the result file.
    "ui": BRANCH,
}


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_nothing_outside_the_kernel_set_objects_branches_on_one(room):
    found = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in sorted((ROOT / room).rglob("*.py")) + ([ROOT / "app.py"] if room == "ui" else [])
        if p.name != "kernel_sets.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if ROOMS[room].search(line)
    ]
    assert not found, found


def test_the_guard_sees_the_branches_it_forbids():
    """The lines the probe's session, its live module and the two-GPU result format branched on before their
    kernel sets were objects."""
    for line in (
        'variant = graph_mode.name if graph_mode.one_kernel else "fused" if graph_mode.fused else "unfused"',
        "if run_mode.kernels == INDUCTOR_KERNELS:",
        "model.fused = mode.fused",
        "own = (step_plan.UNFUSED_KERNELS, step_plan.FUSED_KERNELS)",
    ):
        assert ROOMS["gpu_probe"].search(line), line
    for line in ("FUSED_KERNELS_PER_LAYER = len(FUSIONS)", "model.fused = fused"):
        assert not ROOMS["gpu_probe"].search(line), line


def test_the_probe_builds_and_captures_it_from_its_object(monkeypatch, tmp_path):
    """The probe's session on the CPU (the tiny model, PyTorch ops; the runner's bookkeeping without CUDA
    graphs): the toy's graph row captured from its decoder, its eager row called through it, each hook of its
    object run, and nothing of the session's own kernel sets involved."""
    rows, _ = register(
        monkeypatch,
        lambda: (
            Mode("pairs", "pairs", graphs=False, toggles=False),
            Mode("pairs+graph", "pairs", graphs=True, toggles=False),
        ),
        PAIRS_SET,
    )
    from gpu_probe.live import captured_modes

    assert {"pairs+graph"} <= set(captured_modes()) and "pairs" not in captured_modes()
    probe_sessions.cpu_runners(monkeypatch)
    profiled, _ = probe_sessions.stand_in(monkeypatch)
    session, said = probe_sessions.a_session(rows=4, buckets=(1, 2, 4)), []
    session._capture(rows[1], said.append)
    decoder = session.decoders["pairs"]
    assert session.runners["pairs+graph"].model is decoder and not session.errors
    assert session.captures == []  # no CUDA graphs on the CPU: what the runner captured is its bookkeeping
    assert session.checks["graph_vs_eager"]["pairs"]["passed"] and session.checks["pairs_captured"]["passed"]
    out = probe_sessions.empty_result()
    out["checks"].update(session.checks)
    decoder.calls.clear()
    req = {"modes": ["pairs", "pairs+graph"], "batches": [1, 3], "steps": 5, "warmup": 1, "rounds": 1}
    session.measure_into(out, req, lambda msg: None, trace_dir=tmp_path)
    assert not out["errors"], out["errors"]
    runs = {(r["mode"], r["batch"]): r for r in out["runs"]}
    assert set(runs) == {("pairs", 1), ("pairs", 3), ("pairs+graph", 1), ("pairs+graph", 3)}
    assert runs[("pairs+graph", 3)]["bucket"] == 4 and runs[("pairs", 3)]["bucket"] is None
    assert all(r["pairs"] == 2 * session.cfg.n_layers for r in runs.values())
    # The eager row calls the decoder at its rows, the graph row at its bucket (the runner's padded step).
    assert set(decoder.calls) == {1, 3, 4} and out["checks"]["pairs_ran"]["detail"] == "pairs, pairs+graph"
    assert profiled == [
        "pairs · batch 1",
        "pairs · batch 3",
        "pairs+graph · batch 1",
        "pairs+graph · batch 3",
    ]


def test_the_simulator_runs_its_layer_and_its_submission(pairs):
    model, hw = CHAPTER.model, CHAPTER.hardware
    toy, fused = step_kernels(model, pairs), step_kernels(model, FUSED)
    assert toy.layer.names == ("norm_qkv+rope_attn_o", "norm_gate_up+down_proj")
    assert len(toy) == 2 * model.n_layers + 4 < len(fused) == 4 * model.n_layers + 4
    # Each of its kernels does the work of the two fused kernels it merges, no more.
    for arr in ("weight", "per_row", "flops"):
        f = getattr(fused.layer, arr)
        np.testing.assert_allclose(getattr(toy.layer, arr), f[0::2] + f[1::2], rtol=1e-12)
    step, fused_step = _step(pairs), _step(FUSED)
    tl, ftl = step.timeline, fused_step.timeline
    # Half the fused step's launches per layer, each an eager launch.
    assert step.metrics.launches == len(toy) and np.allclose(tl.cpu_dur, hw.eager_launch_us)
    # Each pays one kernel's latency: at batch 1 (memory-bound) its time beyond it is the two fused kernels'.
    layer = slice(1, 3)  # the first layer's kernels, after the embedding
    beyond = np.asarray(ftl.gpu_dur[1:5]) - hw.min_kernel_us
    np.testing.assert_allclose(tl.gpu_dur[layer] - hw.min_kernel_us, beyond[0::2] + beyond[1::2], rtol=1e-9)
    # Kernel i starts once its launch is submitted and kernel i-1 has ended, plus the node gap.
    ready = hw.eager_launch_us * np.arange(1, len(toy) + 1)
    start = [ready[0]]
    for i in range(1, len(toy)):
        start.append(max(ready[i], start[-1] + tl.gpu_dur[i - 1] + hw.graph_node_gap_us))
    np.testing.assert_allclose(tl.gpu_start, start, rtol=1e-12)
    # So the host's lane loses two launches a layer, the GPU two kernel latencies.
    n = model.n_layers
    assert step.metrics.cpu_launch_us == pytest.approx(
        fused_step.metrics.cpu_launch_us - 2 * n * hw.eager_launch_us
    )
    saved = 2 * n * hw.min_kernel_us
    assert step.metrics.gpu_busy_us == pytest.approx(fused_step.metrics.gpu_busy_us - saved, rel=1e-12)


def test_the_sweep_runs_the_kernel_set_as_the_step_does(pairs):
    batches = np.array([1, 3, 8, 17, 64, 100, 300, 512])
    s = sweep(CHAPTER.model, CHAPTER.hardware, batches)[pairs]
    assert (s.launches == 2 * CHAPTER.model.n_layers + 4).all() and not s.replayed.any()
    for i, b in enumerate(batches):
        step = _step(pairs, int(b)).metrics
        assert s.step_us[i] == pytest.approx(step.step_us, rel=1e-12)
        assert s.gpu_busy_us[i] == pytest.approx(step.gpu_busy_us, rel=1e-12)


def test_the_calibration_fits_the_kernel_set_from_its_object(pairs):
    """A synthetic run with the toy among its modes: its kernels named and put in families as its object says,
    its work the object's path's, and the fit recovers it."""
    model = PRESETS["probe-0.5b-h200"].model.with_layers(8)
    result = load_result(synthetic_result(KNOWN_PARAMS, model, batches=(1, 8, 64)))
    cal = calibrate(result, loo=False)
    points = [p for p in cal.points if p.mode is pairs]
    assert len(points) == 3
    for p in points:
        assert p.kernels == 2 * model.n_layers + 2 and not p.replays
        assert p.counts[INDEX["persistent"]] == 2 * model.n_layers and p.counts[INDEX["gemv"]] == 1
    rows = [r for r in cal.rows() if r["mode"] == "pairs"]
    assert all(abs(r["step error %"]) < 1.0 for r in rows)
    assert cal.params["persistent_latency_us"] == pytest.approx(
        KNOWN_PARAMS["persistent_latency_us"], rel=0.02
    )
