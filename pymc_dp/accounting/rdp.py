r"""Rényi DP curves, conversion to (epsilon, delta), and subsampled Gaussian mechanisms.

An RDP curve is an array of Rényi divergence bounds :math:`\mathrm{RDP}(\alpha)` over a grid of
orders :math:`\alpha > 1`; curves of composed mechanisms add. Subsampled Gaussian mechanisms are
delegated to dp-accounting, whose events and accountants are the reference implementation.

Sensitivity conventions (dp-accounting issue #378)
--------------------------------------------------
A noise multiplier is always a noise standard deviation divided by an L2 sensitivity, but *which*
sensitivity depends on the neighbouring relation, and dp-accounting is not uniform about it:

* Poisson sampling, add/remove-one neighbours (:func:`poisson_subsampled_gaussian_epsilon`):
  noise std / (L2 norm bound of one row's contribution), which is the add/remove sensitivity.
  For a sum of rows clipped to norm C this is ``std / C``.
* Fixed-size sampling without replacement, replace-one neighbours
  (:func:`fixed_size_subsampled_gaussian_epsilon`): dp-accounting's ``RdpAccountant`` applies
  Theorem 27 of Wang, Balle & Kasiviswanathan (2019) to the base curve :math:`\alpha/(2\sigma^2)`
  (``_compute_rdp_sample_wor_gaussian``; with ``sample_size == source_dataset_size`` it returns
  exactly :math:`\alpha/(2\sigma^2)`), so :math:`\sigma` must be noise std / (L2 sensitivity of
  *replacing* one row). For a sum of rows clipped to norm C that sensitivity is 2C, so pass
  ``std / (2 C)``, not the ``std / C`` that the ``GaussianDpEvent`` docstring suggests.
  dp-accounting's ``PLDAccountant`` with ``REPLACE_ONE`` instead reads ``GaussianDpEvent``'s
  multiplier as std / C and doubles the shift itself; the tests pin both behaviours.

References
----------
.. [1] Mironov, I. (2017). Rényi differential privacy. CSF.
.. [2] Canonne, C., Kamath, G. and Steinke, T. (2020). The discrete Gaussian for differential
   privacy. NeurIPS (Proposition 12 of arXiv:2004.00010v4).
.. [3] Asoodeh, S., Liao, J., Calmon, F., Kosut, O. and Sankar, L. (2021). Three variants of
   differential privacy: lossless conversion and applications. IEEE JSAIT.
.. [4] Wang, Y.-X., Balle, B. and Kasiviswanathan, S. (2019). Subsampled Rényi differential
   privacy and analytical moments accountant. AISTATS. Theorem 9 (generic mechanisms,
   :func:`wor_subsampled_rdp`) and Theorem 27 (Gaussian, used by dp-accounting).
"""

from __future__ import annotations

import functools
import math
from typing import Literal

import numpy as np
from dp_accounting import dp_event, pld
from dp_accounting import rdp as dp_rdp
from dp_accounting.privacy_accountant import NeighboringRelation
from numpy.typing import ArrayLike, NDArray

from pymc_dp.checks import check_count, check_delta, check_positive, check_probability

__all__ = [
    "DEFAULT_ORDERS",
    "DP_ACCOUNTING_ORDERS",
    "fixed_size_subsampled_gaussian_epsilon",
    "fixed_size_subsampled_gaussian_event",
    "fixed_size_subsampled_gaussian_rdp",
    "gaussian_rdp",
    "largest_count",
    "poisson_subsampled_gaussian_epsilon",
    "poisson_subsampled_gaussian_event",
    "poisson_subsampled_gaussian_rdp",
    "rdp_epsilon_curve",
    "rdp_to_epsilon",
    "rdp_to_epsilon_best",
    "wor_subsampled_rdp",
]

