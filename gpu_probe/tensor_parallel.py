"""The probe decoder sharded Megatron-style over a torch.distributed group (tensor parallelism).

Each rank holds `1/tp` of every layer (after Megatron-LM's ColumnParallelLinear /
RowParallelLinear and vLLM's QKVParallelLinear):
- column-parallel: the packed QKV projection (rank r owns query heads [r·H/tp, (r+1)·H/tp) and the
  KV heads they read, so GQA groups never straddle ranks) and the packed gate/up projection;
- row-parallel: o_proj and down_proj, over the matching input columns. Each rank's product is a
  partial sum of the full output, so one all-reduce follows each: two per layer, of
  batch × hidden elements (4 KB at batch 1 for hidden 1024 in bf16);
- attention runs on the rank's heads only, so the paged KV cache of a rank holds its KV heads;
- embedding, norms and the LM head are replicated (every rank ends with the full logits).

In the fused variant the residual add stays in the row-parallel GEMM's epilogue on rank 0 only,
so the all-reduce sums it in exactly once (Megatron adds a row-parallel bias the same way).

`TensorParallelModel` is `ProbeModel` with a rank's shard of the weights and `cfg` set to the
shard's shape (`shard_config`): it runs ProbeModel's own two forwards, whose communication hook
all-reduces after o_proj and down_proj on tp > 1 ranks. What the inherited helpers (attention
over the rank's heads, split count, fused workspace, weight packing) read is per rank; `full_cfg`
is the unsharded model's. So the graph runner, the KV canary and the checks of
`gpu_probe.measure` work on a rank unchanged.

The all-reduce is a callable (`all_reduce(tensor)`, in place): `torch.distributed.all_reduce`
over a process group by default (NCCL on CUDA, gloo on CPU); the tests pass a gloo group's own
`allreduce` so that ranks can be threads of one process.

`run_tp_probe` is the `torchrun --nproc-per-node 2 -m gpu_probe --tp 2` entry point. It has NOT
yet been run on two GPUs (no two-GPU machine was lent); only the sharded model, its checks and
the CPU path are tested (tests/test_tensor_parallel.py, gloo).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from datetime import UTC, datetime

import torch
import torch.distributed as dist
from torch import nn

from core.step_plan import bucket_for
from core.step_plan import mode as mode_named
from core.tp_result import KIND as TP_KIND
from core.tp_result import SCHEMA_VERSION as TP_SCHEMA_VERSION
from core.tp_result import tp_modes
from gpu_probe.config import ProbeModelConfig, get_config
from gpu_probe.kernel_sets import kernel_set
from gpu_probe.kv_cache import PagedKVCache
from gpu_probe.model import ProbeModel


def check_tp(cfg: ProbeModelConfig, tp) -> int:
    """tp as an int, or ValueError naming what it must divide."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp must be a positive integer, got {tp!r}")
    for field in ("n_heads", "n_kv_heads", "ffn"):
        value = getattr(cfg, field)
        if value % tp:
            raise ValueError(f"tp ({tp}) must divide {field} ({value}) of preset {cfg.name!r}")
    return tp


def shard_config(cfg: ProbeModelConfig, tp: int) -> ProbeModelConfig:
    """The shape one rank holds: heads, KV heads and FFN width divided by tp, head_dim kept.

    `hidden` becomes the rank's attention width (q_size / tp) so that head_dim = hidden / n_heads
    is unchanged; the activations between layers stay full width (see `full_cfg`).
    """
    check_tp(cfg, tp)
    if tp == 1:
        return cfg
    return replace(
        cfg,
        name=f"{cfg.name}-tp{tp}-shard",
        hidden=cfg.hidden // tp,
        n_heads=cfg.n_heads // tp,
        n_kv_heads=cfg.n_kv_heads // tp,
        ffn=cfg.ffn // tp,
    )


def _rows(w: torch.Tensor, rank: int, tp: int) -> torch.Tensor:
    size = w.shape[0] // tp
    return w[rank * size : (rank + 1) * size].contiguous()


def _cols(w: torch.Tensor, rank: int, tp: int) -> torch.Tensor:
    size = w.shape[1] // tp
    return w[:, rank * size : (rank + 1) * size].contiguous()


