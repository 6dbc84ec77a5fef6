"""Issue 14's eight tasks, done as a new user would, in Chromium at 1400×1000 (harness.VIEWPORT).

(a) the idle GPU at batch 1; (b) the Llama-3-8B crossover; (c) my own model; (d) measured against
simulated lanes; (e) export to Perfetto; (f) a bucket list under a memory budget; (g) the quiz;
(h) share a view. One test per task, one server for all of them (`app_url`). Every figure the page
shows is held against what sim/ or the recorded run computes for the same settings.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from harness import (
    VIEWPORT,
    click_toggle,
    eventually,
    lanes,
    metric_value,
    open_app,
    query_params,
    query_params_when,
    rerun_after,
    slider_input,
    slider_value,
    toggle_state,
)

from core.step_plan import StepPlan, mode, toggled
from sim.config import BATCH_RANGE, DEFAULT_PRESET, PRESETS
from sim.step.schedule import simulate_step, sweep
from ui.charts import FIRST_LAUNCHES, format_us
from ui.common import format_speedup, format_utilisation

pytestmark = pytest.mark.browser
CHART = "[data-testid=stPlotlyChart]"
READOUTS = ("Kernels / step", "Step time", "Bound by", "vs unoptimised", "GPU utilisation")


def simulated(
    preset_key: str = DEFAULT_PRESET, batch: int = 1, fusion: bool = False, graphs: bool = False, model=None
):
    preset = PRESETS[preset_key]
    settings = StepPlan(toggled(fusion, graphs), batch)
    return simulate_step(model or preset.model, preset.hardware, settings)


def expected_readouts(step) -> dict[str, str]:
    m = step.metrics
    return {
        "Kernels / step": f"{m.kernels:,}",
        "Step time": format_us(m.step_us),
        "Bound by": m.bound_by,
        "vs unoptimised": format_speedup(step.speedup),
        "GPU utilisation": format_utilisation(m.utilisation),
    }


def readouts(page) -> dict[str, str]:
    return {label: metric_value(page, label) for label in READOUTS}


def assert_readouts(page, step) -> None:
    want = expected_readouts(step)
    try:
        eventually(lambda: readouts(page) == want)
    except AssertionError:  # fail showing both sides, not "condition still false"
        assert readouts(page) == want


def pick(page, key: str, option: str) -> None:
    """Choose `option` in the selectbox with this widget key."""
    page.locator(f".st-key-{key} input[role=combobox]").click()
    rerun_after(page, lambda: page.get_by_role("option", name=option, exact=True).click())


def chart_layout(page, selector: str) -> dict:
    """The drawn Plotly layout (axes ranges, annotations) of the chart inside `selector`."""
    return page.evaluate(
        """(sel) => { const gd = document.querySelector(sel + ' .js-plotly-plot');
            if (!gd || !gd._fullLayout) return null;
            return {x: gd._fullLayout.xaxis.range.slice(), annotations: (gd.layout.annotations || []).map(a => a.text)}; }""",
        selector,
    )


def chart_index(page, key: str) -> int:
    """The position among the page's charts (as harness.lanes counts them) of the one with this widget key."""
    return page.evaluate(
        """(key) => Array.from(document.querySelectorAll('[data-testid=stPlotlyChart] .js-plotly-plot'))
            .findIndex(gd => gd.closest('.st-key-' + key))""",
        key,
    )


# -- (a) ---------------------------------------------------------------------------------------------
def test_a_idle_gpu_at_batch_1(page, app_url):
    """The Simulator's defaults: bound by CPU launch, half the step idle, bubbles between the kernels.
    (It is also test_simulator_page.py's first look at the tab: the defaults keep the link clean.)"""
    assert page.viewport_size == VIEWPORT
    open_app(page, app_url, wait_for=CHART)
    assert slider_value(page, "Batch size") == 1
    assert not toggle_state(page, "Kernel fusion") and not toggle_state(page, "CUDA graphs")
    assert query_params(page) == {}  # defaults keep the link clean
    step = simulated()
    assert step.metrics.bound_by == "CPU launch" and step.metrics.utilisation < 0.6
    assert_readouts(page, step)
    assert readouts(page)["GPU utilisation"] == f"{100 * step.metrics.utilisation:.0f}%"
    first = step.timeline.first_launches(FIRST_LAUNCHES)
    drawn = eventually(lambda: lanes(page))
    idle_us = float(first.step_us - first.metrics().gpu_busy_us)
    assert drawn["CPU launch"][0] == drawn["GPU kernel"][0] == FIRST_LAUNCHES  # a launch per kernel
    assert drawn["GPU kernel"][1] == pytest.approx(float(first.gpu_dur.sum()), rel=1e-6)
    # A bubble before every kernel but the first, and more idle than busy time in the lanes.
    assert drawn["idle"][0] >= FIRST_LAUNCHES - 1
    assert drawn["idle"][1] == pytest.approx(idle_us, rel=0.02) and drawn["idle"][1] > drawn["GPU kernel"][1]
    # "Where the time goes" says the same in words.
    split = page.locator("[data-testid=stHtml]", has_text="CPU launch cost").first
    assert format_us(step.metrics.cpu_launch_us) in split.inner_text()
    assert page.get_by_text("Launch-bound.", exact=False).first.is_visible()


