"""A Llama-style decoder for one decode step over a paged KV cache, in two variants.

Same weights, two forwards (after gpt-fast's model.py and nano-vllm's layers):
- unfused: plain PyTorch, one logical op at a time (the eager baseline, and what
  torch.compile(mode="reduce-overhead", fullgraph=True) gets to optimise: no graph breaks,
  no host syncs, the KV cache a registered buffer);
- fused: five Triton kernels per layer, six at small batch (see FUSIONS and gpu_probe/kernels/).

Both forwards are written for tensor parallelism too: o_proj and down_proj produce a partial sum
on a rank of a sharded model, so each is followed by the communication hook `_reduced` (an
all-reduce on `tp` > 1 ranks, nothing on one GPU), and in the fused path only rank 0 adds the
residual in the GEMM's epilogue (the all-reduce sums it in once). `gpu_probe.tensor_parallel`
builds a rank's shard of the weights; it runs these same forwards.

Randomly initialised from cfg.seed; nothing is downloaded.
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F
from torch import nn

from gpu_probe.config import ProbeModelConfig, get_config
from gpu_probe.kv_cache import PagedKVCache

# One row per fused kernel of a layer: the unfused ops it replaces and the intermediate
# activations (per token) that no longer make a round trip through HBM.
FUSIONS: tuple[dict, ...] = (
    {
        "kernel": "rmsnorm_qkv",
        "where": "kernels/linear.py",
        "merges": ["RMSNorm (square, mean, rsqrt, scale, weight)", "q_proj", "k_proj", "v_proj"],
        "how": "norm weight folded into the packed QKV weight; 1/rms from the sum of squares "
        "accumulated while x streams through the GEMM, applied in the epilogue",
        "intermediates_removed": ["normed x", "fp32 copy of x", "variance", "x * rsqrt"],
    },
    {
        "kernel": "paged_attention",
        "where": "kernels/attention.py",
        "merges": [
            "RoPE(q)",
            "RoPE(k)",
            "K/V write into the paged cache",
            "block-table gather",
            "QK^T",
            "mask",
            "softmax",
            "PV",
        ],
        "how": "rotates q and the new k in registers, writes k/v at slot_mapping, online softmax over "
        "the blocks the table lists on tensor cores; at small batch the context is split over "
        "several programs and one small extra kernel merges the splits",
        "intermediates_removed": [
            "rotated q",
            "rotated k",
            "cos/sin gathers",
            "gathered K",
            "gathered V",
            "scores",
            "probabilities",
        ],
    },
    {
        "kernel": "o_proj_residual",
        "where": "kernels/linear.py",
        "merges": ["o_proj", "residual add"],
        "how": "residual added in the GEMM epilogue",
        "intermediates_removed": ["o_proj output"],
    },
    {
        "kernel": "rmsnorm_gate_up_swiglu",
        "where": "kernels/linear.py",
        "merges": ["RMSNorm", "gate_proj", "up_proj", "SiLU", "multiply"],
        "how": "packed gate/up weight (norm folded in), two accumulators, silu(gate) * up in the epilogue",
        "intermediates_removed": [
            "normed x",
            "fp32 copy of x",
            "variance",
            "x * rsqrt",
            "gate",
            "up",
            "silu(gate)",
        ],
    },
    {
        "kernel": "down_residual",
        "where": "kernels/linear.py",
        "merges": ["down_proj", "residual add"],
        "how": "residual added in the GEMM epilogue",
        "intermediates_removed": ["down output"],
    },
)
FUSED_KERNELS_PER_LAYER = len(FUSIONS)  # plus the split-merge kernel at small batch: see kernels_per_layer()


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
    """cos, sin of shape [max_context, head_dim // 2] in fp32 (rotate-half convention)."""
    half = cfg.head_dim // 2
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(half, dtype=torch.float64) / half))
    angles = torch.arange(cfg.max_context, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos().float().to(device), angles.sin().float().to(device)


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


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama's RMSNorm, op by op: fp32 statistics, result in x's dtype, then the weight."""
    x32 = x.float()
    variance = x32.pow(2).mean(-1, keepdim=True)
    return weight * (x32 * torch.rsqrt(variance + eps)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class ProbeModel(nn.Module):
    """model(input_ids[B], positions[B], block_tables[B, W], slot_mapping[B], context_lens[B]) -> logits[B, vocab].

    Writes the new token's K/V at slot_mapping, then attends over tokens [0, context_lens) of each
    row through its block table (context_lens counts the new token; positions = context_lens - 1
    for real rows). `self.fused` picks the variant; `unfused_forward` / `fused_forward` are explicit.
    All shapes are static and nothing syncs with the host, so a step can be captured in a CUDA graph.
    """

    def __init__(
        self,
        cfg: ProbeModelConfig | str = "tiny",
        device=None,
        num_blocks: int | None = None,
        fused: bool = False,
    ):
        super().__init__()
        cfg = get_config(cfg) if isinstance(cfg, str) else cfg
        device = torch.device(device) if device is not None else torch.device("cpu")
        dtype = getattr(torch, cfg.dtype)
        self.cfg, self.fused, self.dtype = cfg, fused, dtype
        # One GPU: no communication. A tensor-parallel rank (gpu_probe.tensor_parallel) sets these.
        self.rank, self.tp, self.all_reduce = 0, 1, None
        # At batch <= GEMV_MAX_ROWS the fused kernels launch with programmatic dependent launch where
        # the GPU has it (Hopper+): each may start, and put its weight loads in flight, while the
        # previous one drains. Larger batches run tensor-core GEMMs, launched plainly (linear.py).
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
        # Rotate-half tables at full head_dim for the unfused path, in the model dtype like HF's.
        self.register_buffer("rope_cos_full", torch.cat([cos, cos], -1).to(dtype), persistent=False)
        self.register_buffer("rope_sin_full", torch.cat([sin, sin], -1).to(dtype), persistent=False)
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
            g = layer.ffn_norm.float()[None, :]
            packed = torch.cat([layer.w_gate, layer.w_up]).float() * g
            layer.register_buffer("w_gate_up_folded", packed.to(self.dtype).contiguous(), persistent=False)
        folded = self.lm_head.float() * self.final_norm.float()[None, :]
        self.register_buffer("lm_head_folded", folded.to(self.dtype).contiguous(), persistent=False)

    def kernels_per_layer(self, batch: int, fused: bool = True) -> int | None:
        """Kernels one layer launches in the fused variant (None: unfused, count it with the profiler)."""
        if not fused:
            return None
        return FUSED_KERNELS_PER_LAYER + (1 if self.attention_splits(batch) > 1 else 0)

    def attention_splits(self, batch: int) -> int:
        """How many context splits the fused attention uses at this batch (static per batch size).

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
        input_ids,
        positions,
        block_tables,
        slot_mapping,
        context_lens,
        logits_out: torch.Tensor | None = None,
        workspace: dict | None = None,
    ) -> torch.Tensor:
        """logits_out: a [B, vocab] tensor (model dtype, contiguous rows) the LM head writes into and
        that is returned, e.g. a graph runner's static buffer kept outside the graph pool.
        workspace: `fused_workspace` buffers (at least B rows) for the fused path's activations."""
        if self.fused:
            return self.fused_forward(
                input_ids, positions, block_tables, slot_mapping, context_lens, logits_out, workspace
            )
        return self.unfused_forward(
            input_ids, positions, block_tables, slot_mapping, context_lens, logits_out
        )

    def unfused_forward(
        self,
        input_ids,
        positions,
        block_tables,
        slot_mapping,
        context_lens,
        logits_out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        cfg = self.cfg
        batch = input_ids.shape[0]
        h = F.embedding(input_ids, self.tok_embeddings)
        cos = self.rope_cos_full[positions][:, None, :]
        sin = self.rope_sin_full[positions][:, None, :]
        # PAD_SLOT (-1) becomes slot 0, which lies in the scratch block.
        slots = slot_mapping.clamp(min=0)
        # The write goes to (block, offset) of the cache tensor itself, not through a flat view of
        # it: an index_put_ on the buffer is what Inductor reinplaces into a scatter of B rows,
        # while index_copy_ through a view made it copy the whole layer buffer twice (H200, 2.11).
        write_blocks, write_offsets = slots // cfg.block_size, slots % cfg.block_size
        tables = block_tables.long()
        width = block_tables.shape[1] * cfg.block_size
        visible = torch.arange(width, device=h.device)[None, :] < context_lens[:, None]
        for index, layer in enumerate(self.layers):
            x = rms_norm(h, layer.attn_norm, cfg.norm_eps)
            q = (x @ layer.wq.t()).view(batch, cfg.n_heads, cfg.head_dim)
            k = (x @ layer.wk.t()).view(batch, cfg.n_kv_heads, cfg.head_dim)
            v = (x @ layer.wv.t()).view(batch, cfg.n_kv_heads, cfg.head_dim)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k_cache, v_cache = self.kv_cache.layer(index)
            k_cache[write_blocks, write_offsets] = k
            v_cache[write_blocks, write_offsets] = v
            attn = self._attention_unfused(q, k_cache, v_cache, tables, visible)
            h = h + self._reduced(attn.reshape(batch, cfg.q_size) @ layer.wo.t())  # row-parallel
            x = rms_norm(h, layer.ffn_norm, cfg.norm_eps)
            gate = x @ layer.w_gate.t()  # column-parallel, like q, k, v and up
            up = x @ layer.w_up.t()
            h = h + self._reduced((F.silu(gate) * up) @ layer.w_down.t())  # row-parallel
        x = rms_norm(h, self.final_norm, cfg.norm_eps)
        if logits_out is None:
            return x @ self.lm_head.t()
        return torch.mm(x, self.lm_head.t(), out=logits_out)

    def _attention_unfused(self, q, k_cache, v_cache, tables, visible) -> torch.Tensor:
        """Gather every block the table lists, mask positions >= context_len, softmax, weight V."""
        cfg = self.cfg
        batch, width = tables.shape[0], visible.shape[1]
        keys = k_cache[tables].reshape(batch, width, cfg.n_kv_heads, cfg.head_dim)
        values = v_cache[tables].reshape(batch, width, cfg.n_kv_heads, cfg.head_dim)
        group = cfg.n_heads // cfg.n_kv_heads
        if group > 1:
            keys = keys.repeat_interleave(group, dim=2)
            values = values.repeat_interleave(group, dim=2)
        scores = torch.einsum("bhd,bthd->bht", q, keys) / math.sqrt(cfg.head_dim)
        scores = scores.float().masked_fill(~visible[:, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(q.dtype)
        return torch.einsum("bht,bthd->bhd", probs, values)

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
        self,
        input_ids,
        positions,
        block_tables,
        slot_mapping,
        context_lens,
        logits_out: torch.Tensor | None = None,
        workspace: dict | None = None,
    ) -> torch.Tensor:
        if self.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError(
                "the fused path needs CUDA, or TRITON_INTERPRET=1 set before triton is imported"
            )
        from gpu_probe.kernels import fused_linear, paged_decode_attention
        from gpu_probe.kernels.linear import GEMV_MAX_ROWS

        cfg = self.cfg
        batch = input_ids.shape[0]
        splits = self.attention_splits(batch)
        pdl = self.pdl and batch <= GEMV_MAX_ROWS
        qkv_out = workspace["qkv"][:batch] if workspace is not None else None
        act_out = workspace["act"][:batch] if workspace is not None else None
        h = F.embedding(input_ids, self.tok_embeddings)
        for index, layer in enumerate(self.layers):
            qkv = fused_linear(h, layer.w_qkv_folded, rms_eps=cfg.norm_eps, out=qkv_out, pdl=pdl)
            k_cache, v_cache = self.kv_cache.layer(index)
            attn = paged_decode_attention(
                qkv,
                positions,
                block_tables,
                slot_mapping,
                context_lens,
                k_cache,
                v_cache,
                self.rope_cos,
                self.rope_sin,
                cfg.n_heads,
                cfg.n_kv_heads,
                splits,
                pdl=pdl,
            )
            residual = h if self.adds_residual else None
            h = self._reduced(fused_linear(attn, layer.wo, residual=residual, pdl=pdl))
            act = fused_linear(
                h, layer.w_gate_up_folded, rms_eps=cfg.norm_eps, swiglu=True, out=act_out, pdl=pdl
            )
            residual = h if self.adds_residual else None
            h = self._reduced(fused_linear(act, layer.w_down, residual=residual, pdl=pdl))
        return fused_linear(h, self.lm_head_folded, rms_eps=cfg.norm_eps, out=logits_out, pdl=pdl)
