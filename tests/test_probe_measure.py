"""gpu_probe/measure.py's timing loop on the CPU (the host's clock stands in for CUDA events): every step
takes turns round by round, each turn the same shape, a step that fails is dropped and the rest timed."""

import time

import pytest

from gpu_probe import measure


def counting_steps(names, log, fail=None):
    """Steps that log their name on each call; `fail` raises on its third call."""
    calls = dict.fromkeys(names, 0)

    def make(name):
        def step():
            calls[name] += 1
            log.append(name)
            if name == fail and calls[name] == 3:
                raise RuntimeError("out of something")

        return step

    return {name: make(name) for name in names}, calls


def test_every_step_takes_turns_in_rotated_order_with_the_same_turns():
    log = []
    steps, calls = counting_steps(["a", "b", "c"], log)
    rounds, per_item, warmup = 4, 20, 2
    timings = measure.time_interleaved(steps, per_item=per_item, warmup=warmup, rounds=rounds)
    window = max(3, per_item // rounds // 2 + 1)
    turn = 1 + per_item // rounds + window  # the untimed step, the synchronised ones, the window
    assert calls == dict.fromkeys("abc", warmup + rounds * turn)
    timed = log[3 * warmup :]
    firsts = [timed[i * 3 * turn + j * turn] for i in range(rounds) for j in range(3)]
    assert firsts == list("abcbcacababc")  # each round starts one further on
    for timing in timings.values():
        assert timing["timing_rounds"] == rounds
        for key in ("step_us", "enqueue_us", "step_us_back_to_back"):
            middle = timing[key if key == "step_us_back_to_back" else f"{key}_median"]
            assert 0 <= timing[f"{key}_p10"] <= middle <= timing[f"{key}_p90"]


def test_the_synchronised_steps_add_up_to_per_item_over_uneven_rounds():
    log = []
    steps, calls = counting_steps(["a"], log)
    measure.time_interleaved(steps, per_item=23, warmup=0, rounds=5)  # 5 + 5 + 5 + 4 + 4
    window = max(3, 23 // 5 // 2 + 1)
    assert calls["a"] == 23 + 5 * (1 + window)


def test_a_step_that_fails_is_dropped_and_the_others_are_timed():
    log, errors = [], {}
    steps, calls = counting_steps(["a", "b"], log, fail="b")
    timings = measure.time_interleaved(steps, per_item=10, warmup=2, rounds=2, errors=errors)
    assert set(timings) == {"a"} and isinstance(errors["b"], RuntimeError)
    assert calls["b"] == 3 and calls["a"] == 2 + 2 * (1 + 5 + 3)
    with pytest.raises(RuntimeError, match="out of something"):
        measure.time_steps(counting_steps(["b"], [], fail="b")[0]["b"], steps=10, warmup=0)


def test_the_times_are_the_steps_own():
    def slow():
        time.sleep(0.002)

    timing = measure.time_steps(slow, steps=10, warmup=1, rounds=2)
    # 2 ms a step, on a shared CPU that may add to it but never takes from it.
    assert timing["step_us_median"] >= 2000 and timing["enqueue_us_median"] >= 2000
    assert timing["step_us_back_to_back"] >= 2000
    assert (
        measure.default_rounds(100) == 10
        and measure.default_rounds(5) == 1
        and measure.default_rounds(30) == 6
    )
