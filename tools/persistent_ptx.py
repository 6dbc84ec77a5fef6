"""Compile the persistent decode-step kernel for a Hopper GPU on any machine (no GPU needed) and report
what the compiler made of it: registers, spills, shared memory, compile time, and counts of the PTX
instructions that matter (16-byte loads, shuffles, CTA barriers, bulk L2 prefetches, tensor-core MMAs).

    python tools/persistent_ptx.py [--preset 1b] [--batch 1 2 4 8] [--warps 8] [--rows 8] [--tile 16384]
                                   [--prefetch 2] [--trace] [--dump DIR]

Uses Triton's own ptxas (`triton/backends/nvidia/bin/ptxas -v`). Run it without TRITON_INTERPRET.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from gpu_probe.config import get_config
from gpu_probe.kernels import persistent as pk
from gpu_probe.kernels import persistent_kernel as pkk

# Argument name -> Triton type (the kernel's runtime arguments, in order).
POINTERS = {
    "ids_ptr": "*i64",
    "pos_ptr": "*i64",
    "table_ptr": "*i32",
    "slot_ptr": "*i64",
    "ctx_ptr": "*i32",
    "cos_ptr": "*fp32",
    "sin_ptr": "*fp32",
    "part_ptr": "*fp32",
    "lse_ptr": "*fp32",
    "state_ptr": "*i64",
    "trace_ptr": "*i64",
}
MODEL_POINTERS = ("emb_ptr", "w_qkv_ptr", "w_o_ptr", "w_gate_up_ptr", "w_down_ptr", "w_lm_ptr", "kv_ptr")
MODEL_POINTERS += ("h_ptr", "qkv_ptr", "act_ptr", "logits_ptr", "xs_ptr")
SCALARS = {"eps": "fp32", "qk_scale": "fp32"}


def compile_step(cfg, config: pk.PersistentConfig, batch: int, programs: int, trace: bool):
    """triton.compile of the kernel as the decoder would launch it on an H200 (sm_90)."""
    lay = pk.step_layout(cfg, config, programs, batch)
    dtype = getattr(torch, cfg.dtype)
    consts = pk.kernel_constexprs(cfg, config, lay, dtype, hopper=True, ptx=True, trace=trace)
    options = {"num_warps": consts.pop("num_warps"), "num_stages": consts.pop("num_stages")}
    model_ty = {"bfloat16": "*bf16", "float16": "*fp16", "float32": "*fp32"}[cfg.dtype]
    fn = pkk._decode_step_kernel
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in consts:
            signature[name] = "constexpr"
        elif name in POINTERS or name in MODEL_POINTERS:
            signature[name] = POINTERS.get(name, model_ty)
            attrs[(i,)] = [["tt.divisibility", 16]]  # allocations are 256-byte aligned
        else:
            signature[name] = SCALARS.get(name, "i32")
    for name in ("stride_logits", "kv_stride_layer", "kv_stride_kv", "kv_stride_slot"):  # multiples of 16
        attrs[(fn.arg_names.index(name),)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=fn, signature=signature, constexprs=consts, attrs=attrs)
    t0 = time.perf_counter()
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    return lay, compiled, time.perf_counter() - t0


def ptxas_report(ptx: str) -> dict:
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.ptx"
        path.write_text(ptx)
        out = subprocess.run(
            [str(ptxas), "-arch=sm_90a", "-v", str(path), "-o", str(Path(tmp) / "k.cubin")],
            capture_output=True,
            text=True,
        )
    text = out.stdout + out.stderr
    regs = re.search(r"Used (\d+) registers", text)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    stack = re.search(r"(\d+) bytes stack frame", text)
    return {
        "registers": int(regs.group(1)) if regs else None,
        "spill_stores": int(spill.group(1)) if spill else None,
        "spill_loads": int(spill.group(2)) if spill else None,
        "stack_frame": int(stack.group(1)) if stack else None,
    }


def instruction_counts(ptx: str) -> dict:
    patterns = {
        "ld.global.v4 (16 B)": r"ld\.global(\.\w+)*\.v4\.b32",
        "ld.global other": r"ld\.global(?!(\.\w+)*\.v4)",
        "shfl": r"shfl\.sync",
        "bar.sync": r"bar\.sync",
        "l2 bulk prefetch": r"cp\.async\.bulk\.prefetch",
        "mma": r"mma\.sync|wgmma",
        "atom": r"atom\.",
    }
    return {name: len(re.findall(pat, ptx)) for name, pat in patterns.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="1b")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--programs", type=int, default=132)
    p.add_argument("--warps", type=int, default=8)
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--tile", type=int, default=16384)
    p.add_argument("--prefetch", type=int, default=65536)
    p.add_argument("--trace", action="store_true")
    p.add_argument("--dump", default=None, help="write each kernel's ttgir and ptx here")
    args = p.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("unset TRITON_INTERPRET: this compiles for a GPU", file=sys.stderr)
        return 2
    cfg = get_config(args.preset)
    config = pk.PersistentConfig(
        num_warps=args.warps,
        rows_per_block=args.rows,
        tile_elements=args.tile,
        prefetch_bytes=args.prefetch,
    )
    print(f"{args.preset}: {config.describe()}")
    for batch in args.batch:
        lay, compiled, seconds = compile_step(cfg, config, batch, args.programs, args.trace)
        ptx = compiled.asm["ptx"]
        report = ptxas_report(ptx)
        per_sm = pk.co_resident_blocks_per_sm(
            report["registers"] or 255, compiled.metadata.shared, args.warps
        )
        print(
            f"batch {batch}: {lay} | compile {seconds:.1f} s | {report} | shared {compiled.metadata.shared} B | "
            f"{per_sm} program(s)/SM | PTX {len(ptx.splitlines())} lines | {instruction_counts(ptx)}"
        )
        if args.dump:
            out = Path(args.dump)
            out.mkdir(parents=True, exist_ok=True)
            for kind in ("ttgir", "ptx"):
                (out / f"persistent_{args.preset}_b{batch}.{kind}").write_text(compiled.asm[kind])
    return 0


if __name__ == "__main__":
    sys.exit(main())