#: dp-accounting's own default orders: 1.1, 1.2, ..., 10.9, 11, ..., 63, 128, 256, 512, 1024.
DP_ACCOUNTING_ORDERS: NDArray[np.float64] = np.asarray(
    dp_rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS, dtype=np.float64
)

#: dp-accounting's default orders plus every integer 2..256, so optima between 64 and 128 (which
#: subsampled mechanisms with small sampling rates and many steps often have) are attainable.
DEFAULT_ORDERS: NDArray[np.float64] = np.unique(
    np.concatenate([DP_ACCOUNTING_ORDERS, np.arange(2.0, 257.0)])
)

# dp-accounting's improved conversion is numerically unstable as alpha -> 1 and skips alpha <= 1.01.
_MIN_IMPROVED_ORDER = 1.01
# Finer than dp-accounting needs for ~1e-3 relative accuracy (1e-3 is ~5e-4 off for q = 0.01,
# sigma = 1, 1e4 steps); 1e-4 agrees with finer grids to ~5e-6 at ~0.5 s for that case.
_PLD_DISCRETIZATION = 1e-4

Method = Literal["improved", "classic"]

# (iteration, order) pairs per chunk of rdp_epsilon_curve: bounded memory for long runs
_CURVE_CHUNK_ELEMENTS = 1 << 20
# no run is this long; stops the search when epsilon never exceeds the budget
_MAX_COUNT = 1 << 40


def _check_orders(orders: ArrayLike) -> NDArray[np.float64]:
    arr = np.asarray(orders, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"`orders` must be a non-empty 1-d array, got shape {arr.shape}")
    if not np.all(arr >= 1.0):
        raise ValueError(f"`orders` must all be >= 1, got {arr[~(arr >= 1.0)][0]}")
    return arr


def gaussian_rdp(
    noise_multiplier: float, orders: ArrayLike = DEFAULT_ORDERS
) -> NDArray[np.float64]:
    r"""RDP curve :math:`\alpha / (2 s^2)` of one Gaussian mechanism.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation divided by the L2 sensitivity, ``s`` (finite, > 0).
    orders : array_like, default DEFAULT_ORDERS
        Rényi orders (>= 1).

    Returns
    -------
    ndarray
        RDP at every order.
    """
    s = check_positive(noise_multiplier, "noise_multiplier")
    return _check_orders(orders) / (2.0 * s * s)


def _epsilon_per_order(
    orders: NDArray[np.float64], rdp: NDArray[np.float64], delta: float, method: Method
) -> NDArray[np.float64]:
    """Epsilon implied by each order (broadcast over leading axes of ``rdp``)."""
    log_delta = np.log(delta)
    with np.errstate(divide="ignore", invalid="ignore"):
        if method == "improved":
            eps = np.where(
                orders > _MIN_IMPROVED_ORDER,
                rdp + np.log1p(-1.0 / orders) - (log_delta + np.log(orders)) / (orders - 1.0),
                np.inf,
            )
            # delta <= sqrt(1 - exp(-KL)) and KL <= RDP(alpha): no loss above the target delta.
            eps = np.where(delta**2 + np.expm1(-rdp) > 0.0, 0.0, eps)
        elif method == "classic":
            eps = np.where(orders > 1.0, rdp - log_delta / (orders - 1.0), np.inf)
        else:
            raise ValueError(f"`method` must be 'improved' or 'classic', got {method!r}")
    return eps


