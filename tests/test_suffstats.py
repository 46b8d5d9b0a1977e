"""DPSuffStats: Normal linear regression from its noisy Gram matrix (pymc_dp.linear_gaussian).

The surrogate must equal the model's likelihood at zero noise (up to a constant), the Gram
release must be bounded by its declared sensitivity, the ledger must state the noise added, the
detection must refuse what is not linear-Gaussian, and the noise-aware posterior must cover the
truth (simulation-based calibration with fixed seeds).
"""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from scipy import integrate, stats

import pymc_dp as pdp
from pymc_dp.accounting.gaussian import gaussian_epsilon
from pymc_dp.linear_gaussian import (
    find_linear_gaussian,
    gram_sensitivity,
    log_rss_density,
    noise_entries,
    release_gram,
    rows_of,
    start_noise,
    surrogate_logp,
)
from pymc_dp.linear_residuals import (
    SecondStage,
    planned_errors,
    release_residuals,
    release_two_stage,
    residual_sensitivity,
    second_stage,
)
from pymc_dp.noise import NoiseSource

FAST = {"mode": "FAST_COMPILE"}


def _model(n=400, seed=0, scale_prior=1.0):
    """Two covariate containers (a matrix and a vector with its own range), a hierarchical
    scale on the coefficients (a prior-only variable) and a transformed noise sd."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 2))
    x3 = rng.uniform(0, 5, n)
    y = np.clip(1.0 + X @ [1.0, 2.0] - 0.3 * x3 + rng.normal(0, 0.7, n), -10, 10)
    with pm.Model() as m:
        Xd, x3d = pm.Data("X", X), pm.Data("x3", x3)
        tau = pm.HalfNormal("tau", scale_prior)
        a = pm.Normal("a", 0, 3)
        b = pm.Normal("b", 0, tau, shape=2)
        c = pm.Normal("c", 0, 1)
        s = pm.HalfNormal("s", 2)
        pm.Normal("y", a + Xd @ b + c * x3d, s, observed=y)
    return m, X, x3, y


BOUNDS = {"X": (-1.0, 1.0), "x3": (0.0, 5.0)}


@pytest.fixture(scope="module")
def two_inputs():
    m, X, x3, y = _model()
    return m, pdp.PerRowLikelihood(m, compile_kwargs=FAST), X, x3, y


def _zero_noise_gaps(m, lik, lg, rel) -> np.ndarray:
    """Surrogate minus the model's log-likelihood at six random points, the latent noise 0."""
    latent = pt.vector("latent")
    surrogate = pytensor.function(
        [lg.q, latent], surrogate_logp(rel, lg.intercept, lg.coefs, lg.sigma, latent)
    )
    exact = pytensor.function([lik._q], lik._rows.sum())
    rng = np.random.default_rng(3)
    zero = np.zeros(len(noise_entries(rel.gram.shape[0])[0]))
    points = [lik.ravel(m.initial_point()) + rng.normal(0, 0.7, lik.dim) for _ in range(6)]
    return np.array([surrogate(q, zero) - exact(q) for q in points])


def test_the_surrogate_is_the_likelihood_at_zero_noise(two_inputs):
    """With the noise at 0 the statistics' density is the regression likelihood up to a
    constant, at any parameter point (the sum of squares' saddlepoint included)."""
    m, lik, X, x3, y = two_inputs
    lg = find_linear_gaussian(lik.graph)
    design, outcome = rows_of(lg, lik.n_rows)
    order = [c.var.name for c in lg.covariates]
    assert sorted(order) == ["X", "x3"] and np.allclose(outcome, y)
    widths = list(zip(order, lg.widths, strict=True))
    lo = np.concatenate([np.full(w, BOUNDS[nm][0]) for nm, w in widths])
    hi = np.concatenate([np.full(w, BOUNDS[nm][1]) for nm, w in widths])
    rel = release_gram(
        design, outcome, x_bounds=(lo, hi), y_bounds=(-10, 10), mu=1e16, noise=NoiseSource(1)
    )
    gaps = _zero_noise_gaps(m, lik, lg, rel)
    assert np.ptp(gaps) < 1e-5


def test_saddlepoint_density_of_the_sum_of_squares():
    x, s2, v = pt.dscalars("x", "s2", "v")
    nu = 40
    f = pytensor.function([x, s2, v], log_rss_density(x, s2, v, nu))
    # no noise: the chi-square density of x / s2 up to a constant of nu only
    xs = np.array([20.0, 35.0, 60.0])
    for s2_ in (0.5, 1.0, 2.0):
        spa = np.array([f(xx, s2_, 0.0) for xx in xs])
        exact = stats.chi2.logpdf(xs / s2_, nu) - np.log(s2_)
        assert np.ptp(spa - exact) < 1e-9
    # noise: against the convolution by quadrature, as a function of s2 and x (the likelihood)
    for v_ in (4.0, 100.0):
        out = []
        for s2_, xx in [(0.8, 30.0), (1.0, 40.0), (1.3, 45.0), (1.0, 10.0)]:

            def integrand(r, s2_=s2_, xx=xx, v_=v_):
                return stats.chi2.pdf(r / s2_, nu) / s2_ * stats.norm.pdf(xx - r, 0, np.sqrt(v_))

            top = xx + 12 * np.sqrt(v_) + 12 * s2_ * np.sqrt(2 * nu)
            conv = integrate.quad(integrand, 0, top, points=[min(xx, top / 2)], limit=400)[0]
            out.append(f(xx, s2_, v_) - np.log(conv))
        assert np.ptp(out) < 0.01  # relative density error below 1% across these points


def test_replacing_one_row_moves_the_release_by_at_most_its_sensitivity():
    rng = np.random.default_rng(5)
    m = 4  # 1, two covariates, outcome: an odd count after the 1, so corners can be orthogonal

    def vec(u):
        g = np.outer(u, u)
        r, c = np.triu_indices(m)
        keep = ~((r == 0) & (c == 0))
        return (g[r, c] * np.where(r == c, 1.0, np.sqrt(2.0)))[keep]

    def row(z):
        return np.r_[1.0, z]

    worst = 0.0
    for _ in range(4000):
        kind = rng.integers(3)
        a = rng.uniform(-1, 1, m - 1) if kind == 0 else rng.choice([-1.0, 1.0], m - 1)
        b = rng.uniform(-1, 1, m - 1) if kind == 1 else rng.choice([-1.0, 1.0], m - 1)
        worst = max(worst, np.linalg.norm(vec(row(a)) - vec(row(b))))
    bound = gram_sensitivity(m - 1)
    assert worst <= bound + 1e-12
    # attained where the rows are orthogonal corners: the bound is tight
    a, b = np.array([1.0, 1.0, 1.0]), np.array([1.0, -1.0, -1.0])
    assert row(a) @ row(b) == 0.0
    assert np.linalg.norm(vec(row(a)) - vec(row(b))) == pytest.approx(bound)
    # rows outside the bounds are clipped into them before the release
    design = rng.uniform(-1, 1, (50, 3))
    y = rng.uniform(-1, 1, 50)
    far = design.copy()
    far[7] = [40.0, -1e9, np.inf]

    def gram(d, yy):
        rel = release_gram(
            d, yy, x_bounds=(-1.0, 1.0), y_bounds=(-1, 1), mu=1e16, noise=NoiseSource(0)
        )
        return rel.gram

    moved = gram(far, y) - gram(design, y)
    assert np.linalg.norm(moved) <= gram_sensitivity(4) + 1e-6


