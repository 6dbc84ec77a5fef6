"""gpu_probe/kernels/launch.py: Triton launches bound once per shape.

CPU: the plan caches and the binding logic against a stand-in of Triton 3.6's kernel, compiled kernel and
CUDA launcher (which argument list reaches the launcher, and when a call falls back to `kernel[grid]`).
CUDA (marked): the bound path launches the very kernel `kernel[grid]` does, with bit-identical outputs, for
every op of the unfused and fused steps, PDL included, and inside a captured graph.
"""

import math
from types import SimpleNamespace

import pytest
import torch

from gpu_probe.kernels import launch, ops
from gpu_probe.model import rms_norm


class CudaLauncher:
    """Stands in for triton.backends.nvidia.driver.CudaLauncher (the name is what `_bind` checks)."""

    global_scratch_size = profile_scratch_size = 0
    launch_cooperative_grid, launch_pdl = False, True

    def __init__(self):
        self.calls = []

    def launch(self, *args):
        self.calls.append(args)


class FakeKernel:
    """kernel(a_ptr, b_ptr, n, eps, BLOCK: constexpr, EXTRA: constexpr = 7), as Triton 3.6 describes one."""

    __name__ = "fake"

    def __init__(self, signature=None, runner=None):
        names = ["a_ptr", "b_ptr", "n", "eps", "BLOCK", "EXTRA"]
        self.arg_names = names
        self.params = [
            SimpleNamespace(name=n, has_default=n == "EXTRA", default=7 if n == "EXTRA" else None)
            for n in names
        ]
        self.pre_run_hooks = []
        self.plain_calls = []
        types = signature or {
            "a_ptr": "*fp32",
            "b_ptr": "*fp32",
            "n": "i32",
            "eps": "fp32",
            "BLOCK": "constexpr",
            "EXTRA": "constexpr",
        }
        self.compiled = SimpleNamespace(
            src=SimpleNamespace(signature=types),
            run=runner or CudaLauncher(),
            function=1234,
            packed_metadata=(4, 1, 0),
        )

    def __getitem__(self, grid):
        def launch_(*args, **meta):
            self.plain_calls.append((grid, args, meta))
            return self.compiled

        return launch_


@pytest.fixture
def bindable(monkeypatch):
    """This process as a CUDA one with Triton 3.6: binding allowed, stream 77, the CPU tensors' device current."""
    chains = ([], [])  # Triton's launch hook chains' lists of hooks
    monkeypatch.setattr(launch, "_SUPPORTED", True)
    monkeypatch.setattr(launch, "_ENTER_CALLS", chains[0])
    monkeypatch.setattr(launch, "_EXIT_CALLS", chains[1])
    monkeypatch.setattr(launch, "_raw_stream", lambda device: 77)
    monkeypatch.setattr(launch, "_current_device", lambda: -1)
    monkeypatch.setattr(launch, "_bound_on", True)
    return chains


def tensors():
    return torch.zeros(8), torch.zeros(8)


def test_the_first_call_goes_through_kernel_grid_and_later_ones_through_the_launcher(bindable):
    kernel = FakeKernel()
    plan = launch.Launch(kernel, (3,), (None, None, 5, 1.5), {"BLOCK": 16, "num_warps": 4}, slots=(0, 1))
    a, b = tensors()
    plan(a, b)
    assert kernel.plain_calls == [((3,), (a, b, 5, 1.5), {"BLOCK": 16, "num_warps": 4})]
    assert plan.bound and plan.compiled is kernel.compiled
    c, d = tensors()
    plan(c, d)
    assert len(kernel.plain_calls) == 1  # no second trip through the binder
    # grid, stream, function, cooperative, PDL, the two scratch buffers, packed metadata, launch metadata,
    # the two hooks, then every parameter in signature order: addresses, scalars, constexprs and defaults.
    expected = (3, 1, 1, 77, 1234, False, True, None, None, (4, 1, 0), None, None, None)
    assert kernel.compiled.run.calls == [(*expected, c.data_ptr(), d.data_ptr(), 5, 1.5, 16, 7)]


