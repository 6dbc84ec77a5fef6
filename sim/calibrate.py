"""Fit the simulator to a measured probe run, and say how well it then predicts.

The probe records, per (mode, batch), the median step time, the host's launch time and
the GPU's busy time. This module fits the simulator's figures -- host cost of an eager
launch, of a graph launch, the gap between replayed nodes, and the roofline's bandwidth,
matrix rate and minimum kernel time -- by bounded least squares on the logarithm of every
point's three times, then predicts each point, and each point again from a fit that
never saw it (leave-one-out: the honest number).

The probe's kernels are not the chapter's 11 (or 4) a layer: its eager PyTorch step also
launches casts, RoPE pieces and gathers, and its fused step launches attention on its own.
So each point is simulated with the measured kernel count: the simulator's kernels for
that fusion setting (their bytes and FLOPs) plus small elementwise kernels for the rest.
Two effects the chapter's simulator has no figure for get one each, per fusion setting:
the host cost of a launch (an ATen op and a Triton launch cost differently) and the KV
traffic of attention (the unfused path gathers the paged cache into a copy, then reads it).

numpy only; the result file is read through `gpu_probe.result`, which imports no torch.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace

import numpy as np

from sim.config import PRESETS, HardwareConfig, ModelConfig, Preset
from sim.kernels import step_kernels
from sim.timeline import StepMetrics, Timeline

FIT_MODES = ("eager", "fused", "graph", "fused+graph")  # what the simulator can represent
FUSED_MODES = ("fused", "fused+graph", "compile")  # compile is Inductor's fusion, replayed as a graph
GRAPH_MODES = ("graph", "fused+graph", "compile")
RESIDUAL_WEIGHTS = {"step": 1.0, "cpu": 0.5, "busy": 0.5}  # step time is what the goal is about


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
    Param("kv_traffic_unfused", "×", 0.1, 50.0, "KV-cache bytes the unfused attention moves, per simulated byte"),
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
        return ModelConfig(name=str(cfg.get("name", "probe")), n_layers=cfg["n_layers"], hidden=cfg["hidden"],
                           n_heads=cfg["n_heads"], n_kv_heads=cfg.get("n_kv_heads", cfg["n_heads"]),
                           ffn=cfg["ffn"], vocab=cfg["vocab"], bytes_per_el=bytes_per_el,
                           context_len=int(context))
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
    utilisation: float = 1.0  # GPU busy over the median step (the profiled step's own is skewed by the profiler)
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
        points.append(Point(run.mode, run.batch, int(rows), run.mode in FUSED_MODES, graphs,
                            run.kernels_per_step, run.step_us_median, max(cpu, 1e-3),
                            max(run.gpu_busy_us, 1e-3), True, min(run.gpu_busy_us / run.step_us_median, 1.0),
                            spread))
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
        self._n = np.array([sum(len(blocks[b][1]) * (model.n_layers if b == 1 else 1) for b in range(3))
                            for blocks in self._point_blocks], float)

    def _blocks(self, fused: bool, count: int) -> tuple:
        """((cols, names) before, (cols, names) of one layer, (cols, names) after)."""
        specs = step_kernels(self.model, fused)
        first = next(i for i, k in enumerate(specs) if k.layer == 0)
        per_layer = sum(k.layer == 0 for k in specs)
        parts = [specs[:first], [k for k in specs if k.layer == 0], specs[first + self.model.n_layers * per_layer:]]
        cols = [[np.array([getattr(k, f) for k in part], float) for f in self.FIELDS] for part in parts]
        names = [[k.name for k in parts[0]], [k.op for k in parts[1]], [k.name for k in parts[2]]]
        n_layers, extra = self.model.n_layers, count - len(specs)
        if extra < 0:  # fewer than simulated: drop weightless kernels from every layer
            weightless = np.flatnonzero(cols[1][0] == 0)
            drop = weightless[:min(-(-(-extra) // n_layers), len(weightless))]
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
        family = {k: np.where(self._fused, *v) for k, v in (
            ("bandwidth", (p["fused_hbm_GBps"], p["hbm_GBps"])),
            ("kv_factor", (p["kv_traffic_fused"], p["kv_traffic_unfused"])),
            ("launch", (p["fused_launch_us"], p["eager_launch_us"])))}
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
        lowest = np.minimum.reduce([
            pre[0].min(axis=1, initial=np.inf),
            s0 + np.minimum(0.0, (n_layers - 1) * s1) + pre[1].min(axis=1, initial=np.inf),
            s0 + n_layers * s1 + pre[2].min(axis=1, initial=np.inf)])
        launch = family["launch"][:, 0]
        eager_end = busy + (n - 1) * gap + launch - lowest
        replay = p["graph_launch_us"] + p["graph_launch_per_node_us"] * n
        graph_end = replay + busy + (n - 1) * gap
        cpu = np.where(self._graphs, replay, n * launch)
        return np.column_stack([np.maximum(np.where(self._graphs, graph_end, eager_end), cpu), cpu, busy])

    def timeline(self, theta: np.ndarray, i: int) -> Timeline:
        """The simulated lanes of point i (same schedule as `sim.schedule`)."""
        p, pt = dict(zip(NAMES, theta)), self.points[i]
        (before, b_names), (layer, l_names), (after, a_names) = self._point_blocks[i]
        cols = [np.concatenate([b, np.tile(l, self.model.n_layers), a]) for b, l, a in zip(before, layer, after)]
        names = (b_names + tuple(f"L{k} {op}" for k in range(self.model.n_layers) for op in l_names) + a_names)
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
            cpu = (np.arange(n) * launch, np.full(n, launch), tuple(f"launch {k}" for k in names), np.arange(n))
        return Timeline(cpu[0], cpu[1], cpu[2], start, d, names, launched_by=cpu[3], source="simulated",
                        label=f"calibrated simulator · {pt.mode} · batch {pt.batch}")


def _family(p: dict, fused: bool) -> tuple[float, float, float]:
    """(bandwidth, KV traffic factor, eager launch cost) of the fused or the unfused kernels."""
    if fused:
        return p["fused_hbm_GBps"], p["kv_traffic_fused"], p["fused_launch_us"]
    return p["hbm_GBps"], p["kv_traffic_unfused"], p["eager_launch_us"]


# -- bounded least squares ---------------------------------------------------------
def bounded_least_squares(residuals, u0, low, high, max_iter: int = 60, tol: float = 1e-9):
    """Levenberg-Marquardt with the step projected onto the box [low, high].

    Parameters whose column of the (forward-difference) Jacobian is zero -- nothing in the
    data depends on them -- stay where they started. Returns (u, cost, fitted mask).
    """
    u = np.clip(np.asarray(u0, float), low, high)
    r = residuals(u)
    cost, lam, h = r @ r, 1e-3, 1e-6
    identifiable = np.zeros(len(u), bool)
    for _ in range(max_iter):
        jac = np.empty((len(r), len(u)))
        for k in range(len(u)):
            du = np.zeros_like(u)
            du[k] = h if u[k] + h <= high[k] else -h
            jac[:, k] = (residuals(u + du) - r) / du[k]
        grad = jac.T @ r
        identifiable |= np.abs(jac).max(axis=0) > 1e-9
        free = identifiable & ~((u <= low) & (grad > 0)) & ~((u >= high) & (grad < 0))
        if not free.any():
            break
        hess = jac[:, free].T @ jac[:, free]
        improved = False
        for _ in range(12):  # raise the damping until a step helps; a tiny step means converged
            step = np.linalg.solve(hess + lam * (np.diag(np.diag(hess)) + 1e-12 * np.eye(len(hess))), -grad[free])
            if np.abs(step).max() < 1e-10:
                break
            trial = u.copy()
            trial[free] = np.clip(u[free] + step, low[free], high[free])
            r_trial = residuals(trial)
            cost_trial = r_trial @ r_trial
            if cost_trial < cost:
                improved, gain = True, cost - cost_trial
                u, r, cost, lam = trial, r_trial, cost_trial, max(lam / 5, 1e-9)
                break
            lam *= 4
        if not improved or gain < tol * (1 + cost):
            break
    return u, cost, identifiable


def _initial(points: list[Point], hbm_copy_GBps: float | None) -> np.ndarray:
    def median(values, default):
        return float(np.median(values)) if len(values) else default

    eager = [p for p in points if not p.graphs]
    start = {
        "eager_launch_us": median([p.cpu_us / p.kernels for p in eager if not p.fused], 6.0),
        "fused_launch_us": median([p.cpu_us / p.kernels for p in eager if p.fused], 10.0),
        "graph_launch_us": median([p.cpu_us for p in points if p.graphs], 20.0),
        "graph_launch_per_node_us": 0.01, "graph_node_gap_us": 0.5,
        "hbm_GBps": 0.8 * (hbm_copy_GBps or 3000.0), "fused_hbm_GBps": 0.8 * (hbm_copy_GBps or 3000.0),
        "matrix_TFLOPs": 400.0,
        "min_kernel_us": 2.0, "kv_traffic_unfused": 1.0, "kv_traffic_fused": 1.0,
    }
    return np.log(params_vector(start))


def fit(sim: ProbeSimulator, use: np.ndarray, hbm_copy_GBps: float | None = None):
    """Fit on the points where `use` is True: (parameter vector, identifiable mask)."""
    measured = np.log([[p.step_us, p.cpu_us, p.busy_us] for p in sim.points])
    weights = np.sqrt(list(RESIDUAL_WEIGHTS.values()))

    def residuals(u):
        return ((np.log(sim.predict(np.exp(u))) - measured)[use] * weights).ravel()

    # A roofline is a max(): a term that is nowhere the largest has no gradient, so a start with
    # the matrix rate or the minimum kernel time on the wrong side of every kink stays there.
    # A few starts that put them on either side; the lowest cost wins.
    base = _initial([p for p, k in zip(sim.points, use) if k], hbm_copy_GBps)
    best = None
    for name, value in START_VARIANTS:
        u0 = base.copy()
        if name:
            u0[NAMES.index(name)] = np.log(value)
        u, cost, _ = bounded_least_squares(residuals, u0, _LOW, _HIGH)
        if best is None or cost < best[1] - 1e-12:
            best = (u, cost)
    u = best[0]
    return np.exp(u), _constrained(residuals, u)


START_VARIANTS = ((None, None), ("matrix_TFLOPs", 60.0), ("min_kernel_us", 0.5))


def _constrained(residuals, u: np.ndarray, rel: float = 0.05) -> np.ndarray:
    """Which parameters the data pins down: moving one by ±5 % changes the residuals."""
    r = residuals(u)
    out = np.zeros(len(u), bool)
    for k in range(len(u)):
        for sign in (1, -1):
            du = np.zeros_like(u)
            du[k] = sign * np.log1p(rel)
            out[k] |= np.abs(residuals(np.clip(u + du, _LOW, _HIGH)) - r).max() > 1e-9
    return out


# -- the whole calibration -----------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Calibration:
    device: str
    model: ModelConfig
    points: tuple[Point, ...]
    params: dict  # name -> fitted value (units in PARAMS)
    fitted: dict  # name -> True where the data constrained it
    predicted: np.ndarray  # [n_points, 3] step, cpu, busy from the fit on all points
    loo_step_us: np.ndarray  # step time predicted by a fit without that point (nan: not in the fit)
    simulator: ProbeSimulator

    @property
    def theta(self) -> np.ndarray:
        return params_vector(self.params)

    def measured(self) -> np.ndarray:
        return np.array([[p.step_us, p.cpu_us, p.busy_us] for p in self.points])

    def errors(self) -> np.ndarray:
        """[n_points, 3] relative error of the fit's prediction (predicted / measured - 1)."""
        return self.predicted / self.measured() - 1

    def loo_errors(self) -> np.ndarray:
        return self.loo_step_us / np.array([p.step_us for p in self.points]) - 1

    @property
    def median_loo_error(self) -> float:
        errs = self.loo_errors()
        return float(np.median(np.abs(errs[np.isfinite(errs)])))

    def mode_loo_error(self, mode: str) -> float:
        errs = [abs(e) for p, e in zip(self.points, self.loo_errors()) if p.mode == mode and np.isfinite(e)]
        return float(np.median(errs)) if errs else float("nan")

    def timeline(self, index: int) -> Timeline:
        return self.simulator.timeline(self.theta, index)

    def metrics(self, index: int) -> StepMetrics:
        return self.timeline(index).metrics()

    def rows(self) -> list[dict]:
        """One table row per measured point: measured, predicted, error (%), leave-one-out."""
        out = []
        for i, (p, pred, err, loo) in enumerate(zip(self.points, self.predicted, self.errors(), self.loo_errors())):
            busy_meas, busy_pred = p.utilisation, pred[2] / pred[0]
            out.append({
                "mode": p.mode, "batch": p.batch, "kernels": p.kernels, "in fit": p.in_fit,
                "step measured (µs)": p.step_us, "step predicted (µs)": pred[0], "step error %": 100 * err[0],
                "step LOO error %": 100 * loo,
                "CPU measured (µs)": p.cpu_us, "CPU predicted (µs)": pred[1], "CPU error %": 100 * err[1],
                "GPU busy measured (µs)": p.busy_us, "GPU busy predicted (µs)": pred[2],
                "GPU busy error %": 100 * err[2],
                "utilisation measured %": 100 * busy_meas, "utilisation predicted %": 100 * busy_pred,
                "utilisation error (points)": 100 * (busy_pred - busy_meas),
            })
        return out


