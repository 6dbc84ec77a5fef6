"""On a GPU: a ProbeSession is built once and measured twice, as the page's live path does."""

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.cuda


def test_a_session_measures_twice_without_recapturing():
    from core.probe_result import load_result
    from gpu_probe import live

    session = live.open_session("tiny", rows=8, buckets=[1, 2, 4, 8])
    runners = dict(session.runners)
    assert set(runners) == {"graph", "fused+graph", "persistent"} and not session.errors
    first = load_result(
        live.run_probe(
            "tiny", [1, 4], ["eager", "fused+graph"], buckets=[1, 2, 4, 8], steps=5, warmup=1, session=session
        )
    )
    second = load_result(
        live.run_probe(
            "tiny", [2], ["fused", "graph"], buckets=[1, 2, 4, 8], steps=5, warmup=1, session=session
        )
    )
    assert session.runners == runners  # the very same captured graphs
    for result, expected in (
        (first, {("eager", 1), ("eager", 4), ("fused+graph", 1), ("fused+graph", 4)}),
        (second, {("fused", 2), ("graph", 2)}),
    ):
        assert {(r.mode, r.batch) for r in result.runs} == expected
        assert result.all_checks_passed and not result.errors
        assert (
            len(result.captures) == 12
        )  # three variants at four buckets, reported with every result, captured once
        assert result.checks["persistent_barriers"]["passed"]
    with pytest.raises(ValueError, match="built for"):
        live.run_probe("tiny", [16], ["graph"], buckets=[1, 2, 4, 8], steps=5, warmup=1, session=session)
