"""core.modes: the one vocabulary of modes, toggle combinations and bucket lists, shared by sim, probe and page."""

import re
from pathlib import Path

import numpy as np
import pytest

from core import modes
from core.modes import (
    CHAPTER_BUCKETS,
    COMBOS,
    FIT_MODES,
    FUSED_MODES,
    GRAPH_MODES,
    MODE_INFO,
    MODES,
    bucket_array,
    bucket_for,
    check_buckets,
    combo_label,
    combo_title,
    mode_of,
)

ROOT = Path(__file__).resolve().parents[1]


def test_modes_say_what_they_mean():
    assert MODES == ("eager", "fused", "graph", "fused+graph", "compile")
    assert FIT_MODES == ("eager", "fused", "graph", "fused+graph")  # compile is Inductor's kernels
    assert FUSED_MODES == ("fused", "fused+graph", "compile")
    assert GRAPH_MODES == ("graph", "fused+graph", "compile")
    for fusion, graphs in COMBOS:
        info = MODE_INFO[mode_of(fusion, graphs)]
        assert (info.fusion, info.graphs, info.modelled) == (fusion, graphs, True)
    assert [combo_label(*c) for c in COMBOS] == ["eager", "fusion", "graphs", "fusion+graphs"]
    assert [combo_title(*c) for c in COMBOS] == ["unoptimised", "fusion", "graphs", "fusion + graphs"]


def test_every_package_uses_the_one_vocabulary():
    import core.probe_result
    import sim.calibration.model
    import sim.schedule
    import ui.charts

    assert core.probe_result.MODES is MODES and core.probe_result.DEFAULT_BUCKETS is CHAPTER_BUCKETS
    assert sim.calibration.model.FIT_MODES is FIT_MODES and sim.calibration.model.GRAPH_MODES is GRAPH_MODES
    assert (
        sim.schedule.COMBOS is COMBOS and ui.charts.COMBOS is COMBOS and ui.charts.combo_title is combo_title
    )
    assert sim.schedule.StepSettings().buckets == CHAPTER_BUCKETS


def test_the_chapter_list_and_the_combinations_are_written_once():
    chapter = re.compile(r"1,\s*2,\s*4,\s*8,\s*16,\s*24,\s*32,\s*48,\s*64,\s*96,\s*128,\s*192,\s*256\)")
    combos = re.compile(r"^\s*COMBOS\s*=", re.MULTILINE)
    modes_tuple = re.compile(r"\(\s*\"eager\",\s*\"fused\",\s*\"graph\",\s*\"fused\+graph\"")
    for package in ("core", "sim", "gpu_probe", "ui"):
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "core" / "modes.py":
                continue
            text = path.read_text()
            where = path.relative_to(ROOT)
            assert not chapter.search(text), f"{where} writes the chapter's bucket list again"
            assert not combos.search(text), f"{where} defines COMBOS again"
            assert not modes_tuple.search(text), f"{where} lists the modes again"


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
    for bad in ([0, 2], [1.5], ["x"], [-4], [True], [modes.MAX_BUCKET + 1], "124", 7):
        with pytest.raises(ValueError, match="^StepSettings.buckets: "):
            check_buckets(bad, "StepSettings.buckets")


def test_bucket_array():
    arr = bucket_array((256, 1, 8))
    assert arr.dtype == np.int64 and arr.tolist() == [1, 8, 256]
    with pytest.raises(ValueError, match="at least one"):
        bucket_array([])
