"""Symmetric random-walk proposals shared by the Metropolis-type DP steps.

All proposals are public functions of the current point and the step's generator; none looks at
the data. ``"random_walk"`` moves every coordinate, ``"ocu"`` (one-component updates) moves one
coordinate chosen uniformly, which shortens the step and hence the sensitivity of the log-likelihood
ratio, and ``"gwmh"`` (guided walk, Yildirim & Ermis 2019, section 4.2; Gustafson 1998) moves one
coordinate in its current direction and flips that direction after a rejection.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

__all__ = [
    "PROPOSALS",
    "IndependentProposal",
    "PreconditionedProposal",
    "Proposal",
    "RandomWalkProposal",
]

Proposal = Literal["random_walk", "ocu", "gwmh", "independent"]
PROPOSALS: tuple[str, ...] = ("random_walk", "ocu", "gwmh")


class RandomWalkProposal:
    """Gaussian random-walk proposal with per-coordinate scales.

    Parameters
    ----------
    scale : float or array
        Proposal standard deviation per raveled coordinate (finite, > 0).
    dim : int
        Number of raveled coordinates.
    kind : {"random_walk", "ocu", "gwmh"}
        See the module docstring.
    allowed : tuple of str
        Kinds the calling step supports (for the error message).
    """

    def __init__(
        self,
        scale: float | np.ndarray,
        dim: int,
        kind: str = "random_walk",
        allowed: tuple[str, ...] = PROPOSALS,
        active: np.ndarray | None = None,
    ) -> None:
        if kind not in allowed:
            raise ValueError(f"`proposal` must be one of {allowed}, got {kind!r}")
        arr = np.asarray(scale, dtype=float)
        try:
            arr = np.broadcast_to(arr, (dim,)).copy()
        except ValueError:
            raise ValueError(
                f"`proposal_scale` must be a scalar or have {dim} entries (one per raveled "
                f"coordinate), got shape {np.shape(scale)}"
            ) from None
        if not np.all(np.isfinite(arr) & (arr > 0)):
            raise ValueError(f"`proposal_scale` must be finite and > 0, got {scale}")
        self.scale = arr
        self.kind = kind
        self.direction = np.ones(dim)
        # coordinates this proposal moves (the others, prior-only, move in their own block)
        self.active = np.ones(dim, bool) if active is None else np.asarray(active, bool)
        self._active_index = np.flatnonzero(self.active)

    def reset(self, rng: np.random.Generator) -> None:
        """Per-chain state: random initial directions of the guided walk."""
        self.direction = rng.choice([-1.0, 1.0], size=self.scale.size)

    def __call__(self, rng: np.random.Generator, q: np.ndarray) -> tuple[np.ndarray, int]:
        """Return ``(q_new, j)``; ``j`` is the moved coordinate, -1 when all move."""
        if self.kind == "random_walk":
            return q + self.active * self.scale * rng.standard_normal(q.size), -1
        j = int(self._active_index[rng.integers(self._active_index.size)])
        step = self.scale[j] * rng.standard_normal()
        if self.kind == "gwmh":
            step = self.direction[j] * abs(step)
        q_new = q.copy()
        q_new[j] += step
        return q_new, j

    def update(self, j: int, accepted: bool) -> None:
        """Guided walk: keep the direction after an acceptance, flip it after a rejection."""
        if self.kind == "gwmh" and j >= 0 and not accepted:
            self.direction[j] = -self.direction[j]


class PreconditionedProposal:
    """Proposals in whitened coordinates ``z = L^{-1} (q - m)``, mapped back by ``L``.

    With ``L`` the Cholesky factor of a (private, warm-start) posterior covariance, one-coordinate
    moves of ``z`` follow the posterior's principal shape, and a per-coordinate ``scale`` (set
    from the noise plan and adapted during tuning) gives every coordinate the same privacy noise.

    Parameters
    ----------
    chol : ndarray (D, D)
        Lower Cholesky factor ``L`` (public: a function of privatised releases).
    kind : {"random_walk", "ocu", "gwmh"}
        As for :class:`RandomWalkProposal`, on the coordinates of ``z``.
    """

    def __init__(
        self, chol: np.ndarray, kind: str = "gwmh", active: np.ndarray | None = None
    ) -> None:
        self.chol = np.asarray(chol, dtype=float)
        dim = self.chol.shape[0]
        self._base = RandomWalkProposal(np.ones(dim), dim, kind, active=active)
        self.kind = kind

    @property
    def scale(self) -> np.ndarray:
        return self._base.scale

    @scale.setter
    def scale(self, value: np.ndarray) -> None:
        self._base.scale = np.asarray(value, dtype=float)

    def reset(self, rng: np.random.Generator) -> None:
        self._base.reset(rng)

    def __call__(self, rng: np.random.Generator, q: np.ndarray) -> tuple[np.ndarray, int]:
        step, j = self._base(rng, np.zeros(q.size))
        if j >= 0:
            return q + self.chol[:, j] * step[j], j
        return q + self.chol @ step, j

    def update(self, j: int, accepted: bool) -> None:
        self._base.update(j, accepted)


class IndependentProposal:
    """Independence proposals ``q' ~ N(m, L L^T)`` on the likelihood's coordinates (the others
    keep their value: prior-only variables move in their own block).

    ``m`` and ``L L^T`` are public (the private fit's mean and its noise-aware covariance,
    later pooled with the warm-up draws'). Not symmetric: :meth:`log_density` gives the
    Metropolis-Hastings correction ``log q(theta) - log q(theta')``. Every proposal is an
    independent draw, so an accepted move jumps about a posterior width: with the Taylor anchor
    (:mod:`pymc_dp.anchor`) the penalty test's noise stays small for such moves.
    """

    kind = "independent"

    def __init__(self, mean: np.ndarray, cov: np.ndarray, active: np.ndarray) -> None:
        self.active = np.asarray(active, bool)
        self.mean = np.asarray(mean, dtype=float)
        self.set_cov(cov)

    def set_cov(self, cov: np.ndarray) -> None:
        """Propose with covariance ``cov`` (public) on the likelihood's coordinates."""
        a = self.active
        self.chol = np.linalg.cholesky(np.asarray(cov, dtype=float)[np.ix_(a, a)])
        self._solve = np.linalg.inv(self.chol)

    def reset(self, rng: np.random.Generator) -> None:
        """No per-chain state."""

    def log_density(self, q: np.ndarray) -> float:
        """``log q(q)`` up to a constant."""
        z = self._solve @ (q[self.active] - self.mean[self.active])
        return -0.5 * float(z @ z)

    def __call__(self, rng: np.random.Generator, q: np.ndarray) -> tuple[np.ndarray, int]:
        q_new = q.copy()
        z = rng.standard_normal(int(self.active.sum()))
        q_new[self.active] = self.mean[self.active] + self.chol @ z
        return q_new, -1

    def update(self, j: int, accepted: bool) -> None:
        """No adaptive state."""
