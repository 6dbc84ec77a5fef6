"""Issue 35 on the page: each run's host speed index beside its label, the spread of the host-bound figures, and
"on your host" (the calibrated model's prediction on the reader's host), with hostile values and older files."""

import ast
import base64
import json

import numpy as np
import pytest
import streamlit as st
from app_pages import as_read, fake_run, open_tab, tables
from probe_results import host_block

import core.probe_result as probe_result
from sim.calibration import calibrate, calibrated_preset
from ui.charts import format_us
from ui.host_index import (
    BENCH_COMMAND,
    MEASURE_COMMAND,
    NOT_MEASURED,
    SPREAD_SENTENCE,
    OnHost,
    checked_host,
    host_phrase,
)

OWN = 6.1  # host_block()'s torch launch, µs (p10 5.8, p90 7.0)
OWN_PHRASE = "host: 6.1 µs a torch launch (5.8–7.0)"


def with_spread(data: dict) -> dict:
    """Every run timed back to back too, with the spread of that and of its enqueue time (as the probe writes
    them since issue 35): back to back 0.9 × the median, p10 0.85 ×, p90 1.0 ×; enqueue p10 0.9 ×, p90 1.2 ×."""
    for run in data["runs"]:
        med = run["step_us_median"]
        run.update(
            step_us_back_to_back=0.9 * med,
            step_us_back_to_back_p10=0.85 * med,
            step_us_back_to_back_p90=1.0 * med,
            enqueue_us_p10=0.9 * run["enqueue_us_median"],
            enqueue_us_p90=1.2 * run["enqueue_us_median"],
            timing_rounds=20,
        )
    return data


def serve(monkeypatch, data: dict):
    """`data` served as the (only) recorded run, with Streamlit's caches cleared around it."""
    import ui.probe_results

    res = probe_result.load_result(data, timeline_source="recorded")
    monkeypatch.setattr(probe_result, "recorded_result", lambda: res)
    monkeypatch.setattr(ui.probe_results, "MORE_RECORDED", ())
    st.cache_resource.clear()
    st.cache_data.clear()
    return res


@pytest.fixture()
def indexed(monkeypatch):
    """A synthetic run with a host index and every spread, as the recorded one."""
    data = fake_run()
    data["host"] = host_block()
    yield serve(monkeypatch, with_spread(data))
    st.cache_resource.clear()


@pytest.fixture()
def unindexed(monkeypatch):
    """A run as every file before the index: no host block, no back-to-back spread."""
    data = fake_run()
    for run in data["runs"]:
        run["step_us_back_to_back"] = 0.9 * run["step_us_median"]
    yield serve(monkeypatch, data)
    st.cache_resource.clear()


def captions(at) -> str:
    return as_read(" ".join(c.value for c in at.caption))


def on_host_table(at):
    return next((t.value for t in tables(at) if t.key == "pr_on_host"), None)


def bars(trace: dict) -> tuple[np.ndarray, np.ndarray] | None:
    """A trace's error bars (up, down), or None; plotly may send a float array as base64."""
    error = trace.get("error_y")
    if not error:
        return None

    def read(a):
        if isinstance(a, dict) and "bdata" in a:
            return np.frombuffer(base64.b64decode(a["bdata"]), dtype=a["dtype"])
        return np.array([np.nan if v is None else v for v in a], float)

    return read(error["array"]), read(error["arrayminus"])


def batch_axis(at) -> dict:
    return json.loads(next(c for c in at.get("plotly_chart") if c.key == "pr_batch_axis").proto.spec)


