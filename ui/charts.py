"""Plotly figures for the simulator and the probe pages.

Every figure here draws a `core.timeline.Timeline` (or numbers derived from one), so
a simulated step and a measured step go through the same code and can be overlaid.

Lanes are horizontal bars on a linear microsecond axis (`base` = start, `x` =
duration), one trace per kind of interval. `px.timeline` is avoided on purpose: it
forces a date axis. Past a few thousand bars the browser slows down, so a whole
long step switches to one WebGL line-segment trace per kind, and past 20,000
intervals to time bins per lane whose shade is the share of the bin the lane is busy.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from core.step_plan import mode as mode_named
from core.timeline import Timeline

# How many launches the lanes show unless the whole step is asked for (the chapter shows 18).
FIRST_LAUNCHES = 18
# Above this many bars in one figure, draw segments with Scattergl instead of Bar.
MAX_BARS = 5000
# Above this many, a whole step is drawn as AGGREGATE_BINS time bins per lane (a bin is about a
# pixel on a wide screen): a 400k-kernel step would otherwise send 1.2 M points to the browser.
MAX_SEGMENTS = 20_000
AGGREGATE_BINS = 1200

# Bar colours are very slightly transparent on purpose: Plotly widens fully opaque bars
# to at least one pixel, so a whole step of sub-pixel kernels would paint the GPU lane
# solid and hide the bubbles; translucent bars are rounded instead, keeping the density.
CPU_COLOUR = "rgba(224, 123, 57, 0.97)"  # CPU building and submitting a launch
GPU_COLOUR = "rgba(58, 118, 176, 0.97)"  # GPU executing a kernel
IDLE_COLOUR = "rgba(150, 150, 150, 0.35)"  # GPU waiting: the bubbles
COMM_COLOUR = "rgba(44, 160, 44, 0.97)"  # GPU in a communication kernel (all-reduce, NCCL)
MEMCPY_COLOUR = "rgba(148, 103, 189, 0.97)"  # GPU copying memory
MEMSET_COLOUR = "rgba(140, 86, 75, 0.97)"  # GPU setting memory
STEP_COLOUR = "#222222"

KINDS = ("CPU launch", "GPU kernel", "communication", "memcpy", "memset", "idle")
KIND_COLOURS = dict(
    zip(KINDS, (CPU_COLOUR, GPU_COLOUR, COMM_COLOUR, MEMCPY_COLOUR, MEMSET_COLOUR, IDLE_COLOUR))
)
# core.timeline.GPU_KINDS -> the legend's name for it
_GPU_KIND = {"kernel": "GPU kernel", "communication": "communication", "memcpy": "memcpy", "memset": "memset"}


# -- lanes ---------------------------------------------------------------------
def _tags(steps: list[Timeline]) -> list[str]:
    """'' for one step; with an overlay, what tells each step's lanes apart (where it came from)."""
    if len(steps) == 1:
        return [""]
    tags = [step.source for step in steps]
    if tags[0] == tags[1]:
        # Two steps of the same kind (e.g. two simulations): their labels tell them apart.
        labels = [step.label for step in steps]
        distinct = all(labels) and labels[0] != labels[1]
        tags = labels if distinct else [f"{tag} {i + 1}" for i, tag in enumerate(tags)]
    return tags


def _step_lanes(step: Timeline, tag: str) -> tuple[dict, dict]:
    """({thread: CPU lane}, {stream: GPU lane}): 'CPU' and 'GPU' for a step on one thread and one
    stream; 'CPU · thread 2', 'GPU · stream 7' where it used more; each tagged with ' · tag'."""
    suffix = f" · {tag}" if tag else ""
    threads, streams = step.threads, step.streams
    cpu = {
        t: ("CPU" if len(threads) == 1 else f"CPU · thread {k + 1}") + suffix for k, t in enumerate(threads)
    }
    named = dict(step.stream_names)
    gpu = {
        s: (named.get(s) or ("GPU" if len(streams) == 1 else f"GPU · stream {s}")) + suffix for s in streams
    }
    return cpu, gpu


def _lane_of(ids: np.ndarray, lanes: dict) -> np.ndarray:
    out = np.empty(len(ids), dtype=object)
    for key, lane in lanes.items():
        out[ids == key] = lane
    return out


