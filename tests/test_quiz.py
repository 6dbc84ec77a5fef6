"""The "Check yourself" tab through AppTest: answering, scoring, first answer counts, reset."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ui.quiz.questions import QUESTIONS, Question
from ui.quiz.tab import ANSWERS_KEY, RIGHT_MARK, WRONG_MARK, option_line
from ui.url_params import TAB_LABELS

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def quiz_page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["tab"] = "Check yourself"
    return at.run()


def score_text(at: AppTest) -> str:
    return next(m.value for m in at.metric if m.label == "Score")


def test_six_questions_cover_the_chapter():
    assert len(QUESTIONS) == 6
    text = " ".join(q.prompt + " ".join(q.options) + q.explanation for q in QUESTIONS).lower()
    for topic in ("address", "prefill", "bucket", "scratch", "batch", "overlap"):
        assert topic in text, topic
    # Correct answers are not all in the same position.
    assert len({q.answer for q in QUESTIONS}) >= 3
    for q in QUESTIONS:
        # Each pointer starts at one of the page's tabs.
        assert any(q.where.startswith(f"{label} tab → ") for label in TAB_LABELS), q.where


def test_question_validates():
    with pytest.raises(ValueError, match="answer"):
        Question("x", "?", ("a", "b"), 2, "because", "Simulator tab")
    with pytest.raises(ValueError, match="options"):
        Question("x", "?", ("a", "a"), 0, "because", "Simulator tab")


def test_tab_opens_with_no_answers_and_zero_score():
    at = quiz_page()
    assert not at.exception
    assert score_text(at) == "0/6"
    assert [r.key for r in at.radio] == [f"quiz_{q.qid}" for q in QUESTIONS]
    assert all(r.value is None for r in at.radio)
    assert not at.success and not at.error


def test_right_answer_scores_and_explains_with_a_pointer():
    at = quiz_page()
    q = QUESTIONS[0]
    at.radio(key="quiz_q1").set_value(q.options[q.answer]).run()
    assert not at.exception
    assert score_text(at) == "1/6"
    assert at.success[0].value.startswith("Right.")
    assert q.explanation in at.success[0].value
    assert any(q.where in i.value for i in at.info)
    # The answered question is no longer a radio: the first answer is locked in.
    assert "quiz_q1" not in [r.key for r in at.radio]


def test_wrong_answer_does_not_score_but_still_explains():
    at = quiz_page()
    q = QUESTIONS[5]
    wrong = next(o for i, o in enumerate(q.options) if i != q.answer)
    at.radio(key="quiz_q6").set_value(wrong).run()
    assert score_text(at) == "0/6"
    assert at.error[0].value.startswith("Not quite.")
    assert any("Simulator tab" in i.value for i in at.info)
    assert any("(your answer)" in m.value and WRONG_MARK in m.value for m in at.markdown)
    assert any("(right answer)" in m.value and RIGHT_MARK in m.value for m in at.markdown)


def test_all_right_scores_six_and_reset_clears():
    at = quiz_page()
    for q in QUESTIONS:
        at.radio(key=f"quiz_{q.qid}").set_value(q.options[q.answer]).run()
    assert score_text(at) == "6/6"
    assert len(at.success) == 6
    at.button(key="quiz_reset").click().run()
    assert score_text(at) == "0/6"
    assert len(at.radio) == 6


def test_score_lives_in_session_state_not_in_the_url():
    at = quiz_page()
    q = QUESTIONS[1]
    at.radio(key="quiz_q2").set_value(q.options[q.answer]).run()
    assert at.session_state[ANSWERS_KEY] == {"q2": q.answer}
    assert not any(k.startswith("quiz") for k in at.query_params)
    # A fresh session (someone opening the same link) starts from zero.
    assert score_text(quiz_page()) == "0/6"


def test_verdict_marks_need_no_emoji_font():
    # Debian's Chromium has no emoji font: a mark must be a Material icon or words, never an emoji.
    for right in (False, True):
        for chosen in (False, True):
            line = option_line("An option.", right=right, chosen=chosen)
            assert all(ord(ch) < 0x2190 for ch in line), line
            assert ":material/" in line
    assert "right answer, yours" in option_line("x", right=True, chosen=True)


def test_explanations_agree_with_the_page():
    text = {q.qid: q.explanation + " ".join(q.options) for q in QUESTIONS}
    # One shared pool (README, Bucketing tab), not a pool per graph.
    assert "own pool" not in text["q3"] and "its own static buffers and pool" not in text["q3"]
    assert "shared memory pool" in text["q3"]
    # Prefill is not always eager: vLLM V1 captures piecewise graphs by token count.
    assert "piecewise" in text["q2"] and "token count" in text["q2"]