def rdp_to_epsilon(
    orders: ArrayLike, rdp: ArrayLike, delta: float, method: Method = "improved"
) -> tuple[float | NDArray[np.float64], float | NDArray[np.float64]]:
    r"""Convert an RDP curve to (epsilon, delta)-DP, optimising over the orders.

    Parameters
    ----------
    orders : array_like, shape (n_orders,)
        Rényi orders (>= 1).
    rdp : array_like, shape (..., n_orders)
        RDP bounds (>= 0, ``inf`` allowed) at ``orders``; leading axes are converted
        independently, e.g. the composed curve after every iteration.
    delta : float
        Target delta in (0, 1).
    method : {"improved", "classic"}, default "improved"
        ``"classic"``: Mironov (2017), Proposition 3,
        :math:`\varepsilon = \mathrm{RDP}(\alpha) + \log(1/\delta)/(\alpha - 1)`.
        ``"improved"``: Canonne, Kamath & Steinke (2020), Proposition 12 (also Asoodeh et al.),
        :math:`\varepsilon = \mathrm{RDP}(\alpha) + \log(1 - 1/\alpha)
        - (\log\delta + \log\alpha)/(\alpha - 1)` for :math:`\alpha > 1.01`, and 0 when
        :math:`\delta^2 \ge 1 - e^{-\mathrm{RDP}(\alpha)}`; this reproduces
        ``dp_accounting.rdp.compute_epsilon`` and is never looser than ``"classic"`` for
        :math:`\alpha > 1.01`.

    Returns
    -------
    epsilon : float or ndarray
        Smallest epsilon over the orders, clipped at 0 (shape ``rdp.shape[:-1]``).
    order : float or ndarray
        Order attaining it (the first one on ties).
    """
    orders_arr = _check_orders(orders)
    rdp_arr = np.asarray(rdp, dtype=np.float64)
    if rdp_arr.ndim == 0 or rdp_arr.shape[-1] != orders_arr.size:
        raise ValueError(
            f"`rdp` must have last axis of length {orders_arr.size} (one value per order), "
            f"got shape {rdp_arr.shape}"
        )
    if not np.all(rdp_arr >= 0.0):
        raise ValueError(f"`rdp` must be >= 0 (and not NaN), got {rdp_arr[~(rdp_arr >= 0)][0]}")
    dlt = check_delta(delta)
    eps = _epsilon_per_order(orders_arr, rdp_arr, dlt, method)
    idx = np.argmin(eps, axis=-1)
    best = np.maximum(np.take_along_axis(eps, idx[..., None], axis=-1)[..., 0], 0.0)
    best_order = orders_arr[idx]
    if best.ndim == 0:
        return float(best), float(best_order)
    return best, best_order


def rdp_to_epsilon_best(
    orders: ArrayLike, rdp: ArrayLike, delta: float
) -> tuple[float, float, str]:
    """Tighter of the improved and classic RDP conversions for one curve.

    Parameters
    ----------
    orders : array_like, shape (n_orders,)
        Rényi orders (>= 1).
    rdp : array_like, shape (n_orders,)
        RDP bounds at ``orders``.
    delta : float
        Target delta in (0, 1).

    Returns
    -------
    epsilon : float
        The smaller epsilon.
    order : float
        Order attaining it.
    method : str
        ``"improved"`` or ``"classic"`` (``"improved"`` on ties).
    """
    if np.ndim(rdp) != 1:
        raise ValueError(f"`rdp` must be 1-d, got shape {np.shape(rdp)}")
    eps_i, order_i = rdp_to_epsilon(orders, rdp, delta, method="improved")
    eps_c, order_c = rdp_to_epsilon(orders, rdp, delta, method="classic")
    if eps_c < eps_i:
        return float(eps_c), float(order_c), "classic"
    return float(eps_i), float(order_i), "improved"


def poisson_subsampled_gaussian_event(
    noise_multiplier: float, sampling_probability: float, count: int = 1
) -> dp_event.DpEvent:
    """dp-accounting event of ``count`` Poisson-subsampled Gaussian releases.

    Parameters
    ----------
    noise_multiplier : float
        Noise std / (L2 norm bound of one row's contribution), i.e. over the add/remove-one
        sensitivity (finite, > 0).
    sampling_probability : float
        Probability q in (0, 1] that each row enters a batch, independently.
    count : int, default 1
        Number of releases (>= 0).

    Returns
    -------
    dp_accounting.DpEvent
        ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(s)), count)``.
    """
    s = check_positive(noise_multiplier, "noise_multiplier")
    q = check_probability(sampling_probability, "sampling_probability")
    k = check_count(count, "count")
    return dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(s)), k
    )


