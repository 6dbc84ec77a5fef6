"""The calibrations, presets and calibrated timelines shared by every session, and their keys.

A fit takes about a second (with its leave-one-out refits, a few), so each is cached for
the whole server. A cache shared between sessions is keyed by the whole content it was
computed from: a sha256 of the result's full JSON, so two uploads that differ anywhere
(one layer count, one timeline) never share a calibration, and one session's upload never
changes what another sees.

Two things keep a fit off the page's path (bench/first_view_speed.py, "first Calibration tab
open"): the fit with leave-one-out is also the fit without it (same parameters), so a preset or a
predicted picture reuses whichever fit of that content exists; and the shipped run's fit starts
with the server's first page, before any tab draws (`start_prefit`, from app.py), in a separate process at
the lowest CPU priority, so it uses only cores the first page leaves idle and never holds the server's GIL.
The page waits for that fit instead of starting a second one. Meanwhile a thread of the server reads the shipped
runs and hashes their content (`_read_shipped_runs`), which the first open of the tab paid for otherwise (0.4-0.8 s
on 2 busy cores, issue 29, item 7). Set LAUNCH_BOUND_NO_PREFIT=1 to turn both off.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict

import streamlit as st

from core.step_plan import MODES
from sim.calibration import Calibration, calibrate, calibrated_preset
from sim.config import Preset

_KEYS: dict[int, tuple[object, str]] = {}  # id(result) -> (result, key): hashing a run is ~0.1 s
# The calibrated preset the Simulator offers, fitted to the shipped run: its key and title are fixed, so that links
# and the Simulator's URL keys name it without reading the run.
CALIBRATED_KEY = "probe-calibrated"
CALIBRATED_TITLE = (
    "Probe decoder, calibrated to its recorded run"  # no GPU: the preset's note names the run's
)
_FITS_LOCK = threading.Lock()
_PREFIT: dict = {}  # "future": the shipped run's fit in the background process, until collected
_READER: dict = {}  # "thread": the thread that read the shipped runs, once per server


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


@st.cache_resource(show_spinner=False)
def _fits() -> OrderedDict:
    """key -> (fit, with leave-one-out): every fit made, whichever cache asked (cleared with them)."""
    return OrderedDict()


def _remember(key: str, cal: Calibration, loo: bool) -> Calibration:
    fits = _fits()
    with _FITS_LOCK:
        if key not in fits or loo:
            fits[key] = (cal, loo)
        fits.move_to_end(key)
        while len(fits) > 8:
            fits.popitem(last=False)
    return cal


def _known(key: str, need_loo: bool) -> Calibration | None:
    with _FITS_LOCK:
        found = _fits().get(key)
    return found[0] if found is not None and (found[1] or not need_loo) else None


# -- the shipped run's fit, started with the server ------------------------------------------------
def _lowest_priority() -> None:
    os.nice(19)


def _fit_recorded(path: str) -> tuple[str, Calibration]:
    """In the background process: (content key, fit with leave-one-out) of the shipped run as the
    page reads it. The key says which content was fitted: the page uses it for that content only."""
    from core.probe_result import load_result

    result = load_result(path, timeline_source="recorded")
    return result_key(result), calibrate(result)


def _read_shipped_runs() -> None:
    """In a thread of the server: the shipped runs read and their content keys hashed (~0.2 s on 2 cores), so the
    first open of the probe or Calibration tab finds them cached (Streamlit's caches are the server's)."""
    from ui.probe_results import more_recorded, recorded

    rec, _ = recorded()
    for result in (rec, *more_recorded()) if rec is not None else ():
        result_key(result)


def start_prefit() -> None:
    """Start fitting the shipped run in a separate, lowest-priority process, once per server. app.py calls it before
    any tab draws: the fit with its leave-one-out refits takes about 2 s on the shipped run's 24 points, and every
    second of the first page's load it gets is a second the first Calibration open need not wait."""
    if _PREFIT or os.environ.get("LAUNCH_BOUND_NO_PREFIT"):
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from core.probe_result import RECORDED_PATH

    try:
        pool = ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_lowest_priority
        )
        _PREFIT["future"] = pool.submit(_fit_recorded, str(RECORDED_PATH))
        _PREFIT["pool"] = pool
    except (OSError, RuntimeError):  # no processes to be had here: the page fits inline instead
        _PREFIT["future"] = None


def prefit_recorded() -> None:
    """The shipped run's fit started (`start_prefit`, if app.py has not already), and the shipped runs read in a
    thread meanwhile (once per server; after ui/warmup's imports, which that thread's imports must not race)."""
    if os.environ.get("LAUNCH_BOUND_NO_PREFIT"):
        return
    start_prefit()
    if _READER:
        return
    from streamlit.runtime.scriptrunner import add_script_run_ctx

    reader = threading.Thread(target=_read_shipped_runs, name="read-shipped-runs", daemon=True)
    add_script_run_ctx(reader)  # the caches are the server's; the context only keeps Streamlit from warning
    _READER["thread"] = reader
    reader.start()


