"""Chart builders: the bars must be the timeline's intervals, on a linear µs axis."""

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest

from core.timeline import Timeline
from ui.charts import FIRST_LAUNCHES, format_us, lanes_figure, sweep_figure
from ui.common import time_split_html


def eager_step(n_kernels: int, launch_us: float = 6.0, kernel_us: float = 2.5, source="simulated", label=""):
    """A launch-bound eager step built by hand: kernel i starts once launch i is submitted."""
    cpu_start = np.arange(n_kernels) * launch_us
    gpu_start = np.empty(n_kernels)
    free_at = 0.0
    for i in range(n_kernels):
        gpu_start[i] = max(cpu_start[i] + launch_us, free_at)
        free_at = gpu_start[i] + kernel_us
    return Timeline(
        cpu_start,
        np.full(n_kernels, launch_us),
        [f"launch k{i}" for i in range(n_kernels)],
        gpu_start,
        np.full(n_kernels, kernel_us),
        [f"k{i}" for i in range(n_kernels)],
        launched_by=np.arange(n_kernels),
        source=source,
        label=label,
    )


def graph_step(n_kernels: int, graph_launch_us: float = 10.0, kernel_us: float = 3.0, gap_us: float = 0.2):
    gpu_start = graph_launch_us + np.arange(n_kernels) * (kernel_us + gap_us)
    return Timeline(
        [0.0],
        [graph_launch_us],
        ["cudaGraphLaunch"],
        gpu_start,
        np.full(n_kernels, kernel_us),
        [f"k{i}" for i in range(n_kernels)],
        launched_by=np.zeros(n_kernels, int),
    )


def traces_by_name(fig):
    return {trace.name: trace for trace in fig.data}


def test_default_view_is_three_kinds_of_bar_over_the_first_launches():
    step = eager_step(100)
    fig = lanes_figure(step)
    assert [t.name for t in fig.data] == ["CPU launch", "GPU kernel", "idle"]
    assert all(t.type == "bar" and t.orientation == "h" for t in fig.data)
    cpu, gpu, idle = (traces_by_name(fig)[k] for k in ("CPU launch", "GPU kernel", "idle"))
    assert len(cpu.x) == FIRST_LAUNCHES == 18
    assert len(gpu.x) == 18
    assert set(cpu.y) == {"CPU"} and set(gpu.y) == {"GPU"} and set(idle.y) == {"GPU"}
    # No text on the bars: numbers live in the hover.
    assert all(t.text is None for t in fig.data)


def test_axis_is_linear_microseconds_and_lanes_are_categories():
    fig = lanes_figure(eager_step(30))
    assert fig.layout.xaxis.type == "linear"
    assert "µs" in fig.layout.xaxis.title.text
    assert fig.layout.yaxis.type == "category"
    assert list(fig.layout.yaxis.categoryarray) == ["CPU", "GPU"]
    assert fig.layout.barmode == "overlay"  # lanes are not grouped side by side
    assert fig.layout.yaxis.fixedrange is True  # zoom runs along time only


def test_bar_bases_and_widths_are_the_timeline_intervals():
    step = eager_step(40)
    fig = lanes_figure(step, whole_step=True)
    cpu, gpu, idle = (traces_by_name(fig)[k] for k in ("CPU launch", "GPU kernel", "idle"))
    np.testing.assert_allclose(np.asarray(cpu.base, float), step.cpu_start)
    np.testing.assert_allclose(cpu.x, step.cpu_dur)
    np.testing.assert_allclose(np.asarray(gpu.base, float), step.gpu_start)
    np.testing.assert_allclose(gpu.x, step.gpu_dur)
    idle_start, idle_dur = step.idle_intervals()
    np.testing.assert_allclose(np.asarray(idle.base, float), idle_start)
    np.testing.assert_allclose(idle.x, idle_dur)
    # Launch-bound: one bubble before the first kernel and one between each pair (6 µs launch > 2.5 µs kernel).
    assert len(idle.x) == 40
    np.testing.assert_allclose(idle.x[1:], 6.0 - 2.5)


def test_hover_names_the_kernel_and_gives_start_and_duration():
    step = eager_step(5)
    gpu = traces_by_name(lanes_figure(step))["GPU kernel"]
    assert list(gpu.customdata[:, 0]) == list(step.gpu_names)
    np.testing.assert_allclose(gpu.customdata[:, 1].astype(float), step.gpu_start)
    np.testing.assert_allclose(gpu.customdata[:, 2].astype(float), step.gpu_dur)
    for field in ("customdata[0]", "customdata[1]", "customdata[2]", "µs"):
        assert field in gpu.hovertemplate


def test_whole_step_toggle_draws_every_launch():
    step = eager_step(200)
    first = traces_by_name(lanes_figure(step))["GPU kernel"]
    whole = traces_by_name(lanes_figure(step, whole_step=True))["GPU kernel"]
    assert len(first.x) == 18 and len(whole.x) == 200
    assert max(np.asarray(whole.base, float) + whole.x) == pytest.approx(step.gpu_end.max())


