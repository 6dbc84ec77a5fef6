"""The "Simulator" tab: one decode step as CPU and GPU lanes, with the chapter's controls.

Every control is bound to the URL (keys and ranges in `SIM_PARAMS`, which the URL
sanitiser reads before any widget does). Simulations and sweeps are cached on their
(hashable, frozen) configs. The batch slider and the step drawn for it are one fragment, so a
batch move reruns only them: the other controls and the sweep and fusion sections
(`ui.simulator.sections`) do not depend on the batch, and leaving them out of the rerun cuts the
browser's work per slider move. Every other control reruns the whole tab.
"""

from __future__ import annotations

import gc
import math
from dataclasses import replace

import streamlit as st

from core.decoder import LIMITS
from core.step_plan import TP_CHOICES, Mode, StepPlan, modes, toggled
from sim.config import (
    BATCH_RANGE,
    DEFAULT_PRESET,
    KERNELS_PER_LAYER_RANGE,
    LAYERS_RANGE,
    HardwareConfig,
    ModelConfig,
    Preset,
)
from sim.step.kernels import step_kernels
from sim.step.schedule import SimulatedStep, simulate_step
from sim.step.tensor_parallel import tp_summary
from sim.timing import eager_host_us
from ui import first_paint
from ui.charts import FIRST_LAUNCHES, lanes_figure, lanes_height
from ui.common import chrome_trace_download, plain, regime_explanation, show_readouts, show_time_split
from ui.host_index import HOST_SPEC, checked_host, host_sentence, launch_us, own_index, your_host
from ui.simulator import hf_upload
from ui.simulator.presets import (
    CALIBRATED_KEY,
    OLD_KEYS,
    PRESET_BY_URL_VALUE,
    PRESET_TITLES,
    preset_of,
    uncalibrated_sentence,
)
from ui.simulator.sections import fusion_view, sweep_view

# (URL key, label, HardwareConfig field, widget min, widget max, step, number format)
HARDWARE_INPUTS = (
    ("launch_us", "CPU µs per eager launch", "eager_launch_us", 0.0, 1000.0, 0.5, "%.2f"),
    ("graph_launch_us", "CPU µs per graph launch", "graph_launch_us", 0.0, 10000.0, 1.0, "%.1f"),
    ("graph_node_us", "CPU µs per graph node", "graph_node_host_us", 0.0, 100.0, 0.05, "%.2f"),
    ("node_gap_us", "µs gap between graph nodes", "graph_node_gap_us", 0.0, 100.0, 0.1, "%.2f"),
    ("hbm_GBps", "HBM GB/s", "hbm_GBps", 0.0, 20000.0, 100.0, "%.0f"),
    ("tflops", "Matrix TFLOP/s", "matrix_TFLOPs", 0.0, 10000.0, 10.0, "%.0f"),
    ("min_kernel_us", "Kernel latency µs", "min_kernel_us", 0.0, 1000.0, 0.5, "%.2f"),
)
# The widgets accept 0 so that a typed or linked 0 gets a clear warning; the simulator
# needs these strictly positive, so they are raised to this floor.
POSITIVE_FLOORS = {"launch_us": 0.1, "graph_launch_us": 0.1, "hbm_GBps": 1.0, "tflops": 0.1}
# "Your model" (Advanced): (URL key, label, ModelConfig field, widget min, widget max, step). Layers is
# the slider above; the launch cost is "CPU µs per eager launch" among the hardware figures.
MODEL_INPUTS = (
    ("hidden", "Hidden size", "hidden", *LIMITS["hidden"], 64),
    ("heads", "Attention heads", "n_heads", *LIMITS["n_heads"], 1),
    ("kv_heads", "KV heads", "n_kv_heads", *LIMITS["n_kv_heads"], 1),
    ("ffn", "FFN size", "ffn", *LIMITS["ffn"], 256),
    ("vocab", "Vocabulary", "vocab", *LIMITS["vocab"], 1000),
    ("context", "Context (tokens cached per sequence)", "context_len", 1, 1_048_576, 256),
    ("kernels_unfused", "Kernels per layer, unfused", "unfused_per_layer", *KERNELS_PER_LAYER_RANGE, 1),
    ("kernels_fused", "Kernels per layer, fused", "fused_per_layer", 1, KERNELS_PER_LAYER_RANGE[1], 1),
)
BYTES_INPUT = ("bytes_per_el", "Bytes per element", "bytes_per_el", 0.0, 8.0, 0.5)
BYTES_FLOOR = 0.125  # a typed 0 is raised to 1-bit weights, with a warning

