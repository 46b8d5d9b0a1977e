"""A toy DP step written as a newcomer would add one: one class filling DPStep's three hooks, and
one registration line. ``conftest.py`` imports this module, so the privacy contract
(``test_privacy_contract.py``) runs it like a shipped step, with no edit there."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from pymc_dp.mechanisms import PenaltyTest
from pymc_dp.step_methods.base import PRIVACY_STATS, DPStep, Stat
from pymc_dp.step_methods.registry import Example, register


class ToyWalk(DPStep):
    """Random-walk Metropolis with the penalty test on the full-data log-likelihood ratio, per-row
    ratios clipped to ``+-llr_clip |q' - q|`` (sensitivity twice that)."""

    name = "toy_walk"
    stats: ClassVar[dict[str, Stat]] = {**PRIVACY_STATS, "noise_std": Stat(np.float64)}
    test = PenaltyTest("log-likelihood ratio")

    def __init__(self, vars=None, *, llr_clip: float, proposal_scale: float, **kwargs) -> None:
        self.llr_clip, self.proposal_scale = float(llr_clip), float(proposal_scale)
        super().__init__(vars, **kwargs)
        self._kernel = self.likelihood.ratio_kernel()

    def mechanisms(self) -> tuple[PenaltyTest]:
        return (self.test,)

    def _iterate(self, q: np.ndarray) -> tuple[np.ndarray, dict]:
        q_new = q + self.proposal_scale * self.rng.standard_normal(q.size)
        bound = self.llr_clip * float(np.linalg.norm(q_new - q))
        total, prior_new = (float(v) for v in self._kernel(q_new, q, bound)[:2])
        log_ratio, sigma = self.test.log_ratio(self.chain.noise, total, 2 * bound, self._scale)
        log_alpha = log_ratio + prior_new - self._prior_at(q)
        q_next, accepted = self._metropolis(q, q_new, log_alpha, prior_new)
        return q_next, {"accepted": accepted, "noise_std": sigma}


register(ToyWalk, toy_walk=Example({"llr_clip": 3.0, "proposal_scale": 0.05}))
