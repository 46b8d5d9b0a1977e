"""Tests for pymc_dp.accounting: pinned values (docs/references.md), independent routes
(50-digit mpmath, quadrature, dp-accounting), properties, robustness and validation."""

from __future__ import annotations

import ast
import math
import warnings
from pathlib import Path

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.rdp import compute_epsilon as dpa_compute_epsilon
from scipy import integrate, optimize, stats

from pymc_dp import accounting as acc
from pymc_dp.accounting import (
    DEFAULT_ORDERS,
    DP_ACCOUNTING_ORDERS,
    check_delta,
    check_epsilon,
    check_positive,
    fixed_size_subsampled_gaussian_epsilon,
    fixed_size_subsampled_gaussian_event,
    fixed_size_subsampled_gaussian_rdp,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_log_delta,
    gaussian_mu,
    gaussian_mu_for_budget,
    gaussian_rdp,
    max_iterations,
    max_releases,
    noise_multiplier_for_budget,
    poisson_subsampled_gaussian_epsilon,
    poisson_subsampled_gaussian_event,
    poisson_subsampled_gaussian_rdp,
    rdp_to_epsilon,
    rdp_to_epsilon_best,
)

DELTA = 1e-6
N_THESIS = 100_000


# --------------------------------------------------------------------------------------------
# Pins from docs/references.md, "Accounting pins" (Gaussian part and subsampled Gaussian part)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mu", "eps", "delta"),
    [
        (0.5, 1.0, 0.1269367375066),
        (2.0, 3.0, 0.1838130765445),
        (0.01, 0.1, 0.02095798203621),
        (1e-4, 0.05, 7.357709557599e-07),
        (0.5, 20.0, 2.664706705368e-86),
    ],
)
def test_pin_delta_table(mu, eps, delta):
    assert gaussian_delta(mu, eps) == pytest.approx(delta, rel=1e-10)
    assert gaussian_log_delta(mu, eps) == pytest.approx(math.log(delta), rel=1e-10)


def test_pin_delta_table_vectorised():
    mu = np.array([0.5, 2.0, 0.01, 1e-4, 0.5])
    eps = np.array([1.0, 3.0, 0.1, 0.05, 20.0])
    want = [
        0.1269367375066,
        0.1838130765445,
        0.02095798203621,
        7.357709557599e-07,
        2.664706705368e-86,
    ]
    np.testing.assert_allclose(gaussian_delta(mu, eps), want, rtol=1e-10)


@pytest.mark.parametrize(
    ("mu", "eps"),
    # docs/references.md prints the second mu as "1.1055556": the pinned eps belongs to 199/180 =
    # 1.10555...6 (5/9 + 0.55); the literal 1.1055556 gives 7.72708796, 2.4e-8 away.
    [(5 / 9, 5.1890366408), (199 / 180, 7.7270877763)],
)
def test_pin_epsilon_at_delta_1e6(mu, eps):
    assert gaussian_epsilon(mu, DELTA) == pytest.approx(eps, rel=1e-10)


def test_pin_mu_for_budget():
    assert gaussian_mu_for_budget(1.0, DELTA) == pytest.approx(0.0280144819126, rel=1e-10)
    # Pinned to 4 digits only: half a unit in the last digit.
    assert gaussian_mu_for_budget(4.0, DELTA) == pytest.approx(0.3510, abs=5e-5)
    assert gaussian_mu_for_budget(6.0, DELTA) == pytest.approx(0.7156, abs=5e-5)


def test_pin_noise_multiplier_for_1000_releases():
    s = noise_multiplier_for_budget(1.0, DELTA, 1000)
    assert s == pytest.approx(133.5960767310, rel=1e-10)


def test_pin_max_releases_noise_30():
    assert max_releases(30.0, 1.0, DELTA) == 50
    # Pinned to 5 decimals.
    assert gaussian_epsilon(gaussian_mu(30.0, 50), DELTA) == pytest.approx(0.99544, abs=5e-6)
    assert gaussian_epsilon(gaussian_mu(30.0, 51), DELTA) == pytest.approx(1.00612, abs=5e-6)


def _zcdp_iterations(tau: float, n: float, eps: float, delta: float) -> int:
    """Thesis Theorem 5 count, written independently: k = floor(2 tau^2 n rho),
    rho = (sqrt(eps - ln delta) - sqrt(-ln delta))^2."""
    rho = (math.sqrt(eps - math.log(delta)) - math.sqrt(-math.log(delta))) ** 2
    return math.floor(2 * tau**2 * n * rho)


@pytest.mark.parametrize(
    ("eps", "ours", "zcdp"), [(1, 56, 34), (2, 201, 135), (4, 702, 507), (6, 1431, 1079)]
)
def test_pin_thesis_dp_penalty(eps, ours, zcdp):
    # sigma = tau sqrt(n) * sensitivity, so one release costs mu = 1 / (2 tau^2 n).
    tau = 0.1
    noise = tau * math.sqrt(N_THESIS)
    assert max_releases(noise, eps, DELTA) == ours
    assert max_iterations(1 / (2 * tau**2 * N_THESIS), eps, DELTA) == ours
    assert _zcdp_iterations(tau, N_THESIS, eps, DELTA) == zcdp
    assert ours > zcdp  # the exact PLD is tighter than the zCDP conversion


