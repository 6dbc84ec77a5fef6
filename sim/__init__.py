"""Timeline simulator of one LLM decode step (numpy only)."""
from sim.timeline import CPU_BOUND, GPU_BOUND, StepMetrics, Timeline, regime

__all__ = ["CPU_BOUND", "GPU_BOUND", "StepMetrics", "Timeline", "regime"]
