"""The timing model (`sim.timing`) applied to a probe run's measured steps.

Each measured (mode, batch) is a `Point`: its kernels in launch order, each put in a
family (`sim.calibration.families`), with what the profiled step measured: every
kernel's exclusive GPU time (the time it adds to the busy union: a kernel launched
with programmatic dependent launch overlaps its predecessor, and only its tail counts),
the unprofiled host time and the step time.

`ProbeModel.predict(params)` gives, per point:

- each family's GPU time: its kernel count × the family's latency + max(bytes /
  bandwidth, FLOPs / matrix rate) over the family's work in the step
  (`sim.timing.kernel_us`). In a graph, a GEMV launched with PDL hides part of its
  latency behind its predecessor (`pdl_hidden_share` of it);
- the host time: eager, one launch per kernel, each kind (`families.HOSTS`: the step's
  start, an ATen op, an ATen matmul, a Triton GEMM, the attention, the split merge, a
  one-op Triton kernel) at its share of a Triton GEMM's launch; a graph, one replay
  (`sim.timing.GraphReplayCost`), whose nodes start once the call has returned, or as the
  call reaches them when the graph holds memset nodes (then the call grows with the batch);
- the step: the kernels scheduled by `sim.timing.schedule_starts`, each family's time
  shared evenly by its kernels, `node_gap_us` apart when they queue (none inside a
  PDL chain, whose overlap is already in its kernels' exclusive times).

numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.step_plan import MODES, Mode, without_graphs
from core.timeline import Timeline
from sim.calibration.families import (
    FAMILIES,
    HOSTS,
    INDEX,
    MATMUL,
    classify_step,
    family_work,
    pdl_max_rows,
    unpipelined_gemms,
)
from sim.calibration.families import NAMES as FAMILY_NAMES
from sim.config import ModelConfig
from sim.step.kernel_sets import GEMV_MAX_ROWS, ProbeKernels, kernel_set
from sim.timing import (
    GraphReplayCost,
    eager_ready_us,
    eager_timeline,
    graph_replay_timeline,
    kernel_us,
    one_call_timeline,
    schedule_starts,
)

INPUT_COPY = "multi_tensor_apply_kernel"  # torch._foreach_copy_ of a step's inputs into a graph's buffers
MEMSET = "Memset"  # a memset node, as the profiler names it: the driver then submits the graph in pieces

# How much latency a kernel launched with PDL hides inside a graph, as a share of the GEMV's latency, before a run
# shows it: most of it, as the H200 showed (docs/calibration.md, "the model's constants"). The same µs for every
# PDL family (what overlaps is the launch and prologue, not the kernel's own work), given as a share of the
# GEMV's so that the GEMV's hidden latency can reach all of it smoothly: a fit of "latency - hidden µs, at least
# 0" sat on that kink, and where it stopped depended on the CPU.
PDL_HIDDEN_PRIOR_SHARE = 0.8


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    unit: str
    low: float
    high: float
    what: str
    start: float  # where a fit starts, and what it keeps when no point constrains it


# The families whose products run on CUDA cores, one FMA per two FLOPs plus a few instructions per byte streamed:
# past a few rows their instructions, not the memory, set the pace (`sim.timing.kernel_us`'s issue rate): their
# time grows with the rows for the same bytes (docs/calibration.md, "the model's constants").
ISSUE_BOUND = ("gemv", "persistent")
ISSUE_START_GBps = 1e5  # where a fit starts: no instruction bound (bytes at 100 TB/s add nothing)


def _family_params() -> tuple[Param, ...]:
    out = []
    for f in FAMILIES:
        out.append(Param(f"{f.name}_latency_us", "µs", 0.05, 200.0, f"fixed GPU latency: {f.what}", 2.0))
        out.append(Param(f"{f.name}_GBps", "GB/s", 10.0, 20_000.0, f"bandwidth: {f.what}", 3000.0))
        if f.name in MATMUL:
            # At most the H200's dense bf16 peak (989 TFLOP/s): a fit above it would be absorbing something else.
            out.append(Param(f"{f.name}_TFLOPs", "TFLOP/s", 5.0, 989.0, f"matrix rate: {f.what}", 400.0))
        if f.name in ISSUE_BOUND:
            out.append(
                Param(
                    f"{f.name}_issue_GBps",
                    "GB/s",
                    100.0,
                    ISSUE_START_GBps,
                    f"bytes streamed per second of instruction issue, besides the FMAs: {f.what}",
                    ISSUE_START_GBps,
                )
            )
    return tuple(out)


# What each eager launch kind (`families.HOSTS`) costs the host as a share of a Triton GEMM's launch, where a fit
# starts and what it keeps for a kind no profiled step shows: a profiled 1b run's (docs/calibration.md).
LAUNCH_SHARE_START = {"start": 4.2, "aten": 0.24, "cublas": 0.54, "attention": 1.9, "merge": 0.5, "op": 0.8}
LAUNCH_SHARE_WHAT = {
    "start": "the step's first launch (the embedding, after the forward's own Python)",
    "aten": "a PyTorch elementwise or indexing launch",
    "cublas": "a PyTorch matmul launch (cuBLAS)",
    "attention": "the paged attention's launch (its wrapper allocates the partials)",
    "merge": "a split-merge launch (bare, from the attention's wrapper)",
    "op": "a one-op Triton kernel's launch",
}


def _share_params() -> tuple[Param, ...]:
    return tuple(
        Param(f"{kind}_launch_share", "×", 0.01, 50.0, f"host cost of {what} / a Triton GEMM's", start)
        for kind, what in LAUNCH_SHARE_WHAT.items()
        for start in (LAUNCH_SHARE_START[kind],)
    )


PARAMS: tuple[Param, ...] = (
    *_family_params(),
    Param(
        "pdl_hidden_share",
        "×",
        0.0,
        1.0,
        "latency a PDL-launched kernel hides inside a graph, as a share of the GEMV's latency",
        PDL_HIDDEN_PRIOR_SHARE,
    ),
    Param("triton_launch_us", "µs", 0.3, 500.0, "host cost of one eager launch of a Triton GEMM", 40.0),
    *_share_params(),
    Param(
        "replay_us", "µs", 0.3, 20_000.0, "host cost of a graph replay: input copies + cudaGraphLaunch", 50.0
    ),
    Param("replay_per_node_us", "µs", 1e-4, 10.0, "added to a replay's host cost per node", 0.3),
    Param(
        "replay_per_row_us", "µs", 0.0, 100.0, "added per row to a replay made in pieces (memset nodes)", 0.0
    ),
    Param("node_gap_us", "µs", 0.0, 50.0, "GPU gap between queued kernels (eager or replayed)", 0.4),
    Param(
        "input_copy_share", "×", 0.0, 1.0, "share of the replay's fixed host cost spent copying inputs", 0.3
    ),
)
NAMES = tuple(p.name for p in PARAMS)
GPU_PARAMS = tuple(
    n for n in NAMES if n.endswith(("_latency_us", "_GBps", "_TFLOPs")) or n == "pdl_hidden_share"
)


def params_vector(params: dict) -> np.ndarray:
    return np.array([float(params[n]) for n in NAMES])


def piece_ready_us(cost: GraphReplayCost, piece_nodes) -> np.ndarray:
    """When each node of a replay made in pieces can start: once the call has submitted its piece.

    The driver submits a graph holding memset nodes in pieces, each ending before a memset node, so its first
    kernels start during the call (what the runs showed: docs/calibration.md, "the model's constants";
    `sim.timing.GraphReplayCost.ready_us` has a piece per node)."""
    return cost.input_copy_us + cost.launch_us + cost.per_node_host_us * np.asarray(piece_nodes, np.float64)


def launch_costs(params: dict) -> np.ndarray:
    """The eager launch cost of each host kind (`HOSTS`), in µs: its share of a Triton GEMM's launch."""
    triton = params["triton_launch_us"]
    return np.array([triton * (1.0 if k == "triton" else params[f"{k}_launch_share"]) for k in HOSTS])


