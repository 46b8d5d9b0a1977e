"""The budget of one step: what its runs may spend, and the noise streams that spend it.

A :class:`Budget` is a value: ``(epsilon, delta)`` and how they were chosen, the fixed noise knob
if one was given, the chains a plain ``pm.sample`` run must cover, and where the noise comes from
(a seed, OS entropy or OpenDP's exact samplers). Steps hold one and hand it to
:func:`~pymc_dp.runplan.make_plan`, the one place that calibrates (dp-accounting's
events-describe, accountant-counts split: :mod:`~pymc_dp.mechanisms` describe a release,
:mod:`~pymc_dp.runplan` counts). Checks name the argument a user passed.

Every noise draw of a run comes from a :class:`~pymc_dp.noise.NoiseSource` keyed by a stream:
chains use ``0, 1, ...``; a release made once for every chain uses one of the reserved streams
below, so that no two releases share noise whatever the chain count.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

from pymc_dp.accounting.gaussian import gaussian_epsilon, gaussian_mu_for_budget
from pymc_dp.accounting.ledger import PrivacyLedger
from pymc_dp.checks import check_delta, check_epsilon, check_positive
from pymc_dp.mechanisms import Mechanism
from pymc_dp.noise import NoiseSource
from pymc_dp.runplan import RunPlan, make_plan
from pymc_dp.runplan import max_iterations as _max_iterations

__all__ = [
    "ANCHOR_STREAM",
    "DELTA_RULE",
    "GROUP_ANCHOR_STREAM",
    "WARM_START_STREAM",
    "Budget",
    "Budgeted",
    "default_chains",
    "default_delta",
]

DELTA_RULE = "default: min(1e-6, 1 / (10 n))"
#: Reserved noise streams of the releases made once per run (chains use 0, 1, ...).
WARM_START_STREAM = 2**31 - 1
ANCHOR_STREAM = 2**31 - 2
GROUP_ANCHOR_STREAM = 2**31 - 3


def default_chains() -> int:
    """PyMC's own default chain count on this machine (``max(2, min(4, cpu_count))``)."""
    return max(2, min(4, multiprocessing.cpu_count()))


def default_delta(n_rows: int) -> float:
    """``min(1e-6, 1 / (10 n))``: well below the 1/n at which a mechanism may publish one row."""
    return min(1e-6, 1.0 / (10.0 * n_rows))


def _check_chains(chains: object) -> int:
    if isinstance(chains, bool) or not isinstance(chains, numbers.Real) or int(chains) != chains:
        raise ValueError(f"`chains` must be an integer >= 1, got {chains!r}")
    if chains < 1:
        raise ValueError(f"`chains` must be an integer >= 1, got {chains!r}")
    return int(chains)


