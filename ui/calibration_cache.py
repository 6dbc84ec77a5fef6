"""The calibrations, presets and calibrated timelines shared by every session, and their keys.

A fit takes about a second (with its leave-one-out refits, a few), so each is cached for
the whole server. A cache shared between sessions is keyed by the whole content it was
computed from: a sha256 of the result's full JSON, so two uploads that differ anywhere
(one layer count, one timeline) never share a calibration, and one session's upload never
changes what another sees.
"""

from __future__ import annotations

import hashlib
import json

import streamlit as st

from sim.calibration import FIT_MODES, Calibration, calibrate, calibrated_preset
from sim.config import Preset

_KEYS: dict[int, tuple[object, str]] = {}  # id(result) -> (result, key): hashing a run is ~0.1 s


def result_key(result) -> str:
    """sha256 of the result's whole content (its canonical JSON)."""
    known = _KEYS.get(id(result))
    if known is not None and known[0] is result:
        return known[1]
    text = json.dumps(result.to_dict(), sort_keys=True, default=str)
    key = hashlib.sha256(text.encode()).hexdigest()
    if len(_KEYS) > 32:
        _KEYS.clear()
    _KEYS[id(result)] = (result, key)
    return key


@st.cache_resource(max_entries=8, show_spinner="Fitting the timing model to the run…")
def _calibration(key: str, _result) -> Calibration:
    return calibrate(_result)


@st.cache_resource(max_entries=8, show_spinner=False)
def _fit(key: str, _result) -> Calibration:
    # Without the leave-one-out refits: for pictures and presets.
    return calibrate(_result, loo=False)


@st.cache_resource(max_entries=8, show_spinner=False)
def _preset(key: str, _result) -> Preset:
    return calibrated_preset(_result, _fit(key, _result))


def calibration_of(result) -> Calibration:
    """The calibration of `result`, leave-one-out included (raises ValueError when it has none)."""
    return _calibration(result_key(result), result)


def fit_of(result) -> Calibration:
    return _fit(result_key(result), result)


def preset_for(result) -> Preset:
    """The simulator preset calibrated to `result`: fitted once per run content for every session."""
    return _preset(result_key(result), result)


def probe_sim_step(result, mode: str, batch: int):
    """(predicted Timeline, title) of a measured setting from the calibrated model, or (None, why)."""
    try:
        cal = fit_of(result)
    except ValueError as err:
        return None, f"The timing model cannot be fitted to this run: {err}"
    if mode not in FIT_MODES:
        return None, (
            "torch.compile's step is not a modelled mode: Inductor generates its own kernels, "
            "so there is no predicted picture for it."
        )
    index = next((i for i, p in enumerate(cal.points) if p.mode == mode and p.batch == batch), None)
    if index is None:
        return None, "This setting was not measured."
    return cal.timeline(index), "calibrated to this run, same kernels"
