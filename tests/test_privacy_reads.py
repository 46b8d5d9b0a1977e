"""Privacy, round 3 (issue 20): private wherever it is read, one-shot steps, the planner's checks,
no crash after a release.

Every test here failed on the code before the fix (2d26258): either data read outside the
likelihood was treated as public, a spent step ran again, the planner computed from a prior that
reads private data, or the warm start crashed after its releases.
"""

from __future__ import annotations

import traceback
import warnings

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pymc_dp as pdp
from pymc_dp.graph import analyse
from pymc_dp.noise import NoiseSource
from pymc_dp.tuning.warm_start import WarmStartError, warm_start

N = 80
RUN = dict(draws=6, tune=2, chains=2, cores=1, progressbar=False, compute_convergence_checks=False)


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(20)
    X = rng.uniform(-1, 1, size=(N, 2))
    y = X @ np.array([1.0, -0.5]) + rng.normal(size=N)
    z = 3.0 + rng.normal(size=N)  # another column of the same people
    return X, y, z


def _penalty(**kw):
    kw.setdefault("epsilon", 1.0)
    return pdp.DPPenalty(llr_clip=3.0, proposal_scale=0.1, **kw)


def _floats(idata):
    for node in idata.subtree:
        for var in node.dataset.variables.values():
            arr = np.asarray(var.values)
            if arr.dtype.kind == "f":
                yield arr.ravel()


# ------------------------------------------------------------- 1. private wherever it is read
def test_a_potential_over_a_private_column_is_a_counted_likelihood_term(rows):
    """A pm.Data column read only by a per-row pm.Potential (a custom likelihood) was public:
    the free variable only the potential reads was 'prior-only' and moved exactly, so its
    posterior was the exact posterior of that column whatever epsilon."""
    X, y, z = rows
    with pm.Model() as model:
        Xd, zd = pm.Data("X", X), pm.Data("z", z)
        b = pm.Normal("b", 0, 2, shape=2)
        mu = pm.Normal("mu", 0, 5)
        pm.Potential("z_lik", pm.logp(pm.Normal.dist(mu, 1.0), zd))
        pm.Normal("y", Xd @ b, 1.0, observed=y)
    graph = analyse(model)
    assert [p.name for p in graph.potentials] == ["z_lik"]
    assert set(graph.likelihood_vars) == {"b", "mu"}  # mu is moved by the noisy test
    assert any(i.label == "pm.Data 'z'" and i.row_axis == 0 for i in graph.row_inputs)
    with model:
        step = _penalty()
    assert step.likelihood.likelihood_mask.all()
    # the potential's rows are clipped like the observed ones: moving one person's z by any
    # amount moves the clipped ratio sum by at most the bound
    lik = step.likelihood
    q0, q1 = lik.ravel(model.initial_point()), lik.ravel(model.initial_point()) + 0.3
    kernel = lik.ratio_kernel()
    bound = np.asarray(3.0)  # a scalar (a vector here worked by accident)
    base = float(np.asarray(kernel(q1, q0, bound)).ravel()[0])
    with model:
        z2 = z.copy()
        z2[0] = 1e6
        pm.set_data({"z": z2})
    moved = pdp.PerRowLikelihood(model).ratio_kernel()
    with model:
        pm.set_data({"z": z})
    other = float(np.asarray(moved(q1, q0, bound)).ravel()[0])
    assert abs(other - base) <= 2 * 3.0 * np.abs(q1 - q0).sum() + 1e-9


def test_a_custom_likelihood_written_as_a_per_row_potential_alone_runs(rows):
    """No observed variable, one per-row potential: a supported custom likelihood."""
    _, _, z = rows
    with pm.Model():
        zd = pm.Data("z", z)
        mu = pm.Normal("mu", 0, 10)
        pm.Potential("lik", pm.logp(pm.Normal.dist(mu, 1.0), zd))
        step = pdp.DPLaplace(epsilon=8.0, grad_clip=4.0, noise_seed=1)
        idata = pdp.sample(step=step, **RUN)
    assert step.n_rows == N
    assert np.isfinite(idata.posterior["mu"].values).all()
    assert pdp.privacy_report(idata).epsilon == pytest.approx(8.0, rel=1e-6)


