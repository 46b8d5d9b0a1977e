r"""Rényi DP accounting of DP Barker (minibatch Barker acceptance test with a noisy log ratio).

One DP Barker iteration evaluates the log-likelihood ratio on a batch of :math:`b` rows drawn
uniformly without replacement from the :math:`n` rows of the data (replace-one neighbours, so
:math:`n` is public). Under the per-row bound

.. math::

    |\log p(x \mid \theta') - \log p(x \mid \theta)| \le \sqrt{b} / N_0

on the tempered log-likelihood (tempering :math:`T = N_0 / n`; the bound is on the tempered terms,
so :math:`N_0` fixes how hard rows are clipped but does not enter the accounting), the release
on one batch is :math:`(\alpha, \varepsilon'(\alpha))`-RDP for integer
:math:`2 \le \alpha < b / 5` with (poster [1]_, eq. 11; thesis [2]_, Theorem 7)

.. math::

    \varepsilon'(\alpha) = \frac{5}{2b} + \frac{1}{2(\alpha - 1)} \log\frac{2b}{b - 5\alpha}
        + \frac{2\alpha}{b - 5\alpha}.

Subsampling amplifies it through Theorem 9 of Wang, Balle & Kasiviswanathan [3]_ with
:math:`q = b / n` (:func:`~pymc_dp.accounting.rdp.wor_subsampled_rdp`); ``k`` iterations are
:math:`(\alpha, k\,\varepsilon(\alpha))`-RDP, converted to :math:`(\varepsilon, \delta)` with the
tighter of the classic and improved conversions of
:func:`~pymc_dp.accounting.rdp.rdp_to_epsilon_best`. The dataset size enters only through
:math:`q`.

References
----------
.. [1] Heikkilä, M., Jälkö, J., Dikmen, O. and Honkela, A. (2019). Differentially private Markov
   chain Monte Carlo. NeurIPS (poster, eq. 11).
.. [2] Räisä, O. (2021). Differentially private Markov chain Monte Carlo algorithms. Master's
   thesis, University of Helsinki (Theorem 7).
.. [3] Wang, Y.-X., Balle, B. and Kasiviswanathan, S. (2019). Subsampled Rényi differential
   privacy and analytical moments accountant. AISTATS (Theorem 9).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pymc_dp.checks import check_count, check_delta, check_epsilon

from .rdp import largest_count, rdp_epsilon_curve, rdp_to_epsilon_best, wor_subsampled_rdp

__all__ = [
    "barker_epsilon",
    "barker_epsilon_curve",
    "barker_max_iterations",
    "barker_orders",
    "barker_rdp",
    "barker_step_rdp",
]

# Largest number of (iteration, order) pairs converted at once by barker_epsilon_curve (~8 MB).


def _check_batch_size(batch_size: int) -> int:
    b = check_count(batch_size, "batch_size", minimum=1)
    if b <= 10:
        raise ValueError(
            f"`batch_size` must be >= 11: the DP Barker RDP bound needs an integer order "
            f"2 <= alpha < batch_size / 5, got {batch_size}"
        )
    return b


def _max_valid_order(b: int) -> int:
    """Largest integer alpha with alpha < b / 5, i.e. 5 alpha < b."""
    return (b - 1) // 5


def _check_barker_orders(orders: ArrayLike, b: int) -> NDArray[np.float64]:
    try:
        arr = np.asarray(orders, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"`orders` must be a 1-d array of integers, got {orders!r}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"`orders` must be a non-empty 1-d array, got shape {arr.shape}")
    bad = ~(np.isfinite(arr) & (arr == np.round(arr)))
    if np.any(bad):
        raise ValueError(f"`orders` must be integers, got {arr[bad][0]}")
    top = _max_valid_order(b)
    out = (arr < 2.0) | (arr > top)
    if np.any(out):
        raise ValueError(
            f"`orders` must be integers with 2 <= alpha < batch_size / 5 = {b / 5:g} "
            f"(2..{top} for batch_size {b}), got {arr[out][0]:g}"
        )
    return arr


def _check_sizes(batch_size: int, dataset_size: int) -> tuple[int, int]:
    b = _check_batch_size(batch_size)
    n = check_count(dataset_size, "dataset_size", minimum=1)
    if b > n:
        raise ValueError(f"`batch_size` ({b}) must be <= `dataset_size` ({n})")
    return b, n


def barker_orders(batch_size: int, max_order: int = 256) -> NDArray[np.float64]:
    """Integer Rényi orders at which the DP Barker bound holds.

    Parameters
    ----------
    batch_size : int
        Batch size b (>= 11).
    max_order : int, default 256
        Largest order returned (>= 2).

    Returns
    -------
    ndarray
        ``2, 3, ..., min(max_order, A)`` as floats, where A is the largest integer with
        ``A < b / 5`` (poster eq. 11 / thesis Theorem 7 require ``alpha < b / 5``).

    Raises
    ------
    ValueError
        If ``batch_size`` is not an integer >= 11 (no integer order 2 <= alpha < b / 5 exists for
        b <= 10), or ``max_order`` is not an integer >= 2.
    """
    b = _check_batch_size(batch_size)
    top = check_count(max_order, "max_order", minimum=2)
    return np.arange(2.0, min(top, _max_valid_order(b)) + 1.0)


def barker_step_rdp(batch_size: int, orders: ArrayLike | None = None) -> NDArray[np.float64]:
    r"""Per-step RDP of the DP Barker test on one batch, before subsampling amplification.

    Poster eq. 11 (Heikkilä et al. 2019) / thesis Theorem 7 (Räisä 2021):

    .. math::

        \varepsilon'(\alpha) = \frac{5}{2b} + \frac{1}{2(\alpha - 1)} \log\frac{2b}{b - 5\alpha}
            + \frac{2\alpha}{b - 5\alpha},

    valid for integer :math:`2 \le \alpha < b / 5` under the per-row bound
    :math:`|\log p(x|\theta') - \log p(x|\theta)| \le \sqrt{b} / N_0` on the tempered
    log-likelihood.

    Parameters
    ----------
    batch_size : int
        Batch size b (>= 11).
    orders : array_like, optional
        Integer orders with ``2 <= alpha < b / 5``; default :func:`barker_orders`.

    Returns
    -------
    ndarray
        :math:`\varepsilon'(\alpha)` at every order.

    Raises
    ------
    ValueError
        If ``batch_size`` is too small or an order is not an integer in ``[2, b / 5)``.
    """
    b = _check_batch_size(batch_size)
    alpha = barker_orders(b) if orders is None else _check_barker_orders(orders, b)
    gap = b - 5.0 * alpha
    return 5.0 / (2.0 * b) + np.log(2.0 * b / gap) / (2.0 * (alpha - 1.0)) + 2.0 * alpha / gap


def barker_rdp(
    batch_size: int, dataset_size: int, orders: ArrayLike | None = None
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Per-iteration RDP of DP Barker with subsampling amplification (WBK19, Theorem 9).

    The step curve of :func:`barker_step_rdp` at orders ``2..max(orders)`` is amplified by
    :func:`~pymc_dp.accounting.rdp.wor_subsampled_rdp` with :math:`q = b / n`. The dataset size
    enters only through q; the tempering :math:`N_0` does not enter at all.

    Parameters
    ----------
    batch_size : int
        Batch size b, drawn uniformly without replacement (11 <= b <= n).
    dataset_size : int
        Number of rows n (public under replace-one neighbours).
    orders : array_like, optional
        Integer orders with ``2 <= alpha < b / 5``; default :func:`barker_orders`.

    Returns
    -------
    orders : ndarray
        The orders (float).
    rdp : ndarray
        RDP of one iteration at every order; ``k`` iterations cost ``k * rdp``.

    Raises
    ------
    ValueError
        If ``batch_size`` or ``dataset_size`` is not an integer, ``batch_size`` is < 11 or
        > ``dataset_size``, or an order is not an integer in ``[2, b / 5)``.
    """
    b, n = _check_sizes(batch_size, dataset_size)
    alpha = barker_orders(b) if orders is None else _check_barker_orders(orders, b)
    top = int(alpha.max())
    step = barker_step_rdp(b, np.arange(2.0, top + 1.0))
    amplified = wor_subsampled_rdp(step, b / n)
    return alpha, amplified[alpha.astype(np.intp) - 2]


