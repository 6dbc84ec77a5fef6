"""`python -m sim`: the chapter's "Run it locally" script.

Prints a batch-size sweep that marks the launch-bound region and the crossover, the
fusion table (11 → 4 kernels per layer), and a bucket-layout comparison. Three
subcommands hand over to their own modules: `buckets`, `calibrate` and `trace`.
"""

from __future__ import annotations

import argparse
import sys

from sim.config import DEFAULT_PRESET, LAYERS_RANGE, PRESETS
from sim.report import POWERS_OF_TWO, full_report

SUBCOMMANDS = {
    "buckets": "bucket layouts in depth: padding waste, graph memory, optimal layouts (sim.buckets.report)",
    "calibrate": "fit the timing model to a probe run; --check OTHER predicts another run (sim.calibration)",
    "trace": "read torch.profiler traces: steps, lanes' readouts, what graphs and fusion would save (sim.trace.report)",
}


def _layers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--layers must be an integer, got {text!r}") from None
    low, high = LAYERS_RANGE
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"--layers must be from {low} to {high}, got {value}")
    return value


def _batches(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--batches must be comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) < 1 or max(values) > 4096:
        raise argparse.ArgumentTypeError("--batches: each batch must be from 1 to 4096")
    return values


def build_parser() -> argparse.ArgumentParser:
    epilog = "subcommands (each has its own --help):\n" + "\n".join(
        f"  python -m sim {name:<10} {text}" for name, text in SUBCOMMANDS.items()
    )
    epilog += "\n\npresets:\n" + "\n".join(f"  {key:<16} {p.title}" for key, p in PRESETS.items())
    parser = argparse.ArgumentParser(
        prog="python -m sim",
        description="Simulate one LLM decode step: where the launch-bound region ends,\n"
        "what kernel fusion and CUDA graphs change, and what bucket layouts cost.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=DEFAULT_PRESET,
        help=f"model + hardware to simulate (default: {DEFAULT_PRESET})",
    )
    parser.add_argument(
        "--layers",
        type=_layers,
        default=None,
        help=f"override the preset's layer count ({LAYERS_RANGE[0]}-{LAYERS_RANGE[1]})",
    )
    parser.add_argument(
        "--batches",
        type=_batches,
        default=POWERS_OF_TWO,
        help="comma-separated batch sizes for the sweep table (default: 1,2,4,...,512)",
    )
    parser.add_argument(
        "--note", action="store_true", help="also print why the preset's figures are what they are"
    )
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "buckets":
        from sim.buckets.report import main as buckets_main  # lazy: only this subcommand needs it

        return buckets_main(argv[1:]) or 0
    if argv and argv[0] == "calibrate":
        from sim.calibration.report import main as calibrate_main

        return calibrate_main(argv[1:]) or 0
    if argv and argv[0] == "trace":
        from sim.trace.report import main as trace_main

        return trace_main(argv[1:]) or 0
    args = build_parser().parse_args(argv)
    preset = PRESETS[args.preset]
    model = preset.model if args.layers is None else preset.model.with_layers(args.layers)
    title = f"launch-bound simulator · preset {preset.key}: {preset.title}"
    if args.note:
        title += "\n\n" + preset.note
    sys.stdout.write(full_report(model, preset.hardware, title=title, batches=args.batches))
    return 0


if __name__ == "__main__":
    sys.exit(main())