def _frozen(t: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(t, requires_grad=False)


class TensorParallelModel(ProbeModel):
    """Rank `rank` of a `tp`-way sharded ProbeModel; call it like a ProbeModel (same inputs, full logits).

    Every rank must run the same steps in the same order: each forward makes 2·n_layers all-reduces.
    """

    def __init__(
        self, base: ProbeModel, rank: int, tp: int, all_reduce=None, group=None, num_blocks: int | None = None
    ):
        nn.Module.__init__(self)  # the weights come from `base`, not from a fresh initialisation
        full = base.cfg
        tp = check_tp(full, tp)
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < tp:
            raise ValueError(f"rank must be an integer in [0, {tp}), got {rank!r}")
        self.full_cfg, self.cfg = full, shard_config(full, tp)
        self.rank, self.tp, self.fused, self.dtype, self.pdl = rank, tp, base.fused, base.dtype, base.pdl
        self.ops = base.ops
        # ProbeModel's communication hook: after o_proj and down_proj, each rank's partial sum.
        self.all_reduce = (
            all_reduce if all_reduce is not None else (lambda t: dist.all_reduce(t, group=group))
        )
        self.tok_embeddings = base.tok_embeddings
        self.final_norm, self.lm_head = base.final_norm, base.lm_head
        # Head-contiguous split: query heads [r·hq, (r+1)·hq) read KV heads [r·hk, (r+1)·hk).
        self.layers = nn.ModuleList()
        for layer in base.layers:
            shard = nn.Module()
            shard.attn_norm, shard.ffn_norm = layer.attn_norm, layer.ffn_norm
            for name in ("wq", "wk", "wv", "w_gate", "w_up"):
                setattr(shard, name, _frozen(_rows(getattr(layer, name), rank, tp)))
            for name in ("bq", "bk", "bv"):  # a bias on q, k and v is column-parallel, as their weights are
                bias = getattr(layer, name)
                setattr(shard, name, None if bias is None else _frozen(_rows(bias, rank, tp)))
            shard.wo = _frozen(_cols(layer.wo, rank, tp))
            shard.w_down = _frozen(_cols(layer.w_down, rank, tp))
            self.layers.append(shard)
        device = base.device
        blocks = base.kv_cache.num_blocks if num_blocks is None else num_blocks
        self.kv_cache = PagedKVCache(self.cfg, num_blocks=blocks, device=device, dtype=self.dtype)
        for name in ("rope_cos", "rope_sin"):
            self.register_buffer(name, getattr(base, name), persistent=False)
        self.num_sms = base.num_sms
        self.pack_fused_weights()  # folds the (replicated) norm weights into this rank's packed shards

    @classmethod
    def from_config(
        cls,
        cfg: ProbeModelConfig | str,
        rank: int,
        tp: int,
        device=None,
        all_reduce=None,
        group=None,
        num_blocks: int | None = None,
        fused: bool = False,
    ) -> TensorParallelModel:
        """Build the full model from cfg.seed (every rank gets the same weights), keep this rank's shard."""
        cfg = get_config(cfg) if isinstance(cfg, str) else cfg
        check_tp(cfg, tp)
        base = ProbeModel(cfg, device=device, num_blocks=2, fused=fused)  # a 2-block cache: not kept
        blocks = cfg.num_blocks if num_blocks is None else num_blocks
        return cls(base, rank, tp, all_reduce=all_reduce, group=group, num_blocks=blocks)

    @property
    def kv_heads(self) -> slice:
        """This rank's KV heads, as indices into the unsharded cache's head axis."""
        n = self.cfg.n_kv_heads
        return slice(self.rank * n, (self.rank + 1) * n)

    @torch.no_grad()
    def load_kv_shard(self, full_kv: torch.Tensor) -> None:
        """Copy this rank's heads out of an unsharded cache's `kv` (same blocks, same layout)."""
        self.kv_cache.kv.copy_(full_kv[..., self.kv_heads, :])

    @property
    def allreduce_bytes_per_row(self) -> int:
        """One all-reduce's message per batch row: a hidden-wide activation."""
        return self.full_cfg.hidden * self.dtype.itemsize


# ---- checks (CPU tests and the CUDA run use the same ones) ---------------------------------------
@torch.no_grad()
def check_sharded_vs_unsharded(
    cfg: ProbeModelConfig,
    rank: int,
    tp: int,
    device=None,
    all_reduce=None,
    group=None,
    sizes=(1, 3),
    fused: bool = False,
    seed: int = 0,
    tolerance: float | None = None,
) -> dict:
    """Logits of this rank's shard == the unsharded model's, on the same weights and the same random KV.

    Every rank builds the full model (small KV pool) and fills its cache from one seed, so no
    tensor has to be sent between ranks; each rank checks its own (full) logits.
    """
    from gpu_probe.decode_batch import make_batch
    from gpu_probe.measure import logit_tolerance, rel_err

    blocks = 1 + max(sizes) * cfg.max_blocks_per_seq
    full = ProbeModel(cfg, device=device, num_blocks=blocks, fused=fused)
    shard = TensorParallelModel(full, rank, tp, all_reduce=all_reduce, group=group, num_blocks=blocks)
    full.kv_cache.fill_random_(seed)
    shard.load_kv_shard(full.kv_cache.kv)
    batch = make_batch(full, max(sizes), seed=seed)
    make_batch(shard, max(sizes), seed=seed)  # the same allocations in the shard's pool
    tolerance = logit_tolerance(full) if tolerance is None else tolerance
    errs = {}
    for n in sizes:
        rows = batch.head(n)
        errs[n] = rel_err(shard(rows), full(rows))
    # The same slots were written: the shard's cache must equal the full one's heads.
    kv_equal = bool(
        torch.allclose(
            shard.kv_cache.kv, full.kv_cache.kv[..., shard.kv_heads, :], rtol=tolerance, atol=tolerance
        )
    )
    passed = all(e <= tolerance for e in errs.values()) and kv_equal
    return {
        "sharded_vs_unsharded": {
            "passed": passed,
            "rank": rank,
            "tp": tp,
            "fused": fused,
            "rel_err": {str(k): v for k, v in errs.items()},
            "kv_shard_matches": kv_equal,
            "detail": f"rank {rank} of {tp}: logits within {tolerance:g} (relative) of the unsharded model's, "
            f"KV written into this rank's heads only",
        }
    }


# ---- the two-GPU run (torchrun) -----------------------------------------------------------------
def allreduce_sweep(
    device,
    group=None,
    sizes=(512, 2048, 8192, 32768, 131072, 524288, 2097152),
    calls: int = 20,
    reps: int = 20,
    dtype=torch.bfloat16,
) -> list[dict]:
    """All-reduce time per call against message size, eager and captured in a CUDA graph.

    NOT YET RUN ON TWO GPUS. The graph holds `calls` all-reduces back to back and is replayed
    `reps` times between two events: per call = elapsed / (calls · reps), launch cost included
    once per replay (as in a captured decode step).
    """
    rows = []
    for nbytes in sizes:
        buf = torch.ones(nbytes // dtype.itemsize, dtype=dtype, device=device)
        for _ in range(3):
            dist.all_reduce(buf, group=group)
        torch.cuda.synchronize()
        dist.barrier(group=group)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls * reps):
            dist.all_reduce(buf, group=group)
        end.record()
        end.synchronize()
        eager_us = start.elapsed_time(end) * 1e3 / (calls * reps)
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            dist.all_reduce(buf, group=group)  # warm-up on the side stream before capture
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                dist.all_reduce(buf, group=group)
        dist.barrier(group=group)
        start.record()
        for _ in range(reps):
            graph.replay()
        end.record()
        end.synchronize()
        graph_us = start.elapsed_time(end) * 1e3 / (calls * reps)
        rows.append({"bytes": nbytes, "eager_us_per_call": eager_us, "graph_us_per_call": graph_us})
        del graph, buf
    return rows


def rank_record(
    rank: int, device: str, runs: list, checks: dict, allreduce: list, allreduce_bytes_per_row: int
) -> dict:
    """One rank's part of the result: its run records (`gpu_probe.measure.run_record`), its checks,
    its all-reduce sweep (`allreduce_sweep`) and one all-reduce's message per batch row."""
    return {
        "rank": rank,
        "device": device,
        "runs": list(runs),
        "checks": dict(checks),
        "allreduce": list(allreduce),
        "allreduce_bytes_per_row": allreduce_bytes_per_row,
    }


def tp_result_record(
    *,
    tp: int,
    preset: dict,
    command: str,
    torch_version: str,
    cuda: str,
    nccl: str,
    batches,
    modes,
    buckets,
    ranks: list,
    tp1_runs: list,
    wall_s: float,
    created: str | None = None,
) -> dict:
    """The TP result file's content (read back by `core.tp_result.load_tp_result`): the ranks'
    records (`rank_record`, in rank order), the TP1 baseline's run records, and whether every
    rank's checks passed. Pure: the CPU tests build a result with it."""
    created = created or datetime.now(UTC).isoformat(timespec="seconds")
    return {
        "schema": TP_SCHEMA_VERSION,
        "kind": TP_KIND,
        "tp": tp,
        "preset": preset,
        "command": command,
        "created": created,
        "torch": torch_version,
        "cuda": cuda,
        "nccl": nccl,
        "batches": list(batches),
        "modes": list(modes),
        "buckets": list(buckets),
        "ranks": list(ranks),
        "tp1_runs": list(tp1_runs),
        "all_checks_passed": all(c["passed"] for r in ranks for c in r["checks"].values()),
        "wall_s": wall_s,
    }


def _rows_needed(batches, buckets) -> int:
    return max(*batches, *buckets)


def _measure_modes(
    model, batches, modes, buckets, steps, warmup, trace_prefix, progress
) -> tuple[list, dict]:
    """Time and profile each (mode, batch) on this rank; the graph runner's checks on the way.
    The model's KV pool must hold max(batches + buckets) sequences (`_rows_needed`)."""
    from gpu_probe.decode_batch import make_batch
    from gpu_probe.graph_runner import GraphRunner
    from gpu_probe.measure import check_graph_vs_eager, profile_step, run_record, time_steps

    batch = make_batch(model, _rows_needed(batches, buckets))  # the checks fill every bucket
    model.kv_cache.fill_random_()
    runs, checks = [], {}
    for mode in map(mode_named, modes):
        model.fused = kernel_set(mode).fused  # a set a shard runs is one of the model's forwards
        runner = GraphRunner(model, buckets=buckets, use_graphs=mode.graphs, progress=progress)
        if mode.graphs:
            for name, check in check_graph_vs_eager(runner, model, batch).items():
                checks[f"{name} ({mode.name})"] = check
        for n in batches:
            rows = batch.head(n)
            if not mode.graphs:

                def step(rows=rows):
                    return model(rows)
            else:

                def step(rows=rows, runner=runner):
                    return runner.run(rows)

            progress(f"{mode.name} batch {n}")
            timing = time_steps(step, steps=steps, warmup=warmup)
            path = f"{trace_prefix}-{mode.name.replace('+', '_')}-b{n}.json" if trace_prefix else None
            traced = profile_step(step, label=f"{mode.name} · batch {n}", trace_path=path)
            bucket = bucket_for(n, runner.buckets) if mode.graphs else None
            runs.append(run_record(mode.name, n, timing, traced, model.cfg.n_layers, bucket=bucket))
        del runner
        torch.cuda.empty_cache()
    return runs, checks


def run_tp_probe(
    preset: str,
    batches,
    modes=None,
    buckets=(1, 2, 4, 8, 16, 32, 64),
    steps: int = 100,
    warmup: int = 10,
    out: str = "tp-results.json",
    trace_dir: str | None = None,
    command: str = "",
    progress=print,
) -> int:
    """One rank of `torchrun --nproc-per-node 2 -m gpu_probe --tp 2 ...`: NOT YET RUN ON TWO GPUS.

    Per rank: sharded == unsharded logits (fused and unfused), graph == eager per bucket and the
    KV canary (the all-reduces captured inside each bucket's graph), then step time and a
    profiled timeline per (mode, batch) with the all-reduce kernels in it, and the all-reduce
    time per call against message size. Rank 0 also times the unsharded model (TP1) at the same
    batches. Rank 0 writes one JSON file (`tp_result_record`; read by `core.tp_result`, shown by
    the page's Live GPU probe tab). Returns the exit code: 0 all checks passed, 1 otherwise.
    """
    modes = tuple(modes or tp_modes())
    rank, tp, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    try:
        cfg = get_config(preset)
        check_tp(cfg, tp)

        def say(msg: str) -> None:
            progress(f"[rank {rank}/{tp}] {msg}")

        t0 = time.perf_counter()
        checks = {}
        for fused in (False, True):
            check = check_sharded_vs_unsharded(cfg, rank, tp, device=device, fused=fused, sizes=(1, 8))
            checks[f"sharded_vs_unsharded ({'fused' if fused else 'unfused'})"] = check[
                "sharded_vs_unsharded"
            ]
        torch.cuda.empty_cache()
        blocks = 1 + _rows_needed(batches, buckets) * cfg.max_blocks_per_seq
        model = TensorParallelModel.from_config(cfg, rank, tp, device=device, num_blocks=blocks)
        prefix = os.path.join(trace_dir, f"tp{tp}-rank{rank}") if trace_dir else None
        runs, graph_checks = _measure_modes(model, batches, modes, buckets, steps, warmup, prefix, say)
        checks.update(graph_checks)
        del model
        torch.cuda.empty_cache()
        say("all-reduce sweep")
        allreduce = allreduce_sweep(device)
        tp1_runs = []
        if rank == 0:  # the baseline on one GPU, while the other ranks wait
            full = ProbeModel(cfg, device=device, num_blocks=blocks)
            prefix1 = os.path.join(trace_dir, "tp1") if trace_dir else None
            tp1_runs, _ = _measure_modes(full, batches, modes, buckets, steps, warmup, prefix1, say)
            del full
            torch.cuda.empty_cache()
        dist.barrier()
        mine = rank_record(
            rank,
            torch.cuda.get_device_name(device),
            runs,
            checks,
            allreduce,
            cfg.hidden * cfg.bytes_per_el,
        )
        gathered = [None] * tp
        dist.all_gather_object(gathered, mine)
        result = tp_result_record(
            tp=tp,
            preset=cfg.to_dict(),
            command=command,
            torch_version=torch.__version__,
            cuda=torch.version.cuda or "unknown",
            nccl=".".join(map(str, torch.cuda.nccl.version())),
            batches=batches,
            modes=modes,
            buckets=buckets,
            ranks=gathered,
            tp1_runs=tp1_runs,
            wall_s=time.perf_counter() - t0,
        )
        passed = result["all_checks_passed"]
        if rank == 0:
            with open(out, "w") as f:
                json.dump(result, f)
            say(f"wrote {out}: checks {'all passed' if passed else 'FAILED'}")
        return 0 if passed else 1
    finally:
        dist.destroy_process_group()


def cli_main(args, argv: list[str]) -> int:
    """`python -m gpu_probe --tp N ...` (N > 1): check the request, then run this rank. Exit codes as
    gpu_probe's: 2 with one sentence for a request that cannot run (nothing allocated)."""
    import shlex
    import sys

    def refuse(reason: str) -> int:
        print(f"gpu_probe: error: {reason}", file=sys.stderr)
        return 2

    try:
        cfg = get_config(args.preset)
        check_tp(cfg, args.tp)
    except ValueError as err:
        return refuse(str(err))
    allowed = tp_modes()
    modes = allowed if args.modes == ["all"] else tuple(args.modes)
    if not modes or any(m not in allowed for m in modes):
        return refuse(f"with --tp the modes are 'all' or some of: {' '.join(allowed)}")
    if any(b < 1 for b in args.batch) or args.steps < 1 or args.warmup < 0:
        return refuse("batches and steps must be positive, warmup at least 0")
    if not torch.cuda.is_available():
        return refuse(
            f"--tp {args.tp} needs {args.tp} CUDA GPUs and torchrun (torch.cuda.is_available() is False); "
            "the CPU path is covered by tests/test_tensor_parallel.py"
        )
    if os.environ.get("WORLD_SIZE") != str(args.tp) or torch.cuda.device_count() < args.tp:
        return refuse(
            f"--tp {args.tp} runs one process per GPU: start it with torchrun --nproc-per-node "
            f"{args.tp} on a machine with {args.tp} GPUs ({torch.cuda.device_count()} here)"
        )
    return run_tp_probe(
        args.preset,
        sorted(set(args.batch)),
        modes,
        buckets=tuple(sorted(set(args.buckets))),
        steps=args.steps,
        warmup=args.warmup,
        out=args.out,
        trace_dir=args.trace_dir,
        command=f"torchrun --nproc-per-node {args.tp} -m gpu_probe {shlex.join(argv)}",
        progress=lambda msg: print(msg, file=sys.stderr, flush=True),
    )
