"""pymc-dp: differentially private Bayesian inference for PyMC models."""

from pymc_dp import abcdp, accounting, audit, distributed, expfam
from pymc_dp.accounting.ledger import (
    BarkerMechanism,
    GaussianMechanism,
    PrivacyLedger,
    PureDPMechanism,
    SubsampledGaussianMechanism,
)
from pymc_dp.bounds import GLMClip, glm_clip
from pymc_dp.encoding import Encoded, encode_covariates
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
    DPGroupGibbs,
    DPLaplace,
    DPMinibatchPenalty,
    DPPenalty,
    DPStep,
    DPSuffStats,
)

__version__ = "0.2.0"

__all__ = [
    "BarkerMechanism",
    "DPBarker",
    "DPGroupGibbs",
    "DPHMC",
    "DPLaplace",
    "DPMinibatchPenalty",
    "DPPenalty",
    "DPStep",
    "DPSuffStats",
    "Encoded",
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
    "abcdp",
    "accounting",
    "analyse",
    "audit",
    "distributed",
    "encode_covariates",
    "expfam",
    "glm_clip",
    "plan",
    "posterior_predictive",
    "privacy_report",
    "sample",
    "sanitize",
]


def __getattr__(name: str):
    if name == "abc":  # deprecated alias of pymc_dp.abcdp, removed in 0.3
        import warnings

        warnings.warn(
            "pymc_dp.abc is renamed pymc_dp.abcdp; the alias will be removed in pymc-dp 0.3.",
            DeprecationWarning,
            stacklevel=2,
        )
        return abcdp
    raise AttributeError(f"module 'pymc_dp' has no attribute {name!r}")
