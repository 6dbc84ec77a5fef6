"""core.trace on hand-built traces: steps by every rule, lanes, launches, streams, threads, bad input."""

import gzip
import io

import numpy as np
import pytest

from core import trace as T
from core.timeline import CPU_BOUND, GPU_BOUND
from tests.trace_events import (
    as_bytes,
    copy,
    eager_step,
    kernel,
    launch,
    step_range,
    sync,
    trace,
    x,
)


def _steps(data, **kw):
    report = T.analyse(as_bytes(data), **kw)
    return report.rule, report.steps


def test_eager_step_lanes_tile_the_host_time():
    data = trace(
        step_range("decode_step", 1000.0, 100.0),
        x("cpu_op", "aten::mm", 1001.0, 9.0),
        launch(1005.0, 11),
        x("cuda_runtime", "cudaStreamIsCapturing", 1010.0, 0.5),  # not a launch
        launch(1020.0, 12, dur=5.0),
        x("cuda_driver", "cuLaunchKernel", 1040.0, 6.0, corr=13),  # Triton launches through the driver API
        sync(1050.0, dur=40.0, name="cudaDeviceSynchronize"),
        kernel(1011.0, 11, name="void gemv<float, 128>(float const*)", dur=3.0),
        kernel(1026.0, 12, dur=2.0),
        kernel(1047.0, 13, name="_fused_linear_kernel", dur=30.0),
        kernel(2000.0, 99, dur=30.0),  # launched by nothing in this trace
    )
    rule, (step,) = _steps(data)
    assert rule == "the CPU range named 'decode_step'"
    tl = step.timeline
    # CPU interval i: end of launch i-1 (or the step's start) to the end of launch i.
    assert tl.cpu_start.tolist() == [0.0, 9.0, 25.0]
    assert tl.cpu_dur.tolist() == [9.0, 16.0, 21.0]
    assert tl.cpu_names[0].startswith("cudaLaunchKernel: gemv")
    assert tl.cpu_names[2] == "cuLaunchKernel: _fused_linear_kernel"
    assert tl.gpu_start.tolist() == [11.0, 26.0, 47.0]
    assert tl.launched_by.tolist() == [0, 1, 2]
    assert step.kernels == 3 and step.launches == 3 and step.graph_launches == 0 and step.gpu_streams == 1
    m = step.metrics
    assert m.cpu_launch_us == 46.0 and m.gpu_busy_us == 35.0 and m.step_us == 77.0 and m.bound_by == CPU_BOUND
    # Launch delay: each kernel's start minus the end of its launch call.
    assert step.launch_delay_us.tolist() == [2.0, 1.0, 1.0]


def test_profiler_steps_each_become_a_step_in_order():
    """A trace marked only with ProfilerStep#N: every step, not just the last one."""
    events = []
    for n in range(3):
        t0 = 1000.0 * (n + 1)
        events.append(x("user_annotation", f"ProfilerStep#{n + 4}", t0, 200.0))
        events += eager_step(t0, corr0=100 * (n + 1), n=4 + n)
    rule, steps = _steps(trace(*events))
    assert rule == "the profiler's ProfilerStep#N ranges"
    assert [s.index for s in steps] == [4, 5, 6]
    assert [s.kernels for s in steps] == [4, 5, 6]


def test_a_named_range_wins_and_a_missing_one_is_a_clear_error():
    events = [x("user_annotation", "ProfilerStep#0", 0.0, 500.0)]
    for k, t0 in enumerate((10.0, 200.0)):
        events.append(step_range("my_step", t0, 100.0))
        events += eager_step(t0, corr0=10 * (k + 1), n=2)
    rule, steps = _steps(trace(*events), step_range="my_step")
    assert rule == "the CPU range named 'my_step'" and len(steps) == 2
    with pytest.raises(T.TraceError, match="no CPU range named 'other'"):
        _steps(trace(*events), step_range="other")


