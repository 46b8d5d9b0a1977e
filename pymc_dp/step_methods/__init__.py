"""DP step methods for ``pm.sample``."""

from pymc_dp.step_methods.barker import DPBarker
from pymc_dp.step_methods.base import DPStep, PrivacyBudgetError
from pymc_dp.step_methods.hmc import DPHMC
from pymc_dp.step_methods.minibatch import MinibatchDPStep
from pymc_dp.step_methods.minibatch_penalty import DPMinibatchPenalty
from pymc_dp.step_methods.penalty import DPPenalty

__all__ = [
    "DPHMC",
    "DPBarker",
    "DPMinibatchPenalty",
    "DPPenalty",
    "DPStep",
    "MinibatchDPStep",
    "PrivacyBudgetError",
]
