"""The probe tab's tables: every mode at one batch, the run's bandwidth and floor, graph
captures and correctness checks."""

from __future__ import annotations

import streamlit as st

from core.probe_result import MODES
from ui.charts import format_us
from ui.common import plain


def modes_table(result, batch: int) -> None:
    base = result.run("eager", batch)
    rows = []
    for mode in MODES:
        r = result.run(mode, batch)
        if r is None:
            continue
        rows.append(
            {
                "mode": mode,
                "kernels / step": r.kernels_per_step,
                "kernels / layer": r.kernels_per_layer,
                "step p10 (µs)": r.step_us_p10,
                "step median (µs)": r.step_us_median,
                "step p90 (µs)": r.step_us_p90,
                "host enqueue (µs)": r.enqueue_us_median,
                "CPU launch, profiled (µs)": r.cpu_launch_us,
                "GPU busy (µs)": r.gpu_busy_us,
                "GPU utilisation %": 100 * r.utilisation,
                "bound by": r.bound_by,
                "vs eager": (base.step_us_median / r.step_us_median) if base else None,
                "× weight-read floor": r.step_us_median / result.weight_floor_us,
                "graph bucket": str(r.bucket)
                if r.bucket is not None
                else ("above the largest: eager" if r.eager_fallback else "—"),
            }
        )
    st.dataframe(
        rows,
        hide_index=True,
        width="stretch",
        column_config={
            k: st.column_config.NumberColumn(format="%.1f")
            for k in (
                "step p10 (µs)",
                "step median (µs)",
                "step p90 (µs)",
                "host enqueue (µs)",
                "CPU launch, profiled (µs)",
                "GPU busy (µs)",
                "GPU utilisation %",
            )
        }
        | {
            "vs eager": st.column_config.NumberColumn(format="%.2f×"),
            "× weight-read floor": st.column_config.NumberColumn(format="%.2f×"),
        },
    )
    st.caption(
        "Host enqueue: the host's time to submit one step, median, without the profiler. CPU launch, "
        "profiled: the same from the profiled step drawn above, which the profiler slows down."
    )


def run_facts(result) -> None:
    bw, floor, fg = st.columns(3)
    bw.metric(
        "HBM copy bandwidth",
        f"{result.hbm_copy_GBps:,.0f} GB/s",
        help="A large device-to-device copy, bytes read plus bytes written per second.",
    )
    floor.metric(
        "Weight-read floor",
        format_us(result.weight_floor_us),
        help="Bytes of weights one decode step must read, over the copy bandwidth: no step can be faster.",
    )
    best = result.run("fused+graph", 1)
    fg.metric(
        "fused+graph at batch 1",
        f"{best.step_us_median / result.weight_floor_us:.2f}× the floor" if best else "not measured",
    )
    caps, checks = st.columns(2, gap="large")
    with caps:
        st.markdown("**Captured graphs**")
        if result.captures:
            st.dataframe(
                _capture_rows(result.captures),
                hide_index=True,
                width="stretch",
                height="auto" if len(result.captures) <= 16 else 360,
            )
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
            st.dataframe(
                [
                    {"check": name, "passed": bool(c.get("passed")), "detail": str(c.get("detail", ""))}
                    for name, c in result.checks.items()
                ],
                hide_index=True,
                width="stretch",
                column_config={"detail": st.column_config.TextColumn(width="large")},
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
        row[f"graph{variant} (MiB)"] = round(c["graph_mem_bytes"] / 2**20, 2)
    return [rows[b] for b in sorted(rows)]
