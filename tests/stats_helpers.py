"""Monte Carlo tolerances shared by the statistical tests."""

from __future__ import annotations

import arviz as az
import numpy as np


def check_moments(draws: np.ndarray, mean: np.ndarray, sd: np.ndarray, z: float = 4.0) -> None:
    """Posterior mean and sd of each coordinate within ``z`` Monte Carlo standard errors.

    ``draws`` has shape (chain, draw, d). The standard errors use ArviZ's ESS: ``sd / sqrt(ESS)``
    for the mean and ``sd / sqrt(2 ESS_sd)`` for the sd (the sd of a sample sd for a normal target).
    With z = 4 a correct sampler fails one comparison with probability ~6e-5.
    """
    for j in range(draws.shape[-1]):
        x = draws[..., j]
        ess_mean, ess_sd = az.ess(x), az.ess(x, method="sd")
        assert ess_mean > 100, f"too few effective draws ({ess_mean:.0f}) for a meaningful test"
        se_mean = sd[j] / np.sqrt(ess_mean)
        se_sd = sd[j] / np.sqrt(2 * ess_sd)
        assert abs(x.mean() - mean[j]) < z * se_mean, (j, x.mean(), mean[j], se_mean)
        assert abs(x.std() - sd[j]) < z * se_sd, (j, x.std(), sd[j], se_sd)


def check_moments_between_runs(
    runs: np.ndarray, mean: np.ndarray, sd: np.ndarray, alpha: float = 1e-4
) -> None:
    """Mean and variance from R independent runs that each start at an exact posterior draw.

    Every draw of such a run is marginally distributed as the posterior, so per-run averages of
    ``x`` and ``(x - mean)^2`` are i.i.d. with expectations ``mean`` and ``sd^2`` however slowly
    the chain mixes. Their between-run spread gives the Monte Carlo standard error, and a
    two-sided t-test with R - 1 degrees of freedom at level ``alpha`` per coordinate decides.
    ``runs`` has shape (R, draws, d).
    """
    from scipy import stats

    r = runs.shape[0]
    crit = stats.t.ppf(1 - alpha / 2, df=r - 1)
    for name, per_run, target in (
        ("mean", runs.mean(axis=1), mean),
        ("variance", ((runs - mean) ** 2).mean(axis=1), sd**2),
    ):
        se = per_run.std(axis=0, ddof=1) / np.sqrt(r)
        t = (per_run.mean(axis=0) - target) / se
        assert np.all(np.abs(t) < crit), (name, t.round(2), crit)


def stationary_runs(model, step, starts: np.ndarray, iterations: int, var: str = "theta"):
    """One single-chain ``pdp.sample`` run per start; no burn-in is needed when the starts are
    exact posterior draws. Each run is a step renewed from ``step`` (``step.renew()``: the same
    compiled kernels, a budget of its own), so each call is its own release. Returns draws of
    shape (runs, iterations, d) and the results.
    """

    import pymc_dp as pdp

    out = []
    with model:
        for r, start in enumerate(starts):
            out.append(
                pdp.sample(
                    draws=iterations,
                    tune=0,
                    chains=1,
                    cores=1,
                    step=step.renew(),
                    random_seed=100 + r,
                    noise_seed=200 + r,
                    initvals={var: start},
                    progressbar=False,
                    compute_convergence_checks=False,
                )
            )
    return np.stack([i.posterior[var].values[0] for i in out]), out


def check_mixing(runs: np.ndarray, min_ess: float = 100.0) -> None:
    """The runs must forget their starts, or a between-run test only re-checks the starts."""
    for j in range(runs.shape[-1]):
        ess = float(az.ess(runs[..., j]))
        assert ess > min_ess, f"coordinate {j}: ESS {ess:.0f} <= {min_ess}: runs too short"
