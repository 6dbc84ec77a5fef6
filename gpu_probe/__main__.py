"""`python -m gpu_probe --preset small --batch 1 8 64 256 --modes all --out results.json`

`--config path/to/config.json` instead of `--preset` builds the decoder a Hugging Face config of the Llama
family describes, with random weights (`gpu_probe.config.from_file`). Progress goes to stderr. Exit codes:
0 all measured; 1 the run hit errors (e.g. out of memory during a capture) but the results gathered so far
were written; 2 invalid arguments, a config the probe cannot run, no CUDA device or a run too large for the
GPU's free memory, with a one-line reason and nothing allocated (a config is read and checked before torch
is imported).
"""

from __future__ import annotations

import argparse
import shlex
import sys


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        self.exit(2, f"gpu_probe: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from core.step_plan import CHAPTER_BUCKETS, probe_modes
    from gpu_probe.config import DEFAULT_PRESET, PRESETS
    from gpu_probe.live import DEFAULT_BATCHES

    p = _OneLineParser(
        prog="python -m gpu_probe",
        description="Measure one decode step eagerly, fused, with CUDA graphs and with torch.compile.",
    )
    model = p.add_mutually_exclusive_group()
    model.add_argument(
        "--preset",
        default=None,
        help=f"model preset: {', '.join(sorted(PRESETS))} (default {DEFAULT_PRESET})",
    )
    model.add_argument(
        "--config",
        default=None,
        help="a Hugging Face config.json of the Llama family (Llama 2-3.2, Qwen2/2.5, Mistral): the probe's "
        "decoder of that shape, with random weights",
    )
    p.add_argument(
        "--batch", nargs="+", type=int, default=list(DEFAULT_BATCHES), help="batch sizes to measure"
    )
    p.add_argument("--modes", nargs="+", default=["all"], help=f"'all' or some of: {' '.join(probe_modes())}")
    p.add_argument(
        "--buckets",
        nargs="+",
        type=int,
        default=list(CHAPTER_BUCKETS),
        help="batch sizes to capture graphs for (default: the chapter's)",
    )
    p.add_argument("--steps", type=int, default=100, help="timed steps per (mode, batch)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps before timing")
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds the modes and batches take turns in, each timing every one a share of --steps "
        "(default: 10, fewer below 50 steps)",
    )
    p.add_argument(
        "--launcher",
        choices=["bound", "plain"],
        default="bound",
        help="the probe's Triton kernels launched through a launcher bound once per shape (default), or "
        "through kernel[grid] every time",
    )
    p.add_argument("--out", default="results.json", help="result JSON to write")
    p.add_argument("--trace-dir", default=None, help="keep each profiled step's Chrome trace here (Perfetto)")
    p.add_argument(
        "--reference",
        choices=["hf"],
        default=None,
        help="also measure Hugging Face transformers' Llama of the same shape, eager and as one CUDA graph "
        "(needs transformers; skipped with a note without it)",
    )
    p.add_argument(
        "--tp",
        type=int,
        default=1,
        help="tensor-parallel GPUs; above 1, start under torchrun --nproc-per-node N (not yet run on GPUs)",
    )
    return p


