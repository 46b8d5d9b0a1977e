r"""Tight composition of Gaussian mechanisms, in closed form.

A Gaussian mechanism with noise multiplier :math:`s` (noise standard deviation divided by the L2
sensitivity) has privacy loss distribution (PLD) :math:`N(\mu, 2\mu)` with :math:`\mu = 1/(2 s^2)`.
PLDs of independent releases convolve, so any sequence of Gaussian releases, adaptive or not,
has PLD :math:`N(\mu, 2\mu)` with :math:`\mu = \sum_i 1/(2 s_i^2)`: the whole privacy cost is the
single number :math:`\mu` (it equals the zCDP parameter :math:`\rho` and :math:`\mu_{GDP}^2/2`).
Its exact privacy profile (Balle & Wang 2018, Theorem 8) is

.. math::

    \delta(\varepsilon) = \Phi\left(-\frac{\varepsilon}{\sqrt{2\mu}} + \sqrt{\mu/2}\right)
        - e^{\varepsilon}\, \Phi\left(-\frac{\varepsilon}{\sqrt{2\mu}} - \sqrt{\mu/2}\right).

The literal formula overflows for :math:`\varepsilon \gtrsim 709` and cancels catastrophically in
the tail, so everything here is computed in log space. With :math:`a = \sqrt{\mu/2} -
\varepsilon/\sqrt{2\mu}` and :math:`b = a - \sqrt{2\mu}`,

.. math::

    \log\delta = \log\Phi(a) + \log\left(1 - e^{x}\right), \qquad
    x = \varepsilon + \log\Phi(b) - \log\Phi(a) \le 0.

For :math:`a < 0` the identity :math:`\Phi(-z) = \tfrac12 \operatorname{erfcx}(z/\sqrt2)
e^{-z^2/2}` and :math:`b^2 - a^2 = 2\varepsilon` turn :math:`x` into
:math:`\log\operatorname{erfcx}(-b/\sqrt2) - \log\operatorname{erfcx}(-a/\sqrt2)`, a difference of
O(log) quantities instead of O(:math:`\varepsilon^2/\mu`) ones, so no large terms cancel. When
that difference is itself tiny (small :math:`\mu`) it is taken from a midpoint Taylor expansion
or from the asymptotic series of erfcx, and for :math:`a \ge 0` from a difference of erf values of
opposite sign. Against a literal 80-digit evaluation (mpmath), delta is accurate to 1e-12
relative wherever it is >= 1e-300, for :math:`\mu \in [10^{-12}, 10^6]` and
:math:`\varepsilon \le 10^4`, and log delta to ~1e-15 relative deeper in the tail.

References
----------
.. [1] Balle, B. and Wang, Y.-X. (2018). Improving the Gaussian mechanism for differential privacy:
   analytical calibration and optimal denoising. ICML.
.. [2] Dong, J., Roth, A. and Su, W. (2022). Gaussian differential privacy. JRSS B.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize, special

from pymc_dp.checks import (
    _check_array,
    check_count,
    check_delta,
    check_epsilon,
    check_positive,
)

__all__ = [
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_log_delta",
    "gaussian_mu",
    "gaussian_mu_for_budget",
    "max_iterations",
    "max_releases",
    "noise_multiplier_for_budget",
]

_SQRT2 = math.sqrt(2.0)
_LN2 = math.log(2.0)
# From this argument on, log(erfcx) differences come from the asymptotic series
# erfcx(u) ~ (1 + sum_k c_k u^(-2k)) / (u sqrt(pi)), c_k = (-1)^k (2k-1)!! / 2^k; with 10 terms
# the truncation error at u = 12 is ~1e-17 relative.
_ASYMPTOTIC_U = 12.0
_ASYMPTOTIC_K = np.arange(1, 11)
_ASYMPTOTIC_COEF = np.cumprod(-(2.0 * _ASYMPTOTIC_K - 1.0) / 2.0)
# Below this increment, log erfcx(u + h) - log erfcx(u) comes from a midpoint Taylor expansion
# (error ~h^4 relative) instead of a difference of two nearly equal logs.
_TAYLOR_H = 1e-3
_NEWTON_RTOL = 1e-13
_MAX_NEWTON_ITER = 200


def _as_output(arr: NDArray[np.float64]) -> float | NDArray[np.float64]:
    """Return a Python float for 0-d results, the array otherwise."""
    return float(arr) if arr.ndim == 0 else arr


def _log1mexp(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """Compute log(1 - exp(x)) for x <= 0 without cancellation (Maechler 2012)."""
    with np.errstate(divide="ignore"):
        return np.where(x > -_LN2, np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def _log_erfcx_diff(u: NDArray[np.float64], h: NDArray[np.float64]) -> NDArray[np.float64]:
    """Compute G(u + h) - G(u), G = log erfcx, for 1-d arrays u >= 0, h >= 0."""
    out = np.empty(u.shape)
    big = u >= _ASYMPTOTIC_U
    taylor = ~big & (h <= _TAYLOR_H)
    direct = ~big & ~taylor
    out[direct] = np.log(special.erfcx(u[direct] + h[direct])) - np.log(special.erfcx(u[direct]))
    if np.any(taylor):
        # G' = 2m - R with R = 2 / (sqrt(pi) erfcx(m)) and R' = -R G', so G'' = 2 + R G' and
        # G''' = R (G'' - G'^2); midpoint rule G(u + h) - G(u) = h G'(m) + h^3 G'''(m) / 24 + ...
        ht = h[taylor]
        m = u[taylor] + 0.5 * ht
        r = 2.0 / (math.sqrt(math.pi) * special.erfcx(m))
        g1 = 2.0 * m - r
        g3 = r * (2.0 + r * g1 - g1 * g1)
        out[taylor] = ht * g1 + ht**3 * g3 / 24.0
    if np.any(big):
        # G(t) = -log(t sqrt(pi)) + log S(t); the difference of S is formed term by term from
        # expm1 so that a tiny h/u is not lost against 1.
        ub, w = u[big], np.log1p(h[big] / u[big])
        k = _ASYMPTOTIC_K[:, None]
        terms = _ASYMPTOTIC_COEF[:, None] * ub ** (-2.0 * k)
        s_u = 1.0 + terms.sum(axis=0)
        d_s = (terms * np.expm1(-2.0 * k * w)).sum(axis=0)
        out[big] = -w + np.log1p(d_s / s_u)
    return out


def _log_delta_and_x(
    mu: NDArray[np.float64], eps: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Return (log delta, x) for mu > 0 and finite eps >= 0, broadcasting.

    ``x = log(e^eps Phi(b) / Phi(a))``, so that ``d log delta / d eps = -1 / expm1(-x)``.
    """
    mu, eps = np.broadcast_arrays(mu, eps)
    s = np.sqrt(2.0 * mu)
    a = 0.5 * s - eps / s
    log_phi_a = special.log_ndtr(a)
    x = np.empty(a.shape)
    tail = a < 0.0
    x[tail] = _log_erfcx_diff(-a[tail] / _SQRT2, s[tail] / _SQRT2)
    body = ~tail
    ab, sb = a[body], s[body]
    bb = ab - sb
    # log Phi(b) - log Phi(a) = log1p(-(Phi(a) - Phi(b)) / Phi(a)); for small s the erf
    # difference (opposite signs, since b < 0 <= a) keeps full relative accuracy.
    small = sb < 1.0
    log_ratio = np.empty(ab.shape)
    log_ratio[small] = np.log1p(
        -0.5
        * (special.erf(ab[small] / _SQRT2) - special.erf(bb[small] / _SQRT2))
        / special.ndtr(ab[small])
    )
    log_ratio[~small] = special.log_ndtr(bb[~small]) - log_phi_a[body][~small]
    x[body] = eps[body] + log_ratio
    # x <= 0 exactly; rounding may push it a hair above 0 when delta is ~ 0.
    x = np.minimum(x, 0.0)
    return log_phi_a + _log1mexp(x), x


