"""DP-HMC: Hamiltonian Monte Carlo with clipped noisy gradients and the penalty acceptance test.

Raisa, Koskela & Honkela (2023), Algorithm 1; Raisa (2021), section 4.2 and Algorithm 3. Each
iteration draws ``p ~ N(0, M)`` and runs ``L`` leapfrog steps; every one of the ``L + 1`` gradient
evaluations releases

    g~ = T sum_i clip_{b_g}(grad l_i(theta)) + N(0, (2 T b_g s_g)^2 I)

(replace-one L2 sensitivity ``2 T b_g``, noise multiplier ``s_g``, fresh noise every time) plus the
exact prior gradient. The proposal is accepted with the penalty test of the DP penalty algorithm,

    log u < R + xi - sigma_l^2 / 2 + log p(theta') - log p(theta) + K(p) - K(p'),

with ``R = T sum_i clip_{b_l ||theta' - theta||}(l_i(theta') - l_i(theta))``,
``xi ~ N(0, sigma_l^2)`` and ``sigma_l = 2 T b_l ||theta' - theta|| s_l``. Theorem 3.5:
``mu = k / (2 s_l^2) + k (L + 1) / (2 s_g^2)`` for ``k`` iterations (``s = tau sqrt(n)`` in the
paper's parameterisation).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from pymc.blocking import RaveledVars

from pymc_dp.accounting._validate import check_positive
from pymc_dp.step_methods.base import DPStep

__all__ = ["DPHMC", "randomized_halton"]

LLR = "log-likelihood ratio"
GRAD = "gradient"


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


class DPHMC(DPStep):
    r"""Differentially private Hamiltonian Monte Carlo.

    Parameters
    ----------
    vars : list, optional
        Free variables; must be all of them (the default).
    step_size : float
        Leapfrog step size :math:`\eta` (public; not tuned on the data).
    n_steps : int
        Number of leapfrog steps :math:`L`; each iteration makes ``L + 1`` gradient releases.
    llr_clip : float
        :math:`b_l`: per-row log-likelihood ratios are clipped to
        :math:`\pm b_l \|\theta' - \theta\|`.
    grad_clip : float
        :math:`b_g`: per-row gradients are clipped to L2 norm :math:`b_g`.
    mass_matrix : float, array (D,) or array (D, D), optional
        Public mass matrix :math:`M` (diagonal or dense, positive definite). Default identity.
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
    epsilon, delta, noise_multiplier, chains, diagnostics, row_dim
        See :class:`~pymc_dp.step_methods.base.DPStep`. ``noise_multiplier`` is :math:`s_l`.

    Notes
    -----
    Stats: ``accepted``, ``accept_prob`` (from the noisy ratio), ``step_size``, ``diverging``,
    ``noise_std`` (of the ratio), ``dp_epsilon``/``dp_mu``/``dp_delta``; with
    ``diagnostics=True`` also the exact ``clip_fraction`` and ``grad_clip_fraction``.

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
    releasable_stats: ClassVar[dict] = {
        **DPStep.releasable_stats,
        "noise_std": (np.float64, []),
        "step_size": (np.float64, []),
        "diverging": (bool, []),
    }
    diagnostic_stats: ClassVar[dict] = {
        "clip_fraction": (np.float64, []),
        "grad_clip_fraction": (np.float64, []),
    }
    stats_dtypes_shapes = releasable_stats

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        step_size: float,
        n_steps: int,
        llr_clip: float,
        grad_clip: float,
        mass_matrix: float | np.ndarray | None = None,
        step_jitter: float = 1.0,
        grad_noise_ratio: float = 4.0,
        max_energy_error: float = 1000.0,
        tempering: float = 1.0,
        _nonprivate: bool = False,
        **kwargs,
    ) -> None:
        check_positive(step_size, "step_size")
        check_positive(llr_clip, "llr_clip")
        check_positive(grad_clip, "grad_clip")
        check_positive(grad_noise_ratio, "grad_noise_ratio")
        check_positive(max_energy_error, "max_energy_error")
        if int(n_steps) != n_steps or n_steps < 1:
            raise ValueError(f"`n_steps` must be an integer >= 1, got {n_steps}")
        if not (0 <= step_jitter <= 1):
            raise ValueError(f"`step_jitter` must be in [0, 1], got {step_jitter}")
        if not (np.isfinite(tempering) and 0 < tempering <= 1):
            raise ValueError(f"`tempering` must be in (0, 1], got {tempering}")
        self._nonprivate = bool(_nonprivate)
        if self._nonprivate:
            # Testing only: plain HMC on the exact likelihood. Nothing it returns is private.
            kwargs.setdefault("noise_multiplier", 1.0)
            kwargs["diagnostics"] = True
        super().__init__(vars, **kwargs)
        d = self.likelihood.dim
        self.step_size = float(step_size)
        self.n_steps = int(n_steps)
        self.llr_clip = float(llr_clip)
        self.grad_clip = float(grad_clip)
        self.step_jitter = float(step_jitter)
        self.grad_noise_ratio = float(grad_noise_ratio)
        self.max_energy_error = float(max_energy_error)
        self.tempering = float(tempering)
        self._set_mass_matrix(mass_matrix, d)
        diag = self.diagnostics
        self._ratio = self.likelihood.ratio_kernel(diagnostics=diag)
        self._grad = self.likelihood.grad_kernel(diagnostics=diag)

    def _set_mass_matrix(self, mass_matrix, d: int) -> None:
        m = np.ones(d) if mass_matrix is None else np.asarray(mass_matrix, dtype=float)
        if m.ndim == 0:
            m = np.full(d, float(m))
        if m.shape == (d,):
            if not np.all(np.isfinite(m) & (m > 0)):
                raise ValueError("`mass_matrix` must be positive and finite")
            self._m_diag, self._m_chol, self._m_inv = m, None, None
        elif m.shape == (d, d):
            if not np.allclose(m, m.T):
                raise ValueError("`mass_matrix` must be symmetric")
            try:
                self._m_chol = np.linalg.cholesky(m)
            except np.linalg.LinAlgError as err:
                raise ValueError("`mass_matrix` must be positive definite") from err
            self._m_diag, self._m_inv = None, np.linalg.inv(m)
        else:
            raise ValueError(f"`mass_matrix` must be a scalar, shape ({d},) or ({d}, {d})")

    def _draw_momentum(self) -> np.ndarray:
        z = self.rng.standard_normal(self.likelihood.dim)
        if self._m_diag is not None:
            return np.sqrt(self._m_diag) * z
        return self._m_chol @ z

    def _velocity(self, p: np.ndarray) -> np.ndarray:
        return p / self._m_diag if self._m_diag is not None else self._m_inv @ p

    # ------------------------------------------------------------------ accounting
    def _base_noise_multipliers(self) -> dict[str, float]:
        s_l = self.noise_multiplier or 1.0
        return {LLR: s_l, GRAD: self.grad_noise_ratio * s_l}

    def _releases_per_iteration(self) -> dict[str, int]:
        return {LLR: 1, GRAD: self.n_steps + 1}

    def _set_noise(self, multipliers: dict[str, float]) -> None:
        scale = 0.0 if self._nonprivate else 1.0
        self._s_l, self._s_g = scale * multipliers[LLR], scale * multipliers[GRAD]

    def ledger(self, tune: int, draws: int, chains: int | None = None):
        if self._nonprivate:
            raise ValueError(
                "DPHMC(_nonprivate=True) is a testing mode: nothing it returns is private."
            )
        return super().ledger(tune, draws, chains)

    def setup_chain(self, rng, tune: int, draws: int) -> None:
        super().setup_chain(rng, tune, draws)
        if self._nonprivate:
            self._cum_mu = np.full_like(self._cum_mu, np.inf)
            self._cum_eps = np.full_like(self._cum_eps, np.inf)
            warnings.warn("DPHMC(_nonprivate=True): plain HMC, not private.", UserWarning, 2)
        h = randomized_halton(int(tune) + int(draws), self.rng)
        self._step_sizes = self.step_size * (1.0 + self.step_jitter * (2.0 * h - 1.0))
        self._q_cached = None

    # ------------------------------------------------------------------ kernel
    def _noisy_grad(self, q: np.ndarray, bound: float) -> tuple[np.ndarray, float]:
        """Gradient of the log posterior with the likelihood part clipped and privatised."""
        out = self._grad(q, bound)
        noise = 2.0 * self.tempering * self.grad_clip * self._s_g
        g = self.tempering * out[0] + noise * self.rng.standard_normal(q.size) + out[1]
        return g, (float(out[2]) if self.diagnostics else 0.0)

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list[dict]]:
        q = q0.data
        if self._q_cached is None or not np.array_equal(self._q_cached, q):
            # ratio of q with itself is 0 and releases nothing; only the prior term is used
            self._prior_cur = float(self._ratio(q, q, np.zeros(()))[1])
            self._q_cached = q.copy()
        eta = float(self._step_sizes[min(self._iteration, len(self._step_sizes) - 1)])
        gbound = np.asarray(self.grad_clip if not self._nonprivate else 1e300)
        p0 = self._draw_momentum()

        # Leapfrog with L + 1 fresh noisy gradient releases.
        q_new, p = q.copy(), p0.copy()
        g, gclip = self._noisy_grad(q_new, gbound)
        p += 0.5 * eta * g
        gclips = [gclip]
        finite = True
        for i in range(self.n_steps):
            q_new += eta * self._velocity(p)
            g, gclip = self._noisy_grad(q_new, gbound)
            gclips.append(gclip)
            p += (eta if i < self.n_steps - 1 else 0.5 * eta) * g
            if not (np.all(np.isfinite(q_new)) and np.all(np.isfinite(p))):
                finite = False
                break

        diverging, accepted, log_alpha, sigma, clip = True, False, -np.inf, np.nan, np.nan
        if finite:
            dist = float(np.sqrt(np.sum((q_new - q) ** 2)))
            bound = self.llr_clip * dist if not self._nonprivate else 1e300
            out = self._ratio(q_new, q, np.asarray(bound))
            llr, prior_new = self.tempering * float(out[0]), float(out[1])
            sigma = 2.0 * self.tempering * self._s_l * self.llr_clip * dist
            noisy_llr = llr + sigma * self.rng.standard_normal()
            kinetic = 0.5 * (p0 @ self._velocity(p0) - p @ self._velocity(p))
            delta_h = noisy_llr + prior_new - self._prior_cur + kinetic  # privatised
            diverging = not np.isfinite(delta_h) or abs(delta_h) > self.max_energy_error
            if not diverging:
                log_alpha = delta_h - 0.5 * sigma**2
                accepted = bool(np.log(self.rng.uniform()) < log_alpha)
            if self.diagnostics:
                clip = float(out[2])
            if accepted:
                self._q_cached, self._prior_cur = q_new, prior_new

        stats = {
            "accepted": accepted,
            "accept_prob": float(np.exp(min(0.0, log_alpha))),
            "noise_std": sigma,
            "step_size": eta,
            "diverging": bool(diverging),
            **self._privacy_stats(),
        }
        if self.diagnostics:
            stats["clip_fraction"] = clip
            stats["grad_clip_fraction"] = float(np.mean(gclips))
        return RaveledVars(q_new if accepted else q, q0.point_map_info), [stats]