def test_one_step_per_graph_launch_and_eager_kernels_between_are_not_input_copies():
    events = []
    corr = 1
    for k in range(3):
        t0 = 1000.0 * k
        events += [launch(t0, corr, name="cudaMemcpyAsync"), copy(t0 + 5, corr)]  # the input copy
        events += [launch(t0 + 10, corr + 1, dur=20.0, name="cudaGraphLaunch")]
        events += [kernel(t0 + 31 + 3 * i, corr + 1, name=f"node{i}") for i in range(5)]
        # eager sampling after the replay: its own launches, not input copies of the next step
        events += [launch(t0 + 60, corr + 2), kernel(t0 + 66, corr + 2, name="argmax_kernel")]
        events += [
            launch(t0 + 80, corr + 3, name="cudaMemcpyAsync"),
            copy(t0 + 85, corr + 3, "DtoH (Device -> Pinned)"),
        ]
        corr += 4
    rule, steps = _steps(trace(*events))
    assert rule == "one step per cudaGraphLaunch" and len(steps) == 3
    for step in steps:
        tl = step.timeline
        assert step.graph_launches == 1 and step.launches == 4 and step.kernels == 8
        assert tl.cpu_names[0] == "1 input copies + cudaGraphLaunch"
        assert tl.cpu_names[1].startswith("cudaLaunchKernel: argmax_kernel")
        assert tl.cpu_names[2].startswith("cudaMemcpyAsync")
        assert tl.gpu_names[0].startswith("Memcpy HtoD") and tl.launched_by[0] == 0


def test_two_graph_launches_in_one_step_keep_the_eager_kernels_between_them():
    data = trace(
        step_range("decode_step", 0.0, 300.0),
        launch(5.0, 1, name="cudaMemcpyAsync"),
        copy(9.0, 1),
        launch(10.0, 2, dur=10.0, name="cudaGraphLaunch"),
        kernel(21.0, 2, name="layer_a"),
        launch(30.0, 3),
        kernel(35.0, 3, name="eager_between"),
        launch(40.0, 4, dur=10.0, name="cudaGraphLaunch"),
        kernel(51.0, 4, name="layer_b"),
    )
    _, (step,) = _steps(data)
    assert step.timeline.cpu_names == (
        "1 input copies + cudaGraphLaunch",
        "cudaLaunchKernel: eager_between",
        "cudaGraphLaunch",
    )
    assert step.timeline.launched_by.tolist() == [0, 0, 1, 2]


def test_host_synchronisation_separates_steps_when_nothing_else_does():
    events = []
    for k in range(4):
        t0 = 500.0 * k
        events += eager_step(t0, corr0=10 * (k + 1), n=3)
        events.append(sync(t0 + 50.0))
    rule, steps = _steps(trace(*events))
    assert rule == "host synchronisation between steps" and len(steps) == 4
    assert all(s.kernels == 3 for s in steps)
    # The time waited in the synchronisation is not the next step's launch cost.
    assert steps[1].timeline.cpu_start[0] == 0.0 and steps[1].metrics.cpu_launch_us == pytest.approx(
        3 * 4.0 + 2 * 6.0
    )


def test_whole_trace_is_one_step_when_no_rule_applies():
    rule, steps = _steps(trace(*eager_step(0.0, corr0=1, n=5)))
    assert rule == "the whole trace as one step" and len(steps) == 1 and steps[0].kernels == 5
    # Time 0 is the first launch call's start where no range marks the step.
    assert steps[0].timeline.cpu_start[0] == 0.0 and steps[0].timeline.cpu_dur[0] == 4.0


def test_each_stream_is_a_lane_and_communication_kernels_are_their_own_kind():
    data = trace(
        step_range("ProfilerStep#1", 0.0, 100.0),
        launch(1.0, 1),
        launch(6.0, 2),
        launch(11.0, 3),
        kernel(8.0, 1, name="gemm_a", dur=20.0, stream=7),
        kernel(
            10.0,
            2,
            name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            dur=15.0,
            stream=20,
        ),
        kernel(40.0, 3, name="gemm_b", dur=5.0, stream=7),
    )
    _, (step,) = _steps(data)
    tl = step.timeline
    assert tl.streams == (7, 20) and step.gpu_streams == 2
    assert list(tl.gpu_kinds) == ["kernel", "communication", "kernel"]
    # Busy time is the union over the streams: [8, 28] and [40, 45].
    assert step.metrics.gpu_busy_us == pytest.approx(25.0)
    assert step.gpu_time_by_kind()["communication"] == 15.0