def test_the_noise_is_the_ledger_s(two_inputs):
    """Standardised release errors have sd 1 (the noise the ledger's multiplier states), and the
    ledger's epsilon is the budget."""
    m, lik, *_ = two_inputs
    lg = find_linear_gaussian(lik.graph)
    design, outcome = rows_of(lg, lik.n_rows)
    mu = 0.3
    exact = release_gram(
        design, outcome, x_bounds=(-5.0, 5.0), y_bounds=(-10, 10), mu=1e16, noise=NoiseSource(0)
    )
    z = []
    for seed in range(300):
        rel = release_gram(
            design,
            outcome,
            x_bounds=(-5.0, 5.0),
            y_bounds=(-10, 10),
            mu=mu,
            noise=NoiseSource(seed),
        )
        r, c = np.triu_indices(rel.gram.shape[0])
        keep = rel.noise_sd[r, c] > 0
        z.append(((rel.gram - exact.gram)[r, c] / np.where(keep, rel.noise_sd[r, c], 1))[keep])
        assert rel.gram[0, 0] == lik.n_rows  # n is public and not noised
    z = np.concatenate(z)
    # 300 x 14 standardised values: the sd of their sd is about 1 / sqrt(2 * 4200) = 0.011
    assert np.std(z) == pytest.approx(1.0, abs=0.045)
    assert abs(np.mean(z)) < 0.06
    assert rel.mechanisms[0].noise_multiplier == pytest.approx(1 / np.sqrt(2 * mu))
    with m:
        step = pdp.DPSuffStats(
            epsilon=1.5, outcome_bounds=(-10, 10), covariate_bounds=BOUNDS, compile_kwargs=FAST
        )
    ledger = step.ledger(tune=100, draws=100, chains=4)
    assert ledger.epsilon == pytest.approx(1.5, rel=1e-6)
    # the pilot and the second release: their PLD means add up to the budget's
    assert len(step.release.mechanisms) >= 2
    mu_spent = sum(1 / (2 * mech.noise_multiplier**2) for mech in step.release.mechanisms)
    assert gaussian_epsilon(mu_spent, step.delta) == pytest.approx(1.5, rel=1e-6)
    assert step.ledger(tune=0, draws=10_000, chains=8).epsilon == pytest.approx(1.5, rel=1e-6)


def test_what_is_not_linear_gaussian_is_refused_before_any_release(monkeypatch):
    rng = np.random.default_rng(1)
    X, y = rng.uniform(-1, 1, (100, 2)), rng.normal(size=100)
    released = []
    monkeypatch.setattr(
        "pymc_dp.step_methods.suffstats.release_two_stage", lambda *a, **k: released.append(1)
    )

    def make(build, **kw):
        with pm.Model():
            Xd = pm.Data("X", X)
            b = pm.Normal("b", 0, 1, shape=2)
            build(Xd, b)
            return pdp.DPSuffStats(
                epsilon=1.0,
                outcome_bounds=kw.pop("outcome_bounds", (-5, 5)),
                compile_kwargs=FAST,
                **kw,
            )

    cases = [
        (lambda Xd, b: pm.Bernoulli("y", logit_p=Xd @ b, observed=y > 0), "not Normal"),
        (lambda Xd, b: pm.Normal("y", (Xd**2) @ b, 1.0, observed=y), "not affine"),
        (lambda Xd, b: pm.Normal("y", pm.math.tanh(Xd @ b), 1.0, observed=y), "not affine"),
        (lambda Xd, b: pm.Normal("y", Xd @ b, pm.math.exp(Xd[:, 0]), observed=y), "sd of"),
        (lambda Xd, b: pm.Normal("y", pt.clip(Xd, -6, 6) @ b, 1.0, observed=y), "not affine"),
        (lambda Xd, b: pm.StudentT("y", nu=4, mu=Xd @ b, sigma=1.0, observed=y), "not Normal"),
    ]
    for build, match in cases:
        with pytest.raises(ValueError, match=match):
            make(build)
    linear = lambda Xd, b: pm.Normal("y", Xd @ b, pm.HalfNormal("s"), observed=y)  # noqa: E731
    with pytest.raises(ValueError, match="covariate_bounds.*names"):
        make(linear, covariate_bounds={"Z": (0, 1)})
    with pytest.raises(ValueError, match="outcome_bounds"):
        make(linear, outcome_bounds=(1, 1))
    with pytest.raises(ValueError, match="covariate_bounds"):
        make(linear, covariate_bounds=(2, 1))
    with pytest.raises(ValueError, match="noise_multiplier"):
        make(linear, noise_multiplier=1.0)
    assert released == []


def test_integer_covariates_are_detected_and_an_indefinite_release_still_starts():
    """A 0/1 integer flag enters the design; a released Gram matrix that is not positive
    definite (off-centre, correlated covariates at small n) gets a start inside the support."""
    rng = np.random.default_rng(4)
    n = 500
    x1 = rng.normal(8.5, 0.5, n)
    flag = (rng.uniform(size=n) < 0.3).astype(np.int64)
    X = np.column_stack([x1, x1 + 0.3 * rng.normal(size=n)]).clip(0, 10)
    y = 1 + X @ [0.2, -0.1] + flag + rng.normal(size=n)
    with pm.Model() as m:
        Xd, fd = pm.Data("X", X), pm.Data("flag", flag)
        b = pm.Normal("b", 0, 1, shape=2)
        a = pm.Normal("a", 0, 3)
        g = pm.Normal("g", 0, 1)
        pm.Normal("y", a + Xd @ b + g * fd, pm.HalfNormal("s", 2), observed=y)
    lik = pdp.PerRowLikelihood(m, compile_kwargs=FAST)
    lg = find_linear_gaussian(lik.graph)
    assert sorted(lg.widths) == [1, 2]
    design, outcome = rows_of(lg, n)
    lo, hi = np.zeros(3), np.array([10.0, 10.0, 10.0])
    lo[[i for i, c in enumerate(np.repeat(lg.covariates, lg.widths)) if c.var is fd]] = 0
    found_indefinite = False
    for seed in range(6):
        rel = release_gram(
            design, outcome, x_bounds=(lo, hi), y_bounds=(-5, 15), mu=0.05, noise=NoiseSource(seed)
        )
        latent = pt.vector("latent")
        logp = pytensor.function(
            [lg.q, latent],
            surrogate_logp(rel, lg.intercept, lg.coefs, lg.sigma, latent),
            mode="FAST_COMPILE",
        )
        q0 = lik.ravel(m.initial_point())
        found_indefinite |= np.linalg.eigvalsh(rel.gram[:4, :4])[0] <= 0
        assert np.isfinite(logp(q0, start_noise(rel)))
    assert found_indefinite  # the case the start is for did occur


def test_the_user_s_model_is_not_changed(two_inputs):
    m, lik, *_ = two_inputs
    before = (list(m.named_vars), list(m.potentials), list(m.free_RVs))
    with m:
        step = pdp.DPSuffStats(
            epsilon=1.0, outcome_bounds=(-10, 10), covariate_bounds=BOUNDS, likelihood=lik
        )
    step.surrogate_model()
    assert (list(m.named_vars), list(m.potentials), list(m.free_RVs)) == before


