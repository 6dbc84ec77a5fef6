"""What a GPU kernel is, read off its name: the one classifier of kernel names for traces.

Two questions are asked of a kernel's (full, lower-cased) name, and both are answered from the same
name fragments, written once here:

- **Would a fuser fold it?** (`foldable`, the fusion what-if in `sim.trace.whatif`): it matches FOLDABLE
  (elementwise, copy, norm, Inductor's generated pointwise and reduction kernels) and none of ANCHORS
  (GEMMs, attention, gathers, communication, sampling), whose outputs a pointwise fuser does not absorb.
- **Which family is it?** (`family`, the before/after diff in `core.trace.diff`): the first of these that
  applies --
  1. communication, copies/memsets: what `core.timeline.gpu_kind` says (CUPTI's memcpy and memset
     records, NCCL and the engines' all-reduces);
  2. Triton generated: Inductor's `triton_poi_` / `triton_red_` / `triton_per_` kernels, whatever ops
     their names list (`triton_poi_fused__scaled_dot_product_cudnn_attention_...` is a pointwise kernel);
  3. attention: flash, fmha, sdpa, softmax, ... (before GEMM: FlashAttention-3 is a `cutlass::` kernel);
  4. GEMM/GEMV: cuBLAS (nvjet, cublasLt, its split-K reduce), CUTLASS, xmma, and Triton matmuls
     (Inductor's `triton_tem_` templates, kernels named matmul/gemm/gemv/_mm_);
  5. reduction/norm: norms, `reduce_kernel` (mean, argmax), sampling (argmax/topk/sort reduce over the
     vocabulary);
  6. elementwise: PyTorch's elementwise kernels, dtype casts included;
  7. copies/memsets: copy kernels (cat, direct copies) and gathers (index_select, embedding);
  8. other.
"""

from __future__ import annotations

import re

from core.timeline import gpu_kind

# -- name fragments (lower case), one string per kind of kernel ------------------------------------------
GEMM = r"gemm|gemv|nvjet|cutlass|cublas|xmma|splitk|matmul|_mm_"
ATTENTION = r"flash|fmha|attention|attn|sdpa|softmax"
GATHER = r"index_?select|indexselect|embedding"
COMMUNICATION = r"nccl|all_?reduce"
SAMPLING = r"argmax|argmin|topk|sort|sampl"
ELEMENTWISE = r"elementwise|vectorized_|unrolled_"
COPY = r"catarraybatchedcopy|copy_kernel|direct_copy|bfloat16_copy"
NORM = r"rms_?norm|layer_?norm|layernorm|rmsnorm|meanops|welford"
TRITON_GENERATED = r"triton_poi_|triton_red_|triton_per_"
TRITON_MATMUL = r"triton_tem_"  # Inductor's matmul templates
REDUCTION = r"reduc"  # reduce_kernel, lean_reduction_kernel (cuBLAS's split-K reduce is a GEMM's)

# A kernel is foldable when it matches FOLDABLE and none of ANCHORS.
FOLDABLE = re.compile("|".join((ELEMENTWISE, COPY, NORM, TRITON_GENERATED)))
ANCHORS = re.compile("|".join((GEMM, ATTENTION, GATHER, COMMUNICATION, SAMPLING)))


def foldable(name: str) -> bool:
    """Would a fuser fold this kernel into its neighbours (an elementwise or norm kernel)?"""
    lowered = name.lower()
    return bool(FOLDABLE.search(lowered)) and not ANCHORS.search(lowered)


# -- families ---------------------------------------------------------------------------------------------
GEMM_FAMILY = "GEMM/GEMV"
ATTENTION_FAMILY = "attention"
ELEMENTWISE_FAMILY = "elementwise"
REDUCTION_FAMILY = "reduction/norm"
COPY_FAMILY = "copies/memsets"
COMMUNICATION_FAMILY = "communication"
TRITON_FAMILY = "Triton generated"
OTHER_FAMILY = "other"
FAMILIES = (
    GEMM_FAMILY,
    ATTENTION_FAMILY,
    ELEMENTWISE_FAMILY,
    REDUCTION_FAMILY,
    COPY_FAMILY,
    COMMUNICATION_FAMILY,
    TRITON_FAMILY,
    OTHER_FAMILY,
)
# The rules 2-7 of the module's docstring, in order: the first match names the family.
_RULES = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        (TRITON_FAMILY, TRITON_GENERATED),
        (ATTENTION_FAMILY, ATTENTION),
        (GEMM_FAMILY, f"{GEMM}|{TRITON_MATMUL}"),
        (REDUCTION_FAMILY, f"{NORM}|{SAMPLING}|{REDUCTION}"),
        (ELEMENTWISE_FAMILY, ELEMENTWISE),
        (COPY_FAMILY, f"{COPY}|{GATHER}"),
    )
)
_KINDS = {"communication": COMMUNICATION_FAMILY, "memcpy": COPY_FAMILY, "memset": COPY_FAMILY}


def family(name: str) -> str:
    """The family (one of FAMILIES) of a GPU event, from its full name."""
    kind = _KINDS.get(gpu_kind(name))
    if kind is not None:
        return kind
    lowered = name.lower()
    for found, pattern in _RULES:
        if pattern.search(lowered):
            return found
    return OTHER_FAMILY
