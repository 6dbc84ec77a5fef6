"""One probe run, end to end: what the CLI and the page's "Measure on this GPU" call.

`run_probe` returns the result as a plain dict and never loses what it has gathered: an
out-of-memory error during a capture or a mode is recorded under `errors` and the run goes
on with the rest. The model is a preset's name or a `ProbeModelConfig` (read from a config.json:
`gpu_probe.config.from_file`); a run that would not fit the GPU's free memory is refused before anything is
allocated (`gpu_probe.footprint`), and so is a mode whose kernel set cannot run the model (named), while
"all" leaves such modes out and says so (`settings.modes_left_out`). `measure` wraps it into a schema-checked `ProbeResult` for the page. The
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
from core.step_plan import mode as mode_named
from gpu_probe.config import PRESETS, ProbeModelConfig, get_config
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


def model_config(preset) -> ProbeModelConfig:
    """The model a request names: a preset's name, or a ProbeModelConfig (from a config.json) as it is."""
    if isinstance(preset, ProbeModelConfig):
        return preset
    if not isinstance(preset, str) or preset not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
    return get_config(preset)


def validate_request(
    preset, batches, modes, buckets, steps: int, warmup: int, rounds: int | None = None
) -> dict:
    """Normalised settings, or ValueError with a one-line reason (nothing is allocated here).

    preset: a preset's name or a ProbeModelConfig (`model_config`); the settings name it ("preset").
    rounds: how many rounds the (mode, batch) steps take turns in (None: `default_rounds`), 1 to
    `steps` (each round times every step at least once). A mode whose kernel set cannot run the model is
    refused where asked for by name, left out of "all" (`modes_left_out`: mode -> why)."""
    cfg = model_config(preset)
    batches = _positive_ints(batches, "batch")
    if max(batches) > MAX_BATCH:
        raise ValueError(f"batch sizes must be at most {MAX_BATCH}, got {max(batches)}")
    known = probe_modes()
    every = modes in ("all", ["all"], ("all",))
    asked = list(known) if every else list(modes)
    bad = [m for m in asked if m not in known]
    if bad or not asked:
        raise ValueError(f"modes must be 'all' or some of {', '.join(known)}; got {bad or 'none'}")
    left_out = {m: why for m in asked if (why := kernel_set(mode_named(m)).refusal(cfg))}
    if left_out and not every:
        mode, why = next(iter(left_out.items()))
        raise ValueError(f"mode {mode}: {why}")
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
    req = {
        "preset": cfg.name,
        "batches": batches,
        "modes": [m for m in known if m in asked and m not in left_out],
        "buckets": buckets,
        "steps": steps,
        "warmup": warmup,
        "rounds": rounds,
    }
    if left_out:
        req["modes_left_out"] = left_out
    return req


def rows_of(req: dict) -> int:
    """The most rows a run holds: its largest batch or bucket (the KV pool and static buffers are sized to it)."""
    return max(max(req["batches"]), max(req["buckets"]))


def check_memory(cfg: ProbeModelConfig, req: dict, free_bytes: int | None = None, say=None):
    """ValueError in one sentence where the run of `req` would not fit the GPU's free memory (`free_bytes`, else
    asked of the driver), before anything is allocated; a warning through `say` where the Hugging Face
    reference may not fit beside it (`req["reference"]`: "hf")."""
    from gpu_probe import footprint

    free = footprint.free_gpu_bytes() if free_bytes is None else free_bytes
    need = footprint.check_fits(cfg, rows_of(req), req["modes"], free)
    if req.get("reference") == "hf" and say is not None:
        warning = footprint.reference_warning(cfg, req["batches"], need, free)
        if warning:
            say(warning)
    return need


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
    preset="small", batches=DEFAULT_BATCHES, modes="all", progress=None, session=None, **kwargs
) -> ProbeResult:
    """Run the probe on this GPU and return the checked result (for the page).

    session: a `ProbeSession` from `open_session` to measure with, so its model and captured graphs
    are reused rather than built again (the page keeps one per server)."""
    return load_result(run_probe(preset, batches, modes, progress=progress, session=session, **kwargs))