def test_noise_free_limit_is_the_exact_posterior():
    """An intercept column in X (declared constant, lo == hi) and no separate intercept: at a
    budget where the noise vanishes the draws are the exact posterior's (NUTS on the model)."""
    rng = np.random.default_rng(11)
    n = 2000
    X = np.column_stack([np.ones(n), rng.uniform(-1, 1, (n, 2))])
    y = X @ [0.5, 1.0, -1.5] + rng.normal(0, 0.6, n)
    with pm.Model():
        Xd = pm.Data("X", X)
        beta = pm.Normal("beta", 0, 2, shape=3)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", Xd @ beta, sigma, observed=y)
        bounds = (np.array([1.0, -1, -1]), np.array([1.0, 1, 1]))
        step = pdp.DPSuffStats(
            epsilon=1e7, outcome_bounds=(-8, 8), covariate_bounds=bounds, nuts_tune=500
        )
        with warnings.catch_warnings():
            # no singular-Gram warning: the constant is declared (only that one is an error here:
            # the run's R-hat note at 1.010 with ESS 3578 made this test flaky)
            warnings.filterwarnings("error", message="pymc-dp: the released Gram matrix")
            dp = pdp.sample(
                step=step, draws=1000, tune=0, chains=2, cores=1, random_seed=1, progressbar=False
            )
        ref = pm.sample(
            draws=1000,
            tune=1000,
            chains=2,
            cores=1,
            random_seed=2,
            progressbar=False,
            compute_convergence_checks=False,
        )
    for v in ("beta", "sigma"):
        a = dp.posterior[v].values.reshape(2000, -1)
        b = ref.posterior[v].values.reshape(2000, -1)
        # Monte Carlo error of a difference of two means (ESS ~ 1000 each): ~0.045 sds
        np.testing.assert_array_less(np.abs(a.mean(0) - b.mean(0)) / b.std(0), 0.2)
        np.testing.assert_allclose(a.std(0) / b.std(0), 1.0, atol=0.12)
    assert int(dp.sample_stats["surrogate_diverging"].sum()) == 0
    report = pdp.privacy_report(dp)
    assert "release:" in str(report) and "sufficient statistics" in report.release
    # the constant column folds into the intercept: the released columns' coefficients, sigma
    assert list(report.expected_error) == ["intercept", "X[1]", "X[2]", "sigma"]
    assert max(report.expected_error.values()) < 0.01  # no noise to speak of
    assert "fit error:" in str(report) and "prior's pull left out" in str(report)


def test_an_undeclared_intercept_column_is_warned_about():
    """A constant column's released spread is noise: it reads as too narrow or, where its noise
    came out near two sds (unseeded, this failed once in the suite), as collinear; both name
    the intercept column (17 of seeds 20-399 land there). Above two sds (4 of 400) nothing is
    warned."""
    rng = np.random.default_rng(2)
    X = np.column_stack([np.ones(500), rng.uniform(-1, 1, 500)])
    with pm.Model():
        Xd = pm.Data("X", X)
        beta = pm.Normal("beta", 0, 2, shape=2)
        pm.Normal("y", Xd @ beta, 1.0, observed=rng.normal(size=500))
        named = 0
        for seed in range(20):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                pdp.DPSuffStats(
                    epsilon=2.0, outcome_bounds=(-5, 5), noise_seed=seed, compile_kwargs=FAST
                )
            named += any("an intercept column in X" in str(w.message) for w in caught)
        # no warning where the column's noise exceeds its two-sd level (measured: 4 of seeds
        # 0-399; 1 here): 17 of 20 leaves room for other platforms' rounding
        assert named >= 17, named
        # seeds whose noise lands it in the collinear branch (~4.5%; none of the 20 above):
        # that branch names the intercept column too
        for seed in (92, 143):
            with pytest.warns(UserWarning, match="collinear") as caught:
                pdp.DPSuffStats(
                    epsilon=2.0, outcome_bounds=(-5, 5), noise_seed=seed, compile_kwargs=FAST
                )
            assert any("an intercept column in X" in str(w.message) for w in caught)


def test_intervals_cover_the_truth_by_simulation():
    """Simulation-based calibration with fixed seeds: parameters from the prior, data from the
    model, one release at epsilon 1 per replicate; the central 90% intervals of the noise-aware
    posterior must cover the true parameters about 90% of the time (a posterior that ignored
    the noise covers far less: its sds are 2-5x too small here)."""
    hits, total = 0, 0
    for rep in range(10):
        rng = np.random.default_rng([7, rep])
        n = 300
        beta = rng.normal(0, 1, 2)
        sigma = abs(rng.normal(0, 1))
        X = rng.uniform(-1, 1, (n, 2))
        y = X @ beta + rng.normal(0, sigma, n)
        bound = 4.0 + 4.0 * sigma  # public: a range set before the data (prior predictive)
        with pm.Model():
            Xd = pm.Data("X", X)
            b = pm.Normal("b", 0, 1, shape=2)
            s = pm.HalfNormal("s", 1)
            pm.Normal("y", Xd @ b, s, observed=np.clip(y, -bound, bound))
            lik = pdp.PerRowLikelihood(pm.modelcontext(None), compile_kwargs=FAST)
            step = pdp.DPSuffStats(
                epsilon=1.0,
                outcome_bounds=(-bound, bound),
                # the step's default: in 9 of these 10 releases A is singular within its noise,
                # where 200 tuning steps left chains stuck in both latents (hits 19-22 of 30;
                # 24 of 30 at 1000 in both)
                nuts_tune=1000,
                noise_seed=rep,
                likelihood=lik,  # the surrogate compiles in the default mode: fast sampling
            )
        draws, _ = step.sample_surrogate(300, np.random.default_rng(rep))
        point = step.likelihood.ravel({"b": beta, "s_log__": np.log(sigma)})
        lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
        hits += int(np.sum((lo <= point) & (point <= hi)))
        total += point.size
    # 30 intervals at 90%: P(fewer than 23 hits) = 0.8% for calibrated intervals
    assert hits >= 23, f"{hits}/{total}"


def test_the_planner_recommends_the_release_for_linear_gaussian_models(two_inputs):
    """From public facts only: a linear-Gaussian model gets DPSuffStats (no clip bounds needed)
    with the release's exact noise sd; a logistic model does not."""
    m, *_ = two_inputs
    with m:
        planned = pdp.plan(epsilon=2.0, outcome_bounds=(-10, 10))
    assert planned.recommended == "DPSuffStats"
    mu = 1 / (2 * 2.23048**2)  # about the PLD mean of (2, 1e-6)
    assert planned.suffstats["noise_sd"] == pytest.approx(
        NoiseSource.gaussian_std(gram_sensitivity(4), 1 / np.sqrt(2 * mu), 14), rel=1e-3
    )
    assert "DPSuffStats" in str(planned)
    # the error falls as 1 / epsilon
    with m:
        wider = pdp.plan(epsilon=4.0, outcome_bounds=(-10, 10))
    shrink = wider.suffstats["noise_sd"] / planned.suffstats["noise_sd"]
    assert 0.4 < shrink < 0.6
    assert wider.suffstats["coef_error"] == pytest.approx(planned.suffstats["coef_error"] * shrink)
    rng = np.random.default_rng(0)
    with pm.Model():
        Xd = pm.Data("X", rng.uniform(-1, 1, (300, 2)))
        pm.Bernoulli(
            "y", logit_p=Xd @ pm.Normal("b", 0, 1, shape=2), observed=rng.integers(2, size=300)
        )
        logistic = pdp.plan(epsilon=2.0, grad_clip=2.0)
    assert logistic.suffstats is None and logistic.recommended != "DPSuffStats"


