"""Triton kernels of the fused decode step, each with a plain-PyTorch reference.

linear.py: one GEMM kernel with optional RMSNorm (folded weight + 1/rms epilogue), SwiGLU
epilogue over a packed gate/up weight, residual-add epilogue, and a prologue that merges
split attention partials. attention.py: RoPE + paged K/V write + split paged decode attention.
"""
from gpu_probe.kernels import _interpreter_compat

_interpreter_compat.install()

from gpu_probe.kernels.attention import paged_decode_attention, paged_decode_attention_reference
from gpu_probe.kernels.linear import fused_linear, fused_linear_reference, merge_splits_reference

__all__ = ["fused_linear", "fused_linear_reference", "merge_splits_reference",
           "paged_decode_attention", "paged_decode_attention_reference"]
