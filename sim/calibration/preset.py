"""A calibration as a simulator preset ("probe decoder on <GPU>").

The simulator (`sim.step.schedule`) runs its own kernels (4 a layer fused, 11 unfused) with one
latency, one bandwidth, one launch cost and one replay cost. A preset follows the run's
fused kernels at batch 1 (the fully optimised step, the page's headline): the Triton
GEMV's latency (less what PDL hides in a graph) and bandwidth, its matrix rate from the
tensor-core GEMM, and folds the rest into the simulator's figures so that its fused
steps take the calibrated times:

- host cost per launch: the probe's host time for a fused step (as the fit predicts it:
  its launches, each kind at its share of a Triton GEMM's) spread over the simulator's launches;
- graph replay: the fitted cost at the probe's node count;
- attention: an effective context (context × GEMV bandwidth / attention bandwidth).

On another host (`host_index`, µs a torch launch), the launch and replay costs are the fit's carried to
that host's speed by `Calibration.on_host` and predicted again; the GPU's figures stay as fitted.

numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from core.step_plan import FUSED_GRAPH, Mode, StepPlan
from sim.calibration.fit import Calibration, calibrate
from sim.calibration.model import NAMES, graph_cost, model_from_result, points_from_result
from sim.calibration.report import format_param, summary
from sim.config import HardwareConfig, ModelConfig, Preset
from sim.step.kernels import step_kernels
from sim.step.schedule import simulate_step


def calibrated_preset(result, cal: Calibration | None = None, host_index: float | None = None) -> Preset:
    """The preset of `result`'s calibration (fitted here without leave-one-out when not given); with
    `host_index` (µs a torch launch), its host costs on that host (`Calibration.on_host`; unchanged where the
    run did not measure its own host)."""
    cal = cal or calibrate(result, loo=False)
    moved = bool(host_index and cal.host_index and host_index != cal.host_index)
    theta = cal.on_host(host_index) if moved else cal.theta
    p = dict(zip(NAMES, theta.tolist()))
    predicted = cal.simulator.predict(theta) if moved else cal.predicted
    # The probe's fused kernels: the steps of the rows the Simulator's fusion toggle selects (eager, or replayed).
    fused = [pt for pt in cal.points if pt.mode.toggles and pt.mode.fused] or list(cal.points)
    smallest = min(fused, key=lambda pt: (pt.batch, not pt.replays))
    # The probe's own fused layer: as many kernels a layer as it measured at that batch (5 or 6, not the
    # chapter's 4), so the preset's step launches what the run's did.
    measured = result.run(smallest.mode.name, smallest.batch) if hasattr(result, "run") else None
    per_layer = round(measured.kernels_per_layer) if measured is not None else cal.model.fused_per_layer
    counted = replace(cal.model, fused_per_layer=min(max(per_layer, 1), cal.model.unfused_per_layer))
    sim_kernels = len(step_kernels(counted, FUSED_GRAPH))
    # Each figure from one step at the smallest batch, named as such: the fused eager step's host time, the fused
    # graph's node count (a median over batches would be no step's: 178 kernels where batch 1 runs 194).
    points = list(cal.points)
    eager_at = min(
        (i for i, pt in enumerate(points) if pt in fused and not pt.replays),
        key=lambda i: points[i].batch,
        default=None,
    )
    graph = min((pt for pt in fused if pt.replays), key=lambda pt: pt.batch, default=smallest)
    nodes = float(graph.kernels)
    if (
        eager_at is not None
    ):  # the fused step's host time as fitted (Triton launches, split merges at their share)
        eager_kernels, eager_host = points[eager_at].kernels, float(predicted[eager_at, 1])
        host_source = (
            f"the probe's {points[eager_at].mode.title} step at batch {points[eager_at].batch}, {eager_host:.0f} µs of host time for its "
            f"{eager_kernels} kernels"
        )
    else:
        eager_kernels, eager_host = smallest.kernels, p["triton_launch_us"] * smallest.kernels
        host_source = (
            f"this run has no eager fused step: the held {p['triton_launch_us']:.1f} µs a Triton launch "
            f"(no point constrains it) × the {eager_kernels} kernels of its {smallest.mode.title} step"
        )
    launch_us = eager_host / sim_kernels
    replay_us = float(graph_cost(p).host_us(nodes))
    tflops = p["tile_gemm_wide_TFLOPs"] if cal.fitted.get("tile_gemm_wide_TFLOPs") else 700.0
    context = max(1, round(cal.model.context_len * p["gemv_GBps"] / p["attention_GBps"]))
    device = cal.device.replace("NVIDIA ", "")
    hw = HardwareConfig(
        name=f"{device}, calibrated to its fused kernels"
        + (f", on a host of {host_index:.2f} µs a torch launch" if moved else ""),
        hbm_GBps=p["gemv_GBps"],
        matrix_TFLOPs=tflops,
        min_kernel_us=0.0,
        eager_launch_us=launch_us,
        graph_launch_us=replay_us,
        graph_node_gap_us=0.0,  # the batch-1 fused kernels chain with PDL: their overlap is in the latency
    )
    model = replace(counted, name=f"probe-{cal.model.name}", context_len=context)
    # The latency: what makes the simulator's fused batch-1 step as busy as the calibrated one (PDL's
    # overlap included).
    target_busy = float(cal.predicted[list(cal.points).index(smallest), 2])  # GPU: as fitted, on any host
    bare = simulate_step(model, hw, StepPlan(FUSED_GRAPH, smallest.batch)).metrics
    latency = max((target_busy - bare.gpu_busy_us) / sim_kernels, 0.0)
    hw = replace(hw, min_kernel_us=latency)
    if cal.fitted.get("persistent_latency_us"):  # the run has a persistent kernel: its barriers, per phase
        hw = replace(hw, barrier_us=p["persistent_latency_us"] / sim_kernels)
    note = _note(
        cal, p, smallest, graph, sim_kernels, latency, context, launch_us, host_source, replay_us, nodes
    )
    if moved:
        note += "\n" + _host_note(cal.host_index, host_index)
    return Preset(
        key=f"calibrated-{device.lower().replace(' ', '-')}",
        title=f"probe decoder on {device}",
        model=model,
        hardware=hw,
        note=note,
    )


FITTED_SHOWN = (
    "gemv_latency_us",
    "pdl_hidden_share",
    "gemv_GBps",
    "attention_GBps",
    "triton_launch_us",
    "replay_us",
    "replay_per_node_us",
    "node_gap_us",
)


def _host_note(own: float, index: float) -> str:
    """What carrying the preset to another host changed, and what it left."""
    return (
        f"- On a host of {index:.2f} µs a torch launch (the run's: {own:.2f} µs): the launch and replay costs "
        f"above are the fit's scaled by {index / own:.3f}, that host's index over the run's (Calibration.on_host); "
        "the GPU's figures are the run's."
    )


def _note(cal, p, smallest, graph, sim_kernels, latency, context, launch_us, host_source, replay_us, nodes):
    """Why each of the preset's figures is what it is, each named by the one step it was read from (`p`: the
    parameters, on the host the preset is for)."""
    fitted = "; ".join(format_param(n, p[n]) for n in FITTED_SHOWN)
    lines = [
        f"Fitted to a probe run on {cal.device}, following its fused (Triton) kernels at batch 1: {fitted}.",
        f"- {launch_us:.1f} µs per launch: {host_source} ({p['triton_launch_us']:.1f} µs a Triton GEMM launch, "
        f"the attention's {p['attention_launch_share']:.2f} × one, a split merge's {p['merge_launch_share']:.2f} ×, "
        f"the step's start {p['start_launch_share']:.2f} ×), spread over the simulator's fused step's "
        f"{sim_kernels} launches.",
        f"- {replay_us:.1f} µs per graph replay: the fitted replay cost at the {nodes:.0f} nodes of the probe's "
        f"{graph.mode.title} step at batch {graph.batch}; no node gap (the probe's PDL chain overlaps its "
        f"kernels; between plain kernels it is {p['node_gap_us']:.2f} µs).",
        f"- {latency:.2f} µs latency per kernel: what makes the simulator's fused step ({sim_kernels} kernels) as "
        f"busy as the probe's {smallest.mode.title} step at batch {smallest.batch} ({smallest.kernels} kernels; "
        f"the GEMV's fitted {p['gemv_latency_us']:.2f} µs, of which PDL hides {p['pdl_hidden_share'] * p['gemv_latency_us']:.2f} µs inside "
        "a graph).",
        f"- Attention over an effective {context} tokens (the probe's {cal.model.context_len}), since the "
        f"attention reaches {p['attention_GBps']:.0f} GB/s where the GEMV reaches {p['gemv_GBps']:.0f}.",
        "- Not represented: above batch 4 the probe's tensor-core GEMM streams weights slower than its GEMV "
        f"({p['tile_gemm_latency_us']:.1f} µs latency a kernel), so larger fused batches run slower than here; "
        "and the unfused path's own costs: with fusion off, the simulator runs the preset's unfused kernels a "
        "layer on these figures, which is not the probe's eager step (its one-op kernels, each at its own launch "
        "cost).",
    ]
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class PresetCheck:
    """A static preset's figures, uncalibrated, against the steps of a run of the same decoder: each step the
    Simulator's toggles can draw, as (mode, batch, measured µs, the preset's µs)."""

    preset: Preset
    steps: tuple[tuple[Mode, int, float, float], ...]

    @property
    def errors(self) -> np.ndarray:
        """The preset's error at each step: predicted / measured - 1."""
        return np.array([pred / meas - 1 for _, _, meas, pred in self.steps])

    def summary(self) -> dict:
        """The fit's own summary of these errors (`report.summary`): the median, the worst point beside it."""
        return summary(
            {(mode.name, batch): float(e) for (mode, batch, *_), e in zip(self.steps, self.errors)}
        )


