"""The "Check yourself" tab: six questions on the chapter (`questions`), each answered once.

The first answer is the one that counts (a wrong one teaches more, so it is kept
and explained, not retried). Answers and the score live in `st.session_state`,
never in the URL: a shared link opens the questions, not someone else's score.
Each explanation ends with where on this page the effect can be seen.
"""

from __future__ import annotations

import streamlit as st

from ui.quiz.questions import QUESTIONS, Question

ANSWERS_KEY = "quiz_answers"  # session state: question id -> index of the first option chosen


def answers() -> dict[str, int]:
    """This session's first answers, question id -> option index."""
    return st.session_state.setdefault(ANSWERS_KEY, {})


def score() -> tuple[int, int]:
    """(correct, answered) for this session."""
    given = answers()
    correct = sum(1 for q in QUESTIONS if given.get(q.qid) == q.answer)
    return correct, len([q for q in QUESTIONS if q.qid in given])


def _record(question: Question) -> None:
    # on_change callback: keep only the first answer to each question.
    choice = st.session_state.get(f"quiz_{question.qid}")
    if choice is not None and question.qid not in answers():
        answers()[question.qid] = question.options.index(choice)


def _reset() -> None:
    st.session_state[ANSWERS_KEY] = {}
    for q in QUESTIONS:
        st.session_state.pop(f"quiz_{q.qid}", None)


# Verdict marks: Material Symbols (Streamlit ships the font) and words, never emoji, which render as
# empty boxes where no emoji font is installed (Debian's Chromium, many Linux desktops).
RIGHT_MARK, WRONG_MARK, OTHER_MARK = (
    ":green[:material/check_circle:]",
    ":red[:material/cancel:]",
    ":gray[:material/radio_button_unchecked:]",
)


def option_line(option: str, right: bool, chosen: bool) -> str:
    """One answered option as markdown: its mark, its text, and in words what it is."""
    mark = RIGHT_MARK if right else (WRONG_MARK if chosen else OTHER_MARK)
    words = (
        ("right answer, yours" if chosen else "right answer") if right else ("your answer" if chosen else "")
    )
    return f"{mark} {option}" + (f" **({words})**" if words else "")


def _render_question(number: int, q: Question) -> None:
    st.markdown(f"**Question {number} of {len(QUESTIONS)}.** {q.prompt}")
    chosen = answers().get(q.qid)
    if chosen is None:
        st.radio(
            f"Question {number}",
            q.options,
            index=None,
            key=f"quiz_{q.qid}",
            label_visibility="collapsed",
            on_change=_record,
            args=(q,),
        )
        return
    for i, option in enumerate(q.options):
        st.markdown(option_line(option, right=i == q.answer, chosen=i == chosen))
    verdict = st.success if chosen == q.answer else st.error
    verdict(("Right. " if chosen == q.answer else "Not quite. ") + q.explanation)
    st.info(f"**See it on this page:** {q.where}")


def render() -> None:
    st.subheader("Check yourself")
    st.markdown(
        "**Which step time to read:** the Simulator's *Step time*, from the first launch to the last kernel: the "
        "questions ask what sets it, and the page part each answer points to shows it."
    )
    st.caption(
        "Answer before you look. Your first answer counts; a wrong one comes with the explanation "
        "and the part of the page to go back to. The score is kept for this session only."
    )
    correct, answered = score()
    st.metric(
        "Score",
        f"{correct}/{len(QUESTIONS)}",
        help=f"{answered} of {len(QUESTIONS)} answered in this session",
        width="content",
    )
    for number, q in enumerate(QUESTIONS, start=1):
        st.divider()
        _render_question(number, q)
    if answered:
        st.button("Start over", key="quiz_reset", on_click=_reset)
