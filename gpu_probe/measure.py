"""Timing, profiling and the correctness checks of one probe run (CUDA).

- `time_interleaved` (and `time_steps` for one step): CUDA-event step time over many steps after
  warm-up, every (mode, batch) of a run taking turns over many short rounds so that a drift of the
  host falls on each alike. Each step starts on an idle GPU (synchronize between steps, as a decode
  loop that samples on the host does), so the time is the step's latency: host submission and GPU
  execution overlapped, whichever is longer. The host time to enqueue (return from the step call)
  is timed alongside, and the same steps run back to back (no synchronize between them: the host
  enqueues the next step while the GPU runs this one, as an engine that samples on the GPU or
  schedules ahead does), so the page can say what the idle start of each step costs. p10, median
  and p90 of each.
- `profile_step`: one step under torch.profiler (after one profiled warm-up step), exported
  as a Chrome trace and read by `core.trace` (the page's trace reader too) into a Timeline.
- `hbm_copy_GBps`: a large device-to-device copy, bytes read plus bytes written; `matmul_TFLOPs`: one
  large bf16 matrix product. The two ceilings of the roofline floor.
- checks: graph == eager per bucket with the KV canary quiet, fused == unfused (the padding assertion
  with the bug on and off is `gpu_probe.padding`'s).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from core.trace import STEP_ANNOTATION, TraceStep, analyse, kernels_per_layer
from gpu_probe.graph_runner import GraphRunner
from gpu_probe.live import default_rounds
from gpu_probe.padding import PaddingCorruption


def hbm_copy_GBps(nbytes: int = 2 * 2**30, iters: int = 20) -> float:
    """Copy bandwidth counting bytes read + bytes written, median over `iters` copies."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    times = []
    for i in range(iters + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / float(np.median(times)) / 1e9


def matmul_TFLOPs(size: int = 8192, iters: int = 20) -> float:
    """The bf16 matrix rate: one size x size x size product on random data, median over `iters` (the
    compute side of the roofline floor, measured in the run that uses it)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(size, size, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(size, size, device="cuda", generator=gen).to(torch.bfloat16)
    times = []
    for i in range(iters + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) / 1e3)
    del a, b
    torch.cuda.empty_cache()
    return 2 * size**3 / float(np.median(times)) / 1e12


class _CudaClock:
    """CUDA events on the current stream: what a step's time is read with on a GPU."""

    @staticmethod
    def mark():
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    @staticmethod
    def elapsed_us(start, end) -> float:
        end.synchronize()
        return start.elapsed_time(end) * 1e3

    sync = staticmethod(torch.cuda.synchronize)


class _HostClock:
    """The host's clock, for steps that run on the CPU (the tests of the timing loop)."""

    mark = staticmethod(time.perf_counter)

    @staticmethod
    def elapsed_us(start, end) -> float:
        return (end - start) * 1e6

    @staticmethod
    def sync() -> None:
        pass


def time_interleaved(
    steps: dict,
    per_item: int = 100,
    warmup: int = 10,
    rounds: int | None = None,
    say=None,
    errors: dict | None = None,
) -> dict:
    """Time every step of `steps` ({key: callable}) taking turns: {key: timing} (see `time_steps`).

    Each gets `warmup` untimed steps first, then `rounds` rounds; in each round every step, in an order
    rotated by one each round, runs one untimed step (its caches, after another step's), its share of the
    `per_item` synchronised steps (each timed with CUDA events and its host enqueue time, the GPU idle at
    its start) and a back-to-back window: steps enqueued with no synchronisation between them, timed from
    the end of the window's first step to the end of its last, so the window's idle start is not in it.
    A drift of the host or the GPU during the run falls on every step alike. A step that raises is
    dropped from the rounds; its error is in `errors[key]` (OOM: the cache is emptied) and it has no
    timing.
    """
    clock = _CudaClock if torch.cuda.is_available() else _HostClock
    rounds = min(rounds or default_rounds(per_item), max(per_item, 1))  # every round times each step
    errors = {} if errors is None else errors
    say = say or (lambda msg: None)
    share = [per_item // rounds + (1 if r < per_item % rounds else 0) for r in range(rounds)]
    window = max(3, per_item // rounds // 2 + 1)  # steps in a back-to-back window, the first untimed
    samples = {key: {"step": [], "enqueue": [], "b2b": []} for key in steps}
    live = list(steps)

    def attempt(key, fn) -> bool:
        try:
            fn()
            return True
        except Exception as err:
            errors[key] = err
            live.remove(key)
            if isinstance(err, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
            return False

    for key in list(live):
        attempt(key, lambda step=steps[key]: [step() for _ in range(warmup)])
    clock.sync()
    for r in range(rounds):
        say(
            f"timing round {r + 1} of {rounds}: {len(live)} steps, {share[r]} synchronised and {window} back to back each"
        )
        order = live[r % len(live) :] + live[: r % len(live)] if live else []
        for key in order:
            attempt(key, lambda key=key: _one_turn(steps[key], samples[key], share[r], window, clock))
    return {key: _timing(samples[key], rounds) for key in steps if key not in errors}


def _one_turn(step, sample: dict, synchronised: int, window: int, clock) -> None:
    """One step's turn in a round: one untimed step, `synchronised` timed steps, one back-to-back window."""
    step()
    clock.sync()
    for _ in range(synchronised):
        start = clock.mark()
        t0 = time.perf_counter()
        step()
        sample["enqueue"].append((time.perf_counter() - t0) * 1e6)
        end = clock.mark()
        clock.sync()
        sample["step"].append(clock.elapsed_us(start, end))
    step()  # the window's first step: the GPU starts it idle
    start = clock.mark()
    for _ in range(window - 1):
        step()
    end = clock.mark()
    sample["b2b"].append(clock.elapsed_us(start, end) / (window - 1))
    clock.sync()


def _timing(sample: dict, rounds: int) -> dict:
    """Median, p10 and p90 of a step's synchronised steps, enqueue times and back-to-back windows (µs)."""
    out = {"timing_rounds": rounds}
    for name, values, key in (
        ("step", sample["step"], "step_us"),
        ("enqueue", sample["enqueue"], "enqueue_us"),
        ("b2b", sample["b2b"], "step_us_back_to_back"),
    ):
        p10, med, p90 = (float(v) for v in np.percentile(np.asarray(values, dtype=float), [10, 50, 90]))
        middle = key if name == "b2b" else f"{key}_median"
        out.update({middle: med, f"{key}_p10": p10, f"{key}_p90": p90})
    return out


def time_steps(step, steps: int = 100, warmup: int = 10, rounds: int | None = None) -> dict:
    """One step timed alone, as `time_interleaved` times several: median/p10/p90 of the step time (CUDA
    events), of the host enqueue time and of the back-to-back time, in µs. Raises what the step raises."""
    errors: dict = {}
    timing = time_interleaved({0: step}, steps, warmup, rounds, errors=errors)
    if errors:
        raise errors[0]
    return timing[0]


def profile_step(step, label: str, trace_path: str | os.PathLike | None = None) -> TraceStep:
    """Profile one step (plus a profiled warm-up step) and parse its timeline.

    The trace is written to `trace_path` (kept so it opens in Perfetto) or to a temporary file.
    """
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    keep = trace_path is not None
    path = Path(trace_path) if keep else Path(tempfile.mkstemp(suffix=".json")[1])
    try:
        schedule = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
        with torch.profiler.profile(
            activities=activities,
            schedule=schedule,
            on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
        ) as prof:
            for _ in range(2):
                with torch.profiler.record_function(STEP_ANNOTATION):
                    step()
                    torch.cuda.synchronize()
                prof.step()
        # The step is the range around it: time 0 is the range's start, as in every probe run before.
        return analyse(path, step_range=STEP_ANNOTATION, label=label).steps[-1]
    finally:
        if not keep:
            path.unlink(missing_ok=True)


def run_record(
    mode: str,
    batch: int,
    timing: dict,
    traced: TraceStep,
    n_layers: int,
    bucket: int | None = None,
    eager_fallback: bool = False,
) -> dict:
    """One entry of the result's `runs` (see core.probe_result for the fields)."""
    m = traced.timeline.metrics()
    per_layer, exact = kernels_per_layer(traced.kernel_names, n_layers)
    return {
        "mode": mode,
        "batch": batch,
        "bucket": bucket,
        "padded_rows": (bucket - batch) if bucket else 0,
        "eager_fallback": eager_fallback,
        **timing,
        "kernels_per_step": traced.kernels_per_step,
        "kernels_per_layer": per_layer,
        "kernels_per_layer_exact": exact,
        "launches": traced.launches,
        "graph_launches": traced.graph_launches,
        "cpu_launch_us": m.cpu_launch_us,
        "gpu_busy_us": m.gpu_busy_us,
        "utilisation": m.utilisation,
        "bound_by": m.bound_by,
        "idle_us": m.idle_us,
        "timeline": traced.timeline.to_dict(),
    }


# ---- correctness checks ------------------------------------------------------------------------
def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def logit_tolerance(model) -> float:
    """Relative tolerance for logits of two paths that reduce in different orders.

    bf16 rounds each op to ~3 significant digits; over 32 layers of random weights and random
    KV the differences compound to a few percent (2.5-3 % measured on the H200 between the
    fused and unfused paths, and between split counts). fp32 paths agree to ~1e-6.
    """
    return 5e-2 if getattr(model, "dtype", torch.float32) in (torch.bfloat16, torch.float16) else 1e-3


def check_graph_vs_eager(runner: GraphRunner, model, batch, tolerance: float | None = None) -> dict:
    """Per bucket: replayed graph == eager step on the same padded inputs (bit-exact), the real
    rows close to an unpadded eager step, and the KV canary quiet (check="both")."""
    tolerance = logit_tolerance(model) if tolerance is None else tolerance
    per_bucket, passed, canary = [], True, True
    with torch.no_grad():
        previous = 0
        for bucket in runner.buckets:
            n = min(previous + 1, bucket)  # the most padding this bucket ever sees
            previous = bucket
            rows = batch.head(n)
            runner.load(rows, bucket)
            eager_padded = runner.eager(runner.views(bucket))[:n].clone()
            try:
                graph_out = runner.run(rows, check="both").clone()
                quiet = True
            except PaddingCorruption:
                graph_out, quiet = runner.outputs[bucket][:n].clone(), False
            eager = runner.eager(rows)
            exact = bool(torch.equal(graph_out, eager_padded))
            err = rel_err(graph_out, eager)
            ok = exact and err <= tolerance and quiet
            passed, canary = passed and ok, canary and quiet
            per_bucket.append(
                {
                    "bucket": bucket,
                    "batch": n,
                    "bit_exact_vs_padded_eager": exact,
                    "rel_err_vs_unpadded_eager": err,
                    "kv_canary_quiet": quiet,
                    "passed": ok,
                }
            )
    detail = (
        f"{sum(r['passed'] for r in per_bucket)}/{len(per_bucket)} buckets: graph replay bit-exact with an "
        f"eager step on the same padded inputs, real rows within {tolerance:g} of an unpadded eager step"
    )
    return {
        "graph_vs_eager": {"passed": passed, "detail": detail, "buckets": per_bucket},
        "kv_canary": {
            "passed": canary,
            "detail": "real sequences' KV blocks unchanged by every replay "
            "except the slots they were meant to write",
        },
    }


def check_fused_vs_unfused(model, batch, sizes=(1, 8), tolerance: float | None = None) -> dict:
    tolerance = logit_tolerance(model) if tolerance is None else tolerance
    errs = {}
    saved = model.fused
    with torch.no_grad():
        for n in sizes:
            if n > batch.size:
                continue
            rows = batch.head(n)
            model.fused = False
            ref = model(rows).clone()
            model.fused = True
            errs[n] = rel_err(model(rows), ref)
    model.fused = saved
    passed = all(e <= tolerance for e in errs.values()) and bool(errs)
    return {
        "fused_vs_unfused": {
            "passed": passed,
            "rel_err": {str(k): v for k, v in errs.items()},
            "detail": f"fused logits within {tolerance:g} (relative) of the unfused ones",
        }
    }