def barker_epsilon(
    batch_size: int, dataset_size: int, count: int, delta: float
) -> tuple[float, float, str]:
    """Epsilon of ``count`` DP Barker iterations at ``delta``.

    Parameters
    ----------
    batch_size, dataset_size : int
        Batch size b and number of rows n, as in :func:`barker_rdp` (11 <= b <= n).
    count : int
        Number of iterations (>= 0); for several chains pass chains x iterations.
    delta : float
        Target delta in (0, 1).

    Returns
    -------
    epsilon : float
        Tighter of the classic and improved RDP conversions of ``count * rdp`` over the orders
        of :func:`barker_orders` (0 for ``count == 0``).
    order : float
        Order attaining it.
    method : str
        ``"improved"`` or ``"classic"`` (see :func:`~pymc_dp.accounting.rdp.rdp_to_epsilon`).
    """
    orders, rdp = barker_rdp(batch_size, dataset_size)
    k = check_count(count, "count")
    dlt = check_delta(delta)
    return rdp_to_epsilon_best(orders, k * rdp, dlt)


def barker_epsilon_curve(
    batch_size: int, dataset_size: int, iterations: int, delta: float
) -> NDArray[np.float64]:
    """Epsilon after 1, 2, ..., ``iterations`` DP Barker iterations.

    Parameters
    ----------
    batch_size, dataset_size : int
        Batch size b and number of rows n, as in :func:`barker_rdp` (11 <= b <= n).
    iterations : int
        Number of iterations K (>= 0).
    delta : float
        Target delta in (0, 1).

    Returns
    -------
    ndarray, shape (K,)
        ``out[k - 1]`` equals ``barker_epsilon(batch_size, dataset_size, k, delta)[0]`` (tighter
        of the two conversions at each k). Non-decreasing. Evaluated in chunks of about
        ``2**20`` (iteration, order) pairs, so memory stays bounded (1e5 iterations at b = 1000
        take a fraction of a second).
    """
    orders, rdp = barker_rdp(batch_size, dataset_size)
    return rdp_epsilon_curve(orders, rdp, iterations, delta)


def barker_max_iterations(batch_size: int, dataset_size: int, epsilon: float, delta: float) -> int:
    """Largest number of DP Barker iterations whose epsilon at ``delta`` is <= ``epsilon``.

    Parameters
    ----------
    batch_size, dataset_size : int
        Batch size b and number of rows n, as in :func:`barker_rdp` (11 <= b <= n).
    epsilon, delta : float
        The target budget: epsilon finite and > 0, delta in (0, 1).

    Returns
    -------
    int
        k >= 0 with ``barker_epsilon(..., k, delta)[0] <= epsilon`` and
        ``barker_epsilon(..., k + 1, delta)[0] > epsilon``, found exactly by exponential search
        and bisection on integers (epsilon is non-decreasing in k: every order's bound is).
    """
    orders, rdp = barker_rdp(batch_size, dataset_size)
    eps = check_epsilon(epsilon)
    dlt = check_delta(delta)
    return largest_count(lambda k: rdp_to_epsilon_best(orders, k * rdp, dlt)[0] <= eps)
