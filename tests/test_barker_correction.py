"""Correction distribution of the DP Barker test: fit quality, sampler, data file, regeneration."""

from __future__ import annotations

import json
import math
import random
import time
from importlib.resources import files

import numpy as np
import pytest
from scipy import stats
from scipy.special import expit

from pymc_dp.step_methods.barker_correction import (
    DATA_FILE,
    CorrectionDistribution,
    load_correction,
)
from pymc_dp.step_methods.fit_barker_correction import fit_correction, main

TARGET_VARIANCE = math.pi**2 / 3 - 2.0
# Heikkilä et al. (2019) report 2.45e-3 for their 100-component mixture.
PAPER_SUP_ERROR = 2.5e-3
N_MC = 200_000


@pytest.fixture(scope="module")
def dist() -> CorrectionDistribution:
    return load_correction()


@pytest.fixture(scope="module")
def shipped() -> dict:
    return json.loads((files("pymc_dp") / "data" / DATA_FILE).read_text("utf-8"))


def fourth_moment(d: CorrectionDistribution) -> float:
    """E[V^4] of the symmetric mixture: E[(m + sqrt(v) Z)^4] = m^4 + 6 m^2 v + 3 v^2."""
    m2, v = d.means**2, d.variances
    return float(d.weights @ (m2**2 + 6 * m2 * v + 3 * v**2))


def test_sup_cdf_error(dist, shipped):
    err = dist.sup_cdf_error()
    assert err <= PAPER_SUP_ERROR
    # The file's claim is the same computation, so it may only differ by rounding.
    assert err <= shipped["sup_cdf_error"] * (1 + 1e-12)
    # An independent, offset grid (the default grid could straddle a peak of the error).
    x = np.linspace(-25.0, 25.0, 123_457) + 1e-4
    assert np.max(np.abs(dist.convolved_cdf(x) - expit(x))) <= shipped["sup_cdf_error"] + 1e-8


def test_variance_matches_logistic(dist, shipped):
    # Var(V_corr) = pi^2/3 - C is an equality constraint of the linear program; only HiGHS's
    # primal feasibility tolerance (1e-7) and the renormalisation after pruning perturb it.
    assert dist.target_variance == pytest.approx(TARGET_VARIANCE, abs=1e-15)
    assert dist.variance == pytest.approx(TARGET_VARIANCE, abs=1e-7)
    assert shipped["variance"] == pytest.approx(dist.variance, abs=1e-15)


def test_parameters_valid(dist):
    assert dist.C == 2.0
    assert dist.weights.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(dist.weights > 0) and np.all(dist.means >= 0) and np.all(dist.variances >= 0)
    assert dist.n_components <= 200
    with pytest.raises(ValueError):
        dist.means[0] = 1.0  # read-only: a cached instance is shared by every caller


def test_symmetry(dist):
    # Offset grid avoids the atoms of zero-variance components (where the right-continuous CDF
    # satisfies cdf(m) + cdf(-m) = 1 + P(V = m) instead).
    x = np.linspace(-12.0, 12.0, 2401) + 1.234e-3
    np.testing.assert_allclose(dist.cdf(x) + dist.cdf(-x), 1.0, atol=1e-14)
    np.testing.assert_allclose(dist.convolved_cdf(x) + dist.convolved_cdf(-x), 1.0, atol=1e-14)
    assert dist.convolved_cdf(0.0) == pytest.approx(0.5, abs=1e-15)
    assert dist.cdf(-1e3) == 0.0 and dist.cdf(1e3) == pytest.approx(1.0, abs=1e-14)


def test_cdf_shapes(dist):
    assert np.shape(dist.cdf(0.3)) == ()
    assert dist.convolved_cdf(np.zeros((3, 4))).shape == (3, 4)
    assert dist.sample(np.random.default_rng(0), (3, 4)).shape == (3, 4)


@pytest.mark.parametrize("component_variance", [0.0, 0.05])
def test_monte_carlo_ks_and_variance(dist, component_variance):
    d = dist if component_variance == 0.0 else fit_correction(component_variance=0.05)
    rng = np.random.default_rng(20190601)
    v = d.sample(rng, N_MC)
    logistic_draws = rng.normal(0.0, math.sqrt(d.C), N_MC) + v
    # KS critical value at level 1e-3 is sqrt(-log(5e-4) / 2) / sqrt(N) = 1.95 / sqrt(N); the
    # sampled law differs from the logistic by at most the fit's sup-CDF error.
    ks = stats.kstest(logistic_draws, expit).statistic
    assert ks < 1.95 / math.sqrt(N_MC) + d.sup_cdf_error()
    # Sample variance of V_corr: Var(s^2) ~ (E V^4 - sigma^4) / N; z-score bound 4.
    se = math.sqrt((fourth_moment(d) - d.variance**2) / N_MC)
    assert abs(v.var() - d.variance) < 4 * se
    assert abs(v.mean()) < 4 * math.sqrt(d.variance / N_MC)


