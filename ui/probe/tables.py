"""The probe tab's tables: every mode at one batch (and the Hugging Face reference at it), what the fused
kernels merge, the run's bandwidth, matrix rate and floor, graph captures and correctness checks."""

from __future__ import annotations

import streamlit as st

from core.step_plan import BASELINE, FUSED_GRAPH, GRAPH, MODES
from core.timeline import CPU_BOUND, GPU_BOUND
from ui.charts import format_us
from ui.common import gpu_counts, plain
from ui.host_index import SPREAD_SENTENCE
from ui.probe_results import fallback_note
from ui.tables import Column, show_table

# The modes table's columns: key -> heading and help (the heading's tooltip). Short headings that wrap keep all of
# it on the page at 1400 px (ui/tables.py).
MODE_COLUMNS = {
    "mode": Column("mode"),
    "kernels / step": Column(
        "kernels", help="GPU kernels in the profiled step (copies and memsets apart).", numeric=True
    ),
    "copies, memsets / step": Column(
        "copies, memsets",
        help="GPU copies and memsets in the profiled step: GPU work that is not a kernel ('in the count': the "
        "Hugging Face reference's file counts its kernels, copies and memsets as one figure).",
        numeric=True,
    ),
    "kernels / layer": Column("/ layer", "{:g}", "Kernels per decoder layer."),
    "step median (µs)": Column("median µs", help="Median step time over the measured steps (CUDA events)."),
    "step p10–p90 (µs)": Column(
        "p10–p90 µs", help="10th and 90th percentile step times.", numeric=True, wrap=True
    ),
    "back to back (µs)": Column(
        "back to back µs",
        help="Per-step time with the steps enqueued back to back: the host prepares the next step while the GPU "
        "runs this one, as an engine that samples on the GPU does. The median starts each step on an idle GPU.",
    ),
    "back to back p10–p90 (µs)": Column(
        "p10–p90 µs",
        help="10th and 90th percentile of the back-to-back steps (files from before the probe kept it: none).",
        numeric=True,
        wrap=True,
    ),
    "tokens/s": Column(
        "tokens/s",
        "{:,.0f}",
        "Tokens a second, one per sequence a step: the batch over the back-to-back step (the median where the run "
        "has no back-to-back timing).",
    ),
    "host enqueue (µs)": Column(
        "enqueue µs", help="The host's time to submit one step, median, without the profiler."
    ),
    "enqueue p10–p90 (µs)": Column(
        "p10–p90 µs",
        help="10th and 90th percentile of the host's enqueue times (files from before the probe kept it: none).",
        numeric=True,
        wrap=True,
    ),
    "CPU launch, profiled (µs)": Column(
        "launch µs, profiled",
        help="The host's launch time in the profiled step drawn above, which the profiler slows down.",
    ),
    "GPU busy (µs)": Column("GPU busy µs", help="Union of the profiled step's kernel intervals."),
    "GPU utilisation %": Column("GPU util. %", "{:.0f}", "GPU busy / median step time."),
    "bound by": Column(
        "bound by",
        help="Whichever side needs longer without the profiler: the host's enqueue time or the GPU's busy time.",
    ),
    "vs eager": Column("vs eager", "{:.2f}×", "Median eager step time at this batch / this mode's."),
    "× floor": Column(
        "× floor",
        "{:.2f}×",
        "Median step time / the floor at this batch: the larger of the bytes the step must read (weights, the KV "
        "cache of every row at the run's context) over the measured copy bandwidth and its FLOPs over the measured "
        "bf16 matrix rate.",
    ),
    "HBM used (GB/s)": Column("HBM GB/s", "{:,.0f}", "Bytes the step must read / its median time."),
    "graph bucket": Column(
        "graph bucket",
        help="The captured graph replayed (padded up to it), or what ran instead where none did.",
    ),
}


def throughput_us(run) -> float:
    """The step time a decode loop sees: back to back where the run timed it, else the median."""
    return run.step_us_back_to_back or run.step_us_median


