"""The probe's kernels by family, and the work (bytes, FLOPs) each family does in a step.

A measured kernel is put in a family by its name: the Triton GEMV (batch up to 4) and
tensor-core GEMM (to 64 rows), cuBLAS's matmuls (above 64 rows, where both of the probe's
paths use them), the paged attention and the kernel that merges its context splits, the
unfused step's one-op Triton kernels (RMSNorm, RoPE, the KV write, SiLU x up) and every
other ATen kernel (the residual adds, the embedding). Each family has one fixed latency and
one bandwidth (`sim.timing.kernel_us`). What a family moves and computes in a step is the
simulator's work (`sim.step.ops`, where the decoder's bytes and FLOPs are written once), op by
op, summed over the family that runs each op in the probe's path of the step's kernel set (its
`sim.step.kernel_sets.ProbeKernels`: the fused and unfused paths run the same GEMM and attention
kernels, so they differ in the one-op kernels and in the bytes the fused kernels keep on chip; the
persistent kernel runs the fused path's work in a family of its own). Where a probe kernel moves
activations that the simulator's ops count in another op (its residual adds and SiLU x up ride in
GEMM epilogues; the probe's unfused step runs them as kernels of their own), those bytes go to the
family that moves them (the path's moves):

- the matmul families read every weight once and each row's activations;
- the attention reads each row's K and V over the context;
- the split merge reads each split's partial output (fp32, the probe's own kernel).

numpy only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from sim.config import ModelConfig
from sim.step.kernel_sets import GEMV_MAX_ROWS, TILE_MAX_ROWS, kernel_set
from sim.step.ops import layer_ops, ops_keeping

# gpu_probe.kernels.linear._tile_config: up to 16 rows one 16-row tensor-core tile, above that 32- or
# 64-row tiles: two kernels as far as speed goes (tests check the rule).
TILE_ROWS = 16
# Which (n_out, k, swiglu) shapes a run's tensor-core GEMM ran unpipelined (num_stages=1; pipelined,
# they raced on the H200): a result file names them in `settings.unpipelined_gemms`
# (gpu_probe.kernels.linear.runs_unpipelined: every SwiGLU GEMM and the 1b LM head). Files without it
# were made before 2026-12-02, when only the 1b preset's gate/up and LM head ran unpipelined (h200.json
# and small-holdout.json ran the small preset's gate/up pipelined). Unpipelined, the kernel streams its
# weights 2-4 times slower than the pipelined kernel of the same tiles.
UNPIPELINED_BEFORE_2026_12_02 = frozenset({(8192, 2048, True), (128256, 2048, False)})


def pdl_max_rows(result) -> int:
    """The most rows at which the run's fused kernels launched with PDL: `settings.pdl_max_rows` where the
    file says; else TILE_MAX_ROWS for files with a measured matrix rate (made from 2026-12-06 on, when the
    tensor-core tile took PDL too) and GEMV_MAX_ROWS for older ones (only the GEMV had it)."""
    settings = getattr(result, "settings", None) or {}
    named = settings.get("pdl_max_rows")
    if type(named) is int and 0 <= named <= 1_048_576:
        return named
    return TILE_MAX_ROWS if getattr(result, "matmul_TFLOPs", None) else GEMV_MAX_ROWS


def unpipelined_gemms(result) -> frozenset[tuple[int, int, bool]]:
    """The shapes `result`'s tensor-core GEMMs ran unpipelined; ValueError names a malformed entry."""
    named = (getattr(result, "settings", None) or {}).get("unpipelined_gemms")
    if named is None:
        return UNPIPELINED_BEFORE_2026_12_02
    if not isinstance(named, list) or len(named) > 16:
        raise ValueError("settings.unpipelined_gemms: expected a list of at most 16 [n_out, k, swiglu]")
    shapes = set()
    for i, shape in enumerate(named):
        if (
            not isinstance(shape, list)
            or len(shape) != 3
            or not all(type(v) is int and 0 < v <= 2**24 for v in shape[:2])
            or not isinstance(shape[2], bool)
        ):
            raise ValueError(
                f"settings.unpipelined_gemms[{i}]: expected [n_out, k, swiglu] (two counts, a boolean)"
            )
        shapes.add((shape[0], shape[1], shape[2]))
    return frozenset(shapes)


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    # What one eager launch of it costs the host (`HOSTS`): the probe's own call behind it, read off the profiled
    # steps (`sim.calibration.fit`) as a share of a Triton GEMM's launch.
    host: str
    # Launched with programmatic dependent launch inside the probe's fused graphs, up to the run's
    # `pdl_max_rows` (`pdl_max_rows`).
    pdl: bool
    what: str


