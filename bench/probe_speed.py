"""Speed goals of the live probe (issue 3), each printed as a ratio from ONE probe run.

    python bench/probe_speed.py results.json     # a result the CLI just wrote (same run)
    python bench/probe_speed.py                  # on a GPU: runs the probe first; else the recorded H200 run

Goals: fused+graph at batch 1 <= 2.0 x the weight-read floor; eager / fused+graph at batch 1
>= 20; fused+graph / compile step time <= 1.0; all default buckets captured in < 2 s in
total; < 10 MiB of graph memory per bucket. Goals are reported, never asserted.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.probe_result import DEFAULT_BUCKETS, RECORDED_PATH, load_result  # noqa: E402


def goals(res) -> list[tuple[str, float | None, str, bool | None]]:
    """(what, value, goal text, met) for each goal; value None where the run lacks the data."""
    fg1, eager1 = res.run("fused+graph", 1), res.run("eager", 1)
    rows = []
    floor = res.weight_floor_us
    rows.append((f"fused+graph b1 / weight-read floor ({floor:.1f} µs)",
                 fg1.step_us_median / floor if fg1 else None, "<= 2.0", None))
    rows.append(("eager b1 / fused+graph b1",
                 eager1.step_us_median / fg1.step_us_median if fg1 and eager1 else None, ">= 20", None))
    for batch in res.batches:
        fg, comp = res.run("fused+graph", batch), res.run("compile", batch)
        rows.append((f"fused+graph / compile step time, b{batch}",
                     fg.step_us_median / comp.step_us_median if fg and comp else None, "<= 1.0", None))
    fused = [c for c in res.captures if c.get("variant", "fused") == "fused"]
    default = tuple(sorted(c["bucket"] for c in fused)) == DEFAULT_BUCKETS
    total_s = sum(c["capture_ms"] for c in fused) / 1e3 if fused else None
    rows.append((f"capture time, all {'default' if default else 'captured'} buckets (fused), s",
                 total_s, "< 2", None))
    biggest = max(fused, key=lambda c: c["graph_mem_bytes"]) if fused else None
    rows.append((f"largest graph memory per bucket (fused, bucket {biggest['bucket'] if biggest else '-'}), MiB",
                 biggest["graph_mem_bytes"] / 2**20 if biggest else None, "< 10", None))
    out = []
    for what, value, goal, _ in rows:
        op, limit = goal.split()
        limit = float(limit)
        met = None if value is None else {"<=": value <= limit, ">=": value >= limit, "<": value < limit}[op]
        out.append((what, value, goal, met))
    return out


def main(argv: list[str]) -> int:
    if argv:
        res = load_result(argv[0])
    else:
        from gpu_probe.live import cuda_available, main_progress, run_probe
        if cuda_available():
            res = load_result(run_probe("small", (1, 8, 64, 256), "all", progress=main_progress,
                                        command="bench/probe_speed.py"))
        else:
            print(f"no CUDA device: reading the recorded run {RECORDED_PATH}")
            res = load_result(RECORDED_PATH)
    print(f"{res.device} · torch {res.torch} · {res.created} · HBM copy {res.hbm_copy_GBps:,.0f} GB/s")
    for what, value, goal, met in goals(res):
        shown = "n/a" if value is None else f"{value:8.2f}"
        verdict = "no data" if met is None else ("met" if met else "MISSED")
        print(f"{what:<60} {shown:>9}   goal {goal:<6} {verdict}")
    for r in res.runs:
        if r.batch == 1:
            print(f"  b1 {r.mode:<12} median {r.step_us_median:9.1f} µs  kernels/layer {r.kernels_per_layer:g}  "
                  f"{r.bound_by}-bound, utilisation {r.utilisation:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
