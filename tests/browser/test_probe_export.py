"""A measured step in Chromium: upload a probe result on the probe tab, download its Chrome trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import open_app, rerun_after

from core.timeline import Timeline

pytestmark = pytest.mark.browser

MEASURED = Timeline(
    cpu_start=[0.0, 6.0, 11.0],
    cpu_dur=[6.0, 5.0, 5.5],
    cpu_names=["cudaLaunchKernel"] * 3,
    gpu_start=[7.0, 12.0, 14.5],
    gpu_dur=[2.0, 3.0, 1.0],
    gpu_names=["rms_norm_kernel", "gemv_kernel", "overlapping_kernel"],
    launched_by=[0, 1, 2],
    source="measured",
)


def probe_result_file() -> bytes:
    run = {
        "mode": "eager",
        "batch": 1,
        "bucket": None,
        "padded_rows": 0,
        "eager_fallback": False,
        "step_us_median": 17.0,
        "step_us_p10": 16.0,
        "step_us_p90": 19.0,
        "enqueue_us_median": 12.0,
        "kernels_per_step": 3,
        "kernels_per_layer": 1.0,
        "launches": 3,
        "cpu_launch_us": 16.5,
        "gpu_busy_us": 5.5,
        "utilisation": 5.5 / 17.0,
        "bound_by": "CPU launch",
        "timeline": MEASURED.to_dict(),
    }
    result = {
        "schema": 1,
        "device": "Browser Test GPU",
        "torch": "2.11.0",
        "cuda": "12.8",
        "created": "2026-11-30T10:00:00+00:00",
        "command": "python -m gpu_probe",
        "model": {
            "config": {"name": "small", "n_layers": 1},
            "n_params": 1000,
            "weight_bytes": 2000,
            "read_bytes": 2000,
        },
        "hbm_copy_GBps": 4200.0,
        "runs": [run],
        "captures": [],
        "checks": {},
        "errors": [],
        "settings": {"steps": 10},
    }
    return json.dumps(result).encode()


def test_uploaded_measured_step_exports_as_a_chrome_trace(page, app_url):
    open_app(page, app_url, "tab=Live+GPU+probe")
    upload = page.locator("[data-testid=stFileUploader] input[type=file]").first
    rerun_after(
        page,
        lambda: upload.set_input_files(
            files=[{"name": "mine.json", "mimeType": "application/json", "buffer": probe_result_file()}]
        ),
    )
    page.get_by_text("Browser Test GPU").first.wait_for()
    assert page.locator("[data-testid=stException]").count() == 0

    with page.expect_download(timeout=30_000) as download:
        page.get_by_role("button", name="Download the measured step as a Chrome trace").click()
    trace = json.loads(Path(download.value.path()).read_text())
    processes = [e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"]
    assert any("(measured)" in name for name in processes)
    kernels = sorted(
        (e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel"),
        key=lambda e: e["args"]["index"],
    )
    assert [e["name"] for e in kernels] == list(MEASURED.gpu_names)
    assert [e["ts"] for e in kernels] == pytest.approx(MEASURED.gpu_start.tolist())
    assert [e["dur"] for e in kernels] == pytest.approx(MEASURED.gpu_dur.tolist())
    # The second and third kernels overlap, so the third sits on a second GPU stream track.
    assert [e["tid"] for e in kernels] == [1, 1, 2]
    assert len([e for e in trace["traceEvents"] if e["ph"] == "s"]) == 3
