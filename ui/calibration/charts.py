"""The Calibration tab's chart: predicted against measured, four panels, one colour per mode.

Point labels (the batch size) are placed, not just drawn: the four batches of one mode often sit
on top of each other (fused at batch 1, 8, 64 and 256 all take 7-8 ms), and a label above every
dot printed "1", "8", "64" and "256" over one another. Each label tries above, below, right and
left of its dot, in a panel of the size the page draws it at least, and is left out where all four
would cover another label or dot; every dot still names its mode and batch on hover. The smallest
and largest batch of each mode are placed first, so those are the ones that stay.
"""

from __future__ import annotations

import math

import numpy as np

from core.step_plan import MODES
from sim.calibration import Calibration

_PANELS = (
    ("step", "Step time (µs)", 0),
    ("cpu", "CPU launch time (µs)", 1),
    ("busy", "GPU busy time (µs)", 2),
    ("util", "GPU utilisation (%)", None),
)
# (x domain, y domain) of each panel, as fractions of the plot area.
_DOMAINS = (((0, 0.46), (0.56, 1)), ((0.54, 1), (0.56, 1)), ((0, 0.46), (0, 0.44)), ((0.54, 1), (0, 0.44)))

HEIGHT_PX = 620
MARGIN = {"l": 10, "r": 10, "t": 40, "b": 10}
# The narrowest plot area the labels are placed for (the page is wide; a narrower window gives each
# label more room in data units, never less): Streamlit's wide layout at a 1,000 px window.
MIN_WIDTH_PX = 900
MARKER_PX = 9
FONT_PX = 9
CHAR_PX = 0.62 * FONT_PX  # a digit's advance in the default sans-serif, generously
LABEL_H_PX = 1.25 * FONT_PX
GAP_PX = 2.0
# Plotly's names for the four places tried, in order, and where each puts the label's centre.
PLACES = ("top center", "bottom center", "middle right", "middle left")


def label_box(x_px: float, y_px: float, text: str, place: str) -> tuple[float, float, float, float]:
    """(left, bottom, right, top) in pixels, y up, of `text` drawn at `place` of a dot at (x_px, y_px)."""
    w, h = len(text) * CHAR_PX, LABEL_H_PX
    off = MARKER_PX / 2 + GAP_PX
    cx, cy = {
        "top center": (x_px, y_px + off + h / 2),
        "bottom center": (x_px, y_px - off - h / 2),
        "middle right": (x_px + off + w / 2, y_px),
        "middle left": (x_px - off - w / 2, y_px),
    }[place]
    return cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2


def _overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def panel_pixels(values, axis_range, log: bool, domain, length_px: float) -> np.ndarray:
    """Data values -> pixels from the plot area's origin along one axis of a panel."""
    v = np.log10(np.asarray(values, dtype=float)) if log else np.asarray(values, dtype=float)
    lo, hi = axis_range
    start, end = domain
    return (start + (end - start) * (v - lo) / (hi - lo)) * length_px


def place_labels(
    x_px: np.ndarray, y_px: np.ndarray, texts: list[str], priority: list[int], bounds
) -> list[str | None]:
    """A place from PLACES for each label, or None where every place covers a dot or a placed label.

    Labels are placed in `priority` order (indices); `bounds` is the panel's (left, bottom, right, top).
    """
    half = MARKER_PX / 2
    taken = [(x - half, y - half, x + half, y + half) for x, y in zip(x_px, y_px)]
    places: list[str | None] = [None] * len(texts)
    for i in priority:
        for place in PLACES:
            box = label_box(x_px[i], y_px[i], texts[i], place)
            inside = (
                bounds[0] <= box[0] and box[2] <= bounds[2] and bounds[1] <= box[1] and box[3] <= bounds[3]
            )
            own = taken[i]  # a label may touch its own dot's box, never another's
            if inside and not any(_overlaps(box, t) for t in taken if t is not own):
                places[i] = place
                taken.append(box)
                break
    return places


def _priority(points) -> list[int]:
    """Indices: each mode's smallest batch first (the modes with the fewest points first, so a mode measured at
    two batches is not crowded out by one measured at four), then each mode's largest, then the rest by batch."""
    by_mode: dict = {}
    for i, p in enumerate(points):
        by_mode.setdefault(p.mode, []).append(i)
    rank = {}
    for idx in by_mode.values():
        ordered = sorted(idx, key=lambda i: points[i].batch)
        rank[ordered[0]] = (0, len(idx))
        rank.setdefault(ordered[-1], (1, len(idx)))
    return sorted(range(len(points)), key=lambda i: (*rank.get(i, (2, 0)), points[i].batch, i))


