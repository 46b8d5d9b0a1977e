"""The private fit in the coordinates the likelihood reads: group effects (pymc_dp.effects).

The sunk graph must be the model's likelihood exactly (at random points, on the rows), an
effect must never take in a row's data, the stand-in prior must be public and the prior's, and
DPLaplace on a random-intercept model, non-centred or centred, must follow NUTS' hyper sd.
"""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from scipy.stats import wasserstein_distance

import pymc_dp as pdp
from pymc_dp.effects import PRIOR_DRAWS, EffectLikelihood, find_effects, prior_moments
from pymc_dp.likelihood import PerRowLikelihood

FAST = {"mode": "FAST_COMPILE"}
GROUPS = 5


def _data(n=60, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 2))
    g = rng.integers(0, GROUPS, n)
    y = rng.binomial(1, 0.4, n)
    return X, g, y


def _model(form: str, n=60, seed=1) -> pm.Model:
    X, g, y = _data(n, seed)
    with pm.Model() as m:
        Xd, gd = pm.Data("X", X), pm.Data("g", g)
        mu, tau = pm.Normal("mu", 0, 2.5), pm.HalfNormal("tau", 1.0)
        beta = pm.Normal("beta", 0, 2.5, shape=2)
        if form == "poisson":
            eta = None
        elif form == "centred":
            a = pm.Normal("a", mu, tau, shape=GROUPS)
            eta = a[gd] + Xd @ beta
        elif form == "fixed_groups":  # one free intercept per group, priors of fixed parameters
            a = pm.Normal("a", 0, 2.5, shape=GROUPS)
            eta = a[gd] + Xd @ beta
        elif form == "fixed":
            eta = mu + Xd @ beta
        else:
            z = pm.Normal("z", 0, 1, shape=GROUPS)
            eta = {
                "noncentred": lambda: mu + tau * z[gd] + Xd @ beta,
                "reordered": lambda: Xd @ beta + z[gd] * tau + mu,
                "deterministic": lambda: pm.Deterministic("a", mu + tau * z)[gd] + Xd @ beta,
                # a row's covariate times the effect: it must stay outside the effect
                "row_slope": lambda: mu + tau * Xd[:, 0] * z[gd] + Xd[:, 1] * beta[0],
                "exp_source": lambda: pt.exp(mu + tau * z)[gd] + Xd @ beta,
                "reciprocal": lambda: mu + 1.0 / (1.0 + tau * z[gd]) + Xd @ beta,
                "two_indices": lambda: (
                    mu + tau * z[gd] + 0.5 * z[pm.Data("h", (g + 1) % GROUPS)] + Xd @ beta
                ),
            }[form]()
        if form == "poisson":
            z = pm.Normal("z", 0, 1, shape=GROUPS)
            pm.Poisson("y", mu=pm.math.exp(mu + tau * z[gd] + Xd @ beta), observed=y)
        else:
            pm.Bernoulli("y", logit_p=eta, observed=y)
    return m


@pytest.mark.parametrize(
    "form", ["noncentred", "reordered", "deterministic", "row_slope", "poisson", "reciprocal"]
)
def test_the_rows_in_the_effects_coordinates_are_the_model_s_rows(form):
    m = _model(form)
    lik = PerRowLikelihood(m, compile_kwargs=FAST)
    effects = find_effects(lik.graph, lik.vars)
    assert effects is not None and effects.n_effects == 1
    assert effects.inputs[0].name == "effect[g]"
    # an effect is parameters only: no private node, whatever the form
    assert not lik.graph.private_nodes(list(effects.psi))
    fit = EffectLikelihood(lik, effects, prior_moments(lik.model, lik.vars, effects.psi))
    q_sym = pt.vector("q")
    psi_of = pytensor.function([q_sym], fit.psi_of(q_sym))
    rng = np.random.default_rng(0)
    for _ in range(5):
        q = rng.normal(size=lik.dim)
        psi = fit.ravel(lik.unravel(q))
        np.testing.assert_allclose(psi_of(q), psi, rtol=1e-12)
        np.testing.assert_allclose(fit.logp_rows(psi), lik.logp_rows(q), rtol=1e-10, atol=1e-12)
    # the effect is one value per group: mu + tau * z (row_slope: tau * z, mu read directly;
    # reciprocal: 1 + tau * z; a Poisson's exp and the reciprocal stay outside: not affine)
    point = lik.unravel(q)
    tau = np.exp(point["tau_log__"])
    shift = {"row_slope": 0.0, "reciprocal": 1.0}.get(form, point["mu"])
    expected = tau * point["z"] + shift
    np.testing.assert_allclose(psi[:GROUPS], expected, rtol=1e-12)


