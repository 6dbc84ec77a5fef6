"""Fit the timing model to a probe run, and say how well it then predicts.

The fit works on what the profiled steps measured, in three parts (the host's takes the
launch kinds' shares from the third):

- GPU: every kernel family's latency and bandwidth (and one matrix rate) by bounded
  least squares on the logarithm of each family's exclusive GPU time in each step,
  weighted by its share of the step's busy time;
- host: the cost of an eager Triton GEMM launch (how fast the host ran), and a replay's
  fixed, per-node and (made in pieces) per-row cost, by least absolute deviations on the
  unprofiled host times (relative);
- read off the profiled steps directly: the gaps between queued kernels, the input
  copies' share of a replay, each eager launch kind's cost as a share of a Triton GEMM's.

The step time is never fitted: it is predicted, by the schedule, from those. Each point is
predicted again by a fit that never saw it (leave-one-out: the honest number), and
`check` predicts another run's points with this run's fit.

numpy only; the result file is read through `core.probe_result`, which imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core import step_plan
from core.step_plan import modes
from core.timeline import Timeline
from sim.calibration.families import FAMILIES, HOSTS, INDEX, unpipelined_gemms
from sim.calibration.least_squares import Pinned, Z, fit_pinned
from sim.calibration.model import (
    GPU_PARAMS,
    ISSUE_BOUND,
    NAMES,
    PARAMS,
    Point,
    ProbeModel,
    graph_cost,
    launch_costs,
    model_from_result,
    params_vector,
    points_from_result,
)
from sim.config import ModelConfig
from sim.timing import GraphReplayCost

GOAL = 0.10  # median leave-one-out error per mode, and fused+graph at batch 1
# What a host's speed scales: the µs figures of its launches and replays (the kinds' shares are ratios).
HOST_SCALED = ("triton_launch_us", "replay_us", "replay_per_node_us", "replay_per_row_us")
WORST_GOAL = 0.25  # no single point beyond this
_GPU_INDEX = np.array([NAMES.index(n) for n in GPU_PARAMS])
_LOW = np.log([max(p.low, 1e-9) for p in PARAMS])
_HIGH = np.log([p.high for p in PARAMS])
_START = params_vector({p.name: p.start for p in PARAMS})
_PRIOR = np.log(np.maximum(_START, 1e-9))  # where a parameter the data does not pin is held
START_VARIANTS = (None, 60.0, 2000.0)  # matrix rates to start from: either side of the roofline's kink
_RATES = [k for k, n in enumerate(GPU_PARAMS) if n.endswith("_TFLOPs")]
# Where a product on CUDA cores may be instruction-bound (`model.ISSUE_BOUND`), one more start: its FMAs at 8
# TFLOP/s and its other instructions at 8 TB/s of bytes, past the kink from 2 rows on (the 1b persistent run's
# kernel fits 7 TFLOP/s and 7 TB/s). A start on the memory side never finds it: there the bound has no slope.
ISSUE_START = (8.0, 8000.0)
_ISSUE = {
    family: (GPU_PARAMS.index(f"{family}_TFLOPs"), GPU_PARAMS.index(f"{family}_issue_GBps"))
    for family in ISSUE_BOUND
}


def host_index_of(result) -> float | None:
    """A result's host speed index (µs a torch launch), or None where the run did not measure it."""
    host = getattr(result, "host", None)
    return host.torch_launch_us if host is not None else None


def _modelled_names() -> str:
    """The modes a calibration fits, as a message names them: "eager, fused, graph or fused+graph"."""
    names = [m.name for m in modes(modelled=True)]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


