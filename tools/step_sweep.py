"""GPU sweep of the fused decode step's GEMV tiles, timed in the whole step rather than alone.

Usage (on a CUDA machine, from the repo root):
    python tools/step_sweep.py [--preset small] [--rounds 3] [--out DIR]

Every variant is the preset's whole fused step captured as one CUDA graph, so each tile is
timed in the company it keeps in a real step (tools/kernel_sweep.py times each shape alone):
1. GEMV tiles by coordinate descent at batch 1: for each projection in turn, rows per program x
   warps, the others held at the best so far; a candidate replaces the incumbent only when more
   than 1 % faster.
2. Default tiles vs the chosen ones at batches 1, 2 and 4, and the step with attention left out.
Candidates of one comparison are timed in interleaved rounds (median of 100 replays each, then
the median over rounds). Each graph replay must equal its own eager step bit for bit.
Prints what it tried; writes step_sweep.json (including the chosen tiles) to --out.
--inputs instead times fused+graph at batch 1 the way the probe does (GraphRunner.run), with the
per-step input copies made one per dtype or one per input, and the bare graph replay.

Commit 04f1b7f also swept an L2 weight prefetch and a split merge inside the attention kernel
(neither helped; kernels/NOTES.md, run 4).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
import triton

from gpu_probe.config import get_config
from gpu_probe.kernels import linear
from gpu_probe.model import ProbeModel
from tools.kernel_sweep import replay_us
from tools.probe_model_check import (
    capture_with_output,
    gpu_warm,
    hbm_copy_GBps,
    kernel_breakdown,
    make_inputs,
)


def shapes_of(cfg) -> dict:
    """(n_out, k, swiglu) of each projection of a preset."""
    qkv = cfg.q_size + 2 * cfg.kv_size
    return {
        "qkv": (qkv, cfg.hidden, False),
        "o": (cfg.hidden, cfg.q_size, False),
        "gate_up": (cfg.ffn, cfg.hidden, True),
        "down": (cfg.hidden, cfg.ffn, False),
        "lm_head": (cfg.vocab, cfg.hidden, False),
    }


SHAPES = shapes_of(get_config("small"))  # main() sets the --preset's
DEFAULT_TILE_CONFIG = linear._tile_config


def gemv_config(m: int, k: int, swiglu: bool, rows: int, warps: int) -> dict:
    block_m, block_k = triton.next_power_of_2(m), min(triton.next_power_of_2(k), 4096)
    while block_m * rows * block_k > 32768 and block_k > 64:
        block_k //= 2
    return {
        "kernel": "gemv",
        "BLOCK_M": block_m,
        "BLOCK_N": max(1, rows // (2 if swiglu else 1)),
        "BLOCK_K": block_k,
        "num_warps": warps,
    }


def default_tiles() -> dict:
    """(rows per program, warps) of every shape as _tile_config picks them at batch 1."""
    tiles = {}
    for name, (n, k, swiglu) in SHAPES.items():
        cfg = DEFAULT_TILE_CONFIG(1, n, k, swiglu, torch.cuda.get_device_properties(0).multi_processor_count)
        tiles[name] = (cfg["BLOCK_N"] * (2 if swiglu else 1), cfg["num_warps"])
    return tiles


def apply(model: ProbeModel, v: dict) -> None:
    """Set the kernel module up as variant v says (tiles through a _tile_config override)."""
    by_shape = {shape: name for name, shape in SHAPES.items()}
    tiles = v.get("tiles") or {}

    def config(m, n, k, swiglu, num_sms):
        name = by_shape.get((n, k, swiglu))
        if m <= linear.GEMV_MAX_ROWS and name in tiles:
            return gemv_config(m, k, swiglu, *tiles[name])
        return DEFAULT_TILE_CONFIG(m, n, k, swiglu, num_sms)

    linear._tile_config = config


class Bench:
    def __init__(self, model: ProbeModel, rounds: int, floor_us: float):
        self.model, self.rounds, self.floor_us = model, rounds, floor_us
        self.inputs = {b: make_inputs(model, b) for b in (1, 2, 4)}
        self.lines: list[str] = []
        self.records: list[dict] = []

    def say(self, line: str) -> None:
        self.lines.append(line)
        print(line, flush=True)

    def compare(self, batch: int, variants: list[dict], tag: str) -> list[float | None]:
        """Median step time of each variant (None where it failed or replays differ from eager)."""
        inputs = self.inputs[batch]
        step = lambda: self.model.fused_forward(inputs)  # noqa: E731
        graphs = []
        for v in variants:
            apply(self.model, v)
            try:
                eager = step().clone()
                graph, out = capture_with_output(step)
                graph.replay()
                torch.cuda.synchronize()
                exact = torch.equal(out, eager)
            except Exception as exc:  # a variant that does not compile or run is reported, not fatal
                self.say(f"  B={batch} {tag} {describe(v)}: FAILED {type(exc).__name__}: {str(exc)[:300]}")
                graphs.append(None)
                continue
            graphs.append((graph, exact))
        apply(self.model, {})
        times: list[list[float]] = [[] for _ in variants]
        gpu_warm(50)
        for _ in range(self.rounds):
            for i, entry in enumerate(graphs):
                if entry is not None:
                    times[i].append(replay_us(entry[0], 1, reps=100))
        result = []
        for v, entry, ts in zip(variants, graphs, times):
            if entry is None:
                result.append(None)
                continue
            us, exact = statistics.median(ts), entry[1]
            ratio = f" {us / self.floor_us:4.2f}x floor" if batch == 1 else ""
            self.say(
                f"  B={batch} {tag} {describe(v)}: {us:7.1f} us{ratio} rounds {[round(t) for t in ts]}"
                f"{'' if exact else '  GRAPH != EAGER'}"
            )
            self.records.append(
                dict(
                    batch=batch,
                    tag=tag,
                    variant=describe(v),
                    step_us=us,
                    rounds_us=ts,
                    graph_equals_eager=exact,
                )
            )
            result.append(us if exact else None)
        return result


def describe(v: dict) -> str:
    tiles = " ".join(f"{k}={r}r{w}w" for k, (r, w) in sorted((v.get("tiles") or {}).items()))
    return f"tiles [{tiles or 'default'}]"


def best_of(times: list[float | None], incumbent: int = 0) -> int:
    """Index of the fastest, unless it beats the incumbent by 1 % or less (noise): then the incumbent."""
    ok = [(t, i) for i, t in enumerate(times) if t is not None]
    if not ok:
        return incumbent
    t, i = min(ok)
    base = times[incumbent]
    return i if base is None or t < 0.99 * base else incumbent


def input_load_ab(model: ProbeModel, bench: Bench) -> None:
    """fused+graph at batch 1 as the probe times it (GraphRunner.run, CUDA events, idle GPU at each
    start): the inputs copied with one launch per dtype (the runner's way) or one per input, and
    the graph replay alone with the inputs already in place."""
    from gpu_probe.decode_batch import INPUT_NAMES, make_batch
    from gpu_probe.graph_runner import GraphRunner
    from gpu_probe.measure import time_steps

    model.fused = True
    runner = GraphRunner(model, buckets=(1, 2, 4))
    batch = make_batch(model, 1)
    grouped_load = runner.load

    def per_input_load(b, bucket):
        for name in INPUT_NAMES:
            getattr(runner.static, name)[: b.size].copy_(getattr(b, name), non_blocking=True)

    def run_with(load):
        def step():
            runner.load = load
            return runner.run(batch)

        return step

    runner.run(batch)
    cases = {
        "one copy per dtype (2)": run_with(grouped_load),
        "one copy per input (5)": run_with(per_input_load),
        "graph replay alone": runner.graphs[1].replay,
    }
    times: dict[str, list] = {name: [] for name in cases}
    gpu_warm(50)
    for _ in range(bench.rounds):
        for name, step in cases.items():
            times[name].append(time_steps(step, steps=200, warmup=20))
    runner.load = grouped_load
    for name, ts in times.items():
        med = statistics.median(t["step_us_median"] for t in ts)
        enq = statistics.median(t["enqueue_us_median"] for t in ts)
        bench.say(
            f"  B=1 fused+graph, {name}: step {med:6.1f} us ({med / bench.floor_us:4.2f}x floor), "
            f"host enqueue {enq:5.1f} us, rounds {[round(t['step_us_median']) for t in ts]}"
        )
    model.fused = False


def tune_tiles(bench) -> dict:
    """Each GEMV's tile (rows per program, warps) at batch 1, by coordinate descent from the defaults."""
    tiles = default_tiles()
    bench.say(f"1. tiles by coordinate descent, from {tiles}")
    for name in ("gate_up", "down", "qkv", "o", "lm_head"):
        rows_options = (2, 4, 8, 16) if SHAPES[name][2] else (1, 2, 4, 8, 16)
        if name == "lm_head":
            rows_options = (4, 8, 16, 32)
        candidates = [tiles[name]] + [
            (r, w) for r in rows_options for w in (1, 2, 4) if (r, w) != tiles[name]
        ]
        variants = [dict(tiles={**tiles, name: c}) for c in candidates]
        pick = best_of(bench.compare(1, variants, f"tiles:{name}"))
        tiles[name] = candidates[pick]
        bench.say(f"  -> {name}: {tiles[name][0]} rows/program, {tiles[name][1]} warps")
    return tiles


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument(
        "--inputs", action="store_true", help="only the per-step input copies, as the probe times"
    )
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs CUDA", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    global SHAPES
    cfg = get_config(args.preset)
    SHAPES = shapes_of(cfg)
    model = ProbeModel(cfg, device="cuda", num_blocks=1 + 12 * cfg.max_blocks_per_seq)
    model.kv_cache.fill_random_(1)
    bandwidth = hbm_copy_GBps()
    floor_us = model.weight_bytes / bandwidth / 1e3
    bench = Bench(model, args.rounds, floor_us)
    bench.say(
        f"device {torch.cuda.get_device_name()} torch {torch.__version__}; HBM copy {bandwidth:.0f} GB/s; "
        f"weights {model.weight_bytes / 1e9:.3f} GB; floor {floor_us:.1f} us"
    )

    if args.inputs:
        input_load_ab(model, bench)
        return 0
    tiles = tune_tiles(bench)
    chosen = dict(tiles=tiles)
    bench.say("2. default tiles vs chosen at batches 1, 2, 4; the step with attention left out")
    for batch in (1, 2, 4):
        bench.compare(batch, [dict(), chosen], "b")
    import gpu_probe.kernels as kernels  # ablation: the step's GEMVs alone, attention skipped

    attention = kernels.paged_decode_attention
    kernels.paged_decode_attention = lambda qkv, *a, **kw: qkv[:, : model.cfg.q_size]
    try:
        bench.compare(1, [dict(), chosen], "attention skipped")
    finally:
        kernels.paged_decode_attention = attention
    graph, _ = capture_with_output(lambda: model.fused_forward(bench.inputs[1]))
    kernel_breakdown(graph.replay, "B=1 default tiles", bench.lines)
    print("\n==== step sweep summary ====")
    print("\n".join(bench.lines))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "step_sweep.json"), "w") as fh:
        json.dump(
            {
                "lines": bench.lines,
                "records": bench.records,
                "tiles": tiles,
                "hbm_copy_GBps": bandwidth,
                "floor_us": floor_us,
            },
            fh,
            indent=1,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