def test_a_nan_row_that_reached_the_release_would_not_poison_it():
    rng = np.random.default_rng(3)
    design, y = rng.uniform(-1, 1, (40, 2)), rng.uniform(-1, 1, 40)
    design[5, 1], y[9] = np.nan, np.nan
    rel = release_gram(
        design, y, x_bounds=(-1.0, 1.0), y_bounds=(-1, 1), mu=1.0, noise=NoiseSource(0)
    )
    assert np.all(np.isfinite(rel.gram))


def test_bounds_too_narrow_to_encode_are_refused_and_rounding_stays_inside():
    """Review: a subnormal width overflowed the encoding (an exact inf or NaN released), and
    bounds a few ulps apart rounded rows to |z| = 2 (past the sensitivity)."""
    from pymc_dp.linear_gaussian import check_outcome_bounds

    with pytest.raises(ValueError, match="outcome_bounds.*too narrow"):
        check_outcome_bounds((-1e-310, 1e-310))
    # a huge magnitude, a width of a few ulps: the encoding's rounding overshoots (found by
    # search, as the review did: |z| up to 2 without the clip after the encoding)
    rng = np.random.default_rng(1)
    worst, case = 0.0, None
    for _ in range(2000):
        lo = float(rng.choice([1, -1])) * 2.0 ** rng.uniform(40, 60)
        hi = lo + np.spacing(abs(lo)) * rng.integers(1, 40)
        for x in (lo, hi):
            z = abs(x * (2.0 / (hi - lo)) - (hi + lo) / (hi - lo))
            if z > worst:
                worst, case = z, (lo, hi, x)
    assert worst > 1.5  # the case exists
    lo, hi, x = case
    rel = release_gram(
        np.array([[x]]),
        np.array([0.0]),
        x_bounds=(np.array([lo]), np.array([hi])),
        y_bounds=(-1, 1),
        mu=1e16,
        noise=NoiseSource(0),
    )
    assert rel.gram[1, 1] <= 1.0 + 1e-6  # one row, at most 1 after the encoding


# ---------------------------------------------------------------- the two-stage release
def test_replacing_one_row_moves_the_residual_release_by_at_most_its_sensitivity():
    """Adversarial rows against :func:`residual_sensitivity`: corners, the clip's edges and
    rows far outside the declared ranges (clipped before the encoding)."""
    rng = np.random.default_rng(8)
    k = 4
    for radius, weight in [(0.3, 0.5), (0.6, 2.9), (2.0, 30.0)]:
        pilot = rng.normal(0, 0.5, k)
        worst = 0.0
        for _ in range(3000):
            rows = []
            for _ in range(2):
                z = rng.choice([-1.0, 1.0, rng.uniform(-1, 1)], k - 1)
                u = np.r_[1.0, z]
                r = np.clip(rng.choice([-3.0, 3.0, rng.uniform(-1, 1)]), -radius, radius)
                rows.append(np.r_[u * r, weight * r * r])
            worst = max(worst, np.linalg.norm(rows[0] - rows[1]))
        bound = residual_sensitivity(radius, k, weight)
        assert worst <= bound + 1e-12
        assert worst >= 0.9 * bound  # the bound is nearly attained: not loose by construction
        # exact: the largest move over a fine grid of the smaller residual, u' = -u at a corner
        x = np.linspace(0.0, radius, 100_001)
        grid = np.sqrt(k * (radius + x) ** 2 + weight**2 * (radius**2 - x**2) ** 2).max()
        assert bound == pytest.approx(grid, rel=1e-9)
        design, y = rng.uniform(-1, 1, (60, k - 1)), rng.uniform(-1, 1, 60)
        far = design.copy()
        far[3] = [50.0, -np.inf, np.nan]
        plan = SecondStage(True, pilot, radius, weight, 0.0, 0.0)

        def vec(d, y=y, plan=plan, weight=weight):
            res, _ = release_residuals(
                d,
                y,
                x_bounds=(-1.0, 1.0),
                y_bounds=(-1, 1),
                plan=plan,
                mu=1e16,
                noise=NoiseSource(0),
            )
            return np.r_[res.cross, weight * res.squares]

        assert np.linalg.norm(vec(far) - vec(design)) <= bound + 1e-6


def _no_clip_two_stage(design, outcome, lo, hi, pilot, mu):
    """A two-stage release whose residuals are not clipped (radius at its largest)."""
    first = release_gram(
        design, outcome, x_bounds=(lo, hi), y_bounds=(-10, 10), mu=mu, noise=NoiseSource(1)
    )
    plan = SecondStage(True, pilot, 1.0 + np.abs(pilot).sum(), 2.0, 0.0, 0.0)
    res, mech = release_residuals(
        design,
        outcome,
        x_bounds=(lo, hi),
        y_bounds=(-10, 10),
        plan=plan,
        mu=mu,
        noise=NoiseSource(2),
    )
    return dataclasses.replace(first, mechanisms=(*first.mechanisms, mech), residual=res)


def test_the_two_stage_surrogate_is_the_likelihood_at_zero_noise(two_inputs):
    """Both observations of b and c combined, their consistency terms included: at zero noise
    the statistics' density is still the regression likelihood up to a constant."""
    m, lik, *_ = two_inputs
    lg = find_linear_gaussian(lik.graph)
    design, outcome = rows_of(lg, lik.n_rows)
    widths = list(zip([c.var.name for c in lg.covariates], lg.widths, strict=True))
    lo = np.concatenate([np.full(w, BOUNDS[nm][0]) for nm, w in widths])
    hi = np.concatenate([np.full(w, BOUNDS[nm][1]) for nm, w in widths])
    pilot = np.random.default_rng(4).normal(0, 0.3, lg.p + 1)
    rel = _no_clip_two_stage(design, outcome, lo, hi, pilot, 1e16)
    gaps = _zero_noise_gaps(m, lik, lg, rel)
    assert np.ptp(gaps) < 1e-5


def test_the_second_stage_is_chosen_from_the_pilot_and_the_gram_again_is_one_release():
    rng = np.random.default_rng(12)
    n = 20_000
    X = rng.uniform(-1, 1, (n, 3))
    mu = 0.1  # about epsilon 2
    kw = {"x_bounds": (-1.0, 1.0), "y_bounds": (-6.0, 6.0)}
    # residuals of a sixth of the outcome's range: the residual release
    tight = X @ [1.0, -2.0, 0.3] + rng.normal(0, 0.8, n)
    pilot = release_gram(X, tight, mu=0.2 * mu, noise=NoiseSource(0), **kw)
    plan = second_stage(pilot, 0.8 * mu)
    assert plan.residuals and plan.predicted_residuals < 0.6 * plan.predicted_gram
    assert 0.3 < plan.radius < 1.0  # 4 upper sds of 0.8 / 6, in encoded units
    # noise that fills the range (residuals clipped at the largest radius would release less
    # than the Gram matrix's second half): the Gram matrix again
    wide = np.clip(X @ [1.0, -2.0, 0.3] + rng.normal(0, 8.0, n), -6, 6)
    pilot = release_gram(X, wide, mu=0.2 * mu, noise=NoiseSource(0), **kw)
    assert not second_stage(pilot, 0.8 * mu).residuals
    both = release_two_stage(X, wide, mu=mu, noise=NoiseSource(0), **kw)
    once = release_gram(X, wide, mu=mu, noise=NoiseSource(0), **kw)
    assert both.residual is None and len(both.mechanisms) == 2
    # equal up to the snapping's excess (NoiseSource.gaussian_std: ~multiplier / 2^40)
    np.testing.assert_allclose(both.noise_sd, once.noise_sd, rtol=1e-4)
    # heavy tails (t, 2 dof, same scale): the tail check declines the residuals' clip
    heavy = np.clip(X @ [1.0, -2.0, 0.3] + 0.5 * rng.standard_t(2, n), -6, 6)
    light = release_two_stage(X, tight, mu=mu, noise=NoiseSource(1), **kw)
    assert light.residual is not None and len(light.mechanisms) == 3
    declined = release_two_stage(X, heavy, mu=mu, noise=NoiseSource(1), **kw)
    assert declined.residual is None and "declined" in declined.to_attr()
    assert len(declined.mechanisms) == 3
    # the planner predicts the same choices from public facts
    assert planned_errors(n, 3, 0.8 / 6, mu)[0] and not planned_errors(n, 3, 8.0 / 6, mu)[0]