def _fit_gpu(sim: ProbeModel, use: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, Pinned]:
    """GPU parameters from the families' exclusive times: (theta, what the data says of each GPU parameter)."""
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

    starts = []
    for rate in START_VARIANTS:
        u0 = np.log(theta[idx])
        if rate is not None:
            u0[_RATES] = np.log(rate)
        starts.append(u0)
    # Only where a used point runs an instruction-bound family over more than one row can the bound show.
    counts = sim.counts[use]
    rows = np.array([p.rows for p in sim.points])[use]
    shown = [f for f in ISSUE_BOUND if (counts[:, INDEX[f]] > 0)[rows > 1].any()]
    if shown:
        u0 = np.log(theta[idx])
        for family in shown:
            u0[list(_ISSUE[family])] = np.log(ISSUE_START)
        starts.append(u0)
    pinned = fit_pinned(residuals, starts, _LOW[idx], _HIGH[idx], _PRIOR[idx])
    out = theta.copy()
    # exp(log(bound)) can land a rounding step outside the bound the solver held it at
    low, high = np.array([[p.low, p.high] for p in PARAMS])[idx].T
    out[idx] = np.clip(np.exp(pinned.u), low, high)
    # A held parameter is exactly its stated value (exp(log(x)) can be a rounding step away from x).
    held = np.flatnonzero(pinned.held | ~pinned.seen)
    out[idx[held]] = _START[idx[held]]
    for k in np.flatnonzero(pinned.held):
        if pinned.u[k] == _HIGH[idx[k]]:
            out[idx[k]] = high[k]
        elif pinned.u[k] == _LOW[idx[k]]:
            out[idx[k]] = low[k]
    return out, pinned


def _fit_host(points: list[Point], use: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, dict]:
    """Host parameters by relative least absolute deviations: (theta, name -> constrained).

    Eager: every launch at its kind's share of a Triton GEMM's launch (read off the profiled steps,
    `_fit_reads`), so one figure, the Triton launch's cost, says how fast the host ran. A replay: fixed +
    per node, + per row when made in pieces. A term no point has is held; when the points cannot tell
    the rest apart, the last terms are held until they can (with two graph points, the fixed cost alone).
    """
    out, fitted = theta.copy(), {}
    params = dict(zip(NAMES, out))
    units = launch_costs({**params, "triton_launch_us": 1.0})  # each kind in Triton launches
    eager = [p for p, u in zip(points, use) if u and not p.replays]
    graph = [p for p, u in zip(points, use) if u and p.replays]
    systems = (
        (eager, ("triton_launch_us",), lambda p: [p.launch_counts @ units]),
        (graph, ("replay_us", "replay_per_node_us", "replay_per_row_us"),
         lambda p: [1.0, p.kernels, p.rows * p.in_pieces]),
    )  # fmt: skip
    for pts, names, columns in systems:
        if not pts:
            continue
        a = np.array([columns(p) for p in pts], float) / np.array([[p.host_us] for p in pts])
        present = np.abs(a).max(axis=0) > 0
        while present.sum() > 1 and (
            len(pts) < present.sum() or np.linalg.matrix_rank(a[:, present]) < present.sum()
        ):
            present[np.flatnonzero(present)[-1]] = False  # too few distinct points: hold the last term
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


def launch_shares(costs: np.ndarray) -> dict[str, float]:
    """Each launch kind's cost as a share of a Triton GEMM's, from [n_steps, len(HOSTS)] costs (`Point.launch_us`,
    nan where a step has none of a kind): {kind: share} for every kind that some step links to a Triton GEMM.

    The host runs faster or slower from step to step (docs/calibration.md) and every launch with it, so a
    step's cost of kind k is its speed times k's share: log cost = log share_k + log speed_step, fitted by
    least squares with the Triton GEMM's share 1. A kind is linked to the GEMM through the steps that run
    both, or a chain of such steps (cuBLAS's matmuls and the GEMMs never share a step, but the attention
    runs beside both).
    """
    costs = np.asarray(costs, float).reshape(-1, len(HOSTS))
    seen = np.isfinite(costs) & (costs > 0)
    anchor = HOSTS.index("triton")
    linked, steps = {anchor}, np.zeros(len(costs), bool)
    while True:  # the kinds and steps connected to the anchor
        more = seen[:, sorted(linked)].any(axis=1) & ~steps
        if not more.any():
            break
        steps |= more
        linked |= set(np.flatnonzero(seen[steps].any(axis=0)).tolist())
    kinds = [k for k in sorted(linked) if k != anchor]
    if not kinds:
        return {}
    rows = np.flatnonzero(steps)
    cells = [(r, k) for r in rows for k in np.flatnonzero(seen[r])]
    a = np.zeros((len(cells), len(kinds) + len(rows)))
    b = np.zeros(len(cells))
    for i, (r, k) in enumerate(cells):
        if k != anchor:
            a[i, kinds.index(k)] = 1.0
        a[i, len(kinds) + list(rows).index(r)] = 1.0
        b[i] = np.log(costs[r, k])
    x = np.linalg.lstsq(a, b, rcond=None)[0]
    return {HOSTS[k]: float(np.exp(x[j])) for j, k in enumerate(kinds)}


