"""The simulator run with a measured probe step's kernels: what `sim.calibrate` fits.

Each measured (mode, batch) becomes a `Point`. `ProbeSimulator` simulates it with the
simulator's kernels for that fusion setting (their bytes and FLOPs) plus small
elementwise kernels up to the measured count, and the same schedule as `sim.schedule`:
eager launches one after another on the host, or one graph replay, kernels back to back
on the GPU. Its parameters (`PARAMS`) are the simulator's hardware figures, with a few
split by kernel family where the probe showed they differ: an ATen op and a Triton
launch cost the host differently, cuBLAS and the Triton GEMMs reach different
bandwidths, the two attentions move different KV traffic, and a graph replay costs more
the more nodes it has. Synthetic runs made by it are in `sim.probe_synthetic`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.config import ModelConfig
from sim.kernels import step_kernels
from core.timeline import Timeline

FIT_MODES = ("eager", "fused", "graph", "fused+graph")  # what the simulator can represent
FUSED_MODES = ("fused", "fused+graph", "compile")  # compile is Inductor's fusion, replayed as a graph
GRAPH_MODES = ("graph", "fused+graph", "compile")


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    unit: str
    low: float
    high: float
    what: str


PARAMS: tuple[Param, ...] = (
    Param("eager_launch_us", "µs", 0.3, 500.0, "host cost of one eager launch (PyTorch op)"),
    Param("fused_launch_us", "µs", 0.3, 500.0, "host cost of one eager launch of a fused (Triton) kernel"),
    Param("graph_launch_us", "µs", 0.3, 20_000.0, "host cost of one graph replay, input copies included"),
    Param("graph_launch_per_node_us", "µs", 1e-6, 10.0, "added to a graph replay's host cost per node"),
    Param("graph_node_gap_us", "µs", 0.01, 50.0, "GPU gap between queued kernels"),
    Param("hbm_GBps", "GB/s", 50.0, 20_000.0, "effective bandwidth of the unfused (PyTorch, cuBLAS) kernels"),
    Param("fused_hbm_GBps", "GB/s", 50.0, 20_000.0, "effective bandwidth of the fused (Triton) kernels"),
    Param("matrix_TFLOPs", "TFLOP/s", 5.0, 5_000.0, "effective matrix rate"),
    Param("min_kernel_us", "µs", 0.1, 100.0, "shortest a kernel runs"),
    Param(
        "kv_traffic_unfused", "×", 0.1, 50.0, "KV-cache bytes the unfused attention moves, per simulated byte"
    ),
    Param("kv_traffic_fused", "×", 0.1, 50.0, "KV-cache bytes the fused attention moves, per simulated byte"),
)
NAMES = tuple(p.name for p in PARAMS)
_LOW = np.log([p.low for p in PARAMS])
_HIGH = np.log([p.high for p in PARAMS])


def params_vector(params: dict) -> np.ndarray:
    return np.array([float(params[n]) for n in NAMES])


# -- the probe's model and measured points ---------------------------------------
def model_from_result(result) -> ModelConfig:
    """The simulator's ModelConfig for the probe's decoder (`result.model["config"]`)."""
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
            bytes_per_el=bytes_per_el,
            context_len=int(context),
        )
    except KeyError as missing:
        raise ValueError(f"model.config: missing field {missing}") from None
    except ValueError as err:
        raise ValueError(f"model.config: {err}") from None


@dataclass(frozen=True, slots=True)
class Point:
    mode: str
    batch: int
    rows: int  # rows the GPU runs: the bucket when a graph replays a padded batch
    fused: bool
    graphs: bool  # a graph was replayed (False for a graph mode that fell back to eager)
    kernels: int
    step_us: float
    cpu_us: float  # unprofiled host enqueue time where recorded, else the profiled step's
    busy_us: float
    in_fit: bool
    utilisation: float = (
        1.0  # GPU busy over the median step (the profiled step's own is skewed by the profiler)
    )
    spread: float = 0.0  # (p90 - p10) / median of the measured step times: run-to-run noise


def points_from_result(result) -> list[Point]:
    """One point per run of a mode the simulator can represent (compile is Inductor's, not modelled)."""
    points = []
    for run in result.runs:
        if run.mode not in FIT_MODES:
            continue
        graphs = run.mode in GRAPH_MODES and not run.eager_fallback
        rows = run.bucket if (graphs and run.bucket) else run.batch
        cpu = run.enqueue_us_median if run.enqueue_us_median else run.cpu_launch_us
        spread = (run.step_us_p90 - run.step_us_p10) / run.step_us_median
        points.append(
            Point(
                run.mode,
                run.batch,
                int(rows),
                run.mode in FUSED_MODES,
                graphs,
                run.kernels_per_step,
                run.step_us_median,
                max(cpu, 1e-3),
                max(run.gpu_busy_us, 1e-3),
                True,
                min(run.gpu_busy_us / run.step_us_median, 1.0),
                spread,
            )
        )
    return points


# -- the simulator with the probe's kernel counts --------------------------------
class ProbeSimulator:
    """Per point, the kernels' bytes and FLOPs; `predict` turns a parameter vector into times.

    A step is kept as three blocks -- before the layers, one layer (repeated n_layers
    times), after -- so a prediction costs one layer's worth of arithmetic, as in
    `sim.schedule`'s sweep. The extra kernels of a measured step go into every layer
    evenly (the remainder after the layers).
    """

    FIELDS = ("weight_bytes", "act_bytes_per_row", "kv_bytes_per_row", "flops_per_row")

    def __init__(self, model: ModelConfig, points: list[Point]):
        self.model, self.points = model, list(points)
        cache = {}
        for p in self.points:
            if (p.fused, p.kernels) not in cache:
                cache[(p.fused, p.kernels)] = self._blocks(p.fused, p.kernels)
        self._point_blocks = [cache[(p.fused, p.kernels)] for p in self.points]
        # All points at once: each block padded to the longest, `valid` marks real kernels.
        self._arrays = []
        for b in range(3):
            width = max((len(blocks[b][1]) for blocks in self._point_blocks), default=0)
            cols = np.zeros((4, len(self.points), width))
            valid = np.zeros((len(self.points), width), bool)
            for i, blocks in enumerate(self._point_blocks):
                k = len(blocks[b][1])
                cols[:, i, :k] = blocks[b][0]
                valid[i, :k] = True
            self._arrays.append((tuple(cols), valid))
        self._rows = np.array([[p.rows] for p in self.points], float)
        self._fused = np.array([[p.fused] for p in self.points])
        self._graphs = np.array([p.graphs for p in self.points])
        self._n = np.array(
            [
                sum(len(blocks[b][1]) * (model.n_layers if b == 1 else 1) for b in range(3))
                for blocks in self._point_blocks
            ],
            float,
        )

    def _blocks(self, fused: bool, count: int) -> tuple:
        """((cols, names) before, (cols, names) of one layer, (cols, names) after)."""
        specs = step_kernels(self.model, fused)
        first = next(i for i, k in enumerate(specs) if k.layer == 0)
        per_layer = sum(k.layer == 0 for k in specs)
        parts = [
            specs[:first],
            [k for k in specs if k.layer == 0],
            specs[first + self.model.n_layers * per_layer :],
        ]
        cols = [[np.array([getattr(k, f) for k in part], float) for f in self.FIELDS] for part in parts]
        names = [[k.name for k in parts[0]], [k.op for k in parts[1]], [k.name for k in parts[2]]]
        n_layers, extra = self.model.n_layers, count - len(specs)
        if extra < 0:  # fewer than simulated: drop weightless kernels from every layer
            weightless = np.flatnonzero(cols[1][0] == 0)
            drop = weightless[: min(-(extra // n_layers), len(weightless))]  # ceil(-extra / n_layers)
            keep = np.setdiff1d(np.arange(len(names[1])), drop)
            cols[1], names[1] = [c[keep] for c in cols[1]], [names[1][k] for k in keep]
            extra += len(drop) * n_layers
        # Extra kernels: elementwise work (casts, RoPE pieces, copies) of one activation row each.
        small = (0.0, 3.0 * self.model.hidden * self.model.bytes_per_el, 0.0, 0.0)
        per, rest = divmod(max(extra, 0), n_layers)
        if per:
            at = np.linspace(0, len(names[1]), per, endpoint=False).astype(int)
            cols[1] = [np.insert(c, at, v) for c, v in zip(cols[1], small)]
            for pos in at[::-1]:
                names[1].insert(pos, "elementwise")
        cols[2] = [np.concatenate([c, np.full(rest, v)]) for c, v in zip(cols[2], small)]
        names[2] += ["elementwise"] * rest
        return tuple((tuple(c), tuple(n)) for c, n in zip(cols, names))

    @staticmethod
    def _durations(p: dict, fused: bool, rows, cols) -> np.ndarray:
        weight, act, kv, flops = cols
        bandwidth, kv_factor, _ = _family(p, fused)
        memory = (weight + rows * (act + kv_factor * kv)) / (bandwidth * 1e3)  # GB/s = 1e3 B/µs
        math_us = rows * flops / (p["matrix_TFLOPs"] * 1e6)
        return np.maximum(np.maximum(memory, math_us), p["min_kernel_us"])

    def predict(self, theta: np.ndarray) -> np.ndarray:
        """[n_points, 3]: step, host launch and GPU busy time, as the simulator's schedule gives them."""
        p = dict(zip(NAMES, theta))
        gap, n_layers, n = p["graph_node_gap_us"], self.model.n_layers, self._n
        family = {
            k: np.where(self._fused, *v)
            for k, v in (
                ("bandwidth", (p["fused_hbm_GBps"], p["hbm_GBps"])),
                ("kv_factor", (p["kv_traffic_fused"], p["kv_traffic_unfused"])),
                ("launch", (p["fused_launch_us"], p["eager_launch_us"])),
            )
        }
        d, x = [], []
        for (weight, act, kv, flops), valid in self._arrays:
            memory = (weight + self._rows * (act + family["kv_factor"] * kv)) / (family["bandwidth"] * 1e3)
            math_us = self._rows * flops / (p["matrix_TFLOPs"] * 1e6)
            d.append(np.maximum(np.maximum(memory, math_us), p["min_kernel_us"]) * valid)
            x.append((d[-1] + gap - family["launch"]) * valid)
        busy = d[0].sum(axis=1) + n_layers * d[1].sum(axis=1) + d[2].sum(axis=1)
        # Eager: kernel j is submitted at (j+1)L and starts once the previous one ended (+ gap):
        # the last ends at busy + (n-1)·gap + L - min_j X_j, X_j = Σ_{i<j}(d_i + gap - L).
        # Layers repeat, so the minimum over them is at the first or the last layer.
        pre = [np.where(valid, np.cumsum(xi, axis=1) - xi, np.inf) for xi, (_, valid) in zip(x, self._arrays)]
        s0, s1 = x[0].sum(axis=1), x[1].sum(axis=1)
        lowest = np.minimum.reduce(
            [
                pre[0].min(axis=1, initial=np.inf),
                s0 + np.minimum(0.0, (n_layers - 1) * s1) + pre[1].min(axis=1, initial=np.inf),
                s0 + n_layers * s1 + pre[2].min(axis=1, initial=np.inf),
            ]
        )
        launch = family["launch"][:, 0]
        eager_end = busy + (n - 1) * gap + launch - lowest
        replay = p["graph_launch_us"] + p["graph_launch_per_node_us"] * n
        graph_end = replay + busy + (n - 1) * gap
        cpu = np.where(self._graphs, replay, n * launch)
        return np.column_stack([np.maximum(np.where(self._graphs, graph_end, eager_end), cpu), cpu, busy])

    def timeline(self, theta: np.ndarray, i: int) -> Timeline:
        """The simulated lanes of point i (same schedule as `sim.schedule`)."""
        p, pt = dict(zip(NAMES, theta)), self.points[i]
        (before, b_names), (layer, layer_names), (after, a_names) = self._point_blocks[i]
        n_layers = self.model.n_layers
        cols = [np.concatenate([b, np.tile(one, n_layers), a]) for b, one, a in zip(before, layer, after)]
        names = b_names + tuple(f"L{k} {op}" for k in range(n_layers) for op in layer_names) + a_names
        d, n, gap = self._durations(p, pt.fused, pt.rows, cols), len(names), p["graph_node_gap_us"]
        if pt.graphs:
            launch = p["graph_launch_us"] + p["graph_launch_per_node_us"] * n
            submit = np.full(n, launch)
        else:
            launch = _family(p, pt.fused)[2]
            submit = np.arange(1, n + 1) * launch
        offset = np.cumsum(d + gap) - (d + gap)
        start = offset + np.maximum.accumulate(submit - offset)
        if pt.graphs:
            cpu = (np.zeros(1), np.array([launch]), (f"cudaGraphLaunch ({n} nodes)",), np.zeros(n, np.int64))
        else:
            cpu = (
                np.arange(n) * launch,
                np.full(n, launch),
                tuple(f"launch {k}" for k in names),
                np.arange(n),
            )
        return Timeline(
            cpu[0],
            cpu[1],
            cpu[2],
            start,
            d,
            names,
            launched_by=cpu[3],
            source="simulated",
            label=f"calibrated simulator · {pt.mode} · batch {pt.batch}",
        )


def _family(p: dict, fused: bool) -> tuple[float, float, float]:
    """(bandwidth, KV traffic factor, eager launch cost) of the fused or the unfused kernels."""
    if fused:
        return p["fused_hbm_GBps"], p["kv_traffic_fused"], p["fused_launch_us"]
    return p["hbm_GBps"], p["kv_traffic_unfused"], p["eager_launch_us"]