@dataclass(frozen=True)
class Budget:
    """What a step may spend (public: every field is recorded in the ledger).

    Parameters
    ----------
    epsilon, delta : float, optional
        Privacy budget of the whole run, all chains and tuning iterations included. With
        ``epsilon`` alone the noise is calibrated to spend exactly this budget; with
        ``noise_multiplier`` too the run is refused if it would overspend. ``delta`` defaults to
        ``min(1e-6, 1 / (10 n))`` (recorded in the ledger).
    noise_multiplier : float, optional
        Fixed noise (std over L2 sensitivity). Without ``epsilon`` the spent budget is reported.
    chains : int, optional
        Chains the budget must cover under plain ``pm.sample`` (default: PyMC's default for the
        machine); a further chain is refused. :func:`pymc_dp.sample` sets it exactly.
    noise_seed : int, optional
        Seed of the privacy noise. Default: OS entropy, which nobody can reproduce. A seed makes
        the noise reproducible (tests, reproducible research); the ledger records it.
    exact_noise : bool
        Draw the integer noise of releases with OpenDP's exact samplers (see
        :mod:`pymc_dp.noise`); slower, cannot be seeded.
    delta_rule : str
        How ``delta`` was chosen (:data:`DELTA_RULE` or ``"given"``).
    """

    epsilon: float | None
    delta: float
    delta_rule: str
    noise_multiplier: float | None
    chains: int
    noise_seed: int | None
    exact_noise: bool

    @classmethod
    def of(
        cls,
        n_rows: int,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        noise_multiplier: float | None = None,
        chains: int | None = None,
        noise_seed: int | None = None,
        exact_noise: bool = False,
        needs_knob: bool = True,
    ) -> Budget:
        """Check a step's budget arguments (each error names its argument). ``needs_knob``: the
        step has a noise knob, so it needs ``epsilon`` or ``noise_multiplier``."""
        epsilon = None if epsilon is None else check_epsilon(epsilon)
        if noise_multiplier is not None:
            noise_multiplier = check_positive(noise_multiplier, "noise_multiplier")
        if epsilon is None and noise_multiplier is None and needs_knob:
            raise ValueError("Give `epsilon` (a budget to calibrate to) or `noise_multiplier`.")
        if noise_seed is not None and (
            isinstance(noise_seed, bool) or int(noise_seed) != noise_seed
        ):
            raise TypeError(f"`noise_seed` must be an integer, got {noise_seed!r}")
        if exact_noise and noise_seed is not None:
            raise ValueError("`noise_seed` cannot seed OpenDP's exact samplers: give one or other.")
        return cls(
            epsilon=epsilon,
            delta=default_delta(n_rows) if delta is None else check_delta(delta),
            delta_rule=DELTA_RULE if delta is None else "given",
            noise_multiplier=noise_multiplier,
            chains=default_chains() if chains is None else _check_chains(chains),
            noise_seed=None if noise_seed is None else int(noise_seed),
            exact_noise=bool(exact_noise),
        )

    def for_chains(self, chains: int) -> Budget:
        return dataclasses.replace(self, chains=_check_chains(chains))

    def mu(self, share: float = 1.0, *, what: str = "`warm_start`") -> float:
        """Gaussian privacy loss of ``share`` of the budget (its mu), for a release made once."""
        if self.epsilon is None:
            raise ValueError(f"{what} needs `epsilon`: its share is a share of the budget.")
        return share * gaussian_mu_for_budget(self.epsilon, self.delta)

    def epsilon_of(self, mu: float) -> float:
        """The epsilon at this delta of a Gaussian privacy loss ``mu`` (what a release spent)."""
        return gaussian_epsilon(mu, self.delta)

    def noise(self, stream: int) -> NoiseSource:
        """The secret noise of ``stream`` (a chain's index, or a reserved stream above)."""
        return NoiseSource.for_chain(self.noise_seed, stream, exact=self.exact_noise)

    def plan(
        self,
        mechanisms: Sequence[Mechanism],
        *,
        sampler: str,
        tune: int,
        draws: int,
        chains: int | None = None,
        releasable: bool = True,
        shared: tuple = (),
        adaptation: str = "",
        data_location: str = "in memory",
    ) -> RunPlan:
        """Calibrate ``chains`` x (``tune`` + ``draws``) iterations of ``mechanisms``, or raise
        :class:`~pymc_dp.runplan.PrivacyBudgetError`; reads no data."""
        return make_plan(
            tuple(mechanisms),
            sampler=sampler,
            chains=self.chains if chains is None else int(chains),
            tune=int(tune),
            draws=int(draws),
            delta=self.delta,
            epsilon=self.epsilon,
            noise_multiplier=self.noise_multiplier,
            releasable=releasable,
            noise_seed=self.noise_seed,
            exact_noise=self.exact_noise,
            delta_rule=self.delta_rule,
            shared=shared,
            adaptation=adaptation,
            data_location=data_location,
        )

    def max_iterations(
        self,
        mechanisms: Sequence[Mechanism],
        *,
        epsilon: float | None = None,
        chains: int | None = None,
        shared: tuple = (),
        needs_knob: bool = True,
    ) -> int:
        """Iterations per chain that ``chains`` chains can run at the fixed noise knob within
        ``(epsilon, delta)`` (defaults: this budget's)."""
        epsilon = self.epsilon if epsilon is None else check_epsilon(epsilon)
        if epsilon is None:
            raise ValueError("Give `epsilon`: this step has no budget to check against.")
        chains = self.chains if chains is None else int(chains)
        if chains < 1:
            raise ValueError(f"`chains` must be >= 1, got {chains}")
        if needs_knob and self.noise_multiplier is None:
            raise ValueError("`max_iterations` needs a fixed `noise_multiplier`.")
        return _max_iterations(
            tuple(mechanisms),
            scale=self.noise_multiplier,
            epsilon=epsilon,
            delta=self.delta,
            chains=chains,
            shared=shared,
        )


def _field(name: str) -> property:
    def get(self):
        return getattr(self.budget, name)

    def set_(self, value):
        if name == "chains":
            self.budget = self.budget.for_chains(value)
        else:
            self.budget = dataclasses.replace(self.budget, **{name: value})

    return property(get, set_, doc=f"The budget's ``{name}``.")


class Budgeted:
    """A step's face of its :class:`Budget`: the budget's fields, run plans and ledgers.

    Mixed into :class:`~pymc_dp.step_methods.base.DPStep`, which sets ``self.budget`` and
    provides ``mechanisms()``, ``_shared_entries()``, ``_adaptation()`` and ``_tunable()``.
    """

    budget: Budget
    epsilon = _field("epsilon")
    delta = _field("delta")
    delta_rule = _field("delta_rule")
    noise_multiplier = _field("noise_multiplier")
    chains = _field("chains")
    noise_seed = _field("noise_seed")
    exact_noise = _field("exact_noise")

    def plan(self, *, tune: int, draws: int, chains: int | None = None) -> RunPlan:
        """Calibrate a run of ``chains`` x (``tune`` + ``draws``) iterations (default chains: the
        step's), or raise :class:`~pymc_dp.runplan.PrivacyBudgetError`; reads no data."""
        return self.budget.plan(
            self.mechanisms(),
            sampler=type(self).__name__,
            tune=tune,
            draws=draws,
            chains=chains,
            releasable=not self.diagnostics,
            shared=self._shared_entries(),
            adaptation=self._adaptation(),
            data_location=getattr(self.likelihood, "location", "in memory"),
        )

    def use_plan(self, plan: RunPlan | None) -> None:
        """Run the next chains under ``plan`` (``pdp.sample`` does this); None forgets it."""
        self._plan = plan
        self._plan_managed = plan is not None
        if plan is not None:
            self.chains = plan.chains

    def ledger(self, tune: int, draws: int, chains: int | None = None) -> PrivacyLedger:
        """The ledger of a run of ``chains`` x (``tune`` + ``draws``) iterations."""
        return self.plan(tune=tune, draws=draws, chains=chains).ledger

    def max_iterations(self, epsilon: float | None = None, chains: int | None = None) -> int:
        """Iterations per chain that ``chains`` chains can run at the fixed ``noise_multiplier``
        within ``(epsilon, delta)`` (defaults: the step's)."""
        return self.budget.max_iterations(
            self.mechanisms(),
            epsilon=epsilon,
            chains=chains,
            shared=self._shared_entries(),
            needs_knob=self._tunable(),
        )
