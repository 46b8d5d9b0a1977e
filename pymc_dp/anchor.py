r"""The Taylor anchor: a control variate that makes the penalty test cheap near the posterior.

The penalty test releases a log-likelihood ratio whose sensitivity grows with the move,
``2 T b |theta' - theta|``, so a chain that moves a posterior width per iteration pays a noise
that no budget people use can afford (the planner's ESS bound ``~ (mu r)^2 / d`` with ``r = 1 /
(b x posterior sd)``). Near a point ``a`` the ratio is almost linear, and its linear part is the
same for every iteration. So release the linear part once and only the rest every iteration:

.. math::

    l(\theta') - l(\theta) = G^T \Delta + \sum_i \rho_i, \qquad
    G = \sum_i g_i(a), \quad \rho_i = l_i(\theta') - l_i(\theta) - g_i(a)^T \Delta,

with :math:`\Delta = \theta' - \theta`. The anchor's gradient sum ``G`` is released once, with
Gaussian noise (per-row gradients clipped to ``grad_clip``, replace-one sensitivity ``2
grad_clip``). The remainder of a row is a second-order term: with :math:`\|\nabla^2 l_i\|_F \le
C` (``hess_clip``; :attr:`pymc_dp.GLMClip.hess_clip` for a GLM) on the segment,

.. math::

    |\rho_i| = \left|\int_0^1 \Delta^T (g_i(\theta + t\Delta) - g_i(a))\, dt\right|
    \le C \|\Delta\| \int_0^1 \|\theta + t\Delta - a\| dt
    \le C \|\Delta\| \frac{\|\theta - a\| + \|\theta' - a\|}{2},

(the operator norm is at most the Frobenius norm; the last step is convexity of the norm), a public
bound of the two points: the penalty test clips every row's remainder to it, and its sensitivity is
twice that. For a logistic regression at ``n = 2e4`` the bound is 5-20x smaller than ``b
|Delta|`` within a few posterior sds of ``a``, so the chain can take independent-sized moves
(Bardenet, Doucet & Holmes 2017, section 6; Cornish et al. 2019 use the same Taylor control
variates for scalable Metropolis-Hastings).

The anchor's noise ``e`` is released once, so unlike the per-iteration noise it is not averaged
out by the penalty: the chain targets the posterior tilted by ``exp(T e^T (theta - a))``, whose
mean moves by about ``T Sigma e``. :func:`tilt_sds` predicts that shift in posterior sds from
public quantities; the share of the budget the anchor gets keeps it small (0.2-0.4 posterior sds at
the default shares).

Nothing here is returned: the per-row gradients at the anchor stay inside the step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pymc_dp.accounting.ledger import GaussianMechanism
from pymc_dp.mechanisms import GaussianRelease, clipped_sum_sensitivity
from pymc_dp.noise import NoiseSource

__all__ = [
    "ANCHOR_NAME",
    "INDEPENDENT_SHARE",
    "LOCAL_TARGET_ACCEPT",
    "Anchor",
    "AnchoredRatio",
    "release_anchor",
    "remainder_bound",
    "tilt_sds",
]

ANCHOR_NAME = "gradient sum at the Taylor anchor"
#: Share of an anchored DPPenalty's proposals drawn independently from the fit; the rest are
#: guided-walk moves in its metric, which reach the posterior when the fit missed it (a warm start
#: 10 posterior sds off left a pure independence chain at 0.5% acceptance) and let the windows
#: re-centre the independence proposal. Here, below the step and its simulation
#: (:mod:`pymc_dp.mixing`), which both read it.
INDEPENDENT_SHARE = 0.8
#: Acceptance the local moves' scale adapts to (one-coordinate moves under a small test noise).
LOCAL_TARGET_ACCEPT = 0.4


@dataclass(frozen=True)
class Anchor:
    """The released part of the anchor (public).

    ``point`` is ``a`` (the private fit's mean: public), ``gradient`` the noisy ``G``,
    ``noise_sd`` the std of each of its entries, ``hess_clip`` the remainder's curvature bound.
    """

    point: np.ndarray
    gradient: np.ndarray
    noise_sd: float
    hess_clip: float
    mechanisms: tuple[GaussianMechanism, ...]


def remainder_bound(
    hess_clip: float, anchor: np.ndarray, q: np.ndarray, q_new: np.ndarray, active: np.ndarray
) -> float:
    """``C |Delta| (|q - a| + |q' - a|) / 2`` over the likelihood's coordinates ``active``: a bound
    on every row's remainder ``|rho_i|`` (see the module docstring)."""
    step = (q_new - q)[active]
    far = np.linalg.norm((q - anchor)[active]) + np.linalg.norm((q_new - anchor)[active])
    return float(hess_clip * np.linalg.norm(step) * 0.5 * far)


def _clipped_rows(rows: np.ndarray, bound: float) -> np.ndarray:
    """Per-row gradients scaled into the L2 ball of radius ``bound``; a non-finite row is 0.
    Silent for every input: an overflow warning would tell that some row is huge (review)."""
    with np.errstate(all="ignore"):
        rows = np.where(np.isfinite(rows).all(axis=1, keepdims=True), rows, 0.0)
        # scaled by the row's largest entry first: the norm of a finite row never overflows
        peak = np.abs(rows).max(axis=1, keepdims=True)
        safe = np.where(peak > 0, peak, 1.0)
        norms = safe * np.linalg.norm(rows / safe, axis=1, keepdims=True)
        scale = np.where(norms > bound, bound / norms, 1.0)
        return rows * scale


def release_anchor(
    likelihood,
    point: np.ndarray,
    *,
    grad_clip: float,
    hess_clip: float,
    mu: float,
    noise: NoiseSource,
) -> tuple[Anchor, AnchoredRatio]:
    """Release ``G = sum_i clip(g_i(a))`` at ``a = point`` with Gaussian noise of privacy loss
    ``mu`` (the PLD mean; replace-one sensitivity ``2 grad_clip``), and return it with the
    (private) remainder kernel that uses the same clipped rows."""
    point = np.asarray(point, dtype=float)
    rows = _clipped_rows(np.asarray(likelihood.grad_rows(point), dtype=float), grad_clip)
    multiplier = 1.0 / np.sqrt(2.0 * mu)
    release = GaussianRelease(ANCHOR_NAME)
    sensitivity = clipped_sum_sensitivity(grad_clip)
    gradient, noise_sd = release.release(noise, rows.sum(axis=0), sensitivity, multiplier)
    anchor = Anchor(
        point=point,
        gradient=np.asarray(gradient, dtype=float),
        noise_sd=float(noise_sd),
        hess_clip=float(hess_clip),
        mechanisms=release.entries(multiplier, 1),
    )
    return anchor, AnchoredRatio(likelihood, anchor, rows)


class AnchoredRatio:
    """The per-iteration remainder ``sum_i clip(rho_i, +-bound)`` (unprivatised: the penalty test
    adds the noise). Holds the private per-row gradients at the anchor and the current point's
    per-row log-likelihood; neither ever leaves this object."""

    def __init__(self, likelihood, anchor: Anchor, rows: np.ndarray) -> None:
        self._likelihood = likelihood
        self.anchor = anchor
        self._rows = rows
        self._active = likelihood.likelihood_mask
        self._q: np.ndarray | None = None
        self._lp: np.ndarray | None = None

    def bound(self, q: np.ndarray, q_new: np.ndarray) -> float:
        return remainder_bound(self.anchor.hess_clip, self.anchor.point, q, q_new, self._active)

    def _rows_at(self, q: np.ndarray) -> np.ndarray:
        # prior-only coordinates move in their own block and leave the rows unchanged
        a = self._active
        if self._q is None or not np.array_equal(self._q[a], q[a]):
            self._q, self._lp = q.copy(), np.asarray(self._likelihood.logp_rows(q), float)
        return self._lp

    def __call__(
        self, q_new: np.ndarray, q: np.ndarray, bound: float, rows: np.ndarray | None = None
    ) -> tuple[float, float]:
        """``(sum_i clip(rho_i, +-bound), exact clipped fraction)``; the fraction is a diagnostic
        (unprivatised). ``rows`` (bool, one per row, private) keeps only those rows' terms: the
        others count 0 whatever the kernel gives them. ``q_new``'s per-row values are cached for
        the next call when accepted."""
        lp_old = self._rows_at(q)
        lp_new = np.asarray(self._likelihood.logp_rows(q_new), float)
        with np.errstate(invalid="ignore", over="ignore"):
            rho = lp_new - lp_old - self._rows @ (q_new - q)
        # NaN (-inf - -inf) -> 0, +-inf -> +-bound: inside the bound for every row
        clipped = np.where(np.isnan(rho), 0.0, np.clip(rho, -bound, bound))
        if rows is not None:
            clipped = np.where(rows, clipped, 0.0)
            rho = np.where(rows, rho, 0.0)
        self._pending = (q_new.copy(), lp_new)
        return float(clipped.sum()), float(np.mean(np.abs(rho) > bound))

    def accept(self) -> None:
        """The proposal of the last call became the current point."""
        self._q, self._lp = self._pending

    def reset(self) -> None:
        self._q = self._lp = None


def tilt_sds(
    anchor: Anchor, cov: np.ndarray, tempering: float = 1.0, active: np.ndarray | None = None
) -> np.ndarray:
    """Expected ``|shift|`` of each coordinate's mean in posterior sds from the anchor's noise:
    the chain targets the posterior tilted by ``T e^T theta``, whose mean moves by ``T cov e``
    (``cov`` a public posterior covariance, e.g. the warm start's; ``e`` only on the coordinates
    ``active`` the likelihood reads: the step zeroes the others' entries after the release);
    ``E|N(0, v)| = sqrt(2 v / pi)``."""
    cov = np.asarray(cov, float)
    kept = np.ones(cov.shape[0], bool) if active is None else np.asarray(active, bool)
    shift_var = (tempering * anchor.noise_sd) ** 2 * np.einsum(
        "ij,ij->i", cov[:, kept], cov[:, kept]
    )
    sds = np.sqrt(np.maximum(np.diag(cov), 1e-300))
    return np.sqrt(2.0 * shift_var / np.pi) / sds
