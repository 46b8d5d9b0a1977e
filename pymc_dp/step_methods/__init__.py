"""DP step methods for ``pm.sample``: one sampler family per module.

* :mod:`~pymc_dp.step_methods.base`: the anatomy every step shares (plan, noise, stats);
* :mod:`~pymc_dp.step_methods.penalty`: :class:`DPPenalty` (penalty-test Metropolis);
* :mod:`~pymc_dp.step_methods.hmc`: :class:`DPHMC` (noisy gradients, penalty test);
* :mod:`~pymc_dp.step_methods.minibatch_penalty`: :class:`DPMinibatchPenalty`;
* :mod:`~pymc_dp.step_methods.barker`: :class:`DPBarker` (and its correction distribution in
  :mod:`~pymc_dp.step_methods.barker_correction`);
* :mod:`~pymc_dp.step_methods.laplace`: :class:`DPLaplace` (draws from a private, noise-aware
  Laplace fit: all of the budget in a warm start);
* :mod:`~pymc_dp.step_methods.group_gibbs`: :class:`DPGroupGibbs` (random-effect GLMs: Gibbs by
  group, each group's move tested on its own rows);
* :mod:`~pymc_dp.step_methods.suffstats`: :class:`DPSuffStats` (Normal linear regression: its
  sufficient statistics released in two stages, NUTS on the noise-aware posterior);
* :mod:`~pymc_dp.step_methods.proposals` and :mod:`~pymc_dp.batches`: proposals
  and secret batches shared by the Metropolis-type steps.
"""

from pymc_dp.runplan import PrivacyBudgetError
from pymc_dp.step_methods.barker import DPBarker
from pymc_dp.step_methods.base import DPStep, Stat
from pymc_dp.step_methods.group_gibbs import DPGroupGibbs
from pymc_dp.step_methods.hmc import DPHMC
from pymc_dp.step_methods.laplace import DPLaplace
from pymc_dp.step_methods.minibatch_penalty import DPMinibatchPenalty
from pymc_dp.step_methods.penalty import DPPenalty
from pymc_dp.step_methods.suffstats import DPSuffStats

__all__ = [
    "DPHMC",
    "DPBarker",
    "DPGroupGibbs",
    "DPLaplace",
    "DPMinibatchPenalty",
    "DPPenalty",
    "DPStep",
    "DPSuffStats",
    "PrivacyBudgetError",
    "Stat",
]
