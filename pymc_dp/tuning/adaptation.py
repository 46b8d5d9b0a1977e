"""Windowed covariance adaptation from the chain's own draws: post-processing, no budget.

The draws of a DP chain are released, so any function of them is post-processing (Dwork & Roth
2014, Prop. 2.1) and spends nothing. During tuning the zero-tuning steps re-estimate the shape of
their proposal (DPPenalty) or their inverse mass matrix (DPHMC) from the warm-up draws, on Stan's
window schedule (an initial buffer, doubling slow windows, a terminal buffer in which only the step
size adapts; Stan Reference Manual, "HMC algorithm parameters"), as PyMC's NUTS does with
``QuadPotentialFullAdapt``.

Three changes for DP chains, whose windows hold few effective draws (0-20 per window in the runs
measured), where PyMC's estimator would collapse the metric:

1. The warm start's noise-aware covariance stays as a prior worth ``prior_weight`` effective draws.
   PyMC's ``QuadPotentialFullAdapt`` forgets its initial covariance after the first window.
2. A window counts its effective sample size (ArviZ's bulk ESS, the smallest over coordinates), not
   its length, and its sample covariance is corrected for autocorrelation: for draws whose mean has
   variance ``sigma^2 / ess``, ``E[(1/m) sum (x_i - xbar)^2] = sigma^2 (1 - 1 / ess)``, so the
   biased covariance is multiplied by ``ess / (ess - 1)``.
3. A window under :data:`MIN_WINDOW_ESS` effective draws is skipped.

The pooled estimate after windows ``w = 1..k`` is

    Sigma_k = (w_0 Sigma_warm + sum_w ess_w S_w) / (w_0 + sum_w ess_w),

positive definite because ``Sigma_warm`` is.
"""

from __future__ import annotations

import numpy as np
from arviz_stats.base import array_stats

__all__ = ["WindowedCovariance", "adaptation_windows"]

#: Effective draws the warm start's covariance is worth against the windows' (PyMC's
#: ``init_nuts`` gives the initial guess of its adapting potentials the same weight, 10).
PRIOR_WEIGHT = 10.0
#: A window with fewer effective draws than this is skipped. Bulk ESS from a few effective draws
#: is biased upward, so such a window shrinks the covariance. Measured: a sticky DPHMC chain
#: (n = 2e4, epsilon 10) whose windows estimated ESS 1.5-3.2 pulled the pooled sds to 0.80-0.83x
#: the posterior's, from the warm start's 1.00-1.02x.
MIN_WINDOW_ESS = 10.0


def adaptation_windows(
    tune: int, initial: int = 75, terminal: int = 50, base: int = 25
) -> list[tuple[int, int]]:
    """Slow windows ``[start, end)`` of Stan's schedule for ``tune`` tuning iterations.

    With ``tune = 1000``: ``(75, 100), (100, 150), (150, 250), (250, 450), (450, 950)``; the last
    window stretches to the terminal buffer when a doubled one would not fit. Runs too short for
    the defaults scale them to 15 % / 75 % / 10 % as Stan does; under 20 iterations: no windows.
    """
    tune = int(tune)
    if tune < 20:
        return []
    if initial + base + terminal > tune:
        initial, terminal = int(0.15 * tune), int(0.1 * tune)
        base = tune - initial - terminal
    stop = tune - terminal
    windows, start, size = [], initial, base
    while start < stop:
        end = start + size
        if end + 2 * size > stop:
            end = stop
        windows.append((start, end))
        start, size = end, 2 * size
    return windows


class WindowedCovariance:
    """ESS-weighted covariance of the warm-up draws, pooled with the warm start's.

    Parameters
    ----------
    initial_cov : ndarray (D, D)
        The warm start's noise-aware posterior covariance (public).
    tune : int
        Tuning iterations of the chain; windows follow :func:`adaptation_windows`.
    mask : ndarray of bool (D,), optional
        Coordinates to estimate; the others keep ``initial_cov`` (prior-only variables, which
        move in their own exact block).
    prior_weight : float
        Effective draws ``initial_cov`` is worth.
    min_ess : float, optional
        Windows with a smaller ESS are skipped (default :data:`MIN_WINDOW_ESS`).
    initial_mean : ndarray (D,), optional
        The warm start's mean, pooled with the windows' means the same way (:attr:`mean`).
    """

    def __init__(
        self,
        initial_cov: np.ndarray,
        tune: int,
        mask: np.ndarray | None = None,
        prior_weight: float = PRIOR_WEIGHT,
        min_ess: float | None = None,
        initial_mean: np.ndarray | None = None,
    ) -> None:
        self.initial_cov = np.array(initial_cov, dtype=float)
        dim = self.initial_cov.shape[0]
        self.mask = np.ones(dim, bool) if mask is None else np.asarray(mask, bool)
        self.prior_weight = float(prior_weight)
        self.min_ess = MIN_WINDOW_ESS if min_ess is None else float(min_ess)
        self.windows = adaptation_windows(tune)
        self._ends = {end: start for start, end in self.windows}
        self.cov = self.initial_cov.copy()
        #: The pooled mean, like the covariance (an independence proposal's centre); starts at
        #: ``initial_mean`` (default 0).
        self.mean = np.zeros(dim) if initial_mean is None else np.array(initial_mean, float)
        self.weight = self.prior_weight
        self.window_ess: list[float] = []
        self._draws: list[np.ndarray] = []

    def update(self, q: np.ndarray, iteration: int) -> np.ndarray | None:
        """Record the released draw of ``iteration``; at a window's end return the new
        covariance (None otherwise, and None when the window's ESS is below ``min_ess``)."""
        if not self.windows or iteration >= self.windows[-1][1]:
            return None
        if iteration >= self.windows[0][0]:
            self._draws.append(np.array(q, dtype=float))
        if iteration + 1 not in self._ends:
            return None
        draws = np.asarray(self._draws)[:, self.mask]
        self._draws = []
        ess = window_ess(draws)
        self.window_ess.append(ess)
        if ess < self.min_ess:
            return None
        sample = np.cov(draws, rowvar=False, bias=True).reshape(draws.shape[1], -1)
        sample *= ess / (ess - 1.0)
        a = np.ix_(self.mask, self.mask)
        block = (self.weight * self.cov[a] + ess * sample) / (self.weight + ess)
        self.cov[a] = 0.5 * (block + block.T)
        m = self.mask
        self.mean[m] = (self.weight * self.mean[m] + ess * draws.mean(axis=0)) / (self.weight + ess)
        self.weight += ess
        return self.cov.copy()


def window_ess(draws: np.ndarray) -> float:
    """Smallest bulk ESS over the coordinates of one window's draws ``(m, D)``, at most ``m``;
    0 when a coordinate never moved (its ESS is undefined)."""
    m = draws.shape[0]
    if m < 4 or np.any(np.ptp(draws, axis=0) == 0):
        return 0.0
    ess = array_stats.ess(draws[None], chain_axis=0, draw_axis=1, method="bulk")
    ess = float(np.min(ess))
    return min(ess, float(m)) if np.isfinite(ess) else 0.0