def _prefitted(key: str) -> Calibration | None:
    """The background fit, when it is of this content (waiting for it if it is still running)."""
    future = _PREFIT.get("future")
    if future is None:
        return None
    if not future.done():  # wait only where this could be the shipped run's content
        from ui.probe_results import recorded

        rec, _ = recorded()
        if rec is None or result_key(rec) != key:
            return None
    try:
        fitted_key, cal = future.result(timeout=120)
    except Exception:  # the process failed or was killed: fit here, as without it
        fitted_key, cal = None, None
    _PREFIT["future"] = None  # collected once; the caches keep what it fitted
    _PREFIT.pop("pool").shutdown(wait=False)
    if cal is not None:
        _remember(fitted_key, cal, loo=True)
    return cal if fitted_key == key else None


# -- the caches ----------------------------------------------------------------------------------------
@st.cache_resource(max_entries=8, show_spinner="Fitting the timing model to the run…")
def _calibration(key: str, _result) -> Calibration:
    cal = _known(key, need_loo=True) or _prefitted(key) or calibrate(_result)
    return _remember(key, cal, loo=True)


@st.cache_resource(max_entries=8, show_spinner=False)
def _fit(key: str, _result) -> Calibration:
    # Without the leave-one-out refits (for pictures and presets), unless a fit with them exists.
    cal = _known(key, need_loo=False) or _prefitted(key) or calibrate(_result, loo=False)
    return _remember(key, cal, loo=_has_loo(cal))


def _has_loo(cal: Calibration) -> bool:
    import numpy as np

    return bool(np.isfinite(cal.loo_step_us).any())


@st.cache_resource(max_entries=16, show_spinner=False)
def _preset(key: str, host_index: float | None, _result) -> Preset:
    return calibrated_preset(_result, _fit(key, _result), host_index)


def calibration_of(result) -> Calibration:
    """The calibration of `result`, leave-one-out included (raises ValueError when it has none)."""
    return _calibration(result_key(result), result)


def fit_of(result) -> Calibration:
    return _fit(result_key(result), result)


def preset_for(result, host_index: float | None = None) -> Preset:
    """The simulator preset calibrated to `result`: fitted once per run content for every session; with
    `host_index`, its host costs on that host (`calibrated_preset`)."""
    return _preset(result_key(result), host_index, result)


# The page calls a predicted step "calibrated" only where, left out of the fit, it is predicted within the
# calibration's goal for a mode's median (sim.calibration GOAL, 10 %): the goal it states beside every such title.
def goal_phrase() -> str:
    from sim.calibration import GOAL

    return f"within {100 * GOAL:.0f} %"


def calibrated_at(cal: Calibration, index: int) -> bool:
    """Whether the page calls point `index`'s prediction calibrated: its leave-one-out error within GOAL."""
    import numpy as np

    from sim.calibration import GOAL

    err = float(cal.loo_errors()[index])
    return bool(np.isfinite(err) and abs(err) <= GOAL)


def verdict_title(cal: Calibration, index: int) -> str:
    """How a predicted picture of point `index` is titled: 'calibrated' with its error where that is within the
    goal, else the model's error; both say the goal."""
    import numpy as np

    err = float(cal.loo_errors()[index])
    if not np.isfinite(err):
        return "model fitted to this run (not checked left out of the fit)"
    if calibrated_at(cal, index):
        return f"calibrated to this run: predicted within {100 * abs(err):.1f} % left out (goal: {goal_phrase()})"
    return f"model, off by {100 * err:+.1f} % at this point left out (goal: {goal_phrase()})"


def verdict_sentence(cal: Calibration, index: int) -> str:
    """The sentence behind `verdict_title`: the point's error left out, the rule, its mode's median."""
    import numpy as np

    err = float(cal.loo_errors()[index])
    if not np.isfinite(err):
        return "This fit has no leave-one-out predictions, so how well it predicts this step is not known."
    point = cal.points[index]
    return (
        f"Left out of the fit, this step ({point.mode.name} at batch {point.batch}) is predicted {100 * err:+.1f} % "
        f"off: the page calls a prediction calibrated where that is {goal_phrase()}. {point.mode.name}'s median "
        f"left out is {100 * cal.mode_loo_error(point.mode):.1f} %."
    )


def probe_sim_step(result, mode: str, batch: int):
    """(predicted Timeline, title, the title's reason) of a measured setting from the model fitted to the run, or
    (None, why, ''). The title says 'calibrated' only where the point meets the page's goal (`verdict_title`), so
    the fit here is the one with leave-one-out, as the Calibration tab's."""
    try:
        cal = calibration_of(result)
    except ValueError as err:
        return None, f"The timing model cannot be fitted to this run: {err}", ""
    if mode not in MODES or not MODES[mode].modelled:
        return (
            None,
            "torch.compile's step is not a modelled mode: Inductor generates its own kernels, "
            "so there is no predicted picture for it.",
            "",
        )
    index = next((i for i, p in enumerate(cal.points) if p.mode.name == mode and p.batch == batch), None)
    if index is None:
        run = result.run(mode, batch)
        if run is not None and run.eager_fallback:
            return (
                None,
                f"No prediction: at batch {batch} the {MODES[mode].title} fell back to other kernels, and the "
                "calibration leaves such steps out of its points (they are not the mode's).",
                "",
            )
        return None, "This setting was not measured.", ""
    return cal.timeline(index), verdict_title(cal, index), verdict_sentence(cal, index)
