"""Leaks found by the adversarial review (issue 11), one test each.

Every test here failed on the code before the hardening (8cb37aa) and passes now: either the
library refuses before reading data, or the output holds nothing private.
"""

from __future__ import annotations

import math
import sys
import warnings

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

import pymc_dp as pdp
from pymc_dp.noise import SNAP_GRID, NoiseSource

N, D = 120, 3


def _penalty(**kw):
    kw.setdefault("epsilon", 2.0)
    return pdp.DPPenalty(llr_clip=4.0, proposal_scale=0.05, **kw)


def _run(model, step, **kw):
    args = dict(draws=20, tune=5, chains=2, cores=1, progressbar=False, random_seed=1)
    args.update(kw)
    with model:
        return pdp.sample(step=step, **args)


def _all_floats(idata):
    for node in idata.subtree:
        for var in node.dataset.variables.values():
            arr = np.asarray(var.values)
            if arr.dtype.kind == "f":
                yield arr.ravel()


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, size=(N, D))
    y = (rng.random(N) < 1 / (1 + np.exp(-X @ np.array([1.0, -1.0, 0.5])))).astype(int)
    return X, y


# ----------------------------------------------------------------- what is private: graph rule
def test_transposed_covariates_cannot_leak_through_deterministics(data):
    """Covariates stored (d, n) with beta @ X: fitted values and column sums are functions of
    X; they were kept (the old rule looked for a leading axis of length n) and X was
    recovered exactly from the draws."""
    X, y = data
    Xt = X.T.copy()
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 2, shape=D)
        pm.Deterministic("fitted", beta @ Xt)
        pm.Deterministic("colsums", pt.as_tensor(Xt).sum(axis=1))
        pm.Deterministic("first_person", pt.as_tensor(Xt)[:, 0] * beta)
        pm.Deterministic("beta_norm", pt.sqrt((beta**2).sum()))  # public
        pm.Bernoulli("y", logit_p=beta @ Xt, observed=y)
        step = _penalty()
    assert step.likelihood.graph.row_inputs[-1].row_axis == 1  # rows found on axis 1
    idata = _run(model, step)
    assert set(idata.posterior.data_vars) == {"beta", "beta_norm"}
    for arr in _all_floats(idata):
        assert not np.isin(X[:5].ravel(), arr).any()
        assert not np.isclose(arr, X.sum(axis=0)[0]).any()


def test_ambiguous_row_axis_is_refused_not_guessed():
    rng = np.random.default_rng(0)
    Xs = rng.normal(size=(40, 40))  # d == n: which axis holds people?
    with pm.Model() as model:
        b = pm.Normal("b", shape=40)
        pm.Normal("y", pt.as_tensor(Xs) @ b, 1.0, observed=rng.normal(size=40))
    with model, pytest.raises(ValueError, match="ambiguous.*row_axes"):
        _penalty()
    with pm.Model(coords={"person": range(40), "k": range(40)}) as named:
        Xd = pm.Data("X", Xs, dims=("k", "person"))  # stored transposed, named: no ambiguity
        b = pm.Normal("b", shape=40)
        pm.Normal("y", b @ Xd, 1.0, observed=rng.normal(size=40), dims="person")
    with named:
        step = _penalty()
    assert {i.row_axis for i in step.likelihood.graph.row_inputs} == {0, 1}


@pytest.mark.parametrize("where", ["prior", "potential"])
def test_prior_or_potential_reading_private_data_is_refused(data, where):
    X, y = data
    with pm.Model() as model:
        yd = pm.Data("yd", y.astype(float))
        if where == "prior":
            mu = pm.Normal("mu", mu=yd.mean(), sigma=1)
        else:
            mu = pm.Normal("mu", 0, 1)
            pm.Potential("pull", -((yd - mu) ** 2).sum())
        pm.Normal("obs", mu, 1, observed=yd)
    name = "free variable 'mu'" if where == "prior" else "Potential 'pull'"
    with model, pytest.raises(ValueError, match=name):
        _penalty()


def test_prior_reading_a_copy_of_the_data_is_refused(data):
    """PyMC embeds each NumPy array as a new constant: private constants match by value."""
    _, y = data
    yf = y.astype(float)
    with pm.Model() as model:
        mu = pm.Normal("mu", mu=pt.as_tensor(yf.copy()).mean(), sigma=1)
        pm.Normal("obs", mu, 1, observed=yf)
    with model, pytest.raises(ValueError, match="prior of free variable 'mu'"):
        _penalty()


def test_deterministics_reading_data_through_any_path_are_dropped(data):
    X, y = data
    with pm.Model() as model:
        Xd = pm.Data("X", X)
        beta = pm.Normal("beta", 0, 2, shape=D)
        obs = pm.Bernoulli("y", logit_p=Xd @ beta, observed=y)
        pm.Deterministic("resid", obs - pm.math.sigmoid(Xd @ beta))  # through the observed RV
        pm.Deterministic("xbar", Xd.mean(axis=0))  # through a container
        pm.Deterministic("xsum", pt.as_tensor(X.copy()).sum())  # a copy of the data
        pm.Deterministic("n_people", pt.as_tensor(Xd.shape[0]) * 1.0)  # the public row count
        pm.Deterministic("odds", pt.exp(beta))
        step = _penalty()
    assert set(step.likelihood.graph.private_deterministics) == {"resid", "xbar", "xsum"}
    idata = _run(model, step)
    assert set(idata.posterior.data_vars) == {"beta", "n_people", "odds"}


# ----------------------------------------------------------------- observed data forms
def test_observed_pm_data_container_is_supported(data):
    """pm.Data observed values (cast by PyMC) were refused with 'is a scalar: it has no rows'."""
    X, y = data
    with pm.Model() as model:
        Xd = pm.Data("X", X)
        yd = pm.Data("y_data", y)
        beta = pm.Normal("beta", 0, 2, shape=D)
        pm.Bernoulli("y", logit_p=Xd @ beta, observed=yd)
        step = _penalty()
    assert step.n_rows == N
    labels = {i.label for i in step.likelihood.graph.inputs}
    assert "pm.Data 'y_data'" in labels and "pm.Data 'X'" in labels
    idata = _run(model, step)
    assert set(idata.children) == {"posterior", "sample_stats"}


