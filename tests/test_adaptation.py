"""Windowed covariance adaptation (pymc_dp.tuning.adaptation): Stan's schedule, the
ESS-weighted pooled estimate, and its correction for autocorrelated draws."""

from __future__ import annotations

import numpy as np
import pytest

from pymc_dp.tuning.adaptation import (
    WindowedCovariance,
    adaptation_windows,
    window_ess,
)


def test_windows_follow_stans_schedule():
    assert adaptation_windows(1000) == [(75, 100), (100, 150), (150, 250), (250, 450), (450, 950)]
    # too short for 75 + 25 + 50: Stan's 15 % / 75 % / 10 %
    assert adaptation_windows(100) == [(15, 90)]
    assert adaptation_windows(19) == []
    for tune in (20, 150, 151, 300, 2500):
        w = adaptation_windows(tune)
        assert all(a[1] == b[0] for a, b in zip(w[:-1], w[1:], strict=True))  # contiguous
        assert w[-1][1] <= tune and w[0][0] >= 0


def _ar1(rng, m, rho, chol):
    """m draws of a stationary AR(1) with lag-one correlation rho and covariance chol chol^T."""
    z = np.empty((m, chol.shape[0]))
    z[0] = rng.standard_normal(chol.shape[0])
    for t in range(1, m):
        z[t] = rho * z[t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal(chol.shape[0])
    return z @ chol.T


def test_independent_draws_recover_the_covariance():
    """875 iid draws (tune 1000) from Sigma, starting from 4 Sigma worth 10 draws: the prior pull
    is 10 * 3 / 885 = 0.034 and the sampling error of a correlation-scale entry about
    sqrt(2 / 875) = 0.048, so 0.2 is beyond 3 sds of both together."""
    rng = np.random.default_rng(0)
    sigma = np.array([[1.0, 0.6, 0.0], [0.6, 2.0, -0.5], [0.0, -0.5, 0.5]])
    chol = np.linalg.cholesky(sigma)
    est = WindowedCovariance(4 * sigma, tune=1000)
    updates = [est.update(q, i) for i, q in enumerate(_ar1(rng, 1000, 0.0, chol))]
    assert sum(u is not None for u in updates) == 5  # one per window
    sd = np.sqrt(np.diag(sigma))
    assert np.max(np.abs(est.cov - sigma) / np.outer(sd, sd)) < 0.2
    assert est.weight == pytest.approx(10 + sum(est.window_ess))


def test_autocorrelated_draws_are_corrected_for_their_ess():
    """AR(1) draws with rho = 0.8 in a window of 75 (tune 100) hold about 75 / 9 = 8 effective
    draws; their biased sample variance is low by 1 / ess (about 12 %). Over 300 windows (prior
    weight ~0, so each estimate is the window's alone) the corrected variance averages 1 within
    Monte Carlo error (measured 0.987, sd of the mean 0.024): [0.93, 1.07] is ~3 sds; the
    uncorrected mean (measured 0.86) falls outside."""
    rng = np.random.default_rng(1)
    corrected, raw = [], []
    for _ in range(300):
        est = WindowedCovariance(np.eye(1), tune=100, prior_weight=1e-12, min_ess=1.5)
        draws = _ar1(rng, 100, 0.8, np.eye(1))
        for i, q in enumerate(draws):
            est.update(q, i)
        corrected.append(est.cov[0, 0])
        raw.append(np.var(draws[15:90]))
    assert 0.93 < np.mean(corrected) < 1.07
    assert np.mean(raw) < 0.93


def test_frozen_and_sticky_windows_change_nothing_and_masked_coordinates_keep_their_prior():
    init = np.array([[1.0, 0.2], [0.2, 3.0]])
    est = WindowedCovariance(init, tune=100)
    frozen = [est.update(np.array([0.5, 1.0]), i) for i in range(100)]
    assert all(u is None for u in frozen) and est.window_ess == [0.0]
    np.testing.assert_array_equal(est.cov, init)
    # rho = 0.995 over 75 draws: about 0.2 effective draws, estimated below the threshold of 10
    est = WindowedCovariance(init, tune=100)
    sticky = _ar1(np.random.default_rng(4), 100, 0.995, np.linalg.cholesky(init))
    assert all(est.update(q, i) is None for i, q in enumerate(sticky))
    assert 0 < est.window_ess[0] < 10
    np.testing.assert_array_equal(est.cov, init)

    rng = np.random.default_rng(2)
    est = WindowedCovariance(init, tune=100, mask=np.array([True, False]))
    for i in range(100):
        est.update(np.array([rng.standard_normal(), 7.0]), i)  # coordinate 1 never moves
    assert est.cov[1, 1] == 3.0 and est.cov[0, 1] == 0.2
    assert est.cov[0, 0] != 1.0


def test_window_ess_is_capped_and_zero_for_stuck_coordinates():
    rng = np.random.default_rng(3)
    assert window_ess(rng.standard_normal((3, 2))) == 0.0  # too short to say
    anti = np.tile([[1.0], [-1.0]], (50, 1)) + 0.01 * rng.standard_normal((100, 1))
    assert window_ess(anti) == 100.0  # antithetic draws: ESS > m, capped at m
    x = rng.standard_normal((100, 2))
    x[:, 1] = 4.0
    assert window_ess(x) == 0.0