_HOST_OF = np.array([HOSTS.index(f.host) for f in FAMILIES])  # each family's launch kind


def host_kinds(families: np.ndarray, names, eager: bool) -> np.ndarray:
    """Each kernel's launch kind (an index into `HOSTS`): its family's; a memset cuBLAS's, whose matmul call
    launches it (the probe's split-K workspace, its launch interval holding the call's dispatch); the first
    kernel of an eager step its start."""
    kinds = _HOST_OF[np.asarray(families, np.int64)].copy()
    kinds[[str(n).startswith(MEMSET) for n in names]] = HOSTS.index("cublas")
    if eager and len(kinds):
        kinds[0] = HOSTS.index("start")
    return kinds


def graph_cost(params: dict, pdl_chain: bool = False) -> GraphReplayCost:
    fixed = params["replay_us"]
    return GraphReplayCost(
        launch_us=fixed * (1 - params["input_copy_share"]),
        per_node_host_us=params["replay_per_node_us"],
        node_gap_us=0.0 if pdl_chain else params["node_gap_us"],
        input_copy_us=fixed * params["input_copy_share"],
        per_row_host_us=params["replay_per_row_us"],
    )


# -- the probe's model and measured points ---------------------------------------
def model_from_result(result) -> ModelConfig:
    """The simulator's ModelConfig for the probe's decoder (`result.model["config"]`): the same
    `core.decoder.DecoderShape` fields as the probe's ProbeModelConfig, tied embeddings included."""
    cfg = result.model.get("config", {})
    settings = getattr(result, "settings", {}) or {}
    dtype_bytes = {"float32": 4, "bfloat16": 2, "float16": 2}
    try:
        bytes_per_el = cfg.get("bytes_per_el") or dtype_bytes.get(cfg.get("dtype", "bfloat16"), 2)
        context = cfg.get("context_len") or cfg.get("prefill_len") or settings.get("context_len") or 512
        return ModelConfig(
            name=str(cfg.get("name", "probe")),
            n_layers=cfg["n_layers"],
            hidden=cfg["hidden"],
            n_heads=cfg["n_heads"],
            n_kv_heads=cfg.get("n_kv_heads", cfg["n_heads"]),
            ffn=cfg["ffn"],
            vocab=cfg["vocab"],
            tie_embeddings=bool(cfg.get("tie_embeddings", False)),
            bytes_per_el=bytes_per_el,
            context_len=int(context),
        )
    except KeyError as missing:
        raise ValueError(f"model.config: missing field {missing}") from None
    except (TypeError, ValueError) as err:
        raise ValueError(f"model.config: {err}") from None


