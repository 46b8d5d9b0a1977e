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
from pymc.step_methods.step_sizes import DualAverageAdaptation

from pymc_dp.checks import check_positive
from pymc_dp.mechanisms import PenaltyTest, clipped_sum_sensitivity
from pymc_dp.step_methods.anchoring import (
    ANCHORED_TEST,
    INDEPENDENT_SHARE,
    LOCAL_TARGET_ACCEPT,
    AnchoredStep,
)
from pymc_dp.step_methods.base import PRIVACY_STATS, DPStep, Stat
from pymc_dp.step_methods.proposals import (
    IndependentProposal,
    PreconditionedProposal,
    Proposal,
    RandomWalkProposal,
)
from pymc_dp.step_methods.registry import Example, register

__all__ = [
    "DPPenalty",
    "PenaltyMetropolis",
    "check_adapt_covariance",
    "check_tempering",
]


def check_adapt_covariance(value: bool | None, auto: bool, fixed: str) -> bool:
    """``adapt_covariance`` defaults to on with zero tuning; it has nothing to adapt when the
    user fixed the proposal (``fixed`` names that argument)."""
    if value is None:
        return auto
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"`adapt_covariance` must be True or False, got {value!r}")
    if value and not auto:
        raise ValueError(
            f"`adapt_covariance=True` adapts what zero tuning estimates, so it does nothing with a "
            f"fixed `{fixed}`: leave `{fixed}` unset, or drop `adapt_covariance`."
        )
    return bool(value)


def check_llr_clip(llr_clip, dim: int | None = None) -> float | np.ndarray:
    """``llr_clip`` as a positive float, or a finite positive vector with ``dim`` entries."""
    if not np.ndim(llr_clip):
        return check_positive(llr_clip, "llr_clip")
    clip = np.asarray(llr_clip, dtype=float)
    if not np.all(np.isfinite(clip) & (clip > 0)):
        raise ValueError(f"`llr_clip` must be finite and > 0, got {llr_clip}")
    if dim is not None and clip.shape != (dim,):
        raise ValueError(
            f"`llr_clip` must be a scalar or have {dim} entries (one per raveled coordinate), "
            f"got shape {clip.shape}"
        )
    return clip


def clip_norm(llr_clip: float | np.ndarray, step: np.ndarray) -> float:
    """Bound on one row's ``|l_i(q + step) - l_i(q)|``: ``b |step|_2`` (scalar ``llr_clip``) or
    ``sum_j b_j |step_j|`` (per-coordinate bounds, e.g. bounded covariates of a GLM; at most
    ``|b|_2 |step|_2`` by Cauchy-Schwarz, and much less for moves along few coordinates)."""
    if np.ndim(llr_clip):
        return float(np.abs(step) @ llr_clip)
    return llr_clip * float(np.sqrt(step @ step))


def check_tempering(tempering: float) -> float:
    t = check_positive(tempering, "tempering")
    if t > 1:
        raise ValueError(f"`tempering` must be in (0, 1], got {tempering}")
    return t


#: Acceptance rate the zero-tuning penalty steps adapt to: on flat ground the noisy test accepts
#: 2 Phi(-sigma / 2), and the diffusion per iteration, sigma^2 2 Phi(-sigma / 2), peaks at
#: sigma ~ 2.4, where it accepts 0.23.
TARGET_ACCEPT = 0.25


