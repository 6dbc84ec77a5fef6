"""gpu_probe/hf_reference.py on the CPU: the shapes, the decoders' loop step and rewinds on the TINY toy
(with transformers, else skipped), and the probe's `reference` block without transformers as
core.probe_result reads it."""

import copy
import re

import pytest
import torch

from core.probe_result import parse_reference
from gpu_probe import hf_reference
from gpu_probe.config import get_config
from gpu_probe.hf_reference import (
    SHAPES,
    TINY,
    CompiledDecoder,
    Decoder,
    build_model,
    measure_reference,
    named_shape,
    shape_of,
)

MAX_KERNELS = 10_000


def test_the_1b_preset_is_llama_3_2_1b():
    shape = shape_of(get_config("1b"))
    assert (shape.arch, shape.hidden_size, shape.num_hidden_layers) == ("llama", 2048, 16)
    assert (shape.num_attention_heads, shape.num_key_value_heads, shape.head_dim) == (32, 8, 64)
    assert (shape.intermediate_size, shape.vocab_size) == (8192, 128256)
    assert shape.tie_word_embeddings is True and shape.rope_theta == 500000.0
    assert shape == SHAPES["llama"]


def test_named_shape_shrinks_to_the_toy_and_sets_the_layers():
    assert named_shape("qwen2") == SHAPES["qwen2"]
    tiny = named_shape("tinyllama", tiny=True)
    assert {k: getattr(tiny, k) for k in TINY} == TINY
    assert (tiny.arch, tiny.tie_word_embeddings, tiny.rope_theta) == ("llama", False, 10000.0)
    assert named_shape("llama", layers=3).num_hidden_layers == 3
    assert named_shape("llama", layers=3).hidden_size == 2048
    assert named_shape("qwen2", tiny=True, layers=5).num_hidden_layers == 5


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_the_loop_step_decodes_greedily_and_rewinds_the_cache(arch):
    pytest.importorskip("transformers")
    shape = named_shape(arch, tiny=True)
    model = build_model(shape, "cpu")
    assert type(model).__name__ == {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}[arch]
    assert (model.config.num_hidden_layers, model.config.vocab_size) == (2, TINY["vocab_size"])
    batch, context, slack = 2, 8, 12  # a cache of 20 positions, rewound once the position reaches 12
    torch.manual_seed(1)
    decoder = Decoder(model, batch, context, "cpu", slack=slack)
    torch.manual_seed(1)
    seq = torch.randint(0, shape.vocab_size, (batch, context))  # the decoder's prompt
    with torch.no_grad():
        for k in range(slack - 8):  # each token the model's greedy pick for the sequence so far
            expected = model(input_ids=seq).logits[:, -1].argmax(-1)
            assert torch.equal(decoder.tokens, expected)
            seq = torch.cat([seq, expected[:, None]], dim=1)
            assert decoder.position == context + k
            decoder.loop_step()
            if k > 0:
                assert torch.equal(decoder.host_ids[:, 0], seq[:, -1])  # the step fed the last token
        assert torch.equal(decoder.tokens, model(input_ids=seq).logits[:, -1].argmax(-1))
    assert decoder.position == context  # rewound
    assert all(int(layer.cumulative_length) == context for layer in decoder.cache.layers)
    for _ in range(3 * slack):  # past the cache's 20 positions many times over: only rewinds allow it
        decoder.loop_step()
        assert context <= decoder.position < context + slack - 8
    with torch.no_grad():  # the probe's step: the same token at the same position, rewound as it goes
        for _ in range(3 * slack):
            out = decoder.step()
    assert out.shape == (batch,) and 0 <= int(out.min()) and int(out.max()) < shape.vocab_size


def test_the_compiled_decoder_takes_its_mode_and_copies_a_graph_s_output(monkeypatch):
    pytest.importorskip("transformers")
    static = torch.zeros(1, dtype=torch.long)  # what a CUDA graph's replay would overwrite
    modes = []

    def fake_compile(fn, **options):
        modes.append(options.get("mode"))
        return lambda ids, pos: static

    monkeypatch.setattr(torch, "compile", fake_compile)
    model = build_model(named_shape("llama", tiny=True), "cpu")
    plain = CompiledDecoder(model, 1, 8, "cpu", slack=16)
    graphs = CompiledDecoder(model, 1, 8, "cpu", slack=16, mode="reduce-overhead")
    assert modes == [None, "reduce-overhead"]
    assert (plain.position, graphs.position) == (8 + 3, 8 + 4)  # the warm-up loop steps
    assert plain.submit() is static
    out = graphs.submit()
    assert out is not static and out.data_ptr() != static.data_ptr() and torch.equal(out, static)