# -- 1. the index beside each run's label ---------------------------------------------------------------------
def test_a_runs_index_is_named_beside_its_label_on_both_tabs(indexed):
    at = open_tab("Live GPU probe")
    assert not at.exception
    label = at.selectbox(key="pr_run").value
    assert label.endswith(f" · {OWN_PHRASE}") and label.startswith("recorded: ")
    assert "This run's host: 6.1 µs a torch launch (p10–p90 5.8–7.0)." in captions(at)  # beside the lanes
    about = next(as_read(i.body) for i in at.info if "Recorded run" in i.body)
    assert "This run's host: 6.1 µs a torch launch (median; p10–p90 5.8–7.0), over 3,000 launches" in about
    assert "on Intel(R) Xeon(R) Platinum 8480+." in about  # the CPU the file names, as text
    assert any(OWN_PHRASE in as_read(m.value) for m in at.markdown)  # the recorded runs' list
    cal = open_tab("Calibration", timeout=180)
    assert not cal.exception
    assert cal.selectbox(key="cal_run").value == label
    assert (
        "Host: 6.1 µs a torch launch (5.8–7.0): the fit's launch and replay costs are this host's."
        in captions(cal)
    )


def test_a_file_without_the_index_says_host_not_measured_never_an_error(unindexed):
    at = open_tab("Live GPU probe", pr_host_us="3")
    assert not at.exception
    assert [e.body for e in at.error] == ["Some checks failed: see the table."]  # the run's own, nothing else
    assert at.selectbox(key="pr_run").value.endswith(f" · {NOT_MEASURED}")
    assert "Host not measured" in captions(at)
    assert "On your host" not in captions(at) and on_host_table(at) is None  # nothing to carry from
    assert any("Host not measured: this run's file predates" in as_read(i.body) for i in at.info)
    cal = open_tab("Calibration", timeout=180)
    assert not cal.exception and cal.selectbox(key="cal_run").value.endswith(f" · {NOT_MEASURED}")
    assert "Host not measured: the fit's launch and replay costs are this run's host's" in captions(cal)


def test_an_uploaded_run_is_labelled_with_its_host(unindexed):
    at = open_tab("Live GPU probe")
    mine = fake_run(device="My RTX 4090")
    mine["host"] = host_block()
    at.file_uploader(key="pr_upload").set_value(("mine.json", json.dumps(mine).encode(), "application/json"))
    at.run()
    assert not at.exception
    assert (
        at.selectbox(key="pr_run").value
        == f"uploaded: mine.json (My RTX 4090, 30 Nov 2026 09:00 UTC) · {OWN_PHRASE}"
    )


@pytest.mark.parametrize(
    "bad, why",
    [
        (0, "a launch takes some time, got 0 µs"),
        (-1.5, "a launch takes some time, got -1.5 µs"),
        (float("nan"), "must be a finite number"),
        (20_000, "20000 µs for one launch is absurd"),
        ("fast", "expected a number, got str"),
    ],
)
def test_an_upload_with_a_bad_index_names_the_field_as_text(unindexed, bad, why):
    at = open_tab("Live GPU probe")
    data = fake_run()
    data["host"] = host_block()
    data["host"]["torch_launch_us"]["median"] = bad
    at.file_uploader(key="pr_upload").set_value(("odd.json", json.dumps(data).encode(), "application/json"))
    at.run()
    assert not at.exception
    (error,) = [as_read(e.body) for e in at.error if "odd.json" in as_read(e.body)]
    assert f"host.torch_launch_us.median: {why}" in error
    assert at.selectbox(key="pr_run").value.startswith("recorded: ")  # the page keeps the run it had


def test_a_link_from_before_the_host_was_named_opens_its_run(indexed):
    label = open_tab("Live GPU probe").selectbox(key="pr_run").value
    old = label.removesuffix(f" · {OWN_PHRASE}")
    at = open_tab("Live GPU probe", pr_run=old)
    assert not at.exception and at.selectbox(key="pr_run").value == label