@pytest.mark.parametrize(("eps", "ours"), [(1, 33), (2, 119), (4, 416), (6, 848)])
def test_pin_thesis_dp_hmc(eps, ours):
    tau_l, tau_g, n_leapfrog = 0.1, 0.4, 10
    mu_iter = 1 / (2 * tau_l**2 * N_THESIS) + (n_leapfrog + 1) / (2 * tau_g**2 * N_THESIS)
    assert max_iterations(mu_iter, eps, DELTA) == ours


def test_pin_subsampled_gaussian():
    # n = 1e5, b = 1000 (q = 0.01), noise multiplier 1, 1e4 steps, delta 1e-6. Pins have 5
    # significant digits: half a unit in the last digit.
    pld_eps = poisson_subsampled_gaussian_epsilon(1.0, 0.01, 10_000, DELTA, accountant="pld")
    rdp_eps = poisson_subsampled_gaussian_epsilon(1.0, 0.01, 10_000, DELTA, accountant="rdp")
    wor_eps = fixed_size_subsampled_gaussian_epsilon(1.0, 100_000, 1000, 10_000, DELTA)
    assert pld_eps == pytest.approx(6.9074, abs=5e-5)
    assert rdp_eps == pytest.approx(7.4141, abs=5e-5)
    assert wor_eps == pytest.approx(14.3017, abs=5e-5)


# --------------------------------------------------------------------------------------------
# Independent routes to delta(eps)
# --------------------------------------------------------------------------------------------

# (mu, eps) from the bulk to the extremes of the advertised range.
GRID = [
    (mu, eps)
    for mu in (1e-12, 1e-9, 1e-6, 1e-4, 1e-2, 0.5, 1.0, 10.0, 1e3, 1e6)
    for eps in (0.0, 1e-8, 1e-4, 0.01, 0.1, 1.0, 5.0, 20.0, 100.0, 1e3, 1e4)
]


def _mp_log_delta(mu: float, eps: float) -> float:
    """Literal erfc formula at 80 digits (enough for the worst cancellation on GRID)."""
    mp = pytest.importorskip("mpmath")
    with mp.workdps(80):
        mu_, eps_ = mp.mpf(mu), mp.mpf(eps)
        s = mp.sqrt(2 * mu_)
        a = s / 2 - eps_ / s
        b = a - s
        delta = mp.erfc(-a / mp.sqrt(2)) / 2 - mp.exp(eps_) * mp.erfc(-b / mp.sqrt(2)) / 2
        return float(mp.log(delta))


def test_log_delta_against_mpmath():
    mu, eps = np.array(GRID).T
    ours = gaussian_log_delta(mu, eps)
    ref = np.array([_mp_log_delta(m, e) for m, e in GRID])
    assert np.all(np.isfinite(ours))
    # Where delta >= 1e-300, delta itself to 1e-12 relative (= absolute error of log delta);
    # deeper in the tail, log delta to 1e-14 relative.
    moderate = ref > -700
    np.testing.assert_allclose(ours[moderate], ref[moderate], rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours[~moderate], ref[~moderate], rtol=1e-14)


@pytest.mark.parametrize(
    ("mu", "eps"), [(0.5, 1.0), (2.0, 3.0), (0.01, 0.1), (1e-4, 0.05), (3.0, 0.0)]
)
def test_delta_against_quadrature_of_pld(mu, eps):
    # delta(eps) = E[(1 - e^(eps - L))_+], L ~ N(mu, 2 mu), integrated numerically.
    pld = stats.norm(mu, math.sqrt(2 * mu))
    val, _ = integrate.quad(
        lambda t: -math.expm1(eps - t) * pld.pdf(t),
        eps,
        mu + 40 * math.sqrt(2 * mu),
        epsabs=0,
        epsrel=1e-13,
        limit=200,
    )
    assert gaussian_delta(mu, eps) == pytest.approx(val, rel=1e-9)


@pytest.mark.parametrize(("mu", "eps"), [(0.5, 1.0), (2.0, 3.0), (0.01, 0.1), (0.125, 0.5)])
def test_delta_against_dp_accounting_pld(mu, eps):
    # 4 releases with multiplier s have mu = 4 / (2 s^2); PLD discretisation (1e-4) is
    # pessimistic, so its delta is an upper bound close to the exact one.
    s = math.sqrt(4 / (2 * mu))
    accountant = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(dpa.GaussianDpEvent(s), 4)
    theirs = accountant.get_delta(eps)
    ours = gaussian_delta(mu, eps)
    assert ours == pytest.approx(theirs, rel=1e-6)
    assert ours <= theirs * (1 + 1e-12)


@pytest.mark.parametrize("sigma", [0.3, 1.0, 3.0, 30.0, 300.0])
def test_single_gaussian_against_dp_accounting_analytic(sigma):
    # dp_accounting.get_epsilon_gaussian / get_sigma_gaussian (Balle & Wang), brentq xtol 1e-12.
    assert gaussian_epsilon(gaussian_mu(sigma), DELTA) == pytest.approx(
        dpa.get_epsilon_gaussian(sigma, DELTA), abs=1e-10
    )
    eps = gaussian_epsilon(gaussian_mu(sigma), DELTA)
    assert noise_multiplier_for_budget(eps, DELTA, 1) == pytest.approx(
        dpa.get_sigma_gaussian(eps, DELTA), rel=1e-9
    )


