"""The sd lottery's fix: its threshold alone against all three parts and the default.

``pymc_dp.tuning.warm_start`` holds the fix of the last curvature release behind two switches,
both off by default: :data:`~pymc_dp.tuning.warm_start.LAST_CURVATURE_THRESHOLD` (noise-level
counts above the bulk read as empty) and
:data:`~pymc_dp.tuning.warm_start.RESOLVED_LAST_CURVATURE` (the threshold, each row's gradient
weighted by its curvature's clipping factor, the walk read direction by direction). For each
case and setting this prints, over seeded fits of ``DPLaplace`` (the quickstart's call): fits
whose median sd is over 5x the posterior's ("wide"), coordinates beyond 3 of the fit's own sds
from the exact mode (confidently wrong), the largest such distance, and the median and 90th
percentile of the largest error in posterior sds. The reference is the exact posterior mode
and Laplace sds.

Non-private and data-reading by design: a benchmark, never part of a release.

``python -m benchmarks.lottery_parts [--cases NAME ...] [--seeds 30]`` (:data:`CASES`)
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pymc as pm
import scipy.optimize as so
from pymc.blocking import DictToArrayBijection, RaveledVars

import pymc_dp as pdp
from benchmarks import realdata, utility
from benchmarks.timing import format_table
from pymc_dp.tuning import warm_start

__all__ = ["CASES", "SETTINGS", "case", "reference", "rows", "main"]

#: (name, LAST_CURVATURE_THRESHOLD, RESOLVED_LAST_CURVATURE)
SETTINGS = (("default", False, False), ("threshold", True, False), ("all three", False, True))
CASES = ("fair", "randhie", "breast_cancer", "heavy_poisson", "cancer")
HEADER = ["case", "epsilon", "setting", "wide", "beyond 3 own", "largest own", "median", "p90"]


def case(name: str) -> tuple[pm.Model, dict, tuple[float, ...]]:
    """``(model, DPLaplace's clip arguments, budgets)`` of a case (fixed data seeds)."""
    if name in ("fair", "randhie", "breast_cancer"):
        data = realdata.load(name)
        clip = utility.glm_clip(data)
        clips = {"grad_clip": clip.grad_clip, "hess_clip": clip.hess_clip}
        return realdata.model(data), clips, (4.0,)
    if name == "heavy_poisson":
        # overdispersed counts (negative binomial, shape 1) read by a Poisson GLM; one covariate
        # lognormal, encoded by a public range [0, 30] (most rows near 0, a long tail to 1)
        rng = np.random.default_rng(11)
        n = 20_000
        X = np.c_[np.minimum(rng.lognormal(0.0, 1.2, n) / 30.0, 1.0), rng.uniform(-1, 1, n)]
        mu = np.exp(0.3 + X @ np.array([2.0, -0.4]))
        y = np.minimum(rng.negative_binomial(1, 1.0 / (1.0 + mu)), 20)
        with pm.Model() as m:
            alpha, beta = pm.Normal("alpha", 0, 2.5), pm.Normal("beta", 0, 2.5, shape=2)
            pm.Poisson("y", mu=pm.math.exp(alpha + pm.Data("X", X) @ beta), observed=y)
        clip = pdp.glm_clip(np.ones(3), "poisson", y_bound=20, eta_bound=3)
        return m, {"grad_clip": clip.grad_clip, "hess_clip": clip.hess_clip}, (1.0, 4.0)
    if name == "cancer":
        # statsmodels' cancer: county deaths against log population, Poisson, 301 rows, the
        # README's public bounds (the test of a curvature whose noise fakes information)
        from statsmodels.datasets import cancer

        df = cancer.load_pandas().data
        enc = pdp.encode_covariates(
            df.assign(logpop=np.log(df["population"])), {"logpop": (np.log(100), np.log(100_000))}
        )
        with pm.Model() as m:
            beta = pm.Normal("beta", 0, 5, shape=2)
            y = df["cancer"].to_numpy(int)
            pm.Poisson("deaths", mu=pm.math.exp(pm.math.dot(enc.X, beta)), observed=y)
        clip = pdp.glm_clip(np.ones(2), "poisson", y_bound=500, eta_bound=6.5)
        return m, {"grad_clip": clip.grad_clip, "hess_clip": clip.hess_clip}, (4.0,)
    raise KeyError(f"unknown case {name!r}; expected one of {CASES}")


def reference(m: pm.Model) -> tuple[np.ndarray, np.ndarray]:
    """The exact posterior mode and Laplace sds, raveled like the fit's coordinates."""
    point = m.initial_point()
    mapped = DictToArrayBijection.map({v.name: point[v.name] for v in m.value_vars})
    logp, dlogp = m.compile_logp(), m.compile_dlogp()
    d2logp = m.compile_d2logp(negate_output=True)  # the negative Hessian: explicit, PyMC warns

    def at(x):
        return DictToArrayBijection.rmap(RaveledVars(x, mapped.point_map_info))

    res = so.minimize(
        lambda x: -logp(at(x)),
        mapped.data,
        jac=lambda x: -dlogp(at(x)),
        method="BFGS",
        options={"gtol": 1e-9, "maxiter": 2000},
    )
    return res.x, np.sqrt(np.diag(np.linalg.inv(d2logp(at(res.x)))))


def rows(name: str, seeds: int) -> list[list]:
    m, clips, budgets = case(name)
    mode, sd = reference(m)
    lik = pdp.PerRowLikelihood(m)
    out = []
    saved = warm_start.LAST_CURVATURE_THRESHOLD, warm_start.RESOLVED_LAST_CURVATURE
    try:
        for eps in budgets:
            for setting, threshold, resolved in SETTINGS:
                warm_start.LAST_CURVATURE_THRESHOLD = threshold
                warm_start.RESOLVED_LAST_CURVATURE = resolved
                wide, own, largest = 0, [], []
                for seed in range(seeds):
                    with m, warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        fit = pdp.DPLaplace(
                            epsilon=eps, noise_seed=seed, likelihood=lik, **clips
                        ).warm
                    fit_sd = np.sqrt(np.diag(fit.posterior_cov))
                    wide += float(np.median(fit_sd / sd)) > 5.0
                    own.extend(np.abs(fit.mean - mode) / fit_sd)
                    largest.append(float(np.max(np.abs(fit.mean - mode) / sd)))
                own_a = np.asarray(own)
                out.append(
                    [
                        name,
                        eps,
                        setting,
                        f"{wide}/{seeds}",
                        f"{int(np.sum(own_a > 3.0))}/{own_a.size}",
                        f"{own_a.max():.2f}",
                        f"{np.median(largest):.2f}",
                        f"{np.quantile(largest, 0.9):.2f}",
                    ]
                )
                print(format_table(HEADER, out[-1:]), flush=True)
    finally:
        warm_start.LAST_CURVATURE_THRESHOLD, warm_start.RESOLVED_LAST_CURVATURE = saved
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--seeds", type=int, default=30)
    args = parser.parse_args(argv)
    table = [r for name in args.cases for r in rows(name, args.seeds)]
    print("\n" + format_table(HEADER, table))


if __name__ == "__main__":
    main()
