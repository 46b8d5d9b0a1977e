"""DPGroupGibbs: the sweep's accounting, its group-masked tests, its target, its refusals."""

from __future__ import annotations

import warnings
from dataclasses import replace

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

import pymc_dp as pdp
from pymc_dp.accounting.gaussian import gaussian_mu_for_budget
from pymc_dp.anchor import release_anchor
from pymc_dp.likelihood import model_likelihood
from pymc_dp.noise import NoiseSource
from pymc_dp.step_methods.group_gibbs import (
    GROUP_TESTS,
    coefficient_bound,
    group_bound,
)
from pymc_dp.step_methods.laplace import _effect_likelihood

FAST = {"mode": "FAST_COMPILE"}
GLM = pdp.glm_clip(np.ones(3))  # the group's effect (an intercept), two covariates in [-1, 1]


def _model(n=3000, groups=6, seed=3, X=None, g=None, y=None):
    """Random-intercept logistic regression (non-centred ``mu + tau * z[g]``)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 2)) if X is None else X
    g = rng.integers(0, groups, n) if g is None else g
    if y is None:
        a = rng.normal(-0.3, 0.6, groups)
        y = rng.binomial(1, 1 / (1 + np.exp(-(a[g] + X @ np.array([1.0, -0.5])))))
    with pm.Model() as model:
        Xd, gd = pm.Data("X", X), pm.Data("g", g)
        mu, tau = pm.Normal("mu", 0, 2.5), pm.HalfNormal("tau", 1.0)
        z = pm.Normal("z", 0, 1, shape=groups)
        beta = pm.Normal("beta", 0, 2.5, shape=2)
        pm.Bernoulli("y", logit_p=mu + tau * z[gd] + Xd @ beta, observed=y)
    return model, X, g, y


@pytest.fixture(scope="module")
def hierarchical():
    """Six groups: the sampling test compiles with Numba (FAST_COMPILE's Python kernels cannot
    sum the curvature of more than ~5 coordinates)."""
    return _model()[0]


@pytest.fixture(scope="module")
def small():
    """Three groups, FAST_COMPILE kernels: for the tests that only build the step."""
    return _model(n=600, groups=3)[0]


def _gdp_epsilon(mu: float, delta: float) -> float:
    """Epsilon of mu-GDP at ``delta`` (Dong, Roth & Su 2022, Cor. 2.13), solved here."""

    def gap(eps):
        return norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    return brentq(gap, 0.0, 100.0, xtol=1e-12)


def test_a_sweep_is_two_gaussian_releases_and_the_budget_is_spent_exactly(small):
    with small, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pdp.DPGroupGibbs(glm=GLM, epsilon=4.0, chains=2, compile_kwargs=FAST)
    plan = step.plan(tune=30, draws=70, chains=2)
    (tests,) = plan.ledger.per_chain
    assert tests.name == GROUP_TESTS.name and tests.count == 2 * 100  # two per sweep
    # independently: every release is a Gaussian mechanism; mu-GDP composes as sqrt(sum mu_k^2)
    entries = [*plan.ledger.shared, *([tests] * 2)]
    mu = np.sqrt(sum(m.count / m.noise_multiplier**2 for m in entries))
    assert _gdp_epsilon(mu, step.delta) == pytest.approx(4.0, rel=2e-3)
    # the shares (of the PLD mean mu^2 / 2): warm start 0.5, anchor 0.3, the tests the rest
    total = gaussian_mu_for_budget(4.0, step.delta)
    (anchor,) = [m for m in plan.ledger.shared if "Taylor anchor" in m.name]
    assert 1 / (2 * anchor.noise_multiplier**2) == pytest.approx(0.3 * total, rel=1e-9)
    chains_mu2 = 2 * tests.count / tests.noise_multiplier**2
    assert chains_mu2 / 2 == pytest.approx(0.2 * total, rel=1e-2)


def _effects_on(X, g, y, groups):
    model = _model(X=X, g=g, y=y, groups=groups)[0]
    base = model_likelihood(model, list(model.value_vars), compile_kwargs=FAST)
    return _effect_likelihood(base)


def _ratio(eff, point, mu):
    """The private remainder kernel at ``point`` (the release beside it, of loss ``mu``, unused)."""
    return release_anchor(
        eff, point, grad_clip=GLM.grad_clip, hess_clip=GLM.hess_clip, mu=mu, noise=NoiseSource(0)
    )[1]


def test_neighbouring_rows_move_the_sweep_by_one_release_at_most():
    """Parallel composition, on the real kernels: one row replaced (it changes group, outcome
    and covariates, beyond the declared bounds so that only the clip holds it), the sweep's
    group tests move by at most 1 / s in total (sum of (change / (2 b_g))^2 <= 1) and the
    coefficients' test by at most 1 / s."""
    rng = np.random.default_rng(0)
    n, ng = 400, 5
    X, g = rng.uniform(-1, 1, (n, 2)), rng.integers(0, ng, n)
    y = rng.binomial(1, 0.4, n)
    X2, g2, y2 = X.copy(), g.copy(), y.copy()
    X2[7], g2[7], y2[7] = (40.0, -40.0), (g[7] + 2) % ng, 1 - y[7]
    point = rng.normal(0, 0.3, ng + 2)
    ratios = []
    for data in ((X, g, y), (X2, g2, y2)):
        eff = _effects_on(*data, ng)
        ratio = _ratio(eff, point, 1.0)
        ratios.append((ratio, data[1]))
    for _ in range(20):
        psi = point + rng.normal(0, 0.5, ng + 2)
        worst = 0.0
        for k in range(ng):
            new = psi.copy()
            new[k] += rng.normal(0, 0.5)
            bound = group_bound(GLM, point, psi, new, k, ng)
            sums = [r(new, psi, bound, groups == k)[0] for r, groups in ratios]
            worst += ((sums[0] - sums[1]) / (2 * bound)) ** 2
            assert abs(sums[0]) <= bound * np.sum(ratios[0][1] == k) * (1 + 1e-12)
        assert worst <= 1 + 1e-9
        new = psi.copy()
        new[ng:] += rng.normal(0, 0.5, 2)
        bound = coefficient_bound(GLM, point, psi, new, ng)
        sums = [r(new, psi, bound)[0] for r, _ in ratios]
        assert abs(sums[0] - sums[1]) <= 2 * bound * (1 + 1e-12)