def gaussian_mu(noise_multiplier: ArrayLike, count: ArrayLike = 1) -> float | NDArray[np.float64]:
    """Privacy loss parameter mu of ``count`` Gaussian releases.

    Parameters
    ----------
    noise_multiplier : float or array_like
        Noise standard deviation divided by the L2 sensitivity of the released quantity (> 0).
    count : float or array_like, default 1
        Number of releases (>= 0).

    Returns
    -------
    float or ndarray
        ``count / (2 noise_multiplier**2)``, the mean of the composed PLD N(mu, 2 mu).
    """
    s = _check_array(noise_multiplier, "noise_multiplier", positive=True)
    if not np.all(np.isfinite(s)):
        raise ValueError(f"`noise_multiplier` must be finite, got {noise_multiplier}")
    k = _check_array(count, "count")
    if not np.all(np.isfinite(k)):
        raise ValueError(f"`count` must be finite, got {count}")
    return _as_output(k / (2.0 * s * s))


def _check_mu(mu: ArrayLike) -> NDArray[np.float64]:
    arr = _check_array(mu, "mu")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"`mu` must be finite, got {arr[~np.isfinite(arr)].flat[0]}")
    return arr


def gaussian_log_delta(mu: ArrayLike, epsilon: ArrayLike) -> float | NDArray[np.float64]:
    r"""Natural log of the exact delta(epsilon) of composed Gaussian mechanisms.

    Parameters
    ----------
    mu : float or array_like
        Composed privacy loss parameter :math:`\mu = \sum_i 1/(2 s_i^2)` (finite, >= 0).
    epsilon : float or array_like
        Privacy parameter epsilon (>= 0; ``inf`` gives ``-inf``). Broadcast against ``mu``.

    Returns
    -------
    float or ndarray
        :math:`\log\delta(\varepsilon)`; ``-inf`` where ``mu == 0``. Finite and accurate far into
        the tail (e.g. ``mu = 0.5, epsilon = 1e4`` gives about ``-5e7``).
    """
    mu_arr = _check_mu(mu)
    eps_arr = _check_array(epsilon, "epsilon")
    mu_arr, eps_arr = np.broadcast_arrays(mu_arr, eps_arr)
    out = np.full(mu_arr.shape, -np.inf)
    live = (mu_arr > 0.0) & np.isfinite(eps_arr)
    out[live] = _log_delta_and_x(mu_arr[live], eps_arr[live])[0]
    return _as_output(out)


