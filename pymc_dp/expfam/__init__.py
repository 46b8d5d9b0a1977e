"""Noisy sufficient statistics: private release and calibrated Gibbs inference for exponential
families (Bernstein & Sheldon 2018, "Differentially Private Bayesian Inference for Exponential
Families", NeurIPS).

Data owner::

    released = pdp.expfam.release(x, "exponential", epsilon=0.1, bounds=(0, 1))

Modeler (never sees ``x``)::

    with pm.Model() as model:
        lam = pm.Gamma("lam", 8, 2)
        pm.Exponential("x", lam)                       # unobserved: the release is the input
    idata = pdp.expfam.sample(model, released=released, random_seed=1)
    pdp.privacy_report(idata)                           # one release: epsilon = 0.1, delta = 0

* :mod:`~pymc_dp.expfam.families`: t(x), sensitivity, moments (Lemma 1 by PyTensor autodiff for
  truncated families), conjugate updates and valid ranges.
* :mod:`~pymc_dp.expfam.release`: the Laplace release (pure epsilon-DP) and its record.
* :mod:`~pymc_dp.expfam.gibbs`: the vectorised Gibbs samplers (Algorithms 1-3), the naive and the
  exact (non-private) conjugate baselines.
* :mod:`~pymc_dp.expfam.sampling`: ``sample`` for PyMC models, returning a DataTree.
* :mod:`~pymc_dp.expfam.calibration`: the calibration experiment (posterior quantiles, KS).
"""

from pymc_dp.expfam.calibration import (
    CalibrationResult,
    calibration_study,
    ks_critical_value,
    ks_uniform,
)
from pymc_dp.expfam.families import (
    Binomial,
    Exponential,
    Family,
    Multinomial,
    Normal,
    Poisson,
    TruncatedFamily,
    family_from_dict,
    get_family,
)
from pymc_dp.expfam.gibbs import GibbsTrace, exact_posterior, gibbs, naive_posterior
from pymc_dp.expfam.release import NoisyStatistic, release
from pymc_dp.expfam.sampling import ConjugateModel, find_conjugate_pair, sample

__all__ = [
    "Binomial",
    "CalibrationResult",
    "ConjugateModel",
    "Exponential",
    "Family",
    "GibbsTrace",
    "Multinomial",
    "NoisyStatistic",
    "Normal",
    "Poisson",
    "TruncatedFamily",
    "calibration_study",
    "exact_posterior",
    "family_from_dict",
    "find_conjugate_pair",
    "get_family",
    "gibbs",
    "ks_critical_value",
    "ks_uniform",
    "naive_posterior",
    "release",
    "sample",
]
