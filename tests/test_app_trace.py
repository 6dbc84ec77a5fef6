"""The "Your trace" tab through AppTest: recorded traces, uploads (good, bad, several ranks), the what-ifs,
the comparison, the URL, and one session's upload never reaching another."""

import gzip
import json
from pathlib import Path

import pytest
from app_pages import as_read, metrics, open_tab, tables  # tests/app_pages.py

from core.trace import analyse

ROOT = Path(__file__).resolve().parents[1]
HF = ROOT / "data" / "traces" / "hf"
TAB = "Your trace"


def _lanes_spec(at, index=0) -> dict:
    return json.loads(at.get("plotly_chart")[index].proto.spec)


def _lanes_of(spec) -> set:
    return {y for trace in spec["data"] for y in (trace.get("y") or []) if y is not None}


def _upload(at, *files):
    """Upload (name, bytes) pairs into the tab's current uploader and run."""
    uploader = next(u for u in at.file_uploader if u.key and u.key.startswith("tr_upload_"))
    values = [(name, data, "application/json") for name, data in files]
    return uploader.set_value(values).run()


def _no_traceback(at):
    assert not at.exception, [e.value for e in at.exception]


def test_the_tab_opens_on_a_recorded_trace_with_the_readers_numbers():
    at = open_tab(TAB)
    _no_traceback(at)
    step = analyse(HF / "hf_llama_eager_profilerstep.json.gz").steps[0]
    shown = metrics(at)
    # Kernels only: the step's copies and memsets are counted apart, beside the readout.
    kernels = int((step.timeline.gpu_kinds == "kernel").sum())
    assert shown["Kernels / step"] == f"{kernels:,}" and shown["Bound by (as traced)"] == "CPU launch"
    assert shown["Launches"] == f"{step.launches:,}" and shown["GPU streams"] == "1"
    # Where, when and how, from the files: the trace's own device and clock, the command beside it.
    assert as_read(at.info[0].value).endswith(
        "recorded on NVIDIA H200, 01 Dec 2026 20:53 UTC, made with `python tools/hf_traces.py --out /root/out/hf` · "
        "20,117 events, 3 steps"
    )
    assert any("What CUDA graphs and fusion would save" in h.value for h in at.subheader)


def test_a_graphed_trace_is_gpu_bound_and_has_no_graphs_what_if():
    at = open_tab(TAB, tr_trace="HF Llama-1B CUDA graph", tr_whatif="with CUDA graphs")
    _no_traceback(at)
    assert metrics(at)["Bound by (as traced)"] == "GPU" and metrics(at)["Graph launches"] == "1"
    captions = " ".join(c.value for c in at.caption)
    assert "already replays a CUDA graph" in captions


def test_the_what_if_is_drawn_beside_the_trace_and_the_aliases_work():
    at = open_tab(TAB, tr_whatif="graphs")  # the what-if's own name is an alias of its option
    _no_traceback(at)
    assert at.selectbox(key="tr_whatif").value == "with CUDA graphs"
    lanes = _lanes_of(_lanes_spec(at))
    assert {"CPU · measured", "GPU · measured", "CPU · simulated", "GPU · simulated"} <= lanes
    table = tables(at)[0].value
    assert list(table["the step"]) == [
        "as traced",
        "without the profiler (estimated)",
        "with fusion (estimate)",
        "with CUDA graphs (estimate)",
        "with fusion + graphs (estimate)",
    ]


def test_two_traces_side_by_side_on_one_time_axis():
    at = open_tab(TAB, tr_compare="HF Llama-1B CUDA graph", tr_whole="true")
    _no_traceback(at)
    left, right = _lanes_spec(at, 0), _lanes_spec(at, 1)
    assert left["layout"]["xaxis"]["range"] == right["layout"]["xaxis"]["range"]


def test_steps_are_picked_by_their_index_and_bound_to_the_url():
    at = open_tab(TAB, tr_step="3")
    _no_traceback(at)
    assert at.radio(key="tr_step").value == 3
    at = open_tab(TAB, tr_step="99")  # not a step of this trace: the first one, no traceback
    _no_traceback(at)
    assert at.radio(key="tr_step").value == 1


def test_a_named_step_range_that_is_not_there_is_one_clear_error():
    at = open_tab(TAB, tr_range="no_such_range")
    _no_traceback(at)
    assert any("no CPU range named" in as_read(e.value) for e in at.error)


