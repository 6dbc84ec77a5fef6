"""Paired traced/untraced decode steps of Hugging Face models: what torch.profiler's own cost is.

Run on a CUDA machine with torch and transformers (not needed by the app), from the repository root:

    PYTHONUNBUFFERED=1 python tools/profiler_cost.py --out OUT

For each model shape (Llama-3.2-1B's, Qwen2.5-0.5B's, TinyLlama-1.1B's: random weights, bf16, a static
KV cache after a 512-token prefill; `--layers N` makes each N layers deep, named e.g. `llama-l8`), batch
(1, 4, 16) and mode -- eager; `torch.compile` in its default
mode (Inductor, no CUDA graphs); the step captured once with `torch.cuda.graph` and replayed (GPU-bound)
-- the step is the loop a server runs (`loop_step` of `gpu_probe/hf_reference.py`'s decoders): the
host writes the step's token ids and position into pinned memory, copies them to the GPU, runs the
model, and reads the sampled tokens back (`.cpu()`, which synchronises). For each profiler setting (default; `record_shapes=True`; `with_stack=True`)
`gpu_probe.recorder.record` times untraced steps with CUDA events (each step from the input build to
the tokens back, on an idle GPU), then profiles a few steps (`ProfilerStep#N`) with the untraced
timing written into the trace (`launch_bound_untraced`). The untraced steps are timed again after the
last profile, so each trace has the untraced median from just before and just after it.

First, three loops of one kind of event each (`micro_view`: 400 `Tensor.view`, aten ops alone;
`micro_add`: 400 `torch.add`, an aten op and a kernel launch each; `micro_frames`: 400 calls four
Python functions deep, for `with_stack`), recorded the same way: the profiler's cost per event read
off directly, beside the costs fitted on the models (`tools/profiler_cost_fit.py`).

Written under OUT (at most 8 files, each under 16 MiB):
- `profiler_cost.json`: every measured figure (rewritten after each configuration, so a run stopped
  at its deadline still leaves what it measured);
- `traces_N.tar`: the gzip'd traces, `<model>_<mode>_b<batch>_<setting>.json.gz`, in tars of at most
  14 MiB each (the JSON names each trace's tar);
- `log.txt`: the progress lines.

The grid runs model by model (eager at every batch, one compile, graph replays at every batch with
the default and with_stack settings), then the remaining compiles; it stops starting work once `--deadline-s` (from the start) would be passed, and still
writes what it has. `--device cpu --tiny` runs the same code on the CPU with a 2-layer toy shape (the
graph mode needs CUDA and is skipped there).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import platform
import shutil
import sys
import tarfile
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

START = time.monotonic()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from gpu_probe.hf_reference import MAKERS, SHAPES, build_model, named_shape  # noqa: E402
from gpu_probe.recorder import record, time_untraced  # noqa: E402

SETTINGS = {
    "default": {},
    "shapes": {"record_shapes": True},
    "stack": {"with_stack": True},
}
GRAPH_SETTINGS = ("default", "stack")  # replays record a handful of events: two settings show it
# Cache positions past the prompt: a decoder runs this many steps before its cache is rewound to the
# prompt's end (`Decoder.rewind`; about 200 steps run per decoder).
CACHE_SLACK = 1024
TAR_LIMIT = 14 * 2**20


def log(*parts) -> None:
    line = f"[{time.monotonic() - START:6.1f} s] " + " ".join(str(p) for p in parts)
    print(line, flush=True)
    if LOG is not None:
        LOG.write(line + "\n")
        LOG.flush()


LOG = None


class Micro:
    """Loops of one kind of recorded event, to read the profiler's cost per event off directly.

    `view`: N `Tensor.view` calls (one aten op each, no launch); `add`: N `torch.add` on a 16-element
    tensor (an aten op and a kernel launch each); `frames`: N calls four Python functions deep, each
    ending in one `view` (Python frames for `with_stack`). The step synchronises at its end.
    """

    def __init__(self, kind: str, device, n: int = 400):
        self.kind, self.device, self.n = kind, device, n
        self.x = torch.zeros(16, device=device)

    def _leaf(self):
        return self.x.view(-1)

    def _f1(self):
        return self._leaf()

    def _f2(self):
        return self._f1()

    def _f3(self):
        return self._f2()

    def loop_step(self):
        x = self.x
        if self.kind == "view":
            for _ in range(self.n):
                x.view(-1)
        elif self.kind == "add":
            for _ in range(self.n):
                torch.add(x, 1)
        else:
            for _ in range(self.n):
                self._f3()
        if self.device.type == "cuda":
            torch.cuda.synchronize()


class Packer:
    """gzip'd traces into tars of at most TAR_LIMIT bytes each, appended to as traces come."""

    def __init__(self, out: Path, max_tars: int):
        self.out, self.max_tars, self.index, self.size = out, max_tars, 0, 0
        self.files: list[str] = []

    def add(self, raw: Path, name: str) -> str | None:
        buf = io.BytesIO()
        with open(raw, "rb") as src, gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=6, mtime=0) as dst:
            shutil.copyfileobj(src, dst)
        data = buf.getvalue()
        if self.size + len(data) + 4096 > TAR_LIMIT or not self.files:
            if len(self.files) >= self.max_tars:
                return None
            self.index += 1
            self.files.append(f"traces_{self.index}.tar")
            self.size = 1024
        tar_name = self.files[-1]
        with tarfile.open(self.out / tar_name, "a") as tar:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), int(time.time())
            tar.addfile(info, io.BytesIO(data))
        self.size += len(data) + 1024
        return tar_name


