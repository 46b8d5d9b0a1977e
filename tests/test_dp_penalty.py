"""DPPenalty recovers known posteriors, spends exactly its budget, and is reproducible."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest
from scipy.special import log_ndtr
from stats_helpers import check_moments

import pymc_dp as pdp
from pymc_dp.accounting import gaussian_epsilon, gaussian_mu_for_budget

# Proposal scales chosen from the known posterior sd of the test model (a public, synthetic model).
RW_SCALE = np.array([0.07, 0.025])
SINGLE_SCALE = np.array([0.1, 0.035])


def _draws(idata) -> np.ndarray:
    return idata.posterior["theta"].values  # (chain, draw, 2)


@pytest.mark.slow
@pytest.mark.parametrize(
    "proposal,scale", [("random_walk", RW_SCALE), ("ocu", SINGLE_SCALE), ("gwmh", SINGLE_SCALE)]
)
def test_recovers_gaussian_posterior_at_large_epsilon(
    gaussian_banana, gaussian_model, proposal, scale
):
    mean, var = gaussian_banana.posterior_params()
    with gaussian_model:
        # llr_clip = 5 clips a row only if |x - theta| > 5 sigma_i^2 (> 7 sd): never, here.
        # epsilon = 5000 leaves noise of sd ~1 on the ratio: the penalty keeps the chain exact.
        step = pdp.DPPenalty(
            epsilon=5000.0, delta=1e-6, llr_clip=5.0, proposal_scale=scale, proposal=proposal
        )
        idata = pdp.sample(
            draws=6000,
            tune=1000,
            chains=4,
            cores=1,
            step=step,
            random_seed=3,
            noise_seed=3,
            progressbar=False,
        )
    assert pdp.privacy_report(idata).epsilon == pytest.approx(5000.0, rel=1e-6)
    check_moments(_draws(idata), mean, np.sqrt(var))


def _predicted_acceptance(banana, lik, s, llr_clip, scale, size=4000, seed=0):
    """E[min(1, e^Z)], Z ~ N(lambda - sigma^2/2, sigma^2), over theta ~ exact posterior and a
    random-walk proposal: the acceptance rate of a stationary DP penalty chain."""
    rng = np.random.default_rng(seed)
    theta = banana.exact_posterior(size, rng)
    kernel = lik.ratio_kernel()
    acc = np.empty(size)
    for i, q in enumerate(theta):
        q2 = q + scale * rng.standard_normal(2)
        bound = llr_clip * np.linalg.norm(q2 - q)
        llr, prior2 = kernel(q2, q, np.asarray(bound))
        lam = llr + prior2 - kernel(q, q, np.asarray(0.0))[1]
        sig = 2 * s * bound
        # Phi((lam - sig^2/2)/sig) + e^lam Phi(-(lam + sig^2/2)/sig), in log space
        a = log_ndtr((lam - sig**2 / 2) / sig)
        b = lam + log_ndtr(-(lam + sig**2 / 2) / sig)
        acc[i] = np.exp(np.logaddexp(a, b))
    return acc.mean(), acc.std() / np.sqrt(size)


def _batch_means_se(x: np.ndarray, batches: int = 20) -> float:
    means = np.concatenate([c.reshape(batches, -1).mean(axis=1) for c in x])
    return means.std(ddof=1) / np.sqrt(means.size)


@pytest.mark.slow
def test_acceptance_drops_with_epsilon_as_the_penalty_predicts(gaussian_banana, gaussian_model):
    rates = []
    with gaussian_model:
        for s in (0.3, 3.0, 8.0):  # noise multipliers, i.e. decreasing epsilon
            step = pdp.DPPenalty(noise_multiplier=s, llr_clip=5.0, proposal_scale=RW_SCALE)
            idata = pdp.sample(
                draws=2000,
                tune=300,
                chains=2,
                cores=1,
                step=step,
                random_seed=5,
                noise_seed=5,
                progressbar=False,
            )
            acc = idata.sample_stats["accepted"].values.astype(float)
            observed, se_obs = acc.mean(), _batch_means_se(acc)
            predicted, se_pred = _predicted_acceptance(
                gaussian_banana, step.likelihood, s, 5.0, RW_SCALE
            )
            assert abs(observed - predicted) < 4 * np.hypot(se_obs, se_pred), (
                s,
                observed,
                predicted,
            )
            rates.append((observed, predicted, pdp.privacy_report(idata).epsilon))
    observed, predicted, eps = map(np.array, zip(*rates, strict=True))
    assert np.all(np.diff(eps) < 0)
    assert np.all(np.diff(predicted) < -0.05)  # the penalty visibly costs acceptance
    assert np.all(np.diff(observed) < 0)


class TestBudget:
    def test_calibrated_run_spends_exactly_epsilon(self, gaussian_model):
        with gaussian_model:
            step = pdp.DPPenalty(epsilon=2.0, delta=1e-6, llr_clip=2.0, proposal_scale=RW_SCALE)
            idata = pdp.sample(
                draws=200,
                tune=100,
                chains=3,
                cores=1,
                step=step,
                random_seed=1,
                noise_seed=1,
                progressbar=False,
            )
        report = pdp.privacy_report(idata)
        assert report.epsilon == pytest.approx(2.0, rel=1e-6)
        assert report.epsilon <= 2.0
        assert report.chains == 3 and report.delta == 1e-6
        # independently: 3 chains x 300 releases at multiplier s compose to mu*(2, 1e-6)
        (s,) = [m.noise_multiplier for m in pdp.PrivacyLedger.from_attrs(idata.attrs).per_chain]
        assert 900 / (2 * s**2) == pytest.approx(gaussian_mu_for_budget(2.0, 1e-6), rel=1e-9)
        # per-chain running spend: increasing, ends at the one-chain cost
        spent = idata.sample_stats["dp_epsilon"].values
        assert np.all(np.diff(spent, axis=1) > 0)
        np.testing.assert_allclose(
            spent[:, -1], gaussian_epsilon(300 / (2 * s**2), 1e-6), rtol=1e-9
        )

    def test_fixed_noise_reports_spent_budget(self, gaussian_model):
        with gaussian_model:
            step = pdp.DPPenalty(
                noise_multiplier=30.0, delta=1e-6, llr_clip=2.0, proposal_scale=0.01
            )
            idata = pdp.sample(
                draws=30,
                tune=20,
                chains=1,
                cores=1,
                step=step,
                random_seed=1,
                noise_seed=1,
                progressbar=False,
            )
        # docs/references.md: 50 releases at noise multiplier 30 spend eps = 0.99544 at delta 1e-6
        assert pdp.privacy_report(idata).epsilon == pytest.approx(0.99544, abs=5e-6)

    def test_overspending_run_is_refused_before_touching_data(self, gaussian_model):
        with gaussian_model:
            step = pdp.DPPenalty(
                epsilon=1.0, delta=1e-6, noise_multiplier=30.0, llr_clip=2.0, proposal_scale=0.01
            )
        calls = []
        step._kernel = lambda *args: calls.append(args)  # any data access would be recorded
        # 51 iterations need eps 1.00612 > 1 (docs/references.md)
        with pytest.raises(pdp.PrivacyBudgetError, match="at most 50 iterations"):
            step.chains = 1
            step.setup_chain(np.random.default_rng(0), 1, 50)
        with gaussian_model, pytest.raises(pdp.PrivacyBudgetError):
            pm.sample(draws=41, tune=10, chains=1, step=step, progressbar=False, random_seed=1)
        with gaussian_model, pytest.raises(pdp.PrivacyBudgetError):
            pdp.sample(draws=40, tune=11, chains=1, step=step, progressbar=False)
        assert calls == []
        step.setup_chain(np.random.default_rng(0), 0, 50)  # exactly affordable

    @pytest.mark.parametrize("cores", [1, 2])
    def test_more_chains_than_calibrated_are_refused(self, gaussian_model, cores):
        """Plain pm.sample(chains=2) with a step calibrated for 1 chain would spend 1.4x the
        budget: the second chain is refused in setup_chain, before it reads data."""
        with gaussian_model:
            step = pdp.DPPenalty(
                epsilon=1.0, delta=1e-6, chains=1, llr_clip=2.0, proposal_scale=RW_SCALE
            )
            with (
                warnings.catch_warnings(),
                pytest.raises(Exception, match="Chain 2 of a run .* calibrated for 1 chains"),
            ):
                warnings.simplefilter("ignore")
                pm.sample(
                    draws=50,
                    tune=0,
                    chains=2,
                    cores=cores,
                    step=step,
                    progressbar=False,
                    random_seed=2,
                )
            # one chain is within budget, and its report tells the truth (a new step: the
            # refused run had started its first chain)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                idata = pm.sample(
                    draws=50, tune=0, chains=1, step=step.renew(), progressbar=False, random_seed=2
                )
        report = pdp.privacy_report(idata)
        assert report.epsilon == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("proposal", ["random_walk", "gwmh"])
def test_same_seed_same_draws_any_cores(gaussian_model, proposal):
    runs = []
    with gaussian_model:
        for cores in (1, 2, 1):
            step = pdp.DPPenalty(
                epsilon=3.0, delta=1e-6, llr_clip=2.0, proposal_scale=RW_SCALE, proposal=proposal
            )
            runs.append(
                pdp.sample(
                    draws=100,
                    tune=50,
                    chains=2,
                    cores=cores,
                    step=step,
                    random_seed=42,
                    noise_seed=7,
                    progressbar=False,
                )
            )
    for other in runs[1:]:
        np.testing.assert_array_equal(_draws(runs[0]), _draws(other))
        np.testing.assert_array_equal(
            runs[0].sample_stats["accept_prob"].values, other.sample_stats["accept_prob"].values
        )
    assert not np.array_equal(_draws(runs[0])[0], _draws(runs[0])[1])  # chains differ


class TestArguments:
    @pytest.mark.parametrize("eps", [0.0, -1.0, np.nan, np.inf])
    def test_bad_epsilon(self, gaussian_model, eps):
        with gaussian_model, pytest.raises(ValueError, match="epsilon"):
            pdp.DPPenalty(epsilon=eps, llr_clip=1.0, proposal_scale=0.1)

    @pytest.mark.parametrize("delta", [0.0, 1.0, -0.1, 2.0, np.nan])
    def test_bad_delta(self, gaussian_model, delta):
        with gaussian_model, pytest.raises(ValueError, match="delta"):
            pdp.DPPenalty(epsilon=1.0, delta=delta, llr_clip=1.0, proposal_scale=0.1)

    @pytest.mark.parametrize("clip", [0.0, -2.0, np.nan])
    def test_bad_clip(self, gaussian_model, clip):
        with gaussian_model, pytest.raises(ValueError, match="llr_clip"):
            pdp.DPPenalty(epsilon=1.0, llr_clip=clip, proposal_scale=0.1)

    def test_bad_noise_and_proposal(self, gaussian_model):
        with gaussian_model:
            with pytest.raises(ValueError, match="noise_multiplier"):
                pdp.DPPenalty(noise_multiplier=0.0, llr_clip=1.0, proposal_scale=0.1)
            with pytest.raises(ValueError, match="epsilon.*noise_multiplier"):
                pdp.DPPenalty(llr_clip=1.0, proposal_scale=0.1)
            with pytest.raises(ValueError, match="proposal_scale"):
                pdp.DPPenalty(epsilon=1.0, llr_clip=1.0, proposal_scale=[0.1, -1.0])
            with pytest.raises(ValueError, match="proposal"):
                pdp.DPPenalty(epsilon=1.0, llr_clip=1.0, proposal_scale=0.1, proposal="hmc")
            with pytest.raises(ValueError, match="tempering"):
                pdp.DPPenalty(epsilon=1.0, llr_clip=1.0, proposal_scale=0.1, tempering=1.5)
            with pytest.raises(ValueError, match="chains"):
                pdp.DPPenalty(epsilon=1.0, llr_clip=1.0, proposal_scale=0.1, chains=0)

    def test_default_delta(self, gaussian_model, gaussian_banana):
        """min(1e-6, 1 / (10 n)): 1e-6 at n = 1e4 (1 / (10 n) would be 1e-5)."""
        with gaussian_model:
            step = pdp.DPPenalty(epsilon=1.0, llr_clip=1.0, proposal_scale=0.1)
        assert gaussian_banana.n == 10_000
        assert step.delta == 1e-6
        assert "min(1e-6, 1 / (10 n))" in step.ledger(0, 10).delta_rule
