"""Deprecated alias of :mod:`pymc_dp.abcdp` (renamed in 0.2, so that it does not read like the
standard library's ``abc``); removed in 0.3."""

import warnings

from pymc_dp.abcdp import *  # noqa: F403
from pymc_dp.abcdp import __all__  # noqa: F401

warnings.warn(
    "pymc_dp.abc is renamed pymc_dp.abcdp; the alias will be removed in pymc-dp 0.3.",
    DeprecationWarning,
    stacklevel=2,
)