def test_launches_from_a_second_host_thread_are_kept():
    data = trace(
        step_range("ProfilerStep#0", 0.0, 100.0, tid=1),
        launch(2.0, 1, tid=1),
        launch(3.0, 2, tid=2),  # overlaps thread 1's launch in time: not nested, another thread
        launch(12.0, 3, tid=1),
        kernel(8.0, 1, name="a"),
        kernel(10.0, 2, name="b", stream=9),
        kernel(20.0, 3, name="c"),
    )
    _, (step,) = _steps(data)
    tl = step.timeline
    assert step.launches == 3 and step.kernels == 3
    assert len(tl.threads) == 2
    # The second thread's first launch is its call alone, not the time since the step began.
    other = np.flatnonzero(tl.cpu_thread == tl.cpu_thread[1])
    assert tl.cpu_dur[other].tolist() == [4.0]


def test_a_driver_call_nested_in_a_runtime_call_counts_once():
    data = trace(
        step_range("decode_step", 0.0, 100.0),
        launch(10.0, 1, dur=8.0),
        x("cuda_driver", "cuLaunchKernel", 12.0, 3.0, corr=1),
        kernel(20.0, 1),
    )
    _, (step,) = _steps(data)
    assert step.launches == 1 and step.timeline.cpu_names[0].startswith("cudaLaunchKernel")


def test_a_gpu_busy_time_is_the_plain_union_of_intervals():
    rng = np.random.default_rng(3)
    starts = np.sort(rng.uniform(0, 1000, 300))
    durs = rng.exponential(8.0, 300)
    events = [step_range("ProfilerStep#0", 0.0, 2000.0)]
    for i, (s, d) in enumerate(zip(starts, durs)):
        events += [
            launch(float(s) - 1.0, i, dur=0.5),
            kernel(float(s) + 0.5, i, dur=float(d), stream=7 + i % 3),
        ]
    _, (step,) = _steps(trace(*events))
    # A plain union by sweeping sorted intervals, written independently of core.timeline.
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(zip(starts + 0.5, starts + 0.5 + durs)):
        if cur_e is None or s > cur_e:
            total += 0.0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    total += cur_e - cur_s
    assert step.metrics.gpu_busy_us == pytest.approx(total, rel=1e-9)
    m = step.metrics
    assert m.bound_by == (CPU_BOUND if m.cpu_launch_us > m.gpu_busy_us else GPU_BOUND)


def test_streaming_reads_the_same_across_any_chunk_boundary(monkeypatch):
    events = [x("user_annotation", "ProfilerStep#0", 0.0, 400.0)] + eager_step(0.0, corr0=1, n=12)
    data = trace(*events)
    whole = T.analyse(as_bytes(data)).steps[0].timeline
    for chunk in (1, 7, 64, 333):
        monkeypatch.setattr("core.trace.events._CHUNK", chunk)
        again = T.analyse(as_bytes(data, gz=chunk % 2 == 1)).steps[0].timeline
        assert again.cpu_start.tolist() == whole.cpu_start.tolist()
        assert again.gpu_names == whole.gpu_names


def test_sources_and_forms_that_read_alike(tmp_path):
    data = trace(*eager_step(0.0, corr0=1, n=3))
    raw = as_bytes(data)
    bare = as_bytes({"x": 1} | {"traceEvents": data["traceEvents"]})
    (tmp_path / "a.pt.trace.json.gz").write_bytes(gzip.compress(raw))
    (tmp_path / "b.json").write_bytes(b"\xef\xbb\xbf" + raw)  # with a byte-order mark
    import json

    forms = [
        raw,
        bare,
        io.BytesIO(raw),
        tmp_path / "a.pt.trace.json.gz",
        str(tmp_path / "b.json"),
        json.dumps(data["traceEvents"]).encode(),  # the bare-array form of the Chrome trace format
    ]
    for form in forms:
        report = T.analyse(form)
        assert report.steps[0].kernels == 3
    assert T.read_trace(raw).device == "NVIDIA H200"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"not json at all", "is not JSON"),
        (b"", "is empty"),
        (b"{}", "no traceEvents"),
        (b'{"traceEvents": [', "ends early"),
        (b'{"traceEvents": [{"ph": "X",', "not valid JSON|ends early"),
        ("{}".encode("utf-16"), "not UTF-8|not a JSON trace"),
        (as_bytes(trace(*eager_step(0.0, corr0=1)))[:-40], "not valid JSON|ends early"),
        (gzip.compress(as_bytes(trace(*eager_step(0.0, corr0=1))))[:-30], "truncated"),
        (b"\x1f\x8b\x08\x00garbage-after-a-gzip-header", "gzip"),
        (as_bytes(trace(x("cpu_op", "aten::mm", 0.0, 5.0))), "CPU-only profile"),
        (as_bytes(trace(kernel(5.0, None), launch(1.0, None))), "no correlation ids"),
        (as_bytes(trace(kernel(5.0, 1))), "no CUDA runtime calls"),
        (b"NSYS\x00\x01\x02\x03" + bytes(range(256)) * 4, "Nsight Systems"),
        (b'{"traceEvents": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}", "nested too deeply|not valid JSON"),
    ],
)
def test_bad_input_gets_one_clear_sentence(payload, message):
    with pytest.raises(T.TraceError, match=message) as err:
        T.analyse(payload)
    text = str(err.value)
    assert "\n" not in text and len(text) < 300


