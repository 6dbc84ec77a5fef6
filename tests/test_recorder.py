"""gpu_probe.recorder on the CPU: a tiny torch loop timed, profiled, and its untraced time in the trace."""

import gzip
import json
import math

import pytest
import torch

from gpu_probe import recorder
from gpu_probe.recorder import METADATA_KEY, percentile, read_untraced, record


def _tiny_loop():
    w = torch.randn(32, 32)
    x = torch.randn(1, 32)

    def step():
        h = x
        for _ in range(4):
            h = torch.relu(h @ w)
        return float(h.sum())

    return step


def _load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("rec") / "tiny.json.gz"
    rec = record(_tiny_loop(), path, steps=12, warmup=2, profile_steps=3, device="cpu", record_shapes=True)
    torch.set_num_threads(threads)
    return rec


def test_the_trace_carries_the_measured_numbers(recorded):
    trace = _load(recorded.trace_path)
    block = trace[METADATA_KEY]
    assert block == recorded.untraced
    assert block["schema"] == 1 and block["steps"] == 12 and len(recorded.step_us) == 12
    assert block["timer"] == "host_clock" and block["device"] == "cpu" and block["torch"] == torch.__version__
    assert block["median_us"] == round(percentile(recorded.step_us, 50), 3)
    assert block["p10_us"] <= block["median_us"] <= block["p90_us"]
    assert all(math.isfinite(v) and v > 0 for v in recorded.step_us)
    assert block["profiled_steps"] == 3 and block["record_shapes"] is True and block["with_stack"] is False
    assert read_untraced(trace) == block


def test_the_block_is_a_top_level_key_written_before_the_events(recorded):
    assert recorded.metadata_written_by == "profiler"  # add_metadata_json landed on this torch
    with gzip.open(recorded.trace_path, "rb") as f:
        text = f.read()
    assert text.index(f'"{METADATA_KEY}"'.encode()) < text.index(b'"traceEvents"')


def test_the_trace_reader_picks_up_the_block(recorded):
    """core.trace reads the recorder's block from the trace it wrote (a CPU profile: no steps to draw)."""
    from core.trace import read_trace

    trace = read_trace(recorded.trace_path, host_only=True)
    assert trace.recorded_untraced == recorded.untraced and trace.recorded_note == ""
    assert trace.recorded_untraced["median_us"] == round(percentile(recorded.step_us, 50), 3)


def test_the_recorder_and_the_reader_agree_on_which_blocks_are_sound():
    from core.trace import untraced_block

    good = {"schema": 1, "steps": 3, "median_us": 5.0, "p10_us": 4.0, "p90_us": 6.0, "timer": "host_clock"}
    blocks = [
        good,
        {**good, "schema": True},
        {**good, "median_us": 7.0},  # above its p90
        {**good, "median_us": 2e9, "p90_us": 3e9},  # absurd for a step
        {**good, "median_us": 0},
        {**good, "steps": 0},
        {**good, "timer": "sundial"},
        {**good, "p10_us": None},
        "5.0",
    ]
    for block in blocks:
        assert (read_untraced({METADATA_KEY: block}) is not None) == (untraced_block(block)[0] is not None), (
            block
        )


def test_the_profiled_steps_are_marked(recorded):
    names = [
        e.get("name", "")
        for e in _load(recorded.trace_path)["traceEvents"]
        if e.get("cat") == "user_annotation"
    ]
    assert sorted(n for n in names if n.startswith("ProfilerStep#")) == [
        "ProfilerStep#1",
        "ProfilerStep#2",
        "ProfilerStep#3",
    ]


def test_the_recorder_inserts_the_block_when_the_profiler_drops_it(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.profiler.profile, "add_metadata_json", lambda self, key, value: None)
    rec = record(_tiny_loop(), tmp_path / "t.json", steps=3, warmup=0, profile_steps=1, device="cpu")
    assert rec.metadata_written_by == "recorder"
    trace = _load(rec.trace_path)
    assert read_untraced(trace) == rec.untraced
    assert any(e.get("name") == "ProfilerStep#1" for e in trace["traceEvents"])


def test_percentile_is_numpys_linear():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 90) == 5
    assert percentile([0, 10], 10) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"step": 3}, "step must be a function"),
        ({"steps": 0}, "steps must be between"),
        ({"steps": 2.5}, "steps must be a whole number"),
        ({"steps": True}, "steps must be a whole number"),
        ({"warmup": -1}, "warmup must be between"),
        ({"profile_steps": 0}, "profile_steps must be between"),
        ({"trace_path": "trace.txt"}, "must end in .json"),
        ({"trace_path": 7}, "trace_path must be a path"),
        ({"device": "nonsense"}, "device must name a torch device"),
        ({"timer": "stopwatch"}, "timer must be one of"),
        ({"timer": "cuda_events", "device": "cpu"}, "needs a CUDA device"),
        ({"record_shapes": "yes"}, "record_shapes must be True or False"),
    ],
)
def test_bad_arguments_say_what_is_wrong(tmp_path, kwargs, words):
    args = {"step": lambda: None, "trace_path": tmp_path / "t.json", "device": "cpu", **kwargs}
    with pytest.raises(ValueError, match=words):
        record(**args)
    assert not (tmp_path / "t.json").exists()


def test_cuda_without_cuda_is_a_value_error(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="sees no CUDA device"):
        record(lambda: None, tmp_path / "t.json", device="cuda")


@pytest.mark.parametrize(
    "block",
    [
        None,
        "7.5",
        {"schema": 2, "steps": 3, "median_us": 1.0, "p10_us": 1.0, "p90_us": 1.0, "timer": "host_clock"},
        {"schema": 1, "steps": 3, "median_us": -1.0, "p10_us": 1.0, "p90_us": 1.0, "timer": "host_clock"},
        {
            "schema": 1,
            "steps": 3,
            "median_us": float("nan"),
            "p10_us": 1.0,
            "p90_us": 1.0,
            "timer": "host_clock",
        },
        {"schema": 1, "steps": 3, "median_us": "5", "p10_us": 1.0, "p90_us": 1.0, "timer": "host_clock"},
        {"schema": 1, "steps": 0, "median_us": 5.0, "p10_us": 1.0, "p90_us": 1.0, "timer": "host_clock"},
        {"schema": 1, "steps": 3, "median_us": 5.0, "p10_us": 1.0, "p90_us": 1.0, "timer": "sundial"},
    ],
)
def test_read_untraced_refuses_malformed_blocks(block):
    assert read_untraced({METADATA_KEY: block}) is None
    assert read_untraced([]) is None


def test_module_imports_nothing_but_torch():
    text = open(recorder.__file__).read()
    imports = {
        line.split()[1].split(".")[0] for line in text.splitlines() if line.startswith(("import ", "from "))
    }
    assert imports <= {
        "__future__",
        "gzip",
        "json",
        "math",
        "os",
        "shutil",
        "tempfile",
        "time",
        "dataclasses",
        "pathlib",
        "torch",
    }
