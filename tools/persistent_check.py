"""On a GPU: the persistent decode-step kernel (gpu_probe/kernels/persistent.py, persistent_kernel.py) checked,
then timed against the fused+graph step in the same run.

    python tools/persistent_check.py --out DIR [--budget-s 270] [--presets 1b small] [--variants NAME ...]
                                     [--no-variants] [--no-checks]

Per preset: (1) compile every kernel the run needs in parallel worker processes (into Triton's disk cache);
(2) checks -- logits vs the fused path at batch 1..8 (the probe's bf16 tolerance), KV written where the fused
path writes it, graph replay == eager per bucket 1/2/4/8 with the KV canary (gpu_probe.measure), 25 calls per
bucket bit-identical, 1,000 graph replays with no error flag; (3) timing at batch 1, 2, 4, 8 of fused+graph and
persistent (both replayed as graphs), interleaved rounds: back to back (bare graph replays enqueued with no
sync, median per step), and as the probe times it (GraphRunner.run: input copies + replay, an idle GPU at each
step's start); the read floor = (weights + KV at the preset's context) / measured device-to-device copy
bandwidth; (4) the in-kernel phase stamps at batch 1 (persistent_trace.read_trace); (5) layout variants at
batch 1 (1b also batch 8), each timed back to back against the default in interleaved rounds.

Writes DIR/persistent_check.json after every part (a run cut short keeps what it measured) and
DIR/persistent_trace_<preset>_b1.json; prints a short table last. Stops starting new parts near the budget.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from core.step_plan import FUSED_GRAPH, PERSISTENT

BATCHES = (1, 2, 4, 8)
VARIANTS = {  # name -> PersistentConfig overrides; timed at batch 1 (and batch 8 where listed in AT_B8)
    "prefetch 0": {"prefetch_bytes": 0},
    "prefetch 32 KB": {"prefetch_bytes": 32768},
    "prefetch 128 KB": {"prefetch_bytes": 131072},
    "warps 4": {"num_warps": 4},
    "tile 32k": {"tile_elements": 32768},
    "tile 8k": {"tile_elements": 8192},
    "rows 16": {"rows_per_block": 16},
    "splits 2": {"max_splits": 2},
    "splits 8": {"max_splits": 8},
    "attention 128 tok": {"attention_tokens": 128},
    "2/SM x 4 warps": {"programs_per_sm": 2, "num_warps": 4},
}
AT_B8 = ("prefetch 0", "prefetch 128 KB", "tile 32k")
DEFAULT_VARIANTS = (
    "prefetch 0",
    "prefetch 32 KB",
    "prefetch 128 KB",
    "tile 8k",
    "tile 32k",
    "splits 2",
    "attention 128 tok",
    "2/SM x 4 warps",
    "warps 4",
)


def poison_written_slots(model, inputs) -> None:
    """Set the slots a step writes to a value no step computes, so every write shows as a change."""
    kv = model.kv_cache.kv
    flat = kv.view(kv.shape[0], 2, kv.shape[2] * kv.shape[3], *kv.shape[4:])
    slots = inputs.slot_mapping
    flat[:, :, slots[slots >= 0]] = 100.0


class Run:
    """The result dict, saved after every part; prints as it goes; knows the time left."""

    def __init__(self, out: Path, budget_s: float):
        self.out, self.t0, self.budget = out, time.perf_counter(), budget_s
        self.data = {"device": None, "parts": {}, "errors": [], "runs": [], "checks": {}, "variants": []}
        out.mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.t0)

    def say(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.t0:6.1f}s] {msg}", flush=True)

    def save(self) -> None:
        (self.out / "persistent_check.json").write_text(json.dumps(self.data, indent=1, default=str))

    def part(self, name: str, fn, *args, need_s: float = 0.0):
        """Run one part: timed, errors recorded (not raised), skipped when the budget is nearly spent."""
        if self.left() < need_s:
            self.say(f"SKIP {name}: {self.left():.0f} s left, needs ~{need_s:.0f}")
            self.data["parts"][name] = {"skipped": True}
            self.save()
            return None
        t = time.perf_counter()
        self.say(f"--- {name}")
        try:
            result = fn(*args)
            ok = True
        except Exception as err:
            result, ok = None, False
            self.data["errors"].append(f"{name}: {type(err).__name__}: {str(err)[:600]}")
            self.say(f"FAILED {name}: {type(err).__name__}: {str(err)[:600]}")
            traceback.print_exc(limit=4)
        self.data["parts"][name] = {"ok": ok, "seconds": round(time.perf_counter() - t, 1)}
        self.save()
        return result


# ---- compile in parallel -------------------------------------------------------------------------------------
def _compile_job(job: tuple) -> tuple:
    preset, overrides, batch, num_blocks, programs, trace = job
    t = time.perf_counter()
    try:
        from gpu_probe.config import get_config
        from gpu_probe.kernels.persistent import PersistentConfig, precompile

        precompile(get_config(preset), PersistentConfig(**overrides), batch, num_blocks, programs, trace)
        return job, round(time.perf_counter() - t, 1), None
    except Exception as err:
        return job, round(time.perf_counter() - t, 1), f"{type(err).__name__}: {str(err)[:400]}"


def compile_all(run: Run, jobs: list[tuple]) -> None:
    workers = max(1, min(len(jobs), (os.cpu_count() or 2) - 2, 14))
    run.say(f"compiling {len(jobs)} kernels in {workers} processes")
    done = []
    with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        for job, seconds, err in pool.map(_compile_job, jobs):
            done.append({"job": list(job[:3]) + [job[5]], "seconds": seconds, "error": err})
            if err:
                run.say(f"  compile FAILED {job[0]} {job[1]} b{job[2]}: {err}")
    run.data["compiles"] = done
    run.say(
        f"compiled: {sum(not d['error'] for d in done)}/{len(done)}, slowest {max(d['seconds'] for d in done)} s"
    )


# ---- timing helpers --------------------------------------------------------------------------------------------
def replays_us(graph, n: int = 200) -> float:
    """Per-step µs of n replays enqueued back to back (no sync between them)."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / n