@dataclass(frozen=True, eq=False)
class Point:
    mode: Mode
    batch: int
    rows: int  # rows the GPU runs: the bucket when a graph replays a padded batch
    replays: bool  # a graph was replayed (False for a graph mode that fell back to eager)
    kernel_names: tuple[str, ...]  # the profiled step's kernels, in order (the workload, not a measurement)
    families: np.ndarray  # family index of each kernel
    step_us: float
    host_us: float  # unprofiled host enqueue time where recorded, else the profiled step's
    busy_us: float
    family_us: np.ndarray  # measured exclusive GPU time per family
    spread: float = 0.0  # (p90 - p10) / median of the measured step times: run-to-run noise
    node_gaps: np.ndarray = None  # measured gaps between queued kernels (>= 0), for node_gap_us
    copy_share: float = np.nan  # a replay's: share of its profiled host time before its inputs were copied
    # An eager step's: each launch kind's median host cost in its profiled step, less the profiler's own (nan: none)
    launch_us: np.ndarray = None
    pdl_rows: int = GEMV_MAX_ROWS  # the most rows at which the run's fused kernels launched with PDL
    # The mode whose kernels the step ran, where it is not `mode`: a graph mode's eager fallback (`without_graphs`)
    ran: Mode | None = None

    @property
    def runs(self) -> Mode:
        """The mode whose kernels the step ran and how the host launched them: `mode`, or where a graph mode
        fell back to eager above its buckets, its eager row (the persistent mode's: the fused kernels)."""
        return self.ran or self.mode

    @property
    def probe(self) -> ProbeKernels:
        """The probe's kernels of the kernel set the step ran, as the calibration reads them."""
        return kernel_set(self.runs).probe

    @property
    def kernels(self) -> int:
        return len(self.kernel_names)

    @property
    def counts(self) -> np.ndarray:
        return np.bincount(self.families, minlength=len(FAMILIES))

    @property
    def in_pieces(self) -> bool:
        """A replayed graph holding memset nodes: the driver submits it in pieces (`GraphReplayCost`)."""
        return self.replays and any(str(n).startswith(MEMSET) for n in self.kernel_names)

    @property
    def piece_nodes(self) -> np.ndarray:
        """Each node's piece, as the nodes the call has submitted once it has submitted that piece: a piece ends
        before a memset node (`piece_ready_us`)."""
        n = self.kernels
        memsets = [k for k, name in enumerate(self.kernel_names) if str(name).startswith(MEMSET) and k > 0]
        ends = np.full(n, float(n))
        for m in reversed(memsets):
            ends[:m] = m
        return ends

    @property
    def launch_counts(self) -> np.ndarray:
        """Eager launches of each host kind (`HOSTS`), at the mode's launch scale."""
        kinds = host_kinds(self.families, self.kernel_names, eager=not self.replays)
        return np.bincount(kinds, minlength=len(HOSTS)) * self.runs.launch_scale

    @property
    def pdl_chain(self) -> bool:
        """The probe launches the kernels of a PDL kernel set (the fused kernels) with PDL up to the run's
        `pdl_rows`; inside a graph they overlap."""
        return self.replays and self.probe.pdl and self.rows <= self.pdl_rows

    @property
    def unprofiled_gap_us(self) -> float:
        """A replay's gap between queued kernels without the profiler: (step - host - busy) / gaps.

        Its nodes start once the call has returned and then queue, so what the step takes beyond the call and
        the kernels is the gaps between them. nan where that does not hold: a replay made in pieces (its
        nodes start during the call), a PDL chain (no gaps), a kernel set without node gaps (the persistent
        kernel: one node), an eager step.
        The profiler widens the gaps it reads (its kernel records), so these are the narrower ones
        (docs/calibration.md, "the model's constants")."""
        if (
            not self.replays
            or self.in_pieces
            or self.pdl_chain
            or not self.probe.node_gaps
            or self.kernels < 2
        ):
            return np.nan
        return (self.step_us - self.host_us - self.busy_us) / (self.kernels - 1)

    @property
    def utilisation(self) -> float:
        return min(self.busy_us / self.step_us, 1.0)