def calibrate(result, loo: bool = True) -> Calibration:
    """Fit on every point of the four simulated modes; leave-one-out predictions for each of them."""
    model = model_from_result(result)
    points = points_from_result(result)
    use = np.array([p.in_fit for p in points])
    if use.sum() < 2:
        raise ValueError("runs: calibration needs at least two runs of eager, fused, graph or fused+graph")
    sim = ProbeSimulator(model, points)
    theta, identifiable = fit(sim, use, result.hbm_copy_GBps)
    loo_step = np.full(len(points), np.nan)
    if loo:
        for i in np.flatnonzero(use):
            without = use.copy()
            without[i] = False
            loo_step[i] = sim.predict(fit(sim, without, result.hbm_copy_GBps)[0])[i, 0]
    return Calibration(device=result.device, model=model, points=tuple(points),
                       params=dict(zip(NAMES, theta.tolist())), fitted=dict(zip(NAMES, identifiable.tolist())),
                       predicted=sim.predict(theta), loo_step_us=loo_step, simulator=sim)


def missing_effects(cal: Calibration, threshold: float = 0.10) -> list[str]:
    """For each mode whose leave-one-out error exceeds the threshold: what the model lacks, from the data."""
    out = []
    errors = np.abs(cal.errors())
    for mode in FIT_MODES:
        err = cal.mode_loo_error(mode)
        idx = [i for i, p in enumerate(cal.points) if p.mode == mode]
        if not (np.isfinite(err) and err > threshold):
            continue
        pts = [cal.points[i] for i in idx]
        head = f"{mode}: {100 * err:.1f} % median leave-one-out error."
        if errors[idx, 1].mean() >= errors[idx, 2].mean():  # the host side is the worse fit
            per_launch = [p.cpu_us / (1 if p.graphs else p.kernels) for p in pts]
            out.append(f"{head} Missing: host-time variation. The measured host cost per "
                       f"{'replay' if pts[0].graphs else 'launch'} ranges {min(per_launch):.1f}–{max(per_launch):.1f} µs "
                       f"across batch sizes, with no trend in the batch, and step times spread "
                       f"{100 * np.median([p.spread for p in pts]):.0f} % (p10 to p90) from step to step; the "
                       "simulator has one fixed cost per launch and no run-to-run noise.")
        else:
            worst = max(idx, key=lambda i: errors[i, 2])
            out.append(f"{head} Missing: kernel times that follow one effective bandwidth. GPU busy time is "
                       f"off by {100 * errors[worst, 2]:.0f} % at batch {cal.points[worst].batch}: the real kernels "
                       "change their tiling (and the attention its context splits) with the batch size, which "
                       "one bandwidth and one KV factor per kernel family cannot follow.")
    return out


