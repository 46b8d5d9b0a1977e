"""The state one chain of a DP step carries between iterations (besides PyMC's point and rng).

Declared here, made fresh by :meth:`DPStep.setup_chain` for every chain, and read by the step's
kernel (:meth:`DPStep._iterate`): the chain's secret noise, its iteration count (which the run
plan bounds), its public start, its covariance adaptation and the log prior at its current point.
The audit (:mod:`pymc_dp.audit`) lends a step a state of its own the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pymc_dp.noise import NoiseSource
from pymc_dp.tuning.adaptation import WindowedCovariance

__all__ = ["ChainState"]


@dataclass
class ChainState:
    """One chain's state. ``noise`` is secret; everything else is public (the prior reads no
    data, the start is a draw of a released fit, the adaptation reads released draws)."""

    noise: NoiseSource
    iteration: int = 0
    start: np.ndarray | None = None
    shape: WindowedCovariance | None = None
    prior_point: np.ndarray | None = None
    prior_value: float = 0.0

    def prior_at(self, q: np.ndarray, prior: Callable[[np.ndarray], float]) -> float:
        """Log prior at ``q``, cached at the chain's current point."""
        if self.prior_point is None or not np.array_equal(self.prior_point, q):
            self.prior_value = prior(q)
            self.prior_point = q.copy()
        return self.prior_value

    def moved_to(self, q: np.ndarray, prior_value: float) -> None:
        """The chain accepted ``q``, whose log prior is ``prior_value``."""
        self.prior_point, self.prior_value = q, prior_value

    def metropolis(
        self,
        rng: np.random.Generator,
        q: np.ndarray,
        q_new: np.ndarray,
        log_alpha: float,
        prior_new: float,
    ) -> tuple[np.ndarray, bool]:
        """Accept ``q_new`` with probability ``min(1, exp(log_alpha))`` (a non-finite ratio:
        outside the prior's support, or divergent, rejects); return ``(next point, accepted)``."""
        accepted = bool(np.isfinite(log_alpha) and np.log(rng.uniform()) < log_alpha)
        if accepted:
            self.moved_to(q_new, prior_new)
            return q_new, True
        return q, False