def test_two_indices_give_two_effects_and_the_rows_stay_exact():
    m = _model("two_indices")
    lik = PerRowLikelihood(m, compile_kwargs=FAST)
    effects = find_effects(lik.graph, lik.vars)
    assert effects is not None and effects.n_effects == 2
    # mu sits beside two gathers by different indices: it stays a coordinate of its own
    assert [v.name for v in effects.inputs] == ["effect[g]", "effect[h]", "mu", "beta"]
    fit = EffectLikelihood(lik, effects, prior_moments(lik.model, lik.vars, effects.psi))
    q = np.random.default_rng(3).normal(size=lik.dim)
    np.testing.assert_allclose(
        fit.logp_rows(fit.ravel(lik.unravel(q))), lik.logp_rows(q), rtol=1e-10
    )


def test_vectors_of_different_lengths_are_not_combined():
    """``z`` with ``dims`` (static length unknown) and ``w`` one longer, gathered by the same
    index: sinking them together would fail at run time (review); each stays its own effect."""
    X, g, y = _data()
    with pm.Model(coords={"group": range(GROUPS)}) as m:
        gd = pm.Data("g", g)
        mu, tau = pm.Normal("mu", 0, 2.5), pm.HalfNormal("tau", 1.0)
        z = pm.Normal("z", 0, 1, dims="group")
        w = pm.Normal("w", 0, 1, shape=GROUPS + 1)
        pm.Bernoulli("y", logit_p=mu + tau * z[gd] + 0.3 * w[gd], observed=y)
    lik = PerRowLikelihood(m, compile_kwargs=FAST)
    effects = find_effects(lik.graph, lik.vars)
    assert effects is not None
    fit = EffectLikelihood(lik, effects, prior_moments(m, lik.vars, effects.psi))
    q = np.random.default_rng(2).normal(size=lik.dim)
    np.testing.assert_allclose(
        fit.logp_rows(fit.ravel(lik.unravel(q))), lik.logp_rows(q), rtol=1e-10
    )


@pytest.mark.parametrize("prior", ["flat", "custom"])
def test_a_prior_without_draws_keeps_the_model_s_coordinates(prior):
    """``pm.Flat`` or a ``CustomDist`` without ``random``: no stand-in prior can be drawn, so the
    fit stays in the model's coordinates (it crashed with a data-boundary error: review)."""
    from pymc_dp.step_methods.laplace import _effect_likelihood

    X, g, y = _data()
    with pm.Model() as m:
        gd = pm.Data("g", g)
        if prior == "flat":
            mu = pm.Flat("mu")
        else:
            mu = pm.CustomDist("mu", logp=lambda v: -0.5 * v**2 / 6.25)
        tau = pm.HalfNormal("tau", 1.0)
        z = pm.Normal("z", 0, 1, shape=GROUPS)
        pm.Bernoulli("y", logit_p=mu + tau * z[gd], observed=y)
    lik = PerRowLikelihood(m, compile_kwargs=FAST)
    assert find_effects(lik.graph, lik.vars) is not None
    assert _effect_likelihood(lik) is None


def test_without_prior_draws_the_hyperparameters_stay_in_a_gaussian_fit():
    """A read variable whose prior cannot be drawn (``pm.Flat``): no stand-in prior, so the fit
    stays in the model's coordinates, and the default draws from it: NUTS on a fit of the
    hierarchical prior's own coordinates was 10-17 NUTS sds off (review)."""
    X, _, y = _data()
    with pm.Model():
        s = pm.HalfNormal("s", 1.0)
        alpha, beta = pm.Flat("alpha"), pm.Normal("beta", 0, s, shape=2)
        pm.Bernoulli("y", logit_p=alpha + pm.Data("X", X) @ beta, observed=y)
        clip = pdp.glm_clip(np.ones(3))
        step = pdp.DPLaplace(
            epsilon=4.0, grad_clip=clip.grad_clip, noise_seed=0, compile_kwargs=FAST
        )
    assert not step.nuts and type(step.fit_likelihood) is PerRowLikelihood


