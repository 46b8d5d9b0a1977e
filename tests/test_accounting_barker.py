"""Tests for the DP Barker accounting (pymc_dp.accounting.barker) and the generic WBK19 Theorem 9
amplification (pymc_dp.accounting.rdp.wor_subsampled_rdp): pins from docs/references.md,
an independent 50-digit mpmath evaluation, properties, dp-accounting cross-checks, validation."""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
import pytest

from pymc_dp import accounting as acc
from pymc_dp.accounting import (
    barker_epsilon,
    barker_epsilon_curve,
    barker_max_iterations,
    barker_orders,
    barker_rdp,
    barker_step_rdp,
    fixed_size_subsampled_gaussian_rdp,
    gaussian_rdp,
    rdp_to_epsilon,
    wor_subsampled_rdp,
)

try:
    import mpmath as mp
except ImportError:  # pragma: no cover - mpmath ships with sympy in the dev environment
    mp = None
needs_mpmath = pytest.mark.skipif(mp is None, reason="mpmath is not installed")

DELTA = 1e-6
B, N = 1000, 1_000_000


# --------------------------------------------------------------------------------------------
# Pins from docs/references.md, "DP Barker RDP"
# --------------------------------------------------------------------------------------------


def test_pin_step_rdp_order_2():
    assert barker_step_rdp(B, [2])[0] == pytest.approx(0.358139162247, rel=1e-11)


def test_pin_composed_rdp_order_2():
    orders, rdp = barker_rdp(B, N)
    assert orders[0] == 2.0
    assert 10_000 * rdp[0] == pytest.approx(0.0172265732079, rel=1e-10)


def test_pin_epsilon_1e4_iterations():
    orders, rdp = barker_rdp(B, N)
    eps_c, order_c = rdp_to_epsilon(orders, 10_000 * rdp, DELTA, method="classic")
    eps_i, order_i = rdp_to_epsilon(orders, 10_000 * rdp, DELTA, method="improved")
    assert eps_c == pytest.approx(0.7059487709, rel=1e-9)
    assert order_c == 40.0
    assert eps_i == pytest.approx(0.5797138531, rel=1e-9)
    assert order_i == 35.0
    eps, order, method = barker_epsilon(B, N, 10_000, DELTA)
    assert (eps, order, method) == (eps_i, 35.0, "improved")


def test_pin_neurips_2019_setting():
    # b = 1000, N0 = 100 (does not enter), n = 1e6, 20000 iterations, delta = 1e-6: "eps = 1.00".
    orders, rdp = barker_rdp(B, N)
    eps_c, _ = rdp_to_epsilon(orders, 20_000 * rdp, DELTA, method="classic")
    assert round(eps_c, 2) == 1.00
    assert eps_c == pytest.approx(1.00042, abs=5e-6)
    eps, order, method = barker_epsilon(B, N, 20_000, DELTA)
    assert method == "improved"
    assert eps == pytest.approx(0.83684318, rel=1e-6)
    assert order == 25.0


def test_orders_for_batch_1000():
    # alpha < b / 5 = 200: the largest valid order is 199.
    np.testing.assert_array_equal(barker_orders(B), np.arange(2.0, 200.0))
    np.testing.assert_array_equal(barker_orders(1001), np.arange(2.0, 201.0))
    np.testing.assert_array_equal(barker_orders(11), [2.0])
    np.testing.assert_array_equal(barker_orders(10_000), np.arange(2.0, 257.0))
    np.testing.assert_array_equal(barker_orders(10_000, max_order=10), np.arange(2.0, 11.0))
    assert barker_orders(B).dtype == np.float64


# --------------------------------------------------------------------------------------------
# Independent 50-digit evaluations
# --------------------------------------------------------------------------------------------


