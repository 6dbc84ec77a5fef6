"""GPU check of the probe model (helper M's tool): step times, kernels per layer, tile sweep.

Usage (on a CUDA machine, from the repo root):
    python tools/probe_model_check.py [--batches 1 64] [--sweep] [--compile] [--out DIR]

Prints: HBM copy bandwidth and the weight-read floor; per (variant, batch) the median step
time eager and as a captured CUDA graph; kernels per layer from torch.profiler (difference
between a 32- and a 2-layer model, so embedding/LM head/sampling do not count); optionally
a tile sweep of the fused GEMM and attention kernels against cuBLAS, and the
torch.compile(mode="reduce-overhead") peer. A short table comes last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

from gpu_probe.config import get_config
from gpu_probe.decode_batch import DecodeBatch
from gpu_probe.model import ProbeModel


def cuda_time_us(fn, iters: int, warmup: int = 3) -> float:
    """Median of per-call CUDA-event times."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    return statistics.median(times)


def hbm_copy_GBps() -> float:
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = cuda_time_us(lambda: dst.copy_(src), 20)
    return 2 * src.numel() / us / 1e3


def make_inputs(model: ProbeModel, batch: int) -> DecodeBatch:
    cache = model.kv_cache
    seqs = [cache.add_sequence(model.cfg.prefill_len) for _ in range(batch)]
    gen = torch.Generator(device="cuda").manual_seed(batch)
    ids = torch.randint(0, model.cfg.vocab, (batch,), generator=gen, device="cuda")
    return DecodeBatch(ids, **cache.decode_inputs(seqs))


def capture_with_output(fn):
    """Warm fn up on a side stream, capture it; returns the graph and what the captured call returned."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def capture(fn):
    return capture_with_output(fn)[0]


def count_kernels(fn) -> int:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(
        1
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA
        and "memcpy" not in e.name.lower()
        and "memset" not in e.name.lower()
    )


SWEEP_CONFIGS = {  # (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages), by batch
    1: [
        (16, 16, 128, 4, 4),
        (16, 32, 128, 4, 4),
        (16, 32, 256, 4, 3),
        (16, 64, 128, 4, 4),
        (16, 128, 128, 4, 4),
    ],
    64: [
        (64, 64, 64, 4, 4),
        (64, 128, 64, 4, 3),
        (32, 64, 128, 4, 4),
        (32, 32, 128, 4, 4),
        (16, 32, 128, 4, 4),
    ],
}


def gpu_warm(ms: float = 200.0) -> None:
    """Keep the GPU busy for a while so clocks are up before timing (compiles leave it idle)."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    start = time.perf_counter()
    while (time.perf_counter() - start) * 1000 < ms:
        a @ a
        torch.cuda.synchronize()


def sweep_linear(rows: list) -> None:
    import triton.testing

    from gpu_probe.kernels.linear import _tile_config, fused_linear

    bf16 = torch.bfloat16
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = {
        "qkv+norm": (3072, 1024, "norm"),
        "gate_up+swiglu": (2816, 1024, "swiglu"),
        "o+res": (1024, 1024, "res"),
        "down+res": (1024, 2816, "res"),
        "lm_head+norm": (32000, 1024, "norm"),
    }
    cases = []
    for m, configs in SWEEP_CONFIGS.items():
        for name, (n, k, kind) in shapes.items():
            w = torch.randn(2 * n if kind == "swiglu" else n, k, device="cuda").to(bf16)
            x = torch.randn(m, k, device="cuda").to(bf16)
            kwargs = {
                "norm": dict(rms_eps=1e-5),
                "swiglu": dict(rms_eps=1e-5, swiglu=True),
                "res": dict(residual=torch.randn(m, n, device="cuda").to(bf16)),
            }[kind]
            cfgs = [
                dict(kernel="dot", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=wp, num_stages=st)
                for bm, bn, bk, wp, st in configs
            ]
            ok = []
            for cfg in cfgs + [None]:  # compile everything first, time afterwards with warm clocks
                try:
                    fused_linear(x, w, config=cfg, **kwargs)
                    ok.append(cfg)
                except Exception as exc:
                    print(f"  skip {cfg}: {type(exc).__name__}", flush=True)
            cases.append((m, name, n, k, kind, w, x, kwargs, ok))
    torch.cuda.synchronize()
    gpu_warm()
    for m, name, n, k, kind, w, x, kwargs, ok in cases:
        bench = lambda fn: triton.testing.do_bench(fn, warmup=10, rep=30, return_mode="median") * 1000  # noqa: E731
        cublas = bench(lambda: x @ w.t())
        default = _tile_config(m, n, k, kind == "swiglu", sms)
        default_us = bench(lambda: fused_linear(x, w, **kwargs))
        results = sorted(
            (bench(lambda: fused_linear(x, w, config=cfg, **kwargs)), tuple(cfg.values()))
            for cfg in ok
            if cfg is not None
        )
        gbps = w.numel() * 2 / default_us / 1e3
        rows.append(
            f"linear M={m:<3} {name:<15} cuBLAS {cublas:5.1f} | default {default_us:5.1f} us "
            f"({gbps:5.0f} GB/s) {tuple(default.values())} | "
            + " ".join(f"{u:.1f}{c}" for u, c in results[:3])
        )
        print(rows[-1], flush=True)


