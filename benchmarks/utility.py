"""Utility on real data: the DP samplers' zero-tuning calls against NUTS (and d3p's DPVI).

For each data set of :mod:`benchmarks.realdata` and each epsilon, every sampler is called the
way the README's quickstart calls it: budget and public clip bounds only (covariates encoded into
[-1, 1] from their codebook ranges, so a row's L2 norm is at most sqrt(d) and every |x_j| <= 1),
run with ``pdp.sample(draws=1000, tune=1000, chains=4)``. Columns: mean error in NUTS posterior
sds (max and median over coefficients), sd ratio to NUTS (min and max), R-hat (max), bulk ESS
(min), wall time, epsilon spent, and the planner's recommendation made before the run. d3p's rows
are read from the cache of :func:`benchmarks.realdata.d3p_fit` (its environment is separate).

``python -m benchmarks.utility [--names ...] [--eps 1 4] [--samplers ...] [--quick]``
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable

import arviz as az
import numpy as np

import pymc_dp as pdp
from benchmarks import realdata
from benchmarks.timing import format_table

__all__ = ["SAMPLERS", "main", "run", "utility_rows"]

#: ``(data, epsilon, noise_seed) -> step``; the seed goes to the step, whose warm start runs
#: when it is made.
Factory = Callable[[realdata.RealData, float, int], pdp.DPStep]


def _minibatch(data: realdata.RealData, eps: float, seed: int) -> pdp.DPStep:
    """DPMinibatchPenalty does not tune itself (its sensitivity is not linear in the step): its
    proposal is the planner's step (public), started from the same private warm start."""
    planned = pdp.plan(epsilon=eps, llr_clip=data.abs_bounds)
    return pdp.DPMinibatchPenalty(
        epsilon=eps,
        batch_size=min(max(1000, data.n // 10), data.n // 2),  # a batch, even at n = 569
        llr_clip=data.abs_bounds,
        proposal_scale=planned.penalty_step_sd * planned.posterior_sd,
        proposal="gwmh",
        sampling="poisson",
        warm_start=0.5,
        noise_seed=seed,
    )


#: The zero-tuning calls: nothing but the budget and public clip bounds. (DPBarker is left out:
#: it samples a posterior tempered to n0 rows, by design wider than NUTS' on n rows.)
SAMPLERS: dict[str, Factory] = {
    "DPLaplace": lambda data, eps, seed: pdp.DPLaplace(
        epsilon=eps, grad_clip=data.row_norm_bound, noise_seed=seed
    ),
    "DPPenalty": lambda data, eps, seed: pdp.DPPenalty(
        epsilon=eps, llr_clip=data.abs_bounds, noise_seed=seed
    ),
    "DPHMC": lambda data, eps, seed: pdp.DPHMC(
        epsilon=eps, llr_clip=data.row_norm_bound, grad_clip=data.row_norm_bound, noise_seed=seed
    ),
    "DPMinibatchPenalty": _minibatch,
}
#: The data sets of the table: the issue's, with randhie as logistic regression (the Poisson
#: variant needs its own clip bounds, ``pdp.glm_clip``, and is left to ``--names``).
NAMES = ["synthetic_1e5", "synthetic_1e6", "randhie", "fair", "breast_cancer"]


def run(
    name: str, sampler: str, epsilon: float, *, draws: int = 1000, tune: int = 1000, seed: int = 1
) -> dict:
    """One zero-tuning run; its comparison with NUTS and its diagnostics."""
    # noise_seed makes the table reproducible (the report marks such runs NOISE SEEDED)
    data = realdata.load(name)
    ref = realdata.nuts_reference(name)
    model = realdata.model(data)
    start = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = SAMPLERS[sampler](data, epsilon, seed)
        idata = pdp.sample(
            noise_seed=seed,
            draws=draws,
            tune=tune,
            chains=4,
            cores=2,
            step=step,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
    seconds = time.perf_counter() - start
    post = idata.posterior["beta"]
    fit = {"mean": post.mean(("chain", "draw")).values, "sd": post.std(("chain", "draw")).values}
    out = realdata.compare(fit, ref)
    out.update(
        rhat=float(np.max(az.rhat(post).values)),
        ess=float(np.min(az.ess(post).values)),
        seconds=seconds,
        epsilon=pdp.privacy_report(idata).epsilon,
        accept=float(idata.sample_stats["accepted"].mean()),
    )
    return out


def utility_rows(
    names: list[str], epsilons: list[float], samplers: list[str], draws: int, tune: int
) -> list[tuple]:
    """Rows of the utility table (d3p rows from the cache when present)."""
    rows = []
    for name in names:
        data = realdata.load(name)
        for eps in epsilons:
            with realdata.model(data):
                planned = pdp.plan(epsilon=eps, llr_clip=data.abs_bounds, draws=draws, tune=tune)
            verdict = planned.recommended + ("" if planned.feasible else " (infeasible)")
            for sampler in samplers:
                if sampler == "DPHMC" and data.n > 200_000:
                    continue  # L + 2 kernel calls per iteration: minutes per run at n = 1e6
                r = run(name, sampler, eps, draws=draws, tune=tune)
                print(f"  {name} eps={eps:g} {sampler}: {r}", file=sys.stderr, flush=True)
                rows.append(
                    (
                        name,
                        data.n,
                        eps,
                        sampler,
                        r["z_max"],
                        r["z_med"],
                        f"{r['sd_ratio_min']:.2f}-{r['sd_ratio_max']:.2f}",
                        r["rhat"],
                        r["ess"],
                        r["seconds"],
                        r["epsilon"],
                        verdict if sampler == planned.recommended else "",
                    )
                )
            fits = _cached_d3p(name, eps)
            if fits:
                ref = realdata.nuts_reference(name)
                cs = [realdata.compare(fit, ref) for fit in fits]
                rows.append(
                    (
                        name,
                        data.n,
                        eps,
                        f"d3p DPVI (median of {len(fits)} seeds)",
                        float(np.median([c["z_max"] for c in cs])),
                        float(np.median([c["z_med"] for c in cs])),
                        f"{np.median([c['sd_ratio_min'] for c in cs]):.2f}-"
                        f"{np.median([c['sd_ratio_max'] for c in cs]):.2f}",
                        float("nan"),
                        float("nan"),
                        float(np.median([fit["seconds"] for fit in fits])),
                        eps,
                        "",
                    )
                )
    return rows


def _cached_d3p(name: str, eps: float) -> list[dict]:
    """d3p's fits from the cache (its environment is separate: ``benchmarks/d3p_env.sh``)."""
    return [
        realdata.d3p_fit(name, eps, seed)
        for seed in range(3)
        if realdata._cache_path(f"{name}_d3p_eps{eps:g}_seed{seed}", ".json").exists()
    ]


HEADER = [
    "data",
    "n",
    "eps",
    "sampler",
    "max |z|",
    "med |z|",
    "sd ratio",
    "R-hat",
    "ESS",
    "secs",
    "eps spent",
    "planner",
]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--names", nargs="+", default=NAMES)
    p.add_argument("--eps", nargs="+", type=float, default=[1.0, 4.0])
    p.add_argument("--samplers", nargs="+", default=list(SAMPLERS))
    p.add_argument("--quick", action="store_true", help="200 + 200 iterations")
    args = p.parse_args(argv)
    draws = tune = 200 if args.quick else 1000
    rows = utility_rows(args.names, args.eps, args.samplers, draws, tune)
    print(format_table(HEADER, rows))


if __name__ == "__main__":
    main()
