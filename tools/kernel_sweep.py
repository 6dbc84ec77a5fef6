"""GPU sweep of the fused GEMM's tensor-core tiles across the batch axis, and the step they make.

Usage (on a CUDA machine, from the repo root; one call of the device tool):
    python tools/kernel_sweep.py --out $OUT [--presets 1b small] [--deadline-s 480]

1. The two ceilings: HBM copy bandwidth and the bf16 matrix rate.
2. Every fused GEMM shape of each preset (QKV+norm, O+residual, gate/up+SwiGLU, down+residual, LM
   head+norm) at batch 8, 32, 64, 128 and 256: each candidate tile of the swap-AB kernel, compiled in
   worker processes first, then timed one after another as the per-launch time inside a CUDA graph of
   back-to-back launches over distinct weight copies (more bytes than the L2 holds, as in a real step),
   checked against the reference and for bit-identical results over five calls (a software-pipelined
   tile once raced). At batch 2 and 4: the GEMV against the best 16-row tile.
3. The whole step with the chosen tiles (`linear.TILES`, set for this process only), at batch 1 to 256:
   the fused step as a bare graph replay back to back, against its floor; graph == eager bit-exact with
   PDL on; the unfused step's graph replay and its kernels per layer.
4. The Hugging Face reference and the compile peer, once each at batch 1, so the CLI run that records
   them has been seen to work.
Prints tables and a `TILES = {...}` literal for gpu_probe/kernels/linear.py; writes kernel_sweep.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch

from core.step_plan import FUSED_GRAPH
from gpu_probe.config import get_config
from gpu_probe.kernels import linear

# The fused step replayed as a CUDA graph: its figures are keyed by the mode's slug, as the recorded sweeps have them.
FUSED_GRAPH_US = f"{FUSED_GRAPH.slug}_us"
START = time.monotonic()
SWEEP_ROWS = (8, 32, 64, 128, 256)


def say(*parts) -> None:
    print(f"[{time.monotonic() - START:6.1f} s]", *parts, flush=True)


def shapes(preset: str) -> dict:
    """name -> (n_out, k, kind) of the preset's fused GEMMs."""
    c = get_config(preset)
    h, q, kv, f = c.hidden, c.q_dim, c.kv_dim, c.ffn
    return {
        "qkv+norm": (q + 2 * kv, h, "norm"),
        "o+res": (h, q, "res"),
        "gate_up+swiglu": (f, h, "swiglu"),
        "down+res": (h, f, "res"),
        "lm_head+norm": (c.vocab, h, "norm"),
    }


def candidates(m: int, swiglu: bool) -> list[dict]:
    block_m = max(16, min(128, 1 << (m - 1).bit_length()))
    out = []
    if block_m <= 32:
        grid = [(bn, bk, 4, st) for bn in (16, 32, 64, 128) for bk in (128, 256) for st in (1, 3)]
    elif block_m == 64:
        grid = [(bn, bk, w, st) for bn in (32, 64, 128) for bk in (64, 128) for w in (4, 8) for st in (1, 3)]
    else:
        grid = [(bn, 64, w, st) for bn in (32, 64, 128) for w in (4, 8) for st in (1, 3)]
    for bn, bk, warps, stages in grid:
        if swiglu and bn * block_m > 64 * 128:
            continue  # two fp32 accumulators of that size do not fit in registers
        out.append(
            dict(kernel="dot", BLOCK_M=block_m, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages)
        )
    return out