def fixed_size_subsampled_gaussian_event(
    noise_multiplier: float, dataset_size: int, batch_size: int, count: int = 1
) -> dp_event.DpEvent:
    """dp-accounting event of ``count`` Gaussian releases on fixed-size batches.

    Parameters
    ----------
    noise_multiplier : float
        Noise std / (L2 sensitivity of *replacing* one row): ``std / (2 C)`` for a sum of rows
        clipped to norm C (see the module notes; finite, > 0).
    dataset_size : int
        Number of rows n (public under replace-one neighbours, >= 1).
    batch_size : int
        Rows per batch b, drawn uniformly without replacement (1 <= b <= n).
    count : int, default 1
        Number of releases (>= 0).

    Returns
    -------
    dp_accounting.DpEvent
        ``SelfComposedDpEvent(SampledWithoutReplacementDpEvent(n, b, GaussianDpEvent(s)), count)``.
    """
    s = check_positive(noise_multiplier, "noise_multiplier")
    n = check_count(dataset_size, "dataset_size", minimum=1)
    b = check_count(batch_size, "batch_size", minimum=1)
    if b > n:
        raise ValueError(f"`batch_size` must be <= `dataset_size` ({n}), got {batch_size}")
    k = check_count(count, "count")
    return dp_event.SelfComposedDpEvent(
        dp_event.SampledWithoutReplacementDpEvent(n, b, dp_event.GaussianDpEvent(s)), k
    )


def _rdp_accountant(
    event: dp_event.DpEvent, orders: ArrayLike | None, relation: NeighboringRelation
) -> dp_rdp.RdpAccountant:
    orders_arr = DP_ACCOUNTING_ORDERS if orders is None else _check_orders(orders)
    accountant = dp_rdp.RdpAccountant(orders_arr, neighboring_relation=relation)
    accountant.compose(event)
    return accountant


def poisson_subsampled_gaussian_rdp(
    noise_multiplier: float, sampling_probability: float, orders: ArrayLike | None = None
) -> NDArray[np.float64]:
    """Per-release RDP curve of the Poisson-subsampled Gaussian (add/remove-one neighbours).

    Parameters
    ----------
    noise_multiplier : float
        Noise std / (add/remove-one L2 sensitivity) (finite, > 0).
    sampling_probability : float
        Inclusion probability q in (0, 1].
    orders : array_like, optional
        Rényi orders; default :data:`DP_ACCOUNTING_ORDERS`.

    Returns
    -------
    ndarray
        RDP at every order, from dp-accounting's ``RdpAccountant`` (Mironov, Talwar & Zhang 2019).
    """
    event = poisson_subsampled_gaussian_event(noise_multiplier, sampling_probability, 1)
    return _rdp_accountant(event, orders, NeighboringRelation.ADD_OR_REMOVE_ONE).rdp


def fixed_size_subsampled_gaussian_rdp(
    noise_multiplier: float,
    dataset_size: int,
    batch_size: int,
    orders: ArrayLike | None = None,
) -> NDArray[np.float64]:
    """Per-release RDP curve of the Gaussian on fixed-size batches (replace-one neighbours).

    Parameters
    ----------
    noise_multiplier : float
        Noise std / (replace-one L2 sensitivity): ``std / (2 C)`` for rows clipped to norm C.
    dataset_size : int
        Number of rows n.
    batch_size : int
        Rows per batch b (1 <= b <= n).
    orders : array_like, optional
        Rényi orders; default :data:`DP_ACCOUNTING_ORDERS`. The WBK19 bound costs O(alpha^2) per
        integer order, so :data:`DEFAULT_ORDERS` (integers up to 256) takes seconds.

    Returns
    -------
    ndarray
        RDP at every order, from dp-accounting's ``RdpAccountant`` (WBK19, Theorem 27).
    """
    event = fixed_size_subsampled_gaussian_event(noise_multiplier, dataset_size, batch_size, 1)
    return _rdp_accountant(event, orders, NeighboringRelation.REPLACE_ONE).rdp