def calibrated_preset(result, cal: Calibration | None = None) -> Preset:
    """The calibration as a simulator preset ("probe decoder on <GPU>")."""
    cal = cal or calibrate(result, loo=False)
    p = cal.params
    device = cal.device.replace("NVIDIA ", "")
    # One graph-replay cost for the simulator: the fitted cost at its fused step's node count.
    nodes = len(step_kernels(cal.model, True))
    replay = p["graph_launch_us"] + p["graph_launch_per_node_us"] * nodes
    # A rate no run constrains (no kernel was compute-bound) is left at the uncalibrated preset's.
    tflops = p["matrix_TFLOPs"] if cal.fitted["matrix_TFLOPs"] else PRESETS["probe-0.5b-h200"].hardware.matrix_TFLOPs
    hw = HardwareConfig(name=f"{device} (calibrated)", hbm_GBps=p["hbm_GBps"], matrix_TFLOPs=tflops,
                        min_kernel_us=p["min_kernel_us"], eager_launch_us=p["eager_launch_us"],
                        graph_launch_us=replay, graph_node_gap_us=p["graph_node_gap_us"])
    kernels = ", ".join(f"{m} {k}" for m, k in dict((pt.mode, pt.kernels) for pt in cal.points).items())
    note = (f"Fitted to a probe run on {cal.device}: " + "; ".join(format_param(n, p[n]) for n in NAMES)
            + f". The probe launches more kernels than the simulator's 11 (or 4) a layer ({kernels} per step). "
            "The simulator's hardware has one launch cost, one bandwidth and one graph-replay cost, so this "
            f"preset takes the PyTorch launch cost, the cuBLAS kernels' bandwidth, and the replay cost at "
            f"{nodes} nodes ({replay:.1f} µs); the probe's Triton kernels reach {p['fused_hbm_GBps']:.0f} GB/s "
            f"and cost {p['fused_launch_us']:.1f} µs of host time per launch."
            + ("" if cal.fitted["matrix_TFLOPs"] else f" No kernel was compute-bound, so the matrix rate "
               f"is the uncalibrated preset's {tflops:.0f} TFLOP/s."))
    return Preset(key=f"calibrated-{device.lower().replace(' ', '-')}", title=f"probe decoder on {device}",
                  model=cal.model, hardware=hw, note=note)