# --------------------------------------------------------------------------------------------
# Properties and round trips
# --------------------------------------------------------------------------------------------


def test_monotonicity():
    eps = np.linspace(0, 30, 301)
    for mu in (1e-4, 0.05, 0.5, 5.0, 50.0):
        assert np.all(np.diff(gaussian_log_delta(mu, eps)) < 0)
    mus = np.geomspace(1e-8, 1e4, 300)
    for e in (0.1, 1.0, 10.0):
        ld = gaussian_log_delta(mus, e)
        assert np.all(np.diff(ld) >= 0)
        # Strictly increasing until delta rounds to 1 (log delta to 0) for huge mu.
        assert np.all(np.diff(ld[ld < -1e-12]) > 0)
    eps_mu = gaussian_epsilon(mus, DELTA)
    positive = eps_mu > 0
    assert np.all(np.diff(eps_mu[positive]) > 0)
    deltas = np.geomspace(1e-300, 0.5, 200)
    assert np.all(np.diff(gaussian_epsilon(0.3, deltas)) < 0)


@pytest.mark.parametrize("eps", [0.01, 0.3, 1.0, 4.0, 20.0, 300.0])
@pytest.mark.parametrize("delta", [1e-12, 1e-6, 1e-2])
def test_round_trip_mu_epsilon(eps, delta):
    mu = gaussian_mu_for_budget(eps, delta)
    assert gaussian_log_delta(mu, eps) <= math.log(delta)  # conservative side
    assert gaussian_delta(mu, eps) == pytest.approx(delta, rel=1e-12)
    assert gaussian_epsilon(mu, delta) == pytest.approx(eps, rel=1e-10)


@pytest.mark.parametrize("count", [1, 2, 7, 50, 1000, 123_456])
@pytest.mark.parametrize(("eps", "delta"), [(0.5, 1e-5), (1.0, 1e-6), (8.0, 1e-9)])
def test_round_trip_noise_multiplier(count, eps, delta):
    s = noise_multiplier_for_budget(eps, delta, count)
    assert max_releases(s, eps, delta) == count
    # A slightly smaller noise no longer affords `count` releases: the calibration is exact.
    assert max_releases(s * (1 - 1e-9), eps, delta) == count - 1
    assert gaussian_epsilon(gaussian_mu(s, count), delta) == pytest.approx(eps, rel=1e-10)


def test_max_iterations_guards_floor():
    mu_star = gaussian_mu_for_budget(2.0, DELTA)
    # mu per iteration dividing mu* exactly (up to rounding): k is 10 or 9, never 11.
    k = max_iterations(mu_star / 10, 2.0, DELTA)
    assert k in (9, 10)
    assert gaussian_log_delta(k * (mu_star / 10), 2.0) <= math.log(DELTA)
    assert gaussian_log_delta((k + 1) * (mu_star / 10), 2.0) > math.log(DELTA)
    # Budget smaller than one iteration.
    assert max_iterations(10 * mu_star, 2.0, DELTA) == 0


def test_gaussian_mu():
    assert gaussian_mu(2.0) == 0.125
    assert gaussian_mu(2.0, 8) == 1.0
    np.testing.assert_allclose(gaussian_mu(np.array([1.0, 2.0]), 2), [1.0, 0.25])
    assert gaussian_mu(5.0, 0) == 0.0


def test_zero_mu():
    assert gaussian_delta(0.0, 1.0) == 0.0
    assert gaussian_log_delta(0.0, 0.0) == -math.inf
    assert gaussian_epsilon(0.0, DELTA) == 0.0
    np.testing.assert_array_equal(gaussian_epsilon(np.array([0.0, 1e-14]), DELTA), [0.0, 0.0])


def test_epsilon_is_zero_when_delta_of_zero_is_within_budget():
    # TV distance of N(0,1) vs N(s,1) for tiny mu is below delta.
    mu = 1e-12
    assert gaussian_delta(mu, 0.0) < DELTA
    assert gaussian_epsilon(mu, DELTA) == 0.0
    assert gaussian_epsilon(mu, 1e-8) > 0.0


# --------------------------------------------------------------------------------------------
# Robustness far out
# --------------------------------------------------------------------------------------------