def test_an_nsight_report_by_name_is_named(tmp_path):
    path = tmp_path / "profile.nsys-rep"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(T.TraceError, match="Nsight Systems"):
        T.analyse(path)


def test_limits_bound_what_a_trace_can_make_the_reader_hold(monkeypatch):
    monkeypatch.setattr("core.trace.read.MAX_GPU_EVENTS", 10)
    with pytest.raises(T.TraceError, match="more than 10 GPU events"):
        T.analyse(as_bytes(trace(*eager_step(0.0, corr0=1, n=20))))
    monkeypatch.setattr("core.trace.events.MAX_TEXT_CHARS", 1000)
    with pytest.raises(T.TraceError, match="larger than"):
        T.analyse(b'{"traceEvents": [' + b" " * 5000 + b"]}")


def test_kernels_per_layer_from_the_repeating_block():
    layer = ["norm", "gemm_a", "rope", "attn", "gemm_a", "add"]
    names = ["embed", "copy"] + layer * 4 + ["norm", "lm_head"]
    assert T.kernels_per_layer(names, 4) == (6, True)
    # Longest block: two equal neighbours inside a layer are not a period of 1.
    assert T.kernels_per_layer(["x"] * 8, 4) == (2, True)
    assert T.kernels_per_layer(["a", "a", "b"] * 3 + ["head"], 3) == (3, True)
    # First layer fused differently (as a compiler may): n_layers - 1 repeats, not exact.
    assert T.kernels_per_layer(["e", "q", "r"] + ["p", "q", "r"] * 5, 6) == (3, False)
    # A short coincidental repeat is not a layer.
    assert T.kernels_per_layer(list("abcdefghijklmnxyxy"), 2) == (9, False)
    assert T.kernels_per_layer(["a", "b", "c", "d", "e"], 2) == (2, False)


def test_short_kernel_name():
    assert (
        T.short_kernel_name("void at::native::vectorized_elementwise_kernel<4, at::native::Foo>(int, Bar)")
        == "at::native::vectorized_elementwise_kernel"
    )
    assert T.short_kernel_name("triton_poi_fused_add_0") == "triton_poi_fused_add_0"


# -- dropped records (issue 24): the profiler drops records under load; the step is still read and drawn --------
def _dropped(kind: str, count: int, n: int = 30):
    """One decode_step of n eager launches with the first `count` records of `kind` gone."""
    events = eager_step(1000.0, 1, n=n)
    gone = [i for i, e in enumerate(events) if e["cat"] == kind][:count]
    kept = [e for i, e in enumerate(events) if i not in gone]
    return as_bytes(trace(step_range("decode_step", 995.0, 10.0 * n + 20), *kept))


def test_launches_whose_kernels_were_dropped_stay_on_the_cpu_lane_and_are_noted():
    (step,) = T.analyse(_dropped("kernel", 20)).steps
    tl = step.timeline
    assert len(tl.cpu_start) == 30 and step.kernels == 10 and tl.launched_by.tolist() == list(range(20, 30))
    assert step.notes and step.notes[0].startswith("20 launch calls in this step have no GPU event")
    # The first-launches view: the empty launches, then the first 18 that submitted a kernel, with theirs.
    first = tl.first_launches(18)
    assert len(first.cpu_start) == 30 and first.launched_by.tolist() == list(range(20, 30))


