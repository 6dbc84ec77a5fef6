"""Fit the timing model to a probe run, and say how well it then predicts.

The fit works on what the profiled steps measured, in three parts that do not depend on
each other:

- GPU: every kernel family's latency and bandwidth (and one matrix rate) by bounded
  least squares on the logarithm of each family's exclusive GPU time in each step,
  weighted by its share of the step's busy time;
- host: the cost of an eager PyTorch and an eager Triton launch, and a replay's fixed
  and per-node cost, by linear least squares on the unprofiled host times (relative);
- the gaps between queued kernels and the input copies' share of a replay: read off
  the profiled graph steps directly.

The step time is never fitted: it is predicted, by the schedule, from those. Each point is
predicted again by a fit that never saw it (leave-one-out: the honest number), and
`check` predicts another run's points with this run's fit.

numpy only; the result file is read through `core.probe_result`, which imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core import step_plan
from core.step_plan import MODES, modes
from core.timeline import Timeline
from sim.calibration.families import FAMILIES, unpipelined_gemms
from sim.calibration.least_squares import bounded_least_squares
from sim.calibration.model import (
    GPU_PARAMS,
    INPUT_COPY,
    NAMES,
    PARAMS,
    Point,
    ProbeModel,
    graph_cost,
    model_from_result,
    params_vector,
    points_from_result,
)
from sim.config import ModelConfig
from sim.timing import GraphReplayCost

GOAL = 0.10  # median leave-one-out error per mode, and fused+graph at batch 1
WORST_GOAL = 0.25  # no single point beyond this
_GPU_INDEX = np.array([NAMES.index(n) for n in GPU_PARAMS])
_LOW = np.log([max(p.low, 1e-9) for p in PARAMS])
_HIGH = np.log([p.high for p in PARAMS])
_START = params_vector({p.name: p.start for p in PARAMS})
START_VARIANTS = (None, 60.0, 2000.0)  # matrix rates to start from: either side of the roofline's kink
_RATES = [k for k, n in enumerate(GPU_PARAMS) if n.endswith("_TFLOPs")]


def _modelled_names() -> str:
    """The modes a calibration fits, as a message names them: "eager, fused, graph or fused+graph"."""
    names = [m.name for m in modes(modelled=True)]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


def _fit_gpu(sim: ProbeModel, use: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GPU parameters from the families' exclusive times: (theta, which GPU parameters the data moved)."""
    measured = np.array([p.family_us for p in sim.points])
    busy = np.array([p.busy_us for p in sim.points])
    cell = use[:, None] & (sim.counts > 0) & (measured > 0)
    weight = np.sqrt(measured / busy[:, None])[cell]
    log_measured = np.log(measured[cell])
    idx = _GPU_INDEX

    def residuals(u):
        th = theta.copy()
        th[idx] = np.exp(u)
        return (np.log(np.maximum(sim.family_us(th)[cell], 1e-9)) - log_measured) * weight

    best = None
    for rate in START_VARIANTS:
        u0 = np.log(theta[idx])
        if rate is not None:
            u0[_RATES] = np.log(rate)
        u, cost, moved = bounded_least_squares(residuals, u0, _LOW[idx], _HIGH[idx])
        if best is None or cost < best[1] - 1e-12:
            best = (u, cost, moved)
    out = theta.copy()
    # exp(log(bound)) can land a rounding step outside the bound the solver held it at
    low, high = np.array([[p.low, p.high] for p in PARAMS])[idx].T
    out[idx] = np.clip(np.exp(best[0]), low, high)
    return out, best[2]