def test_robust_extremes_no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ld = gaussian_log_delta(0.5, 1e4)
        assert np.isfinite(ld) and ld < -4e7
        assert ld == pytest.approx(_mp_log_delta(0.5, 1e4), rel=1e-14)
        assert gaussian_delta(0.5, 1e4) == 0.0  # underflows only in linear space

        e300 = gaussian_epsilon(0.5, 1e-300)
        e100 = gaussian_epsilon(0.5, 1e-100)
        assert np.isfinite(e300) and e300 > e100 > 0
        assert gaussian_log_delta(0.5, e300) == pytest.approx(math.log(1e-300), rel=1e-12)

        for mu in (1e-12, 1e6):
            for delta in (1e-300, 1e-6, 0.5):
                e = gaussian_epsilon(mu, delta)
                assert np.isfinite(e) and e >= 0
                assert gaussian_log_delta(mu, e) <= math.log(delta)
            for e in (0.0, 1.0, 1e4):
                assert not np.isnan(gaussian_log_delta(mu, e))
        # mu = 1e6 spends essentially everything below eps ~ mu.
        assert gaussian_delta(1e6, 1e4) == pytest.approx(1.0)
        assert gaussian_epsilon(1e6, DELTA) == pytest.approx(
            1e6 - math.sqrt(2e6) * stats.norm.ppf(DELTA), rel=1e-5
        )
        assert gaussian_mu_for_budget(1e4, 1e-300) > 0
        assert gaussian_mu_for_budget(1e-6, 0.5) > 0
        assert gaussian_epsilon(1e-12, 1e-300) > 0


# --------------------------------------------------------------------------------------------
# Vectorised epsilon
# --------------------------------------------------------------------------------------------


def test_vectorised_epsilon_matches_scalar_and_brentq():
    mus = np.cumsum(np.full(100_000, 1 / (2 * 0.1**2 * N_THESIS)))  # DP penalty, 1e5 iterations
    eps = gaussian_epsilon(mus, DELTA)
    assert eps.shape == mus.shape and np.all(np.isfinite(eps))
    assert np.all(np.diff(eps) > 0)
    idx = np.random.default_rng(0).choice(mus.size, 50, replace=False)
    for i in np.append(idx, [0, mus.size - 1]):
        assert eps[i] == pytest.approx(gaussian_epsilon(float(mus[i]), DELTA), rel=1e-12)
        root = optimize.brentq(
            lambda e, m=mus[i]: gaussian_log_delta(m, e) - math.log(DELTA),
            0.0,
            1e3,
            xtol=1e-15,
            rtol=1e-15,
        )
        assert eps[i] == pytest.approx(root, rel=1e-10)


def test_vectorised_epsilon_broadcasts_delta():
    got = gaussian_epsilon(np.array([[0.5], [2.0]]), np.array([1e-3, 1e-6, 1e-9]))
    assert got.shape == (2, 3)
    assert got[1, 1] == pytest.approx(gaussian_epsilon(2.0, 1e-6), rel=1e-14)


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def test_validation_messages():
    with pytest.raises(ValueError, match=r"^`epsilon` must be a finite number > 0, got -1$"):
        check_epsilon(-1)
    with pytest.raises(ValueError, match=r"^`delta` must be a number in \(0, 1\), got 1.5$"):
        check_delta(1.5)
    with pytest.raises(ValueError, match="`clip` must be a finite number > 0"):
        check_positive(0.0, "clip")
    with pytest.raises(ValueError, match="target_eps"):
        check_epsilon(math.nan, "target_eps")
    assert check_epsilon(2) == 2.0 and isinstance(check_epsilon(2), float)


@pytest.mark.parametrize(
    "bad_eps, error",
    [
        (0.0, ValueError),
        (-1.0, ValueError),
        (math.nan, ValueError),
        (math.inf, ValueError),
        ("one", TypeError),
        ("1", TypeError),  # float("1") would accept it: a string is a bug, not a budget
        (True, TypeError),
        (None, TypeError),
        ([1.0], TypeError),
        (1 + 0j, TypeError),
    ],
)
def test_bad_epsilon(bad_eps, error):
    for call in (
        lambda: gaussian_mu_for_budget(bad_eps, DELTA),
        lambda: noise_multiplier_for_budget(bad_eps, DELTA, 10),
        lambda: max_releases(3.0, bad_eps, DELTA),
        lambda: max_iterations(0.01, bad_eps, DELTA),
    ):
        with pytest.raises(error, match="epsilon"):
            call()


@pytest.mark.parametrize("bad_delta", [0.0, 1.0, -0.1, 1.5, math.nan])
def test_bad_delta(bad_delta):
    for call in (
        lambda: gaussian_mu_for_budget(1.0, bad_delta),
        lambda: gaussian_epsilon(0.5, bad_delta),
        lambda: gaussian_epsilon(np.array([0.5, 1.0]), np.array([1e-6, bad_delta])),
        lambda: max_releases(3.0, 1.0, bad_delta),
        lambda: rdp_to_epsilon(DEFAULT_ORDERS, gaussian_rdp(1.0), bad_delta),
        lambda: poisson_subsampled_gaussian_epsilon(1.0, 0.01, 10, bad_delta),
    ):
        with pytest.raises(ValueError, match="delta"):
            call()


