"""The step without the profiler on the page's and the CLI's terms: the recorder's figure where a trace carries
one (exactly), the estimate and a one-line note where it carries none or a bad one, speed-ups against it."""

import gzip
import json
import math
from pathlib import Path

import pytest

from core.trace import UNTRACED_KEY, analyse, read_trace
from sim.trace.report import main as trace_main
from sim.trace.untraced import untraced_steps
from sim.trace.whatif import default_replay_cost, graphs_whatif

DATA = Path(__file__).resolve().parent / "data"
RECORDED = DATA / "profiler" / "h200" / "qwen2_eager_b1_default.json.gz"  # written by gpu_probe/recorder.py


def _cli_json(path, capsys) -> dict:
    assert trace_main([str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _with_block(tmp_path, block, where: str = "head", raw: str | None = None) -> Path:
    """The recorder's trace with its block replaced by `block` (absent where None), or by `raw` text."""
    trace = json.loads(gzip.decompress(RECORDED.read_bytes()))
    trace.pop(UNTRACED_KEY)
    text = json.dumps(trace)
    value = raw if raw is not None else json.dumps(block)
    if block is not None or raw is not None:
        if where == "head":
            text = "{" + f'"{UNTRACED_KEY}": {value}, ' + text[1:]
        else:  # after the event list, as another exporter might put it
            text = text[:-1] + f', "{UNTRACED_KEY}": {value}' + "}"
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text.encode()))
    return path


def test_a_trace_written_by_the_recorder_shows_exactly_the_recorded_figure(capsys):
    report = analyse(RECORDED)
    block = report.trace.recorded_untraced
    run = json.loads((RECORDED.parent / "profiler_cost.json").read_text())
    (entry,) = [t for t in run["traces"] if t["trace"] == RECORDED.name]
    assert block == entry["untraced"] and report.trace.recorded_note == ""
    (u,) = untraced_steps(report)
    assert u.source == "metadata" and u.source_label == "measured by the recorder"
    assert u.step_us == block["median_us"]  # exactly: the figure is quoted, not re-derived
    assert u.step.metrics.step_us == pytest.approx(block["median_us"], rel=1e-4)  # its lanes, drawn to match
    assert u.scale > 0 and not u.notes
    out = _cli_json(RECORDED, capsys)
    (step,) = out["steps"]
    assert step["step_us"] == report.steps[0].metrics.step_us  # as traced
    assert step["step_us_untraced"] == block["median_us"] and step["untraced_source"] == "metadata"
    assert out["untraced"] == {"source": "metadata", "median_us": block["median_us"], "notes": []}


def test_speedups_are_quoted_against_the_step_without_the_profiler_and_the_traced_step(capsys):
    out = _cli_json(RECORDED, capsys)
    report = analyse(RECORDED)
    (u,) = untraced_steps(report)
    graphs = graphs_whatif(u.step, default_replay_cost()).metrics.step_us
    w = out["whatif"]["graphs"]
    assert w["step_us"] == pytest.approx(graphs)
    assert w["speedup"] == pytest.approx(u.step_us / graphs)
    assert w["vs_trace"] == pytest.approx(report.steps[0].metrics.step_us / graphs)
    assert w["vs_trace"] > w["speedup"] > 1  # the traced step is the slower one
    text = trace_main([str(RECORDED)]) == 0 and capsys.readouterr().out
    assert "faster than your step without the profiler" in text and "vs the traced step" in text
    assert "measured by the recorder" in text


def test_a_trace_without_the_block_gets_the_estimate(capsys):
    out = _cli_json(DATA.parent.parent / "data" / "traces" / "hf" / "hf_llama_eager_sync.json.gz", capsys)
    assert {s["untraced_source"] for s in out["steps"]} == {"estimate"}
    assert all(s["step_us_untraced"] < 0.8 * s["step_us"] for s in out["steps"])  # host-bound: much faster
    assert out["untraced"]["notes"] == []  # nothing to say: no block, no note
    assert out["median"]["step_us_untraced"] == out["untraced"]["median_us"]


GOOD = {
    "schema": 1,
    "steps": 40,
    "median_us": 27084.9,
    "p10_us": 26299.0,
    "p90_us": 28972.0,
    "timer": "cuda_events",
}
BAD = {
    "a string": "27084.9",
    "a list": [27084.9],
    "a number": 27084.9,
    "another schema": {**GOOD, "schema": 2},
    "schema true": {**GOOD, "schema": True},
    "no median": {k: v for k, v in GOOD.items() if k != "median_us"},
    "a negative median": {**GOOD, "median_us": -5.0},
    "a zero median": {**GOOD, "median_us": 0},
    "a median as text": {**GOOD, "median_us": "27084.9"},
    "a median true": {**GOOD, "median_us": True},
    "an absurd median": {**GOOD, "median_us": 1e15, "p90_us": 1e16},
    "a median outside p10-p90": {**GOOD, "median_us": 30000.0},
    "no steps": {**GOOD, "steps": 0},
    "an unknown timer": {**GOOD, "timer": "sundial"},
    "nested too deep": {"schema": {"a": [[[[1]]]]}},
}


@pytest.mark.parametrize("why", list(BAD), ids=list(BAD))
def test_a_bad_block_gets_the_estimate_and_one_line_saying_why(tmp_path, capsys, why):
    path = _with_block(tmp_path, BAD[why])
    trace = read_trace(path)
    assert trace.recorded_untraced is None
    note = trace.recorded_note
    assert note.startswith(f"The trace's {UNTRACED_KEY} block is not used (") and "\n" not in note
    out = _cli_json(path, capsys)
    assert out["steps"][0]["untraced_source"] == "estimate" and out["untraced"]["notes"] == [note]


def test_nan_and_a_block_that_is_not_json_after_the_events_get_the_estimate(tmp_path, capsys):
    nan = _with_block(tmp_path, {**GOOD, "median_us": math.nan})
    assert "median_us is not a number" in read_trace(nan).recorded_note
    broken = _with_block(tmp_path, None, where="tail", raw='{"schema": 1, "median_us": ,}')
    assert "not valid JSON" in read_trace(broken).recorded_note
    assert _cli_json(broken, capsys)["steps"][0]["untraced_source"] == "estimate"


def test_a_block_after_the_events_is_read_too(tmp_path):
    path = _with_block(tmp_path, GOOD, where="tail")
    assert read_trace(path).recorded_untraced == GOOD


def test_a_recorded_figure_absurd_for_the_step_gets_the_estimate(tmp_path):
    tiny = {**GOOD, "median_us": 1.0, "p10_us": 1.0, "p90_us": 1.0}  # below the GPU's own busy time
    (u,) = untraced_steps(analyse(_with_block(tmp_path, tiny)))
    assert u.source == "estimate" and len(u.notes) == 1 and "absurd for this step" in u.notes[0]


def test_a_recorded_figure_above_the_traced_step_is_quoted_with_the_traced_lanes(tmp_path):
    """The host ran slower while timed than while traced (the VM drifts): the measured figure is what it is."""
    report = analyse(_with_block(tmp_path, None))
    traced = report.steps[0].metrics.step_us
    slow = {**GOOD, "median_us": 1.2 * traced, "p10_us": traced, "p90_us": 1.5 * traced}
    (u,) = untraced_steps(analyse(_with_block(tmp_path, slow)))
    assert u.source == "metadata" and u.step_us == 1.2 * traced and u.scale == 0.0
    assert u.step.metrics.step_us == pytest.approx(traced)
    assert len(u.notes) == 1 and "slower while the recorder timed it" in u.notes[0]
