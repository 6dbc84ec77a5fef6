"""The Simulator's "Your model" from a Hugging Face config.json (issue 39 item 2).

An uploaded config.json is read by `core.hf_config` (the probe's reader: a config it cannot build is refused,
naming the field) and fills the Advanced panel's model inputs and the Layers slider: the widths, the KV heads,
the vocabulary and the bytes per element (from `torch_dtype`). The page then runs the simulator on them as on
any figures typed there (`sim.config.model_from_hf` is the same mapping, for code that has the decoder). A
refusal is shown as text and leaves the inputs as they were.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from core.hf_config import ConfigError, from_bytes
from ui import first_paint
from ui.common import plain

UPLOAD_KEY = "sim_hf_config"
_SAID = "sim_hf_config_said"  # (kind, text) of the last upload: "read" or "refused"
_READ = "sim_hf_config_read"  # (file name, {ModelConfig field: value}) of the last config read
LAYERS_KEY = "layers"


def uploader(model_inputs, bytes_input, layers_range: tuple[int, int]) -> None:
    """The upload and what became of the last one. `model_inputs`, `bytes_input`: the panel's (URL key, label,
    ModelConfig field, ...) rows, whose fields the decoder's name alike; `layers_range`: the slider's."""
    st.file_uploader(
        "Fill them from a Hugging Face config.json",
        type=["json"],
        key=UPLOAD_KEY,
        on_change=_apply,
        args=(tuple(model_inputs) + (bytes_input,), layers_range),
        help="A config.json of the Llama family (Llama 2-3.2, Qwen2/2.5, Mistral): its layers, widths, KV heads, "
        "vocabulary and bytes per element (torch_dtype) replace the figures below.",
    )
    said = st.session_state.get(_SAID)
    if said:
        kind, text = said
        (st.error if kind == "refused" else st.caption)(plain(text))


def _apply(inputs, layers_range: tuple[int, int]) -> None:
    upload = st.session_state.get(UPLOAD_KEY)
    if upload is None:  # the file was removed: the figures stay as they are
        st.session_state.pop(_SAID, None)
        st.session_state.pop(_READ, None)
        return
    where = str(upload.name)[:100]
    try:
        decoder = from_bytes(upload.getvalue(), Path(where).stem or "config", where)
    except ConfigError as err:
        st.session_state[_SAID] = ("refused", f"{err} (the figures below are unchanged)")
        return
    filled = {}
    for key, _, field, *_ in inputs:
        if hasattr(decoder, field):  # context and kernels per layer are not in a config
            value = getattr(decoder, field)
            filled[field] = float(value) if field == "bytes_per_el" else int(value)
            first_paint.write(key, filled[field])
    low, high = layers_range
    first_paint.write(LAYERS_KEY, min(max(decoder.n_layers, low), high))
    clipped = "" if low <= decoder.n_layers <= high else f" (the slider goes to {high})"
    filled["n_layers"] = decoder.n_layers
    st.session_state[_READ] = (where, filled)
    st.session_state[_SAID] = (
        "read",
        f"{where}: {decoder.model_type}, {decoder.n_layers} layers{clipped}, hidden {decoder.hidden}, "
        f"{decoder.n_heads} heads over {decoder.n_kv_heads} KV heads, FFN {decoder.ffn}, vocabulary "
        f"{decoder.vocab}, {decoder.dtype} ({decoder.bytes_per_el} bytes per element).",
    )


def source_of(model) -> str | None:
    """The uploaded file's name where `model` (a ModelConfig) still has every figure the last config read gave it,
    else None: the page then calls the model by that file rather than by the preset it was edited from."""
    read = st.session_state.get(_READ)
    if not read:
        return None
    where, filled = read
    return where if all(getattr(model, field, None) == value for field, value in filled.items()) else None