def test_bad_other_arguments():
    with pytest.raises(ValueError, match="epsilon"):
        gaussian_delta(0.5, -1.0)
    with pytest.raises(ValueError, match="epsilon"):
        gaussian_log_delta(0.5, np.array([1.0, math.nan]))
    with pytest.raises(ValueError, match="mu"):
        gaussian_delta(-0.5, 1.0)
    with pytest.raises(ValueError, match="mu"):
        gaussian_epsilon(math.inf, DELTA)
    with pytest.raises(ValueError, match="noise_multiplier"):
        gaussian_mu(0.0)
    with pytest.raises(ValueError, match="count"):
        gaussian_mu(1.0, -1)
    with pytest.raises(ValueError, match="count"):
        noise_multiplier_for_budget(1.0, DELTA, 0)
    with pytest.raises(ValueError, match="count"):
        noise_multiplier_for_budget(1.0, DELTA, 2.5)
    with pytest.raises(ValueError, match="noise_multiplier"):
        max_releases(-3.0, 1.0, DELTA)
    with pytest.raises(ValueError, match="mu_per_iteration"):
        max_iterations(0.0, 1.0, DELTA)
    with pytest.raises(ValueError, match="sampling_probability"):
        poisson_subsampled_gaussian_epsilon(1.0, 0.0, 10, DELTA)
    with pytest.raises(ValueError, match="batch_size"):
        fixed_size_subsampled_gaussian_epsilon(1.0, 100, 101, 10, DELTA)
    with pytest.raises(ValueError, match="accountant"):
        poisson_subsampled_gaussian_epsilon(1.0, 0.1, 10, DELTA, accountant="moments")
    with pytest.raises(ValueError, match="method"):
        rdp_to_epsilon(DEFAULT_ORDERS, gaussian_rdp(1.0), DELTA, method="best")
    with pytest.raises(ValueError, match="rdp"):
        rdp_to_epsilon(DEFAULT_ORDERS, gaussian_rdp(1.0)[:-1], DELTA)
    with pytest.raises(ValueError, match="rdp"):
        rdp_to_epsilon([2.0, 3.0], [0.1, -0.1], DELTA)
    with pytest.raises(ValueError, match="orders"):
        gaussian_rdp(1.0, [0.5, 2.0])


# --------------------------------------------------------------------------------------------
# RDP conversion
# --------------------------------------------------------------------------------------------


def test_default_orders():
    assert set(range(2, 257)) <= set(DEFAULT_ORDERS.tolist())
    assert set(DP_ACCOUNTING_ORDERS.tolist()) <= set(DEFAULT_ORDERS.tolist())
    assert np.all(np.diff(DEFAULT_ORDERS) > 0) and DEFAULT_ORDERS[0] > 1


def _random_curves(rng: np.random.Generator, orders: np.ndarray) -> list[np.ndarray]:
    curves = [k * gaussian_rdp(s, orders) for s, k in [(0.8, 1), (5.0, 30), (50.0, 1), (1e3, 1)]]
    for _ in range(20):
        # Convex-ish increasing curves of various sizes, plus a zero and an infinite entry.
        c = rng.uniform(1e-4, 3) * orders ** rng.uniform(0.5, 1.5) + rng.uniform(0, 0.5)
        curves.append(c)
    tiny = 1e-14 * orders
    curves.append(tiny)
    with_inf = gaussian_rdp(1.0, orders)
    with_inf[-5:] = np.inf
    curves.append(with_inf)
    return curves


@pytest.mark.parametrize("delta", [1e-10, 1e-6, 1e-2])
def test_improved_conversion_matches_dp_accounting(delta):
    rng = np.random.default_rng(1)
    orders = DEFAULT_ORDERS
    for curve in _random_curves(rng, orders):
        eps, order = rdp_to_epsilon(orders, curve, delta)
        ref_eps, ref_order = dpa_compute_epsilon(orders, curve, delta)
        assert eps == pytest.approx(ref_eps, rel=1e-13, abs=1e-15)
        assert order == ref_order


def test_classic_conversion_and_best():
    orders = DEFAULT_ORDERS
    curve = 10 * gaussian_rdp(3.0, orders)
    eps_c, order_c = rdp_to_epsilon(orders, curve, DELTA, method="classic")
    manual = curve + math.log(1 / DELTA) / (orders - 1)
    assert eps_c == pytest.approx(manual.min(), rel=1e-14)
    assert order_c == orders[np.argmin(manual)]
    eps_i, _ = rdp_to_epsilon(orders, curve, DELTA)
    assert eps_i < eps_c
    # Both conversions are valid but looser than the exact PLD of the same Gaussians.
    assert eps_i > gaussian_epsilon(gaussian_mu(3.0, 10), DELTA)
    assert rdp_to_epsilon_best(orders, curve, DELTA) == (
        eps_i,
        rdp_to_epsilon(orders, curve, DELTA)[1],
        "improved",
    )
    # Only orders in (1, 1.01]: the improved bound is not defined there, the classic one is.
    eps_b, order_b, method_b = rdp_to_epsilon_best([1.005], [1e-4], DELTA)
    assert method_b == "classic" and order_b == 1.005
    assert eps_b == pytest.approx(1e-4 + math.log(1 / DELTA) / 0.005)


def test_conversion_batched_over_iterations():
    orders = DEFAULT_ORDERS
    per_step = gaussian_rdp(20.0, orders)
    counts = np.arange(1, 201)
    eps, best = rdp_to_epsilon(orders, counts[:, None] * per_step, DELTA)
    assert eps.shape == best.shape == (200,)
    for k in (1, 17, 200):
        e_k, o_k = rdp_to_epsilon(orders, k * per_step, DELTA)
        assert eps[k - 1] == e_k and best[k - 1] == o_k
    assert np.all(np.diff(eps) >= 0)


