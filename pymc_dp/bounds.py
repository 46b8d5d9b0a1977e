"""Clip bounds from public facts, never from the data.

A DP step clips each person's contribution to a bound that must be chosen without looking at the
private rows. For a generalised linear model the bound follows from two public facts: how fast the
per-row log-likelihood can change with the linear predictor ``eta = x . beta`` (its Lipschitz
constant ``L``), and how large each covariate can be (a codebook range, a clipping the data owner
applied). Then for every step ``beta -> beta'``

    |l_i(beta') - l_i(beta)| <= L |x_i . (beta' - beta)| <= L sum_j c_j |beta'_j - beta_j|,

so ``llr_clip = L c`` (one bound per coefficient: one-coordinate proposals exploit it), and every
per-row gradient ``L x_i`` has L2 norm at most ``grad_clip = L |c|_2``. Nothing is ever clipped:
these bounds add noise, never bias.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from pymc_dp.accounting._validate import check_positive

__all__ = ["GLMClip", "glm_clip"]


@dataclass(frozen=True)
class GLMClip:
    """Clip bounds of a GLM: ``llr_clip`` per coefficient, ``grad_clip`` in L2."""

    llr_clip: np.ndarray
    grad_clip: float
    lipschitz: float


def glm_clip(
    covariate_bounds: ArrayLike,
    family: str = "logistic",
    *,
    y_bound: float | None = None,
    eta_bound: float | None = None,
    sigma: float | None = None,
) -> GLMClip:
    """Clip bounds of a GLM ``y ~ family(eta = X @ beta)`` from public covariate bounds.

    Parameters
    ----------
    covariate_bounds : array_like
        ``c_j >= |x_ij|`` for every row (1 for an intercept), public: e.g. covariates encoded
        into [-1, 1] from their codebook ranges.
    family : {"logistic", "poisson", "normal"}
        ``logistic``: ``L = 1`` (``|y - sigmoid(eta)| <= 1``). ``poisson``: ``L = max(y_bound,
        exp(eta_bound))`` (``|y - exp(eta)|``; needs public bounds on the counts and on the linear
        predictor). ``normal`` with known ``sigma``: ``L = (y_bound + eta_bound) / sigma^2``.
    y_bound, eta_bound, sigma : float
        Public bounds the non-logistic families need.
    """
    c = np.atleast_1d(np.asarray(covariate_bounds, dtype=float))
    if not np.all(np.isfinite(c) & (c > 0)):
        raise ValueError(f"`covariate_bounds` must be finite and > 0, got {covariate_bounds}")
    if family == "logistic":
        lip = 1.0
    elif family == "poisson":
        y = check_positive(y_bound, "y_bound")
        lip = max(y, math.exp(check_positive(eta_bound, "eta_bound")))
    elif family == "normal":
        y, eta = check_positive(y_bound, "y_bound"), check_positive(eta_bound, "eta_bound")
        lip = (y + eta) / check_positive(sigma, "sigma") ** 2
    else:
        raise ValueError(f"`family` must be 'logistic', 'poisson' or 'normal', got {family!r}")
    return GLMClip(llr_clip=lip * c, grad_clip=lip * float(np.linalg.norm(c)), lipschitz=lip)
