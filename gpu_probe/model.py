"""A Llama-style decoder for one decode step over a paged KV cache, in two variants.

Same weights, two forwards (after gpt-fast's model.py and nano-vllm's layers):
- unfused: the chapter's per-op layer, one kernel per op as an engine's eager path runs it (`UNFUSED_OPS`):
  two RMSNorms, the Q, K and V projections, RoPE, the KV-cache write, paged attention, the output
  projection, gate, up, SiLU x up, down, and the two residual adds. The projections run the fused
  step's GEMM kernels without their epilogues; attention reads the paged cache through the block table,
  GQA without repeating K/V (`gpu_probe.kernels.attention.paged_attention`); the elementwise ops are
  single kernels (`gpu_probe.kernels.ops`). So the two variants differ by the merges alone. Where Triton is not available (the
  page's CPU demo) the same ops run as plain PyTorch (`TORCH_OPS`), which is also what torch.compile gets
  to fuse (`gpu_probe.compile_peer`).
- fused: five Triton kernels per layer, six at small batch (see FUSIONS and gpu_probe/kernels/): each
  merges neighbouring ops of the unfused layer, so the two differ by fusion alone.

Both forwards are written for tensor parallelism too: o_proj and down_proj produce a partial sum
on a rank of a sharded model, so each is followed by the communication hook `_reduced` (an
all-reduce on `tp` > 1 ranks, nothing on one GPU), and in the fused path only rank 0 adds the
residual in the GEMM's epilogue (the all-reduce sums it in once). `gpu_probe.tensor_parallel`
builds a rank's shard of the weights; it runs these same forwards.

Randomly initialised from cfg.seed; nothing is downloaded.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gpu_probe.config import ProbeModelConfig, get_config
from gpu_probe.decode_batch import DecodeBatch
from gpu_probe.kv_cache import PagedKVCache

# The unfused layer's kernels, in launch order: one per op (the attention adds a merge of its context
# splits at small batch, as the fused one does).
UNFUSED_OPS: tuple[str, ...] = (
    "attn_norm",
    "q_proj",
    "k_proj",
    "v_proj",
    "rope",
    "kv_write",
    "attention",
    "o_proj",
    "residual_add",
    "ffn_norm",
    "gate_proj",
    "up_proj",
    "silu_mul",
    "down_proj",
    "residual_add",
)

# One row per fused kernel of a layer: the unfused kernels it replaces and the intermediate activations
# (per token) that no longer make a round trip through HBM.
FUSIONS: tuple[dict, ...] = (
    {
        "kernel": "rmsnorm_qkv",
        "where": "kernels/linear.py",
        "merges": ["attn_norm", "q_proj", "k_proj", "v_proj"],
        "how": "norm weight folded into the packed QKV weight; 1/rms from the sum of squares "
        "accumulated while x streams through the GEMM, applied in the epilogue",
        "intermediates_removed": ["normed x"],
    },
    {
        "kernel": "paged_attention",
        "where": "kernels/attention.py",
        "merges": ["rope", "kv_write", "attention"],
        "how": "rotates q and the new k in registers, writes k/v at slot_mapping, online softmax over "
        "the blocks the table lists on tensor cores; at small batch the context is split over "
        "several programs and one small extra kernel merges the splits",
        "intermediates_removed": ["rotated q", "rotated k", "new k and v read back from the cache"],
    },
    {
        "kernel": "o_proj_residual",
        "where": "kernels/linear.py",
        "merges": ["o_proj", "residual_add"],
        "how": "residual added in the GEMM epilogue",
        "intermediates_removed": ["o_proj output"],
    },
    {
        "kernel": "rmsnorm_gate_up_swiglu",
        "where": "kernels/linear.py",
        "merges": ["ffn_norm", "gate_proj", "up_proj", "silu_mul"],
        "how": "packed gate/up weight (norm folded in), two accumulators, silu(gate) * up in the epilogue",
        "intermediates_removed": ["normed x", "gate", "up"],
    },
    {
        "kernel": "down_residual",
        "where": "kernels/linear.py",
        "merges": ["down_proj", "residual_add"],
        "how": "residual added in the GEMM epilogue",
        "intermediates_removed": ["down output"],
    },
)
FUSED_KERNELS_PER_LAYER = len(FUSIONS)  # plus the split-merge kernel at small batch: see kernels_per_layer()
assert sorted(op for f in FUSIONS for op in f["merges"]) == sorted(UNFUSED_OPS), (
    "every unfused kernel is merged once"
)


def fusion_report() -> list[dict]:
    """FUSIONS as table rows (counts included) for the probe's result and page."""
    return [
        {
            "kernel": f["kernel"],
            "merges": " + ".join(f["merges"]),
            "ops_merged": len(f["merges"]),
            "intermediates_removed": len(f["intermediates_removed"]),
            "how": f["how"],
        }
        for f in FUSIONS
    ]


