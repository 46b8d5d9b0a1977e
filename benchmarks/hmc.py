"""DPHMC against ``pm.HamiltonianMC`` with the same number of leapfrog steps, and DPHMC's accuracy
on the thesis' easy-2d banana at epsilon = 4 against the thesis median MMD (0.26).

Iterations are timed as in :mod:`benchmarks.samplers`: the loop body of ``pm.sample``'s chain
after ``setup_chain``, on the same model from the same point.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm

import pymc_dp as pdp
from benchmarks.models import Problem
from benchmarks.samplers import _iteration
from benchmarks.timing import per_call_ms
from pymc_dp.evaluation import mmd
from pymc_dp.examples import banana

__all__ = ["hmc_rows", "banana_mmd_rows"]

N_STEPS = 10
THESIS_MMD_EPS4 = 0.26


def hmc_rows(problem: Problem, repeats: int) -> list[tuple[str, float, str, float]]:
    """Rows ``(sampler, ms/iteration, baseline, ratio)``: both samplers take 10 leapfrog steps."""
    step_size = 0.1 / np.sqrt(problem.n)  # timing only: acceptance does not change the cost
    # PyMC: step = step_scale / d^(1/4); path_length / step = N_STEPS (+0.5 against rounding)
    scale = step_size * problem.d**0.25

    def pymc_hmc() -> pm.HamiltonianMC:
        return pm.HamiltonianMC(
            step_scale=scale,
            path_length=(N_STEPS + 0.5) * step_size,
            adapt_step_size=False,
            step_rand=lambda s, rng=None: s,  # no jitter: exactly N_STEPS steps
        )

    def dphmc(exact_noise: bool = False) -> pdp.DPHMC:
        return pdp.DPHMC(
            exact_noise=exact_noise,
            noise_multiplier=100.0,  # fixed noise, no budget: a timing loop must not hit one
            step_size=step_size,
            n_steps=N_STEPS,
            llr_clip=problem.row_norm_bound,
            grad_clip=problem.row_norm_bound,
            chains=1,
        )

    base = per_call_ms(_iteration(problem, pymc_hmc), repeats=repeats)
    ms = per_call_ms(_iteration(problem, dphmc), repeats=repeats)
    exact = per_call_ms(_iteration(problem, lambda: dphmc(exact_noise=True)), repeats=repeats)
    name = f"pm.HamiltonianMC ({N_STEPS} steps)"
    return [
        (f"DPHMC (L = {N_STEPS})", ms, name, ms / base),
        (f"DPHMC (L = {N_STEPS}, exact_noise)", exact, name, exact / base),
        (name, base, "", float("nan")),
    ]


def banana_mmd_rows(runs: int = 10, seed: int = 0) -> list[tuple]:
    """Thesis protocol on easy-2d (Table 6.1): eps = 4, delta = 0.1/n, tau_l .1, tau_g .4, L 10,
    eta 5e-4, b_l 2, b_g 1; 416 iterations, first half discarded; start theta* + N(0, 0.02^2);
    MMD to 1000 exact draws; median over runs. DPPenalty (tau .1, sd .008, b_l 2; 702 iterations)
    alongside."""
    b = banana(n=100_000, d=2, a=20.0, seed=seed)
    rng = np.random.default_rng(seed)
    exact = b.exact_posterior(1000, rng)
    model = b.model()
    delta = 0.1 / b.n
    scores: dict[str, list[float]] = {"DPHMC": [], "DPPenalty": []}
    acc: dict[str, list[float]] = {"DPHMC": [], "DPPenalty": []}
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hmc = pdp.DPHMC(
            epsilon=4.0,
            delta=delta,
            chains=1,
            step_size=5e-4,
            n_steps=10,
            llr_clip=2.0,
            grad_clip=1.0,
        )
        pen = pdp.DPPenalty(epsilon=4.0, delta=delta, chains=1, llr_clip=2.0, proposal_scale=0.008)
        for r in range(runs):
            init = {"theta": np.array([0.0, 3.0]) + 0.02 * rng.standard_normal(2)}
            for name, step, its in (("DPHMC", hmc, 416), ("DPPenalty", pen, 702)):
                idata = pdp.sample(
                    draws=its // 2,
                    tune=its - its // 2,
                    chains=1,
                    cores=1,
                    step=step,
                    random_seed=1000 * seed + r,
                    initvals=init,
                    progressbar=False,
                    compute_convergence_checks=False,
                )
                x = idata.posterior["theta"].values.reshape(-1, 2)
                scores[name].append(mmd(x, exact))
                acc[name].append(float(idata.sample_stats["accepted"].mean()))
    thesis = {"DPHMC": (THESIS_MMD_EPS4, 0.64), "DPPenalty": (0.15, 0.37)}
    return [
        (
            name,
            float(np.median(scores[name])),
            thesis[name][0],
            float(np.median(acc[name])),
            thesis[name][1],
            runs,
        )
        for name in scores
    ]
