"""Example ``pm.Simulator`` models for ABCDP: the paper's toy mixture and a stochastic SIR epidemic.

Both simulators follow PyTensor's ``RandomVariable`` batching rule (inputs may carry leading batch
axes that broadcast against ``size``), so they run with ``vectorized=True``.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
from numpy.typing import NDArray

__all__ = [
    "TOY_THETA",
    "mixture_model",
    "mixture_simulator",
    "sir_model",
    "sir_simulator",
]

#: True weights of the toy of Park et al. (2021), Sec. 5.1.
TOY_THETA = np.array([0.25, 0.04, 0.33, 0.04, 0.34])


def mixture_simulator(rng: np.random.Generator, theta: NDArray, size: tuple) -> NDArray:
    """Draws from the mixture ``sum_i theta_i U[i - 1, i]``.

    ``theta`` has shape ``(..., K)`` with batch axes broadcasting against ``size``.
    """
    theta = np.asarray(theta, dtype=np.float64)
    cum = np.cumsum(theta, axis=-1)
    cum = cum / cum[..., -1:]  # weights sum to one up to rounding
    u = rng.uniform(size=size)
    # component index by inverse CDF; theta's batch axes align with size's trailing axes
    comp = (np.asarray(u)[..., None] > cum[..., :-1]).sum(-1)
    return comp + rng.uniform(size=size)


def mixture_model(n: int = 5000, theta: NDArray = TOY_THETA, seed: int = 0) -> pm.Model:
    """The toy of Park et al. (2021), Sec. 5.1: Dirichlet(1, ..., 1) prior over K = 5 weights,
    data from ``sum_i theta_i U[i - 1, i]`` with ``theta* = [.25, .04, .33, .04, .34]``."""
    theta = np.asarray(theta, dtype=np.float64)
    k = theta.size
    y = mixture_simulator(np.random.default_rng(seed), theta, (n,))
    with pm.Model(coords={"component": np.arange(1, k + 1)}) as model:
        w = pm.Dirichlet("theta", a=np.ones(k), dims="component")
        pm.Simulator("y", mixture_simulator, w, signature="(k)->()", observed=y)
    return model


def sir_simulator(
    rng: np.random.Generator,
    beta: NDArray,
    gamma: NDArray,
    size: tuple,
    horizon: int = 60,
    initial: int = 5,
) -> NDArray:
    """Per-person outcomes of a discrete-time stochastic SIR epidemic in a closed population.

    Every day each susceptible person is infected with probability ``1 - exp(-beta I / N)`` and
    each infectious person recovers with probability ``1 - exp(-gamma)``. The first ``initial``
    people are infected on day 0. Returns, per person, ``[day infected, days infectious]``
    divided by ``horizon``; people never infected get ``[1 + 1 / horizon, 0]``.

    ``size = (..., N)`` is the batch shape of the (N, 2) output (``pm.Simulator`` with signature
    ``"(),()->(2)"``); ``beta`` and ``gamma`` broadcast against it.
    """
    batch, n = tuple(size[:-1]), int(size[-1])
    beta = np.asarray(beta, dtype=np.float64)
    gamma = np.asarray(gamma, dtype=np.float64)
    p_rec = 1.0 - np.exp(-gamma)
    state = np.zeros((*batch, n), dtype=np.int8)  # 0 S, 1 I, 2 R
    state[..., :initial] = 1
    infected = np.full((*batch, n), horizon + 1, dtype=np.int64)
    infected[..., :initial] = 0
    duration = np.zeros((*batch, n), dtype=np.int64)
    for day in range(1, horizon + 1):
        n_inf = (state == 1).sum(-1, keepdims=True)
        p_inf = 1.0 - np.exp(-beta * n_inf / n)
        u = rng.uniform(size=(*batch, n))
        new_inf = (state == 0) & (u < p_inf)
        recover = (state == 1) & (u < p_rec)
        duration += state == 1
        state[new_inf] = 1
        state[recover] = 2
        infected[new_inf] = day
    return np.stack([infected / horizon, duration / horizon], axis=-1)


def sir_model(n: int = 1000, beta: float = 0.6, gamma: float = 0.2, seed: int = 0) -> pm.Model:
    """A stochastic SIR epidemic: one row per person ([day infected, days infectious] / 60).

    Priors ``beta ~ U(0.05, 1.5)``, ``gamma ~ U(0.05, 0.5)`` and the public deterministic
    ``R0 = beta / gamma``. The private data are simulated at (``beta``, ``gamma``).
    """
    y = sir_simulator(np.random.default_rng(seed), np.array(beta), np.array(gamma), (n,))
    with pm.Model() as model:
        b = pm.Uniform("beta", 0.2, 1.5)
        g = pm.Uniform("gamma", 0.05, 0.5)
        pm.Deterministic("R0", b / g)
        pm.Simulator("y", sir_simulator, b, g, signature="(),()->(2)", observed=y)
    return model