def predicted_vs_measured_figure(cal: Calibration):
    import plotly.graph_objects as go

    measured, predicted = cal.measured(), cal.predicted
    util_m = 100 * np.array([p.utilisation for p in cal.points])  # busy over the median step
    util_p = 100 * predicted[:, 2] / predicted[:, 0]
    traces = []
    layout = {
        "height": HEIGHT_PX,
        "margin": MARGIN,
        "legend": {"orientation": "h", "y": 1.06, "x": 0},
    }
    width_px = MIN_WIDTH_PX - MARGIN["l"] - MARGIN["r"]
    height_px = HEIGHT_PX - MARGIN["t"] - MARGIN["b"]
    texts = [str(p.batch) for p in cal.points]
    priority = _priority(cal.points)
    for k, ((_name, title, col), (xd, yd)) in enumerate(zip(_PANELS, _DOMAINS), start=1):
        x = measured[:, col] if col is not None else util_m
        y = predicted[:, col] if col is not None else util_p
        axis = "" if k == 1 else str(k)
        log = col is not None
        lo, hi, axis_range = _panel_range(x, y, log)
        px, py = (
            panel_pixels(x, axis_range, log, xd, width_px),
            panel_pixels(y, axis_range, log, yd, height_px),
        )
        bounds = (xd[0] * width_px, yd[0] * height_px, xd[1] * width_px, yd[1] * height_px)
        places = place_labels(px, py, texts, priority, bounds)
        traces.append(
            {
                "type": "scatter",
                "x": [lo, hi],
                "y": [lo, hi],
                "mode": "lines",
                "xaxis": f"x{axis}",
                "yaxis": f"y{axis}",
                "line": {"color": "#999", "dash": "dot"},
                "showlegend": False,
                "hoverinfo": "skip",
            }
        )
        traces += _mode_markers(cal, x, y, texts, places, axis, first=k == 1)
        kind = "log" if log else "linear"
        ticks = {"dtick": 1} if log else {}  # powers of ten only: the 2s and 5s in between crowd the axis
        for letter, domain, label in (("x", xd, f"measured {title}"), ("y", yd, "predicted")):
            layout[f"{letter}axis{axis}"] = {
                "domain": list(domain),
                "type": kind,
                "anchor": f"{'y' if letter == 'x' else 'x'}{axis}",
                "title": {"text": label},
                "range": axis_range,  # fixed, so the labels sit where they were placed
                **ticks,
            }
    return go.Figure({"data": traces, "layout": layout})


def _panel_range(x: np.ndarray, y: np.ndarray, log: bool) -> tuple[float, float, list[float]]:
    """(low, high, the axis range) of a panel, both axes alike: on a log axis, a margin around every point and the
    range in powers of ten; utilisation from 0 to 105 %."""
    if log:
        lo, hi = min(x.min(), y.min()) * 0.8, max(x.max(), y.max()) * 1.25
        return lo, hi, [math.log10(lo), math.log10(hi)]
    return 0, 105, [0, 105]


def _mode_markers(
    cal: Calibration, x, y, texts: list[str], places: list, axis: str, first: bool
) -> list[dict]:
    """A panel's points, one trace per mode (in the legend from the first panel), labelled where a label fits."""
    out = []
    for mode, colour in ((m.name, m.colour) for m in MODES.values()):
        idx = [i for i, p in enumerate(cal.points) if p.mode.name == mode]
        if not idx:
            continue
        out.append(
            {
                "type": "scatter",
                "mode": "markers+text",
                "x": x[idx].tolist(),
                "y": y[idx].tolist(),
                "text": [texts[i] if places[i] else "" for i in idx],
                "textposition": [places[i] or "top center" for i in idx],
                "customdata": [cal.points[i].batch for i in idx],
                "name": mode,
                "legendgroup": mode,
                "showlegend": first,
                "xaxis": f"x{axis}",
                "yaxis": f"y{axis}",
                "marker": {"color": colour, "size": MARKER_PX},
                "textfont": {"size": FONT_PX},
                "hovertemplate": f"{mode} · batch %{{customdata}}<br>measured %{{x:,.1f}}<br>"
                "predicted %{y:,.1f}<extra></extra>",
            }
        )
    return out
