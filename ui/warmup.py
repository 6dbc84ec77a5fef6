"""What every chart and table needs, imported once per server before any session draws one.

Streamlit runs each session's script in its own thread. Plotly looks pandas up with
`sys.modules.get("pandas")`, which does not wait for an import in progress, so on a fresh
server twenty sessions starting at once could find pandas half-initialised
(`AttributeError: partially initialized module 'pandas' has no attribute 'Series'`).
Every session imports this module before its first Plotly figure or table: `app.py` before any
tab but the Simulator, `ui/simulator/tab.py` after the Simulator's first screen (its controls and
readouts use neither, and come first: ui/first_paint.py). An `import` statement does wait for
another thread's import of the same module to finish, so no session gets past that line before
pandas, pyarrow (st.dataframe) and Plotly are whole. The small figure below is serialised once
for the same reason: Plotly imports its validators and JSON encoder lazily, on first use.

Last, the shipped probe run's calibration starts in a background process at the lowest CPU
priority (ui/calibration_cache.py `prefit_recorded`), so the first Calibration tab open and the
calibrated preset find it done or nearly.
"""

import numpy as np
import pandas  # noqa: F401
import plotly.graph_objects as go
import plotly.io  # noqa: F401
import pyarrow  # noqa: F401

go.Figure(
    {
        "data": [
            {
                "type": "bar",
                "orientation": "h",
                "base": np.zeros(1),
                "x": np.ones(1),
                "y": ["GPU"],
                "customdata": np.zeros((1, 3), dtype=object),
                "marker": {"pattern": {"shape": "/"}, "opacity": [0.5]},
            },
            {"type": "scattergl", "x": [0, 1, None], "y": ["CPU", "CPU", None], "mode": "lines"},
            {"type": "scatter", "x": [1, 2], "y": [1, 2]},
        ],
        "layout": {"xaxis": {"type": "linear"}, "yaxis": {"type": "category"}},
    }
).to_json()

from ui.calibration_cache import prefit_recorded  # noqa: E402 - after the imports above, on purpose

prefit_recorded()