TP_OPTIONS = tuple(str(n) for n in TP_CHOICES)  # "GPUs (tensor parallel)": strings, as the URL holds them

# URL key -> (kind, min, max) or (kind, options). Read by ui.url_params before any widget.
# The preset selectbox shows titles, and Streamlit puts the shown string in the URL, so
# its options are the titles; the short keys (?preset=llama3-8b-h100) are aliases of them.
SIM_PARAMS: dict[str, tuple] = {
    "preset": (
        "choice",
        tuple(PRESET_TITLES.values()),
        {**PRESET_TITLES, **{old: PRESET_TITLES[new] for old, new in OLD_KEYS.items()}},
    ),
    "batch": ("int", *BATCH_RANGE),
    "fusion": ("bool", (False, True)),
    "graphs": ("bool", (False, True)),
    "layers": ("int", *LAYERS_RANGE),
    "whole_step": ("bool", (False, True)),
    "tp": ("choice", TP_OPTIONS),
    # A mode beyond the two toggles, by name; free text here, checked against the modes table by the tab
    # (the table may grow after this module is imported).
    "mode": ("text", 40),
    "host_us": HOST_SPEC,  # the reader's host for the calibrated preset, µs a torch launch (ui.host_index)
    **{key: ("float", low, high) for key, _, _, low, high, _, _ in HARDWARE_INPUTS},
    **{key: ("int", low, high) for key, _, _, low, high, _ in MODEL_INPUTS},
    BYTES_INPUT[0]: ("float", BYTES_INPUT[3], BYTES_INPUT[4]),
}
# The batch slider's stops, spaced about logarithmically: the story happens at batch 1-64, so every
# size up to 8 is a stop of its own, then four stops per doubling (the chapter's buckets 24, 48, 96
# and 192 among them). The number box beside it takes any batch in BATCH_RANGE and owns the URL key.
BATCH_STOPS = (
    *range(1, 9),
    10,
    12,
    14,
    16,
    20,
    24,
    28,
    32,
    40,
    48,
    56,
    64,
    80,
    96,
    112,
    128,
    160,
    192,
    224,
    256,
    320,
    384,
    448,
    512,
)
DEFAULTS = {
    "preset": DEFAULT_PRESET,
    "batch": 1,
    "fusion": False,
    "graphs": False,
    "layers": 32,
    "whole_step": False,
}


# -- cached computations -------------------------------------------------------------
@st.cache_data(max_entries=512, show_spinner=False)
def simulated(model: ModelConfig, hw: HardwareConfig, plan: StepPlan) -> SimulatedStep:
    return simulate_step(model, hw, plan)


# -- settings ------------------------------------------------------------------------
def _apply_preset() -> None:
    """A new preset (or the calibrated one on another host) brings its own model and hardware figures: overwrite the
    Advanced inputs."""
    host, _ = checked_host(st.session_state.get("host_us"))
    preset, _ = preset_of(PRESET_BY_URL_VALUE.get(st.session_state.get("preset"), DEFAULT_PRESET), host)
    for key, _, field, *_ in HARDWARE_INPUTS:
        first_paint.write(key, float(getattr(preset.hardware, field)))
    for key, _, field, *_ in MODEL_INPUTS:
        first_paint.write(key, int(getattr(preset.model, field)))
    first_paint.write(BYTES_INPUT[0], float(preset.model.bytes_per_el))


def _finite_or(value, fallback: float) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return fallback
    return value if math.isfinite(value) else fallback


