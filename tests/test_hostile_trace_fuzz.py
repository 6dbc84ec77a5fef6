"""Issue 24, item 1: valid traces with one thing wrong each (tests/hostile_trace_fuzz.py) through the reader,
the what-ifs, the lanes (first launches and whole step), the kernel table and the CLI's text and JSON: a
report or one TraceError sentence, never an exception. A fixed sample here (the script runs all 8,500
variants, the CLI and the page): every structural mutation -- dropped records, duplicate correlation ids,
kernels before their launch, overlapping and nested steps, shuffled or doubled events -- on two bases,
and the hostile values likeliest to break a field on every field of the graph-replay base."""

from __future__ import annotations

import pytest
from hostile_trace_fuzz import STRUCTURAL, check, variants

SAMPLE_VALUES = ("missing", "nan", "400digits", "negative", "string", "list")
SAMPLE = {name: make for name, make in variants(["steps", "graph"]) if name.split("/")[1] in STRUCTURAL}
SAMPLE.update(
    (name, make)
    for name, make in variants(["graph"])
    if "=" in name
    and name.endswith("@all")
    and not name.startswith("graph/range.")  # the graph base has no ranges
    and name.split("=")[1].split("@")[0] in SAMPLE_VALUES
)


@pytest.mark.parametrize("name", list(SAMPLE))
def test_a_hostile_variant_is_read_or_refused_in_one_sentence(name):
    outcome, detail = check(name, SAMPLE[name]())
    assert outcome in ("read", "refused"), f"{name}: {detail}"


def test_the_sample_covers_dropped_records_and_every_field():
    assert "steps/drop_first_40_kernels" in SAMPLE and "graph/drop_first_40_launches" in SAMPLE
    assert len(SAMPLE) >= 200
