"""The whole decode step -- every layer, the final norm and the LM head -- as ONE persistent Triton kernel:
its host side. The kernel itself (Triton, the device side) is `gpu_probe.kernels.persistent_kernel`.

Why: the fused+graph step pays ~2 µs at each of its ~100 kernel boundaries (drain, launch, load; see
kernels/NOTES.md). One launch of at most one program per SM (or `programs_per_sm`), all co-resident, walks
the step's phases itself, the programs meeting at a grid-wide barrier between phases.

Here: the kernel's compile-time shape per batch (`step_layout`, `kernel_constexprs`), its arguments
(`launch_scalars`, `kernel_args`), compiling ahead of time in worker processes (`precompile`), and the
decoder the probe runs (`PersistentDecoder`): packed weights, the state buffer, a cooperative launch where
the driver takes it. The grid is refused (ValueError) when larger than the compiled kernel can keep
co-resident, and launched cooperatively where the driver supports it, so an oversized grid also fails at
launch. A barrier wait that gave up is read back from the state buffer (`PersistentDecoder.check_error`).
The in-kernel stamps (`trace=True`) are read by `persistent_trace.read_trace`; phase order:
`phase_plan(cfg.n_layers)`.

Batches 1-8 (a kernel is compiled per power-of-two bucket of rows); larger batches fall back to the fused
path (`PersistentDecoder.last_fallback`). What it measured on an H200, and what was tried on it:
kernels/NOTES.md (run 7 and after; `tools/persistent_check.py`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import torch
import triton

from gpu_probe.decode_batch import DecodeBatch
from gpu_probe.kernel_sets import persistent_refusal
from gpu_probe.kernels.attention import LOG2E
from gpu_probe.kernels.persistent_kernel import STATE_ERROR, STATE_WORDS, _decode_step_kernel

MAX_ROWS = 8  # the largest batch the kernel runs; above it the fused path does (labelled)
LAYER_PHASES = ("qkv", "attention", "o", "gate_up", "down")
PHASE_KINDS = ("embed", *LAYER_PHASES, "lm_head")

DEFAULT_SPIN_LIMIT = 1 << 22  # polls (~0.5-1 µs each on an H200): a few seconds before a wait gives up


@dataclass(frozen=True, slots=True)
class PhaseInfo:
    index: int
    kind: str
    layer: int | None  # None for embed and lm_head

    @property
    def name(self) -> str:
        return self.kind if self.layer is None else f"L{self.layer} {self.kind}"


def phase_plan(n_layers: int) -> list[PhaseInfo]:
    """The kernel's phases in order: embed, five per layer, the LM head (trace rows and error codes)."""
    phases = [PhaseInfo(0, "embed", None)]
    for layer in range(n_layers):
        phases += [PhaseInfo(len(phases), kind, layer) for kind in LAYER_PHASES]
    return phases + [PhaseInfo(len(phases), "lm_head", None)]