def warm_gpu(graph, seconds: float = 0.5) -> None:
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        replays_us(graph, 50)


# ---- per preset ------------------------------------------------------------------------------------------------
class Preset:
    def __init__(self, run: Run, name: str, base, bandwidth: float):
        from gpu_probe.config import get_config
        from gpu_probe.decode_batch import make_batch
        from gpu_probe.kernels.persistent import PersistentDecoder
        from gpu_probe.model import ProbeModel

        self.run, self.name, self.base, self.bw = run, name, base, bandwidth
        self.cfg = cfg = get_config(name)
        self.num_blocks = 1 + 8 * cfg.max_blocks_per_seq
        self.model = ProbeModel(cfg, device="cuda", num_blocks=self.num_blocks, fused=True)
        self.model.kv_cache.fill_random_(seed=cfg.seed + 1)
        self.batch = make_batch(self.model, 8, seed=cfg.seed + 2)
        self.decoder = PersistentDecoder(self.model, base)
        self.fused_runner = self.persistent_runner = None
        self.out = run.data.setdefault("presets", {}).setdefault(name, {})
        self.out["weight_bytes"] = self.model.weight_bytes
        self.out["kv_bytes_per_row"] = self.kv_bytes(1)

    def kv_bytes(self, batch: int) -> int:
        cfg = self.cfg
        return cfg.n_layers * 2 * batch * cfg.prefill_len * cfg.kv_dim * cfg.bytes_per_el

    def floor_us(self, batch: int) -> float:
        return (self.model.weight_bytes + self.kv_bytes(batch)) / (self.bw * 1e3)

    def first_calls(self) -> None:
        """One eager step per bucket: compiles (or loads) each kernel and checks its grid fits."""
        for b in BATCHES:
            t = time.perf_counter()
            self.decoder(self.batch.head(b))
            torch.cuda.synchronize()
            self.run.say(f"  {self.name} b{b}: first call {time.perf_counter() - t:.1f} s")
        self.decoder.check_error()
        self.out["compiled"] = {k[0][:200] + f" trace={k[1]}": v for k, v in self.decoder.compiled.items()}
        self.out["cooperative"] = self.decoder.cooperative_note
        self.out["programs"] = self.decoder.programs
        for key, info in self.decoder.compiled.items():
            self.run.say(f"  compiled {info}  {key[0][:90]}")
        self.run.say(f"  {self.decoder.cooperative_note}; grid {self.decoder.programs}")

    # ---- checks ------------------------------------------------------------------------------------------------
    def check_logits(self) -> None:
        from gpu_probe.measure import logit_tolerance, rel_err

        model, tol, rows = self.model, logit_tolerance(self.model), []
        for b in range(1, 9):
            inputs = self.batch.head(b)
            poison_written_slots(model, inputs)
            before = model.kv_cache.kv.clone()
            fused = model.fused_forward(inputs).clone()
            fused_kv = model.kv_cache.kv.clone()
            model.kv_cache.kv.copy_(before)
            out = self.decoder(inputs).clone()
            same_slots = torch.equal((model.kv_cache.kv != before).any(-1), (fused_kv != before).any(-1))
            kv_err = rel_err(model.kv_cache.kv, fused_kv)
            model.kv_cache.kv.copy_(before)
            err = rel_err(out, fused)
            rows.append({"batch": b, "rel_err": err, "kv_same_slots": same_slots, "kv_rel_err": kv_err})
            self.run.say(
                f"  b{b}: logits rel err {err:.2e} (tol {tol:g}), KV same slots {same_slots}, KV err {kv_err:.1e}"
            )
        self.decoder.check_error()
        passed = all(r["rel_err"] <= tol and r["kv_same_slots"] for r in rows)
        self.run.data["checks"][f"{self.name} logits_vs_fused"] = {
            "passed": passed,
            "tolerance": tol,
            "rows": rows,
        }

    def check_graphs(self) -> None:
        from gpu_probe.graph_runner import GraphRunner
        from gpu_probe.measure import check_graph_vs_eager

        self.persistent_runner = GraphRunner(self.decoder, buckets=BATCHES)
        checks = check_graph_vs_eager(self.persistent_runner, self.decoder, self.batch)
        self.decoder.check_error()
        for name, check in checks.items():
            self.run.data["checks"][f"{self.name} {name}"] = check
            self.run.say(f"  {name}: passed={check['passed']} {check['detail'][:120]}")

    def check_determinism(self) -> None:
        rows = []
        for b in BATCHES:
            inputs = self.batch.head(b)
            outs = {self.decoder(inputs).view(torch.int16).cpu().numpy().tobytes() for _ in range(25)}
            rows.append({"batch": b, "distinct": len(outs)})
        self.decoder.check_error()
        passed = all(r["distinct"] == 1 for r in rows)
        self.run.data["checks"][f"{self.name} determinism_25_calls"] = {"passed": passed, "rows": rows}
        self.run.say(f"  25 calls per bucket: distinct results {[r['distinct'] for r in rows]}")

    def check_1000_steps(self) -> None:
        graph = self.persistent_runner.graphs[1]
        self.persistent_runner.load(self.batch.head(1), 1)
        t = time.perf_counter()
        for _ in range(1000):
            graph.replay()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t
        phase = self.decoder.error_phase()
        self.run.data["checks"][f"{self.name} 1000_steps"] = {
            "passed": phase is None,
            "seconds": seconds,
            "error_phase": phase.name if phase else None,
        }
        self.run.say(
            f"  1000 graph replays in {seconds:.2f} s, error flag: {phase.name if phase else 'clear'}"
        )

    # ---- timing ------------------------------------------------------------------------------------------------
    def timing(self, rounds: int = 5) -> None:
        from gpu_probe.graph_runner import GraphRunner
        from gpu_probe.measure import time_steps

        if self.persistent_runner is None:
            self.persistent_runner = GraphRunner(self.decoder, buckets=BATCHES)
        self.fused_runner = GraphRunner(self.model, buckets=BATCHES)
        runners = {FUSED_GRAPH.name: self.fused_runner, PERSISTENT.name: self.persistent_runner}
        warm_gpu(self.persistent_runner.graphs[1], 1.0)
        for b in BATCHES:
            rows = self.batch.head(b)
            b2b = {mode: [] for mode in runners}
            timed = {mode: [] for mode in runners}
            for _ in range(rounds):
                for mode, runner in runners.items():
                    runner.load(rows, b)
                    b2b[mode].append(replays_us(runner.graphs[b], 200))
            for _ in range(2):
                for mode, runner in runners.items():
                    timed[mode].append(
                        time_steps(lambda runner=runner: runner.run(rows), steps=100, warmup=10)
                    )
            floor = self.floor_us(b)
            for mode in runners:
                rec = {
                    "preset": self.name,
                    "mode": mode,
                    "batch": b,
                    "floor_us": floor,
                    "back_to_back_us": statistics.median(b2b[mode]),
                    "back_to_back_rounds_us": b2b[mode],
                    "as_timed_us": statistics.median(t["step_us_median"] for t in timed[mode]),
                    "as_timed_back_to_back_us": statistics.median(
                        t["step_us_back_to_back"] for t in timed[mode]
                    ),
                    "enqueue_us": statistics.median(t["enqueue_us_median"] for t in timed[mode]),
                }
                rec["back_to_back_x_floor"] = rec["back_to_back_us"] / floor
                rec["as_timed_x_floor"] = rec["as_timed_us"] / floor
                self.run.data["runs"].append(rec)
                self.run.say(
                    f"  b{b} {mode:17s} back to back {rec['back_to_back_us']:7.1f} us "
                    f"({rec['back_to_back_x_floor']:.3f}x floor {floor:.1f}), as timed {rec['as_timed_us']:7.1f} us "
                    f"({rec['as_timed_x_floor']:.3f}x), rounds {[round(x, 1) for x in b2b[mode]]}"
                )
            self.run.save()
        self.decoder.check_error()

    # ---- in-kernel stamps --------------------------------------------------------------------------------------
    def trace(self) -> None:
        from gpu_probe.kernels.persistent_trace import read_trace

        inputs = self.batch.head(1)
        for _ in range(5):
            self.decoder(inputs, trace=True)
        torch.cuda.synchronize()
        self.decoder.check_error()
        trace = read_trace(self.decoder.trace_buffer, self.decoder.phases)
        cfg, el = self.cfg, self.cfg.bytes_per_el
        layer_bytes = {
            "qkv": (cfg.q_dim + 2 * cfg.kv_dim) * cfg.hidden * el,
            "attention": 2 * cfg.prefill_len * cfg.kv_dim * el,
            "o": cfg.hidden * cfg.q_dim * el,
            "gate_up": 2 * cfg.ffn * cfg.hidden * el,
            "down": cfg.hidden * cfg.ffn * el,
            "lm_head": cfg.vocab * cfg.hidden * el,
            "embed": 0,
        }
        for kind, summary in trace["by_kind"].items():
            summary["floor_us"] = layer_bytes[kind] * summary["phases"] / (self.bw * 1e3)
        (self.run.out / f"persistent_trace_{self.name}_b1.json").write_text(json.dumps(trace))
        self.out["trace_b1"] = {
            k: v for k, v in trace.items() if k in ("programs", "timer_resolution_ns", "total_us")
        }
        self.out["trace_b1"]["by_kind"] = trace["by_kind"]
        self.out["trace_b1"]["per_phase_first_layer"] = trace["per_phase"][:7]
        self.run.say(
            f"  traced step {trace['total_us']:.1f} us over {trace['programs']} programs, "
            f"timer resolution {trace['timer_resolution_ns']} ns"
        )
        for kind, s in trace["by_kind"].items():
            self.run.say(
                f"  {kind:9s} x{s['phases']:2d}: critical {s['critical_us']:7.1f} us (floor {s['floor_us']:6.1f}), "
                f"per phase {s['critical_us_median']:5.2f}: release {s['release_us']:5.2f}, work {s['work_us']:5.2f} "
                f"(max {s['work_max_us']:5.2f}), wait {s['wait_us']:5.2f}, imbalance {s['imbalance_us']:5.2f}"
            )

    # ---- variants ----------------------------------------------------------------------------------------------
    def build_variant(self, name: str, rows, batch: int, reference):
        """(graph runner, decoder, error against the default layout's logits) of one layout variant."""
        from gpu_probe.graph_runner import GraphRunner
        from gpu_probe.kernels.persistent import PersistentConfig, PersistentDecoder
        from gpu_probe.measure import rel_err

        config = PersistentConfig(**{**asdict(self.base), **VARIANTS[name]})
        decoder = PersistentDecoder(self.model, config, weights_from=self.decoder)
        runner = GraphRunner(decoder, buckets=(batch,))
        runner.load(rows, batch)
        runner.graphs[batch].replay()
        torch.cuda.synchronize()
        err = rel_err(runner.outputs[batch][:batch], reference)
        decoder.check_error()
        return runner, decoder, err

    def variants(self, names: list[str], batch: int, rounds: int = 5) -> None:
        rows = self.batch.head(batch)
        base_runner = self.persistent_runner
        base_runner.load(rows, batch)
        torch.cuda.synchronize()
        reference = base_runner.outputs[batch][:batch].clone()
        entries = []
        for name in names:
            if self.run.left() < 20:
                self.run.say(f"  SKIP variant {name}: budget")
                continue
            try:
                entries.append((name, *self.build_variant(name, rows, batch, reference)))
            except Exception as e:
                self.run.say(f"  variant {name}: FAILED {type(e).__name__}: {str(e)[:300]}")
                self.run.data["variants"].append(
                    {
                        "preset": self.name,
                        "batch": batch,
                        "variant": name,
                        "error": f"{type(e).__name__}: {e}"[:500],
                    }
                )
        times = {"default": []} | {e[0]: [] for e in entries}
        for _ in range(rounds):
            base_runner.load(rows, batch)
            times["default"].append(replays_us(base_runner.graphs[batch], 200))
            for name, runner, _, _ in entries:
                runner.load(rows, batch)
                times[name].append(replays_us(runner.graphs[batch], 200))
        base = statistics.median(times["default"])
        floor = self.floor_us(batch)
        self.run.say(f"  b{batch} default: {base:.1f} us ({base / floor:.3f}x floor)")
        for name, runner, decoder, err in entries:
            us = statistics.median(times[name])
            info = list(decoder.compiled.values())
            self.run.data["variants"].append(
                {
                    "preset": self.name,
                    "batch": batch,
                    "variant": name,
                    "config": VARIANTS[name],
                    "back_to_back_us": us,
                    "default_us": base,
                    "x_floor": us / floor,
                    "rounds_us": times[name],
                    "rel_err_vs_default": err,
                    "compiled": info[0] if info else None,
                    "error_flag": decoder.error_phase() is not None,
                }
            )
            self.run.say(
                f"  b{batch} {name:20s}: {us:7.1f} us ({us / floor:.3f}x floor, {us - base:+6.1f} vs default), "
                f"err vs default {err:.1e}, {info[0] if info else ''}"
            )
            del runner
        self.run.save()