def test_graph_step_cuts_on_kernels_and_keeps_its_single_launch():
    step = graph_step(60)
    fig = lanes_figure(step)
    cpu, gpu = traces_by_name(fig)["CPU launch"], traces_by_name(fig)["GPU kernel"]
    assert len(cpu.x) == 1 and cpu.customdata[0, 0] == "cudaGraphLaunch"
    assert len(gpu.x) == 18


def test_overlay_adds_two_lanes_named_after_the_source():
    simulated = eager_step(50)
    measured = eager_step(50, launch_us=9.0, source="measured")
    fig = lanes_figure(simulated, overlay=measured)
    assert list(fig.layout.yaxis.categoryarray) == [
        "CPU · simulated",
        "GPU · simulated",
        "CPU · measured",
        "GPU · measured",
    ]
    assert len(fig.data) == 6
    measured_cpu = traces_by_name(fig)["CPU launch · measured"]
    assert set(measured_cpu.y) == {"CPU · measured"}
    np.testing.assert_allclose(measured_cpu.x, 9.0)


def test_margins_fit_labels_legend_and_axis_up_front():
    # Plotly redraws the whole chart when automargin has to grow a margin; the page remounts the
    # lanes on every slider move, so margins that already fit save a full draw each time.
    single = lanes_figure(eager_step(10))
    overlay = lanes_figure(eager_step(10), overlay=eager_step(10, source="measured"))
    assert single.layout.margin.l >= 44 and single.layout.margin.t >= 50 and single.layout.margin.b >= 48
    assert overlay.layout.margin.l > single.layout.margin.l  # "CPU · measured" is longer than "CPU"
    assert single.layout.yaxis.automargin  # still grows for a font wider than the estimate


def test_overlay_of_two_steps_from_one_source_uses_their_labels():
    fig = lanes_figure(eager_step(10, label="batch 1"), overlay=eager_step(10, label="batch 8"))
    assert list(fig.layout.yaxis.categoryarray) == [
        "CPU · batch 1",
        "GPU · batch 1",
        "CPU · batch 8",
        "GPU · batch 8",
    ]
    unlabelled = lanes_figure(eager_step(10), overlay=eager_step(10))
    assert list(unlabelled.layout.yaxis.categoryarray) == [
        "CPU · simulated 1",
        "GPU · simulated 1",
        "CPU · simulated 2",
        "GPU · simulated 2",
    ]


def test_measured_steps_with_overlapping_or_empty_kernels_still_draw():
    step = Timeline(
        [0, 5, 30],
        [4, 3, 2],
        ["a", "b", "c"],
        [3, 4, 4.5, 40],
        [5, 0, 1, 2],
        ["k1", "k2", "k3", "k4"],
        source="measured",
    )  # no launched_by: unknown launcher
    for whole in (False, True):
        fig = lanes_figure(step, whole_step=whole)
        gpu = traces_by_name(fig)["GPU kernel"]
        assert len(gpu.x) == 4
        idle = traces_by_name(fig)["idle"]
        # Busy blocks merge where kernels overlap: idle is [0, 3] and [8, 40].
        np.testing.assert_allclose(np.asarray(idle.base, float), [0, 8])
        np.testing.assert_allclose(idle.x, [3, 32])


def test_long_steps_switch_to_webgl_segments_with_the_same_intervals():
    step = eager_step(3000)
    fig = lanes_figure(step, whole_step=True)
    assert [t.type for t in fig.data] == ["scattergl"] * 3
    gpu = traces_by_name(fig)["GPU kernel"]
    # Each interval is (start, end, break).
    x = np.array(gpu.x, dtype=object)
    np.testing.assert_allclose(x[0::3].astype(float), step.gpu_start)
    np.testing.assert_allclose(x[1::3].astype(float), step.gpu_end)
    assert all(v is None for v in x[2::3])
    assert fig.layout.xaxis.type == "linear"


def test_figure_serialises_to_json():
    json.loads(lanes_figure(eager_step(30), overlay=graph_step(30)).to_json())


def test_time_split_shows_both_costs_on_one_scale_and_marks_the_step():
    metrics = eager_step(100).metrics()
    html = time_split_html(metrics)
    assert "CPU launch cost" in html and "GPU execution" in html
    assert format_us(metrics.cpu_launch_us) in html and format_us(metrics.gpu_busy_us) in html
    top = max(metrics.cpu_launch_us, metrics.gpu_busy_us, metrics.step_us) * 1.08
    widths = [float(w) for w in re.findall(r"width:([0-9.]+)%", html)]
    assert widths == pytest.approx(
        [100 * metrics.cpu_launch_us / top, 100 * metrics.gpu_busy_us / top], abs=0.01
    )
    marks = [float(m) for m in re.findall(r"left:([0-9.]+)%", html)]
    assert marks == pytest.approx([100 * metrics.step_us / top] * 2, abs=0.01)  # one mark per bar
    assert metrics.step_us < metrics.cpu_launch_us + metrics.gpu_busy_us  # they overlap


MODE_NAMES = ("eager", "fused", "graph", "fused+graph")  # the four the toggles select