@dataclass(frozen=True, slots=True)
class PersistentConfig:
    """How the kernel is laid out. Defaults are for the H200; every field is a variant the check script tries."""

    programs_per_sm: int = 1
    max_programs: int | None = None  # cap on the grid (CPU tests: 1 or 2)
    num_warps: int = 8
    rows_per_block: int = 8  # weight rows per tile and block (SwiGLU: gate/up pairs); one per warp at 8 warps
    tile_elements: int = 16384  # weight elements per tile (32 KB of bf16), fewer at large batch
    merge_elements: int = 2048  # batch rows x K columns per chunk of the O phase's split merge
    prefetch_bytes: int = 65536  # how far ahead of its loads each program asks the L2 for its weights
    attention_tokens: int = 64  # cached tokens per attention tile
    max_splits: int = 4  # context splits per (sequence, KV head) at most
    splits: int | None = None  # force a split count (tests); None: enough items to cover the grid
    spin_limit: int = DEFAULT_SPIN_LIMIT
    cooperative: bool = True  # cooperative launch where the driver takes it (also inside graph capture)
    tiles: dict = field(default_factory=dict)  # kind -> (weight rows per block, column chunks per tile)

    def __post_init__(self) -> None:
        for name in ("programs_per_sm", "num_warps", "rows_per_block", "tile_elements", "merge_elements"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"PersistentConfig.{name}: must be a positive int, got {value!r}")
        for name in ("num_warps", "rows_per_block", "attention_tokens"):
            value = getattr(self, name)
            if value & (value - 1):
                raise ValueError(f"PersistentConfig.{name}: must be a power of two, got {value}")
        if self.attention_tokens < 16:
            raise ValueError("PersistentConfig.attention_tokens: at least 16 (a tensor-core tile)")
        if self.max_programs is not None and self.max_programs < 1:
            raise ValueError(f"PersistentConfig.max_programs: must be >= 1, got {self.max_programs}")
        if self.splits is not None and not 1 <= self.splits <= 64:
            raise ValueError(f"PersistentConfig.splits: must be in [1, 64], got {self.splits}")
        if not 1 <= self.max_splits <= 64:
            raise ValueError(f"PersistentConfig.max_splits: must be in [1, 64], got {self.max_splits}")
        if not 0 <= self.prefetch_bytes <= 1 << 22 or self.prefetch_bytes % 16:
            raise ValueError("PersistentConfig.prefetch_bytes: a multiple of 16 in [0, 4 MiB]")
        if self.spin_limit < 0:
            raise ValueError("PersistentConfig.spin_limit: must be >= 0")

    def describe(self) -> str:
        tiles = f" tiles={self.tiles}" if self.tiles else ""
        return (
            f"{self.programs_per_sm}/SM x {self.num_warps} warps, {self.rows_per_block} rows/block, "
            f"tile {self.tile_elements} el, L2 prefetch {self.prefetch_bytes // 1024} KB, "
            f"attention {self.attention_tokens} tok, splits<={self.splits or self.max_splits}{tiles}"
        )


class PersistentKernelError(RuntimeError):
    """A barrier wait inside the persistent kernel gave up: the step's results are not to be trusted."""