def checked_hardware(base: HardwareConfig, values: dict, n_kernels: int) -> tuple[HardwareConfig, list[str]]:
    """The Advanced figures made consistent, and a sentence for each one that had to change."""
    warnings, fixed = [], {}
    labels = {key: label for key, label, *_ in HARDWARE_INPUTS}
    for key, label, field, low, high, _, _ in HARDWARE_INPUTS:
        preset_value = float(getattr(base, field))
        value = _finite_or(values.get(key, preset_value), preset_value)
        floor = POSITIVE_FLOORS.get(key, low)
        if value < floor:
            warnings.append(f"{label} must be above 0 (got {value:g}); using {floor:g}.")
            value = floor
        elif value > high:
            warnings.append(f"{label} is at most {high:g} here (got {value:g}); using {high:g}.")
            value = high
        fixed[field] = value
    eager_step_us = eager_host_us(fixed["eager_launch_us"], n_kernels)
    replay_us = float(replace(base, **fixed).replay_cost.host_us(n_kernels))
    if replay_us > eager_step_us:
        per_node = (
            f" + {n_kernels} nodes × {fixed['graph_node_host_us']:g} µs"
            if fixed["graph_node_host_us"]
            else ""
        )
        warnings.append(
            f"{labels['graph_launch_us']} ({fixed['graph_launch_us']:g}{per_node}) is more than launching the "
            f"whole step eagerly ({n_kernels} × {fixed['eager_launch_us']:g} µs = {eager_step_us:g} µs); no "
            f"engine would capture a graph then. Using {eager_step_us:g} µs for the replay."
        )
        fixed["graph_launch_us"], fixed["graph_node_host_us"] = eager_step_us, 0.0
    return replace(base, **fixed), warnings


def _largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in range(1, max(min(at_most, n), 1) + 1) if n % d == 0)


def checked_model(base: ModelConfig, layers: int, values: dict) -> tuple[ModelConfig, list[str]]:
    """ "Your model" made valid, and a sentence for each figure that had to change (never a traceback)."""
    warnings, fixed = [], {"n_layers": layers}
    for key, label, field, low, high, _ in MODEL_INPUTS:
        fixed[field] = _clamped_int(values.get(key, getattr(base, field)), (low, high), label, warnings)
    key, label, field, low, high, _ = BYTES_INPUT
    value = _finite_or(values.get(key, base.bytes_per_el), base.bytes_per_el)
    if not BYTES_FLOOR <= value <= high:
        clamped = min(max(value, BYTES_FLOOR), high)
        warnings.append(
            f"{label} must be from {BYTES_FLOOR:g} to {high:g} (got {value:g}); using {clamped:g}."
        )
        value = clamped
    fixed[field] = value
    hidden, heads, kv_heads = fixed["hidden"], fixed["n_heads"], fixed["n_kv_heads"]
    if hidden % heads:
        new = _largest_divisor(hidden, heads)
        warnings.append(
            f"Attention heads ({heads}) must divide the hidden size ({hidden}) into whole heads; using {new} "
            f"(head size {hidden // new})."
        )
        fixed["n_heads"] = heads = new
    if heads % kv_heads or kv_heads > heads:
        new = _largest_divisor(heads, kv_heads)
        warnings.append(
            f"KV heads ({kv_heads}) must divide the attention heads ({heads}): each KV head serves a whole group "
            f"of query heads; using {new}."
        )
        fixed["n_kv_heads"] = new
    if fixed["fused_per_layer"] > fixed["unfused_per_layer"]:
        warnings.append(
            f"Kernels per layer, fused ({fixed['fused_per_layer']}) cannot be more than unfused "
            f"({fixed['unfused_per_layer']}); using {fixed['unfused_per_layer']}."
        )
        fixed["fused_per_layer"] = fixed["unfused_per_layer"]
    return replace(base, **fixed), warnings


def is_custom(preset: Preset, model: ModelConfig, hardware: HardwareConfig) -> bool:
    """Whether the settings are no longer the preset's (its title would then be wrong)."""
    return model != preset.model or hardware != preset.hardware


def custom_title(
    preset: Preset, model: ModelConfig, hardware: HardwareConfig, config_file: str | None = None
) -> str:
    """What the page calls an edited model instead of the preset's title (markdown: `config_file`, the uploaded
    config.json the model's figures came from, is escaped)."""
    m, hw = model, hardware
    origin = (
        f"Your model, from {plain(config_file)}, on the hardware of “{preset.title}”"
        if config_file
        else f"Custom model, from the preset “{preset.title}”"
    )
    return (
        f"{origin}: {m.n_layers} layers, hidden {m.hidden:,}, "
        f"{m.n_heads} heads / {m.n_kv_heads} KV heads, FFN {m.ffn:,}, vocab {m.vocab:,}, "
        f"{m.context_len:,} tokens of context, {m.bytes_per_el:g} bytes an element, "
        f"{m.unfused_per_layer} kernels/layer ({m.fused_per_layer} fused), {hw.eager_launch_us:g} µs/launch."
    )


