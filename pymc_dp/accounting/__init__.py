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

# The face of the accounting: every submodule's names, and the argument checks they share.
from pymc_dp import checks
from pymc_dp.checks import *  # noqa: F403

from . import barker, gaussian, ledger, rdp
from .barker import *  # noqa: F403
from .gaussian import *  # noqa: F403
from .ledger import *  # noqa: F403
from .rdp import *  # noqa: F403

__all__ = [*checks.__all__, *barker.__all__, *gaussian.__all__, *ledger.__all__, *rdp.__all__]
