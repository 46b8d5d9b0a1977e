"""How well :class:`~pymc_dp.step_methods.group_gibbs.DPGroupGibbs` will mix, predicted by running
its own sweep in the world its released surrogate describes (public: no data, a public seed).
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

from pymc_dp.checks import check_count
from pymc_dp.mixing import run_diagnostics
from pymc_dp.noise import NoiseSource
from pymc_dp.step_methods.chain import ChainState
from pymc_dp.surrogate import gaussian_surrogate

__all__ = ["predict_mixing"]

#: Public seed of :meth:`DPGroupGibbs.predicted_mixing` (a simulation, never the chain's noise).
_MIXING_SEED = 20261129


class _SurrogateRemainder:
    """The remainder kernel of the world :meth:`DPGroupGibbs.predicted_mixing` simulates: the
    likelihood is its second-order expansion at the anchor ``A`` (the released gradient ``G``,
    a precision ``P`` from the warm start's released curvature), whose remainder beyond
    ``G' Delta`` is the change of ``-(psi - A)' P (psi - A) / 2``. No data, no clip (the exact
    clipped fraction is 0)."""

    def __init__(self, anchor: np.ndarray, precision: np.ndarray) -> None:
        self._anchor, self._precision = anchor, precision

    def _quadratic(self, psi: np.ndarray) -> float:
        d = psi - self._anchor
        return -0.5 * float(d @ self._precision @ d)

    def __call__(self, q_new, q, bound, rows=None) -> tuple[float, float]:
        return self._quadratic(q_new) - self._quadratic(q), 0.0

    def accept(self) -> None:
        pass

    def reset(self) -> None:
        pass


def predict_mixing(step, chains: int, tune: int, draws: int, replicates: int) -> dict:
    """:meth:`DPGroupGibbs.predicted_mixing <pymc_dp.step_methods.group_gibbs.DPGroupGibbs
    .predicted_mixing>`: ``step``'s own sweep on a copy of it, whose remainder kernel is
    :class:`_SurrogateRemainder` and whose group column is never read."""
    chains = check_count(chains, "chains", minimum=1)
    tune = check_count(tune, "tune")
    draws = check_count(draws, "draws", minimum=1)
    replicates = check_count(replicates, "replicates", minimum=1)
    sim = copy.copy(step)
    sim._plan = step.plan(tune=tune, draws=draws, chains=chains)  # public calibration
    # the world's likelihood has the released curvature (the fit's metric without its
    # noise's inflation, as the anchored prediction's); the proposals keep the step's own
    warm, eff = step.warm, step._effects
    _, grad = eff.prior_logp_and_grad(warm.mean)
    _, precision, _, _ = gaussian_surrogate(
        warm.mean, warm.cov, eff.prior_hessian(warm.mean), grad, eff.likelihood_mask
    )
    # the private column is never read
    rows = np.zeros(0, np.int64)
    remainder = _SurrogateRemainder(step.anchor.point, precision)
    sim.sweep = dataclasses.replace(step.sweep, ratio=remainder, group_of_row=rows)
    ess, rhat, accept, noise, coefficients = [], [], [], [], []
    for r in range(replicates):
        runs = np.empty((chains, draws, step.likelihood.dim))
        for c in range(chains):
            sim.rng = np.random.default_rng([_MIXING_SEED, r, c])
            sim.chain = ChainState(NoiseSource.for_chain(_MIXING_SEED + r, c))
            sim._reset_chain()
            q = sim.chain.start
            for i in range(tune + draws):
                q, stats = sim._iterate(q)
                sim.chain.iteration = i + 1
                if i >= tune:
                    runs[c, i - tune] = q
                    accept.append(stats["accept_rate"])
                    noise.append(stats["noise_std"])
                    if step.sweep.structure.beta.size:
                        coefficients.append(stats["accepted"])
        e, h = run_diagnostics(runs)
        ess.append(e)
        rhat.append(h)
    return {
        "acceptance": float(np.mean(accept)),
        "coefficient_acceptance": float(np.mean(coefficients)) if coefficients else np.nan,
        "noise": float(np.median(noise)),
        "ess": float(np.median(ess)),
        "rhat": float(np.median(rhat)),
    }
