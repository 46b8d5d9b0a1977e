"""pymc-dp: differentially private Bayesian inference for PyMC models."""

from pymc_dp import abc, accounting, audit, expfam
from pymc_dp.accounting.ledger import (
    BarkerMechanism,
    GaussianMechanism,
    PrivacyLedger,
    PureDPMechanism,
    SubsampledGaussianMechanism,
)
from pymc_dp.bounds import GLMClip, glm_clip
from pymc_dp.graph import ModelGraph, analyse
from pymc_dp.likelihood import PerRowLikelihood
from pymc_dp.noise import NoiseSource
from pymc_dp.planner import Plan, plan
from pymc_dp.predictive import posterior_predictive
from pymc_dp.runplan import PrivacyBudgetError, RunPlan
from pymc_dp.sampling import PrivacyReport, privacy_report, sample, sanitize
from pymc_dp.step_methods import (
    DPHMC,
    DPBarker,
    DPLaplace,
    DPMinibatchPenalty,
    DPPenalty,
    DPStep,
)

__version__ = "0.2.0.dev0"

__all__ = [
    "BarkerMechanism",
    "DPBarker",
    "DPHMC",
    "DPLaplace",
    "DPMinibatchPenalty",
    "DPPenalty",
    "DPStep",
    "GLMClip",
    "GaussianMechanism",
    "ModelGraph",
    "NoiseSource",
    "PerRowLikelihood",
    "Plan",
    "PrivacyBudgetError",
    "PrivacyLedger",
    "PrivacyReport",
    "PureDPMechanism",
    "RunPlan",
    "SubsampledGaussianMechanism",
    "abc",
    "accounting",
    "analyse",
    "audit",
    "expfam",
    "glm_clip",
    "plan",
    "posterior_predictive",
    "privacy_report",
    "sample",
    "sanitize",
]
