"""The Taylor anchor (``pymc_dp/anchor.py``): its bounds on adversarial rows, its one release
(accounting pinned to dp-accounting), and the anchored DPPenalty and DPHMC against the exact
posterior."""

from __future__ import annotations

import re
import warnings

import dp_accounting as dpa
import numpy as np
import pymc as pm
import pytest

import pymc_dp as pdp
from pymc_dp.anchor import ANCHOR_NAME, remainder_bound, tilt_sds
from pymc_dp.examples import logistic_regression_model
from pymc_dp.noise import SNAP_GRID
from pymc_dp.step_methods.anchoring import ANCHORED_WARM_START, DEFAULT_ANCHOR_SHARE
from tests.stats_helpers import check_moments

COV_BOUND = np.array([1.0, 3.0, 3.0])


def _logistic_rows(X, y, th):
    """Per-row log-likelihood and gradients of the logistic model, in numpy."""
    eta = X @ th
    p = 1.0 / (1.0 + np.exp(-eta))
    return y * eta - np.logaddexp(0.0, eta), (y - p)[:, None] * X


def _design(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), np.clip(rng.normal(size=(n, 2)), -3, 3)])
    # adversarial rows: every corner of the covariate box, with both outcomes
    corners = np.array([[1.0, a, b] for a in (-3.0, 3.0) for b in (-3.0, 3.0)])
    X = np.vstack([X, corners, corners])
    y = np.concatenate([rng.binomial(1, 0.4, n), np.zeros(4), np.ones(4)])
    return X, y


def test_remainder_bounds_hold_on_every_row_and_are_small_near_the_anchor():
    X, y = _design(300, 0)
    clip = pdp.glm_clip(COV_BOUND)
    active = np.ones(3, bool)
    rng = np.random.default_rng(1)
    ratios, grad_ratios, gains = [], [], []
    for scale in (0.02, 0.3, 3.0):  # near the anchor up to far from it
        for _ in range(200):
            a, q, q_new = rng.normal(0, scale, (3, 3)) + rng.normal(0, 1, 3)
            la, ga = _logistic_rows(X, y, a)
            lq, gq = _logistic_rows(X, y, q)
            ln, _ = _logistic_rows(X, y, q_new)
            rho = ln - lq - ga @ (q_new - q)
            bound = remainder_bound(clip.hess_clip, a, q, q_new, active)
            ratios.append(np.abs(rho).max() / bound)
            g_bound = clip.hess_clip * np.linalg.norm(q - a)
            grad_ratios.append(np.linalg.norm(gq - ga, axis=1).max() / g_bound)
            if scale == 0.02:  # what the anchor buys: a far smaller bound than b |Delta|
                gains.append(bound / float(np.abs(q_new - q) @ clip.llr_clip))
    assert max(ratios) <= 1.0 + 1e-9 and max(grad_ratios) <= 1.0 + 1e-9
    assert max(ratios) > 0.05  # the bound is attained to within its constants, not vacuous
    assert np.median(gains) < 0.25


@pytest.fixture(scope="module")
def logistic():
    X, y = _design(400, 2)
    return X, y, logistic_regression_model(X, y, prior_sd=5.0)


def _anchored_penalty(model, **kw):
    clip = pdp.glm_clip(COV_BOUND)
    kw.setdefault("epsilon", 3.0)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pdp.DPPenalty(
            llr_clip=clip.llr_clip,
            hess_clip=clip.hess_clip,
            noise_seed=5,
            compile_kwargs={"mode": "FAST_COMPILE"},
            **kw,
        )


def test_remainder_kernel_is_the_rows_remainder(logistic):
    X, y, model = logistic
    step = _anchored_penalty(model)
    a = step.anchor.point
    ratio = step._anchored_ratio
    rng = np.random.default_rng(3)
    _, ga = _logistic_rows(X, y, a)
    for _ in range(5):
        q, q_new = a + rng.normal(0, 0.2, (2, 3))
        lq, _ = _logistic_rows(X, y, q)
        ln, _ = _logistic_rows(X, y, q_new)
        value, frac = ratio(q_new, q, 1e6)
        assert value == pytest.approx(np.sum(ln - lq - ga @ (q_new - q)), rel=1e-9, abs=1e-9)
        assert frac == 0.0
        # a tiny bound clips every row to it: the sum can only be within n times the bound
        value, frac = ratio(q_new, q, 1e-6)
        assert abs(value) <= X.shape[0] * 1e-6 * (1 + 1e-12) and frac > 0.9


