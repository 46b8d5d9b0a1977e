from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np
from pymc.step_methods.hmc.quadpotential import (
    QuadPotential,
    QuadPotentialDiag,
    QuadPotentialFull,
    QuadPotentialFullInv,
)
from pymc.step_methods.step_sizes import DualAverageAdaptation

from pymc_dp.checks import check_count, check_positive
from pymc_dp.mechanisms import GaussianRelease, PenaltyTest, clipped_sum_sensitivity
from pymc_dp.step_methods.anchoring import ANCHORED_TEST, AnchoredStep
from pymc_dp.step_methods.base import PRIVACY_STATS, DPStep, Stat
from pymc_dp.step_methods.penalty import (
    check_adapt_covariance,
    check_llr_clip,
    check_tempering,
    clip_norm,
)
from pymc_dp.step_methods.registry import Example, register

#: Acceptance the zero-tuning DPHMC adapts its step size to (the penalty on the final ratio and
#: the gradient noise both grow with the step).
TARGET_ACCEPT = 0.3
#: With the Taylor anchor the test's noise is small near the posterior, so the energy error
#: decides, as for HMC without noise (Beskos et al. 2013's 0.65); at 0.3 the step size grew to the
#: leapfrog's stability limit (70% divergent trajectories on a Gaussian posterior).
ANCHORED_TARGET_ACCEPT = 0.65

__all__ = [
    "DPHMC",
    "leapfrog",
    "likelihood_curvature",
    "mass_matrix_potential",
    "randomized_halton",
]


def randomized_halton(size: int, rng: np.random.Generator, digits: int = 32) -> np.ndarray:
    """First ``size`` points of a base-2 Halton (van der Corput) sequence with random digit
    scrambling (Owen 2017): digit ``k`` of every index is XOR-ed with one random bit ``b_k``.

    Each point is uniform on [0, 1) and the points stay evenly spread, which is why Hoffman et
    al. (2021) use them to jitter HMC trajectories.
    """
    idx = np.arange(size, dtype=np.uint64)
    bits = rng.integers(0, 2, size=digits, dtype=np.uint64)
    out = np.zeros(size)
    for k in range(digits):
        digit = ((idx >> np.uint64(k)) & np.uint64(1)) ^ bits[k]
        out += digit * 2.0 ** -(k + 1)
    return out


def mass_matrix_potential(mass_matrix, dim: int) -> QuadPotential:
    """PyMC's quadpotential for a public mass matrix M (scalar, diagonal or dense)."""
    m = np.ones(dim) if mass_matrix is None else np.asarray(mass_matrix, dtype=float)
    if m.ndim == 0:
        m = np.full(dim, float(m))
    if m.shape == (dim,):
        if not np.all(np.isfinite(m) & (m > 0)):
            raise ValueError("`mass_matrix` must be positive and finite")
        return QuadPotentialDiag(1.0 / m)
    if m.shape == (dim, dim):
        if not np.allclose(m, m.T):
            raise ValueError("`mass_matrix` must be symmetric")
        try:
            np.linalg.cholesky(m)
        except np.linalg.LinAlgError as err:
            raise ValueError("`mass_matrix` must be positive definite") from err
        return QuadPotentialFullInv(m)
    raise ValueError(f"`mass_matrix` must be a scalar, shape ({dim},) or ({dim}, {dim})")


def leapfrog(
    q: np.ndarray, p0: np.ndarray, eta: float, n_steps: int, grad: Callable, potential
) -> tuple[np.ndarray, np.ndarray, bool, list[float]]:
    """``n_steps`` leapfrog steps from ``(q, p0)`` with ``n_steps + 1`` gradient calls, each a
    fresh noisy release (``grad(q) -> (gradient, clip fraction)``). Returns the end point, its
    momentum, whether both stayed finite (a trajectory stops at its first non-finite step) and
    the clip fractions."""
    q_new, p = q.copy(), p0.copy()
    g, gclip = grad(q_new)
    p += 0.5 * eta * g
    gclips = [gclip]
    for i in range(n_steps):
        q_new += eta * potential.velocity(p)
        g, gclip = grad(q_new)
        gclips.append(gclip)
        p += (eta if i < n_steps - 1 else 0.5 * eta) * g
        if not (np.all(np.isfinite(q_new)) and np.all(np.isfinite(p))):
            return q_new, p, False, gclips
    return q_new, p, True, gclips


def likelihood_curvature(warm, likelihood, active: np.ndarray) -> np.ndarray:
    """The likelihood's part of the warm start's precision (public): its posterior precision
    less the prior's curvature at its mean, with negative eigenvalues set to 0."""
    precision = np.linalg.inv(warm.cov) + likelihood.prior_hessian(warm.mean)
    precision = 0.5 * (precision + precision.T)
    vals, vecs = np.linalg.eigh(precision)
    mask = np.outer(active, active)
    return (vecs * np.maximum(vals, 0.0)) @ vecs.T * mask


