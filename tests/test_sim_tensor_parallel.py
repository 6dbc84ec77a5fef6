"""Tensor parallelism in the simulator: one GPU's share of the kernels, two all-reduces per layer."""

from dataclasses import replace

import numpy as np
import pytest

from core.step_plan import BASELINE, FUSED_GRAPH, StepPlan, check_tp, toggled
from sim.config import PRESETS
from sim.step.kernels import ALLREDUCE
from sim.step.schedule import simulate_step
from sim.step.tensor_parallel import (
    NCCL_NVLS_TREE_2XH100_US,
    AllReduceCost,
    fit_allreduce,
    published_allreduce,
    tp_summary,
)

CHAPTER, LLAMA = PRESETS["chapter"], PRESETS["llama3-8b-h100"]


def simulate_tp(model, hw, plan, tp, allreduce=None):
    """The plan on `tp` GPUs: the one step builder, with the GPUs in the plan."""
    return simulate_step(model, hw, replace(plan, tp=tp), allreduce=allreduce)


@pytest.mark.parametrize("fusion,graphs", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("batch", [1, 3, 300])
def test_one_gpu_is_the_plain_step(fusion, graphs, batch):
    """On one GPU the builder adds no all-reduce: the step is exactly the plain one."""
    s = StepPlan(toggled(fusion, graphs), batch)
    plain, tp1 = (
        simulate_step(CHAPTER.model, CHAPTER.hardware, s),
        simulate_tp(CHAPTER.model, CHAPTER.hardware, s, tp=1),
    )
    assert tp1.metrics.kernels == plain.metrics.kernels
    assert np.isclose(tp1.metrics.step_us, plain.metrics.step_us)
    assert np.isclose(tp1.metrics.gpu_busy_us, plain.metrics.gpu_busy_us)


@pytest.mark.parametrize(
    "fusion,after", [(False, ("o_proj", "down_proj")), (True, ("rope_attn_o", "down_proj"))]
)
def test_two_allreduces_per_layer_after_the_row_parallel_kernels(fusion, after):
    step = simulate_tp(CHAPTER.model, CHAPTER.hardware, StepPlan(toggled(fusion, False)), tp=2)
    names = step.timeline.gpu_names
    comm = [i for i, n in enumerate(names) if ALLREDUCE in n]
    assert len(comm) == 2 * CHAPTER.model.n_layers
    assert step.metrics.kernels == simulate_step(
        CHAPTER.model, CHAPTER.hardware, StepPlan(toggled(fusion, False))
    ).metrics.kernels + len(comm)
    assert [names[i - 1].split(" ", 1)[1] for i in comm[:2]] == list(after)


def test_allreduce_costs_alpha_plus_bytes_over_beta():
    cost = AllReduceCost(2, latency_us=4.0, GBps=50.0, source="test")
    step = simulate_tp(CHAPTER.model, CHAPTER.hardware, StepPlan(BASELINE, 8), tp=2, allreduce=cost)
    nbytes = 8 * CHAPTER.model.hidden * CHAPTER.model.bytes_per_el
    durs = step.timeline.gpu_dur[[ALLREDUCE in n for n in step.timeline.gpu_names]]
    assert np.allclose(durs, 4.0 + nbytes / 50e3)
    summary = tp_summary(step)
    assert summary.allreduce_bytes == nbytes and np.isclose(summary.per_call_us, 4.0 + nbytes / 50e3)


def test_published_defaults_are_labelled_and_match_the_table():
    for tp, small_us in ((2, 3.7), (4, 4.8), (8, 5.9)):
        cost = published_allreduce(tp)
        assert (
            cost.latency_us == small_us and "published, not fitted" in cost.source and "#2904" in cost.source
        )
        assert np.isclose(cost.us(512), small_us, atol=0.02)
    assert np.isclose(published_allreduce(2).us(1 << 20), 19.9, atol=0.02)
    assert published_allreduce(2).latency_us < NCCL_NVLS_TREE_2XH100_US  # the two cited figures, in order


def test_weights_and_kv_per_gpu_divide_by_tp():
    s = StepPlan(BASELINE, 4)
    one, two = (tp_summary(simulate_tp(LLAMA.model, LLAMA.hardware, s, tp=t)) for t in (1, 2))
    assert np.isclose(two.kv_bytes_per_gpu, one.kv_bytes_per_gpu / 2)
    replicated = 2 * LLAMA.model.vocab * LLAMA.model.hidden * LLAMA.model.bytes_per_el  # LM head, roughly
    assert one.weight_bytes_per_gpu / 2 < two.weight_bytes_per_gpu < one.weight_bytes_per_gpu / 2 + replicated


def test_a_weight_bound_model_gets_faster_a_launch_bound_one_does_not():
    """Llama-3-8B at batch 1 is GPU-bound: halving the weights per GPU wins despite 64 all-reduces.
    The chapter's eager step is launch-bound: the all-reduces only add launches."""
    s = StepPlan(FUSED_GRAPH, 1)
    assert (
        simulate_tp(LLAMA.model, LLAMA.hardware, s, tp=2).metrics.step_us
        < 0.7 * simulate_tp(LLAMA.model, LLAMA.hardware, s, tp=1).metrics.step_us
    )
    eager = StepPlan(BASELINE, 1)
    assert (
        simulate_tp(CHAPTER.model, CHAPTER.hardware, eager, tp=2).metrics.step_us
        > simulate_tp(CHAPTER.model, CHAPTER.hardware, eager, tp=1).metrics.step_us
    )


@pytest.mark.parametrize("tp", [0, 3, 16, True, 2.0, "2"])
def test_tp_must_be_one_of_the_choices(tp):
    with pytest.raises(ValueError, match=r"tp: must be one of \(1, 2, 4, 8\)"):
        check_tp(tp)


def test_more_gpus_than_kv_heads_replicate_them():
    """The chapter's model has 4 KV heads: on 8 GPUs each keeps one, so KV per GPU stops at a quarter."""
    s = StepPlan(BASELINE, 2)
    four, eight = (tp_summary(simulate_tp(CHAPTER.model, CHAPTER.hardware, s, tp=t)) for t in (4, 8))
    assert eight.kv_bytes_per_gpu == four.kv_bytes_per_gpu


def test_tp_must_divide_the_heads():
    model = replace(CHAPTER.model, n_heads=12, n_kv_heads=4, hidden=1536)
    with pytest.raises(ValueError, match="tp: 8 GPUs must divide the 12 attention heads"):
        simulate_tp(model, CHAPTER.hardware, StepPlan(BASELINE, 1), tp=8)


# ---- fitting α and β to a measured sweep ------------------------------------------------------
SWEEP = np.array([512, 2048, 8192, 32768, 131072, 524288, 2097152], np.float64)


@pytest.mark.parametrize("alpha,GBps", [(3.7, 65.8), (9.5, 20.0), (25.0, 400.0)])
def test_fit_recovers_known_alpha_and_beta(alpha, GBps):
    fit = fit_allreduce(SWEEP, alpha + SWEEP / (GBps * 1e3), tp=2, source="test")
    assert np.isclose(fit.latency_us, alpha, rtol=1e-9) and np.isclose(fit.GBps, GBps, rtol=1e-9)
    assert fit.tp == 2 and fit.source == "test"


def test_fit_with_noise_stays_close():
    rng = np.random.default_rng(7)
    sizes = np.repeat(SWEEP, 4)  # four ranks' points
    us = (5.0 + sizes / 60e3) * (1 + 0.03 * rng.standard_normal(len(sizes)))
    fit = fit_allreduce(sizes, us, tp=2)
    assert abs(fit.latency_us - 5.0) < 0.25 and abs(fit.GBps - 60.0) < 3.0


def test_fit_weighs_small_messages_by_their_relative_error():
    """A 1 µs error at 512 B is a 20 % error there; an absolute fit would let the 2 MiB point decide α."""
    us = 5.0 + SWEEP / 60e3
    us[-1] *= 1.05  # the largest message 5 % slow
    fit = fit_allreduce(SWEEP, us, tp=2)
    assert abs(fit.latency_us - 5.0) < 0.1


def test_fit_stays_in_range():
    flat = fit_allreduce(SWEEP, np.full(len(SWEEP), 7.0), tp=2)  # no size dependence: β is infinite
    assert np.isclose(flat.latency_us, 7.0) and flat.GBps == float("inf")
    assert np.allclose(flat.us(SWEEP), 7.0)
    # Small messages faster than proportional: the unconstrained line would cross zero below α = 0.
    through_zero = fit_allreduce(SWEEP, SWEEP / 50e3 * np.linspace(0.5, 1.0, len(SWEEP)), tp=2)
    assert through_zero.latency_us == 0.0 and 40 < through_zero.GBps < 100
    shrinking = fit_allreduce(SWEEP, np.linspace(30.0, 3.0, len(SWEEP)), tp=2)  # nonsense: still in range
    assert shrinking.latency_us >= 0 and shrinking.GBps > 0


@pytest.mark.parametrize(
    "sizes,us,match",
    [
        ([512, 512], [4.0, 4.1], "two distinct"),
        ([512], [4.0], "two distinct"),
        ([512, 1024], [4.0], "2 sizes against 1 times"),
        ([512, 1024], [4.0, float("nan")], "positive finite"),
        ([0, 1024], [4.0, 5.0], "positive finite"),
        ([512, 1024], [4.0, -5.0], "positive finite"),
    ],
)
def test_fit_refuses_unusable_sweeps(sizes, us, match):
    with pytest.raises(ValueError, match=match):
        fit_allreduce(sizes, us, tp=2)


def test_the_simulator_takes_fitted_figures_in_place_of_the_published_ones():
    fit = fit_allreduce(SWEEP, 6.0 + SWEEP / 30e3, tp=2, source="fitted")
    s = StepPlan(FUSED_GRAPH, 4)
    fitted = simulate_tp(CHAPTER.model, CHAPTER.hardware, s, tp=2, allreduce=fit)
    published = simulate_tp(CHAPTER.model, CHAPTER.hardware, s, tp=2)
    nbytes = 4 * CHAPTER.model.hidden * CHAPTER.model.bytes_per_el
    comm = [ALLREDUCE in n for n in fitted.timeline.gpu_names]
    assert np.allclose(fitted.timeline.gpu_dur[comm], 6.0 + nbytes / 30e3)
    assert np.allclose(published.timeline.gpu_dur[comm], published_allreduce(2).us(nbytes))
    assert fitted.metrics.step_us > published.metrics.step_us  # a slower all-reduce, a longer step
