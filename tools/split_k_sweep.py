"""GPU sweep of split K for the fused GEMM's tensor-core tile, per shape and in the whole step.

Usage (on a CUDA machine, from the repo root; one call of the device tool):
    python tools/split_k_sweep.py --out $OUT [--presets 1b small] [--deadline-s 300] [--steps-only]

1. Every fused GEMM shape with fewer output tiles than SMs (QKV+norm, O+residual, gate/up+SwiGLU,
   down+residual of each preset) at 8, 32 and 64 rows: the shape's tile (`linear.TILES`) at each
   number of K splits, timed per launch inside a CUDA graph of back-to-back launches over distinct
   weight copies (tools/kernel_sweep.py's harness), checked against the reference and for the same
   bits over five calls. Prints the rule's choice (`linear.split_k`) beside the fastest.
2. The whole fused step as one graph, replayed back to back, with the rule's splits against none, at
   batch 1 to 64, and graph == eager bit for bit with the splits.
Writes split_k_sweep.json and prints a `SPLITS = {...}` literal of the shapes where the fastest split
beat the rule's by more than 3 %.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
import triton

from gpu_probe.config import get_config
from gpu_probe.kernels import linear
from tools.kernel_sweep import capture, case, precompile, replay_us, say, shapes, time_tile

ROWS = (8, 32, 64)
SPLIT_CHOICES = (1, 2, 3, 4, 6, 8)


def split_candidates(m: int, n: int, k: int, swiglu: bool, sms: int) -> tuple[dict, list[dict]]:
    """The shape's own tile (the rule's splits) and the same tile at every valid number of splits."""
    rule = dict(linear._tile_config(m, n, k, swiglu, sms))
    k_tiles = triton.cdiv(k, rule["BLOCK_K"])
    valid = {s for s in SPLIT_CHOICES if s <= k_tiles and triton.cdiv(k_tiles, triton.cdiv(k_tiles, s)) == s}
    return rule, [dict(rule, SPLIT_K=s) for s in sorted(valid | {rule["SPLIT_K"]})]


def sweep_shapes(presets, sms: int, deadline: float, workers: int) -> tuple[list, dict]:
    plan, tasks = [], []
    for preset in presets:
        for name, (n, k, kind) in shapes(preset).items():
            if name.startswith("lm_head"):
                continue  # thousands of tiles: never split
            for m in ROWS:
                rule, cands = split_candidates(m, n, k, kind == "swiglu", sms)
                plan.append((preset, name, n, k, kind, m, rule, cands))
                tasks += [(n, k, kind, m, c) for c in cands]
    precompile(tasks, workers)
    rows, better = [], {}
    for preset, name, n, k, kind, m, rule, cands in plan:
        if time.monotonic() > deadline:
            say(f"deadline: split sweep stopped before {preset} {name} m={m}")
            break
        data = case(n, k, kind, m)
        results = []
        for cfg in cands:
            try:
                r = time_tile(data, cfg)
            except Exception as err:
                r = {"error": f"{type(err).__name__}: {str(err)[:120]}"}
            results.append({"splits": cfg["SPLIT_K"], **r})
        good = [r for r in results if "us" in r and r["deterministic"] and r["rel_err"] < 1e-2]
        by_split = {r["splits"]: r for r in good}
        best = min(good, key=lambda r: r["us"]) if good else None
        chosen = by_split.get(rule["SPLIT_K"])
        rows.append({"preset": preset, "shape": name, "m": m, "rule": rule, "results": results})
        if best and chosen and best["us"] < 0.97 * chosen["us"]:
            better[(n, k, kind == "swiglu", rule["BLOCK_M"])] = best["splits"]
        say(
            f"{preset:>5} {name:<15} m={m:<3} "
            + " ".join(
                f"S{r['splits']}={r['us']:.2f}us/{r['GBps']:.0f}GB/s{'' if r['deterministic'] else '(racy)'}"
                if "us" in r
                else f"S{r['splits']}={r['error']}"
                for r in results
            )
            + f" | rule S{rule['SPLIT_K']}"
            + (f", best S{best['splits']}" if best else "")
        )
        del data
    return rows, better


def step_compare(presets, batches, deadline: float) -> list:
    from gpu_probe.model import ProbeModel
    from tools.probe_model_check import make_inputs

    out = []
    for preset in presets:
        cfg = get_config(preset)
        model = ProbeModel(cfg, device="cuda", num_blocks=1 + (max(batches) + 2) * cfg.max_blocks_per_seq)
        model.kv_cache.fill_random_(1)
        model.fused = True
        every = make_inputs(model, max(batches))
        for batch in batches:
            if time.monotonic() > deadline:
                say(f"deadline: step comparison stopped before {preset} batch {batch}")
                return out
            inputs = every.head(batch)
            before = model.kv_cache.kv.clone()
            row = {"preset": preset, "batch": batch}
            saved, table = linear.SPLIT_K_MAX, dict(linear.SPLITS)
            try:
                # No split: the rule capped at one and the measured table emptied (it overrides the rule).
                for label, most, splits in (("no_split", 1, {}), ("split", saved, table)):
                    linear.SPLIT_K_MAX = most
                    linear.SPLITS.clear()
                    linear.SPLITS.update(splits)
                    linear._tile_config.cache_clear()
                    model.kv_cache.kv.copy_(before)
                    eager = model(inputs).clone()
                    held = {}

                    def step():
                        held["logits"] = model(inputs)

                    model.kv_cache.kv.copy_(before)
                    graph = capture(step)
                    model.kv_cache.kv.copy_(before)
                    for _ in range(3):
                        graph.replay()
                    torch.cuda.synchronize()
                    row[f"{label}_bit_exact"] = bool(torch.equal(held["logits"], eager))
                    row[f"{label}_us"] = replay_us(graph, 1, reps=60)
                    del graph
            except Exception as err:
                row["error"] = f"{type(err).__name__}: {str(err)[:200]}"
            finally:
                linear.SPLIT_K_MAX = saved
                linear.SPLITS.clear()
                linear.SPLITS.update(table)
                linear._tile_config.cache_clear()
            say(json.dumps(row))
            out.append(row)
        model = None
        torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--presets", nargs="+", default=["1b", "small"])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--deadline-s", type=float, default=300)
    parser.add_argument("--workers", type=int, default=14)
    parser.add_argument(
        "--steps-only", action="store_true", help="only the whole step, with and without splits"
    )
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs CUDA", file=sys.stderr)
        return 2
    start = time.monotonic()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    record = {"device": torch.cuda.get_device_name(), "sms": sms}
    rows, better = [], {}
    if not args.steps_only:
        rows, better = sweep_shapes(args.presets, sms, start + args.deadline_s * 0.6, args.workers)
    record["shapes"], record["better"] = rows, {str(k): v for k, v in better.items()}
    record["steps"] = step_compare(args.presets, args.batches, start + args.deadline_s)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "split_k_sweep.json"), "w") as fh:
        json.dump(record, fh, indent=1, default=str)
    print("SPLITS = {")
    for key, value in sorted(better.items()):
        print(f"    {key}: {value},")
    print("}")
    print("\n==== whole fused step, graph replay back to back (µs) ====")
    for r in record["steps"]:
        print(
            f"{r['preset']:>5} b{r['batch']:<3} no split {r.get('no_split_us', float('nan')):8.1f}  "
            f"split {r.get('split_us', float('nan')):8.1f}  bit-exact {r.get('split_bit_exact')} {r.get('error', '')}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