# -- 2. the spread where a host-bound figure is shown ----------------------------------------------------------
def test_the_batch_axis_draws_each_steps_p10_to_p90(indexed):
    at = open_tab("Live GPU probe")
    spec = batch_axis(at)
    for title, mode in (("eager", "eager"), ("fusion + graphs", "fused+graph")):
        left, right = [t for t in spec["data"] if t["name"] == title]
        runs = sorted((r for r in indexed.runs if r.mode == mode), key=lambda r: r.batch)
        b2b = np.array([r.step_us_back_to_back for r in runs])
        lo = np.array([r.step_us_back_to_back_p10 for r in runs])
        hi = np.array([r.step_us_back_to_back_p90 for r in runs])
        up, down = bars(left)  # ms per output token
        np.testing.assert_allclose(up, (hi - b2b) / 1e3, rtol=1e-9)  # floats through JSON: round-off only
        np.testing.assert_allclose(down, (b2b - lo) / 1e3, rtol=1e-9)
        batch = np.array([r.batch for r in runs])
        up, down = bars(right)  # tokens/s: the faster step is the higher rate
        np.testing.assert_allclose(up, batch * 1e6 / lo - batch * 1e6 / b2b, rtol=1e-9)
        np.testing.assert_allclose(down, batch * 1e6 / b2b - batch * 1e6 / hi, rtol=1e-9)
    caption = next(c for c in captions(at).split("Left: ")[1:])
    assert f"{SPREAD_SENTENCE}: each point is the median step back to back" in caption
    assert "its bar their p10–p90" in caption


def test_an_older_file_draws_no_bar_it_has_no_spread_for_and_says_so(unindexed):
    at = open_tab("Live GPU probe")
    spec = batch_axis(at)
    assert all(bars(t) is None for t in spec["data"])
    assert "kept no spread of its back-to-back steps (an older file), so those have no bar" in captions(at)


def test_without_back_to_back_timing_the_bars_are_the_median_steps(monkeypatch):
    run = serve(monkeypatch, fake_run())  # no back-to-back timing at all: the median step is drawn
    at = open_tab("Live GPU probe")
    left = next(t for t in batch_axis(at)["data"] if t["name"] == "eager")
    eager = sorted((r for r in run.runs if r.mode == "eager"), key=lambda r: r.batch)
    up, _ = bars(left)
    np.testing.assert_allclose(up, [(r.step_us_p90 - r.step_us_median) / 1e3 for r in eager], rtol=1e-9)
    assert "each point is the median step, its bar the steps' p10–p90" in captions(at)
    st.cache_resource.clear()


def test_the_step_time_readout_and_the_modes_table_give_the_spread(indexed):
    at = open_tab("Live GPU probe")
    eager = indexed.run("eager", 1)
    step = next(m for m in at.metric if m.label.startswith("Step time"))
    assert f"p10 {eager.step_us_p10 / 1e3:.2f} ms, p90 {eager.step_us_p90 / 1e3:.2f} ms" in step.proto.help
    assert SPREAD_SENTENCE in step.proto.help
    modes = next(t.value for t in tables(at) if t.key == "pr_modes")
    row = modes[modes["mode"] == "eager"].iloc[0]
    assert row["step p10–p90 (µs)"] == f"{eager.step_us_p10:,.0f} – {eager.step_us_p90:,.0f}"
    assert row["back to back p10–p90 (µs)"] == (
        f"{eager.step_us_back_to_back_p10:,.0f} – {eager.step_us_back_to_back_p90:,.0f}"
    )
    assert row["enqueue p10–p90 (µs)"] == f"{eager.enqueue_us_p10:,.0f} – {eager.enqueue_us_p90:,.0f}"
    assert f"{SPREAD_SENTENCE}: every time here is the median of the run's steps" in captions(at)