def _round(values, digits=1):
    return [round(float(v), digits) for v in values]


def measure_decoder(decoder, args, label, packer, result, save, settings):
    """One model × mode × batch: each profiler setting's recording, the untraced time before and after."""
    device = decoder.device
    timer = "cuda_events" if device.type == "cuda" else "host_clock"
    calls: list[float] = []

    def timed_step():  # every call timed by the host clock as the loop sees it (the step itself synchronises)
        t0 = time.perf_counter()
        decoder.loop_step()
        calls.append((time.perf_counter() - t0) * 1e6)

    entries = []
    for setting in settings:
        left = args.deadline_s - (time.monotonic() - START)
        if left < args.reserve_s:
            result["skipped"].append(f"{label} {setting}: deadline")
            log(f"skip {label} {setting}: {left:.0f} s left")
            continue
        calls.clear()
        entry = _record_setting(timed_step, calls, device, timer, args, label, setting, packer)
        entries.append(entry)
        result["traces"].append(entry)
        if entry["tar"] is None:
            result["errors"].append(f"{label}_{setting}.json.gz: no room left in the tars")
        save()
    if entries:
        _untraced_after(decoder, entries, args, device, timer)
        save()


def _record_setting(timed_step, calls, device, timer, args, label, setting, packer) -> dict:
    """One profiler setting: untraced steps timed, a few profiled, the trace packed; its entry of the JSON."""
    t0 = time.monotonic()
    raw = Path(tempfile.mkdtemp()) / "trace.json"
    rec = record(
        timed_step,
        raw,
        steps=args.timed_steps,
        warmup=args.warmup,
        profile_steps=args.profile_steps,
        device=device,
        timer=timer,
        **SETTINGS[setting],
    )
    block, who = rec.untraced, rec.metadata_written_by
    profiled = calls[args.warmup + args.timed_steps :]  # the profiled warm-up step first
    name = f"{label}_{setting}.json.gz"
    raw_bytes = raw.stat().st_size
    tar = packer.add(raw, name)
    shutil.rmtree(raw.parent, ignore_errors=True)
    entry = {
        "label": label,
        "setting": setting,
        "trace": name if tar else None,
        "tar": tar,
        "raw_trace_bytes": raw_bytes,
        "metadata_written_by": who,
        "untraced": block,
        "untraced_step_us": _round(rec.step_us),
        "untraced_host_us": _round(rec.host_us),
        "profiled_host_us": _round(profiled),  # the profiled warm-up step first
        "seconds": round(time.monotonic() - t0, 2),
    }
    log(
        f"{label:24s} {setting:8s} untraced {block['median_us']:9.1f} µs (p10 {block['p10_us']:.0f}, "
        f"p90 {block['p90_us']:.0f})  profiled {sorted(profiled[1:])[len(profiled[1:]) // 2]:9.1f} µs  "
        f"trace {raw_bytes / 2**20:.1f} MB  {entry['seconds']:.1f} s"
    )
    return entry