def open_session(
    preset="small",
    rows: int = max(DEFAULT_BATCHES),
    buckets=CHAPTER_BUCKETS,
    graph_modes=None,
    progress=None,
    capture=None,
) -> ProbeSession:
    """Build the model, its KV pool and the CUDA graphs once, for any number of `measure` calls
    (`graph_modes`: the graph modes the session is for, by default every one the probe captures itself and the
    model allows; `capture`: those of them captured now, by default all, the rest by the first `measure` that
    needs them). ValueError, before anything is allocated, where they would not fit the GPU's memory."""
    from gpu_probe.session import ProbeSession

    cfg = model_config(preset)
    if graph_modes is None:
        graph_modes = tuple(m for m in captured_modes() if not kernel_set(mode_named(m)).refusal(cfg))
    req = validate_request(cfg, [rows], list(graph_modes) or ["all"], buckets, 100, 10)
    check_memory(cfg, req)
    now = [m for m in graph_modes if capture is None or m in capture]
    return ProbeSession(cfg, rows, req["buckets"], now, progress)


def release_gpu_memory() -> None:
    """Hand the memory of a session let go of back to the driver (the free memory a new session is checked
    against counts what torch's allocator keeps cached)."""
    import gc

    gc.collect()
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_probe(
    preset="small",
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
    memory_checked: bool = False,
    ceilings: dict | None = None,
) -> dict:
    """The whole probe as a result dict (see core.probe_result); `checkpoint(out)` after each run.

    preset: a preset's name or a ProbeModelConfig (`model_config`). Without a `session`, ValueError before
    anything of the model is allocated where the run would not fit the GPU's free memory (`check_memory`;
    memory_checked: the caller did that already, as the CLI does to exit with code 2).

    reference: "hf" also measures Hugging Face transformers' Llama of the same shape at the same batches
    (`gpu_probe.hf_reference`), its steps timed in the same rounds as the probe's own; None leaves it out.
    rounds: see `validate_request`. launcher: "bound" launches the probe's Triton kernels through launchers
    bound once per shape (`gpu_probe.kernels.launch`), "plain" through `kernel[grid]` every time; the result's
    `settings.launcher` says which ran ("kernel[grid]" also where this process cannot bind). ceilings: the
    copy bandwidth and matrix rate ({"hbm_copy_GBps", "matmul_TFLOPs"}) an earlier part of the same run
    measured on this GPU (the page measures a run in parts), taken instead of measured again."""
    import torch

    from gpu_probe import measure as m
    from gpu_probe.session import ProbeSession

    cfg = model_config(preset)
    req = validate_request(cfg, batches, modes, buckets or CHAPTER_BUCKETS, steps, warmup, rounds)
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
    rows = rows_of(req)
    graph_modes = [mode for mode in captured_modes() if mode in req["modes"]]
    if session is None and not memory_checked:
        check_memory(cfg, {**req, "reference": reference}, say=say)
    for mode, why in req.get("modes_left_out", {}).items():
        say(f"{mode}: left out ({why})")
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
    if ceilings:  # measured by an earlier part of the same run: not again beside a built model
        out["hbm_copy_GBps"], out["matmul_TFLOPs"] = ceilings["hbm_copy_GBps"], ceilings.get("matmul_TFLOPs")
    else:
        say("measuring HBM copy bandwidth and the bf16 matrix rate")
        out["hbm_copy_GBps"] = m.hbm_copy_GBps()
        out["matmul_TFLOPs"] = m.matmul_TFLOPs()
    if session is None:
        session = ProbeSession(cfg, rows, req["buckets"], graph_modes, say)
    elif not session.serves(cfg, rows, req["buckets"]):
        raise ValueError(f"this probe session was built for {session.describe()}, not for {req}")
    else:
        say(f"reusing the {session.cfg.name} model and its captured graphs")
        session.capture(graph_modes, say)  # those no earlier run of the session needed
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
