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
from pymc.blocking import RaveledVars

from pymc_dp.accounting._validate import check_positive
from pymc_dp.step_methods.base import DPStep
from pymc_dp.step_methods.proposals import Proposal, RandomWalkProposal

__all__ = ["DPPenalty", "check_tempering", "penalty_decision"]


def check_tempering(tempering: float) -> float:
    if not (np.isfinite(tempering) and 0 < tempering <= 1):
        raise ValueError(f"`tempering` must be in (0, 1], got {tempering}")
    return float(tempering)


def penalty_decision(
    step: DPStep,
    q0: RaveledVars,
    q_new: np.ndarray,
    j: int,
    log_alpha: float,
    prior_new: float,
    sigma: float,
    clip_fraction: float | None,
) -> tuple[RaveledVars, list[dict]]:
    """Accept or reject on a privatised log acceptance ratio; update the step's cached prior and
    proposal state; return ``astep``'s result with the privatised stats."""
    if not np.isfinite(log_alpha):  # outside the prior's support, or divergent
        log_alpha = -np.inf
    accepted = bool(np.log(step.rng.uniform()) < log_alpha)
    if accepted:
        step._q_cached, step._prior_cur = q_new, prior_new
    step._proposal.update(j, accepted)
    stats = {
        "accepted": accepted,
        "accept_prob": float(np.exp(min(0.0, log_alpha))),
        "noise_std": sigma,
        **step._privacy_stats(),
    }
    if clip_fraction is not None:
        stats["clip_fraction"] = clip_fraction
    return RaveledVars(q_new if accepted else q0.data, q0.point_map_info), [stats]


class DPPenalty(DPStep):
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
    epsilon, delta, noise_multiplier, chains, diagnostics, row_dim
        See :class:`~pymc_dp.step_methods.base.DPStep`.

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
    releasable_stats: ClassVar[dict] = {
        **DPStep.releasable_stats,
        "noise_std": (np.float64, []),
    }
    diagnostic_stats: ClassVar[dict] = {"clip_fraction": (np.float64, [])}
    stats_dtypes_shapes = releasable_stats

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
        check_positive(llr_clip, "llr_clip")
        self.tempering = check_tempering(tempering)
        super().__init__(vars, **kwargs)
        self._proposal = RandomWalkProposal(proposal_scale, self.likelihood.dim, proposal)
        self.llr_clip = float(llr_clip)
        self.proposal_scale = self._proposal.scale
        self.proposal = proposal
        self._kernel = self.likelihood.ratio_kernel(diagnostics=self.diagnostics)

    # ------------------------------------------------------------------ accounting
    def _base_noise_multipliers(self) -> dict[str, float]:
        return {"log-likelihood ratio": self.noise_multiplier or 1.0}

    def _releases_per_iteration(self) -> dict[str, int]:
        return {"log-likelihood ratio": 1}

    def _set_noise(self, multipliers: dict[str, float]) -> None:
        self._s = multipliers["log-likelihood ratio"]

    def setup_chain(self, rng, tune: int, draws: int) -> None:
        super().setup_chain(rng, tune, draws)
        self._proposal.reset(self.rng)
        self._q_cached = None

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list[dict]]:
        q = q0.data
        if self._q_cached is None or not np.array_equal(self._q_cached, q):
            # ratio of q with itself is 0 and no data is released; only its prior is used
            self._prior_cur = float(self._kernel(q, q, np.zeros(()))[1])
            self._q_cached = q.copy()
        q_new, j = self._proposal(self.rng, q)
        dist = float(np.sqrt(np.sum((q_new - q) ** 2)))
        bound = self.llr_clip * dist
        out = self._kernel(q_new, q, np.asarray(bound))
        llr, prior_new = float(out[0]) * self.tempering, float(out[1])
        sigma = self._s * 2.0 * self.tempering * bound
        noisy_llr = llr + sigma * self.rng.standard_normal()
        log_alpha = noisy_llr - 0.5 * sigma**2 + prior_new - self._prior_cur
        clip = float(out[2]) if self.diagnostics else None
        return penalty_decision(self, q0, q_new, j, log_alpha, prior_new, sigma, clip)