def kernel_breakdown(replay, label: str, rows: list) -> None:
    """GPU time per kernel name within one graph replay (profiler), and busy vs wall time."""
    from torch.profiler import ProfilerActivity, profile

    replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        replay()
        torch.cuda.synchronize()
    stats = []
    for row in prof.key_averages():
        total = getattr(row, "self_device_time_total", None) or getattr(row, "self_cuda_time_total", 0)
        if total > 0:
            stats.append((total, row.count, row.key[:60]))
    stats.sort(reverse=True)
    busy = sum(t for t, _, _ in stats)
    rows.append(
        f"{label}: kernels busy {busy:.0f} us; "
        + "; ".join(f"{name} x{count} {t / count:.1f}us" for t, count, name in stats[:7])
    )
    print(rows[-1], flush=True)


def sweep_attention(rows: list, model: ProbeModel) -> None:
    import triton.testing

    from gpu_probe.kernels.attention import paged_decode_attention

    cfg = model.cfg
    for batch in (1, 64):
        inputs = make_inputs(model, batch)
        qkv = torch.randn(batch, cfg.q_size + 2 * cfg.kv_size, device="cuda").to(torch.bfloat16)
        k_cache, v_cache = model.kv_cache.layer(0)
        args = (
            qkv,
            inputs.positions,
            inputs.block_tables,
            inputs.slot_mapping,
            inputs.context_lens,
            k_cache,
            v_cache,
            model.rope_cos,
            model.rope_sin,
            cfg.n_heads,
            cfg.n_kv_heads,
        )
        out = []
        variants = [(s, n) for s in ((4, 8, 16, 32) if batch == 1 else (1, 2, 4)) for n in (16, 32, 64)]
        for splits, block_n in variants:
            paged_decode_attention(*args, splits, block_n)  # compile first
        gpu_warm()
        for splits, block_n in variants:
            us = (
                triton.testing.do_bench(
                    lambda: paged_decode_attention(*args, splits, block_n),
                    warmup=10,
                    rep=30,
                    return_mode="median",
                )
                * 1000
            )
            out.append((us, splits, block_n))
        kv_bytes = 2 * batch * cfg.prefill_len * cfg.kv_size * 2
        out.sort()
        chosen = model.attention_splits(batch)
        rows.append(
            f"attention B={batch:<3} default splits={chosen} (KV {kv_bytes / 1e6:.0f} MB): "
            f"{[f'{u:.1f}us s={s} n={n}' for u, s, n in out[:5]]}"
        )
        print(rows[-1], flush=True)