def test_tensors_anywhere_in_the_argument_list(bindable):
    kernel = FakeKernel()
    plan = launch.Launch(kernel, (2, 5), (None, 9, 3, None), {"BLOCK": 32}, slots=(0, 3))
    a, b = tensors()
    plan(a, b)  # b's slot is a scalar in FakeKernel's signature: never bound
    assert not plan.bound
    kernel = FakeKernel(
        signature={
            "a_ptr": "*fp32",
            "b_ptr": "i32",
            "n": "i32",
            "eps": "*fp32",
            "BLOCK": "constexpr",
            "EXTRA": "constexpr",
        }
    )
    plan = launch.Launch(kernel, (2, 5), (None, 9, 3, None), {"BLOCK": 32}, slots=(0, 3))
    plan(a, b)
    plan(b, a)
    assert kernel.compiled.run.calls[0][13:] == (b.data_ptr(), 9, 3, a.data_ptr(), 32, 7)
    assert kernel.compiled.run.calls[0][:5] == (2, 5, 1, 77, 1234)


def test_a_launcher_other_than_cuda_s_is_called_as_kernel_grid_calls_it(bindable):
    calls = []
    kernel = FakeKernel(runner=lambda *args: calls.append(args))
    plan = launch.Launch(kernel, (4,), (None, None, 5, 1.5), {"BLOCK": 16}, slots=(0, 1))
    a, b = tensors()
    plan(a, b)
    plan(a, b)
    assert calls == [
        (4, 1, 1, 77, 1234, (4, 1, 0), None, None, None, a.data_ptr(), b.data_ptr(), 5, 1.5, 16, 7)
    ]


def test_what_falls_back_to_kernel_grid(bindable, monkeypatch):
    kernel = FakeKernel()
    plan = launch.Launch(kernel, (3,), (None, None, 5, 1.5), {"BLOCK": 16}, slots=(0, 1))
    a, b = tensors()
    plan(a, b)
    assert plan.bound
    plain = len(kernel.plain_calls)
    base = torch.zeros(9)
    plan(base[1:], b)  # 4 bytes off a 16-byte boundary: the compiled kernel assumed alignment
    bindable[0].append(print)  # a launch hook (Triton's profiler): it must see every launch
    plan(a, b)
    bindable[0].clear()
    previous = launch.set_bound(False)  # the benchmark's side by side
    plan(a, b)
    launch.set_bound(previous)
    assert len(kernel.plain_calls) == plain + 3 and not kernel.compiled.run.calls
    plan(a, b)
    assert len(kernel.compiled.run.calls) == 1


@pytest.mark.parametrize(
    "change",
    ["interpreter", "bind=False", "signature", "pre_run_hook", "device", "misaligned", "missing constexpr"],
)
def test_never_bound(bindable, monkeypatch, change):
    kernel = FakeKernel()
    meta = {"BLOCK": 16}
    bind = True
    a, b = tensors()
    if change == "interpreter":
        monkeypatch.setattr(launch, "_SUPPORTED", False)
    elif change == "bind=False":
        bind = False
    elif change == "signature":  # another Triton: the compiled signature does not list every parameter
        kernel.compiled.src.signature = {"a_ptr": "*fp32", "b_ptr": "*fp32", "n": "i32", "eps": "fp32"}
    elif change == "pre_run_hook":
        kernel.pre_run_hooks.append(print)
    elif change == "device":
        monkeypatch.setattr(launch, "_current_device", lambda: 0)
    elif change == "misaligned":
        a = torch.zeros(9)[1:]
    else:
        meta = {}
    plan = launch.Launch(kernel, (3,), (None, None, 5, 1.5), meta, slots=(0, 1), bind=bind)
    plan(a, b)
    plan(a, b)
    assert not plan.bound and len(kernel.plain_calls) == 2 and not kernel.compiled.run.calls


def test_the_interpreter_never_binds_and_kernels_still_run():
    assert launch.INTERPRETED and not launch.bound_available()
    x, w = torch.randn(2, 8), torch.randn(8)
    out = ops.rms_norm(x, w, 1e-5)
    plan = next(p for k, p in ops._PLANS["rms_norm"].items() if k[0] == x.shape and k[2] == x.dtype)
    assert not plan.bound
    assert torch.allclose(out, rms_norm(x, w, 1e-5), rtol=1e-5, atol=1e-6)


def test_one_plan_per_shape():
    ops._PLANS["silu_mul"].clear()
    gate, up = torch.randn(2, 24), torch.randn(2, 24)
    ops.silu_mul(gate, up)
    ops.silu_mul(gate + 1, up)
    assert len(ops._PLANS["silu_mul"]) == 1
    ops.silu_mul(torch.randn(3, 24), torch.randn(3, 24))
    assert len(ops._PLANS["silu_mul"]) == 2


