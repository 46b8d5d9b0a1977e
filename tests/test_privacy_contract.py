"""The privacy contract (docs/design.md), run over every DP step class.

Each test is parametrised over every registered example (``STEPS``, from
:func:`pymc_dp.step_methods.registry.contract_examples`); ``test_every_step_class_is_covered``
fails when a step class is not registered, so no step can skip the contract.
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pdp
import pymc_dp.step_methods as step_methods
from pymc_dp.step_methods.registry import contract_examples, registered_steps

N = 300


@pytest.fixture(scope="module")
def regression():
    """Linear regression with pm.Data covariates, named people and a fitted-values
    deterministic (private) next to a function of the parameters alone (public)."""
    rng = np.random.default_rng(8)
    X = np.clip(rng.normal(size=(N, 2)), -3, 3)
    y = X @ np.array([1.0, -0.5]) + rng.normal(size=N)
    coords = {"person": [f"id-{i:04d}" for i in range(N)], "coef": ["a", "b"]}
    with pm.Model(coords=coords) as model:
        Xd = pm.Data("X", X, dims=("person", "coef"))
        beta = pm.Normal("beta", 0, 3, dims="coef")
        sigma = pm.HalfNormal("sigma", 2)
        fitted = pm.Deterministic("fitted", pm.math.dot(Xd, beta), dims="person")
        pm.Deterministic("beta_ratio", beta[0] / beta[1])  # a function of theta only
        pm.Normal("y", fitted, sigma, observed=y, dims="person")
    return model, X, y


@pytest.fixture(scope="module")
def grouped():
    """The same regression with a random intercept ``tau * z[group]`` (group column private),
    for the steps that need group effects (``GROUPED``)."""
    rng = np.random.default_rng(9)
    X = np.clip(rng.normal(size=(N, 2)), -3, 3)
    g = rng.integers(0, 4, N)
    y = X @ np.array([1.0, -0.5]) + 0.5 * rng.normal(size=4)[g] + rng.normal(size=N)
    coords = {"person": [f"id-{i:04d}" for i in range(N)], "coef": ["a", "b"]}
    with pm.Model(coords=coords) as model:
        Xd = pm.Data("X", X, dims=("person", "coef"))
        gd = pm.Data("group", g, dims="person")
        beta = pm.Normal("beta", 0, 3, dims="coef")
        sigma = pm.HalfNormal("sigma", 2)
        tau, z = pm.HalfNormal("tau", 1.0), pm.Normal("z", 0, 1, shape=4)
        fitted = pm.Deterministic("fitted", pm.math.dot(Xd, beta) + tau * z[gd], dims="person")
        pm.Deterministic("beta_ratio", beta[0] / beta[1])
        pm.Normal("y", fitted, sigma, observed=y, dims="person")
    return model, X, y


#: Every registered example (:mod:`pymc_dp.step_methods.registry`): adding a step is one
#: module plus one registration line, and the contract runs it with no edit here.
STEPS = dict(contract_examples())
#: Examples that need group effects: they run on ``grouped`` (same names, plus ``tau``, ``z``).
GROUPED = {name for name, (_, example) in STEPS.items() if example.grouped}


def _data(name, regression, grouped):
    return grouped if name in GROUPED else regression


def _epsilon(name):
    return STEPS[name][1].epsilon


#: Steps made here stay alive for the module, so later steps on the same model share their
#: compiled kernels (``pymc_dp.likelihood.model_likelihood``), as a user's session does.
_MADE: list = []


def _make(model, name, **kw):
    step_class, example = STEPS[name]
    with model:
        step = example.build(step_class, **kw)
    _MADE.append(step)
    return step


def _sample(model, step, **kw):
    args = dict(draws=40, tune=20, chains=2, cores=1, progressbar=False, random_seed=0)
    args.update(kw)
    with model:
        return pdp.sample(step=step, **args)


def _arrays(idata):
    for node in idata.subtree:
        for name, var in node.dataset.variables.items():
            yield node.path, name, np.asarray(var.values)


def test_every_step_class_is_covered():
    classes = {
        cls
        for _, cls in inspect.getmembers(step_methods, inspect.isclass)
        if issubclass(cls, pdp.DPStep) and cls is not pdp.DPStep
    }
    made = set()
    with pm.Model():
        pm.Normal("x", pm.Normal("m"), 1, observed=np.zeros(200))
        for name in set(STEPS) - GROUPED:
            made.add(type(_make(pm.modelcontext(None), name)))
    with pm.Model():  # three groups and three coefficients: the bounds of "group_gibbs"
        z, b = pm.Normal("z", shape=3), pm.Normal("b", shape=3)
        eta = pm.Normal("m") + z[np.arange(200) % 3] + np.ones((200, 3)) @ b
        pm.Normal("x", eta, 1, observed=np.zeros(200))
        for name in GROUPED:
            made.add(type(_make(pm.modelcontext(None), name)))
    registered = set(registered_steps())
    assert classes <= registered, f"steps not registered: {classes - registered}"
    assert made == registered  # every registered step was built from its examples


@pytest.mark.parametrize("name", list(STEPS))
def test_output_is_the_whitelist(regression, grouped, name):
    """Only posterior and sample_stats; only free variables and deterministics that read no
    data; only the step's declared privatised stats; no data value anywhere; no person ids;
    only ledger and software attrs."""
    model, X, y = _data(name, regression, grouped)
    step = _make(model, name)
    idata = _sample(model, step, discard_tuned_samples=False)
    assert set(idata.children) == {
        "posterior",
        "sample_stats",
        "warmup_posterior",
        "warmup_sample_stats",
    }
    for group in ("posterior", "warmup_posterior"):
        effects = {"tau", "z"} if name in GROUPED else set()
        assert set(idata[group].data_vars) == {"beta", "sigma", "beta_ratio"} | effects
    for group in ("sample_stats", "warmup_sample_stats"):
        assert set(idata[group].data_vars) == set(step.releasable_stat_names())
    for path, var, arr in _arrays(idata):
        if arr.dtype.kind == "f" and arr.size >= 20:
            for col in (y, X[:, 0], X[:, 1]):
                assert not np.isin(col[:20], arr.ravel()).all(), (path, var)
        assert not (arr.dtype.kind in "UO" and any(str(v).startswith("id-") for v in arr.ravel()))
    assert all(k.startswith("pymc_dp_") for k in idata.attrs)
    for group in idata.children:
        assert "sampling_time" not in idata[group].attrs  # a timing side channel
    assert idata.attrs["pymc_dp_releasable"] == 1


@pytest.mark.parametrize("name", list(STEPS))
def test_budget_covers_chains_and_tuning(regression, grouped, name):
    model, _, _ = _data(name, regression, grouped)
    step = _make(model, name)
    idata = _sample(model, step, chains=3, tune=15, draws=25)
    ledger = pdp.PrivacyLedger.from_attrs(idata.attrs)
    assert ledger.chains == 3
    assert all(m.count % 40 == 0 and m.count >= 40 for m in ledger.per_chain)
    report = pdp.privacy_report(idata)
    assert report.epsilon <= _epsilon(name) * (1 + 1e-9)
    if all(m.tunable for m in step.mechanisms()):  # calibrated: spends its budget exactly
        assert report.epsilon == pytest.approx(_epsilon(name), rel=2e-3)  # bisection: 2e-3
    # the running per-chain stat ends at one chain's cost of all 40 iterations (tuning included)
    assert idata.sample_stats["dp_epsilon"].values[:, -1] == pytest.approx(
        ledger.epsilon_per_chain, rel=1e-9
    )
    assert ledger.epsilon == pytest.approx(step.plan(tune=15, draws=25, chains=3).epsilon)


@pytest.mark.parametrize("name", list(STEPS))
def test_overspending_run_is_refused_before_touching_data(regression, grouped, name):
    model, _, _ = _data(name, regression, grouped)
    try:
        step = _make(model, name, noise_multiplier=0.5)
    except ValueError as err:  # no noise knob: a fixed cost per iteration, or calibrated
        assert "noise_multiplier" in str(err)
        step = _make(model, name, epsilon=0.01)
        if all(m.tunable for m in step.mechanisms()):  # calibrated to epsilon: cannot overspend
            return
    calls = []

    def spy(*args):
        calls.append(args)
        raise AssertionError("data read")

    for attr in ("_kernel", "_ratio", "_grad"):
        if hasattr(step, attr):
            setattr(step, attr, spy)
    with pytest.raises(pdp.PrivacyBudgetError, match="at most"):
        _sample(model, step, chains=2)
    with model, pytest.raises(pdp.PrivacyBudgetError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pm.sample(draws=40, tune=20, chains=1, step=step, progressbar=False)
    assert calls == []


@pytest.mark.parametrize("name", list(STEPS))
def test_stats_are_declared_once_and_releasable_by_default(regression, grouped, name):
    model, _, _ = _data(name, regression, grouped)
    step = _make(model, name)
    declared = type(step).stats
    assert set(step.stats_dtypes_shapes) == step.releasable_stat_names()
    assert {"accepted", "dp_epsilon", "dp_delta"} <= set(step.stats_dtypes_shapes)
    with pytest.warns(UserWarning, match="not releasable"):
        diag = _make(model, name, diagnostics=True)
    assert set(diag.stats_dtypes_shapes) == set(declared)


@pytest.mark.parametrize("name", list(STEPS))
def test_chain_beyond_the_plan_is_refused_under_plain_pm_sample(regression, grouped, name):
    model, _, _ = _data(name, regression, grouped)
    step = _make(model, name, chains=1)
    with model, warnings.catch_warnings(), pytest.raises(Exception, match="Chain 2 of a run"):
        warnings.simplefilter("ignore")
        pm.sample(draws=10, tune=0, chains=2, cores=1, step=step, progressbar=False)


@pytest.mark.parametrize("name", list(STEPS))
def test_iteration_beyond_the_plan_raises(regression, grouped, name):
    model, _, _ = _data(name, regression, grouped)
    step = _make(model, name, chains=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step.setup_chain(np.random.default_rng(0), 0, 3)
    point = model.initial_point()
    for _ in range(3):
        point, _ = step.step(point)
    with pytest.raises(pdp.PrivacyBudgetError, match="planned for 3"):
        step.step(point)


@pytest.mark.parametrize("name", list(STEPS))
@pytest.mark.parametrize("other", ["slice", "nuts", "dp"])
def test_step_next_to_another_step_is_refused(regression, grouped, name, other):
    """PyMC's samplers write the exact lp / energy (NUTS even at tune=0 without moving), and a
    second DP step would spend a second budget: refused in setup_chain and in pdp.sample."""
    model, _, _ = _data(name, regression, grouped)
    step = _make(model, name, chains=1)
    with model:
        second = {
            "slice": lambda: pm.Slice([model["sigma"]]),
            "nuts": lambda: pm.NUTS([model["sigma"]]),
            "dp": lambda: _make(model, "penalty", chains=1),
        }[other]()
        with warnings.catch_warnings(), pytest.raises(Exception, match="CompoundStep"):
            warnings.simplefilter("ignore")
            pm.sample(draws=5, tune=0, chains=1, step=[step, second], progressbar=False)
        with pytest.raises((TypeError, ValueError), match="one DP step|pymc-dp step"):
            pdp.sample(draws=5, step=[step, second])


@pytest.mark.parametrize("name", list(STEPS))
def test_noise_is_secret_unless_seeded(regression, grouped, name):
    """The same random_seed reproduces proposals, never the noise (OS entropy); noise_seed
    reproduces the run and the ledger says so. A warm start spends its noise when the step is
    made, so those steps are made twice."""
    model, _, _ = _data(name, regression, grouped)
    warm = name in (
        "laplace",
        "laplace_nuts",
        "suffstats",
        "penalty_zero_tuning",
        "hmc_zero_tuning",
        "penalty_anchored",
        "hmc_anchored",
        "group_gibbs",
    )

    def runs(noise_seed=None):
        if warm:
            made = [_make(model, name, chains=1, noise_seed=noise_seed) for _ in range(2)]
            return [_sample(model, step, chains=1, random_seed=5) for step in made]
        step = _make(model, name, chains=1)
        return [
            _sample(model, s, chains=1, random_seed=5, noise_seed=noise_seed)
            for s in (step, step.renew())  # a step is spent once
        ]

    free = runs()

    def noisy(idata):
        # the draws, and the privatised acceptance probability: continuous in the noise, so two
        # runs with independent noise differ even when a chain accepts rarely
        stats = idata.sample_stats
        probs = stats["accept_prob"].values if "accept_prob" in stats else np.zeros(0)
        return np.r_[idata.posterior["beta"].values.ravel(), probs.ravel()]

    assert not np.array_equal(noisy(free[0]), noisy(free[1]))
    assert not pdp.privacy_report(free[0]).noise_seeded
    seeded = runs(noise_seed=11)
    np.testing.assert_array_equal(noisy(seeded[0]), noisy(seeded[1]))
    report = pdp.privacy_report(seeded[0])
    assert report.noise_seeded and "NOISE SEEDED" in str(report)
    assert seeded[0].attrs["pymc_dp_noise_seeded"] == 1


def test_return_inferencedata_false_is_refused_up_front(regression):
    model, _, _ = regression
    step = _make(model, "penalty")
    step._kernel = lambda *a: (_ for _ in ()).throw(AssertionError("data read"))
    with pytest.raises(ValueError, match="return_inferencedata"):
        _sample(model, step, return_inferencedata=False)


def test_plain_pm_sample_warns_and_sanitize_keeps_the_whitelist(regression):
    model, _, _ = regression
    with model:
        step = pdp.DPPenalty(epsilon=1.0, chains=2, llr_clip=3.0, proposal_scale=0.05)
        with pytest.warns(UserWarning, match="observed_data") as record:
            idata = pm.sample(
                draws=30, tune=0, chains=2, cores=1, step=step, progressbar=False, random_seed=1
            )
    assert sum("observed_data" in str(w.message) for w in record) == 1  # warned once
    assert "observed_data" in idata.children and "constant_data" in idata.children
    clean = pdp.sanitize(idata, model)
    assert set(clean.children) == {"posterior", "sample_stats"}
    assert "fitted" not in clean.posterior.data_vars and "beta_ratio" in clean.posterior.data_vars
    assert set(clean.sample_stats.data_vars) == step.releasable_stat_names()
    assert "observed_data" in idata.children  # the input is not modified
    assert pdp.privacy_report(clean).epsilon == pytest.approx(1.0, rel=1e-6)
    with pytest.raises(ValueError, match="model"):
        pdp.sanitize(idata)  # no model on the context stack


def test_sanitize_drops_groups_and_stats_of_other_origins(regression):
    """Groups added after sampling (posterior predictive, predictions) and stats of a non-DP
    step that merely share a DP stat's name are not releasable."""
    model, _, _ = regression
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(
            draws=20, tune=10, chains=1, step=pm.Metropolis(), progressbar=False, random_seed=0
        )
        idata = pm.sample_posterior_predictive(idata, extend_inferencedata=True, progressbar=False)
        pm.sample_prior_predictive(draws=10, return_inferencedata=True)
    assert "accepted" in idata.sample_stats.data_vars  # Metropolis' own stat of that name
    clean = pdp.sanitize(idata, model)
    assert set(clean.children) == {"posterior", "sample_stats"}
    assert not clean.sample_stats.data_vars  # no DP step ran: no stat is releasable


def test_a_late_noise_seed_cannot_claim_the_warm_start(regression):
    """A warm start spends its noise when the step is made: pdp.sample(noise_seed=) cannot make it
    reproducible, so it is refused (the ledger would say "noise seeded" of unseeded releases)."""
    model, _, _ = regression
    step = _make(model, "laplace", chains=1)
    with pytest.raises(ValueError, match="`noise_seed`.*warm start"):
        _sample(model, step, chains=1, noise_seed=3)
    seeded = _make(model, "laplace", chains=1, noise_seed=3)
    assert pdp.privacy_report(_sample(model, seeded, chains=1, noise_seed=3)).noise_seeded
