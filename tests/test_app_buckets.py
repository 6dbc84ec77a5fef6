"""AppTest of the Bucketing tab: controls at their extremes, bad custom lists, bad CSVs, the demo."""

from pathlib import Path

import pytest
from app_pages import APP, open_tab, tables
from app_pages import metrics as _metrics

from core.probe_result import recorded_result
from ui.buckets import tab as buckets_tab


def _open(**params):
    return open_tab("Bucketing", **params)


def _assert_clean(at) -> None:
    assert not at.exception, [e.value for e in at.exception]


@pytest.fixture(scope="module")
def app():
    return _open()


def test_default_view(app):
    _assert_clean(app)
    metrics = _metrics(app)
    assert metrics["Optimal layout"].endswith("graphs")
    assert "µs" in metrics["Expected step time"] and "MiB" in metrics["Pinned graph memory"]
    table = tables(app)[0].value
    assert list(table["layout"]) == ["chapter", "powers of two", "vLLM", "optimal under budget"]
    assert list(table["graphs"])[:3] == [13, 9, 35]
    charts = app.get("plotly_chart")
    assert len(charts) == 2
    assert "padded rows" in charts[0].proto.spec and "pinned graph memory" in charts[1].proto.spec


def test_every_bound_widget_is_declared(app):
    keys = {
        w.key
        for w in list(app.slider)
        + list(app.checkbox)
        + list(app.selectbox)
        + list(app.radio)
        + list(app.toggle)
    }
    keys.discard(None)
    assert keys and keys <= set(buckets_tab.BUCKET_PARAMS)
    assert all(k.startswith("bk_") for k in buckets_tab.BUCKET_PARAMS)


@pytest.mark.parametrize(
    "key, value",
    [
        ("bk_max_batch", 1),
        ("bk_max_batch", 512),
        ("bk_budget", 0),
        ("bk_budget", 4096),
        ("bk_max_graphs", 1),
        ("bk_max_graphs", 128),
    ],
)
def test_sliders_at_their_extremes(app, key, value):
    at = app.slider(key=key).set_value(value).run()
    _assert_clean(at)
    if key == "bk_budget" and value == 0:
        assert any("Not even one graph fits" in w.value for w in at.warning)
    else:
        assert "Optimal layout" in _metrics(at)
    if key == "bk_max_graphs" and value == 1:
        assert _metrics(at)["Optimal layout"] == "1 graphs"


@pytest.mark.parametrize("workload", ["geometric", "Poisson"])
@pytest.mark.parametrize("mean", [1.0, 512.0])
def test_skewed_workloads_at_extreme_means(workload, mean):
    at = _open(bk_workload=workload, bk_mean=str(mean), bk_max_batch="64")
    _assert_clean(at)
    assert "Optimal layout" in _metrics(at)


def test_every_layout_and_fusion_and_measured_memory():
    params = {key: "true" for key in buckets_tab.LAYOUT_KEYS.values()}
    at = _open(bk_fusion="true", bk_memory="measured by the probe", bk_objective="padded rows", **params)
    _assert_clean(at)
    assert len(tables(at)[0].value) == len(buckets_tab.LAYOUT_KEYS) + 1


def test_bad_custom_list_warns_and_the_rest_still_works(app):
    at = app.checkbox(key="bk_custom_on").check().run()
    at = at.text_input(key="bk_custom").input("1, 2, banana, 8").run()
    _assert_clean(at)
    assert any("item 3" in w.value and "banana" in w.value for w in at.warning)
    assert "custom" not in list(tables(at)[0].value["layout"])
    # A link typed into the list is quoted as text, never rendered as a link.
    at = at.text_input(key="bk_custom").input("1, [x](http://e.com)").run()
    (warning,) = [w.value for w in at.warning]
    assert "item 2" in warning and "](http" not in warning and "http://" not in warning
    at = at.text_input(key="bk_custom").input("[3, 1, 7]").run()
    assert "custom" in list(tables(at)[0].value["layout"])
    assert not at.warning


def test_csv_upload_good_and_bad():
    at = _open(bk_workload="uploaded CSV")
    _assert_clean(at)
    at.file_uploader(key="bk_csv_file").set_value(("h.csv", b"batch,count\n1,5\n2,x\n", "text/csv"))
    at.run()
    _assert_clean(at)
    assert any("row 3, field count" in e.value for e in at.error)
    at.file_uploader(key="bk_csv_file").set_value(("h.csv", b"batch,count\n1,50\n7,30\n40,20\n", "text/csv"))
    at.run()
    _assert_clean(at)
    assert not at.error
    # Three occurring sizes: the unconstrained optimum is exactly those three graphs.
    assert _metrics(at)["Optimal layout"] == "3 graphs"


