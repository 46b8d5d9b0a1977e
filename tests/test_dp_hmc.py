"""DPHMC: accounting pins, exactness without noise, accuracy at eps 4..6, contract, errors."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest
from pymc.step_methods.hmc.quadpotential import QuadPotentialFullInv
from stats_helpers import check_moments, check_moments_between_runs

import pymc_dp as pdp
from pymc_dp.evaluation import mmd
from pymc_dp.noise import NoiseSource
from pymc_dp.step_methods.hmc import randomized_halton


def _hmc(**kw):
    defaults = dict(step_size=5e-4, n_steps=10, llr_clip=2.0, grad_clip=1.0)
    return pdp.DPHMC(**{**defaults, **kw})


@pytest.mark.parametrize("eps,expected", [(1, 33), (2, 119), (4, 416), (6, 848)])
def test_thesis_iteration_counts(easy_banana_model, eps, expected):
    """docs/references.md: tau_l .1, tau_g .4, L 10, n 1e5, delta 1e-6 -> 33/119/416/848."""
    n = 100_000
    with easy_banana_model:
        step = _hmc(noise_multiplier=0.1 * np.sqrt(n), grad_noise_ratio=4.0, delta=1e-6, chains=1)
    assert step.max_iterations(eps) == expected
    assert step.max_iterations(eps, chains=2) == expected // 2  # chains compose: mu adds up


def test_penalty_thesis_iteration_counts(easy_banana_model):
    """docs/references.md: DP penalty, tau = .1, n = 1e5, delta = 1e-6 -> 56/201/702/1431."""
    with easy_banana_model:
        step = pdp.DPPenalty(
            noise_multiplier=0.1 * np.sqrt(1e5), delta=1e-6, chains=1, llr_clip=2, proposal_scale=1
        )
    assert [step.max_iterations(e) for e in (1, 2, 4, 6)] == [56, 201, 702, 1431]


def test_calibration_splits_budget_and_matches_epsilon(easy_banana_model):
    with easy_banana_model:
        step = _hmc(epsilon=4.0, delta=1e-6, chains=2, grad_noise_ratio=3.0)
    plan = step.plan(tune=100, draws=200)
    s = {"log-likelihood ratio": plan.scale, "gradient": 3.0 * plan.scale}
    assert [m.noise_multiplier for m in plan.ledger.per_chain] == pytest.approx(
        [s["log-likelihood ratio"], s["gradient"]]
    )
    ledger = step.ledger(100, 200)
    assert ledger.epsilon == pytest.approx(4.0, rel=1e-6) and ledger.epsilon <= 4.0
    assert ledger.per_chain[1].count == 300 * 11  # L + 1 gradient releases per iteration
    # mu = k / (2 s_l^2) + k (L + 1) / (2 s_g^2) over both chains (Theorem 3.5)
    mu = 2 * (300 / (2 * s["log-likelihood ratio"] ** 2) + 3300 / (2 * s["gradient"] ** 2))
    assert ledger.mu == pytest.approx(mu, rel=1e-12)


def test_randomized_halton_is_uniform_and_spread():
    h = randomized_halton(1024, np.random.default_rng(0))
    assert np.all((h >= 0) & (h < 1))
    # a scrambled base-2 sequence puts exactly one point in each of the 1024 cells of width 1/1024
    assert np.array_equal(np.sort(np.floor(h * 1024)), np.arange(1024))
    assert not np.allclose(h, randomized_halton(1024, np.random.default_rng(1)))


class _NoNoise(NoiseSource):
    """Testing only: releases values unchanged."""

    def gaussian(self, value, sensitivity, noise_multiplier):
        return value

    @staticmethod
    def gaussian_std(sensitivity, noise_multiplier, dim=1):
        return 0.0


class NonPrivateHMC(pdp.DPHMC):
    """The reference sampler of the tests: DPHMC's trajectory and test without noise or
    clipping, i.e. plain HMC on the exact likelihood. Nothing it returns is private."""

    def __init__(self, **kwargs):
        super().__init__(noise_multiplier=1.0, llr_clip=1e300, grad_clip=1e300, **kwargs)

    def _reset_chain(self):
        super()._reset_chain()
        self.chain.noise = _NoNoise(0)


@pytest.mark.slow
def test_without_noise_dphmc_is_plain_hmc(gaussian_banana, gaussian_model):
    """With the noise and the clipping switched off, DPHMC's leapfrog and test sample the exact
    posterior: the mechanics under the noise are right."""
    mean, var = gaussian_banana.posterior_params()
    with gaussian_model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = NonPrivateHMC(step_size=0.4, n_steps=5, mass_matrix=1 / var)
        idata = pm.sample(
            draws=1500,
            tune=200,
            chains=2,
            cores=1,
            step=step,
            random_seed=4,
            progressbar=False,
            compute_convergence_checks=False,
        )
    assert idata.sample_stats["accepted"].mean() > 0.9  # exact HMC: only leapfrog error rejects
    check_moments(idata.posterior["theta"].values, mean, np.sqrt(var))


def _stationary_runs(model, make_step, starts, iterations):
    """One single-chain run per start; no burn-in is needed when starts are exact draws.

    Each run renews one step (step.renew(): its kernels compile once) and is its own release
    with its own budget."""
    out = []
    with model:
        step = make_step()
        for r, start in enumerate(starts):
            idata = pdp.sample(
                draws=iterations,
                tune=0,
                chains=1,
                cores=1,
                step=step.renew(),
                random_seed=100 + r,
                noise_seed=100 + r,
                initvals={"theta": start},
                progressbar=False,
                compute_convergence_checks=False,
            )
            out.append(idata)
    return np.stack([i.posterior["theta"].values[0] for i in out]), out


@pytest.mark.slow
def test_easy_banana_at_epsilon_4(easy_banana, easy_banana_model):
    """Thesis setting (Table 6.1): eps = 4, delta = 0.1 / n, tau_l .1, tau_g .4, L 10,
    eta 5e-4, b_l 2, b_g 1, 416 iterations; runs start at exact posterior draws."""
    rng = np.random.default_rng(7)
    exact = easy_banana.exact_posterior(1000, rng)
    n = easy_banana.n

    def make_step():
        return _hmc(epsilon=4.0, delta=0.1 / n, chains=1)

    with easy_banana_model:
        noise = make_step().plan(tune=0, draws=416).scale
    assert noise == pytest.approx(0.1 * np.sqrt(n), rel=2e-3)  # 416 = the maximum at tau_l 0.1
    runs, idatas = _stationary_runs(
        easy_banana_model, make_step, easy_banana.exact_posterior(8, rng), 416
    )
    acc = np.mean([i.sample_stats["accepted"].mean() for i in idatas])
    assert 0.4 < acc < 0.9  # the thesis reports 0.64 for this setting
    ref = easy_banana.exact_posterior(200_000, rng)
    check_moments_between_runs(runs, ref.mean(0), ref.std(0))
    # MMD of the second halves to 1000 exact draws. The thesis' median is 0.26 for runs started
    # near theta* (compared like-for-like in `make bench`); these runs start anywhere in the
    # posterior. Measured median 0.29 (8 runs, range 0.11-0.56); 0.45 guards against regressions.
    scores = [mmd(run[208:], exact) for run in runs]
    assert np.median(scores) < 0.45, scores


@pytest.mark.slow
def test_correlated_gaussian_10d_at_epsilon_6():
    """10-d Gaussian with AR(1) likelihood correlation 0.7, n = 1e5, eps = 6 per run.

    The likelihood is written on whitened rows z_i = A x_i (A Sigma A^T = I), which has the same
    posterior as x_i ~ N(theta, Sigma). The mass matrix is the posterior precision
    n Sigma^{-1} + I / 1000, which does not depend on the data values (public).
    """
    n, d = 100_000, 10
    rng = np.random.default_rng(0)
    idx = np.arange(d)
    sigma = 0.7 ** np.abs(idx[:, None] - idx[None, :])
    x = rng.multivariate_normal(rng.normal(size=d), sigma, size=n)
    a = np.linalg.inv(np.linalg.cholesky(sigma))
    prec = n * np.linalg.inv(sigma) + np.eye(d) / 1000
    cov = np.linalg.inv(prec)
    mean = cov @ (np.linalg.inv(sigma) @ x.sum(0))
    with pm.Model() as model:
        theta = pm.Normal("theta", 0, np.sqrt(1000), shape=d)
        pm.Normal("z", pm.math.dot(a, theta), 1.0, observed=x @ a.T)

    def make_step():
        # ||grad l_i|| = ||A^T (z_i - A theta)|| is ~5 typically, 11 at the 1e-4 quantile
        return pdp.DPHMC(
            epsilon=6.0,
            delta=1e-6,
            chains=1,
            step_size=0.08,
            n_steps=10,
            llr_clip=3.0,
            grad_clip=4.0,
            mass_matrix=prec,
        )

    starts = rng.multivariate_normal(mean, cov, size=6)
    runs, idatas = _stationary_runs(model, make_step, starts, 200)
    acc = np.mean([i.sample_stats["accepted"].mean() for i in idatas])
    assert acc > 0.1
    check_moments_between_runs(runs, mean, np.sqrt(np.diag(cov)))


@pytest.mark.parametrize("cores", [1, 2])
def test_reproducible(gaussian_model, cores):
    out = []
    with gaussian_model:
        for c in (1, cores):
            step = _hmc(epsilon=20.0, delta=1e-6, step_size=0.01, llr_clip=5.0, grad_clip=5.0)
            idata = pdp.sample(
                draws=40,
                tune=10,
                chains=2,
                cores=c,
                step=step,
                random_seed=9,
                noise_seed=3,
                progressbar=False,
            )
            out.append(idata)
    np.testing.assert_array_equal(out[0].posterior["theta"], out[1].posterior["theta"])
    np.testing.assert_array_equal(
        out[0].sample_stats["step_size"], out[1].sample_stats["step_size"]
    )


def test_contract_stats_and_divergences(gaussian_model):
    with gaussian_model:
        step = _hmc(epsilon=5.0, delta=1e-6, step_size=50.0, llr_clip=5.0, grad_clip=5.0)
        idata = pdp.sample(
            draws=30,
            tune=0,
            chains=1,
            cores=1,
            step=step,
            random_seed=0,
            noise_seed=0,
            progressbar=False,
        )
    stats = idata.sample_stats
    assert set(stats.data_vars) == {
        "accepted",
        "accept_prob",
        "noise_std",
        "step_size",
        "diverging",
        "dp_epsilon",
        "dp_mu",
        "dp_delta",
    }
    assert stats["diverging"].mean() > 0.5  # step size 50 blows up the leapfrog
    assert not stats["accepted"].values[stats["diverging"].values].any()
    assert np.all(np.isfinite(idata.posterior["theta"].values))
    assert not set(idata.children) - {"posterior", "sample_stats"}


def test_diagnostics_mode(gaussian_model):
    with gaussian_model, pytest.warns(UserWarning, match="not releasable"):
        step = _hmc(epsilon=5.0, delta=1e-6, step_size=0.01, diagnostics=True)
    assert {"clip_fraction", "grad_clip_fraction"} <= set(step.stats_dtypes_shapes)
    with gaussian_model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(
            draws=10,
            tune=0,
            chains=1,
            step=step,
            progressbar=False,
            random_seed=0,
            compute_convergence_checks=False,
        )
    g = idata.sample_stats["grad_clip_fraction"].values
    assert np.all((g >= 0) & (g <= 1))


class TestArguments:
    @pytest.mark.parametrize(
        "kw,match",
        [
            (dict(step_size=0.0), "step_size"),
            (dict(n_steps=0), "n_steps"),
            (dict(n_steps=2.5), "n_steps"),
            (dict(grad_clip=-1.0), "grad_clip"),
            (dict(llr_clip=0.0), "llr_clip"),
            (dict(llr_clip=[1.0, 1.0, 1.0]), "`llr_clip` must be a scalar or have 2 entries"),
            (dict(llr_clip=[1.0, -1.0]), "llr_clip"),
            (dict(step_jitter=1.5), "step_jitter"),
            (dict(grad_noise_ratio=0.0), "grad_noise_ratio"),
            (dict(mass_matrix=[1.0, -1.0]), "mass_matrix"),
            (dict(mass_matrix=np.ones((3, 3))), "mass_matrix"),
            (dict(mass_matrix=np.array([[1.0, 2.0], [2.0, 1.0]])), "positive definite"),
            (dict(epsilon=-1.0), "epsilon"),
            (dict(epsilon=1.0, delta=1.0), "delta"),
        ],
    )
    def test_bad_arguments(self, gaussian_model, kw, match):
        with gaussian_model, pytest.raises(ValueError, match=match):
            _hmc(**{"epsilon": 1.0, **kw})

    def test_per_coordinate_llr_clip_bounds_each_move_like_dppenalty(self, gaussian_model):
        """``glm_clip(...).llr_clip`` serves DPHMC as it serves DPPenalty: the per-row ratio
        bound of a move is ``sum_j b_j |dq_j|``, at most ``|b|_2 |dq|_2`` (Cauchy-Schwarz)."""
        clip = np.array([0.5, 2.0])
        with gaussian_model:
            step = _hmc(epsilon=4.0, llr_clip=clip)
            scalar = _hmc(epsilon=4.0, llr_clip=float(np.linalg.norm(clip)))
        bounds = []
        ratio = step._ratio

        def spy(q_new, q, bound):
            bounds.append((q_new - q, float(bound)))
            return ratio(q_new, q, bound)

        step._ratio = spy
        point = gaussian_model.initial_point()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # plain setup: "pm.sample keeps data"
            step.setup_chain(np.random.default_rng(0), 0, 5)
        for _ in range(5):
            point, _ = step.step(point)
        assert bounds
        for moved, bound in bounds:
            assert bound == pytest.approx(np.abs(moved) @ clip, rel=1e-12)
            assert bound <= np.linalg.norm(clip) * np.linalg.norm(moved) * (1 + 1e-12)
        # the noise is calibrated per unit of the bound: the same budget either way
        assert step.mechanisms() == scalar.mechanisms()

    def test_dense_mass_matrix(self, gaussian_model):
        with gaussian_model:
            step = _hmc(epsilon=1.0, mass_matrix=np.array([[2.0, 0.5], [0.5, 1.0]]))
        assert isinstance(step.potential, QuadPotentialFullInv)  # PyMC's own potential


def test_a_diverged_trajectory_is_rejected_not_raised():
    """A trajectory that ran off (step length ~1e152) makes sigma ~1e154: sigma^2 overflows a
    float. The penalised ratio must give a certain rejection, not an OverflowError that stops the
    run (found by the contract test of the zero-tuning DPHMC)."""
    from pymc_dp.mechanisms import PenaltyTest
    from pymc_dp.noise import NoiseSource

    log_ratio, sigma = PenaltyTest().log_ratio(
        NoiseSource(seed=1), llr=-6.9e154, sensitivity=4.6e152, scale=38.6
    )
    assert np.isfinite(sigma) and sigma > 1e154
    assert log_ratio < -1e300 and np.exp(min(0.0, log_ratio)) == 0.0
    with pytest.raises(OverflowError):  # what the penalty used to compute
        0.5 * sigma**2
