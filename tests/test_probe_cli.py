"""python -m gpu_probe: argument validation, exit 2 without CUDA, a short real run on a GPU."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args, env=None, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "gpu_probe", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    "args, reason",
    [
        (["--batch", "0"], "batch sizes must be positive"),
        (["--batch", "2000"], "at most 1024"),
        (["--modes", "eager", "turbo"], "modes must be"),
        (["--preset", "huge"], "preset must be one of"),
        (["--buckets", "4", "-1"], "bucket sizes must be positive"),
        (["--steps", "2"], "steps must be"),
        (["--rounds", "0"], "rounds must be"),
        (["--launcher", "fast"], "invalid choice: 'fast'"),
        (["--steps", "10", "--rounds", "11"], "rounds must be an integer in [1, steps = 10]"),
        (["--batch", "x"], "invalid int value"),
        (["--no-such-flag"], "unrecognized arguments"),
    ],
)
def test_invalid_arguments_exit_2_with_one_line(args, reason, tmp_path):
    out = tmp_path / "r.json"
    proc = _cli(*args, "--out", str(out))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0] and lines[0].startswith("gpu_probe: error:")
    assert not out.exists()


def test_no_cuda_exits_2(tmp_path):
    out = tmp_path / "r.json"
    proc = _cli("--preset", "small", "--out", str(out), env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "gpu_probe: error: no CUDA device (torch.cuda.is_available() is False); "
        "gpu_probe/recorded/small.json holds a recorded H200 run"
    ]
    assert not out.exists()


@pytest.mark.cuda
def test_short_end_to_end_run(tmp_path):
    from core.probe_result import MODES, load_result

    out, traces = tmp_path / "r.json", tmp_path / "traces"
    proc = _cli(
        "--preset",
        "tiny",
        "--batch",
        "1",
        "3",
        "--modes",
        "all",
        "--buckets",
        "1",
        "2",
        "4",
        "--steps",
        "5",
        "--warmup",
        "2",
        "--out",
        str(out),
        "--trace-dir",
        str(traces),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[gpu_probe]" in proc.stderr  # progress on stderr
    res = load_result(out)
    assert {(r.mode, r.batch) for r in res.runs} == {(m, b) for m in MODES for b in (1, 3)}
    assert res.all_checks_passed, json.dumps(res.checks)[:2000]
    assert [c["bucket"] for c in res.captures if c["variant"] == "fused"] == [1, 2, 4]
    graph = res.run("fused+graph", 3)
    assert graph.bucket == 4 and graph.padded_rows == 1 and graph.timeline.metrics().launches == 1
    assert res.run("eager", 1).launches > res.run("fused", 1).launches
    assert len(list(traces.glob("*.json"))) == len(res.runs)  # one profiled step per run
    assert res.hbm_copy_GBps > 100 and res.command.startswith("python -m gpu_probe --preset tiny")
    # Back to back, the host's work for a step hides under the GPU's work on the one before.
    assert all(r.step_us_back_to_back for r in res.runs)
    fg1 = res.run("fused+graph", 1)
    assert fg1.step_us_back_to_back <= fg1.step_us_median * 1.1
    # Five steps a (mode, batch): one round; the spread of every unprofiled time is kept.
    assert all(
        r.timing_rounds == 1 and r.enqueue_us_p10 <= r.enqueue_us_median <= r.enqueue_us_p90 for r in res.runs
    )
    # The host's speed, before and after the steps, in the same process.
    assert [when for when, _ in res.host.samples] == ["before", "after"]
    assert 0 < res.host.torch_launch_us < 1000 and res.host.index.triton_bound_launch_us is not None
    assert res.settings["launcher"] == "bound" and res.settings["rounds"] == 1
    assert re.search(r"\[gpu_probe\] +[0-9.]+ s  timing round 1 of 1", proc.stderr)
