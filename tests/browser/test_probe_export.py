"""A measured step in Chromium: upload a probe result on the probe tab, download its Chrome trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import open_app, rerun_after
from probe_results import probe_result, probe_run

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
    run = probe_run(MEASURED, step_us=17.0)
    return json.dumps(probe_result([run], device="Browser Test GPU")).encode()


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