def _mp_step(b: int, alpha: int):
    """Poster eq. 11 / thesis Theorem 7 at 50 digits."""
    b_, a_ = mp.mpf(b), mp.mpf(alpha)
    return 5 / (2 * b_) + mp.log(2 * b_ / (b_ - 5 * a_)) / (2 * (a_ - 1)) + 2 * a_ / (b_ - 5 * a_)


def _mp_theorem9(step: list[float], q: float, alpha: int) -> float:
    """WBK19 Theorem 9 (eps'(inf) = inf) as a naive sum at 50 digits; step[j - 2] = eps'(j)."""
    with mp.workdps(50):
        q_ = mp.mpf(q)
        e2 = mp.mpf(step[0])
        total = mp.mpf(1) + q_**2 * mp.binomial(alpha, 2) * min(
            4 * (mp.exp(e2) - 1), 2 * mp.exp(e2)
        )
        for j in range(3, alpha + 1):
            total += 2 * q_**j * mp.binomial(alpha, j) * mp.exp((j - 1) * mp.mpf(step[j - 2]))
        return float(mp.log(total) / (alpha - 1))


@needs_mpmath
@pytest.mark.parametrize("alpha", [2, 3, 10, 50, 199])
def test_step_rdp_against_mpmath(alpha):
    with mp.workdps(50):
        want = float(_mp_step(B, alpha))
    assert barker_step_rdp(B, [alpha])[0] == pytest.approx(want, rel=1e-13)


@needs_mpmath
@pytest.mark.parametrize("q", [1e-3, 1e-2, 0.3, 1.0])
def test_theorem9_barker_curve_against_mpmath(q):
    step = barker_step_rdp(B)  # orders 2..199
    ours = wor_subsampled_rdp(step, q)
    for alpha in (2, 3, 10, 50, 199):
        want = _mp_theorem9(list(step), q, alpha)
        assert ours[alpha - 2] == pytest.approx(want, rel=1e-12), alpha


@needs_mpmath
@pytest.mark.parametrize(("sigma", "q"), [(1.0, 1e-3), (0.7, 0.05), (3.0, 0.01), (10.0, 0.5)])
def test_theorem9_gaussian_curve_against_mpmath(sigma, q):
    step = gaussian_rdp(sigma, np.arange(2.0, 65.0))
    ours = wor_subsampled_rdp(step, q)
    for alpha in (2, 3, 10, 33, 64):
        want = _mp_theorem9(list(step), q, alpha)
        assert ours[alpha - 2] == pytest.approx(want, rel=1e-12), alpha


@needs_mpmath
def test_theorem9_tiny_values_keep_relative_precision():
    # q = 1e-3, alpha = 2: eps = log1p(q^2 * min(...)) ~ 1e-6; also much smaller values.
    for q, e2 in [(1e-3, 0.358139162247), (1e-6, 1e-3), (1e-8, 1e-9)]:
        got = wor_subsampled_rdp([e2], q)[0]
        assert got == pytest.approx(_mp_theorem9([e2], q, 2), rel=1e-13)
        assert got > 0.0


@needs_mpmath
def test_log_binomials_are_exact():
    from pymc_dp.accounting.rdp import _log_binomial_table

    table = _log_binomial_table(256)
    for a, j in [(2, 2), (10, 5), (199, 3), (199, 99), (256, 128), (256, 256)]:
        with mp.workdps(50):
            want = float(mp.log(mp.binomial(a, j)))
        assert table[a - 2, j - 2] == pytest.approx(want, rel=1e-15, abs=0)
    assert np.all(np.isneginf(table[np.triu_indices(255, k=1)]))


# --------------------------------------------------------------------------------------------
# Properties of the amplification
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("q", [1e-3, 1e-2, 0.05])
def test_amplified_below_step_curve_for_small_q(q):
    step = barker_step_rdp(B)
    assert np.all(wor_subsampled_rdp(step, q) < step)
    gauss = gaussian_rdp(1.0, np.arange(2.0, 257.0))
    assert np.all(wor_subsampled_rdp(gauss, q) < gauss)


