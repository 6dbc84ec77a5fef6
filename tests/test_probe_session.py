"""gpu_probe/session.py's measuring on the CPU, the GPU's parts stood in for: every step built first, all
timed taking turns with the steps given beside them, the host's speed sampled before and after, then each
profiled and checkpointed; a step that fails is an error of the run, not the end of it. And the host
speed index's arithmetic (gpu_probe/host_speed.py), with the real thing on a GPU (marked)."""

import probe_sessions
import pytest
import torch
from probe_results import host_block
from probe_sessions import empty_result

from core.probe_result import parse_host
from gpu_probe import host_speed, measure
from gpu_probe.config import get_config


def a_session(fail_at=None):
    """A ProbeSession over the tiny model on the CPU (tests/probe_sessions.py); its eager step raises at batch
    `fail_at`."""
    session = probe_sessions.a_session()
    forward = session.model.forward

    def failing(batch, *args):
        if batch.size == fail_at:
            raise RuntimeError("CUDA out of memory (stand-in)")
        return forward(batch, *args)

    session.model.forward = failing
    return session


@pytest.fixture
def stand_ins(monkeypatch):
    """The GPU-only parts of measuring: the profiler and the host speed index."""
    return probe_sessions.stand_in(monkeypatch)


def test_every_step_is_timed_in_the_same_rounds_then_profiled(stand_ins):
    profiled, hosts = stand_ins
    session, out, saved = a_session(), empty_result(), []
    pending = []
    beside_calls = []
    req = {"modes": ["eager"], "batches": [1, 2], "steps": 6, "warmup": 1, "rounds": 2}
    beside = session.measure_into(
        out,
        req,
        lambda msg: None,
        checkpoint=lambda o: (
            saved.append(len(o["runs"])),
            pending.append(sorted(o["timed_not_yet_profiled"])),
        ),
        beside={"ref": lambda: beside_calls.append(1)},
    )
    assert [(r["mode"], r["batch"]) for r in out["runs"]] == [("eager", 1), ("eager", 2)]
    assert all(r["timing_rounds"] == 2 and r["step_us_p10"] <= r["step_us_median"] for r in out["runs"])
    assert profiled == ["eager · batch 1", "eager · batch 2"] and saved == [0, 1, 2]
    # Saved once all are timed, before any is profiled: a run stopped while profiling keeps its timings.
    assert pending == [["eager b1", "eager b2"], ["eager b2"], []] and "timed_not_yet_profiled" not in out
    assert beside["ref"]["timing_rounds"] == 2 and len(beside_calls) == 1 + 2 * (1 + 3 + 3)
    assert hosts[0].whens == ["before", "after"] and out["host"] == {"samples": ["before", "after"]}
    assert not out["errors"] and out["settings"]["context_len"] == session.cfg.prefill_len


def test_a_step_that_fails_is_recorded_and_the_rest_measured(stand_ins):
    profiled, _ = stand_ins
    session, out = a_session(fail_at=2), empty_result()
    req = {"modes": ["eager"], "batches": [1, 2, 4], "steps": 5, "warmup": 1}
    beside = session.measure_into(out, req, lambda msg: None, beside={"ref": lambda: 1 / 0})
    assert [r["batch"] for r in out["runs"]] == [1, 4]
    assert out["errors"] == ["eager at batch 2: RuntimeError: CUDA out of memory (stand-in)"]
    assert isinstance(beside["ref"], ZeroDivisionError) and profiled == ["eager · batch 1", "eager · batch 4"]


def test_the_reference_block_takes_its_timings_from_the_shared_rounds(monkeypatch):
    from gpu_probe import hf_reference

    reference = object.__new__(hf_reference.ReferenceSteps)
    reference.cfg, reference.model, reference.started = get_config("tiny"), None, 0.0
    reference.block = {"name": "n", "runs": [], "errors": []}
    steps = []

    class Decoder:
        def rewind(self):
            pass

        def step(self):
            steps.append(1)

    reference.decoders = {("eager", 1): Decoder(), ("graph", 1): Decoder()}
    monkeypatch.setattr(measure, "profile_step", lambda step, label: label)
    monkeypatch.setattr(
        measure,
        "run_record",
        lambda mode, batch, timing, traced, n: {
            "mode": mode,
            "batch": batch,
            "traced": traced,
            "timeline": 0,
            "bucket": 0,
            "padded_rows": 0,
            "eager_fallback": False,
            **timing,
        },
    )
    assert set(reference.steps()) == {("hf", "eager", 1), ("hf", "graph", 1)}
    block = reference.finish(
        {("hf", "eager", 1): {"step_us_median": 5.0}, ("hf", "graph", 1): MemoryError("x")}
    )
    assert block["runs"] == [
        {"mode": "eager", "batch": 1, "traced": "Hugging Face eager · batch 1", "step_us_median": 5.0}
    ]
    assert block["errors"] == ["graph at batch 1: MemoryError: x"] and not reference.decoders