def _fit_host(points: list[Point], use: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, dict]:
    """Host parameters by relative linear least squares: (theta, name -> constrained)."""
    out, fitted = theta.copy(), {}
    triton = np.array([f.host == "triton" for f in FAMILIES])
    eager = [p for p, u in zip(points, use) if u and not p.replays]
    graph = [p for p, u in zip(points, use) if u and p.replays]
    systems = (
        (eager, ("aten_launch_us", "triton_launch_us"),
         lambda p: [(p.counts * ~triton).sum() * p.mode.launch_scale,
                    (p.counts * triton).sum() * p.mode.launch_scale]),
        (graph, ("replay_us", "replay_per_node_us"), lambda p: [1.0, p.kernels]),
    )  # fmt: skip
    for pts, names, columns in systems:
        if not pts:
            continue
        a = np.array([columns(p) for p in pts], float) / np.array([[p.host_us] for p in pts])
        present = np.abs(a).max(axis=0) > 0
        if len(pts) < present.sum() or np.linalg.matrix_rank(a[:, present]) < present.sum():
            present &= np.arange(len(names)) == 0  # too few distinct points: the first term alone
        rhs = np.ones(len(pts))
        for k, name in enumerate(names):
            if not present[k]:
                rhs -= a[:, k] * out[NAMES.index(name)]  # held at its current value
        solution = _least_absolute(a[:, present], rhs)
        for name, value in zip(np.array(names)[present], solution):
            param = PARAMS[NAMES.index(name)]
            out[NAMES.index(name)] = float(np.clip(value, param.low, param.high))
            fitted[str(name)] = True
    return out, fitted


def _least_absolute(a: np.ndarray, b: np.ndarray, iterations: int = 50) -> np.ndarray:
    """argmin_x Σ|a x - b| by iteratively reweighted least squares.

    Host times are noisy from run to run (one eager step of the recorded run took 37 % longer
    per launch than the others); least absolute deviations follows the typical points, where
    least squares would split the difference.
    """
    x = np.linalg.lstsq(a, b, rcond=None)[0]
    for _ in range(iterations):
        w = 1 / np.sqrt(np.maximum(np.abs(a @ x - b), 1e-6))
        x = np.linalg.lstsq(a * w[:, None], b * w, rcond=None)[0]
    return x


def _fit_gaps(points: list[Point], use: np.ndarray, theta: np.ndarray, result_copy_share) -> tuple:
    out, fitted = theta.copy(), {}
    gaps = [p.node_gaps for p, u in zip(points, use) if u and p.replays and not p.pdl_chain]
    gaps = np.concatenate(gaps) if gaps else np.zeros(0)
    if len(gaps):
        out[NAMES.index("node_gap_us")] = float(np.median(gaps))
        fitted["node_gap_us"] = True
    if result_copy_share is not None:
        out[NAMES.index("input_copy_share")] = result_copy_share
        fitted["input_copy_share"] = True
    return out, fitted


def copy_share(result) -> float | None:
    """Share of a graph step's profiled host interval spent before both input copies were submitted."""
    shares = []
    for run in result.runs:
        mode = MODES.get(run.mode)
        if mode is None or not (mode.modelled and mode.graphs) or run.eager_fallback:
            continue
        tl = run.timeline
        copies = [s for s, n in zip(tl.gpu_start, tl.gpu_names) if INPUT_COPY in n]
        host = float(tl.cpu_dur.sum())
        if len(copies) >= 2 and host > 0:
            shares.append(min(copies[-1] / host, 1.0))
    return float(np.median(shares)) if shares else None


def fit(sim: ProbeModel, use: np.ndarray, share: float | None = None) -> tuple[np.ndarray, dict]:
    """Fit on the points where `use` is True: (parameter vector, name -> constrained by the data)."""
    theta, moved = _fit_gpu(sim, use, _START.copy())
    fitted = {n: False for n in NAMES}
    fitted.update({n: bool(m) for n, m in zip(GPU_PARAMS, moved)})
    theta, host_fitted = _fit_host(sim.points, use, theta)
    theta, gap_fitted = _fit_gaps(sim.points, use, theta, share)
    fitted.update(host_fitted)
    fitted.update(gap_fitted)
    return theta, fitted


