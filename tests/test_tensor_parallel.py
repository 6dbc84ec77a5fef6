"""The tensor-parallel probe decoder on CPU: ranks are threads of this process joined by a gloo group.

Checked here: sharded logits == unsharded ones (GQA, fused and unfused), each rank's KV cache holds
only its heads and the canary catches padded rows writing a real sequence's blocks on every rank,
the argument checks, and the CLI's answer without CUDA. The two-GPU run (NCCL, graphs) is the
cuda-marked test at the end, skipped without two GPUs.
"""

import contextlib
import datetime
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from gpu_probe.config import get_config
from gpu_probe.decode_batch import make_batch
from gpu_probe.graph_runner import GraphRunner
from gpu_probe.measure import check_graph_vs_eager
from gpu_probe.model import ProbeModel
from gpu_probe.padding import check_padding_assertion
from gpu_probe.tensor_parallel import TensorParallelModel, check_sharded_vs_unsharded, check_tp, shard_config

ROOT = Path(__file__).resolve().parents[1]


def run_ranks(tp: int, fn, one_at_a_time: bool = False) -> list:
    """fn(rank, all_reduce) on tp threads joined by one gloo group; the results by rank (errors re-raised).

    one_at_a_time: a rank computes only while holding a lock it lets go of inside each all-reduce,
    so no two ranks run Triton's CPU interpreter (global state, not thread-safe) at once.
    """
    store = dist.HashStore()
    results, errors = [None] * tp, []
    turn = threading.Lock() if one_at_a_time else contextlib.nullcontext()

    def worker(rank: int) -> None:
        try:
            group = dist.ProcessGroupGloo(store, rank, tp, datetime.timedelta(seconds=60))

            def all_reduce(t):
                work = group.allreduce([t])
                if one_at_a_time:
                    turn.release()
                    try:
                        work.wait()
                    finally:
                        turn.acquire()
                else:
                    work.wait()

            with turn:
                results[rank] = fn(rank, all_reduce)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(r,), daemon=True) for r in range(tp)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a rank hung (collectives out of step)"
    if errors:
        raise errors[0]
    return results


# GQA inside a rank: 8 query heads over 4 KV heads, so TP2 leaves 4 over 2 on each rank.
GQA = get_config("tiny", n_heads=8, n_kv_heads=4)


@pytest.mark.parametrize(
    "cfg,tp",
    [(get_config("tiny"), 2), (GQA, 2), (GQA, 4), (get_config("tiny", tie_embeddings=True), 2)],
    ids=["tiny-tp2", "gqa-tp2", "gqa-tp4", "tied-tp2"],
)
def test_sharded_logits_match_unsharded(cfg, tp):
    checks = run_ranks(tp, lambda rank, ar: check_sharded_vs_unsharded(cfg, rank, tp, all_reduce=ar))
    for _rank, check in enumerate(checks):
        c = check["sharded_vs_unsharded"]
        assert c["passed"], c
        assert c["kv_shard_matches"] and max(c["rel_err"].values()) < 1e-4


def test_sharded_logits_can_fail():
    """The check is not vacuous: a rank that skips its all-reduces gives wrong logits."""
    checks = run_ranks(
        2, lambda rank, ar: check_sharded_vs_unsharded(get_config("tiny"), rank, 2, all_reduce=lambda t: None)
    )
    assert not any(c["sharded_vs_unsharded"]["passed"] for c in checks)


def test_fused_shards_match_unsharded():
    """The Triton kernels per shard (CPU interpreter, one rank at a time), residual added on rank 0 only."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs Triton's CPU interpreter (TRITON_INTERPRET=1, set by conftest without CUDA)")
    cfg = get_config("tiny", n_layers=1, n_heads=8, n_kv_heads=4, max_context=32)
    checks = run_ranks(
        2,
        lambda rank, ar: check_sharded_vs_unsharded(cfg, rank, 2, all_reduce=ar, fused=True, sizes=(1,)),
        one_at_a_time=True,
    )
    for check in checks:
        c = check["sharded_vs_unsharded"]
        assert c["passed"] and c["fused"], c


def test_default_all_reduce_is_torch_distributed():
    """Without an all_reduce callable the model uses torch.distributed's default group (what torchrun sets up)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        base = ProbeModel("tiny", num_blocks=8)
        shard = TensorParallelModel(base, 0, 1)
        batch = make_batch(base, 1)
        make_batch(shard, 1)
        shard.load_kv_shard(base.kv_cache.kv)
        with torch.no_grad():
            assert torch.allclose(shard(batch), base(batch), rtol=1e-5, atol=1e-5)
    finally:
        dist.destroy_process_group()