def test_an_upload_becomes_the_trace_shown():
    at = open_tab(TAB)
    at = _upload(at, ("my_step.pt.trace.json.gz", (HF / "hf_llama_graph.json.gz").read_bytes()))
    _no_traceback(at)
    assert at.selectbox(key="tr_trace").value == "uploaded: my_step.pt.trace.json.gz"
    assert metrics(at)["Graph launches"] == "1"
    # The uploader was replaced by a fresh one: the file's bytes are not held any more.
    assert all(not u.value for u in at.file_uploader)


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("cpu.json.gz", (HF / "cpu_only_eager_sync.json.gz").read_bytes(), "CPU-only profile"),
        ("junk.json", b"\x00\x01 not json", "junk.json is not JSON"),
        (
            "cut.json.gz",
            gzip.compress(b'{"traceEvents": [{"ph": "X"}]}' * 50, mtime=0)[:60],
            "truncated|gzip",
        ),
        ("profile.nsys-rep.json", b"NSYS\x00" + bytes(range(200)), "Nsight Systems|not UTF-8|JSON"),
    ],
)
def test_a_bad_upload_is_named_and_the_page_keeps_working(name, data, message):
    import re

    at = open_tab(TAB)
    at = _upload(at, (name, data))
    _no_traceback(at)
    errors = [as_read(e.value) for e in at.error]
    assert errors and re.search(message, errors[0]), errors
    assert at.selectbox(key="tr_trace").value == "HF Llama-1B eager"  # what was shown is still shown
    assert metrics(at)["Kernels / step"] == "828"  # and 3 copies and 1 memset, counted apart


def test_several_files_are_ranks():
    at = open_tab(TAB)
    data = (HF / "hf_llama_eager_sync.json.gz").read_bytes()
    at = _upload(at, ("rank-0.trace.json.gz", data), ("rank-1.trace.json.gz", data))
    _no_traceback(at)
    assert at.number_input(key="tr_rank").value == 0
    at.number_input(key="tr_rank").set_value(1).run()
    _no_traceback(at)
    assert "rank 1 of 2" in at.info[0].value


def test_one_sessions_upload_never_reaches_another():
    first = open_tab(TAB)
    first = _upload(first, ("mine.json.gz", (HF / "hf_llama_graph.json.gz").read_bytes()))
    assert first.selectbox(key="tr_trace").value == "uploaded: mine.json.gz"
    second = open_tab(TAB, tr_trace="uploaded: mine.json.gz")
    _no_traceback(second)
    assert second.selectbox(key="tr_trace").value == "HF Llama-1B eager"
    assert any("uploads stay in the session" in w.value for w in second.warning)


def test_an_upload_name_renders_as_text():
    at = open_tab(TAB)
    name = "![x](http://127.0.0.1:9/pixel.png) [click me](https://example.com).json"
    at = _upload(at, (name, b"not json"))
    _no_traceback(at)
    shown = at.error[0].value
    assert "](" not in shown.replace("\\]\\(", "")  # every bracket is escaped: no image, no link


def test_an_upload_over_the_limit_is_refused_unread(monkeypatch):
    import core.trace
    import ui.trace.sources

    monkeypatch.setattr(ui.trace.sources, "UPLOAD_MB", 1)

    def never(*args, **kwargs):
        raise AssertionError("an oversized upload was read")

    monkeypatch.setattr(core.trace, "read_trace", never)
    at = open_tab(TAB)
    at = _upload(at, ("big.json", b" " * (2**20 + 1)))  # a client need not respect the browser's check
    _no_traceback(at)
    assert any("larger than 1 MB" in as_read(e.value) for e in at.error)


def test_the_server_holds_uploaded_traces_within_a_byte_budget(monkeypatch):
    """Issue 24: the parsed uploads of all sessions, with the analyses drawn from them, are bounded by bytes
    (the cap of 8 traces let 16 large ones take 5.7 GB). The newest stays even alone over budget."""
    import core.trace as reader
    import ui.trace.sources as sources
    from ui.trace.analysis import report_of, whatifs_of
    from ui.uploads import ByteBudget, deep_nbytes

    def upload():
        return (reader.read_trace(HF / "hf_llama_eager_sync.json.gz"),)

    one = deep_nbytes(upload())
    monkeypatch.setattr(sources, "_RESIDENT", ByteBudget(int(2.5 * one), sources.MAX_RESIDENT))
    for i in range(5):
        sources._keep_resident(f"upload-{i}", upload())
    assert len(sources._RESIDENT) == 2 and sources._RESIDENT.total <= 2.5 * one
    assert sources._resident("upload-2") is None and sources._resident("upload-4") is not None
    # Drawing the newest caches its steps and what-ifs on it: counted again, the older one goes.
    ranks = sources._resident("upload-4")
    report = report_of(ranks[0], None)
    whatifs_of(report, report.steps[0])
    sources._recount("upload-4")
    assert len(sources._RESIDENT) == 1 and sources._RESIDENT.total > 1.5 * one