def _intervals(timeline: Timeline, cpu_lanes: dict, gpu_lanes: dict) -> dict[str, tuple]:
    """kind -> (lane of each interval, start, duration, names), for the kinds the step has.

    The idle bubbles (no stream busy) are drawn on every GPU lane.
    """
    out = {
        "CPU launch": (
            _lane_of(timeline.cpu_thread, cpu_lanes),
            timeline.cpu_start,
            timeline.cpu_dur,
            timeline.cpu_names,
        )
    }
    names = np.array(timeline.gpu_names, dtype=object)
    lanes = _lane_of(timeline.gpu_stream, gpu_lanes)
    kinds = timeline.gpu_kinds
    for kind, label in _GPU_KIND.items():
        rows = kinds == kind
        if rows.any() or kind == "kernel":  # a kind of its own only when the step has any
            out[label] = (lanes[rows], timeline.gpu_start[rows], timeline.gpu_dur[rows], tuple(names[rows]))
    idle_start, idle_dur = timeline.idle_intervals()
    every = list(gpu_lanes.values())
    out["idle"] = (
        np.repeat(np.array(every, dtype=object), len(idle_start)),
        np.tile(idle_start, len(every)),
        np.tile(idle_dur, len(every)),
        ("idle",) * (len(idle_start) * len(every)),
    )
    return out


def _hover(kind: str) -> str:
    return (
        "<b>%{customdata[0]}</b><br>start %{customdata[1]:,.2f} µs"
        "<br>duration %{customdata[2]:,.2f} µs<extra>" + kind + "</extra>"
    )


def _style(kind: str, faded: bool) -> dict:
    return {"colour": KIND_COLOURS[kind], "opacity": 0.55 if faded and kind != "idle" else 1.0}


def _bar_trace(kind, lane, start, dur, names, legend_name, faded) -> dict:
    style = _style(kind, faded)
    marker = {"color": style["colour"], "line": {"width": 0}}
    if kind == "idle":
        # Hatched, like the dashed bubbles in the chapter's diagram.
        marker["pattern"] = {"shape": "/", "fgcolor": "rgba(110, 110, 110, 0.6)", "size": 6}
    return {
        "type": "bar",
        "orientation": "h",
        "base": start,
        "x": dur,
        "y": lane if isinstance(lane, np.ndarray) else np.full(len(start), lane, dtype=object),
        "name": legend_name,
        "marker": marker,
        "opacity": style["opacity"],
        "width": 0.62,
        "customdata": _custom(names, start, dur),
        "hovertemplate": _hover(kind),
        "textposition": "none",
    }


def _text(name: str) -> str:
    # Hover labels understand a little HTML (<b>, <a href>): a name from a trace or file is shown as text.
    return name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _custom(names, start, dur) -> np.ndarray:
    custom = np.empty((len(start), 3), dtype=object)
    shown = {n: _text(n) for n in set(names)}
    custom[:, 0] = [shown[n] for n in names]
    custom[:, 1], custom[:, 2] = start, dur
    return custom


def _segment_trace(kind, lane, start, dur, names, legend_name, faded) -> dict:
    # One polyline with a break (None) after each interval: thousands of bars as one WebGL draw.
    n = len(start)
    xs = np.empty(3 * n, dtype=object)
    xs[0::3], xs[1::3], xs[2::3] = start, start + dur, None
    ys = np.empty(3 * n, dtype=object)
    ys[0::3], ys[1::3], ys[2::3] = lane, lane, None
    custom = np.empty((3 * n, 3), dtype=object)
    per_interval = _custom(names, start, dur)
    custom[0::3], custom[1::3] = per_interval, per_interval
    style = _style(kind, faded)
    return {
        "type": "scattergl",
        "x": xs,
        "y": ys,
        "mode": "lines",
        "name": legend_name,
        "line": {"color": style["colour"], "width": 16},
        "opacity": style["opacity"],
        "customdata": custom,
        "hovertemplate": _hover(kind),
        "connectgaps": False,
    }