def _as_custom(
    preset: Preset, model: ModelConfig, hardware: HardwareConfig
) -> tuple[ModelConfig, HardwareConfig]:
    """The edited model and hardware renamed, so the lanes, labels and file names say so."""
    if model != preset.model:
        model = replace(model, name=f"custom-{preset.model.name}")
    if hardware != preset.hardware:
        hardware = replace(hardware, name=f"{preset.hardware.name}, edited")
    return model, hardware


def _controls() -> tuple:
    """Draw the controls but the batch slider; return (model, hardware, mode, notices, batch column)."""
    preset, notices, beyond_col = _preset_row()
    title_slot, layers, fusion, graphs, batch_cols = _step_row(preset)
    mode = _mode_beyond_toggles(beyond_col, toggled(fusion, graphs), notices)
    values, model_values = {}, {}
    with st.expander("Advanced"):
        # On the first screen the inputs come with the charts (ui/first_paint.py): unset, each would only
        # show its preset's figure, which is what checked_model/checked_hardware take for a missing one.
        if first_paint.seen() or _advanced_asked():
            model_values, values = _advanced_inputs(preset)
    layers = _clamped_int(layers, LAYERS_RANGE, "Layers", notices)
    model, model_notices = checked_model(preset.model, layers, model_values)
    n_kernels = len(step_kernels(model, mode))
    hardware, hw_notices = checked_hardware(preset.hardware, values, n_kernels)
    if is_custom(preset, model, hardware):
        title_slot.markdown(f"**{custom_title(preset, model, hardware, hf_upload.source_of(model))}**")
        model, hardware = _as_custom(preset, model, hardware)
    return model, hardware, mode, notices + model_notices + hw_notices, batch_cols


def _preset_row() -> tuple[Preset, list[str], object]:
    """The first row: the preset and the GPU count; (the preset, its notices, the column for a mode beyond the
    toggles)."""
    preset_col, beyond_col, tp_col = st.columns([4, 1.6, 1], vertical_alignment="bottom")
    preset_key = preset_col.selectbox(
        "Preset",
        tuple(PRESET_TITLES),
        index=tuple(PRESET_TITLES).index(DEFAULT_PRESET),
        key="preset",
        bind="query-params",
        format_func=lambda k: PRESET_TITLES.get(k, k),
        on_change=_apply_preset,
        help="A model shape and a GPU + host. Changing it resets the Advanced figures to its own. The "
        "calibrated one is fitted to the shipped probe run, whose GPU and date it names (Calibration tab).",
    )
    tp_col.selectbox(
        "GPUs (tensor parallel)",
        TP_OPTIONS,
        key="tp",
        bind="query-params",
        help="Split every layer over this many GPUs (Megatron-style): weights and KV cache per GPU "
        "divide, and each layer adds two all-reduces, costed from published H100 figures. "
        "The lanes show one GPU; the sweep below stays on one GPU.",
    )
    preset_key = PRESET_BY_URL_VALUE.get(preset_key, DEFAULT_PRESET)
    if preset_key != CALIBRATED_KEY:
        preset, preset_notice = preset_of(preset_key)
        return preset, [preset_notice] if preset_notice else [], beyond_col
    from ui.probe_results import describe, recorded

    run, _ = recorded()
    host_col, text_col = st.columns([1.3, 6], vertical_alignment="bottom")
    host, host_notice = your_host(host_col, "host_us", run, on_change=_apply_preset) if run else (None, None)
    preset, preset_notice = preset_of(preset_key, host)
    said = (
        f"On your host ({host:g} µs a torch launch; the run's: {launch_us(own_index(run))}): "
        f"{preset.hardware.eager_launch_us:.1f} µs a launch and {preset.hardware.graph_launch_us:.1f} µs a graph "
        "replay, the run's carried to your host by the calibrated model; the GPU's figures are the run's."
        if host is not None and preset.key == CALIBRATED_KEY
        else host_sentence(run)
        if run is not None
        else ""
    )
    fitted_to = (
        f"the recorded probe run ({plain(describe(run))})" if run is not None else "the recorded probe run"
    )
    before = uncalibrated_sentence(run) if run is not None and preset.key == CALIBRATED_KEY else ""
    text_col.caption(
        f"Fitted to {fitted_to}. With *Kernel fusion* on, its step times follow "
        "the Calibration tab's predictions; what it cannot represent is under Advanced, "
        f"“Where the preset's figures come from”. {before} {said}"
    )
    return preset, [n for n in (preset_notice, host_notice) if n], beyond_col