@pytest.mark.parametrize("form", ["fixed_groups", "fixed", "exp_source"])
def test_a_likelihood_that_reads_free_variables_has_no_effects(form):
    """A gathered free vector whose prior has fixed parameters is a coordinate like any other;
    ``exp(a)[g]`` is positive (a Gaussian fit there would step out of its support): the fit
    stays in the model's coordinates."""
    lik = PerRowLikelihood(_model(form), compile_kwargs=FAST)
    assert find_effects(lik.graph, lik.vars) is None


def test_a_centred_group_vector_is_an_effect_in_its_own_coordinates():
    """``a ~ Normal(mu, tau)`` read as ``a[g]`` (the centred form): its hierarchy decides it,
    as it does the non-centred ``mu + tau * z``, so it is the fit's effect (found measuring: in
    the model's coordinates the hyper sd's Wasserstein distance was 0.2-0.97 NUTS sds, and NUTS
    on that fit with near-separable groups 5.6 of its own sds off); its coordinates are ``a``'s
    own values, and ``mu``, ``tau`` stay with the prior."""
    m = _model("centred")
    lik = PerRowLikelihood(m, compile_kwargs=FAST)
    effects = find_effects(lik.graph, lik.vars)
    assert effects is not None and effects.n_effects == 1
    assert [v.name for v in effects.inputs] == ["effect[g]", "beta"]
    assert effects.psi[0] is m.rvs_to_values[m["a"]]
    fit = EffectLikelihood(lik, effects, prior_moments(m, lik.vars, effects.psi))
    rng = np.random.default_rng(4)
    for _ in range(3):
        q = rng.normal(size=lik.dim)
        point = lik.unravel(q)
        psi = fit.ravel(point)
        np.testing.assert_array_equal(psi[:GROUPS], point["a"])
        np.testing.assert_allclose(fit.logp_rows(psi), lik.logp_rows(q), rtol=1e-10, atol=1e-12)


def test_the_stand_in_prior_is_public_and_the_prior_s():
    m = _model("noncentred")
    lik = PerRowLikelihood(m, compile_kwargs=FAST)
    effects = find_effects(lik.graph, lik.vars)
    centre, scale = prior_moments(m, lik.vars, effects.psi)
    again = prior_moments(m, lik.vars, effects.psi)
    np.testing.assert_array_equal(centre, again[0])  # a fixed public seed: no secret in it
    # independently: a = mu + tau z, mu ~ N(0, 2.5), tau ~ HalfNormal(1), z ~ N(0, 1)
    rng = np.random.default_rng(5)
    a = rng.normal(0, 2.5, 10**6) + np.abs(rng.normal(size=10**6)) * rng.normal(size=10**6)
    lo, hi = np.quantile(a, [0.16, 0.84])
    # a quantile of N draws has sd sqrt(p (1 - p) / N) / f, f the density there: a is close to
    # N(0, 2.7^2), f(16% point) ~ 0.09, so ~0.064 per quantile, ~0.045 for the half-range; the
    # tolerance (0.18) is 4 of those, not tuned
    tol = 4 * np.sqrt(0.16 * 0.84 / PRIOR_DRAWS) / 0.09 / np.sqrt(2)
    np.testing.assert_allclose(scale[:GROUPS], (hi - lo) / 2, atol=tol)
    np.testing.assert_allclose(centre[:GROUPS], 0.0, atol=tol)
    # beta ~ N(0, 2.5) is read directly: its stand-in is its own prior
    np.testing.assert_allclose(scale[GROUPS:], 2.5, atol=tol)


def _nuts_reference(**kwargs):
    """The non-private reference of the model in context: 2 x 1000 NUTS draws, fixed seed."""
    return pm.sample(
        1000,
        tune=1000,
        chains=2,
        cores=1,
        random_seed=7,
        progressbar=False,
        compute_convergence_checks=False,
        **kwargs,
    )


