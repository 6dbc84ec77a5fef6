"""Triton kernels of the fused decode step, each with a plain-PyTorch reference.

linear.py: one GEMM kernel with optional RMSNorm (folded weight + 1/rms epilogue), SwiGLU
epilogue over a packed gate/up weight, and residual-add epilogue. attention.py: RoPE + paged
K/V write + paged decode attention (split over the context at small batch, plus its merge).
"""

from gpu_probe.kernels import _interpreter_compat

_interpreter_compat.install()

from gpu_probe.kernels.attention import paged_decode_attention, paged_decode_attention_reference  # noqa: E402
from gpu_probe.kernels.linear import fused_linear, fused_linear_reference  # noqa: E402 - after install()

__all__ = [
    "fused_linear",
    "fused_linear_reference",
    "paged_decode_attention",
    "paged_decode_attention_reference",
]