def case(n: int, k: int, kind: str, m: int, copies: int | None = None):
    rows = 2 * n if kind == "swiglu" else n
    launches = copies or max(4, min(64, -(-384 * 2**20 // (rows * k * 2))))
    gen = torch.Generator(device="cuda").manual_seed(m + n)
    weights = [
        (torch.randn(rows, k, device="cuda", generator=gen) / k**0.5).to(torch.bfloat16)
        for _ in range(launches)
    ]
    x = (3 * torch.randn(m, k, device="cuda", generator=gen)).to(torch.bfloat16)
    kwargs = {
        "norm": dict(rms_eps=1e-5),
        "swiglu": dict(rms_eps=1e-5, swiglu=True),
        "res": dict(residual=torch.randn(m, n, device="cuda", generator=gen).to(torch.bfloat16)),
    }[kind]
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    return weights, x, kwargs, out


def _compile_worker(tasks) -> int:
    """Compile each (n, k, kind, m, config) by running it once on small real-shaped inputs (the disk cache
    keeps the binaries for the timing process)."""
    failures = 0
    for n, k, kind, m, cfg in tasks:
        try:
            weights, x, kwargs, out = case(n, k, kind, m, copies=1)
            linear.fused_linear(x, weights[0], config=cfg, out=out, pdl=True, **kwargs)
            torch.cuda.synchronize()
        except Exception:
            failures += 1
    return failures


def precompile(tasks: list, workers: int) -> None:
    chunks = [tasks[i::workers] for i in range(workers)]
    with mp.get_context("spawn").Pool(workers) as pool:
        failures = sum(pool.map(_compile_worker, chunks))
    say(f"compiled {len(tasks)} tile variants in {workers} workers ({failures} failed to compile or run)")


def capture(fn):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def replay_us(graph, launches: int, reps: int = 25) -> float:
    times = []
    for _ in range(reps + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / launches)
    return statistics.median(times[3:])


def time_tile(data, cfg: dict | None) -> dict:
    weights, x, kwargs, out = data
    ref = linear.fused_linear_reference(x, weights[0], **kwargs).float()
    first = linear.fused_linear(x, weights[0], config=cfg, out=out, pdl=True, **kwargs).clone()
    err = float((first.float() - ref).norm() / ref.norm())
    same = all(
        torch.equal(linear.fused_linear(x, weights[0], config=cfg, out=out, pdl=True, **kwargs), first)
        for _ in range(4)
    )
    graph = capture(
        lambda: [linear.fused_linear(x, w, config=cfg, out=out, pdl=True, **kwargs) for w in weights]
    )
    us = replay_us(graph, len(weights))
    return {"us": us, "rel_err": err, "deterministic": same, "GBps": weights[0].numel() * 2 / us / 1e3}


def sweep_tiles(presets, deadline: float, workers: int) -> tuple[list, dict]:
    tasks, plan = [], []
    for preset in presets:
        for name, (n, k, kind) in shapes(preset).items():
            for m in SWEEP_ROWS:
                for cfg in candidates(m, kind == "swiglu"):
                    tasks.append((n, k, kind, m, cfg))
                plan.append((preset, name, n, k, kind, m))
    precompile(tasks, workers)
    rows, tiles = [], {}
    for preset, name, n, k, kind, m in plan:
        if time.monotonic() - START > deadline:
            say(f"deadline: tile sweep stopped before {preset} {name} m={m}")
            break
        data = case(n, k, kind, m)
        default = dict(
            linear._tile_config(
                m, n, k, kind == "swiglu", torch.cuda.get_device_properties(0).multi_processor_count
            )
        )
        results = []
        for cfg in [None] + candidates(m, kind == "swiglu"):
            try:
                r = time_tile(data, cfg)
            except Exception as err:
                r = {"error": f"{type(err).__name__}: {str(err)[:80]}"}
            r["config"] = cfg or dict(default, default=True)
            results.append(r)
        good = [r for r in results if "us" in r and r["deterministic"] and r["rel_err"] < 1e-2]
        best = min(good, key=lambda r: r["us"]) if good else None
        base = results[0]
        rows.append(
            {
                "preset": preset,
                "shape": name,
                "m": m,
                "default": base,
                "best": best,
                "n_tried": len(results),
                "racy": sum(1 for r in results if "us" in r and not r["deterministic"]),
            }
        )
        if best is not None and "default" not in best["config"]:
            c = best["config"]
            tiles[(n, k, kind == "swiglu", c["BLOCK_M"])] = (
                c["BLOCK_N"],
                c["BLOCK_K"],
                c["num_warps"],
                c["num_stages"],
            )
        say(
            f"{preset:>5} {name:<15} m={m:<4} default {base.get('us', float('nan')):7.2f} us "
            f"({base.get('GBps', 0):5.0f} GB/s, det {base.get('deterministic')}) | best "
            + (f"{best['us']:7.2f} us ({best['GBps']:5.0f} GB/s) {best['config']}" if best else "none")
            + f" | racy tiles {rows[-1]['racy']}"
        )
        del data
    return rows, tiles


def step_sweep(presets, batches, deadline: float) -> list:
    from gpu_probe.model import ProbeModel
    from tools.probe_model_check import count_kernels, make_inputs

    out = []
    for preset in presets:
        cfg = get_config(preset)
        model = ProbeModel(cfg, device="cuda", num_blocks=1 + (max(batches) + 2) * cfg.max_blocks_per_seq)
        model.kv_cache.fill_random_(1)
        floor_bytes = model.weight_bytes
        every = make_inputs(model, max(batches))
        for batch in batches:
            if time.monotonic() - START > deadline:
                say(f"deadline: step sweep stopped before {preset} batch {batch}")
                return out
            inputs = every.head(batch)
            before = model.kv_cache.kv.clone()
            row = {"preset": preset, "batch": batch}
            try:
                model.fused = True
                eager = model(inputs).clone()
                held = {}

                def fused_step():
                    held["logits"] = model(inputs)

                model.kv_cache.kv.copy_(before)
                graph = capture(fused_step)
                model.kv_cache.kv.copy_(before)
                for _ in range(3):  # back to back, PDL on: each replay rewrites the same new slot
                    graph.replay()
                torch.cuda.synchronize()
                row[f"{FUSED_GRAPH.slug}_bit_exact"] = bool(torch.equal(held["logits"], eager))
                row[FUSED_GRAPH_US] = replay_us(graph, 1, reps=60)
                del graph
                model.fused = False
                graph = capture(lambda: model(inputs))
                row["unfused_graph_us"] = replay_us(graph, 1, reps=30)
                del graph
                if batch in (1, 64, 128, 256):
                    row["unfused_kernels"] = count_kernels(lambda: model(inputs))
                    row["unfused_names"] = kernel_names(lambda: model(inputs))[:40]
                    model.fused = True
                    row["fused_kernels"] = count_kernels(lambda: model(inputs))
                    row["fused_names"] = kernel_names(lambda: model(inputs))[:16]
                model.fused = True
                if 1 < batch <= linear.GEMV_MAX_ROWS:  # the tensor-core tile in the GEMV's place
                    saved, linear.GEMV_MAX_ROWS = linear.GEMV_MAX_ROWS, 1
                    linear._tile_config.cache_clear()
                    try:
                        graph = capture(lambda: model(inputs))
                        row[f"{FUSED_GRAPH_US}_tile_not_gemv"] = replay_us(graph, 1, reps=60)
                        del graph
                    finally:
                        linear.GEMV_MAX_ROWS = saved
                        linear._tile_config.cache_clear()
            except Exception as err:
                row["error"] = f"{type(err).__name__}: {str(err)[:200]}"
            kv = 2 * cfg.n_layers * cfg.kv_dim * cfg.prefill_len * batch * 2
            row["read_floor_us"] = (floor_bytes + kv) / (BW * 1e3)
            row["flop_floor_us"] = 2 * (floor_bytes / 2) * batch / (TFLOPS * 1e6)
            if FUSED_GRAPH_US in row:
                row["x_floor"] = row[FUSED_GRAPH_US] / max(row["read_floor_us"], row["flop_floor_us"])
            say(json.dumps(row))
            out.append(row)
        model = None
        torch.cuda.empty_cache()
    return out


def kernel_names(fn) -> list[str]:
    """The CUDA kernels one call of fn runs, in order, names cut to 60 characters."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return [e.name[:60] for e in sorted(kernels, key=lambda e: e.time_range.start)]


def reference_and_compile(preset: str) -> dict:
    from gpu_probe import hf_reference
    from gpu_probe.compile_peer import CompilePeer
    from gpu_probe.decode_batch import make_batch
    from gpu_probe.model import ProbeModel

    out = {"transformers": hf_reference.available()}
    cfg = get_config(preset)
    try:
        block = hf_reference.measure_reference(cfg, [1], steps=20, warmup=3, progress=say)
        out["reference"] = {k: v for k, v in block.items() if k != "runs"}
        out["reference_runs"] = [
            {
                k: r[k]
                for k in (
                    "mode",
                    "batch",
                    "step_us_median",
                    "gpu_busy_us",
                    "kernels_per_layer",
                    "launches",
                    "cpu_launch_us",
                )
            }
            for r in block.get("runs", [])
        ]
    except Exception:
        out["reference_error"] = traceback.format_exc()[-800:]
    say("reference:", json.dumps(out))
    try:
        model = ProbeModel(cfg, device="cuda", num_blocks=1 + 2 * cfg.max_blocks_per_seq)
        model.kv_cache.fill_random_(1)
        batch = make_batch(model, 1)
        peer = CompilePeer(model)
        out["compile_s"] = peer.warm(batch)
        out["compile_check"] = peer.check()["compile_cudagraphs"]["passed"]
        ref = model.unfused_forward(batch)
        got = peer(batch)
        out["compile_rel_err"] = float((got.float() - ref.float()).norm() / ref.float().norm())
    except Exception:
        out["compile_error"] = traceback.format_exc()[-800:]
    say("compile:", json.dumps({k: v for k, v in out.items() if "compile" in k}))
    return out


BW, TFLOPS = 4000.0, 700.0


def main(argv=None) -> int:
    global BW, TFLOPS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--presets", nargs="+", default=["1b", "small"])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128, 256])
    parser.add_argument("--deadline-s", type=float, default=480)
    parser.add_argument("--workers", type=int, default=14)
    parser.add_argument("--skip", nargs="*", default=[], choices=["tiles", "steps", "reference"])
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs CUDA", file=sys.stderr)
        return 2
    from gpu_probe import measure

    BW, TFLOPS = measure.hbm_copy_GBps(), measure.matmul_TFLOPs()
    say(
        f"device {torch.cuda.get_device_name()} torch {torch.__version__} copy {BW:,.0f} GB/s matmul {TFLOPS:,.0f} TFLOP/s"
    )
    record = {"device": torch.cuda.get_device_name(), "hbm_copy_GBps": BW, "matmul_TFLOPs": TFLOPS}

    def save():
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "kernel_sweep.json"), "w") as fh:
            json.dump(record, fh, indent=1, default=str)

    if "tiles" not in args.skip:
        rows, tiles = sweep_tiles(args.presets, args.deadline_s * 0.6, args.workers)
        record["tiles"], record["chosen"] = rows, {str(k): v for k, v in tiles.items()}
        save()
        linear.TILES.update(tiles)
        linear._tile_config.cache_clear()
        print("TILES = {")
        for key, value in sorted(tiles.items()):
            print(f"    {key}: {value},")
        print("}")
    if "reference" not in args.skip:
        record["reference"] = reference_and_compile(args.presets[0])
        save()
    if "steps" not in args.skip:
        record["steps"] = step_sweep(args.presets, args.batches, args.deadline_s)
        save()
    print("\n==== step summary (bare graph replay, µs) ====")
    for r in record.get("steps", []):
        print(
            f"{r['preset']:>5} b{r['batch']:<4} fused {r.get(FUSED_GRAPH_US, float('nan')):8.1f} "
            f"(x floor {r.get('x_floor', float('nan')):.2f}, bit-exact {r.get(FUSED_GRAPH.slug + '_bit_exact')}) "
            f"unfused {r.get('unfused_graph_us', float('nan')):9.1f}  kernels {r.get('unfused_kernels', '')}/{r.get('fused_kernels', '')} "
            f"{r.get('error', '')}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
