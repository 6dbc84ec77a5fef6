"""The Simulator's "GPUs (tensor parallel)" control: bound to the URL, drawn as one GPU's lanes."""

from dataclasses import replace
from pathlib import Path

from streamlit.testing.v1 import AppTest

from core.step_plan import BASELINE, FUSED_GRAPH, StepPlan
from sim.config import PRESETS
from sim.step.schedule import simulate_step
from ui.charts import format_us

APP = str(Path(__file__).resolve().parents[1] / "app.py")
CHAPTER = PRESETS["chapter"]


def run_app(**params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def step_time(at: AppTest) -> str:
    return next(m.value for m in at.metric if m.label == "Step time")


def tp_notes(at: AppTest) -> list[str]:
    return [i.value for i in at.info if "Tensor parallel over" in i.value]


def test_one_gpu_by_default_and_a_link_opens_two():
    at = run_app()
    assert at.selectbox(key="tp").value == "1" and not tp_notes(at)
    at = run_app(tp="2", fusion="true", graphs="true")
    expected = simulate_step(CHAPTER.model, CHAPTER.hardware, replace(StepPlan(FUSED_GRAPH, 1), tp=2))
    assert at.selectbox(key="tp").value == "2" and step_time(at) == format_us(expected.metrics.step_us)
    (note,) = tp_notes(at)
    assert "64 all-reduces" in note and "published figures" in note and "not fitted" in note


def test_the_control_moves_the_step():
    at = run_app()
    one = step_time(at)
    at.selectbox(key="tp").set_value("8").run()
    assert not at.exception
    assert step_time(at) != one and "over 8 GPUs" in tp_notes(at)[0]


def test_a_gpu_count_that_is_not_offered_is_reported_and_ignored():
    at = run_app(tp="3")
    assert at.selectbox(key="tp").value == "1" and not tp_notes(at)
    assert any("`tp`" in w.value for w in at.warning)


def test_allreduces_are_drawn_in_their_own_colour():
    from ui.charts import COMM_COLOUR, lanes_figure

    tl = simulate_step(CHAPTER.model, CHAPTER.hardware, StepPlan(BASELINE, 1, 2)).timeline
    for whole, expected in ((False, 2), (True, 64)):  # the first 18 launches hold layer 0's two
        comm = {t.name: t for t in lanes_figure(tl, whole_step=whole).data}["communication"]
        assert comm.marker.color == COMM_COLOUR and len(comm.customdata) == expected
        assert all("all_reduce" in row[0] for row in comm.customdata)
    one = simulate_step(CHAPTER.model, CHAPTER.hardware, StepPlan(BASELINE, 1, 1)).timeline
    assert "communication" not in {t.name for t in lanes_figure(one).data}