FAMILIES: tuple[Family, ...] = (
    Family("gemv", "triton", True, "Triton GEMV (batch up to 4): weights streamed on CUDA cores"),
    Family("tile_gemm", "triton", True, "Triton tensor-core GEMM, one 16-row tile (batch 5-16)"),
    Family("tile_gemm_wide", "triton", True, "Triton tensor-core GEMM, 32- or 64-row tiles (batch 17-64)"),
    Family(
        "unpiped_gemm", "triton", False, "the tensor-core GEMM unpipelined (gate/up, the 1b LM head), 16 rows"
    ),
    Family("unpiped_gemm_wide", "triton", False, "the tensor-core GEMM unpipelined, above 16 rows"),
    Family("attention", "attention", False, "Triton paged attention: each row's K and V over the context"),
    Family(
        "triton_op",
        "op",
        False,
        "the unfused step's one-op Triton kernels (RMSNorm, RoPE, KV write, SiLU x up) and the wide fused "
        "step's SwiGLU",
    ),
    Family("split_merge", "merge", False, "Triton merge of the attention's context splits (small batch)"),
    Family("cublas_gemv", "cublas", False, "cuBLAS matmuls at batch up to 4 (projections and attention)"),
    Family("cublas", "cublas", False, "cuBLAS matmuls above batch 4 (projections and attention)"),
    Family("aten", "aten", False, "every other PyTorch kernel: norms, RoPE, KV gathers, casts, copies"),
    Family(
        "persistent",
        "triton",
        False,
        "the persistent kernel: the whole fused step in one launch, its phases separated by grid barriers "
        "(its latency is the step's barriers and imbalance)",
    ),
)
NAMES = tuple(f.name for f in FAMILIES)
# The eager launch kinds, each a share of a Triton GEMM's launch (`sim.calibration.model`): the step's start (its
# first launch, the embedding, carries the forward's Python before it), an ATen elementwise or indexing op, an
# ATen matmul (cuBLAS's heuristics and workspace), a Triton GEMM behind its wrapper (which allocates its output
# and passes 13-17 arguments), the attention's wrapper (its outputs, the fp32 partials and the log-sum-exps, and
# 20-odd arguments), the split merge that wrapper launches bare, and a one-op Triton kernel (a few tensors, no
# tile choice). Their shares as a profiled run showed them: `sim.calibration.model.LAUNCH_SHARE_START`
# (docs/calibration.md, "the model's constants").
HOSTS = ("start", "aten", "cublas", "triton", "attention", "merge", "op")
INDEX = {f.name: i for i, f in enumerate(FAMILIES)}
MATMUL = (  # may be limited by the matrix rate
    "gemv",
    "tile_gemm",
    "tile_gemm_wide",
    "unpiped_gemm",
    "unpiped_gemm_wide",
    "cublas_gemv",
    "cublas",
    "attention",
    "persistent",
)

_CUBLAS = re.compile(r"nvjet|gemm|gemv|cutlass|splitKreduce|cublas|sm90_xmma|sm80_xmma", re.IGNORECASE)


def tile_family(rows: int, unpipelined: bool) -> str:
    """The tensor-core GEMM's family at `rows` rows (its tiles), pipelined or not."""
    base = "unpiped_gemm" if unpipelined else "tile_gemm"
    return base if rows <= TILE_ROWS else f"{base}_wide"


# The probe's fused layer runs its GEMMs in this order (gpu_probe.model.fused_forward), the LM head after
# the layers; the ops each one carries (RMSNorm folded into the GEMM that reads its output).
FUSED_GEMMS = ("qkv", "o", "gate_up", "down")
GEMM_OF_OP = {
    **dict.fromkeys(("attn_norm", "q_proj", "k_proj", "v_proj"), "qkv"),
    "o_proj": "o",
    **dict.fromkeys(("ffn_norm", "gate_proj", "up_proj"), "gate_up"),
    "down_proj": "down",
    **dict.fromkeys(("final_norm", "lm_head"), "lm_head"),
}


def gemm_shape(model: ModelConfig, gemm: str) -> tuple[int, int, bool]:
    """(n_out, k, swiglu) of one of the probe's fused GEMMs, as gpu_probe.kernels.linear keys its tiles."""
    h, q, kv, f = model.hidden, model.q_dim, model.kv_dim, model.ffn
    return {
        "qkv": (q + 2 * kv, h, False),
        "o": (h, q, False),
        "gate_up": (f, h, True),
        "down": (h, f, False),
        "lm_head": (model.vocab, h, False),
    }[gemm]


def gemm_family(model: ModelConfig, gemm: str, rows: int, *, unpipelined: frozenset) -> str:
    """The family one of the probe's GEMMs runs in at `rows` rows (`unpipelined`: see above)."""
    if rows <= GEMV_MAX_ROWS:
        return "gemv"
    if rows > TILE_MAX_ROWS:
        return "cublas"
    return tile_family(rows, gemm_shape(model, gemm) in unpipelined)