def format_param(name: str, value: float) -> str:
    unit = PARAMS[NAMES.index(name)].unit
    return f"{name} = {value:.4g} {unit}" if unit != "×" else f"{name} = {value:.3g}×"


# -- synthetic runs (tests, and a demo before any GPU run exists) -------------------
def synthetic_result(params: dict, model: ModelConfig, batches=(1, 8, 64, 256), modes=FIT_MODES,
                     extra_kernels: dict | None = None, noise: float = 0.0, seed: int = 0,
                     device: str = "synthetic GPU") -> dict:
    """A probe result (issue-3 JSON schema) generated by the simulator with known parameters.

    `extra_kernels` maps a mode to kernels beyond the simulator's count (the probe's eager step
    launches more); `noise` is the relative spread of the recorded times.
    """
    rng = np.random.default_rng(seed)
    extra_kernels = extra_kernels or {}
    theta = params_vector(params)
    points = [Point(m, b, b, m in FUSED_MODES, m in GRAPH_MODES,
                    len(step_kernels(model, m in FUSED_MODES)) + extra_kernels.get(m, 0), 1, 1, 1, True)
              for m in modes for b in batches]
    sim = ProbeSimulator(model, points)
    runs = []
    for i, pt in enumerate(points):
        tl = replace(sim.timeline(theta, i), source="measured", label=f"synthetic · {pt.mode} · batch {pt.batch}")
        m = tl.metrics()
        step = m.step_us * (1 + noise * rng.standard_normal())
        runs.append({
            "mode": pt.mode, "batch": pt.batch, "bucket": pt.batch if pt.graphs else None, "padded_rows": 0,
            "eager_fallback": False, "step_us_median": step, "step_us_p10": 0.97 * step,
            "step_us_p90": 1.05 * step, "enqueue_us_median": m.cpu_launch_us * (1 + noise * rng.standard_normal()),
            "kernels_per_step": m.kernels, "kernels_per_layer": round(m.kernels / model.n_layers, 2),
            "launches": m.launches, "cpu_launch_us": m.cpu_launch_us, "gpu_busy_us": m.gpu_busy_us,
            "utilisation": m.utilisation, "bound_by": m.bound_by, "timeline": tl.to_dict(),
        })
    config = {"name": model.name, "n_layers": model.n_layers, "hidden": model.hidden, "n_heads": model.n_heads,
              "n_kv_heads": model.n_kv_heads, "ffn": model.ffn, "vocab": model.vocab,
              "bytes_per_el": model.bytes_per_el, "context_len": model.context_len}
    weight_bytes = int(model.n_params * model.bytes_per_el)
    return {
        "schema": 1, "device": device, "torch": "n/a (simulated)", "cuda": "n/a (simulated)",
        "created": "2026-11-30T09:00:00+00:00", "command": "sim.calibrate.synthetic_result",
        "model": {"config": config, "n_params": int(model.n_params), "weight_bytes": weight_bytes},
        "hbm_copy_GBps": float(params["hbm_GBps"]), "runs": runs,
        "captures": [{"bucket": b, "capture_ms": 0.0, "graph_mem_bytes": 0} for b in batches],
        "checks": {}, "errors": [], "settings": {"synthetic": True},
    }


