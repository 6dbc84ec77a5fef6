"""One probe run, end to end: what the CLI and the page's "Measure on this GPU" call.

`run_probe` returns the result as a plain dict and never loses what it has gathered: an
out-of-memory error during a capture or a mode is recorded under `errors` and the run goes
on with the rest. `measure` wraps it into a schema-checked `ProbeResult` for the page.
"""
from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

from gpu_probe.config import PRESETS
from gpu_probe.result import DEFAULT_BUCKETS, MODES, ProbeResult, load_result

DEFAULT_BATCHES = (1, 8, 64, 256)
MAX_BATCH = 1024  # KV pool and static buffers are sized from this; beyond it the request is refused
STEPS_RANGE = (5, 100_000)
WARMUP_RANGE = (0, 10_000)


def cuda_available() -> bool:
    """True where torch is installed and sees a CUDA device (torch is imported only here)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def validate_request(preset: str, batches, modes, buckets, steps: int, warmup: int) -> dict:
    """Normalised settings, or ValueError with a one-line reason (nothing is allocated here)."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
    batches = _positive_ints(batches, "batch")
    if max(batches) > MAX_BATCH:
        raise ValueError(f"batch sizes must be at most {MAX_BATCH}, got {max(batches)}")
    modes = list(MODES) if modes in ("all", ["all"], ("all",)) else list(modes)
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ValueError(f"modes must be 'all' or some of {', '.join(MODES)}; got {bad or 'none'}")
    buckets = _positive_ints(buckets, "bucket")
    if max(buckets) > MAX_BATCH:
        raise ValueError(f"buckets must be at most {MAX_BATCH}, got {max(buckets)}")
    for name, value, (lo, hi) in (("steps", steps, STEPS_RANGE), ("warmup", warmup, WARMUP_RANGE)):
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
    return {"preset": preset, "batches": batches, "modes": [m for m in MODES if m in modes],
            "buckets": buckets, "steps": steps, "warmup": warmup}


def _positive_ints(values, what: str) -> list[int]:
    try:
        items = [values] if isinstance(values, int) else list(values)
        ints = [int(v) for v in items]
    except (TypeError, ValueError):
        raise ValueError(f"{what} sizes must be positive integers, got {values!r}") from None
    if not ints or any(i < 1 or i != v or isinstance(v, bool) for i, v in zip(ints, items)):
        raise ValueError(f"{what} sizes must be positive integers, got {list(items)!r}")
    return sorted(set(ints))


def measure(preset: str = "small", batches=DEFAULT_BATCHES, modes=MODES, progress=None, **kwargs) -> ProbeResult:
    """Run the probe on this GPU and return the checked result (for the page)."""
    return load_result(run_probe(preset, batches, modes, progress=progress, **kwargs))