def test_scalar_path_matches_distribution(dist):
    rng = np.random.default_rng(7)
    draws = np.array([dist.sample(rng) for _ in range(20_000)])
    assert all(isinstance(x, float) for x in draws[:10].tolist())
    # Zero variances: draws are exactly the signed atoms, with the right frequencies.
    atoms = np.concatenate([dist.means, -dist.means])
    assert np.all(np.isin(draws, atoms))
    p_zero = dist.weights[dist.means == 0].sum()
    se = math.sqrt(p_zero * (1 - p_zero) / draws.size)
    assert abs(np.mean(draws == 0.0) - p_zero) < 4 * se
    # One uniform per draw in both paths, so the scalar and vector paths agree exactly.
    np.testing.assert_array_equal(draws, dist.sample(np.random.default_rng(7), draws.size))


def test_scalar_path_with_spread():
    d = fit_correction(component_variance=0.05)
    rng = np.random.default_rng(3)
    draws = np.array([d.sample(rng) for _ in range(20_000)])
    se = math.sqrt((fourth_moment(d) - d.variance**2) / draws.size)
    assert abs(draws.var() - d.variance) < 4 * se
    assert stats.kstest(draws, d.cdf).pvalue > 1e-3


def test_reproducible_and_uses_only_given_generator(dist):
    # Legacy global state is read (never reset) to check the sampler leaves it alone.
    np_state, py_state = np.random.get_state(), random.getstate()  # noqa: NPY002
    a = dist.sample(np.random.default_rng(42), 1000)
    b = dist.sample(np.random.default_rng(42), 1000)
    np.testing.assert_array_equal(a, b)
    rng1, rng2 = np.random.default_rng(5), np.random.default_rng(5)
    assert [dist.sample(rng1) for _ in range(100)] == [dist.sample(rng2) for _ in range(100)]
    assert not np.array_equal(a, dist.sample(np.random.default_rng(43), 1000))
    # Global generators untouched.
    after = np.random.get_state()  # noqa: NPY002
    assert after[0] == np_state[0] and np.array_equal(after[1], np_state[1])
    assert random.getstate() == py_state
    # The given generator advanced by exactly one uniform per draw (zero-variance components).
    used, reference = np.random.default_rng(9), np.random.default_rng(9)
    dist.sample(used, 1000)
    dist.sample(used)
    reference.random(1001)
    assert used.bit_generator.state == reference.bit_generator.state


def test_scalar_sample_is_fast(dist):
    rng = np.random.default_rng(0)
    n = 20_000
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            dist.sample(rng)
        best = min(best, (time.perf_counter() - start) / n)
    assert best < 10e-6, f"{best * 1e6:.2f} us per scalar draw"


@pytest.mark.parametrize("C", [0, -1.0, math.pi**2 / 3, 4.0, math.nan, math.inf, None, [2.0]])
def test_bad_C_raises(C):
    error = TypeError if C is None or isinstance(C, list) else ValueError
    with pytest.raises(error, match="`C`"):
        fit_correction(C)
    with pytest.raises(error, match="`C`"):
        load_correction(C)
    with pytest.raises(error, match="`C`"):
        CorrectionDistribution(C=C, means=[0.0], weights=[1.0], variances=[0.0])


def test_load_other_C_explains():
    with pytest.raises(ValueError, match=r"only C = 2 is shipped.*fit_correction\(C=1\.5\)"):
        load_correction(1.5)


def test_load_is_cached():
    assert load_correction() is load_correction(2.0) is load_correction(C=2)


def test_invalid_parameters():
    with pytest.raises(ValueError, match="sum to 1"):
        CorrectionDistribution(C=2.0, means=[0.0, 1.0], weights=[0.5, 0.6], variances=[0, 0])
    with pytest.raises(ValueError, match="same length"):
        CorrectionDistribution(C=2.0, means=[0.0, 1.0], weights=[1.0], variances=[0.0])
    with pytest.raises(ValueError, match="`variances`"):
        CorrectionDistribution(C=2.0, means=[1.0], weights=[1.0], variances=[-1.0])
    with pytest.raises(ValueError, match="`n_components`"):
        fit_correction(n_components=1)
    with pytest.raises(ValueError, match="`component_variance`"):
        fit_correction(component_variance=2.0)


def test_json_round_trip(dist):
    again = CorrectionDistribution.from_json(dist.to_json(note="extra keys are ignored"))
    assert again == dist and hash(again) == hash(dist)
    assert CorrectionDistribution.from_dict(dist.to_dict()) == dist


def test_regeneration_reproduces_shipped_file(shipped, tmp_path, capsys):
    # The linear program is deterministic and takes about a second.
    fitted = fit_correction(**shipped["fit_options"])
    np.testing.assert_allclose(fitted.means, shipped["means"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(fitted.weights, shipped["weights"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(fitted.variances, shipped["variances"], rtol=0, atol=1e-8)
    out = tmp_path / "c2.json"
    main(["--out", str(out)])
    regenerated = json.loads(out.read_text("utf-8"))
    assert regenerated.keys() == shipped.keys()
    for key in ("C", "error_grid", "fit_options", "generated_by"):
        assert regenerated[key] == shipped[key]
    for key in ("means", "weights", "variances", "variance", "sup_cdf_error"):
        np.testing.assert_allclose(regenerated[key], shipped[key], rtol=0, atol=1e-8)
    printed = capsys.readouterr().out
    assert "sup |CDF error|" in printed and "Var(V_corr)" in printed and "pi^2/3 - C" in printed