def _fit_reads(points: list[Point], use: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, dict]:
    """What the used points' profiled steps show directly: the gap between queued replayed kernels, the
    input copies' share of a replay's fixed cost (medians) and each eager launch kind's cost as a share of a
    Triton GEMM's (`launch_shares`); a figure no used point shows is held."""
    out, fitted = theta.copy(), {}
    used = [p for p, u in zip(points, use) if u]
    # Between queued replayed kernels: as the unprofiled steps leave them (`Point.unprofiled_gap_us`), else as the
    # profiled ones show them (wider); not a kernel set's without node gaps: the persistent kernel's step, whose one
    # gap is before its whole-GPU launch, many times a node gap (docs/calibration.md, "the model's constants").
    gaps = np.array([p.unprofiled_gap_us for p in used])
    if not np.isfinite(gaps).any():
        profiled = [p.node_gaps for p in used if p.replays and not p.pdl_chain and p.probe.node_gaps]
        gaps = np.concatenate(profiled) if profiled else np.zeros(0)
    reads = {
        "node_gap_us": gaps,
        "input_copy_share": np.array([p.copy_share for p in used]),
    }
    for name, values in reads.items():
        values = values[np.isfinite(values)]
        if len(values):
            param = PARAMS[NAMES.index(name)]
            out[NAMES.index(name)] = float(np.clip(np.median(values), param.low, param.high))
            fitted[name] = True
    eager = [p.launch_us for p in used if not p.replays and p.launch_us is not None]
    for kind, share in launch_shares(np.array(eager)).items():
        name = f"{kind}_launch_share"
        param = PARAMS[NAMES.index(name)]
        out[NAMES.index(name)] = float(np.clip(share, param.low, param.high))
        fitted[name] = True
    return out, fitted


@dataclass(frozen=True, slots=True)
class Pin:
    """What the data says of one fitted parameter (`Calibration.pins`).

    status: "pinned" (its 95 % interval, `low`-`high`, lies inside the parameter's box), "held" (the data
    depends on it but does not pin it: held at `held_at` -- its prior, or the bound the data leans to -- and the
    rest fitted with it there), "no data" (nothing the run measured depends on it: it keeps its prior), or
    "read" (read off the run directly, or fitted to the host times; no interval is computed).
    """

    status: str
    value: float
    low: float = float("nan")
    high: float = float("nan")
    held_at: str = ""  # "prior", "upper bound" or "lower bound", where status is "held"

    @property
    def pinned(self) -> bool:
        return self.status in ("pinned", "read")

    def describe(self, unit: str) -> str:
        """How the page and the report say it: "pinned: 2,115-2,731 GB/s (95 %)", "held at its prior, …"."""
        value = f"{self.value:,.4g} {unit}"
        if self.status == "pinned":
            return f"pinned: {self.low:,.4g}-{self.high:,.4g} {unit} (95 %)"
        if self.status == "held" and self.held_at == "prior":
            return f"held at its prior, {value}: the runs leave it free"
        if self.status == "held":
            side = "at least" if self.held_at == "upper bound" else "at most"
            return f"held at its {self.held_at}, {value}: the runs ask for {side} this and tell nothing more"
        if self.status == "no data":
            return f"held at its prior, {value}: no measured step depends on it"
        return "read off the runs"


