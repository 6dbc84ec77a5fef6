"""GPU sweep of the fused GEMM's tiles at small batch, and of the decode step with and without PDL.

Usage (on a CUDA machine, from the repo root):
    python tools/kernel_sweep.py [--out DIR] [--quick]

1. Each projection shape of the small preset (QKV+norm, o+residual, gate/up+SwiGLU, down+residual,
   LM head+norm) at batch 1: every GEMV tile in a small grid, the tensor-core kernel, each timed as
   the per-launch time inside a CUDA graph of back-to-back launches over distinct weight copies
   (more bytes than the L2 holds, as in a real step). PDL on for the grid, off for the best tile.
2. The whole fused step captured as a CUDA graph at batch 1, 2, 4, 8 with: the tensor-core kernel
   everywhere without PDL (the previous design), the GEMV without PDL, the GEMV with PDL, and the
   GEMV with PDL and each shape's best tile from part 1.
Prints tables; writes kernel_sweep.json to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

from gpu_probe.config import get_config
from gpu_probe.kernels import linear
from gpu_probe.model import ProbeModel
from tools.probe_model_check import capture, gpu_warm, kernel_breakdown, make_inputs

SHAPES = {
    "qkv+norm": (3072, 1024, "norm"),
    "o+res": (1024, 1024, "res"),
    "gate_up+swiglu": (2816, 1024, "swiglu"),
    "down+res": (1024, 2816, "res"),
    "lm_head+norm": (32000, 1024, "norm"),
}
OLD_DOT = {
    "kernel": "dot",
    "BLOCK_M": 16,
    "BLOCK_K": 128,
    "num_warps": 4,
    "num_stages": 4,
}  # + BLOCK_N by shape


def replay_us(graph, launches: int, reps: int = 30) -> float:
    times = []
    for _ in range(reps + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / launches)
    return statistics.median(times[3:])


def old_block_n(n: int, sms: int) -> int:
    return 128 if -(-n // 128) >= sms else 32 if -(-n // 32) >= sms // 2 else 16


def shape_case(name: str, m: int):
    n, k, kind = SHAPES[name]
    rows = 2 * n if kind == "swiglu" else n
    launches = max(6, min(128, -(-384 * 2**20 // (rows * k * 2))))
    weights = [(torch.randn(rows, k, device="cuda") / k**0.5).to(torch.bfloat16) for _ in range(launches)]
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    kwargs = {
        "norm": dict(rms_eps=1e-5),
        "swiglu": dict(rms_eps=1e-5, swiglu=True),
        "res": dict(residual=torch.randn(m, n, device="cuda").to(torch.bfloat16)),
    }[kind]
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    return weights, x, kwargs, out


def time_config(case, cfg: dict | None, pdl: bool) -> tuple[float, float]:
    """(µs per launch inside a graph, max relative error vs the reference on the first weight)."""
    weights, x, kwargs, out = case
    ref = linear.fused_linear_reference(x, weights[0], **kwargs).float()
    got = linear.fused_linear(x, weights[0], config=cfg, out=out, pdl=pdl, **kwargs).float()
    err = float((got - ref).norm() / ref.norm())
    graph = capture(
        lambda: [linear.fused_linear(x, w, config=cfg, out=out, pdl=pdl, **kwargs) for w in weights]
    )
    return replay_us(graph, len(weights)), err


def sweep_shapes(quick: bool) -> tuple[list[str], dict]:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    lines, best = [], {}
    for name, (n, k, _kind) in SHAPES.items():
        full_k = 1 << (k - 1).bit_length()
        grid = [(bn, bk, w) for bn in (2, 4, 8) for bk in sorted({1024, full_k}) for w in (4, 8)]
        if quick:
            grid = [(bn, full_k, w) for bn in (2, 4, 8) for w in (1, 2, 4)]
        case = shape_case(name, 1)
        bytes_ = case[0][0].numel() * 2
        results = []
        old = dict(OLD_DOT, BLOCK_N=old_block_n(n, sms))
        for label, cfg, pdl in [
            ("dot (before)", old, False),
            ("default, no pdl", None, False),
            ("default, pdl", None, True),
        ] + [
            (
                f"gemv n{bn} k{bk} w{w}",
                {"kernel": "gemv", "BLOCK_M": 1, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w},
                True,
            )
            for bn, bk, w in grid
        ]:
            try:
                us, err = time_config(case, cfg, pdl)
            except Exception as exc:  # a tile that does not compile is a result, not a crash
                lines.append(f"  {name} {label}: {type(exc).__name__}: {str(exc)[:80]}")
                continue
            results.append((us, label, cfg, pdl, err))
        gpu_warm(50)  # time again with warm clocks, in the same order, and keep the second reading
        results = [
            (time_config(case, cfg, pdl)[0], label, cfg, pdl, err) for _, label, cfg, pdl, err in results
        ]
        fixed = [r for r in results if not r[1].startswith("gemv")]
        tiles = sorted(r for r in results if r[1].startswith("gemv"))
        best[name] = tiles[0][2] if tiles else None
        worst_err = max(r[4] for r in results)
        lines.append(
            f"{name:<15} {bytes_ / 1e6:5.1f} MB | "
            + " | ".join(f"{label} {us:5.2f} us ({bytes_ / us / 1e3:4.0f} GB/s)" for us, label, *_ in fixed)
            + " | best: "
            + ", ".join(f"{label} {us:5.2f}" for us, label, *_ in tiles[:3])
            + f" | max rel err {worst_err:.1e}"
        )
        print(lines[-1], flush=True)
    return lines, best


def step_variants(best: dict, batches: list[int]) -> tuple[list[str], list[dict]]:
    cfg = get_config("small")
    # Every make_inputs call adds sequences: room for all of them.
    model = ProbeModel(cfg, device="cuda", num_blocks=1 + (sum(batches) + 8) * cfg.max_blocks_per_seq)
    model.kv_cache.fill_random_(1)
    default_config = linear._tile_config
    by_shape = {(n, k, kind == "swiglu"): name for name, (n, k, kind) in SHAPES.items()}

    def old_config(m, n, k, swiglu, num_sms):
        return (
            dict(OLD_DOT, BLOCK_N=old_block_n(n, num_sms))
            if m <= 16
            else default_config(m, n, k, swiglu, num_sms)
        )

    def best_config(m, n, k, swiglu, num_sms):
        chosen = best.get(by_shape.get((n, k, swiglu)))
        if m <= linear.GEMV_MAX_ROWS and chosen is not None:
            return dict(chosen, BLOCK_M=triton_pow2(m))
        return default_config(m, n, k, swiglu, num_sms)

    def warps(count):
        def config(m, n, k, swiglu, num_sms):
            chosen = default_config(m, n, k, swiglu, num_sms)
            return dict(chosen, num_warps=count) if chosen["kernel"] == "gemv" else chosen

        return config

    gemv_rows = linear.GEMV_MAX_ROWS
    variants = [
        ("gemv, pdl, 1 warp", warps(1), True, gemv_rows),
        ("gemv, pdl, 2 warps", warps(2), True, gemv_rows),
        ("dot, no pdl (before)", old_config, False, gemv_rows),
        ("gemv, no pdl", default_config, False, gemv_rows),
        ("gemv, pdl", default_config, True, gemv_rows),
        ("gemv best tiles, pdl", best_config, True, gemv_rows),
        ("gemv to 8 rows, pdl", default_config, True, 8),
    ]
    lines, records = [], []
    default_splits = model.attention_splits
    for splits in (1, 4, 8):  # batch 1: fewer context splits, fewer programs, no merge kernel at 1
        inputs = make_inputs(model, 1)
        model.attention_splits = lambda batch, s=splits: s
        graph = capture(lambda: model.fused_forward(**inputs))
        gpu_warm(50)
        us = replay_us(graph, 1, reps=100)
        model.attention_splits = default_splits
        records.append(dict(batch=1, variant=f"gemv, pdl, {splits} attention splits", step_us=us))
        lines.append(
            f"step B=1  gemv, pdl, {splits:>2} attention splits {us:7.1f} us (default {default_splits(1)})"
        )
        print(lines[-1], flush=True)
        del graph
    import gpu_probe.kernels as kernels  # ablation: the step's GEMVs alone, attention skipped

    attention = kernels.paged_decode_attention
    kernels.paged_decode_attention = lambda qkv, *args, **kw: qkv[:, : model.cfg.q_size]
    inputs = make_inputs(model, 1)
    graph = capture(lambda: model.fused_forward(**inputs))
    kernels.paged_decode_attention = attention
    gpu_warm(50)
    us = replay_us(graph, 1, reps=100)
    del graph
    records.append(dict(batch=1, variant="gemv, pdl, attention skipped", step_us=us))
    lines.append(f"step B=1  gemv, pdl, attention skipped (GEMVs only) {us:7.1f} us")
    print(lines[-1], flush=True)
    for batch in batches:
        inputs = make_inputs(model, batch)
        reference = None
        for label, chooser, pdl, rows in variants:
            if batch > 4 and rows == gemv_rows and label.startswith("gemv") and "no pdl" not in label:
                continue  # same kernels as "gemv, no pdl" apart from PDL
            linear._tile_config, linear.GEMV_MAX_ROWS = chooser, rows
            default_config.cache_clear()
            model.pdl = pdl
            try:
                step = lambda: model.fused_forward(**inputs)  # noqa: E731
                logits = step().float()
                reference = logits if reference is None else reference
                err = float((logits - reference).norm() / reference.norm())
                graph = capture(step)
                gpu_warm(50)
                us = replay_us(graph, 1, reps=100)
                if batch == 1:
                    kernel_breakdown(graph.replay, f"B=1 {label}", lines)
            finally:
                linear._tile_config, linear.GEMV_MAX_ROWS = default_config, gemv_rows
                default_config.cache_clear()
            records.append(dict(batch=batch, variant=label, step_us=us, rel_err_vs_first=err))
            lines.append(f"step B={batch:<2} {label:<22} {us:7.1f} us (vs first variant rel err {err:.1e})")
            print(lines[-1], flush=True)
            del graph
    return lines, records


def triton_pow2(m: int) -> int:
    return 1 << (m - 1).bit_length()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--quick", action="store_true", help="3 tiles per shape instead of 24")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs CUDA", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    print(f"device {torch.cuda.get_device_name()} torch {torch.__version__}", flush=True)
    shape_lines, best = sweep_shapes(args.quick)
    step_lines, records = step_variants(best, args.batches)
    print("\n==== kernel sweep summary ====")
    for line in shape_lines + step_lines:
        print(line)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "kernel_sweep.json"), "w") as fh:
        json.dump({"shapes": shape_lines, "best_tiles": best, "steps": records}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