def test_pm_minibatch_points_to_the_minibatch_steps(data):
    X, y = data
    with pm.Model() as model:
        Xb, yb = pm.Minibatch(X, y.astype(float), batch_size=10)
        beta = pm.Normal("beta", 0, 2, shape=D)
        pm.Normal("y", Xb @ beta, 1.0, observed=yb, total_size=N)
    with model, pytest.raises(ValueError, match="DPMinibatchPenalty or pdp.DPBarker"):
        _penalty()


def test_missing_values_get_the_imputation_message(data):
    X, y = data
    yy = y.astype(float)
    yy[7] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pm.Model() as model:
            beta = pm.Normal("beta", 0, 2, shape=D)
            pm.Bernoulli("y", logit_p=X @ beta, observed=yy)
    with model, pytest.raises(ValueError, match="imputed by PyMC, which reads them exactly"):
        _penalty()


# ----------------------------------------------------------------- bad rows
@pytest.mark.parametrize("case", ["bernoulli_2", "poisson_negative", "outside_truncation"])
def test_out_of_support_rows_are_refused_without_printing_them(data, case):
    """One row outside the support gave a -inf/NaN term and froze the chain iff that person was
    present: an unaccounted bit. Now refused before the first release, naming the variable
    but not the row or its value."""
    X, y = data
    yy = y.astype(float)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 2, shape=D)
        if case == "bernoulli_2":
            yy[17] = 2.0
            pm.Bernoulli("y", logit_p=X @ beta, observed=yy.astype(int))
        elif case == "poisson_negative":
            yy[17] = -1.0
            pm.Poisson("y", pm.math.exp(X @ beta), observed=yy.astype(int))
        else:
            yy = np.random.default_rng(0).uniform(0.1, 0.9, N)
            yy[17] = 1.7
            pm.Truncated("y", pm.Normal.dist(X @ beta, 1.0), lower=0.0, upper=1.0, observed=yy)
    with model, pytest.raises(ValueError, match="outside the support") as err:
        _penalty()
    assert "'y'" in str(err.value) and "17" not in str(err.value) and "1.7" not in str(err.value)


def test_a_per_row_parameter_outside_its_domain_is_refused_by_name(data):
    """A known per-row sd of 0 made PyMC's parameter check fail for the whole vector, withheld
    by the boundary as an unexplained ``DataBoundaryError``: now the same refusal as a value
    outside the support, naming the variable, never the row or its value."""
    X, y = data
    sd = np.random.default_rng(3).uniform(0.5, 2.0, N)
    sd[17] = 0.0
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 2, shape=D)
        pm.Normal("y", X @ beta, sd, observed=y.astype(float))
    with model, pytest.raises(ValueError, match="per-row parameters outside their domain") as err:
        _penalty()
    text = str(err.value)
    assert "'y'" in text and "17" not in text and err.value.__cause__ is None


def test_a_parameter_check_that_reads_the_rows_is_applied_row_by_row():
    """PyMC checks ``0 <= p <= 1`` over all rows at once: with ``p_i = c_i sigmoid(a)`` and one
    person's ``c_i`` above 1, every row's term became -inf wherever ``sigmoid(a) > 1 / c_i`` (n
    terms changed by one person; the model was refused by the row-locality check with a withheld
    error). Now the condition holds per row: both neighbours are accepted, only that row is
    -inf, and the clipped sums move by at most their sensitivity."""
    rng = np.random.default_rng(3)
    n, bound = 200, 0.01
    y = rng.integers(0, 2, n)
    sums = []
    for c17 in (0.5, 1.05):
        c = np.full(n, 0.5)
        c[17] = c17
        with pm.Model() as model:
            a = pm.Normal("a", 0, 2)
            pm.Binomial("y", 1, c * pm.math.sigmoid(a), observed=y)
        lik = pdp.PerRowLikelihood(model)
        far = np.array([4.0])  # sigmoid(4) = 0.982: 1.05 x 0.982 > 1
        rows = lik.logp_rows(far)
        assert np.isfinite(np.delete(rows, 17)).all()
        assert np.isfinite(rows[17]) == (c17 < 1)
        ratio = lik.ratio_kernel()(far, np.array([0.0]), np.asarray(bound))[0]
        grad = lik.grad_kernel()(far, np.asarray(bound))[0]
        sums.append((ratio, grad))
    (r0, g0), (r1, g1) = sums
    assert abs(r0 - r1) <= 2 * bound * (1 + 1e-9)
    assert np.linalg.norm(g0 - g1) <= 2 * bound * (1 + 1e-9)


def test_a_check_broadcast_from_the_trailing_axes_holds_row_by_row():
    """Review: a per-row potential of shape (2, n) summed over its first axis, with a per-row
    parameter of shape (n,): the check stayed global, so one person (an integer count far
    above the others, which the row-locality check only swaps) turned all 40 terms -inf. The
    condition now broadcasts against the term as PyMC broadcast the parameter."""
    rng = np.random.default_rng(0)
    n, bound = 40, 1.0
    counts = rng.integers(0, 2, (n, 2))
    sums = []
    for c5 in (1, 10):
        c = np.ones(n, dtype="int64")
        c[5] = c5
        with pm.Model() as model:
            a = pm.Normal("a", 0, 1.5)
            p = c * pm.math.sigmoid(a - 4.0)
            pm.Potential("pot", pm.logp(pm.Binomial.dist(n=3, p=p), counts.T).sum(axis=0))
        lik = pdp.PerRowLikelihood(model)
        far = np.array([2.0])  # sigmoid(-2) = 0.12: 10 x 0.12 > 1
        rows = lik.logp_rows(far)
        assert np.isfinite(np.delete(rows, 5)).all() and np.isfinite(rows[5]) == (c5 == 1)
        sums.append(lik.ratio_kernel()(far, np.array([0.0]), np.asarray(bound))[0])
    assert abs(sums[0] - sums[1]) <= 2 * bound * (1 + 1e-9)