def throughput_spread(run) -> tuple[float, float] | None:
    """(p10, p90) of the step `throughput_us` reads: the back-to-back steps' where the run timed them back to back
    (None where its file kept no spread of them: older files), else the median step's."""
    if run.step_us_back_to_back:
        low, high = run.step_us_back_to_back_p10, run.step_us_back_to_back_p90
        return (low, high) if low is not None and high is not None else None
    return run.step_us_p10, run.step_us_p90


def spread_statistic(result) -> str:
    """Which statistic the batch axis draws and what its bars span, in words (`throughput_us`, `throughput_spread`)."""
    runs = [*result.runs, *(result.reference.runs if result.reference is not None else ())]
    if not any(r.step_us_back_to_back for r in runs):
        return "each point is the median step, its bar the steps' p10–p90"
    text = (
        "each point is the median step back to back (the median step where the run did not time it so), its bar "
        "their p10–p90"
    )
    if any(throughput_spread(r) is None for r in runs):
        text += (
            "; this run's file kept no spread of its back-to-back steps (an older file), so those have no bar"
        )
    return text


def _span(low, high) -> str | None:
    """'7,210 – 8,105': a p10–p90 cell, or None where the file kept no spread."""
    return f"{low:,.0f} – {high:,.0f}" if low is not None and high is not None else None


def _bucket_cell(result, r) -> str:
    if r.bucket is not None:
        return str(r.bucket)
    note = fallback_note(result, r)
    return f"none: {note}" if note else "—"


def modes_table(result, batch: int) -> None:
    base = result.run(BASELINE.name, batch)
    runs = [r for r in (result.run(mode, batch) for mode in MODES) if r is not None]
    columns = dict(MODE_COLUMNS)
    every = [*runs, *(r for r in (result.reference.runs if result.reference else ()) if r.batch == batch)]
    if all(r.step_us_back_to_back is None for r in runs):
        # Runs recorded before the probe timed steps back to back: no column of empty cells.
        columns.pop("back to back (µs)")
    for spread, low in (
        ("back to back p10–p90 (µs)", "step_us_back_to_back_p10"),
        ("enqueue p10–p90 (µs)", "enqueue_us_p10"),
    ):
        if all(getattr(r, low) is None for r in every):  # files from before the spread was kept
            columns.pop(spread)
    rows = []
    for r in runs:
        untraced = r.untraced_metrics()  # the row's one source: no profiler
        counts = gpu_counts(r.timeline)
        row = {
            "mode": r.mode,
            "kernels / step": counts["kernels"],
            "copies, memsets / step": counts["copies"] + counts["memsets"],
            "kernels / layer": r.kernels_per_layer,
            "step median (µs)": r.step_us_median,
            "step p10–p90 (µs)": f"{r.step_us_p10:,.0f} – {r.step_us_p90:,.0f}",
            "back to back (µs)": r.step_us_back_to_back,
            "back to back p10–p90 (µs)": _span(r.step_us_back_to_back_p10, r.step_us_back_to_back_p90),
            "tokens/s": r.batch * 1e6 / throughput_us(r),
            "host enqueue (µs)": r.enqueue_us_median,
            "enqueue p10–p90 (µs)": _span(r.enqueue_us_p10, r.enqueue_us_p90),
            "CPU launch, profiled (µs)": r.cpu_launch_us,
            "GPU busy (µs)": r.gpu_busy_us,
            "GPU utilisation %": 100 * untraced.utilisation,
            "bound by": untraced.bound_by,
            "vs eager": (base.step_us_median / r.step_us_median) if base else None,
            "× floor": result.times_floor(r),
            "HBM used (GB/s)": result.hbm_used_GBps(r),
            "graph bucket": _bucket_cell(result, r),
            "_faded": r.eager_fallback,
        }
        rows.append(row)
    rows += _reference_rows(result, batch, columns, base)
    show_table(rows, columns, key="pr_modes", faded=lambda row: row.get("_faded", False))
    fallbacks = [r for r in runs if r.eager_fallback]
    st.caption(
        f"{SPREAD_SENTENCE}: every time here is the median of the run's steps, its p10–p90 beside it. "
        "Hover a heading for what it measures. Host enqueue: the host's time to submit one step, median, without "
        "the profiler; launch, profiled: the same in the profiled step drawn above, which the profiler slows down."
        + (
            " Back to back: the same steps enqueued with no wait between them, so the host's work for one hides "
            "under the GPU's work on the last; tokens/s is read from it."
            if "back to back (µs)" in columns
            else ""
        )
        + (
            " Grey rows are the reference, and runs that fell back to other kernels (their bucket cell says which)."
            if fallbacks or result.reference is not None
            else ""
        )
    )