def test_a_group_test_sums_its_own_rows_only():
    """The mask is explicit: a move of two groups' effects, tested as group 0, sums group 0's
    rows only (the kernel gives the other rows non-zero remainders)."""
    model, X, g, y = _model(n=500, groups=4, seed=1)
    eff = _effects_on(X, g, y, 4)
    point = np.zeros(6)
    ratio = _ratio(eff, point, 1.0)
    new = point.copy()
    new[[0, 1]] = 0.4
    rows = np.asarray(eff.logp_rows(new)) - np.asarray(eff.logp_rows(point))
    rho = rows - ratio._rows @ (new - point)
    assert np.abs(rho[g == 1]).max() > 0
    masked, _ = ratio(new, point, 1.0, g == 0)
    assert masked == pytest.approx(np.clip(rho[g == 0], -1, 1).sum(), rel=1e-12)
    full, _ = ratio(new, point, 1.0)
    assert full != pytest.approx(masked)


def test_bounds_hold_on_rows_within_the_declared_covariate_bounds():
    """The GLM rank-one bound holds for every row (clipping would bias the chain)."""
    model, X, g, y = _model(n=2000, groups=4, seed=2)
    eff = _effects_on(X, g, y, 4)
    rng = np.random.default_rng(1)
    anchor = rng.normal(0, 0.3, 6)
    ratio = _ratio(eff, anchor, 1e12)
    for _ in range(10):
        psi = anchor + rng.normal(0, 1.0, 6)
        for k in range(4):
            new = psi.copy()
            new[k] += rng.normal(0, 1.0)
            _, clipped = ratio(new, psi, group_bound(GLM, anchor, psi, new, k, 4), g == k)
            assert clipped == 0.0
        new = psi.copy()
        new[4:] += rng.normal(0, 1.0, 2)
        _, clipped = ratio(new, psi, coefficient_bound(GLM, anchor, psi, new, 4))
        assert clipped == 0.0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"glm": 3.0}, TypeError, "`glm`"),
        ({"glm": pdp.glm_clip(np.ones(4))}, ValueError, "`glm` has 4 covariate bounds"),
        ({"glm": GLM, "noise_multiplier": 1.0}, ValueError, "noise_multiplier"),
        ({"glm": GLM, "anchor": 0.6}, ValueError, "leave nothing"),
        ({"glm": GLM, "epsilon": None}, ValueError, "needs `epsilon`"),
        # a bound of the wrong sign would release a test without noise (review): refused
        ({"glm": replace(GLM, curvature=-0.25)}, ValueError, "curvature bound > 0"),
        ({"glm": replace(GLM, covariate_bounds=np.array([1.0, -1, 1]))}, ValueError, "> 0"),
        (
            {"glm": pdp.GLMClip(np.ones(3), 1.7, 1.0, 0.75, covariate_bounds=np.ones(3))},
            ValueError,
            "curvature",
        ),
    ],
)
def test_bad_arguments_are_refused_by_name(small, kwargs, error, match):
    kwargs = {"epsilon": 4.0, "compile_kwargs": FAST, **kwargs}
    with small, pytest.raises(error, match=match):
        pdp.DPGroupGibbs(**kwargs)


