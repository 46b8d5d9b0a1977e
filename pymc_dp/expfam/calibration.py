"""Calibration of private posteriors by simulation (Bernstein & Sheldon 2018, Sec. 4; Cook,
Gelman & Rubin 2006).

Draw ``theta_i`` from the prior and a data set from ``p(x | theta_i)``, release its noisy
statistic, run the inference and record the quantile ``U_i`` of ``theta_i`` among the posterior
draws (its rank, spread uniformly within its cell as in simulation-based calibration). For the
exact posterior ``U_i ~ Uniform(0, 1)``; the Kolmogorov-Smirnov distance of ``U_{1:M}`` to the
uniform measures miscalibration. Everything is vectorised over the ``M`` trials (one Gibbs
chain per trial in a batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from pymc_dp.checks import check_count, check_epsilon
from pymc_dp.expfam._random import laplace
from pymc_dp.expfam.families import Family
from pymc_dp.expfam.gibbs import exact_posterior, gibbs, naive_posterior

__all__ = ["CalibrationResult", "calibration_study", "ks_critical_value", "ks_uniform"]

METHODS = ("gibbs", "naive", "exact")


def ks_uniform(u: ArrayLike) -> float:
    """Kolmogorov-Smirnov distance between the empirical CDF of ``u`` and Uniform(0, 1)."""
    return float(stats.kstest(np.asarray(u, dtype=np.float64).ravel(), "uniform").statistic)


def ks_critical_value(m: int, alpha: float = 0.05) -> float:
    """Critical value of the one-sample KS distance for ``m`` points at level ``alpha`` (exact
    ``kstwo`` quantile; ~1.358 / sqrt(m) at 5%): a calibrated method exceeds it with probability
    ``alpha``."""
    return float(stats.kstwo.ppf(1.0 - alpha, check_count(m, "m", minimum=1)))


@dataclass(frozen=True)
class CalibrationResult:
    """Posterior quantiles of the true parameter over ``trials`` simulated releases.

    Attributes
    ----------
    quantiles : dict
        Method name -> array ``(trials, *theta_shape)`` of ``U_i``.
    ks : dict
        Method name -> KS distance to the uniform, per component of theta (``(*theta_shape,)``).
    critical_value : float
        5% critical value of the KS distance for ``trials`` points.
    theta : ndarray
        True parameters ``(trials, *theta_shape)``.
    """

    family: Family
    n: int
    epsilon: float
    trials: int
    quantiles: dict[str, NDArray[np.float64]] = field(repr=False)
    ks: dict[str, NDArray[np.float64]]
    critical_value: float
    theta: NDArray[np.float64] = field(repr=False)

    def table(self) -> str:
        """Plain-text table of the KS distances."""
        lines = [
            f"{self.family.describe()}, n = {self.n}, epsilon = {self.epsilon:g}, "
            f"M = {self.trials} trials (5% critical value {self.critical_value:.4f})"
        ]
        for method, ks in self.ks.items():
            values = ", ".join(f"{v:.4f}" for v in np.ravel(ks))
            lines.append(f"  {method:<8} KS = {values}")
        return "\n".join(lines)


def _quantiles(
    draws: NDArray[np.float64], theta: NDArray[np.float64], rng: np.random.Generator
) -> NDArray[np.float64]:
    """Posterior quantile of the truth, per trial and component; draws (M, S, ...).

    The rank ``r`` of the truth among ``S`` draws is spread uniformly over its cell,
    ``U = (r + V) / (S + 1)`` with ``V ~ Uniform(0, 1)`` (Talts et al. 2018): for a calibrated
    method ``U`` is then exactly Uniform(0, 1), not a lattice with atoms at 0 and 1.
    """
    ranks = (draws < theta[:, None]).sum(axis=1)
    return (ranks + rng.random(ranks.shape)) / (draws.shape[1] + 1)


def calibration_study(
    family: Family,
    prior: ArrayLike,
    *,
    n: int,
    epsilon: float,
    trials: int = 1000,
    draws: int = 1000,
    tune: int = 500,
    methods: Sequence[str] = METHODS,
    random_seed: int | np.random.Generator | None = None,
    section_covariance: bool = True,
) -> CalibrationResult:
    """Calibration experiment of Bernstein & Sheldon (2018), Sec. 4, for one family.

    Parameters
    ----------
    family : Family
        Likelihood family (with public bounds for truncated families).
    prior : array_like
        Conjugate-prior hyperparameters; the true parameters are drawn from this prior.
    n : int
        Records per simulated data set.
    epsilon : float
        Privacy parameter of each simulated release.
    trials : int
        Number ``M`` of simulated (theta, data, release) triples.
    draws, tune : int
        Gibbs draws and burn-in per trial (the paper: 5000 and 2000).
    methods : sequence of str
        Any of ``"gibbs"`` (this package), ``"naive"`` (noisy statistic plugged into the
        conjugate update) and ``"exact"`` (non-private conjugate posterior).
    random_seed : int or Generator, optional
        Seed of the whole experiment.
    section_covariance : bool
        Passed to :func:`~pymc_dp.expfam.gibbs` (truncated families).

    Returns
    -------
    CalibrationResult
    """
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown `methods` {sorted(unknown)}; choose from {METHODS}")
    prior_arr = family.check_prior(prior)
    n = check_count(n, "n", minimum=1)
    trials = check_count(trials, "trials", minimum=1)
    epsilon = check_epsilon(epsilon)
    rng = np.random.default_rng(random_seed)
    theta = family.sample_prior(rng, prior_arr, trials)
    s_hat, s = family.simulate(rng, theta, n)
    y = s_hat + laplace(rng, family.sensitivity / epsilon, s_hat.shape)
    quantiles: dict[str, NDArray[np.float64]] = {}
    for method in methods:
        if method == "gibbs":
            post = gibbs(
                family,
                prior_arr,
                y,
                n,
                epsilon,
                draws=draws,
                tune=tune,
                random_seed=rng,
                section_covariance=section_covariance,
            ).theta
        elif method == "naive":
            post = naive_posterior(family, prior_arr, y, n, draws=draws, random_seed=rng)
        else:
            post = exact_posterior(family, prior_arr, s, n, draws=draws, random_seed=rng)
        quantiles[method] = _quantiles(post, theta, rng)
    ks = {
        m: np.array([ks_uniform(u) for u in q.reshape(trials, -1).T]).reshape(family.theta_shape)
        for m, q in quantiles.items()
    }
    return CalibrationResult(
        family=family,
        n=n,
        epsilon=epsilon,
        trials=trials,
        quantiles=quantiles,
        ks=ks,
        critical_value=ks_critical_value(trials),
        theta=theta,
    )
