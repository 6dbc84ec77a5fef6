"""Profiler traces of Hugging Face transformers decode steps, for testing the trace reader on code we did not write.

Run on a CUDA machine with torch and transformers (not needed by the app):

    python tools/hf_traces.py --out data/traces/hf

A Llama-3.2-1B-shaped `LlamaForCausalLM` with random weights and a static KV cache decodes one sequence at
batch 1 after a 512-token prefill (`gpu_probe/hf_reference.py` builds and runs it). Each step is what a
serving loop does: the host builds the step's inputs (token id, position) in pinned memory, copies them
to the GPU, runs the model, and reads the sampled token back (`.cpu()`, which synchronises). Written,
each gzip'd and a few steps long:

- `hf_llama_eager_profilerstep.json.gz`: eager, steps marked by the profiler (`ProfilerStep#N`), with shapes;
- `hf_llama_eager_sync.json.gz`: eager, no step marks: the steps are told apart by the host synchronisation;
- `hf_llama_graph.json.gz`: the step captured once with `torch.cuda.graph` and replayed, no step marks;
- `hf_llama_compile.json.gz`: `torch.compile(mode="reduce-overhead")`, `ProfilerStep#N`;
- `hf_llama_two_streams.json.gz`: eager, `ProfilerStep#N`, with a second stream running matmuls during the step;
- `hf_llama_measured.json`: each mode's step time measured without the profiler (CUDA events around the
  step, from before the input copies to the last kernel; each step starts on an idle GPU), median of 100,
  with the host's enqueue time and the GPU's own span of the step (the step enqueued behind a GPU sleep).

`--arch qwen2 --second-model` does the same for a Qwen2.5-0.5B-shaped Qwen2ForCausalLM (24 thin layers,
biases on q/k/v, 14 query heads over 2 KV heads), eager (synchronised) and torch.cuda.graph only: a second
model to check the what-ifs on (`hf_qwen2_*`). `--device cpu --tiny` writes the eager traces of a 2-layer
toy of the shape on the CPU (a dry run).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from gpu_probe.hf_reference import (
    SHAPES,
    CompiledDecoder,
    Decoder,
    GraphDecoder,
    build_model,
    named_shape,
)

# Cache positions past the prompt: more than a run's steps on one decoder (about 230 by default); the
# cache is rewound to the prompt's end before they run out.
CACHE_SLACK = 2048


def time_steps(decoder, steps: int) -> dict:
    """CUDA-event step time: from before the input copies to the last kernel; each step starts on an idle GPU.

    Beside it, unprofiled: the host's time to enqueue the step (return from the call), and the GPU's own
    span of the step, timed from an event recorded after a 5 ms GPU sleep that the step is enqueued
    behind, so that none of the host's time shows (for a host-bound eager step the span is still the
    host's: its launches cannot get ahead of the GPU).
    """
    for _ in range(10):
        decoder.loop_step()
    times, enqueue, span = [], [], []
    for k in range(2 * steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        hide = k % 2 == 1
        if hide:
            torch.cuda._sleep(5_000_000)  # ~3-5 ms of GPU cycles
        start.record()
        t0 = time.perf_counter()
        out = decoder.submit()
        t1 = time.perf_counter()
        end.record()
        decoder.finish(out)  # .cpu(): waits for the step, as a server reading its token does
        (span if hide else times).append(start.elapsed_time(end) * 1e3)
        if not hide:
            enqueue.append((t1 - t0) * 1e6)

    def pick(values, q):
        ordered = sorted(values)
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)]

    return {
        "step_us_median": pick(times, 0.5),
        "step_us_p10": pick(times, 0.1),
        "step_us_p90": pick(times, 0.9),
        "enqueue_us_median": pick(enqueue, 0.5),
        "gpu_span_us_median": pick(span, 0.5),
        "steps": steps,
    }


def profile(decoder, path: Path, steps: int, mark_steps: bool, shapes: bool = False, side_work=None) -> None:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if decoder.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    for _ in range(3):
        decoder.loop_step()
    raw = Path(tempfile.mkstemp(suffix=".json")[1])
    if mark_steps:
        schedule = torch.profiler.schedule(wait=0, warmup=1, active=steps, repeat=1)
        with torch.profiler.profile(
            activities=activities,
            schedule=schedule,
            record_shapes=shapes,
            on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
        ) as prof:
            for _ in range(steps + 1):
                if side_work is not None:
                    side_work()
                decoder.loop_step()
                prof.step()
    else:
        with torch.profiler.profile(activities=activities, record_shapes=shapes) as prof:
            for _ in range(steps):
                decoder.loop_step()
        prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(path, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()


def side_stream_work(device):
    """A second stream kept busy during the step: a few large matmuls, as an overlapped prefill would."""
    stream = torch.cuda.Stream()
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)

    def work():
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(6):
                a @ a

    return work


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--arch", choices=sorted(SHAPES), default="llama")
    parser.add_argument(
        "--second-model",
        action="store_true",
        help="only the eager (synchronised) and torch.cuda.graph traces and their timings: a check on another model",
    )
    parser.add_argument("--layers", type=int, default=None, help="override the shape's layer count")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer toy of the shape (a CPU dry run)")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--steps", type=int, default=3, help="profiled steps per trace")
    parser.add_argument("--timed-steps", type=int, default=100)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    import transformers

    args.out.mkdir(parents=True, exist_ok=True)
    model = build_model(named_shape(args.arch, tiny=args.tiny, layers=args.layers), device)
    config = model.config
    say = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    measured = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python tools/hf_traces.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": {
            "arch": args.arch,
            "layers": config.num_hidden_layers,
            "hidden": config.hidden_size,
            "heads": config.num_attention_heads,
            "kv_heads": config.num_key_value_heads,
            "ffn": config.intermediate_size,
            "vocab": config.vocab_size,
            "context": args.context,
            "dtype": str(next(model.parameters()).dtype),
        },
        "modes": {},
        "errors": [],
    }
    prefix = f"hf_{args.arch}_"
    eager = Decoder(model, 1, args.context, device, slack=CACHE_SLACK)
    say("eager traces")
    if not args.second_model:
        profile(
            eager, args.out / f"{prefix}eager_profilerstep.json.gz", args.steps, mark_steps=True, shapes=True
        )
    profile(eager, args.out / f"{prefix}eager_sync.json.gz", args.steps, mark_steps=False)
    if device.type == "cuda":
        if not args.second_model:
            profile(
                eager,
                args.out / f"{prefix}two_streams.json.gz",
                args.steps,
                mark_steps=True,
                side_work=side_stream_work(device),
            )
        measured["modes"]["eager"] = time_steps(eager, args.timed_steps)
        makers = {
            "graph": GraphDecoder,
            "compile": functools.partial(CompiledDecoder, mode="reduce-overhead"),
        }
        if args.second_model:
            del makers["compile"]
        for name, make in makers.items():
            say(f"{name}: build")
            t0 = time.perf_counter()
            try:
                decoder = make(model, 1, args.context, device, slack=CACHE_SLACK)
            except Exception as err:
                measured["errors"].append(f"{name}: {type(err).__name__}: {str(err)[:500]}")
                say(f"{name} failed: {err}")
                continue
            say(f"{name}: built in {time.perf_counter() - t0:.1f} s")
            trace = f"{prefix}{name}.json.gz"
            profile(decoder, args.out / trace, args.steps, mark_steps=name == "compile")
            measured["modes"][name] = time_steps(decoder, args.timed_steps)
    (args.out / f"{prefix}measured.json").write_text(json.dumps(measured, indent=1) + "\n")
    for name, m in measured["modes"].items():
        say(
            f"{name:8s} {m['step_us_median']:9.1f} µs  (p10 {m['step_us_p10']:.1f}, p90 {m['step_us_p90']:.1f})"
        )
    say("wrote", ", ".join(sorted(os.listdir(args.out))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
