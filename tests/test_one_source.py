"""Issue 29, item 4: the page names no quantity twice with two values, for any shipped run.

The walk opens the Live GPU probe tab on every shipped run (each mode at its smallest and largest batch), the
Your trace tab on the probe's own traces, and the Calibration tab on every shipped run, and reads every figure it
knows how to name: the readouts, the captions' sentences, the split bar, the modes and calibration tables, the
simulated lanes' verdict, the calibrated preset's note. Each figure is put under (the step it is of, the quantity
it names) with the interval its display allows (945 µs: 944.5 to 945.5), and two figures under one key must agree.
A page that showed "164 µs (median)" for the host's copies and graph launch in one caption and 137 µs under the
same name in the bar, or "15 %" utilisation on one tab and "5 %" on another for the same step, fails here.

Nothing is hard-coded: the runs, modes and batches come from the shipped files, so the walk holds after a
re-record. It also counts the figures it read, so a page whose sentences no longer match it fails instead of
passing empty.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict

import pytest
import streamlit as st
from app_pages import as_read, open_tab, tables

from core import probe_result
from core.step_plan import MODES
from ui.probe.tab import HOST_WAIT
from ui.probe_results import MORE_RECORDED, recorded_label
from ui.trace.sources import PROBE_RUNS, probe_run

SHIPPED = (probe_result.RECORDED_PATH.name, *MORE_RECORDED)
pytestmark = pytest.mark.skipif(
    not all(probe_result.RECORDED_PATH.with_name(n).is_file() for n in SHIPPED), reason="runs not shipped"
)
_NUMBER = r"([+−-]?[\d,]*\.?\d+)"
_UNITS = {"µs": 1.0, "ms": 1e3, "s": 1e6}


def shown(text: str) -> tuple[float, float]:
    """The interval of values a displayed figure stands for: '945 µs' -> (944.5, 945.5) µs, '85%' -> (84.5, 85.5)."""
    m = re.fullmatch(_NUMBER + r"\s*(µs|ms|s|%|×)?", text.strip())
    assert m, f"not a figure: {text!r}"
    digits = m.group(1).replace(",", "").replace("−", "-")
    value = float(digits)
    half = 0.5 * 10 ** -(len(digits.split(".")[1]) if "." in digits else 0)
    scale = _UNITS.get(m.group(2) or "", 1.0)
    return (value - half) * scale, (value + half) * scale


def exact(value: float) -> tuple[float, float]:
    """A table cell: the number itself (a relative 1e-9 for floats summed in another order)."""
    return value - abs(value) * 1e-9, value + abs(value) * 1e-9


class Figures:
    """(step, quantity) -> [(where, interval)]: every figure the walk read."""

    def __init__(self):
        self.seen = defaultdict(list)

    def add(self, step: tuple, quantity: str, where: str, interval: tuple[float, float]) -> None:
        self.seen[(step, quantity)].append((where, interval))

    def disagreements(self) -> list[str]:
        out = []
        for key, found in self.seen.items():
            lo = max(i[0] for _, i in found)
            hi = min(i[1] for _, i in found)
            if lo > hi + 1e-9:
                listing = "; ".join(f"{where}: {i[0]:.6g}..{i[1]:.6g}" for where, i in found)
                out.append(f"{key}: {listing}")
        return out

    def count(self, quantity: str) -> int:
        return sum(len(v) for (_, q), v in self.seen.items() if q == quantity)


def _result(name: str):
    return probe_result.load_result(probe_result.RECORDED_PATH.with_name(name), timeline_source="recorded")


def _captions(at) -> list[str]:
    return [as_read(c.value) for c in at.caption] + [as_read(m.value) for m in at.markdown]


def _probe_view(figures: Figures, name: str, mode: str, batch: int) -> None:
    result = _result(name)
    at = open_tab("Live GPU probe", pr_run=recorded_label(result), pr_mode=mode, pr_batch=str(batch))
    assert not at.exception, at.exception
    step = (name, mode, batch)
    metrics = {m.label: m.value for m in at.metric}
    figures.add(step, "step time, no profiler", "probe readout", shown(metrics["Step time (no profiler)"]))
    figures.add(
        step, "utilisation, no profiler", "probe readout", shown(metrics["GPU utilisation (no profiler)"])
    )
    figures.add(step, "kernels", "probe readout", shown(metrics["Kernels / step"].split(" ")[0]))
    for text in _captions(at):
        if m := re.search(
            r"The lanes are the profiled step: (\S+ \S+) as traced, GPU utilisation (\S+) as traced", text
        ):
            figures.add(step, "step time, as traced", "probe caption", shown(m.group(1)))
            figures.add(step, "utilisation, as traced", "probe caption", shown(m.group(2)))
        for m in re.finditer(
            r"the input copies and the graph launch take (\S+ \S+) of host time, median without", text
        ):
            figures.add(step, "host enqueue", "probe caption", shown(m.group(1)))
        for m in re.finditer(re.escape(HOST_WAIT) + r", (?:at most )?(\S+ \S+?)[ ,)(]", text):
            figures.add(step, "GPU's wait for the host", "probe caption", shown(m.group(1)))
        if m := re.search(r"The (\S+ \S+) median step at batch (\d+)", text):
            figures.add(step, "step time, no profiler", "split caption", shown(m.group(1)))
        if m := re.search(r"spread over the step's (\d+) kernels", text):
            figures.add(step, "kernels", "split caption", shown(m.group(1)))
        if m := re.search(r"Where its (\S+ \S+) go", text):
            figures.add(step, "step time, no profiler", "inside the kernel", shown(m.group(1)))
        if m := re.search(r"predicted within (\S+ %) left out", text):
            figures.add(step, "|leave-one-out error| %", "simulated lanes' title", shown(m.group(1)))
        if m := re.search(r"model, off by (\S+ %) at this point", text):
            figures.add(step, "|leave-one-out error| %", "simulated lanes' title", _abs(shown(m.group(1))))
        if m := re.search(r"this step \(.+?\) is predicted (\S+ %) off", text):
            figures.add(step, "|leave-one-out error| %", "simulated lanes' note", _abs(shown(m.group(1))))
    for chart in at.get("plotly_chart"):
        if chart.key != "pr_split":
            continue
        import json

        for trace in json.loads(chart.proto.spec)["data"]:
            if trace["name"].startswith(HOST_WAIT):
                figures.add(step, "GPU's wait for the host", "split bar", shown(trace["text"][0]))
    table = next(
        d.value for d in tables(at) if "mode" in d.value.columns and "step median (µs)" in d.value.columns
    )
    for _, row in table.iterrows():
        other = (name, row["mode"], batch)
        figures.add(other, "step time, no profiler", "modes table", exact(row["step median (µs)"]))
        figures.add(other, "utilisation, no profiler", "modes table", exact(row["GPU utilisation %"]))
        figures.add(other, "kernels", "modes table", exact(row["kernels / step"]))
        if isinstance(row["host enqueue (µs)"], float) and not math.isnan(row["host enqueue (µs)"]):
            figures.add(other, "host enqueue", "modes table", exact(row["host enqueue (µs)"]))


def _abs(interval):
    lo, hi = interval
    return (min(abs(lo), abs(hi)), max(abs(lo), abs(hi)))


def _calibration_view(figures: Figures, name: str) -> None:
    result = _result(name)
    at = open_tab("Calibration", cal_run=recorded_label(result), cal_view="Every point")
    assert not at.exception, at.exception
    table = next(d.value for d in tables(at) if "step LOO error %" in d.value.columns)
    for _, row in table.iterrows():
        step = (name, row["mode"], int(row["batch"]))
        figures.add(step, "step time, no profiler", "calibration table", exact(row["step measured (µs)"]))
        figures.add(
            step, "utilisation, no profiler", "calibration table", exact(row["utilisation measured %"])
        )
        figures.add(step, "host enqueue", "calibration table", exact(row["CPU measured (µs)"]))
        figures.add(step, "kernels", "calibration table", exact(row["kernels"]))
        figures.add(
            step, "|leave-one-out error| %", "calibration table", _abs(exact(row["step LOO error %"]))
        )
    mode, batch = at.selectbox(key="cal_mode").value, int(at.selectbox(key="cal_batch").value)
    preset = open_tab("Calibration", cal_run=recorded_label(result), cal_view="As a simulator preset")
    assert not preset.exception, preset.exception
    for text in _captions(at) + [t.value for t in preset.text]:
        if m := re.search(r"Top: the profiled step \((\d+) kernels, (\S+ \S+)\)", text):
            figures.add((name, mode, batch), "kernels", "calibration overlay", shown(m.group(1)))
            figures.add((name, mode, batch), "step time, as traced", "calibration overlay", shown(m.group(2)))
        for m in re.finditer(
            r"the probe's (.+?) step at batch (\d+),? (?:\S+ µs of host time for its )?\(?(\d+) (?:kernels|nodes)",
            text,
        ):
            label, b, n = m.groups()
            mode_named = next(x.name for x in MODES.values() if x.title == label)
            figures.add((name, mode_named, int(b)), "kernels", "calibrated preset's note", shown(n))
        for m in re.finditer(r"the (\d+) nodes of the probe's (.+?) step at batch (\d+)", text):
            n, label, b = m.groups()
            mode_named = next(x.name for x in MODES.values() if x.title == label)
            figures.add((name, mode_named, int(b)), "kernels", "calibrated preset's note", shown(n))


def _trace_view(figures: Figures, title: str) -> None:
    name, mode, batch = probe_run(title)
    at = open_tab("Your trace", tr_trace=title)
    assert not at.exception, at.exception
    step = (name, mode, batch)
    metrics = {m.label: m.value for m in at.metric}
    figures.add(step, "step time, as traced", "Your trace readout", shown(metrics["Step time (as traced)"]))
    figures.add(
        step, "utilisation, as traced", "Your trace readout", shown(metrics["GPU utilisation (as traced)"])
    )
    figures.add(step, "kernels", "Your trace readout", shown(metrics["Kernels / step"]))
    figures.add(
        step,
        "step time, no profiler",
        "Your trace, without the profiler",
        shown(metrics["Step time (no profiler)"]),
    )


@pytest.fixture(scope="module")
def walked() -> Figures:
    st.cache_resource.clear()
    figures = Figures()
    for name in SHIPPED:
        result = _result(name)
        for mode in result.modes:
            batches = sorted({r.batch for r in result.runs if r.mode == mode})
            for batch in dict.fromkeys((batches[0], batches[-1])):
                _probe_view(figures, name, mode, batch)
        _calibration_view(figures, name)
    for title in PROBE_RUNS:
        if probe_run(title) and probe_result.RECORDED_PATH.with_name(probe_run(title)[0]).is_file():
            _trace_view(figures, title)
    st.cache_resource.clear()
    return figures


def test_no_two_figures_name_one_quantity_with_two_values(walked):
    assert not walked.disagreements(), "\n".join(walked.disagreements())


def test_the_walk_read_every_kind_of_figure(walked):
    """Each quantity was read in at least two places on some step (else the walk checks nothing about it)."""
    for quantity in (
        "step time, no profiler",
        "step time, as traced",
        "utilisation, no profiler",
        "utilisation, as traced",
        "kernels",
        "host enqueue",
        "GPU's wait for the host",
        "|leave-one-out error| %",
    ):
        assert max(len(v) for (_, q), v in walked.seen.items() if q == quantity) >= 2, quantity


def test_the_walk_tells_a_disagreement_from_a_rounding():
    figures = Figures()
    step = ("run.json", "fused+graph", 1)
    figures.add(step, "host enqueue", "caption", shown("164 µs"))
    figures.add(step, "host enqueue", "table", exact(163.7695))
    assert not figures.disagreements()  # 164 µs is 163.77 rounded
    figures.add(step, "host enqueue", "bar", shown("137 µs"))  # the old split bar, under the same name
    assert len(figures.disagreements()) == 1
    assert shown("15.6 ms") == pytest.approx((15_550.0, 15_650.0)) and shown("85%") == (84.5, 85.5)