def summary(run: Run) -> None:
    print("\n==== persistent_check summary ====")
    d = run.data
    print(f"{d['device']} | HBM copy {d.get('hbm_copy_GBps', 0):.0f} GB/s")
    print(
        f"{'preset':6s} {'b':>2s} {'floor':>7s} | {'fused b2b':>9s} {'pers b2b':>9s} {'x floor':>7s} | "
        f"{'fused timed':>11s} {'pers timed':>10s} {'x floor':>7s}"
    )
    by = {(r["preset"], r["batch"], r["mode"]): r for r in d["runs"]}
    for preset, b in sorted({(r["preset"], r["batch"]) for r in d["runs"]}):
        f, p = by.get((preset, b, FUSED_GRAPH.name)), by.get((preset, b, PERSISTENT.name))
        if not (f and p):
            continue
        print(
            f"{preset:6s} {b:2d} {p['floor_us']:7.1f} | {f['back_to_back_us']:9.1f} {p['back_to_back_us']:9.1f} "
            f"{p['back_to_back_x_floor']:7.3f} | {f['as_timed_us']:11.1f} {p['as_timed_us']:10.1f} "
            f"{p['as_timed_x_floor']:7.3f}"
        )
    for name, check in d["checks"].items():
        print(f"check {name}: {'PASS' if check.get('passed') else 'FAIL'}")
    for v in d["variants"]:
        if "error" in v:
            print(f"variant {v['preset']} b{v['batch']} {v['variant']}: {v['error'][:100]}")
        else:
            print(
                f"variant {v['preset']} b{v['batch']} {v['variant']:20s} {v['back_to_back_us']:7.1f} us "
                f"({v['x_floor']:.3f}x, default {v['default_us']:.1f})"
            )
    for err in d["errors"]:
        print(f"error: {err[:200]}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--budget-s", type=float, default=270)
    p.add_argument("--presets", nargs="+", default=["1b", "small"])
    p.add_argument("--variants", nargs="*", default=list(DEFAULT_VARIANTS))
    p.add_argument("--no-variants", action="store_true")
    p.add_argument("--no-checks", action="store_true")
    p.add_argument("--base", default="{}", help="JSON PersistentConfig overrides for the default layout")
    return p