def test_models_without_a_group_effect_of_that_form_are_refused():
    rng = np.random.default_rng(0)
    X, g = rng.uniform(-1, 1, (200, 2)), rng.integers(0, 4, 200)
    with pm.Model():
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Bernoulli("y", logit_p=pm.Data("X", X) @ beta, observed=rng.binomial(1, 0.5, 200))
        with pytest.raises(ValueError, match="group effects"):
            pdp.DPGroupGibbs(glm=pdp.glm_clip(np.ones(2)), epsilon=2.0, compile_kwargs=FAST)
    with pm.Model():  # tau * z * z: found as an effect, but not affine in z
        tau, z = pm.HalfNormal("tau"), pm.Normal("z", shape=4)
        beta = pm.Normal("beta", 0, 1, shape=2)
        eta = (tau * z * z)[pm.Data("g", g)] + pm.Data("X", X) @ beta
        pm.Bernoulli("y", logit_p=eta, observed=rng.binomial(1, 0.5, 200))
        with pytest.raises(ValueError, match="affine"):
            pdp.DPGroupGibbs(glm=GLM, epsilon=2.0, compile_kwargs=FAST)
    with pm.Model():  # the centred form: an effect for DPLaplace, not a sweep's `loc + scale z`
        mu, tau = pm.Normal("mu"), pm.HalfNormal("tau")
        a, beta = pm.Normal("a", mu, tau, shape=4), pm.Normal("beta", 0, 1, shape=2)
        eta = a[pm.Data("g", g)] + pm.Data("X", X) @ beta
        pm.Bernoulli("y", logit_p=eta, observed=rng.binomial(1, 0.5, 200))
        with pytest.raises(ValueError, match="non-centred.*`a`"):
            pdp.DPGroupGibbs(glm=GLM, epsilon=2.0, compile_kwargs=FAST)


def _refused(build_eta, match):
    rng = np.random.default_rng(0)
    X, g = rng.uniform(-1, 1, (200, 2)), rng.integers(0, 3, 200)
    with pm.Model():
        mu, tau = pm.Normal("mu"), pm.HalfNormal("tau")
        z, beta = pm.Normal("z", shape=3), pm.Normal("beta", 0, 1, shape=2)
        eta = build_eta(mu, tau, z, beta, pm.Data("X", X), pm.Data("g", g), pm.Data("h", g[::-1]))
        pm.Bernoulli("y", logit_p=eta, observed=rng.binomial(1, 0.5, 200))
        with pytest.raises(ValueError, match=match):
            pdp.DPGroupGibbs(glm=GLM, epsilon=2.0, compile_kwargs=FAST)