REFERENCE_LABEL = "HF {kind} (ref.)"


def _reference_rows(result, batch: int, columns: dict, base) -> list[dict]:
    """The Hugging Face reference's rows at this batch, in the modes table's columns (blank where it has none).
    Its file gives one count of GPU work per step (kernels, copies and memsets together), written as such."""
    reference = result.reference
    if reference is None or not reference.runs:
        return []
    rows = []
    for r in reference.runs:
        if r.batch != batch:
            continue
        row = dict.fromkeys(columns)
        row.update(
            {
                "mode": REFERENCE_LABEL.format(kind=r.mode),
                "kernels / step": r.kernels_per_step,
                "copies, memsets / step": "in the count",  # the reference's file counts its GPU work once
                "kernels / layer": r.kernels_per_layer,
                "step median (µs)": r.step_us_median,
                "step p10–p90 (µs)": f"{r.step_us_p10:,.0f} – {r.step_us_p90:,.0f}",
                "tokens/s": r.batch * 1e6 / throughput_us(r),
                "host enqueue (µs)": r.enqueue_us_median,
                "CPU launch, profiled (µs)": r.cpu_launch_us,
                "GPU busy (µs)": r.gpu_busy_us,
                "GPU utilisation %": 100 * min(r.gpu_busy_us, r.step_us_median) / r.step_us_median,
                "bound by": CPU_BOUND
                if (r.enqueue_us_median or r.cpu_launch_us) > r.gpu_busy_us
                else GPU_BOUND,
                "vs eager": (base.step_us_median / r.step_us_median) if base else None,
                "× floor": r.step_us_median / result.floor_us(batch),
                "HBM used (GB/s)": result.read_bytes(batch) / (r.step_us_median * 1e3),
                "graph bucket": "one graph of its step" if r.mode == GRAPH.name else "—",
                "_faded": True,
            }
        )
        if "back to back (µs)" in columns:
            row["back to back (µs)"] = r.step_us_back_to_back
        for key, low, high in (
            ("back to back p10–p90 (µs)", r.step_us_back_to_back_p10, r.step_us_back_to_back_p90),
            ("enqueue p10–p90 (µs)", r.enqueue_us_p10, r.enqueue_us_p90),
        ):
            if key in columns:
                row[key] = _span(low, high)
        rows.append(row)
    return rows


def reference_note(result) -> str | None:
    """What the reference rows are, from the file (None where the run has no reference)."""
    reference = result.reference
    if reference is None:
        return None
    if reference.skipped:
        return f"No Hugging Face reference in this run: {reference.skipped}"
    errors = f" It could not measure: {'; '.join(reference.errors)}." if reference.errors else ""
    return (
        f"Reference rows: {reference.name} (transformers {reference.transformers}) of this run's shape with random "
        f"bf16 weights, {reference.attention} attention, a {reference.cache}, measured in the same run on the "
        "same GPU, eager and as one CUDA graph of its eager step: what naive eager code of this shape costs, "
        f"not a target. Its static cache's attention reads every one of the cache's positions.{errors}"
    )