def _union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals merged where they overlap, sorted (a lane's busy time, counted once)."""
    order = np.argsort(start, kind="stable")
    start, end = start[order], np.maximum.accumulate(end[order])
    new = np.ones(len(start), bool)
    new[1:] = start[1:] > end[:-1]
    last = np.append(np.flatnonzero(new)[1:] - 1, len(start) - 1)
    return start[new], end[last]


def _busy_per_bin(start: np.ndarray, end: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Busy time of a lane inside each bin, exactly: its cumulative busy time read at the bin edges."""
    if len(start) == 0:
        return np.zeros(len(edges) - 1)
    s, e = _union(start, end)
    done = np.cumsum(e - s)
    xp = np.column_stack([s, e]).ravel()
    fp = np.column_stack([done - (e - s), done]).ravel()
    return np.diff(np.interp(edges, xp, fp, left=0.0, right=float(done[-1])))


def _binned_traces(
    step: Timeline, cpu_lanes: dict, gpu_lanes: dict, suffix: str, faded: bool, bins: int = AGGREGATE_BINS
) -> list[dict]:
    """A long step as `bins` time bins per lane: each bar's opacity is the share of its bin the lane is
    busy, so density and bubbles read as in the bar view; stretches where the GPU is idle for a whole
    bin or more keep their hatched idle bars. Hover gives each bin's launches or kernels and busy share."""
    edges = np.linspace(0.0, step.step_us, bins + 1)
    width = float(edges[1] - edges[0]) or 1.0
    traces = []
    lanes = [
        ("CPU launch", lane, step.cpu_start[rows], step.cpu_end[rows], "launches")
        for thread, lane in cpu_lanes.items()
        for rows in [step.cpu_thread == thread]
    ] + [
        ("GPU kernel", lane, step.gpu_start[rows], step.gpu_end[rows], "kernels")
        for stream, lane in gpu_lanes.items()
        for rows in [step.gpu_stream == stream]
    ]
    for kind, lane, start, end, what in lanes:
        share = np.clip(_busy_per_bin(start, end, edges) / width, 0.0, 1.0)
        count = np.histogram(start, edges)[0]
        keep = share > 0
        names = [
            f"{n:,} {what} starting here; busy {100 * f:.0f}% of this bin"
            for n, f in zip(count[keep], share[keep])
        ]
        trace = _bar_trace(
            kind, lane, edges[:-1][keep], np.full(int(keep.sum()), width), names, kind + suffix, faded
        )
        # Never fully transparent: a bin with one short kernel must still show.
        trace["marker"]["opacity"] = np.maximum(share[keep], 0.12)
        trace["showlegend"] = lane == next(iter(cpu_lanes.values())) or lane == next(iter(gpu_lanes.values()))
        traces.append(trace)
    idle_start, idle_dur = step.idle_intervals()
    wide = idle_dur >= width
    for k, lane in enumerate(gpu_lanes.values()):
        trace = _bar_trace(
            "idle",
            lane,
            idle_start[wide],
            idle_dur[wide],
            ("idle",) * int(wide.sum()),
            "idle" + suffix,
            faded,
        )
        trace["showlegend"] = k == 0
        traces.append(trace)
    return traces


def _lanes_px(n_lanes: int) -> int:
    return 164 + 55 * n_lanes


def lanes_height(timeline: Timeline, *, whole_step: bool = False, first: int = FIRST_LAUNCHES) -> int:
    """The height in pixels of `lanes_figure(timeline)`: a placeholder this tall keeps the page from
    moving when the chart takes its place."""
    step = timeline if whole_step else timeline.first_launches(first)
    return _lanes_px(len(step.threads) + len(step.streams))


def lanes_figure(
    timeline: Timeline,
    overlay: Timeline | None = None,
    *,
    whole_step: bool = False,
    first: int = FIRST_LAUNCHES,
    title: str | None = None,
    max_bars: int = MAX_BARS,
    max_segments: int = MAX_SEGMENTS,
    tags: tuple[str, str] | None = None,
) -> go.Figure:
    """CPU and GPU lanes of one step (a lane per host thread and per CUDA stream where it used more
    than one); `overlay` adds a second step's lanes below.

    By default only the first `first` launches are drawn (the chapter's view), which is
    where the bubbles are visible; `whole_step=True` draws everything. `tags` names the two steps'
    lanes where the caller knows better than their sources and labels ('' leaves a step's lanes bare).
    """
    shown = [timeline] + ([overlay] if overlay is not None else [])
    if not whole_step:
        shown = [t.first_launches(first) for t in shown]
    lanes: list[str] = []
    groups = []
    for i, (step, tag) in enumerate(zip(shown, tags or _tags(shown))):
        cpu_lanes, gpu_lanes = _step_lanes(step, tag)
        lanes += [*cpu_lanes.values(), *gpu_lanes.values()]
        groups.append((step, cpu_lanes, gpu_lanes, tag, i == 1))

    total_bars = sum(
        len(s.cpu_start) + len(s.gpu_start) + len(s.idle_intervals()[0]) * len(g) for s, _, g, *_ in groups
    )  # launches + kernels + the idle stretches, drawn on every GPU lane
    make_trace = _segment_trace if total_bars > max_bars else _bar_trace
    binned = whole_step and total_bars > max_segments
    if binned and not title:
        title = f"{total_bars:,} intervals drawn as {AGGREGATE_BINS:,} time bins per lane; a bar's shade is how busy it is"

    traces = []
    for step, cpu_lanes, gpu_lanes, tag, faded in groups:
        suffix = f" · {tag}" if tag else ""
        if binned:
            traces += _binned_traces(step, cpu_lanes, gpu_lanes, suffix, faded)
            continue
        for kind, (lane, start, dur, names) in _intervals(step, cpu_lanes, gpu_lanes).items():
            traces.append(make_trace(kind, lane, start, dur, names, kind + suffix, faded))

    layout = _lanes_layout(lanes, title)
    if make_trace is _segment_trace and not binned:
        # Plotly draws no WebGL trace on a reversed category axis (every segment lands in one strip below
        # the last lane: Streamlit's plotly.js in Chromium): the lanes are listed bottom to top on a plain axis instead.
        layout["yaxis"].update(categoryarray=lanes[::-1], autorange=False, range=[-0.5, len(lanes) - 0.5])
    return _figure(traces, layout)


def _lanes_layout(lanes: list[str], title: str | None) -> dict:
    """The lanes chart's layout: a linear µs axis, one category a lane (CPU above GPU, top to bottom)."""
    # Margins that already fit the lane labels, the legend above and the axis below. Streamlit
    # mounts a new chart whenever the figure changes (every slider move), and a margin that
    # automargin has to grow makes Plotly draw everything a second time: ~50 ms per draw in
    # Chromium here, ~28 ms with these. Automargin stays on for a font wider than the estimate.
    longest = max(len(lane) for lane in lanes)
    margin = {"l": max(44, math.ceil(24 + 6.5 * longest)), "r": 10, "t": 50 + (30 if title else 0), "b": 48}
    layout = {
        "barmode": "overlay",
        "height": _lanes_px(len(lanes)),
        "margin": margin,
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        "dragmode": "zoom",
        "hovermode": "closest",
        "xaxis": {
            "type": "linear",
            "title": {"text": "µs from the start of the step"},
            "rangemode": "tozero",
            "showgrid": True,
            "zeroline": False,
        },
        # Lanes read top to bottom: CPU above GPU, the overlay's lanes below. Zoom is along time only.
        "yaxis": {
            "type": "category",
            "categoryorder": "array",
            "categoryarray": lanes,
            "autorange": "reversed",
            "fixedrange": True,
            "automargin": True,
        },
        # The page draws lanes with theme=None (Streamlit's theme costs ~40 ms of browser time on
        # every slider move), so the few styles that matter are set here.
        "font": {"family": "Source Sans Pro, sans-serif", "size": 13, "color": "#31333F"},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
    }
    if title:
        layout["title"] = {"text": title}
    return layout


def _figure(traces: list[dict], layout: dict) -> go.Figure:
    # One constructor call validates everything once; add_trace/update_* re-validate each
    # time and cost several times more, which matters on a page that redraws per slider move.
    return go.Figure({"data": traces, "layout": layout})


def format_us(us: float) -> str:
    """Microseconds as people read them: '12.3 µs', '850 µs', '1.73 ms', '224 ms', '38.5 s'."""
    if us >= 1e6:
        return f"{us / 1e6:.3g} s"
    if us >= 1e5:
        return f"{us / 1e3:.0f} ms"
    if us >= 1e4:
        return f"{us / 1e3:.1f} ms"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    if us >= 100:
        return f"{us:.0f} µs"
    return f"{us:.1f} µs"


# -- batch sweep -------------------------------------------------------------------
def _panel_domains(i: int, n: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """(x domain, y domain) of panel i of n: two columns, as many rows as it takes, top to bottom."""
    rows = -(-n // 2)
    gap = 0.12 if rows == 2 else 0.08
    height = (1.0 - gap * (rows - 1)) / rows
    row, col = divmod(i, 2)
    top = 1.0 - row * (height + gap)
    x = (0.0, 0.48) if col == 0 else (0.52, 1.0)
    return x, (round(max(top - height, 0.0), 6), round(top, 6))


_SWEEP_LINES = (
    ("step_us", "step time", STEP_COLOUR, "solid", 2.5),
    ("cpu_launch_us", "CPU launch time", CPU_COLOUR, "dash", 2),
    ("gpu_busy_us", "GPU time", GPU_COLOUR, "dot", 2.5),
)


THROUGHPUT_COLOUR = "#8e44ad"  # tokens/s, wherever it is drawn beside step times


def sweep_figure(sweep, *, current: str | None = None, batch: int | None = None, gpus: int = 1) -> go.Figure:
    """Step, CPU launch and GPU time against batch (log x), one panel per mode swept, and each mode's tokens/s on
    the panel's right axis with the batch where it saturates marked (`ui.throughput`); `gpus`: how many GPUs the
    swept step runs on (tokens/s per GPU in the hover).

    `sweep` is a `sim.step.schedule.Sweep` (or anything shaped like it): `.batches`, `.series` (mode name
    -> arrays `step_us`, `cpu_launch_us`, `gpu_busy_us` aligned with the batches) and
    `.crossover[name]`, the first GPU-bound batch or None. The panel of mode `current` marks `batch`.
    """
    x = np.asarray(sweep.batches)
    series = dict(sweep.series)
    n_panels = len(series)
    # Log time axis: launch costs (µs) and long-batch kernels (ms) both stay readable.
    values = np.concatenate(
        [np.asarray(getattr(s, k), float) for s in series.values() for k, *_ in _SWEEP_LINES]
    )
    values = values[values > 0]
    y_range = [float(np.log10(values.min() * 0.7)), float(np.log10(values.max() * 1.4))]
    ticks = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096) if x.min() <= b <= x.max()]
    traces, shapes, annotations, layout = [], [], [], {}
    for i, (key, data) in enumerate(series.items()):
        xa, ya = ("x", "y") if i == 0 else (f"x{i + 1}", f"y{i + 1}")
        x_dom, y_dom = _panel_domains(i, n_panels)
        x_axis, y_axis = _panel_axes(i, n_panels, x_dom, y_dom, ticks, y_range)
        layout["xaxis" if i == 0 else f"xaxis{i + 1}"] = x_axis
        layout["yaxis" if i == 0 else f"yaxis{i + 1}"] = y_axis
        name = mode_named(key).title
        annotations.append(
            {
                "xref": "paper",
                "yref": "paper",
                "x": sum(x_dom) / 2,
                "y": y_dom[1],
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"size": 13},
                "text": f"<b>{name} (current)</b>" if key == current else name,
            }
        )
        traces += _sweep_lines(x, data, xa, ya, name, first=i == 0)
        marks = []
        cross = sweep.crossover.get(key)
        if cross is not None:
            marks.append((cross, "#2a9d55", "dot", f"GPU-bound from {cross}", 0.97))
        if batch is not None and key == current:
            marks.append((batch, "#b03a3a", "solid", f"batch {batch}", 0.04))
        for mark in marks:
            shape, annotation = _batch_mark(xa, ya, *mark)
            shapes.append(shape)
            annotations.append(annotation)
    traces += _throughput_lines(x, series, layout, gpus)
    layout.update(
        {
            "height": 280 * -(-n_panels // 2),
            "margin": {"l": 10, "r": 80, "t": 70, "b": 40},
            "hovermode": "x unified",
            "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.07, "x": 0},
            "shapes": shapes,
            "annotations": annotations,
        }
    )
    return _figure(traces, layout)


def _throughput_lines(x, series: dict, layout: dict, gpus: int) -> list[dict]:
    """Each panel's tokens/s on a right axis of its own (log, every panel on one scale, labelled on the right
    column), the saturation batch drawn as a diamond: after every panel's own lines, so their order stays."""
    from ui.throughput import saturation, tokens_per_s

    n = len(series)
    rates = {k: tokens_per_s(x, np.asarray(d.step_us, float)) for k, d in series.items()}
    top = max(float(r.max()) for r in rates.values())
    low = min(float(r.min()) for r in rates.values())
    traces = []
    for i, (key, data) in enumerate(series.items()):
        xa = "x" if i == 0 else f"x{i + 1}"
        ya = "y" if i == 0 else f"y{i + 1}"
        right = f"y{n + i + 1}"
        layout[f"yaxis{n + i + 1}"] = {
            "type": "log",
            "overlaying": ya,
            "anchor": xa,
            "side": "right",
            "range": [float(np.log10(low * 0.7)), float(np.log10(top * 1.4))],
            "dtick": 1,
            "showgrid": False,
            "showticklabels": i % 2 == 1,
            "title": {
                "text": "tokens/s (log scale)" if i % 2 == 1 else "",
                "font": {"color": THROUGHPUT_COLOUR},
            },
            "tickfont": {"color": THROUGHPUT_COLOUR},
        }
        rate = rates[key]
        replayed = np.asarray(getattr(data, "replayed", np.zeros(len(x), bool)))
        own = (
            replayed if replayed.any() else np.ones(len(x), bool)
        )  # a graph mode above its buckets runs eagerly
        at = saturation(x[own], rate[own])
        sizes = np.where(x == at, 11, 0) if at is not None else np.zeros(len(x))
        per_gpu = f" (%{{customdata:,.0f}} per GPU, {gpus} GPUs)" if gpus > 1 else ""
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "x": x,
                "y": rate,
                "customdata": rate / gpus,
                "xaxis": xa,
                "yaxis": right,
                "name": "tokens/s (right axis; ◆ where it saturates)",
                "legendgroup": "tokens",
                "showlegend": i == 0,
                "line": {"color": THROUGHPUT_COLOUR, "width": 2},
                "marker": {"size": sizes, "symbol": "diamond", "color": THROUGHPUT_COLOUR},
                "hovertemplate": f"batch %{{x}}: %{{y:,.0f}} tokens/s{per_gpu}<extra>{mode_named(key).title}</extra>",
            }
        )
    return traces