def test_the_graph_fit_is_fixed_plus_per_node_and_never_negative():
    fixed, per_node = host_speed.fit_graph([1, 16, 64, 256], [4.025, 4.4, 5.6, 10.4])
    assert fixed == pytest.approx(4.0, abs=1e-2) and per_node == pytest.approx(0.025, abs=1e-3)
    fixed, per_node = host_speed.fit_graph([1, 16, 64, 256], [5.0, 4.9, 4.8, 4.7])  # noise: no negative slope
    assert per_node == 0.0 and fixed == pytest.approx(4.85)
    assert host_speed.fit_graph([1], [3.0]) == (3.0, 0.0)
    stats = host_speed.stats([1.0, 2.0, 3.0, 4.0, 100.0])
    assert stats["p10"] <= stats["median"] == 3.0 <= stats["p90"]
    assert isinstance(host_speed.cpu_name(), str) and host_speed.cpu_name()
    assert parse_host(host_block()).torch_launch_us == 6.1  # the builder's block is what the probe writes


@pytest.mark.cuda
def test_the_host_index_measured_on_a_gpu_parses():
    speed = host_speed.HostSpeed(rounds=3, per_round=50, graph_per_round=4)
    speed.sample("before")
    speed.sample("after")
    block = speed.block()
    speed.close()
    host = parse_host(block)
    assert [when for when, _ in host.samples] == ["before", "after"] and host.launches == 150
    assert 0.5 < host.torch_launch_us < 200 and host.index.graph_nodes == host_speed.GRAPH_NODES
    assert host.index.triton_launch_us is not None and torch.cuda.is_available()


def test_run_probe_times_the_reference_beside_the_probe_s_steps(monkeypatch):
    """live.run_probe's wiring, the GPU stood in for: the reference's steps go into the session's rounds and
    its timings come back to it; the launcher asked for is the one recorded."""
    from gpu_probe import hf_reference, live
    from gpu_probe.kernels import launch

    seen = {}

    class Reference:
        def __init__(self, cfg, batches, say):
            self.block = {"name": "hf"}

        def steps(self):
            return {("hf", "eager", 1): "the reference's step"}

        def finish(self, timings, say):
            seen["finish"] = timings
            return {"name": "hf", "runs": []}

    class Session:
        cfg = get_config("tiny")

        def serves(self, *args):
            return True

        def capture(self, graph_modes, say):
            seen["capture"] = list(graph_modes)

        def measure_into(self, out, req, say, trace_dir, checkpoint, beside=None):
            seen["beside"], seen["rounds"] = beside, req["rounds"]
            return {key: {"timing_rounds": req["rounds"]} for key in beside}

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "Test GPU")
    monkeypatch.setattr(measure, "hbm_copy_GBps", lambda: 3000.0)
    monkeypatch.setattr(measure, "matmul_TFLOPs", lambda: 700.0)
    monkeypatch.setattr(hf_reference, "ReferenceSteps", Reference)
    previous = launch.set_bound(True)
    try:
        out = live.run_probe(
            "tiny", [1], ["eager"], steps=20, session=Session(), reference="hf", launcher="plain"
        )
        assert not launch._bound_on
    finally:
        launch.set_bound(previous)
    assert seen["beside"] == {("hf", "eager", 1): "the reference's step"} and seen["rounds"] == 4
    assert seen["finish"] == {("hf", "eager", 1): {"timing_rounds": 4}} and out["reference"]["name"] == "hf"
    assert out["settings"]["launcher"] == "kernel[grid]" and out["settings"]["rounds"] == 4
    with pytest.raises(ValueError, match="launcher must be one of"):
        live.run_probe("tiny", [1], ["eager"], session=Session(), launcher="fast")


def test_the_host_index_assembles_a_block_the_result_format_accepts(monkeypatch):
    """HostSpeed's rounds, samples and pooling on the CPU (Triton's interpreter; a graph replay stood in for
    by a no-op): the block parses, each sample and the pooled index have every kind."""

    class Graph:
        def replay(self):
            pass

    monkeypatch.setattr(host_speed.HostSpeed, "_capture", lambda self, nodes: Graph())
    speed = host_speed.HostSpeed(rounds=2, per_round=3, graph_per_round=2, device="cpu")
    assert set(speed.kinds) == {"torch_launch_us", "triton_launch_us"}  # no bound launcher in the interpreter
    # The interpreter runs the kernel in Python: on a loaded 2-core machine one launch took over 10 ms, which
    # the result format refuses as no host's launch. What this tests is the rounds, samples and pooling.
    speed.kinds["triton_launch_us"] = lambda: None
    speed.sample("before")
    speed.sample("after")
    block = speed.block()
    host = parse_host(block)
    assert host.launches == 6 and [when for when, _ in host.samples] == ["before", "after"]
    assert host.index.graph_nodes == host_speed.GRAPH_NODES and host.index.triton_launch_us.median > 0
    assert host.index.triton_bound_launch_us is None and host.python and host.cpu
