"""The probe's kernels by family, and the work (bytes, FLOPs) each family does in a step.

A measured kernel is put in a family by its name: the Triton GEMV (batch up to 4) and
tensor-core GEMM, the paged attention and the kernel that merges its context splits,
cuBLAS's matmuls (GEMV-shaped up to batch 4, tiles above: different kernels, different
speeds) and every other ATen kernel. Each family has one fixed latency and one
bandwidth (`sim.timing.kernel_us`). What a family moves and computes in a step is the
simulator's work (`sim.kernels`, where the decoder's bytes and FLOPs are written once), op by
op, summed over the family that runs each op in the probe's fused or eager path
(`FUSED_PATH`, `UNFUSED_PATH`):

- the matmul families read every weight once and each row's activations;
- the attention reads each row's K and V over the context; the eager (unfused) path
  does it with cuBLAS batched matmuls and ATen gathers, copies and casts, so its
  cuBLAS and ATen families move KV-cache bytes too (their bandwidth is then an
  effective one: how many times the eager path touches the cache is in it);
- the split merge reads each split's partial output (fp32, the probe's own kernel).

numpy only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from sim.config import ModelConfig
from sim.kernels import KEPT_ON_CHIP, layer_ops, ops_keeping

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


# Which probe kernel family runs each of the simulator's logical ops (`sim.kernels`), in each path.
# Fused (Triton): RMSNorm folded into the GEMMs that read its output (and the final norm into the LM
# head's), RoPE inside the paged attention; the probe returns logits, so no sampling kernel.
# Eager (PyTorch): every matmul is cuBLAS, the rest ATen; the attention is cuBLAS batched matmuls
# over K and V that ATen kernels first gather, copy and cast (`EAGER_KV_COPIES`).
_GEMM_OPS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")
FUSED_PATH = {
    **dict.fromkeys(_GEMM_OPS, "gemm"),
    **dict.fromkeys(("attn_norm", "ffn_norm", "final_norm"), "gemm"),
    "rope": "attention",
    "attention": "attention",
    "embedding": "aten",
}
UNFUSED_PATH = {
    **dict.fromkeys(_GEMM_OPS, "cublas"),
    **dict.fromkeys(("attn_norm", "ffn_norm", "final_norm", "rope", "embedding"), "aten"),
    "attention": "cublas",
}
EAGER_KV_COPIES = "aten"  # also moves the eager attention's K and V (its bandwidth is then an effective one)
# Families a path's ops map to: "gemm" is the Triton GEMV or tile GEMM, "cublas" cuBLAS's GEMV-shaped or
# tiled kernels (which of each pair runs is the batch: GEMV_MAX_ROWS); both get the work, the measured
# kernel count says which one ran.
_COLUMNS = {"gemm": ("gemv", "tile_gemm"), "cublas": ("cublas_gemv", "cublas")}
# The probe's fused attention writes its output and o_proj reads it back: the simulator's rope_attn_o
# keeps it on chip, the probe does not.
PROBE_KEPT = tuple(t for t in KEPT_ON_CHIP if t.tensor != "attention output")
SPLIT_PARTIAL_BYTES = 4  # the attention's context splits write fp32 partial outputs for the merge


def family_work(model: ModelConfig, rows, fused) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, FLOPs) each family moves and computes in one step: two [n_rows, n_families] arrays.

    `rows` and `fused` (the step runs the fused kernels) are one entry per step. The work is the
    simulator's, op by op (`sim.kernels.ops_keeping`: the fused path without the intermediates its
    kernels keep on chip), summed over the family that runs each op in that path. A family's work
    is the same whatever its kernel count; how many kernels it takes is the measured (or assumed)
    count, each paying the family's latency.
    """
    r = np.asarray(rows, np.float64).reshape(-1)
    fused = np.broadcast_to(np.asarray(fused, bool).reshape(-1), r.shape)
    b, layers = model.bytes_per_el, model.n_layers
    layer_names = {op.name for op in layer_ops(model)}
    out_bytes, out_flops = np.zeros((len(r), len(FAMILIES))), np.zeros((len(r), len(FAMILIES)))
    for is_fused, path, kept in ((False, UNFUSED_PATH, ()), (True, FUSED_PATH, PROBE_KEPT)):
        weight, per_row, flops = np.zeros(len(FAMILIES)), np.zeros(len(FAMILIES)), np.zeros(len(FAMILIES))
        for name, op in ops_keeping(model, kept).items():
            if name not in path:
                continue  # sampling: the probe stops at the logits
            times = layers if name in layer_names else 1
            columns = [INDEX[c] for c in _COLUMNS.get(path[name], (path[name],))]
            weight[columns] += times * op.weight * b
            per_row[columns] += times * (op.act + op.kv) * b
            flops[columns] += times * op.flops
            if name == "attention" and not is_fused:
                per_row[INDEX[EAGER_KV_COPIES]] += times * op.kv * b
        if is_fused:
            per_row[INDEX["split_merge"]] = layers * model.q_dim * SPLIT_PARTIAL_BYTES
        take = fused == is_fused
        out_bytes[take] = weight + r[take, None] * per_row
        out_flops[take] = r[take, None] * flops
    return out_bytes, out_flops