def test_theorem9_is_loose_at_q_one():
    # Not the step curve: the j = alpha summand alone is 2 e^{(alpha-1) eps'(alpha)}, so the
    # bound exceeds the step curve at every alpha >= 3 (and at alpha = 2 it is >= it).
    step = barker_step_rdp(B)
    amp = wor_subsampled_rdp(step, 1.0)
    assert amp[0] >= step[0]
    assert np.all(amp[1:] > step[1:])


def test_amplified_monotone_in_q():
    qs = np.geomspace(1e-5, 1.0, 40)
    for step in (barker_step_rdp(B), gaussian_rdp(2.0, np.arange(2.0, 129.0))):
        curves = np.array([wor_subsampled_rdp(step, q) for q in qs])
        assert np.all(np.diff(curves, axis=0) > 0.0)


def test_amplified_monotone_in_step_curve():
    step = barker_step_rdp(B)
    assert np.all(wor_subsampled_rdp(step * 1.01, 0.01) > wor_subsampled_rdp(step, 0.01))


def test_amplified_prefix_consistency():
    # eps(alpha) uses eps'(2..alpha) only: truncating the input curve changes nothing below.
    step = barker_step_rdp(B)
    full = wor_subsampled_rdp(step, 0.01)
    np.testing.assert_array_equal(wor_subsampled_rdp(step[:20], 0.01), full[:20])
    orders, rdp = barker_rdp(B, N, orders=[7, 3, 150])
    np.testing.assert_array_equal(orders, [7.0, 3.0, 150.0])
    np.testing.assert_array_equal(rdp, barker_rdp(B, N)[1][[5, 1, 148]])


def test_amplified_special_values():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = wor_subsampled_rdp([0.1, 0.2, math.inf, 1.0], 0.1)
        assert np.all(np.isfinite(got[:2])) and np.all(np.isinf(got[2:]))
        assert wor_subsampled_rdp([0.0], 0.5)[0] == 0.0
        assert np.isinf(wor_subsampled_rdp([math.inf], 0.5)[0])


@pytest.mark.parametrize(
    ("sigma", "n", "b"), [(0.5, 1000, 10), (1.0, 100_000, 1000), (2.0, 1000, 100), (5.0, 100, 50)]
)
def test_theorem9_never_tighter_than_dp_accounting_theorem27(sigma, n, b):
    # dp-accounting's fixed-size WOR Gaussian is WBK19 Theorem 27: its j-th summand is
    # min{4 * (forward-difference term), 2 e^{(j-1) eps(j)}} while Theorem 9's is 2 e^{(j-1)
    # eps(j)}, and the j = 2 summands coincide. So Theorem 9 >= Theorem 27 (equal at alpha = 2
    # and wherever the second branch of the min is active, up to dp-accounting's lgamma binomials).
    orders = np.arange(2.0, 65.0)
    ours = wor_subsampled_rdp(gaussian_rdp(sigma, orders), b / n)
    theirs = fixed_size_subsampled_gaussian_rdp(sigma, n, b, orders)
    assert np.all(ours >= theirs * (1.0 - 1e-12))
    assert ours[0] == pytest.approx(theirs[0], rel=1e-12)
    if sigma >= 2.0:  # the forward-difference branch is active: Theorem 27 is strictly tighter
        assert np.max(ours / theirs) > 1.1


# --------------------------------------------------------------------------------------------
# Composition, epsilon curve, budget inversion
# --------------------------------------------------------------------------------------------


def test_count_zero_is_free():
    eps, order, method = barker_epsilon(B, N, 0, DELTA)
    assert eps == 0.0 and method == "improved" and order == 2.0
    assert barker_epsilon_curve(B, N, 0, DELTA).shape == (0,)