def _floor_pow2(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


def co_resident_blocks_per_sm(
    n_regs: int,
    shared_bytes: int,
    num_warps: int,
    regs_per_sm: int = 65536,
    smem_per_sm: int = 233472,
    max_threads_per_sm: int = 2048,
    max_blocks_per_sm: int = 32,
    reserved_smem_per_block: int = 1024,
) -> int:
    """Programs of a compiled kernel one SM holds at once (registers are given out per warp in 256s;
    Hopper keeps 1 KB of shared memory per block for the system). Defaults: an H100/H200 SM."""
    threads = num_warps * 32
    by_threads = max_threads_per_sm // threads
    regs_per_warp = -(-max(n_regs, 1) * 32 // 256) * 256
    by_regs = (regs_per_sm // regs_per_warp) // num_warps
    by_smem = smem_per_sm // (shared_bytes + reserved_smem_per_block)
    return max(0, min(by_threads, by_regs, by_smem, max_blocks_per_sm))


@dataclass(frozen=True, slots=True)
class StepLayout:
    """The compile-time shape of one kernel: batch rows (a power of two), context splits, the column chunk C
    (one 16-byte load per thread across a warp), and per GEMV phase (weight rows per block, chunks per tile)."""

    rows: int
    splits: int
    chunk: int
    tiles: dict
    merge_k: int  # K columns per chunk of the O phase's split merge


def step_layout(cfg, config: PersistentConfig, programs: int, batch: int) -> StepLayout:
    """The compile-time shape a batch runs with on `programs` programs."""
    if not 1 <= batch <= MAX_ROWS:
        raise ValueError(f"the persistent kernel runs 1..{MAX_ROWS} rows, got {batch}")
    rows = triton.next_power_of_2(batch)
    # Enough (sequence, KV head, split) items to give most programs one, at most max_splits per sequence.
    splits = config.splits or max(1, min(config.max_splits, programs // (rows * cfg.n_kv_heads)))
    el = torch.finfo(getattr(torch, cfg.dtype)).bits // 8
    chunk = min(32 * 16 // el, triton.next_power_of_2(min(cfg.hidden, cfg.ffn)))
    # Each batch row adds the tile's worth of products per thread: smaller tiles as the batch grows, and
    # more weight rows per warp, so each input element loaded is used more often. The widths keep enough
    # row blocks for every program (QKV and the N = hidden phases have the fewest rows).
    elements = max(config.tile_elements // max(1, rows // 2), config.rows_per_block * chunk)
    wide = min(2, rows)

    def tile(kind: str, k: int, rows_per_warp: int, swiglu: bool = False) -> tuple[int, int]:
        if kind in config.tiles:
            return tuple(config.tiles[kind])
        bn = config.rows_per_block * rows_per_warp
        weight_rows = 2 * bn if swiglu else bn
        chunks = max(1, elements // (weight_rows * chunk))
        return bn, min(_floor_pow2(chunks), triton.next_power_of_2(-(-k // chunk)))

    tiles = {
        "qkv": tile("qkv", cfg.hidden, 1),
        "o": tile("o", cfg.q_size, min(2, wide)),
        "gate_up": tile("gate_up", cfg.hidden, wide, swiglu=True),
        "down": tile("down", cfg.ffn, min(2, wide)),
        "lm_head": tile("lm_head", cfg.hidden, wide),
    }
    merge_k = max(16, min(_floor_pow2(config.merge_elements // rows), triton.next_power_of_2(cfg.q_size)))
    return StepLayout(rows=rows, splits=splits, chunk=chunk, tiles=tiles, merge_k=merge_k)


def kernel_constexprs(
    cfg,
    config: PersistentConfig,
    lay: StepLayout,
    dtype: torch.dtype,
    *,
    hopper: bool,
    ptx: bool,
    trace: bool,
) -> dict:
    """The kernel's compile-time arguments (and launch options) for a layout. hopper: the bulk L2 prefetch
    is there; ptx: inline PTX runs at all (not in the interpreter)."""
    el = torch.finfo(dtype).bits // 8
    # The bulk L2 prefetch needs Hopper and rows of whole 16-byte units.
    prefetch = config.prefetch_bytes if hopper and ptx else 0
    if (cfg.hidden * el) % 16 or (cfg.ffn * el) % 16:
        prefetch = 0
    t = lay.tiles
    return dict(
        HIDDEN=cfg.hidden,
        H_P2=triton.next_power_of_2(cfg.hidden),
        FFN=cfg.ffn,
        VOCAB=cfg.vocab,
        N_HEADS=cfg.n_heads,
        N_KV_HEADS=cfg.n_kv_heads,
        HEAD_DIM=cfg.head_dim,
        ROWS=max(16, triton.next_power_of_2(cfg.n_heads // cfg.n_kv_heads)),
        KV_BLOCK=cfg.block_size,
        BM=lay.rows,
        N_SPLITS=lay.splits,
        WS_ROWS=MAX_ROWS,
        BLOCK_T=config.attention_tokens,
        C=lay.chunk,
        BN_QKV=t["qkv"][0],
        KR_QKV=t["qkv"][1],
        BN_O=t["o"][0],
        KR_O=t["o"][1],
        BN_GU=t["gate_up"][0],
        KR_GU=t["gate_up"][1],
        BN_DOWN=t["down"][0],
        KR_DOWN=t["down"][1],
        BN_LM=t["lm_head"][0],
        KR_LM=t["lm_head"][1],
        MBK=lay.merge_k,
        PF_BYTES=prefetch,
        W_BYTES=el,
        TRACE=trace,
        USE_PTX=ptx,
        IEEE=dtype == torch.float32,
        num_warps=config.num_warps,
        num_stages=1,  # the loops double-buffer by hand; Triton's pipeliner is not wanted here
    )


def launch_scalars(
    cfg, config: PersistentConfig, batch: int, kv_strides: tuple, table_stride: int, logits_stride: int
) -> dict:
    """The kernel's integer and float arguments by name (kv_strides: the cache tensor's six strides)."""
    return {
        "batch": batch,
        "n_layers": cfg.n_layers,
        "stride_table": table_stride,
        "stride_logits": logits_stride,
        "kv_stride_layer": kv_strides[0],
        "kv_stride_kv": kv_strides[1],
        "kv_stride_slot": kv_strides[3],
        "max_pos": cfg.max_context - 1,  # the RoPE tables have max_context rows
        "eps": cfg.norm_eps,
        "qk_scale": LOG2E / math.sqrt(cfg.head_dim),
        "spin_limit": config.spin_limit,
    }


def kernel_args(tensors: dict, scalars: dict) -> tuple:
    """The kernel's runtime arguments in its order, from tensors and scalars given by argument name."""
    names = [n for n in _decode_step_kernel.arg_names if n in tensors or n in scalars]
    if len(names) != len(tensors) + len(scalars):
        raise ValueError(f"unknown kernel arguments: {sorted(set(tensors) | set(scalars) - set(names))}")
    return tuple(tensors[n] if n in tensors else scalars[n] for n in names)


TENSOR_DTYPES = {  # the kernel's tensor arguments that are not in the model dtype
    "ids_ptr": torch.int64,
    "pos_ptr": torch.int64,
    "table_ptr": torch.int32,
    "slot_ptr": torch.int64,
    "ctx_ptr": torch.int32,
    "cos_ptr": torch.float32,
    "sin_ptr": torch.float32,
    "part_ptr": torch.float32,
    "lse_ptr": torch.float32,
    "state_ptr": torch.int64,
    "trace_ptr": torch.int64,
}


def precompile(
    cfg, config: PersistentConfig, batch: int, num_blocks: int, programs: int, trace: bool = False
) -> None:
    """Compile (not run) the kernel a PersistentDecoder over a model of `cfg` with a `num_blocks` KV pool would
    launch at this batch, into Triton's on-disk cache: run it in worker processes to compile variants in parallel
    (GPU needed; the arguments are stand-ins with the same dtypes and specialisations as the real ones)."""
    from triton.runtime.jit import MockTensor

    dtype = getattr(torch, cfg.dtype)
    names = [n for n in _decode_step_kernel.arg_names if n.endswith("_ptr")]
    tensors = {n: MockTensor(TENSOR_DTYPES.get(n, dtype)) for n in names}
    kv = torch.empty(
        (cfg.n_layers, 2, num_blocks, cfg.block_size, cfg.n_kv_heads, cfg.head_dim), device="meta"
    )
    scalars = launch_scalars(cfg, config, batch, tuple(kv.stride()), cfg.max_blocks_per_seq, cfg.vocab)
    lay = step_layout(cfg, config, programs, batch)
    hopper = torch.cuda.get_device_capability()[0] >= 9
    kwargs = kernel_constexprs(cfg, config, lay, dtype, hopper=hopper, ptx=True, trace=trace)
    if config.cooperative:
        kwargs["launch_cooperative_grid"] = True
    _decode_step_kernel.warmup(*kernel_args(tensors, scalars), grid=(programs,), **kwargs)


def _precompile_job(job: tuple) -> str | None:
    cfg, batch, num_blocks, programs, trace = job
    try:
        if isinstance(cfg, str):
            from gpu_probe.config import get_config

            cfg = get_config(cfg)
        precompile(cfg, PersistentConfig(), batch, num_blocks, programs, trace)
        return None
    except Exception as err:  # reported, not raised: the launch then compiles it in this process
        return f"{type(err).__name__}: {str(err)[:300]}"


def precompile_in_workers(cfg, batches, num_blocks: int, programs: int, trace: bool = False) -> list:
    """Compile the default layout's kernels for these batches in parallel worker processes (a kernel takes
    ~10-20 s to compile; Triton's on-disk cache then serves the real launches). Returns the errors.
    cfg: the model's ProbeModelConfig (sent to the workers whole: a config read from a file is no preset), or
    a preset's name."""
    import concurrent.futures as cf
    import multiprocessing as mp

    jobs = [(cfg, b, num_blocks, programs, t) for b in batches for t in ({False, trace})]
    workers = max(1, min(len(jobs), (os.cpu_count() or 2) - 2, 14))
    with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        return [err for err in pool.map(_precompile_job, jobs) if err]


class PersistentDecoder:
    """A ProbeModel's decode step as one persistent kernel launch: call it like the model.

    decoder(batch, logits_out=None, trace=False) -> logits [B, vocab], for a `DecodeBatch` of B rows. Static buffers (workspace, the barrier state) are allocated here, once, so a
    call allocates nothing but an eager call's logits and can be captured in a CUDA graph. Holds its own
    per-layer stacked copies of the fused path's packed weights (`repack()` after editing the model's).
    Batches above MAX_ROWS run the model's fused path (`last_fallback` says so).
    """

    def __init__(
        self, model, config: PersistentConfig | None = None, weights_from: PersistentDecoder | None = None
    ):
        """weights_from: another decoder of the same model whose stacked weights to share (variants)."""
        self.model, self.config = model, config or PersistentConfig()
        self.cfg, self.dtype, self.kv_cache = model.cfg, model.dtype, model.kv_cache
        cfg, dev = self.cfg, model.device
        refused = persistent_refusal(cfg)  # rather than compute something else
        if refused:
            raise ValueError(refused)
        self.on_gpu = dev.type == "cuda"
        if not self.on_gpu and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError(
                "the persistent kernel needs CUDA, or TRITON_INTERPRET=1 set before triton is imported"
            )
        self.phases = phase_plan(cfg.n_layers)
        if weights_from is not None and weights_from.model is model:
            self.w_qkv, self.w_o = weights_from.w_qkv, weights_from.w_o
            self.w_gate_up, self.w_down = weights_from.w_gate_up, weights_from.w_down
        else:
            self.repack()
        rows, splits = MAX_ROWS, self.config.splits or self.config.max_splits
        self.workspace = {
            "h": torch.zeros((rows, cfg.hidden), dtype=self.dtype, device=dev),
            "qkv": torch.zeros((rows, cfg.q_size + 2 * cfg.kv_size), dtype=self.dtype, device=dev),
            "act": torch.zeros((rows, cfg.ffn), dtype=self.dtype, device=dev),
            "part": torch.zeros((splits, rows, cfg.q_size), dtype=torch.float32, device=dev),
            "lse": torch.zeros((splits, rows, cfg.n_heads), dtype=torch.float32, device=dev),
        }
        # Per program: the O phase's merged attention input ([programs, 16 rows, q_size]).
        self.scratch = torch.zeros((self.programs, 16, cfg.q_size), dtype=self.dtype, device=dev)
        self.state = torch.zeros(STATE_WORDS, dtype=torch.int64, device=dev)
        self.trace_buffer: torch.Tensor | None = None
        self.last_fallback = False
        self.cooperative = self.config.cooperative and self.on_gpu
        self.cooperative_note = "" if self.on_gpu else "no cooperative launch in the interpreter"
        self._ready: set = set()  # compiled layouts whose grid was checked for co-residency
        self.compiled: dict = {}  # layout key -> {"n_regs", "n_spills", "shared", "co_resident"}

    # ---- bookkeeping ------------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.model.device

    @torch.no_grad()
    def repack(self) -> None:
        """Stack the fused path's per-layer packed weights into one tensor per projection (the kernel walks
        the layers by offset)."""
        layers = self.model.layers
        self.w_qkv = torch.stack([layer.w_qkv_folded for layer in layers]).contiguous()
        self.w_o = torch.stack([layer.wo for layer in layers]).contiguous()
        self.w_gate_up = torch.stack([layer.w_gate_up_folded for layer in layers]).contiguous()
        self.w_down = torch.stack([layer.w_down for layer in layers]).contiguous()

    @property
    def weight_bytes(self) -> int:
        """Bytes of the stacked copies this decoder holds beside the model's own weights."""
        return sum(w.numel() * w.element_size() for w in (self.w_qkv, self.w_o, self.w_gate_up, self.w_down))

    @property
    def programs(self) -> int:
        """Grid size: programs_per_sm per SM on a GPU (one on the interpreter), capped by max_programs."""
        cap = self.config.max_programs
        if not self.on_gpu:
            return cap or 1
        sms = torch.cuda.get_device_properties(self.device).multi_processor_count
        return min(cap or sms * self.config.programs_per_sm, sms * self.config.programs_per_sm)

    def layout(self, batch: int) -> StepLayout:
        """The kernel shape a batch runs with (one compiled kernel per power-of-two bucket of rows)."""
        return step_layout(self.cfg, self.config, self.programs, batch)

    # ---- the step -----------------------------------------------------------------------------------------
    @torch.no_grad()
    def __call__(
        self,
        batch: DecodeBatch,
        logits_out: torch.Tensor | None = None,
        workspace: dict | None = None,
        trace: bool | torch.Tensor = False,
    ) -> torch.Tensor:
        """workspace: ignored (the decoder owns its buffers; the graph runner's signature passes one).
        trace: True (the decoder's own buffer, `trace_buffer`) or an int64 tensor [programs, phases, 3]."""
        cfg, rows, block_tables = self.cfg, batch.size, batch.block_tables
        self.last_fallback = rows > MAX_ROWS
        if self.last_fallback:
            return self.model.fused_forward(batch, logits_out)
        if logits_out is None:
            logits_out = torch.empty((rows, cfg.vocab), dtype=self.dtype, device=self.device)
        elif tuple(logits_out.shape) != (rows, cfg.vocab) or logits_out.stride(1) != 1:
            raise ValueError(f"logits_out must be [{rows}, {cfg.vocab}] with contiguous rows")
        if block_tables.stride(1) != 1:
            raise ValueError("block_tables must have contiguous rows")
        trace_buffer = self._trace_buffer(trace)
        lay = self.layout(rows)
        kv = self.kv_cache.kv  # [layer, K|V, block, slot_in_block, kv_head, head_dim]
        tensors = self._tensors(batch, logits_out, trace_buffer)
        scalars = launch_scalars(
            cfg, self.config, rows, tuple(kv.stride()), block_tables.stride(0), logits_out.stride(0)
        )
        args = kernel_args(tensors, scalars)
        kwargs = self._constexprs(lay, trace_buffer is not None)
        grid = (self.programs,)
        if self.on_gpu:
            self._prepare(lay, args, kwargs, grid)
            if self.cooperative:  # only named on a GPU: the interpreter knows no such option
                kwargs["launch_cooperative_grid"] = True
        _decode_step_kernel[grid](*args, **kwargs)
        return logits_out

    def _tensors(
        self, batch: DecodeBatch, logits_out: torch.Tensor, trace_buffer: torch.Tensor | None
    ) -> dict:
        """The kernel's tensor arguments by name: the step's inputs, the weights, the KV cache, the buffers."""
        return {
            "ids_ptr": batch.input_ids,
            "pos_ptr": batch.positions,
            "table_ptr": batch.block_tables,
            "slot_ptr": batch.slot_mapping,
            "ctx_ptr": batch.context_lens,
            "emb_ptr": self.model.tok_embeddings,
            "w_qkv_ptr": self.w_qkv,
            "w_o_ptr": self.w_o,
            "w_gate_up_ptr": self.w_gate_up,
            "w_down_ptr": self.w_down,
            "w_lm_ptr": self.model.lm_head_folded,
            "kv_ptr": self.kv_cache.kv,
            "cos_ptr": self.model.rope_cos,
            "sin_ptr": self.model.rope_sin,
            **{f"{name}_ptr": buf for name, buf in self.workspace.items()},
            "logits_ptr": logits_out,
            "xs_ptr": self.scratch,
            "state_ptr": self.state,
            "trace_ptr": trace_buffer if trace_buffer is not None else self.state,
        }

    def _constexprs(self, lay: StepLayout, trace: bool) -> dict:
        hopper = self.on_gpu and torch.cuda.get_device_capability(self.device)[0] >= 9
        return kernel_constexprs(
            self.cfg, self.config, lay, self.dtype, hopper=hopper, ptx=self.on_gpu, trace=trace
        )

    def _trace_buffer(self, trace) -> torch.Tensor | None:
        if trace is False or trace is None:
            return None
        shape = (self.programs, len(self.phases), 3)
        if isinstance(trace, torch.Tensor):
            if tuple(trace.shape) != shape or trace.dtype != torch.int64 or not trace.is_contiguous():
                raise ValueError(f"trace must be a contiguous int64 tensor of shape {list(shape)}")
            return trace
        if self.trace_buffer is None or tuple(self.trace_buffer.shape) != shape:
            self.trace_buffer = torch.full(shape, -1, dtype=torch.int64, device=self.device)
        return self.trace_buffer

    def _prepare(self, lay: StepLayout, args: tuple, kwargs: dict, grid: tuple) -> None:
        """Once per compiled kernel: compile it, refuse a grid it cannot keep co-resident, and (once) find out
        whether a cooperative launch can be captured in a CUDA graph here."""
        key = (repr(lay), kwargs["TRACE"], grid)
        if key in self._ready:
            return
        launch = {"launch_cooperative_grid": True} if self.cooperative else {}
        compiled = _decode_step_kernel.warmup(*args, grid=grid, **kwargs, **launch)
        compiled._init_handles()
        props = torch.cuda.get_device_properties(self.device)
        per_sm = co_resident_blocks_per_sm(
            compiled.n_regs,
            compiled.metadata.shared,
            self.config.num_warps,
            regs_per_sm=getattr(props, "regs_per_multiprocessor", 65536),
            smem_per_sm=getattr(props, "shared_memory_per_multiprocessor", 233472),
            max_threads_per_sm=getattr(props, "max_threads_per_multi_processor", 2048),
        )
        co_resident = per_sm * props.multi_processor_count
        self.compiled[key] = {
            "n_regs": compiled.n_regs,
            "n_spills": compiled.n_spills,
            "shared": compiled.metadata.shared,
            "co_resident": co_resident,
        }
        if grid[0] > co_resident:
            raise ValueError(
                f"grid of {grid[0]} programs is larger than can be co-resident ({per_sm} per SM x "
                f"{props.multi_processor_count} SMs at {compiled.n_regs} registers/thread, "
                f"{compiled.metadata.shared} B shared memory, {self.config.num_warps} warps): its barriers "
                f"would wait for programs that cannot start"
            )
        if self.cooperative and not torch.cuda.is_current_stream_capturing():
            self._probe_cooperative_capture(args, {**kwargs, **launch}, grid)
        self._ready.add(key)

    def _probe_cooperative_capture(self, args: tuple, kwargs: dict, grid: tuple) -> None:
        """Capture (not run) one cooperative launch: if the driver refuses it inside a graph, launch plainly
        (the co-residency check above still holds the grid to what fits)."""
        graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        try:
            with torch.cuda.graph(graph, stream=stream):
                _decode_step_kernel[grid](*args, **kwargs)
        except Exception as err:  # the driver's refusal arrives as whatever Triton's launcher raises
            self.cooperative = False
            self.cooperative_note = f"cooperative launch not capturable here ({type(err).__name__}: {err})"[
                :300
            ]
        else:
            self.cooperative_note = "cooperative launch, also inside CUDA graphs"
        finally:
            del graph
            torch.cuda.current_stream(self.device).wait_stream(stream)

    # ---- the error flag ---------------------------------------------------------------------------------
    def error_phase(self) -> PhaseInfo | None:
        """The phase whose barrier wait first timed out since the last reset, or None (reads the device)."""
        code = int(self.state[STATE_ERROR.value].item())
        return self.phases[code - 1] if code else None

    def check_error(self) -> None:
        """Raise PersistentKernelError if a barrier wait timed out (a sync with the device: call it in checks,
        not on every step)."""
        phase = self.error_phase()
        if phase is not None:
            raise PersistentKernelError(
                f"a barrier wait gave up after {self.config.spin_limit} polls before phase {phase.index} "
                f"({phase.name}): some program did not arrive; the step's results are not valid"
            )

    def reset_error(self) -> None:
        self.state[STATE_ERROR.value] = 0
