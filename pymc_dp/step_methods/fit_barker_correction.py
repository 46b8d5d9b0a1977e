"""Fitting the Barker test's correction distribution (offline; a run only loads the result).

:func:`fit_correction` solves the minimax linear program described in
:mod:`pymc_dp.step_methods.barker_correction`; :func:`main` is the command line that regenerates
the shipped ``pymc_dp/data/barker_correction_C2.json`` (``make correction``)::

    python -m pymc_dp.step_methods.fit_barker_correction [--C 2.0] [--out PATH]
"""

from __future__ import annotations

import argparse
import inspect
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import linprog
from scipy.special import expit

from pymc_dp.checks import check_count, check_nonnegative, check_positive
from pymc_dp.step_methods.barker_correction import (
    DATA_FILE,
    ERROR_GRID,
    LOGISTIC_VARIANCE,
    SHIPPED_C,
    CorrectionDistribution,
    _check_C,
    _data_path,
    _pair_cdf,
)

__all__ = ["fit_correction", "main"]


def fit_correction(
    C: float = 2.0,
    n_components: int = 201,
    max_mean: float = 10.0,
    component_variance: float = 0.0,
    x_max: float = 20.0,
    n_grid: int = 1001,
    match_variance: bool = True,
) -> CorrectionDistribution:
    """Minimax fit of the correction distribution by linear programming.

    Candidate means are ``linspace(0, max_mean, n_components)``, all with variance
    ``component_variance``. The linear program (HiGHS, deterministic) minimises ``t`` subject to
    ``|A w - expit(x)| <= t`` on ``x = linspace(0, x_max, n_grid)``, ``w >= 0``, ``sum w = 1`` and,
    if ``match_variance``, ``Var(V_corr) = pi^2/3 - C``. By symmetry the error at ``-x`` is minus
    the error at ``x``, so only ``x >= 0`` is needed. Components with zero weight are dropped;
    the optimum is sparse (5 of the 201 default candidates for ``C = 2``).

    Parameters
    ----------
    C : float, default 2.0
        Variance of the Gaussian part, ``0 < C < pi^2/3``.
    n_components : int, default 201
        Number of candidate means (spacing 0.05 by default; finer grids change the error by <1e-7
        for ``C = 2``).
    max_mean : float, default 10.0
        Largest candidate mean. The ``C = 2`` optimum uses means up to about 7.9.
    component_variance : float, default 0.0
        Variance of every component of ``V_corr``. Zero (point masses) is optimal: a positive
        variance only smooths the fit further, and any mixture with positive variance is itself a
        limit of point-mass mixtures. Positive values give a continuous ``V_corr`` at a small cost
        (for ``C = 2``: 5.92e-4 at 0.001, 6.16e-4 at 0.01).
    x_max : float, default 20.0
        Right end of the fitting grid; beyond it both CDFs are within 2.1e-9 of 1.
    n_grid : int, default 1001
        Number of fitting grid points.
    match_variance : bool, default True
        Impose ``Var(V_corr) = pi^2/3 - C`` exactly (up to the solver's 1e-7 feasibility
        tolerance). For ``C = 2`` this costs 2e-6 in sup error; without it the minimax fit has
        ``Var(V_corr) = 1.338``.

    Returns
    -------
    CorrectionDistribution
        The fitted correction, with only the non-zero-weight components.

    Raises
    ------
    ValueError
        If an argument is out of range (the message names it), or the variance constraint is
        infeasible (``component_variance`` above ``pi^2/3 - C`` or ``max_mean`` too small).
    RuntimeError
        If the linear program fails.
    """
    C = _check_C(C)
    n_components = check_count(n_components, "n_components", minimum=2)
    max_mean = check_positive(max_mean, "max_mean")
    v = check_nonnegative(component_variance, "component_variance")
    x_max = check_positive(x_max, "x_max")
    n_grid = check_count(n_grid, "n_grid", minimum=2)
    target = LOGISTIC_VARIANCE - C
    if match_variance and not v <= target <= max_mean**2 + v:
        raise ValueError(
            f"Var(V_corr) = pi^2/3 - C = {target:.6f} is unreachable with "
            f"`component_variance`={v} and `max_mean`={max_mean}"
        )

    means = np.linspace(0.0, max_mean, n_components)
    x = np.linspace(0.0, x_max, n_grid)
    weights = _minimax_weights(means, x, C, v, target if match_variance else None)
    # Simplex solutions are exact zeros off the basis; the threshold only guards against -0/1e-300.
    keep = weights > 1e-15
    return CorrectionDistribution(
        C=C,
        means=means[keep],
        weights=weights[keep] / weights[keep].sum(),
        variances=np.full(int(keep.sum()), v),
    )