def test_epsilon_uses_tighter_conversion():
    orders, rdp = barker_rdp(B, N)
    for k in (1, 10, 1000, 50_000):
        eps, order, method = barker_epsilon(B, N, k, DELTA)
        eps_c, _ = rdp_to_epsilon(orders, k * rdp, DELTA, method="classic")
        eps_i, _ = rdp_to_epsilon(orders, k * rdp, DELTA, method="improved")
        assert eps == min(eps_c, eps_i)
        assert method == ("classic" if eps_c < eps_i else "improved")


def test_epsilon_curve_matches_pointwise_and_is_monotone():
    iterations = 10_000
    curve = barker_epsilon_curve(B, N, iterations, DELTA)
    assert curve.shape == (iterations,)
    assert curve[-1] == barker_epsilon(B, N, iterations, DELTA)[0]
    for k in (1, 2, 17, 5295, 5296, 9999):  # 5295 / 5296 straddle the first chunk boundary
        assert curve[k - 1] == barker_epsilon(B, N, k, DELTA)[0]
    assert np.all(np.diff(curve) >= 0.0)
    assert curve[0] > 0.0


def test_epsilon_curve_other_sizes():
    curve = barker_epsilon_curve(200, 5000, 300, 1e-5)
    assert curve[-1] == barker_epsilon(200, 5000, 300, 1e-5)[0]
    assert curve[122] == barker_epsilon(200, 5000, 123, 1e-5)[0]
    assert np.all(np.diff(curve) >= 0.0)


def test_more_data_is_more_private():
    eps = [barker_epsilon(B, n, 10_000, DELTA)[0] for n in (10**5, 10**6, 10**7)]
    assert eps[0] > eps[1] > eps[2]


@pytest.mark.parametrize("epsilon", [0.01, 0.5, 1.0, 2.0, 6.0])
def test_max_iterations_is_exact(epsilon):
    k = barker_max_iterations(B, N, epsilon, DELTA)
    assert barker_epsilon(B, N, k + 1, DELTA)[0] > epsilon
    if k > 0:
        assert barker_epsilon(B, N, k, DELTA)[0] <= epsilon


def test_max_iterations_against_curve():
    curve = barker_epsilon_curve(B, N, 40_000, DELTA)
    for epsilon in (0.3, 0.83684318, 1.0):
        k = barker_max_iterations(B, N, epsilon, DELTA)
        assert k == int(np.searchsorted(curve, epsilon, side="right"))
    assert barker_max_iterations(B, N, 1.0, DELTA) == 27967
    # Below the cost of one iteration nothing can run.
    assert barker_max_iterations(B, N, 0.5 * curve[0], DELTA) == 0
    assert barker_max_iterations(B, N, curve[0], DELTA) == 1


def test_speed():
    from pymc_dp.accounting.rdp import _log_binomial_table

    _log_binomial_table.cache_clear()
    start = time.perf_counter()
    barker_rdp(B, N)  # cold: builds the exact log-binomial table
    cold = time.perf_counter() - start
    start = time.perf_counter()
    barker_rdp(B, N)
    warm = time.perf_counter() - start
    start = time.perf_counter()
    barker_epsilon_curve(B, N, 100_000, DELTA)
    curve = time.perf_counter() - start
    # Generous bounds (typically ~7 ms, <1 ms and ~0.4 s) so a loaded machine doesn't fail.
    assert cold < 0.25 and warm < 0.05 and curve < 5.0


def test_public_api():
    for name in (
        "barker_epsilon",
        "barker_epsilon_curve",
        "barker_max_iterations",
        "barker_orders",
        "barker_rdp",
        "barker_step_rdp",
        "wor_subsampled_rdp",
    ):
        assert name in acc.__all__ and hasattr(acc, name)


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("b", [10, 5, 1])
def test_batch_too_small(b):
    for call in (
        lambda: barker_orders(b),
        lambda: barker_step_rdp(b),
        lambda: barker_rdp(b, 1000),
        lambda: barker_epsilon(b, 1000, 10, DELTA),
        lambda: barker_epsilon_curve(b, 1000, 10, DELTA),
        lambda: barker_max_iterations(b, 1000, 1.0, DELTA),
    ):
        with pytest.raises(ValueError, match=r"`batch_size`.*alpha < batch_size / 5"):
            call()