def test_a_condition_on_every_persons_count_is_not_row_local():
    """Review: a term that reads the other rows only through a condition on all integer counts
    (``all(c <= 2)``) was accepted, since the row-locality check only swapped integer rows; one
    person with a count of 3 changes every row's term. Now one integer row is also moved
    beyond all others."""
    rng = np.random.default_rng(0)
    c = rng.integers(1, 3, 40)
    with pm.Model():
        a = pm.Normal("a", 0, 1)
        widen = pt.switch(pt.all(pt.as_tensor(c) <= 2), 0.0, 1.0)
        pm.Binomial("k", n=3, p=pm.math.sigmoid(a) * (1 + widen), observed=rng.integers(0, 3, 40))
        with pytest.raises(ValueError, match="depends on other rows"):
            _penalty()


def _identity_link(kind: str, x: np.ndarray) -> pm.Model:
    rng = np.random.default_rng(0)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        s = pt.as_tensor(x) - b  # a per-row sd (rate) that leaves its domain where b > x_i
        if kind == "mixture":
            comps = [pm.Normal.dist(-1, s), pm.Normal.dist(1, s)]
            pm.Mixture("y", w=[0.5, 0.5], comp_dists=comps, observed=rng.normal(size=x.size))
        else:  # p = sigmoid(log alpha - log mu): NaN where mu < 0, "provably" in [0, 1]
            pm.NegativeBinomial("y", mu=s, alpha=2.0, observed=rng.poisson(2.0, x.size))
    return model


@pytest.mark.parametrize("kind", ["mixture", "negative_binomial"])
def test_nested_and_nan_parameter_checks_hold_row_by_row(kind):
    """Second review: a mixture's weight check wrapped its components' checks, which stayed
    global; a check dropped as provably true (0 <= sigmoid <= 1) left the rest global, and the
    sigmoid of a NaN fails it. Either way one person (x_5 = 1.3, below b = 1.5) turned all 60
    terms -inf. Now only her row is -inf (or NaN, which the kernels bound) and the clipped sums
    move by at most 2 b."""
    _assert_one_person_moves_the_sums_within_their_bound(lambda x: _identity_link(kind, x))


def _assert_one_person_moves_the_sums_within_their_bound(build) -> None:
    """Neighbours: covariates in [2, 3], person 5's replaced by 1.3 (below b = 1.5, where her
    per-row parameter leaves its domain). At b = 1.5 only her row may be non-finite, and the
    clipped ratio and gradient sums move by at most 2 b (the kernels' sensitivity)."""
    x = np.random.default_rng(1).uniform(2.0, 3.0, 60)
    x2 = x.copy()
    x2[5] = 1.3
    bound, q, q0 = 0.05, np.array([1.5]), np.array([0.0])
    sums = []
    for data in (x, x2):
        lik = pdp.PerRowLikelihood(build(data))
        assert np.isfinite(np.delete(lik.logp_rows(q), 5)).all()
        sums.append(
            (
                lik.ratio_kernel()(q, q0, np.asarray(bound))[0],
                lik.grad_kernel()(q, np.asarray(bound))[0],
            )
        )
    (r0, g0), (r1, g1) = sums
    assert abs(r0 - r1) <= 2 * bound * (1 + 1e-9)
    assert np.linalg.norm(g0 - g1) <= 2 * bound * (1 + 1e-9)


def test_a_condition_on_one_column_of_an_integer_input_is_not_row_local():
    """Second review: with a group id and a count in one integer input, the count's trial moved
    the whole row beyond every other, the group id fell outside its range and the trial was
    skipped. Each column is now moved on its own."""
    rng = np.random.default_rng(0)
    z = np.column_stack([rng.integers(0, 4, 40), rng.integers(1, 3, 40)])
    with pm.Model():
        a = pm.Normal("a", 0, 1, shape=4)
        zt = pt.as_tensor(z)
        p = pm.math.sigmoid(a[zt[:, 0]]) * pt.switch(pt.all(zt[:, 1] <= 2), 1.0, 0.5)
        pm.Binomial("k", n=3, p=p, observed=rng.integers(0, 3, 40))
        with pytest.raises(ValueError, match="depends on other rows"):
            _penalty()


def _softmax_mixture():
    with pm.Model() as model:
        a = pm.Normal("a", 0, 1, shape=2)
        w = pm.math.softmax(np.log(np.array([0.3, 0.7])) + a)
        comps = [pm.Normal.dist(-1, 1), pm.Normal.dist(1, 1)]
        pm.Mixture("y", w=w, comp_dists=comps, observed=np.random.default_rng(0).normal(size=60))
    return model


def _uint8_groups():
    g = np.random.default_rng(1).integers(0, 256, 80).astype(np.uint8)
    g[0], g[1] = 255, 0  # no integer fits above or below: that column's trial is skipped
    with pm.Model() as model:
        a = pm.Normal("a", 0, 1, shape=256)
        pm.Normal("y", a[pm.Data("g", g)], 1.0, observed=np.zeros(80))
    return model


def _zero_inflated_poisson():
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, 80)
    with pm.Model() as model:
        a, b = pm.Normal("a", 0, 1), pm.Normal("b", 0, 1)
        mu = pm.math.exp(a + b * x)
        pm.ZeroInflatedPoisson("y", psi=0.8, mu=mu, observed=rng.poisson(np.exp(0.5 + 0.3 * x)))
    return model


def _huge_covariate():
    rng = np.random.default_rng(5)
    x = np.column_stack([np.ones(200), rng.uniform(-1, 1, (200, 2))])
    x[7, 1:] = 3e305  # finite; moved "far off" by the row-locality check it overflowed
    with pm.Model() as model:
        b = pm.Normal("b", 0, 2.5, shape=3)
        pm.Bernoulli("k", logit_p=pm.math.dot(x, b), observed=rng.integers(0, 2, 200))
    return model


@pytest.mark.parametrize(
    "build", [_softmax_mixture, _uint8_groups, _zero_inflated_poisson, _huge_covariate]
)
def test_row_local_models_the_checks_refused_are_accepted_silently(build):
    """Second review: a mixture with softmax weights (its (2,) weight check was taken for a
    per-row one), a uint8 group index holding 0 and 255 (the integer trial overflowed), a
    zero-inflated Poisson regression (its parameters' graph draws, and a far-off row overflowed
    the draw) and a finite covariate of 3e305 (moved to inf, with a warning) were refused with
    withheld errors, refusals that depended on the data. Accepted now, without a warning, with
    the model's own log density."""
    model = build()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lik = pdp.PerRowLikelihood(model)
    assert [str(w.message) for w in caught] == []
    q = lik.ravel(model.initial_point())
    total = lik.logp_rows(q).sum() + lik.prior_logp_and_grad(q)[0]
    assert total == pytest.approx(model.compile_logp()(model.initial_point()), rel=1e-9)