def test_without_transformers_the_reference_is_skipped(monkeypatch):
    monkeypatch.setattr(hf_reference, "available", lambda: None)
    block = measure_reference(get_config("1b"), [1, 4], steps=3, warmup=1, progress=lambda *a: None)
    assert set(block) == {"skipped"} and "transformers" in block["skipped"]
    ref = parse_reference(block, MAX_KERNELS)
    assert ref.skipped == block["skipped"] and ref.runs == ()
    assert ref.to_dict() == block


def _block() -> dict:
    def run(mode, median, kernels, launches):
        return {
            "mode": mode,
            "batch": 1,
            "step_us_median": median,
            "step_us_p10": median * 0.9,
            "step_us_p90": median * 1.2,
            "kernels_per_step": kernels,
            "kernels_per_layer": 50.0,
            "cpu_launch_us": 900.0,
            "gpu_busy_us": 2650.0,
            "launches": launches,
            "enqueue_us_median": median * 0.8,
            "step_us_back_to_back": median * 0.95,
        }

    return {
        "name": "Hugging Face transformers LlamaForCausalLM",
        "transformers": "5.17.0",
        "attention": "sdpa",
        "cache": "StaticCache of 640 positions after a 512-token prefill",
        "runs": [run("eager", 22600.0, 829, 829), run("graph", 3500.0, 829, 1)],
        "errors": ["graph at batch 4: OutOfMemoryError: ..."],
    }


def test_parse_reference_reads_a_full_block():
    block = _block()
    ref = parse_reference(block, MAX_KERNELS)
    assert ref.skipped is None and ref.transformers == "5.17.0" and ref.attention == "sdpa"
    assert [(r.mode, r.batch) for r in ref.runs] == [("eager", 1), ("graph", 1)]
    assert ref.run("graph", 1).step_us_median == 3500.0 and ref.run("graph", 1).launches == 1
    assert ref.run("eager", 1).host_us_per_launch == pytest.approx(900.0 / 829)
    assert ref.run("eager", 4) is None
    assert ref.errors == tuple(block["errors"])
    assert ref.to_dict() == block


@pytest.mark.parametrize(
    "where, value, message",
    [
        (("runs", 1, "mode"), "bogus", "reference.runs[1].mode: must be one of"),
        (("runs", 0, "step_us_p10"), -5.0, "reference.runs[0].step_us_p10: -5 is outside"),
        (("runs", 1, "step_us_median"), -1.0, "reference.runs[1].step_us_median: -1 is outside"),
        (("runs", 0, "batch"), 0, "reference.runs[0].batch: 0 is outside"),
        (("runs", 1, "kernels_per_step"), 2.5, "reference.runs[1].kernels_per_step: must be a whole number"),
        (("errors",), [3], "reference.errors: expected a list"),
    ],
)
def test_parse_reference_names_the_bad_field(where, value, message):
    block = copy.deepcopy(_block())
    parse_reference(copy.deepcopy(block), MAX_KERNELS)  # the block itself is fine
    target = block
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_reference(block, MAX_KERNELS)


def test_parse_reference_refuses_what_is_not_a_block():
    with pytest.raises(ValueError, match=re.escape("reference: expected an object")):
        parse_reference(["eager"], MAX_KERNELS)
    with pytest.raises(ValueError, match=re.escape("skipped: expected a non-empty string")):
        parse_reference({"skipped": 5}, MAX_KERNELS)


def test_a_reference_run_keeps_the_spread_of_its_times():
    block = _block()
    block["runs"][0].update(
        enqueue_us_p10=17_000.0,
        enqueue_us_p90=19_000.0,
        step_us_back_to_back_p10=21_000.0,
        step_us_back_to_back_p90=22_000.0,
        timing_rounds=10,
    )
    ref = parse_reference(copy.deepcopy(block), MAX_KERNELS)
    run = ref.run("eager", 1)
    assert run.enqueue_us_p10 < run.enqueue_us_median < run.enqueue_us_p90 and run.timing_rounds == 10
    assert ref.to_dict() == block and "timing_rounds" not in ref.to_dict()["runs"][1]
    block["runs"][0]["enqueue_us_p90"] = 100.0  # below the median
    with pytest.raises(ValueError, match=re.escape("reference.runs[0].enqueue_us_p90: below the median")):
        parse_reference(block, MAX_KERNELS)
