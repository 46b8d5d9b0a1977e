"""DP penalty algorithm: Metropolis-Hastings with a Gaussian-privatised log-likelihood ratio.

Yildirim & Ermis (2019); Raisa (2021), section 3.1. With per-row log-likelihood ratios clipped to
``|r_i| <= b_l ||theta' - theta||`` the tempered sum ``lambda = T sum_i r_i`` has replace-one
sensitivity ``c = 2 T b_l ||theta' - theta||``. Releasing ``lambda + N(0, sigma^2)`` with
``sigma = s c`` is a Gaussian mechanism with noise multiplier ``s`` whatever the step length, and
the penalty method of Ceperley & Dewing (1999) keeps the chain exact (up to clipping) by
accepting with probability

    min(1, exp(lambda + xi - sigma^2 / 2 + log p(theta') - log p(theta))),  xi ~ N(0, sigma^2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from pymc_dp.accounting._validate import check_positive
from pymc_dp.mechanisms import PenaltyTest
from pymc_dp.step_methods.base import PRIVACY_STATS, DPStep, Stat
from pymc_dp.step_methods.proposals import Proposal, RandomWalkProposal

__all__ = ["DPPenalty", "PenaltyMetropolis", "check_tempering"]


def check_tempering(tempering: float) -> float:
    t = check_positive(tempering, "tempering")
    if t > 1:
        raise ValueError(f"`tempering` must be in (0, 1], got {tempering}")
    return t


class PenaltyMetropolis(DPStep):
    """Shared anatomy of the penalty-test Metropolis steps (full data and minibatch).

    A subclass sets ``self._test`` (its :class:`~pymc_dp.mechanisms.PenaltyTest`) and implements
    :meth:`_ratio`: the (unprivatised) log-likelihood ratio it releases, the prior at the
    proposal, the release's sensitivity, and the exact clip fraction (diagnostics only).
    """

    stats: ClassVar[dict[str, Stat]] = {
        **PRIVACY_STATS,
        "accept_prob": Stat(np.float64),
        "noise_std": Stat(np.float64),
        "clip_fraction": Stat(np.float64, releasable=False),
    }

    def __init__(
        self,
        vars: Sequence | None,
        *,
        llr_clip: float,
        proposal_scale: float | np.ndarray,
        proposal: Proposal,
        tempering: float,
        **kwargs,
    ) -> None:
        self.llr_clip = check_positive(llr_clip, "llr_clip")
        self.tempering = check_tempering(tempering)
        super().__init__(vars, **kwargs)
        self._proposal = RandomWalkProposal(proposal_scale, self.likelihood.dim, proposal)
        self.proposal_scale = self._proposal.scale
        self.proposal = proposal

    def _ratio(self, q_new: np.ndarray, q: np.ndarray, dist: float):
        """``(value to release, log prior(q_new), sensitivity, clip fraction or None)``."""
        raise NotImplementedError

    def _reset_chain(self) -> None:
        self._proposal.reset(self.rng)

    def _iterate(self, q: np.ndarray) -> tuple[np.ndarray, dict]:
        prior_cur = self._prior_at(q)
        q_new, j = self._proposal(self.rng, q)
        dist = float(np.sqrt(np.sum((q_new - q) ** 2)))
        value, prior_new, sensitivity, clip = self._ratio(q_new, q, dist)
        log_ratio, sigma = self._test.log_ratio(self._noise, value, sensitivity, self._scale)
        log_alpha = log_ratio + prior_new - prior_cur
        q_next, accepted = self._metropolis(q, q_new, log_alpha, prior_new)
        self._proposal.update(j, accepted)
        prob = float(np.exp(min(0.0, log_alpha))) if np.isfinite(log_alpha) else 0.0
        stats = {"accepted": accepted, "accept_prob": prob, "noise_std": sigma}
        if clip is not None:
            stats["clip_fraction"] = clip
        return q_next, stats


class DPPenalty(PenaltyMetropolis):
    r"""Differentially private penalty Metropolis-Hastings.

    Parameters
    ----------
    vars : list, optional
        Free variables; must be all of them (the default).
    llr_clip : float
        :math:`b_l > 0`: per-row log-likelihood ratios are clipped to
        :math:`\pm b_l \|\theta' - \theta\|_2`. Choose it from the model and public knowledge
        of the data range (e.g. for a Gaussian likelihood, :math:`|x - \theta| / \sigma^2` at a
        plausible range), never by looking at the private data.
    proposal_scale : float or array
        Standard deviation of the Gaussian proposal, per raveled coordinate (public; not tuned on
        the data).
    proposal : {"random_walk", "ocu", "gwmh"}
        ``"random_walk"`` moves all coordinates; ``"ocu"`` (one-component updates) moves one
        coordinate chosen at random, which shortens the step and so the noise; ``"gwmh"`` (guided
        walk) moves one coordinate in its current direction, flipping the direction after a
        rejection (Yildirim & Ermis 2019, section 4.2).
    tempering : float
        :math:`T \in (0, 1]`: the likelihood is raised to the power T (Raisa 2021, Thm 12).
    epsilon, delta, noise_multiplier, chains, noise_seed, exact_noise, diagnostics
        See :class:`~pymc_dp.step_methods.base.DPStep`.
    row_dim, row_axes, public
        See :func:`pymc_dp.graph.analyse`.

    Notes
    -----
    One Gaussian release per iteration with noise multiplier ``s``: ``mu = 1 / (2 s^2)`` per
    iteration. With ``epsilon`` the multiplier is ``sqrt(K / (2 mu*(epsilon, delta)))`` for
    ``K = chains * (tune + draws)`` (Raisa 2021, Theorem 6, with :math:`s = \tau \sqrt{n}`).

    Stats: ``accepted``, ``accept_prob`` (from the noisy ratio), ``noise_std`` (public: ``s c``),
    ``dp_epsilon`` / ``dp_mu`` (spent so far by this chain), ``dp_delta``; with
    ``diagnostics=True`` also the exact ``clip_fraction``.

    References
    ----------
    .. [1] Yildirim, S. and Ermis, B. (2019). Exact MCMC with differentially private moves.
       Statistics and Computing 29(5), 947-963.
    .. [2] Raisa, O. (2021). Differentially Private Markov Chain Monte Carlo. MSc thesis,
       University of Helsinki. Section 3.1, Theorems 5-6.
    """

    name = "dp_penalty"
    stats: ClassVar[dict[str, Stat]] = {
        **PenaltyMetropolis.stats,
        "dp_mu": Stat(np.float64),
    }

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        llr_clip: float,
        proposal_scale: float | np.ndarray,
        proposal: Proposal = "random_walk",
        tempering: float = 1.0,
        **kwargs,
    ) -> None:
        super().__init__(
            vars,
            llr_clip=llr_clip,
            proposal_scale=proposal_scale,
            proposal=proposal,
            tempering=tempering,
            **kwargs,
        )
        self._test = PenaltyTest()
        self._kernel = self.likelihood.ratio_kernel(diagnostics=self.diagnostics)

    def mechanisms(self) -> tuple[PenaltyTest]:
        return (PenaltyTest(),)

    def _ratio(self, q_new: np.ndarray, q: np.ndarray, dist: float):
        bound = self.llr_clip * dist
        out = self._kernel(q_new, q, np.asarray(bound))
        clip = float(out[2]) if self.diagnostics else None
        t = self.tempering
        return t * float(out[0]), float(out[1]), 2.0 * t * bound, clip