def test_anchor_release_is_accounted_once_for_the_run(logistic):
    """Shares of the run's PLD mean, pinned to dp-accounting's analytic Gaussian calibration."""
    _, _, model = logistic
    eps, delta = 3.0, 1e-6
    step = _anchored_penalty(model, epsilon=eps, delta=delta)
    ledger = step.plan(tune=40, draws=60, chains=3).ledger
    # one Gaussian mechanism of multiplier sigma* spends exactly (eps, delta): PLD mean 1/(2 s^2)
    total = 1.0 / (2.0 * dpa.get_sigma_gaussian(eps, delta) ** 2)
    mu = {e.name: e.count / (2.0 * e.noise_multiplier**2) for e in ledger.shared}
    assert mu[ANCHOR_NAME] == pytest.approx(DEFAULT_ANCHOR_SHARE * total, rel=1e-6)
    warm = sum(v for k, v in mu.items() if k != ANCHOR_NAME)
    assert warm == pytest.approx(ANCHORED_WARM_START * total, rel=1e-6)
    (test,) = ledger.per_chain
    assert test.count == 100 and "remainder" in test.name
    chains = 3 * test.count / (2.0 * test.noise_multiplier**2)
    assert chains == pytest.approx(
        (1 - DEFAULT_ANCHOR_SHARE - ANCHORED_WARM_START) * total, rel=1e-6
    )
    assert ledger.epsilon == pytest.approx(eps, rel=1e-6) and ledger.epsilon <= eps
    # the anchor's noise is what the tilt prediction reads: sd = 2 grad_clip x multiplier,
    # over (1 - excess) for snapping (pymc_dp/noise.py)
    (entry,) = [e for e in ledger.shared if e.name == ANCHOR_NAME]
    grad_clip = float(np.linalg.norm(pdp.glm_clip(COV_BOUND).llr_clip))
    excess = entry.noise_multiplier * np.sqrt(3) / SNAP_GRID
    assert step.anchor.noise_sd == pytest.approx(
        2 * grad_clip * entry.noise_multiplier / (1 - excess), rel=1e-12
    )
    assert np.all(tilt_sds(step.anchor, step.warm.cov) > 0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(anchor=0.3), "needs `hess_clip`"),
        (dict(hess_clip=1.0, proposal_scale=0.1), "Leave `proposal_scale` unset"),
        (dict(hess_clip=1.0, proposal="gwmh"), "not supported"),
        (dict(proposal="independent"), "give `hess_clip`"),
        (dict(hess_clip=1.0, anchor=1.0), "share in"),
        (dict(hess_clip=1.0, anchor=0.5, warm_start=0.5), "their sum must be below 1"),
        (dict(hess_clip=-1.0), "hess_clip"),
    ],
)
def test_anchor_arguments_are_checked_before_any_release(gaussian_model, kwargs, match):
    with gaussian_model, pytest.raises((ValueError, TypeError), match=match):
        pdp.DPPenalty(epsilon=1.0, llr_clip=5.0, **kwargs)
    with gaussian_model, pytest.raises(ValueError, match="Leave `step_size` unset"):
        pdp.DPHMC(epsilon=1.0, llr_clip=5.0, grad_clip=5.0, step_size=0.1, hess_clip=1.0)