def _gpu_pins(theta: np.ndarray, pinned: Pinned) -> dict[str, Pin]:
    out = {}
    for k, name in enumerate(GPU_PARAMS):
        param, value = PARAMS[_GPU_INDEX[k]], float(theta[_GPU_INDEX[k]])
        if not pinned.seen[k]:
            out[name] = Pin("no data", value)
        elif pinned.held[k]:
            where = (
                "prior" if value == param.start else "upper bound" if value == param.high else "lower bound"
            )
            out[name] = Pin("held", value, held_at=where)
        else:
            half = Z * float(pinned.sigma[k])
            out[name] = Pin("pinned", value, value * float(np.exp(-half)), value * float(np.exp(half)))
    return out


def fit(sim: ProbeModel, use: np.ndarray) -> tuple[np.ndarray, dict, dict[str, Pin]]:
    """Fit on the points where `use` is True: (parameter vector, name -> constrained by the data, name -> Pin)."""
    theta, pinned = _fit_gpu(sim, use, _START.copy())
    fitted = {n: False for n in NAMES}
    fitted.update({n: bool(m) for n, m in zip(GPU_PARAMS, pinned.seen)})
    theta, read_fitted = _fit_reads(sim.points, use, theta)  # before the host: the launch kinds' shares
    theta, host_fitted = _fit_host(sim.points, use, theta)
    fitted.update(read_fitted)
    fitted.update(host_fitted)
    pins = _gpu_pins(theta, pinned)
    for name in NAMES:
        if name not in pins:
            pins[name] = Pin("read" if fitted[name] else "no data", float(theta[NAMES.index(name)]))
    return theta, fitted, pins


