"""core.step_plan: the one table of modes, the step plan, and the bucket lists, shared by sim, probe and page."""

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from core import step_plan
from core.step_plan import (
    BASELINE,
    CHAPTER_BUCKETS,
    COMPILE,
    FUSED,
    FUSED_GRAPH,
    GRAPH,
    MODES,
    PERSISTENT,
    PERSISTENT_KERNELS,
    StepPlan,
    bucket_array,
    bucket_for,
    check_buckets,
    mode,
    modes,
    names,
    toggled,
    without_graphs,
)

ROOT = Path(__file__).resolve().parents[1]


def test_modes_say_what_they_mean():
    assert tuple(MODES) == ("eager", "fused", "graph", "fused+graph", "compile", "persistent")
    # compile is Inductor's kernels: not modelled
    assert names(modes(modelled=True)) == ("eager", "fused", "graph", "fused+graph", "persistent")
    assert names(modes(fused=True)) == ("fused", "fused+graph", "compile", "persistent")
    assert names(modes(graphs=True)) == ("graph", "fused+graph", "compile", "persistent")
    assert names(modes(kernels=PERSISTENT_KERNELS)) == ("persistent",) and without_graphs(PERSISTENT) is FUSED
    for fused in (False, True):
        for graphs in (False, True):
            m = toggled(fused, graphs)
            assert (m.fused, m.graphs, m.modelled, m.toggles) == (fused, graphs, True, True)
    assert names(modes(kernels="persistent")) == ("persistent",) and COMPILE.fused and not COMPILE.modelled
    # One name per mode; its title spells the name's words out.
    assert [m.title for m in MODES.values()] == [
        "eager",
        "fusion",
        "graphs",
        "fusion + graphs",
        "torch.compile",
        "persistent kernel",
    ]
    assert (BASELINE, FUSED, GRAPH, FUSED_GRAPH, COMPILE, PERSISTENT) == tuple(MODES.values())
    assert without_graphs(FUSED_GRAPH) is FUSED and without_graphs(GRAPH) is BASELINE
    with pytest.raises(ValueError, match="mode: must be one of eager, fused"):
        mode("fused-graph")
    with pytest.raises(TypeError, match="no Mode field"):
        modes(fusion=True)
    with pytest.raises(ValueError, match="Mode.kernels: must be one of unfused, fused, inductor, persistent"):
        step_plan.Mode("x", "triton", False)


def test_a_plan_says_which_bucket_it_replays_and_what_it_pads():
    plan = StepPlan(FUSED_GRAPH, 17)
    assert (plan.bucket, plan.rows, plan.padded_rows, plan.replays, plan.eager_fallback) == (
        24,
        24,
        7,
        True,
        False,
    )
    assert plan.runs_as is FUSED_GRAPH and plan.baseline == StepPlan(BASELINE, 17)
    above = StepPlan("graph", 300)
    assert (above.bucket, above.rows, above.replays, above.eager_fallback) == (None, 300, False, True)
    assert above.runs_as is BASELINE
    assert above.label("m") == "m · batch 300 · eager (above the largest bucket: eager)"
    assert plan.label("m") == "m · batch 17 · fusion + graphs (padded to bucket 24)"
    assert (
        StepPlan(FUSED, 3, tp=2).label("m")
        == "m · 2 GPUs (tensor parallel), one GPU's lanes · batch 3 · fusion"
    )
    eager = StepPlan(FUSED, 17)
    assert (eager.bucket, eager.rows, eager.padded_rows, eager.eager_fallback) == (None, 17, 0, False)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("batch", 0, "StepPlan.batch: must be from 1"),
        ("batch", True, "StepPlan.batch: must be an integer"),
        ("batch", 1.5, "StepPlan.batch: must be an integer"),
        ("tp", 3, "tp: must be one of"),
        ("mode", "turbo", "mode: must be one of"),
        ("buckets", (0,), "StepPlan.buckets: each bucket"),
    ],
)
def test_a_bad_plan_names_its_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        replace(StepPlan(), **{field: value})


def test_every_package_reads_the_one_table():
    """No module but core/step_plan.py spells a mode's name in code or lists the chapter's buckets."""
    chapter = re.compile(r"1,\s*2,\s*4,\s*8,\s*16,\s*24,\s*32,\s*48,\s*64,\s*96,\s*128,\s*192,\s*256\)")
    names_ = "eager|fused|graph|fused\\+graph|compile"
    mode_string = re.compile(
        rf"""["']fused\+graph["']"""  # the one name no other word is spelled like
        rf"""|mode\w*\s*(==|!=|in|=)\s*\(?\s*["']({names_})["']"""  # compared with, or defaulted to, a name
        rf"""|\.run\(\s*["']({names_})["']"""  # a result's run looked up by a spelled name
        rf"""|\(\s*["']eager["'],\s*["']"""  # the modes listed again
        rf"""|\(\s*["']({names_})["'],\s*(True|False)\)"""  # a name paired with its fusion flag
    )
    for package in ("core", "sim", "gpu_probe", "ui"):
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "core" / "step_plan.py":
                continue
            text = path.read_text()
            where = path.relative_to(ROOT)
            assert not chapter.search(text), f"{where} writes the chapter's bucket list again"
            found = mode_string.search(text)
            assert not found, f"{where} spells the mode {found.group(0)} instead of reading the modes table"
    assert step_plan.CHAPTER_BUCKETS == CHAPTER_BUCKETS


@pytest.mark.parametrize("batch, bucket", [(1, 1), (3, 4), (17, 24), (33, 48), (256, 256), (257, None)])
def test_bucket_for(batch, bucket):
    assert bucket_for(batch, CHAPTER_BUCKETS) == bucket
    assert bucket_for(batch, CHAPTER_BUCKETS[::-1]) == bucket  # any order


def test_bucket_for_empty_layout():
    assert bucket_for(1, ()) is None


def test_check_buckets_sorts_dedupes_and_names_the_owner():
    assert check_buckets([8, 1, 4, 4]) == (1, 4, 8)
    assert check_buckets(np.array([[4, 2]])) == (2, 4)
    assert check_buckets(()) == ()  # the simulator: no graphs, every batch eager
    with pytest.raises(ValueError, match="runner.buckets: the list must contain"):
        check_buckets((), "runner.buckets", allow_empty=False)
    for bad in ([0, 2], [1.5], ["x"], [-4], [True], [step_plan.MAX_BUCKET + 1], "124", 7):
        with pytest.raises(ValueError, match="^StepPlan.buckets: "):
            check_buckets(bad, "StepPlan.buckets")


def test_bucket_array():
    arr = bucket_array((256, 1, 8))
    assert arr.dtype == np.int64 and arr.tolist() == [1, 8, 256]
    with pytest.raises(ValueError, match="at least one"):
        bucket_array([])