def fusion_table(result) -> None:
    """What each fused kernel merged, and the unfused layer's kernels, as the run's file names them."""
    fusions = result.model.get("fusions")
    unfused = result.model.get("unfused_kernels")
    if not isinstance(fusions, list) or not fusions:
        st.caption("This run's file does not say what its fused kernels merge.")
        return
    rows = [
        {
            "fused kernel": str(f.get("kernel", "")),
            "merges": str(f.get("merges", "")),
            "ops merged": f.get("ops_merged"),
            "intermediates kept on chip": f.get("intermediates_removed"),
            "how": str(f.get("how", "")),
        }
        for f in fusions
        if isinstance(f, dict)
    ]
    show_table(rows, key="pr_fusions")
    if isinstance(unfused, list) and unfused:
        pdl = result.settings.get("pdl_max_rows")
        above = f"Above {pdl} rows" if isinstance(pdl, int) else "At large batch"
        st.caption(
            f"The unfused layer runs {len(unfused)} kernels, one per op ({', '.join(map(str, unfused))}), and the "
            f"fused layer {len(rows)}; each adds the attention's split merge at small batch. {above} the fused "
            "step's GEMMs are cuBLAS's, with the norm in the attention and in one SwiGLU kernel: six a layer."
        )


def run_facts(result) -> None:
    bw, rate, floor, fg = st.columns(4)
    bw.metric(
        "HBM copy bandwidth",
        f"{result.hbm_copy_GBps:,.0f} GB/s",
        help="A large device-to-device copy, bytes read plus bytes written per second.",
    )
    rate.metric(
        "bf16 matrix rate",
        f"{result.matmul_TFLOPs:,.0f} TFLOP/s" if result.matmul_TFLOPs else "not measured",
        help="One large bf16 matrix product, measured in the run: the compute side of the floor.",
    )
    floor.metric(
        "Floor at batch 1",
        format_us(result.floor_us(1)),
        help=f"The larger of the bytes one batch-1 step must read ({result.read_bytes(1) / 1e9:.2f} GB: the weights "
        "plus the KV cache at the run's context) over the copy bandwidth and its FLOPs over the matrix rate: no "
        "step can be faster.",
    )
    best = result.run(FUSED_GRAPH.name, 1)
    fg.metric(
        f"{FUSED_GRAPH.name} at batch 1",
        f"{result.times_floor(best):.2f}× the floor" if best else "not measured",
    )
    caps, checks = st.columns(2, gap="large")
    with caps:
        st.markdown("**Captured graphs**")
        if result.captures:
            show_table(_capture_rows(result.captures), key="pr_captures")
            total = sum(float(c["capture_ms"]) for c in result.captures)
            st.caption(
                f"{len(result.captures)} graphs captured in {total / 1000:.2f} s in all; graph memory is "
                "what each capture added to the shared pool."
            )
        else:
            st.caption("No graphs were captured in this run.")
    with checks:
        st.markdown("**Correctness checks**")
        if result.checks:
            show_table(
                [
                    {"check": name, "passed": bool(c.get("passed")), "detail": str(c.get("detail", ""))}
                    for name, c in result.checks.items()
                ],
                key="pr_checks",
            )
            (st.success if result.all_checks_passed else st.error)(
                "All checks passed." if result.all_checks_passed else "Some checks failed: see the table."
            )
        else:
            st.caption("This run recorded no checks.")
    for err in result.errors:
        st.warning(f"During this run: {plain(err)}")


def _capture_rows(captures) -> list[dict]:
    """One row per bucket, a column pair per variant (unfused, fused) where the run captured both."""
    rows = {}
    for c in captures:
        row = rows.setdefault(int(c["bucket"]), {"bucket": int(c["bucket"])})
        variant = f" {c['variant']}" if c.get("variant") else ""
        row[f"capture{variant} (ms)"] = round(float(c["capture_ms"]), 1)
        row[f"graph{variant} (MiB)"] = round(c["graph_mem_bytes"] / 2**20, 1)
    return [rows[b] for b in sorted(rows)]
