"""A Hugging Face config.json read into the decoder the probe and the simulator build, or refused naming the field."""

import json

import pytest

from core import hf_config
from core.hf_config import ConfigError, from_bytes, from_dict, from_file, shipped

# Published parameter counts of the five shipped shapes (their model cards), to the 0.1 %.
PUBLISHED_PARAMS = {
    "llama-3.2-1b": 1.236e9,
    "llama-3.2-3b": 3.213e9,
    "llama-3.1-8b": 8.030e9,
    "qwen2.5-0.5b": 0.494e9,
    "mistral-7b-v0.3": 7.248e9,
}


def _config(name: str) -> dict:
    return json.loads(shipped()[name].read_text())


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_each_shipped_config_builds_with_its_published_size(name):
    decoder = from_file(shipped()[name])
    assert decoder.name == name
    assert decoder.n_params == pytest.approx(PUBLISHED_PARAMS[name], rel=1e-3)
    assert decoder.head_dim in (64, 128) and decoder.n_heads % decoder.n_kv_heads == 0


def test_what_each_family_brings_is_read():
    qwen, llama31, mistral = (
        from_file(shipped()[n]) for n in ("qwen2.5-0.5b", "llama-3.1-8b", "mistral-7b-v0.3")
    )
    assert qwen.qkv_bias and qwen.tie_embeddings and qwen.n_heads // qwen.n_kv_heads == 7
    assert not llama31.qkv_bias and not llama31.tie_embeddings
    assert llama31.rope_scaling.factor == 8.0 and llama31.rope_scaling.original_max_position == 8192
    assert mistral.rope_scaling is None and mistral.rope_theta == 1e6


def test_a_config_json_in_a_model_directory_is_named_after_the_directory(tmp_path):
    folder = tmp_path / "my-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_config("llama-3.2-1b")))
    assert from_file(folder / "config.json").name == "my-llama"


BAD = {
    "empty": (b"", "the file is empty"),
    "not json": (b"{model: llama", "not JSON (line 1"),
    "a list": (b"[1, 2]", "one JSON object, got list"),
    "not text": (b"\xff\xfe\x00", "not text"),
    "too large": (b" " * (hf_config.MAX_CONFIG_BYTES + 1), "is not a config.json"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_file_that_is_not_a_config_is_refused_naming_the_file(case):
    data, says = BAD[case]
    with pytest.raises(ConfigError) as err:
        from_bytes(data, "m", "upload.json")
    assert str(err.value).startswith("upload.json: ") and says in str(err.value)


def _with(**changes) -> dict:
    config = _config("llama-3.2-1b")
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return config


REFUSED = {
    "missing hidden_size": (dict(hidden_size=None), "hidden_size is missing"),
    "0 layers": (dict(num_hidden_layers=0), "num_hidden_layers must be from 1 to 1024, got 0"),
    "10^9 heads": (
        dict(num_attention_heads=10**9),
        "num_attention_heads must be from 1 to 1024, got 1000000000",
    ),
    "a mixture of experts": (dict(num_local_experts=8), "num_local_experts = 8: a mixture of experts"),
    "another activation": (dict(hidden_act="gelu_pytorch_tanh"), "hidden_act 'gelu_pytorch_tanh'"),
    "another architecture": (dict(model_type="gemma2"), "model_type 'gemma2'"),
    "a head size the kernels lack": (dict(num_attention_heads=64, head_dim=None), "head_dim 32"),
    "a named head_dim unlike hidden / heads": (dict(head_dim=96), "head_dim = 96"),
    "KV heads that do not divide": (dict(num_key_value_heads=5), "num_key_value_heads must divide"),
    "a short sliding window": (dict(sliding_window=256, use_sliding_window=True), "sliding_window = 256"),
    "an unknown RoPE scaling": (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "'yarn'"),
    "an MLP bias": (dict(mlp_bias=True), "mlp_bias"),
    "a NaN epsilon": (dict(rms_norm_eps=float("nan")), "rms_norm_eps must be a number"),
    "a string layer count": (dict(num_hidden_layers="16"), "num_hidden_layers must be an integer"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_config_the_probe_cannot_build_is_refused_naming_the_field(case):
    changes, says = REFUSED[case]
    with pytest.raises(ConfigError) as err:
        from_dict(_with(**changes), "m", "config.json")
    assert says in str(err.value), str(err.value)


def test_a_sliding_window_longer_than_the_context_is_full_attention():
    config = _with(sliding_window=4096, use_sliding_window=True)
    assert from_dict(config, "m", context=640).n_layers == 16
    with pytest.raises(ConfigError, match="sliding_window = 4096"):
        from_dict(config, "m", context=8192)


def test_the_simulator_builds_each_shipped_config():
    from core.step_plan import BASELINE, FUSED_GRAPH, StepPlan
    from sim.config import PRESETS, model_from_hf
    from sim.step.schedule import simulate_step

    hw = PRESETS["llama3-8b-h100"].hardware
    for name, path in shipped().items():
        decoder = from_file(path)
        model = model_from_hf(decoder, context_len=2048)
        bias = decoder.n_layers * (decoder.q_dim + 2 * decoder.kv_dim) if decoder.qkv_bias else 0
        assert model.n_params == decoder.n_params - bias  # the bias, a few KB a layer, is not modelled
        eager, fast = (simulate_step(model, hw, StepPlan(m, 1)).metrics for m in (BASELINE, FUSED_GRAPH))
        assert eager.step_us > fast.step_us > 0, name
    # The 8B config is the simulator's Llama-3-8B preset's shape (its model, read from the file).
    llama = model_from_hf(from_file(shipped()["llama-3.1-8b"]), context_len=2048)
    preset = PRESETS["llama3-8b-h100"].model
    assert [getattr(llama, f) for f in ("n_layers", "hidden", "n_heads", "n_kv_heads", "ffn", "vocab")] == [
        getattr(preset, f) for f in ("n_layers", "hidden", "n_heads", "n_kv_heads", "ffn", "vocab")
    ]