def gaussian_delta(mu: ArrayLike, epsilon: ArrayLike) -> float | NDArray[np.float64]:
    r"""Exact delta(epsilon) of composed Gaussian mechanisms with PLD :math:`N(\mu, 2\mu)`.

    Parameters
    ----------
    mu : float or array_like
        Composed privacy loss parameter (finite, >= 0).
    epsilon : float or array_like
        Privacy parameter epsilon (>= 0). Broadcast against ``mu``.

    Returns
    -------
    float or ndarray
        :math:`\delta(\varepsilon)`, computed as ``exp(gaussian_log_delta(mu, epsilon))``; it
        underflows to 0 only below ~1e-308 (use :func:`gaussian_log_delta` there).
    """
    return _as_output(np.exp(np.asarray(gaussian_log_delta(mu, epsilon))))


def _check_delta_array(delta: ArrayLike) -> NDArray[np.float64]:
    if np.ndim(delta) == 0:
        return np.asarray(check_delta(delta))
    arr = np.asarray(delta, dtype=np.float64)
    bad = ~((arr > 0.0) & (arr < 1.0))
    if np.any(bad):
        raise ValueError(f"`delta` must be a number in (0, 1), got {arr[bad].flat[0]}")
    return arr


def _solve_epsilon(mu: NDArray[np.float64], log_target: NDArray[np.float64]) -> NDArray[np.float64]:
    """Solve log delta(mu, eps) = log_target for eps > 0 (1-d arrays, delta(mu, 0) > target).

    Safeguarded Newton: log delta is decreasing in eps with derivative -1/expm1(-x); the
    bracket [lo, hi] keeps every iterate valid and bisection takes over if Newton leaves it.
    """
    lo = np.zeros_like(mu)
    # delta(eps) <= Phi(a), so Phi(a) = target gives an upper bound; the Chernoff bound
    # Phi(a) <= exp(-a^2/2) is the fallback should ndtri lose accuracy for a subnormal target.
    s = np.sqrt(2.0 * mu)
    with np.errstate(over="ignore", invalid="ignore"):
        hi = mu - s * special.ndtri(np.exp(log_target))
    chernoff = mu + 2.0 * np.sqrt(-mu * log_target)
    hi = np.where(np.isfinite(hi) & (hi > 0.0), np.minimum(hi, chernoff), chernoff)
    eps = hi.copy()
    active = np.arange(mu.size)
    for _ in range(_MAX_NEWTON_ITER):
        m, t, e = mu[active], log_target[active], eps[active]
        log_delta, x = _log_delta_and_x(m, e)
        f = log_delta - t
        above = f > 0.0
        lo[active] = np.where(above, e, lo[active])
        hi[active] = np.where(above, hi[active], e)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            newton = e + f * np.expm1(-x)
        # Converged: the root is within one (tiny) Newton step; step a hair to the right of it
        # so the final check below finds delta <= target.
        done = (f == 0.0) | (np.abs(newton - e) <= _NEWTON_RTOL * e)
        ok = (newton > lo[active]) & (newton < hi[active])
        new = np.where(ok, newton, 0.5 * (lo[active] + hi[active]))
        eps[active] = np.where(done, np.maximum(e, newton) * (1.0 + _NEWTON_RTOL), new)
        active = active[~done]
        if active.size == 0:
            break
    # Return a point known to satisfy the budget: the last iterate if it does, else hi.
    log_delta, _ = _log_delta_and_x(mu, eps)
    return np.where(log_delta <= log_target, eps, hi)


