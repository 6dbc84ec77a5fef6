"""The Calibration tab's chart: predicted against measured, four panels, one colour per mode."""

from __future__ import annotations

import numpy as np

from sim.calibration import Calibration

MODE_COLOURS = {
    "eager": "#d1495b",
    "fused": "#edae49",
    "graph": "#00798c",
    "fused+graph": "#30638e",
    "compile": "#7a7a7a",
}

_PANELS = (
    ("step", "Step time (µs)", 0),
    ("cpu", "CPU launch time (µs)", 1),
    ("busy", "GPU busy time (µs)", 2),
    ("util", "GPU utilisation (%)", None),
)


def predicted_vs_measured_figure(cal: Calibration):
    import plotly.graph_objects as go

    measured, predicted = cal.measured(), cal.predicted
    util_m = 100 * np.array([p.utilisation for p in cal.points])  # busy over the median step
    util_p = 100 * predicted[:, 2] / predicted[:, 0]
    traces, layout = (
        [],
        {
            "height": 620,
            "margin": {"l": 10, "r": 10, "t": 40, "b": 10},
            "legend": {"orientation": "h", "y": 1.06, "x": 0},
        },
    )
    domains = (((0, 0.46), (0.56, 1)), ((0.54, 1), (0.56, 1)), ((0, 0.46), (0, 0.44)), ((0.54, 1), (0, 0.44)))
    for k, ((_name, title, col), (xd, yd)) in enumerate(zip(_PANELS, domains), start=1):
        x = measured[:, col] if col is not None else util_m
        y = predicted[:, col] if col is not None else util_p
        axis = "" if k == 1 else str(k)
        log = col is not None
        lo, hi = (min(x.min(), y.min()) * 0.8, max(x.max(), y.max()) * 1.25) if log else (0, 105)
        diag = [lo, hi]
        traces.append(
            {
                "type": "scatter",
                "x": diag,
                "y": diag,
                "mode": "lines",
                "xaxis": f"x{axis}",
                "yaxis": f"y{axis}",
                "line": {"color": "#999", "dash": "dot"},
                "showlegend": False,
                "hoverinfo": "skip",
            }
        )
        for mode, colour in MODE_COLOURS.items():
            idx = [i for i, p in enumerate(cal.points) if p.mode == mode]
            if not idx:
                continue
            traces.append(
                {
                    "type": "scatter",
                    "mode": "markers+text",
                    "x": x[idx].tolist(),
                    "y": y[idx].tolist(),
                    "text": [str(cal.points[i].batch) for i in idx],
                    "textposition": "top center",
                    "name": mode,
                    "legendgroup": mode,
                    "showlegend": k == 1,
                    "xaxis": f"x{axis}",
                    "yaxis": f"y{axis}",
                    "marker": {"color": colour, "size": 9},
                    "textfont": {"size": 9},
                    "hovertemplate": f"{mode} · batch %{{text}}<br>measured %{{x:,.1f}}<br>"
                    "predicted %{y:,.1f}<extra></extra>",
                }
            )
        kind = "log" if log else "linear"
        ticks = {"dtick": 1} if log else {}  # powers of ten only: the 2s and 5s in between crowd the axis
        layout[f"xaxis{axis}"] = {
            "domain": list(xd),
            "type": kind,
            "anchor": f"y{axis}",
            "title": {"text": f"measured {title}"},
            **ticks,
        }
        layout[f"yaxis{axis}"] = {
            "domain": list(yd),
            "type": kind,
            "anchor": f"x{axis}",
            "title": {"text": "predicted"},
            **ticks,
        }
        if not log:
            layout[f"xaxis{axis}"]["range"] = layout[f"yaxis{axis}"]["range"] = [0, 105]
    return go.Figure({"data": traces, "layout": layout})
