"""Deprecated alias of :mod:`pymc_dp.spending` (moved in 0.2.0; removed in 0.3.0)."""

from pymc_dp._moved import alias

alias(__name__, "pymc_dp.spending")