def test_remember_refuses_a_key_that_misses_what_the_launch_depends_on():
    kernel = FakeKernel()
    plans = {}
    one = launch.Launch(kernel, (3,), (None, None, 5, 1.5), {"BLOCK": 16}, slots=(0, 1))
    assert launch.remember(plans, "k", one) is one
    assert (
        launch.remember(plans, "k", launch.Launch(kernel, (3,), (None, None, 5, 1.5), {"BLOCK": 16}, (0, 1)))
        is one
    )
    with pytest.raises(AssertionError, match="the key misses something"):
        launch.remember(plans, "k", launch.Launch(kernel, (3,), (None, None, 6, 1.5), {"BLOCK": 16}, (0, 1)))


def test_a_wrong_layout_is_refused_with_a_message():
    with pytest.raises(ValueError, match="rms_norm"):
        ops.rms_norm(torch.randn(8, 2).t(), torch.randn(8), 1e-5)
    with pytest.raises(ValueError, match="silu_mul"):
        ops.silu_mul(torch.randn(2, 8), torch.randn(2, 9))


def test_an_empty_template_allocates_contiguous_tensors():
    like = launch.empty_template((3, 5), torch.bfloat16, "cpu")
    out = torch.empty_like(like)
    assert out.shape == (3, 5) and out.is_contiguous() and out.dtype == torch.bfloat16
    assert out.data_ptr() != like.data_ptr()


# ---- CUDA: the same kernels, bit for bit -------------------------------------------------------------
cuda = pytest.mark.cuda


def _bound_and_plain(call):
    """call() with every launch plain, then twice bound (the first call of a fresh shape binds): both outputs."""
    previous = launch.set_bound(False)
    try:
        plain = [t.clone() for t in call()]
    finally:
        launch.set_bound(True)
    try:
        call()
        bound = [t.clone() for t in call()]
    finally:
        launch.set_bound(previous)
    return plain, bound


def _clear_plans():
    from gpu_probe.kernels import attention, linear

    for table in (
        *ops._PLANS.values(),
        linear._LINEAR_PLANS,
        attention._PLAIN_PLANS,
        attention._DECODE_PLANS,
    ):
        table.clear()


def _bound_plans():
    """Every launch kept by the ops' plan tables."""
    from gpu_probe.kernels import attention, linear

    plans = [p for table in ops._PLANS.values() for p in table.values()]
    plans += [p.launch for p in linear._LINEAR_PLANS.values()]
    plans += [p.attend for p in attention._PLAIN_PLANS.values()] + [
        p.attend for p in attention._DECODE_PLANS.values()
    ]
    return plans


