"""Synthetic benchmark problems (fixed seeds, no private data)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pymc as pm

from pymc_dp.examples import logistic_regression_model

__all__ = ["Problem", "logistic_problem"]

#: Covariates are clipped to this public range, so one row's norm is at most sqrt(1 + (d-1) 3^2).
COVARIATE_BOUND = 3.0


@dataclass(frozen=True)
class Problem:
    """A model with a point to evaluate it at and the public clip bound of its rows."""

    model: pm.Model
    point: dict[str, np.ndarray]
    row_norm_bound: float
    n: int
    d: int


def logistic_problem(n: int, d: int = 10, seed: int = 0) -> Problem:
    """Logistic regression with an intercept and ``d - 1`` standard-normal covariates."""
    rng = np.random.default_rng(seed)
    X = np.column_stack(
        [np.ones(n), np.clip(rng.standard_normal((n, d - 1)), -COVARIATE_BOUND, COVARIATE_BOUND)]
    )
    beta = rng.normal(0.0, 0.5, d)
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-X @ beta)))
    model = logistic_regression_model(X, y)
    point = model.initial_point()
    point["beta"] = beta  # a typical point: near the posterior, where samplers spend their time
    bound = float(np.sqrt(1.0 + (d - 1) * COVARIATE_BOUND**2))
    return Problem(model=model, point=point, row_norm_bound=bound, n=n, d=d)