def _step_row(preset: Preset) -> tuple:
    """The second row: layers and the two toggles, with room for the batch slider; (the custom model's title
    slot, layers, fusion, graphs, the batch slider's columns)."""
    title_slot = st.empty()  # the custom model's title, once the Advanced figures are read
    stops_col, exact_col, layers_col, fusion_col, graphs_col = st.columns(
        [2.5, 0.9, 2.6, 1.2, 1.2], vertical_alignment="center"
    )
    layers = layers_col.slider(
        "Layers",
        *LAYERS_RANGE,
        value=DEFAULTS["layers"],
        key="layers",
        bind="query-params",
        help=f"Each layer launches {preset.model.unfused_per_layer} kernels unfused, "
        f"{preset.model.fused_per_layer} fused (this preset's; Advanced → Your model changes them).",
    )
    fusion = fusion_col.toggle(
        "Kernel fusion",
        value=False,
        key="fusion",
        bind="query-params",
        help=f"{preset.model.unfused_per_layer} kernels per layer become {preset.model.fused_per_layer} "
        "(this preset's counts; Advanced → Your model changes them).",
    )
    graphs = graphs_col.toggle(
        "CUDA graphs",
        value=False,
        key="graphs",
        bind="query-params",
        help="Replay the captured step with one CPU call; the batch is padded "
        "up to the nearest captured size.",
    )
    return title_slot, layers, fusion, graphs, (stops_col, exact_col)


def _advanced_inputs(preset: Preset) -> tuple[dict, dict]:
    """The Advanced figures' inputs, each defaulting to the preset's: ({model key: value}, {hardware key: value})."""
    values, model_values = {}, {}
    st.caption(
        "Your model: its shape, precision, context and kernels per layer (layers: the slider above; "
        "launch cost: CPU µs per eager launch below). Defaults are the preset's; changing the preset "
        "resets them. A layer beyond the chapter's 11 kernels runs small elementwise kernels that "
        "move no bytes of their own but each pay a launch and the kernel latency."
    )
    hf_upload.uploader(MODEL_INPUTS, BYTES_INPUT, LAYERS_RANGE)
    columns = st.columns(3)
    for i, (key, label, field, low, high, step) in enumerate(MODEL_INPUTS):
        model_values[key] = columns[i % 3].number_input(
            label,
            min_value=low,
            max_value=high,
            value=int(getattr(preset.model, field)),
            step=step,
            key=key,
            bind="query-params",
        )
    key, label, field, low, high, step = BYTES_INPUT
    model_values[key] = columns[len(MODEL_INPUTS) % 3].number_input(
        label,
        min_value=low,
        max_value=high,
        value=float(preset.model.bytes_per_el),
        step=step,
        format="%.3g",
        key=key,
        bind="query-params",
        help="2 for bf16, 1 for fp8, 0.5 for int4 weights (activations and KV cache counted alike).",
    )
    st.caption(
        f"Hardware figures. Defaults are the preset's ({plain(preset.hardware.name)}); changing "
        "the preset resets them."
    )
    columns = st.columns(3)
    for i, (key, label, field, low, high, step, fmt) in enumerate(HARDWARE_INPUTS):
        values[key] = columns[i % 3].number_input(
            label,
            min_value=low,
            max_value=high,
            value=float(getattr(preset.hardware, field)),
            step=step,
            format=fmt,
            key=key,
            bind="query-params",
        )
    with st.popover("Where the preset's figures come from"):
        for paragraph in note_paragraphs(preset.note):
            st.text(paragraph)  # text, not markdown: a calibrated note quotes the result file
    # A preset changed on the first screen: its figures, held back from the inputs until the whole page.
    return (
        {key: first_paint.value(key, v) for key, v in model_values.items()},
        {key: first_paint.value(key, v) for key, v in values.items()},
    )