# -- the whole calibration -----------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Calibration:
    device: str
    model: ModelConfig
    points: tuple[Point, ...]
    params: dict  # name -> fitted value (units in PARAMS)
    fitted: dict  # name -> True where the data constrained it
    predicted: np.ndarray  # [n_points, 3] step, host, busy from the fit on all points
    loo_step_us: np.ndarray  # step time predicted by a fit without that point (nan: not computed)
    simulator: ProbeModel

    @property
    def theta(self) -> np.ndarray:
        return params_vector(self.params)

    @property
    def graph_cost(self) -> GraphReplayCost:
        return graph_cost(self.params)

    def measured(self) -> np.ndarray:
        return np.array([[p.step_us, p.host_us, p.busy_us] for p in self.points])

    def errors(self) -> np.ndarray:
        """[n_points, 3] relative error of the fit's prediction (predicted / measured - 1)."""
        return self.predicted / self.measured() - 1

    def loo_errors(self) -> np.ndarray:
        return self.loo_step_us / np.array([p.step_us for p in self.points]) - 1

    @property
    def median_loo_error(self) -> float:
        errs = self.loo_errors()
        return float(np.median(np.abs(errs[np.isfinite(errs)])))

    def mode_loo_error(self, mode) -> float:
        name = step_plan.mode(mode).name
        errs = [
            abs(e) for p, e in zip(self.points, self.loo_errors()) if p.mode.name == name and np.isfinite(e)
        ]
        return float(np.median(errs)) if errs else float("nan")

    def timeline(self, index: int) -> Timeline:
        return self.simulator.timeline(self.theta, index)

    def rows(self) -> list[dict]:
        """One table row per measured point: measured, predicted, error (%), leave-one-out."""
        out = []
        for p, pred, err, loo in zip(self.points, self.predicted, self.errors(), self.loo_errors()):
            busy_meas, busy_pred = p.utilisation, pred[2] / pred[0]
            out.append(
                {
                    "mode": p.mode.name,
                    "batch": p.batch,
                    "kernels": p.kernels,
                    "step measured (µs)": p.step_us,
                    "step predicted (µs)": pred[0],
                    "step error %": 100 * err[0],
                    "step LOO error %": 100 * loo,
                    "CPU measured (µs)": p.host_us,
                    "CPU predicted (µs)": pred[1],
                    "CPU error %": 100 * err[1],
                    "GPU busy measured (µs)": p.busy_us,
                    "GPU busy predicted (µs)": pred[2],
                    "GPU busy error %": 100 * err[2],
                    "utilisation measured %": 100 * busy_meas,
                    "utilisation predicted %": 100 * busy_pred,
                    "utilisation error (points)": 100 * (busy_pred - busy_meas),
                }
            )
        return out

    def check(self, other) -> list[dict]:
        """Another run's points predicted by this fit: [{mode, batch, measured, predicted, unfitted}].

        `unfitted` names the kernel families a point runs that this fit had no data for (e.g. a run
        made after a kernel change that another run predates): their figures are the held defaults.
        """
        model = model_from_result(other)
        points = points_from_result(other)
        if not points:
            raise ValueError(f"runs: the other run has no run of {_modelled_names()}")
        predicted = ProbeModel(model, points, unpipelined_gemms(other)).predict(self.theta)[:, 0]
        names = [f.name for f in FAMILIES]
        return [
            {
                "mode": p.mode.name,
                "batch": p.batch,
                "step_us_measured": p.step_us,
                "step_us_predicted": float(s),
                "unfitted": [
                    n for n, c in zip(names, p.counts) if c and not self.fitted.get(f"{n}_latency_us", True)
                ],
            }
            for p, s in zip(points, predicted)
        ]


def calibrate(result, loo: bool = True) -> Calibration:
    """Fit on every point of the modelled modes; leave-one-out predictions for each of them."""
    model = model_from_result(result)
    points = points_from_result(result)
    if len(points) < 2:
        raise ValueError(f"runs: calibration needs at least two runs of {_modelled_names()}")
    sim = ProbeModel(model, points, unpipelined_gemms(result))
    share = copy_share(result)
    use = np.ones(len(points), bool)
    theta, fitted = fit(sim, use, share)
    loo_step = np.full(len(points), np.nan)
    if loo:
        for i in range(len(points)):
            without = use.copy()
            without[i] = False
            loo_step[i] = sim.predict(fit(sim, without, share)[0])[i, 0]
    return Calibration(
        device=result.device,
        model=model,
        points=tuple(points),
        params=dict(zip(NAMES, theta.tolist())),
        fitted=fitted,
        predicted=sim.predict(theta),
        loo_step_us=loo_step,
        simulator=sim,
    )