def same_decoder(a: ModelConfig, b: ModelConfig) -> bool:
    """Whether two models are one decoder's shape (layers, widths, heads, vocabulary, element size)."""
    fields = ("n_layers", "hidden", "n_heads", "n_kv_heads", "ffn", "vocab", "bytes_per_el")
    return all(getattr(a, f) == getattr(b, f) for f in fields)


def check_preset(preset: Preset, result) -> PresetCheck | None:
    """How far `preset`'s own figures (no fit) put `result`'s steps, on the run's decoder at the run's context;
    None where the run is of another decoder or has no step the Simulator's toggles draw."""
    model = model_from_result(result)
    if not same_decoder(preset.model, model):
        return None
    on_run = replace(preset.model, context_len=model.context_len)
    steps = []
    for pt in points_from_result(result):
        if not pt.mode.toggles or pt.runs is not pt.mode or not pt.step_us > 0:
            continue  # a mode the toggles do not select, or a step that ran another mode's kernels
        plan = StepPlan(pt.mode, pt.batch)
        if plan.replays != pt.replays:
            continue  # the run replayed where the preset's buckets would not, or the reverse
        predicted = simulate_step(on_run, preset.hardware, plan).metrics.step_us
        steps.append((pt.mode, pt.batch, float(pt.step_us), float(predicted)))
    return PresetCheck(preset, tuple(steps)) if steps else None