def test_kernels_whose_launches_were_dropped_join_the_step_launched_by_nothing():
    (step,) = T.analyse(_dropped("cuda_runtime", 20)).steps
    tl = step.timeline
    assert len(tl.cpu_start) == 10 and step.kernels == 30
    assert tl.launched_by.tolist() == [-1] * 20 + list(range(10))
    assert np.isnan(step.launch_delay_us[:20]).all() and (step.host_per_launch_us[:20] == 0).all()
    assert np.isfinite(list(step.launch_delay().values())).all()
    assert any("no launch call in the trace" in note for note in step.notes)
    # Drawn where they ran: the first-launches view keeps those that ran before its last launch's kernel.
    first = tl.first_launches(5)
    assert (first.launched_by == -1).sum() == 20 and first.launched_by.max() == 4


def test_a_kernel_stamped_before_its_launch_call_is_drawn_at_the_call():
    events = eager_step(1000.0, 1, n=3)
    events[1]["ts"] = 0.0  # the first kernel, long before the step and its launch
    (step,) = T.analyse(as_bytes(trace(step_range("decode_step", 995.0, 50.0), *events))).steps
    tl = step.timeline
    call_start = 1000.0 + 10.0 - 4.0 - 995.0
    assert tl.gpu_start[0] == call_start and step.launch_delay_us[0] == -4.0
    assert any("before the call that launched it" in note for note in step.notes)


def test_unusable_kernel_fields_are_named():
    events = eager_step(1000.0, 1, n=3)
    for e in events:
        if e["cat"] == "kernel":
            e["ts"] = "soon"
    with pytest.raises(T.TraceError, match="none of its 3 GPU events has a name, a usable time stamp"):
        T.analyse(as_bytes(trace(*events)))


def test_rows_spilled_to_columns_while_reading_read_the_same(monkeypatch):
    """The reader turns rows into numpy columns every _SPILL_ROWS events (memory): any boundary reads alike."""
    data = as_bytes(trace(*eager_step(1000.0, 1, n=20), *eager_step(2000.0, 50, n=7)))
    whole = T.read_trace(data)
    monkeypatch.setattr("core.trace.read._SPILL_ROWS", 3)
    spilled = T.read_trace(data)
    for name in ("call_ts", "call_corr", "gpu_ts", "gpu_corr", "gpu_name", "call_thread"):
        assert np.array_equal(getattr(whole, name), getattr(spilled, name)), name


# -- issue 29, item 5: each message names the fault the trace has ------------------------------------------
@pytest.mark.parametrize("bad", [float("nan"), "soon", 10**400], ids=["NaN", "text", "400 digits"])
def test_kernels_with_an_unusable_time_stamp_are_named_as_such(bad):
    events = eager_step(0.0, 1, n=5)
    for k in (3, 5):  # the second and third kernels
        events[k] = {**events[k], "ts": bad}
    (step,) = T.analyse(as_bytes(trace(*events))).steps
    assert step.kernels == 3
    (note,) = step.notes
    assert note.startswith("2 launch calls in this step launched GPU work whose time stamp ('ts')")
    assert "dropped" not in note


def test_a_stream_id_no_profiler_writes_is_not_a_second_stream():
    events = eager_step(0.0, 1, n=5)
    events[3]["args"]["stream"] = 10**400
    (step,) = T.analyse(as_bytes(trace(*events))).steps
    assert step.gpu_streams == 1 and step.kernels == 4
    assert any("stream id is unusable" in note for note in step.notes)


def test_kernels_stamped_before_their_launches_have_no_launch_delay():
    """Every kernel at ts 0: each is drawn at its call's start, and the readout has no delay to show (it said
    -4.0 µs, minus each launch call's length)."""
    from core.trace.kernels import kernel_table

    events = eager_step(1000.0, 1, n=5)
    for e in events:
        if e["cat"] == "kernel":
            e["ts"] = 0.0
    report = T.analyse(as_bytes(trace(*events)))
    (step,) = report.steps
    assert step.launch_delay() == {"median_us": None, "p90_us": None, "max_us": None}
    assert all(row["launch_delay_us"] is None for row in kernel_table(report, step.index))
    assert any("with no launch delay" in note for note in step.notes)


def test_a_recorder_block_of_the_wrong_kind_is_named_as_json_names_it():
    for block, kind in ((5, "a number"), ([1], "a list"), ("x", "a string"), (True, "true or false")):
        assert f"(it is {kind}, not an object)" in T.untraced_block(block)[1]
