"""Moments of a truncated exponential family by PyTensor autodiff (Bernstein & Sheldon 2018,
Lemma 1).

Truncating ``p(x | eta) = h(x) exp(eta t(x) - A(eta))`` to ``[a, b]`` keeps an exponential family
with log-partition ``A_hat(eta) = A(eta) + log(F(b; eta) - F(a; eta))``, so (Eq. 1)
``mu_hat = A_hat'(eta)`` and ``Sigma_hat = A_hat''(eta)`` (Eqs. 3-4). We build ``A_hat`` in
PyTensor and differentiate it twice. The graph is elementwise over a batch of ``eta``, so the
gradient of the *sum* gives every element's derivative and the Hessian is diagonal: two reverse
passes cost O(batch), not the O(batch^2) of a full Jacobian.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import pytensor
import pytensor.tensor as pt

if TYPE_CHECKING:
    from pymc_dp.expfam.families import TruncatedFamily

__all__ = ["lemma1_function"]


@lru_cache(maxsize=32)
def lemma1_function(
    family: TruncatedFamily,
) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Compiled ``eta -> (log q, mu_hat, Sigma_hat)`` for one truncated family (cached per family).

    Parameters
    ----------
    family : TruncatedFamily
        Supplies ``A(eta)`` and ``log(F(b; eta) - F(a; eta))`` as PyTensor graphs.

    Returns
    -------
    callable
        Takes a float64 vector of natural parameters; returns three vectors of the same length.
    """
    eta = pt.dvector("eta")
    log_mass = family.pt_log_mass(eta)
    a_hat = family.pt_log_partition(eta) + log_mass  # Lemma 1
    mean = pytensor.grad(a_hat.sum(), eta)  # Eq. 3
    var = pytensor.grad(mean.sum(), eta)  # Eq. 4 (diagonal Hessian of a batch of scalars)
    fn = pytensor.function([eta], [log_mass, mean, var], trust_input=True)

    def evaluate(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return tuple(fn(np.ascontiguousarray(x, dtype=np.float64)))  # type: ignore[return-value]

    return evaluate