def _advanced_asked() -> bool:
    """Whether an Advanced figure was set, in the URL or in this session (else each is the preset's)."""
    keys = [key for key, *_ in (*MODEL_INPUTS, BYTES_INPUT, *HARDWARE_INPUTS)]
    return any(key in st.query_params or key in st.session_state for key in keys)


TOGGLES = "the toggles say"  # the "Run the step as" choice that leaves the step to the two toggles


def _mode_beyond_toggles(column, toggles_mode: Mode, notices: list[str]) -> Mode:
    """The modes the simulator models beyond the two toggles, as one choice in `column` (drawn only when
    there are any). The list is read from the modes table on every run, so a mode added to it is offered.
    The choice shows, and the URL holds, a mode's title; a link may name the mode instead."""
    beyond = {m.title: m for m in modes(modelled=True, toggles=False)}
    asked = st.session_state.get("mode", st.query_params.get("mode", TOGGLES))
    named = {m.name: label for label, m in beyond.items()}
    if asked in named:  # ?mode=persistent: the option it names
        asked = st.session_state["mode"] = named[asked]
    if asked not in (TOGGLES, *beyond):
        notices.append(f"mode: {asked!r} is not a mode the simulator has; using the toggles.")
        st.session_state["mode"] = TOGGLES
    if not beyond:
        return toggles_mode
    chosen = column.selectbox(
        "Run the step as",
        (TOGGLES, *beyond),
        key="mode",
        bind="query-params",
        help="Ways to run the step that the two toggles do not describe (the persistent kernel: the whole "
        "step as one launch, its phases separated by grid barriers). Picking one sets the toggles aside.",
    )
    return beyond.get(chosen, toggles_mode)


def note_paragraphs(note: str) -> list[str]:
    """A preset's note, wrapped at ~100 characters in the source, as paragraphs that wrap to the popover.

    A blank line or a line starting with "- " (a list item) begins a new paragraph.
    """
    paragraphs: list[str] = []
    start_new = True
    for line in note.splitlines():
        line = line.strip()
        if not line:
            start_new = True
            continue
        if start_new or line.startswith("- "):
            paragraphs.append(line)
        else:
            paragraphs[-1] += " " + line
        start_new = False
    return paragraphs


def _clamped_int(value, bounds: tuple[int, int], label: str, notices: list[str]) -> int:
    low, high = bounds
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        notices.append(f"{label}: {value!r} is not a whole number; using {low}.")
        return low
    if not low <= number <= high:
        clamped = min(max(number, low), high)
        notices.append(f"{label} must be from {low} to {high} (got {number}); using {clamped}.")
        return clamped
    return number


# -- page ----------------------------------------------------------------------------
def _bucket_note(plan: StepPlan) -> str:
    """One line on how this step is launched; always shown, so the lanes below never jump when it changes."""
    if not plan.mode.graphs:
        return (
            "CUDA graphs off: the CPU launches every kernel itself, one call each; switch them on to "
            "replay the whole step with one call."
        )
    largest = max(plan.buckets)
    if plan.eager_fallback:
        return (
            f"CUDA graphs: batch {plan.batch} is above the largest captured bucket ({largest}), "
            "so this step falls back to eager launches, one per kernel."
        )
    if plan.padded_rows:
        return (
            f"CUDA graphs: batch {plan.batch} replays the graph captured for {plan.bucket}; "
            f"{plan.padded_rows} of its {plan.bucket} rows are padding (dummy rows the GPU still computes)."
        )
    return f"CUDA graphs: batch {plan.batch} is a captured bucket, so no rows are padding."


INTRO = (
    "**Try this:** at batch 1 with both toggles off the GPU lane is striped with idle gaps, bound by CPU launches; "
    "switch on *Kernel fusion*, then *CUDA graphs*, or slide the batch to 128. **Which step time to read:** "
    "*Step time*, the only one here: first launch to last kernel, each sequence's time per output token."
)


READOUT = "[data-testid=stMetricValue]"  # on screen: the first screen is shown (ui/first_paint.py)