# -- report and CLI ------------------------------------------------------------------
def format_report(cal: Calibration) -> str:
    lines = [f"Calibration of the simulator to a probe run on {cal.device}", "", "Fitted parameters:"]
    for p in PARAMS:
        note = "" if cal.fitted[p.name] else "  (not constrained: moving it 5 % changes no prediction)"
        lines.append(f"  {p.name:<20} {cal.params[p.name]:>10.4g} {p.unit:<8} {p.what}{note}")
    lines += ["", f"{'mode':<12}{'batch':>6}{'kernels':>8}  {'step meas':>10}{'pred':>10}{'err':>8}{'LOO':>8}"
              f"  {'CPU meas':>10}{'pred':>10}{'err':>8}  {'busy meas':>10}{'pred':>10}{'err':>8}  util m/p"]
    for r in cal.rows():
        loo = f"{r['step LOO error %']:+7.1f}%" if np.isfinite(r["step LOO error %"]) else "     n/a"
        lines.append(
            f"{r['mode']:<12}{r['batch']:>6}{r['kernels']:>8}  {r['step measured (µs)']:>10.1f}"
            f"{r['step predicted (µs)']:>10.1f}{r['step error %']:+7.1f}%{loo}  {r['CPU measured (µs)']:>10.1f}"
            f"{r['CPU predicted (µs)']:>10.1f}{r['CPU error %']:+7.1f}%  {r['GPU busy measured (µs)']:>10.1f}"
            f"{r['GPU busy predicted (µs)']:>10.1f}{r['GPU busy error %']:+7.1f}%  "
            f"{r['utilisation measured %']:.0f}/{r['utilisation predicted %']:.0f}%")
    lines.append("(times in µs; err = predicted / measured - 1; LOO = predicted by a fit without that point)")
    for text in missing_effects(cal):
        lines.append(text)
    lines.append(f"median abs error: {100 * cal.median_loo_error:.1f}% (leave-one-out)")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim calibrate",
                                     description="Fit the simulator's figures to a probe result JSON and "
                                                 "report predicted vs measured, with leave-one-out errors.")
    parser.add_argument("result", help="probe result JSON (python -m gpu_probe ... --out results.json), "
                                       "or 'recorded' for the shipped H200 run")
    args = parser.parse_args(argv)
    from gpu_probe.result import load_result, recorded_result  # torch-free

    try:
        result = recorded_result() if args.result == "recorded" else load_result(args.result)
        cal = calibrate(result)
    except ValueError as err:
        print(f"python -m sim calibrate: {err}", file=sys.stderr)
        return 2
    print(format_report(cal))
    return 0


if __name__ == "__main__":
    sys.exit(main())
