"""Trace fuzz: valid profiler traces with one thing wrong each, through everything that reads a trace.

    python tests/hostile_trace_fuzz.py                # every variant: reader, what-ifs, lanes, CLI report
    python tests/hostile_trace_fuzz.py --cli 200      # and the first 200 through `python -m sim trace` in-process
    python tests/hostile_trace_fuzz.py --page 40      # and 40 (spread over the list) uploaded to the page
    python tests/hostile_trace_fuzz.py --skip-reader --page 40   # the page only

A variant is a base trace (synthetic steps marked by ProfilerStep#N with copies, foldable kernels and
shapes; a replayed CUDA graph; two real traces from tests/data) with one mutation: a field of some of
its events set to a hostile value (missing, null, NaN, ±Infinity, 1e300, 400 digits, negative, a string,
a list, a bool, 2**63), or a structural change (records dropped as the profiler drops them under load,
duplicate correlation ids, kernels before their launch, overlapping and nested steps, shuffled or
doubled events). The answer must be a report or one TraceError sentence, never an exception, and every
step must give lanes, what-ifs, a kernel table and strict JSON.

tests/test_hostile_trace_fuzz.py runs a fixed sample of these; this script runs them all (minutes).
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HUGE = 10**400
VALUES = {
    "missing": ...,
    "null": None,
    "nan": float("nan"),
    "inf": float("inf"),
    "-inf": float("-inf"),
    "1e300": 1e300,
    "400digits": HUGE,
    "-400digits": -HUGE,
    "negative": -1_000_000,
    "zero": 0,
    "string": "soon",
    "numeric_string": "12",
    "list": [1],
    "dict": {"a": 1},
    "true": True,
    "2pow63": 2**63,
}
FIELDS = (
    "ts",
    "dur",
    "name",
    "cat",
    "ph",
    "pid",
    "tid",
    "args",
    "args.correlation",
    "args.stream",
    "args.device",
)
TARGETS = {  # which events a field mutation hits
    "kernel": lambda e: e.get("cat") == "kernel",
    "launch": lambda e: e.get("cat") == "cuda_runtime",
    "range": lambda e: e.get("cat") in ("cpu_op", "user_annotation"),
    "memcpy": lambda e: e.get("cat") == "gpu_memcpy",
}
SUBSETS = {  # of the events a target matches
    "first": lambda rows: rows[:1],
    "first40": lambda rows: rows[:40],
    "all": lambda rows: rows,
    "every_other": lambda rows: rows[::2],
}


# -- base traces -----------------------------------------------------------------------------------
def _x(cat, name, ts, dur, pid=1, tid=1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


_KERNELS = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>()",
    "rms_norm_kernel",
    "nvjet_tst_64x8_64x16_4x1_v_bz_TNT",
    "void at::native::unrolled_elementwise_kernel<at::native::silu>()",
    "flash_fwd_splitkv_kernel",
    "triton_poi_fused_mul_0",
)


def profiled_steps(steps: int = 4, kernels: int = 48) -> list[dict]:
    """Eager decode steps marked by ProfilerStep#N: an input copy, kernels (a few foldable, shapes recorded),
    the sampled token copied back, each launch correlated with its GPU event."""
    events, corr, t = [], 1, 1_000.0
    for step in range(steps):
        span = 12.0 * (kernels + 2) + 40
        events.append(_x("cpu_op", f"ProfilerStep#{step + 3}", t, span))
        launches = [("cudaMemcpyAsync", "Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 64)]
        launches += [("cudaLaunchKernel", _KERNELS[k % len(_KERNELS)], "kernel", 0) for k in range(kernels)]
        launches.append(("cudaMemcpyAsync", "Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 8))
        for k, (api, name, cat, size) in enumerate(launches):
            at = t + 5 + 12.0 * k
            events.append(
                _x(
                    "cpu_op",
                    "aten::add",
                    at - 2,
                    8,
                    **{"External id": corr, "Input Dims": [[1, 2048]], "Input type": ["c10::BFloat16"]},
                )
            )
            events.append(_x("cuda_runtime", api, at, 5.0, correlation=corr, **{"External id": corr}))
            args = {"correlation": corr, "stream": 7, "device": 0, "External id": corr}
            if size:
                args["bytes"] = size
            events.append(_x(cat, name, at + 7, 4.0, pid=0, tid=7, **args))
            corr += 1
        t += span + 100
    return events


def graph_replays(steps: int = 4, kernels: int = 40) -> list[dict]:
    """A captured step replayed: input copies, one cudaGraphLaunch whose kernels share its correlation id."""
    events, corr, t = [], 1, 5_000.0
    for _ in range(steps):
        events.append(_x("cuda_runtime", "cudaMemcpyAsync", t, 4.0, correlation=corr))
        events.append(
            _x(
                "gpu_memcpy",
                "Memcpy HtoD (Pageable -> Device)",
                t + 5,
                2.0,
                pid=0,
                tid=7,
                correlation=corr,
                stream=7,
                bytes=8,
            )
        )
        corr += 1
        events.append(_x("cuda_runtime", "cudaGraphLaunch", t + 10, 15.0, correlation=corr))
        for k in range(kernels):
            name = _KERNELS[k % len(_KERNELS)]
            events.append(
                _x("kernel", name, t + 20 + 6.0 * k, 5.0, pid=0, tid=7, correlation=corr, stream=7, device=0)
            )
        corr += 1
        events.append(_x("cuda_runtime", "cudaStreamSynchronize", t + 20 + 6.0 * kernels, 3.0))
        t += 6.0 * kernels + 200
    return events


def _real(path: str) -> Callable[[], list[dict]]:
    def load() -> list[dict]:
        with gzip.open(ROOT / path) if path.endswith(".gz") else open(ROOT / path, "rb") as f:
            return json.load(f)["traceEvents"]

    return load


FIELD_MUTATED = (
    "steps",
    "graph",
    "probe_eager",
)  # the real Hugging Face trace takes structural ones only (slow)
BASES: dict[str, Callable[[], list[dict]]] = {
    "steps": profiled_steps,
    "graph": graph_replays,
    "probe_eager": _real("tests/data/probe_trace_tiny_eager_b1.json"),
    "hf_graph": _real("data/traces/hf/hf_llama_graph.json.gz"),
}


# -- mutations -----------------------------------------------------------------------------------------
def _set(event: dict, field: str, value) -> None:
    target = event
    if field.startswith("args."):
        if not isinstance(event.get("args"), dict):
            event["args"] = {}
        target, field = event["args"], field[5:]
    if value is ...:
        target.pop(field, None)
    else:
        target[field] = copy.deepcopy(value)


def field_mutation(target: str, subset: str, field: str, value_name: str) -> Callable[[list], list]:
    def mutate(events: list) -> list:
        rows = [i for i, e in enumerate(events) if isinstance(e, dict) and TARGETS[target](e)]
        for i in SUBSETS[subset](rows):
            _set(events[i], field, VALUES[value_name])
        return events

    return mutate


def _drop(kind: str, count: int | None = None, share: float | None = None) -> Callable[[list], list]:
    """Records dropped as the profiler drops them under load: the first `count` of a kind, or a share at random."""

    def mutate(events: list) -> list:
        rows = [i for i, e in enumerate(events) if isinstance(e, dict) and TARGETS[kind](e)]
        gone = set(rows[:count]) if count else set(random.Random(1).sample(rows, int(len(rows) * share)))
        return [e for i, e in enumerate(events) if i not in gone]

    return mutate


def _shift(kind: str, us: float) -> Callable[[list], list]:
    def mutate(events: list) -> list:
        for e in events:
            if isinstance(e, dict) and TARGETS[kind](e) and isinstance(e.get("ts"), (int, float)):
                e["ts"] += us
        return events

    return mutate


def _duplicate_correlations(events: list) -> list:
    """Every correlation id taken modulo 5: kernels of many launches claim the same five calls."""
    for e in events:
        args = e.get("args") if isinstance(e, dict) else None
        if isinstance(args, dict) and isinstance(args.get("correlation"), int):
            args["correlation"] %= 5
    return events


def _overlapping_steps(events: list) -> list:
    """Each step range stretched over the next one."""
    for e in events:
        if isinstance(e, dict) and TARGETS["range"](e) and "Step" in str(e.get("name")):
            e["dur"] = e["dur"] * 3
    return events


def _nested_steps(events: list) -> list:
    """A second ProfilerStep range inside each one, and one with no launches at the end."""
    out = list(events)
    for e in events:
        if isinstance(e, dict) and TARGETS["range"](e) and "Step" in str(e.get("name")):
            out.append(dict(e, ts=e["ts"] + 10, dur=e["dur"] / 3, name="ProfilerStep#999"))
    out.append(_x("cpu_op", "ProfilerStep#1000", 9e9, 10))
    return out


def _zero_length_steps(events: list) -> list:
    for e in events:
        if isinstance(e, dict) and TARGETS["range"](e):
            e["dur"] = 0
    return events


def _one_stream_per_kernel(events: list) -> list:
    for i, e in enumerate(events):
        if isinstance(e, dict) and TARGETS["kernel"](e):
            e["args"]["stream"] = 10**6 + i
    return events


def _kernels_only_range_launches(events: list) -> list:
    """Launches renamed to a call the reader does not know: only the correlation ids tie them to kernels."""
    for e in events:
        if isinstance(e, dict) and TARGETS["launch"](e):
            e["name"] = "cudaSomethingNew"
    return events


STRUCTURAL: dict[str, Callable[[list], list]] = {
    "drop_first_40_kernels": _drop("kernel", count=40),
    "drop_first_40_launches": _drop("launch", count=40),
    "drop_first_400_kernels": _drop("kernel", count=400),
    "drop_30pct_kernels": _drop("kernel", share=0.3),
    "drop_30pct_launches": _drop("launch", share=0.3),
    "drop_all_ranges": _drop("range", share=1.0),
    "drop_all_memcpys": _drop("memcpy", share=1.0),
    "kernels_before_launch": _shift("kernel", -500.0),
    "kernels_far_after": _shift("kernel", 1e9),
    "launches_far_before": _shift("launch", -1e12),
    "ranges_shifted": _shift("range", 37.0),
    "duplicate_correlations": _duplicate_correlations,
    "overlapping_steps": _overlapping_steps,
    "nested_steps": _nested_steps,
    "zero_length_steps": _zero_length_steps,
    "stream_per_kernel": _one_stream_per_kernel,
    "unknown_launch_api": _kernels_only_range_launches,
    "shuffled": lambda ev: random.Random(2).sample(ev, len(ev)),
    "reversed": lambda ev: ev[::-1],
    "doubled": lambda ev: ev + copy.deepcopy(ev),
    "non_dict_events": lambda ev: [1, "x", None, [], *ev],
}


def variants(bases=None) -> Iterator[tuple[str, Callable[[], bytes]]]:
    """(name, make bytes) for every base × mutation."""
    for base in bases or BASES:
        mutations = dict(STRUCTURAL)
        for target in TARGETS if base in FIELD_MUTATED else ():
            for field in FIELDS:
                for value in VALUES:
                    for subset in SUBSETS:
                        mutations[f"{target}.{field}={value}@{subset}"] = field_mutation(
                            target, subset, field, value
                        )
        for name, mutate in mutations.items():
            yield f"{base}/{name}", _maker(base, mutate)


_BASE_EVENTS: dict[str, list] = {}


def _maker(base: str, mutate) -> Callable[[], bytes]:
    def make() -> bytes:
        if base not in _BASE_EVENTS:
            _BASE_EVENTS[base] = BASES[base]()
        events = mutate(copy.deepcopy(_BASE_EVENTS[base]))
        trace = {"deviceProperties": [{"id": 0, "name": "NVIDIA Fuzz GPU"}], "traceEvents": events}
        return json.dumps(trace).encode()  # NaN / Infinity tokens written on purpose

    return make


# -- the checks ----------------------------------------------------------------------------------------------
def check(name: str, data: bytes) -> tuple[str, str]:
    """('read' | 'refused', detail) -- or ('problem', what broke) where anything raised or an answer is malformed."""
    from core.trace import TraceError, analyse
    from sim.trace.report import format_report, to_json
    from sim.trace.whatif import default_replay_cost

    try:
        report = analyse(data, name=name)
    except TraceError as err:
        text = str(err)
        if "\n" in text or len(text) >= 600:
            return "problem", f"refusal is not one short line: {text[:200]!r}"
        return "refused", text
    except Exception:
        return "problem", traceback.format_exc()[-1500:]
    try:
        cost = default_replay_cost()
        # Plotly's own validation of the finished figure dict is most of the time and none of the risk: skipped.
        with mock.patch("ui.charts._figure", lambda traces, layout: (traces, layout)):
            _draw_every_step(report, cost)
        format_report([report], cost)
        json.dumps(to_json([report], cost), allow_nan=False)
    except Exception:
        return "problem", traceback.format_exc()[-1500:]
    return "read", f"{len(report.steps)} steps, {len(report.notes())} notes"


def _draw_every_step(report, cost) -> None:
    from core.trace.kernels import kernel_table
    from sim.trace.whatif import whatifs
    from ui.charts import lanes_figure

    for step in report.steps:
        outs = whatifs(step, cost)
        for whole in (False, True):
            lanes_figure(step.timeline, whole_step=whole)
            for w in outs.values():
                lanes_figure(step.timeline, w.timeline, whole_step=whole)
        kernel_table(report, step.index)
        step.launch_delay()


def run_cli(path: Path, *flags: str) -> tuple[int, str]:
    """`python -m sim trace PATH [flags]` in-process: (exit code, stderr); a traceback is rc -1."""
    from sim.__main__ import main

    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict") for _ in range(2))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(["trace", str(path), *flags])
            out.flush()
        except SystemExit as exit_:
            rc = exit_.code if isinstance(exit_.code, int) else 1
        except BaseException:
            return -1, traceback.format_exc()[-1500:]
    err.flush()
    if rc == 0 and "--json" in flags:
        json.loads(out.buffer.getvalue(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    return rc, err.buffer.getvalue().decode("utf-8", "replace")


def main(argv: list[str]) -> int:
    import tempfile

    n_cli = int(argv[argv.index("--cli") + 1]) if "--cli" in argv else 0
    n_page = int(argv[argv.index("--page") + 1]) if "--page" in argv else 0
    started, counts, problems = time.perf_counter(), {"read": 0, "refused": 0, "problem": 0}, []
    every = list(variants())
    for name, make in every if "--skip-reader" not in argv else ():
        outcome, detail = check(name, make())
        counts[outcome] += 1
        if outcome == "problem":
            problems.append((name, detail))
            print(f"PROBLEM {name}\n{detail}", flush=True)
    print(f"{len(every):,} variants: {counts} in {time.perf_counter() - started:.0f} s", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        cli_problems = 0
        for name, make in every[:: max(len(every) // max(n_cli, 1), 1)][:n_cli]:
            path = Path(folder) / "fuzz.json"
            path.write_bytes(make())
            for flags in ((), ("--json",)):
                rc, err = run_cli(path, *flags)
                if rc not in (0, 2) or (rc == 2 and len(err.strip().splitlines()) != 1):
                    cli_problems += 1
                    print(f"CLI PROBLEM {name} {flags}: rc {rc}\n{err}", flush=True)
        if n_cli:
            print(f"CLI: {n_cli} variants, text and --json: {cli_problems} problems", flush=True)
    if n_page:
        # Every structural variant of the synthetic bases, and `n_page` field variants spread over the rest.
        structural = [(n, m) for n, m in every if n.split("/")[0] in ("steps", "graph") and "=" not in n]
        spread = [(n, m) for n, m in every if "=" in n][:: max(len(every) // n_page, 1)][:n_page]
        page_problems = upload_to_page(structural + spread)
        print(f"page: {len(structural) + len(spread)} uploads: {len(page_problems)} problems", flush=True)
        for name, what in page_problems:
            print(f"PAGE PROBLEM {name}: {what}", flush=True)
    return 1 if problems else 0


def upload_to_page(cases: list[tuple[str, Callable[[], bytes]]]) -> list[tuple[str, str]]:
    """Each case uploaded to the "Your trace" tab of one AppTest page, drawn as a visitor first sees it (the
    first launches) with the graphs what-if: (name, what went wrong) for each exception."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params.update(tab="Your trace", tr_whatif="with CUDA graphs")
    at.run()
    out = []
    for name, make in cases:
        uploader = next(u for u in at.file_uploader if u.key and u.key.startswith("tr_upload_"))
        uploader.set_value([(name.replace("/", "_") + ".json", make(), "application/json")]).run()
        if at.exception:
            out.append((name, at.exception[0].message))
            at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
            at.query_params.update(tab="Your trace", tr_whatif="with CUDA graphs")
            at.run()
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
