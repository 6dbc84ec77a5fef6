"""Configs validate at construction and name the bad field; presets carry the chapter's figures."""

import math

import pytest

from core.step_plan import StepPlan, toggled
from sim.config import (
    BATCH_RANGE,
    DEFAULT_PRESET,
    LAYERS_RANGE,
    PRESETS,
    HardwareConfig,
    ModelConfig,
)

CHAPTER = PRESETS["chapter"]


def test_presets_and_ranges():
    assert set(PRESETS) == {"chapter", "llama3-8b-h100", "probe-0.5b-h200"}
    assert DEFAULT_PRESET == "chapter"
    assert BATCH_RANGE == (1, 512) and LAYERS_RANGE == (1, 128)
    assert CHAPTER.model.n_layers == 32 and CHAPTER.hardware.eager_launch_us == 6.0
    llama = PRESETS["llama3-8b-h100"].model
    dims = (llama.hidden, llama.n_heads, llama.n_kv_heads, llama.ffn, llama.vocab)
    assert dims == (4096, 32, 8, 14336, 128256)
    assert 7.5e9 < llama.n_params < 8.5e9
    probe = PRESETS["probe-0.5b-h200"].model
    assert probe.n_layers == 32 and 0.4e9 < probe.n_params < 0.6e9
    for preset in PRESETS.values():
        assert preset.key in PRESETS and preset.note.strip()


def test_derived_dims():
    m = CHAPTER.model
    assert m.head_dim == 128 and m.q_dim == 2048 and m.kv_dim == 512
    assert m.with_layers(4).n_layers == 4 and m.with_layers(4).hidden == m.hidden


@pytest.mark.parametrize(
    "field, value",
    [
        ("n_layers", 0),
        ("n_layers", True),
        ("n_layers", 2.5),
        ("hidden", -8),
        ("ffn", 0),
        ("vocab", 0),
        ("bytes_per_el", 0),
        ("bytes_per_el", math.nan),
        ("context_len", 0),
        ("n_heads", 3),
        ("n_kv_heads", 5),
    ],
)
def test_model_validation_names_the_field(field, value):
    kwargs = dict(name="m", n_layers=2, hidden=64, n_heads=4, n_kv_heads=2, ffn=128, vocab=100)
    kwargs[field] = value
    with pytest.raises(ValueError, match=f"ModelConfig.{field}"):
        ModelConfig(**kwargs)


def test_with_layers_validates():
    with pytest.raises(ValueError, match="n_layers"):
        CHAPTER.model.with_layers(0)


@pytest.mark.parametrize(
    "field, value",
    [
        ("hbm_GBps", 0),
        ("matrix_TFLOPs", -1),
        ("min_kernel_us", -0.5),
        ("eager_launch_us", 0),
        ("graph_launch_us", math.inf),
        ("graph_node_gap_us", math.nan),
        ("hbm_GBps", "fast"),
    ],
)
def test_hardware_validation_names_the_field(field, value):
    kwargs = dict(
        name="gpu",
        hbm_GBps=1000.0,
        matrix_TFLOPs=100.0,
        min_kernel_us=2.0,
        eager_launch_us=6.0,
        graph_launch_us=10.0,
        graph_node_gap_us=0.2,
    )
    kwargs[field] = value
    with pytest.raises(ValueError, match=f"HardwareConfig.{field}"):
        HardwareConfig(**kwargs)


def test_the_simulator_and_the_probe_share_one_decoder_shape():
    from dataclasses import fields

    from core.decoder import DecoderShape
    from gpu_probe.config import PRESETS as PROBE_PRESETS
    from sim.calibration import model_from_result
    from sim.calibration.report import load_run

    shape_fields = [f.name for f in fields(DecoderShape)]
    assert issubclass(ModelConfig, DecoderShape)
    assert [f.name for f in fields(ModelConfig)][: len(shape_fields)] == shape_fields
    # The 1b run's decoder ties its embeddings: the simulator's copy of it counts the table once.
    one_b = model_from_result(load_run("gpu_probe/recorded/1b.json"))
    probe = PROBE_PRESETS["1b"]
    assert one_b.tie_embeddings and one_b.n_params == probe.n_params == 1_235_814_400
    assert {f: getattr(one_b, f) for f in shape_fields} == {f: getattr(probe, f) for f in shape_fields}
    small = model_from_result(load_run("recorded"))
    assert not small.tie_embeddings and small.n_params == PROBE_PRESETS["small"].n_params


def test_tied_embeddings_read_the_same_bytes_but_count_the_table_once():
    from dataclasses import replace

    m = CHAPTER.model
    tied = replace(m, tie_embeddings=True)
    assert m.n_params - tied.n_params == m.vocab * m.hidden
    assert tied.read_params == m.read_params  # the LM head reads the table whole either way
    with pytest.raises(ValueError, match="ModelConfig.tie_embeddings"):
        replace(m, tie_embeddings="yes")


def test_preset_notes_quote_what_the_simulator_gives():
    # The notes cite the simulator's own figures; a change to a preset or the model must update them.
    import numpy as np

    from sim.step.schedule import simulate_step, sweep

    def step(preset, fusion, graphs):
        return simulate_step(preset.model, preset.hardware, StepPlan(toggled(fusion, graphs), 1))

    chapter = PRESETS["chapter"]
    both = step(chapter, True, True)
    assert f"{both.metrics.step_us / 1e3:.2f} ms with fusion, {both.speedup:.1f} ×" in chapter.note
    assert (
        f"from batch {sweep(chapter.model, chapter.hardware, np.arange(1, 513)).crossover['eager']}"
        in chapter.note
    )
    assert f"{chapter.hardware.min_kernel_us:g} µs kernel latency" in chapter.note
    llama = PRESETS["llama3-8b-h100"]
    graphs, fused_graphs = step(llama, False, True), step(llama, True, True)
    assert f"graphs alone are {graphs.speedup:.1f} ×" in llama.note
    assert (
        f"fusion with graphs {fused_graphs.speedup:.1f} × ({fused_graphs.metrics.step_us / 1e3:.1f} ms)"
        in llama.note
    )
    probe = PRESETS["probe-0.5b-h200"]
    assert f"{step(probe, False, False).metrics.step_us / 1e3:.1f} ms eager" in probe.note
    assert f"{step(probe, False, True).metrics.step_us / 1e3:.1f} ms with graphs" in probe.note
    assert f"{step(probe, True, True).metrics.step_us / 1e3:.2f} ms fused with graphs" in probe.note
    assert f"it gives {step(probe, True, False).metrics.step_us / 1e3:.1f} ms" in probe.note
    for preset in (llama, probe):
        assert (preset.model.unfused_per_layer, preset.model.fused_per_layer) == (
            16,
            6,
        )  # the probe's, measured
        assert preset.hardware.eager_launch_us == 30.0 and "25-44 µs" in preset.note
