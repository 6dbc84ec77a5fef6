"""A small bounded nonlinear least-squares solver (numpy only), and what the data pins, used by the calibration.

Levenberg-Marquardt on a box: few parameters (at most ~40), few points (at most a few hundred residuals), no
scipy dependency. A least-squares solver stops wherever its tolerance is met; along a direction the data does
not constrain, that place depends on rounding, and so on the CPU's BLAS kernels (two parameters of the small
run's batch-1 fit sat 1e-3 apart on an AVX2 and an AVX-512 machine). `fit_pinned` therefore asks, after the
fit, which parameters the data pins, and holds each one it does not at a stated value before fitting the rest
again: what it reports no longer depends on where a solver happened to stop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A parameter is pinned when its 95 % interval (the fit's value ± Z standard errors, on the log scale the fit
# works in) lies inside its box. Wider, and the data allows anything up to a bound: it is held.
Z = 2.0
_STEP = (
    1e-4  # central differences on the log scale: 0.01 % of the value, far above rounding, far below any kink
)
_RANK_RTOL = 1e-10  # singular values of the Jacobian below this share of the largest count as zero


def bounded_least_squares(
    residuals, u0, low, high, max_iter: int = 60, tol: float = 1e-9, fixed: np.ndarray | None = None
):
    """Levenberg-Marquardt with the step projected onto the box [low, high].

    Parameters whose column of the (forward-difference) Jacobian is zero -- nothing in the
    data depends on them -- stay where they started, as do those `fixed` marks. Returns
    (u, cost, mask of the parameters the data depends on).
    """
    u = np.clip(np.asarray(u0, float), low, high)
    fixed = np.zeros(len(u), bool) if fixed is None else np.asarray(fixed, bool)
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
        free = identifiable & ~fixed & ~((u <= low) & (grad > 0)) & ~((u >= high) & (grad < 0))
        if not free.any():
            break
        hess = jac[:, free].T @ jac[:, free]
        improved = False
        for _ in range(12):  # raise the damping until a step helps; a tiny step means converged
            step = np.linalg.solve(
                hess + lam * (np.diag(np.diag(hess)) + 1e-12 * np.eye(len(hess))), -grad[free]
            )
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


def log_sigmas(residuals, u: np.ndarray, free: np.ndarray) -> np.ndarray:
    """The standard error of each free parameter (inf where the data leaves it free to move; nan where not
    free), from the Gauss-Newton covariance s² (JᵀJ)⁻¹ at `u`, s² the residuals' variance.

    Through the Jacobian's singular values, so that a direction the data does not constrain gets an infinite
    variance rather than none (a pseudo-inverse would drop it and call the parameter exact)."""
    u = np.asarray(u, float)
    out = np.full(len(u), np.nan)
    index = np.flatnonzero(free)
    if not len(index):
        return out
    r = residuals(u)
    jac = np.empty((len(r), len(index)))
    for j, k in enumerate(index):
        up, down = u.copy(), u.copy()
        up[k] += _STEP
        down[k] -= _STEP
        jac[:, j] = (residuals(up) - residuals(down)) / (2 * _STEP)
    # vt whole: with fewer residuals than parameters, its last rows are the null space
    _, s, vt = np.linalg.svd(jac)
    s = np.pad(s, (0, len(index) - len(s)))
    variance = (r @ r) / max(len(r) - len(index), 1)
    small = s <= _RANK_RTOL * s.max()
    with np.errstate(divide="ignore"):
        inverse = np.where(small, np.inf, 1.0 / np.where(small, 1.0, s) ** 2)
    # Var(u_k) = s² Σ_j V_kj² / S_j²; a null direction that touches u_k makes it infinite.
    weights = vt**2  # [j, k]
    touches = weights > 1e-12
    var = variance * np.where(touches, weights * np.where(np.isinf(inverse), 0.0, inverse)[:, None], 0.0).sum(
        0
    )
    var[(touches & np.isinf(inverse)[:, None]).any(axis=0)] = np.inf
    out[index] = np.sqrt(var)
    return out


@dataclass(frozen=True, slots=True)
class Pinned:
    """A pinned fit: the parameters, the cost, and for each parameter what the data says of it."""

    u: np.ndarray
    cost: float
    seen: np.ndarray  # the data depends on it at all
    held: np.ndarray  # seen, but not pinned: held at a bound (or the prior) and the rest refitted
    sigma: np.ndarray  # standard error of a pinned parameter (log scale); nan where held or unseen


def _held_value(residuals, u: np.ndarray, k: int, low: float, high: float, prior: float) -> float:
    """Where to hold parameter k, which the data does not pin: of its prior and its two bounds, the one the data
    likes best with the rest where they are. The data may not pin a parameter and still lean one way (a
    bandwidth whose bytes cost less the higher it goes: "at least this much"); that lean is many orders of
    magnitude above rounding, so the choice is the same on every CPU. Where it leans no way, the prior."""
    prior = min(max(prior, low), high)
    costs = {}
    for value in (prior, low, high):
        trial = u.copy()
        trial[k] = value
        r = residuals(trial)
        costs[value] = float(r @ r)
    best = min(costs, key=costs.get)
    return prior if costs[prior] - costs[best] <= 1e-9 * (1 + costs[best]) else best


def fit_pinned(residuals, starts, low, high, prior) -> Pinned:
    """The best fit over `starts`, then the parameters the data does not pin held one at a time.

    A parameter is pinned when its 95 % interval (from the Gauss-Newton covariance) lies inside the box.
    The least pinned one (the widest interval) is tried first: held at its prior or at a bound
    (`_held_value`) and the rest fitted again. If that fit is as good as the data can tell (its cost within
    Z² residual variances of the best), the parameter stays held; if not, the data does pin it -- only not
    in a way a local interval shows (one-sided, or past a kink) -- and it stays free. One at a time, because
    two parameters the data pins only together (a kernel's latency and bandwidth at a single size) are both
    pinned once either is held.
    """
    low, high, prior = (np.asarray(a, float) for a in (low, high, prior))
    best = None
    for u0 in starts:
        u, cost, seen = bounded_least_squares(residuals, u0, low, high)
        if best is None or cost < best[1] - 1e-12:
            best = (u, cost, seen)
    u, cost, seen = best
    u = u.copy()
    u[~seen] = np.clip(prior[~seen], low[~seen], high[~seen])
    # What "as good as the data can tell" means: the residuals' variance at the best fit.
    allowed = Z**2 * cost / max(len(residuals(u)) - int(seen.sum()), 1)
    held, kept = np.zeros(len(u), bool), np.zeros(len(u), bool)
    while True:
        free = seen & ~held
        sigma = log_sigmas(residuals, u, free)
        reach = (u - Z * sigma <= low) | (u + Z * sigma >= high)
        loose = free & ~kept & ~(np.isfinite(sigma) & ~reach)
        if not loose.any():
            break
        k = int(np.flatnonzero(loose)[np.argmax(np.where(np.isfinite(sigma), sigma, np.inf)[loose])])
        trial = u.copy()
        trial[k] = _held_value(residuals, u, k, low[k], high[k], prior[k])
        trial_u, trial_cost, _ = bounded_least_squares(
            residuals, trial, low, high, fixed=held | ~seen | _one_hot(len(u), k)
        )
        if trial_cost - cost <= allowed:
            u, cost = trial_u, trial_cost
            held[k] = True
        else:
            kept[k] = True
    sigma[~free] = np.nan
    return Pinned(u=u, cost=float(cost), seen=seen, held=held, sigma=sigma)


def _one_hot(n: int, k: int) -> np.ndarray:
    out = np.zeros(n, bool)
    out[k] = True
    return out