@pytest.fixture(scope="module", params=["noncentred", "centred"])
def random_intercepts(request):
    """Random-intercept logistic regression, 8 groups of 500 rows, written non-centred
    (``mu + tau * z[g]``) or centred (``a ~ Normal(mu, tau)``, ``a[g]``)."""
    rng = np.random.default_rng(24)
    n, groups = 4000, 8
    X = rng.uniform(-1, 1, (n, 2))
    g = rng.integers(0, groups, n)
    a = rng.normal(-0.3, 0.5, groups)
    y = rng.binomial(1, 1 / (1 + np.exp(-(a[g] + X @ np.array([1.0, -0.5])))))
    with pm.Model() as m:
        Xd, gd = pm.Data("X", X), pm.Data("g", g)
        mu, tau = pm.Normal("mu", 0, 2.5), pm.HalfNormal("tau", 1.0)
        beta = pm.Normal("beta", 0, 2.5, shape=2)
        if request.param == "centred":
            effect = pm.Normal("a", mu, tau, shape=groups)[gd]
        else:
            effect = mu + tau * pm.Normal("z", 0, 1, shape=groups)[gd]
        pm.Bernoulli("y", logit_p=effect + Xd @ beta, observed=y)
        ref = _nuts_reference()
    return m, X, g, y, ref


def test_dplaplace_fits_the_effects_and_its_hyper_sd_follows_nuts(random_intercepts):
    m, X, g, y, ref = random_intercepts
    clip = pdp.glm_clip(np.ones(3))  # the group's effect is bounded like an intercept
    with m:
        step = pdp.DPLaplace(
            epsilon=50.0,
            grad_clip=clip.grad_clip,
            hess_clip=clip.hess_clip,
            noise_seed=3,
            nuts_tune=500,
        )
        assert step.nuts and isinstance(step.fit_likelihood, EffectLikelihood)
        idata = pdp.sample(
            step=step, draws=500, tune=0, chains=2, cores=1, random_seed=1, progressbar=False
        )
    assert set(idata.posterior.data_vars) == {v.name for v in m.free_RVs}
    assert set(idata.sample_stats.data_vars) == set(step.releasable_stat_names())
    assert "effect[g][0]" in idata.attrs["pymc_dp_fit"]
    for name in ("tau", "mu", "beta"):
        dp = idata.posterior[name].values.reshape(1000, -1)
        nuts = ref.posterior[name].values.reshape(2000, -1)
        for j in range(dp.shape[1]):
            # at epsilon 50 the fit's noise is small against the posterior: what is left is
            # the Gaussian likelihood's approximation error and Monte Carlo error (~0.1 sd)
            w = wasserstein_distance(dp[:, j], nuts[:, j]) / nuts[:, j].std()
            assert w < 0.35, (name, j, w)
    for col in (y, X[:, 0], g):
        for var in idata.posterior.data_vars.values():
            assert not np.isin(col[:20], var.values.ravel()).all()


def _intercepts(effects, n=600, seed=3) -> pm.Model:
    """Random-intercept logistic regression with these true group effects."""
    rng = np.random.default_rng(seed)
    X, g = rng.uniform(-1, 1, (n, 2)), rng.integers(0, len(effects), n)
    eta = np.asarray(effects)[g] + X @ np.array([1.0, -0.5])
    with pm.Model() as model:
        Xd, gd = pm.Data("X", X), pm.Data("g", g)
        mu, tau = pm.Normal("mu", 0, 2.5), pm.HalfNormal("tau", 1.0)
        z = pm.Normal("z", 0, 1, shape=len(effects))
        beta = pm.Normal("beta", 0, 2.5, shape=2)
        pm.Bernoulli(
            "y",
            logit_p=mu + tau * z[gd] + Xd @ beta,
            observed=rng.binomial(1, 1 / (1 + np.exp(-eta))),
        )
    return model


def _laplace(effects) -> pdp.DPLaplace:
    """``DPLaplace`` at epsilon 4 (seeded noise) on :func:`_intercepts` with these effects."""
    import warnings

    clip = pdp.glm_clip(np.ones(3))
    with _intercepts(effects), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pdp.DPLaplace(
            epsilon=4.0,
            grad_clip=clip.grad_clip,
            hess_clip=clip.hess_clip,
            noise_seed=1,
            compile_kwargs=FAST,
        )