def poisson_subsampled_gaussian_epsilon(
    noise_multiplier: float,
    sampling_probability: float,
    count: int,
    delta: float,
    *,
    accountant: Literal["pld", "rdp"] = "pld",
    value_discretization_interval: float = _PLD_DISCRETIZATION,
    orders: ArrayLike | None = None,
) -> float:
    """Epsilon of ``count`` Poisson-subsampled Gaussian releases (add/remove-one neighbours).

    Parameters
    ----------
    noise_multiplier : float
        Noise std / (L2 norm bound of one row's contribution) = noise std / (add/remove-one
        sensitivity); ``std / C`` for a sum of rows clipped to norm C (finite, > 0).
    sampling_probability : float
        Probability q in (0, 1] that each row enters a batch, independently.
    count : int
        Number of releases (>= 0).
    delta : float
        Target delta in (0, 1).
    accountant : {"pld", "rdp"}, default "pld"
        ``"pld"``: dp-accounting's ``PLDAccountant`` (pessimistic connect-the-dots PLD, an upper
        bound that is tight up to discretisation). ``"rdp"``: its ``RdpAccountant`` (looser).
    value_discretization_interval : float, default 1e-4
        PLD grid spacing (``"pld"`` only). At 1e-4 the q = 0.01, sigma = 1, 1e4-step case agrees
        with finer grids to ~5e-6 relative in ~0.5 s; 1e-3 is ~10x faster, ~5e-4 high.
    orders : array_like, optional
        Rényi orders (``"rdp"`` only); default :data:`DP_ACCOUNTING_ORDERS`.

    Returns
    -------
    float
        Epsilon at ``delta``.
    """
    event = poisson_subsampled_gaussian_event(noise_multiplier, sampling_probability, count)
    dlt = check_delta(delta)
    if event.count == 0:
        return 0.0
    if accountant == "pld":
        step = check_positive(value_discretization_interval, "value_discretization_interval")
        pld_accountant = pld.PLDAccountant(
            NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=step
        )
        pld_accountant.compose(event)
        return float(pld_accountant.get_epsilon(dlt))
    if accountant == "rdp":
        rdp_acc = _rdp_accountant(event, orders, NeighboringRelation.ADD_OR_REMOVE_ONE)
        return float(rdp_acc.get_epsilon(dlt))
    raise ValueError(f"`accountant` must be 'pld' or 'rdp', got {accountant!r}")


def fixed_size_subsampled_gaussian_epsilon(
    noise_multiplier: float,
    dataset_size: int,
    batch_size: int,
    count: int,
    delta: float,
    *,
    orders: ArrayLike | None = None,
) -> float:
    """Epsilon of ``count`` Gaussian releases on fixed-size batches (replace-one neighbours).

    Each release draws ``batch_size`` of the ``dataset_size`` rows uniformly without replacement.
    Accounted with dp-accounting's ``RdpAccountant`` (WBK19, Theorem 27) and its improved
    RDP -> (epsilon, delta) conversion.

    Parameters
    ----------
    noise_multiplier : float
        Noise std / (L2 sensitivity of *replacing* one row). For a sum of rows clipped to norm C
        the replace-one sensitivity is 2C, so pass ``std / (2 C)`` (dp-accounting issue #378;
        with ``batch_size == dataset_size`` the result is that of a plain Gaussian mechanism,
        RDP ``alpha / (2 noise_multiplier**2)``).
    dataset_size : int
        Number of rows n (public under replace-one neighbours, >= 1).
    batch_size : int
        Rows per batch b (1 <= b <= n).
    count : int
        Number of releases (>= 0).
    delta : float
        Target delta in (0, 1).
    orders : array_like, optional
        Rényi orders; default :data:`DP_ACCOUNTING_ORDERS` (see
        :func:`fixed_size_subsampled_gaussian_rdp` on cost).

    Returns
    -------
    float
        Epsilon at ``delta``.
    """
    event = fixed_size_subsampled_gaussian_event(noise_multiplier, dataset_size, batch_size, count)
    dlt = check_delta(delta)
    if event.count == 0:
        return 0.0
    return float(_rdp_accountant(event, orders, NeighboringRelation.REPLACE_ONE).get_epsilon(dlt))