def test_each_rank_holds_its_share():
    cfg = get_config("tiny")
    base = ProbeModel(cfg, num_blocks=4)
    shards = [TensorParallelModel(base, r, 2, all_reduce=lambda t: None) for r in range(2)]
    assert shards[0].kv_cache.kv.shape[-2] == cfg.n_kv_heads // 2
    assert shards[1].layers[0].wq.shape == (cfg.q_size // 2, cfg.hidden)
    assert shards[1].layers[0].wo.shape == (cfg.hidden, cfg.q_size // 2)
    assert shards[1].layers[0].w_down.shape == (cfg.hidden, cfg.ffn // 2)
    assert torch.equal(shards[1].layers[0].wk, base.layers[0].wk[cfg.kv_size // 2 :])
    per_rank = sum(p.numel() for n, p in shards[0].named_parameters() if n.startswith("layers."))
    full = sum(p.numel() for n, p in base.named_parameters() if n.startswith("layers."))
    norms = cfg.n_layers * 2 * cfg.hidden  # replicated
    assert per_rank - norms == (full - norms) // 2


def test_kv_canary_and_graph_checks_per_rank():
    """The graph runner's bookkeeping (eagerly: no graphs on CPU) on each rank of a TP2 model:
    padded rows aimed at a real block are caught by the assertion and by each rank's KV canary."""
    cfg = get_config("tiny")

    def rank_checks(rank, ar):
        model = TensorParallelModel.from_config(cfg, rank, 2, all_reduce=ar)
        batch = make_batch(model, 4)
        model.kv_cache.fill_random_(seed=rank)
        runner = GraphRunner(model, buckets=(1, 2, 4), use_graphs=False)
        checks = check_graph_vs_eager(runner, model, batch)
        checks.update(check_padding_assertion(runner, batch))
        return checks

    for rank, checks in enumerate(run_ranks(2, rank_checks)):
        for name, check in checks.items():
            assert check["passed"], (rank, name, check)
        assert checks["padding_assertion"]["canary_fired"] == [3], rank  # batch 3 padded to bucket 4


def test_a_result_built_like_run_tp_probe_loads_in_the_page_loader():
    """The file's record built by the writer's own functions (`rank_record`, `tp_result_record`) from
    real checks on each rank (gloo threads) and run records (`run_record` over synthetic profiled
    steps: no profiler on CPU), written as run_tp_probe writes it, read back by core.tp_result."""
    import json

    from tp_synthetic import allreduce_rows, runs_of

    from core.tp_result import load_tp_result, tp_modes
    from gpu_probe.tensor_parallel import rank_record, tp_result_record

    cfg = get_config("tiny")

    def rank_part(rank, ar):
        checks = {
            "sharded_vs_unsharded (unfused)": check_sharded_vs_unsharded(
                cfg, rank, 2, all_reduce=ar, sizes=(1,)
            )["sharded_vs_unsharded"]
        }
        model = TensorParallelModel.from_config(cfg, rank, 2, all_reduce=ar)
        batch = make_batch(model, 4)
        model.kv_cache.fill_random_()
        runner = GraphRunner(model, buckets=(1, 2, 4), use_graphs=False)
        for name, check in check_graph_vs_eager(runner, model, batch).items():
            checks[f"{name} (graph)"] = check
        return rank_record(
            rank, "cpu (gloo)", runs_of(rank, 2), checks, allreduce_rows(), model.allreduce_bytes_per_row
        )

    ranks = run_ranks(2, rank_part)
    record = tp_result_record(
        tp=2,
        preset=cfg.to_dict(),
        command="torchrun --nproc-per-node 2 -m gpu_probe --tp 2 --preset tiny",
        torch_version=torch.__version__,
        cuda="none",
        nccl="none",
        batches=(1, 4),
        modes=tp_modes(),
        buckets=(1, 2, 4),
        ranks=ranks,
        tp1_runs=runs_of(0, 1),
        wall_s=1.0,
    )
    result = load_tp_result(json.dumps(record).encode())  # as run_tp_probe's json.dump writes it
    assert result.all_checks_passed and record["all_checks_passed"]
    assert [r.rank for r in result.ranks] == [0, 1] and result.preset["name"] == "tiny"
    assert {name for _, name, _ in result.checks()} == {
        "sharded_vs_unsharded (unfused)",
        "graph_vs_eager (graph)",
        "kv_canary (graph)",
    }
    assert result.ranks[0].allreduce_bytes_per_row == cfg.hidden * 4  # fp32
    assert result.created  # stamped by the writer


@pytest.mark.parametrize("field,value,tp", [("n_kv_heads", 2, 4), ("n_heads", 4, 3), ("ffn", 171, 2)])
def test_tp_must_divide_heads_kv_heads_and_ffn(field, value, tp):
    cfg = get_config("tiny", ffn=171 if field == "ffn" else 172)
    with pytest.raises(ValueError, match=rf"tp \({tp}\) must divide {field} \({value}\)"):
        check_tp(cfg, tp)
    with pytest.raises(ValueError, match="must divide"):
        TensorParallelModel.from_config(cfg, 0, tp, all_reduce=lambda t: None)


@pytest.mark.parametrize("tp", [0, -2, 1.5, True, "2"])
def test_tp_must_be_a_positive_integer(tp):
    with pytest.raises(ValueError, match="tp must be a positive integer"):
        check_tp(get_config("tiny"), tp)


def test_rank_must_be_in_range():
    base = ProbeModel("tiny", num_blocks=2)
    with pytest.raises(ValueError, match=r"rank must be an integer in \[0, 2\)"):
        TensorParallelModel(base, 2, 2, all_reduce=lambda t: None)


def test_shard_config_keeps_head_dim():
    cfg = get_config("small")
    shard = shard_config(cfg, 2)
    assert shard.head_dim == cfg.head_dim and shard.n_heads == 8 and shard.ffn == cfg.ffn // 2
    assert shard_config(cfg, 1) is cfg


def test_cli_tp_without_cuda_exits_2(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    from gpu_probe.__main__ import main

    assert main(["--preset", "tiny", "--tp", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--tp 2 needs" in err


def test_cli_tp_that_does_not_divide_exits_2(capsys):
    from gpu_probe.__main__ import main

    assert main(["--preset", "tiny", "--tp", "3"]) == 2
    assert "tp (3) must divide n_heads (4)" in capsys.readouterr().err


@pytest.mark.cuda
def test_two_gpu_run(tmp_path):
    """The real thing: torchrun, NCCL, all-reduces captured in the graphs (needs two GPUs)."""
    if torch.cuda.device_count() < 2 or shutil.which("torchrun") is None:
        pytest.skip("needs two CUDA GPUs and torchrun")
    out = tmp_path / "tp.json"
    cmd = [
        "torchrun",
        "--nproc-per-node",
        "2",
        "-m",
        "gpu_probe",
        "--tp",
        "2",
        "--preset",
        "tiny",
        "--batch",
        "1",
        "4",
        "--steps",
        "5",
        "--warmup",
        "2",
        "--out",
        str(out),
    ]
    proc = subprocess.run(
        cmd,
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    result = json.loads(out.read_text())
    assert result["all_checks_passed"] and len(result["ranks"]) == 2
    assert any(
        "AllReduce" in name or "allreduce" in name.lower()
        for name in result["ranks"][0]["runs"][0]["timeline"]["gpu"]["name"]
    )


@pytest.mark.cuda
def test_sharded_on_one_gpu_with_gloo():
    """Both ranks on one GPU (gloo moves the CUDA tensors): the fused kernels per shard on real hardware."""
    cfg = get_config("tiny")
    checks = run_ranks(
        2, lambda rank, ar: check_sharded_vs_unsharded(cfg, rank, 2, device="cuda", all_reduce=ar, fused=True)
    )
    assert all(c["sharded_vs_unsharded"]["passed"] for c in checks)


if __name__ == "__main__":  # under torchrun: each rank runs this file in its own process, not in workers
    sys.exit(pytest.main([__file__, "-q", "-o", "addopts=-ra"]))
