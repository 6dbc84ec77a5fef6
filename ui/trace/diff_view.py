"""The before/after diff on the "Your trace" tab: the trace picked (before) against the one it is compared
with (after), by kernel family, and which kernels disappeared, merged or appeared (`core.trace.diff`)."""

from __future__ import annotations

import streamlit as st

from core.trace import TraceReport
from core.trace.diff import (
    CHANGES,
    MERGED_RULE,
    Tally,
    TraceKernels,
    change_text,
    count_text,
    diff,
    table_rows,
    trace_kernels,
    us_text,
)
from ui.charts import format_us
from ui.common import plain
from ui.tables import Column, show_table

_TITLES = {
    "disappeared": "Disappeared",
    "merged": "Merged into fused kernels",
    "appeared": "Appeared",
    "fewer": "Ran fewer times",
    "more": "Ran more times",
}


def _kernels(report: TraceReport) -> TraceKernels:
    """The trace's kernels per step, cached on the report (a few hundred names: small)."""
    cached = report.__dict__.get("_trace_kernels")
    if cached is None:
        cached = trace_kernels(report)
        object.__setattr__(report, "_trace_kernels", cached)
    return cached


def _row(name: str, before: Tally, after: Tally, gpu: bool) -> dict:
    change = after.minus(before)
    return {
        "family": name,
        "kernels before": count_text(before.count),
        "after": count_text(after.count),
        "change": change_text(change.count, count_text),
        "GPU µs before": us_text(before.gpu_us) if gpu else "—",
        "GPU µs after": us_text(after.gpu_us) if gpu else "—",
        "GPU change": change_text(change.gpu_us) if gpu else "—",
        "host µs before": us_text(before.host_us),
        "host µs after": us_text(after.host_us),
        "host change": change_text(change.host_us),
    }


def show_diff(before_title: str, before: TraceReport, after_title: str, after: TraceReport) -> None:
    found = diff(_kernels(before), _kernels(after))
    b, a = found.before, found.after
    st.subheader("Before → after, by kernel family")
    faster = (
        f" The median step as traced: {format_us(b.step_us)} before, {format_us(a.step_us)} after "
        f"({found.speedup:.2f}× as fast)."
        if found.speedup is not None
        else ""
    )
    st.caption(
        f"Before: **{plain(before_title)}** ({b.steps} steps); after: **{plain(after_title)}** ({a.steps} steps). "
        "Per step: the median over each trace's steps. Host time is that of the kernels' launches as traced "
        "(the profiler adds to each), each launch counted once; kernels a CUDA graph replays have no launch of "
        "their own, so the graph launches are a row of their own." + faster
    )
    rows = [_row(*row) for row in table_rows(found)]
    with st.container(key="tr_diff"):
        show_table(
            rows,
            {k: Column(k, numeric=k != "family") for k in rows[0]} if rows else None,
            key="tr_diff_families",
        )
        if not found.kernels:
            st.caption("The same kernels, as many times per step, in both traces.")
        for change in CHANGES:
            kernels = found.changed(change)
            if not kernels:
                continue
            title = f"**{_TITLES[change]}** ({len(kernels)})"
            if change == "merged":
                title += f" · into {len(found.fused)} fused kernels that appeared"
            st.markdown(title)
            show_table(
                [
                    {
                        "kernel": k.name,
                        "family": k.family,
                        "per step before": count_text(k.before.count),
                        "after": count_text(k.after.count),
                        "GPU µs before": us_text(k.before.gpu_us),
                        "GPU µs after": us_text(k.after.gpu_us),
                    }
                    for k in kernels
                ],
                {
                    "kernel": Column("kernel", long=True),
                    "family": Column("family"),
                    **{
                        k: Column(k, numeric=True)
                        for k in ("per step before", "after", "GPU µs before", "GPU µs after")
                    },
                },
                key=f"tr_diff_{change}",
                height=282,
            )
        if found.changed("merged"):
            st.caption(plain(MERGED_RULE[0].upper() + MERGED_RULE[1:]) + ".")
