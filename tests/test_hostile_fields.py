"""Issue 15, item 1: every field of a probe result is type- and range-checked once, at the schema
boundary (`core.probe_result.load_result`), so the page and `python -m sim calibrate` both answer a
crafted file with one sentence naming the field, never an OverflowError or TypeError."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_hostile_uploads import good_result, page_on

from core.probe_result import load_result

ROOT = Path(__file__).resolve().parents[1]
HUGE = 10**400  # json writes it as a 400-digit literal; float() of it overflows


def crafted(path: tuple, value) -> bytes:
    data = copy.deepcopy(good_result())
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return json.dumps(data).encode()  # allow_nan: Infinity/NaN tokens written on purpose


CRAFTED = {  # name -> (file, the field its message must name)
    "batch_400_digits": (crafted(("runs", 0, "batch"), HUGE), "runs[0].batch"),
    "step_400_digits": (crafted(("runs", 0, "step_us_median"), HUGE), "runs[0].step_us_median"),
    "kernels_400_digits": (crafted(("runs", 0, "kernels_per_step"), -HUGE), "runs[0].kernels_per_step"),
    "context_len_list": (crafted(("model", "config", "context_len"), [1]), "model.config.context_len"),
    "context_len_infinity": (
        crafted(("model", "config", "context_len"), float("inf")),
        "model.config.context_len",
    ),
    "dtype_list": (crafted(("model", "config", "dtype"), ["bf16"]), "model.config.dtype"),
    "n_layers_string": (crafted(("model", "config", "n_layers"), "32"), "model.config.n_layers"),
    "n_layers_missing": (crafted(("model", "config"), {"name": "small"}), "model.config.n_layers"),
    "hidden_float": (crafted(("model", "config", "hidden"), 1024.5), "model.config.hidden"),
    "settings_context_nan": (crafted(("settings", "context_len"), float("nan")), "settings.context_len"),
    "capture_variant_dict": (
        crafted(("captures",), [{"bucket": 1, "capture_ms": 1.0, "graph_mem_bytes": 0, "variant": {"a": 1}}]),
        "captures[0].variant",
    ),
    "check_detail_list": (crafted(("checks",), {"c": {"passed": True, "detail": ["x"]}}), "checks.c.detail"),
    "fallback_string": (crafted(("runs", 0, "eager_fallback"), "yes"), "runs[0].eager_fallback"),
    "kernel_name_int": (crafted(("runs", 0, "timeline", "gpu", "name"), [1, 2]), "runs[0].timeline.gpu.name"),
    "start_400_digits": (crafted(("runs", 0, "timeline", "gpu", "start_us"), [HUGE, 1]), "runs[0].timeline"),
    "int_past_4300_digits": (b'{"schema": 1, "device": ' + b"9" * 5000 + b"}", "result"),
}


@pytest.mark.parametrize("name", list(CRAFTED))
def test_loader_names_the_field(name):
    data, field = CRAFTED[name]
    with pytest.raises(ValueError) as err:
        load_result(data)
    assert str(err.value).startswith(field), str(err.value)
    assert len(str(err.value)) < 400  # one sentence, not the file echoed back


def test_the_shipped_run_and_the_good_file_still_load():
    from core.probe_result import recorded_result

    assert len(recorded_result().runs) == 24  # six modes at four batches
    assert load_result(json.dumps(good_result()).encode()).runs[0].batch == 1


@pytest.mark.parametrize(
    "name", ["batch_400_digits", "context_len_list", "dtype_list", "context_len_infinity"]
)
def test_cli_says_one_line_and_exits_2(tmp_path, name):
    path = tmp_path / f"{name}.json"
    path.write_bytes(CRAFTED[name][0])
    proc = subprocess.run(
        [sys.executable, "-m", "sim", "calibrate", str(path)],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and CRAFTED[name][1] in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_page_names_the_field_on_both_tabs():
    import re

    for tab, key in (("Live GPU probe", "pr_upload"), ("Calibration", "cal_upload")):
        at = page_on(tab)
        for name in ("batch_400_digits", "context_len_list", "dtype_list", "context_len_infinity"):
            at.file_uploader(key=key).set_value((f"{name}.json", CRAFTED[name][0], "application/json")).run()
            assert not at.exception, f"{tab} {name}: {[e.message for e in at.exception]}"
            shown = re.sub(r"\\(.)", r"\1", " ".join(e.value for e in at.error))
            assert f"{name}.json" in shown and CRAFTED[name][1] in shown, (tab, name, shown)