def test_an_upload_pushed_out_of_the_budget_asks_to_be_uploaded_again(monkeypatch):
    import ui.trace.sources as sources
    from ui.uploads import ByteBudget

    monkeypatch.setattr(sources, "_RESIDENT", ByteBudget(1, sources.MAX_RESIDENT))  # room for the newest only
    data = (HF / "hf_llama_graph.json.gz").read_bytes()
    at = open_tab(TAB)
    at = _upload(at, ("first.json.gz", data))
    at = _upload(at, ("second.json.gz", data))
    _no_traceback(at)
    assert metrics(at)["Graph launches"] == "1"
    at.selectbox(key="tr_trace").set_value("uploaded: first.json.gz").run()
    _no_traceback(at)
    assert any("no longer held on this server" in w.value for w in at.warning)


EVIL = "https://evil.example/x www.evil.example me@evil.example"


def _bare_links(at) -> list[str]:
    """Markdown sources on the page (and widget help) that Streamlit would show with a live link in them."""
    from test_hostile_markdown import BARE_LINK

    kinds = ("markdown", "caption", "info", "warning", "error", "success", "subheader")
    sources = [el.value for kind in kinds for el in at.get(kind)]
    sources += [w.proto.help for w in (*at.radio, *at.selectbox, *at.text_input) if w.proto.help]
    return [s for s in sources if "evil" in s and BARE_LINK.search(as_read(s))]


def test_bare_urls_from_the_file_the_name_and_the_link_render_as_text():
    """Issue 24: the device in the trace, the upload's name, a URL naming a trace and a step range."""
    events = json.loads(gzip.decompress((HF / "hf_llama_eager_sync.json.gz").read_bytes()))
    events["deviceProperties"] = [{"id": 0, "name": EVIL}]
    at = open_tab(TAB, tr_trace=EVIL, tr_range="www.evil.example")
    _no_traceback(at)
    assert any("evil" in w.value for w in at.warning)  # the link's trace is named, as text
    at = _upload(at, ("www.evil.example.json", json.dumps(events).encode()))
    _no_traceback(at)
    assert at.selectbox(key="tr_trace").value == "uploaded: www.evil.example.json"
    at.text_input(key="tr_range").set_value("").run()
    assert any("evil" in i.value for i in at.info)  # the device and the name are shown
    assert not _bare_links(at)


def test_the_step_without_the_profiler_beside_the_traced_one_estimated():
    from sim.trace.untraced import untraced_steps
    from ui.charts import format_us

    at = open_tab(TAB)
    _no_traceback(at)
    report = analyse(HF / "hf_llama_eager_profilerstep.json.gz")
    step, u = report.steps[0], untraced_steps(report)[0]
    shown = metrics(at)
    assert shown["Step time (as traced)"] == format_us(step.metrics.step_us)
    assert (
        shown["Step time (no profiler, estimated)"] == format_us(u.step_us) != shown["Step time (as traced)"]
    )
    assert shown["Traced / without"] == f"{step.metrics.step_us / u.step_us:.2f}×"
    assert any("as traced, and without the profiler" in h.value for h in at.subheader)
    both = _lanes_spec(at, 1)  # after the step's own lanes: the two steps on one time axis
    assert _lanes_of(both) == {
        "CPU · as traced",
        "GPU · as traced",
        "CPU · without the profiler",
        "GPU · without the profiler",
    }

    def last_launch(which: str) -> float:  # where the host lane's last drawn interval starts
        (cpu,) = [t for t in both["data"] if t["name"] == f"CPU launch · {which}"]
        return max(cpu["base"])

    # The profiler's cost came out of the host lane.
    assert last_launch("without the profiler") < 0.9 * last_launch("as traced")
    captions = " ".join(c.value for c in at.caption)
    assert "is estimated" in captions and "Why a traced host-bound step runs slow" in captions
    table = tables(at)[0].value
    assert list(table["the step"])[:2] == ["as traced", "without the profiler (estimated)"]
    graphs = table[table["the step"] == "with CUDA graphs (estimate)"].iloc[0]
    assert float(graphs["vs the traced step"].rstrip("×")) > float(
        graphs["vs your step without the profiler"].rstrip("×")
    )
    quoted = " ".join(m.value for m in at.markdown)
    assert "faster than your step without the profiler" in quoted and "than the traced step" in quoted


def test_a_trace_with_the_recorders_timing_quotes_it_as_measured():
    from ui.charts import format_us

    at = open_tab(TAB, tr_trace="HF Qwen2-0.5B eager, with the recorder's timing")
    _no_traceback(at)
    report = analyse(ROOT / "tests/data/profiler/h200/qwen2_eager_b1_default.json.gz")
    assert metrics(at)["Step time (no profiler)"] == format_us(report.trace.recorded_untraced["median_us"])
    captions = " ".join(c.value for c in at.caption)
    assert "measured by the recorder" in captions
    assert list(tables(at)[0].value["the step"])[1] == "without the profiler (measured by the recorder)"