def measure_paths(model, two_layer, batch: int, floor_us: float, table, breakdown, record) -> None:
    """The unfused and the fused step at `batch`: eager and replayed times, host enqueue time, kernels a
    step and a layer (the 32-layer model against the 2-layer one)."""
    inputs = make_inputs(model, batch)
    small_inputs = make_inputs(two_layer, batch)
    for fused in (False, True):
        forward = model.fused_forward if fused else model.unfused_forward
        step = lambda: forward(inputs)  # noqa: E731
        eager_us = cuda_time_us(step, 20)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            step()
        enqueue_us = (time.perf_counter() - t0) / 10 * 1e6
        torch.cuda.synchronize()
        graph = capture(step)
        graph_us = cuda_time_us(graph.replay, 200)
        kernel_breakdown(graph.replay, f"{'fused' if fused else 'unfused'} graph B={batch}", breakdown)
        k32 = count_kernels(step)
        k2 = count_kernels(
            lambda: (two_layer.fused_forward if fused else two_layer.unfused_forward)(small_inputs)
        )
        per_layer = (k32 - k2) / 30
        name = "fused" if fused else "unfused"
        row = dict(
            variant=name,
            batch=batch,
            eager_us=eager_us,
            enqueue_us=enqueue_us,
            graph_us=graph_us,
            kernels_per_step=k32,
            kernels_per_layer=per_layer,
        )
        record["steps"].append(row)
        table.append(
            f"{name:<8} B={batch:<4} eager {eager_us:8.1f} us (enqueue {enqueue_us:8.1f}) "
            f"graph {graph_us:7.1f} us = {graph_us / floor_us:4.2f}x floor | "
            f"kernels/step {k32:5d} per layer {per_layer:5.1f}"
        )
        print(table[-1], flush=True)
        del graph


def measure_compile(model, floor_us: float, table, record) -> None:
    """torch.compile(mode="reduce-overhead") of the unfused step at batch 1: step time, compile time, skips."""
    from torch._dynamo.utils import counters

    model.fused = False
    inputs = make_inputs(model, 1)
    compiled = torch.compile(model.unfused_forward, mode="reduce-overhead", fullgraph=True)
    t0 = time.perf_counter()
    for _ in range(3):
        compiled(inputs)
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    us = cuda_time_us(lambda: compiled(inputs), 100)
    skips = dict(counters["inductor"]).get("cudagraph_skips", 0)
    table.append(
        f"compile  B=1    reduce-overhead {us:7.1f} us = {us / floor_us:4.2f}x floor, "
        f"compile {compile_s:.1f} s, cudagraph skips {skips}"
    )
    record["compile"] = dict(step_us=us, compile_s=compile_s, cudagraph_skips=skips)
    print(table[-1], flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs CUDA", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    bandwidth = hbm_copy_GBps()
    cfg = get_config("small")
    max_b = max(args.batches)
    model = ProbeModel(cfg, device="cuda", num_blocks=1 + max(max_b, 64) * cfg.max_blocks_per_seq * 2)
    model.kv_cache.fill_random_(1)
    floor_us = model.weight_bytes / bandwidth / 1e3
    print(
        f"device {torch.cuda.get_device_name()} torch {torch.__version__} HBM copy {bandwidth:.0f} GB/s; "
        f"weights {model.weight_bytes / 1e9:.3f} GB -> floor {floor_us:.0f} us",
        flush=True,
    )

    table, breakdown, record = [], [], {"hbm_copy_GBps": bandwidth, "weight_floor_us": floor_us, "steps": []}
    two_layer = ProbeModel(
        get_config("small", n_layers=2), device="cuda", num_blocks=1 + 2 * max_b * cfg.max_blocks_per_seq
    )
    two_layer.kv_cache.fill_random_(2)
    for batch in args.batches:
        measure_paths(model, two_layer, batch, floor_us, table, breakdown, record)
    if args.sweep:
        sweep_linear(table)
        sweep_attention(table, model)
    if args.compile:
        measure_compile(model, floor_us, table, record)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "probe_model_check.json"), "w") as fh:
        json.dump(record, fh, indent=1)
    print("\n==== summary (H200 check of gpu_probe model) ====")
    print(f"HBM {bandwidth:.0f} GB/s, weight floor {floor_us:.0f} us")
    for line in breakdown:
        print(line)
    for line in table:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
