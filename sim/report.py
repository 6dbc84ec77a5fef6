"""Plain-text tables for `python -m sim`: the batch sweep, the fusion table, the bucket layouts."""

from __future__ import annotations

import textwrap

import numpy as np

from core.step_plan import BASELINE, CHAPTER_BUCKETS, FUSED, StepPlan
from sim.config import HardwareConfig, ModelConfig
from sim.step.ops import MODEL_LEVEL, fusion_table
from sim.step.schedule import simulate_step, sweep

POWERS_OF_TWO = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def _bytes(n: float) -> str:
    for unit, size in (("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def format_sweep_table(
    model: ModelConfig, hw: HardwareConfig, batches=POWERS_OF_TWO, buckets=CHAPTER_BUCKETS
) -> str:
    """Step time and bound per mode at `batches`, the launch-bound rows marked.

    Crossovers come from a dense sweep (every batch from 1 to the largest shown), so they
    fall on the exact batch, not on the nearest row of the table.
    """
    shown = np.asarray(sorted(set(int(b) for b in batches)))
    dense = sweep(model, hw, np.arange(1, shown[-1] + 1), buckets)
    crossover = dense.crossover
    idx = shown - 1
    n_unfused = dense[BASELINE].kernels
    n_fused = dense[FUSED].kernels
    shown_modes = dense.modes
    head = f"{'batch':>6} │" + "".join(f" {m.title:<20} │" for m in shown_modes)
    sub = f"{'':>6} │" + "".join(f" {'step µs':>9} {'bound':<5} {'util':>4} │" for _ in shown_modes)
    lines = [
        "(1) Batch-size sweep: one decode step per mode",
        *_wrap(
            f"{model.name}, {model.n_layers} layers, on {hw.name}; {n_unfused} kernels/step unfused, "
            f"{n_fused} fused; graphs replay buckets {_short(buckets)} and run eagerly above them"
        ),
        "",
        head,
        sub,
        "─" * len(head),
    ]
    base_x = crossover[BASELINE.name]
    marked = False
    for row, b in zip(idx, shown):
        if base_x is not None and not marked and b >= base_x:
            lines.append(f"{'':>6} ├─ crossover with both toggles off: GPU-bound from batch {base_x} on")
            marked = True
        lines.append(_sweep_row(dense, row, b))
    lines.append("")
    lines += _wrap(
        "bound: CPU = the host's launches take longer than the kernels, so the GPU waits "
        "(◀ launch-bound with both toggles off); GPU = the kernels take longer. "
        "util = GPU busy time / step time."
        + (
            f" * above the largest bucket ({max(buckets)}) the graph columns run eagerly."
            if buckets and shown[-1] > max(buckets)
            else ""
        )
    )
    lines += _wrap(
        "Crossover (smallest batch from which the step stays GPU-bound, dense sweep 1.."
        f"{shown[-1]}; graph modes up to their largest bucket): "
        + ", ".join(f"{m.title} {_fmt_x(crossover[m.name])}" for m in shown_modes)
        + "."
    )
    lines += _wrap(_batch1_line(model, hw))
    return "\n".join(lines)


def _sweep_row(dense, row: int, batch: int) -> str:
    """One batch of the sweep table: each mode's step time, bound and utilisation."""
    cells = []
    for m in dense.modes:
        s = dense[m]
        bound = "CPU" if s.cpu_launch_us[row] > s.gpu_busy_us[row] else "GPU"
        if m.graphs and not s.replayed[row]:
            bound += "*"  # graphs asked for, batch above the largest bucket: ran eagerly
        cells.append(f" {s.step_us[row]:>9.1f} {bound:<5} {s.utilisation[row] * 100:>3.0f}% │")
    base = dense[BASELINE]
    tag = " ◀ launch-bound" if base.cpu_launch_us[row] > base.gpu_busy_us[row] else ""
    return f"{batch:>6} │" + "".join(cells) + tag


def _wrap(text: str, indent: str = "    ") -> list[str]:
    return textwrap.wrap(text, width=110, initial_indent=indent, subsequent_indent=indent)


def _fmt_x(value) -> str:
    return "never" if value is None else f"batch {value}"


def _short(buckets) -> str:
    b = tuple(buckets)
    return "none" if not b else ", ".join(map(str, b)) if len(b) <= 14 else f"{b[0]}, {b[1]}, … {b[-1]}"


def _batch1_line(model: ModelConfig, hw: HardwareConfig) -> str:
    base = simulate_step(model, hw, StepPlan(BASELINE, 1)).metrics
    return (
        f"Batch 1, both toggles off: {base.launches} launches × {hw.eager_launch_us:g} µs = "
        f"{base.cpu_launch_us / 1e3:.2f} ms of CPU launch time vs {base.gpu_busy_us / 1e3:.2f} ms of GPU "
        f"work; step {base.step_us / 1e3:.2f} ms, bound by {base.bound_by}, "
        f"utilisation {base.utilisation:.0%}."
    )


def format_fusion_table(model: ModelConfig) -> str:
    """The model's kernels per layer unfused → fused (the chapter's 11 → 4), with what each fused kernel
    keeps out of HBM."""
    rows = fusion_table(model)
    n = model.n_layers
    unfused, fused = model.unfused_per_layer, model.fused_per_layer
    out = [
        f"(2) Kernel fusion: {unfused} → {fused} kernels per layer",
        *_wrap(
            f"{unfused * n + len(MODEL_LEVEL)} → {fused * n + len(MODEL_LEVEL)} "
            f"kernels per step over {n} layers; the {len(MODEL_LEVEL)} outside the layers "
            f"({', '.join(MODEL_LEVEL)}) are launched either way."
        ),
        "",
        f"  {'fused kernel':<13} {'replaces (unfused kernels)':<37} {'launches':>8}  "
        f"{'kept on chip (no HBM round trip)':<38} {'saved/token':>11}",
        "  " + "─" * 111,
    ]
    for row in rows:
        kept = row["kept_on_chip"] or ("— (nothing new: see note)",)
        out.append(
            f"  {row['fused_kernel']:<13} {' + '.join(row['merges']):<37} "
            f"{-row['launches_saved_per_layer']:>+8}  {kept[0]:<38} "
            f"{_bytes(row['bytes_saved_per_token']):>11}"
        )
        out.extend(f"  {'':<13} {'':<37} {'':>8}  {extra}" for extra in kept[1:])
    saved_layer = sum(r["bytes_saved_per_token"] for r in rows)
    out += [
        "  " + "─" * 111,
        f"  {'per layer':<13} {f'{unfused} kernels → {fused}':<37} "
        f"{fused - unfused:>+8}  {'':<38} {_bytes(saved_layer):>11}",
        *_wrap(
            f"Whole step: {(unfused - fused) * n} fewer launches and "
            f"{_bytes(saved_layer * n)} less activation traffic per token (× batch per step). Weights are "
            "read once either way, so at batch 1 fusion saves launches far more than bytes.",
            "  ",
        ),
        "",
        "  How each fused kernel works:",
    ]
    for row in rows:
        out += _wrap(f"{row['fused_kernel']}: {row['why']}", "    ")
    out += _wrap(
        "Note: the unfused column already runs the residual adds in the o_proj and down_proj "
        "epilogues and SiLU·mul in the up_proj epilogue (the chapter's 11 kernels count no kernels "
        "for them); a naive eager PyTorch step launches those, plus casts and copies, as kernels of "
        "their own (the live probe counts about 51 per layer): a model with more kernels per layer "
        "runs them as small elementwise kernels of no work of their own. w = written, r = read, "
        "el = elements per token.",
        "  ",
    )
    return "\n".join(out)


def format_bucket_section(model: ModelConfig, hw: HardwareConfig, max_batch: int = 256) -> str:
    from sim.buckets.report import format_layout_comparison  # only this section needs it

    return "(3) Bucket layouts: padding waste against pinned graph memory\n\n" + format_layout_comparison(
        model, hw, max_batch=max_batch
    )


def full_report(model: ModelConfig, hw: HardwareConfig, title: str = "", batches=POWERS_OF_TWO) -> str:
    parts = [title] if title else []
    parts += [
        format_sweep_table(model, hw, batches),
        format_fusion_table(model),
        format_bucket_section(model, hw),
    ]
    return "\n\n".join(parts) + "\n"
