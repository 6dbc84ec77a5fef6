"""The tensor-parallel probe's result file: loading with checks, torch-free.

`gpu_probe/tensor_parallel.py` (`torchrun --nproc-per-node 2 -m gpu_probe --tp 2 ...`) writes it,
through `tp_result_record` and `rank_record` there; this module reads it with the standards of
`core.probe_result`: every field type- and range-checked, `ValueError` naming the field
(`ranks[1].runs[3].step_us_p90: ...`), bounded sizes (ranks, runs, sweep rows, timelines' lengths,
strings). A rank's runs are the single-GPU probe's run records (`gpu_probe.measure.run_record`),
so they are checked by the same parser as a single-GPU result's.

NO TWO-GPU RUN EXISTS YET: the format is what the code writes, tested on CPU
(tests/test_tensor_parallel.py builds a result with the writer's own functions).

Layout of the JSON (times in microseconds, sizes in bytes):

    schema: 1, kind: "tensor_parallel", tp            tp ranks, one process per GPU
    preset: {name, n_layers, hidden, ...}              the unsharded model's ProbeModelConfig
    command, created (ISO 8601), torch, cuda, nccl     strings
    batches, modes, buckets                            what was asked for (modes: some of tp_modes())
    ranks: [{rank, device, runs, checks,               per rank, in rank order
             allreduce: [{bytes, eager_us_per_call, graph_us_per_call}],   the sweep, by size
             allreduce_bytes_per_row}]                 one all-reduce's message per batch row
    tp1_runs: [...]                                    the unsharded model on rank 0's GPU (TP1)
    all_checks_passed, wall_s
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np

from core import probe_result, step_plan
from core.probe_result import parse_config, parse_run  # one set of rules for a run record
from core.result_fields import bounded_block, number_field, read_json

KIND = "tensor_parallel"
SCHEMA_VERSION = 1


def tp_modes() -> tuple[str, ...]:
    """What a TP run measures (gpu_probe.tensor_parallel): every mode the probe runs whose kernel set a rank's
    shard of the model runs (`step_plan.SHARDED_KERNEL_SETS`)."""
    return step_plan.names(
        m for m in step_plan.modes(probed=True) if m.kernels in step_plan.SHARDED_KERNEL_SETS
    )


MAX_RANKS = 8
MAX_RUNS = probe_result.MAX_RUNS  # per rank, and for the TP1 baseline
MAX_RUNS_TOTAL = 256  # over all ranks and the baseline: the timelines one file can make the page build
MAX_SWEEP = 64  # all-reduce sizes per rank
MAX_LIST = 64  # batches, buckets
MAX_STRING = probe_result.MAX_STRING
MAX_HEADER_STRING = probe_result.MAX_HEADER_STRING
_MAX_US = 1e7
_MAX_CALL_US = 1e6  # one all-reduce call: a second is not a measurement
_MAX_BATCH = 65536
_MAX_MESSAGE = 2**34
LIMITS = (
    f"up to {probe_result.MAX_RESULT_BYTES // 2**20} MB, {MAX_RANKS} ranks, {MAX_RUNS} runs a rank "
    f"({MAX_RUNS_TOTAL} in all) and {MAX_SWEEP} all-reduce sizes a rank."
)


@dataclass(frozen=True, slots=True)
class AllReducePoint:
    """One message size of the sweep: time per call, eager and captured in a CUDA graph."""

    bytes: int
    eager_us_per_call: float
    graph_us_per_call: float


@dataclass(frozen=True, slots=True)
class TPRank:
    rank: int
    device: str
    runs: tuple  # ProbeRun, one per (mode, batch): this rank's share of a TP step, profiled
    checks: dict
    allreduce: tuple[AllReducePoint, ...]
    allreduce_bytes_per_row: int

    def run(self, mode: str, batch: int):
        return next((r for r in self.runs if r.mode == mode and r.batch == batch), None)


@dataclass(frozen=True, slots=True)
class TPResult:
    tp: int
    preset: dict
    command: str
    created: str
    torch: str
    cuda: str
    nccl: str
    batches: tuple[int, ...]
    modes: tuple[str, ...]
    buckets: tuple[int, ...]
    ranks: tuple[TPRank, ...]
    tp1_runs: tuple  # ProbeRun: the unsharded model, rank 0's GPU
    all_checks_passed: bool
    wall_s: float

    @property
    def device(self) -> str:
        """'2 × NVIDIA H200': the GPUs of the run (named one by one where they differ)."""
        names = [r.device for r in self.ranks]
        same = len(set(names)) == 1
        return f"{self.tp} × {names[0]}" if same else " + ".join(names)

    def run(self, rank: int, mode: str, batch: int):
        return self.ranks[rank].run(mode, batch)

    def tp_step_us(self, mode: str, batch: int) -> float | None:
        """Median step time of the TP group: the slowest rank's (every rank waits in each all-reduce)."""
        times = [r.step_us_median for rank in self.ranks if (r := rank.run(mode, batch)) is not None]
        return max(times) if times else None

    def tp1_step_us(self, mode: str, batch: int) -> float | None:
        run = next((r for r in self.tp1_runs if r.mode == mode and r.batch == batch), None)
        return run.step_us_median if run is not None else None

    def sweep(self, captured: bool) -> tuple[np.ndarray, np.ndarray]:
        """(bytes, µs per call) of every rank's sweep points, eager or captured."""
        points = [p for rank in self.ranks for p in rank.allreduce]
        us = [p.graph_us_per_call if captured else p.eager_us_per_call for p in points]
        return np.array([p.bytes for p in points], np.float64), np.array(us, np.float64)

    def checks(self) -> list[tuple[int, str, dict]]:
        """(rank, name, check) of every rank's checks, in rank order."""
        return [(rank.rank, name, check) for rank in self.ranks for name, check in rank.checks.items()]