def _gaussian_hess_clip(banana) -> float:
    # every row's log-likelihood Hessian is -diag(1 / likelihood_var): its Frobenius norm
    return float(np.sqrt(np.sum(banana.likelihood_var**-2.0)))


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["penalty", "hmc"])
def test_anchored_chains_recover_the_exact_posterior(gaussian_banana, gaussian_model, sampler):
    """At a large budget the anchor's tilt is negligible (below 0.01 posterior sds) and the
    penalty keeps the chain exact: moments within 4 Monte Carlo standard errors."""
    mean, var = gaussian_banana.posterior_params()
    kw = dict(
        epsilon=2000.0,
        delta=1e-6,
        llr_clip=5.0,
        hess_clip=_gaussian_hess_clip(gaussian_banana),
        noise_seed=7,
    )
    with gaussian_model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if sampler == "penalty":
            step = pdp.DPPenalty(**kw)
        else:
            step = pdp.DPHMC(grad_clip=5.0, **kw)
        assert np.all(tilt_sds(step.anchor, np.diag(var)) < 0.01)
        idata = pdp.sample(
            draws=1500, tune=500, chains=4, cores=1, step=step, random_seed=4, progressbar=False
        )
    assert pdp.privacy_report(idata).epsilon == pytest.approx(2000.0, rel=1e-6)
    check_moments(idata.posterior["theta"].values, mean, np.sqrt(var))
    assert idata.sample_stats["accepted"].values.mean() > 0.3


def test_report_states_the_anchor_apart_from_the_warm_start(logistic):
    _, _, model = logistic
    step = _anchored_penalty(model, epsilon=3.0, delta=1e-6)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pdp.sample(step=step, draws=20, tune=20, chains=2, cores=1, progressbar=False)
    report = pdp.privacy_report(idata)
    total = 1.0 / (2.0 * dpa.get_sigma_gaussian(3.0, 1e-6) ** 2)
    # each line is its own share of the run's PLD mean, composed alone
    for got, share in (
        (report.warm_start_epsilon, ANCHORED_WARM_START),
        (report.anchor_epsilon, DEFAULT_ANCHOR_SHARE),
    ):
        sigma = np.sqrt(1.0 / (2.0 * share * total))
        assert got == pytest.approx(dpa.get_epsilon_gaussian(sigma, 1e-6), rel=1e-6)
    # E|N(0, (sd_j e_sd)^2)| / sd_j with the posterior sds the warm start measured (its metric;
    # not its noise-aware spread, nor its cov, which the prior dominates at 404 rows)
    expected = np.sqrt(2 / np.pi) * step.anchor.noise_sd * step.warm.unit
    np.testing.assert_allclose(list(report.anchor_tilt.values()), expected, rtol=1e-12)
    assert "anchor:" in str(report) and "not in the intervals" in str(report)