def refuse(reason) -> int:
    """Exit code 2 with one line on stderr."""
    print(f"gpu_probe: error: {reason}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.config is None and args.preset is None:
        from gpu_probe.config import DEFAULT_PRESET

        args.preset = DEFAULT_PRESET
    if args.tp != 1:
        if args.config is not None:
            return refuse("--config runs on one GPU: --tp takes a --preset")
        from gpu_probe.tensor_parallel import cli_main

        return cli_main(args, argv)

    from core.probe_result import dump_result, load_result
    from gpu_probe.live import check_memory, cuda_available, main_progress, run_probe, validate_request

    try:
        model = args.preset
        if args.config is not None:
            from gpu_probe.config import from_file

            model = from_file(args.config)  # refused here, naming the field, before torch is imported
        req = validate_request(
            model, args.batch, args.modes, args.buckets, args.steps, args.warmup, args.rounds
        )
    except ValueError as err:
        return refuse(err)
    if not cuda_available():
        return refuse(
            "no CUDA device (torch.cuda.is_available() is False); "
            "gpu_probe/recorded/small.json holds a recorded H200 run"
        )
    from gpu_probe.live import model_config

    model = model_config(model)
    try:  # before anything of the run is allocated
        check_memory(model, {**req, "reference": args.reference}, say=main_progress)
    except ValueError as err:
        return refuse(err)

    command = "python -m gpu_probe " + shlex.join(argv)
    data = run_probe(
        model,
        args.batch,
        args.modes,
        buckets=args.buckets,
        steps=args.steps,
        warmup=args.warmup,
        trace_dir=args.trace_dir,
        progress=main_progress,
        command=command,
        checkpoint=lambda partial: dump_result(partial, args.out),
        reference=args.reference,
        rounds=args.rounds,
        launcher=args.launcher,
        memory_checked=True,
    )  # survives a kill mid-run
    try:
        result = load_result(data)
        dump_result(result, args.out)
    except ValueError as err:
        # Keep what was measured even if it fails the schema (a partial run): write it as is.
        main_progress(f"result fails its schema check ({err}); writing it unchecked")
        dump_result(data, args.out)
        return 1
    main_progress(
        f"wrote {args.out}: {len(result.runs)} runs, {len(result.captures)} captures, "
        f"checks {'all passed' if result.all_checks_passed else 'FAILED'}"
    )
    for line in summary(result):
        print(line)
    return 1 if result.errors or not result.all_checks_passed else 0


def summary(result) -> list[str]:
    rate = f" · bf16 matmul {result.matmul_TFLOPs:,.0f} TFLOP/s" if result.matmul_TFLOPs else ""
    lines = [
        f"{result.device} · torch {result.torch} · CUDA {result.cuda} · HBM copy {result.hbm_copy_GBps:,.0f} GB/s{rate}",
        f"{'mode':<12}{'batch':>6}{'median µs':>11}{'b2b µs':>9}{'× floor':>8}{'kernels':>9}{'/layer':>8}"
        f"{'cpu µs':>9}{'gpu µs':>9}{'util':>6}  bound by",
    ]
    for r in result.runs:
        b2b = f"{r.step_us_back_to_back:>9.1f}" if r.step_us_back_to_back is not None else f"{'':>9}"
        lines.append(
            f"{r.mode:<12}{r.batch:>6}{r.step_us_median:>11.1f}{b2b}{r.step_us_median / result.floor_us(r.batch):>8.2f}"
            f"{r.kernels_per_step:>9}{r.kernels_per_layer:>8g}{r.cpu_launch_us:>9.1f}{r.gpu_busy_us:>9.1f}"
            f"{r.utilisation:>6.0%}  {r.bound_by}{' (eager fallback)' if r.eager_fallback else ''}"
        )
    if result.host is not None:
        lines.append(host_line(result.host))
    for batch in result.batches:
        lines.append(
            f"floor at batch {batch}: {result.floor_us(batch):,.1f} µs ({result.floor_bound(batch)}-bound; "
            f"bytes {result.read_floor_us(batch):,.1f} µs, FLOPs {result.compute_floor_us(batch) or 0:,.1f} µs)"
        )
    ref = result.reference
    if ref is not None and ref.skipped:
        lines.append(f"reference: {ref.skipped}")
    elif ref is not None:
        for r in ref.runs:
            lines.append(
                f"reference HF {r.mode:<6}{r.batch:>6}{r.step_us_median:>11.1f} µs, GPU busy {r.gpu_busy_us:,.1f} µs, "
                f"{r.kernels_per_layer:g} kernels/layer, {r.launches} launches"
            )
        lines += [f"reference error: {e}" for e in ref.errors]
    for name, check in result.checks.items():
        lines.append(f"check {name}: {'passed' if check['passed'] else 'FAILED'} - {check.get('detail', '')}")
    lines += [f"error: {e}" for e in result.errors]
    return lines


def host_line(host) -> str:
    """The host speed index in one line: each kind of launch's median (p10-p90) and the graph launch's fit."""
    index = host.index
    parts = [f"host ({host.cpu}): torch launch {_cost(index.torch_launch_us)}"]
    if index.triton_launch_us is not None:
        parts.append(f"Triton [grid] {_cost(index.triton_launch_us)}")
    if index.triton_bound_launch_us is not None:
        parts.append(f"Triton bound {_cost(index.triton_bound_launch_us)}")
    parts.append(f"graph launch {index.graph_fixed_us:.1f} µs + {index.graph_per_node_us:.3f} µs a node")
    drift = " → ".join(f"{costs.torch_launch_us.median:.1f}" for _, costs in host.samples)
    return ", ".join(parts) + (f" (torch launch {drift} µs across the run)" if len(host.samples) > 1 else "")


def _cost(cost) -> str:
    return f"{cost.median:.1f} µs ({cost.p10:.1f}-{cost.p90:.1f})"


if __name__ == "__main__":
    sys.exit(main())
