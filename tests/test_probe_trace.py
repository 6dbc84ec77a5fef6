"""Chrome trace -> Timeline: lanes, launch attribution, graph merging, kernels per layer."""

import pytest

from core.timeline import CPU_BOUND
from gpu_probe.trace import kernels_per_layer, parse_step, short_kernel_name


def _x(cat, name, ts, dur, corr=None, **kw):
    args = {"correlation": corr} if corr is not None else {}
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": args, **kw}


def eager_trace():
    """Step at t=1000: three launches (one Triton via the driver API), a sync, three kernels."""
    return {
        "traceEvents": [
            _x("user_annotation", "decode_step", 1000.0, 100.0),
            _x("cpu_op", "aten::mm", 1001.0, 9.0),
            _x("cuda_runtime", "cudaLaunchKernel", 1005.0, 4.0, corr=11),
            _x("cuda_runtime", "cudaStreamIsCapturing", 1010.0, 0.5),  # not a launch
            _x("cuda_runtime", "cudaLaunchKernel", 1020.0, 5.0, corr=12),
            _x("cuda_driver", "cuLaunchKernel", 1040.0, 6.0, corr=13),
            _x("cuda_runtime", "cudaDeviceSynchronize", 1050.0, 40.0, corr=14),
            _x("kernel", "void gemv<float, 128>(float const*)", 1011.0, 3.0, corr=11),
            _x("kernel", "elementwise_kernel", 1026.0, 2.0, corr=12),
            _x("kernel", "_fused_linear_kernel", 1047.0, 30.0, corr=13),
            _x("kernel", "other_process_kernel", 2000.0, 30.0, corr=99),  # not this step's
            {"ph": "s", "cat": "ac2g", "id": 11, "ts": 1005.0},
        ]
    }


def test_eager_step_lanes_and_attribution():
    step = parse_step(eager_trace(), label="eager")
    tl = step.timeline
    # CPU interval i: end of launch i-1 (or the step start) to the end of launch i.
    assert tl.cpu_start.tolist() == [0.0, 9.0, 25.0]
    assert tl.cpu_dur.tolist() == [9.0, 16.0, 21.0]
    assert tl.cpu_names[0].startswith("cudaLaunchKernel: gemv")
    assert tl.cpu_names[2] == "cuLaunchKernel: _fused_linear_kernel"
    assert tl.gpu_start.tolist() == [11.0, 26.0, 47.0]
    assert tl.gpu_dur.tolist() == [3.0, 2.0, 30.0]
    assert tl.launched_by.tolist() == [0, 1, 2]
    assert step.kernels_per_step == 3 and step.launches == 3 and step.graph_launches == 0
    m = tl.metrics()
    assert m.cpu_launch_us == 46.0 and m.gpu_busy_us == 35.0 and m.step_us == 77.0
    assert m.bound_by == CPU_BOUND and tl.source == "measured" and tl.label == "eager"


def test_graph_step_merges_copies_and_graph_launch():
    trace = {
        "traceEvents": [
            _x("user_annotation", "decode_step", 0.0, 200.0),
            _x("cuda_runtime", "cudaMemcpyAsync", 10.0, 3.0, corr=1),
            _x("cuda_runtime", "cudaMemcpyAsync", 15.0, 3.0, corr=2),
            _x("cuda_runtime", "cudaGraphLaunch", 25.0, 10.0, corr=3),
            _x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 14.0, 1.0, corr=1),
            _x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 19.0, 1.0, corr=2),
            *[_x("kernel", f"k{i % 2}", 40.0 + 5 * i, 4.0, corr=3) for i in range(6)],
        ]
    }
    step = parse_step(trace)
    tl = step.timeline
    assert tl.cpu_names == ("2 input copies + cudaGraphLaunch",)
    assert tl.cpu_start.tolist() == [0.0] and tl.cpu_dur.tolist() == [35.0]
    assert tl.launched_by.tolist() == [0] * 8
    assert step.kernels_per_step == 8 and step.graph_launches == 1 and step.launches == 3
    assert tl.metrics().launches == 1


def test_nested_driver_call_is_not_counted_twice():
    trace = eager_trace()
    trace["traceEvents"].append(_x("cuda_driver", "cuLaunchKernel", 1006.0, 2.0, corr=21))
    assert parse_step(trace).launches == 3


def test_missing_step_or_gpu_events_raise():
    with pytest.raises(ValueError, match="decode_step"):
        parse_step({"traceEvents": []})
    trace = eager_trace()
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e["cat"] != "kernel"]
    with pytest.raises(ValueError, match="GPU events"):
        parse_step(trace)


def test_kernels_per_layer_from_the_repeating_block():
    layer = ["norm", "gemm_a", "rope", "attn", "gemm_a", "add"]
    names = ["embed", "copy"] + layer * 4 + ["norm", "lm_head"]
    assert kernels_per_layer(names, 4) == (6, True)
    # Longest block: two equal neighbours inside a layer are not a period of 1.
    assert kernels_per_layer(["x"] * 8, 4) == (2, True)
    assert kernels_per_layer(["a", "a", "b"] * 3 + ["head"], 3) == (3, True)
    # First layer fused differently (as a compiler may): n_layers - 1 repeats, not exact.
    assert kernels_per_layer(["e", "q", "r"] + ["p", "q", "r"] * 5, 6) == (3, False)
    # A short coincidental repeat is not a layer.
    assert kernels_per_layer(list("abcdefghijklmnxyxy"), 2) == (9, False)
    assert kernels_per_layer(["a", "b", "c", "d", "e"], 2) == (2, False)


def test_short_kernel_name():
    assert (
        short_kernel_name("void at::native::vectorized_elementwise_kernel<4, at::native::Foo>(int, Bar)")
        == "at::native::vectorized_elementwise_kernel"
    )
    assert short_kernel_name("triton_poi_fused_add_0") == "triton_poi_fused_add_0"