def test_download_is_a_csv_of_the_table(app):
    rows = [{"layout": "chapter", "graphs": 13}, {"layout": "dense", "graphs": 256}]
    assert buckets_tab._csv(rows).splitlines() == ["layout,graphs", "chapter,13", "dense,256"]
    buttons = app.get("download_button")
    assert [b.proto.label for b in buttons] == ["Download the comparison (CSV)"]


def test_run_demo_hits_exactly_the_padded_sizes():
    from ui.buckets import padding_demo

    bug = padding_demo.run_demo("real", buckets=(1, 4, 8), max_batch=8)
    assert [r.batch for r in bug if r.hit] == [2, 3, 5, 6, 7]
    assert [r.batch for r in bug if r.assertion] == [2, 3, 5, 6, 7]
    assert all(r.rows_changed == (0,) for r in bug if r.hit)  # the victim is row 0's first block
    assert all(r.max_abs_dlogit == 0 for r in bug if r.padded_rows == 0)
    safe = padding_demo.run_demo("scratch", buckets=(1, 4, 8), max_batch=8)
    assert not any(r.hit or r.assertion for r in safe)
    assert max(r.max_abs_dlogit for r in safe) < padding_demo.CHANGED_ABOVE


def test_padding_demo_shows_the_bug_only_at_padded_sizes():
    at = _open(bk_view="Padding-corruption demo", bk_pad_to="a real block (the bug)")
    _assert_clean(at)
    metrics = _metrics(at)
    assert metrics["Batch sizes with wrong output"] == "25 of 32"  # 32 sizes, 7 of them exactly a bucket
    assert any("PaddingCorruption" in c.value for c in at.code)
    at = at.radio(key="bk_pad_to").set_value("the scratch block (safe)").run()
    _assert_clean(at)
    assert _metrics(at)["Batch sizes with wrong output"] == "0 of 32"
    assert any("no real sequence's output changed" in s.value for s in at.success)


def test_the_layouts_view_never_loads_torch():
    import subprocess
    import sys

    code = (
        "import sys; from streamlit.testing.v1 import AppTest; "
        "import ui.buckets.tab, sim.buckets.report; "
        "at = AppTest.from_string('from ui.buckets import tab; tab.render()', "
        "default_timeout=120); "
        "at.run(); assert not at.exception, at.exception; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=Path(APP).parent
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_measured_graph_memory_replaces_the_model(monkeypatch):
    # 2 MiB per graph plus 1 KiB per row, and a 64 MiB pool grown at the largest (first) capture.
    pool = {256: 64 * 2**20}
    captures = tuple((b, 2 * 2**20 + 1024 * b + pool.get(b, 0), pool.get(b, 0)) for b in (1, 8, 64, 256))
    monkeypatch.setattr(buckets_tab, "_probe_captures", lambda fused: captures)
    at = _open(bk_memory="measured by the probe")
    _assert_clean(at)
    assert any("Measured on the probe" in c.value for c in at.caption)
    table = tables(at)[0].value.set_index("layout")
    chapter = 13 * 2 + 1024 * sum((1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)) / 2**20 + 64
    assert table.loc["chapter", "graph MiB"] == pytest.approx(chapter, abs=0.05)


@pytest.mark.parametrize("budget", [256, 512])
def test_the_page_names_the_binding_limit_and_lists_every_optimal_bucket(budget):
    # Issue 14: 256 and 512 MiB gave the same 64 graphs and the page did not say why.
    app = _open(bk_budget=str(budget))
    said = [i.value for i in app.info if "limit that binds" in i.value]
    assert said and "most graphs the optimiser may use (64)" in said[0]
    listed = app.code[0].value
    assert "…" not in listed
    buckets = [int(x) for x in listed.split(", ")]
    assert len(buckets) == 64 and buckets == sorted(buckets) and buckets[-1] == 256
    assert _metrics(app)["Optimal layout"] == "64 graphs"


@pytest.mark.parametrize("fusion", [False, True])
def test_measured_graph_memory_follows_the_kernel_fusion_toggle(fusion):
    # The recorded run captures both variants; each toggle shows its own variant's graph memory.
    captures = buckets_tab._probe_captures(fusion)
    assert captures is not None and len(captures) == 13
    variant = "fused" if fusion else "unfused"
    recorded = {
        c["bucket"]: c["graph_mem_bytes"] for c in recorded_result().captures if c.get("variant") == variant
    }
    assert {b: mem for b, mem, *_ in captures} == recorded
    at = _open(bk_memory="measured by the probe", bk_fusion=str(fusion).lower())
    _assert_clean(at)
    note = next(c.value for c in at.caption if "Measured on the probe's 0.5 B model" in c.value)
    assert f"its {'fused' if fusion else 'unfused'} graphs" in note and "KiB a node" in note
