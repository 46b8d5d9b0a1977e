"""Shared machinery of the DP step methods: budget calibration, coverage, privacy stats.

A DP step is a composition of Gaussian mechanisms. Each iteration makes a fixed set of releases
(``_releases_per_iteration``) with noise multipliers ``s_k`` (noise std / L2 sensitivity), so
one iteration costs ``mu_it = sum_k count_k / (2 s_k^2)`` and the run costs
``chains * (tune + draws) * mu_it`` in the exact Gaussian PLD accountant. All multipliers of a step
scale together with one factor ``c`` (``s_k = c * base_k``), which makes calibration closed-form:
``c^2 = mu_it(1) * chains * iterations / mu*(epsilon, delta)``.
"""

from __future__ import annotations

import multiprocessing
import os
import warnings
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from pymc.model import Model, modelcontext
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.util import RandomGenerator

from pymc_dp.accounting._validate import check_delta, check_epsilon, check_positive
from pymc_dp.accounting.gaussian import (
    gaussian_epsilon,
    gaussian_mu_for_budget,
    max_iterations,
)
from pymc_dp.accounting.ledger import GaussianMechanism, PrivacyLedger
from pymc_dp.likelihood import PerRowLikelihood

__all__ = ["DPStep", "PrivacyBudgetError", "default_chains"]


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class PrivacyBudgetError(ValueError):
    """A run would spend more privacy than its budget allows."""


def default_chains() -> int:
    """PyMC's own default chain count on this machine (``max(2, min(4, cpu_count))``)."""
    return max(2, min(4, multiprocessing.cpu_count()))


