"""Exact prior x noise-aware likelihood surrogate, sampled by NUTS (pymc_dp.surrogate)."""

from __future__ import annotations

import copy
import dataclasses
import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pdp
from pymc_dp.surrogate import WALK_LEFT, gaussian_surrogate
from tests.stats_helpers import check_moments


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


@pytest.fixture(scope="module")
def gaussian_prior_laplace():
    """``DPLaplace(nuts=True)`` on a logistic regression with Gaussian priors, and its model."""
    rng = np.random.default_rng(1)
    n = 3000
    X = rng.uniform(-1, 1, (n, 2))
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(X @ [1.0, -1.0] + 0.3)))).astype(int)
    with pm.Model() as model:
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
    return model, step


def test_dplaplace_nuts_draws_are_the_fit_under_a_gaussian_prior(gaussian_prior_laplace):
    model, step = gaussian_prior_laplace
    assert step.warm.walk is None  # a walk still moving is the next test's
    with model:
        idata = pdp.sample(
            step=copy.copy(step),
            draws=1000,
            tune=0,
            chains=2,
            cores=1,
            random_seed=2,
            progressbar=False,
        )
    draws = np.column_stack(
        [idata.posterior["a"].values.reshape(-1, 1), idata.posterior["b"].values.reshape(2000, 2)]
    )
    sd = np.sqrt(np.diag(step.warm.posterior_cov))
    # Monte Carlo error of 2000 NUTS draws (ESS ~ 1000+): ~0.03 sds on the mean, ~0.03 on the sd
    np.testing.assert_array_less(np.abs(draws.mean(0) - step.warm.mean) / sd, 0.15)
    np.testing.assert_allclose(draws.std(0) / sd, 1.0, atol=0.1)
    assert int(idata.sample_stats["surrogate_diverging"].sum()) == 0


#: A fit with a walk still moving, its covariance without the walk's spread, and the walk.
WALK_MEAN, WALK_C0 = np.array([0.3, 1.0, -1.0]), np.diag([0.04, 0.05, 0.05]) ** 2
WALK = np.array([0.12, 0.1, 0.0])  # 3 and 2 fit sds: the walk dominates the spread


def _walking(step):
    """A copy of ``step`` whose fit is ``N(WALK_MEAN, WALK_C0 + WALK WALK^T)``, walk ``WALK``."""
    warped = copy.copy(step)
    warped.warm = dataclasses.replace(
        step.warm,
        mean=WALK_MEAN,
        cov=0.5 * WALK_C0,
        noise_cov=0.5 * WALK_C0 + np.outer(WALK, WALK),
        walk=WALK,
    )
    return warped


def _nuts_draws(sur, seed: int) -> np.ndarray:
    """(chain, draw, dim) NUTS draws of ``q`` on a surrogate model, 2 x (1000 + 2000)."""
    idata = pm.sample(
        draws=2000,
        tune=1000,
        chains=2,
        cores=1,
        model=sur,
        random_seed=seed,
        initvals={"q": WALK_MEAN},
        target_accept=0.9,
        progressbar=False,
        compute_convergence_checks=False,
    )
    return idata.posterior["q"].values


def test_a_walk_still_moving_is_put_back_ahead_of_the_fit_not_around_it(gaussian_prior_laplace):
    """A fit whose Newton walk was still moving knows its mode lies ahead along ``walk``; its
    covariance holds that as the spread ``walk walk^T``. The surrogate takes the spread out and
    moves the likelihood's centre by ``s walk``, ``s ~ HalfNormal(1)``: under the Gaussian prior
    ``N(0, S)`` exact prior x surrogate is then, given ``s``, ``N(m + s walk, C0)`` tilted by the
    prior's ratio ``p(q) / p(q - s walk)``, weighted by ``s``'s marginal (computed here by
    quadrature, independently of the surrogate's code). Fails with the walk's sign flipped, with
    the spread left in (the mean stays at ``m``, sd 0.126 instead of 0.082) or with ``s`` fixed
    at 0 (found measuring: near-separable random intercepts, README 'Hierarchical models'). The
    sd's standard error is normal theory; this marginal's excess kurtosis (0.55) makes it ~1.13x
    too small (z ~ 3.5, not 4)."""
    _, step = gaussian_prior_laplace
    m, c0, walk = WALK_MEAN, WALK_C0, WALK
    warped = _walking(step)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sur = warped.surrogate_model(walk_ahead=True)
    assert not [w for w in caught if "pymc-dp" in str(w.message)]  # nothing floored
    draws = _nuts_draws(sur, seed=5)
    # the marginal of s and the tilted mean given s, S = 2.5^2 I (the model's prior)
    a = walk / 2.5**2
    s = np.linspace(0.0, 8.0, 4001)
    log_w = -0.5 * s**2 + 0.5 * s**2 * (walk @ a) - s * (a @ m) - s**2 * (a @ walk)
    log_w += 0.5 * s**2 * (a @ c0 @ a)
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    means = m + np.outer(s, walk - c0 @ a)
    mean = w @ means
    sd = np.sqrt(np.diag(c0) + w @ (means - mean) ** 2)
    assert (mean - m)[0] > 10 * sd[0] / np.sqrt(1000)  # ahead of the fit, many MC errors
    check_moments(draws, mean, sd)


def test_without_group_effects_the_fit_keeps_its_walk_s_spread(gaussian_prior_laplace):
    """By default a model without group effects keeps the symmetric spread of a walk still
    moving (measured: the walk overstates the distance left of a walk nearly arrived), so the
    surrogate gives back the fit ``N(m, cov + noise_cov)`` under the Gaussian prior; a wrong
    ``walk_ahead`` is refused by name."""
    _, step = gaussian_prior_laplace
    warped = _walking(step)
    with pytest.raises(TypeError, match="walk_ahead"):
        warped.surrogate_model(walk_ahead="yes")
    sur = warped.surrogate_model()
    assert WALK_LEFT not in sur.named_vars
    sd = np.sqrt(np.diag(warped.warm.posterior_cov))
    check_moments(_nuts_draws(sur, seed=6), WALK_MEAN, sd)


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


def test_tuning_draws_kept_for_pymc_s_tuning_iterations_are_nuts_own():
    """``keep_tuning`` leads the draws with NUTS' last tuning draws instead of drawing more
    after its tuning: the kept draws are the same chain's (same seed, same tuning length), and
    a ``keep_tuning`` beyond ``tune`` lengthens the tuning."""
    from pymc_dp.surrogate import sample_chain

    with pm.Model() as model:
        pm.Normal("q", 0.0, 1.0, shape=2)

    def run(draws, tune, keep):
        return sample_chain(
            model, draws=draws, tune=tune, rng=np.random.default_rng(3),
            start={"q": np.zeros(2)}, keep_tuning=keep,
        )

    plain, plain_div = run(10, 30, 0)
    kept, kept_div = run(10, 30, 5)
    assert plain.shape == (10, 2) and kept.shape == (15, 2) and kept_div.shape == (15,)
    np.testing.assert_array_equal(kept[5:], plain)  # the chain after its tuning: unchanged
    np.testing.assert_array_equal(kept_div[5:], plain_div)
    assert not np.any(np.all(kept[:5, None] == plain[None], axis=2))  # tuning draws, not kept ones
    longer, _ = run(10, 3, 20)
    assert longer.shape == (30, 2)
