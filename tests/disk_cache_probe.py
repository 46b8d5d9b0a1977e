"""Build and run the package's steps on private rows with distinctive values, in a process whose
PyTensor compiledir is given on the command line (``tests/test_privacy_disk_cache.py`` then
searches every file written there for those values).

``python tests/disk_cache_probe.py VALUES.npy SEED`` (set ``PYTENSOR_FLAGS=base_compiledir=...``):
the rows' values depend on ``SEED``, their shapes do not.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pymc as pm
from scipy.special import gammaln

import pymc_dp as pdp
from pymc_dp import abcdp, expfam

N = 240


def _rows(seed: int, size) -> np.ndarray:
    """Values no compiled program holds by chance: 12 significant digits."""
    return np.round(np.random.default_rng(seed).uniform(-0.9, 0.9, size), 12) + 1.234567e-7


def main(out: str, seed: int) -> None:
    warnings.simplefilter("ignore")
    X = _rows(10 * seed + 1, (N, 2))
    y = X @ np.array([1.0, -0.5]) + 0.3 * _rows(10 * seed + 2, N)
    flags = np.random.default_rng(10 * seed + 3).binomial(1, 0.4, N)
    g = np.random.default_rng(10 * seed + 4).integers(0, 4, N)
    counts = np.random.default_rng(10 * seed + 5).poisson(np.exp(2.0 + X @ np.array([0.5, 0.3])))
    # a column every row shares (found in review: folded into one inline value)
    shared = np.full(N, 0.7312345678901 + 0.1 * seed)
    # PyMC's Poisson row holds log(k!) of each count: values derived from the rows, which
    # PyTensor folds into a constant when the counts are one
    derived = gammaln(np.unique(counts[counts >= 2]) + 1.0)
    np.save(out, np.r_[X.ravel(), y, derived, shared[:1]])
    sample = dict(draws=10, tune=10, chains=1, cores=1, progressbar=False, random_seed=0)

    with pm.Model() as linear:  # literal covariates: PyMC embeds them as constants
        beta = pm.Normal("beta", 0, 3, shape=2)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", pm.math.dot(X, beta), sigma, observed=y)
    with pm.Model() as logistic:  # pm.Data covariates: the kernels freeze them
        Xd = pm.Data("X", X)
        b = pm.Normal("b", 0, 2.5, shape=2)
        pm.Bernoulli("k", logit_p=pm.math.dot(Xd, b), observed=flags)
    with pm.Model() as constant_column:  # and outcomes all 0 (a rare event nobody had)
        b = pm.Normal("b", 0, 2.5, shape=2)
        pm.Bernoulli("k", logit_p=pm.math.dot(np.c_[X[:, 0], shared], b), observed=0 * flags)
    with pm.Model() as grouped:
        a = pm.Normal("a", 0, 2)
        tau, z = pm.HalfNormal("tau", 1.0), pm.Normal("z", 0, 1, shape=4)
        b = pm.Normal("b", 0, 2.5, shape=2)
        pm.Bernoulli("k", logit_p=a + tau * z[g] + pm.math.dot(X, b), observed=flags)
    with pm.Model() as poisson:
        b = pm.Normal("b", 0, 2.5, shape=2)
        pm.Poisson("c", mu=pm.math.exp(2.0 + pm.math.dot(X, b)), observed=counts)
    steps = [
        (poisson, lambda: pdp.DPPenalty(epsilon=4.0, llr_clip=[5.0, 5.0])),
        (logistic, lambda: pdp.DPLaplace(epsilon=4.0, grad_clip=2.0, hess_clip=1.0)),
        (constant_column, lambda: pdp.DPLaplace(epsilon=4.0, grad_clip=2.0, hess_clip=1.0)),
        (logistic, lambda: pdp.DPPenalty(epsilon=4.0, llr_clip=[1.5, 1.5])),
        (logistic, lambda: pdp.DPHMC(epsilon=4.0, llr_clip=[1.5, 1.5], grad_clip=2.0)),
        (
            logistic,
            lambda: pdp.DPMinibatchPenalty(
                epsilon=4.0, batch_size=60, llr_clip=1.5, proposal_scale=0.05
            ),
        ),
        (linear, lambda: pdp.DPLaplace(epsilon=4.0, grad_clip=3.0)),
        (
            linear,
            lambda: pdp.DPSuffStats(
                epsilon=4.0, outcome_bounds=(-2.0, 2.0), covariate_bounds=(-1.0, 1.0), nuts_tune=20
            ),
        ),
        (grouped, lambda: pdp.DPLaplace(epsilon=4.0, grad_clip=3.0, nuts_tune=20)),
    ]
    for model, make in steps:
        with model:
            pdp.sample(step=make(), **sample)
    with pm.Model() as normal:
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, 1.0, observed=y)
    expfam.sample(normal, epsilon=1.0, bounds=(-2.0, 2.0), draws=20, tune=10, chains=1)
    with pm.Model() as trials:  # refused (one trial count per row), after reading them
        p = pm.Beta("p", 1, 1)
        pm.Binomial("k", n=counts + 1000, p=p, observed=counts)
    try:
        expfam.sample(trials, epsilon=1.0, bounds=(0.0, 1.0), draws=20, tune=10, chains=1)
    except ValueError:
        pass
    with pm.Model() as simulated:
        m = pm.Normal("m", 0, 1)
        pm.Simulator("y", lambda rng, m, size: rng.normal(m, 1.0, size), m, observed=y)
    abcdp.sample_abcdp(
        simulated, epsilon=1.0, threshold=2.0, n_accept=2, n_proposals=40, progressbar=False
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