def run_probe(preset: str = "small", batches=DEFAULT_BATCHES, modes=MODES, buckets=None, steps: int = 100,
              warmup: int = 10, trace_dir=None, progress=None, command: str = "", checkpoint=None) -> dict:
    """The whole probe as a result dict (see gpu_probe.result); `checkpoint(out)` after each run."""
    import torch

    from gpu_probe import measure as m
    from gpu_probe.compile_peer import CompilePeer
    from gpu_probe.config import get_config
    from gpu_probe.graph_runner import GraphRunner, bucket_for, make_batch
    from gpu_probe.model import ProbeModel

    req = validate_request(preset, batches, modes, buckets or DEFAULT_BUCKETS, steps, warmup)
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: the live probe needs a GPU")
    say = progress or (lambda msg: None)
    trace_dir = Path(trace_dir) if trace_dir else None
    if trace_dir:
        trace_dir.mkdir(parents=True, exist_ok=True)
    cfg = get_config(req["preset"])
    rows = max(max(req["batches"]), max(req["buckets"]))
    blocks_per_seq = -(-cfg.prefill_len // cfg.block_size)
    errors: list[str] = []
    out = {
        "schema": 1, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "cuda": str(torch.version.cuda), "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command or f"gpu_probe.live.run_probe({req})", "runs": [], "captures": [], "checks": {},
        "errors": errors, "settings": {**req, "context_len": cfg.prefill_len, "num_blocks": 1 + rows * blocks_per_seq},
    }

    def failed(where: str, err: Exception) -> None:
        # Recorded, and the run goes on: what was gathered so far is still written.
        first = (str(err).splitlines() or [""])[0][:200]
        if isinstance(err, torch.cuda.OutOfMemoryError):
            errors.append(f"{where}: CUDA out of memory ({first})")
            torch.cuda.empty_cache()
        else:
            errors.append(f"{where}: {type(err).__name__}: {first}")
        say(errors[-1])

    def check(name: str, fn, *args) -> None:
        try:
            out["checks"].update(fn(*args))
        except Exception as err:  # noqa: BLE001 - a broken check is a failed check, not a lost run
            failed(f"check {name}", err)
            out["checks"][name] = {"passed": False, "detail": f"raised {type(err).__name__}"}

    say("measuring HBM copy bandwidth")
    out["hbm_copy_GBps"] = m.hbm_copy_GBps()
    say(f"building the {cfg.name} model ({cfg.n_layers} layers) with a KV pool for {rows} sequences")
    try:
        with torch.no_grad():
            model = ProbeModel(cfg, device="cuda", num_blocks=out["settings"]["num_blocks"])
            model.kv_cache.fill_random_(seed=cfg.seed + 1)
            batch = make_batch(model, rows, seed=cfg.seed + 2)
    except Exception as err:  # noqa: BLE001
        failed(f"building the model and a KV pool for {rows} sequences", err)
        out["model"] = {"config": cfg.to_dict(), "n_params": cfg.n_params,
                        "weight_bytes": cfg.n_params * cfg.bytes_per_el, "read_bytes": cfg.weight_bytes}
        return out
    params = list(model.parameters())
    out["model"] = {"config": cfg.to_dict(), "n_params": sum(p.numel() for p in params),
                    "weight_bytes": sum(p.numel() * p.element_size() for p in params),
                    "read_bytes": model.weight_bytes, "fusions": model.fusion_report()}
    check("fused_vs_unfused", m.check_fused_vs_unfused, model, batch)

    runners = {}
    for mode, fused in (("graph", False), ("fused+graph", True)):
        if mode not in req["modes"]:
            continue
        variant = "fused" if fused else "unfused"
        model.fused = fused
        try:
            runner = GraphRunner(model, buckets=req["buckets"], progress=lambda s, v=variant: say(f"{v}: {s}"))
        except Exception as err:  # noqa: BLE001
            failed(f"capturing {variant} graphs", err)
            continue
        runners[mode] = runner
        out["captures"] += [dict(c.to_dict(), variant=variant) for c in runner.captures]
        say(f"{variant}: checking graph == eager and the KV canary for {len(runner.buckets)} buckets")
        try:
            for name, result in m.check_graph_vs_eager(runner, model, batch).items():
                merged = out["checks"].setdefault(name, {"passed": True, "detail": result["detail"]})
                merged["passed"] = merged["passed"] and result["passed"]
                merged[variant] = result
        except Exception as err:  # noqa: BLE001
            failed(f"check graph_vs_eager ({variant})", err)
            out["checks"]["graph_vs_eager"] = {"passed": False, "detail": f"raised {type(err).__name__}"}
    if runners:
        runner = runners.get("fused+graph") or runners["graph"]
        say("checking the padding assertion with the bug on and off")
        check("padding_assertion", m.check_padding_assertion, runner, batch)
        # Allocated once outside the graph pool (inputs, logits, fused workspace): not in any graph_mem_bytes.
        out["settings"]["static_buffer_bytes"] = runner.static_buffer_bytes
        out["settings"]["static_logits_bytes"] = runner.static_logits_bytes
        out["settings"]["static_workspace_bytes"] = runner.workspace_bytes

    peer = None
    for mode in req["modes"]:
        for n in req["batches"]:
            rows_n = batch.head(n)
            inputs = rows_n.as_dict()
            bucket, fallback = None, False
            if mode in ("eager", "fused"):
                fused = mode == "fused"

                def step(inputs=inputs, fused=fused):
                    model.fused = fused
                    return model(**inputs)
            elif mode == "compile":
                if peer is None:
                    peer = CompilePeer(model)
                say(f"compile: compiling for batch {n}")
                try:
                    peer.warm(rows_n)
                except Exception as err:  # noqa: BLE001
                    failed(f"compile at batch {n}", err)
                    continue
                step = lambda rows_n=rows_n: peer(rows_n)  # noqa: E731
            else:
                if mode not in runners:
                    continue
                runner = runners[mode]
                bucket = bucket_for(n, runner.buckets)
                fallback = bucket is None
                step = lambda rows_n=rows_n, runner=runner: runner.run(rows_n)  # noqa: E731
            say(f"{mode}: timing batch {n}")
            slug = f"{mode.replace('+', '_')}_b{n}.json"
            try:
                with torch.no_grad():
                    timing = m.time_steps(step, steps=req["steps"], warmup=req["warmup"])
                    traced = m.profile_step(step, label=f"{mode} · batch {n}",
                                            trace_path=trace_dir / slug if trace_dir else None)
            except Exception as err:  # noqa: BLE001
                failed(f"{mode} at batch {n}", err)
                continue
            out["runs"].append(m.run_record(mode, n, timing, traced, cfg.n_layers, bucket, fallback))
            if checkpoint:
                try:
                    checkpoint(out)
                except (OSError, ValueError) as err:
                    say(f"could not save the partial result ({err})")
    if peer is not None:
        seen = [r["graph_launches"] > 0 for r in out["runs"] if r["mode"] == "compile"]
        check("compile_cudagraphs", peer.check, all(seen) if seen else None)
    return out


def main_progress(msg: str) -> None:
    print(f"[gpu_probe] {msg}", file=sys.stderr, flush=True)