def _zero_inflated(kind: str, centred: bool) -> pm.Model:
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, 80)
    xt = pt.as_tensor(x) - pt.as_tensor(x).mean() if centred else pt.as_tensor(x)
    with pm.Model() as model:
        a, b = pm.Normal("a", 0, 1), pm.Normal("b", 0, 1)
        mu = pm.math.exp(a + b * xt)
        y = rng.poisson(2.0, 80)
        if kind == "zip":
            pm.ZeroInflatedPoisson("y", psi=0.8, mu=mu, observed=y)
        else:
            pm.HurdlePoisson("y", psi=0.7, mu=mu, observed=y)
    return model


@pytest.mark.parametrize("kind", ["zip", "hurdle"])
def test_a_composite_likelihoods_parameters_are_compared_through_its_components(kind):
    """Third review: the parameters of a zero-inflated or hurdle model are draws of its
    components, which differ between evaluations whatever the rows; dropping them from the
    row-locality check let ``x - x.mean()`` (which PyMC folds into a constant that looks
    row-local) through. Their components' parameters are compared instead: the centred model is
    refused, the row-local one accepted (the hurdle model had been refused)."""
    with pytest.raises(ValueError, match="depends on other rows"):
        pdp.PerRowLikelihood(_zero_inflated(kind, centred=True))
    pdp.PerRowLikelihood(_zero_inflated(kind, centred=False))


def _wide_parameter(kind: str, centred: bool) -> pm.Model:
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, 60)
    xt = pt.as_tensor(x) - pt.as_tensor(x).mean() if centred else pt.as_tensor(x)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        if kind == "categorical":
            p = pm.math.softmax(pt.stack([b * xt, -b * xt, 0 * xt], axis=-1), axis=-1)
            pm.Categorical("c", p=p, observed=rng.integers(0, 3, 60))
        elif kind == "ordered_logistic":
            cut = np.array([-1.0, 0.0, 1.0])
            pm.OrderedLogistic("c", eta=b * xt, cutpoints=cut, observed=rng.integers(0, 4, 60))
        else:  # a zero-inflated Poisson whose per-row psi makes its weights (n, 2)
            psi = pm.math.sigmoid(b + 3 * xt)
            pm.ZeroInflatedPoisson("c", psi=psi, mu=2.0, observed=rng.poisson(2.0, 60))
    return model


@pytest.mark.parametrize("kind", ["categorical", "ordered_logistic", "zero_inflated"])
def test_parameters_with_core_axes_are_compared_along_their_rows(kind):
    """Fourth review: parameters with more axes than the observed variable (a Categorical's p
    (n, K), a zero-inflated model's weights (n, 2)) were skipped by the row-locality check, the
    only place that sees ``x - x.mean()`` (PyMC folds it into a constant that looks row-local):
    such models were accepted. Parameters are now aligned by the distribution's signature."""
    with pytest.raises(ValueError, match="depends on other rows"):
        pdp.PerRowLikelihood(_wide_parameter(kind, centred=True))
    pdp.PerRowLikelihood(_wide_parameter(kind, centred=False))


def test_a_multinomial_with_per_row_trials_is_row_local():
    """Fourth review: the row axis of a per-row ``n`` beside ``p`` (n, K) was counted from the
    right, so the trials were taken for a parameter without rows: refused as not row-local."""
    rng = np.random.default_rng(3)
    trials = rng.integers(2, 6, 50)
    with pm.Model() as model:
        p = pm.Dirichlet("p", np.ones(3))
        pm.Multinomial("k", n=trials, p=p, observed=rng.multinomial(trials, [0.2, 0.3, 0.5]))
    pdp.PerRowLikelihood(model)


def _custom_dist(where: str, centred: bool) -> pm.Model:
    """A CustomDist whose ``dist=`` function reads a NumPy covariate, as an argument or as an
    array it closes over, centred by its mean inside the function or not."""
    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 1, 60)

    def mean_of(a, z):
        return a * ((z - z.mean()) if centred else z)

    with pm.Model() as model:
        a_ = pm.Normal("a", 0, 1)
        y = rng.normal(size=60)
        if where == "argument":
            pm.CustomDist(
                "y",
                x,
                a_,
                dist=lambda z, a, size: pm.Normal.dist(mean_of(a, z), 1.0, size=size),
                observed=y,
            )
        elif where == "closure":
            pm.CustomDist(
                "y",
                a_,
                dist=lambda a, size: pm.Normal.dist(mean_of(a, pt.as_tensor(x)), 1.0, size=size),
                observed=y,
            )
        else:  # review: a CustomDist inside another's dist= function, or under pm.Truncated

            def inner(a, size):
                return pm.Normal.dist(mean_of(a, pt.as_tensor(x)), 1.0, size=size)

            if where == "nested":
                pm.CustomDist(
                    "y",
                    a_,
                    dist=lambda a, size: pm.CustomDist.dist(a, dist=inner, size=size),
                    observed=y,
                )
            else:
                base = pm.CustomDist.dist(a_, dist=inner, shape=60)
                pm.Truncated("y", base, lower=-5.0, upper=5.0, observed=y)
    return model


@pytest.mark.parametrize("where", ["argument", "closure", "nested"])
def test_an_aggregate_inside_a_custom_dists_dist_function_is_not_row_local(where):
    """Fourth review: ``z - z.mean()`` inside a CustomDist's ``dist=`` function was accepted.
    PyMC's logp rewrites folded it into one new array that looks row-local, and the function's
    inner graph is not the model's graph of the parameters, which the check also compares. The
    logp is now derived with embedded arrays read as symbols, so nothing of the rows is folded.
    The row-local model is accepted, with the model's own log density."""
    with pytest.raises(ValueError, match="depends on other rows"):
        pdp.PerRowLikelihood(_custom_dist(where, centred=True))
    model = _custom_dist(where, centred=False)
    lik = pdp.PerRowLikelihood(model)
    q = lik.ravel(model.initial_point())
    total = lik.logp_rows(q).sum() + lik.prior_logp_and_grad(q)[0]
    assert total == pytest.approx(model.compile_logp()(model.initial_point()), rel=1e-9)


