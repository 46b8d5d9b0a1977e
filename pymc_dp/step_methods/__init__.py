"""DP step methods for ``pm.sample``."""

from pymc_dp.step_methods.base import DPStep, PrivacyBudgetError
from pymc_dp.step_methods.hmc import DPHMC
from pymc_dp.step_methods.penalty import DPPenalty

__all__ = ["DPHMC", "DPPenalty", "DPStep", "PrivacyBudgetError"]