# --------------------------------------------------------------------------------------------
# Subsampled Gaussian: dp-accounting wrappers and its sensitivity conventions (issue #378)
# --------------------------------------------------------------------------------------------


def test_events_describe_the_mechanism():
    ev = poisson_subsampled_gaussian_event(1.5, 0.02, 7)
    assert ev == dpa.SelfComposedDpEvent(
        dpa.PoissonSampledDpEvent(0.02, dpa.GaussianDpEvent(1.5)), 7
    )
    ev = fixed_size_subsampled_gaussian_event(1.5, 1000, 10, 7)
    assert ev == dpa.SelfComposedDpEvent(
        dpa.SampledWithoutReplacementDpEvent(1000, 10, dpa.GaussianDpEvent(1.5)), 7
    )


def test_zero_count_spends_nothing():
    assert poisson_subsampled_gaussian_epsilon(1.0, 0.1, 0, DELTA) == 0.0
    assert fixed_size_subsampled_gaussian_epsilon(1.0, 100, 10, 0, DELTA) == 0.0


def test_fixed_size_multiplier_is_over_replace_one_sensitivity():
    # With b = n every row is used: dp-accounting's WOR bound returns the plain Gaussian curve
    # alpha / (2 s^2), i.e. s is noise std over the sensitivity of the replace-one relation the
    # event is accounted under (2C for rows clipped to norm C), not over C.
    s, n, k = 2.0, 50, 40
    np.testing.assert_array_equal(
        fixed_size_subsampled_gaussian_rdp(s, n, n), gaussian_rdp(s, DP_ACCOUNTING_ORDERS)
    )
    eps = fixed_size_subsampled_gaussian_epsilon(s, n, n, k, DELTA)
    assert (
        eps
        == rdp_to_epsilon(DP_ACCOUNTING_ORDERS, k * gaussian_rdp(s, DP_ACCOUNTING_ORDERS), DELTA)[0]
    )


def test_dp_accounting_conventions_differ_between_accountants():
    # Issue #378, as of dp-accounting 0.6: under REPLACE_ONE the PLD accountant reads
    # GaussianDpEvent(s) as std / C and shifts by 2C (mu = 4 / (2 s^2)), while the RDP
    # accountant uses alpha / (2 s^2) (shift by s's own unit). Our wrappers never mix the two.
    s, eps = 2.0, 1.0
    mu1 = float(gaussian_mu(s))
    for relation, factor in [
        (dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, 1.0),
        (dpa.NeighboringRelation.REPLACE_ONE, 4.0),
    ]:
        accountant = dpa.pld.PLDAccountant(relation)
        accountant.compose(dpa.GaussianDpEvent(s))
        assert accountant.get_delta(eps) == pytest.approx(
            gaussian_delta(factor * mu1, eps), rel=1e-6
        )
        rdp_accountant = dpa.rdp.RdpAccountant(DP_ACCOUNTING_ORDERS, relation)
        rdp_accountant.compose(dpa.GaussianDpEvent(s))
        np.testing.assert_allclose(rdp_accountant.rdp, gaussian_rdp(s, DP_ACCOUNTING_ORDERS))


def test_poisson_multiplier_is_over_add_remove_sensitivity():
    # q = 1 is the plain Gaussian under add/remove: PLD matches the closed form for mu = k/(2 s^2).
    s, k = 3.0, 25
    exact = gaussian_epsilon(gaussian_mu(s, k), DELTA)
    pld_eps = poisson_subsampled_gaussian_epsilon(s, 1.0, k, DELTA)
    assert pld_eps == pytest.approx(exact, rel=1e-3)
    assert pld_eps >= exact  # pessimistic discretisation
    rdp_eps = poisson_subsampled_gaussian_epsilon(s, 1.0, k, DELTA, accountant="rdp")
    assert rdp_eps == pytest.approx(
        rdp_to_epsilon(DP_ACCOUNTING_ORDERS, k * gaussian_rdp(s, DP_ACCOUNTING_ORDERS), DELTA)[0],
        rel=1e-12,
    )
    np.testing.assert_allclose(
        poisson_subsampled_gaussian_rdp(s, 1.0), gaussian_rdp(s, DP_ACCOUNTING_ORDERS), rtol=1e-12
    )


def test_subsampling_amplifies_and_orders_argument():
    s, k = 1.0, 100
    full = gaussian_epsilon(gaussian_mu(s, k), DELTA)
    assert poisson_subsampled_gaussian_epsilon(s, 0.01, k, DELTA) < full
    curve = poisson_subsampled_gaussian_rdp(s, 0.01, orders=DEFAULT_ORDERS)
    assert curve.shape == DEFAULT_ORDERS.shape
    # Custom orders are used and a superset of orders can only help.
    coarse = poisson_subsampled_gaussian_epsilon(s, 0.01, k, DELTA, accountant="rdp")
    fine = poisson_subsampled_gaussian_epsilon(
        s, 0.01, k, DELTA, accountant="rdp", orders=DEFAULT_ORDERS
    )
    assert fine <= coarse
    assert fine == pytest.approx(rdp_to_epsilon(DEFAULT_ORDERS, k * curve, DELTA)[0], rel=1e-14)


