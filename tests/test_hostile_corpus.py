"""Issue 15's proof: the generated hostile corpus (tests/hostile_corpus.py) through every upload point
and every CLI that reads the same files -- no traceback, and no case past MAX_SECONDS.

Upload points: the probe result uploaders of the Live GPU probe and Calibration tabs, the Bucketing
tab's CSV, and the profiler-trace uploader (found on whichever tab holds one). CLIs: `python -m sim
calibrate FILE`, `python bench/probe_speed.py FILE`, `python -m sim buckets --csv FILE`, `python -m sim
trace FILE` -- each case through the entry point in-process as `python -m` calls it, and a few as real
processes. Each case's file is built once; a trace that takes seconds to read (SLOW_TO_READ) is read
once and shared by the trace CLI, the page and the reader's test.

The time bound catches hangs and unbounded work, not speed: a fine case takes well under a second.
A case that fails in code this suite does not own is marked in KNOWN with the fix it needs.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from app_pages import as_read
from hostile_corpus import (
    CLIS,
    CSV_CASES,
    MAX_SECONDS,
    RESULT_CASES,
    SLOW_TO_READ,
    TRACE_CASES,
    case_bytes,
    run_one,
    write,
)
from streamlit.testing.v1 import AppTest

from core import probe_result

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
KNOWN_TABS = ("Simulator", "Live GPU probe", "Bucketing", "Calibration", "Check yourself")

# (where, case) -> why it fails today and the fix, in code owned elsewhere. `where`: a CLI of CLIS,
# "trace-reader" (core.trace.analyse) or "trace-page" (the trace uploader). strict: a fix turns the
# entry into a failure here, so it is removed with the fix.
KNOWN: dict = {}


def known(where: str, *values, id: str | None = None):
    """A pytest.param of `values` (the case's name last), xfail where KNOWN lists the case."""
    why = KNOWN.get((where, values[-1]))
    marks = [pytest.mark.xfail(reason=why, strict=True)] if why else []
    return pytest.param(*values, marks=marks, id=id)


# -- the CLIs --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    write(folder)
    return folder


_SHARED_READS: dict[str, object] = {}  # a slow case -> what reading it gave: a Trace, or the TraceError


@pytest.fixture(autouse=True)
def read_slow_cases_once(monkeypatch):
    """core.trace.read_trace, reading each SLOW_TO_READ case once for the whole module."""
    import core.trace

    original = core.trace.read_trace

    def read_trace(source, name=None):
        case = name or getattr(source, "name", None) or Path(str(source)).name
        if case not in SLOW_TO_READ:
            return original(source, name=name)
        if case not in _SHARED_READS:
            try:
                _SHARED_READS[case] = original(source, name=name)
            except core.trace.TraceError as err:
                _SHARED_READS[case] = err
        found = _SHARED_READS[case]
        if isinstance(found, core.trace.TraceError):
            raise core.trace.TraceError(str(found))
        return found

    monkeypatch.setattr(core.trace, "read_trace", read_trace)


CLI_PARAMS = [
    known(cli, cli, name, id=f"{cli}-{name}")
    for cli, (kind, _, _) in CLIS.items()
    for name in {"result": RESULT_CASES, "csv": CSV_CASES, "trace": TRACE_CASES}[kind]
]


@pytest.mark.parametrize(("cli", "name"), CLI_PARAMS)
def test_cli_answers_every_case_without_a_traceback(corpus, cli, name):
    record = run_one(cli, corpus / CLIS[cli][0] / name)
    assert not record["traceback"], f"{CLIS[cli][2]} on {name}: {record['tail']}"
    assert record["rc"] in (0, 1, 2), record
    assert record["seconds"] <= MAX_SECONDS, f"{CLIS[cli][2]} on {name} took {record['seconds']:.1f} s"
    if record["rc"] == 2:  # refused: one line that says why, the file named or its field
        lines = record["tail"].strip().splitlines()
        assert len(lines) == 1 and len(lines[0]) < 600, record["tail"]


@pytest.mark.parametrize(
    ("command", "case"),
    [
        (["-m", "sim", "calibrate"], "result/batch_400_digits.json"),
        (["bench/probe_speed.py"], "result/batch_400_digits.json"),
        (["bench/probe_speed.py"], "result/nested_bomb.json"),
        (["-m", "sim", "buckets", "--csv"], "csv/huge_batch.csv"),
        (["-m", "sim", "trace"], "trace/nested_bomb.json"),
    ],
)
def test_real_processes_exit_2_with_one_line(corpus, command, case):
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *command, str(corpus / case)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert time.perf_counter() - started <= MAX_SECONDS + 5  # the interpreter's start-up on top
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# -- the page --------------------------------------------------------------------------------------------
def page_on(tab: str, **params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["tab"] = tab
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def upload(at: AppTest, key: str, name: str, data: bytes, mime: str) -> float:
    started = time.perf_counter()
    at.file_uploader(key=key).set_value((name, data, mime)).run()
    return time.perf_counter() - started


def assert_answered(at: AppTest, where: str, seconds: float) -> None:
    assert not at.exception, f"{where}: {[e.message for e in at.exception][:1]}"
    assert at.title and at.title[0].value == "launch-bound", where
    assert seconds <= MAX_SECONDS, f"{where} took {seconds:.1f} s"


_PAGES: dict[tuple, AppTest] = {}


def page(tab: str, **params) -> AppTest:
    """One page per tab for the whole module: each case replaces the previous upload, as a visitor would."""
    key = (tab, *sorted(params.items()))
    if key not in _PAGES:
        _PAGES[key] = page_on(tab, **params)
    return _PAGES[key]


# A refusal is drawn by the same lines of the page for every case: the reader's ValueError or TraceError, in an
# error box that names the file. These cases show it on the page; every other case the reader refuses is checked
# through the reader alone (below), where the page would add nothing but its own run (a third of a second each).
REFUSED_ON_PAGE = {"result": "not_json.json", "trace": "not_json.json"}


def result_refusal(name: str) -> str | None:
    """Why the page's reader refuses the result case (its ValueError), or None where it reads it or where the page
    refuses it itself before reading (too large: the page releases the upload, its own code)."""
    from ui.probe_results import _parse_upload, too_large

    data = case_bytes("result", name)
    if too_large(len(data), probe_result.MAX_RESULT_BYTES, "result"):
        return None
    started = time.perf_counter()
    try:
        _parse_upload(data)
    except ValueError as err:  # anything else fails the test: the page catches ValueError only
        return str(err)
    finally:
        assert time.perf_counter() - started <= MAX_SECONDS, f"reading {name} took too long"
    return None


@pytest.mark.parametrize("tab", ["Live GPU probe", "Calibration"])
@pytest.mark.parametrize("name", list(RESULT_CASES))
def test_probe_result_uploads(tab, name):
    refusal = result_refusal(name)
    if refusal and name != REFUSED_ON_PAGE["result"]:
        return  # refused by the reader the page calls, with a ValueError (all the page catches), in time
    at = page(tab)
    key = "pr_upload" if tab == "Live GPU probe" else "cal_upload"
    seconds = upload(at, key, name, case_bytes("result", name), "application/json")
    assert_answered(at, f"{tab}: {name}", seconds)
    if refusal:  # the page names the file and says the reader's sentence
        shown = [as_read(e.value) for e in at.error]
        assert any(name in e and "cannot be shown" in e for e in shown), f"{tab}: {name}: {shown}"


@pytest.mark.parametrize("name", list(CSV_CASES))
def test_histogram_uploads(name):
    at = page("Bucketing", bk_workload="uploaded CSV")
    seconds = upload(at, "bk_csv_file", name, case_bytes("csv", name), "text/csv")
    assert_answered(at, f"Bucketing: {name}", seconds)
    assert at.get("plotly_chart"), f"Bucketing: {name}: the tab's charts are gone"


def trace_uploader(at: AppTest):
    """The page's profiler-trace uploader on this page, or None (its key changes after each upload)."""
    for widget in at.file_uploader:
        if "trace" in f"{widget.key} {widget.label}".lower():
            return widget
    return None


_TRACE_TAB: list = []


def trace_tab() -> str | None:
    """The tab that holds the trace uploader: not one of the five known ones. None before it exists."""
    if not _TRACE_TAB:
        from ui.url_params import TAB_LABELS

        found = [t for t in TAB_LABELS if t not in KNOWN_TABS and trace_uploader(page(t)) is not None]
        _TRACE_TAB.append(found[0] if found else None)
    return _TRACE_TAB[0]


@pytest.mark.parametrize("name", [known("trace-page", n) for n in TRACE_CASES])
def test_trace_uploads(name):
    outcome, detail = reader_check(name)
    if outcome == "refused" and name != REFUSED_ON_PAGE["trace"] and ("trace-page", name) not in KNOWN:
        return  # refused by the reader the page calls (ui/trace/sources.py): test_trace_reader holds it
    tab = trace_tab()
    if tab is None:
        pytest.skip("no profiler-trace uploader on the page yet (ui/trace/tab.py); core.trace runs below")
    # A case known to break the page gets a page of its own: what it leaves behind would fail the rest.
    at = page_on(tab) if ("trace-page", name) in KNOWN else page(tab)
    widget = trace_uploader(at)
    assert widget is not None, f"{tab}: the trace uploader is gone"
    started = time.perf_counter()
    widget.set_value([(name, case_bytes("trace", name), "application/json")]).run()
    assert_answered(at, f"{tab}: {name}", time.perf_counter() - started)
    if outcome == "refused":  # the page says the reader's sentence
        shown = [as_read(e.value) for e in at.error]
        assert any(detail[:40] in e for e in shown), f"{tab}: {name}: {shown}, not {detail!r}"


_CHECKED: dict[str, tuple] = {}


def reader_check(name: str) -> tuple[str, str]:
    """hostile_trace_fuzz.check of the case, once per module: ('read' | 'refused' | 'problem', detail)."""
    from hostile_trace_fuzz import check

    if name not in _CHECKED:
        started = time.perf_counter()
        _CHECKED[name] = (*check(name, case_bytes("trace", name)), time.perf_counter() - started)
    return _CHECKED[name][:2]


@pytest.mark.parametrize("name", [known("trace-reader", n) for n in TRACE_CASES])
def test_trace_reader(name):
    """The reader the trace uploader calls, and everything that reads its steps (lanes, what-ifs, the kernel
    table, the CLI's report and JSON): TraceError (one sentence) or a report, never anything else."""
    outcome, detail = reader_check(name)
    assert outcome in ("read", "refused"), f"{name}: {detail}"
    assert _CHECKED[name][2] <= MAX_SECONDS, name


def test_the_corpus_is_large_enough():
    assert len(RESULT_CASES) + len(CSV_CASES) + len(TRACE_CASES) >= 50
    assert min(len(RESULT_CASES), len(CSV_CASES), len(TRACE_CASES)) >= 20
