"""The run plan: chains x iterations, the calibrated noise, the ledger, and refusal.

A run of a DP step makes ``chains * (tune + draws)`` iterations, each releasing what the step's
:mod:`~pymc_dp.mechanisms` describe. This module is the only place that turns that into privacy:

* :func:`run_ledger` counts a run at a noise knob (the ledger the DataTree carries);
* :func:`calibrate` inverts it: the smallest noise with which the run meets ``(epsilon,
  delta)`` (closed form for Gaussian mechanisms, whose composition is exact; bisection against
  dp-accounting or RDP otherwise, rounding towards more noise);
* :func:`max_iterations` inverts it in the other direction;
* :func:`make_plan` builds a :class:`RunPlan`, or raises :class:`PrivacyBudgetError` before any
  data is touched.

``pdp.sample`` makes the plan explicitly (``step.plan(...)``); under plain ``pm.sample`` the step
makes it in ``setup_chain`` with its ``chains``. A chain or an iteration beyond the plan raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from scipy.optimize import brentq

from pymc_dp.accounting.gaussian import gaussian_epsilon, gaussian_mu_for_budget
from pymc_dp.accounting.ledger import PrivacyLedger
from pymc_dp.accounting.rdp import largest_count, rdp_epsilon_curve
from pymc_dp.mechanisms import Mechanism

__all__ = [
    "PrivacyBudgetError",
    "RunPlan",
    "calibrate",
    "make_plan",
    "max_iterations",
    "run_epsilon",
    "run_ledger",
]

# relative precision of bisected noise multipliers (always rounded towards more noise)
_CALIBRATION_RTOL = 1e-4
_PLD_GRID_POINTS = 40
#: The noise search converts RDP over the orders up to this one while the best order lies below
#: it (the value is then the exact one; dp-accounting's subsampled curve costs the square of the
#: order: 0.02 s against 0.2 s for all 156), over every order otherwise and for the result.
_SEARCH_ORDER = 16.0


class PrivacyBudgetError(ValueError):
    """A run would spend more privacy than its budget allows."""


Mechanisms = tuple[Mechanism, ...]


def run_ledger(
    mechanisms: Sequence[Mechanism],
    scale: float | None,
    iterations: int,
    chains: int,
    delta: float,
    shared: tuple = (),
    **meta: Any,
) -> PrivacyLedger:
    """The ledger of ``chains`` chains of ``iterations`` iterations at noise knob ``scale``, plus
    ``shared`` entries made once for the run (a private warm start)."""
    entries = tuple(e for m in mechanisms for e in m.entries(scale, iterations))
    meta.setdefault("sampler", "")
    return PrivacyLedger(
        per_chain=entries, chains=int(chains), delta=delta, shared=tuple(shared), **meta
    )


def run_epsilon(*args: Any, up_to: float = np.inf, **kwargs: Any) -> float:
    """Epsilon (at ``delta``) of the run :func:`run_ledger` describes (its arguments).

    ``up_to``: where the RDP conversion's best order lies below it, over the orders up to it
    alone (:meth:`~pymc_dp.accounting.ledger.PrivacyLedger.epsilon_up_to`: the same value,
    cheaper); never below the exact value."""
    if up_to < np.inf:  # a ledger never returned: no accountant's name made
        eps, settled = run_ledger(*args, accountant="-", **kwargs).epsilon_up_to(up_to)
        if settled:
            return eps
    return run_ledger(*args, **kwargs).epsilon


def _gaussian_mu_per_iteration(mechanisms: Sequence[Mechanism], scale: float) -> float:
    return run_ledger(mechanisms, scale, 1, 1, 0.5).mu_per_chain


@lru_cache(maxsize=256)
def _calibrate(
    mechanisms: Mechanisms,
    epsilon: float,
    delta: float,
    iterations: int,
    chains: int,
    shared: tuple = (),
):
    spent_before = run_ledger((), None, 0, 1, delta, shared).mu if shared else 0.0
    nothing_left = PrivacyBudgetError(
        f"The warm start alone spends the budget epsilon={epsilon}: nothing is left for "
        "sampling. Lower `warm_start`."
    )
    if all(m.gaussian for m in mechanisms) and all(e.kind == "gaussian" for e in shared):
        # mu of the run at knob c is mu(1) / c^2 (plus the shared releases): closed form,
        # stepped towards more noise
        budget = gaussian_mu_for_budget(epsilon, delta) - spent_before
        if budget <= 0:
            raise nothing_left
        total1 = chains * iterations * _gaussian_mu_per_iteration(mechanisms, 1.0)
        scale = float(np.sqrt(total1 / budget))
        for _ in range(100):
            spent = total1 / scale**2 + spent_before
            if spent - spent_before <= budget and gaussian_epsilon(spent, delta) <= epsilon:
                return scale
            scale *= 1 + 1e-11
        raise AssertionError("noise calibration did not converge")  # pragma: no cover

    def spent(s: float, search: bool = False) -> float:
        up_to = _SEARCH_ORDER if search else np.inf
        return run_epsilon(mechanisms, s, iterations, chains, delta, shared, up_to=up_to)

    def spends(s: float, search: bool = False) -> bool:  # a NaN epsilon spends (review)
        return not spent(s, search) <= epsilon

    if shared and not run_ledger((), None, 0, 1, delta, shared).epsilon < epsilon:
        raise nothing_left  # (review: the bracket went on to noise dp-accounting cannot take)
    # the same releases without subsampling spend about the budget: bracket from there
    mu = gaussian_mu_for_budget(epsilon, delta)
    hi = float(np.sqrt(chains * iterations / (2.0 * mu)))
    while spends(hi):
        hi *= 2.0
        if hi > 1e12:  # epsilon with a floor above the budget (review): no noise level fits
            raise PrivacyBudgetError(
                f"No noise level keeps this run within epsilon={epsilon}: its releases spend "
                "more than that at any noise (fewer iterations or chains, or a larger budget)."
            )
    lo = hi / 2.0
    while not spends(lo, search=True) and lo > 1e-8:
        hi, lo = lo, lo / 2.0
    if not spends(lo, search=True):  # even almost no noise fits the budget
        return lo
    if hi / lo <= 1.0 + _CALIBRATION_RTOL:
        return hi
    # Brent's method on log epsilon against log s (smooth and monotone: 5-7 evaluations where
    # bisection took 13; each one of a subsampled release is dp-accounting's RDP at every order,
    # 0.2 s, or 0.02 s over the low orders where the best one lies: see _SEARCH_ORDER), then
    # towards more noise until the run fits the budget (every order decides from here)
    log_eps = np.log(epsilon)

    def gap(x: float) -> float:  # a NaN epsilon counts as over (review)
        eps = spent(float(np.exp(x)), search=True)
        return float(np.log(eps) - log_eps) if eps == eps else 1e3

    found = brentq(
        gap,
        np.log(lo),
        np.log(hi),
        xtol=0.25 * _CALIBRATION_RTOL,
        rtol=4 * np.finfo(float).eps,
    )
    scale = min(float(np.exp(found)) * (1.0 + 0.5 * _CALIBRATION_RTOL), hi)
    while spends(scale):
        scale = min(scale * (1.0 + 0.5 * _CALIBRATION_RTOL), hi)
    below = scale / (1.0 + _CALIBRATION_RTOL)
    if below > lo and not spends(below):
        # Brent stopped on a flat stretch (a step-like epsilon, review): bisect what is left
        hi = below
        while hi / lo > 1.0 + _CALIBRATION_RTOL:
            mid = float(np.sqrt(lo * hi))
            lo, hi = (mid, hi) if spends(mid) else (lo, mid)
        return hi
    return scale  # the noisier end of the root: never over budget


def calibrate(
    mechanisms: Sequence[Mechanism],
    *,
    epsilon: float,
    delta: float,
    iterations: int,
    chains: int,
    shared: tuple = (),
) -> float:
    """Smallest noise knob with which ``chains x iterations`` iterations (after the ``shared``
    releases) spend at most ``(epsilon, delta)``; cached (bisection against dp-accounting takes
    seconds)."""
    return _calibrate(
        tuple(mechanisms),
        float(epsilon),
        float(delta),
        int(iterations),
        int(chains),
        tuple(shared),
    )


def max_iterations(
    mechanisms: Sequence[Mechanism],
    *,
    scale: float | None,
    epsilon: float,
    delta: float,
    chains: int,
    shared: tuple = (),
) -> int:
    """Iterations per chain that ``chains`` chains can run at knob ``scale`` within budget."""
    return largest_count(
        lambda k: (
            run_epsilon(mechanisms, scale, k, chains, delta, shared) <= epsilon
            if (k or shared)
            else True
        )
    )


@lru_cache(maxsize=64)
def _epsilon_curve(
    mechanisms: Mechanisms,
    scale: float | None,
    iterations: int,
    delta: float,
    shared: tuple = (),
) -> tuple[np.ndarray, np.ndarray | None]:
    """One chain's epsilon (and, for Gaussian mechanisms, mu) after each iteration, the shared
    releases included."""
    if iterations == 0:
        return np.zeros(0), np.zeros(0)
    one = run_ledger(mechanisms, scale, 1, 1, delta, shared)
    if not mechanisms:  # nothing per iteration: the shared releases are all there is
        eps = one.epsilon if shared else 0.0
        return np.full(iterations, eps), (
            np.full(iterations, one.mu) if one.regime == "gaussian" else None
        )
    if one.regime == "gaussian":
        mu = one.mu_shared + one.mu_per_chain * np.arange(1, iterations + 1)
        return np.asarray(gaussian_epsilon(mu, delta), dtype=float).reshape(-1), mu
    if one.regime == "rdp" and not shared:  # exact after every iteration: k times the curve
        return rdp_epsilon_curve(*one.rdp_curve(), iterations, delta), None
    # PLD (or RDP after shared releases): exact on a geometric grid of counts, stepped up in
    # between (an upper bound)
    grid = np.unique(np.geomspace(1, iterations, _PLD_GRID_POINTS).round().astype(int))
    eps_grid = np.array([run_epsilon(mechanisms, scale, int(k), 1, delta, shared) for k in grid])
    return eps_grid[np.searchsorted(grid, np.arange(1, iterations + 1))], None


@dataclass(frozen=True)
class RunPlan:
    """A calibrated run: what it may do and what it costs (see the module docstring).

    Attributes
    ----------
    ledger : PrivacyLedger
        What the whole run releases and what that costs; the result's ``attrs`` carry it.
    scale : float or None
        The calibrated noise knob (None for steps without one).
    epsilon_curve : ndarray
        One chain's epsilon after each of its iterations (the ``dp_epsilon`` stat).
    mu_curve : ndarray or None
        One chain's Gaussian mu after each iteration (the ``dp_mu`` stat), Gaussian steps only.
    """

    mechanisms: Mechanisms
    chains: int
    tune: int
    draws: int
    delta: float
    scale: float | None
    ledger: PrivacyLedger
    noise_seed: Any = None
    exact_noise: bool = False
    epsilon_curve: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    mu_curve: np.ndarray | None = field(repr=False, default=None)

    @property
    def iterations(self) -> int:
        """Iterations per chain (tuning included)."""
        return self.tune + self.draws

    @property
    def epsilon(self) -> float:
        return self.ledger.epsilon


def make_plan(
    mechanisms: Sequence[Mechanism],
    *,
    sampler: str,
    chains: int,
    tune: int,
    draws: int,
    delta: float,
    epsilon: float | None = None,
    noise_multiplier: float | None = None,
    releasable: bool = True,
    noise_seed: Any = None,
    exact_noise: bool = False,
    delta_rule: str = "",
    shared: tuple = (),
    adaptation: str = "",
    data_location: str = "in memory",
) -> RunPlan:
    """Calibrate (``epsilon`` alone), check (``epsilon`` and ``noise_multiplier``) or just count
    (``noise_multiplier`` alone) a run after the ``shared`` releases (a warm start); raise
    :class:`PrivacyBudgetError` if it overspends."""
    mechanisms, shared = tuple(mechanisms), tuple(shared)
    chains, iterations = int(chains), int(tune) + int(draws)
    tunable = any(m.tunable for m in mechanisms)
    if not tunable:
        scale = None
    elif epsilon is not None and noise_multiplier is None:
        scale = calibrate(
            mechanisms,
            epsilon=epsilon,
            delta=delta,
            iterations=iterations,
            chains=chains,
            shared=shared,
        )
    else:
        scale = noise_multiplier
    meta = dict(
        sampler=sampler,
        target_epsilon=epsilon,
        releasable=releasable,
        noise_seeded=noise_seed is not None,
        exact_noise=bool(exact_noise),
        delta_rule=delta_rule,
        adaptation=adaptation,
        data_location=data_location,
    )
    ledger = run_ledger(mechanisms, scale, iterations, chains, delta, shared, **meta)
    if epsilon is not None and not ledger.epsilon <= epsilon * (1 + 1e-12):  # NaN: over
        most = max_iterations(
            mechanisms, scale=scale, epsilon=epsilon, delta=delta, chains=chains, shared=shared
        )
        knob = ", raise noise_multiplier, or give only epsilon" if tunable else ""
        raise PrivacyBudgetError(
            f"{chains} chains x {iterations} iterations (tune + draws) of {sampler} would spend "
            f"epsilon={ledger.epsilon:.4g} > epsilon={epsilon} at delta={delta:.3g}; the budget "
            f"affords at most {most} iterations per chain. Lower tune/draws/chains{knob}."
        )
    eps_curve, mu_curve = _epsilon_curve(mechanisms, scale, iterations, delta, shared)
    return RunPlan(
        mechanisms=mechanisms,
        chains=chains,
        tune=int(tune),
        draws=int(draws),
        delta=delta,
        scale=scale,
        ledger=ledger,
        noise_seed=noise_seed,
        exact_noise=bool(exact_noise),
        epsilon_curve=eps_curve,
        mu_curve=mu_curve,
    )