def classify_step(model: ModelConfig, kernel_names, rows: int, *, unpipelined: frozenset) -> list[str]:
    """The family of every kernel of one measured step, in order.

    Its name says the family, except for the tensor-core GEMM, whose name is one for every shape: a
    fused step's GEMMs are counted off in the probe's order (4 a layer, then the LM head), so those of
    an unpipelined shape go to the unpipelined families. A step with another GEMM count keeps them
    all pipelined.
    """
    families = [classify(n, rows) for n in kernel_names]
    tiles = [i for i, n in enumerate(kernel_names) if "_fused_linear_kernel" in str(n)]
    if len(tiles) == len(FUSED_GEMMS) * model.n_layers + 1:
        for j, i in enumerate(tiles):
            gemm = FUSED_GEMMS[j % len(FUSED_GEMMS)] if j < len(tiles) - 1 else "lm_head"
            families[i] = gemm_family(model, gemm, rows, unpipelined=unpipelined)
    return families


def classify(kernel_name: str, rows: int) -> str:
    """The family of a measured kernel (its profiler name) in a step of `rows` rows."""
    name = str(kernel_name)
    if "_decode_step_kernel" in name:
        return "persistent"
    if "_gemv_kernel" in name:
        return "gemv"
    if "_fused_linear_kernel" in name:
        return tile_family(rows, unpipelined=False)
    if "_paged_attention_kernel" in name or "_paged_attention_plain_kernel" in name:
        return "attention"
    if any(k in name for k in ("_rms_norm_kernel", "_rope_kernel", "_write_kv_kernel", "_silu_mul_kernel")):
        return "triton_op"
    if "_rms_swiglu_kernel" in name:
        return "triton_op"
    if "_merge_splits_kernel" in name:
        return "split_merge"
    if _CUBLAS.search(name):
        return "cublas_gemv" if rows <= GEMV_MAX_ROWS else "cublas"
    return "aten"


SPLIT_PARTIAL_BYTES = 4  # the attention's context splits write fp32 partial outputs for the merge


def _family_of(model: ModelConfig, path_family: str, op: str, rows: int, unpipelined: frozenset) -> str:
    if path_family == "gemm":
        return gemm_family(model, GEMM_OF_OP[op], rows, unpipelined=unpipelined)
    return path_family


def family_work(model: ModelConfig, rows, modes, *, unpipelined: frozenset) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, FLOPs) each family moves and computes in one step: two [n_rows, n_families] arrays.

    `rows` and `modes` (`core.step_plan.Mode`: which kernels the step runs) are one entry per step. The
    work is the simulator's, op by op (`sim.step.ops.ops_keeping`: without the intermediates the probe's
    kernels of the mode's kernel set keep on chip), summed over the family that runs each op in the set's
    path at those rows (`sim.step.kernel_sets.ProbeKernels`). A family's work is the same whatever its
    kernel count; how many kernels it takes is the measured (or assumed) count, each paying the family's
    latency. `unpipelined`: `unpipelined_gemms`.
    """
    r = np.asarray(rows, np.float64).reshape(-1)
    probes = [kernel_set(m).probe for m in modes]
    b, layers = model.bytes_per_el, model.n_layers
    layer_names = {op.name for op in layer_ops(model)}
    kept_ops = {}  # each set of intermediates kept on chip -> the ops' work without them
    out_bytes, out_flops = np.zeros((len(r), len(FAMILIES))), np.zeros((len(r), len(FAMILIES)))
    dims = {"hidden": model.hidden, "q_dim": model.q_dim, "kv_dim": model.kv_dim, "ffn": model.ffn}
    for k, (rows_k, probe) in enumerate(zip(r, probes)):
        path, moves = probe.path(int(rows_k))

        def family(name):
            """The family an op runs in, or the one a family named by a move (or the merge) runs in."""
            named = path.get(name, name)
            return _family_of(model, named, name, int(rows_k), unpipelined)

        flop_rows = probe.flop_rows(rows_k)
        if probe.kept not in kept_ops:
            kept_ops[probe.kept] = ops_keeping(model, probe.kept)
        for name, op in kept_ops[probe.kept].items():
            if name not in path:
                continue  # sampling: the probe stops at the logits
            times = layers if name in layer_names else 1
            col = INDEX[family(name)]
            out_bytes[k, col] += times * (op.weight + rows_k * (op.act + op.kv)) * b
            out_flops[k, col] += times * flop_rows * op.flops
        for target, elements in moves:
            moved = sum(dims[d] * n for d, n in elements.items())
            out_bytes[k, INDEX[family(target)]] += layers * rows_k * moved * b
        # Every path splits the attention's context the same way; the merge reads every split's fp32 output.
        out_bytes[k, INDEX[family("split_merge")]] += rows_k * layers * model.q_dim * SPLIT_PARTIAL_BYTES
    return out_bytes, out_flops