def _panel_axes(
    i: int, n_panels: int, x_dom, y_dom, ticks: list[int], y_range: list[float]
) -> tuple[dict, dict]:
    """Panel i's log axes: every panel on the first's scales, tick labels on the bottom row and the left column."""
    xa, ya = ("x", "y") if i == 0 else (f"x{i + 1}", f"y{i + 1}")
    bottom_row = i + 2 >= n_panels  # no panel below this one
    x_axis = {
        "type": "log",
        "domain": list(x_dom),
        "anchor": ya,
        "matches": None if i == 0 else "x",
        "title": {"text": "batch size (log scale)" if bottom_row else ""},
        "showticklabels": bottom_row,
        "tickvals": ticks,
    }
    y_axis = {
        "type": "log",
        "domain": list(y_dom),
        "anchor": xa,
        "range": y_range,
        "dtick": 1,
        "matches": None if i == 0 else "y",
        "showticklabels": i % 2 == 0,
        "title": {"text": "µs per step = per output token (log scale)" if i % 2 == 0 else ""},
    }
    return x_axis, y_axis


def _sweep_lines(x, data, xa: str, ya: str, name: str, first: bool) -> list[dict]:
    """A panel's three lines (step, CPU launch and GPU time), in the legend once."""
    return [
        {
            "type": "scatter",
            "mode": "lines",
            "x": x,
            "y": np.asarray(getattr(data, field_name), dtype=float),
            "xaxis": xa,
            "yaxis": ya,
            "name": label,
            "legendgroup": field_name,
            "showlegend": first,
            "line": {"color": colour, "dash": dash, "width": width},
            "hovertemplate": f"batch %{{x}}: {label} %{{y:,.0f}} µs"
            + (" = %{customdata:.2f} ms per output token" if field_name == "step_us" else "")
            + f"<extra>{name}</extra>",
            **({"customdata": np.asarray(data.step_us, float) / 1e3} if field_name == "step_us" else {}),
        }
        for field_name, label, colour, dash, width in _SWEEP_LINES
    ]


def _batch_mark(
    xa: str, ya: str, where, colour: str, dash: str, text: str, height: float
) -> tuple[dict, dict]:
    """A vertical line at batch `where` across a panel, and its label at `height` of the panel."""
    shape = {
        "type": "line",
        "xref": xa,
        "yref": f"{ya} domain",
        "x0": where,
        "x1": where,
        "y0": 0,
        "y1": 1,
        "line": {"color": colour, "dash": dash, "width": 1.5},
    }
    annotation = {
        "xref": xa,
        "yref": f"{ya} domain",
        "x": float(np.log10(where)),
        "y": height,
        "text": text,
        "showarrow": False,
        "xanchor": "left",
        "xshift": 3,
        "yanchor": "bottom" if height < 0.5 else "top",
        "font": {"size": 11, "color": colour},
    }
    return shape, annotation