def test_an_array_inside_an_inner_graph_pymc_derives_whole_is_refused_by_name():
    """Review: under ``pm.Truncated`` a CustomDist's inner graph is not inlined before PyMC
    derives the logp, which folds ``X - X.mean()`` there where no check sees it. An array inside
    such an inner graph is refused by name, centred or not (it could be passed as an
    argument)."""
    for centred in (True, False):
        with pytest.raises(ValueError, match="inside the inner graph of a distribution"):
            pdp.PerRowLikelihood(_custom_dist("truncated", centred=centred))


def _running_any(hit):
    import pytensor

    seen, _ = pytensor.scan(
        lambda h, acc: pt.or_(acc, h),
        sequences=[hit],
        outputs_info=[pt.as_tensor(np.array(False))],
    )
    return seen


def test_a_scan_over_people_without_a_carried_state_is_row_local():
    import pytensor

    rng = np.random.default_rng(6)
    with pm.Model() as model:
        b, xd = pm.Normal("b"), pm.Data("x", rng.uniform(-1, 1, 60))
        squares, _ = pytensor.scan(lambda x: x**2, sequences=[xd])
        pm.Normal("y", b * squares, 1.0, observed=rng.normal(size=60))
    pdp.PerRowLikelihood(model)


def _flagged(kind: str) -> pm.Model:
    """A regression whose every term shifts by 5 when a flag over all people is set: a
    threshold no trial reaches, a membership test for one value, an integer code beyond."""
    rng = np.random.default_rng(6)
    x = rng.uniform(-1, 1, 60)
    g = rng.integers(0, 4, 60)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 1, shape=4)
        xd, gd = pm.Data("x", x), pm.Data("g", g)
        flag = {
            "threshold": pt.max(xd) > 1e5,
            "membership": pt.any(pt.abs(xd - 0.7777777) < 1e-9),
            "code": pt.max(gd) > 6,
            # behind a shape pinned to n, which the structural check cannot subset
            "pinned": pt.max(pt.reshape(xd, (60,))) > 1e5,
            # another person's row, reversed or rolled into hers (second review)
            "reversed": pt.abs(xd[::-1] - 0.4242) < 1e-9,
            "rolled": pt.eq(pt.roll(gd, 1), 5),
            # a scan over people carrying "seen t so far?" into every later row
            "carried": _running_any(pt.abs(xd - 0.4242) < 1e-9) if kind == "carried" else 0,
        }[kind]
        pm.Normal("y", a[gd] * xd + 5.0 * flag, 1.0, observed=rng.normal(size=60))
    return model


@pytest.mark.parametrize(
    "kind", ["threshold", "membership", "code", "pinned", "reversed", "rolled", "carried"]
)
def test_a_flag_over_all_people_that_no_trial_reaches_is_not_row_local(kind):
    """Review: ``max(X) > 1e5`` or ``any(|X - t| < 1e-9)`` (is person t in the data?) on the
    rows moves every term for one person, but no trial of the row-locality check reached it:
    accepted. A step that reduces over the rows is now refused structurally; a graph that
    cannot be evaluated on a subset of the rows is refused rather than left unchecked."""
    match = "subset of the rows" if kind == "pinned" else "depends on other rows"
    with pytest.raises(ValueError, match=match):
        pdp.PerRowLikelihood(_flagged(kind))


def _censored_per_row_bounds():
    y = np.random.default_rng(0).normal(size=60)
    with pm.Model() as model:
        mu = pm.Normal("mu")
        pm.Censored("y", pm.Normal.dist(mu, 1.0), lower=y - 1.0, upper=y + 1.0, observed=y)
    return model


def _mixture_of_constants():
    y = np.random.default_rng(0).normal(size=60)
    with pm.Model() as model:
        s = pm.HalfNormal("s")
        pm.NormalMixture("y", w=np.array([0.5, 0.5]), mu=np.array([-1.0, 1.0]), sigma=s, observed=y)
    return model


def _mixture_per_row_sd():
    rng = np.random.default_rng(0)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1, shape=2)
        sd = np.abs(rng.normal(size=(60, 1))) + 0.5
        pm.NormalMixture("y", w=np.array([0.3, 0.7]), mu=mu, sigma=sd, observed=rng.normal(size=60))
    return model


def _ordered_probit_per_row_sd():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (60, 3))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=3)
        cut = pm.Normal(
            "cut", np.array([-1.0, 0.0, 1.0]), 1, transform=pm.distributions.transforms.ordered
        )
        pm.OrderedProbit(
            "c",
            eta=pt.dot(x, b),
            cutpoints=cut,
            sigma=np.abs(x[:, 0]) + 0.5,
            observed=rng.integers(0, 4, 60),
        )
    return model


def _per_person_effects():
    rng = np.random.default_rng(0)
    with pm.Model() as model:
        u = pm.Normal("u", 0, 1, shape=60)  # one effect per person, subset with the rows
        pm.Normal("y", u * rng.uniform(-1, 1, 60), 1.0, observed=rng.normal(size=60))
    return model


def _centred_per_person_effects():
    """Second review: an aggregate of parameters (not of data) is row-local."""
    rng = np.random.default_rng(1)
    with pm.Model() as model:
        u, s = pm.Normal("u", shape=60), pm.HalfNormal("s")
        rate = pm.math.exp(0.2 * rng.normal(size=60) + s * (u - u.mean()))
        pm.Poisson("y", rate, observed=rng.poisson(1, 60))
    return model