def _untraced_after(decoder, entries: list[dict], args, device, timer) -> None:
    """The untraced time after the last profile: each trace then has one before and one after."""
    timing = time_untraced(decoder.loop_step, steps=args.timed_steps, warmup=2, device=device, timer=timer)
    after = {k: timing[k] for k in ("median_us", "p10_us", "p90_us", "host_median_us")}
    after["untraced_step_us"] = _round(timing["_step_us"])
    for e, nxt in zip(entries, entries[1:] + [None]):
        e["untraced_after"] = (
            {k: nxt["untraced"][k] for k in ("median_us", "p10_us", "p90_us", "host_median_us")}
            if nxt
            else {k: after[k] for k in ("median_us", "p10_us", "p90_us", "host_median_us")}
        )
    entries[-1]["untraced_after_step_us"] = after["untraced_step_us"]


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--models", nargs="*", default=list(SHAPES), choices=list(SHAPES), help="none: the loops only"
    )
    parser.add_argument(
        "--layers", type=int, default=None, help="every model with this many layers (named e.g. llama-l8)"
    )
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 4, 16])
    parser.add_argument("--modes", nargs="+", default=["eager", "graph", "compile"], choices=list(MAKERS))
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--timed-steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile-steps", type=int, default=4)
    parser.add_argument("--deadline-s", type=float, default=295.0, help="seconds from the start")
    parser.add_argument("--reserve-s", type=float, default=12.0, help="no new recording with less left")
    parser.add_argument("--compile-estimate-s", type=float, default=45.0, help="a compile's guessed time")
    parser.add_argument("--max-tars", type=int, default=6)
    parser.add_argument("--no-micro", dest="micro", action="store_false", help="skip the one-event loops")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer toy shape (a CPU dry run)")
    return parser.parse_args(argv)


def _header(args, device, argv) -> dict:
    """The JSON's fixed part: the command, the machine and its versions, the settings; lists filled as it runs."""
    import transformers

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "schema": 1,
        "command": "python tools/profiler_cost.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "triton": triton_version,
        "python": platform.python_version(),
        "host": {"cpus": os.cpu_count(), "machine": platform.machine()},
        "settings": {
            "timed_steps": args.timed_steps,
            "warmup": args.warmup,
            "profile_steps": args.profile_steps,
            "context": args.context,
            "cache_len": args.context + CACHE_SLACK,
            "profiler_settings": {k: v for k, v in SETTINGS.items() if k in args.settings},
            "tiny": args.tiny,
        },
        "step": "CUDA events around one call of the loop's step (input build, copies, model, tokens back "
        "with .cpu()), each step on an idle GPU; host_us: the host clock around the call and a synchronize",
        "models": {},
        "builds": [],
        "traces": [],
        "skipped": [],
        "errors": [],
    }


