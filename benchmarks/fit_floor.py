"""The floor of a private fit: one release of the exact mode's gradient, ideally preconditioned.

Issue 21's yardstick for the utility table. For a GLM data set of :mod:`benchmarks.realdata` and
a budget, the floor is the error a private fit could not beat with the structure it uses: the
whole budget on *one* Gaussian release of the clipped, whitened per-row gradient sum at the exact
posterior mode, whitened by the exact posterior curvature (``W = L^{-1}``, ``L L^T = H + P``), the
clip chosen by an oracle that knows the rows (the one that minimises the median error). The
release's error in posterior units is ``W^T (noise + bias(c))``: noise ``N(0, (2 c s)^2 I)`` with
``s`` the noise multiplier of the whole budget, bias the whitened gradient mass that clipping
removes. The figure is the median over noise draws of the largest ``|error_j| / sd_j``.

Non-private and data-reading by design: a benchmark yardstick, never part of a release.

``python -m benchmarks.fit_floor [--names ...] [--eps 1 2 4]``
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks import realdata
from pymc_dp.accounting.gaussian import gaussian_mu_for_budget
from pymc_dp.step_methods.base import default_delta

__all__ = ["floor", "mode_and_curvature", "main"]


def mode_and_curvature(data: realdata.RealData, prior_sd: float = realdata.PRIOR_SD):
    """Exact posterior mode, per-row gradients there and the posterior curvature ``H + P``."""
    X, y = data.X, data.y.astype(float)
    prior = np.eye(data.d) / prior_sd**2
    q = np.zeros(data.d)
    for _ in range(50):
        eta = X @ q
        if data.family == "logistic":
            mean = 1.0 / (1.0 + np.exp(-eta))
            w = mean * (1.0 - mean)
        else:
            mean = w = np.exp(eta)
        h = (X * w[:, None]).T @ X + prior
        q = q + np.linalg.solve(h, X.T @ (y - mean) - prior @ q)
    eta = X @ q
    mean = 1.0 / (1.0 + np.exp(-eta)) if data.family == "logistic" else np.exp(eta)
    return q, X * (y - mean)[:, None], h


def floor(data: realdata.RealData, epsilon: float, draws: int = 400, seed: int = 0) -> dict:
    """Median largest error (posterior sds) of one ideally preconditioned release; the clip."""
    _, grads, h = mode_and_curvature(data)
    chol = np.linalg.cholesky(h)
    w = np.linalg.inv(chol)
    sd = np.sqrt(np.diag(np.linalg.inv(h)))
    white = grads @ w.T
    norms = np.linalg.norm(white, axis=1)
    mu = gaussian_mu_for_budget(epsilon, default_delta(data.n))
    s = 1.0 / np.sqrt(2.0 * mu)
    z = np.random.default_rng(seed).standard_normal((draws, data.d))
    best = {"floor": np.inf}
    levels = np.r_[np.linspace(0.5, 0.99, 50), 1 - np.geomspace(1e-2, 1e-5, 30), 1.0]
    for c in np.quantile(norms, levels):
        scale = np.minimum(1.0, c / np.maximum(norms, 1e-300))
        bias = (white * (scale - 1.0)[:, None]).sum(axis=0)  # whitened mass clipping removes
        err = (bias + 2.0 * c * s * z) @ w  # W^T e: rows of the result are errors in q
        figure = float(np.median(np.max(np.abs(err) / sd, axis=1)))
        if figure < best["floor"]:
            best = {"floor": figure, "clip": float(c), "clipped": float(np.mean(norms > c))}
    return best


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = ["randhie", "fair", "breast_cancer", "synthetic_1e5"]
    p.add_argument("--names", nargs="+", default=names)
    p.add_argument("--eps", nargs="+", type=float, default=[1.0, 2.0, 4.0])
    args = p.parse_args(argv)
    for name in args.names:
        data = realdata.load(name)
        for eps in args.eps:
            f = floor(data, eps)
            print(
                f"{name:14s} eps={eps:g} floor={f['floor']:.2f} clip={f['clip']:.3g} "
                f"clipped={f['clipped']:.4f}"
            )


if __name__ == "__main__":
    main()
