"""Bucket layouts, strict parsing of typed layouts, padding arithmetic and the exact optimiser."""

import itertools

import numpy as np
import pytest

from sim.buckets import layouts as buckets
from sim.buckets.layouts import layout, optimal_buckets, optimal_layouts, padding_waste, parse_layout


def test_chapter_layout_is_the_chapters_list():
    assert layout("chapter", 256) == (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
    assert layout("chapter", 100) == (1, 2, 4, 8, 16, 24, 32, 48, 64, 96)
    # The chapter's list stops at 256 whatever the engine's maximum.
    assert layout("chapter", 512)[-1] == 256


def test_powers_of_two():
    assert layout("powers of two", 256) == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert layout("powers of two", 300) == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert layout("powers of two", 1) == (1,)


def test_vllm_default_capture_sizes():
    sizes = layout("vLLM", 512)
    assert sizes[:5] == (1, 2, 4, 8, 16)
    assert all(s % 8 == 0 for s in sizes[3:] if s < 256)
    assert [s for s in sizes if s >= 256] == list(range(256, 513, 16))
    assert len(layout("vLLM", 256)) == 35
    assert len(sizes) == 3 + 31 + 17
    assert layout("vLLM", 100)[-1] == 96  # vLLM keeps only sizes ≤ the maximum


def test_sglang_default_capture_sizes():
    # SGLang's own docs count 36 graphs at max_bs=256 and 52 at 512.
    assert len(layout("SGLang", 256)) == 36
    assert len(layout("SGLang", 512)) == 52
    assert layout("SGLang", 256)[:7] == (1, 2, 4, 8, 12, 16, 24)
    assert layout("SGLang", 640)[-4:] == (544, 576, 608, 640)
    assert layout("SGLang", 100)[-3:] == (88, 96, 100)  # max_bs is appended when missing


def test_nano_vllm_capture_sizes():
    assert layout("nano-vllm", 512) == (1, 2, 4, 8) + tuple(range(16, 513, 16))
    assert layout("nano-vllm", 100)[-1] == 96


def test_dense_and_unknown():
    assert layout("dense", 5) == (1, 2, 3, 4, 5)
    with pytest.raises(ValueError, match="unknown layout"):
        layout("tensorrt", 256)
    for bad in (0, -1, 10**6, 2.5, True, "8"):
        with pytest.raises(ValueError, match="max_batch"):
            layout("dense", bad)


def test_every_preset_is_sorted_unique_and_bounded():
    for name in buckets.LAYOUTS:
        for m in (1, 7, 100, 256, 512, 1000):
            sizes = layout(name, m)
            assert list(sizes) == sorted(set(sizes)) and sizes[0] == 1 and sizes[-1] <= m


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1, 2, 4, 8", (1, 2, 4, 8)),
        ("[8 4 2 1 4]", (1, 2, 4, 8)),
        ("  16;32\n64 ", (16, 32, 64)),
        ("(3,)", (3,)),
    ],
)
def test_parse_layout_accepts_lists(text, expected):
    assert parse_layout(text) == expected


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "empty"),
        ("[]", "empty"),
        ("1, 2, x", "item 3"),
        ("1, 2.5", "item 2"),
        ("0, 4", "at least 1"),
        ("-4", "not a positive whole number"),
        ("1e3", "not a positive whole number"),
        ("4, 99999", "at most 4096"),
        ("１, 2", "not a positive whole number"),
        (", ".join(["1"] * 2000), "too many buckets"),
        ("1" * 30_000, "too long"),
    ],
)
def test_parse_layout_rejects_junk(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_layout(text)


def test_parse_layout_rejects_non_text():
    with pytest.raises(ValueError):
        parse_layout(None)


def test_padding_waste_by_hand():
    # Buckets 1, 4: sizes 1..4 pad to 1, 4, 4, 4 -> padded rows 0, 2, 1, 0.
    assert padding_waste((1, 4), [1, 2, 3, 4], [1, 1, 1, 1]) == pytest.approx(3 / 4)
    # Weights are normalised and skew the expectation toward size 2.
    assert padding_waste((1, 4), [1, 2, 3, 4], [0, 3, 1, 0]) == pytest.approx((3 * 2 + 1) / 4)
    # Above the largest bucket runs eager: no padding, but counted as eager.
    assert padding_waste((2,), [1, 2, 3], [1, 1, 2]) == pytest.approx(1 / 4)
    assert buckets.eager_share((2,), [1, 2, 3], [1, 1, 2]) == pytest.approx(0.5)
    assert list(buckets.padded_rows((2, 8), [1, 2, 3, 9])) == [1, 0, 5, 0]
    assert list(buckets.bucket_sizes_for((2, 8), [1, 2, 3, 9])) == [2, 2, 8, 0]


def test_padding_waste_rejects_bad_workloads():
    with pytest.raises(ValueError, match="weights"):
        padding_waste((1, 2), [1, 2], [0, 0])
    with pytest.raises(ValueError, match="equal lengths"):
        padding_waste((1, 2), [1, 2], [1])
    with pytest.raises(ValueError, match="batch_sizes"):
        padding_waste((1, 2), [0, 2], [1, 1])


def _brute_force(sizes, weights, k):
    largest = max(sizes)
    others = sorted(set(sizes) - {largest})
    best = np.inf
    for r in range(0, k):
        for combo in itertools.combinations(others, r):
            best = min(best, padding_waste(combo + (largest,), sizes, weights))
    return best


@pytest.mark.parametrize("seed", range(25))
def test_optimal_buckets_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 10))
    sizes = np.sort(rng.choice(np.arange(1, 40), size=m, replace=False))
    weights = rng.integers(0, 5, size=m).astype(float)
    weights[rng.integers(0, m)] += 1  # at least one positive
    k = int(rng.integers(1, 6))
    result = optimal_buckets(sizes, weights, k)
    assert len(result) <= k
    assert result[-1] == sizes.max()  # always covers the largest batch size
    best = _brute_force(list(sizes), weights, k)
    assert padding_waste(result, sizes, weights) == pytest.approx(best, abs=1e-9)


