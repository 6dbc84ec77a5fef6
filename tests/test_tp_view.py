"""The Live GPU probe tab with an uploaded tensor-parallel result (ui/probe/tp_view.py), through AppTest:
per-rank lanes, all-reduce time per call against message size, TP1 against TP2, the checks."""

import json

from app_pages import as_read, open_tab, tables
from tp_synthetic import synthetic_tp_result


def upload(at, data: dict, name: str = "tp.json", key: str = "pr_upload"):
    at.file_uploader(key=key).set_value((name, json.dumps(data).encode(), "application/json"))
    return at.run()


def specs(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def names(spec: dict) -> list[str]:
    return [t.get("name", "") for t in spec["data"]]


def test_a_tp_upload_shows_the_three_views_and_the_checks(recorded):
    at = open_tab("Live GPU probe")
    assert any("No two-GPU run ships with the app" in c.body for c in at.caption)
    at = upload(at, synthetic_tp_result())
    assert not at.exception
    assert at.selectbox(key="pr_run").value.startswith("uploaded: tp.json (2 × NVIDIA Test GPU")
    info = as_read(" ".join(i.body for i in at.info))
    assert "Uploaded tensor-parallel run" in info and "NCCL 2.27.3" in info and "No two-GPU run ships" in info
    charts = specs(at)
    assert len(charts) == 4  # rank 0 lanes, rank 1 lanes, all-reduce sweep, TP1 vs TP2
    for lanes in charts[:2]:
        assert "communication" in names(lanes) and "GPU kernel" in names(lanes)
        assert lanes["layout"]["xaxis"]["range"] == charts[0]["layout"]["xaxis"]["range"]  # one time axis
    sweep = names(charts[2])
    assert "measured, eager" in sweep and "measured, captured in a graph" in sweep
    assert any(n.startswith("fit, captured in a graph: 5.00 µs + bytes / 60.0 GB/s") for n in sweep)
    assert any("SGLang" in n for n in sweep) and any("NCCL NVLS" in n for n in sweep)
    steps = names(charts[3])
    assert "fused+graph, TP1" in steps and "fused+graph, TP2" in steps
    drawn = [df.value for df in tables(at)]
    assert any("all-reduce kernels" in t.columns and list(t["all-reduce kernels"]) == [4, 4] for t in drawn)
    tp_table = next(t for t in drawn if "TP2 (µs)" in t.columns)
    assert len(tp_table) == 8 and tp_table["TP2 speed-up"].notna().all()  # 4 modes x 2 batches
    checks = next(t for t in drawn if "check" in t.columns)
    assert set(checks["rank"]) == {0, 1} and checks["passed"].all()
    assert any("All 12 checks passed" in s.body for s in at.success)
    captions = as_read(" ".join(c.body for c in at.caption))
    assert "the issue's goal is met" in captions and "At 512 B the captured fit is" in captions


def test_controls_and_a_failed_check(recorded):
    at = upload(open_tab("Live GPU probe"), synthetic_tp_result(failed="graph_vs_eager (fused+graph)"))
    assert not at.exception and any("1 of 12 checks failed" in e.body for e in at.error)
    at.selectbox(key="pr_tp_mode").set_value("eager").run()
    at.selectbox(key="pr_tp_batch").set_value(4).run()
    at.toggle(key="pr_tp_whole").set_value(True).run()
    assert not at.exception and len(at.get("plotly_chart")) == 4


def test_the_controls_read_the_url(recorded):
    at = upload(open_tab("Live GPU probe", pr_tp_mode="graph", pr_tp_batch="4"), synthetic_tp_result())
    assert not at.exception
    assert at.selectbox(key="pr_tp_mode").value == "graph" and at.selectbox(key="pr_tp_batch").value == 4
    at = upload(open_tab("Live GPU probe", pr_tp_mode="compile", pr_tp_batch="-5"), synthetic_tp_result())
    assert not at.exception and at.selectbox(key="pr_tp_mode").value == "eager"


def test_back_to_the_recorded_run(recorded):
    at = upload(open_tab("Live GPU probe"), synthetic_tp_result())
    first = next(o for o in at.selectbox(key="pr_run").options if o.startswith("recorded"))
    at.selectbox(key="pr_run").set_value(first).run()
    assert not at.exception
    assert any("Recorded run" in i.body for i in at.info)
    assert len(at.get("plotly_chart")) == 3  # measured lanes beside the simulator's, the batch-axis chart


def test_a_hostile_tp_file_is_named_and_its_strings_stay_text(recorded):
    bad = synthetic_tp_result()
    bad["ranks"][1]["allreduce"][2]["graph_us_per_call"] = -3
    at = upload(open_tab("Live GPU probe"), bad, name="bad.json")
    assert not at.exception
    errors = as_read(" ".join(e.body for e in at.error))
    assert "bad.json" in errors and "ranks[1].allreduce[2].graph_us_per_call" in errors
    assert any("Recorded run" in i.body for i in at.info)
    sly = synthetic_tp_result(device="[click](https://example.com) # GPU")
    sly["command"] = "torchrun `x` <b>bold</b>"
    at = upload(at, sly, name="sly.json")
    assert not at.exception
    info = " ".join(i.body for i in at.info)
    assert "](https" not in info and "\\[click\\]" in info and "<b>" not in info


def test_the_calibration_tab_refuses_a_tp_file(recorded):
    at = upload(open_tab("Calibration"), synthetic_tp_result(), key="cal_upload")
    assert not at.exception
    assert any("tensor-parallel result" in as_read(e.body) for e in at.error)
