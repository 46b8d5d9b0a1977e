"""Noisy sufficient statistics (Bernstein & Sheldon 2018): release, families, Gibbs, PyMC.

Statistical tests use fixed seeds chosen before looking at the results. KS tests compare against
the 5% critical value for the number of trials M (exact ``kstwo`` quantile, ~1.358 / sqrt(M)): a
calibrated method exceeds it with probability 5% per test, so a pass at a fixed seed is evidence,
and a miscalibrated baseline is asserted to sit well above it.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from scipy import integrate, special, stats

import pymc_dp as pdp
from pymc_dp import expfam
from pymc_dp.expfam import (
    Binomial,
    Exponential,
    Multinomial,
    NoisyStatistic,
    Normal,
    Poisson,
    calibration_study,
    ks_critical_value,
)
from pymc_dp.expfam._random import inverse_gaussian, truncated_normal
from pymc_dp.expfam.release import RELEASE_ATTR, release_statistic
from pymc_dp.noise import NoiseSource

SEED = 2018


# ------------------------------------------------------------------------- truncated moments
def test_truncated_exponential_moment_pin():
    """docs/references.md pin: exponential rate 3.7 truncated to [0.05, 1]."""
    fam = Exponential(bounds=(0.05, 1.0))
    log_q, mean, var = fam.truncated_moments([3.7])
    assert mean[0] == pytest.approx(0.291143, abs=5e-7)
    assert var[0] == pytest.approx(0.0445271, abs=5e-8)
    # second way: numerical integration of the truncated density
    z = integrate.quad(lambda x: 3.7 * np.exp(-3.7 * x), 0.05, 1.0)[0]
    m = integrate.quad(lambda x: x * 3.7 * np.exp(-3.7 * x), 0.05, 1.0)[0] / z
    v = integrate.quad(lambda x: (x - m) ** 2 * 3.7 * np.exp(-3.7 * x), 0.05, 1.0)[0] / z
    assert np.exp(log_q[0]) == pytest.approx(z, rel=1e-12)
    assert mean[0] == pytest.approx(m, rel=1e-10)
    assert var[0] == pytest.approx(v, rel=1e-9)


@pytest.mark.parametrize("theta", [0.05, 0.8, 5.0, 40.0])
def test_truncated_poisson_moments_match_pmf_sums(theta):
    fam = Poisson(bounds=(2, 30))
    log_q, mean, var = fam.truncated_moments([theta])
    x = np.arange(2, 31)
    log_w = stats.poisson.logpmf(x, theta)
    w = np.exp(log_w - special.logsumexp(log_w))
    assert log_q[0] == pytest.approx(special.logsumexp(log_w), rel=1e-10)
    assert mean[0] == pytest.approx((x * w).sum(), rel=1e-10)
    assert var[0] == pytest.approx(((x - (x * w).sum()) ** 2 * w).sum(), rel=1e-8)


@pytest.mark.parametrize("mu", [0.3, 10.0, -40.0, 2.0])
def test_truncated_normal_moments_match_scipy_in_the_tails(mu):
    fam = Normal(bounds=(-1.0, 2.0), sigma=1.5)
    log_q, mean, var = fam.truncated_moments([mu])
    ref = stats.truncnorm((-1.0 - mu) / 1.5, (2.0 - mu) / 1.5, loc=mu, scale=1.5)
    assert np.all(np.isfinite([log_q[0], mean[0], var[0]]))
    assert log_q[0] == pytest.approx(fam.log_mass_numpy(np.array(mu)), rel=1e-10)
    assert mean[0] == pytest.approx(ref.mean(), rel=1e-7, abs=1e-9)
    assert var[0] == pytest.approx(ref.var(), rel=1e-5)


@pytest.mark.parametrize(
    "family",
    [Exponential(bounds=(0.0, 1.0)), Poisson(bounds=(1, 6)), Normal(bounds=(-1.0, 3.0), sigma=2)],
    ids=lambda f: f.name,
)
def test_sections_add_up_to_the_untruncated_moments(family):
    """(s_hat, s_out) model the covariance: their sum has the untruncated mean and variance."""
    theta = np.array([0.7, 2.0, 4.5])
    n = 1000
    m_in, m_out, v_in, v_out, c = family.section_moments(theta, n)
    mu, var = family.moments(theta)
    np.testing.assert_allclose(m_in + m_out, n * mu, rtol=1e-10)
    np.testing.assert_allclose(v_in + v_out + 2 * c, n * var, rtol=1e-8)
    assert np.all(c <= 0)  # a record inside is not outside


def test_section_covariance_matches_simulation():
    """Empirical covariance of (inside sum, outside sum) over 4000 data sets at a fixed theta."""
    fam = Exponential(bounds=(0.0, 0.5))
    n, reps, theta = 200, 4000, 2.0
    rng = np.random.default_rng(SEED)
    x = rng.exponential(1 / theta, size=(reps, n))
    inside = np.where(x <= 0.5, x, 0.0).sum(axis=1)
    outside = x.sum(axis=1) - inside
    m_in, m_out, v_in, v_out, c = (v[0] for v in fam.section_moments(np.array([theta]), n))
    emp = np.cov(inside, outside)
    # standard errors of sample (co)variances of near-normal data: var * sqrt(2 / reps)
    assert emp[0, 0] == pytest.approx(v_in, abs=4 * v_in * np.sqrt(2 / reps))
    assert emp[1, 1] == pytest.approx(v_out, abs=4 * v_out * np.sqrt(2 / reps))
    se_c = np.sqrt((v_in * v_out + c**2) / reps)
    assert emp[0, 1] == pytest.approx(c, abs=4 * se_c)
    assert c < -8 * se_c  # and the covariance is far from zero (independence is wrong)
    assert inside.mean() == pytest.approx(m_in, abs=4 * np.sqrt(v_in / reps))


# ------------------------------------------------------------------------- release
@pytest.mark.parametrize(
    ("family", "sensitivity"),
    [
        (Binomial(trials=1), 1.0),
        (Binomial(trials=5), 5.0),
        (Multinomial(categories=3), 2.0),  # a one-hot count vector changes by 2, not 1
        (Multinomial(categories=4, trials=3), 6.0),
        (Exponential(bounds=(0.0, 1.0)), 1.0),
        (Exponential(bounds=(0.5, 2.0)), 2.0),
        (Poisson(bounds=(2, 30)), 30.0),
        (Normal(bounds=(-1.0, 2.0)), 3.0),
        (Normal(bounds=(1.0, 3.0)), 3.0),
        (Normal(bounds=(-4.0, -1.0)), 4.0),
    ],
    ids=lambda v: v.describe() if hasattr(v, "describe") else str(v),
)
def test_sensitivity_is_the_replace_one_maximum(family, sensitivity):
    assert family.sensitivity == sensitivity
    # brute force over neighbouring data sets: replace one record by another
    if isinstance(family, Binomial):
        records = [np.array([v]) for v in range(family.trials + 1)]
    elif isinstance(family, Multinomial):
        k, m = family.categories, family.trials
        records = [np.eye(k, dtype=int)[i] * m for i in range(k)]
        records += [np.bincount(np.arange(m) % k, minlength=k)]
        records = [r[None, :] for r in records]
    else:
        a, b = family.bounds
        lo = max(family.support[0], a - 3)
        grid = np.unique(np.r_[np.linspace(lo, b + 3, 61), a, b])
        if family.integer:
            grid = np.unique(np.round(grid))
        records = [np.array([v]) for v in grid]
    stats_ = [family.statistic(r)[0] for r in records]
    worst = max(np.abs(s1 - s2).sum() for s1 in stats_ for s2 in stats_)
    assert worst == pytest.approx(sensitivity)


def test_release_adds_independent_laplace_noise_per_component():
    fam = Multinomial(categories=3)
    s = np.array([400.0, 350.0, 250.0])
    source = NoiseSource(SEED)
    noise = np.array([release_statistic(s, 1000, fam, 0.5, source).y - s for _ in range(4000)])
    scale = fam.sensitivity / 0.5
    for j in range(3):
        assert stats.kstest(noise[:, j], "laplace", args=(0, scale)).pvalue > 1e-3
    corr = np.corrcoef(noise.T)[np.triu_indices(3, 1)]
    # one scalar draw shared by all components (the reference code) gives correlation 1
    assert np.all(np.abs(corr) < 4 / np.sqrt(len(noise)))


def test_release_record_and_ledger():
    x = np.r_[np.zeros(600), np.ones(400)]
    rel = expfam.release(x, "bernoulli", epsilon=0.5, noise_seed=SEED)
    assert rel.n == 1000 and rel.epsilon == 0.5 and rel.sensitivity == 1.0
    assert rel.bounds is None and rel.scale == 2.0 and "Laplace" in rel.mechanism
    assert abs(rel.y[0] - 400) < 40  # 20 Laplace scales
    with pytest.raises(ValueError):
        rel.y[0] = 1.0  # read-only
    again = NoisyStatistic.from_json(rel.to_json())
    assert again.y.tolist() == rel.y.tolist() and again.family == rel.family
    assert rel.ledger.epsilon == 0.5 and rel.ledger.delta == 0.0
    assert expfam.release(x, "bernoulli", 0.5, noise_seed=SEED).y[0] == rel.y[0]
    assert expfam.release(x, "bernoulli", 0.5, noise_seed=SEED + 1).y[0] != rel.y[0]
    record = rel.to_dict()
    record["sensitivity"] = 0.5  # a record cannot under-state the sensitivity
    with pytest.raises(ValueError, match="sensitivity"):
        NoisyStatistic.from_dict(record)
    exp_rel = expfam.release([0.2, 0.7, 3.0], "exponential", 1.0, bounds=(0, 1), noise_seed=1)
    assert json.loads(exp_rel.to_json())["bounds"] == [0.0, 1.0]


def test_truncation_redacts_records_outside_the_bounds():
    x = np.array([0.1, 0.5, 0.99, 1.0, 1.5, 7.0])
    rel = expfam.release(x, "exponential", epsilon=1e9, bounds=(0, 1), noise_seed=SEED)
    assert rel.y[0] == pytest.approx(0.1 + 0.5 + 0.99 + 1.0, abs=1e-6)
    counts = [0, 3, 9, 4, 12]
    rel = expfam.release(counts, "poisson", epsilon=1e9, bounds=(2, 10), noise_seed=SEED)
    assert rel.y[0] == pytest.approx(3 + 9 + 4, abs=1e-6)
    rel = expfam.release([-3.0, 0.5, 2.5], "normal", epsilon=1e9, bounds=(-1, 2))
    assert rel.y[0] == pytest.approx(0.5, abs=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"data": [0, 1], "family": "bernoulli", "epsilon": 0.0}, "`epsilon`"),
        ({"data": [0, 1], "family": "bernoulli", "epsilon": -1.0}, "`epsilon`"),
        ({"data": [0, 1], "family": "bernoulli", "epsilon": np.inf}, "`epsilon`"),
        ({"data": [0, 1], "family": "bernoulli", "epsilon": np.nan}, "`epsilon`"),
        ({"data": [0, 2], "family": "bernoulli", "epsilon": 1.0}, "outside the support"),
        ({"data": [0, 0.5], "family": "binomial", "epsilon": 1.0, "trials": 3}, "integers"),
        ({"data": [0, 3], "family": "categorical", "epsilon": 1.0, "categories": 3}, "outside"),
        ({"data": [[1, 1, 0]], "family": "multinomial", "epsilon": 1.0, "categories": 3}, "sum"),
        ({"data": [0, 1], "family": "categorical", "epsilon": 1.0}, "`categories`"),
        ({"data": [0.5, -0.1], "family": "exponential", "epsilon": 1.0, "bounds": (0, 1)}, "out"),
        ({"data": [1.5, 2], "family": "poisson", "epsilon": 1.0, "bounds": (0, 5)}, "integers"),
        ({"data": [0.5], "family": "exponential", "epsilon": 1.0, "bounds": (1, 1)}, "a < b"),
        ({"data": [0.5], "family": "exponential", "epsilon": 1.0, "bounds": (2, 1)}, "a < b"),
        ({"data": [0.5], "family": "exponential", "epsilon": 1.0, "bounds": (-1, 1)}, "support"),
        ({"data": [0.5], "family": "exponential", "epsilon": 1.0, "bounds": (0, np.inf)}, "fin"),
        ({"data": [0.5], "family": "exponential", "epsilon": 1.0}, "`bounds` are required"),
        ({"data": [1], "family": "poisson", "epsilon": 1.0, "bounds": (0, 2.5)}, "integers"),
        ({"data": [1], "family": "bernoulli", "epsilon": 1.0, "bounds": (0, 1)}, "`bounds`"),
        ({"data": [np.nan], "family": "normal", "epsilon": 1.0, "bounds": (0, 1)}, "NaN"),
        ({"data": [], "family": "normal", "epsilon": 1.0, "bounds": (0, 1)}, "empty"),
        ({"data": [1], "family": "gaussian", "epsilon": 1.0}, "unknown `family`"),
    ],
)
def test_release_refuses_bad_input_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        expfam.release(**kwargs)


# ------------------------------------------------------------------------- random variates
@pytest.mark.parametrize(
    ("mean", "sd", "lo", "hi"),
    [
        (0.0, 1.0, -0.5, 2.0),
        (0.0, 1.0, 30.0, 31.0),
        (5.0, 2.0, -np.inf, 0.0),
        (0.0, 1.0, 1, np.inf),
    ],
)
def test_truncated_normal_matches_scipy(mean, sd, lo, hi):
    rng = np.random.default_rng(SEED)
    x = truncated_normal(rng, np.full(4000, mean), sd, lo, hi)
    assert np.all((x >= lo) & (x <= hi))
    ref = stats.truncnorm((lo - mean) / sd, (hi - mean) / sd, loc=mean, scale=sd)
    assert stats.kstest(x, ref.cdf).pvalue > 1e-3


def test_truncated_normal_far_tails_and_degenerate_cases():
    rng = np.random.default_rng(SEED)
    x = truncated_normal(rng, np.zeros(1000), 1.0, 40.0, 41.0)  # inverse CDF of ndtr fails here
    assert np.all((x >= 40) & (x <= 41)) and x.mean() < 40.1
    y = truncated_normal(rng, np.zeros(1000), 1.0, -41.0, -40.0)
    assert np.all((y >= -41) & (y <= -40)) and y.mean() > -40.1
    np.testing.assert_array_equal(truncated_normal(rng, [3.0, -2.0], 0.0, 0.0, 1.0), [1.0, 0.0])
    assert truncated_normal(rng, [0.0], 1e-200, -1.0, 1.0)[0] == pytest.approx(0.0, abs=1e-150)


def test_inverse_gaussian_matches_scipy_and_is_stable():
    rng = np.random.default_rng(SEED)
    x = inverse_gaussian(rng, np.full(4000, 2.0), 3.0)
    assert stats.kstest(x, stats.invgauss(2.0 / 3.0, scale=3.0).cdf).pvalue > 1e-3
    # mean >> shape: Generator.wald cancels here; the stable root keeps every draw positive
    big = inverse_gaussian(rng, np.full(20000, 1e8), 1.0)
    assert np.all(big > 0) and np.all(np.isfinite(big))
    ref = stats.invgauss(1e8, scale=1.0)
    assert np.median(big) == pytest.approx(ref.median(), rel=0.05)


# ------------------------------------------------------------------------- Gibbs sampler
def _log_laplace_convolution(y, m, v, scale, lo, hi):
    """log of int_lo^hi N(s; m, v) Lap(y; s, scale) ds in closed form (two truncated pieces)."""
    sd = np.sqrt(v)

    def log_diff_ndtr(a, b):
        flip = a + b > 0
        lo_, hi_ = np.where(flip, -b, a), np.where(flip, -a, b)
        top = special.log_ndtr(hi_)
        with np.errstate(divide="ignore"):
            return top + np.log(-np.expm1(special.log_ndtr(lo_) - top))

    m_left, m_right = m + v / scale, m - v / scale
    left = (m - y) / scale + log_diff_ndtr((lo - m_left) / sd, (np.minimum(y, hi) - m_left) / sd)
    right = (y - m) / scale + log_diff_ndtr((np.maximum(y, lo) - m_right) / sd, (hi - m_right) / sd)
    return np.logaddexp(left, right) + v / (2 * scale**2)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["binomial eps 0.01", "exponential eps 0.1"])
def test_gibbs_matches_the_quadrature_posterior_of_the_clt_model(case):
    """p(theta | y) on a grid under the same normal approximation, by independent closed forms."""
    n = 1000
    if case.startswith("binomial"):
        fam, prior, eps, y = Binomial(), (10.0, 10.0), 0.01, 430.0
        grid = np.linspace(1e-4, 1 - 1e-4, 20000)
        log_prior = stats.beta.logpdf(grid, *prior)
        m, v, lo, hi = n * grid, n * grid * (1 - grid), 0.0, float(n)
    else:
        fam, prior, eps, b = Exponential(bounds=(0.0, 1.5)), (8.0, 2.0), 0.1, 1.5
        y = 259.0
        grid = np.linspace(0.05, 12, 20000)
        log_prior = stats.gamma.logpdf(grid, prior[0], scale=1 / prior[1])
        # inside-bounds moments of the exponential in closed form (not via Lemma 1)
        e1 = (1 - np.exp(-grid * b) * (1 + grid * b)) / grid
        e2 = (2 - np.exp(-grid * b) * ((grid * b) ** 2 + 2 * grid * b + 2)) / grid**2
        m, v, lo, hi = n * e1, n * (e2 - e1**2), 0.0, n * b
    log_post = log_prior + _log_laplace_convolution(y, m, v, fam.sensitivity / eps, lo, hi)
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    q_mean = (grid * w).sum()
    q_sd = np.sqrt(((grid - q_mean) ** 2 * w).sum())
    trace = expfam.gibbs(
        fam, prior, np.full((8, 1), y), n, eps, draws=5000, tune=1000, random_seed=SEED
    )
    theta = trace.theta
    import arviz as az

    ess = float(az.ess(theta))
    mcse = q_sd / np.sqrt(ess)
    assert theta.mean() == pytest.approx(q_mean, abs=4 * mcse)
    # sd of a sample sd ~ sd / sqrt(2 ESS); 5 of them plus 3% for the two views of Algorithm 1
    # (conjugate theta | s, normal s | theta)
    assert theta.std() == pytest.approx(q_sd, rel=5 / np.sqrt(2 * ess) + 0.03)


def test_gibbs_is_reproducible_and_batched_chains_differ():
    fam = Multinomial(categories=3)
    y = np.array([[300.0, 420.0, 280.0]] * 3)
    a = expfam.gibbs(fam, (5, 5, 5), y, 1000, 0.1, draws=50, tune=10, random_seed=SEED)
    b = expfam.gibbs(fam, (5, 5, 5), y, 1000, 0.1, draws=50, tune=10, random_seed=SEED)
    np.testing.assert_array_equal(a.theta, b.theta)
    np.testing.assert_array_equal(a.s, b.s)
    assert not np.array_equal(a.theta[0], a.theta[1])
    np.testing.assert_allclose(a.s.sum(axis=-1), 1000.0)  # latent counts stay on the simplex
    assert np.all(a.s >= 0)
    tr = expfam.gibbs(Exponential(bounds=(0, 1)), (8, 2), [[240.0]], 1000, 0.1, draws=20, tune=0)
    assert tr.s_hat is not None and np.all(tr.s >= 0) and np.all(tr.s_hat <= 1000)


def test_gibbs_with_noise_pushing_y_outside_the_valid_range():
    """eps = 0.01 at n = 50: y is often negative; s stays in range and no loop hangs."""
    fam = Binomial()
    tr = expfam.gibbs(
        fam, (1, 1), [[-180.0], [240.0]], 50, 0.01, draws=200, tune=50, random_seed=SEED
    )
    assert np.all((tr.s >= 0) & (tr.s <= 50)) and np.all((tr.theta > 0) & (tr.theta < 1))


def test_gibbs_argument_errors():
    with pytest.raises(ValueError, match="`prior`"):
        expfam.gibbs(Binomial(), (1.0, -1.0), [10.0], 100, 1.0)
    with pytest.raises(ValueError, match="`y`"):
        expfam.gibbs(Multinomial(categories=3), (1, 1, 1), [10.0, 2.0], 100, 1.0)
    with pytest.raises(ValueError, match="`epsilon`"):
        expfam.gibbs(Binomial(), (1, 1), [10.0], 100, 0.0)
    with pytest.raises(ValueError, match="`sigma`"):
        expfam.gibbs(Normal(bounds=(0, 1)), (0, 1), [10.0], 100, 1.0)


# ------------------------------------------------------------------------- calibration
CALIBRATION = {
    # Bernstein & Sheldon's three models at n = 1000, eps = 0.1; 500 burn-in + 1000 draws as in
    # docs/references.md for the bounded families. The truncated sampler mixes ~20x slower (the
    # latent s_hat is mostly noise at eps = 0.1): with 1000 draws the Monte Carlo error of each
    # quantile alone moves the KS distance (measured 0.020 against 0.007 for the same posterior on
    # a grid, M = 10000), so it runs 1000 + 4000.
    "binomial": (Binomial(), (10.0, 10.0), 500, 1000),
    "multinomial": (Multinomial(categories=3), (5.0, 5.0, 5.0), 500, 1000),
    "exponential": (Exponential(bounds=(0.0, 1.0)), (8.0, 2.0), 1000, 4000),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CALIBRATION))
def test_gibbs_is_calibrated_and_naive_is_not(name):
    family, prior, tune, draws = CALIBRATION[name]
    m = 1000
    result = calibration_study(
        family, prior, n=1000, epsilon=0.1, trials=m, tune=tune, draws=draws, random_seed=SEED
    )
    print(result.table())
    k = int(np.prod(family.theta_shape, dtype=int))
    # 5% critical value, Bonferroni over the K components of a Dirichlet (K = 1 otherwise)
    critical = ks_critical_value(m, alpha=0.05 / k)
    assert result.critical_value == pytest.approx(1.358 / np.sqrt(m), rel=0.01)
    assert np.all(result.ks["gibbs"] < critical)
    assert np.all(result.ks["exact"] < critical)  # the non-private posterior, as a sanity check
    assert np.all(result.ks["naive"] > critical)


@pytest.mark.slow
def test_gibbs_calibrated_and_naive_far_off_at_epsilon_001():
    result = calibration_study(
        Binomial(),
        (10.0, 10.0),
        n=1000,
        epsilon=0.01,
        trials=1000,
        methods=("gibbs", "naive"),
        random_seed=SEED,
    )
    print(result.table())
    assert result.ks["gibbs"] < result.critical_value
    assert (
        result.ks["naive"] > 5 * result.critical_value
    )  # measured 0.36 (docs/references.md: 0.36)


@pytest.mark.slow
def test_independent_truncation_sections_are_miscalibrated():
    """Algorithm 2 / the reference code treat the sections as independent: miscalibrated."""
    m = 2000
    result = calibration_study(
        Exponential(bounds=(0.0, 1.0)),
        (8.0, 2.0),
        n=1000,
        epsilon=0.1,
        trials=m,
        tune=500,
        draws=2000,
        methods=("gibbs",),
        random_seed=SEED,
        section_covariance=False,
    )
    print(result.table())
    assert result.ks["gibbs"] > result.critical_value


# ------------------------------------------------------------------------- PyMC integration
def _beta_binomial_model(x=None, *, observed=True):
    with pm.Model() as model:
        p = pm.Beta("p", 10, 10)
        if observed:
            pm.Binomial("k", n=1, p=p, observed=x)
        else:
            pm.Bernoulli("k", p=p)
        pm.Deterministic("odds", p / (1 - p))
    return model


@pytest.fixture(scope="module")
def bernoulli_data():
    return np.random.default_rng(SEED).binomial(1, 0.3, size=1000)


def test_sample_returns_a_private_datatree(bernoulli_data):
    x = bernoulli_data
    model = _beta_binomial_model(x)
    idata = expfam.sample(model, epsilon=0.1, draws=300, tune=100, chains=3, random_seed=SEED)
    assert set(idata.children) == {"posterior", "sample_stats"}
    assert not set(idata.children) & {"observed_data", "constant_data", "log_likelihood"}
    assert set(idata.posterior.data_vars) == {"p", "odds"}
    assert idata.posterior["p"].shape == (3, 300)
    np.testing.assert_allclose(
        idata.posterior["odds"], idata.posterior["p"] / (1 - idata.posterior["p"])
    )
    assert set(idata.sample_stats.data_vars) == {"s"}
    report = pdp.privacy_report(idata)
    assert report.epsilon == pytest.approx(0.1) and report.delta == 0.0
    assert "Laplace release of sufficient statistics" in report.mechanisms[0]
    assert "gibbs" in idata.attrs["pymc_dp_expfam_method"]
    rel = NoisyStatistic.from_json(idata.attrs[RELEASE_ATTR])
    assert rel.n == 1000 and rel.sensitivity == 1.0
    # no stored variable holds the data or its exact sufficient statistic
    for node in idata.subtree:
        for var in node.dataset.data_vars.values():
            values = np.asarray(var.values, dtype=float).ravel()
            assert not np.any(values == x.sum())
            assert values.size < x.size or not np.array_equal(values[: x.size], x)
    assert 0.25 < float(idata.posterior["p"].mean()) < 0.35


def test_epsilon_does_not_grow_with_draws_or_chains(bernoulli_data):
    model = _beta_binomial_model(bernoulli_data)
    small = expfam.sample(model, epsilon=0.3, draws=10, tune=0, chains=1, random_seed=1)
    large = expfam.sample(model, epsilon=0.3, draws=2000, tune=1000, chains=8, random_seed=1)
    for idata in (small, large):
        assert pdp.privacy_report(idata).epsilon == pytest.approx(0.3)
        assert idata.attrs["pymc_dp_epsilon"] == pytest.approx(0.3)
    assert small.attrs["pymc_dp_ledger"] == large.attrs["pymc_dp_ledger"]
    rel = expfam.release(bernoulli_data, "bernoulli", 0.7, noise_seed=2)
    idata = expfam.sample(_beta_binomial_model(observed=False), released=rel, chains=6)
    assert pdp.privacy_report(idata).epsilon == pytest.approx(0.7)


def test_modeler_without_data_reproduces_the_data_owner_run(bernoulli_data):
    owner = expfam.sample(
        _beta_binomial_model(bernoulli_data),
        epsilon=0.1,
        draws=200,
        tune=50,
        chains=2,
        random_seed=SEED,
    )
    released = NoisyStatistic.from_json(owner.attrs[RELEASE_ATTR])  # all the modeler receives
    modeler = expfam.sample(
        _beta_binomial_model(observed=False),
        released=released,
        draws=200,
        tune=50,
        chains=2,
        random_seed=SEED,
    )
    np.testing.assert_array_equal(owner.posterior["p"], modeler.posterior["p"])
    # and without any model: the prior alone
    bare = expfam.sample(
        released=released,
        prior=(10, 10),
        draws=200,
        tune=50,
        chains=2,
        random_seed=SEED,
        var_name="p",
    )
    np.testing.assert_array_equal(bare.posterior["p"], owner.posterior["p"])


def test_sample_is_reproducible_only_with_a_noise_seed(bernoulli_data):
    model = _beta_binomial_model(bernoulli_data)
    a = expfam.sample(model, epsilon=0.1, draws=50, tune=10, random_seed=5, noise_seed=5)
    b = expfam.sample(model, epsilon=0.1, draws=50, tune=10, random_seed=5, noise_seed=5)
    c = expfam.sample(model, epsilon=0.1, draws=50, tune=10, random_seed=5, noise_seed=6)
    np.testing.assert_array_equal(a.posterior["p"], b.posterior["p"])
    assert a.attrs[RELEASE_ATTR] == b.attrs[RELEASE_ATTR] != c.attrs[RELEASE_ATTR]
    assert pdp.privacy_report(a).noise_seeded
    # random_seed alone reproduces the chains, never the release noise (OS entropy)
    d = expfam.sample(model, epsilon=0.1, draws=50, tune=10, random_seed=5)
    e = expfam.sample(model, epsilon=0.1, draws=50, tune=10, random_seed=5)
    assert d.attrs[RELEASE_ATTR] != e.attrs[RELEASE_ATTR]
    assert not pdp.privacy_report(d).noise_seeded


def _models():
    rng = np.random.default_rng(SEED)
    out = {}
    with pm.Model() as m:
        p = pm.Beta("p", 2, 3)
        pm.Binomial("k", n=4, p=p, observed=rng.binomial(4, 0.4, size=50))
    out["binomial rows"] = (m, Binomial(trials=4), [2, 3], 50)
    with pm.Model() as m:
        p = pm.Beta("p", 2, 3)
        pm.Binomial("k", n=500, p=p, observed=210)
    out["binomial aggregate"] = (m, Binomial(trials=1), [2, 3], 500)
    with pm.Model() as m:
        p = pm.Beta("p", 2, 3)
        pm.Bernoulli("k", p=p, observed=rng.binomial(1, 0.4, size=40))
    out["bernoulli"] = (m, Binomial(trials=1), [2, 3], 40)
    with pm.Model(coords={"c": ["a", "b", "c"]}) as m:
        w = pm.Dirichlet("w", [1.0, 2.0, 3.0], dims="c")
        pm.Categorical("z", p=w, observed=rng.integers(0, 3, size=30))
    out["categorical"] = (m, Multinomial(categories=3), [1, 2, 3], 30)
    with pm.Model() as m:
        w = pm.Dirichlet("w", [1.0, 2.0, 3.0])
        pm.Multinomial("z", n=5, p=w, observed=rng.multinomial(5, [0.2, 0.3, 0.5], size=20))
    out["multinomial rows"] = (m, Multinomial(categories=3, trials=5), [1, 2, 3], 20)
    with pm.Model() as m:
        lam = pm.Gamma("lam", alpha=3, beta=2)
        pm.Poisson("x", lam, observed=rng.poisson(1.5, size=60))
    out["poisson"] = (m, Poisson(bounds=(0, 6)), [3, 2], 60)
    with pm.Model() as m:
        lam = pm.Gamma("lam", alpha=8, beta=2)
        pm.Exponential("x", lam, observed=rng.exponential(0.25, size=60))
    out["exponential"] = (m, Exponential(bounds=(0, 1)), [8, 2], 60)
    with pm.Model() as m:
        mu = pm.Normal("mu", 1, 10)
        pm.Normal("x", mu, 2.0, observed=rng.normal(1, 2, size=70))
    out["normal"] = (m, Normal(bounds=(-5, 7), sigma=2.0), [1, 10], 70)
    return out


@pytest.mark.parametrize("case", list(_models()))
def test_conjugate_pairs_are_recognised(case):
    model, family, prior, n = _models()[case]
    conj = expfam.find_conjugate_pair(model)
    np.testing.assert_allclose(conj.prior, prior)  # Gamma: PyTensor's scale -> rate
    assert conj.n == n
    assert conj.family(family.bounds) == family
    idata = expfam.sample(
        model, epsilon=1.0, bounds=family.bounds, draws=30, tune=10, chains=2, random_seed=SEED
    )
    assert set(idata.posterior.data_vars) == {conj.theta}
    assert "observed_data" not in idata.children
    if case == "categorical":
        assert list(idata.posterior["w"].coords["c"].values) == ["a", "b", "c"]


def test_unsupported_models_are_refused():
    y = np.array([0, 1, 1, 0])
    with pm.Model() as hierarchical:
        a = pm.Gamma("a", 2, 1)
        p = pm.Beta("p", a, 2)
        pm.Bernoulli("k", p=p, observed=y)
    with pm.Model() as logit:
        b = pm.Normal("b", 0, 1)
        pm.Bernoulli("k", logit_p=b, observed=y)
    with pm.Model() as unknown_sigma:
        mu = pm.Normal("mu", 0, 1)
        s = pm.HalfNormal("s", 1)
        pm.Normal("x", mu, s, observed=[0.1, 0.2])
    with pm.Model() as scaled:
        p = pm.Beta("p", 1, 1)
        pm.Bernoulli("k", p=p / 2, observed=y)
    with pm.Model() as batched:
        p = pm.Beta("p", 1, 1, shape=2)
        pm.Bernoulli("k", p=p, observed=np.array([[0, 1], [1, 1]]))
    with pm.Model() as potential:
        p = pm.Beta("p", 1, 1)
        pm.Bernoulli("k", p=p, observed=y)
        pm.Potential("pen", -p)
    for model, match in [
        (hierarchical, "exactly one conjugate pair"),
        (logit, "exactly one conjugate pair"),
        (unknown_sigma, "exactly one conjugate pair"),
        (scaled, "transformations"),
        (batched, "scalar"),
        (potential, "Potential"),
    ]:
        with pytest.raises(ValueError, match=match):
            expfam.sample(model, epsilon=1.0)
    with pytest.raises(ValueError, match="no model"):
        expfam.sample(epsilon=1.0)


def test_sample_argument_errors(bernoulli_data):
    model = _beta_binomial_model(bernoulli_data)
    rel = expfam.release(bernoulli_data, "bernoulli", 1.0, noise_seed=1)
    with pytest.raises(ValueError, match="not both"):
        expfam.sample(model, released=rel, epsilon=1.0)
    with pytest.raises(ValueError, match="`epsilon`"):
        expfam.sample(model)
    with pytest.raises(ValueError, match="`epsilon`"):
        expfam.sample(model, epsilon=0.0)
    with pytest.raises(ValueError, match="`method`"):
        expfam.sample(model, epsilon=1.0, method="exact")
    with pytest.raises(ValueError, match="`bounds` apply to truncated"):
        expfam.sample(model, epsilon=1.0, bounds=(0, 1))
    with pytest.raises(ValueError, match="records"):
        expfam.sample(_beta_binomial_model(bernoulli_data[:10]), released=rel)
    exp_model = _models()["exponential"][0]
    with pytest.raises(ValueError, match="`bounds` are required"):
        expfam.sample(exp_model, epsilon=1.0)
    with pytest.raises(ValueError, match="statistic but the model needs"):
        expfam.sample(exp_model, released=rel)
    with pytest.raises(ValueError, match="outside the support"):
        expfam.sample(model, epsilon=1.0, data=[0, 1, 2])


def test_truncated_model_from_release_and_naive_label():
    x = np.random.default_rng(SEED).exponential(0.25, size=1000)
    rel = expfam.release(x, "exponential", epsilon=0.5, bounds=(0, 1), noise_seed=SEED)
    with pm.Model() as model:
        lam = pm.Gamma("lam", 8, 2)
        pm.Exponential("x", lam)  # the modeler has no data
    idata = expfam.sample(model, released=rel, draws=300, tune=300, chains=2, random_seed=SEED)
    assert set(idata.sample_stats.data_vars) == {"s", "s_hat"}
    assert 3.0 < float(idata.posterior["lam"].mean()) < 5.0
    with pytest.raises(ValueError, match="disagree"):
        expfam.sample(model, released=rel, bounds=(0, 2))
    naive = expfam.sample(model, released=rel, method="naive", draws=100, chains=2)
    assert "MISCALIBRATED" in naive.attrs["pymc_dp_expfam_method"]
    assert "sample_stats" not in naive.children
    # the normal family: a release made without sigma takes the model's
    xn = np.random.default_rng(1).normal(1.0, 2.0, size=500)
    reln = expfam.release(xn, "normal", epsilon=1.0, bounds=(-5, 7), noise_seed=1)
    with pm.Model() as normal_model:
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("x", mu, 2.0)
    idn = expfam.sample(normal_model, released=reln, draws=200, tune=100, chains=2)
    assert abs(float(idn.posterior["mu"].mean()) - 1.0) < 0.5


def test_deterministics_of_data_are_left_out(bernoulli_data):
    x = bernoulli_data
    with pm.Model() as model:
        p = pm.Beta("p", 1, 1)
        pm.Bernoulli("k", p=p, observed=x)
        pm.Deterministic("expected_count", p * x)  # reads the data
        pm.Deterministic("logit_p", pm.math.logit(p))
    with pytest.warns(UserWarning, match="expected_count"):
        idata = expfam.sample(model, epsilon=1.0, draws=20, tune=5, chains=1)
    assert set(idata.posterior.data_vars) == {"p", "logit_p"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expfam.sample(_beta_binomial_model(x), epsilon=1.0, draws=5, tune=0, chains=1)


@pytest.mark.parametrize("reads", ["container", "copy"])
def test_a_prior_that_reads_the_data_is_refused(reads):
    """Found in review: ``mu ~ Normal(mean(y), std(y))`` was accepted, so the release rested on
    exact statistics of the data (contract item 3)."""
    y = np.random.default_rng(0).normal(0.5, 1.0, 50)
    with pm.Model() as model:
        yd = pm.Data("yd", y)
        loc = pt.mean(yd) if reads == "container" else pt.mean(pt.as_tensor(y))
        mu = pm.Normal("mu", loc, 1.0)
        pm.Normal("y", mu, 1.0, observed=yd)
    with pytest.raises(ValueError, match="the prior of 'mu' reads"):
        expfam.sample(model, epsilon=1.0, bounds=(-3.0, 3.0), draws=10, tune=10, chains=1)
