"""`python -m sim` prints the chapter's three sections and hands subcommands over."""

import subprocess
import sys
import types
from pathlib import Path

import pytest

from sim.__main__ import main


def test_default_run_prints_the_three_sections(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "(1) Batch-size sweep" in out and "(2) Kernel fusion: 11 → 4 kernels per layer" in out
    assert "(3) Bucket layouts" in out
    assert "◀ launch-bound" in out and "crossover with both toggles off: GPU-bound from batch" in out
    assert "356 launches × 6 µs = 2.14 ms" in out
    for layout in ("powers of two", "chapter", "dense"):
        assert layout in out
    sweep_rows = [
        line
        for line in out.splitlines()
        if line.strip().split("│")[0].strip() in {"1", "2", "4", "8", "16", "32", "64", "128", "256", "512"}
    ]
    assert len(sweep_rows) >= 10
    assert "launch-bound" in sweep_rows[0] and "launch-bound" not in sweep_rows[7]  # batch 1 vs batch 128


def test_layers_and_preset_options(capsys):
    assert main(["--preset", "llama3-8b-h100", "--layers", "4", "--batches", "1,8"]) == 0
    out = capsys.readouterr().out
    # 16 kernels a layer eager and 6 fused (the probe's measured counts), 4 outside the layers.
    assert "llama3-8b, 4 layers" in out and "68 → 28 kernels per step" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--layers", "0"], "--layers must be from 1 to 128"),
        (["--layers", "many"], "--layers must be an integer"),
        (["--preset", "nope"], "invalid choice"),
        (["--batches", "1,x"], "--batches must be comma-separated integers"),
    ],
)
def test_bad_arguments_exit_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_help_lists_options_and_subcommands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for word in ("--preset", "--layers", "buckets", "calibrate", "llama3-8b-h100"):
        assert word in out


@pytest.mark.parametrize(
    "command, module", [("buckets", "sim.buckets.report"), ("calibrate", "sim.calibration.report")]
)
def test_subcommands_dispatch(command, module, monkeypatch):
    seen = []
    fake = types.ModuleType(module)
    fake.main = lambda argv: seen.append(argv) or 0
    monkeypatch.setitem(sys.modules, module, fake)
    assert main([command, "--preset", "chapter"]) == 0
    assert seen == [["--preset", "chapter"]]


def test_module_entry_point_runs():
    result = subprocess.run(
        [sys.executable, "-m", "sim", "--layers", "2", "--batches", "1,128"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert result.returncode == 0, result.stderr
    assert "(3) Bucket layouts" in result.stdout