@pytest.mark.parametrize(
    "build",
    [
        _per_person_effects,
        _centred_per_person_effects,
        _censored_per_row_bounds,
        _mixture_of_constants,
        _mixture_per_row_sd,
        _ordered_probit_per_row_sd,
    ],
)
def test_everyday_models_get_their_own_density_and_gradient(build):
    """Review: a Censored model with per-row bounds was refused (the check moved one input's
    rows past the other's: lower > upper raised); a NormalMixture of constant components was
    refused by the symbolic logp of its first form. Kernels: a per-row sd of shape (n, 1)
    broadcast against two components was split into one column (the gradient kernel crashed),
    and an OrderedProbit's per-row sd the same way (its rows' log density was -inf). Each now
    has the model's own log density, and the unclipped gradient sum is the model's."""
    model = build()
    lik = pdp.PerRowLikelihood(model)
    point = model.initial_point()
    q = lik.ravel(point)
    logp, prior_grad = lik.prior_logp_and_grad(q)
    assert lik.logp_rows(q).sum() + logp == pytest.approx(model.compile_logp()(point), rel=1e-9)
    grad = lik.grad_kernel()(q, np.asarray(1e12))[0] + prior_grad
    want = model.compile_dlogp()(point)  # raveled in the same order as q
    np.testing.assert_allclose(grad, want, rtol=1e-7, atol=1e-9)


def test_pymc_dims_models_are_refused_by_name():
    """Second review: a pymc.dims model's containers are XTensors, which the analysis does not
    read by rows; refused with a message, not by a check that fails on them."""
    import pymc.dims as pmd
    from pytensor.xtensor import as_xtensor

    rng = np.random.default_rng(0)
    with pm.Model(coords={"obs": range(40)}) as model:
        x = pmd.Data("x", rng.normal(size=40), dims="obs")
        b = pmd.Normal("b")
        y = as_xtensor(rng.normal(size=40), dims=("obs",))
        pmd.Normal("y", b * x, 1, observed=y, dims="obs")
    with pytest.raises(ValueError, match="pymc.dims"):
        pdp.PerRowLikelihood(model)


def _custom_check(kind: str, x: np.ndarray) -> pm.Model:
    from pymc.distributions.dist_math import check_parameters

    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        s = pt.as_tensor(x) - b

        def logp(v, s):
            lp = pm.logp(pm.Normal.dist(0, pt.abs(s)), v)
            cond = pt.all(s > 0) if kind == "all" else pt.min(s) > 0
            return check_parameters(lp, cond, msg="s > 0")

        pm.CustomDist("y", s, logp=logp, observed=np.random.default_rng(1).normal(size=x.size))
    return model


def test_a_users_check_over_all_rows_holds_per_row_or_is_refused():
    """Third review: a CustomDist's own ``check_parameters(lp, pt.all(s > 0))`` reached the
    kernels as one condition for every row (one person with s_5 < 0 turned all 60 terms -inf,
    accepted). ``all`` of a per-row condition now holds per row; ``min(s) > 0``, which has lost
    the rows, is refused by name."""
    _assert_one_person_moves_the_sums_within_their_bound(lambda x: _custom_check("all", x))
    x = np.random.default_rng(1).uniform(2.0, 3.0, 60)
    with pytest.raises(ValueError, match="holds for all of them at once"):
        pdp.PerRowLikelihood(_custom_check("min", x))


def test_a_condition_that_flips_below_is_not_row_local():
    """Third review: integer and float rows were only moved upwards, so ``all(c >= 1)`` on
    counts of 1 and 2 was accepted, and refused for the neighbour with a count of 0: acceptance
    revealed that row. Rows are now moved downwards too."""
    rng = np.random.default_rng(0)
    c = rng.integers(1, 3, 40)
    with pm.Model():
        a = pm.Normal("a", 0, 1)
        p = pm.math.sigmoid(a) * pt.switch(pt.all(pt.as_tensor(c) >= 1), 1.0, 0.5)
        pm.Binomial("k", n=3, p=p, observed=rng.integers(0, 3, 40))
        with pytest.raises(ValueError, match="depends on other rows"):
            _penalty()


@pytest.mark.parametrize("errors", ["default", "raise"])
def test_the_warm_start_is_silent_on_a_row_that_overflows(errors):
    """Review: evaluated in NumPy, the warm start's kernels warned ``overflow encountered in
    reduce`` on one row whose squares overflow (finite, 9.4e154), and raised under a user's
    ``np.seterr(over="raise")``: a side channel of that row. Numba's kernels never warned."""
    rng = np.random.default_rng(5)
    x = np.column_stack([np.ones(200), rng.uniform(-1, 1, (200, 2))])
    x[7, 1:] = 9.378826020546213e154
    with pm.Model():
        b = pm.Normal("b", 0, 2.5, shape=3)
        pm.Bernoulli("k", logit_p=pm.math.dot(x, b), observed=rng.integers(0, 2, 200))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with np.errstate(over="raise" if errors == "raise" else "warn"):
                pdp.DPLaplace(epsilon=1.0, grad_clip=2.0, noise_seed=1)
    # (the fit's own warning where it is no narrower than the prior is post-processing of its
    # releases, as its draws are: not a channel of the row)
    released = "directions of the private fit the draws are at least as wide as the prior"
    assert [str(w.message) for w in caught if released not in str(w.message)] == []


def test_kernels_bound_non_finite_rows():
    """Second line of defence: a row whose term is -inf or NaN at some parameter value
    contributes a data-independent value inside the clip bound (ratio) or zero (gradient)."""
    x = np.array([0.2, 0.4, 0.9, 0.5])
    with pm.Model() as model:
        upper = pm.Uniform("upper", 0.5, 2.0)
        pm.Uniform("x", 0.0, upper, observed=x)  # support depends on the parameter
    lik = pdp.PerRowLikelihood(model)
    q_in = lik.ravel({"upper_interval__": np.array(1.0)})
    q_out = lik.ravel({"upper_interval__": np.array(-3.0)})
    rows_out = lik.logp_rows(q_out)
    assert not np.all(np.isfinite(rows_out))  # the row at 0.9 is outside [0, upper]
    bound = 0.3
    total, _ = lik.ratio_kernel()(q_out, q_in, np.asarray(bound))
    assert np.isfinite(total) and abs(total) <= len(x) * bound
    back, _ = lik.ratio_kernel()(q_in, q_out, np.asarray(bound))
    assert np.isfinite(back) and abs(back) <= len(x) * bound
    same, _ = lik.ratio_kernel()(q_out, q_out, np.asarray(bound))  # -inf - -inf = NaN -> 0
    assert same == 0.0
    g, _ = lik.grad_kernel()(q_out, np.asarray(bound))
    assert np.all(np.isfinite(g)) and np.linalg.norm(g) <= len(x) * bound