def _exclusive_us(tl: Timeline) -> tuple[np.ndarray, np.ndarray]:
    """(time each kernel adds to the GPU's busy union, gap before it) in launch order."""
    start, end = tl.gpu_start, tl.gpu_end
    before = np.concatenate(([-np.inf], np.maximum.accumulate(end)[:-1]))
    return np.maximum(end - np.maximum(start, before), 0.0), start - before


def _copy_share(tl: Timeline) -> float:
    """Share of a replay's profiled host interval spent before both input copies were submitted."""
    copies = [s for s, n in zip(tl.gpu_start, tl.gpu_names) if INPUT_COPY in n]
    host = float(tl.cpu_dur.sum())
    return min(copies[-1] / host, 1.0) if len(copies) >= 2 and host > 0 else np.nan


def _launch_us(tl: Timeline, kinds: np.ndarray, unprofiled_host_us: float) -> np.ndarray:
    """Each launch kind's median host cost in one profiled eager step (`HOSTS`; nan where the step has none).

    A launch's cost is its host interval in the profiled step, less what the profiler adds to every launch it
    records (issue 22): (profiled - unprofiled host time) / launches, so that the costs add up to the
    unprofiled host time. The profiled step shows the shape (which launch costs what); how fast the host ran
    moves every launch alike, and is the fit's (`sim.calibration.fit`).
    """
    out = np.full(len(HOSTS), np.nan)
    owner = np.asarray(tl.launched_by)
    if not len(tl.cpu_dur) or not unprofiled_host_us or len(owner) != len(kinds):
        return out
    host = np.where(owner >= 0, tl.cpu_dur[np.maximum(owner, 0)], np.nan)
    added = (float(tl.cpu_dur.sum()) - unprofiled_host_us) / len(tl.cpu_dur)  # the profiler's, per launch
    for k in range(len(HOSTS)):
        mine = host[(kinds == k) & np.isfinite(host)]
        if len(mine):
            cost = float(np.median(mine)) - added
            out[k] = cost if cost > 0 else np.nan
    return out