def test_the_two_stage_density_is_exact_at_finite_noise():
    """Against the joint density of all four observations (pilot b and c, residual t and s)
    given the latent A and b, c integrated by quadrature: the gap is a constant (from an
    independent review; the zero-noise test cannot see swapped weights or a dropped
    consistency term, since both observations then coincide)."""
    rng = np.random.default_rng(1)
    n, p = 400, 2
    k = p + 1
    X = rng.uniform(-1, 1, (n, p))
    y = 0.2 + X @ [0.5, -0.3] + rng.normal(0, 0.3, n)
    kw = {"x_bounds": (-1.0, 1.0), "y_bounds": (-3.0, 3.0)}
    rel = release_gram(X, y, mu=2.0, noise=NoiseSource(1), **kw)
    pilot = np.array([0.05, 0.1, -0.05])
    plan = SecondStage(True, pilot, 1 + np.abs(pilot).sum(), 3.0, 0.0, 0.0)  # no clipping
    res, mech = release_residuals(X, y, plan=plan, mu=2.0, noise=NoiseSource(2), **kw)
    rel = dataclasses.replace(rel, mechanisms=(*rel.mechanisms, mech), residual=res)
    rows, cols = noise_entries(k + 1)
    w0, s_ = pt.dscalars("w0", "s")
    w, lat = pt.dvector("w"), pt.dvector("lat")
    f = pytensor.function([w0, w, s_, lat], surrogate_logp(rel, w0, w, s_, lat))

    def reference(w0v, wv, sv, latv):
        d = np.zeros((k + 1, k + 1))
        d[rows, cols] = rel.noise_sd[rows, cols] * latv
        a = rel.gram[:k, :k] - (d + np.triu(d, 1).T)[:k, :k]
        v1, v2 = rel.noise_sd[:k, k] ** 2, res.cross_sd**2
        b1, b2 = rel.gram[:k, k], res.cross + a @ pilot
        vb = 1 / (1 / v1 + 1 / v2)
        b = (b1 / v1 + b2 / v2) * vb - np.sqrt(vb) * latv[cols == k]
        beta = np.r_[
            rel.y_scale * (w0v - np.sum(wv / rel.x_scale * rel.x_shift)) + rel.y_shift,
            rel.y_scale * wv / rel.x_scale,
        ]
        s2 = (rel.y_scale * sv) ** 2
        lp = stats.norm.logpdf(b1, b, np.sqrt(v1)).sum()
        lp += stats.norm.logpdf(res.cross, b - a @ pilot, np.sqrt(v2)).sum()
        lp += stats.multivariate_normal.logpdf(b, a @ beta, s2 * a)
        q = b @ np.linalg.solve(a, b)
        c1, sd1, sd2 = rel.gram[k, k], rel.noise_sd[k, k], res.squares_sd
        c2 = res.squares + 2 * pilot @ b - pilot @ a @ pilot

        def g(c):
            chi = stats.chi2.pdf((c - q) / s2, n - k) / s2
            return chi * stats.norm.pdf(c1, c, sd1) * stats.norm.pdf(c2, c, sd2)

        mid = (c1 / sd1**2 + c2 / sd2**2) / (1 / sd1**2 + 1 / sd2**2)
        half = 12 * (1 / sd1**2 + 1 / sd2**2) ** -0.5
        val = integrate.quad(g, max(q, mid - half), mid + half, limit=200, points=[mid])[0]
        return lp + np.log(val)

    gaps = []
    for _ in range(8):
        latv = rng.normal(0, 0.5, len(rows))
        w0v, wv = 0.2 + rng.normal(0, 0.05), np.array([0.5, -0.3]) + rng.normal(0, 0.05, 2)
        sv = 0.3 * np.exp(rng.normal(0, 0.05))
        # the latent b's standard normal prior is the Gaussian factor folded into b's density
        sur = f(w0v, wv, sv, latv) + stats.norm.logpdf(latv[cols == k]).sum()
        gaps.append(sur - reference(w0v, wv, sv, latv))
    # the log-densities move by tens between these points; the saddlepoint's error is ~1e-5
    assert np.ptp(gaps) < 1e-3


@pytest.mark.parametrize("case", ["residuals", "declined", "gram", "unclipped"])
def test_every_branch_of_the_two_stage_release_spends_exactly_the_budget(case):
    rng = np.random.default_rng(21)
    n = 20_000
    X = rng.uniform(-1, 1, (n, 3))
    line = X @ [1.0, -2.0, 0.3]
    y, bounds = {
        "residuals": (line + rng.normal(0, 0.8, n), (-6.0, 6.0)),
        "declined": (line + 0.5 * rng.standard_t(2, n), (-6.0, 6.0)),
        "gram": (line + rng.normal(0, 8.0, n), (-6.0, 6.0)),
        # residuals a quarter of the range: the radius is the largest a residual can reach
        # (no tail check: its share goes to the residuals, which beat the Gram matrix by a hair)
        "unclipped": (line + rng.normal(0, 2.0, n), (-4.0, 4.0)),
    }[case]
    mu = 0.1
    rel = release_two_stage(
        X,
        np.clip(y, *bounds),
        x_bounds=(-1.0, 1.0),
        y_bounds=bounds,
        mu=mu,
        noise=NoiseSource(3),
    )
    spent = sum(1 / (2 * m.noise_multiplier**2) for m in rel.mechanisms)
    assert spent == pytest.approx(mu, rel=1e-12)
    names = [m.name for m in rel.mechanisms]
    assert (rel.residual is not None) == (case in ("residuals", "unclipped"))
    assert any("count" in nm for nm in names) == (case in ("residuals", "declined"))


def _plug_in(release) -> np.ndarray:
    """The non-private posterior mean's large-n form on the statistics of ``release`` taken as
    true: the model's intercept, coefficients and noise sd (encoded -> model units)."""
    from pymc_dp.linear_gaussian import _statistics_given

    k = release.gram.shape[0] - 1
    a = release.gram[:k, :k]
    b, c = _statistics_given(release, a, None)
    beta = np.linalg.solve(a, b)
    w = np.r_[
        (beta[0] - release.y_shift) / release.y_scale, beta[1:] * release.x_scale / release.y_scale
    ]
    w[0] += (beta[1:] / release.y_scale) @ release.x_shift
    return np.r_[w, np.sqrt((c - b @ beta) / (release.n - k)) / release.y_scale]


