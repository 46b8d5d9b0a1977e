"""The private stage of ABCDP: the sparse vector technique (SVT) on ABC distances.

Park, Vinaroz & Jitkrittum (2021), "ABCDP: Approximate Bayesian Computation with Differential
Privacy", Algorithm 1, Theorem 4.1, Lemma 4.2 and Proposition 4.2. Pure functions and one small
state machine; no PyMC import.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pymc_dp.checks import check_count, check_epsilon, check_positive

__all__ = ["SparseVector", "flip_probability", "noise_scale", "svt_epsilon"]


def noise_scale(epsilon: float, n_accept: int, sensitivity: float, resample: bool) -> float:
    """Laplace scale ``b`` of ABCDP for a total budget ``epsilon`` (Theorem 4.1, eq. 8).

    Theorem 4.1 gives ``epsilon_total = (c + 1) Delta / b`` when the noisy threshold is drawn once
    (``resample=False``; the proof is Lyu, Su & Li 2017, Algorithm 1) and ``2 c Delta / b`` when it
    is redrawn after every acceptance (``resample=True``; c-fold composition of the c = 1 case).
    This inverts it. The threshold gets ``Lap(b)`` noise and every distance ``Lap(2 b)``.

    Parameters
    ----------
    epsilon : float
        Total privacy budget ``epsilon_total`` > 0 of the whole run.
    n_accept : int
        ``c``, the number of acceptances after which the SVT stops.
    sensitivity : float
        ``Delta_rho``, the replace-one sensitivity of the distance to the private data.
    resample : bool
        Whether the threshold noise is redrawn after each acceptance.

    Returns
    -------
    float
        ``b = (c + 1) Delta / epsilon`` or ``b = 2 c Delta / epsilon``.
    """
    epsilon = check_epsilon(epsilon)
    c = check_count(n_accept, "n_accept", minimum=1)
    delta = check_positive(sensitivity, "sensitivity")
    return (2 * c if resample else c + 1) * delta / epsilon


def svt_epsilon(b: float, n_accept: int, sensitivity: float, resample: bool) -> float:
    """Privacy loss of Algorithm 1 with Laplace scale ``b`` (Theorem 4.1, eq. 8).

    Returns ``(c + 1) Delta / b`` (``resample=False``) or ``2 c Delta / b`` (``resample=True``).
    """
    b = check_positive(b, "b")
    c = check_count(n_accept, "n_accept", minimum=1)
    delta = check_positive(sensitivity, "sensitivity")
    return (2 * c if resample else c + 1) * delta / b


def flip_probability(gap: ArrayLike, b: float) -> NDArray[np.float64]:
    """Probability that ABCDP and rejection ABC disagree on one proposal (Proposition 4.2).

    ``G_b(a) = (4 exp(-a / (2 b)) - exp(-a / b)) / 6`` with ``a = |rho_t - epsilon_abc|``
    (Lemma 4.2): the tail of ``Z = m - nu``, ``m ~ Lap(b)``, ``nu ~ Lap(2 b)``. It equals 1/2 at
    ``a = 0`` and decreases to 0.

    Parameters
    ----------
    gap : array_like
        ``rho_t - epsilon_abc`` (only its absolute value matters).
    b : float
        Laplace scale of the threshold noise.
    """
    b = check_positive(b, "b")
    a = np.abs(np.asarray(gap, dtype=np.float64))
    return (4.0 * np.exp(-a / (2.0 * b)) - np.exp(-a / b)) / 6.0


class SparseVector:
    """Algorithm 1 of Park et al. (2021): the noisy "below threshold" test on a stream of distances.

    Feed distances in order with :meth:`offer`; it returns which of them were accepted
    (``rho_t + nu_t <= threshold + m``, ``nu_t ~ Lap(2 b)``, ``m ~ Lap(b)``) and stops for good
    after ``n_accept`` acceptances. With ``resample=True`` the threshold noise ``m`` is redrawn
    after every acceptance (Algorithm 1, line 9).

    The noisy threshold is private state: it is never returned, and the object is meant to live
    only inside a sampler call. Distances and thresholds get their noise from two separate
    generators, so the outcome does not depend on how the stream is cut into batches.

    Parameters
    ----------
    threshold : float
        ABC threshold ``epsilon_abc``.
    b : float
        Laplace scale from :func:`noise_scale`; ``b = 0`` is rejection ABC without noise (not
        private; for baselines only).
    n_accept : int
        ``c``: stop after this many acceptances.
    resample : bool
        Redraw the threshold noise after each acceptance.
    threshold_rng, distance_rng : numpy.random.Generator
        Sources of the threshold noise ``m`` and of the distance noise ``nu_t``.
    """

    def __init__(
        self,
        threshold: float,
        b: float,
        n_accept: int,
        resample: bool,
        threshold_rng: np.random.Generator,
        distance_rng: np.random.Generator,
    ) -> None:
        self.threshold = float(threshold)
        self.b = float(b)
        self.n_accept = int(n_accept)
        self.resample = bool(resample)
        self._threshold_rng = threshold_rng
        self._distance_rng = distance_rng
        self.n_accepted = 0
        self.n_seen = 0
        self._noisy_threshold = self._draw_threshold()

    @property
    def done(self) -> bool:
        return self.n_accepted >= self.n_accept

    def _draw_threshold(self) -> float:
        if self.b == 0.0:
            return self.threshold
        return self.threshold + float(self._threshold_rng.laplace(0.0, self.b))

    def offer(self, distances: ArrayLike) -> NDArray[np.intp]:
        """Test the next distances of the stream; return the indices (into ``distances``) accepted.

        Distances after the ``n_accept``-th acceptance are not tested; once :attr:`done`, every
        call returns an empty array.
        """
        rho = np.asarray(distances, dtype=np.float64).ravel()
        if self.done or rho.size == 0:
            return np.empty(0, dtype=np.intp)
        noisy = (
            rho + self._distance_rng.laplace(0.0, 2.0 * self.b, size=rho.size) if self.b else rho
        )
        accepted: list[int] = []
        start = 0
        while start < rho.size and not self.done:
            hits = np.flatnonzero(noisy[start:] <= self._noisy_threshold)
            if hits.size == 0:
                break
            if not self.resample:
                # One threshold for the whole run: every hit counts, up to the c-th.
                take = start + hits[: self.n_accept - self.n_accepted]
                accepted.extend(take.tolist())
                self.n_accepted += take.size
                start = rho.size if not self.done else int(take[-1]) + 1
                continue
            t = start + int(hits[0])
            accepted.append(t)
            self.n_accepted += 1
            self._noisy_threshold = self._draw_threshold()
            start = t + 1
        # Queries tested: all of them, or up to and including the stopping acceptance.
        self.n_seen += rho.size if not self.done else accepted[-1] + 1
        return np.asarray(accepted, dtype=np.intp)