class PenaltyMetropolis(DPStep):
    """Shared anatomy of the penalty-test Metropolis steps (full data and minibatch).

    A subclass sets ``self._test`` (its :class:`~pymc_dp.mechanisms.PenaltyTest`) and implements
    :meth:`_ratio`: the (unprivatised) log-likelihood ratio it releases, the prior at the
    proposal, the release's sensitivity, and the exact clip fraction (diagnostics only).

    Without ``proposal_scale`` the step tunes itself (zero tuning): a private warm start gives a
    noise-aware posterior covariance ``L L^T``; proposals move one coordinate of ``z = L^{-1} q``
    at a time, each coordinate scaled so that its privacy noise on the log ratio is the same, and
    the common factor is adapted during tuning by dual averaging towards :data:`TARGET_ACCEPT`,
    from the privatised acceptance probabilities, and ``L`` is re-estimated from the warm-up
    draws (:mod:`~pymc_dp.tuning.adaptation`); both are post-processing: no budget.
    """

    #: Acceptance the step aims at (adapted to with zero tuning; a check after sampling).
    target_accept: float | None = TARGET_ACCEPT
    adapted: ClassVar[tuple[str, str]] = ("proposal scale", "proposal covariance")
    stats: ClassVar[dict[str, Stat]] = {
        **PRIVACY_STATS,
        "accept_prob": Stat(np.float64),
        "noise_std": Stat(np.float64),
        "step_scale": Stat(np.float64),
        "clip_fraction": Stat(np.float64, releasable=False),
    }

    def __init__(
        self,
        vars: Sequence | None,
        *,
        llr_clip: float | np.ndarray,
        proposal_scale: float | np.ndarray | None,
        proposal: Proposal,
        tempering: float,
        adapt_covariance: bool | None = None,
        **kwargs,
    ) -> None:
        self.llr_clip = check_llr_clip(llr_clip)
        self.tempering = check_tempering(tempering)
        self._auto = proposal_scale is None
        self.adapt_covariance = check_adapt_covariance(
            adapt_covariance, self._auto, "proposal_scale"
        )
        super().__init__(vars, **kwargs)
        check_llr_clip(self.llr_clip, self.likelihood.dim)
        dim = self.likelihood.dim
        if self._auto:
            self._proposal = PreconditionedProposal(np.eye(dim), proposal, active=self._active)
        else:
            self._proposal = RandomWalkProposal(proposal_scale, dim, proposal, active=self._active)
        self.proposal_scale = None if self._auto else self._proposal.scale
        self.proposal = proposal

    def _needs_warm_start(self) -> bool:
        return self._auto

    def _warm_grad_clip(self) -> float:
        # |l_i(q') - l_i(q)| <= clip_norm(q' - q) for all steps bounds every gradient: in L2 by
        # the scalar bound, or by the norm of the per-coordinate bounds
        return float(np.linalg.norm(np.atleast_1d(self.llr_clip)))

    def _finish(self) -> None:
        """After the subclass compiled its kernel: the warm start and the proposal's shape."""
        self._run_warm_start()
        if self._auto:
            self._set_shape(self.warm.posterior_cov)

    def _set_shape(self, cov: np.ndarray) -> None:
        # the shape of the data-touching block (prior-only coordinates move freely)
        a = self._active
        chol = np.zeros_like(cov)
        chol[np.ix_(a, a)] = np.linalg.cholesky(cov[np.ix_(a, a)])
        self._proposal.chol = chol
        if self._plan is not None:
            self._unit_scale = self._equalised_scale()

    def _equalised_scale(self) -> np.ndarray:
        """z-coordinate k moved by h has noise std ``2 T s clip_norm(L e_k) h``: per-coordinate
        scales that give every coordinate the same noise."""
        per_unit = self._sensitivity_per_bound() * self._scale
        norms = np.array([self._clip_norm(col) for col in self._proposal.chol.T])
        return np.where(self._active, 1.0, 0.0) / (per_unit * np.maximum(norms, 1e-300))

    def _clip_norm(self, step: np.ndarray) -> float:
        """Bound on one row's |log-likelihood ratio| for this step: ``b |step|_2`` (scalar
        ``llr_clip``) or ``sum_j b_j |step_j|`` (per-coordinate bounds, e.g. bounded covariates
        of a GLM, which one-coordinate moves exploit)."""
        return clip_norm(self.llr_clip, step * self._active)  # prior-only: no likelihood

    def _ratio(self, q_new: np.ndarray, q: np.ndarray, bound: float):
        """``(value to release, log prior(q_new), sensitivity, clip fraction or None)`` for
        per-row ratios clipped to ``+-bound``."""
        raise NotImplementedError

    def _sensitivity_per_bound(self) -> float:
        """Sensitivity of the release per unit of per-row bound (``2 T`` for full data)."""
        return clipped_sum_sensitivity(1.0, self.tempering)

    def _reset_chain(self) -> None:
        self._proposal.reset(self.rng)
        if self._auto:
            self._unit_scale = self._equalised_scale()
            self._adapt = DualAverageAdaptation(2.0, TARGET_ACCEPT, 0.05, 0.75, 10)

    def _iterate(self, q: np.ndarray) -> tuple[np.ndarray, dict]:
        prior_cur = self._prior_at(q)
        factor = 1.0
        if self._auto:
            factor = float(self._adapt.current(self._tuning))
            self._proposal.scale = factor * self._unit_scale
        q_new, j = self._proposal(self.rng, q)
        value, prior_new, sensitivity, clip = self._ratio(q_new, q, self._clip_norm(q_new - q))
        log_ratio, sigma = self._test.log_ratio(self.chain.noise, value, sensitivity, self._scale)
        log_alpha = log_ratio + prior_new - prior_cur
        q_next, accepted = self._metropolis(q, q_new, log_alpha, prior_new)
        self._proposal.update(j, accepted)
        prob = float(np.exp(min(0.0, log_alpha))) if np.isfinite(log_alpha) else 0.0
        if self._auto:
            self._adapt.update(prob, self._tuning)
        stats = {"accepted": accepted, "accept_prob": prob, "noise_std": sigma}
        stats["step_scale"] = factor
        if clip is not None:
            stats["clip_fraction"] = clip
        return q_next, stats


