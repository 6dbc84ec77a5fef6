"""One probe run, end to end: what the CLI and the page's "Measure on this GPU" call.

`run_probe` returns the result as a plain dict and never loses what it has gathered: an
out-of-memory error during a capture or a mode is recorded under `errors` and the run goes
on with the rest. `measure` wraps it into a schema-checked `ProbeResult` for the page. The
model, KV pool and captured graphs live in a `ProbeSession` (gpu_probe/session.py), built per
run by the CLI and kept across runs by the page (`open_session`).
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from core.probe_result import ProbeResult, load_result
from core.step_plan import CHAPTER_BUCKETS, modes, names, probe_modes
from gpu_probe.config import PRESETS
from gpu_probe.kernel_sets import kernel_set

if TYPE_CHECKING:  # gpu_probe.session imports torch
    from gpu_probe.session import ProbeSession

DEFAULT_BATCHES = (1, 8, 64, 256)
MAX_BATCH = 1024  # KV pool and static buffers are sized from this; beyond it the request is refused
STEPS_RANGE = (5, 100_000)
LAUNCHERS = ("bound", "plain")  # how the probe's Triton kernels are launched (gpu_probe.kernels.launch)
WARMUP_RANGE = (0, 10_000)


def cuda_available() -> bool:
    """True where torch is installed and sees a CUDA device (torch is imported only here)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def captured_modes() -> tuple[str, ...]:
    """The graph modes whose graphs the probe captures itself (its kernel set's `captured`: torch.compile
    captures its own)."""
    return names(m for m in modes(graphs=True, probed=True) if kernel_set(m).captured)


