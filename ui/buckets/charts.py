"""The Bucketing tab's figures: padded rows per layout along the batch axis, and memory against step time."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from sim.buckets import layouts as bk
from sim.buckets import report as br
from sim.buckets import workloads as wl

COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
OPTIMUM_COLOUR = "#d62728"


def round_step(top: float, ticks: int = 4) -> float:
    """A 1-2-5 tick spacing that puts about `ticks` round ticks on an axis from 0 to `top`."""
    if not top > 0:
        return 1.0
    raw = top / ticks
    power = 10.0 ** np.floor(np.log10(raw))
    return float(next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw))


def padding_figure(layouts: dict, workload: wl.Workload, max_batch: int, optimum=None) -> go.Figure:
    """Padded rows at each batch size per layout, bucket markers, eager regions, the workload's shape."""
    top = int(max(max_batch, workload.batch_sizes.max()))
    x = np.arange(1, top + 1)
    fig = go.Figure()
    share = np.zeros(top)
    share[workload.batch_sizes - 1] = workload.weights
    fig.add_trace(
        go.Scatter(
            x=x,
            y=100 * share,
            name="workload: share of steps",
            mode="lines",
            yaxis="y2",
            line=dict(color="rgba(120,120,120,0.6)", width=1, shape="hvh"),
            fill="tozeroy",
            fillcolor="rgba(120,120,120,0.15)",
            hovertemplate="batch %{x}: %{y:.2f}% of steps<extra></extra>",
        )
    )
    entries = list(layouts.items()) + ([(br.OPTIMAL_NAME, optimum)] if optimum else [])
    for i, (name, lay) in enumerate(entries):
        colour = OPTIMUM_COLOUR if name == br.OPTIMAL_NAME else COLOURS[i % len(COLOURS)]
        _add_layout(fig, name, lay, x, top, colour)
    fig.update_layout(
        height=420,
        margin=dict(l=10, r=10, t=30, b=10),
        hovermode="closest",
        barmode="overlay",
        xaxis=dict(title="real batch size", range=[0.5, top + 0.5]),
        yaxis=dict(title="padded rows (bucket − batch)", rangemode="tozero"),
        # The workload's shape sits in the lower third, under the sawtooth lines.
        yaxis2=dict(
            title="share of steps (%)",
            overlaying="y",
            side="right",
            showgrid=False,
            range=[0, 3 * 100 * float(share.max())],
            tickmode="linear",
            tick0=0,
            dtick=round_step(3 * 100 * float(share.max())),
        ),  # round ticks, not 0.175, 0.351
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
    )
    return fig


def _add_layout(fig: go.Figure, name: str, lay, x: np.ndarray, top: int, colour: str) -> None:
    """One layout on the padding chart: its padded rows at each batch, its buckets marked on the axis, and the
    batches above its largest bucket shaded (no graph: the step runs eager)."""
    pad = bk.padded_rows(lay, x).astype(float)
    eager = x > lay[-1]
    pad[eager] = np.nan  # no graph there: nothing is padded, the step runs eager
    fig.add_trace(
        go.Scatter(
            x=x,
            y=pad,
            name=name,
            mode="lines",
            line=dict(color=colour, width=1.5),
            legendgroup=name,
            connectgaps=False,
            customdata=bk.bucket_sizes_for(lay, x),
            hovertemplate=f"{name}<br>batch %{{x}} → bucket %{{customdata}}"
            "<br>%{y} padded rows<extra></extra>",
        )
    )
    marks = np.asarray([b for b in lay if b <= top])
    tick = dict(symbol="line-ns-open", size=10, color=colour, line=dict(width=2))
    fig.add_trace(
        go.Scatter(
            x=marks,
            y=np.zeros(len(marks)),
            mode="markers",
            legendgroup=name,
            showlegend=False,
            marker=tick,
            hovertemplate=f"{name}: bucket %{{x}}<extra></extra>",
        )
    )
    if lay[-1] < top:
        fig.add_vrect(
            x0=lay[-1] + 0.5,
            x1=top + 0.5,
            fillcolor=colour,
            opacity=0.08,
            line_width=0,
            annotation_text=f"{name}: eager above {lay[-1]}",
            annotation_position="top left",
            annotation_font_size=10,
        )


def tradeoff_figure(stats: list, budget_mib: float) -> go.Figure:
    """Each layout as a point: pinned graph memory against expected step time, the budget as a line."""
    fig = go.Figure()
    for i, s in enumerate(stats):
        optimum = s.is_optimum
        fig.add_trace(
            go.Scatter(
                x=[s.memory_bytes / br.MIB],
                y=[s.step_us],
                mode="markers+text",
                name=s.name,
                text=[s.name],
                textposition="top center",
                marker=dict(
                    size=14 if optimum else 10,
                    symbol="star" if optimum else "circle",
                    color=OPTIMUM_COLOUR if optimum else COLOURS[i % len(COLOURS)],
                ),
                customdata=[[s.graphs, s.padded_rows]],
                hovertemplate=f"{s.name}<br>%{{x:.1f}} MiB, %{{customdata[0]}} graphs<br>step %{{y:.1f}} µs"
                "<br>%{customdata[1]:.2f} padded rows/step<extra></extra>",
            )
        )
    fig.add_vline(
        x=budget_mib, line_dash="dash", line_color="grey", annotation_text=f"budget {budget_mib:g} MiB"
    )
    fig.update_layout(
        height=360,
        margin=dict(l=10, r=10, t=30, b=10),
        showlegend=False,
        xaxis=dict(title="pinned graph memory (MiB)", rangemode="tozero"),
        yaxis=dict(title="expected step time (µs)"),
    )
    return fig