@pytest.mark.parametrize(
    ("build_eta", "match"),
    [
        # a computed index: one replaced row could move every row's group (review); the
        # analysis refuses this one for every step, the sweep any index that is not a column
        (
            lambda mu, tau, z, beta, X, g, h: (mu + tau * z)[g - g.min()] + X @ beta,
            "depends on other rows|computed",
        ),
        (lambda mu, tau, z, beta, X, g, h: (mu + tau * z)[g % 3] + X @ beta, "computed"),
        # one effect read by two columns: a row reads two groups' effects
        (
            lambda mu, tau, z, beta, X, g, h: (mu + tau * z)[g] - (mu + tau * z)[h] + X @ beta,
            "two indices",
        ),
        # mu inside the effect and read directly: a coefficient move would shift every group
        (
            lambda mu, tau, z, beta, X, g, h: (mu + tau * z)[g] + X @ beta + mu * X[:, 0],
            "both inside",
        ),
    ],
)
def test_group_structures_the_sweep_cannot_account_are_refused(build_eta, match):
    _refused(build_eta, match)


def test_a_scale_of_zero_at_the_initial_point_still_starts():
    """A sign-free scale (``tau ~ Normal(0, 1)``) is 0 at the model's initial point, where no
    effect maps to ``z``: the chain starts nearby (a review found it stuck on NaN)."""
    rng = np.random.default_rng(5)
    X, g = rng.uniform(-1, 1, (300, 2)), rng.integers(0, 3, 300)
    with pm.Model():
        mu, tau = pm.Normal("mu"), pm.Normal("tau")
        z, beta = pm.Normal("z", shape=3), pm.Normal("beta", 0, 1, shape=2)
        eta = (mu + tau * z)[pm.Data("g", g)] + pm.Data("X", X) @ beta
        pm.Bernoulli("y", logit_p=eta, observed=rng.binomial(1, 0.5, 300))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step = pdp.DPGroupGibbs(
                glm=GLM, epsilon=8.0, compile_kwargs=FAST, chains=1, noise_seed=2
            )
            idata = pdp.sample(
                draws=20, tune=10, step=step, chains=1, random_seed=2, progressbar=False
            )
    assert np.isfinite(idata.posterior["z"].values).all()
    # the chain moves (on 300 rows the tests' noise may reject every group move; the
    # hyperparameters' exact moves do not stick where the start is finite)
    assert np.unique(idata.posterior["tau"].values).size > 10


def test_the_effect_kernels_follow_the_data():
    """The effect likelihood is kept on its base likelihood, keyed by the rows' digest: after
    pm.set_data a new one is built (the group mask and the kernels read the same rows)."""
    model, X, g, y = _model(n=300, groups=3, seed=4)
    base = model_likelihood(model, list(model.value_vars), compile_kwargs=FAST)
    first = _effect_likelihood(base)
    assert _effect_likelihood(base) is first
    with model:
        pm.set_data({"g": (g + 1) % 3})
    assert _effect_likelihood(base) is not first


