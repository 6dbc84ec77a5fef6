"""The probe's kernels by family, and the work (bytes, FLOPs) each family does in a step.

A measured kernel is put in a family by its name: the Triton GEMV (batch up to 4) and
tensor-core GEMM, the paged attention and the kernel that merges its context splits,
cuBLAS's matmuls (GEMV-shaped up to batch 4, tiles above: different kernels, different
speeds) and every other ATen kernel. Each family has one fixed latency and one
bandwidth (`sim.timing.kernel_us`); what it moves is computed from the decoder's shape,
per step:

- the matmul families read every weight once and each row's activations;
- the attention reads each row's K and V over the context; the eager (unfused) path
  does it with cuBLAS batched matmuls and ATen gathers, copies and casts, so its
  cuBLAS and ATen families move KV-cache bytes too (their bandwidth is then an
  effective one: how many times the eager path touches the cache is in it);
- the split merge reads each split's partial output.

numpy only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from sim.config import ModelConfig

GEMV_MAX_ROWS = 4  # gpu_probe.kernels.linear.GEMV_MAX_ROWS; cuBLAS also switches to GEMV-shaped tiles there


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    host: str  # "aten" (PyTorch dispatch) or "triton" (Triton's launcher): what one eager launch costs
    pdl: bool  # launched with programmatic dependent launch inside the probe's graphs
    what: str


FAMILIES: tuple[Family, ...] = (
    Family("gemv", "triton", True, "Triton GEMV (batch up to 4): weights streamed on CUDA cores"),
    Family("tile_gemm", "triton", False, "Triton tensor-core GEMM (batch above 4)"),
    Family("attention", "triton", False, "Triton paged attention: each row's K and V over the context"),
    Family("split_merge", "triton", False, "Triton merge of the attention's context splits (small batch)"),
    Family("cublas_gemv", "aten", False, "cuBLAS matmuls at batch up to 4 (projections and attention)"),
    Family("cublas", "aten", False, "cuBLAS matmuls above batch 4 (projections and attention)"),
    Family("aten", "aten", False, "every other PyTorch kernel: norms, RoPE, KV gathers, casts, copies"),
)
NAMES = tuple(f.name for f in FAMILIES)
INDEX = {f.name: i for i, f in enumerate(FAMILIES)}
MATMUL = ("gemv", "tile_gemm", "cublas_gemv", "cublas", "attention")  # may be limited by the matrix rate

_CUBLAS = re.compile(r"nvjet|gemm|gemv|cutlass|splitKreduce|cublas|sm90_xmma|sm80_xmma", re.IGNORECASE)


def classify(kernel_name: str, rows: int) -> str:
    """The family of a measured kernel (its profiler name) in a step of `rows` rows."""
    name = str(kernel_name)
    if "_gemv_kernel" in name:
        return "gemv"
    if "_fused_linear_kernel" in name:
        return "tile_gemm"
    if "_paged_attention_kernel" in name:
        return "attention"
    if "_merge_splits_kernel" in name:
        return "split_merge"
    if _CUBLAS.search(name):
        return "cublas_gemv" if rows <= GEMV_MAX_ROWS else "cublas"
    return "aten"


def family_work(model: ModelConfig, rows, fused) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, FLOPs) each family moves and computes in one step: two [n_rows, n_families] arrays.

    `rows` and `fused` (the step runs the fused kernels) are one entry per step. A family's
    work is the same whatever its kernel count; how many kernels it takes is the measured
    (or assumed) count, each paying the family's latency.
    """
    r = np.asarray(rows, np.float64).reshape(-1, 1)
    fused = np.broadcast_to(np.asarray(fused, bool).reshape(-1, 1), r.shape)
    b, h, q, kv, f, v = model.bytes_per_el, model.hidden, model.q_dim, model.kv_dim, model.ffn, model.vocab
    layers, ctx = model.n_layers, model.context_len
    params = layers * (h * (q + 2 * kv) + q * h + 3 * h * f) + v * h  # projections + LM head
    act = layers * ((h + q + 2 * kv) + (q + h) + (h + 2 * f) + (f + h)) + h + v  # in + out per row
    kv_read = layers * 2 * kv * ctx  # K and V over the context, per row
    attn_flops = layers * 4 * q * ctx  # q·K and p·V, per row
    matmul_bytes = params * b + r * act * b
    matmul_flops = r * 2 * params
    work_bytes = {
        "gemv": matmul_bytes,
        "tile_gemm": matmul_bytes,
        "attention": r * (kv_read + 2 * q * layers) * b,
        "split_merge": r
        * layers
        * q
        * 4.0,  # fp32 partial outputs, one per split (the count is in the latency)
        "cublas_gemv": matmul_bytes + r * kv_read * b,
        "cublas": matmul_bytes + r * kv_read * b,
        # Unfused: the eager attention's gathers, copies and casts of K and V, norms, RoPE, adds.
        # Fused: only the embedding gather and the inputs' copies are left to PyTorch.
        "aten": r * np.where(fused, 2 * h, kv_read + layers * 8 * h) * b,
    }
    work_flops = {
        "gemv": matmul_flops,
        "tile_gemm": matmul_flops,
        "attention": r * attn_flops,
        "split_merge": 0 * r,
        "cublas_gemv": matmul_flops + r * attn_flops,
        "cublas": matmul_flops + r * attn_flops,
        "aten": 0 * r,
    }
    shape = (len(r), len(FAMILIES))
    return (
        np.broadcast_to(np.column_stack([work_bytes[n] for n in NAMES]), shape).copy(),
        np.broadcast_to(np.column_stack([work_flops[n] for n in NAMES]), shape).copy(),
    )
