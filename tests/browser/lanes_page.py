"""A page of one chart for tests/browser/test_lanes_drawn.py: a step long enough for WebGL segments.

Run by `streamlit run` (harness.app_server_process(script=...)); `long_step` is imported by the test too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the app's packages

from core.timeline import Timeline

BLOCKS, PER_BLOCK, KERNEL_US = 20, 150, 5.0  # 3,000 kernels in 20 busy blocks, each followed by as long a gap


def long_step() -> Timeline:
    """3,000 launches and kernels (over ui.charts.MAX_BARS drawn intervals), busy in 20 blocks a pixel apart
    at most: what each lane covers is resolvable on screen although each interval is not."""
    block = np.arange(BLOCKS).repeat(PER_BLOCK) * 2 * PER_BLOCK * KERNEL_US
    within = np.tile(np.arange(PER_BLOCK) * KERNEL_US, BLOCKS)
    launch = block + within
    n = len(launch)
    return Timeline(
        launch, np.full(n, KERNEL_US), ("cudaLaunchKernel",) * n,
        launch + KERNEL_US, np.full(n, KERNEL_US), ("k",) * n,
        launched_by=np.arange(n), source="measured",
    )  # fmt: skip


if __name__ == "__main__":
    import streamlit as st

    from ui.charts import lanes_figure

    st.set_page_config(layout="wide")
    st.plotly_chart(lanes_figure(long_step(), whole_step=True), theme=None, key="lanes")
