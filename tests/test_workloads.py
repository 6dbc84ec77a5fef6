"""Batch-size workloads: the generated shapes and strict CSV validation."""

import numpy as np
import pytest

from sim.buckets import workloads
from sim.buckets.workloads import Workload, geometric, parse_histogram_csv, poisson, uniform


def test_uniform():
    wl = uniform(8)
    assert list(wl.batch_sizes) == list(range(1, 9))
    assert np.allclose(wl.weights, 1 / 8)
    assert wl.mean == pytest.approx(4.5)


def test_geometric_is_skewed_toward_small_batches():
    wl = geometric(8, 256)
    assert wl.weights.sum() == pytest.approx(1)
    assert np.all(np.diff(wl.weights) <= 0) and wl.weights[0] > wl.weights[1] > 0
    # Sizes rarer than one step in 10¹² are dropped: they are not batches a server sees.
    assert wl.weights[-1] == 0 and wl.weights[150] > 0
    assert wl.mean == pytest.approx(8, rel=0.01)  # the tail cut at 256 is negligible
    assert geometric(1, 16).weights[0] == pytest.approx(1)


def test_poisson_peaks_at_its_mean():
    wl = poisson(40, 256)
    assert wl.batch_sizes[np.argmax(wl.weights)] in (39, 40)
    assert wl.mean == pytest.approx(40, rel=0.01)
    assert np.all(np.isfinite(poisson(500, 512).weights))


@pytest.mark.parametrize("call", [lambda: uniform(0), lambda: geometric(0.5, 8), lambda: poisson(10, 10**6)])
def test_generators_reject_out_of_range(call):
    with pytest.raises(ValueError):
        call()


def test_workload_validates_and_normalises():
    wl = Workload("x", [4, 1], [1, 3])
    assert list(wl.batch_sizes) == [1, 4] and list(wl.weights) == [0.75, 0.25]
    with pytest.raises(ValueError, match="only once"):
        Workload("x", [1, 1], [1, 1])
    with pytest.raises(ValueError, match="positive"):
        Workload("x", [1, 2], [0, 0])


def test_csv_parses_a_histogram():
    wl = parse_histogram_csv(b"\xef\xbb\xbfbatch,count\r\n1,10\r\n\r\n8, 30\n 64 ,0\n")
    assert list(wl.batch_sizes) == [1, 8, 64]
    assert list(wl.weights) == [0.25, 0.75, 0.0]
    assert wl.max_batch == 8


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "empty"),
        ("size,count\n1,2\n", "row 1: the header"),
        ("batch,count\n", "no data rows"),
        ("batch,count\n1,2\nx,3\n", "row 3, field batch"),
        ("batch,count\n1,2.5\n", "row 2, field count"),
        ("batch,count\n0,5\n", "row 2: batch must be between 1"),
        ("batch,count\n99999,5\n", "between 1 and 1024"),
        ("batch,count\n1,-1\n", "row 2: count must not be negative"),
        ("batch,count\n1,0\n2,0\n", "at least one batch size needs a positive count"),
        ("batch,count\n1,2\n1,3\n", "row 3: batch 1 already appeared on row 2"),
        ("batch,count\n1,2,3\n", "row 2: expected 2 fields"),
        ("batch,count\n--5,1\n", "not a whole number"),
    ],
)
def test_csv_rejections_name_the_row_and_field(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_histogram_csv(text)


def test_csv_size_caps_and_binary():
    with pytest.raises(ValueError, match="too large"):
        parse_histogram_csv(b"batch,count\n" + b"1,1\n" * 400_000)
    rows = "batch,count\n" + "".join(f"{i % 4000 + 1},1\n" for i in range(workloads.MAX_CSV_ROWS + 1))
    with pytest.raises(ValueError, match="too many rows"):
        parse_histogram_csv(rows)
    with pytest.raises(ValueError, match="UTF-8"):
        parse_histogram_csv(b"\xff\xfe\x00b")
    with pytest.raises(ValueError, match="binary"):
        parse_histogram_csv("batch,count\n1,\x002\n")


def test_csv_round_trip_keeps_the_shape():
    wl = poisson(12, 64)
    text = wl.to_csv().replace("probability", "count")
    # Counts must be integers; scale the probabilities to counts.
    lines = text.strip().splitlines()
    rows = [lines[0]] + [f"{b},{round(float(p) * 1e6)}" for b, p in (line.split(",") for line in lines[1:])]
    back = parse_histogram_csv("\n".join(rows))
    assert np.allclose(back.weights, wl.weights, atol=1e-5)
