"""The privacy contract of DESIGN.md: what pdp.sample / pm.sample may and may not return."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pdp
from pymc_dp.sampling import PRIVATE_GROUPS

RELEASABLE = {"accepted", "accept_prob", "noise_std", "dp_epsilon", "dp_mu", "dp_delta"}


@pytest.fixture(scope="module")
def regression():
    """Linear regression with a pm.Data covariate and a fitted-values deterministic."""
    rng = np.random.default_rng(8)
    n = 300
    X = np.clip(rng.normal(size=(n, 2)), -3, 3)
    y = X @ np.array([1.0, -0.5]) + rng.normal(size=n)
    with pm.Model() as model:
        Xd = pm.Data("X", X)
        beta = pm.Normal("beta", 0, 3, shape=2)
        sigma = pm.HalfNormal("sigma", 2)
        fitted = pm.Deterministic("fitted", pm.math.dot(Xd, beta))
        pm.Deterministic("beta_ratio", beta[0] / beta[1])  # public: a function of theta only
        pm.Normal("y", fitted, sigma, observed=y)
    return model, X, y


def _run(model, **kw):
    with model:
        step = pdp.DPPenalty(
            epsilon=kw.pop("epsilon", 2.0), llr_clip=3.0, proposal_scale=0.05, proposal="ocu", **kw
        )
        return pdp.sample(
            draws=60, tune=20, chains=2, cores=1, step=step, progressbar=False, random_seed=0
        )


def _all_arrays(idata):
    for node in idata.subtree:
        for name, var in node.dataset.variables.items():
            yield node.path, name, np.asarray(var.values)


def test_pdp_sample_output_holds_no_private_data(regression):
    model, X, y = regression
    idata = _run(model)
    assert not set(idata.children) & set(PRIVATE_GROUPS)
    assert set(idata.children) == {"posterior", "sample_stats"}
    assert set(idata.posterior.data_vars) == {"beta", "sigma", "beta_ratio"}  # no "fitted"
    assert set(idata.sample_stats.data_vars) <= RELEASABLE
    # no array anywhere in the tree equals (or contains) a data column
    for path, name, arr in _all_arrays(idata):
        flat = arr.ravel()
        if arr.dtype.kind == "f" and flat.size >= len(y):
            for col in (y, X[:, 0], X[:, 1]):
                assert not np.isin(col[:20], flat).all(), (path, name)
    assert idata.attrs["pymc_dp_releasable"] == 1
    report = pdp.privacy_report(idata)
    assert report.epsilon == pytest.approx(2.0, rel=1e-6)
    assert "replace-one" in report.neighbouring and "Gaussian PLD" in report.accountant
    assert "epsilon" in str(report)


def test_plain_pm_sample_warns_and_sanitize_strips(regression):
    model, _, _ = regression
    with model:
        step = pdp.DPPenalty(epsilon=1.0, chains=2, llr_clip=3.0, proposal_scale=0.05)
        with pytest.warns(UserWarning, match="observed_data") as record:
            idata = pm.sample(
                draws=30, tune=0, chains=2, cores=1, step=step, progressbar=False, random_seed=1
            )
    assert sum("observed_data" in str(w.message) for w in record) == 1  # warned once
    assert "observed_data" in idata.children and "constant_data" in idata.children
    assert "fitted" in idata.posterior.data_vars
    clean = pdp.sanitize(idata, model)
    assert not set(clean.children) & set(PRIVATE_GROUPS)
    assert "fitted" not in clean.posterior.data_vars and "beta_ratio" in clean.posterior.data_vars
    assert "observed_data" in idata.children  # the input is not modified
    # a plain result is reported by composing the per-chain stats
    assert pdp.privacy_report(clean).epsilon == pytest.approx(1.0, rel=1e-6)
    with pytest.raises(ValueError, match="model"):
        pdp.sanitize(idata)  # no model on the context stack


def test_sanitize_drops_stats_of_non_dp_samplers():
    with pm.Model() as model:
        a = pm.Normal("a")
        pm.Normal("x", a, 1, observed=np.zeros(10))
        idata = pm.sample(
            draws=20,
            tune=10,
            chains=1,
            step=pm.Metropolis(),
            progressbar=False,
            random_seed=0,
            compute_convergence_checks=False,
        )
    clean = pdp.sanitize(idata, model)
    assert not set(clean.sample_stats.data_vars) - RELEASABLE


class TestCoverage:
    def test_step_refuses_partial_vars(self, regression):
        model, _, _ = regression
        with model, pytest.raises(ValueError, match="must sample every free variable"):
            pdp.DPPenalty(vars=[model["beta"]], epsilon=1.0, llr_clip=1.0, proposal_scale=0.1)

    def test_pdp_sample_refuses_non_dp_steps(self, regression):
        model, _, _ = regression
        with model:
            with pytest.raises(TypeError, match="pymc-dp step"):
                pdp.sample(draws=10, step=pm.Metropolis())
            dp = pdp.DPPenalty(epsilon=1.0, llr_clip=1.0, proposal_scale=0.1)
            with pytest.raises(ValueError, match="one DP step"):
                pdp.sample(draws=10, step=[dp, pm.Metropolis([model["sigma"]])])

    def test_pdp_sample_refuses_uncovered_variables(self, regression):
        model, _, _ = regression
        with model:
            dp = pdp.DPPenalty(epsilon=1.0, llr_clip=1.0, proposal_scale=0.1)
        dp.vars = dp.vars[:1]  # as if the step covered only beta: PyMC would give sigma NUTS
        with model, pytest.raises(ValueError, match="not sampled by the DP step"):
            pdp.sample(draws=10, step=dp)

    def test_pdp_sample_refuses_storage_options(self, regression):
        model, _, _ = regression
        with model:
            dp = pdp.DPPenalty(epsilon=1.0, llr_clip=1.0, proposal_scale=0.1)
            with pytest.raises(ValueError, match="idata_kwargs"):
                pdp.sample(draws=10, step=dp, idata_kwargs={"log_likelihood": True})


def test_diagnostics_mark_result_not_releasable(regression):
    model, _, _ = regression
    with pytest.warns(UserWarning, match="not releasable"):
        idata = _run(model, diagnostics=True)
    assert idata.attrs["pymc_dp_releasable"] == 0
    assert "clip_fraction" not in idata.sample_stats  # sanitize keeps only releasable stats
    assert not pdp.privacy_report(idata).releasable
    assert "NOT RELEASABLE" in str(pdp.privacy_report(idata))
    with model:
        step = pdp.DPPenalty(epsilon=1.0, llr_clip=3.0, proposal_scale=0.05, diagnostics=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw = pm.sample(draws=20, tune=0, chains=1, step=step, progressbar=False, random_seed=0)
    clip = raw.sample_stats["clip_fraction"].values
    assert np.all((clip >= 0) & (clip <= 1))
    assert not pdp.privacy_report(raw).releasable


def test_default_run_emits_only_privatised_stats(regression):
    model, _, _ = regression
    with model:
        step = pdp.DPPenalty(epsilon=1.0, llr_clip=3.0, proposal_scale=0.05)
    assert set(step.stats_dtypes_shapes) == RELEASABLE
    assert "clip_fraction" not in step.stats_dtypes_shapes


def test_ledger_round_trips_through_attrs(regression):
    model, _, _ = regression
    idata = _run(model, epsilon=0.7)
    ledger = pdp.PrivacyLedger.from_attrs(idata.attrs)
    assert ledger.chains == 2 and ledger.per_chain[0].count == 80
    assert ledger.epsilon == pytest.approx(0.7, rel=1e-6)
    assert ledger.target_epsilon == 0.7


MINIBATCH_STEPS = {
    "barker": lambda: pdp.DPBarker(batch_size=100, n0=50, proposal_scale=0.05),
    "penalty_fixed": lambda: pdp.DPMinibatchPenalty(
        batch_size=100, llr_clip=3.0, proposal_scale=0.05, epsilon=2.0, tempering=0.5
    ),
    "penalty_poisson": lambda: pdp.DPMinibatchPenalty(
        batch_size=100, llr_clip=3.0, proposal_scale=0.05, epsilon=2.0, sampling="poisson"
    ),
}


@pytest.mark.parametrize("name", list(MINIBATCH_STEPS))
def test_minibatch_steps_release_no_private_data(regression, name):
    """The contract for DPBarker and DPMinibatchPenalty: no private groups, no data-dependent
    deterministics, only privatised stats (no batch variance, no realised Poisson batch size)."""
    model, X, y = regression
    with model:
        step = MINIBATCH_STEPS[name]()
        idata = pdp.sample(
            draws=60, tune=20, chains=2, cores=1, step=step, progressbar=False, random_seed=0
        )
    assert set(idata.children) == {"posterior", "sample_stats"}
    assert set(idata.posterior.data_vars) == {"beta", "sigma", "beta_ratio"}
    assert set(idata.sample_stats.data_vars) == set(type(step).releasable_stats)
    assert not {"batch_variance", "clip_fraction", "lp"} & set(idata.sample_stats.data_vars)
    for path, var, arr in _all_arrays(idata):
        if arr.dtype.kind == "f" and arr.size >= len(y):
            for col in (y, X[:, 0], X[:, 1]):
                assert not np.isin(col[:20], arr.ravel()).all(), (path, var)
    report = pdp.privacy_report(idata)
    assert report.epsilon <= (step.epsilon or np.inf) and report.releasable
    assert report.epsilon == pytest.approx(step.ledger(20, 60, chains=2).epsilon)
    assert idata.attrs["pymc_dp_releasable"] == 1
