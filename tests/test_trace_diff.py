"""Issue 22, item 4: the before/after diff of two traces (core/trace/diff.py), by kernel family
(core/trace/families.py), on the real H200 traces, through the CLI (`python -m sim trace A B --diff`) and on
hostile input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from core.trace import analyse
from core.trace.diff import CHANGES, diff, diff_reports, format_diff, trace_kernels
from core.trace.families import (
    ATTENTION_FAMILY,
    COMMUNICATION_FAMILY,
    COPY_FAMILY,
    ELEMENTWISE_FAMILY,
    FAMILIES,
    GEMM_FAMILY,
    OTHER_FAMILY,
    REDUCTION_FAMILY,
    TRITON_FAMILY,
    family,
    foldable,
)
from core.trace.kernels import launch_costs
from sim.trace.report import main

ROOT = Path(__file__).resolve().parents[1]
HF = ROOT / "data" / "traces" / "hf"
RECORDED = ROOT / "gpu_probe" / "recorded"
_REPORTS: dict = {}


def _report(path: Path):
    if path not in _REPORTS:
        _REPORTS[path] = analyse(path)
    return _REPORTS[path]


def _diff(before: Path, after: Path):
    return diff_reports(_report(before), _report(after))


def _names(d, change: str) -> set[str]:
    return {k.name for k in d.changed(change)}


# -- the families --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_TNT", GEMM_FAMILY),  # cuBLAS on Hopper
        ("void cublasLt::splitKreduce_kernel<32, 16, int, float>(float)", GEMM_FAMILY),  # not a reduction
        ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_tn_align1>(Params)", GEMM_FAMILY),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", GEMM_FAMILY),
        ("triton_tem_fused_mm_0", GEMM_FAMILY),  # Inductor's matmul template
        ("_gemv_kernel", GEMM_FAMILY),  # the probe's Triton GEMV
        ("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35", ATTENTION_FAMILY),
        (
            "void cutlass::device_kernel<flash::FlashAttnFwdSm90<flash::Kernel_traits>>(Params)",
            ATTENTION_FAMILY,
        ),
        ("_paged_attention_kernel", ATTENTION_FAMILY),
        # Inductor lists the ops it fused, attention and bmm included: it is a generated pointwise kernel.
        ("triton_poi_fused__scaled_dot_product_cudnn_attention__to_copy__unsafe_view_bmm_5", TRITON_FAMILY),
        ("triton_red_fused__unsafe_view_argmax_select_17", TRITON_FAMILY),
        ("triton_per_fused_add_mean_mul_pow_rsqrt_0", TRITON_FAMILY),
        (
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float>>>",
            REDUCTION_FAMILY,
        ),
        (
            "void at::native::reduce_kernel<512, 1, ReduceOp<c10::BFloat16, at::native::ArgMaxOps<float>>>",
            REDUCTION_FAMILY,
        ),
        ("void vllm::rms_norm_kernel<c10::BFloat16>(c10::BFloat16*)", REDUCTION_FAMILY),
        (
            "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>>",
            ELEMENTWISE_FAMILY,
        ),
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>",
            ELEMENTWISE_FAMILY,
        ),
        (
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy<OpaqueType<2u>, unsigned int, 3>",
            COPY_FAMILY,
        ),
        ("void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::BFloat16, long>", COPY_FAMILY),
        ("Memcpy HtoD (Pinned -> Device)", COPY_FAMILY),
        ("Memset (Device)", COPY_FAMILY),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*)", COMMUNICATION_FAMILY),
        ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(RankData*)", COMMUNICATION_FAMILY),
        ("_merge_splits_kernel", OTHER_FAMILY),
    ],
)
def test_a_kernel_belongs_to_the_family_its_name_says(name, expected):
    assert family(name) == expected


def test_the_fusion_what_if_and_the_families_read_the_same_fragments():
    """One classifier: what the fusion what-if folds is elementwise, norm, copy or generated work."""
    trace = _report(HF / "hf_llama_eager_profilerstep.json.gz").trace
    names = {trace.names[i] for i in np.unique(trace.gpu_name)}
    folds = {family(n) for n in names if foldable(n)}
    assert folds == {ELEMENTWISE_FAMILY, REDUCTION_FAMILY, COPY_FAMILY}
    assert not any(foldable(n) for n in names if family(n) in (GEMM_FAMILY, ATTENTION_FAMILY))


# -- per step: the median over each trace's steps ---------------------------------------------------------
def test_per_step_is_the_median_over_the_traces_steps():
    report = _report(HF / "hf_llama_eager_sync.json.gz")
    kernels = trace_kernels(report)
    steps = report.steps
    assert kernels.steps == len(steps) == 3
    assert kernels.total.count == np.median([s.kernels for s in steps])
    assert kernels.total.gpu_us == pytest.approx(np.median([s.timeline.gpu_dur.sum() for s in steps]))
    # Eager: one launch per kernel, so the host time is every launch's, the CPU lane's total.
    assert kernels.total.host_us == pytest.approx(
        np.median([s.metrics.cpu_launch_us for s in steps]), rel=1e-3
    )
    assert sum(f.count for f in kernels.families.values()) == kernels.total.count
    assert kernels.step_us == report.median("step_us") and kernels.graph_launches.count == 0


def test_a_graph_launch_host_time_is_counted_once_not_per_replayed_kernel():
    report = _report(HF / "hf_llama_graph.json.gz")
    kernels = trace_kernels(report)
    costs = [launch_costs(s) for s in report.steps]
    assert all(c.graph_launches == 1 and c.replayed.sum() > 800 for c in costs)
    assert kernels.graph_launches.count == 1
    assert kernels.graph_launches.host_us == pytest.approx(np.median([c.graph_host_us[0] for c in costs]))
    # The replayed families have no host time; the step's host time is the graph launch and the copies.
    assert kernels.families[GEMM_FAMILY].host_us == 0 and kernels.families[ELEMENTWISE_FAMILY].host_us == 0
    assert kernels.total.host_us < 2 * kernels.graph_launches.host_us
    assert kernels.total.host_us == pytest.approx(
        np.median([s.metrics.cpu_launch_us for s in report.steps]), rel=0.05
    )


# -- the diffs the issue names ---------------------------------------------------------------------------
def test_eager_to_compile_elementwise_shrinks_and_triton_kernels_appear():
    d = _diff(HF / "hf_llama_eager_profilerstep.json.gz", HF / "hf_llama_compile.json.gz")
    rows = {r.family: r for r in d.families}
    assert rows[ELEMENTWISE_FAMILY].before.count > 500 and rows[ELEMENTWISE_FAMILY].after.count < 10
    assert rows[ELEMENTWISE_FAMILY].change.gpu_us < -1000
    assert rows[TRITON_FAMILY].before.count == 0 and rows[TRITON_FAMILY].after.count > 100
    assert rows[GEMM_FAMILY].before.count == rows[GEMM_FAMILY].after.count  # Inductor left cuBLAS its GEMMs
    merged, appeared = _names(d, "merged"), _names(d, "appeared")
    assert {"at::native::elementwise_kernel", "at::native::vectorized_elementwise_kernel"} <= merged
    assert "at::native::reduce_kernel" in merged  # RMSNorm's mean went into triton_red_ kernels
    assert any(n.startswith("triton_poi_fused") for n in appeared)
    assert d.fused and all(n.startswith("triton_") for n in d.fused) and set(d.fused) <= appeared
    assert not any(k.family in (GEMM_FAMILY, ATTENTION_FAMILY) for k in d.changed("merged"))
    assert d.before.launches == 832 and d.after.graph_launches.count == 1 and d.speedup > 5


@pytest.mark.parametrize(
    ("eager", "graph"),
    [
        ("hf_llama_eager_profilerstep.json.gz", "hf_llama_graph.json.gz"),
        ("hf_qwen2_eager_sync.json.gz", "hf_qwen2_graph.json.gz"),
    ],
)
def test_eager_against_graph_the_same_kernels_with_the_launches_gone(eager, graph):
    d = _diff(HF / eager, HF / graph)
    assert not d.kernels  # nothing disappeared, merged, appeared or changed count
    for row in d.families:
        assert row.before.count == row.after.count
        assert row.after.gpu_us == pytest.approx(row.before.gpu_us, rel=0.15)
        if row.family != COPY_FAMILY:  # the input and output copies stay eager launches
            assert row.before.host_us > 0 and row.after.host_us == 0
    assert d.after.launches <= 4 and d.before.launches > 800
    assert d.after.graph_launches.count == 1 and d.after.graph_launches.host_us > 0
    assert d.after.total.host_us < d.before.total.host_us / 10
    assert "The same kernels" in format_diff(d)


def test_without_generated_kernels_nothing_is_called_merged():
    """The probe's fused step uses hand-written Triton kernels, not Inductor's: the unfused step's one-op kernels
    and residual adds disappeared, the fused attention appeared, and the diff does not claim to know where the
    others went (both steps run the same GEMV, fewer of them fused)."""
    d = diff(
        trace_kernels(analyse(RECORDED / "trace_eager_b1.json.gz")),
        trace_kernels(analyse(RECORDED / "trace_fused_graph_b1.json")),
    )
    assert not d.fused and not d.changed("merged")
    gone = _names(d, "disappeared")
    assert "at::native::vectorized_elementwise_kernel" in gone
    assert {"_rms_norm_kernel", "_rope_kernel", "_write_kv_kernel", "_silu_mul_kernel"} <= gone
    assert "_paged_attention_kernel" in _names(d, "appeared")


def test_two_unrelated_traces_diff_as_a_table_of_families():
    d = _diff(RECORDED / "trace_fused_graph_b1.json", HF / "hf_qwen2_eager_sync.json.gz")
    families = [r.family for r in d.families]
    assert families == [f for f in FAMILIES if f in families]  # in the one order
    assert {GEMM_FAMILY, ATTENTION_FAMILY, ELEMENTWISE_FAMILY, OTHER_FAMILY} <= set(families)
    assert sum(r.after.count for r in d.families) == d.after.total.count
    json.dumps(d.to_dict(), allow_nan=False)
    assert "family" in format_diff(d)


def test_a_trace_against_itself_changes_nothing():
    report = _report(HF / "hf_llama_compile.json.gz")
    d = diff_reports(report, report)
    assert not d.kernels and all(r.change.count == 0 and r.change.host_us == 0 for r in d.families)
    assert d.speedup == pytest.approx(1.0)


def test_hostile_traces_diff_without_an_exception():
    from hostile_trace_fuzz import STRUCTURAL, variants

    from core.trace import TraceError

    good = _report(HF / "hf_llama_graph.json.gz")
    seen = 0
    for name, make in variants(["steps", "graph"]):
        if name.split("/")[1] not in STRUCTURAL:
            continue
        try:
            report = analyse(make(), name=name)
        except TraceError:
            continue
        for d in (diff_reports(report, good), diff_reports(good, report)):
            json.dumps(d.to_dict(), allow_nan=False)
            format_diff(d)
        seen += 1
    assert seen >= 20


# -- the CLI ------------------------------------------------------------------------------------------------
def test_cli_diff_json_fields(capsys):
    before, after = HF / "hf_llama_eager_profilerstep.json.gz", HF / "hf_llama_compile.json.gz"
    assert main([str(before), str(after), "--diff", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {
        "before",
        "after",
        "speedup_as_traced",
        "families",
        "graph_launches",
        "total",
        "kernels",
        "merged_into",
        "merged_rule",
    }
    side_keys = {"file", "rule", "steps", "step_us", "launches", "graph_launches", "graph_launch_host_us"}
    assert side_keys | {"kernels", "gpu_us", "host_us"} == set(out["before"]) == set(out["after"])
    assert out["before"]["file"] == before.name and out["after"]["file"] == after.name
    tally = {"count", "gpu_us", "host_us"}
    for row in out["families"]:
        assert row["family"] in FAMILIES and set(row) == {"family", "before", "after", "change"}
        assert set(row["before"]) == set(row["after"]) == set(row["change"]) == tally
        assert row["change"]["count"] == row["after"]["count"] - row["before"]["count"]
    assert set(out["kernels"]) == set(CHANGES)
    merged = {k["name"] for k in out["kernels"]["merged"]}
    assert "at::native::elementwise_kernel" in merged and out["merged_into"]
    assert all(set(k) == {"name", "family", "before", "after"} for k in out["kernels"]["appeared"])
    assert out["speedup_as_traced"] == pytest.approx(out["before"]["step_us"] / out["after"]["step_us"])


def test_cli_diff_text(capsys):
    assert (
        main([str(HF / "hf_llama_eager_sync.json.gz"), str(HF / "hf_llama_compile.json.gz"), "--diff"]) == 0
    )
    text = capsys.readouterr().out
    assert (
        text.startswith("before: hf_llama_eager_sync.json.gz")
        and "\nafter:  hf_llama_compile.json.gz" in text
    )
    assert "Triton generated" in text and "merged (" in text and "appeared (" in text
    assert "what-ifs" not in text  # a diff, not two rank reports


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (["hf_llama_graph.json.gz"], "give two files"),
        (["hf_llama_graph.json.gz", "hf_llama_compile.json.gz", "hf_llama_graph.json.gz"], "give two files"),
        (["hf_llama_graph.json.gz", "missing.json"], "no such file"),
        (["hf_llama_graph.json.gz", "cpu_only_eager_sync.json.gz"], "CPU-only"),
    ],
)
def test_cli_diff_bad_input_exits_2_with_one_sentence(files, message):
    run = subprocess.run(
        [sys.executable, "-m", "sim", "trace", *(str(HF / f) for f in files), "--diff"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 2 and message in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
