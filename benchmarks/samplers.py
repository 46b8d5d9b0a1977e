"""Time per iteration of DPPenalty against ``pm.Metropolis``.

Each sampler is timed on the loop body of ``pm.sample``'s chain: ``point, stats =
step.step(point)`` after ``step.setup_chain``, on the same model from the same point. Recording the
trace costs the same for all samplers and is left out; so is ``pm.sample``'s per-call set-up, which
includes compilations whose wall time swings with other processes holding PyTensor's compile lock.

``pm.Metropolis`` on a vector variable updates its elements one at a time (``d`` log-density
differences per iteration); DPPenalty makes one proposal per iteration. A Metropolis step with a
single joint proposal (``elemwise_update = False``) is the like-for-like baseline.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pymc as pm

from benchmarks.models import Problem
from benchmarks.timing import compare_ms
from pymc_dp import DPPenalty

__all__ = ["JOINT", "sampler_rows"]

JOINT = "pm.Metropolis (joint proposal)"


def _iteration(problem: Problem, make_step: Callable[[], object]) -> Callable[[], None]:
    """One chain iteration as ``pm.sample`` runs it; the chain state persists across calls."""
    with problem.model:
        step = make_step()
    step.setup_chain(np.random.default_rng(0), 0, 10**6)
    step.tune = False
    state = {"point": dict(problem.point)}

    def iterate() -> None:
        state["point"], _ = step.step(state["point"])

    return iterate


def _joint_metropolis() -> pm.Metropolis:
    step = pm.Metropolis(tune=False)
    step.elemwise_update = False  # one proposal for the whole vector: one logp difference
    return step


def sampler_rows(problem: Problem, repeats: int) -> list[tuple[str, float, str, float]]:
    """Rows ``(sampler, ms/iteration, baseline, ratio)`` for one problem."""
    # Timing only: the proposal scale and noise change acceptance, not the cost of an iteration.
    scale = 0.1 / np.sqrt(problem.n)

    def dp(proposal: str, exact_noise: bool = False) -> Callable[[], DPPenalty]:
        # A fixed noise multiplier and no epsilon: a timing loop must not hit a budget.
        return lambda: DPPenalty(
            noise_multiplier=100.0,
            llr_clip=problem.row_norm_bound,
            proposal_scale=scale,
            proposal=proposal,
            chains=1,
            exact_noise=exact_noise,
        )

    elementwise = f"pm.Metropolis (default: {problem.d} element updates)"
    makers = {
        "DPPenalty (random_walk)": dp("random_walk"),
        "DPPenalty (gwmh)": dp("gwmh"),
        "DPPenalty (random_walk, exact_noise)": dp("random_walk", exact_noise=True),
        JOINT: _joint_metropolis,
        elementwise: lambda: pm.Metropolis(tune=False),
    }
    ms = compare_ms({k: _iteration(problem, make) for k, make in makers.items()}, repeats=repeats)
    rows = [(k, ms[k], JOINT, ms[k] / ms[JOINT]) for k in makers if k.startswith("DP")]
    rows += [(k, ms[k], "", float("nan")) for k in (JOINT, elementwise)]
    return rows