def test_a_summed_potential_over_private_data_is_refused(rows):
    _, y, z = rows
    with pm.Model() as model:
        zd = pm.Data("z", z)
        mu = pm.Normal("mu", 0, 5)
        pm.Potential("z_total", pm.logp(pm.Normal.dist(mu, 1.0), zd).sum())
        pm.Normal("y", mu, 1.0, observed=y)
    with model, pytest.raises(ValueError, match="Potential 'z_total' reads private data.*per row"):
        _penalty()


def test_a_deterministic_of_a_container_the_likelihood_does_not_read_is_not_returned(rows):
    """pm.Data 'z' reached no observed variable, so it was public and its mean was released
    exactly in the posterior; fitted values X @ b keep working but are not returned."""
    X, y, z = rows
    with pm.Model():
        Xd, zd = pm.Data("X", X), pm.Data("z", z)
        grid = pm.Data("grid", np.linspace(-1, 1, 5))
        b = pm.Normal("b", 0, 2, shape=2)
        pm.Deterministic("z_mean", zd.mean() + 0 * b[0])
        pm.Deterministic("fitted", Xd @ b)
        pm.Deterministic("curve", grid * b[0])
        pm.Normal("y", Xd @ b, 1.0, observed=y)
        step = _penalty(public=["grid"])
        idata = pdp.sample(step=step, **RUN)
    assert set(idata.posterior.data_vars) == {"b", "curve"}
    for arr in _floats(idata):
        assert not np.isclose(arr, z.mean(), rtol=0, atol=1e-12).any()


def test_a_prior_reading_a_container_not_in_the_likelihood_is_refused(rows):
    X, y, z = rows
    with pm.Model() as model:
        zd = pm.Data("z", z)
        mu = pm.Normal("mu", zd.mean(), 1.0)
        pm.Normal("y", mu, 1.0, observed=y)
    with model, pytest.raises(ValueError, match="prior of free variable 'mu'.*pm.Data 'z'"):
        _penalty()
    with pm.Model() as model:  # a non-scalar container of public constants: declare it
        m0 = pm.Data("m0", np.zeros(2))
        b = pm.Normal("b", m0, 2.0)
        pm.Normal("y", pm.Data("X", X) @ b, 1.0, observed=y)
    with model, pytest.raises(ValueError, match="public="):
        _penalty()
    with model:
        _penalty(public=["m0"])


def test_initial_values_computed_from_private_data_are_refused(rows):
    """initval=y.mean(): chains (and the private Newton walk) started there, and a rejected
    first move released it exactly."""
    _, y, z = rows
    with pm.Model() as model:
        yd, zd = pm.Data("yd", y), pm.Data("z", z)
        mu = pm.Normal("mu", 0, 5, initval=zd.mean())
        pm.Normal("y", mu, 1.0, observed=yd)
    with model, pytest.raises(ValueError, match="initial value of free variable 'mu'"):
        _penalty()
    with model, pytest.raises(ValueError, match="initial value.*'mu'"):
        pdp.plan(epsilon=1.0, llr_clip=3.0)


def test_initvals_given_to_sample_that_copy_private_data_are_refused(rows):
    X, y, _ = rows
    with pm.Model():
        Xd = pm.Data("X", X)
        b = pm.Normal("b", 0, 2, shape=2)
        u = pm.Normal("u", 0, 5, shape=N)  # a per-person effect
        pm.Normal("y", Xd @ b + 0.01 * u, 1.0, observed=y)
        step = _penalty()
        with pytest.raises(ValueError, match="`initvals` for 'u'"):
            pdp.sample(step=step, initvals={"u": y.copy()}, **RUN)
        # a float32 copy of some rows, shuffled, tiled to the shape
        part = np.tile(y[::-2].astype(np.float32), 3)[:N]
        with pytest.raises(ValueError, match="`initvals` for 'u'"):
            pdp.sample(step=step, initvals={"u": part}, **RUN)
        assert not step.spent  # refused before any chain started
        pdp.sample(step=step, initvals={"u": np.zeros(N)}, **RUN)


