"""Plotly figures of the probe tab beyond the lanes: what a graphed step is made of.

`step_split_figure` draws `ProbeResult.step_split` (the formula lives there, in core): one
horizontal bar, the step's median time cut into the floor, the kernel boundaries and the
host's launch and input copies. `mark_profiler_stretch` and `share_time_axis` adjust lanes
figures made by `ui.charts.lanes_figure`.
"""

from __future__ import annotations

import plotly.graph_objects as go

from ui.charts import CPU_COLOUR, GPU_COLOUR, IDLE_COLOUR, format_us

FLOOR_COLOUR = GPU_COLOUR
BOUNDARY_COLOUR = "rgba(150, 150, 150, 0.85)"
HOST_COLOUR = CPU_COLOUR


def step_split_figure(split: dict, step_us: float, host_name: str) -> go.Figure:
    """One stacked bar: floor | kernel boundaries | the GPU's wait for the host (µs); `host_name` names the
    last part as the page's text does (`ui.probe.tab.host_wait_phrase`)."""
    parts = (
        (
            "floor: the bytes at copy bandwidth, or the FLOPs at the matrix rate",
            split["floor_us"],
            FLOOR_COLOUR,
            "",
        ),
        (
            f"kernel boundaries: {split['kernels']} × {split['per_kernel_us']:.2f} µs",
            split["boundaries_us"],
            BOUNDARY_COLOUR,
            "",
        ),
        (host_name, split["host_us"], HOST_COLOUR, ""),
    )
    traces = [
        {
            "type": "bar",
            "orientation": "h",
            "y": ["step"],
            "x": [value],
            "name": name,
            "marker": {"color": colour, "line": {"color": "white", "width": 1}},
            "text": [format_us(value)],
            "textposition": "inside",
            "insidetextanchor": "middle",
            "hovertemplate": f"{name}<br>%{{x:.1f}} µs<extra></extra>",
        }
        for name, value, colour, _ in parts
    ]
    layout = {
        "barmode": "stack",
        "height": 170,
        "margin": {"l": 50, "r": 10, "t": 40, "b": 40},
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.05, "x": 0, "traceorder": "normal"},
        "xaxis": {
            "type": "linear",
            "title": {"text": f"µs of the {format_us(step_us)} median step"},
            "range": [0, step_us * 1.01],
            "showgrid": True,
            "zeroline": False,
        },
        "yaxis": {"fixedrange": True, "showticklabels": False},
        "font": {"family": "Source Sans Pro, sans-serif", "size": 13, "color": "#31333F"},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
    }
    return go.Figure({"data": traces, "layout": layout})


def share_time_axis(figures, x_max: float) -> None:
    """Give lanes figures one time axis, 0..x_max µs, so unequal steps look unequal."""
    for fig in figures:
        fig.update_xaxes(range=[0, x_max * 1.02], autorange=False)


def mark_profiler_stretch(fig: go.Figure, unprofiled_us: float, profiled_us: float) -> None:
    """Wash out the part of a graph replay's host launch that exists only under the profiler.

    The profiled step's one CPU interval (input copies + graph launch) runs from 0 to
    `profiled_us`; unprofiled, the same work takes `unprofiled_us` (median host enqueue time).
    The CPU lane is the figure's first category (y = 0).
    """
    if not profiled_us > unprofiled_us > 0:
        return
    fig.add_shape(
        type="rect",
        xref="x",
        yref="y",
        x0=unprofiled_us,
        x1=profiled_us,
        y0=-0.45,
        y1=1.45,
        fillcolor=IDLE_COLOUR,
        opacity=0.5,
        line={"color": "#31333F", "width": 1, "dash": "dot"},
        layer="above",
    )
    fig.add_annotation(
        x=(unprofiled_us + profiled_us) / 2,
        y=-0.5,
        xref="x",
        yref="y",
        yanchor="bottom",
        showarrow=False,
        font={"size": 12},
        text=f"profiler's stretch: {format_us(profiled_us - unprofiled_us)}",
        bgcolor="rgba(255, 255, 255, 0.8)",
    )


def batch_axis_figure(result) -> go.Figure:
    """Every mode's step time across the run's batches (back to back where the run has it), the roofline floor,
    and the Hugging Face reference of the same shape on the same GPU where the run measured it; log-log."""
    from core.probe_result import REFERENCE_KINDS
    from core.step_plan import FUSED_GRAPH, MODES

    traces = []
    for name, mode in MODES.items():
        runs = sorted((r for r in result.runs if r.mode == name), key=lambda r: r.batch)
        if not runs:
            continue
        traces.append(
            _batch_line(
                [r.batch for r in runs],
                [r.step_us_back_to_back or r.step_us_median for r in runs],
                mode.title,
                {"color": mode.colour, "width": 2.5 if mode is FUSED_GRAPH else 1.5},
            )
        )
    batches = list(result.batches)
    traces.append(
        _batch_line(
            batches,
            [result.floor_us(b) for b in batches],
            "floor (roofline)",
            {"color": "#111", "dash": "longdash"},
        )
    )
    reference = result.reference
    if reference is not None and reference.runs:
        for kind, dash in zip(REFERENCE_KINDS, ("dot", "dash")):
            runs = sorted((r for r in reference.runs if r.mode == kind), key=lambda r: r.batch)
            if runs:
                traces.append(
                    _batch_line(
                        [r.batch for r in runs],
                        [r.step_us_back_to_back or r.step_us_median for r in runs],
                        f"Hugging Face {kind}, same shape, same GPU",
                        {"color": "#8c6d31", "dash": dash, "width": 2},
                    )
                )
    fig = go.Figure(traces)
    fig.update_layout(
        height=380,
        margin={"l": 60, "r": 10, "t": 10, "b": 40},
        xaxis={"type": "log", "title": "batch size (log scale)", "tickvals": batches},
        yaxis={"type": "log", "title": "µs per step (log scale)", "dtick": 1},
        legend={"orientation": "v", "x": 1.01, "y": 1},
        hovermode="closest",
    )
    return fig


def _batch_line(x, y, name: str, line: dict) -> go.Scatter:
    return go.Scatter(
        x=x,
        y=y,
        name=name,
        mode="lines+markers",
        line=line,
        hovertemplate="%{fullData.name}<br>batch %{x}: %{y:,.0f} µs<extra></extra>",
    )