def compile_jobs(args, base, variants: list[str], programs: int) -> list[tuple]:
    """Every kernel the run needs: each preset's batches and traced batch 1, the first preset's variants."""
    from gpu_probe.config import get_config

    jobs = []
    for preset in args.presets:
        blocks = 1 + 8 * get_config(preset).max_blocks_per_seq
        over = json.loads(args.base)
        jobs += [(preset, over, b, blocks, programs * base.programs_per_sm, False) for b in BATCHES]
        jobs.append((preset, over, 1, blocks, programs * base.programs_per_sm, True))
        for name in variants if preset == args.presets[0] else []:
            conf = {**over, **VARIANTS[name]}
            grid = programs * conf.get("programs_per_sm", 1)
            jobs.append((preset, conf, 1, blocks, grid, False))
            if name in AT_B8:
                jobs.append((preset, conf, 8, blocks, grid, False))
    return jobs


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    import triton

    from gpu_probe.kernels.persistent import PersistentConfig
    from gpu_probe.measure import hbm_copy_GBps

    run = Run(Path(args.out), args.budget_s)
    props = torch.cuda.get_device_properties(0)
    run.data.update(
        device=torch.cuda.get_device_name(),
        torch=torch.__version__,
        triton=triton.__version__,
        sms=props.multi_processor_count,
        command=" ".join(sys.argv),
        created=time.strftime("%Y-%m-%d %H:%M:%S"),
    )
    base = replace(PersistentConfig(), **json.loads(args.base))
    run.data["base_config"] = asdict(base)
    variants = [] if args.no_variants else [v for v in args.variants if v in VARIANTS]
    jobs = compile_jobs(args, base, variants, props.multi_processor_count)
    run.part("compile in parallel", compile_all, run, jobs)
    run.data["hbm_copy_GBps"] = bw = run.part("copy bandwidth", hbm_copy_GBps) or 4200.0
    run.say(f"HBM copy {bw:.0f} GB/s")
    for i, name in enumerate(args.presets):
        pre = run.part(f"{name}: build", Preset, run, name, base, bw, need_s=30)
        if pre is None:
            continue
        run.part(f"{name}: first calls", pre.first_calls, need_s=20)
        if not args.no_checks:
            run.part(f"{name}: logits vs fused", pre.check_logits, need_s=15)
            run.part(f"{name}: graph == eager, KV canary", pre.check_graphs, need_s=20)
            run.part(f"{name}: determinism", pre.check_determinism, need_s=10)
            if pre.persistent_runner is not None:
                run.part(f"{name}: 1000 steps", pre.check_1000_steps, need_s=10)
        run.part(f"{name}: timing", pre.timing, need_s=30)
        run.part(f"{name}: in-kernel trace", pre.trace, need_s=10)
        if i == 0 and variants and pre.persistent_runner is not None:
            run.part(f"{name}: variants b1", pre.variants, variants, 1, need_s=30)
            run.part(f"{name}: variants b8", pre.variants, [v for v in variants if v in AT_B8], 8, need_s=30)
        del pre
        torch.cuda.empty_cache()
    run.save()
    summary(run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
