"""Privacy accounting for pymc-dp: pure functions, no PyMC import.

* :mod:`~pymc_dp.accounting.barker`: RDP of DP Barker (poster eq. 11 / thesis Theorem 7) with
  subsampling amplification (WBK19 Theorem 9), composition and conversion to (epsilon, delta).
* :mod:`~pymc_dp.accounting.gaussian`: exact composition of Gaussian mechanisms (closed-form PLD
  N(mu, 2 mu)) and its inverses.
* :mod:`~pymc_dp.accounting.ledger`: the privacy ledger recorded in every result.
* :mod:`~pymc_dp.accounting.rdp`: RDP curves, RDP -> (epsilon, delta), subsampled Gaussian
  mechanisms through dp-accounting (with its sensitivity conventions spelled out), and generic
  RDP amplification by fixed-size sampling without replacement (WBK19 Theorem 9).
"""

from pymc_dp.checks import (
    check_count,
    check_delta,
    check_epsilon,
    check_nonnegative,
    check_positive,
    check_probability,
)

from .barker import (
    barker_epsilon,
    barker_epsilon_curve,
    barker_max_iterations,
    barker_orders,
    barker_rdp,
    barker_step_rdp,
)
from .gaussian import (
    gaussian_delta,
    gaussian_epsilon,
    gaussian_log_delta,
    gaussian_mu,
    gaussian_mu_for_budget,
    max_iterations,
    max_releases,
    noise_multiplier_for_budget,
)
from .ledger import (
    BarkerMechanism,
    GaussianMechanism,
    PrivacyLedger,
    PureDPMechanism,
    SubsampledGaussianMechanism,
)
from .rdp import (
    DEFAULT_ORDERS,
    DP_ACCOUNTING_ORDERS,
    fixed_size_subsampled_gaussian_epsilon,
    fixed_size_subsampled_gaussian_event,
    fixed_size_subsampled_gaussian_rdp,
    gaussian_rdp,
    largest_count,
    poisson_subsampled_gaussian_epsilon,
    poisson_subsampled_gaussian_event,
    poisson_subsampled_gaussian_rdp,
    rdp_epsilon_curve,
    rdp_to_epsilon,
    rdp_to_epsilon_best,
    wor_subsampled_rdp,
)

__all__ = [
    "BarkerMechanism",
    "SubsampledGaussianMechanism",
    "DEFAULT_ORDERS",
    "DP_ACCOUNTING_ORDERS",
    "GaussianMechanism",
    "PrivacyLedger",
    "PureDPMechanism",
    "barker_epsilon",
    "barker_epsilon_curve",
    "barker_max_iterations",
    "barker_orders",
    "barker_rdp",
    "barker_step_rdp",
    "check_count",
    "check_delta",
    "check_epsilon",
    "check_nonnegative",
    "check_positive",
    "check_probability",
    "fixed_size_subsampled_gaussian_epsilon",
    "fixed_size_subsampled_gaussian_event",
    "fixed_size_subsampled_gaussian_rdp",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_log_delta",
    "gaussian_mu",
    "gaussian_mu_for_budget",
    "gaussian_rdp",
    "max_iterations",
    "max_releases",
    "noise_multiplier_for_budget",
    "poisson_subsampled_gaussian_epsilon",
    "poisson_subsampled_gaussian_event",
    "poisson_subsampled_gaussian_rdp",
    "largest_count",
    "rdp_epsilon_curve",
    "rdp_to_epsilon",
    "rdp_to_epsilon_best",
    "wor_subsampled_rdp",
]
