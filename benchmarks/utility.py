"""Utility on real data: the DP samplers' zero-tuning calls against NUTS (and d3p's DPVI).

**The fit table** (:func:`fit_rows`, ``--fit``; issue 21's targets): per data set and epsilon,
``runs`` unseeded runs of ``pdp.DPLaplace`` called as the README quickstart calls it (clip bounds
from ``pdp.glm_clip``, ``hess_clip`` included), each ``pdp.sample(draws=500, tune=0, chains=4)``
(the draws are i.i.d. from the fit). One step is built per cell and renewed for each further run
(``step.renew()``: same compiled kernels, a fresh warm start with fresh noise). Columns: the
median and 90th percentile over runs of the largest ``|mean - NUTS mean| / NUTS sd`` over
coefficients and their ratio; coverage, the share of (coefficient, run) pairs whose NUTS mean is
inside the central 90% interval of the DP draws; the largest error in the fit's own sds; the
median sd ratio to NUTS; the planner's figure before the run (``pdp.plan(...)
.laplace_largest_error``, public facts) and after it (median of ``pdp.privacy_report(idata)
.fit_error["expected_largest_error"]``, released quantities); the cell's floor
(:func:`benchmarks.fit_floor.floor`); d3p's DPVI (median of its cached seeds' largest error, at
epsilon 1 and 4); the issue's target for the median and the other checks it states for every cell
(:data:`FIT_CHECKS`). Printed as text and as Markdown.

**The per-sampler table** (:func:`utility_rows`, the default): one seeded run per sampler.
For each data set of :mod:`benchmarks.realdata` and each epsilon, every sampler is called the
way the README's quickstart calls it: budget and public clip bounds only (covariates encoded into
[-1, 1] from their codebook ranges, so a row's L2 norm is at most sqrt(d) and every |x_j| <= 1),
run with ``pdp.sample(draws=1000, tune=1000, chains=4)``. Columns: mean error in NUTS posterior
sds (max and median over coefficients), sd ratio to NUTS (min and max), R-hat (max), bulk ESS
(min) and the planner's prediction of it (MCMC rows), wall time, epsilon spent, and the planner's
recommendation made before the run. ``DPPenalty(hess_clip)`` is the anchored chain (issue 24).
d3p's rows are read from the cache of :func:`benchmarks.realdata.d3p_fit` (its environment is
separate).

``python -m benchmarks.utility [--names ...] [--eps 1 4] [--samplers ...] [--quick]``
``python -m benchmarks.utility --fit [--names ...] [--eps 1 2 4] [--runs 10] [--draws 500]``
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from collections.abc import Callable

import arviz as az
import numpy as np

import pymc_dp as pdp
from benchmarks import fit_floor, realdata
from benchmarks.timing import format_table
from pymc_dp.tuning.warm_start import WarmStartError

__all__ = [
    "FIT_HEADER",
    "FIT_NAMES",
    "SAMPLERS",
    "fit_rows",
    "glm_clip",
    "main",
    "markdown_table",
    "run",
    "utility_rows",
]

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
    "DPPenalty(hess_clip)": lambda data, eps, seed: pdp.DPPenalty(
        epsilon=eps,
        llr_clip=glm_clip(data).llr_clip,
        hess_clip=glm_clip(data).hess_clip,
        noise_seed=seed,
    ),
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
                planned = pdp.plan(
                    epsilon=eps,
                    llr_clip=data.abs_bounds,
                    draws=draws,
                    tune=tune,
                    hess_clip=glm_clip(data).hess_clip,
                )
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
                        _predicted_ess(planned, sampler),
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
                        float("nan"),
                        float(np.median([fit["seconds"] for fit in fits])),
                        eps,
                        "",
                    )
                )
    return rows


def _predicted_ess(planned: pdp.Plan, sampler: str) -> float:
    """The planner's ESS of an MCMC row (before the run; it models unanchored chains by
    DPPenalty); NaN for the private fit, whose draws are independent."""
    if sampler == "DPLaplace":
        return float("nan")
    return planned.anchored["ess"] if "hess_clip" in sampler else planned.penalty_ess


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
    "ESS pred",
    "secs",
    "eps spent",
    "planner",
]


# ---------------------------------------------------------------------------------------------
# The fit table (issue 21): DPLaplace as the quickstart calls it, many unseeded runs per cell.

#: Default data sets of the fit table (``synthetic_1e6`` and ``randhie_poisson`` via ``--names``).
FIT_NAMES = ["synthetic_1e5", "randhie", "fair", "breast_cancer"]
#: Public bound of the linear predictor of ``randhie_poisson``: a mean of at most
#: ``POISSON_CAP`` = 30 visits a year, the counts' own public cap.
POISSON_ETA_BOUND = math.log(realdata.POISSON_CAP)
#: Issue 21's targets for the median largest error (NUTS sds), per (data set, epsilon).
FIT_TARGETS: dict[tuple[str, float], float] = {
    ("randhie", 4.0): 1.0,
    ("randhie", 2.0): 2.0,
    ("fair", 4.0): 1.5,
    ("breast_cancer", 4.0): 3.0,
    ("synthetic_1e5", 4.0): 0.25,
    ("synthetic_1e6", 4.0): 0.25,
}
#: Issue 21's checks for every cell: p90 within ``p90`` x the median (no lottery); coverage of
#: the 90% intervals at least ``coverage``; no run off by more than ``own_sd`` of its own sds;
#: the planner's figures before and after within ``planner`` x the measured median; below d3p.
FIT_CHECKS = {"p90": 2.5, "coverage": 0.85, "own_sd": 3.0, "planner": 2.0}
#: A run is wide when its median sd is more than this many NUTS sds: the fit fell back to about
#: the prior in most directions. Some runs wide and some not is a lottery the error columns
#: hide (the runs' sds are bimodal: 1.3-2.4x or 7-85x NUTS' on fair and randhie at epsilon 4).
WIDE_RUN = 5.0

FIT_HEADER = [
    "data",
    "n",
    "eps",
    "median",
    "p90",
    "p90/med",
    "coverage",
    "own sds",
    "sd ratio",
    "wide runs",
    "plan before",
    "plan after",
    "floor",
    "d3p",
    "target",
    "other checks",
    "secs",
]


def glm_clip(data: realdata.RealData) -> pdp.GLMClip:
    """The quickstart's clip bounds of ``data``: ``pdp.glm_clip`` of its public covariate bounds
    (Poisson: the public count cap and :data:`POISSON_ETA_BOUND`)."""
    if data.family == "poisson":
        return pdp.glm_clip(
            data.abs_bounds, "poisson", y_bound=data.y_bound, eta_bound=POISSON_ETA_BOUND
        )
    return pdp.glm_clip(data.abs_bounds, data.family)


def _fit_cell(data: realdata.RealData, eps: float, runs: int, draws: int) -> dict:
    """``runs`` unseeded DPLaplace runs on ``data`` at ``eps``; their errors against NUTS."""
    ref = realdata.nuts_reference(data.name)
    clip = glm_clip(data)
    z_max, z_own, sd_ratio, covered, after, failed, wide = [], [], [], [], [], [], []
    start = time.perf_counter()
    with realdata.model(data), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = pdp.plan(epsilon=eps, grad_clip=clip.grad_clip).laplace_largest_error
        step = None
        while len(z_max) + len(failed) < runs:
            try:
                # no noise_seed: fresh entropy; renew() keeps the compiled kernels and makes a
                # new warm start (a DPStep runs once)
                step = (
                    pdp.DPLaplace(epsilon=eps, grad_clip=clip.grad_clip, hess_clip=clip.hess_clip)
                    if step is None
                    else step.renew()
                )
            except WarmStartError as err:  # the budget was spent and no fit came of it
                failed.append(str(err))
                print(f"  {data.name} eps={eps:g}: {err}", file=sys.stderr, flush=True)
                continue
            idata = pdp.sample(
                step=step,
                draws=draws,
                tune=0,
                chains=4,
                cores=1,
                progressbar=False,
                compute_convergence_checks=False,
            )
            beta = idata.posterior["beta"].values.reshape(-1, data.d)
            c = realdata.compare({"mean": beta.mean(axis=0), "sd": beta.std(axis=0)}, ref)
            lo, hi = np.quantile(beta, [0.05, 0.95], axis=0)
            z_max.append(c["z_max"])
            z_own.append(c["z_own_max"])
            sd_ratio.extend(beta.std(axis=0) / ref["sd"])
            wide.append(float(np.median(beta.std(axis=0) / ref["sd"])) > WIDE_RUN)
            covered.extend((lo <= ref["mean"]) & (ref["mean"] <= hi))
            after.append(pdp.privacy_report(idata).fit_error["expected_largest_error"])
    seconds = time.perf_counter() - start
    med, p90 = (float(np.percentile(z_max, q)) for q in (50, 90)) if z_max else (np.nan, np.nan)
    return {
        "median": med,
        "p90": p90,
        "coverage": float(np.mean(covered)) if covered else np.nan,
        "own_sd": float(np.max(z_own)) if z_own else np.nan,
        "sd_ratio": float(np.median(sd_ratio)) if sd_ratio else np.nan,
        "wide": float(np.mean(wide)) if wide else np.nan,
        "before": float(before),
        "after": float(np.median(after)) if after else np.nan,
        "failed": len(failed),
        "runs": z_max,
        "seconds": seconds,
    }


def _checks(cell: dict, d3p: float | None) -> list[str]:
    """The issue's every-cell checks this cell misses (an empty list when it meets them all)."""
    med, lim = cell["median"], FIT_CHECKS
    missed = [f"{cell['failed']} runs failed"] if cell["failed"] else []
    if not cell["p90"] <= lim["p90"] * med:
        missed.append(f"p90/med > {lim['p90']:g}")
    if not cell["coverage"] >= lim["coverage"]:
        missed.append(f"coverage < {lim['coverage']:.0%}")
    if not cell["own_sd"] <= lim["own_sd"]:
        missed.append(f"own sds > {lim['own_sd']:g}")
    if 0.0 < cell["wide"] < 1.0:
        missed.append("sd lottery")
    for key in ("before", "after"):
        if not med / lim["planner"] <= cell[key] <= lim["planner"] * med:
            missed.append(f"plan {key} off > {lim['planner']:g}x")
    if d3p is not None and not med < d3p:
        missed.append("d3p closer")
    return missed