# ------------------------------------------------------------------ 5. a step is spent once
@pytest.fixture(scope="module")
def logistic(rows):
    X, y, _ = rows
    with pm.Model() as model:
        Xd = pm.Data("X", X)
        b = pm.Normal("b", 0, 2, shape=2)
        pm.Bernoulli("yb", logit_p=Xd @ b, observed=(y > 0).astype(int))
    return model, X


def test_a_step_refuses_a_second_run(logistic):
    model, _ = logistic
    with model:
        step = _penalty()
        first = pdp.sample(step=step, **RUN)
        assert step.spent
        with pytest.raises(pdp.PrivacyBudgetError, match="spent once"):
            pdp.sample(step=step, **RUN)
        # plain pm.sample, in this process and in forked chain processes
        for cores in (1, 2):
            with warnings.catch_warnings(), pytest.raises(Exception, match="spent once"):
                warnings.simplefilter("ignore")
                pm.sample(draws=4, tune=1, chains=2, cores=cores, step=step, progressbar=False)
    assert pdp.privacy_report(first).epsilon == pytest.approx(1.0, rel=1e-6)


def test_plain_pm_sample_twice_in_chain_processes_is_refused(logistic):
    """The chains ran in forked processes, whose copies of the step the parent never saw."""
    model, _ = logistic
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = _penalty(chains=2)
        pm.sample(draws=4, tune=1, chains=2, cores=2, step=step, progressbar=False)
        assert step.spent
        with pytest.raises(Exception, match="spent once"):
            pm.sample(draws=4, tune=1, chains=2, cores=2, step=step, progressbar=False)


def test_renew_keeps_the_kernels_with_a_budget_of_its_own(logistic):
    model, _ = logistic
    with model:
        step = _penalty()
        pdp.sample(step=step, **RUN)
        again = step.renew()
        assert again.likelihood is step.likelihood and not again.spent
        idata = pdp.sample(step=again, **RUN)
    assert pdp.privacy_report(idata).epsilon == pytest.approx(1.0, rel=1e-6)


def test_a_laplace_fit_may_be_drawn_from_again(logistic):
    """DPLaplace's chains are post-processing of its one release: drawing again spends nothing."""
    model, _ = logistic
    with model:
        step = pdp.DPLaplace(epsilon=2.0, grad_clip=2.0)
        pdp.sample(step=step, **RUN)
        pdp.sample(step=step, **RUN)
        assert not step.spent


@pytest.mark.parametrize("change", ["fewer_rows", "inf_row"])
def test_data_changed_after_the_step_was_built_is_refused(logistic, change):
    """pm.set_data after the step was built: another row count made a minibatch step read out
    of bounds; an inf row bypassed the finiteness check."""
    model, X = logistic
    with model:
        step = pdp.DPMinibatchPenalty(
            epsilon=1.0, llr_clip=2.0, proposal_scale=0.1, batch_size=10, tempering=1.0
        )
        new = X[:40] if change == "fewer_rows" else np.where(np.arange(N)[:, None] == 3, np.inf, X)
        pm.set_data({"X": new})
        try:
            with pytest.raises(ValueError, match="data changed since DPMinibatchPenalty was built"):
                pdp.sample(step=step, **RUN)
            with warnings.catch_warnings(), pytest.raises(Exception, match="data changed"):
                warnings.simplefilter("ignore")
                pm.sample(draws=4, tune=1, chains=1, step=step, progressbar=False)
            assert not step.spent
        finally:
            pm.set_data({"X": X})


# ------------------------------------------------------ 6. the planner refuses what a step does
def test_the_planner_runs_the_steps_checks(rows):
    _, y, z = rows
    with pm.Model() as model:
        zd = pm.Data("z", z)
        mu = pm.Normal("mu", 0, zd.std())  # a prior scale read from the data
        pm.Normal("y", mu, 1.0, observed=y)
    with model, pytest.raises(ValueError, match="prior of free variable 'mu'"):
        pdp.plan(epsilon=1.0, llr_clip=3.0)
    with model, pytest.raises(ValueError, match="prior of free variable 'mu'"):
        _penalty()