# ----------------------------------------------------------------- outputs and PyMC calls
def test_person_coordinates_are_not_released():
    """A per-person effect has the people's dim: its coordinates (names, ids) would publish who
    is in the data."""
    rng = np.random.default_rng(1)
    ids = [f"patient-{i}" for i in range(30)]
    with pm.Model(coords={"person": ids}) as model:
        tau = pm.HalfNormal("tau", 1.0)
        u = pm.Normal("u", 0, tau, dims="person")
        pm.Normal("y", u, 1.0, observed=rng.normal(size=30), dims="person")
        step = pdp.DPPenalty(epsilon=5.0, llr_clip=5.0, proposal_scale=0.05, proposal="ocu")
    idata = _run(model, step)
    assert list(idata.posterior.coords["person"].values) == list(range(30))


def test_predictions_on_new_public_covariates(data):
    X, y = data
    with pm.Model() as model:
        Xd = pm.Data("X", X)
        beta = pm.Normal("beta", 0, 2, shape=D)
        pm.Bernoulli("y", logit_p=Xd @ beta, observed=y, shape=Xd.shape[0])
        step = _penalty()
    idata = _run(model, step)
    new = np.random.default_rng(9).uniform(-1, 1, size=(7, D))
    pred = pdp.posterior_predictive(idata, model, new_data={"X": new}, random_seed=1)
    assert set(pred.children) <= {"predictions", "predictions_constant_data"}
    assert pred.predictions["y"].shape == (2, 20, 7)
    np.testing.assert_array_equal(model["X"].get_value(), X)  # the model's data is restored
    with pytest.raises(ValueError, match="would read private data"):
        pdp.posterior_predictive(idata, model, new_data={})  # the private X is still bound
    with pytest.raises(ValueError, match="not pm.Data"):
        pdp.posterior_predictive(idata, model, new_data={"Z": new})


def test_predictions_refuse_covariates_embedded_as_arrays(data):
    X, y = data
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 2, shape=D)
        pm.Bernoulli("y", logit_p=X @ beta, observed=y)
        step = _penalty()
    idata = _run(model, step)
    with pytest.raises(ValueError, match="would read private data"):
        pdp.posterior_predictive(idata, model, new_data={})


# ----------------------------------------------------------------- arguments
@pytest.mark.parametrize(
    "kw,error",
    [
        (dict(epsilon="1"), TypeError),
        (dict(epsilon=True), TypeError),
        (dict(epsilon=math.nan), ValueError),
        (dict(epsilon=math.inf), ValueError),
        (dict(epsilon=1.0, delta="0.001"), TypeError),
        (dict(epsilon=1.0, delta=math.nan), ValueError),
        (dict(noise_multiplier=True), TypeError),
        (dict(epsilon=1.0, noise_seed=1.5), TypeError),
    ],
)
def test_budget_arguments_must_be_real_numbers(data, kw, error):
    X, y = data
    with pm.Model():
        beta = pm.Normal("beta", 0, 2, shape=D)
        pm.Bernoulli("y", logit_p=X @ beta, observed=y)
        name = next(iter(kw)) if len(kw) == 1 else list(kw)[1]
        with pytest.raises(error, match=name):
            pdp.DPPenalty(llr_clip=1.0, proposal_scale=0.1, **kw)


def test_default_delta_is_small_and_recorded(data):
    X, y = data
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 2, shape=D)
        pm.Bernoulli("y", logit_p=X @ beta, observed=y)
        step = _penalty()
    assert step.delta == 1e-6 < 0.1 / N  # 0.1 / n was the old default: 8e-4 here
    idata = _run(model, step)
    assert idata.attrs["pymc_dp_delta"] == 1e-6
    assert "min(1e-6, 1 / (10 n))" in pdp.privacy_report(idata).delta_rule


# ----------------------------------------------------------------- noise
def test_released_values_carry_no_low_order_bits():
    """Snapped releases: every output is an integer multiple of the grid sigma / 2^20, whatever
    the input, so the floating-point pattern of x + noise cannot reveal x (Mironov 2012)."""
    noise = NoiseSource(4)
    sens, s = 0.37, 3.0
    sigma = noise.gaussian_std(sens, s)
    grid = sigma / SNAP_GRID
    for x in (0.1, 0.1 + 1e-12, 1234.5678, -7.0):
        out = np.array([noise.gaussian(x, sens, s) for _ in range(200)])
        np.testing.assert_array_equal(out, grid * np.rint(out / grid))  # grid * an integer
    # the multiplier the accountant sees is exact: rounding widens sigma by a factor 1 + O(2^-20)
    assert sigma == pytest.approx(s * sens * (1 + s / SNAP_GRID), rel=1e-9)
    assert sigma > s * sens


def test_minibatches_come_from_the_secret_noise(data, monkeypatch):
    """Subsampling amplifies privacy only if nobody knows the batches: they were drawn from the
    generator that random_seed reproduces."""
    X, y = data
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 2, shape=D)
        pm.Bernoulli("y", logit_p=X @ beta, observed=y)
        step = pdp.DPMinibatchPenalty(batch_size=20, llr_clip=2.0, proposal_scale=0.05, epsilon=2.0)
    used = []
    real = type(step.likelihood).draw_batch

    def spy(self, rng, *args):
        used.append(rng)
        return real(self, rng, *args)

    monkeypatch.setattr(type(step.likelihood), "draw_batch", spy)
    _run(model, step, chains=1)
    assert used and all(rng is not step.rng for rng in used)
    assert all(rng is step.chain.noise.generator for rng in used[-5:])


# ---- steps that share compiled kernels (review of model_likelihood, round 3) ----------------


def _shared_model(n=50, seed=0):
    rng = np.random.default_rng(seed)
    with pm.Model() as model:
        x = pm.Data("x", rng.normal(size=n))
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", mu, 1.0, observed=x)
    return model, x


def _fixed(model, **kw):
    with model:
        return pdp.DPPenalty(noise_multiplier=1.0, proposal_scale=0.1, **kw)