def rope_tables(cfg: ProbeModelConfig, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape [max_context, head_dim // 2] in fp32 (rotate-half convention), the frequencies scaled
    as Llama 3 scales them where the config says so. Every path reads these tables (the unfused RoPE, the
    fused attention, the persistent kernel), so the scaling is computed once, here."""
    half = cfg.head_dim // 2
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(half, dtype=torch.float64) / half))
    if cfg.rope_scaling is not None:
        inv_freq = llama3_scaled(inv_freq, cfg.rope_scaling)
    angles = torch.arange(cfg.max_context, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos().float().to(device), angles.sin().float().to(device)


def llama3_scaled(inv_freq: torch.Tensor, scaling) -> torch.Tensor:
    """Llama 3's RoPE frequencies (`rope_type: "llama3"`, a `core.hf_config.RopeScaling`): wavelengths longer
    than original_max_position / low_freq_factor divided by `factor`, shorter than original_max_position /
    high_freq_factor kept, those between blended linearly in original_max_position / wavelength."""
    original = scaling.original_max_position
    wavelength = 2 * math.pi / inv_freq
    long = wavelength > original / scaling.low_freq_factor
    short = wavelength < original / scaling.high_freq_factor
    out = torch.where(long, inv_freq / scaling.factor, inv_freq)
    between = ~long & ~short
    if bool(between.any()):  # empty where high_freq_factor <= low_freq_factor
        smooth = (original / wavelength[between] - scaling.low_freq_factor) / (
            scaling.high_freq_factor - scaling.low_freq_factor
        )
        f = inv_freq[between]
        out[between] = (1 - smooth) * f / scaling.factor + smooth * f
    return out


class DecoderLayer(nn.Module):
    """Weights of one layer (nn.Linear layout: [out_features, in_features])."""

    def __init__(self, cfg: ProbeModelConfig, gen: torch.Generator, device, dtype):
        super().__init__()

        def weight(out_f: int, in_f: int) -> nn.Parameter:
            w = torch.randn(out_f, in_f, generator=gen, device=device) / math.sqrt(in_f)
            return nn.Parameter(w.to(dtype), requires_grad=False)

        def norm_weight() -> nn.Parameter:
            # Not all ones, so the folding of norm weights into the fused GEMMs is really tested.
            w = 1.0 + 0.1 * torch.randn(cfg.hidden, generator=gen, device=device)
            return nn.Parameter(w.to(dtype), requires_grad=False)

        self.attn_norm = norm_weight()
        self.wq = weight(cfg.q_size, cfg.hidden)
        self.wk = weight(cfg.kv_size, cfg.hidden)
        self.wv = weight(cfg.kv_size, cfg.hidden)
        self.wo = weight(cfg.hidden, cfg.q_size)
        self.ffn_norm = norm_weight()
        self.w_gate = weight(cfg.ffn, cfg.hidden)
        self.w_up = weight(cfg.ffn, cfg.hidden)
        self.w_down = weight(cfg.hidden, cfg.ffn)
        if cfg.qkv_bias:  # drawn last, so a config without one gets the same weights as before

            def bias(n: int) -> nn.Parameter:
                # Large enough to move every logit: a path that dropped it would fail the tests' comparisons.
                return nn.Parameter(
                    (0.5 * torch.randn(n, generator=gen, device=device)).to(dtype), requires_grad=False
                )

            self.bq, self.bk, self.bv = bias(cfg.q_size), bias(cfg.kv_size), bias(cfg.kv_size)
        else:
            self.bq = self.bk = self.bv = None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama's RMSNorm, op by op: fp32 statistics, result in x's dtype, then the weight."""
    x32 = x.float()
    variance = x32.pow(2).mean(-1, keepdim=True)
    return weight * (x32 * torch.rsqrt(variance + eps)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(q, k, positions, cos, sin, head_dim: int):
    """(q, k) [B, heads * head_dim] rotated at each row's position (cos, sin: [max_context, head_dim / 2])."""
    c = torch.cat([cos, cos], -1)[positions][:, None, :]
    s = torch.cat([sin, sin], -1)[positions][:, None, :]

    def rotated(x):
        heads = x.float().view(x.shape[0], -1, head_dim)
        return (heads * c + rotate_half(heads) * s).reshape(x.shape).to(x.dtype)

    return rotated(q), rotated(k)


def write_kv(k, v, slot_mapping, k_cache, v_cache) -> None:
    """The new K/V at each row's slot, as an index_put_ at (block, offset) of the cache tensors (a padded
    row's slot -1 becomes slot 0, in the scratch block). Written on the cache tensor itself, not through
    a flat view: that is the form Inductor reinplaces into a scatter of the batch's rows (compile_peer)."""
    block_size = k_cache.shape[1]
    slots = slot_mapping.clamp(min=0)
    blocks, offsets = slots // block_size, slots % block_size
    k_cache[blocks, offsets] = k.view(k.shape[0], *k_cache.shape[2:])
    v_cache[blocks, offsets] = v.view(v.shape[0], *v_cache.shape[2:])


def paged_attention(q, block_tables, context_lens, k_cache, v_cache, n_heads: int, n_kv_heads: int, splits=1):
    """Rotated q [B, n_heads * head_dim] over each row's cached tokens [0, context_len), gathered through
    its block table (every listed block, positions past the context masked): plain PyTorch for CPUs
    without Triton. `splits` is the kernel's business and ignored here."""
    batch, head_dim, block_size = q.shape[0], k_cache.shape[-1], k_cache.shape[1]
    tables = block_tables.long()
    width = tables.shape[1] * block_size
    visible = torch.arange(width, device=q.device)[None, :] < context_lens[:, None]
    keys = k_cache[tables].reshape(batch, width, n_kv_heads, head_dim).float()
    values = v_cache[tables].reshape(batch, width, n_kv_heads, head_dim).float()
    group = n_heads // n_kv_heads
    grouped = q.float().view(batch, n_kv_heads, group, head_dim)
    scores = torch.einsum("bkgd,btkd->bkgt", grouped, keys) / math.sqrt(head_dim)
    scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
    out = torch.einsum("bkgt,btkd->bkgd", torch.softmax(scores, dim=-1), values)
    return out.reshape(batch, n_heads * head_dim).to(q.dtype)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return (F.silu(gate.float()) * up.float()).to(gate.dtype)


def linear(
    x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """x @ weight^T (+ bias: the projection's own, one addmm as an engine's eager path runs it)."""
    if bias is not None:
        return F.linear(x, weight, bias) if out is None else torch.addmm(bias, x, weight.t(), out=out)
    return x @ weight.t() if out is None else torch.mm(x, weight.t(), out=out)


@dataclass(frozen=True, slots=True)
class UnfusedOps:
    """How the unfused layer runs each of its ops."""

    name: str
    linear: Callable  # (x, weight, out=None, bias=None) -> x @ weight^T (+ bias)
    rms_norm: Callable
    rope: Callable  # (q, k, positions, cos, sin, head_dim) -> (q, k)
    write_kv: Callable  # (k, v, slot_mapping, k_cache, v_cache) -> None
    attention: Callable  # (q, block_tables, context_lens, k_cache, v_cache, n_heads, n_kv_heads, splits)
    silu_mul: Callable


TORCH_OPS = UnfusedOps("torch", linear, rms_norm, rope, write_kv, paged_attention, silu_mul)


@functools.cache
def kernel_ops() -> UnfusedOps:
    """One kernel per op: what the probe's unfused modes run on a GPU. The projections run the fused step's
    own GEMM kernels without their epilogues (GEMV or swap-AB tile to TILE_MAX_ROWS rows, cuBLAS above, as
    the fused step does), so the two steps differ by the merges alone; the other ops are Triton kernels. Each
    Triton kernel is launched through a launcher bound once per shape (`gpu_probe.kernels.launch`), as an
    engine's custom op is: what a launch costs the host is the launch, not our Python around it."""
    from gpu_probe.kernels import ops
    from gpu_probe.kernels.attention import paged_attention as paged_kernel
    from gpu_probe.kernels.linear import TILE_MAX_ROWS, fused_linear

    def gemm(x, weight, out=None, bias=None):
        if x.shape[0] > TILE_MAX_ROWS:
            return linear(x, weight, out, bias)
        return fused_linear(x, weight, out=out, bias=bias)

    def rope_in_place(q, k, positions, cos, sin, head_dim):
        ops.rope_(q, k, positions, cos, sin, head_dim)
        return q, k

    def attention(q, block_tables, context_lens, k_cache, v_cache, n_heads, n_kv_heads, splits=1):
        return paged_kernel(q, block_tables, context_lens, k_cache, v_cache, n_heads, n_kv_heads, splits)

    return UnfusedOps("kernels", gemm, ops.rms_norm, rope_in_place, ops.write_kv, attention, ops.silu_mul)


@functools.cache
def triton_kernels():
    """gpu_probe.kernels (imported on first use: it needs Triton), without an import statement's cost per
    call (about a microsecond and a half each, per layer on the fused path)."""
    import gpu_probe.kernels as kernels
    from gpu_probe.kernels import linear, ops  # noqa: F401 - attributes of `kernels` from here on

    return kernels


def triton_runs_on(device: torch.device) -> bool:
    """Whether Triton kernels run here: on a GPU, or on the CPU through Triton's interpreter."""
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


class ProbeModel(nn.Module):
    """model(batch) -> logits[B, vocab], for a `DecodeBatch` of B rows (input_ids[B], positions[B],
    block_tables[B, W], slot_mapping[B], context_lens[B]).

    Writes the new token's K/V at slot_mapping, then attends over tokens [0, context_lens) of each
    row through its block table (context_lens counts the new token; positions = context_lens - 1
    for real rows). `self.fused` picks the variant; `unfused_forward` / `fused_forward` are explicit.
    All shapes are static and nothing syncs with the host, so a step can be captured in a CUDA graph.
    `ops` is how the unfused variant runs its non-GEMM ops: "kernels" (one Triton kernel each; the
    default on a GPU) or "torch" (plain PyTorch; the default on a CPU, where the kernels would run in
    Triton's interpreter, which the tests ask for by name).
    """

    def __init__(
        self,
        cfg: ProbeModelConfig | str = "tiny",
        device=None,
        num_blocks: int | None = None,
        fused: bool = False,
        ops: str | None = None,
    ):
        super().__init__()
        cfg = get_config(cfg) if isinstance(cfg, str) else cfg
        device = torch.device(device) if device is not None else torch.device("cpu")
        dtype = getattr(torch, cfg.dtype)
        self.cfg, self.fused, self.dtype = cfg, fused, dtype
        if ops not in (None, "kernels", "torch"):
            raise ValueError(f"ops must be 'kernels' or 'torch', got {ops!r}")
        self.ops = ops or ("kernels" if device.type == "cuda" else "torch")
        if self.ops == "kernels" and not triton_runs_on(device):
            raise RuntimeError(
                "ops='kernels' needs CUDA, or TRITON_INTERPRET=1 set before triton is imported"
            )
        # One GPU: no communication. A tensor-parallel rank (gpu_probe.tensor_parallel) sets these.
        self.rank, self.tp, self.all_reduce = 0, 1, None
        # The fused kernels launch with programmatic dependent launch where the GPU has it (Hopper+):
        # each may start, and put its weight loads in flight, while the previous one drains (linear.py).
        self.pdl = True
        gen = torch.Generator(device=device).manual_seed(cfg.seed)
        # A tied table is also the LM head, so it gets the LM head's scale.
        embed_scale = 1 / math.sqrt(cfg.hidden) if cfg.tie_embeddings else 1.0
        self.tok_embeddings = nn.Parameter(
            (torch.randn(cfg.vocab, cfg.hidden, generator=gen, device=device) * embed_scale).to(dtype),
            requires_grad=False,
        )
        self.layers = nn.ModuleList(DecoderLayer(cfg, gen, device, dtype) for _ in range(cfg.n_layers))
        self.final_norm = nn.Parameter(
            (1.0 + 0.1 * torch.randn(cfg.hidden, generator=gen, device=device)).to(dtype), requires_grad=False
        )
        if cfg.tie_embeddings:
            self.lm_head = self.tok_embeddings  # the same Parameter: parameters() lists it once
        else:
            self.lm_head = nn.Parameter(
                (torch.randn(cfg.vocab, cfg.hidden, generator=gen, device=device) / math.sqrt(cfg.hidden)).to(
                    dtype
                ),
                requires_grad=False,
            )
        self.kv_cache = PagedKVCache(cfg, num_blocks=num_blocks, device=device, dtype=dtype)
        cos, sin = rope_tables(cfg, device)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        if device.type == "cuda":
            self.num_sms = torch.cuda.get_device_properties(device).multi_processor_count
        else:
            self.num_sms = 2  # small, so batch 1 on CPU still exercises the split attention path
        self.pack_fused_weights()

    # ---- bookkeeping ---------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.lm_head.device

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @property
    def weight_bytes(self) -> int:
        """Bytes of weights one decode step reads (all but an untied embedding table, which is only
        gathered row by row; a tied one is read whole as the LM head)."""
        return sum(
            p.numel() * p.element_size()
            for n, p in self.named_parameters()
            if n != "tok_embeddings" or self.cfg.tie_embeddings
        )

    @staticmethod
    def fusion_report() -> list[dict]:
        return fusion_report()

    @torch.no_grad()
    def pack_fused_weights(self) -> None:
        """Derive the fused variant's packed weights from the parameters (call again after editing them).

        RMSNorm's weight g scales the GEMM input per column, so it folds into the weight:
        (x/rms * g) @ W^T == (x @ (W * g)^T) / rms.
        """
        for layer in self.layers:
            g = layer.attn_norm.float()[None, :]
            packed = torch.cat([layer.wq, layer.wk, layer.wv]).float() * g
            layer.register_buffer("w_qkv_folded", packed.to(self.dtype).contiguous(), persistent=False)
            # The bias is added after the norm's 1/rms: not folded, only packed as q, k and v are.
            bias = torch.cat([layer.bq, layer.bk, layer.bv]).contiguous() if self.cfg.qkv_bias else None
            layer.register_buffer("b_qkv", bias, persistent=False)
            g = layer.ffn_norm.float()[None, :]
            packed = torch.cat([layer.w_gate, layer.w_up]).float() * g
            layer.register_buffer("w_gate_up_folded", packed.to(self.dtype).contiguous(), persistent=False)
        folded = self.lm_head.float() * self.final_norm.float()[None, :]
        self.register_buffer("lm_head_folded", folded.to(self.dtype).contiguous(), persistent=False)

    def kernels_per_layer(self, batch: int, fused: bool = True) -> int:
        """Kernels one layer launches at this batch: the fused or the unfused (kernel ops) variant's ops,
        and the attention's split merge where it splits the context."""
        merge = 1 if self.attention_splits(batch) > 1 else 0
        return (FUSED_KERNELS_PER_LAYER if fused else len(UNFUSED_OPS)) + merge

    def unfused_ops(self) -> UnfusedOps:
        return kernel_ops() if self.ops == "kernels" else TORCH_OPS

    def attention_splits(self, batch: int) -> int:
        """How many context splits the attention uses at this batch (static per batch size; both variants).

        At small batch one program per (sequence, KV head) would leave most SMs idle, so the
        context is cut into splits, merged by one small extra kernel.
        """
        programs = batch * self.cfg.n_kv_heads
        target = 2 * self.num_sms
        return max(1, min(16, self.cfg.max_blocks_per_seq, -(-target // programs)))

    # ---- forwards ------------------------------------------------------------------------------
    def _reduced(self, partial: torch.Tensor) -> torch.Tensor:
        """A row-parallel product summed over the ranks, in place (on one GPU it is already whole)."""
        if self.tp > 1:
            self.all_reduce(partial)
        return partial

    @property
    def adds_residual(self) -> bool:
        """Whether this rank adds the residual in a row-parallel GEMM's epilogue: one rank does."""
        return self.rank == 0

    def forward(
        self,
        batch: DecodeBatch,
        logits_out: torch.Tensor | None = None,
        workspace: dict | None = None,
    ) -> torch.Tensor:
        """logits_out: a [B, vocab] tensor (model dtype, contiguous rows) the LM head writes into and
        that is returned, e.g. a graph runner's static buffer kept outside the graph pool.
        workspace: `fused_workspace` buffers (at least B rows) for the fused path's activations."""
        if self.fused:
            return self.fused_forward(batch, logits_out, workspace)
        return self.unfused_forward(batch, logits_out)

    def unfused_forward(
        self, batch: DecodeBatch, logits_out: torch.Tensor | None = None, ops: UnfusedOps | None = None
    ) -> torch.Tensor:
        """The chapter's per-op step (`UNFUSED_OPS`): `ops` runs the non-GEMM ops (default `unfused_ops()`)."""
        cfg, op = self.cfg, ops or self.unfused_ops()
        positions, slot_mapping = batch.positions, batch.slot_mapping
        block_tables, context_lens = batch.block_tables, batch.context_lens
        splits = self.attention_splits(batch.size)
        h = F.embedding(batch.input_ids, self.tok_embeddings)
        for index, layer in enumerate(self.layers):
            x = op.rms_norm(h, layer.attn_norm, cfg.norm_eps)
            q, k, v = (
                op.linear(x, layer.wq, bias=layer.bq),
                op.linear(x, layer.wk, bias=layer.bk),
                op.linear(x, layer.wv, bias=layer.bv),
            )  # column-parallel
            q, k = op.rope(q, k, positions, self.rope_cos, self.rope_sin, cfg.head_dim)
            k_cache, v_cache = self.kv_cache.layer(index)
            op.write_kv(k, v, slot_mapping, k_cache, v_cache)
            attn = op.attention(
                q, block_tables, context_lens, k_cache, v_cache, cfg.n_heads, cfg.n_kv_heads, splits
            )
            h = h + self._reduced(op.linear(attn, layer.wo))  # row-parallel
            x = op.rms_norm(h, layer.ffn_norm, cfg.norm_eps)
            act = op.silu_mul(op.linear(x, layer.w_gate), op.linear(x, layer.w_up))
            h = h + self._reduced(op.linear(act, layer.w_down))
        return op.linear(op.rms_norm(h, self.final_norm, cfg.norm_eps), self.lm_head, logits_out)

    def fused_workspace(self, rows: int) -> dict[str, torch.Tensor]:
        """Buffers for the fused step's two widest activations (packed QKV, SwiGLU output), `rows` rows.

        Every layer reuses them (each is consumed before the next layer writes it). A graph runner
        allocates them once, outside the graph pool: at 256 rows each is over 1 MiB, and the caching
        allocator gives any 1-10 MiB request in a pool a whole 20 MiB segment.
        """
        cfg = self.cfg
        return {
            "qkv": torch.empty((rows, cfg.q_size + 2 * cfg.kv_size), dtype=self.dtype, device=self.device),
            "act": torch.empty((rows, cfg.ffn), dtype=self.dtype, device=self.device),
        }

    def fused_forward(
        self, batch: DecodeBatch, logits_out: torch.Tensor | None = None, workspace: dict | None = None
    ) -> torch.Tensor:
        if self.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError(
                "the fused path needs CUDA, or TRITON_INTERPRET=1 set before triton is imported"
            )
        kernels = triton_kernels()
        fused_linear, TILE_MAX_ROWS = kernels.fused_linear, kernels.linear.TILE_MAX_ROWS

        cfg = self.cfg
        rows = batch.size
        if rows > TILE_MAX_ROWS:
            return self._wide_fused_forward(batch, logits_out, workspace)
        splits = self.attention_splits(rows)
        pdl = self.pdl
        qkv_out = workspace["qkv"][:rows] if workspace is not None else None
        act_out = workspace["act"][:rows] if workspace is not None else None
        h = F.embedding(batch.input_ids, self.tok_embeddings)
        for index, layer in enumerate(self.layers):
            qkv = fused_linear(
                h, layer.w_qkv_folded, rms_eps=cfg.norm_eps, bias=layer.b_qkv, out=qkv_out, pdl=pdl
            )
            attn = self._attention(index, qkv, batch, splits, pdl=pdl)
            residual = h if self.adds_residual else None
            h = self._reduced(fused_linear(attn, layer.wo, residual=residual, pdl=pdl))
            act = fused_linear(
                h, layer.w_gate_up_folded, rms_eps=cfg.norm_eps, swiglu=True, out=act_out, pdl=pdl
            )
            residual = h if self.adds_residual else None
            h = self._reduced(fused_linear(act, layer.w_down, residual=residual, pdl=pdl))
        return fused_linear(h, self.lm_head_folded, rms_eps=cfg.norm_eps, out=logits_out, pdl=pdl)

    def _attention(self, index: int, qkv, batch: DecodeBatch, splits: int, **options):
        """Both fused paths' attention of layer `index` over the paged cache, RoPE and the KV write inside it
        (`options`: PDL at small batch; the norm's 1/rms on q, k and v and their bias on the wide path)."""
        k_cache, v_cache = self.kv_cache.layer(index)
        return triton_kernels().paged_decode_attention(
            qkv,
            batch.positions,
            batch.block_tables,
            batch.slot_mapping,
            batch.context_lens,
            k_cache,
            v_cache,
            self.rope_cos,
            self.rope_sin,
            self.cfg.n_heads,
            self.cfg.n_kv_heads,
            splits,
            **options,
        )

    def _wide_fused_forward(self, batch: DecodeBatch, logits_out=None, workspace=None) -> torch.Tensor:
        """The fused step above TILE_MAX_ROWS rows, where a GEMM has enough rows to be cuBLAS's business: the
        same merges around cuBLAS's GEMMs, six kernels a layer. QKV and gate/up are one packed GEMM each with
        the norm weight folded in; the attention applies the norm's 1/rms to q, k and v, then their bias where
        there is one (with RoPE and the KV write, as at small batch); one kernel applies it to gate and up with
        SiLU x up; o and down add the residual in cuBLAS's own epilogue (beta = 1, into the residual stream)."""
        kernels = triton_kernels()
        ops, rms_swiglu = kernels.ops, kernels.linear.rms_swiglu

        cfg = self.cfg
        rows = batch.size
        splits = self.attention_splits(rows)
        qkv_out = workspace["qkv"][:rows] if workspace is not None else None
        act_out = workspace["act"][:rows] if workspace is not None else None
        h = F.embedding(batch.input_ids, self.tok_embeddings)
        for index, layer in enumerate(self.layers):
            qkv = torch.mm(h, layer.w_qkv_folded.t(), out=qkv_out)
            attn = self._attention(
                index, qkv, batch, splits, norm_input=h, norm_eps=cfg.norm_eps, qkv_bias=layer.b_qkv
            )
            h = self._reduced(h.addmm_(attn, layer.wo.t()) if self.adds_residual else attn @ layer.wo.t())
            act = rms_swiglu(h @ layer.w_gate_up_folded.t(), h, cfg.norm_eps, out=act_out)
            h = self._reduced(
                h.addmm_(act, layer.w_down.t()) if self.adds_residual else act @ layer.w_down.t()
            )
        x = ops.rms_norm(h, self.final_norm, cfg.norm_eps)
        if logits_out is None:
            return x @ self.lm_head.t()
        return torch.mm(x, self.lm_head.t(), out=logits_out)