def gaussian_epsilon(mu: ArrayLike, delta: ArrayLike) -> float | NDArray[np.float64]:
    r"""Smallest epsilon >= 0 with delta(mu, epsilon) <= delta, vectorised over ``mu``.

    Parameters
    ----------
    mu : float or array_like
        Composed privacy loss parameter(s) (finite, >= 0), e.g. the cumulative spend after
        every iteration of a sampler.
    delta : float or array_like
        Target delta in (0, 1); broadcast against ``mu``.

    Returns
    -------
    float or ndarray
        Epsilon, accurate to ~1e-13 relative; 0 where ``delta(mu, 0) <= delta``. The answer is
        conservative: ``gaussian_delta(mu, result) <= delta`` up to rounding of ``delta`` itself.

    Notes
    -----
    A safeguarded Newton iteration on :math:`\log\delta(\varepsilon)` runs on all elements at
    once (about 1e5 values in tens of milliseconds).
    """
    mu_arr = _check_mu(mu)
    delta_arr = _check_delta_array(delta)
    mu_arr, delta_arr = np.broadcast_arrays(mu_arr, delta_arr)
    out = np.zeros(mu_arr.shape)
    log_target = np.log(delta_arr)
    pos = mu_arr > 0.0
    if np.any(pos):
        m, t = mu_arr[pos], log_target[pos]
        need = _log_delta_and_x(m, np.zeros_like(m))[0] > t
        sol = np.zeros_like(m)
        if np.any(need):
            sol[need] = _solve_epsilon(m[need], t[need])
        out[pos] = sol
    return _as_output(out)