@pytest.mark.parametrize("effects, warned", [([-0.3, 0.4, -0.8], False), ([-0.3, 0.4, -7.0], True)])
def test_a_group_near_separation_is_named_when_the_fit_cannot_inform_it(effects, warned):
    """A group with a rare outcome (logit -7: under one event expected in its 200 rows) leaves
    the private fit uninformed in some direction (600 rows: the noise, not a walk that has not
    arrived), where NUTS then follows the hierarchical prior: the warning names the risk to a
    hierarchy's scale. The same model with groups away from separation is informed everywhere
    and gets no warning."""
    import warnings

    step = _laplace(effects)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step.surrogate_model()
    named = [w for w in caught if "near separation" in str(w.message)]
    assert bool(named) is warned


def test_with_group_effects_the_walk_is_put_ahead_in_the_effects_coordinates():
    """The default with group effects (found in review: no test ran it): the surrogate's
    likelihood at ``(q, s)`` is the Gaussian of :func:`gaussian_surrogate` (the walk's spread
    taken out) at ``psi(q) - m - s walk``, ``psi`` each group's effect and the coefficients,
    where the fit and its walk live (``psi`` here from ``EffectLikelihood.ravel`` of the model's
    point, not from the surrogate's graph). Only the group effects' part of the walk goes ahead;
    the coefficients keep theirs as a spread (found in review: a share of the walk their prior
    does not decide moved them by about half of it). Fails with the walk's sign flipped, with
    the whole walk put ahead, or with the coefficients' spread dropped; the spread's removal is
    pinned by ``test_surrogate``."""
    import copy
    import dataclasses

    from pymc_dp.surrogate import WALK_LEFT, gaussian_surrogate

    step = _laplace([-0.3, 0.4, -0.8])
    eff, warm = step.fit_likelihood, step.warm
    assert isinstance(eff, EffectLikelihood)
    rng = np.random.default_rng(0)
    walk = 2.0 * np.sqrt(np.diag(warm.cov)) * rng.choice([-1.0, 1.0], warm.mean.size)
    warped = copy.copy(step)
    warped.warm = dataclasses.replace(
        warm, noise_cov=warm.noise_cov + np.outer(walk, walk), walk=walk
    )
    sur = warped.surrogate_model()
    assert WALK_LEFT in sur.named_vars
    on_effects = np.repeat([True, False], [3, 2])  # three groups' effects, then the coefficients
    np.testing.assert_array_equal(eff.variable_blocks < eff.effects.n_effects, on_effects)
    kept = np.where(on_effects, 0.0, walk)
    _, grad = eff.prior_logp_and_grad(warm.mean)
    idx, p, g, _ = gaussian_surrogate(
        warm.mean,
        warped.warm.posterior_cov + np.outer(kept, kept),
        eff.prior_hessian(warm.mean),
        grad,
        eff.likelihood_mask,
        walk=walk,
    )
    (term,) = sur.replace_rvs_by_values([sur["likelihood"]])
    loglik = sur.compile_fn(term, inputs=sur.value_vars, on_unused_input="ignore")
    base = step.likelihood
    for s in (0.3, 1.0, 2.5):
        q = base.ravel(base.model.initial_point()) + rng.normal(0, 0.3, base.dim)
        psi = eff.ravel(base.unravel(q))
        d = (psi - warm.mean - s * np.where(on_effects, walk, 0.0))[idx]
        expected = -0.5 * d @ p @ d + g @ d
        got = float(loglik({"q": q, f"{WALK_LEFT}_log__": np.log(s)}))
        assert got == pytest.approx(expected, rel=1e-8, abs=1e-8), (s, got, expected)