# ------------------------------------------------------ 7. no internal crash after a release
@pytest.fixture(scope="module")
def vague_scale():
    """A Normal with unknown sd under a very vague prior on the sd."""
    y = np.random.default_rng(4).normal(3.0, 2.0, size=200)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1e3)
        s = pm.HalfNormal("s", 1e6)
        pm.Normal("y", mu, s, observed=y)
    return model, pdp.PerRowLikelihood(model)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    mu0=st.floats(-1e6, 1e6),
    log_s0=st.floats(-800.0, 800.0),
    seed=st.integers(0, 2**31),
    clip=st.sampled_from([1e-3, 1.0, 1e3]),
)
def test_the_warm_start_ends_in_a_fit_or_a_clear_error(vague_scale, mu0, log_s0, seed, clip):
    """Fuzzed public starting points and clip bounds: a travel step that overflowed crashed
    with UnboundLocalError (or a LinAlgError) after the noisy releases were made."""
    _, lik = vague_scale
    try:
        fit = warm_start(
            lik,
            grad_clip=clip,
            mu=0.5,
            noise=NoiseSource(seed),
            start=np.array([mu0, log_s0]),
        )
    except WarmStartError as err:
        assert "budget is spent" in str(err)
        return
    assert np.all(np.isfinite(fit.mean)) and np.all(np.isfinite(fit.posterior_cov))
    np.linalg.cholesky(fit.posterior_cov)  # draws can be made


def test_a_step_whose_warm_start_fails_names_the_budget_spent():
    y = np.random.default_rng(4).normal(3.0, 2.0, size=200)
    with pm.Model():
        mu = pm.Normal("mu", 0, 1e3)
        s = pm.HalfNormal("s", 1e6, initval=np.exp(700.0))  # a public start where exp overflows
        pm.Normal("y", mu, s, observed=y)
        with pytest.raises(WarmStartError, match=r"epsilon = 1 at delta"):
            pdp.DPLaplace(epsilon=1.0, grad_clip=2.0, noise_seed=0)


# ------------------------------------------ row-locality where rounding or rewrites hid it
def test_an_aggregate_below_the_rounding_tolerance_is_not_row_local():
    """Found by the fuzz test: a per-row potential centred by the private mean, on a scale where
    the other rows' terms moved by 1e-12 (under the old absolute tolerance)."""
    y = 1234.5678 + 0.0013 * np.arange(21)
    with pm.Model():
        y_data = pm.Data("y_data", y)
        intercept = pm.Normal("intercept", 0, 5)
        pm.Normal("y_obs", intercept, 1.0, observed=y_data)
        pm.Potential("pot_agg", -0.5 * ((y_data - y_data.mean() - intercept) / 1000) ** 2)
        with pytest.raises(ValueError, match="depends on other rows"):
            _penalty()