def render() -> None:
    first_paint.apply_held()  # what the reader moved on the first screen, into the widgets (ui/first_paint.py)
    st.markdown(INTRO)
    try:
        model, hw, mode, notices, batch_col = _controls()
    except ValueError as err:  # a config the simulator rejects: say which field, keep the page
        st.error(f"These settings cannot be simulated: {err}")
        return
    for notice in notices:
        st.warning(notice, icon=":material/warning:")
    drawn = _step_section(batch_col, model, hw, mode)
    if not first_paint.seen():
        # Last on the first screen, so the browser asks for the reporter's own scripts after the
        # readouts' (it opens six connections to the server, and the first screen needs ~45 scripts).
        first_paint.report(once_shown=READOUT, delay_ms=first_paint.REACTION_MS)
        _freeze_long_lived_objects("first screen")
    elif drawn:
        sweep_view(model, hw, mode, int(st.session_state.get("tp") or 1))
        fusion_view(model)
        _freeze_long_lived_objects("whole page")


_frozen: set[str] = set()  # the stages frozen so far in this server: "first screen", "whole page"


def _freeze_long_lived_objects(stage: str) -> None:
    """Once per server and stage: move the objects alive now out of the GC's sight.

    Streamlit runs a full `gc.collect(2)` after every script run. On the 2-core machine it took
    74-113 ms per slider move, re-scanning ~139k long-lived objects (Streamlit, Plotly, numpy,
    our caches) while holding the GIL, so the rerun's messages waited for it; frozen, it takes
    under 1 ms. Frozen objects are still freed by reference counting; only cycles among them are
    never collected, which bounds any leak to what is alive now.

    Two stages. After the first screen (stage "first screen") nothing is collected first: on a fresh
    server that full collection took ~100 ms, holding the GIL while the browser fetched the scripts
    for the first screen's widgets from this same process. After the first whole page (pandas,
    Plotly and the caches now loaded), as before: a collection, then the freeze.
    """
    if stage not in _frozen:
        if stage != "first screen":
            gc.collect()
        gc.freeze()
        _frozen.add(stage)


def nearest_stop(batch: int) -> int:
    """The slider stop closest to `batch` on the slider's (logarithmic) scale."""
    return min(BATCH_STOPS, key=lambda stop: (abs(math.log(stop / batch)), stop))


def _batch_from_stops() -> None:
    # on_change of the slider: the number box holds the batch (and the URL key); the slider moves it.
    first_paint.write("batch", st.session_state["batch_stops"])


TYPED_BATCH_NOTICE = "_batch_notice"  # session key: why a typed batch was not taken, shown once


def _batch_typed() -> None:
    """on_change of the number box: a batch outside the range is put back inside it, and the page says why
    (the box itself has no bounds, so the browser never silently drops what was typed)."""
    notices: list[str] = []
    typed = st.session_state.get("batch")
    kept = _clamped_int(typed, BATCH_RANGE, "Batch size", notices)
    if notices:
        first_paint.write("batch", kept)
        st.session_state[TYPED_BATCH_NOTICE] = notices[0]


@st.fragment
def _step_section(batch_cols, model: ModelConfig, hw: HardwareConfig, mode: Mode) -> bool:
    """The batch slider (in the controls' row) and the step drawn for it; False if it cannot be simulated.

    Moving the slider reruns only this, with the other settings as the last full run passed them
    (any other control reruns the whole tab, so they are current).
    """
    stops_col, exact_col = batch_cols
    first_paint.apply_held()  # a fragment's run may be the first of the whole page
    batch = exact_col.number_input(
        "Exact batch",
        value=DEFAULTS["batch"],
        step=1,
        key="batch",
        bind="query-params",
        on_change=_batch_typed,
        help="Any batch from 1 to 512; the slider beside it stops at 1-8, then four sizes per doubling.",
    )
    batch = first_paint.value("batch", batch)  # the slider's batch, held back on the first screen
    notices = [st.session_state.pop(TYPED_BATCH_NOTICE)] if TYPED_BATCH_NOTICE in st.session_state else []
    batch = _clamped_int(batch, BATCH_RANGE, "Batch size", notices)
    # The slider follows the number box: a typed 33 puts it on the nearest stop, marked "≈32".
    stop = nearest_stop(batch)
    first_paint.write("batch_stops", stop)
    stops_col.select_slider(
        "Batch size",
        BATCH_STOPS,
        key="batch_stops",
        on_change=_batch_from_stops,
        format_func=lambda s: f"≈{s}" if s == stop and s != batch else str(s),
        help="Sequences decoded together in this step; each adds activation and KV-cache reads, while the "
        "weights are read once for all of them. Log-spaced: each size up to 8 is one step apart; a batch "
        "typed between two stops shows as ≈ the nearest.",
    )
    for notice in notices:
        st.warning(notice, icon=":material/warning:")
    try:
        tp = int(st.session_state.get("tp") or 1)  # the radio's value: one of TP_OPTIONS
        step = simulated(model, hw, StepPlan(mode, batch, tp))
    except ValueError as err:  # a config the simulator rejects: say which field, keep the page
        st.error(f"These settings cannot be simulated: {err}")
        return False
    _step_view(step)
    if tp > 1:
        _tp_note(step)
    return True


