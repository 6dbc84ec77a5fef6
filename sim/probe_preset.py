"""A calibration as a simulator preset ("probe decoder on <GPU>").

The calibrated simulator (`sim.probe_sim`) has figures the page's simulator (`sim.schedule`)
lacks: a launch cost and a bandwidth per kernel family, a graph-replay cost that grows with
the node count, a KV-traffic factor per attention, and the probe's own kernel count. The
simulator has one launch cost, one bandwidth, one replay cost, no KV factor, and 4 kernels
a layer fused (11 unfused). So a preset follows one family -- the fused (Triton) kernels
where the run has them, the step an engine ships, else the unfused ones -- and folds the
rest into its own figures, so that its steps of that family take the calibrated times:

- host cost per launch: the probe's host time for a whole step spread over the
  simulator's launches (fitted cost per launch × probe kernels / simulator kernels);
- graph replay: the fitted cost at the probe's node count;
- KV traffic: an effective context length (context × the fitted factor).

The other family runs on the same figures, which the probe's does not; the note says so.
numpy only.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sim.calibrate import Calibration, calibrate, format_param
from sim.config import PRESETS, HardwareConfig, Preset
from sim.kernels import step_kernels
from sim.probe_sim import FIT_MODES, NAMES, _family
from sim.schedule import StepSettings, simulate_step

UNCALIBRATED = PRESETS["probe-0.5b-h200"]


def calibrated_preset(result, cal: Calibration | None = None) -> Preset:
    """The preset of `result`'s calibration (fitted here without leave-one-out when not given)."""
    cal = cal or calibrate(result, loo=False)
    p = cal.params
    fused = any(pt.fused for pt in cal.points)
    bandwidth, kv_factor, launch = _family(p, fused)
    sim_kernels = len(step_kernels(cal.model, fused))
    eager = [pt.kernels for pt in cal.points if pt.fused == fused and not pt.graphs]
    graph = [pt.kernels for pt in cal.points if pt.fused == fused and pt.graphs]
    probe_kernels = float(np.median(eager or graph))
    nodes = float(np.median(graph or eager))
    launch_us = launch * probe_kernels / sim_kernels
    replay_us = p["graph_launch_us"] + p["graph_launch_per_node_us"] * nodes
    context = max(1, round(cal.model.context_len * kv_factor))
    # A rate no run constrains (no kernel was compute-bound) is left at the uncalibrated preset's.
    constrained = cal.fitted["matrix_TFLOPs"]
    tflops = p["matrix_TFLOPs"] if constrained else UNCALIBRATED.hardware.matrix_TFLOPs
    device = cal.device.replace("NVIDIA ", "")
    family = "fused" if fused else "unfused"
    hw = HardwareConfig(
        name=f"{device}, calibrated to its {family} kernels",
        hbm_GBps=bandwidth,
        matrix_TFLOPs=tflops,
        min_kernel_us=p["min_kernel_us"],
        eager_launch_us=launch_us,
        graph_launch_us=replay_us,
        graph_node_gap_us=p["graph_node_gap_us"],
    )
    facts = {
        "family": family, "launch": launch, "probe_kernels": probe_kernels, "sim_kernels": sim_kernels,
        "nodes": nodes, "kv_factor": kv_factor, "context": context, "tflops": tflops,
        "constrained": constrained,
    }  # fmt: skip
    model = replace(cal.model, name=f"probe-{cal.model.name}", context_len=context)
    facts["worst"] = max(abs(e) for e in family_errors(cal, model, hw))
    return Preset(
        key=f"calibrated-{device.lower().replace(' ', '-')}",
        title=f"probe decoder on {device}",
        model=model,
        hardware=hw,
        note=_note(cal, hw, facts),
    )


def family_errors(cal: Calibration, model, hw: HardwareConfig) -> list[float]:
    """Step time of the preset over the calibrated prediction, - 1, at each measured point of its family."""
    fused = any(pt.fused for pt in cal.points)
    out = []
    for pt, predicted in zip(cal.points, cal.predicted[:, 0]):
        if pt.fused == fused:
            settings = StepSettings(batch=pt.batch, fusion=fused, graphs=pt.graphs)
            out.append(simulate_step(model, hw, settings).metrics.step_us / predicted - 1)
    return out


def _note(cal: Calibration, hw: HardwareConfig, f: dict) -> str:
    """Where each figure comes from, and what the simulator cannot represent."""
    p = cal.params
    fused = f["family"] == "fused"
    kind, other = (
        ("fused (Triton)", "unfused (PyTorch)") if fused else ("unfused (PyTorch)", "fused (Triton)")
    )
    other_bw, _, other_launch = _family(p, not fused)
    counts = ", ".join(f"{m} {_span(pt.kernels for pt in cal.points if pt.mode == m)}" for m in FIT_MODES
                       if any(pt.mode == m for pt in cal.points))  # fmt: skip
    on, off = ("on", "off") if fused else ("off", "on")
    lines = [
        f"Fitted to a probe run on {cal.device}: "
        + "; ".join(format_param(n, p[n]) for n in NAMES if n != "matrix_TFLOPs" or f["constrained"])
        + ".",
        (
            "The simulator has one launch cost, one bandwidth, one graph-replay cost, no KV-traffic "
            f"factor and its own kernel count, so this preset follows the probe's {kind} kernels "
            f"(Kernel fusion {on}):"
        ),
        (
            f"- {hw.eager_launch_us:.1f} µs per launch: the fitted {f['launch']:.1f} µs per {kind} "
            f"launch × the probe's {f['probe_kernels']:.0f} kernels a step / the simulator's "
            f"{f['sim_kernels']}. The host time of a step is the probe's; 'Kernels / step' and the "
            "lanes are the simulator's."
        ),
        (
            f"- {hw.graph_launch_us:.1f} µs per graph replay: {p['graph_launch_us']:.1f} µs + "
            f"{p['graph_launch_per_node_us']:.3g} µs × {f['nodes']:.0f} nodes, the probe's graph."
        ),
        (
            f"- {hw.hbm_GBps:.0f} GB/s, the {kind} kernels' bandwidth. The attention moves "
            f"{f['kv_factor']:.2f}× the KV-cache bytes the simulator counts, so the context is an "
            f"effective {f['context']} tokens (the probe's is {cal.model.context_len})."
        ),
        (
            "- Not represented: the probe's extra small kernels on the GPU (a few % of its busy time), "
            "kernel tiling that changes with the batch size, and step-to-step noise."
        ),
        (
            f"With fusion {on}, step times are within {100 * f['worst']:.0f} % of the Calibration tab's "
            f"predictions at the measured batch sizes. With fusion {off}, the simulator runs its own kernels on these same figures, "
            f"but the probe's {other} kernels reach {other_bw:.0f} GB/s at {other_launch:.1f} µs of "
            f"host time per launch ({counts} kernels a step): that mode, and 'vs unoptimised', are "
            "not the probe's."
        ),
    ]
    if not f["constrained"]:
        lines.append(
            f"No kernel was compute-bound, so the matrix rate is the uncalibrated preset's "
            f"{f['tflops']:.0f} TFLOP/s."
        )
    return "\n".join(lines)


def _span(values) -> str:
    """'162' or '162–194'."""
    values = sorted(values)
    return f"{values[0]}" if values[0] == values[-1] else f"{values[0]}–{values[-1]}"