@pytest.mark.parametrize("two_stage", [False, True])
def test_expected_error_predicts_how_far_the_noise_moves_the_means(two_stage):
    """The expected error (a parametric bootstrap around one release) is the spread of the
    non-private means over repeated releases of the same rows, in non-private posterior sds:
    200 releases (the sd of an sd estimate from them is about 5%), against the median of the
    bootstrap's figure over 20 of them, within 20%. And it goes to 0 with the noise."""
    from pymc_dp.linear_gaussian import expected_error

    rng = np.random.default_rng(3)
    n = 4000
    design = rng.uniform(-1, 1, (n, 3))
    y = np.clip(0.5 + design @ [1.0, -2.0, 0.3] + rng.normal(0, 0.8, n), -6, 6)
    kw = {"x_bounds": (-1.0, 1.0), "y_bounds": (-6.0, 6.0), "mu": 0.5}
    make = release_two_stage if two_stage else release_gram
    exact = release_gram(design, y, **{**kw, "mu": 1e16}, noise=NoiseSource(0))
    truth = _plug_in(exact)
    k = 4
    x = np.c_[np.ones(n), design]
    sd_w = 0.8 * np.sqrt(np.diag(np.linalg.inv(x.T @ x)))  # the posterior sds, model units
    sd = np.r_[sd_w, 0.8 / np.sqrt(2.0 * (n - k))]
    releases = [make(design, y, **kw, noise=NoiseSource(seed)) for seed in range(220)]
    # (the tail check's noisy count declines the residual release in a few runs: left out)
    releases = [r for r in releases if (r.residual is not None) == two_stage][:200]
    assert len(releases) == 200
    measured = np.std([(_plug_in(r) - truth) / sd for r in releases], axis=0)
    predicted = np.median([expected_error(r)["error_sd"] for r in releases[:20]], axis=0)
    np.testing.assert_allclose(predicted, measured, rtol=0.2)
    assert measured.max() > 0.3  # not vacuous: the noise moves the means
    quiet = make(design, y, **{**kw, "mu": 1e8}, noise=NoiseSource(1))
    assert expected_error(quiet)["error_sd"].max() < 0.01


def test_expected_error_is_never_nan():
    """A release whose residual sum of squares came out <= 0 gave NaN figures (review: 12 of 40
    releases at n = 300, mu = 0.5); it is floored at that statistic's noise sd. With no more rows
    than columns the figure is inf (nothing to say), not a division by zero."""
    from pymc_dp.linear_gaussian import expected_error

    rng = np.random.default_rng(3)
    design = rng.uniform(-1, 1, (300, 3))
    y = np.clip(0.5 + design @ [1.0, 0.0, -1.0] + rng.normal(0, 0.8, 300), -6, 6)
    kw = {"x_bounds": (-1.0, 1.0), "y_bounds": (-6.0, 6.0), "mu": 0.5}
    released_rss = []
    for seed in range(40):
        rel = release_gram(design, y, **kw, noise=NoiseSource(seed))
        figures = expected_error(rel)
        assert not np.isnan(figures["error_sd"]).any() and not np.isnan(figures["largest"])
        a, b, c = rel.gram[:4, :4], rel.gram[:4, 4], rel.gram[4, 4]
        if np.linalg.eigvalsh(a)[0] > 0:
            released_rss.append(c - b @ np.linalg.solve(a, b))
    assert min(released_rss) <= 0  # not vacuous: the case that gave NaN is among them
    tiny = release_gram(design[:4], y[:4], **kw, noise=NoiseSource(0))
    assert np.isinf(expected_error(tiny)["error_sd"]).all()


def test_expected_error_names_only_what_the_model_has():
    """No ``intercept`` where the mean has none and no ``sigma`` where it is fixed (review: both
    were labelled whatever the model)."""
    import json

    rng = np.random.default_rng(4)
    X = rng.uniform(-1, 1, (500, 2))
    y = X @ [1.0, -0.5] + rng.normal(0, 0.5, 500)
    with pm.Model():
        Xd = pm.Data("X", X)
        beta = pm.Normal("beta", 0, 2, shape=2)
        pm.Normal("y", Xd @ beta, 0.5, observed=y)
        step = pdp.DPSuffStats(epsilon=2.0, outcome_bounds=(-5, 5), compile_kwargs=FAST)
    assert json.loads(step.error_attr())["labels"] == ["X[0]", "X[1]"]
    with pm.Model():
        Xd = pm.Data("X", X)
        a, beta = pm.Normal("a", 0, 2), pm.Normal("beta", 0, 2, shape=2)
        s = pm.HalfNormal("s", 1)
        pm.Normal("y", a + Xd @ beta, s, observed=y)
        step = pdp.DPSuffStats(epsilon=2.0, outcome_bounds=(-5, 5), compile_kwargs=FAST)
    figures = json.loads(step.error_attr())
    assert figures["labels"] == ["intercept", "X[0]", "X[1]", "sigma"]
    assert len(figures["expected_error"]) == 4 and np.all(np.isfinite(figures["expected_error"]))


def test_the_start_is_inside_the_support_of_a_noisy_release():
    """The latent A at NUTS' start is positive definite with [0, 0] the exact row count, however
    noisy the release (review: flooring A's eigenvalues and then resetting [0, 0] to n left it
    indefinite at n = 60, ten covariates, epsilon 1)."""
    rng = np.random.default_rng(5)
    m = 12
    rows, cols = noise_entries(m)
    for n in (30, 60, 300):
        X = rng.uniform(-1, 1, (n, m - 2))
        y = X @ rng.normal(0, 0.5, m - 2) + rng.normal(0, 0.5, n)
        for seed in range(10):
            rel = release_gram(
                X,
                y,
                x_bounds=(-1.0, 1.0),
                y_bounds=(-6.0, 6.0),
                mu=0.05,
                noise=NoiseSource(seed),
            )
            d = np.zeros((m, m))
            d[rows, cols] = rel.noise_sd[rows, cols] * start_noise(rel)
            a = (rel.gram - (d + np.triu(d, 1).T))[: m - 1, : m - 1]
            assert a[0, 0] == n
            assert np.linalg.eigvalsh(a)[0] > 0.0


def test_a_release_singular_within_its_noise_still_starts_nuts():
    """Few rows, many covariates: the released Gram matrix is singular within its noise. PyMC's
    jitter (U(-1, 1) on every latent) moved A by ~1.2 sqrt(k) noise sds and out of its support,
    so every start failed (sklearn's diabetes, n = 442, ten covariates, epsilon 1: 4 of 4 runs
    raised; here n = 300, seeds 0-2). The parameters are jittered, the latent noise is not; at
    n = 60 (seeds 3, 4) the unjittered start itself was indefinite (review)."""
    rng = np.random.default_rng(5)
    p = 10
    for n, seeds in ((300, (0, 1, 2)), (60, (3, 4))):
        X = rng.uniform(-1, 1, (n, p))
        y = 0.3 + X @ rng.normal(0, 0.5, p) + rng.normal(0, 0.5, n)
        with pm.Model():
            Xd = pm.Data("X", X)
            a = pm.Normal("a", 0, 2)
            b = pm.Normal("b", 0, 2, shape=p)
            s = pm.HalfNormal("s", 2)
            pm.Normal("y", a + Xd @ b, s, observed=y)
            for seed in seeds:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the singular-Gram and mixing warnings
                    step = pdp.DPSuffStats(
                        epsilon=1.0, outcome_bounds=(-6, 6), noise_seed=seed, nuts_tune=20
                    )
                    idata = _ten_draws(step)
                assert np.all(np.isfinite(idata.posterior["b"].values))


