"""Is the tensor-core kernel deterministic, and what does each pipelining depth cost? (CUDA)

    python tools/tc_determinism.py [--repeats 30] [--stages 1 2 3 4]

For each projection of the small and 1b presets and each batch above the GEMV's rows, runs
`fused_linear` with the shape's own tiles at every `num_stages` asked for: `repeats` times on the
same inputs (how many distinct results came back; 1 is deterministic) and timed with CUDA events
(median µs per launch). A pipelined Triton kernel that returns different bits for the same inputs
breaks the probe's graph == eager check; this is how `runs_unpipelined` in kernels/linear.py was chosen.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from gpu_probe.kernels.linear import _num_sms, _tile_config, fused_linear

# (preset, projection, variant, n_out, k)
SHAPES = (
    ("small", "qkv", "norm", 3072, 1024),
    ("small", "o", "residual", 1024, 1024),
    ("small", "gate/up", "swiglu", 2816, 1024),
    ("small", "down", "residual", 1024, 2816),
    ("small", "lm head", "norm", 32000, 1024),
    ("1b", "qkv", "norm", 3072, 2048),
    ("1b", "o", "residual", 2048, 2048),
    ("1b", "gate/up", "swiglu", 8192, 2048),
    ("1b", "down", "residual", 2048, 8192),
    ("1b", "lm head", "norm", 128256, 2048),
)
BATCHES = (5, 16, 24, 48, 65, 96, 128, 192, 256)


def distinct_and_time(variant: str, n: int, k: int, m: int, stages: int, repeats: int) -> tuple[int, float]:
    gen = torch.Generator(device="cuda").manual_seed(m)
    weight = (
        torch.randn(2 * n if variant == "swiglu" else n, k, generator=gen, device="cuda") / math.sqrt(k)
    ).to(torch.bfloat16)
    x = (3 * torch.randn(m, k, generator=gen, device="cuda")).to(torch.bfloat16)
    if variant == "residual":
        kwargs = {"residual": torch.randn(m, n, generator=gen, device="cuda").to(torch.bfloat16)}
    else:
        kwargs = {"rms_eps": 1e-5, "swiglu": variant == "swiglu"}
    config = {**_tile_config(m, n, k, variant == "swiglu", _num_sms(weight.device)), "num_stages": stages}
    outs = [fused_linear(x, weight, config=config, **kwargs).clone() for _ in range(repeats)]
    distinct = len({o.view(torch.int16).cpu().numpy().tobytes() for o in outs})
    times = []
    for _ in range(30):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fused_linear(x, weight, config=config, **kwargs)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return distinct, sorted(times)[len(times) // 2]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--stages", type=int, nargs="+", default=[1, 2, 3, 4])
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("tools/tc_determinism.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name()} · torch {torch.__version__}")
    head = "  ".join(f"stages {s}: distinct  µs" for s in args.stages)
    print(f"{'preset':<6} {'projection':<8} {'batch':>5}  default  {head}")
    for preset, name, variant, n, k in SHAPES:
        for m in BATCHES:
            default = _tile_config(m, n, k, variant == "swiglu", _num_sms(torch.device("cuda")))
            if default["kernel"] != "dot":
                continue
            cells = []
            for s in args.stages:
                distinct, us = distinct_and_time(variant, n, k, m, s, args.repeats)
                cells.append(f"{'':>9}{distinct:>3} {us:7.1f}" + (" !" if distinct > 1 else "  "))
            print(f"{preset:<6} {name:<8} {m:>5}  {default['num_stages']:>7}  " + "".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