class DPHMC(AnchoredStep, DPStep):
    r"""Differentially private Hamiltonian Monte Carlo.

    Parameters
    ----------
    vars : list, optional
        Free variables; must be all of them (the default).
    step_size : float, optional
        Leapfrog step size :math:`\eta` (public; not tuned on the data). Default: zero tuning: a
        private warm start (``warm_start``, default half the budget) gives the mass matrix (its
        noise-aware posterior precision), and the step size is adapted during tuning by dual
        averaging towards an acceptance of 0.3, from the privatised acceptance probabilities.
    n_steps : int
        Number of leapfrog steps :math:`L` (default 5); each iteration makes ``L + 1`` gradient
        releases.
    llr_clip : float or array (D,)
        :math:`b_l`: per-row log-likelihood ratios are clipped to
        :math:`\pm b_l \|\theta' - \theta\|`; or per-coordinate bounds :math:`b_j` (as
        :func:`pymc_dp.glm_clip` gives them, and as :class:`DPPenalty` takes them), clipping to
        :math:`\pm \sum_j b_j |\theta'_j - \theta_j|`.
    grad_clip : float
        :math:`b_g`: per-row gradients are clipped to L2 norm :math:`b_g`.
    mass_matrix : float, array (D,) or array (D, D), optional
        Public mass matrix :math:`M` (diagonal or dense, positive definite). Default identity.
        Kept as one of PyMC's quadpotentials (``QuadPotentialDiag`` with variance ``1 / M`` or
        ``QuadPotentialFullInv``).
    step_jitter : float
        The step size of iteration i is :math:`\eta (1 + j (2 h_i - 1))` with :math:`h_i` a
        randomised Halton point (paper, section 3; Hoffman et al. 2021). ``j = 1`` (default)
        draws from :math:`(0, 2\eta)`; ``0`` turns jitter off.
    grad_noise_ratio : float
        :math:`s_g / s_l`, how the budget is split between the two noise sources when calibrating
        from ``epsilon`` (or the gradient multiplier when ``noise_multiplier`` is given). The
        default 4 is the ratio :math:`\tau_g / \tau_l = 0.4 / 0.1` of the paper's experiments:
        the gradients take about 40% of the budget at L = 10.
    max_energy_error : float
        A trajectory is divergent, rejected and counted when it leaves the finite numbers or its
        *privatised* energy change exceeds this (the exact energy change reads the data).
    tempering : float
        :math:`T \in (0, 1]`, likelihood power.
    adapt_covariance : bool, optional
        Zero tuning only (default on there): during tuning, re-estimate the inverse mass matrix
        from the chain's warm-up draws on Stan's window schedule, pooled with the warm start's
        and weighted by each window's ESS (:mod:`~pymc_dp.tuning.adaptation`), as PyMC's
        NUTS adapts its mass matrix. Post-processing of released draws: no budget.
    hess_clip : float, optional
        Zero tuning only: a public bound on the Frobenius norm of one row's log-likelihood
        Hessian (:attr:`pymc_dp.GLMClip.hess_clip`). Turns on the Taylor anchor
        (:mod:`pymc_dp.anchor`, as in :class:`DPPenalty`): the gradient sum at the private
        fit's mean is released once, and the final test releases only the log-likelihood's
        second-order remainder. The leapfrog then releases nothing: it follows the exact prior's
        gradient plus the likelihood's quadratic surrogate from released values (the anchor's
        gradient and the warm start's curvature). Any trajectory that is reversible and keeps
        volume is a valid proposal; the exact test corrects what the surrogate misses
        (surrogate-trajectory HMC, Rasmussen 2003; Zhang, Shahbaba & Zhao 2017). Measured: noisy
        leapfrog gradients (even of the anchor's remainder) were mostly noise at epsilon 5,
        n = 2e4 (bulk ESS 111-147).
    anchor : float, optional
        The anchor's share of the budget (default
        :data:`~pymc_dp.step_methods.anchoring.DEFAULT_ANCHOR_SHARE` with ``hess_clip``).
    epsilon, delta, noise_multiplier, chains, noise_seed, exact_noise, warm_start, diagnostics
        See :class:`~pymc_dp.step_methods.base.DPStep`. ``noise_multiplier`` is :math:`s_l`.
    row_dim, row_axes, public
        See :func:`pymc_dp.graph.analyse`.

    Notes
    -----
    Stats: ``accept_prob`` is the noisy ratio's, ``step_size`` jittered (adapted with zero
    tuning), ``noise_std`` the ratio's; ``diagnostics=True`` adds the exact clip fractions.

    References
    ----------
    .. [1] Raisa, O., Koskela, A. and Honkela, A. (2023). Noise-aware differentially private
       Bayesian inference: DP-HMC. Algorithm 1, Theorem 3.5.
    .. [2] Raisa, O. (2021). Differentially Private Markov Chain Monte Carlo. MSc thesis,
       section 4.2.
    .. [3] Hoffman, M., Radul, A. and Sountsov, P. (2021). An adaptive MCMC scheme for setting
       trajectory lengths in Hamiltonian Monte Carlo. AISTATS.
    """

    name = "dp_hmc"
    distributed_rows = True  # full-data kernels only: rows may stay on Dask workers
    #: Acceptance the step aims at (adapted to with zero tuning; a check after sampling).
    target_accept: float | None = TARGET_ACCEPT
    adapted: ClassVar[tuple[str, str]] = ("step size", "inverse mass matrix")
    stats: ClassVar[dict[str, Stat]] = {
        **PRIVACY_STATS,
        "dp_mu": Stat(np.float64),
        "accept_prob": Stat(np.float64),
        "noise_std": Stat(np.float64),
        "step_size": Stat(np.float64),
        "diverging": Stat(bool),
        "clip_fraction": Stat(np.float64, releasable=False),
        "grad_clip_fraction": Stat(np.float64, releasable=False),
    }

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        llr_clip: float | np.ndarray,
        grad_clip: float,
        step_size: float | None = None,
        n_steps: int = 5,
        mass_matrix: float | np.ndarray | None = None,
        step_jitter: float = 1.0,
        grad_noise_ratio: float = 4.0,
        max_energy_error: float = 1000.0,
        tempering: float = 1.0,
        adapt_covariance: bool | None = None,
        hess_clip: float | None = None,
        anchor: float | None = None,
        **kwargs,
    ) -> None:
        self._init_anchor(hess_clip, anchor, "step_size" * (step_size is not None), kwargs)
        self._auto = step_size is None
        self.adapt_covariance = check_adapt_covariance(adapt_covariance, self._auto, "step_size")
        self.step_size = 0.3 if self._auto else check_positive(step_size, "step_size")
        self.llr_clip = check_llr_clip(llr_clip)
        self.grad_clip = check_positive(grad_clip, "grad_clip")
        self.grad_noise_ratio = check_positive(grad_noise_ratio, "grad_noise_ratio")
        self.max_energy_error = check_positive(max_energy_error, "max_energy_error")
        self.n_steps = check_count(n_steps, "n_steps", minimum=1)
        if not (0 <= step_jitter <= 1):
            raise ValueError(f"`step_jitter` must be in [0, 1], got {step_jitter}")
        self.step_jitter = float(step_jitter)
        self.tempering = check_tempering(tempering)
        if self._auto and mass_matrix is not None:
            raise ValueError("Give `mass_matrix` with `step_size`, or neither (zero tuning).")
        super().__init__(vars, **kwargs)
        self._check_anchor_budget()
        check_llr_clip(self.llr_clip, self.likelihood.dim)
        self.potential = mass_matrix_potential(mass_matrix, self.likelihood.dim)
        self._test, *rest = self.mechanisms()
        self._gradient = rest[0] if rest else None
        if not self.anchored:
            self._ratio = self.likelihood.ratio_kernel(diagnostics=self.diagnostics)
            self._grad = self.likelihood.grad_kernel(diagnostics=self.diagnostics)
        self._run_warm_start()
        if self._auto:  # the noise-aware posterior covariance is the inverse mass matrix
            self._set_shape(self.warm.posterior_cov)
        if self.anchored:
            self._release_anchor()
            self.target_accept = ANCHORED_TARGET_ACCEPT
            curvature = likelihood_curvature(self.warm, self.likelihood, self._active)
            self._surrogate_curvature = curvature

    def _shape_mask(self) -> np.ndarray | None:
        mask = super()._shape_mask()  # the leapfrog moves every coordinate: adapt them all
        return None if mask is None else np.ones_like(mask)

    def _set_shape(self, cov: np.ndarray) -> None:
        self.potential = QuadPotentialFull(cov)
        if self._plan is not None:  # a chain is running: keep drawing momenta from its rng
            self.potential.set_rng(self.rng)

    def _needs_warm_start(self) -> bool:
        return self._auto

    def _warm_grad_clip(self) -> float:
        return self.grad_clip

    def _warm_hess_clip(self) -> float | None:
        return self.hess_clip  # the anchor's bound on the rows' curvature serves the fit too

    def mechanisms(self) -> tuple[PenaltyTest, ...]:
        if self.anchored:  # the leapfrog follows a surrogate of released values: no release
            return (ANCHORED_TEST,)
        return (
            PenaltyTest(),
            GaussianRelease("gradient", self.n_steps + 1, self.grad_noise_ratio),
        )

    def _shared_entries(self) -> tuple:
        return super()._shared_entries() + self._anchor_entries()

    def _reset_chain(self) -> None:
        self.potential.set_rng(self.rng)
        h = randomized_halton(self._plan.iterations, self.rng)
        self._jitter = 1.0 + self.step_jitter * (2.0 * h - 1.0)
        if self._auto:
            target = ANCHORED_TARGET_ACCEPT if self.anchored else TARGET_ACCEPT
            self._adapt = DualAverageAdaptation(self.step_size, target, 0.05, 0.75, 10)
        if self.anchored:
            self._anchored_ratio.reset()

    def _noisy_grad(self, q: np.ndarray) -> tuple[np.ndarray, float]:
        """Gradient of the log posterior with the likelihood part clipped and privatised."""
        t = self.tempering
        if self.anchored:  # exact prior + the likelihood's quadratic surrogate: post-processing
            _, prior_grad = self.likelihood.prior_logp_and_grad(q)
            move = (q - self.anchor.point) * self._active
            # the warm start fitted the tempered likelihood: its curvature carries T already
            return prior_grad + t * self.anchor.gradient - self._surrogate_curvature @ move, 0.0
        out = self._grad(q, np.asarray(self.grad_clip))
        g, _ = self._gradient.release(
            self.chain.noise, t * out[0], clipped_sum_sensitivity(self.grad_clip, t), self._scale
        )
        return g + out[1], (float(out[2]) if self.diagnostics else 0.0)

    def _log_ratio(self, q: np.ndarray, q_new: np.ndarray) -> tuple[float, float, float, float]:
        """``(privatised log-likelihood ratio - sigma^2 / 2, sigma, log prior(q_new), exact clip
        fraction or NaN)`` of the final test."""
        if self.anchored:
            log_ratio, sigma, clip = self._anchored_log_ratio(q, q_new)
            return log_ratio, sigma, self.likelihood.prior_value(q_new), clip
        moved = (q_new - q) * self._active  # prior-only coordinates leave the likelihood
        bound = clip_norm(self.llr_clip, moved)
        out = self._ratio(q_new, q, np.asarray(bound))
        t = self.tempering
        log_ratio, sigma = self._test.log_ratio(
            self.chain.noise, t * float(out[0]), clipped_sum_sensitivity(bound, t), self._scale
        )
        return log_ratio, sigma, float(out[1]), float(out[2]) if self.diagnostics else np.nan

    def _iterate(self, q: np.ndarray) -> tuple[np.ndarray, dict]:
        prior_cur = self._prior_at(q)
        tuning = self._tuning
        base = float(self._adapt.current(tuning)) if self._auto else self.step_size
        eta = base * float(self._jitter[self.chain.iteration])
        pot = self.potential
        p0 = pot.random()

        q_new, p, finite, gclips = leapfrog(q, p0, eta, self.n_steps, self._noisy_grad, pot)

        diverging, log_alpha, sigma, clip = True, -np.inf, np.nan, np.nan
        q_next, accepted = q, False
        if finite:
            log_ratio, sigma, prior_new, clip = self._log_ratio(q, q_new)
            kinetic = pot.energy(p0) - pot.energy(p)
            # privatised; sigma * sigma cannot raise (see PenaltyTest.log_ratio)
            delta_h = log_ratio + 0.5 * sigma * sigma + prior_new - prior_cur + kinetic
            diverging = not np.isfinite(delta_h) or abs(delta_h) > self.max_energy_error
            if not diverging:
                log_alpha = delta_h - 0.5 * sigma * sigma
                q_next, accepted = self._metropolis(q, q_new, log_alpha, prior_new)
                if accepted and self.anchored:
                    self._anchored_ratio.accept()

        prob = float(np.exp(min(0.0, log_alpha)))
        if self._auto:
            self._adapt.update(prob, tuning)
        stats = dict(accepted=accepted, accept_prob=prob, noise_std=sigma, step_size=eta)
        stats["diverging"] = bool(diverging)
        if self.diagnostics:
            stats["clip_fraction"] = clip
            stats["grad_clip_fraction"] = float(np.mean(gclips))
        return q_next, stats


#: The contract examples compile in PyTensor's FAST_COMPILE mode (no Numba).
_FAST = {"mode": "FAST_COMPILE"}
_HMC = {"llr_clip": 3.0, "grad_clip": 3.0, "n_steps": 3}
register(
    DPHMC,
    hmc=Example({**_HMC, "step_size": 0.01}),
    hmc_zero_tuning=Example(_HMC),
    hmc_anchored=Example({**_HMC, "hess_clip": 10.0, "compile_kwargs": _FAST}),
)
