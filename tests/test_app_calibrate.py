"""The "Calibration" tab: fitted figures, predicted vs measured, the leave-one-out number."""

import io
import json
from contextlib import redirect_stdout

import pytest
import streamlit as st

import core.probe_result as probe_result
from app_pages import as_read, fake_run, open_tab
from app_pages import metrics as shown
from sim.calibrate import calibrate, main
from ui.calibrate_tab import LOO_LABEL


def calibration_page(**params):
    return open_tab("Calibration", timeout=180, **params)


def test_page_shows_fit_table_chart_and_the_loo_figure(recorded):
    at = calibration_page()
    assert not at.exception
    expected = calibrate(recorded)
    assert shown(at)[LOO_LABEL] == f"{100 * expected.median_loo_error:.1f}%"
    tables = [df.value for df in at.dataframe]
    params = next(t for t in tables if "parameter" in t.columns)
    assert params.set_index("parameter").loc["hbm_GBps", "unit"] == "GB/s"
    rows = next(t for t in tables if "step LOO error %" in t.columns)
    assert len(rows) == 16 and set(rows["mode"]) == {"eager", "fused", "graph", "fused+graph"}
    charts = at.get("plotly_chart")
    assert len(charts) == 2  # predicted-vs-measured panels, and the overlaid lanes
    lanes = json.loads(charts[1].proto.spec)
    assert len(lanes["layout"]["yaxis"]["categoryarray"]) == 4  # measured CPU/GPU over simulated CPU/GPU
    assert any("probe decoder on Test GPU" in as_read(m.value) for m in at.markdown)


def test_cli_and_page_report_the_same_figure(recorded):
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["recorded"]) == 0
    last = out.getvalue().strip().splitlines()[-1]
    figure = last.removeprefix("median abs error: ").removesuffix(" (leave-one-out)")
    assert shown(calibration_page())[LOO_LABEL] == figure


def test_bad_upload_keeps_the_calibration(recorded):
    at = calibration_page()
    at.file_uploader(key="cal_upload").set_value(("x.json", b'{"device": "GPU"}', "application/json"))
    at.run()
    assert not at.exception
    assert any("x.json" in as_read(e.body) and "torch" in e.body for e in at.error)
    assert LOO_LABEL in shown(at)


def test_an_uncalibratable_upload_says_why(recorded):
    one_run = fake_run(device="Lonely GPU")
    one_run["runs"] = [r for r in one_run["runs"] if r["mode"] == "eager" and r["batch"] == 1]
    at = calibration_page()
    at.file_uploader(key="cal_upload").set_value(
        ("one.json", json.dumps(one_run).encode(), "application/json")
    )
    at.run()
    assert not at.exception
    assert any("cannot be calibrated" in e.body and "at least two runs" in as_read(e.body) for e in at.error)


@pytest.mark.parametrize(
    "mode,batch,whole", [("eager", 256, "true"), ("fused+graph", 1, "false"), ("bogus", 0, "yes")]
)
def test_overlay_controls_at_their_extremes(recorded, mode, batch, whole):
    at = calibration_page(cal_mode=mode, cal_batch=str(batch), cal_whole=whole)
    assert not at.exception
    assert at.selectbox(key="cal_mode").value in recorded.modes
    assert at.selectbox(key="cal_batch").value in recorded.batches


def test_calibrated_presets_for_the_simulator_tab(recorded):
    from ui.calibrate_tab import calibrated_presets

    presets = calibrated_presets()
    assert [p.title for p in presets.values()] == ["probe decoder on Test GPU"]
    preset = next(iter(presets.values()))
    assert preset.model.n_layers == 4
    assert preset.hardware.hbm_GBps == pytest.approx(calibrate(recorded).params["fused_hbm_GBps"], rel=1e-3)


@pytest.mark.skipif(
    not probe_result.RECORDED_PATH.is_file(), reason="the recorded H200 run is not shipped yet"
)
def test_on_the_recorded_run_cli_and_page_agree():
    st.cache_resource.clear()
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["recorded"]) == 0
    last = out.getvalue().strip().splitlines()[-1]
    assert last.startswith("median abs error: ") and last.endswith("% (leave-one-out)")
    figure = last.removeprefix("median abs error: ").removesuffix(" (leave-one-out)")
    at = calibration_page()
    assert not at.exception
    assert shown(at)[LOO_LABEL] == figure