class Grid:
    """The run's grid of recordings, written to OUT as it goes: the one-event loops, then model by model (eager
    at every batch, one compile, graph replays), then the remaining compiles, until the deadline."""

    def __init__(self, args, device, result: dict):
        self.args, self.device, self.result = args, device, result
        self.out_json = args.out / "profiler_cost.json"
        self.packer = Packer(args.out, args.max_tars)
        self.modes = [m for m in args.modes if device.type == "cuda" or m != "graph"]
        self.models = {}

    def save(self):
        self.result["elapsed_s"] = round(time.monotonic() - START, 1)
        tmp = self.out_json.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.result, indent=1) + "\n")
        os.replace(tmp, self.out_json)

    def left(self):
        return self.args.deadline_s - (time.monotonic() - START)

    def micro_loops(self):
        args, result = self.args, self.result
        for kind in ("view", "add", "frames"):
            t0 = time.monotonic()
            try:
                measure_decoder(
                    Micro(kind, self.device),
                    args,
                    f"micro_{kind}",
                    self.packer,
                    result,
                    self.save,
                    args.settings,
                )
            except Exception as err:
                result["errors"].append(f"micro_{kind}: {type(err).__name__}: {str(err)[:400]}")
                traceback.print_exc()
            log(f"micro_{kind}: {time.monotonic() - t0:.1f} s")

    def models_in_turn(self):
        args, result = self.args, self.result
        first_compile = {a: b for a, b in zip(args.models, [1, 4, 16, 1, 4, 16])}
        later = []
        for arch in args.models:
            if self.left() < args.reserve_s:
                result["skipped"].append(f"{arch}: deadline")
                continue
            self.build(arch)
            if "eager" in self.modes:
                for batch in args.batches:
                    self.one(arch, "eager", batch)
            if "compile" in self.modes:
                b = first_compile[arch] if first_compile[arch] in args.batches else args.batches[0]
                self.one(arch, "compile", b)
                later += [(arch, x) for x in args.batches if x != b]
            if "graph" in self.modes:
                for batch in args.batches:
                    self.one(arch, "graph", batch)
        # The remaining compiles, one batch of each model in turn.
        later.sort(key=lambda ab: (args.batches.index(ab[1]), args.models.index(ab[0])))
        for arch, batch in later:
            self.one(arch, "compile", batch)

    def name(self, arch) -> str:
        """The model's name in labels and the JSON: its shape's, and its layer count where `--layers` set it."""
        return arch if self.args.layers is None else f"{arch}-l{self.args.layers}"

    def build(self, arch):
        t0 = time.monotonic()
        shape = named_shape(arch, tiny=self.args.tiny, layers=self.args.layers)
        self.models[arch] = build_model(shape, self.device)
        cfg = self.models[arch].config
        self.result["models"][self.name(arch)] = {
            "class": type(self.models[arch]).__name__,
            "layers": cfg.num_hidden_layers,
            "hidden": cfg.hidden_size,
            "heads": cfg.num_attention_heads,
            "kv_heads": cfg.num_key_value_heads,
            "ffn": cfg.intermediate_size,
            "vocab": cfg.vocab_size,
            "tied_embeddings": bool(cfg.tie_word_embeddings),
            "dtype": str(next(self.models[arch].parameters()).dtype),
            "build_s": round(time.monotonic() - t0, 2),
        }
        log(f"{self.name(arch)}: model built in {self.result['models'][self.name(arch)]['build_s']:.1f} s")
        self.save()

    def one(self, arch, mode, batch):
        args, result, device = self.args, self.result, self.device
        label = f"{self.name(arch)}_{mode}_b{batch}"
        settings = [s for s in args.settings if mode != "graph" or s in GRAPH_SETTINGS]
        need = args.reserve_s + (args.compile_estimate_s if mode == "compile" else 0)
        if self.left() < need:
            result["skipped"].append(f"{label}: deadline ({self.left():.0f} s left)")
            log(f"skip {label}: {self.left():.0f} s left")
            return
        t0 = time.monotonic()
        try:
            decoder = MAKERS[mode](self.models[arch], batch, args.context, device, slack=CACHE_SLACK)
        except Exception as err:
            result["errors"].append(f"{label}: build: {type(err).__name__}: {str(err)[:400]}")
            log(f"{label} build failed: {err}")
            traceback.print_exc()
            return
        build_s = round(time.monotonic() - t0, 2)
        result["builds"].append({"label": label, "seconds": build_s})
        if mode == "compile":
            args.compile_estimate_s = max(args.compile_estimate_s * 0.5, build_s * 1.1)
        log(f"{label}: built in {build_s:.1f} s")
        try:
            measure_decoder(decoder, args, label, self.packer, result, self.save, settings)
        except Exception as err:
            result["errors"].append(f"{label}: {type(err).__name__}: {str(err)[:400]}")
            log(f"{label} failed: {err}")
            traceback.print_exc()
        del decoder
        if mode == "compile":
            torch._dynamo.reset()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def main(argv=None) -> int:
    global LOG
    args = _arguments(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    LOG = open(args.out / "log.txt", "w")
    result = _header(args, device, argv)
    if device.type == "cpu":
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    for knob in (
        "recompile_limit",
        "cache_size_limit",
        "accumulated_recompile_limit",
        "accumulated_cache_size_limit",
    ):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 256)
    grid = Grid(args, device, result)
    if args.micro:
        grid.micro_loops()
    grid.models_in_turn()
    result["tars"] = grid.packer.files
    grid.save()
    log(
        f"done: {len(result['traces'])} traces in {', '.join(grid.packer.files)}; {len(result['skipped'])} skipped, "
        f"{len(result['errors'])} errors"
    )
    LOG.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