def test_a_step_sharing_kernels_still_refuses_start_values_that_read_data():
    """A live step on the model must not let a later one skip the analysis: a start value
    set to the private mean was released as every draw (found in review)."""
    model, x = _shared_model()
    first = _fixed(model, llr_clip=1.0)
    model.set_initval(model["mu"], x.mean())
    with pytest.raises(ValueError, match="initial value of free variable 'mu' reads private"):
        _fixed(model, llr_clip=1.0)
    assert first.likelihood.n_rows == 50


def test_a_plain_shared_array_changed_builds_new_kernels_and_the_old_step_refuses():
    """An array the likelihood reads that is not pm.Data: a later step gets the new rows (the
    old kernels gave the old ones, and skipped the finiteness check), the old step refuses."""
    rng = np.random.default_rng(0)
    xs = pytensor.shared(rng.normal(size=50), name="xs")
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", mu * xs, 1.0, observed=rng.normal(size=50))
    q0, q1, big = np.array([0.0]), np.array([1.0]), np.asarray(1e9)
    first = _fixed(model, llr_clip=1e9)
    before = first.likelihood.ratio_kernel()(q1, q0, big)[0]
    xs.set_value(rng.normal(size=50))
    second = _fixed(model, llr_clip=1e9)
    assert second.likelihood.ratio_kernel() is not first.likelihood.ratio_kernel()
    assert second.likelihood.ratio_kernel()(q1, q0, big)[0] != before
    with pytest.raises(ValueError, match="data changed.*xs"):
        first.check_data()
    xs.set_value(np.full(50, np.nan))
    with pytest.raises(ValueError, match="NaN or inf"):
        _fixed(model, llr_clip=1e9)


def test_shared_kernels_called_from_threads_keep_each_steps_bound():
    """Two steps on one model share a kernel; called at once from threads, one step received
    the other's unclipped sum (4e4 against its bound 0.02) before each kernel took a lock."""
    import threading

    n = 20_000
    model, _ = _shared_model(n=n)
    tight, loose = _fixed(model, llr_clip=1e-6), _fixed(model, llr_clip=1e9)
    kernel = tight.likelihood.ratio_kernel()
    assert loose.likelihood.ratio_kernel() is kernel
    q0 = np.array([0.0])
    worst = []

    def call(q, bound, keep):
        for _ in range(5000):
            total = float(kernel(q, q0, np.asarray(bound))[0])
            if keep:
                worst.append(abs(total))

    threads = [
        threading.Thread(target=call, args=(np.array([0.5]), 1e-6, True)),
        threading.Thread(target=call, args=(np.array([-2.0]), 1e9, False)),
    ]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: the race shows within a few calls
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert len(worst) == 5000
    assert max(worst) <= n * 1e-6 * (1 + 1e-9)


def test_a_deterministic_made_private_after_a_step_is_kept_out_of_the_next():
    """A second step adopts kernels, never the first one's analysis: a Deterministic reading a
    plain shared array that became the private rows was released whole (second review)."""
    rng = np.random.default_rng(0)
    y = rng.normal(size=50)
    offsets = pytensor.shared(np.zeros(50), name="offsets")
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.Deterministic("d", mu + offsets)
        pm.Normal("y", mu, 1, observed=y)
    first = _fixed(model, llr_clip=1.0, compile_kwargs={"mode": "FAST_COMPILE"})
    offsets.set_value(y.copy())
    with pytest.raises(ValueError, match="data changed.*offsets"):
        first.check_data()
    second = _fixed(model, llr_clip=1.0, compile_kwargs={"mode": "FAST_COMPILE"})
    assert second.likelihood.graph.private_deterministics == ("d",)
    idata = _run(model, second, draws=5, tune=0, chains=1)
    assert "d" not in idata.posterior


def test_a_start_value_set_after_the_step_was_built_is_refused_at_the_run():
    """``set_initval`` to the private mean after the step (or its renewal) was built: the run
    started there and released it (second review; before the shared kernels too)."""
    model, x = _shared_model()
    step = _fixed(model, llr_clip=1.0, compile_kwargs={"mode": "FAST_COMPILE"})
    model.set_initval(model["mu"], x.mean())
    with pytest.raises(ValueError, match="initial value of free variable 'mu' reads private"):
        _run(model, step, draws=5, tune=0, chains=1)
    with pytest.raises(ValueError, match="initial value of free variable 'mu' reads private"):
        _run(model, step.renew(), draws=5, tune=0, chains=1)


def test_a_forked_chain_process_can_call_a_kernel_another_thread_held():
    """PyMC forks chain processes; a kernel's lock held by another thread at the fork would
    never be released in the child (second review: 20 of 20 children hung)."""
    import os
    import signal
    import threading
    import time

    model, _ = _shared_model(n=2000)
    step = _fixed(model, llr_clip=1.0, compile_kwargs={"mode": "FAST_COMPILE"})
    kernel = step.likelihood.ratio_kernel()
    q0, q1, bound = np.array([0.0]), np.array([0.5]), np.asarray(1.0)
    kernel(q1, q0, bound)  # compiled before the fork: a child that waits is waiting on the lock
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            kernel(q1, q0, bound)

    thread = threading.Thread(target=loop)
    thread.start()
    hung = 0
    try:
        for _ in range(10):
            time.sleep(0.01)
            pid = os.fork()
            if pid == 0:  # the child: a hang is killed by the alarm; never back into pytest
                code = 1
                try:
                    signal.alarm(5)
                    kernel(q1, q0, bound)
                    code = 0
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            hung += os.WIFSIGNALED(status) or os.WEXITSTATUS(status) != 0
    finally:
        stop.set()
        thread.join()
    assert hung == 0


def test_a_variable_added_after_the_step_was_built_is_refused_at_the_run():
    """A Deterministic of the private rows added after the step was built was released (its
    analysis predates it), and a Potential added then was silently ignored (third review)."""
    model, x = _shared_model()
    step = _fixed(model, llr_clip=1.0, compile_kwargs={"mode": "FAST_COMPILE"})
    with model:
        pm.Deterministic("leak", model["mu"] * 0 + x.sum())
    with pytest.raises(ValueError, match="model changed.*leak"):
        _run(model, step, draws=5, tune=0, chains=1)