# -- (b) ---------------------------------------------------------------------------------------------
def test_b_llama3_8b_crossover(page, app_url):
    """Pick Llama-3-8B; read the crossover off the sweep's marks and caption; the readouts flip there."""
    open_app(page, app_url, wait_for=CHART)
    preset = PRESETS["llama3-8b-h100"]
    pick(page, "preset", preset.title)
    query_params_when(page, lambda q: q.get("preset") == preset.title)
    assert_readouts(page, simulated("llama3-8b-h100"))
    cross = sweep(preset.model, preset.hardware, np.arange(BATCH_RANGE[0], BATCH_RANGE[1] + 1)).crossover
    unoptimised = cross["eager"]
    assert unoptimised is not None and unoptimised > 64  # deep in launch-bound territory
    caption = page.locator("[data-testid=stCaptionContainer]", has_text="The panel marked (current)")
    text = eventually(lambda: caption.first.inner_text())
    for combo, batch in cross.items():
        where = f"from batch {batch}" if batch is not None else "not within"
        assert f"{mode(combo).title}: GPU-bound {where}" in text, text
    marks = eventually(lambda: chart_layout(page, ".st-key-sim_sweep"))["annotations"]
    assert sorted(m for m in marks if m.startswith("GPU-bound from")) == sorted(
        f"GPU-bound from {b}" for b in cross.values() if b is not None
    )
    # Typed into the exact-batch box: one below the mark the CPU still binds, at the mark the GPU does.
    box = page.locator(".st-key-batch input")
    for batch, bound in ((unoptimised - 1, "CPU launch"), (unoptimised, "GPU")):
        box.fill(str(batch))
        rerun_after(page, lambda: box.press("Enter"))
        query_params_when(page, lambda q, b=batch: q.get("batch") == str(b))
        assert_readouts(page, simulated("llama3-8b-h100", batch=batch))
        assert metric_value(page, "Bound by") == bound


# -- (c) ---------------------------------------------------------------------------------------------
MY_MODEL = {  # URL key -> value: a Llama-3-8B-like shape in fp8 with a long context
    "hidden": 4096,
    "heads": 32,
    "kv_heads": 8,
    "ffn": 14336,
    "vocab": 128256,
    "context": 8192,
    "kernels_unfused": 30,
    "kernels_fused": 5,
    "bytes_per_el": 1,
}


def test_c_my_own_model(new_page, app_url):
    """Advanced → Your model: the title reads as a custom model, the readouts are its own, the URL carries it."""
    from ui.simulator.tab import MODEL_INPUTS, custom_title

    page = new_page()
    open_app(page, app_url, wait_for=CHART)
    before = readouts(page)
    page.locator("[data-testid=stExpander] summary", has_text="Advanced").click()
    for key, value in MY_MODEL.items():
        box = page.locator(f".st-key-{key} input")
        box.fill(str(value))
        rerun_after(page, lambda box=box: box.press("Enter"))
    preset = PRESETS[DEFAULT_PRESET]
    fields = {field: MY_MODEL[key] for key, _, field, *_ in MODEL_INPUTS}
    model = replace(preset.model, **fields, bytes_per_el=float(MY_MODEL["bytes_per_el"]))
    title = custom_title(preset, model, preset.hardware)
    assert page.get_by_text(title, exact=True).is_visible()
    assert page.locator("[data-testid=stAlert]:has-text('using')").count() == 0  # nothing was corrected
    step = simulated(model=model)
    assert_readouts(page, step)
    assert readouts(page) != before
    params = query_params_when(page, lambda q: all(k in q for k in MY_MODEL))
    assert {k: float(params[k]) for k in MY_MODEL} == {k: float(v) for k, v in MY_MODEL.items()}
    # The fusion section follows the model's own kernel counts.
    heading = f"Kernel fusion: {MY_MODEL['kernels_unfused']} → {MY_MODEL['kernels_fused']} kernels per layer"
    assert page.get_by_role("heading", name=heading).count() == 1
    # The link carries the model: another visitor opening it sees the same title and figures.
    other = new_page()
    open_app(other, page.url, wait_for=CHART)
    assert other.get_by_text(title, exact=True).is_visible()
    assert_readouts(other, step)