def test_package_exports_and_no_pymc_import():
    for name in acc.__all__:
        assert hasattr(acc, name)
    # The accounting subpackage stays importable without PyMC/PyTensor: check its imports.
    for path in Path(acc.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            assert not roots & {"pymc", "pytensor", "arviz"}, (path.name, roots)


class TestMinibatchLedger:
    """Ledgers of the minibatch steps: regimes, pins through the ledger, attrs round trip."""

    def test_barker_ledger_pins(self):
        from pymc_dp.accounting.ledger import BarkerMechanism, PrivacyLedger

        ledger = PrivacyLedger(
            "DPBarker", (BarkerMechanism("test", 1000, 1_000_000, 5000),), chains=2, delta=1e-6
        )
        assert ledger.regime == "rdp"
        assert ledger.epsilon == pytest.approx(0.5797138531, rel=1e-9)  # k = 1e4 in total
        assert "improved conversion at order 35" in ledger.accountant
        orders, curve = ledger.rdp_curve()
        assert orders[0] == 2 and 2 * curve[0] == pytest.approx(0.0172265732079, rel=1e-10)
        again = PrivacyLedger.from_attrs(ledger.to_attrs())
        assert again == ledger and again.epsilon == ledger.epsilon

    def test_subsampled_ledgers_round_trip_and_regimes(self):
        from pymc_dp.accounting.ledger import (
            BarkerMechanism,
            GaussianMechanism,
            PrivacyLedger,
            SubsampledGaussianMechanism,
        )

        fixed = SubsampledGaussianMechanism("f", 1.0, 100_000, 1000, 100)
        poisson = SubsampledGaussianMechanism("p", 1.0, 100_000, 1000, 100, "poisson")
        for mech, regime in ((fixed, "rdp"), (poisson, "pld")):
            ledger = PrivacyLedger("x", (mech,), chains=3, delta=1e-6)
            assert ledger.regime == regime
            assert PrivacyLedger.from_attrs(ledger.to_attrs()) == ledger
            assert 0 < ledger.epsilon_per_chain < ledger.epsilon
        # a Gaussian with a Poisson mechanism: both in one PLD, Gaussian multiplier doubled
        both = PrivacyLedger("x", (poisson, GaussianMechanism("g", 50.0, 10)), chains=1, delta=1e-6)
        assert both.epsilon > PrivacyLedger("x", (poisson,), chains=1, delta=1e-6).epsilon
        with pytest.raises(ValueError, match="cannot compose"):
            PrivacyLedger("x", (poisson, BarkerMechanism("b", 1000, 100_000, 10)), 1, 1e-6)
        with pytest.raises(ValueError, match="sampling"):
            SubsampledGaussianMechanism("x", 1.0, 100, 10, 1, "bernoulli")
        with pytest.raises(ValueError, match="batch_size"):
            SubsampledGaussianMechanism("x", 1.0, 100, 200, 1)


def test_rdp_epsilon_curve_matches_pointwise_conversion():
    from pymc_dp.accounting.rdp import (
        DEFAULT_ORDERS,
        gaussian_rdp,
        rdp_epsilon_curve,
        rdp_to_epsilon_best,
    )

    curve = gaussian_rdp(30.0, DEFAULT_ORDERS)
    out = rdp_epsilon_curve(DEFAULT_ORDERS, curve, 5000, 1e-6)  # > one chunk of 2**20 pairs
    for k in (1, 2, 17, 4096, 4097, 5000):
        assert out[k - 1] == rdp_to_epsilon_best(DEFAULT_ORDERS, k * curve, 1e-6)[0]
    assert np.all(np.diff(out) >= 0)
    with pytest.raises(ValueError, match="rdp"):
        rdp_epsilon_curve(DEFAULT_ORDERS, curve[:-1], 10, 1e-6)


def test_largest_count():
    from pymc_dp.accounting.rdp import largest_count

    assert largest_count(lambda k: k <= 37) == 37
    assert largest_count(lambda k: k == 0) == 0
    assert largest_count(lambda k: True) >= 2**40  # the search stops on its own


# ----------------------------------------------------------------- calibration (runplan)
class _NotGaussian:
    gaussian = False  # takes the bracketed root search of runplan._calibrate


@pytest.mark.parametrize(
    "name, spend, want",
    [
        ("smooth", lambda s: 10.0 / s, 10.0),
        ("step-like (PLD grid)", lambda s: np.ceil(10.0 / s * 8) / 8, 10.0),
        ("non-finite below 5", lambda s: np.inf if s < 5.0 else 10.0 / s, 10.0),
        ("NaN below 20", lambda s: np.nan if s < 20.0 else 10.0 / s, 20.0),
        ("tiny at any noise", lambda s: 1e-3 * s, None),
    ],
)
def test_calibration_is_within_budget_and_tight(monkeypatch, name, spend, want):
    """The noise multiplier is found by Brent's method (review: a step-like epsilon let it stop
    on a flat stretch 7% above the root, a budget every noise level fits made it raise, and a
    NaN epsilon counted as within budget, 7e-9 noise where 20 was needed): it
    never spends more than the budget, and lies within the calibration's relative 1e-4 of the
    smallest multiplier that fits (10 for eps(s) = 10 / s at epsilon 1)."""
    import pymc_dp.runplan as runplan

    monkeypatch.setattr(runplan, "run_epsilon", lambda m, s, *args, **kw: spend(s))
    runplan._calibrate.cache_clear()
    scale = runplan._calibrate((_NotGaussian(),), 1.0, 1e-6, 100, 2)
    runplan._calibrate.cache_clear()
    assert spend(scale) <= 1.0  # False for NaN
    if want is None:
        assert scale <= 1e-8  # almost no noise fits
    else:
        assert want <= scale <= want * (1 + 1e-4)


@pytest.mark.parametrize(
    "n, batch, iterations, chains, epsilon",
    [(20190, 1000, 2, 1, 4.0), (20190, 1000, 2000, 1, 4.0), (5000, 50, 3000, 4, 1.0)],
)
def test_calibration_search_over_low_orders_changes_nothing(
    monkeypatch, n, batch, iterations, chains, epsilon
):
    """The noise search converts RDP over orders <= 16 while the best order lies below 16
    (0.02 s a curve against 0.2 s): the multiplier is the one of the search over every order,
    to the bit, and the ledger's epsilon is within budget."""
    import pymc_dp.runplan as runplan
    from pymc_dp.mechanisms import SubsampledPenaltyTest

    mechanisms = (SubsampledPenaltyTest(dataset_size=n, batch_size=batch),)
    runplan._calibrate.cache_clear()
    fast = runplan._calibrate(mechanisms, epsilon, 1e-6, iterations, chains)
    monkeypatch.setattr(runplan, "_SEARCH_ORDER", np.inf)
    runplan._calibrate.cache_clear()
    full = runplan._calibrate(mechanisms, epsilon, 1e-6, iterations, chains)
    runplan._calibrate.cache_clear()
    assert fast == full
    ledger = runplan.run_ledger(mechanisms, fast, iterations, chains, 1e-6)
    assert ledger.regime == "rdp" and ledger.epsilon <= epsilon


def test_epsilon_up_to_bounds_the_epsilon_and_equals_it_when_settled():
    """Over fewer orders the conversion can only be looser; it is exact where its best order lies
    below the largest order it saw (and it says whether it does)."""
    from pymc_dp.accounting.ledger import PrivacyLedger, SubsampledGaussianMechanism

    def ledger(s, count):
        m = SubsampledGaussianMechanism("t", s, 20000, 500, count)
        return PrivacyLedger(sampler="t", per_chain=(m,), chains=1, delta=1e-6)

    settled_seen = unsettled_seen = False
    for s, count in [(0.8, 10), (1.0, 2000), (3.0, 2000), (10.0, 5)]:
        led = ledger(s, count)
        for top in (5.0, 16.0, 63.0, np.inf):
            eps, settled = led.epsilon_up_to(top)
            assert eps >= led.epsilon
            if settled:
                settled_seen = True
                assert eps == led.epsilon
            else:
                unsettled_seen = True
    assert settled_seen and unsettled_seen  # both branches exercised


def test_calibration_of_subsampled_releases_refuses_a_warm_start_over_budget():
    """A warm start that alone spends the budget is refused before the noise search (review:
    the subsampled search went on to noise dp-accounting cannot take, a math domain error)."""
    import pymc_dp.runplan as runplan
    from pymc_dp.accounting.ledger import GaussianMechanism
    from pymc_dp.mechanisms import SubsampledPenaltyTest

    warm = (GaussianMechanism("warm", 10.0, 20),)
    assert runplan.run_ledger((), None, 0, 1, 1e-6, warm).epsilon > 1.0
    runplan._calibrate.cache_clear()
    with pytest.raises(runplan.PrivacyBudgetError, match="warm start alone"):
        runplan._calibrate((SubsampledPenaltyTest(5000, 50),), 1.0, 1e-6, 3000, 4, warm)
    runplan._calibrate.cache_clear()


def test_calibration_refuses_a_budget_no_noise_level_fits(monkeypatch):
    """An epsilon with a floor above the budget made the bracket search double forever."""
    import pymc_dp.runplan as runplan

    monkeypatch.setattr(runplan, "run_epsilon", lambda m, s, *args, **kw: 1.5 + 1.0 / s)
    runplan._calibrate.cache_clear()
    with pytest.raises(runplan.PrivacyBudgetError, match="No noise level"):
        runplan._calibrate((_NotGaussian(),), 1.0, 1e-6, 100, 2)
    runplan._calibrate.cache_clear()


def test_run_epsilon_takes_run_ledgers_arguments_by_name_too():
    """Review: a one-signature refactor made ``run_epsilon(..., delta=...)`` a TypeError."""
    from pymc_dp import runplan
    from pymc_dp.mechanisms import PenaltyTest

    args = ((PenaltyTest(),), 5.0, 100, 2)
    by_name = runplan.run_epsilon(*args, delta=1e-6)
    assert by_name == runplan.run_epsilon(*args, 1e-6)
    assert by_name == runplan.run_ledger(*args, delta=1e-6).epsilon > 0
