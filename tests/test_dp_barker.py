"""DPBarker: tempered-banana accuracy, accounting through the step, contract, errors."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest
from conftest import TEMPERED_N0
from stats_helpers import check_mixing, check_moments_between_runs, stationary_runs

import pymc_dp as pdp
from pymc_dp.accounting.barker import barker_epsilon, barker_max_iterations

B = 1000
H = [0.15, 0.1]  # proposal sds: about a third of the tempered posterior sds, little clipping


@pytest.fixture(scope="module")
def barker_step(tempered_banana_model):
    with tempered_banana_model:
        return pdp.DPBarker(batch_size=B, n0=TEMPERED_N0, proposal_scale=H, epsilon=4.0, chains=1)


@pytest.mark.slow
def test_tempered_banana_at_epsilon_4(tempered_banana, tempered_banana_model, barker_step):
    """16 runs of 3500 iterations from exact draws of the tempered posterior, each an
    (eps <= 4, delta = 1e-6)-DP release; the draws must match the exact moments."""
    rng = np.random.default_rng(5)
    runs, idatas = stationary_runs(
        tempered_banana_model, barker_step, tempered_banana.exact_posterior(16, rng), 3500
    )
    eps = idatas[0].attrs["pymc_dp_epsilon"]
    assert 3.9 < eps <= 4.0  # 3515 iterations is the most eps = 4 affords
    assert eps == pytest.approx(barker_epsilon(B, 100_000, 3500, barker_step.delta)[0])
    acc = np.mean([i.sample_stats["accepted"].mean() for i in idatas])
    assert 0.25 < acc < 0.6  # measured 0.41
    check_mixing(runs)
    ref = tempered_banana.exact_posterior(200_000, rng)
    check_moments_between_runs(runs, ref.mean(0), ref.std(0))


@pytest.mark.slow
def test_moment_check_detects_the_wrong_temperature(tempered_banana, tempered_banana_model):
    """Negative control: the same check rejects a chain that targets N0 = 200 instead of 100."""
    rng = np.random.default_rng(6)
    with tempered_banana_model:
        step = pdp.DPBarker(batch_size=B, n0=2 * TEMPERED_N0, proposal_scale=H, chains=1)
    runs, _ = stationary_runs(
        tempered_banana_model, step, tempered_banana.exact_posterior(16, rng), 3500
    )
    ref = tempered_banana.exact_posterior(200_000, rng)
    with pytest.raises(AssertionError):
        check_moments_between_runs(runs, ref.mean(0), ref.std(0))


def test_accounting_through_the_step(tempered_banana_model, barker_step):
    n, delta = 100_000, barker_step.delta
    assert delta == pytest.approx(0.1 / n)
    ledger = barker_step.ledger(500, 500, chains=3)
    assert ledger.epsilon == pytest.approx(barker_epsilon(B, n, 3 * 1000, delta)[0], rel=1e-12)
    assert "DP Barker" in ledger.accountant and "order" in ledger.accountant
    assert ledger.epsilon_per_chain == pytest.approx(barker_epsilon(B, n, 1000, delta)[0])
    assert barker_step.max_iterations(4.0, chains=1) == barker_max_iterations(B, n, 4.0, delta)
    assert barker_step.max_iterations(4.0, chains=1) == 3515
    barker_step.chains = 1
    # the running stat is the per-chain epsilon after each iteration
    with tempered_banana_model:
        idata = pm.sample(
            draws=30,
            tune=10,
            chains=1,
            step=barker_step,
            random_seed=1,
            progressbar=False,
            compute_convergence_checks=False,
            discard_tuned_samples=False,
        )
    eps = idata.sample_stats["dp_epsilon"].values[0]
    assert eps[-1] == pytest.approx(barker_epsilon(B, n, 40, delta)[0], rel=1e-12)
    assert eps[0] == pytest.approx(barker_epsilon(B, n, 11, delta)[0], rel=1e-12)
    assert np.all(np.diff(eps) > 0)
    assert set(idata.sample_stats["batch_size"].values.ravel()) == {B}


def test_neurips_setting_through_the_step():
    """Heikkila et al. (2019): b = 1000, n = 1e6, 20000 iterations, delta = 1e-6 -> eps 1.00
    (classic conversion; the improved one gives 0.8368 and is reported)."""
    x = np.random.default_rng(0).normal(size=1_000_000)
    with pm.Model():
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("x", mu, 1, observed=x)
        step = pdp.DPBarker(batch_size=1000, n0=100, proposal_scale=0.1, delta=1e-6, chains=1)
    ledger = step.ledger(0, 20_000)
    assert ledger.epsilon == pytest.approx(0.836843, abs=1e-6)
    assert "improved conversion at order 25" in ledger.accountant


def test_overspending_run_is_refused_before_sampling(tempered_banana_model):
    with tempered_banana_model:
        step = pdp.DPBarker(batch_size=B, n0=100, proposal_scale=H, epsilon=1.0, chains=2)
        with pytest.raises(pdp.PrivacyBudgetError, match="at most 129 iterations"):
            pdp.sample(100, tune=100, chains=2, step=step, progressbar=False)


def test_batch_variance_never_exceeds_the_bound_and_chain_stays_clean():
    """Ratios far beyond the bound are clipped, so s^2 <= 0.99^2 and the test is always run;
    the chain holds only the start or accepted proposals (never zeros or NaN)."""
    x = np.random.default_rng(1).standard_cauchy(size=5000) * 50
    with pm.Model():
        mu = pm.Normal("mu", 3.0, 10)
        pm.Normal("x", mu, 1, observed=x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            step = pdp.DPBarker(
                batch_size=500, n0=50, proposal_scale=2.0, chains=1, diagnostics=True
            )
        idata = pm.sample(
            draws=300,
            tune=0,
            chains=1,
            step=step,
            random_seed=3,
            progressbar=False,
            initvals={"mu": 3.0},
            compute_convergence_checks=False,
        )
    stats = idata.sample_stats
    assert stats["clip_fraction"].mean() > 0.5  # the bound binds hard here
    assert 0.5 < stats["batch_variance"].max() <= 0.99**2 + 1e-12
    draws = idata.posterior["mu"].values[0]
    assert np.all(np.isfinite(draws)) and not np.any(draws == 0.0)
    assert stats["accepted"].values.any()


def test_reproducible_and_contract(tempered_banana_model, barker_step):
    kw = dict(draws=40, tune=10, chains=2, random_seed=11, noise_seed=5, progressbar=False)
    runs = []
    with tempered_banana_model:
        for cores in (1, 2):
            step = barker_step.renew()  # a step is spent once
            step.epsilon = None
            runs.append(pdp.sample(cores=cores, step=step, **kw))
    a, b = runs
    np.testing.assert_array_equal(a.posterior["theta"].values, b.posterior["theta"].values)
    assert set(a.sample_stats.data_vars) == {"accepted", "dp_epsilon", "dp_delta", "batch_size"}
    assert set(a.children) == {"posterior", "sample_stats"}
    report = pdp.privacy_report(a)
    assert report.epsilon == pytest.approx(barker_epsilon(B, 100_000, 100, barker_step.delta)[0])


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(batch_size=200_000), "batch_size"),
        (dict(batch_size=10), "batch_size"),
        (dict(batch_size=1), "batch_size"),
        (dict(n0=200_000), "n0"),
        (dict(n0=0.0), "n0"),
        (dict(noise_multiplier=1.0), "noise_multiplier"),
        (dict(sampling="poisson"), "sampling"),
        (dict(proposal="gwmh"), "proposal"),
        (dict(proposal_scale=[0.1, 0.1, 0.1]), "proposal_scale"),
        (dict(proposal_scale=-1.0), "proposal_scale"),
    ],
)
def test_bad_arguments(tempered_banana_model, kw, match):
    args = dict(batch_size=B, n0=100, proposal_scale=H) | kw
    with tempered_banana_model, pytest.raises(ValueError, match=match):
        pdp.DPBarker(**args)