def test_optimal_buckets_small_known_case():
    # Uniform 1..8 with two buckets: {4, 8} pads 1.5 rows/step on average, the optimum.
    assert optimal_buckets(range(1, 9), np.ones(8), 2) == (4, 8)
    # Enough buckets for every occurring size: no padding, and no redundant graphs.
    assert optimal_buckets([1, 3, 9], [1, 1, 1], 10) == (1, 3, 9)
    # Zero-weight sizes are never worth a graph, but the largest size is always kept.
    assert optimal_buckets([1, 2, 3, 50], [5, 0, 5, 0], 3) == (1, 3, 50)


def test_optimal_layouts_improve_with_more_buckets():
    rng = np.random.default_rng(3)
    w = rng.random(200)
    costs = [c for _, c in optimal_layouts(np.arange(1, 201), w, 20)]
    assert all(b <= a + 1e-12 for a, b in zip(costs[:-1], costs[1:], strict=True))
    assert len(costs) == 20


def test_optimal_buckets_general_cost_matches_brute_force():
    sizes = np.arange(1, 9)
    weights = np.array([5, 1, 1, 3, 1, 1, 1, 2.0])
    cost = np.sqrt(sizes) * 10  # concave, like step time in the memory-bound regime
    result = optimal_buckets(sizes, weights, 3, cost=cost)

    def expected(lay):
        chosen = buckets.bucket_sizes_for(lay, sizes)
        return float(np.dot(weights, np.sqrt(chosen) * 10 - cost))

    best = min(expected(c + (8,)) for r in range(3) for c in itertools.combinations(range(1, 8), r))
    assert expected(result) == pytest.approx(best)


def test_optimal_buckets_rejects_bad_input():
    with pytest.raises(ValueError, match="max_buckets"):
        optimal_buckets([1, 2], [1, 1], 0)
    with pytest.raises(ValueError, match="cost"):
        optimal_buckets([1, 2], [1, 1], 2, cost=[2, 1])


def test_optimal_buckets_at_full_size_is_exact_for_uniform():
    # 64 evenly spaced buckets of 8 are optimal for uniform 1..512: 3.5 padded rows per step.
    result = optimal_buckets(np.arange(1, 513), np.ones(512), 64)
    assert result == tuple(range(8, 513, 8))
    assert padding_waste(result, np.arange(1, 513), np.ones(512)) == pytest.approx(3.5)
