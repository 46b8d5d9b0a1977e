"""Small PyMC models shared by the tests (built on public synthetic data)."""

from __future__ import annotations

import numpy as np
import pymc as pm


def logistic_regression(n: int = 200, d: int = 3, seed: int = 0) -> pm.Model:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    beta_true = rng.normal(size=d)
    y = rng.binomial(1, 1 / (1 + np.exp(-X @ beta_true)))
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 10, shape=d)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
    return model


def normal_scale(n: int = 150, seed: int = 1) -> pm.Model:
    rng = np.random.default_rng(seed)
    x = rng.normal(1.0, 2.0, size=n)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        sigma = pm.HalfNormal("sigma", 3)
        pm.Normal("x", mu, sigma, observed=x)
    return model


def hierarchical(n: int = 120, groups: int = 4, seed: int = 2) -> pm.Model:
    rng = np.random.default_rng(seed)
    g = rng.integers(0, groups, size=n)
    y = rng.normal(g * 0.5, 1.0)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 2)
        tau = pm.HalfNormal("tau", 1)
        theta = pm.Normal("theta", mu, tau, shape=groups)
        sigma = pm.Exponential("sigma", 1)
        pm.Normal("y", theta[g], sigma, observed=y)
    return model


def two_observed(n: int = 100, seed: int = 3) -> pm.Model:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    y = 2 * x + rng.normal(size=n)
    counts = rng.poisson(np.exp(0.3 * x))
    with pm.Model() as model:
        a = pm.Normal("a", 0, 3)
        b = pm.Normal("b", 0, 3)
        s = pm.LogNormal("s", 0, 1)
        pm.Normal("y", a * x, s, observed=y)
        pm.Poisson("k", pm.math.exp(b * x), observed=counts)
    return model