# -- (d) and (e) --------------------------------------------------------------------------------------
def recorded_fused_graph():
    from recorded_fits import recorded_fit  # tests/recorded_fits.py: each shipped run fitted once

    from core.probe_result import RECORDED_PATH, recorded_result

    result = recorded_result()
    run = result.run("fused+graph", 1)
    cal = recorded_fit(RECORDED_PATH.name, loo=False)
    index = next(i for i, p in enumerate(cal.points) if p.mode.name == "fused+graph" and p.batch == 1)
    return result, run, cal.timeline(index)


def test_d_measured_against_simulated_lanes(page, app_url):
    """The recorded H200 run's fused+graph step beside the calibrated model's, on one time axis."""
    result, run, predicted = recorded_fused_graph()
    open_app(page, app_url, "tab=Live+GPU+probe", wait_for=".st-key-pr_lanes .main-svg")
    assert page.get_by_text("Recorded run", exact=False).first.is_visible()
    pick(page, "pr_mode", "fused+graph")
    query_params_when(page, lambda q: q.get("pr_mode") == "fused+graph")
    page.wait_for_selector(".st-key-pr_sim_lanes .main-svg")
    assert metric_value(page, "Step time") == format_us(run.step_us_median)
    assert metric_value(page, "Bound by") == run.bound_by

    measured, simulated_ = (t.first_launches(FIRST_LAUNCHES) for t in (run.timeline, predicted))

    def both_drawn():
        ranges = [chart_layout(page, f".st-key-{k}") for k in ("pr_lanes", "pr_sim_lanes")]
        return ranges if all(ranges) else None

    left, right = eventually(both_drawn)
    assert left["x"] == pytest.approx(right["x"])  # one time axis
    assert left["x"] == pytest.approx([0, 1.02 * max(measured.step_us, simulated_.step_us)], rel=1e-6)
    drawn_m, drawn_s = (lanes(page, chart_index(page, k)) for k in ("pr_lanes", "pr_sim_lanes"))
    assert drawn_m["CPU launch"][0] == drawn_s["CPU launch"][0] == 1  # one graph launch each
    assert drawn_m["GPU kernel"][1] == pytest.approx(float(measured.gpu_dur.sum()), rel=1e-6)
    assert drawn_s["GPU kernel"][1] == pytest.approx(float(simulated_.gpu_dur.sum()), rel=1e-6)
    # The two charts sit side by side, not one under the other.
    boxes = [page.locator(f".st-key-{k}").bounding_box() for k in ("pr_lanes", "pr_sim_lanes")]
    assert abs(boxes[0]["y"] - boxes[1]["y"]) < 5 and boxes[0]["x"] + boxes[0]["width"] <= boxes[1]["x"] + 1


