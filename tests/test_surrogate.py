"""Exact prior x noise-aware likelihood surrogate, sampled by NUTS (pymc_dp.surrogate)."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pdp
from pymc_dp.surrogate import gaussian_surrogate


def test_the_gaussian_surrogate_gives_back_the_fit_under_a_gaussian_prior():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 4))
    cov = a @ a.T / 40 + 0.01 * np.eye(4)  # a fit much narrower than the prior
    prior_precision = np.diag([0.2, 0.5, 0.1, 0.3])
    mean, prior_mean = rng.normal(size=4), np.zeros(4)
    grad = -prior_precision @ (mean - prior_mean)
    idx, p, g, floored = gaussian_surrogate(mean, cov, -prior_precision, grad, np.ones(4, bool))
    assert floored == 0
    assert list(idx) == [0, 1, 2, 3]
    # prior x surrogate: precision and mode are the fit's
    np.testing.assert_allclose(prior_precision + p, np.linalg.inv(cov), rtol=1e-8)
    # gradient of the posterior at the fit's mean vanishes: prior's + surrogate's (g at d = 0)
    np.testing.assert_allclose(grad + g, 0.0, atol=1e-10)


def test_directions_the_fit_does_not_inform_stay_the_prior_s():
    """A fit as wide as the prior along one direction: no likelihood information there (the
    surrogate's precision is floored at 0 and does not pull along it); coordinates the
    likelihood does not read (prior-only variables) are left out."""
    prior_precision = np.diag([1.0, 1.0, 4.0])
    cov = np.diag([0.01, 1.2, 0.1])  # wider than the prior along coordinate 1: noise
    mean = np.array([0.3, -0.2, 0.5])
    grad = -prior_precision @ mean
    idx, p, g, floored = gaussian_surrogate(
        mean, cov, -prior_precision, grad, np.array([True, True, False])
    )
    assert floored == 1
    assert list(idx) == [0, 1]
    assert np.all(np.linalg.eigvalsh(p) >= -1e-12)
    assert p[1, 1] == pytest.approx(0.0, abs=1e-9) and g[1] == pytest.approx(0.0, abs=1e-12)
    assert p[0, 0] == pytest.approx(99.0)


def test_dplaplace_nuts_draws_are_the_fit_under_a_gaussian_prior():
    rng = np.random.default_rng(1)
    n = 3000
    X = rng.uniform(-1, 1, (n, 2))
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(X @ [1.0, -1.0] + 0.3)))).astype(int)
    with pm.Model():
        Xd = pm.Data("X", X)
        a = pm.Normal("a", 0, 2.5)
        b = pm.Normal("b", 0, 2.5, shape=2)
        pm.Bernoulli("y", logit_p=a + Xd @ b, observed=y)
        clip = pdp.glm_clip(np.ones(3))
        step = pdp.DPLaplace(
            epsilon=2.0,
            grad_clip=clip.grad_clip,
            hess_clip=clip.hess_clip,
            nuts=True,
            nuts_tune=500,
            noise_seed=4,
        )
        idata = pdp.sample(
            step=step, draws=1000, tune=0, chains=2, cores=1, random_seed=2, progressbar=False
        )
    draws = np.column_stack(
        [idata.posterior["a"].values.reshape(-1, 1), idata.posterior["b"].values.reshape(2000, 2)]
    )
    sd = np.sqrt(np.diag(step.warm.posterior_cov))
    # Monte Carlo error of 2000 NUTS draws (ESS ~ 1000+): ~0.03 sds on the mean, ~0.03 on the sd
    np.testing.assert_array_less(np.abs(draws.mean(0) - step.warm.mean) / sd, 0.15)
    np.testing.assert_allclose(draws.std(0) / sd, 1.0, atol=0.1)
    assert int(idata.sample_stats["surrogate_diverging"].sum()) == 0


def test_a_prior_that_is_not_log_concave_lends_no_information_and_no_runaway():
    """A Cauchy-like prior (positive curvature at the fit's mean) must not count as likelihood
    information, and a weakly informed direction must not put the centre far away."""
    cov = np.array([[0.36]])  # fit sd 0.6
    hessian = np.array([[0.5]])  # log prior convex here (heavy tails)
    grad = np.array([-1.0])
    idx, p, g, floored = gaussian_surrogate(np.array([0.3]), cov, hessian, grad, np.ones(1, bool))
    assert p[0, 0] == pytest.approx(1 / 0.36)  # C^-1 minus a floored (zero) prior precision
    assert abs(g[0] / p[0, 0]) <= 3 * 0.6 + 1e-12  # centre within CENTRE_CAP fit sds
    near = np.array([[1 / (1 / 0.36 + 0.01)]])  # a fit barely narrower than a N(0, 0.6) prior
    _, p2, g2, _ = gaussian_surrogate(
        np.array([0.3]), near, -np.array([[1 / 0.36]]), grad, np.ones(1, bool)
    )
    assert p2[0, 0] == pytest.approx(0.01)
    assert abs(g2[0] / p2[0, 0]) <= 3 * np.sqrt(near[0, 0]) + 1e-9  # not 1 / 0.01 = 100
