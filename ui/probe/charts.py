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


def step_split_figure(split: dict, step_us: float, host_name: str, counted: str = "") -> go.Figure:
    """One stacked bar: floor | kernel boundaries | the GPU's wait for the host (µs); `host_name` names the
    last part as the page's text does (`ui.probe.tab.host_wait_phrase`), `counted` what the boundaries are between
    ('101 kernels, 1 memset')."""
    parts = (
        (
            "floor: the bytes at copy bandwidth, or the FLOPs at the matrix rate",
            split["floor_us"],
            FLOOR_COLOUR,
            "",
        ),
        (
            f"kernel boundaries: {split['kernels']} × {split['per_kernel_us']:.2f} µs"
            + (f" (between {counted})" if counted else ""),
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


def batch_axis_figure(result, fallback_note=None) -> go.Figure:
    """Every mode across the run's batches, two panels on log-log axes: the time per output token (the step's
    time, back to back where the run has it: a decode loop's pace) and the tokens a second it gives, with the roofline
    floor and, where the run measured it, the Hugging Face reference of the same shape on the same GPU.

    A run that fell back to other kernels (`eager_fallback`: the persistent kernel above the rows it runs) is drawn
    as what it is: a hollow marker, joined by a dashed segment, named by `fallback_note(run)` in its hover. The batch
    where a mode's tokens/s saturates (`ui.throughput`, over its own steps) is a diamond on the right panel.

    Each point's bar spans the p10-p90 of the step it draws (`ui.probe.tables.throughput_spread`), where the file
    kept it: host-bound steps move with the host."""
    from core.probe_result import REFERENCE_KINDS
    from core.step_plan import FUSED_GRAPH, MODES
    from ui.probe.tables import throughput_spread, throughput_us
    from ui.throughput import saturation, tokens_per_s

    traces = []
    for name, mode in MODES.items():
        runs = sorted((r for r in result.runs if r.mode == name), key=lambda r: r.batch)
        if not runs:
            continue
        style = {"color": mode.colour, "width": 2.5 if mode is FUSED_GRAPH else 1.5}
        us = [throughput_us(r) for r in runs]
        notes = [(fallback_note(r) if fallback_note else None) or "" for r in runs]
        spread = [throughput_spread(r) for r in runs]
        traces += _mode_lines(mode.title, [r.batch for r in runs], us, notes, style, spread)
    batches = list(result.batches)
    floor = {"color": "#111", "dash": "longdash", "width": 1.5}
    traces += _panel_pair("floor (roofline)", batches, [result.floor_us(b) for b in batches], floor, None)
    reference = result.reference
    if reference is not None and reference.runs:
        for kind, dash in zip(REFERENCE_KINDS, ("dot", "dash")):
            runs = sorted((r for r in reference.runs if r.mode == kind), key=lambda r: r.batch)
            if runs:
                us = [throughput_us(r) for r in runs]
                traces += _panel_pair(
                    f"Hugging Face {kind}, same shape, same GPU",
                    [r.batch for r in runs],
                    us,
                    {"color": "#8c6d31", "dash": dash, "width": 2},
                    saturation([r.batch for r in runs], tokens_per_s([r.batch for r in runs], us)),
                    spread=[throughput_spread(r) for r in runs],
                )
    fig = go.Figure(traces)
    axis = {"type": "log", "tickvals": batches, "title": "batch size (log scale)"}
    fig.update_layout(
        height=420,
        margin={"l": 60, "r": 10, "t": 30, "b": 40},
        xaxis={**axis, "domain": [0.0, 0.46]},
        xaxis2={**axis, "domain": [0.54, 1.0], "anchor": "y2"},
        yaxis={"type": "log", "title": "ms per output token = per step (log scale)", "dtick": 1},
        yaxis2={"type": "log", "title": "tokens/s, one GPU (log scale)", "anchor": "x2", "dtick": 1},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        hovermode="closest",
    )
    return fig


def _mode_lines(title: str, batches, us, notes, style: dict, spread=None) -> list[go.Scatter]:
    """A mode's own steps (solid, filled markers) and its fallbacks (dashed from its last own step, hollow markers),
    on both panels; the tokens/s line marks where the mode's own steps saturate. `spread`: each step's (p10, p90)
    or None."""
    from ui.throughput import saturation, tokens_per_s

    own = [i for i, n in enumerate(notes) if not n]
    fell = [i for i, n in enumerate(notes) if n]
    pick = lambda seq, idx: [seq[i] for i in idx]  # noqa: E731
    spread = spread or [None] * len(batches)
    out = _panel_pair(
        title,
        pick(batches, own),
        pick(us, own),
        style,
        saturation(pick(batches, own), tokens_per_s(pick(batches, own), pick(us, own))) if own else None,
        spread=pick(spread, own),
    )
    if fell:
        # From the mode's last own step, so the line reads on; every point on it is a fallback.
        joined = ([own[-1]] if own and own[-1] < fell[0] else []) + fell
        out += _panel_pair(
            f"{title}: fallback",
            pick(batches, joined),
            pick(us, joined),
            {**style, "dash": "dash"},
            None,
            hollow=[i in fell for i in joined],
            notes=pick(notes, joined),
            # The joining point is the own line's, bar and all: drawn there once.
            spread=[spread[i] if i in fell else None for i in joined],
        )
    return out


def spread_bars(values, spread, convert) -> dict | None:
    """Plotly error bars from each point's (p10, p90) step µs, drawn in the panel's unit by `convert(batch index,
    µs)`; None where no point has a spread (a point without one gets no bar)."""
    if not any(spread):
        return None
    up, down = [], []
    for i, (value, span) in enumerate(zip(values, spread)):
        if span is None:
            up.append(None), down.append(None)
            continue
        ends = sorted((convert(i, span[0]), convert(i, span[1])))
        up.append(max(ends[1] - value, 0.0)), down.append(max(value - ends[0], 0.0))
    return {"type": "data", "symmetric": False, "array": up, "arrayminus": down, "thickness": 1.2, "width": 4}


def _spread_text(spread, convert, fmt: str, unit: str) -> list[str]:
    """Each point's spread for its hover ('<br>p10–p90: 7.2–8.1 ms'), low to high in the panel's unit."""
    out = []
    for i, span in enumerate(spread):
        if span is None:
            out.append("")
            continue
        low, high = sorted((convert(i, span[0]), convert(i, span[1])))
        out.append(f"<br>p10–p90: {low:{fmt}}–{high:{fmt}} {unit}")
    return out


def _panel_pair(
    name, batches, us, line: dict, saturates, hollow=None, notes=None, spread=None
) -> list[go.Scatter]:
    """One series on both panels: ms per output token (left) and tokens/s (right, a diamond at `saturates`);
    `spread`: each step's (p10, p90) µs or None, drawn as a bar on both."""
    from ui.throughput import ms_per_token, tokens_per_s

    ms, rate = ms_per_token(us), tokens_per_s(batches, us)
    hollow = hollow or [False] * len(batches)
    symbols = ["circle-open" if h else "circle" for h in hollow]
    why = [f"<br>{n}" if n else "" for n in (notes or [""] * len(batches))]
    spread = spread or [None] * len(batches)
    to_ms = lambda i, step_us: float(ms_per_token(step_us))  # noqa: E731
    to_rate = lambda i, step_us: float(tokens_per_s(batches[i], step_us))  # noqa: E731
    common = {"mode": "lines+markers", "name": name, "legendgroup": name, "line": line}
    left = go.Scatter(
        x=batches,
        y=ms,
        customdata=list(zip(rate, why, _spread_text(spread, to_ms, ".3g", "ms"))),
        marker={"symbol": symbols, "size": 8, "color": line["color"]},
        error_y=spread_bars(ms, spread, to_ms),
        hovertemplate="%{fullData.name}<br>batch %{x}: %{y:.3g} ms per output token, %{customdata[0]:,.0f} "
        "tokens/s%{customdata[2]}%{customdata[1]}<extra></extra>",
        **common,
    )
    right_symbols = ["diamond" if b == saturates else s for b, s in zip(batches, symbols)]
    right = go.Scatter(
        x=batches,
        y=rate,
        xaxis="x2",
        yaxis="y2",
        showlegend=False,
        customdata=list(zip(ms, why, _spread_text(spread, to_rate, ",.0f", "tokens/s"))),
        marker={
            "symbol": right_symbols,
            "size": [13 if b == saturates else 8 for b in batches],
            "color": line["color"],
        },
        error_y=spread_bars(rate, spread, to_rate),
        hovertemplate="%{fullData.name}<br>batch %{x}: %{y:,.0f} tokens/s, %{customdata[0]:.3g} ms per output "
        "token%{customdata[2]}%{customdata[1]}<extra></extra>",
        **common,
    )
    return [left, right]
