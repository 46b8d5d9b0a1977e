"""Mechanisms: what a DP step releases, with its sensitivity, noise and privacy cost.

A step is a proposal plus one or more mechanisms. A mechanism knows

* how to release (clip happened in the compiled kernel; here: noise from the chain's
  :class:`~pymc_dp.noise.NoiseSource` and the test it feeds), and
* its privacy cost: :meth:`Mechanism.entries` describes ``iterations`` iterations of releases at a
  noise ``scale`` as ledger entries (:mod:`pymc_dp.accounting.ledger`). Every mechanism of a step
  scales its noise with the step's single knob ``scale`` (``noise multiplier = scale *
  relative_noise``), so :mod:`pymc_dp.runplan` can calibrate the knob for a budget, the ledger can
  count a run, and the planner can predict one, all from the same description.

Noise multipliers are noise std over the L2 sensitivity under replace-one neighbours.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from pymc_dp.accounting.ledger import (
    BarkerMechanism,
    GaussianMechanism,
    SubsampledGaussianMechanism,
)
from pymc_dp.noise import NoiseSource

__all__ = [
    "BarkerTest",
    "GaussianRelease",
    "Mechanism",
    "PenaltyTest",
    "SubsampledPenaltyTest",
    "clipped_sum_sensitivity",
]


def clipped_sum_sensitivity(bound: float, tempering: float = 1.0) -> float:
    """Replace-one L2 sensitivity of ``T * sum_i c_i`` with every row's term ``c_i`` clipped to
    norm ``bound``: one person's term moves from one value in the ball to another, ``2 T
    bound``. Every release of a clipped full-data sum takes its sensitivity from here."""
    return 2.0 * tempering * bound


class Mechanism(ABC):
    """A kind of release a step makes ``per_iteration`` times per iteration."""

    #: Whether the noise is set by the step's knob (False: DP Barker, whose noise is its test's).
    tunable: ClassVar[bool] = True
    #: Whether every release is a Gaussian mechanism on the full data (exact PLD composition).
    gaussian: ClassVar[bool] = True

    @abstractmethod
    def entries(self, scale: float | None, iterations: int) -> tuple:
        """Ledger entries of ``iterations`` iterations at noise knob ``scale``."""


@dataclass(frozen=True)
class GaussianRelease(Mechanism):
    """A clipped sum (scalar or vector) released with Gaussian noise: a Gaussian mechanism.

    ``relative_noise`` is its noise multiplier at knob 1 (e.g. DPHMC's gradients use
    ``grad_noise_ratio`` times the ratio's).
    """

    name: str
    per_iteration: int = 1
    relative_noise: float = 1.0

    def entries(self, scale: float | None, iterations: int) -> tuple:
        s = float(scale) * self.relative_noise
        return (GaussianMechanism(self.name, s, self.per_iteration * int(iterations)),)

    def release(
        self, noise: NoiseSource, value, sensitivity: float, scale: float
    ) -> tuple[object, float]:
        """``(value + noise, noise std)``: snapped Gaussian noise of multiplier ``scale *
        relative_noise`` for the L2 ``sensitivity``."""
        s = scale * self.relative_noise
        dim = int(np.size(value))
        return noise.gaussian(value, sensitivity, s), noise.gaussian_std(sensitivity, s, dim)


@dataclass(frozen=True)
class PenaltyTest(GaussianRelease):
    """The penalty test of Ceperley & Dewing (1999) on a Gaussian-privatised log-likelihood ratio.

    Releasing ``lambda + xi``, ``xi ~ N(0, sigma^2)``, and accepting with probability
    ``min(1, exp(lambda + xi - sigma^2 / 2 + other terms))`` keeps the chain's target exact:
    ``E[exp(xi - sigma^2/2)] = 1`` (Yildirim & Ermis 2019; Raisa 2021, section 3.1).
    """

    name: str = "log-likelihood ratio"

    def log_ratio(
        self, noise: NoiseSource, llr: float, sensitivity: float, scale: float
    ) -> tuple[float, float]:
        """``(released ratio - sigma^2 / 2, sigma)``: the privatised, penalised log ratio."""
        released, sigma = self.release(noise, llr, sensitivity, scale)
        # sigma * sigma: a diverged trajectory (huge step, huge sigma) gives -inf, a rejection,
        # where sigma**2 would raise OverflowError
        return float(released) - 0.5 * sigma * sigma, sigma


@dataclass(frozen=True)
class SubsampledPenaltyTest(PenaltyTest):
    """The penalty test on a random batch (Raisa 2021, section 3.3): a subsampled Gaussian
    mechanism, accounted by dp-accounting (fixed-size: RDP, Poisson: PLD)."""

    name: str = "batch log-likelihood ratio minus half its variance estimate"
    dataset_size: int = 0
    batch_size: int = 0
    sampling: str = "fixed_size"

    gaussian: ClassVar[bool] = False

    def entries(self, scale: float | None, iterations: int) -> tuple:
        return (
            SubsampledGaussianMechanism(
                self.name,
                noise_multiplier=float(scale) * self.relative_noise,
                dataset_size=self.dataset_size,
                batch_size=self.batch_size,
                count=self.per_iteration * int(iterations),
                sampling=self.sampling,
            ),
        )


@dataclass(frozen=True)
class BarkerTest(Mechanism):
    """DP Barker's acceptance test on a fixed-size batch: its own noise is the privacy noise
    (Heikkila et al. 2019, eq. 11, amplified by WBK19 Thm 9); no knob."""

    batch_size: int
    dataset_size: int
    name: str = "Barker test on a batch"

    tunable: ClassVar[bool] = False
    gaussian: ClassVar[bool] = False

    def entries(self, scale: float | None, iterations: int) -> tuple:
        return (BarkerMechanism(self.name, self.batch_size, self.dataset_size, int(iterations)),)

    #: Variance of the Gaussian part of the logistic decomposition; eq. 11 needs C - s^2 >= 1.
    C: ClassVar[float] = 2.0

    def accept(
        self, noise: NoiseSource, delta_star: float, batch_variance: float, correction
    ) -> bool:
        """Barker's test ``delta* + N(0, C - s^2) + V_corr > 0`` with the batch's variance
        ``s^2`` supplying the rest of ``N(0, C)`` and ``V_corr`` drawn from ``correction``
        (:mod:`~pymc_dp.step_methods.barker_correction`), all from the chain's secret noise.
        Outside the prior's support (a non-finite ``delta*``) or with ``C - s^2 < 1`` (which
        the clip bound rules out) it rejects."""
        rest = self.C - batch_variance
        if not (rest >= self.C - 1.0 and np.isfinite(delta_star)):
            return False
        secret = noise.generator
        test = delta_star + np.sqrt(rest) * secret.standard_normal()
        return bool(test + correction.sample(secret) > 0.0)
