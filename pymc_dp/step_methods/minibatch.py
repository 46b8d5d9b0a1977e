"""Shared machinery of the minibatch DP steps: batch sampling and subsampled accounting.

A minibatch step reads ``batch_size`` rows per iteration, so an iteration costs O(batch) whatever
n is, and the random choice of the rows amplifies privacy. The batch is drawn from the step's own
NumPy generator (never ``pm.Minibatch``, whose graph RNG ``random_seed`` does not control):

* ``"fixed_size"``: b rows uniformly without replacement (``Generator.choice``, O(b)); accounted
  under replace-one neighbours by Wang, Balle & Kasiviswanathan (2019).
* ``"poisson"``: every row independently with probability q = b / n, drawn as a Binomial(n, q)
  size and then that many rows without replacement (the same distribution, in O(b)); accounted
  with dp-accounting's PLD under replace-one neighbours. The realised batch size is *not*
  released: knowing it changes the mechanism the accountant analyses.

Unlike the full-data steps, the cost of a run is not a closed form in the noise, so calibration
bisects the noise multiplier against the ledger (rounding towards more noise), and ``dp_epsilon``
after each iteration comes from the same accountant (for PLD: exact on a geometric grid of
iteration counts and stepped up in between, so it is an upper bound that is exact at the end).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

import numpy as np

from pymc_dp.accounting._validate import check_count, check_epsilon
from pymc_dp.accounting.gaussian import gaussian_mu_for_budget
from pymc_dp.accounting.ledger import PrivacyLedger
from pymc_dp.accounting.rdp import largest_count, rdp_epsilon_curve
from pymc_dp.step_methods.base import DPStep, PrivacyBudgetError

__all__ = ["MinibatchDPStep", "Sampling"]

Sampling = Literal["fixed_size", "poisson"]

# relative precision of the calibrated noise multiplier (always rounded towards more noise)
_CALIBRATION_RTOL = 1e-4
_PLD_GRID_POINTS = 40


class MinibatchDPStep(DPStep):
    """Base class of the minibatch DP steps (not used directly).

    Parameters
    ----------
    batch_size : int
        Rows per iteration b (2 <= b <= n); with ``sampling="poisson"`` the expected size.
    sampling : {"fixed_size", "poisson"}
        How the batch is drawn (see the module docstring).
    **kwargs
        See :class:`~pymc_dp.step_methods.base.DPStep`.
    """

    releasable_stats: ClassVar[dict] = {
        "accepted": (bool, []),
        "dp_epsilon": (np.float64, []),
        "dp_delta": (np.float64, []),
        "batch_size": (np.int64, []),
    }
    _sampling_schemes: ClassVar[tuple[str, ...]] = ("fixed_size", "poisson")

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        batch_size: int,
        sampling: Sampling = "fixed_size",
        **kwargs,
    ) -> None:
        if sampling not in self._sampling_schemes:
            raise ValueError(
                f"`sampling` must be one of {self._sampling_schemes} for {type(self).__name__}, "
                f"got {sampling!r}"
            )
        b = check_count(batch_size, "batch_size", minimum=2)
        super().__init__(vars, **kwargs)
        if b > self.n_rows:
            raise ValueError(
                f"`batch_size` ({b}) must be at most the number of rows n = {self.n_rows}"
            )
        self.batch_size = b
        self.sampling = sampling
        self._noise_cache: dict[tuple, float | None] = {}  # calibration is seconds for RDP/PLD
        self._curve_cache: dict[tuple, np.ndarray] = {}

    # ------------------------------------------------------------------ batches
    def _draw_batch(self) -> np.ndarray:
        n, b = self.n_rows, self.batch_size
        if self.sampling == "poisson":
            b = int(self.rng.binomial(n, b / n))
        # order is irrelevant (sums over the batch): skipping the shuffle saves ~30% of the draw
        return self.rng.choice(n, b, replace=False, shuffle=False)

    # ------------------------------------------------------------------ subclass interface
    def _mechanisms(self, noise: float | None, iterations: int) -> tuple:
        """The releases of one chain running ``iterations`` iterations at ``noise``."""
        raise NotImplementedError

    def _set_noise(self, noise: float | None) -> None:  # type: ignore[override]
        self._s = noise

    # ------------------------------------------------------------------ accounting
    def _ledger(self, noise: float | None, iterations: int, chains: int) -> PrivacyLedger:
        return PrivacyLedger(
            sampler=type(self).__name__,
            per_chain=self._mechanisms(noise, iterations),
            chains=chains,
            delta=self.delta,
            target_epsilon=self.epsilon,
            releasable=not self.diagnostics,
        )

    def _run_epsilon(self, noise: float | None, iterations: int, chains: int) -> float:
        return self._ledger(noise, iterations, chains).epsilon

    def calibrated_noise(self, iterations: int) -> float | None:
        """Noise multiplier for ``chains`` chains of ``iterations`` iterations.

        Raises :class:`~pymc_dp.step_methods.base.PrivacyBudgetError` when a fixed noise (or, for
        steps without a noise knob, the run itself) would overspend ``epsilon``.
        """
        key = (self.chains, int(iterations), self.epsilon, self.delta, self.noise_multiplier)
        if key not in self._noise_cache:
            self._noise_cache[key] = self._calibrate(int(iterations))
        return self._noise_cache[key]

    def _calibrate(self, iterations: int) -> float | None:
        fixed = self.noise_multiplier if self._needs_budget else None
        if fixed is not None or not self._needs_budget or self.epsilon is None:
            spent = self._run_epsilon(fixed, iterations, self.chains)
            if self.epsilon is not None and spent > self.epsilon:
                raise PrivacyBudgetError(
                    f"{self.chains} chains x {iterations} iterations (tune + draws) of "
                    f"{type(self).__name__} spend epsilon={spent:.4g} > epsilon={self.epsilon} "
                    f"at delta={self.delta:.3g}; the budget affords at most "
                    f"{self.max_iterations()} iterations per chain. Lower tune/draws/chains"
                    + (", raise noise_multiplier, or give only epsilon." if fixed else ".")
                )
            return fixed

        def spends(s: float) -> bool:
            return self._run_epsilon(s, iterations, self.chains) > self.epsilon

        # The same releases without subsampling spend about the budget: bracket from there.
        mu = gaussian_mu_for_budget(self.epsilon, self.delta)
        hi = float(np.sqrt(self.chains * iterations / (2.0 * mu)))
        while spends(hi):
            hi *= 2.0
        lo = hi / 2.0
        while not spends(lo) and lo > 1e-8:
            hi, lo = lo, lo / 2.0
        while hi / lo > 1.0 + _CALIBRATION_RTOL:
            mid = float(np.sqrt(lo * hi))
            lo, hi = (mid, hi) if spends(mid) else (lo, mid)
        return hi  # the noisier end: never over budget

    def max_iterations(self, epsilon: float | None = None, chains: int | None = None) -> int:
        """Iterations per chain (tune + draws) that ``chains`` chains can run within
        ``(epsilon, delta)`` at the fixed ``noise_multiplier`` (default: the step's budget)."""
        epsilon = self.epsilon if epsilon is None else check_epsilon(epsilon)
        if epsilon is None:
            raise ValueError("Give `epsilon`: this step has no budget to check against.")
        chains = self.chains if chains is None else int(chains)
        if chains < 1:
            raise ValueError(f"`chains` must be >= 1, got {chains}")
        noise = self.noise_multiplier if self._needs_budget else None
        if self._needs_budget and noise is None:
            raise ValueError("`max_iterations` needs a fixed `noise_multiplier`.")
        return largest_count(lambda k: self._run_epsilon(noise, k, chains) <= epsilon)

    def ledger(self, tune: int, draws: int, chains: int | None = None) -> PrivacyLedger:
        """The ledger of a run of ``chains`` x (``tune`` + ``draws``) iterations."""
        if chains is not None:
            self.chains = int(chains)
        iterations = int(tune) + int(draws)
        return self._ledger(self.calibrated_noise(iterations), iterations, self.chains)

    def _prepare_run(self, iterations: int) -> np.ndarray:
        noise = self.calibrated_noise(iterations)
        self._set_noise(noise)
        key = (noise, iterations, self.delta)
        if key not in self._curve_cache:
            self._curve_cache[key] = self._epsilon_curve(noise, iterations)
        return self._curve_cache[key]

    def _epsilon_curve(self, noise: float | None, iterations: int) -> np.ndarray:
        """One chain's epsilon after each of ``iterations`` iterations."""
        one = self._ledger(noise, 1, chains=1)
        if iterations == 0:
            return np.zeros(0)
        if one.regime == "rdp":  # exact after every iteration: k times the per-iteration curve
            return rdp_epsilon_curve(*one.rdp_curve(), iterations, self.delta)
        # PLD: exact on a geometric grid of counts, stepped up in between (an upper bound)
        grid = np.unique(np.geomspace(1, iterations, _PLD_GRID_POINTS).round().astype(int))
        eps_grid = np.array([self._run_epsilon(noise, int(k), 1) for k in grid])
        return eps_grid[np.searchsorted(grid, np.arange(1, iterations + 1))]

    def _privacy_stats(self) -> dict:
        stats = super()._privacy_stats()
        stats["batch_size"] = self.batch_size
        return stats