# -- loading -----------------------------------------------------------------------
def is_tp_data(data) -> bool:
    return isinstance(data, dict) and data.get("kind") == KIND


def load_tp_result(source, timeline_source: str = "measured") -> TPResult:
    """Parse and check a TP result (path, bytes, file-like or dict); `ValueError` names the first bad field."""
    data = read_json(source)
    if not is_tp_data(data):
        raise ValueError(f'kind: a tensor-parallel result has "kind": "{KIND}"')
    return _parse(data, timeline_source)


def load_any_result(source, timeline_source: str | None = None):
    """A TP result (`TPResult`) or a single-GPU one (`core.probe_result.ProbeResult`), read once."""
    data = probe_result.result_object(read_json(source))
    if is_tp_data(data):
        return _parse(data, timeline_source or "measured")
    return probe_result.load_result(data, timeline_source=timeline_source)


def _parse(d: dict, timeline_source: str) -> TPResult:
    schema = d.get("schema")
    if isinstance(schema, bool) or schema != SCHEMA_VERSION:
        raise ValueError(f"schema: this app reads version {SCHEMA_VERSION} TP result files, got {schema!r}")
    tp = _int(d, "tp", 2, MAX_RANKS)
    preset = d.get("preset")
    if not isinstance(preset, dict):
        raise ValueError("preset: expected an object")
    n_layers = _parse_config_as(preset)
    strings = {k: _str(d, k, MAX_STRING if k == "command" else MAX_HEADER_STRING) for k in _STRINGS}
    try:
        datetime.fromisoformat(strings["created"].replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("created: must be an ISO 8601 date and time") from None
    batches = _ints(d, "batches", 1, _MAX_BATCH, nonempty=True)
    buckets = _ints(d, "buckets", 1, _MAX_BATCH, nonempty=False)
    modes = d.get("modes")
    allowed = tp_modes()
    if not isinstance(modes, list) or not modes or len(modes) > len(allowed):
        raise ValueError(f"modes: expected a list of some of {allowed}")
    if any(m not in allowed for m in modes) or len(set(modes)) != len(modes):
        raise ValueError(f"modes: each must be one of {allowed}, once")
    max_kernels = probe_result.MAX_KERNELS_PER_LAYER * n_layers + probe_result.MAX_KERNELS_OUTSIDE_LAYERS
    raw_ranks = _seq(d, "ranks", MAX_RANKS)
    if len(raw_ranks) != tp:
        raise ValueError(f"ranks: {len(raw_ranks)} entries for tp {tp}: expected one per rank")
    tp1 = _seq(d, "tp1_runs", MAX_RUNS)
    total = len(tp1) + sum(len(r.get("runs", ())) for r in raw_ranks if isinstance(r, dict))
    if total > MAX_RUNS_TOTAL:
        raise ValueError(f"ranks: {total:,} runs in all, more than the {MAX_RUNS_TOTAL} a result may hold")
    context = (tuple(modes), set(batches), timeline_source, max_kernels)
    ranks = tuple(_parse_rank(r, i, context) for i, r in enumerate(raw_ranks))
    tp1_runs = _parse_runs(tp1, "tp1_runs", context)
    passed = d.get("all_checks_passed")
    if not isinstance(passed, bool):
        raise ValueError("all_checks_passed: expected true or false")
    if passed != all(c["passed"] for rank in ranks for c in rank.checks.values()):
        raise ValueError("all_checks_passed: disagrees with the ranks' checks")
    return TPResult(
        tp=tp,
        preset=preset,
        batches=tuple(batches),
        modes=tuple(modes),
        buckets=tuple(buckets),
        ranks=ranks,
        tp1_runs=tp1_runs,
        all_checks_passed=passed,
        wall_s=number_field(d, "wall_s", 0, _MAX_US),
        **strings,
    )


_STRINGS = ("command", "created", "torch", "cuda", "nccl")


def _parse_config_as(preset: dict) -> int:
    """The preset's fields as model.config's (`core.probe_result`), named as preset's."""
    try:
        return parse_config(preset)
    except ValueError as err:
        raise ValueError(str(err).replace("model.config", "preset", 1)) from None


def _parse_rank(r, i: int, context) -> TPRank:
    where = f"ranks[{i}]"
    if not isinstance(r, dict):
        raise ValueError(f"{where}: expected an object")
    rank = _int(r, "rank", 0, MAX_RANKS - 1, f"{where}.rank")
    if rank != i:
        raise ValueError(f"{where}.rank: {rank} where rank {i} belongs (ranks in rank order)")
    device = _str(r, "device", MAX_HEADER_STRING, f"{where}.device")
    runs = _parse_runs(_seq(r, "runs", MAX_RUNS, f"{where}.runs"), f"{where}.runs", context)
    checks = r.get("checks")
    if not isinstance(checks, dict):
        raise ValueError(f"{where}.checks: expected an object")
    bounded_block(checks, f"{where}.checks", 256_000)
    for name, check in checks.items():
        if len(name) > MAX_STRING:
            raise ValueError(f"{where}.checks: a check name is longer than {MAX_STRING:,} characters")
        if not isinstance(check, dict) or not isinstance(check.get("passed"), bool):
            raise ValueError(f"{where}.checks.{name}: expected an object with a true/false 'passed'")
        detail = check.get("detail", "")
        if not isinstance(detail, str) or len(detail) > MAX_STRING:
            raise ValueError(
                f"{where}.checks.{name}.detail: expected a string of at most {MAX_STRING:,} characters"
            )
    sweep = _seq(r, "allreduce", MAX_SWEEP, f"{where}.allreduce")
    points = tuple(_parse_point(p, f"{where}.allreduce[{k}]") for k, p in enumerate(sweep))
    sizes = [p.bytes for p in points]
    if any(b <= a for a, b in zip(sizes, sizes[1:])):
        raise ValueError(f"{where}.allreduce: message sizes must increase from row to row")
    per_row = _int(r, "allreduce_bytes_per_row", 1, 2**20, f"{where}.allreduce_bytes_per_row")
    return TPRank(rank, device, runs, checks, points, per_row)


def _parse_point(p, where: str) -> AllReducePoint:
    if not isinstance(p, dict):
        raise ValueError(f"{where}: expected an object")
    nbytes = _int(p, "bytes", 1, _MAX_MESSAGE, f"{where}.bytes")
    eager, graph = (
        number_field(p, k, 0, _MAX_CALL_US, f"{where}.{k}")
        for k in ("eager_us_per_call", "graph_us_per_call")
    )
    if eager <= 0 or graph <= 0:
        raise ValueError(f"{where}: times per call must be positive")
    return AllReducePoint(nbytes, eager, graph)


def _parse_runs(raw: list, where: str, context) -> tuple:
    modes, batches, timeline_source, max_kernels = context
    runs, seen = [], set()
    for k, r in enumerate(raw):
        at = f"{where}[{k}]"
        timeline = r.get("timeline") if isinstance(r, dict) else None
        if isinstance(timeline, dict):  # the rest of it is checked by parse_run
            label = timeline.get("label", "")
            if not isinstance(label, str) or len(label) > MAX_HEADER_STRING:
                raise ValueError(
                    f"{at}.timeline.label: expected a string of at most {MAX_HEADER_STRING} characters"
                )
        run = parse_run(r, at, timeline_source, max_kernels)
        if run.mode not in modes:
            raise ValueError(f"{at}.mode: {run.mode!r} is not one of this run's modes {modes}")
        if run.batch not in batches:
            raise ValueError(f"{at}.batch: {run.batch} is not one of this run's batches")
        if (run.mode, run.batch) in seen:
            raise ValueError(f"{at}: a second run of mode {run.mode} at batch {run.batch}")
        seen.add((run.mode, run.batch))
        runs.append(run)
    return tuple(runs)


# -- field helpers: every message names the field --------------------------------------
def _int(d: dict, key: str, lo: int, hi: int, where: str | None = None) -> int:
    return int(number_field(d, key, lo, hi, where or key, integer=True))


def _str(d: dict, key: str, limit: int, where: str | None = None) -> str:
    where = where or key
    v = d.get(key)
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"{where}: expected a non-empty string")
    if len(v) > limit:
        raise ValueError(f"{where}: longer than {limit:,} characters")
    return v


def _seq(d: dict, key: str, limit: int, where: str | None = None) -> list:
    where = where or key
    v = d.get(key)
    if not isinstance(v, list):
        raise ValueError(f"{where}: expected a list")
    if len(v) > limit:
        raise ValueError(f"{where}: {len(v):,} entries, more than the {limit} allowed")
    return v


def _ints(d: dict, key: str, lo: int, hi: int, nonempty: bool) -> list[int]:
    v = _seq(d, key, MAX_LIST)
    if nonempty and not v:
        raise ValueError(f"{key}: expected at least one entry")
    out = [_int({"v": x}, "v", lo, hi, f"{key}[{i}]") for i, x in enumerate(v)]
    if len(set(out)) != len(out):
        raise ValueError(f"{key}: an entry appears twice")
    return out
