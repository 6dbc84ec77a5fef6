"""The seams docs/architecture.md names ("The seams"): what a new GPU preset and a new trace format touch, held to
what the page says. (A new kernel set's seam is tests/test_a_new_mode.py's.)

- A GPU preset is one `Preset` in `sim.config.PRESETS`: no other module of the product names one, and the
  simulator's command line runs one added there.
- A trace format is read in `core/trace/events.py` (the file -> Chrome-trace events): the doc's list of the files a
  new one touches names modules that exist, and the reader takes the two forms of the Chrome format it names.
"""

import gzip
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from core.trace import read_trace
from sim import __main__ as sim_cli
from sim import config

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = [p for room in ("core", "sim", "gpu_probe", "ui") for p in (ROOT / room).rglob("*.py")] + [
    ROOT / "app.py"
]


def _seam(title: str) -> str:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    return re.search(rf"^- \*\*{re.escape(title)}\*\*.*?(?=^- \*\*|^#)", doc, re.M | re.S).group(0)


def test_no_module_but_sim_config_names_a_gpu_preset():
    # "chapter" is also a bucket layout's name, so the presets named only as presets are looked for.
    keys = [k for k in config.PRESETS if k != config.DEFAULT_PRESET]
    assert keys
    naming = {
        p.relative_to(ROOT).as_posix()
        for p in PRODUCT
        for k in keys
        if re.search(rf"[\"']{re.escape(k)}[\"']", p.read_text())
    }
    assert naming == {"sim/config.py"}, naming
    assert set(re.findall(r"`([\w/]+\.py)`", _seam("A new GPU preset"))) >= {"sim/config.py"}


def test_a_preset_added_to_the_table_runs_from_the_command_line(monkeypatch, capsys):
    base = config.PRESETS["probe-0.5b-h200"]
    new = replace(base, key="toy-gpu", title="A toy GPU", hardware=replace(base.hardware, hbm_GBps=1234.0))
    monkeypatch.setitem(config.PRESETS, new.key, new)
    assert "toy-gpu" in sim_cli.build_parser().format_help()  # offered, with its title
    outputs = {}
    for key in (base.key, new.key):
        assert sim_cli.main(["--preset", key, "--batches", "64"]) in (0, None)
        outputs[key] = capsys.readouterr().out
    assert "preset toy-gpu: A toy GPU" in outputs[new.key]

    # Its own hardware's figures: a slower memory makes the step at batch 64 (GPU-bound) slower.
    def row(out):
        return next(line for line in out.splitlines() if line.strip().startswith("64 │"))

    assert row(outputs[new.key]) != row(outputs[base.key])


def test_the_trace_format_seam_names_modules_that_exist_and_the_forms_read(tmp_path):
    named = set(re.findall(r"`([\w/]+\.py)`", _seam("A new trace format")))
    assert "core/trace/events.py" in named and all((ROOT / f).is_file() for f in named), named
    events = [
        {
            "ph": "X",
            "name": "ProfilerStep#1",
            "cat": "user_annotation",
            "ts": 0,
            "dur": 50,
            "pid": 1,
            "tid": 1,
        },
        {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 1, "dur": 5, "pid": 1, "tid": 1},
    ]
    for i, form in enumerate(({"traceEvents": events}, events)):  # the object form and the bare array form
        path = tmp_path / f"t{i}.json.gz"
        path.write_bytes(gzip.compress(json.dumps(form).encode()))
        trace = read_trace(path, host_only=True)
        assert trace is not None


@pytest.mark.parametrize("title", ["A new GPU preset", "A new trace format", "A new kernel set"])
def test_each_seam_is_in_the_doc_with_its_files(title):
    assert re.findall(r"`([\w/]+\.py)`", _seam(title))