def default_rounds(steps: int) -> int:
    """Rounds the timed steps are spread over: ten, fewer where there are fewer than 50 steps (5 a round)."""
    return max(1, min(10, steps // 5))


def validate_request(
    preset: str, batches, modes, buckets, steps: int, warmup: int, rounds: int | None = None
) -> dict:
    """Normalised settings, or ValueError with a one-line reason (nothing is allocated here).

    rounds: how many rounds the (mode, batch) steps take turns in (None: `default_rounds`), 1 to
    `steps` (each round times every step at least once)."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
    batches = _positive_ints(batches, "batch")
    if max(batches) > MAX_BATCH:
        raise ValueError(f"batch sizes must be at most {MAX_BATCH}, got {max(batches)}")
    known = probe_modes()
    asked = list(known) if modes in ("all", ["all"], ("all",)) else list(modes)
    bad = [m for m in asked if m not in known]
    if bad or not asked:
        raise ValueError(f"modes must be 'all' or some of {', '.join(known)}; got {bad or 'none'}")
    buckets = _positive_ints(buckets, "bucket")
    if max(buckets) > MAX_BATCH:
        raise ValueError(f"buckets must be at most {MAX_BATCH}, got {max(buckets)}")
    for name, value, (lo, hi) in (("steps", steps, STEPS_RANGE), ("warmup", warmup, WARMUP_RANGE)):
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
    if rounds is None:
        rounds = default_rounds(steps)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= steps:
        raise ValueError(f"rounds must be an integer in [1, steps = {steps}], got {rounds!r}")
    return {
        "preset": preset,
        "batches": batches,
        "modes": [m for m in known if m in asked],
        "buckets": buckets,
        "steps": steps,
        "warmup": warmup,
        "rounds": rounds,
    }


def _positive_ints(values, what: str) -> list[int]:
    try:
        items = [values] if isinstance(values, int) else list(values)
        ints = [int(v) for v in items]
    except (TypeError, ValueError):
        raise ValueError(f"{what} sizes must be positive integers, got {values!r}") from None
    if not ints or any(i < 1 or i != v or isinstance(v, bool) for i, v in zip(ints, items)):
        raise ValueError(f"{what} sizes must be positive integers, got {list(items)!r}")
    return sorted(set(ints))


def measure(
    preset: str = "small", batches=DEFAULT_BATCHES, modes="all", progress=None, session=None, **kwargs
) -> ProbeResult:
    """Run the probe on this GPU and return the checked result (for the page).

    session: a `ProbeSession` from `open_session` to measure with, so its model and captured graphs
    are reused rather than built again (the page keeps one per server)."""
    return load_result(run_probe(preset, batches, modes, progress=progress, session=session, **kwargs))


def open_session(
    preset: str = "small",
    rows: int = max(DEFAULT_BATCHES),
    buckets=CHAPTER_BUCKETS,
    graph_modes=None,
    progress=None,
) -> ProbeSession:
    """Build the model, its KV pool and the CUDA graphs once, for any number of `measure` calls
    (`graph_modes`: the graph modes to capture, by default every one the probe captures itself)."""
    from gpu_probe.session import ProbeSession

    graph_modes = captured_modes() if graph_modes is None else tuple(graph_modes)
    req = validate_request(preset, [rows], list(graph_modes) or ["all"], buckets, 100, 10)
    return ProbeSession(req["preset"], rows, req["buckets"], list(graph_modes), progress)


def run_probe(
    preset: str = "small",
    batches=DEFAULT_BATCHES,
    modes="all",
    buckets=None,
    steps: int = 100,
    warmup: int = 10,
    trace_dir=None,
    progress=None,
    command: str = "",
    checkpoint=None,
    session=None,
    reference: str | None = None,
    rounds: int | None = None,
    launcher: str = "bound",
) -> dict:
    """The whole probe as a result dict (see core.probe_result); `checkpoint(out)` after each run.

    reference: "hf" also measures Hugging Face transformers' Llama of the same shape at the same batches
    (`gpu_probe.hf_reference`), its steps timed in the same rounds as the probe's own; None leaves it out.
    rounds: see `validate_request`. launcher: "bound" launches the probe's Triton kernels through launchers
    bound once per shape (`gpu_probe.kernels.launch`), "plain" through `kernel[grid]` every time; the result's
    `settings.launcher` says which ran ("kernel[grid]" also where this process cannot bind)."""
    import torch

    from gpu_probe import measure as m
    from gpu_probe.session import ProbeSession

    req = validate_request(preset, batches, modes, buckets or CHAPTER_BUCKETS, steps, warmup, rounds)
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {LAUNCHERS}, got {launcher!r}")
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: the live probe needs a GPU")
    from gpu_probe.kernels import launch

    launch.set_bound(launcher == "bound")
    bound = launcher == "bound" and launch.bound_available()
    say = progress or (lambda msg: None)
    trace_dir = Path(trace_dir) if trace_dir else None
    if trace_dir:
        trace_dir.mkdir(parents=True, exist_ok=True)
    rows = max(max(req["batches"]), max(req["buckets"]))
    graph_modes = [mode for mode in captured_modes() if mode in req["modes"]]
    out = {
        "schema": 1,
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command or f"gpu_probe.live.run_probe({req})",
        "runs": [],
        "captures": [],
        "checks": {},
        "errors": [],
        "settings": {**req, "launcher": "bound" if bound else "kernel[grid]"},
    }
    say("measuring HBM copy bandwidth and the bf16 matrix rate")
    out["hbm_copy_GBps"] = m.hbm_copy_GBps()
    out["matmul_TFLOPs"] = m.matmul_TFLOPs()
    if session is None:
        session = ProbeSession(req["preset"], rows, req["buckets"], graph_modes, say)
    elif not session.serves(req["preset"], rows, req["buckets"], graph_modes):
        raise ValueError(f"this probe session was built for {session.describe()}, not for {req}")
    else:
        say(f"reusing the {session.cfg.name} model and its captured graphs")
    hf = None
    if reference == "hf":
        from gpu_probe.hf_reference import ReferenceSteps

        hf = ReferenceSteps(session.cfg, req["batches"], say)
        if "skipped" in hf.block:
            say(hf.block["skipped"])
    beside = session.measure_into(out, req, say, trace_dir, checkpoint, beside=hf.steps() if hf else None)
    if hf is not None:
        out["reference"] = hf.finish(beside, say)
    return out


_STARTED = time.perf_counter()


def main_progress(msg: str) -> None:
    """A progress line on stderr with the seconds since the probe was imported: where a run's time goes."""
    print(f"[gpu_probe] {time.perf_counter() - _STARTED:7.1f} s  {msg}", file=sys.stderr, flush=True)