def test_the_sweep_samples_the_posterior_where_the_noise_vanishes(hierarchical):
    """At epsilon 1e4 the tests' noise and the anchor's are negligible (median test noise
    ~0.01 nats): the sweep is then exact Metropolis-within-Gibbs, and must agree with NUTS on
    every coordinate and on the effects ``a = mu + tau z`` within Monte Carlo error. Measured
    (review): without the Jacobian of z -> a tau moves by 43 standard errors, without the
    coefficients' Hastings term their sd ratio is 0.70, without the groups' the effects' is 0.72;
    a bound 10x too small clips rows."""
    with hierarchical, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pdp.DPGroupGibbs(glm=GLM, epsilon=1e4, noise_seed=1, chains=2, diagnostics=True)
        # plain pm.sample: it keeps the diagnostics' stats (pdp.sample keeps released ones)
        idata = pm.sample(
            draws=800,
            tune=200,
            step=step,
            chains=2,
            random_seed=1,
            progressbar=False,
            cores=1,
            compute_convergence_checks=False,
        )
        ref = pm.sample(
            draws=1000,
            tune=1000,
            chains=2,
            cores=1,
            random_seed=2,
            progressbar=False,
            target_accept=0.9,
            compute_convergence_checks=False,
        )
    assert float(idata.sample_stats["noise_std"].median()) < 0.05
    # the bounds hold on every tested segment: no row clipped (diagnostics only)
    assert float(idata.sample_stats["clip_fraction"].max()) == 0.0
    for run in (idata, ref):  # the effects themselves (a wrong group move hides in z)
        post = run.posterior
        post["a"] = post["mu"] + post["tau"] * post["z"]
    for v in ("mu", "tau", "z", "a", "beta"):
        dp, nuts = idata.posterior[v], ref.posterior[v]
        ess_dp = np.atleast_1d(az.ess(dp.to_dataset())[v].values)
        ess_ref = np.atleast_1d(az.ess(nuts.to_dataset())[v].values)
        sd = nuts.std(("chain", "draw")).values
        gap = np.abs(dp.mean(("chain", "draw")).values - nuts.mean(("chain", "draw")).values)
        # 4.5 standard errors of the difference over 17 coordinates: a false alarm < 1e-4
        assert np.all(gap <= 4.5 * sd * np.sqrt(1 / ess_dp + 1 / ess_ref)), v
        # sd ratio: its standard error is about 1 / sqrt(2 ESS) (3% at ESS 500)
        ratio = dp.std(("chain", "draw")).values / sd
        assert np.all(np.abs(ratio - 1) < 6 / np.sqrt(2 * np.minimum(ess_dp, ess_ref))), v


def _poisoned(*args, **kwargs):
    raise AssertionError("the prediction read the rows")


class _Untouchable:
    """A stand-in for the private group column: any use of it fails."""

    def __getattr__(self, name):
        raise AssertionError("the prediction read the group column")

    def __eq__(self, other):
        raise AssertionError("the prediction read the group column")

    __hash__ = None


def test_the_mixing_prediction_reads_released_values_only(small, monkeypatch):
    """``predicted_mixing`` runs the sweep in the surrogate's world: with every kernel over the
    rows and the private group column made to fail, it still predicts, the same twice (its seed
    is public), and it leaves the step's own chain state alone."""
    with small, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pdp.DPGroupGibbs(glm=GLM, epsilon=4.0, compile_kwargs=FAST, noise_seed=1)
    groups, before = step.sweep.group_of_row, dict(vars(step))
    shown = repr(step.sweep)  # review: the dataclass' repr printed every row's group
    assert "group_of_row" not in shown and "ratio" not in shown and "structure" in shown
    rng_state = step.rng.bit_generator.state
    for lik in (step.likelihood, step._effects):
        for name in ("logp_rows", "grad_rows", "batch_logp_rows", "batch_grad_rows"):
            monkeypatch.setattr(lik, name, _poisoned)
    monkeypatch.setattr(step.sweep, "group_of_row", _Untouchable())
    first = step.predicted_mixing(2, 50, 100)
    assert first == step.predicted_mixing(2, 50, 100)
    assert set(first) == {"acceptance", "coefficient_acceptance", "noise", "ess", "rhat"}
    monkeypatch.setattr(step.sweep, "group_of_row", groups)
    after = vars(step)
    assert after.keys() == before.keys()
    assert all(after[k] is before[k] for k in before)  # nothing rebound on the step
    assert step.rng.bit_generator.state == rng_state
    assert step._plan is None and step.chain is None


