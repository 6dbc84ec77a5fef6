"""What a launch costs the host, side by side in one process (a GPU; issue 35's launch goals).

    python bench/launch_cost.py --out launch_cost.json                  # the 1b and small presets
    python bench/launch_cost.py --preset small --out launch_cost.json

Per launch, host µs (`time.perf_counter_ns` around each call, no synchronisation inside a round of calls,
one between rounds; every item taking turns round by round, so a drift of the host falls on all alike):
`torch.add` on tiny tensors (out= given), a trivial Triton kernel through `kernel[grid]` and through the
probe's bound launcher (`gpu_probe.kernels.launch`), `F.linear` at batch 1 (cuBLAS), and each op of the
probe's unfused step at batch 1 as the step launches it (bound, and again through `kernel[grid]`).

Per step, without the profiler: the host time to enqueue one step (`measure.time_interleaved`, the steps
taking turns) over the launches one profiled step makes, for the probe's unfused step, its fused step's
eager launches (each bound and plain), and Hugging Face's eager LlamaForCausalLM of the same shape (where
transformers is installed; `gpu_probe.hf_reference`). Goals, reported and never asserted: the unfused
step's host µs per launch within ±20 % of Hugging Face eager's, the fused step's at most 1.3 x it.

The JSON (`--out`) holds every figure with its p10 and p90, the host speed index (`gpu_probe.host_speed`)
before and after, and the machine; the table is printed last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

UNFUSED_GOAL = (0.8, 1.2)  # the unfused step's host µs per launch over Hugging Face eager's
FUSED_GOAL = 1.3  # the fused step's eager launches over Hugging Face eager's, at most


def per_launch(items: dict, rounds: int, per_round: int) -> dict:
    """{name: {median, p10, p90} host µs per call}: `items` {name: (fn, bound)} take turns round by round,
    each `per_round` calls with the launcher set bound or plain."""
    import torch

    from gpu_probe.host_speed import stats
    from gpu_probe.kernels import launch

    clock = time.perf_counter_ns
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)  # the CPU: the tests
    raw = {name: [] for name in items}
    for fn, bound in items.values():  # compile, bind, warm
        launch.set_bound(bound)
        for _ in range(5):
            fn()
    for _ in range(rounds):
        for name, (fn, bound) in items.items():
            launch.set_bound(bound)
            times = raw[name]
            sync()
            for _ in range(per_round):
                t0 = clock()
                fn()
                times.append(clock() - t0)
    sync()
    launch.set_bound(True)
    return {name: stats([t / 1e3 for t in times]) for name, times in raw.items()}


def op_items(model, batch) -> dict:
    """The unfused step's ops at this batch, each as the step launches it (`kernel_ops()`), on the step's own
    tensors (layer 0), plus F.linear and the trivial launches: {name: (fn, launches a call)}."""
    import torch
    import torch.nn.functional as F

    from gpu_probe.host_speed import trivial_kernel
    from gpu_probe.kernels import launch
    from gpu_probe.model import kernel_ops

    op, cfg, layer = kernel_ops(), model.cfg, model.layers[0]
    positions, slots, tables, lens = (
        batch.positions,
        batch.slot_mapping,
        batch.block_tables,
        batch.context_lens,
    )
    splits = model.attention_splits(batch.size)
    # The weights as locals: each call times its op, not nn.Module's attribute lookup (the step pays that too).
    attn_norm, wq, wk, wv, w_gate, w_up, w_down = (
        getattr(layer, name) for name in ("attn_norm", "wq", "wk", "wv", "w_gate", "w_up", "w_down")
    )
    lm_head, cos, sin, eps, head_dim = (
        model.lm_head,
        model.rope_cos,
        model.rope_sin,
        cfg.norm_eps,
        cfg.head_dim,
    )
    h = F.embedding(batch.input_ids, model.tok_embeddings)
    x = op.rms_norm(h, attn_norm, eps)
    q, k, v = op.linear(x, wq), op.linear(x, wk), op.linear(x, wv)
    gate, up = op.linear(x, w_gate), op.linear(x, w_up)
    k_cache, v_cache = model.kv_cache.layer(0)
    a, b, c = (torch.ones(16, device=model.device) for _ in range(3))
    trivial = launch.Launch(trivial_kernel, (1,), (None, None, None, 16), {"BLOCK": 16}, slots=(0, 1, 2))
    return {
        "torch.add (tiny, out=)": (lambda: torch.add(a, b, out=c), 1),
        "Triton trivial, kernel[grid]": (lambda: trivial_kernel[(1,)](a, b, c, 16, BLOCK=16), 1),
        "Triton trivial, bound": (lambda: trivial(a, b, c), 1),
        "F.linear q_proj (cuBLAS)": (lambda: F.linear(x, wq), 1),
        "rms_norm": (lambda: op.rms_norm(h, attn_norm, eps), 1),
        "q_proj (GEMV)": (lambda: op.linear(x, wq), 1),
        "rope": (lambda: op.rope(q, k, positions, cos, sin, head_dim), 1),
        "kv_write": (lambda: op.write_kv(k, v, slots, k_cache, v_cache), 1),
        "attention": (
            lambda: op.attention(q, tables, lens, k_cache, v_cache, cfg.n_heads, cfg.n_kv_heads, splits),
            2 if splits > 1 else 1,
        ),
        "residual_add (torch)": (lambda: h + x, 1),
        "silu_mul": (lambda: op.silu_mul(gate, up), 1),
        "down_proj (GEMV)": (lambda: op.linear(gate, w_down), 1),
        "lm_head (GEMV)": (lambda: op.linear(x, lm_head), 1),
    }


def measure_preset(preset: str, args, say, device: str = "cuda") -> dict:
    """One preset's op costs, step costs and goals (`device`: "cpu" only for the tests, through Triton's
    interpreter)."""
    import torch

    from gpu_probe import measure
    from gpu_probe.config import get_config
    from gpu_probe.decode_batch import make_batch
    from gpu_probe.hf_reference import Decoder, available, build_model, shape_of
    from gpu_probe.kernels import launch
    from gpu_probe.model import ProbeModel

    say(f"{preset}: building the model")
    cfg = get_config(preset)
    model = ProbeModel(
        cfg, device=device, num_blocks=1 + -(-cfg.prefill_len // cfg.block_size), ops="kernels"
    )
    model.kv_cache.fill_random_(seed=1)
    batch = make_batch(model, 1, seed=2)
    out = {"preset": preset, "layers": cfg.n_layers, "attention_splits": model.attention_splits(1)}
    with torch.no_grad():
        say(f"{preset}: per-launch costs of each op, bound and through kernel[grid]")
        ops = op_items(model, batch)
        items, launches = {}, {}
        for name, (fn, calls) in ops.items():
            items[name], launches[name] = (fn, True), calls
            if not name.startswith(("torch.add", "F.linear", "residual_add", "Triton trivial")):
                items[f"{name}, kernel[grid]"], launches[f"{name}, kernel[grid]"] = (fn, False), calls
        costs = per_launch(items, args.rounds, args.per_round)
        out["ops"] = {name: {**cost, "launches_a_call": launches[name]} for name, cost in costs.items()}

        def probe_step(fused: bool, bound: bool):
            def step():
                launch.set_bound(bound)
                model.fused = fused
                return model(batch)

            return step

        steps = {
            ("unfused", True): probe_step(False, True),
            ("unfused", False): probe_step(False, False),
            ("fused", True): probe_step(True, True),
            ("fused", False): probe_step(True, False),
        }
        hf = None
        if available() and not args.no_hf:
            say(f"{preset}: building Hugging Face's Llama of the same shape")
            hf = Decoder(build_model(shape_of(cfg), device, seed=cfg.seed), 1, cfg.prefill_len, device)
            steps[("hf eager", True)] = hf.step
        say(f"{preset}: timing the steps taking turns ({args.steps} each)")
        errors: dict = {}
        timings = measure.time_interleaved(steps, args.steps, 5, args.rounds, say=say, errors=errors)
        launch.set_bound(True)
        out["steps"] = {}
        for (name, bound), step in steps.items():
            label = name if name == "hf eager" else f"{name} ({'bound' if bound else 'kernel[grid]'})"
            if (name, bound) in errors:
                out["steps"][label] = {
                    "error": f"{type(errors[(name, bound)]).__name__}: {errors[(name, bound)]}"
                }
                continue
            if hf is not None and name == "hf eager":
                hf.rewind()
            traced = measure.profile_step(step, label=label)
            launch.set_bound(True)
            t = timings[(name, bound)]
            out["steps"][label] = {
                "enqueue_us": {k: t[f"enqueue_us_{k}"] for k in ("median", "p10", "p90")},
                "step_us": {k: t[f"step_us_{k}"] for k in ("median", "p10", "p90")},
                "launches": traced.launches,
                "profiled_cpu_launch_us": traced.timeline.metrics().cpu_launch_us,
                "enqueue_us_per_launch": t["enqueue_us_median"] / max(traced.launches, 1),
            }
    out["goals"] = goals(out["steps"])
    return out  # the models go with this frame


def goals(steps: dict) -> list[dict]:
    """Issue 35's launch goals of one preset (None where Hugging Face was not measured)."""
    hf = steps.get("hf eager", {}).get("enqueue_us_per_launch")
    rows = []
    for label, limits in (("unfused (bound)", UNFUSED_GOAL), ("fused (bound)", (None, FUSED_GOAL))):
        ours = steps.get(label, {}).get("enqueue_us_per_launch")
        ratio = ours / hf if ours and hf else None
        lo, hi = limits
        met = None if ratio is None else (lo is None or ratio >= lo) and ratio <= hi
        goal = f"{lo:g}-{hi:g}" if lo is not None else f"<= {hi:g}"
        rows.append(
            {
                "what": f"{label} host µs per launch / Hugging Face eager's",
                "ratio": ratio,
                "goal": goal,
                "met": met,
            }
        )
    return rows