def _error(x):
    """Wrong types are TypeErrors, wrong values ValueErrors (both name the argument)."""
    return TypeError if isinstance(x, str | bool | list) or x is None else ValueError


@pytest.mark.parametrize("b", [0, -3, 1000.5, "b", None, math.nan, True])
def test_batch_not_an_integer(b):
    with pytest.raises(_error(b), match="batch_size"):
        barker_rdp(b, N)


def test_batch_larger_than_dataset():
    with pytest.raises(
        ValueError, match=r"`batch_size` \(1000\) must be <= `dataset_size` \(999\)"
    ):
        barker_rdp(B, 999)
    with pytest.raises(ValueError, match="dataset_size"):
        barker_epsilon(B, 999, 10, DELTA)
    barker_rdp(B, B)  # b = n is allowed (q = 1)


@pytest.mark.parametrize("n", [0, 1e6 + 0.5, "n", math.inf])
def test_bad_dataset_size(n):
    with pytest.raises(_error(n), match="dataset_size"):
        barker_rdp(B, n)


@pytest.mark.parametrize("orders", [[200], [2, 250], [1], [0], [2.5], [math.nan], [], [[2, 3]]])
def test_bad_orders(orders):
    with pytest.raises(ValueError, match="`orders`"):
        barker_step_rdp(B, orders)
    with pytest.raises(ValueError, match="`orders`"):
        barker_rdp(B, N, orders)


def test_order_limit_message():
    with pytest.raises(ValueError, match=r"alpha < batch_size / 5 = 200.*2\.\.199.*got 200"):
        barker_step_rdp(B, [199, 200])
    assert np.isfinite(barker_step_rdp(B, [199])[0])


def test_bad_max_order():
    with pytest.raises(ValueError, match="max_order"):
        barker_orders(B, max_order=1)


@pytest.mark.parametrize("bad_delta", [0.0, 1.0, -0.1, 1.5, math.nan, "x"])
def test_bad_delta(bad_delta):
    for call in (
        lambda: barker_epsilon(B, N, 10, bad_delta),
        lambda: barker_epsilon_curve(B, N, 10, bad_delta),
        lambda: barker_max_iterations(B, N, 1.0, bad_delta),
    ):
        with pytest.raises(_error(bad_delta), match="`delta`"):
            call()


@pytest.mark.parametrize("bad_count", [-1, 2.5, math.nan, "ten", None])
def test_bad_count(bad_count):
    with pytest.raises(_error(bad_count), match="`count`"):
        barker_epsilon(B, N, bad_count, DELTA)
    with pytest.raises(_error(bad_count), match="`iterations`"):
        barker_epsilon_curve(B, N, bad_count, DELTA)


@pytest.mark.parametrize("bad_eps", [0.0, -1.0, math.nan, math.inf, "one"])
def test_bad_epsilon(bad_eps):
    with pytest.raises(_error(bad_eps), match="`epsilon`"):
        barker_max_iterations(B, N, bad_eps, DELTA)


@pytest.mark.parametrize(
    "step", [[], [[0.1, 0.2]], 0.1, [0.1, -0.2], [0.1, math.nan], ["a"], [None]]
)
def test_wor_bad_step_rdp(step):
    with pytest.raises(ValueError, match="`step_rdp`"):
        wor_subsampled_rdp(step, 0.1)


@pytest.mark.parametrize("q", [0.0, -0.1, 1.5, math.nan, "q", None])
def test_wor_bad_sampling_ratio(q):
    with pytest.raises(_error(q), match="`sampling_ratio`"):
        wor_subsampled_rdp([0.1, 0.2], q)
