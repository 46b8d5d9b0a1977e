"""pymc-dp: differentially private Bayesian inference for PyMC models."""

from pymc_dp import abc, accounting, expfam
from pymc_dp.accounting.ledger import (
    BarkerMechanism,
    GaussianMechanism,
    PrivacyLedger,
    PureDPMechanism,
    SubsampledGaussianMechanism,
)
from pymc_dp.likelihood import PerRowLikelihood
from pymc_dp.sampling import PrivacyReport, privacy_report, sample, sanitize
from pymc_dp.step_methods import (
    DPHMC,
    DPBarker,
    DPMinibatchPenalty,
    DPPenalty,
    DPStep,
    PrivacyBudgetError,
)

__version__ = "0.1.0"

__all__ = [
    "BarkerMechanism",
    "DPBarker",
    "DPHMC",
    "DPMinibatchPenalty",
    "DPPenalty",
    "DPStep",
    "GaussianMechanism",
    "PerRowLikelihood",
    "PrivacyBudgetError",
    "PrivacyLedger",
    "PrivacyReport",
    "PureDPMechanism",
    "SubsampledGaussianMechanism",
    "abc",
    "accounting",
    "expfam",
    "privacy_report",
    "sample",
    "sanitize",
]
