r"""Minibatch DP penalty: the penalty test on a batch, corrected for the subsampling noise.

Raisa (2021), section 3.3 (Lemma 1, Theorem 8). Per iteration, on a batch B of the n rows, with
per-row ratios clipped to :math:`|r_j| \le a = b_l \|\theta' - \theta\|_2`, tempering T and
:math:`A = nT/b`:

* the batch estimate of the tempered log-likelihood ratio, :math:`\lambda^* = A \sum_B r_j`;
* an estimate :math:`\hat\sigma_b^2` of its subsampling variance;
* the release :math:`\lambda^* - \hat\sigma_b^2/2 + \xi`, :math:`\xi \sim N(0, \sigma^2)`,
  :math:`\sigma = s\,c` with c the replace-one sensitivity of :math:`\lambda^* - \hat\sigma_b^2/2`;
* acceptance with probability
  :math:`\min\{1, \exp(\lambda^* + \xi - (\sigma^2 + \hat\sigma_b^2)/2 + \log p(\theta') -
  \log p(\theta))\}`, the penalty method of Ceperley & Dewing (1999) with the CLT approximation
  :math:`\lambda^* \approx N(\lambda, \sigma_b^2)` of Seita et al. (2017).

Variance estimates and sensitivities (q = b / n):

``"fixed_size"`` (b rows without replacement): the unbiased estimate of
:math:`\mathrm{Var}(\lambda^*)` under simple random sampling,
:math:`\hat\sigma_b^2 = A^2 (1 - q)\frac{b}{b-1}\big(\sum r_j^2 - R^2/b\big)`. Replacing one row
changes :math:`\sum r_j^2 - R^2/b = \ldots + (u - v)\big((1 - 1/b)(u + v) - 2R^*/b\big)` by at
most :math:`4 a^2 (b-1)/b` (at :math:`u = a, v = -a, R^* = \mp(b-1)a`), so
:math:`c = 2Aa + 2A^2(1 - q)a^2`. Lemma 1 of the thesis bounds the second term by
:math:`3A^2(1 - 1/b)a^2` without the finite-population factor; both are valid, ours is tighter.

``"poisson"`` (each row with probability q): :math:`\lambda^* = (T/q)\sum_B r_j` and the unbiased
:math:`\hat\sigma_b^2 = (T/q)^2 (1-q)\sum_B r_j^2`, so the release is a sum of per-row terms
:math:`g(r) = (T/q) r - \tfrac12 (T/q)^2(1-q) r^2` with :math:`|g| \le C_g = Aa + A^2(1-q)a^2/2`,
and :math:`c = 2 C_g`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from pymc_dp.batches import Sampling, check_batch
from pymc_dp.mechanisms import SubsampledPenaltyTest
from pymc_dp.step_methods.base import Stat
from pymc_dp.step_methods.penalty import PenaltyMetropolis
from pymc_dp.step_methods.proposals import Proposal
from pymc_dp.step_methods.registry import Example, register

__all__ = ["DPMinibatchPenalty", "batch_release", "release_sensitivity"]


def batch_release(
    total: float, squares: float, batch_size: int, scale: float, q: float, sampling: str
) -> tuple[float, float]:
    r"""``(lambda*, sigma_b^2)`` from the clipped batch sums :math:`R = \sum r_j` and
    :math:`\sum r_j^2`; ``scale`` is :math:`A = nT/b = T/q` (module docstring)."""
    if sampling == "fixed_size":
        b = batch_size
        spread = max(squares - total * total / b, 0.0)  # >= 0 up to rounding; 1-Lipschitz
        return scale * total, scale**2 * (1.0 - q) * b / (b - 1) * spread
    return scale * total, scale**2 * (1.0 - q) * squares


def release_sensitivity(bound: float, scale: float, q: float, sampling: str) -> float:
    """Replace-one sensitivity c of ``lambda* - sigma_b^2 / 2`` for per-row ratios clipped to
    ``+-bound`` (module docstring)."""
    variance_term = (2.0 if sampling == "fixed_size" else 1.0) * (1.0 - q)
    return 2.0 * scale * bound + variance_term * (scale * bound) ** 2


class DPMinibatchPenalty(PenaltyMetropolis):
    r"""Differentially private penalty Metropolis-Hastings on minibatches.

    Parameters
    ----------
    vars : list, optional
        Free variables; must be all of them (the default).
    batch_size : int
        Rows per iteration b (2 <= b <= n); the expected size with ``sampling="poisson"``.
    llr_clip : float
        :math:`b_l > 0`: per-row log-likelihood ratios are clipped to
        :math:`\pm b_l \|\theta' - \theta\|_2` (choose it from public knowledge, never from the
        private data).
    proposal_scale : float or array
        Standard deviation of the Gaussian proposal per raveled coordinate (public).
    proposal : {"random_walk", "ocu", "gwmh"}
        As in :class:`~pymc_dp.step_methods.penalty.DPPenalty`. One-component updates shorten the
        step, and the variance term of the sensitivity falls with its square.
    tempering : float
        :math:`T \in (0, 1]`; ``n0 / n`` keeps the noise independent of n (thesis, section 3.3).
    sampling : {"fixed_size", "poisson"}
        ``"fixed_size"``: accounted with dp-accounting's RDP for sampling without replacement
        (Wang, Balle & Kasiviswanathan 2019, Thm 27). ``"poisson"``: with its PLD accountant
        (tight up to discretisation). Both under replace-one neighbours. Batches are drawn from
        the chain's secret noise source (:mod:`~pymc_dp.batches`).
    epsilon, delta, noise_multiplier, chains, noise_seed, exact_noise, diagnostics
        See :class:`~pymc_dp.step_methods.base.DPStep`. ``noise_multiplier`` is
        :math:`s = \sigma / c`, the thesis' :math:`\sqrt{\tau}`.

    Notes
    -----
    The thesis accounts :math:`\tau = 0.7` (:math:`s = \sqrt\tau`), b = 1000, n = 1e5,
    delta = 1e-6 with the Fourier accountant and gets 1817 iterations at epsilon = 6. That count
    treats c, already the replace-one *difference*, as the per-row bound of a replace-one Poisson
    accountant, which doubles it again (2x in sigma): dp-accounting reproduces it (1816) when given
    multiplier :math:`\sqrt\tau` under REPLACE_ONE. Here the release is a sum of per-row terms
    bounded by c / 2, so dp-accounting gets :math:`2\sqrt\tau` and ``sampling="poisson"`` affords
    9842 iterations. ``sampling="fixed_size"`` is accounted with RDP for sampling without
    replacement (WBK19 Thm 27), which is looser: 1197 iterations. Both are pinned in
    ``tests/test_minibatch_penalty.py``.

    Stats: ``accepted``, ``accept_prob`` and ``noise_std`` (functions of the release and public
    values), ``dp_epsilon``, ``dp_delta``, ``batch_size`` (b; the realised Poisson size is not
    released); with ``diagnostics=True`` the exact ``clip_fraction``.

    References
    ----------
    .. [1] Raisa, O. (2021). Differentially Private Markov Chain Monte Carlo. MSc thesis,
       University of Helsinki. Section 3.3.
    .. [2] Seita, D., Pan, X., Chen, H. and Canny, J. (2017). An efficient minibatch acceptance
       test for Metropolis-Hastings. UAI.
    .. [3] Wang, Y.-X., Balle, B. and Kasiviswanathan, S. (2019). Subsampled Rényi differential
       privacy and analytical moments accountant. AISTATS.
    """

    name = "dp_minibatch_penalty"
    distributed_rows = True  # the driver draws the batch; workers sum their rows of it
    stats: ClassVar[dict[str, Stat]] = {
        **PenaltyMetropolis.stats,
        "batch_size": Stat(np.int64),
    }

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        batch_size: int,
        llr_clip: float,
        proposal_scale: float | np.ndarray,
        proposal: Proposal = "random_walk",
        tempering: float = 1.0,
        sampling: Sampling = "fixed_size",
        **kwargs,
    ) -> None:
        if kwargs.get("adapt_covariance"):
            raise ValueError(
                "DPMinibatchPenalty has no zero tuning, so nothing for `adapt_covariance` to adapt."
            )
        if proposal_scale is None:
            raise ValueError(
                "DPMinibatchPenalty needs `proposal_scale` (its sensitivity is not linear in the "
                "step, so it does not tune itself)."
            )
        super().__init__(
            vars,
            llr_clip=llr_clip,
            proposal_scale=proposal_scale,
            proposal=proposal,
            tempering=tempering,
            **kwargs,
        )
        self.batch_size = check_batch(batch_size, self.n_rows, sampling)
        self.sampling = sampling
        self._test = self.mechanisms()[0]
        self._kernel = self.likelihood.ratio_kernel(
            batch=True, squares=True, diagnostics=self.diagnostics
        )
        self._finish()

    def mechanisms(self) -> tuple[SubsampledPenaltyTest]:
        return (
            SubsampledPenaltyTest(
                dataset_size=self.n_rows, batch_size=self.batch_size, sampling=self.sampling
            ),
        )

    def sensitivity(self, bound: float) -> float:
        """Replace-one sensitivity c of the release when per-row ratios are clipped to
        ``+-bound`` (``llr_clip`` times the step length, for a scalar ``llr_clip``)."""
        q = self.batch_size / self.n_rows
        return release_sensitivity(float(bound), self.tempering / q, q, self.sampling)

    def _ratio(self, q_new: np.ndarray, q: np.ndarray, bound: float):
        b, rate = self.batch_size, self.batch_size / self.n_rows
        idx = self.likelihood.draw_batch(self.chain.noise.generator, b, self.sampling)
        out = self._kernel(q_new, q, np.asarray(bound), idx)
        total, prior_new, squares = float(out[0]), float(out[1]), float(out[2])
        lam, var_b = batch_release(total, squares, b, self.tempering / rate, rate, self.sampling)
        clip = float(out[3]) if self.diagnostics else None
        return lam - 0.5 * var_b, prior_new, self.sensitivity(bound), clip

    def _iterate(self, q: np.ndarray) -> tuple[np.ndarray, dict]:
        q_next, stats = super()._iterate(q)
        stats["batch_size"] = self.batch_size
        return q_next, stats


_BATCH = {"batch_size": 100, "llr_clip": 3.0, "proposal_scale": 0.05}
register(
    DPMinibatchPenalty,
    minibatch_fixed=Example({**_BATCH, "tempering": 0.5}),
    minibatch_poisson=Example({**_BATCH, "sampling": "poisson"}),
)
