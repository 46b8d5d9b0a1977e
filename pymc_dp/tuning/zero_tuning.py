"""Zero tuning as a step uses it: the warm start's share, its one run, and the chains' adaptation.

A step given no proposal scale or step size spends a share of its budget, when it is built, on the
private warm start (:func:`~pymc_dp.tuning.warm_start.warm_start`); every chain then starts from a
draw of that fit and takes its proposal covariance or mass matrix from it, then re-estimates it
from its released warm-up draws (:class:`~pymc_dp.tuning.adaptation.WindowedCovariance`:
post-processing, no budget).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from pymc_dp.budget import WARM_START_STREAM, Budget
from pymc_dp.checks import check_nonnegative
from pymc_dp.likelihood import PerRowLikelihood
from pymc_dp.tuning.adaptation import WindowedCovariance
from pymc_dp.tuning.warm_start import WarmStart, WarmStartError, warm_start

__all__ = [
    "DEFAULT_WARM_START",
    "ZeroTuned",
    "adaptation_note",
    "run_warm_start",
    "warm_start_share",
]

#: Share of the budget a zero-tuning step spends on its private warm start.
DEFAULT_WARM_START = 0.5


def warm_start_share(warm_start: float | None, *, needed: bool, step: str) -> float:
    """The share a step spends on its warm start (default: :data:`DEFAULT_WARM_START` where the
    step tunes itself from it, else none), checked."""
    if warm_start is None:
        warm_start = DEFAULT_WARM_START if needed else 0.0
    share = check_nonnegative(warm_start, "warm_start")
    if share >= 1.0:
        raise ValueError(f"`warm_start` must be a share in [0, 1), got {warm_start!r}")
    if share == 0.0 and needed:
        raise ValueError(
            f"{step} without proposal_scale (or step_size) tunes itself from a private warm "
            "start: give `warm_start` in (0, 1)."
        )
    return share


def run_warm_start(
    likelihood: PerRowLikelihood,
    budget: Budget,
    share: float,
    *,
    grad_clip: float,
    hess_clip: float | None,
    tempering: float,
    steps: int,
    step: str,
) -> WarmStart | None:
    """Spend ``share`` of ``budget`` now, once for every chain of every run (None: no share).
    A refusal after the data were read says what was spent."""
    if share == 0.0:
        return None
    mu = budget.mu(share)
    try:
        return warm_start(
            likelihood,
            grad_clip=grad_clip,
            hess_clip=hess_clip,
            mu=mu,
            noise=budget.noise(WARM_START_STREAM),
            steps=steps,
            tempering=tempering,
        )
    except WarmStartError as err:
        raise WarmStartError(
            f"{step}: {err} Budget spent on the data: epsilon = {budget.epsilon_of(mu):.4g} "
            f"at delta = {budget.delta:.3g} (Gaussian PLD); report it with any later run."
        ) from None


def adaptation_note(adapted: tuple[str, str] | None, auto: bool, covariance: bool) -> str:
    """What the chains tune during warm-up, from released values only (for the ledger)."""
    if adapted is None or not auto:
        return ""
    scale, shape = adapted
    text = f"{scale} by dual averaging on the released accept_prob"
    if covariance:
        text += f"; {shape} from the warm-up draws (ESS-weighted windows)"
    return text


def chain_adaptation(warm: WarmStart, tune: int, mask: np.ndarray) -> WindowedCovariance:
    """A chain's covariance adaptation, starting from the warm start's shape."""
    return WindowedCovariance(warm.posterior_cov, tune, mask, initial_mean=warm.mean)


class ZeroTuned:
    """A step's zero-tuning hooks: whether it needs a warm start, what bounds the warm start
    uses, what its chains adapt, and the warm start's one run (:meth:`_run_warm_start`).

    Mixed into :class:`~pymc_dp.step_methods.base.DPStep`, which sets ``likelihood``, ``budget``,
    ``warm`` (None until the warm start ran), ``warm_start_share`` and ``_active`` (the
    coordinates the likelihood reads). A zero-tuning subclass overrides
    :meth:`_needs_warm_start`, :meth:`_warm_grad_clip` and :meth:`_set_shape`.
    """

    #: Zero tuning (no proposal scale / step size given): what it adapts, ``(scale, shape)``.
    adapted: ClassVar[tuple[str, str] | None] = None
    _auto: bool = False
    adapt_covariance: bool = False
    tempering: float = 1.0
    warm: WarmStart | None = None

    def _needs_warm_start(self) -> bool:
        """Zero-tuning configurations read their scales from the warm start."""
        return False

    def _adaptation(self) -> str:
        """What the chains tune during warm-up, from released values only (for the ledger)."""
        return adaptation_note(self.adapted, self._auto, self.adapt_covariance)

    def _shape_mask(self) -> np.ndarray | None:
        """Coordinates whose covariance adapts from the warm-up draws; None: no adaptation."""
        return self._active if self._auto and self.adapt_covariance else None

    def _set_shape(self, cov: np.ndarray) -> None:
        """Use ``cov`` (public) as the proposal covariance / inverse mass matrix."""
        raise NotImplementedError

    def _warm_grad_clip(self) -> float:
        """Per-row gradient bound of the warm start (public)."""
        raise ValueError(f"{type(self).__name__} has no gradient bound for a warm start.")

    def _warm_hess_clip(self) -> float | None:
        """Bound on one row's observed information (public), or None: gradient outer products."""
        return None

    def _shared_entries(self) -> tuple:
        """Releases made once for every chain (the warm start's), for the run's ledger."""
        return self.warm.entries if self.warm is not None else ()

    @property
    def fit_likelihood(self) -> PerRowLikelihood:
        """The kernels the warm start fits (its coordinates label the fit in the report)."""
        return self.likelihood

    def _run_warm_start(self, steps: int = 4) -> None:
        """Spend ``warm_start`` of the budget now, once for every chain of every run."""
        if not self.warm_start_share:
            return
        self.warm = run_warm_start(
            self.fit_likelihood,
            self.budget,
            self.warm_start_share,
            grad_clip=self._warm_grad_clip(),
            hess_clip=self._warm_hess_clip(),
            tempering=self.tempering,
            steps=steps,
            step=type(self).__name__,
        )