def fit_rows(
    names: list[str] | None = None,
    epsilons: list[float] | None = None,
    runs: int = 10,
    draws: int = 500,
) -> list[tuple]:
    """Rows of the fit table (:data:`FIT_HEADER`): per (data set, epsilon), ``runs`` unseeded
    DPLaplace runs of ``draws`` draws x 4 chains against NUTS, the planner, the floor and d3p."""
    rows = []
    for name in names or FIT_NAMES:
        data = realdata.load(name)
        ref = realdata.nuts_reference(name)
        for eps in epsilons or [1.0, 2.0, 4.0]:
            cell = _fit_cell(data, eps, runs, draws)
            floor = fit_floor.floor(data, eps)["floor"]
            fits = _cached_d3p(name, eps)
            d3p = (
                float(np.median([realdata.compare(fit, ref)["z_max"] for fit in fits]))
                if fits
                else None
            )
            goal = FIT_TARGETS.get((name, eps))
            target = (
                "-"
                if goal is None
                else (f"<= {goal:g} " + ("met" if cell["median"] <= goal else "MISSED"))
            )
            missed = _checks(cell, d3p)
            print(
                f"  {name} eps={eps:g}: largest errors "
                + " ".join(f"{z:.2f}" for z in sorted(cell["runs"]))
                + f" ({cell['seconds']:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
            rows.append(
                (
                    name,
                    data.n,
                    eps,
                    cell["median"],
                    cell["p90"],
                    cell["p90"] / cell["median"],
                    f"{cell['coverage']:.0%}",
                    cell["own_sd"],
                    cell["sd_ratio"],
                    f"{cell['wide']:.0%}",
                    cell["before"],
                    cell["after"],
                    floor,
                    "-" if d3p is None else d3p,
                    target,
                    ", ".join(missed) or "all met",
                    cell["seconds"],
                )
            )
    return rows


def markdown_table(header: list[str], rows: list[tuple]) -> str:
    """The rows as a Markdown table (floats with 2 decimals, or 3 significant digits below 0.1;
    wall times rounded to seconds)."""

    def cell(col: str, v: object) -> str:
        if isinstance(v, int):
            return f"{v:_}"
        if isinstance(v, float):
            if math.isnan(v):
                return "-"
            if col == "secs":
                return f"{v:.0f}"
            if col == "eps":
                return f"{v:g}"
            return f"{v:.3g}" if abs(v) < 0.1 else f"{v:.2f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += [
        "| " + " | ".join(cell(h, v) for h, v in zip(header, r, strict=True)) + " |" for r in rows
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--fit",
        action="store_true",
        help="the fit table (DPLaplace, unseeded runs per cell; issue 21's targets)",
    )
    p.add_argument("--names", nargs="+", help=f"default {NAMES}; with --fit {FIT_NAMES}")
    p.add_argument("--eps", nargs="+", type=float, help="default 1 4; with --fit 1 2 4")
    p.add_argument("--samplers", nargs="+", default=list(SAMPLERS))
    p.add_argument("--runs", type=int, default=10, help="--fit: unseeded runs per cell")
    p.add_argument("--draws", type=int, default=500, help="--fit: draws per chain (4 chains)")
    p.add_argument("--quick", action="store_true", help="200 + 200 iterations; --fit: 2 runs")
    args = p.parse_args(argv)
    if args.fit:
        import logging

        # scipy's OpenBLAS first, or it escapes the one-thread limit (as in benchmarks.__main__)
        import scipy.linalg  # noqa: F401
        from threadpoolctl import threadpool_limits

        logging.getLogger("pymc").setLevel(logging.ERROR)
        runs, draws = (2, 200) if args.quick else (args.runs, args.draws)
        start = time.perf_counter()
        with threadpool_limits(limits=1):
            rows = fit_rows(args.names or FIT_NAMES, args.eps or [1.0, 2.0, 4.0], runs, draws)
        print(format_table(FIT_HEADER, rows))
        print()
        print(markdown_table(FIT_HEADER, rows))
        seconds = time.perf_counter() - start
        print(f"\n{runs} runs per cell, {draws} draws x 4 chains; {seconds:.0f} s")
        return
    draws = tune = 200 if args.quick else 1000
    rows = utility_rows(args.names or NAMES, args.eps or [1.0, 4.0], args.samplers, draws, tune)
    print(format_table(HEADER, rows))


if __name__ == "__main__":
    main()