def test_e_export_to_perfetto(page, app_url):
    """Download the measured step as a Chrome trace and read it as Perfetto would."""
    _, run, _ = recorded_fused_graph()
    open_app(page, app_url, "tab=Live+GPU+probe&pr_mode=fused%2Bgraph", wait_for=".st-key-pr_lanes .main-svg")
    with page.expect_download(timeout=30_000) as download:
        page.get_by_role("button", name="Download the measured step as a Chrome trace").click()
    assert download.value.suggested_filename == "probe-fused_graph-b1.json"
    trace = json.loads(Path(download.value.path()).read_text())
    events = trace["traceEvents"]
    kernels = sorted(
        (e for e in events if e["ph"] == "X" and e["cat"] == "kernel"), key=lambda e: e["args"]["index"]
    )
    launches = [e for e in events if e["ph"] == "X" and e["cat"] == "launch"]
    tl = run.timeline
    assert len(kernels) == run.kernels_per_step == len(tl.gpu_names)
    assert [e["name"] for e in kernels] == list(tl.gpu_names)
    assert [e["ts"] for e in kernels] == pytest.approx(tl.gpu_start.tolist(), abs=1e-3)
    assert sum(e["dur"] for e in kernels) == pytest.approx(float(tl.gpu_dur.sum()), rel=1e-6)
    assert [e["name"] for e in launches] == list(tl.cpu_names)
    names = {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert any("recorded" in n for n in names), names
    # Flow arrows: the one graph launch starts one, each kernel it replays ends one.
    assert len([e for e in events if e["ph"] == "f"]) == len(kernels)
    assert {e["ph"] for e in events} <= {"X", "M", "s", "t", "f", "i", "C"}


# -- (f) ---------------------------------------------------------------------------------------------
def optimum(budget_mib: int):
    """(optimal layout, binding limits) for the Bucketing tab's defaults at this budget."""
    from sim.buckets import layouts as bk
    from sim.buckets import report as br
    from sim.buckets import workloads as wl

    preset = PRESETS[DEFAULT_PRESET]
    layouts = {n: bk.layout(n, 256) for n in ("chapter", "powers of two", "vLLM")}
    kwargs = {"memory": None, "budget_bytes": budget_mib * br.MIB, "max_buckets": 64}  # unfused graphs
    stats = br.compare(preset.model, preset.hardware, layouts, wl.uniform(256), objective="time", **kwargs)
    binding = br.binding_limits(preset.model, preset.hardware, wl.uniform(256), objective="time", **kwargs)
    return next(s for s in stats if s.is_optimum), binding


def test_f_bucket_list_under_a_budget(new_page, app_url):
    """At the default 256 MiB the graph count binds, and the page says so; at 64 MiB the budget binds. The
    optimal bucket list is the copyable block, and its copy button copies exactly that list."""
    from sim.buckets.report import MIB

    page = new_page(clipboard=True)
    open_app(page, app_url, "tab=Bucketing", wait_for="[data-testid=stCode]")
    for budget, binds in ((256, "the most graphs the optimiser may use (64)"), (64, "the memory budget")):
        if budget != 256:
            slider_input(page, "Graph memory budget (MiB)").focus()
            rerun_after(page, lambda: page.keyboard.press("Home"))
            for _ in range(budget // 16):  # 16 MiB a step
                rerun_after(page, lambda: page.keyboard.press("ArrowRight"))
            query_params_when(page, lambda q, b=budget: q.get("bk_budget") == str(b))
        best, binding = optimum(budget)
        listed = ", ".join(map(str, best.buckets))
        block = page.locator("[data-testid=stCode]").first
        eventually(lambda listed=listed: block.inner_text().strip() == listed)
        assert max(best.buckets) == 256 and len(best.buckets) == best.graphs
        assert page.get_by_text(f"The optimal layout's {best.graphs} buckets", exact=False).is_visible()
        assert metric_value(page, "Optimal layout") == f"{best.graphs} graphs"
        assert metric_value(page, "Pinned graph memory") == f"{best.memory_bytes / MIB:,.1f} MiB"
        sentence = binding.sentence(64, best, budget * MIB)
        assert sentence.startswith(f"The limit that binds is {binds}"), sentence
        assert page.locator("[data-testid=stAlert]", has_text=sentence).count() == 1
        page.evaluate("() => navigator.clipboard.writeText('nothing copied yet')")
        block.hover()
        block.get_by_role("button", name="Copy to clipboard").click()
        eventually(lambda listed=listed: page.evaluate("() => navigator.clipboard.readText()") == listed)
    assert best.graphs < 64  # the smaller budget gave a different, shorter list


# -- (g) ---------------------------------------------------------------------------------------------
def assert_score(page, want: str) -> None:
    """The quiz's Score reads `want` (once the rerun's elements have arrived), or fail showing it."""
    try:
        eventually(lambda: metric_value(page, "Score") == want)
    except AssertionError:
        assert metric_value(page, "Score") == want


def test_g_the_quiz(new_page, app_url):
    """Answer question 2 wrongly and question 1 rightly: a verdict each, marks drawn without an emoji font.
    The score survives switching tabs (session state) and never enters the link: someone opening the
    same link starts from zero."""
    from ui.quiz.questions import QUESTIONS

    page = new_page()
    open_app(page, app_url, "tab=Check+yourself")
    assert metric_value(page, "Score") == f"0/{len(QUESTIONS)}"
    q2 = QUESTIONS[1]
    wrong = next(i for i in range(len(q2.options)) if i != q2.answer)
    rerun_after(page, lambda: page.get_by_text(q2.options[wrong], exact=True).click())
    verdict = page.locator("[data-testid=stAlert]", has_text="Not quite.")
    verdict.wait_for()
    assert verdict.count() == 1 and q2.explanation[:60] in verdict.inner_text()
    assert "piecewise" in q2.explanation  # vLLM V1's piecewise graphs by token count (issue 14, item 3)
    assert page.get_by_text("(your answer)").count() == 1 and page.get_by_text("(right answer)").count() == 1
    assert_score(page, f"0/{len(QUESTIONS)}")
    q1 = QUESTIONS[0]
    rerun_after(page, lambda: page.get_by_text(q1.options[q1.answer], exact=True).click())
    assert_score(page, f"1/{len(QUESTIONS)}")
    assert page.locator("[data-testid=stAlert]", has_text="Right.").count() == 1
    assert page.get_by_text("(right answer, yours)").count() == 1
    assert page.get_by_text("See it on this page:").first.is_visible()
    # The marks are Material Symbols (a font Streamlit ships), not emoji that need a font Debian lacks.
    icons = page.locator("[data-testid=stMarkdownContainer] span[role=img][aria-label$=' icon']")
    assert icons.count() >= len(q1.options) + len(q2.options)
    assert set(icons.all_inner_texts()) <= {"check_circle", "cancel", "radio_button_unchecked"}
    family = icons.first.evaluate("(e) => getComputedStyle(e).fontFamily")
    assert "Material Symbols" in family
    assert page.evaluate(f"() => document.fonts.check('16px {family.split(',')[0]}')")
    body = page.locator("[data-testid=stApp]").inner_text()
    assert not any(ch in body for ch in "✅❌✔✖⭕")

    # Away to the simulator and back: the lazy tab re-renders, the answers are still there.
    rerun_after(page, lambda: page.locator("[data-testid=stTab]", has_text="Simulator").click())
    rerun_after(page, lambda: page.locator("[data-testid=stTab]", has_text="Check yourself").click())
    assert_score(page, f"1/{len(QUESTIONS)}")
    assert page.get_by_text("(right answer, yours)").count() == 1
    assert set(query_params(page)) <= {"tab"}
    # Someone opening the same link starts from zero.
    other = new_page()
    open_app(other, page.url)
    assert metric_value(other, "Score") == f"0/{len(QUESTIONS)}"


# -- (h) ---------------------------------------------------------------------------------------------
def test_h_share_a_view(new_page, app_url):
    """Set up a view, press Copy link, open what was copied in another browser: the same view."""
    preset = PRESETS["llama3-8b-h100"]
    page = new_page(clipboard=True)
    open_app(page, app_url, wait_for=CHART)
    pick(page, "preset", preset.title)
    box = page.locator(".st-key-batch input")
    box.fill("24")
    rerun_after(page, lambda: box.press("Enter"))
    rerun_after(page, lambda: click_toggle(page, "CUDA graphs"))
    want = {"preset": preset.title, "batch": "24", "graphs": "true"}
    query_params_when(page, lambda q: q == want)
    step = simulated("llama3-8b-h100", batch=24, graphs=True)
    assert_readouts(page, step)
    page.evaluate("() => navigator.clipboard.writeText('nothing copied yet')")
    frame = page.frame_locator("[data-testid=stIFrame]").first
    frame.locator("button#copy").click()
    eventually(lambda: frame.locator("#label").inner_text() == "Link copied")
    copied = page.evaluate("() => navigator.clipboard.readText()")
    assert copied == page.url
    other = new_page()
    open_app(other, copied, wait_for=CHART)
    assert query_params_when(other, lambda q: q == want)
    assert other.locator(".st-key-preset input[role=combobox]").input_value() == preset.title
    assert toggle_state(other, "CUDA graphs") and not toggle_state(other, "Kernel fusion")
    assert slider_value(other, "Batch size") == 24
    assert_readouts(other, step)