# -- 3. on your host -----------------------------------------------------------------------------------------
def test_your_host_rescales_the_host_bound_steps_through_the_calibrated_model(indexed):
    at = open_tab("Live GPU probe")
    assert on_host_table(at) is None and "On your host" not in captions(at)  # empty: the run's own host
    at.number_input(key="pr_host_us").set_value(OWN / 2).run()
    assert not at.exception and not at.warning
    table = on_host_table(at).set_index("mode")
    expected = OnHost.of(calibrate(indexed), OWN / 2)  # the page's fit is the same one
    for mode in ("eager", "fused", "graph", "fused+graph"):
        i = expected.at(mode, 1)
        row = table.loc[mode]
        assert row["measured median (µs)"] == pytest.approx(indexed.run(mode, 1).step_us_median)
        assert row["model, your host (µs)"] == pytest.approx(
            expected.there[i, 0], rel=1e-6
        )  # one fit, one model
        assert row["model, this run's host (µs)"] == pytest.approx(expected.here[i, 0], rel=1e-6)
        # The GPU's time does not move with the host.
        assert row["GPU busy (µs)"] == pytest.approx(expected.here[i, 2], rel=1e-6)
    # Host-bound: half the host, about half the step; GPU-bound: only its graph launch moves.
    assert table.loc["eager", "change %"] == pytest.approx(-50, abs=5)
    assert table.loc["fused", "change %"] == pytest.approx(-50, abs=5)
    assert (
        -15 < table.loc["fused+graph", "change %"] < 0
        and table.loc["fused+graph", "bound by, your host"] == "GPU"
    )
    i = expected.at("eager", 1)
    line = captions(at)
    assert "**On your host** (3.05 µs a torch launch; this run's: 6.1)" in line
    assert f"the calibrated model puts this step at **{format_us(expected.there[i, 0])}**" in line
    # Back to empty: the run's own host again.
    at.number_input(key="pr_host_us").set_value(None).run()
    assert on_host_table(at) is None


@pytest.mark.parametrize(
    "value, kept, said",
    [
        ("0", 0.0, "a launch takes some time, got 0 µs"),
        ("-5", 0.0, "below the minimum 0"),
        ("nan", None, "is not a number"),
        ("abc", None, "is not a number"),
        ("1e400", 10_000.0, "above the maximum 10000"),
        ("20000", 10_000.0, "above the maximum 10000"),
        ("", None, "is empty"),
    ],
)
def test_hostile_host_values_in_a_link_are_clamped_or_refused_with_a_notice(indexed, value, kept, said):
    at = open_tab("Live GPU probe", pr_host_us=value)
    assert not at.exception
    assert at.number_input(key="pr_host_us").value == kept
    assert any(said in w.body for w in at.warning), [w.body for w in at.warning]
    # A refused value is this run's own host; a clamped one is used as clamped.
    assert (on_host_table(at) is not None) == bool(kept)


def test_a_typed_zero_is_refused_with_a_notice(indexed):
    at = open_tab("Live GPU probe")
    at.number_input(key="pr_host_us").set_value(0.0).run()
    assert not at.exception and on_host_table(at) is None
    assert any(
        "Your host: µs a launch: a launch takes some time, got 0 µs" in as_read(w.body) for w in at.warning
    )


def test_checked_host_refuses_what_a_result_file_may_not_hold_with_the_same_message():
    """One check for a typed index and a file's (`core.probe_result.launch_us_field`): the notice is the upload
    error's message with the input's name in place of the field's."""
    assert checked_host(None) == (None, None)
    assert checked_host(4.2) == (4.2, None)
    assert checked_host(probe_result.MAX_LAUNCH_US) == (probe_result.MAX_LAUNCH_US, None)  # the bound is in
    for bad in (0, -1, float("nan"), "abc", float("-inf"), float("inf"), 1e9):
        index, notice = checked_host(bad)
        data = fake_run()
        data["host"] = host_block()
        data["host"]["torch_launch_us"]["median"] = bad
        with pytest.raises(ValueError) as err:
            probe_result.load_result(data)
        why = str(err.value).split("host.torch_launch_us.median: ")[1]
        assert (
            index is None and as_read(notice) == f"Your host: µs a launch: {why}; using this run's own host."
        ), bad


def test_the_measuring_command_and_the_phrase():
    """The help's one-liner is Python that names what the probe has; an index reads as the issue asks."""
    from gpu_probe import host_speed

    code = MEASURE_COMMAND.removeprefix('python -c "').removesuffix('"')
    tree = ast.parse(code)
    assert isinstance(tree, ast.Module) and hasattr(host_speed.HostSpeed, "sample")
    assert hasattr(host_speed.HostSpeed, "block") and "torch_launch_us" in host_speed.KINDS
    assert BENCH_COMMAND.split()[1] == "bench/launch_cost.py"
    result = probe_result.load_result({**fake_run(), "host": host_block()})
    assert host_phrase(result) == OWN_PHRASE
    assert host_phrase(probe_result.load_result(fake_run())) == NOT_MEASURED


