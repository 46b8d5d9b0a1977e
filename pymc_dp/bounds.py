"""Clip bounds from public facts, never from the data.

A DP step clips each person's contribution to a bound that must be chosen without looking at the
private rows. For a generalised linear model the bound follows from two public facts: how fast the
per-row log-likelihood can change with the linear predictor ``eta = x . beta`` (its Lipschitz
constant ``L``), and how large each covariate can be (a codebook range, a clipping the data owner
applied). Then for every step ``beta -> beta'``

    |l_i(beta') - l_i(beta)| <= L |x_i . (beta' - beta)| <= L sum_j c_j |beta'_j - beta_j|,

so ``llr_clip = L c`` (one bound per coefficient: one-coordinate proposals exploit it), and every
per-row gradient ``L x_i`` has L2 norm at most ``grad_clip = L |c|_2``. Likewise a public bound
``w_max`` on the curvature ``w_i = -d^2 l_i / d eta^2`` bounds one row's observed information
``w_i x_i x_i^T`` (the negative Hessian of ``l_i`` in beta) in Frobenius norm by ``hess_clip =
w_max |c|_2^2``, since ``|x x^T|_F = |x|_2^2``: the sensitivity basis of a curvature release.
Nothing is ever clipped: these bounds add noise, never bias.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from pymc_dp.checks import check_positive

__all__ = ["GLMClip", "glm_clip"]


@dataclass(frozen=True)
class GLMClip:
    """Clip bounds of a GLM, all from public bounds.

    Attributes
    ----------
    llr_clip : numpy.ndarray
        ``L c_j``: bound on one row's log-likelihood change per unit step of coefficient ``j``.
    grad_clip : float
        ``L |c|_2``: bound on the L2 norm of one row's gradient in beta.
    lipschitz : float
        ``L``: bound on ``|d l_i / d eta|``.
    hess_clip : float
        ``w_max |c|_2^2``: bound on the Frobenius norm of one row's negative log-likelihood
        Hessian in beta, ``w_i x_i x_i^T`` with ``|w_i x_i x_i^T|_F = w_i |x_i|_2^2``, where
        ``w_max >= w_i = -d^2 l_i / d eta^2``: logistic 1/4 (``p (1 - p) <= 1/4``), Poisson
        ``exp(eta_bound)``, normal ``1 / sigma^2``. The sensitivity basis of a curvature release
        (a noisy Fisher information): replacing one row moves the sum by at most ``2 hess_clip``
        (Frobenius) when the released matrix is the sum of those per-row matrices.
    curvature : float
        ``w_max``, the bound on ``-d^2 l_i / d eta^2`` itself.
    covariate_bounds : numpy.ndarray
        ``c``, the public covariate bounds given. With ``curvature`` they bound a row's Taylor
        remainder along its own linear predictor (rank one: ``w_max |x'D| (|x'u| + |x'u'|) / 2``
        with ``|x'v| <= sum_j c_j |v_j|``), which :class:`~pymc_dp.DPGroupGibbs` tests with.
    """

    llr_clip: np.ndarray
    grad_clip: float
    lipschitz: float
    hess_clip: float
    curvature: float = math.nan
    covariate_bounds: np.ndarray | None = None


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
        ``logistic``: ``L = 1`` (``|y - sigmoid(eta)| <= 1``), curvature ``w_max = 1/4``.
        ``poisson``: ``L = max(y_bound, exp(eta_bound))`` (``|y - exp(eta)|``; needs public
        bounds on the counts and on the linear predictor), ``w_max = exp(eta_bound)``. ``normal``
        with known ``sigma``: ``L = (y_bound + eta_bound) / sigma^2``, ``w_max = 1 / sigma^2``.
    y_bound, eta_bound, sigma : float
        Public bounds the non-logistic families need.

    Returns
    -------
    GLMClip
        ``llr_clip = L c``, ``grad_clip = L |c|_2``, ``lipschitz = L`` and ``hess_clip = w_max
        |c|_2^2``.
    """
    c = np.atleast_1d(np.asarray(covariate_bounds, dtype=float))
    if not np.all(np.isfinite(c) & (c > 0)):
        raise ValueError(f"`covariate_bounds` must be finite and > 0, got {covariate_bounds}")
    # lip bounds |d l / d eta|, curv bounds -d^2 l / d eta^2 (>= 0: every family is log-concave).
    if family == "logistic":
        lip, curv = 1.0, 0.25
    elif family == "poisson":
        y = check_positive(y_bound, "y_bound")
        curv = math.exp(check_positive(eta_bound, "eta_bound"))
        lip = max(y, curv)
    elif family == "normal":
        y, eta = check_positive(y_bound, "y_bound"), check_positive(eta_bound, "eta_bound")
        s2 = check_positive(sigma, "sigma") ** 2
        lip, curv = (y + eta) / s2, 1.0 / s2
    else:
        raise ValueError(f"`family` must be 'logistic', 'poisson' or 'normal', got {family!r}")
    return GLMClip(
        llr_clip=lip * c,
        grad_clip=lip * float(np.linalg.norm(c)),
        lipschitz=lip,
        hess_clip=curv * float(c @ c),  # not norm**2: sqrt(3)**2 != 3 in floating point
        curvature=curv,
        covariate_bounds=c,
    )
