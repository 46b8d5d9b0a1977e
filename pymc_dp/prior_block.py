"""Free moves: exact Metropolis updates, without noise, of the variables that enter only priors.

In a hierarchical model the hyperparameters (a population mean, a scale ``tau``) enter the prior
of the group effects but not the likelihood: their conditional posterior is
``p(tau | theta) \\propto p(tau) prod_j p(theta_j | tau)``, a function of public quantities only.
A DP step that moved them together with the data-touching variables would pay privacy noise on a
log-likelihood ratio they do not change, and at small budgets they would barely move. Instead,
after every data-touching iteration, this block updates them by a Metropolis random walk on their
exact prior ratio: no data is read, no budget is spent, and the contract holds (the prior is
public). The walk's scale adapts during tuning (dual averaging towards acceptance 0.3) from its
own accept decisions.
"""

from __future__ import annotations

import numpy as np
from pymc.step_methods.step_sizes import DualAverageAdaptation

__all__ = ["PriorBlock"]

#: Acceptance the free random walk adapts to.
TARGET_ACCEPT = 0.3


class PriorBlock:
    """Exact Metropolis moves on the coordinates ``~mask`` (prior-only variables).

    Parameters
    ----------
    mask : ndarray of bool
        Raveled coordinates the likelihood reads; the block moves the others.
    prior : callable
        ``q -> log prior`` (public).
    """

    def __init__(self, mask: np.ndarray, prior) -> None:
        self.index = np.flatnonzero(~np.asarray(mask, dtype=bool))
        self._prior = prior

    @classmethod
    def of(cls, likelihood) -> PriorBlock | None:
        """The block of ``likelihood``'s prior-only coordinates, or None where there are none."""
        mask = likelihood.likelihood_mask
        if mask.all():
            return None
        return cls(mask, lambda q: float(likelihood.prior_fn(q)[0]))

    def reset(self) -> None:
        self._adapt = DualAverageAdaptation(0.5, TARGET_ACCEPT, 0.05, 0.75, 10)

    def move(
        self, q: np.ndarray, rng: np.random.Generator, tuning: bool, sweeps: int = 3
    ) -> np.ndarray:
        """``sweeps`` joint random-walk moves of the prior-only coordinates of ``q``."""
        current = self._prior(q)
        for _ in range(sweeps):
            q_new = q.copy()
            scale = float(self._adapt.current(tuning))
            q_new[self.index] += scale * rng.standard_normal(self.index.size)
            proposed = self._prior(q_new)
            log_alpha = proposed - current
            prob = float(np.exp(min(0.0, log_alpha))) if np.isfinite(log_alpha) else 0.0
            if rng.uniform() < prob:
                q, current = q_new, proposed
            self._adapt.update(prob, tuning)
        return q