@functools.lru_cache(maxsize=8)
def _log_binomial_table(max_order: int) -> NDArray[np.float64]:
    """``table[a - 2, j - 2] = log C(a, j)`` for 2 <= j <= a <= max_order, ``-inf`` for j > a.

    The binomials are exact Python integers (Pascal's rule), so each entry is the correctly
    rounded log of the exact binomial up to one rounding of ``math.log``; ``lgamma`` would lose
    ~1e-13 absolute at these orders.
    """
    size = max_order - 1
    table = np.full((size, size), -np.inf)
    row = [1, 2, 1]  # C(2, 0..2)
    for a in range(2, max_order + 1):
        if a > 2:
            row = [1, *(row[j - 1] + row[j] for j in range(1, a)), 1]
        table[a - 2, : a - 1] = [math.log(c) for c in row[2:]]
    table.flags.writeable = False
    return table


def wor_subsampled_rdp(step_rdp: ArrayLike, sampling_ratio: float) -> NDArray[np.float64]:
    r"""RDP amplification by sampling a fixed-size batch without replacement (WBK19, Theorem 9).

    A mechanism that is :math:`(j, \varepsilon'(j))`-RDP for integer orders
    :math:`j = 2, \dots, A` under replace-one neighbours, run on a batch of :math:`b` rows drawn
    uniformly without replacement from :math:`n` (:math:`q = b/n`), is
    :math:`(\alpha, \varepsilon(\alpha))`-RDP for :math:`\alpha = 2, \dots, A` with

    .. math::

        \varepsilon(\alpha) = \frac{1}{\alpha - 1} \log\Big(1
            + q^2 \binom{\alpha}{2} \min\{4(e^{\varepsilon'(2)} - 1), 2 e^{\varepsilon'(2)}\}
            + 2 \sum_{j=3}^{\alpha} q^j \binom{\alpha}{j} e^{(j-1)\varepsilon'(j)}\Big).

    This is Theorem 9 of Wang, Balle & Kasiviswanathan (2019) with the
    :math:`\varepsilon'(\infty) = \infty` branch of its inner minimum
    (:math:`\min\{2, (e^{\varepsilon'(\infty)} - 1)^j\} = 2`), i.e. no pure-DP bound on the
    step. It is evaluated in log space with exact binomial coefficients, a log-sum-exp over
    ``j`` and ``log1p`` of the sum, so tiny values (``q = 1e-3``, ``alpha = 2``: ~1e-6) keep full
    relative precision. Theorem 9 is loose at ``q = 1`` (it does not reduce to the step curve)
    and, for the Gaussian mechanism, never tighter than dp-accounting's Theorem 27.

    Parameters
    ----------
    step_rdp : array_like, shape (A - 1,)
        Per-step RDP at the consecutive integer orders 2, 3, ..., A: ``step_rdp[i]`` is
        :math:`\varepsilon'(i + 2)` (>= 0, ``inf`` allowed).
    sampling_ratio : float
        :math:`q = b / n` in (0, 1].

    Returns
    -------
    ndarray, shape (A - 1,)
        Amplified RDP :math:`\varepsilon(\alpha)` at the same orders 2, ..., A (``inf`` where a
        needed step value is ``inf``). Cost O(A^2); A = 256 takes well under a millisecond once
        the exact log-binomial table for A is cached.

    Raises
    ------
    ValueError
        If ``step_rdp`` is not a non-empty 1-d array of values >= 0 (NaN excluded), or
        ``sampling_ratio`` is not in (0, 1].
    """
    try:
        eps_step = np.asarray(step_rdp, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"`step_rdp` must be a 1-d array of numbers, got {step_rdp!r}") from None
    if eps_step.ndim != 1 or eps_step.size == 0:
        raise ValueError(
            f"`step_rdp` must be a non-empty 1-d array (orders 2, 3, ...), got shape "
            f"{eps_step.shape}"
        )
    if not np.all(eps_step >= 0.0):
        raise ValueError(
            f"`step_rdp` must be >= 0 (and not NaN), got {eps_step[~(eps_step >= 0.0)][0]}"
        )
    q = check_probability(sampling_ratio, "sampling_ratio")
    max_order = eps_step.size + 1
    log_q = math.log(q)
    j = np.arange(2, max_order + 1, dtype=np.float64)
    # Per-j part of each summand, in log space.
    with np.errstate(divide="ignore"):
        e2 = eps_step[0]
        log_min2 = min(math.log(4.0) + float(np.log(np.expm1(e2))), math.log(2.0) + e2)
    col = math.log(2.0) + j * log_q + (j - 1.0) * eps_step
    col[0] = 2.0 * log_q + log_min2
    log_binom = _log_binomial_table(max_order)
    in_sum = np.tri(max_order - 1, dtype=bool)  # j <= alpha
    with np.errstate(invalid="ignore"):  # -inf + inf above the diagonal, masked out
        terms = np.where(in_sum, log_binom + col, -np.inf)
    top = terms.max(axis=1)
    shift = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        log_sum = shift + np.log(np.exp(terms - shift[:, None]).sum(axis=1))
    return np.logaddexp(0.0, log_sum) / (j - 1.0)