@pytest.mark.parametrize("transposed", [False, True])
def test_numpy_covariates_centred_inside_the_model_are_not_row_local(transposed):
    """Found by the fuzz test: PyMC's rewrites fold X - X.mean() of an embedded NumPy array into
    a new constant, whose per-row terms look row-local; the model's own graph shows the mean."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(21, 2)), rng.normal(size=21)
    with pm.Model():
        b = pm.Normal("b", 0, 1, shape=2)
        if transposed:
            Xt = pt.as_tensor(X.T.copy())
            mu = pm.math.dot(b, Xt - Xt.mean(axis=1, keepdims=True))
        else:
            Xc = pt.as_tensor(X)
            mu = pm.math.dot(Xc - Xc.mean(axis=0, keepdims=True), b)
        pm.Normal("y", mu, 1.0, observed=y)
        with pytest.raises(ValueError, match="depends on other rows"):
            _penalty()


# ------------------------------------------------- found by the independent review (round 3)
def _count_over(A, limit=95):
    return pt.cast(A[A > limit].shape[0], "float64")


def test_shapes_of_computed_nodes_are_reads_of_their_values():
    """F1: the walk skipped every Shape op, so X[X > 95].shape[0] (a count of people) was
    public: released by a deterministic, accepted in a summed potential and an initval."""
    rng = np.random.default_rng(0)
    age, y = np.round(rng.uniform(20, 99, 20)), rng.normal(size=20)
    with pm.Model() as model:
        A = pm.Data("age", age)
        k = pm.Normal("k", 0, 10)
        pm.Normal("y", k * (A - 50) / 50, 1.0, observed=y)
        pm.Deterministic("n_over_95", _count_over(A))
        pm.Deterministic("n_rows", pt.cast(A.shape[0], "float64") + 0 * k)  # public: n
    assert analyse(model).private_deterministics == ("n_over_95",)
    with pm.Model() as model:
        A = pm.Data("age", age)
        k = pm.Normal("k", 0, 10, initval=_count_over(A) + 0.5)
        pm.Normal("y", k * (A - 50) / 50, 1.0, observed=y)
    with model, pytest.raises(ValueError, match="initial value of free variable 'k'"):
        _penalty()


def test_an_integer_per_row_potential_is_a_likelihood_term():
    """F2: counts held in a NumPy int array, one per person, in a pm.Potential: the potential
    was summed into the prior and its parameter got exact moves."""
    rng = np.random.default_rng(0)
    counts = rng.poisson(7.3, 50)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu, 1.0, observed=rng.normal(size=50))
        lam = pm.LogNormal("lam", 2, 2)
        pm.Potential("counts_lik", pm.logp(pm.Poisson.dist(lam), counts))
    graph = analyse(model)
    assert [p.name for p in graph.potentials] == ["counts_lik"]
    assert set(graph.likelihood_vars) == {"mu", "lam_log__"}


def test_data_inside_a_scan_body_is_seen():
    """F3: the walk did not enter scan bodies: a deterministic released x exactly and a per-row
    potential over z became an exact prior term."""
    rng = np.random.default_rng(0)
    x, z = 1234.5678 + 0.0013 * np.arange(30), rng.normal(3.2, 1.0, 30)
    with pm.Model() as model:
        X = pm.Data("x", x)
        b = pm.Normal("b", 0, 1)
        pm.Normal("y", b * (X - 1234) / 10, 1.0, observed=rng.normal(size=30))
        xc = pt.as_tensor(x)
        fitted = pytensor.scan(
            lambda i, bb: bb * xc[i],
            sequences=[pt.arange(30)],
            non_sequences=[b],
            return_updates=False,
        )
        pm.Deterministic("fitted", fitted)
    assert analyse(model).private_deterministics == ("fitted",)
    with pm.Model() as model:
        theta = pm.Normal("theta", 0, 100)
        pm.Normal("y", 0.0, 1.0, observed=rng.normal(size=30))
        zc = pt.as_tensor(z)
        terms = pytensor.scan(
            lambda i, t: pm.logp(pm.Normal.dist(t, 1.0), zc[i]),
            sequences=[pt.arange(30)],
            non_sequences=[theta],
            return_updates=False,
        )
        pm.Potential("z_lik", terms)
    with model, pytest.raises(ValueError, match="inside a scan body"):
        _penalty()


def test_copies_of_some_private_values_are_private():
    """F4: only whole arrays (and transposes) were matched by value: beta[1] * X[:, 1] and a
    raw pytensor.shared copy of X released the covariates exactly."""
    n = 30
    X = np.column_stack([np.ones(n), (1234.5678 + 0.0013 * np.arange(n)) / 2000])
    y = (np.random.default_rng(0).uniform(size=n) < 0.5).astype(int)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 2.5, shape=2)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
        pm.Deterministic("effect", beta[1] * X[:, 1])
        pm.Deterministic("fit_raw", pm.math.dot(pytensor.shared(X), beta))
        pm.Deterministic("odds", pt.exp(beta))  # public
    assert set(analyse(model).private_deterministics) == {"effect", "fit_raw"}


@pytest.mark.parametrize("scaling", ["max", "winsorised", "one_person"])
def test_scaling_by_a_data_dependent_extreme_is_not_row_local(scaling):
    """F5: X / X.max() (and a quantile, or one person's value) passed: the check swapped a few
    public pairs of rows and rarely hit the person holding the max. Half the people now change
    at once, and one person is moved far off."""
    rng = np.random.default_rng(0)
    n = 2000
    x, y = rng.uniform(0, 1, n), rng.normal(size=n)
    scale = {
        "max": lambda X: X / X.max(),
        "winsorised": lambda X: pt.minimum(X, pt.sort(X)[int(0.99 * n)]),
        "one_person": lambda X: X / X[17],
    }[scaling]
    with pm.Model():
        X = pm.Data("x", x)
        b = pm.Normal("b", 0, 10)
        pm.Normal("y", b * scale(X), 1.0, observed=y)
        with pytest.raises(ValueError, match="depends on other rows"):
            _penalty()


@pytest.mark.parametrize("index", ["min", "max"])
def test_group_codes_shifted_by_their_extreme_are_not_row_local(index):
    """A review: ``z[g - g.min()]`` on integer codes passed, since no swap of people moves a
    minimum that several people share; one replaced person (code 0) would shift every row's
    group. Everyone but one person changing at once moves it."""
    rng = np.random.default_rng(1)
    g = rng.integers(1, 4, 300)
    with pm.Model():
        gd = pm.Data("g", g)
        z = pm.Normal("z", 0, 1, shape=4)
        shifted = gd - gd.min() if index == "min" else gd.max() - gd
        pm.Bernoulli("y", logit_p=z[shifted], observed=rng.binomial(1, 0.5, 300))
        with pytest.raises(ValueError, match="depends on other rows"):
            _penalty()


def test_plan_and_analyse_print_no_values_at_high_verbosity():
    """F7: pdp.plan and pdp.analyse ran outside the data boundary: PyTensor's error listed
    'Inputs values' of arrays of up to 5 elements."""
    y = 1234.5678 + 0.0013 * np.arange(5)
    with pytensor.config.change_flags(exception_verbosity="high"), pm.Model() as model:
        yd = pm.Data("y", y)
        b = pm.Normal("b", 0, 1, shape=4)
        pm.Normal("obs", b * yd, 1.0, observed=yd)  # (4,) against (5,): PyTensor fails
        for call in (lambda: pdp.plan(epsilon=1.0, llr_clip=1.0), lambda: pdp.analyse(model)):
            with pytest.raises(Exception) as info:
                call()
            text = "".join(traceback.format_exception(info.value))
            assert "1234.5" not in text and "Inputs values" not in text


def test_labels_of_a_per_person_dim_are_not_released():
    """F8: the coordinates of a per-person random effect's dim kept the people's ids."""
    ids = [f"patient-{i}" for i in range(20)]
    with pm.Model(coords={"person": ids}):
        mu = pm.Normal("mu", 0, 1)
        u = pm.Normal("u", 0, 1, dims="person")
        pm.Normal("y", mu + u, 1.0, observed=np.random.default_rng(0).normal(size=20))
        idata = pdp.sample(step=pdp.DPLaplace(epsilon=1.0, grad_clip=5.0), **RUN)
    assert list(idata.posterior.coords["person"].values) == list(range(20))


def test_a_flat_prior_does_not_crash_the_warm_start_after_its_releases():
    """F9: DisconnectedInputError from the prior's Hessian, raised after the noisy releases."""
    x = np.random.default_rng(0).uniform(-1, 1, 40)
    with pm.Model():
        b = pm.Flat("b", shape=2)
        pm.Bernoulli("y", logit_p=b[0] + b[1] * x, observed=(x > 0).astype(int))
        step = pdp.DPLaplace(epsilon=1.0, grad_clip=2.0, noise_seed=0)
    assert np.all(np.isfinite(step.warm.mean))


def test_the_planner_refuses_discrete_free_variables():
    """F10: pdp.plan planned a model that every step refuses."""
    with pm.Model():
        k = pm.Poisson("k", 3)
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu + k, 1.0, observed=np.random.default_rng(0).normal(size=40))
        with pytest.raises(ValueError, match="discrete free variables"):
            pdp.plan(epsilon=1.0, llr_clip=1.0)
