"""The Simulator tab's preset list: the static presets plus the one calibrated to the recorded run.

The calibrated preset's key and title are fixed (`ui.calibration_cache`), so that links and `SIM_PARAMS`
name it without reading the run (the title names no GPU: the preset's own note says which run and GPU it was
fitted to); the fit itself runs only when it is picked, once per server.
"""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from core.step_plan import MODES
from sim.calibration.preset import check_preset
from sim.config import DEFAULT_PRESET, PRESETS, Preset
from ui.calibration_cache import CALIBRATED_KEY, CALIBRATED_TITLE, result_key

PRESET_TITLES = {**{k: p.title for k, p in PRESETS.items()}, CALIBRATED_KEY: CALIBRATED_TITLE}
# Links made while the recorded run was an H200's named the preset so; they still open it.
OLD_KEYS = {
    "probe-h200-calibrated": CALIBRATED_KEY,
    "Probe decoder on H200, calibrated to the recorded run": CALIBRATED_KEY,
}
# What a link may hold: the shown title (what Streamlit writes) or the short key.
PRESET_BY_URL_VALUE = {
    **{t: k for k, t in PRESET_TITLES.items()},
    **{k: k for k in PRESET_TITLES},
    **OLD_KEYS,
}


def calibrated(host_index: float | None = None) -> tuple[Preset | None, str | None]:
    """(the preset fitted to the recorded probe run, None), or (None, why there is none); with `host_index` (µs a
    torch launch), its launch and replay costs on that host.

    The fit is cached for every session (`ui.calibration_cache.preset_for`), so it runs
    once per server, and only when this preset is picked.
    """
    from ui.calibration_cache import preset_for
    from ui.probe_results import recorded

    result, why = recorded()
    if result is None:
        return None, f"the recorded probe run could not be read ({why})"
    try:
        preset = preset_for(result, host_index)
    except ValueError as err:
        return None, f"the recorded probe run cannot be calibrated ({err})"
    return replace(preset, key=CALIBRATED_KEY, title=CALIBRATED_TITLE), None


def preset_of(key: str, host_index: float | None = None) -> tuple[Preset, str | None]:
    """The preset for a picker key (the calibrated one on the host `host_index`, where given), and a notice when it
    had to fall back to the default one."""
    if key != CALIBRATED_KEY:
        return PRESETS.get(key, PRESETS[DEFAULT_PRESET]), None
    preset, why = calibrated(host_index)
    if preset is None:
        return PRESETS[DEFAULT_PRESET], (
            f"“{CALIBRATED_TITLE}” is unavailable: {why}. Showing “{PRESETS[DEFAULT_PRESET].title}” instead."
        )
    return preset, None


def uncalibrated_sentence(run) -> str:
    """How far the static preset of `run`'s decoder, with its own figures and no fit, puts the run's steps: the
    median error with the worst beside it ('' where no static preset is of that decoder)."""
    return _uncalibrated_sentence(result_key(run), run)


@st.cache_data(show_spinner=False, max_entries=8)  # keyed by the run's whole content (result_key)
def _uncalibrated_sentence(key: str, _run) -> str:
    for preset in PRESETS.values():
        check = check_preset(preset, _run)
        if check is not None:
            s = check.summary()
            worst = s["worst_point"]
            return (
                f"Uncalibrated, the preset “{preset.title}” puts the run's {len(check.steps)} steps off by "
                f"{100 * s['median']:.0f} % (median; worst {100 * worst['error']:+.0f} %, "
                f"{MODES[worst['mode']].title} at batch {worst['batch']})."
            )
    return ""