def points_from_result(result) -> list[Point]:
    """One point per run of a mode the model represents; a run that fell back to other kernels (`eager_fallback`:
    the persistent kernel above the rows it runs, a graph mode above its largest bucket) is not that mode's, and
    is left out."""
    points = []
    model = model_from_result(result)
    unpipelined = unpipelined_gemms(result)
    pdl_rows = pdl_max_rows(result)
    for run in result.runs:
        mode = MODES.get(run.mode)
        if mode is None or not mode.modelled or run.eager_fallback:
            continue
        replays = mode.graphs and not run.eager_fallback
        ran = mode if replays or not mode.graphs else without_graphs(mode)
        rows = int(run.bucket if (replays and run.bucket) else run.batch)
        tl = run.timeline
        fams = np.array(
            [INDEX[f] for f in classify_step(model, tl.gpu_names, rows, unpipelined=unpipelined)], np.int64
        )
        excl, gaps = _exclusive_us(tl)
        family_us = np.bincount(fams, weights=excl, minlength=len(FAMILIES))
        queued = np.array([INPUT_COPY not in n for n in tl.gpu_names])
        queued[0] = False  # no predecessor
        node_gaps = gaps[queued & (gaps >= 0) & (gaps < 50.0)] if replays else np.zeros(0)
        host = run.enqueue_us_median if run.enqueue_us_median else run.cpu_launch_us
        points.append(
            Point(
                mode=mode,
                batch=run.batch,
                rows=rows,
                replays=replays,
                kernel_names=tl.gpu_names,
                families=fams,
                step_us=run.step_us_median,
                host_us=max(host, 1e-3),
                busy_us=max(run.gpu_busy_us, 1e-3),
                family_us=family_us,
                spread=(run.step_us_p90 - run.step_us_p10) / run.step_us_median,
                node_gaps=node_gaps,
                copy_share=_copy_share(tl) if replays else np.nan,
                launch_us=np.full(len(HOSTS), np.nan)
                if replays
                else _launch_us(tl, host_kinds(fams, tl.gpu_names, eager=True), run.enqueue_us_median),
                pdl_rows=pdl_rows,
                ran=ran,
            )
        )
    return points