# -- the calibrated preset on another host ----------------------------------------------------------------------
def test_the_calibrated_preset_carries_its_host_costs_through_on_host():
    data = fake_run()
    data["host"] = host_block()
    result = probe_result.load_result(data)
    cal = calibrate(result, loo=False)
    own = calibrated_preset(result, cal)
    assert calibrated_preset(result, cal, OWN) == own  # the run's own host: the preset as before
    for index in (OWN / 3, 2 * OWN):
        there = calibrated_preset(result, cal, index)
        scale = index / OWN
        # The launch and replay costs follow the host (the fit's host costs are linear in on_host's scale) ...
        assert there.hardware.eager_launch_us == pytest.approx(own.hardware.eager_launch_us * scale, rel=1e-9)
        assert there.hardware.graph_launch_us == pytest.approx(own.hardware.graph_launch_us * scale, rel=1e-9)
        # ... and the GPU's figures stay the run's.
        for field in ("hbm_GBps", "matrix_TFLOPs", "graph_node_gap_us", "barrier_us"):
            assert getattr(there.hardware, field) == getattr(own.hardware, field), field
        # The latency is read off a busy time summed from other start times: equal but for round-off.
        assert there.hardware.min_kernel_us == pytest.approx(own.hardware.min_kernel_us, rel=1e-12)
        assert there.model == own.model and f"{index:.2f} µs a torch launch" in there.note
    # A run without its own index cannot be carried: the preset as fitted.
    plain = probe_result.load_result(fake_run())
    assert calibrated_preset(plain, host_index=3.0) == calibrated_preset(plain)


# -- the trace tab's what-ifs on your host -------------------------------------------------------------------------
def test_the_recorded_replay_cost_carried_to_another_host_moves_the_hosts_part_only():
    from sim.calibration import recorded_calibration, recorded_graph_cost

    own = recorded_graph_cost()
    index = recorded_calibration().host_index
    assert index and recorded_graph_cost(index) == own  # the run's own host: as fitted
    there = recorded_graph_cost(index / 2)
    # The host's costs scale with the index (Calibration.on_host); the GPU's gap between nodes stays.
    for field in ("launch_us", "per_node_host_us", "input_copy_us", "per_row_host_us"):
        assert getattr(there, field) == pytest.approx(getattr(own, field) / 2, rel=1e-12), field
    assert there.node_gap_us == own.node_gap_us


def test_the_trace_whatifs_price_a_replay_on_your_host():
    from sim.calibration import recorded_calibration
    from sim.trace.whatif import default_replay_cost

    index = recorded_calibration().host_index / 2

    def graphs_row(at):
        table = next(t.value for t in tables(at) if t.key == "tr_whatifs").set_index("the step")
        return table.loc["with CUDA graphs (estimate)", "step time"]

    own, yours = open_tab("Your trace"), open_tab("Your trace", tr_host_us=f"{index}")
    assert not own.exception and not yours.exception
    assert yours.number_input(key="tr_host_us").value == pytest.approx(index)
    assert own.number_input(key="tr_host_us").proto.placeholder.startswith("the probe run's: ")
    said, said_yours = captions(own), captions(yours)
    assert f"replay cost: {default_replay_cost().launch_us:.1f} µs + " in said
    assert "A graph replay is priced on the recorded probe run's host (host: " in said
    assert f"replay cost: {default_replay_cost(index).launch_us:.1f} µs + " in said_yours
    assert f"A graph replay is priced on your host ({index:g} µs a torch launch)" in said_yours
    assert graphs_row(own) != graphs_row(yours)  # a quicker host, a quicker replayed step
