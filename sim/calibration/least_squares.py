"""A small bounded nonlinear least-squares solver (numpy only), used by the calibration.

Levenberg-Marquardt on a box: few parameters, few points, no scipy dependency.
"""

from __future__ import annotations

import numpy as np


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
