"""Issue 15, item 2: the work one upload can cause is bounded. Runs per file, kernels per step
consistent with the model's layers, and the lanes drawn: a 400k-kernel step shown whole is sent to
the browser as time bins, not 1.2 M points."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from test_hostile_uploads import good_result, messages, page_on

from core.probe_result import LIMITS, MAX_KERNELS_OUTSIDE_LAYERS, MAX_KERNELS_PER_LAYER, MAX_RUNS, load_result
from core.timeline import Timeline


def with_runs(n: int) -> dict:
    data = good_result()
    base = data["runs"][0]
    pairs = [(m, b) for b in range(1, 5000) for m in ("eager", "fused")][:n]
    data["runs"] = [dict(copy.deepcopy(base), mode=m, batch=b) for m, b in pairs]
    return data


def test_runs_per_file_are_bounded():
    assert len(load_result(with_runs(MAX_RUNS)).runs) == MAX_RUNS
    with pytest.raises(ValueError, match=r"^runs: 4,000 entries, more than the 64"):
        load_result(with_runs(4000))
    assert f"{MAX_RUNS} runs" in LIMITS


def test_a_mode_and_batch_appear_once():
    data = with_runs(2)
    data["runs"][1] = copy.deepcopy(data["runs"][0])
    with pytest.raises(ValueError, match=r"^runs\[1\]: a second run of mode eager at batch 1"):
        load_result(data)


def one_layer_million_kernels() -> dict:
    data = good_result()
    data["model"]["config"]["n_layers"] = 1
    data["runs"][0]["kernels_per_step"] = 1_000_000
    return data


def test_kernels_per_step_follow_the_model():
    with pytest.raises(
        ValueError, match=r"^runs\[0\]\.kernels_per_step: 1e\+06 is outside the plausible range"
    ):
        load_result(one_layer_million_kernels())
    limit = MAX_KERNELS_PER_LAYER * 1 + MAX_KERNELS_OUTSIDE_LAYERS
    data = one_layer_million_kernels()
    data["runs"][0]["kernels_per_step"] = limit
    data["runs"][0]["timeline"]["gpu"]["start_us"] = [0.0] * (limit + 1)
    with pytest.raises(ValueError, match=r"^runs\[0\]\.timeline\.gpu\.start_us: 385 entries"):
        load_result(data)


def test_the_page_refuses_the_hanging_file_at_once():
    at = page_on("Calibration")
    for name, data in (("million.json", one_layer_million_kernels()), ("runs4000.json", with_runs(4000))):
        at.file_uploader(key="cal_upload").set_value(
            (name, json.dumps(data).encode(), "application/json")
        ).run()
        assert not at.exception
        assert name in messages(at)


def test_a_400k_kernel_step_is_drawn_as_bins():
    from ui.charts import AGGREGATE_BINS, lanes_figure

    n = 400_000
    rng = np.random.default_rng(0)
    dur = rng.uniform(0.5, 3.0, n)
    start = np.cumsum(dur + rng.uniform(0, 1, n)) - dur
    step = Timeline(
        np.arange(n) * 4.0, np.full(n, 3.0), ("launch",) * n, start, dur, ("k",) * n, source="measured"
    )
    fig = lanes_figure(step, whole_step=True)
    points = sum(len(t.x) for t in fig.data)
    assert points <= 3 * AGGREGATE_BINS, points
    gpu = next(t for t in fig.data if t.name == "GPU kernel")
    # Bin width × shade adds back up to the GPU's busy time (the shade is floored at 12 % to stay visible).
    drawn = float(np.sum(np.asarray(gpu.x) * np.asarray(gpu.marker.opacity)))
    assert drawn == pytest.approx(step.metrics().gpu_busy_us, rel=0.01)
    assert "time bins" in fig.layout.title.text
    assert len(fig.to_json()) < 1_000_000
    # The first launches (the default view) are still the exact bars.
    first = lanes_figure(step)
    assert next(t for t in first.data if t.name == "GPU kernel").type == "bar"