class DPStep(ArrayStepShared):
    """Base class of the DP step methods (not used directly).

    Parameters
    ----------
    vars : list of value variables, optional
        Must be all free variables of the model (default): PyMC's own samplers evaluate the full
        model log-density, which contains the exact likelihood, and report it (``lp``, ``energy``),
        so no free variable may be left to them.
    epsilon, delta : float, optional
        Privacy budget of the whole run, all chains and tuning iterations included. With
        ``epsilon`` alone the noise is calibrated in ``setup_chain`` to spend exactly this budget;
        with ``noise_multiplier`` too the run is refused if it would overspend. ``delta`` defaults
        to ``0.1 / n`` (as in Raisa 2021).
    noise_multiplier : float, optional
        Fixed noise (std over L2 sensitivity). Without ``epsilon`` the spent budget is reported.
    chains : int, optional
        Number of chains the budget must cover. Default: PyMC's default for this machine.
        :func:`pymc_dp.sample` sets it exactly.
    diagnostics : bool
        Also emit exact (unprivatised) diagnostics such as clip fractions. A result made this way
        is marked not releasable.
    row_dim : str, optional
        Passed to :class:`~pymc_dp.likelihood.PerRowLikelihood`.
    """

    default_blocked = True
    default_tune_steps = 0
    name: ClassVar[str] = "dp_step"

    #: Stats computed only from privatised values and public quantities.
    releasable_stats: ClassVar[dict] = {
        "accepted": (bool, []),
        "accept_prob": (np.float64, []),
        "dp_epsilon": (np.float64, []),
        "dp_mu": (np.float64, []),
        "dp_delta": (np.float64, []),
    }
    #: Exact, data-dependent stats emitted only with ``diagnostics=True``.
    diagnostic_stats: ClassVar[dict] = {}
    #: Whether the step has a noise knob, so that ``epsilon`` or ``noise_multiplier`` is required.
    _needs_budget: ClassVar[bool] = True

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        noise_multiplier: float | None = None,
        chains: int | None = None,
        diagnostics: bool = False,
        row_dim: str | None = None,
        model: Model | None = None,
        rng: RandomGenerator = None,
        blocked: bool = True,
        compile_kwargs: dict | None = None,
    ) -> None:
        model = modelcontext(model)
        if epsilon is None and noise_multiplier is None and self._needs_budget:
            raise ValueError("Give `epsilon` (a budget to calibrate to) or `noise_multiplier`.")
        if epsilon is not None:
            check_epsilon(epsilon)
        if noise_multiplier is not None:
            check_positive(noise_multiplier, "noise_multiplier")
        vars = (
            list(model.value_vars)
            if vars is None
            else [model.rvs_to_values.get(v, v) for v in vars]
        )
        missing = [v.name for v in model.value_vars if v not in vars]
        if missing:
            raise ValueError(
                f"{type(self).__name__} must sample every free variable; {missing} would be left "
                "to PyMC's samplers, which use the exact likelihood and report it (lp, energy) "
                "without noise. Leave `vars` at its default."
            )
        self.likelihood = PerRowLikelihood(
            model, vars, row_dim=row_dim, compile_kwargs=compile_kwargs
        )
        self.n_rows = self.likelihood.n_rows
        if delta is None:
            delta = 0.1 / self.n_rows
        check_delta(delta)
        self.epsilon = None if epsilon is None else float(epsilon)
        self.delta = float(delta)
        self.noise_multiplier = None if noise_multiplier is None else float(noise_multiplier)
        if chains is not None and int(chains) < 1:
            raise ValueError(f"`chains` must be >= 1, got {chains}")
        self.chains = default_chains() if chains is None else int(chains)
        self.diagnostics = bool(diagnostics)
        self._managed = False  # set by pdp.sample, which strips private groups itself
        self.stats_dtypes_shapes = dict(self.releasable_stats)
        if self.diagnostics:
            self.stats_dtypes_shapes.update(self.diagnostic_stats)
        self.stats_dtypes = [{k: dtype for k, (dtype, _) in self.stats_dtypes_shapes.items()}]
        if self.diagnostics:
            warnings.warn(
                f"{type(self).__name__}(diagnostics=True) emits exact statistics of the private "
                "data (e.g. clip fractions) without noise: the result is not releasable.",
                UserWarning,
                skip_file_prefixes=(_PACKAGE_DIR,),
            )
        self._setup_done = False
        super().__init__(vars, self.likelihood.shared, blocked=blocked, rng=rng)

    # ------------------------------------------------------------------ subclass interface
    def _base_noise_multipliers(self) -> dict[str, float]:
        """Noise multipliers at scale 1, one per noise source."""
        raise NotImplementedError

    def _releases_per_iteration(self) -> dict[str, int]:
        """Releases per iteration of each noise source."""
        raise NotImplementedError

    def _set_noise(self, multipliers: dict[str, float]) -> None:
        """Store the calibrated multipliers for the hot path."""
        raise NotImplementedError

    # ------------------------------------------------------------------ accounting
    def _mu_per_iteration(self, multipliers: dict[str, float]) -> float:
        counts = self._releases_per_iteration()
        return float(sum(counts[k] / (2.0 * s**2) for k, s in multipliers.items()))

    def noise_multipliers(self, iterations: int) -> dict[str, float]:
        """Noise multipliers for ``chains`` chains of ``iterations`` iterations each.

        Raises :class:`PrivacyBudgetError` when a fixed noise cannot afford the run.
        """
        base = self._base_noise_multipliers()
        releases = self.chains * int(iterations)
        if self.epsilon is None:
            return base
        budget = gaussian_mu_for_budget(self.epsilon, self.delta)
        if self.noise_multiplier is None:
            scale = np.sqrt(self._mu_per_iteration(base) * releases / budget)
            # Round towards more noise: the spent epsilon must never exceed the budget.
            for _ in range(100):
                noise = {k: float(s * scale) for k, s in base.items()}
                spent = releases * self._mu_per_iteration(noise)
                if spent <= budget and gaussian_epsilon(spent, self.delta) <= self.epsilon:
                    return noise
                scale *= 1 + 1e-11
            raise AssertionError("noise calibration did not converge")  # pragma: no cover
        spend = releases * self._mu_per_iteration(base)
        if spend > budget * (1 + 1e-12):
            max_iter = self.max_iterations()
            raise PrivacyBudgetError(
                f"{self.chains} chains x {iterations} iterations (tune + draws) at "
                f"noise_multiplier={self.noise_multiplier} would spend epsilon="
                f"{float(gaussian_epsilon(spend, self.delta)):.4g} > epsilon={self.epsilon} at "
                f"delta={self.delta:.3g}; this noise affords at most {max_iter} iterations per "
                "chain. Lower tune/draws/chains, raise noise_multiplier, or give only epsilon."
            )
        return base

    def max_iterations(self, epsilon: float | None = None, chains: int | None = None) -> int:
        """Iterations per chain (tune + draws) that ``chains`` chains (default: the step's
        ``chains``) can run at the fixed ``noise_multiplier`` within ``(epsilon, delta)``
        (default: the step's ``epsilon``)."""
        epsilon = self.epsilon if epsilon is None else check_epsilon(epsilon)
        if epsilon is None:
            raise ValueError("Give `epsilon`: this step has no budget to check against.")
        chains = self.chains if chains is None else int(chains)
        if chains < 1:
            raise ValueError(f"`chains` must be >= 1, got {chains}")
        mu_chain_iteration = chains * self._mu_per_iteration(self._base_noise_multipliers())
        return max_iterations(mu_chain_iteration, epsilon, self.delta)

    def ledger(self, tune: int, draws: int, chains: int | None = None) -> PrivacyLedger:
        """The ledger of a run of ``chains`` x (``tune`` + ``draws``) iterations."""
        if chains is not None:
            self.chains = int(chains)
        iterations = int(tune) + int(draws)
        multipliers = self.noise_multipliers(iterations)
        counts = self._releases_per_iteration()
        return PrivacyLedger(
            sampler=type(self).__name__,
            per_chain=tuple(
                GaussianMechanism(k, multipliers[k], counts[k] * iterations) for k in multipliers
            ),
            chains=self.chains,
            delta=self.delta,
            target_epsilon=self.epsilon,
            releasable=not self.diagnostics,
        )

    def setup_chain(self, rng: RandomGenerator, tune: int, draws: int) -> None:
        """Calibrate the noise for the run and reset per-chain state, before touching data."""
        super().setup_chain(rng, tune, draws)
        self._cum_eps = self._prepare_run(int(tune) + int(draws))  # may refuse the run
        self._iteration = 0
        self._setup_done = True
        if not self._managed:
            warnings.warn(
                "Plain pm.sample stores the private data in the result (observed_data, "
                "constant_data). Publish only the output of pdp.sample, or pdp.sanitize(idata).",
                UserWarning,
                stacklevel=2,
            )
            self._managed = True  # once per step object

    def _prepare_run(self, iterations: int) -> np.ndarray:
        """Set the noise for a run of ``iterations`` per chain; return this chain's epsilon after
        each iteration."""
        multipliers = self.noise_multipliers(iterations)
        self._set_noise(multipliers)
        mu_it = self._mu_per_iteration(multipliers)
        self._cum_mu = mu_it * np.arange(1, iterations + 1)
        return np.asarray(gaussian_epsilon(self._cum_mu, self.delta), dtype=float)

    def _privacy_stats(self) -> dict:
        if not self._setup_done:
            raise RuntimeError(f"{type(self).__name__}.setup_chain was not called.")
        i = min(self._iteration, len(self._cum_eps) - 1)
        self._iteration += 1
        stats = {"dp_epsilon": self._cum_eps[i], "dp_delta": self.delta}
        if "dp_mu" in self.releasable_stats:
            stats["dp_mu"] = self._cum_mu[i]
        return stats

    @staticmethod
    def competence(var, has_grad):
        from pymc.step_methods.compound import Competence

        return Competence.INCOMPATIBLE  # never assigned automatically