def _fake_series(names, batches):
    return {
        name: SimpleNamespace(
            step_us=1000 + batches * (i + 1.0),
            cpu_launch_us=np.full(len(batches), 1000.0 - 100 * i),
            gpu_busy_us=batches * (i + 1.0),
        )
        for i, name in enumerate(names)
    }


def test_sweep_has_three_lines_per_mode_on_a_log_batch_axis():
    batches = np.arange(1, 513)
    series = _fake_series(MODE_NAMES, batches)
    crossover = {"eager": 300, "fused": None, "graph": 1, "fused+graph": 1}
    fig = sweep_figure(FakeSweep(batches, series, crossover), current="fused", batch=7)
    assert len(fig.data) == 12 + 4  # three lines a panel, then each panel's tokens/s on its right axis
    for axis in ("xaxis", "xaxis2", "xaxis3", "xaxis4"):
        assert fig.layout[axis].type == "log"
    np.testing.assert_allclose(fig.data[3].y, series["fused"].step_us)  # panel 2, step line
    marked = sorted(s.x0 for s in fig.layout.shapes)
    assert marked == [1, 1, 7, 300]  # three crossovers and the current batch
    texts = " ".join(a.text for a in fig.layout.annotations)
    assert "GPU-bound from 300" in texts and "fusion (current)" in texts


def test_a_fifth_mode_gets_a_panel_of_its_own():
    """Panels follow the sweep's modes: five make three rows, the x labels on each column's lowest panel."""
    batches = np.arange(1, 65)
    names = (*MODE_NAMES, "compile")
    fig = sweep_figure(
        FakeSweep(batches, _fake_series(names, batches), dict.fromkeys(names)), current="compile"
    )
    assert len(fig.data) == 15 + 5
    domains = [tuple(fig.layout["yaxis" if i == 0 else f"yaxis{i + 1}"].domain) for i in range(5)]
    assert domains[0][1] == 1.0 and domains[4][0] == 0.0 and len({d[0] for d in domains}) == 3
    labelled = [bool(fig.layout["xaxis" if i == 0 else f"xaxis{i + 1}"].showticklabels) for i in range(5)]
    assert labelled == [False, False, False, True, True]
    assert "torch.compile (current)" in " ".join(a.text for a in fig.layout.annotations)


class FakeSweep(SimpleNamespace):
    def __init__(self, batches, series, crossover):
        super().__init__(batches=batches, series=series, crossover=crossover)


def test_sweep_of_the_chapter_preset_marks_its_crossovers():
    from sim.config import PRESETS
    from sim.step.schedule import sweep

    preset = PRESETS["chapter"]
    result = sweep(preset.model, preset.hardware, np.arange(1, 513))
    fig = sweep_figure(result, current="eager", batch=1)
    np.testing.assert_allclose(fig.data[0].y, result["eager"].step_us)
    crossings = [c for c in result.crossover.values() if c is not None]
    assert sorted(s.x0 for s in fig.layout.shapes) == sorted(crossings + [1])


@pytest.mark.parametrize(
    "us,text",
    [
        (2.46, "2.5 µs"),
        (850.4, "850 µs"),
        (1734.0, "1.73 ms"),
        (22_400.0, "22.4 ms"),
        (224_030.0, "224 ms"),
        (38_526_600.0, "38.5 s"),
    ],
)
def test_format_us_reads_like_a_person_writes(us, text):
    assert format_us(us) == text


def test_each_sweep_panel_has_its_tokens_per_second_and_where_they_saturate():
    """Issue 37, item 7: tokens/s (batch / step time) on each panel's right axis, a diamond where it saturates: the
    smallest batch from which each doubling adds less than 10 % tokens/s (ui.throughput)."""
    from ui.throughput import SATURATION_GAIN, saturation, tokens_per_s

    batches = np.arange(1, 513)
    # A step of 1000 µs until batch 64, then growing with the batch: tokens/s doubles with each doubling up to 64,
    # then grows by less and less.
    step = np.where(batches <= 64, 1000.0, 1000.0 * (batches / 64) ** 0.95)
    series = {"fused": SimpleNamespace(step_us=step, cpu_launch_us=step / 2, gpu_busy_us=step)}
    fig = sweep_figure(FakeSweep(batches, series, {"fused": 1}), gpus=2)
    rate = next(t for t in fig.data if t.name.startswith("tokens/s"))
    assert rate.yaxis == "y2" and fig.layout.yaxis2.overlaying == "y" and fig.layout.yaxis2.side == "right"
    np.testing.assert_allclose(rate.y, tokens_per_s(batches, step))
    np.testing.assert_allclose(rate.customdata, rate.y / 2)  # per GPU, in the hover
    at = saturation(batches, rate.y)
    assert at is not None and list(np.flatnonzero(np.asarray(rate.marker.size) > 0)) == [at - 1]
    # The rule, checked by hand: from `at` on, each doubling adds less than 10 %; just before it, not.
    gain = lambda b: rate.y[2 * b - 1] / rate.y[b - 1] - 1  # noqa: E731
    assert all(gain(b) < SATURATION_GAIN for b in range(at, 257)) and gain(at - 1) >= SATURATION_GAIN