# -- the model -------------------------------------------------------------------
class ProbeModel:
    """Predicts the points' family times, host times and steps from a parameter vector."""

    def __init__(self, model: ModelConfig, points: list[Point], unpipelined: frozenset):
        """`unpipelined`: the GEMM shapes the run's tensor-core kernel ran unpipelined (`unpipelined_gemms`)."""
        self.model, self.points = model, list(points)
        n_points, n_fam = len(self.points), len(FAMILIES)
        rows = np.array([p.rows for p in self.points], float)
        self._bytes, self._flops = (
            family_work(model, rows, [p.runs for p in self.points], unpipelined=unpipelined)
            if n_points
            else (np.zeros((0, n_fam)),) * 2
        )
        self._counts = np.array([p.counts for p in self.points], float).reshape(n_points, n_fam)
        self._graphs = np.array([p.replays for p in self.points], bool)
        self._scale = np.array(
            [p.runs.launch_scale for p in self.points], float
        )  # the mode's eager launch cost
        self._pdl = np.array([p.pdl_chain for p in self.points], bool)
        self._pieces = np.array([p.in_pieces for p in self.points], bool)
        width = max((p.kernels for p in self.points), default=0)
        self._piece_nodes = np.zeros((n_points, width))
        for i, p in enumerate(self.points):
            if p.in_pieces:
                self._piece_nodes[i, : p.kernels] = p.piece_nodes
        self._rows = rows
        self._launches = np.array([p.launch_counts for p in self.points]).reshape(n_points, len(HOSTS))
        self._n = self._counts.sum(axis=1)
        # Every point's kernels as one padded [n_points, longest] array of family indices (-1: padding).
        width = max((p.kernels for p in self.points), default=0)
        self._fam = np.full((n_points, width), -1, np.int64)
        for i, p in enumerate(self.points):
            self._fam[i, : p.kernels] = p.families
        self._valid = self._fam >= 0
        self._kind = np.zeros((n_points, width), np.int64)  # launch kind per kernel (padding: 0)
        for i, p in enumerate(self.points):
            self._kind[i, : p.kernels] = host_kinds(p.families, p.kernel_names, eager=not p.replays)
        self._is_pdl = np.array([f.pdl for f in FAMILIES])

    @property
    def counts(self) -> np.ndarray:
        """[n_points, n_families] how many kernels of each family each point's step runs."""
        return self._counts

    def family_us(self, theta) -> np.ndarray:
        """[n_points, n_families] GPU time of each family's kernels in each step (0 where it has none)."""
        p = dict(zip(NAMES, theta))
        latency = np.array([p[f"{n}_latency_us"] for n in FAMILY_NAMES])
        GBps = np.array([p[f"{n}_GBps"] for n in FAMILY_NAMES])
        rate = np.array([p[f"{n}_TFLOPs"] if n in MATMUL else np.inf for n in FAMILY_NAMES])
        issue = np.array([p[f"{n}_issue_GBps"] if n in ISSUE_BOUND else np.inf for n in FAMILY_NAMES])
        hidden_us = p["pdl_hidden_share"] * p["gemv_latency_us"]
        hidden = np.where(self._pdl[:, None] & self._is_pdl[None, :], hidden_us, 0.0)
        per_kernel = np.maximum(
            latency[None, :] - hidden, 0.0
        )  # at most the GEMV's: only a smaller one clips
        work = kernel_us(self._bytes, self._flops, 0.0, GBps, rate, issue)
        return np.where(self._counts > 0, self._counts * per_kernel + work, 0.0)

    def host_us(self, theta) -> np.ndarray:
        p = dict(zip(NAMES, theta))
        eager = self._launches @ launch_costs(p)  # launch_counts carry the mode's launch scale
        return np.where(self._graphs, graph_cost(p).host_us(self._n, self._rows, self._pieces), eager)

    def kernel_us(self, theta) -> np.ndarray:
        """[n_points, longest] each kernel's GPU time: its family's time shared evenly (0: padding)."""
        fam_us = self.family_us(theta)
        share = np.divide(fam_us, self._counts, out=np.zeros_like(fam_us), where=self._counts > 0)
        return np.where(self._valid, np.take_along_axis(share, np.maximum(self._fam, 0), axis=1), 0.0)

    def predict(self, theta) -> np.ndarray:
        """[n_points, 3]: step, host and GPU busy time."""
        p = dict(zip(NAMES, theta))
        dur = self.kernel_us(theta)
        host = self.host_us(theta)
        width = self._fam.shape[1]
        launch = launch_costs(p)[self._kind] * self._valid * self._scale[:, None]
        eager = eager_ready_us(launch, width)  # each launch after the one before it
        # A replay's nodes start once the call has returned, or once it has submitted their piece when it is
        # made in pieces (`piece_ready_us`).
        cost = graph_cost(p)
        ready = np.where(self._pieces[:, None], piece_ready_us(cost, self._piece_nodes), host[:, None])
        ready = np.where(self._graphs[:, None], ready, eager)
        ready = np.where(self._valid, ready, 0.0)  # padding: zero-length, never waits for the host
        gap = np.where(self._pdl[:, None] | ~self._valid, 0.0, p["node_gap_us"])
        start = schedule_starts(ready, dur, gap)
        gpu_end = (start + dur).max(axis=1, initial=0.0)
        return np.column_stack([np.maximum(gpu_end, host), host, dur.sum(axis=1)])

    def timeline(self, theta, i: int) -> Timeline:
        """The predicted lanes of point i, drawn with the measured step's kernel names."""
        p, pt = dict(zip(NAMES, theta)), self.points[i]
        dur = self.kernel_us(theta)[i, : pt.kernels]
        label = f"calibrated model · {pt.mode.name} · batch {pt.batch}"
        if pt.replays:
            cost = graph_cost(p, pt.pdl_chain)
            if pt.in_pieces:
                host = float(cost.host_us(pt.kernels, pt.rows, True))
                name = f"cudaGraphLaunch ({pt.kernels} nodes)"
                ready = piece_ready_us(cost, pt.piece_nodes)
                return one_call_timeline(dur, pt.kernel_names, host, cost.node_gap_us, name, label, ready)
            return graph_replay_timeline(dur, pt.kernel_names, cost, label=label, rows=pt.rows)
        launch = launch_costs(p)[self._kind[i, : pt.kernels]] * pt.runs.launch_scale
        return eager_timeline(dur, pt.kernel_names, launch, p["node_gap_us"], label=label)