@cuda
@pytest.mark.parametrize("batch", [1, 5, 64])
def test_every_unfused_op_bound_is_the_plain_launch_on_cuda(batch):
    assert launch.bound_available()
    _clear_plans()
    from gpu_probe.kernels.attention import paged_attention
    from gpu_probe.kernels.linear import fused_linear

    gen = torch.Generator(device="cuda").manual_seed(batch)
    bf16 = torch.bfloat16

    def rand(*shape):
        return torch.randn(*shape, generator=gen, device="cuda").to(bf16)

    hidden, heads, kv_heads, head_dim, ffn = 2048, 32, 8, 64, 8192
    x, w = rand(batch, hidden), rand(hidden)
    weight = rand(3072, hidden) / math.sqrt(hidden)
    gate, up = rand(batch, ffn), rand(batch, ffn)
    cos, sin = torch.rand(700, head_dim // 2, device="cuda"), torch.rand(700, head_dim // 2, device="cuda")
    positions = torch.randint(0, 700, (batch,), device="cuda")
    k_cache, v_cache = (
        rand(1 + batch * 4, 16, kv_heads, head_dim),
        rand(1 + batch * 4, 16, kv_heads, head_dim),
    )
    tables = torch.arange(1, 1 + batch * 4, device="cuda", dtype=torch.int32).view(batch, 4)
    lens = torch.full((batch,), 50, dtype=torch.int32, device="cuda")
    slots = tables[:, 3].long() * 16 + 1

    q0, k0 = rand(batch, heads * head_dim), rand(batch, kv_heads * head_dim)

    def step():
        q, k = q0.clone(), k0.clone()  # rotated in place: the same inputs every call
        ops.rope_(q, k, positions, cos, sin, head_dim)
        ops.write_kv(k, k, slots, k_cache, v_cache)
        outs = [ops.rms_norm(x, w, 1e-5), ops.silu_mul(gate, up), q, k]
        outs += [
            paged_attention(q, tables, lens, k_cache, v_cache, heads, kv_heads, splits) for splits in (1, 4)
        ]
        if batch <= 64:
            outs += [fused_linear(x, weight), fused_linear(x, weight, pdl=True, rms_eps=1e-5)]
        return outs

    plain, bound = _bound_and_plain(step)
    assert all(torch.equal(p, b) for p, b in zip(plain, bound))
    assert all(plan.bound for plan in _bound_plans())


@cuda
@pytest.mark.parametrize("preset", ["small", "1b"])
@pytest.mark.parametrize("fused", [False, True])
def test_a_step_bound_is_the_step_plain_and_replays_the_same_in_a_graph_on_cuda(preset, fused):
    from gpu_probe.decode_batch import make_batch
    from gpu_probe.model import ProbeModel

    model = ProbeModel(preset, device="cuda", num_blocks=1 + 8 * 40, fused=fused)
    model.kv_cache.fill_random_(seed=4)
    batch = make_batch(model, 8, seed=5)
    for n in (1, 8):
        inputs = batch.head(n)
        with torch.no_grad():
            plain, bound = _bound_and_plain(lambda inputs=inputs: [model(inputs)])
        assert torch.equal(plain[0], bound[0])
    # Captured with bound launches (the side stream's handle is asked for per launch): replays equal eager.
    inputs = batch.head(8)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        model(inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        captured = model(inputs)
    graph.replay()
    torch.cuda.synchronize()
    with torch.no_grad():
        assert torch.equal(captured, model(inputs))


@cuda
def test_the_bound_launch_is_the_compiled_kernel_kernel_grid_returns_on_cuda():
    from gpu_probe.kernels import linear

    x = torch.randn(1, 2048, device="cuda").to(torch.bfloat16)
    weight = torch.randn(2048, 2048, device="cuda").to(torch.bfloat16)
    linear.fused_linear(x, weight, pdl=True)
    linear.fused_linear(x, weight, pdl=True)
    plan = next(
        p for k, p in linear._LINEAR_PLANS.items() if k[0] == x.shape and k[3] == weight.shape and k[9]
    )
    out = torch.empty(1, 2048, device="cuda", dtype=torch.bfloat16)
    assert plan.launch.bound and plan.launch.plain(x, weight, out, out) is plan.launch.compiled
    if torch.cuda.get_device_capability()[0] >= 9:
        assert plan.launch.compiled.metadata.launch_pdl  # PDL is the compiled kernel's, bound or not


# ---- bench/launch_cost.py's parts on the CPU: every op item runs, the table and the goals read right --------
def test_the_launch_cost_bench_times_every_op_of_the_step():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import launch_cost

    from gpu_probe.config import get_config
    from gpu_probe.decode_batch import make_batch
    from gpu_probe.model import ProbeModel

    cfg = get_config("tiny")
    model = ProbeModel(cfg, num_blocks=1 + -(-cfg.prefill_len // cfg.block_size), ops="kernels")
    model.kv_cache.fill_random_(seed=1)
    with torch.no_grad():
        ops_ = launch_cost.op_items(model, make_batch(model, 1, seed=2))
        costs = launch_cost.per_launch(
            {name: (fn, True) for name, (fn, _) in ops_.items()}, rounds=1, per_round=2
        )
    assert set(costs) == set(ops_) and all(0 < c["p10"] <= c["median"] <= c["p90"] for c in costs.values())
    assert ops_["attention"][1] == (2 if model.attention_splits(1) > 1 else 1)
    steps = {
        "unfused (bound)": {"enqueue_us_per_launch": 12.0, "enqueue_us": {"median": 3000.0}, "launches": 250},
        "fused (bound)": {"enqueue_us_per_launch": 15.0, "enqueue_us": {"median": 1500.0}, "launches": 100},
        "hf eager": {"enqueue_us_per_launch": 11.0, "enqueue_us": {"median": 9000.0}, "launches": 818},
    }
    rows = launch_cost.goals(steps)
    assert [(round(r["ratio"], 3), r["met"]) for r in rows] == [
        (round(12 / 11, 3), True),
        (round(15 / 11, 3), False),
    ]
    assert launch_cost.goals({"unfused (bound)": steps["unfused (bound)"]})[0]["met"] is None  # no reference
    preset = {"preset": "tiny", "layers": 2, "attention_splits": 2, "goals": rows, "steps": steps}
    preset["ops"] = {name: {**cost, "launches_a_call": 1} for name, cost in costs.items()}
    lines = launch_cost.table({"presets": [preset]})
    assert (
        lines[-2].endswith("met")
        and lines[-1].endswith("MISSED")
        and any("hf eager" in line for line in lines)
    )


def test_the_launch_cost_bench_measures_a_preset_end_to_end(monkeypatch):
    """On the CPU through the interpreter, the profiler stood in for: every op and every step kind measured,
    the goals without a Hugging Face reference unmet-for-want-of-data, the JSON's fields all there."""
    import sys
    from dataclasses import replace
    from pathlib import Path
    from types import SimpleNamespace

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import launch_cost

    from gpu_probe import config, measure

    def profile_step(step, label):
        step()
        metrics = SimpleNamespace(cpu_launch_us=100.0)
        return SimpleNamespace(launches=40, timeline=SimpleNamespace(metrics=lambda: metrics))

    monkeypatch.setattr(measure, "profile_step", profile_step)
    # One layer, one warm-up and one timed step of each kind: every op and step kind still runs, bound and
    # through kernel[grid], through the bench's own timing loop; the interpreter's time is per launch (2 s a
    # step), and the test reads the output's fields, not its timings.
    monkeypatch.setitem(config.PRESETS, "tiny", replace(config.PRESETS["tiny"], n_layers=1))
    interleaved = measure.time_interleaved
    monkeypatch.setattr(
        measure, "time_interleaved", lambda steps, n, warmup, *a, **k: interleaved(steps, n, 1, *a, **k)
    )
    args = SimpleNamespace(rounds=1, per_round=1, steps=1, no_hf=True)
    out = launch_cost.measure_preset("tiny", args, lambda msg: None, device="cpu")
    assert out["layers"] == 1
    assert set(out["steps"]) == {
        "unfused (bound)",
        "unfused (kernel[grid])",
        "fused (bound)",
        "fused (kernel[grid])",
    }
    for step in out["steps"].values():
        assert step["launches"] == 40 and step["enqueue_us_per_launch"] == step["enqueue_us"]["median"] / 40
    assert "rms_norm, kernel[grid]" in out["ops"] and "torch.add (tiny, out=), kernel[grid]" not in out["ops"]
    assert [row["met"] for row in out["goals"]] == [None, None]
    assert launch.set_bound(True)  # the bench leaves the launchers bound


def test_the_launch_cost_bench_writes_its_json_and_prints_the_table_last(monkeypatch, tmp_path, capsys):
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import launch_cost
    from probe_results import host_block

    from gpu_probe import host_speed

    class Host:
        def __init__(self):
            pass

        def sample(self, when):
            pass

        def block(self):
            return host_block()

        def close(self):
            pass

    steps = {
        "unfused (bound)": {"enqueue_us": {"median": 2400.0}, "launches": 200, "enqueue_us_per_launch": 12.0}
    }
    preset = {
        "preset": "1b",
        "layers": 16,
        "attention_splits": 16,
        "steps": steps,
        "goals": launch_cost.goals(steps),
    }
    preset["ops"] = {"rms_norm": {"median": 5.0, "p10": 4.5, "p90": 6.0, "launches_a_call": 1}}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "Test GPU")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(host_speed, "HostSpeed", Host)
    monkeypatch.setattr(launch_cost, "measure_preset", lambda name, args, say: dict(preset, preset=name))
    out = tmp_path / "launch_cost.json"
    assert launch_cost.main(["--preset", "1b", "small", "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert [p["preset"] for p in written["presets"]] == ["1b", "small"] and written["host"] == host_block()
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("Test GPU") and printed[-1].endswith("goal <= 1.3  no data")
    assert any("host Intel" in line for line in printed) and any("goal 0.8-1.2" in line for line in printed)