def test_anchor_rows_are_clipped_silently():
    """A warning there would tell that some row's gradient is huge (review)."""
    from pymc_dp.anchor import _clipped_rows

    rows = np.array([[1e200, 0.0], [1.0, 1.0], [np.nan, 1.0], [3e-320, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _clipped_rows(rows, 5.0)
    np.testing.assert_allclose(out, [[5.0, 0.0], [1.0, 1.0], [0.0, 0.0], [3e-320, 0.0]])


def test_simulated_anchored_chain_samples_the_posterior():
    """The prediction simulates the chain's own algorithm, so it must be a correct sampler: with
    the penalty test's noise (exact in expectation) and the Hastings term of an adapted
    independence proposal, pooled draws have the posterior's mean and sd (within 4 Monte Carlo
    standard errors from their bulk ESS). A wrong sign of the Hastings term or of the penalty
    fails this."""
    from arviz_stats.base import array_stats

    from pymc_dp.mixing import simulated_draws

    sd, rng = np.array([0.5, 2.0, 1.0]), np.random.default_rng(3)
    for s, offset in ((0.0, 0.0), (0.1, 1.0)):
        cov = np.diag((offset * sd) ** 2)
        kept, accept = simulated_draws(
            s, 0.5, sd, cov, np.diag(sd**2) + cov, 0.0 * sd, 4, 4, 500, 1000, rng
        )
        assert 0.05 < accept < 1.0  # the test's noise binds without freezing the chain
        z = kept.transpose(1, 0, 2) / sd  # (chains, draws, D)
        ess = array_stats.ess(z, chain_axis=0, draw_axis=1, method="bulk")
        mean, std = z.mean(axis=(0, 1)), z.std(axis=(0, 1))
        assert np.all(np.abs(mean) <= 4.0 / np.sqrt(ess)), (s, mean, ess)
        # the sd's Monte Carlo error: about 1 / sqrt(2 ess) for a Gaussian
        assert np.all(np.abs(std - 1.0) <= 4.0 / np.sqrt(2.0 * ess)), (s, std, ess)


def test_simulated_mixing_is_seeded_and_falls_with_the_test_noise():
    """Same inputs, same prediction (the planner's output is a function of public facts); a
    noisier test mixes less; a chain whose test noise is huge never moves and is credited one
    draw per chain, with R-hat far above 1."""
    from pymc_dp.mixing import simulate_anchored_chain

    sd = np.full(4, 0.1)
    args = (2.0, sd, 0.3, 4, 200, 400)
    calm = simulate_anchored_chain(10.0, *args)
    assert calm == simulate_anchored_chain(10.0, *args)
    noisy = simulate_anchored_chain(200.0, *args)
    assert noisy["ess"] < 0.5 * calm["ess"] and noisy["acceptance"] < calm["acceptance"]
    stuck = simulate_anchored_chain(1e9, *args)
    assert stuck["acceptance"] == 0.0 and stuck["ess"] == pytest.approx(4.0, rel=0.5)
    assert stuck["rhat"] > 2.0


@pytest.mark.slow
def test_predicted_mixing_is_within_2x_of_a_run_on_the_issues_cell():
    """Issue 24 asks the predicted ESS within 2x of the measured: one seeded run of the anchored
    DPPenalty (n = 2e4, d = 3, epsilon 5, 4 x (500 + 500)) against the step's own prediction.
    Measured in two runs: 369 and 422 against 438 and 445 predicted (R-hat 1.011-1.015 against
    1.010-1.012); the quadrature this replaced was 1.4-6x optimistic at d = 10."""
    import arviz as az

    X, y = _design(20_000, 7)
    model = logistic_regression_model(X, y, prior_sd=5.0)
    clip = pdp.glm_clip(COV_BOUND)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pdp.DPPenalty(
            epsilon=5.0, llr_clip=clip.llr_clip, hess_clip=clip.hess_clip, noise_seed=1
        )
        predicted = step.predicted_mixing(4, 500, 500)
        idata = pdp.sample(
            step=step, draws=500, tune=500, chains=4, cores=1, progressbar=False, random_seed=1
        )
    ess = float(az.ess(idata, var_names=["beta"])["beta"].values.min())
    rhat = float(az.rhat(idata, var_names=["beta"])["beta"].values.max())
    assert 0.5 <= ess / predicted["ess"] <= 2.0, (ess, predicted)
    assert rhat <= 1.1 and predicted["rhat"] <= 1.1


def test_planner_predicts_where_an_anchored_chain_mixes(logistic):
    """The issue's cell (n = 2e4, d = 3, epsilon 5; standard-normal covariates at p ~ 1/2 carry
    a public per-row information ~0.25) mixes; a quarter of the rows mixes less, 404 rows not at
    all, and ``pdp.sample`` warns before that run with the step's own prediction."""
    from pymc_dp.examples import logistic_regression_model

    clip = pdp.glm_clip(COV_BOUND)
    X, y = _design(20_000, 7)
    big = logistic_regression_model(X, y, prior_sd=5.0)
    kw = dict(llr_clip=clip.llr_clip, hess_clip=clip.hess_clip, info_per_row=0.25)
    cell = pdp.plan(big, epsilon=5.0, **kw)
    assert cell.anchored["usable"] and cell.anchored["ess"] >= 400
    # its predicted error (mostly the anchor's tilt) is above the fit's: the fit is recommended,
    # and the chain named as usable
    assert cell.anchored["largest_error"] > cell.laplace_largest_error
    assert cell.recommended == "DPLaplace"
    assert any("anchored chain" in a and "would mix too" in a for a in cell.advice)
    # prior-only coordinates move freely: they do not enter the test's bound
    with big:
        pm.Normal("unread", 0.0, 1.0, shape=2)
    wider = pdp.plan(big, epsilon=5.0, **{**kw, "llr_clip": np.r_[clip.llr_clip, 1.0, 1.0]})
    # (only the warm start's predicted error grows, with sqrt(d): the anchor lies a little
    # farther; counting them in the bound, as before the review, gave 274 instead of ~700)
    assert wider.anchored["ess"] == pytest.approx(cell.anchored["ess"], rel=0.1)
    # a quarter of the rows: the test's noise grows like d^2 / n
    X, y = _design(5_000, 7)
    small = logistic_regression_model(X, y, prior_sd=5.0)
    low = pdp.plan(small, epsilon=5.0, **kw)
    assert low.anchored["ess"] < 0.5 * cell.anchored["ess"]
    _, _, model = logistic  # 404 rows
    tiny = pdp.plan(model, epsilon=3.0, **kw)
    assert not tiny.anchored["usable"] and tiny.recommended != "DPPenalty(hess_clip)"
    assert any("anchored chain (hess_clip)" in a for a in tiny.advice)
    # it cannot move: about one draw per chain (a frozen run's bulk ESS), R-hat far above 1
    assert tiny.anchored["acceptance"] < 0.01 and tiny.anchored["rhat"] > 2.0
    assert tiny.anchored["ess"] == pytest.approx(tiny.chains, rel=0.25)
    # with four times the per-row information its tilt is below the fit's error: recommended,
    # with its split
    sharp = pdp.plan(
        big, epsilon=5.0, **{**kw, "info_per_row": 4.0, "llr_clip": np.r_[clip.llr_clip, 1, 1]}
    )
    assert sharp.recommended == "DPPenalty(hess_clip)" and sharp.split["anchor"] == 0.6
    assert "anchor 60%" in str(sharp)
    # ... unless the likelihood reads a transformed variable, where a GLM bound does not hold
    X, y = _design(20_000, 7)
    with pm.Model() as scaled:
        beta = pm.Normal("beta", 0.0, 5.0, shape=3)
        tau = pm.HalfNormal("tau", 1.0)
        pm.Bernoulli("y", logit_p=tau * (pm.Data("X", X) @ beta), observed=y)
    hidden = pdp.plan(scaled, epsilon=5.0, **{**kw, "info_per_row": 4.0, "llr_clip": np.ones(4)})
    assert hidden.recommended != "DPPenalty(hess_clip)"
    assert any("transformed variables (tau)" in a for a in hidden.advice)
    # a run long enough that its length cannot decide (0.8 x 2 x 600 proposals > 400)
    step = _anchored_penalty(model, epsilon=3.0)
    assert step.predicted_mixing(2, 100, 600)["ess"] < 400
    with pytest.raises(ValueError, match="draws"):
        step.predicted_mixing(2, 100, 0)
    with pytest.raises(ValueError, match="chains"):
        step.predicted_mixing(0, 100, 600)
    with model, pytest.warns(UserWarning, match=r"hess_clip\) will not give a usable.*d\^2"):
        pdp.sample(step=step, draws=600, tune=100, chains=2, cores=1, progressbar=False)


def test_a_short_anchored_run_is_told_how_long_a_run_would_mix():
    """The warning names the cause from the step's own prediction at other lengths: a run too
    short (and the length that mixes), or a test too noisy at every length (use the fit)."""
    from types import SimpleNamespace

    from pymc_dp.sampling import _anchored_advice

    run = SimpleNamespace(chains=4, tune=100, draws=100)

    def step(ess):
        return SimpleNamespace(
            predicted_mixing=lambda c, t, d, replicates=None: {"acceptance": 0.5, "ess": ess(d)}
        )

    cases = (
        (lambda d: 1.6 * d, "the run is short; 400 draws per chain"),  # 160, 320, 640
        (lambda d: 4.0, "no run up to 20000 draws.*d\\^2"),  # a chain that cannot move
        (lambda d: 900.0 / (1 + d / 50), "no run up to"),  # more draws, noisier tests
    )
    for ess, expected in cases:
        with pytest.warns(UserWarning, match=expected):
            assert re.search(expected, _anchored_advice(step(ess), run))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _anchored_advice(step(lambda d: 500.0), run) == ""
