"""Timeline simulator of one LLM decode step (numpy only)."""

from core.modes import CHAPTER_BUCKETS, COMBOS, bucket_for
from core.timeline import CPU_BOUND, GPU_BOUND, StepMetrics, Timeline, regime
from sim.config import (
    BATCH_RANGE,
    DEFAULT_PRESET,
    LAYERS_RANGE,
    PRESETS,
    HardwareConfig,
    ModelConfig,
    Preset,
)
from sim.kernels import (
    FUSED_PER_LAYER,
    FUSIONS,
    UNFUSED_PER_LAYER,
    KernelSpec,
    fusion_table,
    step_kernels,
)
from sim.schedule import SimulatedStep, StepSettings, Sweep, simulate_step, sweep

__all__ = [
    "CPU_BOUND",
    "GPU_BOUND",
    "StepMetrics",
    "Timeline",
    "regime",
    "BATCH_RANGE",
    "CHAPTER_BUCKETS",
    "DEFAULT_PRESET",
    "LAYERS_RANGE",
    "PRESETS",
    "HardwareConfig",
    "ModelConfig",
    "Preset",
    "bucket_for",
    "FUSED_PER_LAYER",
    "FUSIONS",
    "UNFUSED_PER_LAYER",
    "KernelSpec",
    "fusion_table",
    "step_kernels",
    "COMBOS",
    "SimulatedStep",
    "StepSettings",
    "Sweep",
    "simulate_step",
    "sweep",
]
