r"""Private warm start: noisy Newton steps to the posterior mode, and a noise-aware Laplace fit.

Chains that start at a public point spend most of a DP budget travelling: the posterior mode is
often tens of posterior sds away, and steps small enough to pass a noisy test cover that distance
slowly. A few noisy *gradient* releases do better: each releases the whole d-vector at once, and a
Newton step with a good curvature estimate lands near the mode from anywhere nearby.

Each of ``steps`` iterations at ``q_t`` releases, with Gaussian noise (snapped, from the secret
noise source):

* the clipped per-row gradient sum :math:`\tilde g_t = \sum_i \mathrm{clip}_B(\nabla l_i(q_t))
  + N(0, (2 T B s_t)^2 I)` (replace-one sensitivity :math:`2 T B`), and
* the clipped empirical Fisher information :math:`\tilde F_t = \sum_i \mathrm{clip}_B(\nabla
  l_i)\mathrm{clip}_B(\nabla l_i)^T + N` on its upper triangle (sensitivity
  :math:`\sqrt 2\, T B^2`), symmetrised,

and moves to :math:`q_{t+1} = q_t + H_t^{-1}(\tilde g_t + \nabla \log p(q_t))` with
:math:`H_t = \tilde F_t + P(q_t)`, the prior's curvature :math:`P = -\nabla^2 \log p` (public),
projected to be positive definite (eigenvalues floored at the prior precision's smallest), which
bounds every step by the prior's scale. Away from the mode the empirical Fisher information
over-states the curvature, so the steps fall short (never overshoot) and the walk converges
from below; at the mode it matches the observed information of a well-specified model.

The result is a Laplace approximation :math:`N(\hat q, H^{-1})` at :math:`\hat q = q_T` and,
because :math:`\hat q` carries the last release's noise :math:`H^{-1}\xi`, a *noise-aware* one:
:math:`N(\hat q, H^{-1} + \sigma_T^2 H^{-2})`. Its draws start chains, its covariance
preconditions proposals and mass matrices; :class:`~pymc_dp.DPLaplace` samples it directly.

Budget: a share ``mu`` of the Gaussian privacy loss :math:`\mu` (all releases are Gaussian
mechanisms, composed exactly with the sampling that follows, in the same ledger, once per run).
Within it, 20% goes to the Fisher releases (a noisy curvature makes every Newton step erratic),
60% to the last gradient, which fixes :math:`\hat q`, and the rest to the earlier gradients, which
only need to bring the walk within a few posterior sds of the mode. Measured on a logistic
regression (n = 1e5, d = 10, covariates uniform on [-1, 1], epsilon = 1 for the warm start alone):
median error 0.36 posterior sds per coordinate, and the noise-aware covariance calibrated (the
errors' z-scores have root mean square 1.04 over 12 runs). Everything here is computed from
releases and public values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pymc_dp.accounting._validate import check_count, check_positive
from pymc_dp.accounting.ledger import GaussianMechanism
from pymc_dp.likelihood import PerRowLikelihood
from pymc_dp.noise import NoiseSource

__all__ = ["WarmStart", "warm_start", "warm_start_mechanisms"]

#: Share of the warm start's privacy loss spent on Fisher information releases.
FISHER_SHARE = 0.2
#: Share of the last gradient release, which fixes the estimate.
LAST_SHARE = 0.6


@dataclass(frozen=True)
class WarmStart:
    """The outcome of a private warm start (raveled, unconstrained coordinates).

    Attributes
    ----------
    mean : ndarray (D,)
        :math:`\\hat q`, the private estimate of the posterior mode.
    cov : ndarray (D, D)
        Laplace covariance :math:`H^{-1}` at :math:`\\hat q`.
    noise_cov : ndarray (D, D)
        Covariance of the privacy noise carried by :math:`\\hat q`.
    entries : tuple of GaussianMechanism
        What it released (for the ledger's ``shared`` entries).
    """

    mean: np.ndarray
    cov: np.ndarray
    noise_cov: np.ndarray
    entries: tuple[GaussianMechanism, ...] = field(default=())

    @property
    def posterior_cov(self) -> np.ndarray:
        """Noise-aware Laplace covariance: the posterior's plus the estimate's noise."""
        return self.cov + self.noise_cov

    @property
    def mu(self) -> float:
        return float(sum(m.mu for m in self.entries))

    def draw(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        """Draws from the noise-aware Laplace approximation (public post-processing)."""
        chol = np.linalg.cholesky(self.posterior_cov)
        z = rng.standard_normal((self.mean.size,) if size is None else (size, self.mean.size))
        return self.mean + z @ chol.T


def _budget(mu: float, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Privacy loss of each gradient and each Fisher release (they sum to ``mu``).

    The last gradient fixes the estimate, so it gets ``LAST_SHARE``; the earlier steps only need
    to bring the walk within a few posterior sds of the mode, where one Newton step is exact up to
    second order, and share the rest, doubling from step to step.
    """
    early = 2.0 ** np.arange(steps - 1)  # doubling: each step starts closer to the mode
    grad = np.r_[(1.0 - FISHER_SHARE - LAST_SHARE) * mu * early / max(early.sum(), 1.0), 0.0]
    grad[-1] = (LAST_SHARE if steps > 1 else 1.0 - FISHER_SHARE) * mu
    fisher = np.full(steps, FISHER_SHARE * mu / steps)
    return grad, fisher


def warm_start_mechanisms(mu: float, steps: int) -> tuple[GaussianMechanism, ...]:
    """The ledger entries of a warm start with privacy loss ``mu`` (public: no data)."""
    grad, fisher = _budget(mu, steps)
    out = []
    for t in range(steps):
        out.append(GaussianMechanism(f"warm start gradient {t + 1}", 1 / np.sqrt(2 * grad[t]), 1))
        out.append(GaussianMechanism(f"warm start Fisher {t + 1}", 1 / np.sqrt(2 * fisher[t]), 1))
    return tuple(out)


def _positive_definite(h: np.ndarray, floor: float) -> np.ndarray:
    h = 0.5 * (h + h.T)
    vals, vecs = np.linalg.eigh(h)
    vals = np.maximum(vals, floor)
    return (vecs * vals) @ vecs.T


def _shrink(h: np.ndarray, by: float) -> np.ndarray:
    """Eigenvalues moved ``by`` towards 0 and floored at 0 (a positive semidefinite matrix)."""
    vals, vecs = np.linalg.eigh(0.5 * (h + h.T))
    vals = np.maximum(vals - by, 0.0)
    return (vecs * vals) @ vecs.T


def warm_start(
    likelihood: PerRowLikelihood,
    *,
    grad_clip: float,
    mu: float,
    noise: NoiseSource,
    steps: int = 4,
    start: np.ndarray | None = None,
    tempering: float = 1.0,
) -> WarmStart:
    """Run the private warm start (see the module docstring).

    Parameters
    ----------
    likelihood : PerRowLikelihood
        Kernels of the model.
    grad_clip : float
        :math:`B`, the per-row gradient clip (public).
    mu : float
        Gaussian privacy loss of the whole warm start.
    noise : NoiseSource
        Secret noise.
    steps : int
        Newton steps (each releases a gradient and a Fisher matrix).
    start : ndarray, optional
        Public starting point (default: the model's initial point).
    tempering : float
        Likelihood power T.
    """
    b = check_positive(grad_clip, "grad_clip")
    check_positive(mu, "mu")
    steps = check_count(steps, "steps", minimum=1)
    dim = likelihood.dim
    q = likelihood.ravel(likelihood.model.initial_point()) if start is None else np.array(start)
    kernel = likelihood.fisher_kernel()
    rows, cols = np.triu_indices(dim)
    entries = warm_start_mechanisms(mu, steps)
    for t in range(steps):
        s_g, s_f = entries[2 * t].noise_multiplier, entries[2 * t + 1].noise_multiplier
        g_sum, outer, prior_grad = kernel(q, np.asarray(b))
        g_tilde = noise.gaussian(tempering * g_sum, 2 * tempering * b, s_g)
        sigma2 = noise.gaussian_std(2 * tempering * b, s_g, dim) ** 2
        f_sens = np.sqrt(2.0) * tempering * b**2
        tri = noise.gaussian(tempering * outer, f_sens, s_f)
        fisher = np.zeros((dim, dim))
        fisher[rows, cols] = tri
        fisher = fisher + np.triu(fisher, 1).T  # the released upper triangle, mirrored
        # the symmetric noise matrix has spectral norm ~ 2 tau sqrt(d): shrink by it, so that a
        # direction the data barely inform is not made to look informed by noise
        tau = noise.gaussian_std(f_sens, s_f, tri.size) / np.sqrt(1.0)
        fisher = _shrink(fisher, 2.0 * tau * np.sqrt(dim))
        prior_precision = _positive_definite(-likelihood.prior_hessian(q), 0.0)
        # noise-aware update: A = F (F + sigma^2 I)^{-1} F is the information of the release
        gain = np.linalg.solve(fisher + sigma2 * np.eye(dim), np.eye(dim))
        info = fisher @ gain @ fisher
        info = 0.5 * (info + info.T)
        precision = _positive_definite(info + prior_precision, 1e-12)
        if t < steps - 1:
            # travelling: a Newton step, with a ridge that keeps the noise's step in a direction
            # the data barely inform within about one prior sd (sigma / (lambda + ridge))
            p_min = max(float(np.linalg.eigvalsh(prior_precision).min()), 1e-12)
            ridge = np.sqrt(sigma2 * p_min)
            newton = _positive_definite(fisher + prior_precision, 1e-12) + ridge * np.eye(dim)
            step = np.linalg.solve(newton, g_tilde + prior_grad)
        else:
            # arriving: the posterior mean given this last release, which weighs each direction
            # by how much the release informs it
            step = np.linalg.solve(precision, fisher @ gain @ g_tilde + prior_grad)
        if not np.all(np.isfinite(step)):
            break
        q = q + step
    plain = _positive_definite(fisher + prior_precision, 1e-12)
    cov = np.linalg.inv(plain)
    noise_aware = np.linalg.inv(precision)
    noise_cov = _positive_definite(noise_aware - cov, 0.0)
    return WarmStart(mean=q, cov=cov, noise_cov=0.5 * (noise_cov + noise_cov.T), entries=entries)