# -- the whole calibration -----------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Calibration:
    device: str
    model: ModelConfig
    points: tuple[Point, ...]
    params: dict  # name -> fitted value (units in PARAMS)
    fitted: dict  # name -> True where the data constrained it
    pins: dict  # name -> Pin: pinned by the data (and how tightly), or held, and where
    predicted: np.ndarray  # [n_points, 3] step, host, busy from the fit on all points
    loo_step_us: np.ndarray  # step time predicted by a fit without that point (nan: not computed)
    simulator: ProbeModel
    loo_host_us: np.ndarray | None = None  # host time predicted by that fit (nan: not computed)
    # The run's host speed index: the median host time of a torch launch in its process (None: not measured).
    host_index: float | None = None

    @property
    def theta(self) -> np.ndarray:
        return params_vector(self.params)

    @property
    def graph_cost(self) -> GraphReplayCost:
        return graph_cost(self.params)

    def on_host(self, index: float | None) -> np.ndarray:
        """The parameters with the host's costs moved to a host whose index is `index` (µs a torch launch):
        a Triton launch and a replay cost what they cost here times index / this run's index, the launch
        kinds' shares and everything on the GPU unchanged. Without both indices, the parameters as fitted."""
        theta = self.theta
        if not (index and self.host_index):
            return theta
        scale = index / self.host_index
        for name in HOST_SCALED:
            theta[NAMES.index(name)] *= scale
        return theta

    def measured(self) -> np.ndarray:
        return np.array([[p.step_us, p.host_us, p.busy_us] for p in self.points])

    def errors(self) -> np.ndarray:
        """[n_points, 3] relative error of the fit's prediction (predicted / measured - 1)."""
        return self.predicted / self.measured() - 1

    def loo_errors(self, of: str = "step") -> np.ndarray:
        """Relative error of each point left out of its fit: its step time, or (`of="host"`) its host time."""
        if of == "host":
            loo = self.loo_host_us if self.loo_host_us is not None else np.full(len(self.points), np.nan)
            return loo / np.array([p.host_us for p in self.points]) - 1
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

    def host_speeds(self) -> dict[tuple[str, int], float]:
        """Each eager point's host time over its launches at the fitted shares: µs a Triton GEMM launch, how fast
        the host ran at that point ({(mode, batch): µs}). The fit's one figure, `triton_launch_us`, follows the
        typical point; where these spread by more than 1.25 / 0.75, no figure is within 25 % of every point."""
        units = launch_costs({**self.params, "triton_launch_us": 1.0})
        return {
            (p.mode.name, p.batch): p.host_us / float(p.launch_counts @ units)
            for p in self.points
            if not p.replays
        }

    def timeline(self, index: int) -> Timeline:
        return self.simulator.timeline(self.theta, index)

    def holds_at(self, index: int) -> bool:
        """Whether the fit is within the calibration goal at point `index`: left out of the fit, the point is
        predicted within WORST_GOAL, and its mode's median leave-one-out error is within GOAL."""
        err = float(self.loo_errors()[index])
        median = self.mode_loo_error(self.points[index].mode)
        return bool(np.isfinite(err) and abs(err) <= WORST_GOAL and median <= GOAL)

    def verdict_at(self, index: int) -> str:
        """How a picture of point `index` is titled: 'calibrated' only where the fit holds there (`holds_at`)."""
        err = float(self.loo_errors()[index])
        if not np.isfinite(err):
            return "model fitted to this run (not checked left out)"
        if self.holds_at(index):
            return f"calibrated to this run: predicted within {100 * abs(err):.1f} % left out"
        return f"model, off by {100 * err:+.1f} % at this point"

    def verdict_detail(self, index: int) -> str:
        """The sentence behind `verdict_at`: the point's error left out, its mode's median, the goal."""
        err = float(self.loo_errors()[index])
        if not np.isfinite(err):
            return (
                "This fit has no leave-one-out predictions, so how well it predicts this step is not known."
            )
        point = self.points[index]
        return (
            f"Left out of the fit, this step ({point.mode.name} at batch {point.batch}) is predicted "
            f"{100 * err:+.1f} % off, and {point.mode.name}'s median is {100 * self.mode_loo_error(point.mode):.1f} % "
            f"(the goal: each mode's median within {100 * GOAL:.0f} %, no point beyond {100 * WORST_GOAL:.0f} %)."
        )

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
        """Another run's points predicted by this fit: [{mode, batch, step_us_ and host_us_ measured and
        predicted, unfitted}].

        `unfitted` names the kernel families a point runs that this fit had no data for (e.g. a run
        made after a kernel change that another run predates): their figures are the held defaults.
        Where both runs measured their host's speed, the host's costs are carried over at the other
        host's speed (`on_host`): a run made on a slow host does not make a fast one's steps slow.
        """
        model = model_from_result(other)
        points = points_from_result(other)
        if not points:
            raise ValueError(f"runs: the other run has no run of {_modelled_names()}")
        theta = self.on_host(host_index_of(other))
        predicted = ProbeModel(model, points, unpipelined_gemms(other)).predict(theta)
        names = [f.name for f in FAMILIES]
        return [
            {
                "mode": p.mode.name,
                "batch": p.batch,
                "step_us_measured": p.step_us,
                "step_us_predicted": float(s[0]),
                "host_us_measured": p.host_us,
                "host_us_predicted": float(s[1]),
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
    use = np.ones(len(points), bool)
    theta, fitted, pins = fit(sim, use)
    loo_step, loo_host = np.full(len(points), np.nan), np.full(len(points), np.nan)
    if loo:
        for i in range(len(points)):
            without = use.copy()
            without[i] = False
            loo_step[i], loo_host[i] = sim.predict(fit(sim, without)[0])[i, :2]
    return Calibration(
        device=result.device,
        host_index=host_index_of(result),
        model=model,
        points=tuple(points),
        params=dict(zip(NAMES, theta.tolist())),
        fitted=fitted,
        pins=pins,
        predicted=sim.predict(theta),
        loo_step_us=loo_step,
        simulator=sim,
        loo_host_us=loo_host,
    )