class DPPenalty(AnchoredStep, PenaltyMetropolis):
    r"""Differentially private penalty Metropolis-Hastings.

    Parameters
    ----------
    vars : list, optional
        Free variables; must be all of them (the default).
    llr_clip : float or array
        :math:`b_l > 0`: per-row log-likelihood ratios are clipped to
        :math:`\pm b_l \|\theta' - \theta\|_2`; or, given one bound per raveled coordinate,
        to :math:`\pm \sum_j b_j |\theta'_j - \theta_j|`. Choose it from the model and public
        knowledge of the data range, never by looking at the private data: for a GLM whose
        log-likelihood is L-Lipschitz in the linear predictor (L = 1 for the logistic) and
        covariates bounded by :math:`|x_j| \le c_j`, :math:`b_j = L c_j`
        (:func:`pymc_dp.glm_clip`).
    proposal_scale : float or array, optional
        Standard deviation of the Gaussian proposal, per raveled coordinate (public; not tuned on
        the data). Default: zero tuning (see :class:`PenaltyMetropolis`): a private warm start
        (``warm_start``, default half the budget) and adapted, preconditioned proposals.
    proposal : {"random_walk", "ocu", "gwmh"}
        ``"random_walk"`` moves all coordinates; ``"ocu"`` (one-component updates) moves one
        coordinate chosen at random, which shortens the step and so the noise; ``"gwmh"`` (guided
        walk) moves one coordinate in its current direction, flipping the direction after a
        rejection (Yildirim & Ermis 2019, section 4.2). Default: ``"gwmh"`` with zero tuning,
        else ``"random_walk"``.
    tempering : float
        :math:`T \in (0, 1]`: the likelihood is raised to the power T (Raisa 2021, Thm 12).
    adapt_covariance : bool, optional
        Zero tuning only (default on there): during tuning, re-estimate the proposal covariance
        from the chain's warm-up draws on Stan's window schedule, pooled with the warm start's
        and weighted by each window's ESS (:mod:`~pymc_dp.tuning.adaptation`).
        Post-processing of released draws: no budget. ``False`` keeps the warm start's.
    hess_clip : float, optional
        Zero tuning only. A public bound on the Frobenius norm of one row's log-likelihood
        Hessian (:attr:`pymc_dp.GLMClip.hess_clip` for a GLM). Turns on the **Taylor anchor**
        (:mod:`pymc_dp.anchor`): the gradient sum at the private fit's mean is released once,
        and every iteration's test releases only the rows' second-order remainder, whose
        sensitivity ``hess_clip |Delta| (|theta - a| + |theta' - a|)`` is far smaller than ``2 b
        |Delta|`` near the posterior; proposals are then independent draws from the fit (a
        posterior width per accepted move). Measured on a logistic regression with n = 2e4,
        d = 3 at epsilon 5: bulk ESS in the hundreds where the guided walk gets 4-12. The bound
        must hold for every row between the anchor and any two points, in the sampler's
        (unconstrained) coordinates, and ``llr_clip``'s norm must bound every row's gradient at
        the anchor: for a logistic GLM :func:`pymc_dp.glm_clip`'s bounds hold everywhere; for a
        Poisson GLM only where ``|eta| <= eta_bound``; a model with a free noise scale has no
        such bound. Where it fails, rows' remainders are clipped: the chain is then biased (a
        bound 20x too small sent chains astray; the R-hat warning fired).
    anchor : float, optional
        Share of the budget (of its PLD mean) spent on the anchor's release; default
        :data:`DEFAULT_ANCHOR_SHARE` with ``hess_clip``. Its noise is released once, so it tilts
        the chain's target: the mean moves by about ``Sigma e`` (predicted by
        :func:`pymc_dp.anchor.tilt_sds`); a larger share shrinks that shift and leaves less
        for the tests.
    epsilon, delta, noise_multiplier, chains, noise_seed, exact_noise, warm_start, diagnostics
        See :class:`~pymc_dp.step_methods.base.DPStep`.
    row_dim, row_axes, public
        See :func:`pymc_dp.graph.analyse`.

    Notes
    -----
    One Gaussian release per iteration with noise multiplier ``s``: ``mu = 1 / (2 s^2)`` per
    iteration. With ``epsilon`` the multiplier is ``sqrt(K / (2 mu*(epsilon, delta)))`` for
    ``K = chains * (tune + draws)`` (Raisa 2021, Theorem 6, with :math:`s = \tau \sqrt{n}`),
    after the shared releases (the warm start and, with ``hess_clip``, the anchor).

    Stats: ``accepted``, ``accept_prob`` (from the noisy ratio), ``noise_std`` (public: ``s c``),
    ``step_scale`` (the adapted proposal factor, 1 with a fixed ``proposal_scale``),
    ``dp_epsilon`` / ``dp_mu`` (spent so far by this chain, warm start included), ``dp_delta``;
    with ``diagnostics=True`` also the exact ``clip_fraction``.

    References
    ----------
    .. [1] Yildirim, S. and Ermis, B. (2019). Exact MCMC with differentially private moves.
       Statistics and Computing 29(5), 947-963.
    .. [2] Raisa, O. (2021). Differentially Private Markov Chain Monte Carlo. MSc thesis,
       University of Helsinki. Section 3.1, Theorems 5-6.
    """

    name = "dp_penalty"
    distributed_rows = True  # full-data kernels only: rows may stay on Dask workers
    stats: ClassVar[dict[str, Stat]] = {
        **PenaltyMetropolis.stats,
        "dp_mu": Stat(np.float64),
    }

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        llr_clip: float,
        proposal_scale: float | np.ndarray | None = None,
        proposal: Proposal | None = None,
        tempering: float = 1.0,
        adapt_covariance: bool | None = None,
        hess_clip: float | None = None,
        anchor: float | None = None,
        **kwargs,
    ) -> None:
        if proposal == "independent" and hess_clip is None:
            raise ValueError(
                "`proposal='independent'` draws from the private fit and needs the Taylor "
                "anchor: give `hess_clip` too."
            )
        if hess_clip is not None and proposal not in (None, "independent"):
            raise ValueError(
                f"`hess_clip` (the Taylor anchor) proposes independent draws from the private "
                f"fit; `proposal={proposal!r}` is not supported with it."
            )
        self._init_anchor(
            hess_clip, anchor, "proposal_scale" * (proposal_scale is not None), kwargs
        )
        if proposal is None:
            proposal = "gwmh" if proposal_scale is None else "random_walk"
        super().__init__(
            vars,
            llr_clip=llr_clip,
            proposal_scale=proposal_scale,
            proposal="gwmh" if self.anchored else proposal,
            tempering=tempering,
            adapt_covariance=adapt_covariance,
            **kwargs,
        )
        self._check_anchor_budget()
        self._test = PenaltyTest()
        if self.anchored:
            self.proposal = "independent"
        else:
            self._kernel = self.likelihood.ratio_kernel(diagnostics=self.diagnostics)
        self._finish()
        if self.anchored:
            self._release_anchor()
            self._independent = IndependentProposal(
                self.warm.mean, self.warm.posterior_cov, self._active
            )
            self.target_accept = None  # a mixture of two kernels: no one rate to aim at

    def mechanisms(self) -> tuple[PenaltyTest]:
        return (ANCHORED_TEST if self.anchored else PenaltyTest(),)

    def _ratio(self, q_new: np.ndarray, q: np.ndarray, bound: float):
        out = self._kernel(q_new, q, np.asarray(bound))
        clip = float(out[2]) if self.diagnostics else None
        t = self.tempering
        return t * float(out[0]), float(out[1]), clipped_sum_sensitivity(bound, t), clip

    # ------------------------------------------------------------------ the Taylor anchor
    def _shared_entries(self) -> tuple:
        return super()._shared_entries() + self._anchor_entries()

    def _adaptation(self) -> str:
        if not self.anchored:
            return super()._adaptation()
        text = "local moves' scale by dual averaging on the released accept_prob"
        if self.adapt_covariance:
            text += (
                "; the independence proposal's mean and covariance from the warm-up draws "
                "(ESS-weighted windows)"
            )
        return text

    def _warm_hess_clip(self) -> float | None:
        return self.hess_clip  # the anchor's bound on the rows' curvature serves the fit too

    def _set_shape(self, cov: np.ndarray) -> None:
        super()._set_shape(cov)
        if getattr(self, "_independent", None) is not None:
            self._independent.set_cov(cov)
            if self.chain.shape is not None:  # re-centred on the pooled warm-up draws
                self._independent.mean = self.chain.shape.mean.copy()

    def _equalised_scale(self) -> np.ndarray:
        if self.anchored:  # local moves of one whitened coordinate; the test's noise is small
            return np.where(self._active, 1.0, 0.0)
        return super()._equalised_scale()

    def _reset_chain(self) -> None:
        super()._reset_chain()
        if self.anchored:
            self._adapt = DualAverageAdaptation(1.0, LOCAL_TARGET_ACCEPT, 0.05, 0.75, 10)
            self._independent.mean = self.warm.mean.copy()
            self._independent.set_cov(self.warm.posterior_cov)
            self._anchored_ratio.reset()

    def _iterate(self, q: np.ndarray) -> tuple[np.ndarray, dict]:
        if not self.anchored:
            return super()._iterate(q)
        prior_cur = self._prior_at(q)
        factor = float(self._adapt.current(self._tuning))
        local = self.rng.uniform() >= INDEPENDENT_SHARE
        if local:
            self._proposal.scale = factor * self._unit_scale
            q_new, j = self._proposal(self.rng, q)
            hastings = 0.0
        else:
            q_new, j = self._independent(self.rng, q)
            hastings = self._independent.log_density(q) - self._independent.log_density(q_new)
        log_ratio, sigma, clip = self._anchored_log_ratio(q, q_new)
        prior_new = self.likelihood.prior_value(q_new)
        log_alpha = log_ratio + prior_new - prior_cur + hastings
        q_next, accepted = self._metropolis(q, q_new, log_alpha, prior_new)
        if accepted:
            self._anchored_ratio.accept()
        prob = float(np.exp(min(0.0, log_alpha))) if np.isfinite(log_alpha) else 0.0
        if local:
            self._proposal.update(j, accepted)
            self._adapt.update(prob, self._tuning)
        stats = {"accepted": accepted, "accept_prob": prob, "noise_std": sigma}
        stats["step_scale"] = factor
        if self.diagnostics:
            stats["clip_fraction"] = clip
        return q_next, stats


#: FAST_COMPILE (no Numba): the warm start's per-row Hessian kernels compile slowly under Numba
_FAST = {"mode": "FAST_COMPILE"}
register(
    DPPenalty,
    penalty=Example({"llr_clip": 3.0, "proposal_scale": 0.05}),
    penalty_zero_tuning=Example({"llr_clip": 3.0}),
    # hess_clip bounds the rows' curvature only where the residuals stay small: a clip here
    penalty_anchored=Example({"llr_clip": 3.0, "hess_clip": 10.0, "compile_kwargs": _FAST}),
)