def _minimax_weights(
    means: NDArray[np.float64], x: NDArray[np.float64], C: float, v: float, variance: float | None
) -> NDArray[np.float64]:
    """Weights ``w`` of the candidate components (``means``, each of variance ``v``) minimising
    ``t`` subject to ``|A w - expit(x)| <= t`` on the grid ``x``, ``w >= 0``, ``sum w = 1`` and,
    unless ``variance`` is None, ``Var(V_corr) = variance``: the linear program of
    :func:`fit_correction` (HiGHS, deterministic)."""
    n_components, n_grid = means.size, x.size
    design = _pair_cdf(x[:, None], means, np.full(n_components, math.sqrt(C + v)))
    logistic = expit(x)
    # Variables (w_1..w_K, t); rows encode A w - t <= F and -A w - t <= -F.
    ones = np.ones((n_grid, 1))
    a_ub = np.block([[design, -ones], [-design, -ones]])
    b_ub = np.concatenate([logistic, -logistic])
    a_eq = [np.append(np.ones(n_components), 0.0)]
    b_eq = [1.0]
    if variance is not None:
        a_eq.append(np.append(means**2 + v, 0.0))
        b_eq.append(variance)
    cost = np.zeros(n_components + 1)
    cost[-1] = 1.0
    res = linprog(
        cost,
        A_ub=a_ub,
        b_ub=b_ub,
        A_eq=np.array(a_eq),
        b_eq=b_eq,
        bounds=(0.0, None),
        method="highs",
    )
    if res.status != 0:
        raise RuntimeError(f"linear program failed: {res.message}")
    return res.x[:-1]


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: fit the correction for ``--C`` and write it with its metadata as JSON.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments (default ``sys.argv[1:]``).
    """
    parser = argparse.ArgumentParser(
        prog="python -m pymc_dp.step_methods.fit_barker_correction",
        description="Fit the Barker-test correction distribution and save it as JSON.",
    )
    parser.add_argument("--C", type=float, default=SHIPPED_C, help="Gaussian variance (2.0)")
    parser.add_argument(
        "--out", type=Path, default=None, help=f"output file (default: pymc_dp/data/{DATA_FILE})"
    )
    args = parser.parse_args(argv)
    if args.out is None and args.C != SHIPPED_C:
        parser.error("--out is required when --C is not 2 (only C = 2 ships with the package)")
    out = _data_path() if args.out is None else args.out

    fit_options = {"C": args.C}
    start = time.perf_counter()
    try:
        dist = fit_correction(**fit_options)
    except ValueError as exc:  # bad --C: usage message instead of a traceback
        parser.error(str(exc))
    fit_seconds = time.perf_counter() - start
    error = dist.sup_cdf_error()
    text = dist.to_json(
        variance=dist.variance,
        target_variance=dist.target_variance,
        sup_cdf_error=error,
        error_grid={"start": ERROR_GRID[0], "stop": ERROR_GRID[1], "num": ERROR_GRID[2]},
        fit_options={**_fit_defaults(), **fit_options},
        generated_by=(
            "python -m pymc_dp.step_methods.fit_barker_correction (minimax linear program, "
            "scipy.optimize.linprog/HiGHS, deterministic); sup_cdf_error is "
            "max |convolved_cdf - expit| over error_grid"
        ),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({dist.n_components} components, fit in {fit_seconds:.2f} s)")
    print(f"sup |CDF error|      = {error:.6e}")
    print(f"Var(V_corr)          = {dist.variance:.12f}")
    print(f"pi^2/3 - C (target)  = {dist.target_variance:.12f}")


def _fit_defaults() -> dict[str, Any]:
    """Default keyword arguments of :func:`fit_correction` (recorded in the data file)."""
    return {
        name: p.default
        for name, p in inspect.signature(fit_correction).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


if __name__ == "__main__":
    main()
