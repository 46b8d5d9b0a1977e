"""Objective perturbation for the location of a private logistic fit: measured, not adopted.

Issue 21 asked whether objective perturbation (OP; Chaudhuri et al. 2011, Kifer et al. 2012,
Redberg, Koskela & Wang 2023) locates the posterior better than `DPLaplace`'s Newton path at
small epsilon. This yardstick gives OP every advantage a release could not have, and measures it
against NUTS on the utility table's data sets:

* the whole budget on OP (no curvature release);
* the **exact** data curvature at the OP output, used to undo the regulariser and to weigh the
  noise (``m = q + H^-1 lam q``, likelihood ``N(m, H^-1 + sigma^2 H^-2)``, times the prior);
* the regulariser ``lam`` swept over multiples of its smallest sensible value.

**Mechanism.** ``q = argmin sum_i l(x_i^T q; y_i) + lam/2 |q|^2 + b^T q``, ``b ~ N(0, sigma^2 I)``,
``l`` the logistic loss (``|l'| <= 1``, ``0 <= l'' <= 1/4``), ``|x| <= R`` from the public box.

**Privacy (replace-one; derived here, pinned by ``tests/test_objective_perturbation_bound.py``).**
The map ``q -> b_D(q) = -grad L_D(q) - lam q`` is a bijection, so ``p_D(q) = N(b_D(q)) det(H_D(q) +
lam I)``. Replacing row ``z = (x, y)`` by ``z' = (x', y')`` shifts ``b`` by ``g = s x - s' x'``
with ``s, s'`` in ``[-1, 1]`` (``l'`` at ``q``, arbitrary functions of the output) and changes the
determinant by a ratio of two rank-one factors over the shared rows' ``H + lam I``, each in ``[1,
1 + beta/lam]``, ``beta = R^2/4``. The
privacy loss at an output drawn from ``D`` is therefore at most

    eps_J + max over the box's corners (s, s') of  b^T g / sigma^2 + |g|^2 / (2 sigma^2)
      <= eps_J + mu max(|w_1|, |w_2|) + mu^2 / 2,

``eps_J = log(1 + beta / lam)``, ``mu = 2 R / sigma``, ``w_i`` the standardised projections of
``b`` on ``x - x'`` and ``x + x'`` (convexity in ``(s, s')`` puts the maximum at a corner; ``|x +-
x'| <= 2R``). By Sidak's inequality ``max(|w_1|, |w_2|)`` is stochastically smaller than the same
maximum of two *independent* standard normals, ``M``. Every hockey-stick divergence is increasing
in the loss, so ``delta(eps) <= E[(1 - exp(eps - eps_J - mu M - mu^2/2))_+]``; the same holds with
``D`` and ``D'`` swapped. OP also needs the exact minimiser (Newton here, to a gradient of 1e-10).
Constants are ours, not the paper's; a benchmark's yardstick, not a release of the package.

``python -m benchmarks.objective_perturbation [--names ...] [--eps 1 2 4] [--reps 20]``
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy import integrate, optimize, special, stats

from benchmarks import realdata
from pymc_dp.step_methods.base import default_delta

__all__ = ["op_delta", "op_mu_for_budget", "op_fit", "op_rows", "main"]

#: Regularisers tried, in multiples of beta = R^2 / 4 (eps_J = log(1 + 1 / multiple)); the best
#: is chosen afterwards on the figure reported (a favour to OP). Widened in review: the best sat at
#: an edge of (4, 16, 64) in 6 of 9 cells.
LAM_MULTIPLES = (1.0, 2.0, 4.0, 16.0, 64.0, 256.0, 1024.0)


def _max_abs_density(m: np.ndarray | float) -> np.ndarray | float:
    """Density of the maximum of two independent ``|N(0, 1)|``: ``d/dm (2 Phi(m) - 1)^2``."""
    return 4.0 * stats.norm.pdf(m) * (2.0 * stats.norm.cdf(m) - 1.0)


def op_delta(epsilon: float, mu: float, eps_j: float) -> float:
    """The bound on OP's delta at ``epsilon`` (module docstring): ``E[(1 - e^(epsilon - U))_+]``,
    ``U = eps_j + mu M + mu^2 / 2``, ``M`` the largest of two independent ``|N(0, 1)|``."""
    lo = max(0.0, (epsilon - eps_j - 0.5 * mu * mu) / mu)

    def integrand(m: float) -> float:
        return -math.expm1(epsilon - eps_j - mu * m - 0.5 * mu * mu) * _max_abs_density(m)

    # 40 sds past the threshold: the density there is below 1e-300
    value, _ = integrate.quad(integrand, lo, lo + 40.0, epsabs=1e-300, epsrel=1e-10, limit=200)
    return float(value)


def op_mu_for_budget(epsilon: float, delta: float, eps_j: float) -> float:
    """Largest ``mu = 2 R / sigma`` with ``op_delta(epsilon, mu, eps_j) <= delta``."""
    if eps_j >= epsilon:
        raise ValueError(f"eps_j={eps_j} leaves no budget below epsilon={epsilon}")

    def gap(log_mu: float) -> float:
        # delta underflows to 0 far below the budget's mu: floored for the log
        return math.log(max(op_delta(epsilon, math.exp(log_mu), eps_j), 1e-300)) - math.log(delta)

    return math.exp(optimize.brentq(gap, math.log(1e-3), math.log(50.0), xtol=1e-12))


def op_fit(X: np.ndarray, y: np.ndarray, lam: float, b: np.ndarray) -> np.ndarray:
    """The exact minimiser of the perturbed objective (Newton; strongly convex by ``lam``)."""
    q = np.zeros(X.shape[1])
    for _ in range(200):
        p = special.expit(X @ q)
        grad = X.T @ (p - y) + lam * q + b
        if np.linalg.norm(grad) < 1e-10:
            return q
        hess = (X * (p * (1 - p))[:, None]).T @ X + lam * np.eye(q.size)
        q = q - np.linalg.solve(hess, grad)
    raise RuntimeError("Newton did not reach the exact minimiser OP's guarantee needs")


def _posterior(X, y, q, lam, sigma, prior_prec):
    """Prior x OP's likelihood surrogate with the exact curvature at ``q`` (OP's best case)."""
    p = special.expit(X @ q)
    h_inv = np.linalg.pinv((X * (p * (1 - p))[:, None]).T @ X)
    centre = q + h_inv @ (lam * q)
    lik_prec = np.linalg.pinv(h_inv + sigma**2 * h_inv @ h_inv)
    cov = np.linalg.inv(lik_prec + prior_prec)
    return cov @ (lik_prec @ centre), np.sqrt(np.diag(cov))


def op_rows(name: str, epsilons, reps: int, seed: int = 0) -> list[tuple]:
    """Per (epsilon, lam): median and p90 of the largest error in NUTS sds, own sds, coverage."""
    data = realdata.load(name)
    X, y = data.X, data.y.astype(float)
    ref = realdata.nuts_reference(name)
    radius = float(np.linalg.norm(data.abs_bounds))
    beta = radius**2 / 4.0
    prior_prec = np.eye(data.d) / realdata.PRIOR_SD**2
    rows = []
    for eps in epsilons:
        for mult in LAM_MULTIPLES:
            lam = mult * beta
            eps_j = math.log1p(beta / lam)
            sigma = 2.0 * radius / op_mu_for_budget(eps, default_delta(data.n), eps_j)
            rng = np.random.default_rng([seed, int(eps * 1000), int(mult)])  # per cell
            z, own, cover = [], [], []
            for _ in range(reps):
                q = op_fit(X, y, lam, rng.normal(0.0, sigma, data.d))
                mean, sd = _posterior(X, y, q, lam, sigma, prior_prec)
                err = np.abs(mean - ref["mean"])
                z.append(np.max(err / ref["sd"]))
                own.append(np.max(err / sd))
                cover.append(np.mean(err < stats.norm.ppf(0.95) * sd))
            rows.append(
                (
                    name,
                    eps,
                    mult,
                    sigma,
                    np.median(z),
                    np.quantile(z, 0.9),
                    np.max(own),
                    np.mean(cover),
                )
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--names", nargs="+", default=["randhie", "fair", "breast_cancer"])
    p.add_argument("--eps", nargs="+", type=float, default=[1.0, 2.0, 4.0])
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args(argv)
    print("| data | eps | lam / beta | sigma | median | p90 | own sds (max) | coverage |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.names:
        for row in op_rows(name, args.eps, args.reps):
            print("| {} | {:g} | {:g} | {:.1f} | {:.2f} | {:.2f} | {:.2f} | {:.0%} |".format(*row))


if __name__ == "__main__":
    main()
