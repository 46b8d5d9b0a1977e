"""The PyMC glue of a DP step: the run plan's guards, the chain's state, and declared stats.

Data flows one way: model -> :mod:`~pymc_dp.graph` (private inputs, rows) ->
:mod:`~pymc_dp.likelihood` (compiled kernels) -> :mod:`~pymc_dp.mechanisms` (clip, noise,
test, cost) -> the step (proposal + mechanisms + state) -> :mod:`~pymc_dp.runplan` (chains x
iterations, calibration, refusal) -> ledger -> DataTree.

A step composes parts that live elsewhere: its :class:`~pymc_dp.budget.Budget` (what it may
spend, the one calibration path), its :class:`~pymc_dp.spending.DataSeal` (the data it was built
on, the chains it ran), its zero tuning (:mod:`~pymc_dp.tuning.zero_tuning`), and per chain a
:class:`~pymc_dp.step_methods.chain.ChainState`. A subclass declares ``name`` and ``stats``
(each :class:`Stat` releasable or a diagnostic) and fills three hooks:

* :meth:`DPStep.mechanisms`: what one iteration releases (public configuration only);
* :meth:`DPStep._reset_chain`: its own per-chain state (proposal directions, step-size jitter);
* :meth:`DPStep._iterate`: one iteration from ``q``, returning the next point and its stats.

A chain or an iteration beyond the plan raises; a DP step inside a ``CompoundStep`` is refused.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pymc.blocking import RaveledVars
from pymc.model import Model, modelcontext
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence, CompoundStep
from pymc.util import RandomGenerator

from pymc_dp.boundary import guarded
from pymc_dp.budget import DELTA_RULE, Budget, Budgeted, default_chains, default_delta
from pymc_dp.likelihood import PerRowLikelihood, model_likelihood
from pymc_dp.mechanisms import Mechanism
from pymc_dp.noise import NoiseSource
from pymc_dp.prior_block import PriorBlock
from pymc_dp.runplan import PrivacyBudgetError, RunPlan
from pymc_dp.spending import DataSeal, SpentOnce
from pymc_dp.step_methods.chain import ChainState
from pymc_dp.tuning import zero_tuning
from pymc_dp.tuning.zero_tuning import DEFAULT_WARM_START, ZeroTuned

__all__ = [
    "DEFAULT_WARM_START",
    "DELTA_RULE",
    "DPStep",
    "PrivacyBudgetError",
    "Stat",
    "default_chains",
    "default_delta",
]

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Stat:
    """A sample stat: its dtype and whether it is computed only from privatised quantities."""

    dtype: Any
    releasable: bool = True


#: Emitted by every DP step after every iteration.
PRIVACY_STATS = {
    "accepted": Stat(bool),
    "dp_epsilon": Stat(np.float64),
    "dp_delta": Stat(np.float64),
}


#: Stats of a step whose chains are NUTS on one release (DPSuffStats, DPLaplace(nuts=True)):
#: the surrogate's divergences are computed from released values only.
ONE_RELEASE_STATS = {
    **PRIVACY_STATS,
    "dp_mu": Stat(np.float64),
    "surrogate_diverging": Stat(bool),
}


def _chain_index(rng: np.random.Generator) -> int | None:
    """Which chain of a ``pm.sample`` run ``rng`` belongs to.

    ``pm.sample`` spawns the chains' generators from one parent (``spawn(chains)``, kept across
    processes), so the last entry of the spawn key is the chain index. None when unknown (a
    generator that was not spawned, e.g. a direct call).
    """
    seq = getattr(rng.bit_generator, "seed_seq", None)
    key = getattr(seq, "spawn_key", ())
    return int(key[-1]) if key else None


def _refuse_compound(step: DPStep) -> None:
    """A DP step next to another step: the other one reads the exact likelihood and reports it."""
    frame = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return
        if isinstance(frame.f_locals.get("self"), CompoundStep):
            raise ValueError(
                f"{type(step).__name__} runs inside a CompoundStep next to other step methods. "
                "Those evaluate the exact model log-density and report it (lp, energy) without "
                "noise, and several DP steps would each spend the budget: give one DP step that "
                "covers every free variable."
            )
        frame = frame.f_back


def _free_vars(model: Model, vars: Sequence | None, step: str) -> list:
    vars = list(model.value_vars) if vars is None else [model.rvs_to_values.get(v, v) for v in vars]
    missing = [v.name for v in model.value_vars if v not in vars]
    if missing:
        raise ValueError(
            f"{step} must sample every free variable; {missing} would be left to PyMC's "
            "samplers, which use the exact likelihood and report it (lp, energy) without noise. "
            "Leave `vars` at its default."
        )
    return vars


def _refuse_unplanned_chain(chain: int | None, plan: RunPlan) -> None:
    if chain is not None and chain >= plan.chains:
        raise PrivacyBudgetError(
            f"Chain {chain + 1} of a run whose noise was calibrated for {plan.chains} chains: "
            "every chain is a separate release of the data, so it would spend budget beyond "
            f"epsilon. Create the step with chains={chain + 1} (or more), or use pdp.sample, "
            "which calibrates for the exact chain count."
        )


def _refuse_unplanned_iteration(i: int, plan: RunPlan) -> None:
    if i >= plan.iterations:
        raise PrivacyBudgetError(
            f"Iteration {i + 1} of a chain planned for {plan.iterations}: it would release "
            "beyond the budget."
        )


def _second_run_message(step: DPStep, chain: int) -> str:
    return (
        f"{type(step).__name__} already ran chain {chain + 1}: a step is spent once (its noise "
        "was calibrated for one run). A second run would release the data again while its "
        "report still says epsilon. Build a new step (or step.renew(), which keeps the compiled "
        "kernels) and report both runs' epsilon."
    )


def _declared_stats(stats: Mapping[str, Stat], diagnostics: bool, step: str) -> dict:
    """PyMC's ``stats_dtypes_shapes``: the releasable stats, and diagnostics on request."""
    if diagnostics:
        warnings.warn(
            f"{step}(diagnostics=True) emits exact statistics of the private data (e.g. clip "
            "fractions) without noise: the result is not releasable.",
            UserWarning,
            skip_file_prefixes=(_PACKAGE_DIR,),
        )
    return {k: (s.dtype, []) for k, s in stats.items() if s.releasable or diagnostics}


