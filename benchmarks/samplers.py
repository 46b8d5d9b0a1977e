"""Time per iteration of DPPenalty against ``pm.Metropolis`` inside ``pm.sample``.

Each sampler is timed as the slope of the wall time of ``pm.sample(draws=N)`` between two values
of N (one chain, one core, no tuning), so compilation and result building cancel and PyMC's own
loop overhead is counted for both alike.

``pm.Metropolis`` on a vector variable updates its elements one at a time (``d`` log-density
differences per iteration); DPPenalty makes one proposal per iteration. A Metropolis step with a
single joint proposal (``elemwise_update = False``) is the like-for-like baseline.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pymc as pm

from benchmarks.models import Problem
from benchmarks.timing import slope_ms
from pymc_dp import DPPenalty

__all__ = ["sampler_rows"]


def _runner(problem: Problem, make_step: Callable[[], object]) -> Callable[[int], object]:
    with problem.model:
        step = make_step()

    def run(draws: int) -> object:
        return pm.sample(
            draws=draws,
            tune=0,
            chains=1,
            cores=1,
            step=step,
            model=problem.model,
            random_seed=0,
            progressbar=False,
            compute_convergence_checks=False,
        )

    return run


def _joint_metropolis() -> pm.Metropolis:
    step = pm.Metropolis(tune=False)
    step.elemwise_update = False  # one proposal for the whole vector: one logp difference
    return step


def sampler_rows(
    problem: Problem, sizes: tuple[int, int], repeats: int
) -> list[tuple[str, float, str, float]]:
    """Rows ``(sampler, ms/iteration, baseline, ratio)`` for one problem."""
    scale = 0.1 / np.sqrt(problem.n)  # timing only: the scale does not change the cost

    def dp(proposal: str) -> Callable[[], DPPenalty]:
        # A fixed noise multiplier: timing runs must not be refused by a budget.
        return lambda: DPPenalty(
            noise_multiplier=100.0,
            llr_clip=problem.row_norm_bound,
            proposal_scale=scale,
            proposal=proposal,
            chains=1,
        )

    small, large = sizes
    elementwise_sizes = (max(2, small // problem.d), max(4, large // problem.d))
    times = {
        "pm.Metropolis (joint proposal)": slope_ms(
            _runner(problem, _joint_metropolis), small, large, repeats
        ),
        f"pm.Metropolis (default: {problem.d} element updates)": slope_ms(
            _runner(problem, lambda: pm.Metropolis(tune=False)), *elementwise_sizes, repeats
        ),
    }
    joint = "pm.Metropolis (joint proposal)"
    rows = []
    for proposal in ("random_walk", "gwmh"):
        ms = slope_ms(_runner(problem, dp(proposal)), small, large, repeats)
        rows.append((f"DPPenalty ({proposal})", ms, joint, ms / times[joint]))
    rows += [(name, ms, "", float("nan")) for name, ms in times.items()]
    return rows