def test_the_cholesky_latent_is_the_plain_latent_with_its_jacobian():
    """``cholesky_latent`` maps the Cholesky entries onto the plain latent noise, and its log
    density is the standard Normal's of A's noise plus the log Jacobian of the map from the
    entries onto A's free entries (checked here by finite differences)."""
    from pymc_dp.linear_gaussian import _cholesky_entries, cholesky_latent, cholesky_start

    rng = np.random.default_rng(2)
    n, p = 200, 3
    X = rng.uniform(-1, 1, (n, p))
    y = X @ [0.5, -0.2, 0.1] + rng.normal(0, 0.5, n)
    rel = release_gram(
        X, y, x_bounds=(-1.0, 1.0), y_bounds=(-4.0, 4.0), mu=0.5, noise=NoiseSource(0)
    )
    m, k = p + 2, p + 1
    rows, cols = noise_entries(m)
    v, nb = pt.dvector("v"), pt.dvector("nb")
    latent, logd = cholesky_latent(rel, v, nb)
    f = pytensor.function([v, nb], [latent, logd])
    v0, nb0 = cholesky_start(rel)
    v0 = v0 + rng.normal(0, 0.05, v0.size)
    lat, dens = f(v0, nb0)
    lr, lc, diag = _cholesky_entries(k)

    def free_a(vec):
        low = np.zeros((k, k))
        low[0, 0] = np.sqrt(n)
        low[lr, lc] = np.where(diag, np.exp(vec), vec)
        a = low @ low.T
        in_a = cols < k
        return a[rows[in_a], cols[in_a]]

    in_a = cols < k
    # the latent: A's entries as released less noise_sd x latent; b's passed through
    np.testing.assert_allclose(
        free_a(v0),
        rel.gram[rows[in_a], cols[in_a]] - rel.noise_sd[rows[in_a], cols[in_a]] * lat[in_a],
        rtol=1e-10,
    )
    np.testing.assert_array_equal(lat[~in_a], nb0)
    jac = np.empty((v0.size, v0.size))
    h = 1e-6
    for j in range(v0.size):
        e = np.zeros(v0.size)
        e[j] = h
        jac[:, j] = (free_a(v0 + e) - free_a(v0 - e)) / (2 * h)
    expected = -0.5 * np.sum(lat[in_a] ** 2) + np.linalg.slogdet(jac)[1]
    assert abs(dens - expected) < 1e-5 * max(1.0, abs(expected))


def test_the_parameters_jitter_is_redrawn_until_the_start_is_finite():
    """A prior with a hard constraint (a potential that is -inf for b[0] <= 0, an initval near
    its edge): a single U(-1, 1) jitter of the parameters left the start outside the support in
    3 of 6 chains (review); it is redrawn up to 10 times, as PyMC's own jitter was."""
    rng = np.random.default_rng(4)
    n = 500
    X = rng.uniform(-1, 1, (n, 2))
    y = 0.3 + X @ [0.4, 0.2] + rng.normal(0, 0.5, n)
    with pm.Model():
        Xd = pm.Data("X", X)
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 2, shape=2, initval=[0.3, 0.3])
        s = pm.HalfNormal("s", 2)
        pm.Potential("b0_positive", pt.switch(b[0] > 0, 0.0, -np.inf))
        pm.Normal("y", a + Xd @ b, s, observed=y)
        step = pdp.DPSuffStats(epsilon=4.0, outcome_bounds=(-6, 6), noise_seed=0, nuts_tune=50)
    for seed in range(6):
        draws, _ = step.sample_surrogate(10, np.random.default_rng(seed))
        assert np.all(np.isfinite(draws)) and np.all(draws[:, 1] > 0)


def _ten_draws(step):
    return pdp.sample(
        step=step,
        draws=10,
        tune=0,
        chains=1,
        cores=1,
        progressbar=False,
        compute_convergence_checks=False,
    )


def _engel_like(seed: int = 0, n: int = 235) -> pm.Model:
    """A real-like design (statsmodels' engel: food expenditure on income, n = 235): one
    covariate, skewed incomes declared within (0, 5000) and encoded onto [-1, 1], so most values
    use a small part of the range and the released Gram matrix's noise rivals their spread."""
    rng = np.random.default_rng(seed)
    income = np.clip(rng.lognormal(np.log(900), 0.45, n), 0, 5000)
    y = 1.47 + 0.00485 * income + rng.normal(0, 1.14, n)
    with pm.Model() as m:
        X = pm.Data("X", (income / 2500.0 - 1.0)[:, None])
        alpha = pm.Normal("alpha", 10, 10)
        beta = pm.Normal("beta", 0, 10, shape=1)
        sigma = pm.HalfNormal("sigma", 5)
        pm.Normal("y", alpha + X @ beta, sigma, observed=y)
    return m


def test_a_real_like_design_samples_without_divergences_or_withheld_warnings():
    """On engel's design the noise-aware posterior had a funnel between the noise sd and the
    latent noise of ``b`` (the model pins ``b`` within ``sigma sqrt(A)`` of ``A beta``, ~1.4,
    while the release's noise on ``b`` is ~13): 47-277 divergences per run of 2 x 1000 draws,
    R-hat up to 1.08. ``b`` is now sampled whitened given the rest (``_whitened_b``): measured
    on engel at epsilon 1 and 4, seeds 0-2, 0-1 divergences in 2000 draws. Two releases here,
    2 x 300 draws each: the old parameterisation gave >= 5% divergent (>= 60 expected), the
    new ~0.05% (0.3 expected); a limit of 6 is > 10 Poisson sds above the new rate and far
    below the old. And no warning is withheld: PyMC's notice of the dense metric is dropped,
    NumPy's overflow on a diverging trajectory too (what NUTS says on the surrogate reads only
    released values, :func:`pymc_dp.surrogate._pass_on`)."""
    m = _engel_like()
    total = 0
    for seed in (0, 1):
        with m, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step = pdp.DPSuffStats(
                epsilon=1.0, outcome_bounds=(0, 25), noise_seed=seed, nuts_tune=300
            )
            idata = pdp.sample(
                step=step, draws=300, tune=0, chains=2, cores=1, random_seed=seed, progressbar=False
            )
        total += int(idata.sample_stats["surrogate_diverging"].sum())
        texts = [str(w.message) for w in caught]
        assert not [t for t in texts if "withheld" in t], texts
        assert not [t for t in texts if "divergences" in t], texts
    assert total <= 6


def _reads_rows(stop, value: float) -> None:
    """Stands for code reading private rows in another thread (outside pymc-dp, whose
    warnings ``guarded`` must withhold)."""
    while not stop.is_set():
        warnings.warn(f"SECRET row value {value:.5f}", UserWarning, stacklevel=1)
        stop.wait(0.002)


def test_another_thread_s_warning_is_not_passed_on_as_the_surrogate_s():
    """What NUTS on a surrogate warned was passed on with its text, but the warnings hook is
    process-wide: a review had another thread read rows under ``guarded`` meanwhile, and 61 of
    its 174 warnings reached the top with their text, labelled "no data read". A check of the
    warning thread did not hold across the whole suite: no text is passed on now."""
    import threading

    from pymc_dp.boundary import guarded

    seen: list[str] = []
    stop = threading.Event()
    other = threading.Thread(target=guarded, args=("reading rows", _reads_rows, stop, 3.14159))
    with _engel_like(n=120) as m, warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *args, **kwargs: seen.append(str(message))
        step = pdp.DPSuffStats(epsilon=1.0, outcome_bounds=(0, 25), noise_seed=0, nuts_tune=100)
        other.start()
        try:
            pdp.sample(step=step, model=m, draws=100, tune=0, chains=2, cores=1, progressbar=False)
        finally:
            stop.set()
            other.join()
    assert [t for t in seen if "withheld" in t]  # the other thread did warn meanwhile
    # (``guarded`` itself is not thread-safe: its own capture may lose the other thread's
    # warnings to the top untouched, design.md; what the surrogate passes on is checked here)
    assert not [t for t in seen if "SECRET" in t and "NUTS on a release" in t]
    assert not [t for t in seen if "no data read" in t]