def table(result: dict) -> list[str]:
    lines = []
    host = result.get("host") or {}
    if host:
        lines.append(
            f"host {host['cpu']}: torch launch {host['torch_launch_us']['median']:.2f} µs "
            f"(p10 {host['torch_launch_us']['p10']:.2f}, p90 {host['torch_launch_us']['p90']:.2f}), "
            f"graph launch {host['graph_fixed_us']:.2f} µs + {host['graph_per_node_us']:.4f} µs a node"
        )
    for preset in result["presets"]:
        lines.append(
            f"-- {preset['preset']} ({preset['layers']} layers, attention splits at b1: {preset['attention_splits']})"
        )
        lines.append(f"{'per call, host µs':<44}{'median':>9}{'p10':>8}{'p90':>8}{'launches':>10}")
        for name, cost in preset["ops"].items():
            lines.append(
                f"{name:<44}{cost['median']:>9.2f}{cost['p10']:>8.2f}{cost['p90']:>8.2f}{cost['launches_a_call']:>10}"
            )
        lines.append(f"{'step (no profiler)':<28}{'enqueue µs':>12}{'launches':>10}{'µs/launch':>11}")
        for label, step in preset["steps"].items():
            if "error" in step:
                lines.append(f"{label:<28}  {step['error'][:60]}")
                continue
            lines.append(
                f"{label:<28}{step['enqueue_us']['median']:>12.1f}{step['launches']:>10}{step['enqueue_us_per_launch']:>11.2f}"
            )
        for row in preset["goals"]:
            shown = "n/a" if row["ratio"] is None else f"{row['ratio']:.2f}"
            verdict = "no data" if row["met"] is None else "met" if row["met"] else "MISSED"
            lines.append(f"{row['what']:<60}{shown:>7}  goal {row['goal']:<8}{verdict}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--preset", nargs="+", default=["1b", "small"], help="probe presets (default: 1b small)"
    )
    parser.add_argument("--rounds", type=int, default=7, help="rounds the items take turns in")
    parser.add_argument("--per-round", type=int, default=200, help="calls of each op a round")
    parser.add_argument("--steps", type=int, default=49, help="timed steps of each step kind")
    parser.add_argument("--no-hf", action="store_true", help="leave Hugging Face's model out")
    parser.add_argument("--out", default=None, help="write every figure to this JSON file")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("launch_cost: needs a CUDA GPU (this measures the host's launches on one)", file=sys.stderr)
        return 2
    import platform

    import triton

    from gpu_probe.hf_reference import available
    from gpu_probe.host_speed import HostSpeed, cpu_name
    from gpu_probe.live import main_progress

    host = HostSpeed()
    host.sample("before")
    presets = []
    for preset in args.preset:
        presets.append(measure_preset(preset, args, main_progress))
        torch.cuda.empty_cache()
    host.sample("after")
    result = {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python bench/launch_cost.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "device": torch.cuda.get_device_name(),
        "cpu": cpu_name(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "transformers": available(),
        "host": host.block(),
        "presets": presets,
    }
    host.close()
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1, allow_nan=False), encoding="utf-8")
    print(f"{result['device']} · {result['cpu']} · torch {result['torch']} · Triton {result['triton']}")
    for line in table(result):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
