"""The Simulator tab's sections that do not depend on the batch: the batch sweep and the fusion table.

They are drawn on full reruns only; a batch move reruns just the step section above them
(`ui.simulator.tab`), so nothing here may mention the current batch.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from core.step_plan import BASELINE, CHAPTER_BUCKETS, FUSED, Mode, mode, modes
from sim.config import BATCH_RANGE, HardwareConfig, ModelConfig
from sim.step.kernels import step_kernels
from sim.step.ops import MODEL_LEVEL, fusion_table
from sim.step.schedule import Sweep, sweep
from ui.charts import sweep_figure
from ui.throughput import SATURATION_RULE, ms_per_token, saturation, tokens_per_s

SWEEP_BATCHES = np.arange(BATCH_RANGE[0], BATCH_RANGE[1] + 1)


@st.cache_data(max_entries=64, show_spinner=False)
def swept(model: ModelConfig, hw: HardwareConfig, among: tuple[Mode, ...], tp: int = 1) -> Sweep:
    """The sweep of `among` (the modes table's modelled modes, passed in so the cache is keyed by them) on `tp`
    GPUs."""
    return sweep(model, hw, SWEEP_BATCHES, among=among, tp=tp)


@st.cache_resource(max_entries=64, show_spinner=False)
def sweep_chart(model: ModelConfig, hw: HardwareConfig, among: tuple[Mode, ...], current: str, tp: int = 1):
    """The sweep figure, built once per setting: Plotly's validation costs ~50 ms a rerun.

    Shared, not copied, between sessions: nothing mutates a figure after it is built.
    """
    return sweep_figure(swept(model, hw, among, tp), current=current, gpus=tp)


@st.cache_data(max_entries=64, show_spinner=False)
def sweep_csv(model: ModelConfig, hw: HardwareConfig, among: tuple[Mode, ...], tp: int = 1) -> str:
    result = swept(model, hw, among, tp)
    header = ["batch"]
    columns = [result.batches]
    for name, series in result.series.items():
        name = mode(name).title.replace(" + ", "_").replace(" ", "_")
        for field in ("step_us", "cpu_launch_us", "gpu_busy_us", "utilisation"):
            header.append(f"{name}_{field}")
            columns.append(getattr(series, field))
        header += [f"{name}_tokens_per_s", f"{name}_tokens_per_s_per_gpu"]
        rate = tokens_per_s(result.batches, series.step_us)
        columns += [rate, rate / tp]
    rows = np.column_stack(columns)
    lines = [",".join(header)]
    lines += [",".join([str(int(r[0]))] + [f"{v:.4f}" for v in r[1:]]) for r in rows]
    return "\n".join(lines) + "\n"


@st.cache_data(max_entries=64, show_spinner=False)
def fusion_rows(model: ModelConfig) -> list[dict]:
    rows = []
    for row in fusion_table(model):
        rows.append(
            {
                "Fused kernel": row["fused_kernel"],
                "Replaces": " + ".join(row["merges"]),
                "Launches saved / layer": row["launches_saved_per_layer"],
                "Stays on chip": "; ".join(row["kept_on_chip"]) or "—",
                "Bytes saved / token / layer": round(row["bytes_saved_per_token"]),
            }
        )
    return rows


def saturation_rows(result: Sweep, tp: int) -> list[dict]:
    """Per mode: the batch where its tokens/s saturates (`ui.throughput`, over the batches it runs as itself), and
    its tokens/s (all GPUs and per GPU) and time per output token there, or at the largest batch where it does not."""
    rows = []
    for name, s in result.series.items():
        replayed = np.asarray(s.replayed)
        own = replayed if replayed.any() else np.ones(len(result.batches), bool)
        batches, rate = result.batches[own], tokens_per_s(result.batches, s.step_us)[own]
        at = saturation(batches, rate)
        where = int(np.flatnonzero(batches == at)[0]) if at is not None else len(batches) - 1
        rows.append(
            {
                "mode": mode(name).title,
                "saturates at batch": at,
                "largest batch": int(batches[-1]),
                "tokens/s": float(rate[where]),
                "tokens/s per GPU": float(rate[where]) / tp,
                "ms per output token": float(ms_per_token(s.step_us[own][where])),
            }
        )
    return rows


def throughput_sentence(rows: list[dict], tp: int) -> str:
    """'fusion + graphs saturates at batch 160: 38,685 tokens/s, 4.14 ms per output token; …', from the rows."""
    per_gpu = f" on {tp} GPUs" if tp > 1 else " on one GPU"
    parts = []
    for r in rows:
        rate = f"{r['tokens/s']:,.0f} tokens/s" + (
            f" ({r['tokens/s per GPU']:,.0f} per GPU)" if tp > 1 else ""
        )
        if r["saturates at batch"] is None:
            parts.append(
                f"{r['mode']} does not saturate by batch {r['largest batch']} ({rate}, "
                f"{r['ms per output token']:.2f} ms per output token there)"
            )
        else:
            parts.append(
                f"{r['mode']} saturates at batch {r['saturates at batch']} ({rate}, "
                f"{r['ms per output token']:.2f} ms per output token)"
            )
    return f"Throughput{per_gpu}: " + "; ".join(parts) + "."


def sweep_view(model: ModelConfig, hw: HardwareConfig, current: Mode, tp: int = 1) -> None:
    st.subheader("Batch sweep: where launches stop mattering, and where throughput stops growing")
    among = modes(modelled=True)
    result = swept(model, hw, among, tp)
    st.markdown(
        "**Read the solid line** (µs per step, which is also each sequence's time per output token) against the "
        "purple one (tokens/s, right axis): a bigger batch raises tokens/s at the cost of every sequence's wait "
        f"for its next token. {SATURATION_RULE[0].upper()}{SATURATION_RULE[1:]} (◆)."
    )
    st.plotly_chart(
        sweep_chart(model, hw, among, current.name, tp),
        width="stretch",
        key="sim_sweep",
        config={"displaylogo": False},
    )
    st.caption(throughput_sentence(saturation_rows(result, tp), tp))
    crossings = []
    largest = max(result.buckets) if result.buckets else None
    for name, cross in result.crossover.items():
        graphs = mode(name).graphs and largest is not None
        top = min(largest, BATCH_RANGE[1]) if graphs else BATCH_RANGE[1]
        where = f"from batch {cross}" if cross is not None else f"not within 1–{top}"
        fallback = result.fallback_cpu_bound[name]
        if graphs and fallback is not None:
            where += f" up to {largest}; above it the step runs eagerly, CPU-bound from {fallback}"
        crossings.append(f"{mode(name).title}: GPU-bound {where}")
    st.caption(
        "The panel marked (current) is the mode your settings pick. "
        "Step time is the solid line, CPU launch time dashed, GPU time dotted. Left of the green "
        "line the step is launch-bound; right of it the kernels are long enough to hide the launches. "
        + "; ".join(crossings)
        + f". CUDA graphs are captured for {', '.join(map(str, CHAPTER_BUCKETS))}: "
        "between buckets the batch is padded up (the steps in the curves), and above the largest one "
        "the step runs eagerly again."
    )
    st.download_button(
        "Download the sweep as CSV",
        data=lambda: sweep_csv(model, hw, among, tp),
        file_name=f"launch-bound-sweep-{model.name}-{model.n_layers}L.csv",
        mime="text/csv",
        on_click="ignore",
        icon=":material/download:",
        key="sim_sweep_download",
    )


def fusion_view(model: ModelConfig) -> None:
    st.subheader(f"Kernel fusion: {model.unfused_per_layer} → {model.fused_per_layer} kernels per layer")
    unfused = len(step_kernels(model, BASELINE))
    fused = len(step_kernels(model, FUSED))
    st.dataframe(fusion_rows(model), hide_index=True, width="stretch")
    st.markdown("\n".join(f"- **{row['fused_kernel']}**: {row['why']}" for row in fusion_table(model)))
    st.caption(
        f"With {model.n_layers} layers: {unfused} kernels per step unfused, {fused} fused. Both counts "
        f"include the {len(MODEL_LEVEL)} kernels outside the layers ({', '.join(MODEL_LEVEL)}). Bytes "
        "saved are intermediate tensors that no longer travel to HBM and back, per token and layer; "
        "multiply by the batch for one step."
    )