def _tp_note(step: SimulatedStep) -> None:
    """Per-GPU memory and the all-reduces' share of the step (the figures are published, not measured)."""
    summary = tp_summary(step)
    tp = step.plan.tp
    one = simulated(step.model, step.hardware, replace(step.plan, tp=1))
    st.info(
        f"Tensor parallel over {tp} GPUs, one GPU's lanes (green: the all-reduces): "
        f"{summary.weight_bytes_per_gpu / 1e9:.2f} GB of "
        f"weights and {summary.kv_bytes_per_gpu / 1e9:.2f} GB of KV cache per GPU. "
        f"{summary.allreduces} all-reduces of {summary.allreduce_bytes / 1e3:g} KB take "
        f"{summary.allreduce_us:,.0f} µs of GPU time ({summary.per_call_us:.1f} µs each); the step takes "
        f"{step.metrics.step_us:,.0f} µs against {one.metrics.step_us:,.0f} µs on one GPU. The all-reduce "
        f"cost is α + bytes/β from published figures (SGLang's custom all-reduce on H100, sglang #2904), "
        f"not fitted: no two-GPU run of the probe exists yet.",
        icon=":material/info:",
    )


def _step_view(step: SimulatedStep) -> None:
    metrics = step.metrics
    show_readouts(metrics, step.speedup, phases=step.phases)
    shown = (
        "phases of the one kernel" if step.phases else "kernels" if step.plan.replays else "kernel launches"
    )
    title_col, toggle_col = st.columns([4, 1.4], vertical_alignment="bottom")
    # The toggle is created first so the title follows it (also on a first load from the URL).
    whole = toggle_col.toggle(
        "Show the whole step", value=DEFAULTS["whole_step"], key="whole_step", bind="query-params"
    )
    title_col.markdown(
        f"**The whole step: {metrics.kernels:,} kernels**" if whole else f"**First {FIRST_LAUNCHES} {shown}**"
    )
    if not first_paint.seen():  # the first screen ends here; the rest comes once it is shown
        st.skeleton(height=lanes_height(step.timeline, whole_step=whole))
        return
    import ui.warmup  # noqa: F401 - pandas and Plotly whole before this session's first figure (see there)

    st.plotly_chart(
        lanes_figure(step.timeline, whole_step=whole),
        width="stretch",
        key="sim_lanes",
        theme=None,
        config={"displaylogo": False, "scrollZoom": True},
    )
    st.info(_bucket_note(step.plan), icon=":material/info:")
    st.caption(
        "Orange: the CPU building and submitting a launch. Blue: the GPU executing the kernel. "
        "Hatched grey: the GPU idle, waiting for work. Drag to zoom into a stretch of time, "
        "double-click to zoom back out; hover a bar for its name, start and duration."
    )

    split_col, regime_col = st.columns(2, gap="large")
    with split_col:
        st.subheader("Where the time goes")
        show_time_split(metrics)
    with regime_col:
        _, text = regime_explanation(metrics)
        st.subheader("What this means")
        st.markdown(text)

    plan = step.plan
    file_stem = f"launch-bound-{step.model.name}-b{plan.batch}-{plan.mode.name.replace('+', '-')}"
    chrome_trace_download(
        step.timeline,
        "Download this step as a Chrome trace (open in Perfetto)",
        f"{file_stem}.json",
        "sim_trace_download",
    )