def _centred_and_whitened(rel):
    """Both parameterisations of ``b`` as functions of ``(q-free parameters, A's latent, b's
    latent)``, and ``b`` at whitened coordinates."""
    from pymc_dp.linear_gaussian import _encoded, _whitened_b

    k = rel.gram.shape[0] - 1
    rows, cols = noise_entries(k + 1)
    w0, s_ = pt.dscalars("w0", "s")
    w, lat = pt.dvector("w"), pt.dvector("lat")
    centred = pytensor.function([w0, w, s_, lat], surrogate_logp(rel, w0, w, s_, lat))
    white = pytensor.function([w0, w, s_, lat], surrogate_logp(rel, w0, w, s_, lat, whitened=True))
    d = pt.zeros((k + 1, k + 1))
    d = pt.set_subtensor(d[rows, cols], rel.noise_sd[rows, cols] * lat)
    a = rel.gram[:k, :k] - (d + pt.triu(d, 1).T)[:k, :k]
    beta, s2 = _encoded(rel, w0, w, s_)
    if rel.residual is None:
        b_obs, b_var = rel.gram[:k, k], rel.noise_sd[:k, k] ** 2
    else:
        from pymc_dp.linear_gaussian import _with_residuals

        b_obs, b_var, _ = _with_residuals(rel, a)
    b, _ = _whitened_b(a, pt.linalg.cholesky(a, lower=True), beta, s2, b_obs, b_var, lat[cols == k])
    b_fn = pytensor.function([w0, w, s_, lat], [b, pt.as_tensor(b_obs)], on_unused_input="ignore")
    return centred, white, b_fn, np.sqrt(b_var), cols == k


@pytest.mark.parametrize("two_stage", [False, True])
def test_the_whitened_b_is_the_same_density_in_other_coordinates(two_stage):
    """``b = m + R^-T z`` maps the whitened ``z`` onto the plain latent noise ``e = (b_obs -
    b) / sd`` affinely, so (each with its standard Normal prior) the two log densities differ by
    ``log |de/dz|``, which here is measured by finite differences at several parameter points,
    latent A and z: the whitened density is exact, not an approximation."""
    rng = np.random.default_rng(4)
    n, p = 300, 2
    X = rng.uniform(-1, 1, (n, p))
    y = 0.2 + X @ [0.5, -0.3] + rng.normal(0, 0.4, n)
    kw = {"x_bounds": (-1.0, 1.0), "y_bounds": (-3.0, 3.0), "mu": 0.5}
    make = release_two_stage if two_stage else release_gram
    rel = make(X, y, **kw, noise=NoiseSource(3))
    assert (rel.residual is not None) == two_stage
    centred, white, b_fn, sd_b, in_b = _centred_and_whitened(rel)
    base = start_noise(rel)
    gaps = []
    for _ in range(4):
        w0v, wv, sv = rng.normal(0.2, 0.1), rng.normal(0, 0.3, p), rng.uniform(0.3, 0.8)
        lat = base + np.where(in_b, rng.normal(0, 1, in_b.size), rng.normal(0, 0.05, in_b.size))

        def plain(latent, w0v=w0v, wv=wv, sv=sv):
            b, b_obs = b_fn(w0v, wv, sv, latent)
            out = latent.copy()
            out[in_b] = (b_obs - b) / sd_b
            return out

        e = plain(lat)
        jac = np.empty((in_b.sum(), in_b.sum()))
        for j, idx in enumerate(np.flatnonzero(in_b)):
            step = np.zeros(lat.size)
            step[idx] = 1e-6
            jac[:, j] = (plain(lat + step)[in_b] - plain(lat - step)[in_b]) / 2e-6
        log_jac = np.linalg.slogdet(jac)[1]
        lhs = white(w0v, wv, sv, lat) - 0.5 * np.sum(lat[in_b] ** 2)
        rhs = centred(w0v, wv, sv, e) - 0.5 * np.sum(e[in_b] ** 2) + log_jac
        gaps.append(lhs - rhs)
    np.testing.assert_allclose(gaps, 0.0, atol=1e-6)


def test_the_spread_warning_names_its_cause():
    """The covariates' spread within the noise was blamed on collinearity or an intercept column
    whatever its cause (engel: one covariate, nothing collinear). Now the release is compared
    with what n rows spread over the declared ranges would give (n / 3): engel-like skewed
    values use a small part of their range; two copies of a covariate are collinear; 30 rows
    at epsilon 0.5 are too few whatever the covariates."""

    def messages(model, **kw):
        with model, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pdp.DPSuffStats(noise_seed=0, compile_kwargs=FAST, **kw)
        return " ".join(str(w.message) for w in caught if "spread" in str(w.message))

    text = messages(_engel_like(), epsilon=1.0, outcome_bounds=(0, 25))
    assert "X (" in text and "small part of their declared range" in text
    assert "collinear" not in text
    rng = np.random.default_rng(0)

    def linear(X, n):
        with pm.Model() as m:
            Xd = pm.Data("X", X)
            b = pm.Normal("b", 0, 2, shape=X.shape[1])
            pm.Normal("y", 0.1 + Xd @ b, 1.0, observed=rng.normal(size=n))
        return m

    x = rng.uniform(-1, 1, 4000)
    text = messages(linear(np.c_[x, x], 4000), epsilon=1.0, outcome_bounds=(-5, 5))
    assert "collinear" in text and "small part" not in text
    text = messages(linear(rng.uniform(-1, 1, (30, 2)), 30), epsilon=0.5, outcome_bounds=(-5, 5))
    assert "too few rows" in text


def test_the_report_never_prints_inf():
    """engel-like at epsilon 1, noise seed 0: most bootstrap draws of the release had an
    indefinite A, and the report printed ``inf`` posterior sds (a ratio's heavy tails gave
    84-858 elsewhere). Draws of no data set (A indefinite, a negative residual sum of squares)
    are left out and the spread is robust: a finite figure. Where nearly no draw is valid (30
    rows at epsilon 0.05) there is no figure: the report says why instead of ``inf``."""
    from pymc_dp.linear_gaussian import expected_error

    with _engel_like(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pdp.DPSuffStats(
            epsilon=1.0, outcome_bounds=(0, 25), noise_seed=0, compile_kwargs=FAST
        )
    figures = expected_error(step.release)
    assert np.all(np.isfinite(figures["error_sd"])) and np.isfinite(figures["largest"])
    assert 1.0 < figures["largest"] < 50.0  # the noise rivals the spread: large, not absurd
    # but the bootstrap leaves the prior out, which decides the means here: measured 2.3-4x
    # the figure (review); the report gives none where the spread is within the noise
    attr = json.loads(step.error_attr())
    assert attr["expected_largest_error"] is None and set(attr["expected_error"]) == {None}
    with _engel_like(n=30), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pdp.DPSuffStats(
            epsilon=0.05, outcome_bounds=(0, 25), noise_seed=0, nuts_tune=20, compile_kwargs=FAST
        )
        idata = _ten_draws(step)
    report = pdp.privacy_report(idata)
    text = str(report)
    assert "inf" not in text.replace("information", "") and "nan" not in text
    assert "not bounded by the release" in text
    assert set(report.expected_error.values()) == {None}
