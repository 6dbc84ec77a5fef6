"""How soon "Measure on this GPU" answers, against the CLI measuring the same (a GPU; issue 39 item 5's goals).

    python bench/live_first_answer.py                      # small, batches 1 8 64 256, every mode
    python bench/live_first_answer.py --batch 1 8          # fewer batches, both sides alike

In one process: (a) the page's path through AppTest, timed from the click on "Measure on this GPU" (the toggle
set on the loaded probe tab) to the first measured lanes drawn (batch 1's eager and fused+graph steps) and to the
whole measurement on the page; (b) `python -m gpu_probe --preset small --batch ... --modes ...` as a subprocess for
the same batches and modes (its interpreter start and imports included, as a reader running it would wait for
them). Printed: both, and the page's whole time over the CLI's. Goals, reported and never asserted: the first
lanes within 30 s, the whole page no slower than the CLI.

Compiled kernels decide much of both times, so the order is stated, not left to chance: by default the bench
points Triton's and Inductor's caches (TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR) at fresh directories for
itself and the CLI, runs the page first, cold, as on a fresh machine, and the CLI second, warm on the kernels the
page compiled: a ratio that favours the CLI. --cli-first reverses it (the CLI cold, the page warm); --keep-caches
uses the caches as they are (~/.triton/cache, /tmp/torchinductor_$USER: whatever earlier runs left there).
Without CUDA (or without streamlit) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIRST_LANES_GOAL_S = 30.0
BATCHES = (1, 8, 64, 256)


def _say(line: str) -> None:
    print(line, flush=True)


def time_page(batches: list[int], modes: list[str]) -> dict:
    """The page's path: the probe tab loaded, then the click; seconds to the first lanes and to the whole."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    import ui.probe.tab as tab
    from ui.probe import live as probe_live

    probe_live.LIVE_BATCHES = tuple(batches)
    probe_live.LIVE_MODES = None if modes == ["all"] else tuple(modes)
    marks: dict = {}
    first_answer = tab._first_answer

    def noted(result, done, total):
        first_answer(result, done, total)
        marks.setdefault("first", (time.perf_counter(), sorted((r.mode, r.batch) for r in result.runs)))
        marks["parts"] = total

    tab._first_answer = noted
    st.cache_resource.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=1800)
    at.query_params["tab"] = "Live GPU probe"
    at.run()
    if at.exception:
        raise RuntimeError(f"the probe tab did not load: {at.exception[0].message}")
    start = time.perf_counter()
    at.toggle(key="pr_live").set_value(True).run()  # the click: runs until the page has the whole run
    whole = time.perf_counter() - start
    tab._first_answer = first_answer
    label = at.status[0].proto.label if at.status else "no status"
    out = {
        "whole_s": whole,
        "status": label,
        "errors": [e.body for e in at.error] + [e.message for e in at.exception],
        "parts": marks.get("parts"),
    }
    if "first" in marks:
        out["first_s"], out["first_runs"] = marks["first"][0] - start, marks["first"][1]
    st.cache_resource.clear()  # the page's model and graphs go before the CLI's are built
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()
    return out


def time_cli(batches: list[int], modes: list[str], out_dir: Path) -> dict:
    command = [sys.executable, "-m", "gpu_probe", "--preset", "small", "--batch", *map(str, batches)]
    command += ["--modes", *modes, "--out", str(out_dir / "cli.json")]
    log = out_dir / "cli_stderr.txt"
    start = time.perf_counter()
    with log.open("w") as err:
        code = subprocess.run(command, cwd=ROOT, stderr=err, stdout=subprocess.DEVNULL).returncode
    seconds = time.perf_counter() - start
    tail = log.read_text(errors="replace").splitlines()[-5:]
    return {"s": seconds, "code": code, "command": " ".join(command[1:]), "tail": tail}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, nargs="+", default=list(BATCHES))
    p.add_argument("--modes", nargs="+", default=["all"])
    p.add_argument("--cli-first", action="store_true", help="the CLI cold first, then the page warm")
    p.add_argument("--keep-caches", action="store_true", help="Triton's and Inductor's caches as they are")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="live-first-answer-") as tmp:
        tmp = Path(tmp)
        # The page's background fit of the shipped run (ui/calibration_cache.py) would share the CPU with the
        # measurement here, where the click comes right after the page loads; on a server it has long finished.
        os.environ.setdefault("LAUNCH_BOUND_NO_PREFIT", "1")
        if not args.keep_caches:  # before torch or triton is imported, and inherited by the CLI and workers
            os.environ["TRITON_CACHE_DIR"] = str(tmp / "triton")
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "inductor")
        try:
            import torch
        except ImportError:
            _say("live_first_answer: torch is not installed; this bench needs a GPU. Nothing measured.")
            return 0
        if not torch.cuda.is_available():
            _say("live_first_answer: no CUDA device; this bench needs a GPU. Nothing measured.")
            return 0
        try:
            import streamlit  # noqa: F401
        except ImportError:
            _say(
                "live_first_answer: streamlit is not installed (carry its wheels: docs/benchmarks.md). Nothing measured."
            )
            return 0
        caches = "as they were" if args.keep_caches else "fresh for this bench"
        first, second = ("CLI", "page") if args.cli_first else ("page", "CLI")
        _say(
            f"live_first_answer: small, batches {' '.join(map(str, args.batch))}, modes {' '.join(args.modes)}, on "
            f"{torch.cuda.get_device_name()}; Triton/Inductor caches {caches}: the {first} ran first"
            + ("" if args.keep_caches else f" (cold), the {second} second (warm on the {first}'s kernels)")
        )
        results = {}
        for side in (first, second):
            if side == "page":
                results["page"] = page = time_page(args.batch, args.modes)
                first_s = page.get("first_s")
                _say(
                    f"page: first measured lanes {first_s:.1f} s after the click ({', '.join(f'{m} b{b}' for m, b in page['first_runs'])}; "
                    f"goal <= {FIRST_LANES_GOAL_S:.0f} s: {'met' if first_s <= FIRST_LANES_GOAL_S else 'missed'})"
                    if first_s is not None
                    else "page: no first answer was drawn (a run of one part, or it stopped)"
                )
                _say(
                    f"page: the whole measurement {page['whole_s']:.1f} s in {page['parts']} parts; status '{page['status']}'"
                )
                for error in page["errors"]:
                    _say(f"page: error shown: {error[:300]}")
            else:
                results["cli"] = cli = time_cli(args.batch, args.modes, tmp)
                _say(f"cli: {cli['s']:.1f} s, exit code {cli['code']}: python {cli['command']}")
                if cli["code"]:
                    _say("cli: its last lines: " + " | ".join(cli["tail"]))
        ratio = results["page"]["whole_s"] / results["cli"]["s"]
        _say(
            f"page / cli: {ratio:.2f} (goal <= 1: {'met' if ratio <= 1 else 'missed'}; the {first} ran "
            f"{'first' if args.keep_caches else 'cold'})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