def test_a_walk_left_only_on_the_coefficients_stays_a_spread():
    """Where the groups' effects have arrived and only the coefficients' walk moves, nothing
    goes ahead: the surrogate is the fit with its whole spread (``cov + noise_cov``), as without
    group effects. Fails if that spread were counted twice (added back and not taken out)."""
    import copy
    import dataclasses

    from pymc_dp.surrogate import WALK_LEFT, gaussian_surrogate

    step = _laplace([-0.3, 0.4, -0.8])
    eff, warm = step.fit_likelihood, step.warm
    walk = np.r_[np.zeros(3), 2.0 * np.sqrt(np.diag(warm.cov))[3:]]  # the coefficients only
    warped = copy.copy(step)
    warped.warm = dataclasses.replace(
        warm, noise_cov=warm.noise_cov + np.outer(walk, walk), walk=walk
    )
    sur = warped.surrogate_model()
    assert WALK_LEFT not in sur.named_vars
    _, grad = eff.prior_logp_and_grad(warm.mean)
    idx, p, g, _ = gaussian_surrogate(
        warm.mean,
        warped.warm.posterior_cov,
        eff.prior_hessian(warm.mean),
        grad,
        eff.likelihood_mask,
    )
    (term,) = sur.replace_rvs_by_values([sur["likelihood"]])
    loglik = sur.compile_fn(term, inputs=sur.value_vars, on_unused_input="ignore")
    base, rng = step.likelihood, np.random.default_rng(1)
    for _ in range(3):
        q = base.ravel(base.model.initial_point()) + rng.normal(0, 0.3, base.dim)
        d = (eff.ravel(base.unravel(q)) - warm.mean)[idx]
        assert float(loglik({"q": q})) == pytest.approx(-0.5 * d @ p @ d + g @ d, rel=1e-8)


@pytest.fixture(scope="module")
def shrinkage():
    """Logistic regression under a shrinkage prior ``beta ~ Normal(0, s)``: ``s`` is read by
    the prior only."""
    rng = np.random.default_rng(11)
    X = rng.uniform(-1, 1, (2000, 3))
    y = rng.binomial(1, 1 / (1 + np.exp(-(0.2 + X @ np.array([0.8, -0.5, 0.0])))))
    with pm.Model() as m:
        s = pm.HalfNormal("s", 1.0)
        alpha, beta = pm.Normal("alpha", 0, 2.5), pm.Normal("beta", 0, s, shape=3)
        pm.Bernoulli("y", logit_p=alpha + pm.Data("X", X) @ beta, observed=y)
        ref = _nuts_reference(target_accept=0.95)
    return m, ref


@pytest.mark.parametrize("epsilon", [50.0, 2.0])
def test_hyperparameters_stay_with_the_exact_prior_and_follow_nuts(shrinkage, epsilon):
    """Variables only the prior reads: the fit runs in the others (a Gaussian stand-in prior, no
    group effect, nothing put ahead) and NUTS samples the exact prior by default. At epsilon 50
    what is left against NUTS is the Gaussian likelihood's approximation and Monte Carlo error
    (~0.1 sd): Wasserstein distance below 0.35 sd. At epsilon 2 issue 22's target, every mean
    within 1.5 NUTS sds, and sds within 0.67-2x NUTS' (measured over noise seeds 0-5: means
    within 0.78, sds 1.04-1.62x; the fit with the hyperparameters, whose hierarchical curvature
    made its metric a lottery, gave 0.5-17 NUTS sds and sds up to 53x, seed 0 9.2). The sd
    bound is ~7 Monte Carlo sds above seed 0's largest ratio (1.62; ~500 effective draws give
    ratios to ~3%)."""
    m, ref = shrinkage
    clip = pdp.glm_clip(np.ones(4))
    with m:
        step = pdp.DPLaplace(
            epsilon=epsilon,
            grad_clip=clip.grad_clip,
            hess_clip=clip.hess_clip,
            noise_seed=0 if epsilon < 10 else 3,
            nuts_tune=500,
        )
        lik = step.fit_likelihood
        assert step.nuts and isinstance(lik, EffectLikelihood)
        assert lik.effects.n_effects == 0 and [v.name for v in lik.vars] == ["alpha", "beta"]
        idata = pdp.sample(
            step=step, draws=500, tune=0, chains=2, cores=1, random_seed=1, progressbar=False
        )
    for name in ("s", "alpha", "beta"):
        dp = idata.posterior[name].values.reshape(1000, -1)
        nuts = ref.posterior[name].values.reshape(2000, -1)
        for j in range(dp.shape[1]):
            if epsilon > 10:
                w = wasserstein_distance(dp[:, j], nuts[:, j]) / nuts[:, j].std()
                assert w < 0.35, (name, j, w)
            else:
                z = abs(dp[:, j].mean() - nuts[:, j].mean()) / nuts[:, j].std()
                ratio = dp[:, j].std() / nuts[:, j].std()
                assert z < 1.5 and 0.67 < ratio < 2.0, (name, j, z, ratio)
