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

__all__ = ["PROPOSALS", "Proposal", "RandomWalkProposal"]

Proposal = Literal["random_walk", "ocu", "gwmh"]
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

    def reset(self, rng: np.random.Generator) -> None:
        """Per-chain state: random initial directions of the guided walk."""
        self.direction = rng.choice([-1.0, 1.0], size=self.scale.size)

    def __call__(self, rng: np.random.Generator, q: np.ndarray) -> tuple[np.ndarray, int]:
        """Return ``(q_new, j)``; ``j`` is the moved coordinate, -1 when all move."""
        if self.kind == "random_walk":
            return q + self.scale * rng.standard_normal(q.size), -1
        j = int(rng.integers(q.size))
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