def _plain_sample_warning() -> None:
    warnings.warn(
        "Plain pm.sample stores the private data in the result (observed_data, constant_data). "
        "Publish only the output of pdp.sample, or pdp.sanitize(idata, model).",
        UserWarning,
        stacklevel=4,
    )


class DPStep(Budgeted, SpentOnce, ZeroTuned, ArrayStepShared):
    """Base class of the DP step methods (not used directly).

    Parameters
    ----------
    vars : list of value variables, optional
        Must be all free variables of the model (default): PyMC's own samplers evaluate the full
        model log-density, which contains the exact likelihood, and report it (``lp``, ``energy``),
        so no free variable may be left to them.
    epsilon, delta, noise_multiplier, chains, noise_seed, exact_noise
        The step's budget: see :class:`~pymc_dp.budget.Budget`.
    warm_start : float, optional
        Share of the budget (of its Gaussian privacy loss mu) spent, when the step is created, on
        a private warm start (:mod:`pymc_dp.tuning.warm_start`): noisy Newton steps to the
        posterior mode and a noise-aware Laplace fit. Every chain then starts from a draw of that
        fit, and zero-tuning steps take their proposal covariance or mass matrix from it. Needs
        ``epsilon``; the ledger records it once per run. Default: ``DEFAULT_WARM_START`` (0.5)
        for zero-tuning steps (no proposal scale or step size given), else 0.
    diagnostics : bool
        Also emit exact (unprivatised) diagnostics such as clip fractions. A result made this way
        is marked not releasable.
    row_dim, row_axes, public
        See :func:`pymc_dp.graph.analyse`.
    likelihood : PerRowLikelihood, optional
        Per-row kernels built elsewhere, for rows bound at sampling time (``pdp.sample(data=)``
        passes one through :meth:`rebuild`; :mod:`pymc_dp.distributed`).
    """

    default_blocked = True
    default_tune_steps = 0
    name: ClassVar[str] = "dp_step"
    #: Every stat the step can emit; diagnostics only with ``diagnostics=True``.
    stats: ClassVar[dict[str, Stat]] = PRIVACY_STATS
    stats_dtypes_shapes: ClassVar[dict]  # per instance, derived from ``stats``
    #: Whether the step needs only full-data sums (rows may live on Dask workers).
    distributed_rows: ClassVar[bool] = False
    #: Whether the draws are of a fitted distribution, not a chain (no mixing diagnostics).
    fit_draws: ClassVar[bool] = False
    #: The running chain's state (None before :meth:`setup_chain`).
    chain: ChainState | None = None

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        noise_multiplier: float | None = None,
        chains: int | None = None,
        noise_seed: int | None = None,
        exact_noise: bool = False,
        warm_start: float | None = None,
        diagnostics: bool = False,
        row_dim: str | None = None,
        row_axes: Mapping[str, int] | None = None,
        public: Iterable[str] = (),
        model: Model | None = None,
        rng: RandomGenerator = None,
        blocked: bool = True,
        compile_kwargs: dict | None = None,
        likelihood: PerRowLikelihood | None = None,
    ) -> None:
        model = modelcontext(model)
        name = type(self).__name__
        knobs = dict(epsilon=epsilon, noise_multiplier=noise_multiplier, chains=chains)
        knobs.update(noise_seed=noise_seed, exact_noise=exact_noise, needs_knob=self._tunable())
        Budget.of(1, delta=None, **knobs)  # argument errors before the model is analysed
        vars = _free_vars(model, vars, name)
        self.likelihood_kwargs = dict(
            row_dim=row_dim, row_axes=row_axes, public=tuple(public), compile_kwargs=compile_kwargs
        )
        if likelihood is not None and likelihood.model is not model:
            raise ValueError("`likelihood` was built for another model.")
        # the analysis evaluates graphs on the rows: PyTensor's errors there print inputs
        self.likelihood = likelihood or guarded(
            f"Analysing the model for {name}",
            model_likelihood,
            model,
            vars,
            **self.likelihood_kwargs,
        )
        self.seal = DataSeal(model, getattr(self.likelihood, "graph", None))
        self.n_rows = self.likelihood.n_rows
        self.budget = Budget.of(self.n_rows, delta=delta, **knobs)
        self.diagnostics = bool(diagnostics)
        self.stats_dtypes_shapes = _declared_stats(self.stats, self.diagnostics, name)
        self.stats_dtypes = [{k: dtype for k, (dtype, _) in self.stats_dtypes_shapes.items()}]
        self.warm = None
        needed = self._needs_warm_start()
        self.warm_start_share = zero_tuning.warm_start_share(warm_start, needed=needed, step=name)
        self._plan: RunPlan | None = None
        self._plan_managed = False  # made by pdp.sample, which strips private groups itself
        self._warned_plain = False
        # variables that enter only the prior move in their own exact block (no noise)
        self._active = self.likelihood.likelihood_mask
        self._prior_block = PriorBlock.of(self.likelihood) if self._free_moves() else None
        super().__init__(vars, self.likelihood.shared, blocked=blocked, rng=rng)

    # ------------------------------------------------------------------ subclass hooks
    def mechanisms(self) -> tuple[Mechanism, ...]:
        """What one iteration releases (public configuration only)."""
        raise NotImplementedError

    def _reset_chain(self) -> None:
        """Reset the subclass's per-chain state after :meth:`setup_chain` made ``self.chain``."""

    def _iterate(self, q: np.ndarray) -> tuple[np.ndarray, dict]:
        """One iteration from ``q``: the next point and the iteration's own stats."""
        raise NotImplementedError

    @classmethod
    def _tunable(cls) -> bool:
        """Whether the step has a noise knob to calibrate."""
        return True

    def _free_moves(self) -> bool:
        """Whether prior-only variables move exactly after every iteration (:mod:`prior_block`)."""
        return True

    @classmethod
    def releasable_stat_names(cls) -> frozenset[str]:
        """Names of the stats computed only from privatised quantities and public values."""
        return frozenset(k for k, s in cls.stats.items() if s.releasable)

    # ------------------------------------------------------------------ per chain
    def setup_chain(self, rng: RandomGenerator, tune: int, draws: int) -> None:
        """Check the chain against the run plan and set up its state, before touching data."""
        _refuse_compound(self)
        super().setup_chain(rng, tune, draws)
        plan = self._plan
        if plan is None or (plan.tune, plan.draws) != (int(tune), int(draws)):
            if self._plan_managed:
                raise RuntimeError("pdp.sample's run plan does not match the chain's iterations")
            plan = self._plan = self.plan(tune=tune, draws=draws)  # may refuse the run
            if not self._warned_plain:
                _plain_sample_warning()
                self._warned_plain = True
        chain = _chain_index(self.rng)
        _refuse_unplanned_chain(chain, plan)
        self.check_data()
        if plan.ledger.per_chain and not self.seal.record.claim(chain or 0):
            raise PrivacyBudgetError(_second_run_message(self, chain or 0))
        noise = NoiseSource.for_chain(plan.noise_seed, chain or 0, exact=plan.exact_noise)
        # a warm-started chain starts from a draw of the noise-aware Laplace fit (public)
        self.chain = ChainState(noise, start=self.warm.draw(self.rng) if self.warm else None)
        if self._prior_block is not None:
            self._prior_block.reset()
        mask = self._shape_mask()
        if mask is not None:  # every chain starts from the warm start's shape
            self._set_shape(self.warm.posterior_cov)
            self.chain.shape = zero_tuning.chain_adaptation(self.warm, plan.tune, mask)
        self._reset_chain()

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list[dict]]:
        plan, chain = self._plan, self.chain
        if plan is None or chain is None:
            raise RuntimeError(f"{type(self).__name__}.setup_chain was not called.")
        i = chain.iteration
        _refuse_unplanned_iteration(i, plan)
        q = q0.data if i > 0 or chain.start is None else chain.start.astype(q0.data.dtype)
        q_new, stats = self._iterate(q)
        if self._prior_block is not None:
            q_new = self._prior_block.move(q_new, self.rng, self._tuning)
        if chain.shape is not None:  # the released draw: post-processing
            cov = chain.shape.update(q_new, i)
            if cov is not None:
                self._set_shape(cov)
        chain.iteration = i + 1
        stats["dp_epsilon"] = float(plan.epsilon_curve[i])
        stats["dp_delta"] = plan.delta
        if "dp_mu" in self.stats_dtypes_shapes:
            stats["dp_mu"] = float(plan.mu_curve[i]) if plan.mu_curve is not None else np.nan
        return RaveledVars(q_new, q0.point_map_info), [stats]

    # ------------------------------------------------------------------ shared pieces
    @property
    def _tuning(self) -> bool:
        """Whether the current iteration tunes (from the plan: PyMC's parallel sampler never
        sets ``step.tune``)."""
        return self.chain.iteration < self._plan.tune

    @property
    def _scale(self) -> float:
        """The plan's calibrated noise knob."""
        return float(self._plan.scale)

    def _prior_at(self, q: np.ndarray) -> float:
        """Log prior of the chain's current point (public: no data), cached."""
        return self.chain.prior_at(q, self.likelihood.prior_value)

    def _metropolis(self, q: np.ndarray, q_new: np.ndarray, log_alpha: float, prior_new: float):
        """The Metropolis decision (:meth:`ChainState.metropolis`) with the step's rng."""
        return self.chain.metropolis(self.rng, q, q_new, log_alpha, prior_new)

    @staticmethod
    def competence(var, has_grad):
        return Competence.INCOMPATIBLE  # never assigned automatically
