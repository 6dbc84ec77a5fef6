"""The Simulator's Advanced panel from an uploaded config.json (issue 39 item 2), through AppTest: a shipped
config fills the model inputs and the Layers slider and moves the readouts; a config the probe cannot build is
refused, naming the field, as text, with the inputs left as they were."""

import json

import pytest
from app_pages import as_read, metrics, open_tab

from core.hf_config import shipped

CONFIGS = shipped()


def model_inputs(at) -> dict:
    keys = ("hidden", "heads", "kv_heads", "ffn", "vocab", "bytes_per_el")
    return {**{k: at.number_input(key=k).value for k in keys}, "layers": at.slider(key="layers").value}


def title(at) -> str:
    """The model's title above the lanes, as read."""
    found = [as_read(m.value).strip("*") for m in at.markdown if "model, from" in m.value]
    assert len(found) == 1, found
    return found[0]


def upload(at, name: str, data: bytes):
    at.file_uploader(key="sim_hf_config").set_value((name, data, "application/json")).run()
    assert not at.exception, at.exception
    return at


@pytest.fixture(scope="module")
def page():
    pytest.importorskip("streamlit")
    return open_tab("Simulator")


def test_a_config_fills_the_model_and_a_bad_one_is_refused_naming_the_field(page):
    at = page
    before, readouts = model_inputs(at), metrics(at)
    upload(at, "config.json", CONFIGS["qwen2.5-0.5b"].read_bytes())
    assert model_inputs(at) == {
        "hidden": 896,
        "heads": 14,
        "kv_heads": 2,
        "ffn": 4864,
        "vocab": 151936,
        "bytes_per_el": 2.0,
        "layers": 24,
    }
    assert model_inputs(at) != before and metrics(at) != readouts  # the simulator ran on them
    said = as_read(" ".join(c.value for c in at.caption))
    assert "config.json: qwen2, 24 layers, hidden 896, 14 heads over 2 KV heads" in said
    assert title(at).startswith("Your model, from config.json, on the hardware of")

    moe = {**json.loads(CONFIGS["llama-3.1-8b"].read_text()), "num_local_experts": 8}
    filled = model_inputs(at)
    upload(at, "**mixtral**.json", json.dumps(moe).encode())
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "**mixtral**.json: num_local_experts = 8" in as_read(errors[0]), errors
    assert "\\*\\*mixtral\\*\\*" in errors[0]  # the file's name escaped: text, not markdown
    assert model_inputs(at) == filled

    upload(at, "Llama-3.1-8B.json", CONFIGS["llama-3.1-8b"].read_bytes())
    assert not at.error
    assert model_inputs(at) == {
        "hidden": 4096,
        "heads": 32,
        "kv_heads": 8,
        "ffn": 14336,
        "vocab": 128256,
        "bytes_per_el": 2.0,
        "layers": 32,
    }
    assert title(at).startswith("Your model, from Llama-3.1-8B.json, on the hardware of")
    at.number_input(key="hidden").set_value(2048).run()  # edited: no longer the file's model
    assert title(at).startswith("Custom model, from the preset")