def test_the_mixing_prediction_accepts_every_move_where_the_noise_vanishes(small):
    """In the surrogate's world each proposal is its block's exact conditional, so with no
    noise every move is accepted: a wrong Hastings term, prior or linear term in the sweep
    would reject some (acceptance over 2 x 300 sweeps of 3 groups and the coefficients). The
    released gradient is moved far from 0 so that a proposal ignoring it would show. At epsilon
    4 on 600 rows the tests' noise is hundreds of nats and the prediction says the chain is
    stuck."""
    with small, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exact = pdp.DPGroupGibbs(glm=GLM, epsilon=1e6, compile_kwargs=FAST, noise_seed=1)
        noisy = pdp.DPGroupGibbs(glm=GLM, epsilon=4.0, compile_kwargs=FAST, noise_seed=1)
    free = exact.predicted_mixing(2, 100, 200)
    assert free["noise"] < 0.05
    assert free["acceptance"] > 0.98 and free["coefficient_acceptance"] > 0.98
    exact.anchor = replace(exact.anchor, gradient=exact.anchor.gradient + 20.0)
    tilted = exact.predicted_mixing(2, 100, 200)
    assert tilted["acceptance"] > 0.98 and tilted["coefficient_acceptance"] > 0.98
    stuck = noisy.predicted_mixing(2, 100, 200)
    assert stuck["noise"] > 50 and stuck["acceptance"] < 0.1 and stuck["ess"] < 20


def test_pdp_sample_warns_before_a_sweep_predicted_not_to_mix(small):
    """On 600 rows at epsilon 4 the tests' noise is hundreds of nats: ``pdp.sample`` says so
    before the run, from the step's own prediction, and points to the private fit. Where the
    noise vanishes a run too short to mix is told that it is short, not that the noise stops
    it."""
    with small:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            noisy = pdp.DPGroupGibbs(glm=GLM, epsilon=4.0, compile_kwargs=FAST, noise_seed=1)
            exact = pdp.DPGroupGibbs(glm=GLM, epsilon=1e6, compile_kwargs=FAST, noise_seed=1)
        with pytest.warns(UserWarning, match="noise stops the chain.*DPLaplace"):
            pdp.sample(step=noisy, draws=150, tune=50, progressbar=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pdp.sample(step=exact, draws=15, tune=10, progressbar=False)
    advice = [str(w.message) for w in caught if "DPGroupGibbs" in str(w.message)]
    assert [m for m in advice if "predicted not to mix" in m and "run is short" in m]
    assert not [m for m in advice if "will not give a usable chain" in m]


class _Predicted:
    """A stand-in step whose prediction is given."""

    def __init__(self, **mix):
        self.mix = mix

    def predicted_mixing(self, chains, tune, draws):
        return self.mix


@pytest.mark.parametrize(
    "mix, expected",
    [
        ({"acceptance": 0.6, "coefficient_acceptance": 0.9, "ess": 800.0, "rhat": 1.0}, None),
        ({"acceptance": 0.6, "coefficient_acceptance": 0.02, "ess": 50.0, "rhat": 1.3}, "noise"),
        ({"acceptance": 0.02, "coefficient_acceptance": np.nan, "ess": 4.0, "rhat": 9.0}, "noise"),
        ({"acceptance": 0.6, "coefficient_acceptance": np.nan, "ess": 60.0, "rhat": 1.0}, "short"),
        ({"acceptance": 0.6, "coefficient_acceptance": 0.5, "ess": 900.0, "rhat": 1.2}, "short"),
    ],
)
def test_the_advice_names_the_slower_kind_of_move(mix, expected):
    """The advice warns only below ESS 100 or above R-hat 1.1; it blames the tests' noise when
    either kind of move (groups, coefficients) is rarely accepted, else the run's length, and
    never promises that a longer run mixes."""
    from types import SimpleNamespace

    from pymc_dp.sampling import _group_advice

    step = _Predicted(noise=3.0, **mix)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        advice = _group_advice(step, SimpleNamespace(chains=4, tune=1000, draws=1000))
    messages = [str(w.message) for w in caught]
    if expected is None:
        assert advice == "" and not messages
    elif expected == "noise":
        assert "noise stops the chain" in advice and len(messages) == 1
    else:
        assert "run is short" in advice and "predicts the length you plan" in advice
        assert "noise stops" not in advice and len(messages) == 1