def rdp_epsilon_curve(
    orders: ArrayLike, rdp: ArrayLike, iterations: int, delta: float
) -> NDArray[np.float64]:
    """Epsilon after 1, 2, ..., ``iterations`` repetitions of a mechanism with RDP curve ``rdp``.

    ``out[k - 1]`` equals ``rdp_to_epsilon_best(orders, k * rdp, delta)[0]``: the tighter of the
    improved and classic conversions at every k. Evaluated in chunks of about 2**20
    (iteration, order) pairs, so memory stays bounded.
    """
    orders_arr = _check_orders(orders)
    rdp_arr = np.asarray(rdp, dtype=np.float64)
    if rdp_arr.shape != orders_arr.shape:
        raise ValueError(f"`rdp` must have shape {orders_arr.shape}, got {rdp_arr.shape}")
    total = check_count(iterations, "iterations")
    dlt = check_delta(delta)
    out = np.empty(total)
    chunk = max(1, _CURVE_CHUNK_ELEMENTS // orders_arr.size)
    for start in range(0, total, chunk):
        ks = np.arange(start + 1, min(start + chunk, total) + 1, dtype=np.float64)
        composed = ks[:, None] * rdp_arr
        per_order = np.minimum(
            _epsilon_per_order(orders_arr, composed, dlt, "improved"),
            _epsilon_per_order(orders_arr, composed, dlt, "classic"),
        )
        out[start : start + ks.size] = np.maximum(per_order.min(axis=-1), 0.0)
    return out


def largest_count(fits) -> int:
    """Largest k >= 0 with ``fits(k)``, for a predicate that holds at 0 and, once false, stays
    false (epsilon never decreases with the count): exponential search, then bisection."""
    lo, hi = 0, 1
    while fits(hi):
        lo, hi = hi, 2 * hi
        if hi > _MAX_COUNT:
            return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
