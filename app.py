"""launch-bound: one LLM decode step drawn as a CPU lane and a GPU lane.

`streamlit run app.py`. Layout only: the simulator lives in `sim/`, the live probe in
`gpu_probe/`, and each tab's widgets and charts in `ui/`.
"""

import streamlit as st

from ui import calibration_cache, first_paint, url_params
from ui.buckets import tab as buckets_tab
from ui.calibration import tab as calibrate_tab
from ui.probe import tab as probe_tab
from ui.quiz import tab as quiz
from ui.simulator import tab as sim_tab
from ui.trace import tab as trace_tab

st.set_page_config(page_title="launch-bound", layout="wide")
# The shipped run's calibration starts fitting in a background process now, before any tab draws (a no-op after
# the server's first page): the first Calibration open finds it done (ui/calibration_cache.py).
calibration_cache.start_prefit()

# Clean hostile query parameters before any widget reads them.
url_params.sanitise()

title_col, link_col = st.columns([6, 1], vertical_alignment="center")
title_col.title("launch-bound")
with link_col:  # every control is in the URL, so a copied link reopens this view
    url_params.copy_link_button()
st.caption(
    "Why a batch-1 decode step leaves the GPU idle, and what kernel fusion and CUDA graphs do about it."
)

# Bound to the URL and lazy: only the open tab runs, so the simulator never pays for the
# probe tab's 6 MB recorded run, the calibration fit or the padding demo's torch import.
simulator, probe, your_trace, bucketing, calibration, check = st.tabs(
    url_params.TAB_LABELS, key="tab", bind="query-params"
)

# The Simulator draws its controls and readouts first and imports ui.warmup (pandas and Plotly made
# whole, see there) before its first chart; every other tab needs them from its first elements on.
if simulator.open:
    with simulator:
        sim_tab.render()
for tab, page in (
    (probe, probe_tab),
    (your_trace, trace_tab),
    (bucketing, buckets_tab),
    (calibration, calibrate_tab),
    (check, quiz),
):
    if tab.open:
        import ui.warmup  # noqa: F401

        with tab:
            page.render()

# The tab's icon last, and not on the Simulator's first screen: Streamlit checks an emoji against its
# 90 KB emoji table, loaded on first use (60-250 ms on a fresh server here, holding the GIL while the
# browser fetches the first screen's scripts from this process).
if first_paint.seen() or not simulator.open:
    st.set_page_config(page_icon="⏱")