def gaussian_mu_for_budget(epsilon: float, delta: float) -> float:
    r"""Largest mu with delta(mu, epsilon) <= delta.

    Parameters
    ----------
    epsilon, delta : float
        The target budget: epsilon finite and > 0, delta in (0, 1).

    Returns
    -------
    float
        :math:`\mu^*`, accurate to ~1e-15 relative and never above the true value (the result
        is stepped down until ``gaussian_log_delta(mu, epsilon) <= log(delta)`` holds).
    """
    eps = check_epsilon(epsilon)
    dlt = check_delta(delta)
    log_target = math.log(dlt)

    def f(mu: float) -> float:
        return float(gaussian_log_delta(mu, eps)) - log_target

    # zCDP conversion eps = mu + 2 sqrt(mu log(1/delta)) is valid, so its inverse is a lower
    # bound (written without cancellation).
    big_l = -log_target
    lo = eps**2 / (math.sqrt(big_l + eps) + math.sqrt(big_l)) ** 2
    while f(lo) > 0.0:  # never taken in exact arithmetic; guards rounding
        lo *= 0.5
    hi = 2.0 * lo
    while f(hi) <= 0.0:
        lo, hi = hi, 2.0 * hi
    mu = optimize.brentq(f, lo, hi, xtol=lo * 1e-16, rtol=4 * np.finfo(float).eps, maxiter=200)
    while f(mu) > 0.0:
        mu = math.nextafter(mu, 0.0)
    return mu


def noise_multiplier_for_budget(epsilon: float, delta: float, count: int) -> float:
    r"""Noise multiplier with which ``count`` Gaussian releases exactly meet (epsilon, delta).

    Parameters
    ----------
    epsilon, delta : float
        The target budget: epsilon finite and > 0, delta in (0, 1).
    count : int
        Number of releases (>= 1), each with the same noise multiplier.

    Returns
    -------
    float
        :math:`s = \sqrt{\text{count} / (2\mu^*)}`, rounded up (by at most a few ulps) so that
        ``max_releases(s, epsilon, delta) >= count``.
    """
    eps = check_epsilon(epsilon)
    dlt = check_delta(delta)
    k = check_count(count, "count", minimum=1)
    mu_star = gaussian_mu_for_budget(eps, dlt)
    s = math.sqrt(k / (2.0 * mu_star))
    log_target = math.log(dlt)
    # Same expression as max_iterations uses, so the round trip is exact.
    while float(gaussian_log_delta(k * float(gaussian_mu(s)), eps)) > log_target:
        s = math.nextafter(s, math.inf)
    return s


def max_iterations(mu_per_iteration: float, epsilon: float, delta: float) -> int:
    r"""Largest number of iterations k with delta(k * mu_per_iteration, epsilon) <= delta.

    Parameters
    ----------
    mu_per_iteration : float
        Privacy loss parameter spent by one iteration, :math:`\sum_j 1/(2 s_j^2)` over the
        Gaussian releases of the iteration (finite, > 0).
    epsilon, delta : float
        The target budget: epsilon finite and > 0, delta in (0, 1).

    Returns
    -------
    int
        k >= 0. ``floor(mu* / mu_per_iteration)`` is checked against k and k + 1 directly, so
        rounding can't add or drop an iteration.
    """
    mu_i = check_positive(mu_per_iteration, "mu_per_iteration")
    eps = check_epsilon(epsilon)
    dlt = check_delta(delta)
    log_target = math.log(dlt)

    def fits(k: int) -> bool:
        return k == 0 or float(gaussian_log_delta(k * mu_i, eps)) <= log_target

    k = math.floor(gaussian_mu_for_budget(eps, dlt) / mu_i)
    while fits(k + 1):
        k += 1
    while not fits(k):
        k -= 1
    return k


def max_releases(noise_multiplier: float, epsilon: float, delta: float) -> int:
    """Largest number of Gaussian releases with multiplier ``noise_multiplier`` within budget.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation divided by the L2 sensitivity (finite, > 0).
    epsilon, delta : float
        The target budget: epsilon finite and > 0, delta in (0, 1).

    Returns
    -------
    int
        ``max_iterations(gaussian_mu(noise_multiplier), epsilon, delta)``.
    """
    s = check_positive(noise_multiplier, "noise_multiplier")
    return max_iterations(float(gaussian_mu(s)), epsilon, delta)
