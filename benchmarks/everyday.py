"""Everyday models against NUTS (issue 22): the release each model gets, 10 unseeded runs a cell.

Rows so far: **linear regression with an unknown noise sd** through ``pdp.DPSuffStats`` (its
sufficient statistics released in two stages, NUTS on the noise-aware posterior), on

* ``fair_linear``: ``statsmodels.datasets.fair`` (n = 6366), outcome ``rate_marriage`` (codebook
  1-5) on the other seven covariates of :data:`benchmarks.realdata.PUBLIC_BOUNDS` (``affairs``
  left out), encoded onto [-1, 1] by their codebook ranges;
* ``synthetic_linear``: n = 20 000, three uniform covariates on [-1, 1], ``y = 0.5 + X (1, -2,
  0.3) + N(0, 0.8^2)``, outcome range declared (-6, 6) (fixed seed);
* ``randhie_linear``: ``statsmodels.datasets.randhie`` (n = 20 190), outcome ``min(mdvis, 30)``
  (the Poisson rows' public cap; a right-skewed count: the Normal model is misspecified, the
  residual release's tail check must decline it) on the nine covariates of the fit table.

Model: ``alpha ~ N(0, 5)``, ``beta ~ N(0, 2.5)``, ``sigma ~ HalfNormal(2.5)``,
``y ~ N(alpha + X beta, sigma)``. Columns per cell: median and 90th percentile over runs of the
largest ``|mean - NUTS mean| / NUTS sd`` over all parameters (sigma included), the median of
what the run's report predicted for it from released values (``expected_largest_error``: for
DPSuffStats the release's noise, the prior's pull left out), the same for
sigma alone, the largest error in the run's own posterior sds, coverage (share of (parameter,
run) pairs whose NUTS mean is inside the run's central 90% interval), median sd ratio to NUTS,
runs with every mean within 1.5 NUTS sds and 3 own sds (the issue's "9 of 10").

The GLM rows (``--glm``) run ``pdp.DPLaplace`` with the clip bounds a user would derive from
public facts, on n = 20 000 synthetic rows (fixed seeds; Poisson on real data is the fit
table's ``randhie_poisson``):

* ``poisson``: three uniform covariates on [-1, 1], ``y ~ Poisson(exp(0.7 + X (0.5, -0.3,
  0.2)))``, ``pdp.glm_clip(..., "poisson", y_bound=20, eta_bound=3)`` (``hess_clip`` included);
* ``robust``: the linear design above with Student-t (3 dof) noise of scale 0.8, the outcome
  clipped to (-10, 10), ``y ~ StudentT(nu=4, alpha + X beta, sigma)``, ``grad_clip=5``;
* ``hierarchical``: logistic regression with two uniform covariates and random intercepts over
  20 public groups, non-centred (``mu + tau z[g]``, ``tau ~ HalfNormal(1)``),
  ``pdp.glm_clip(np.ones(3))`` (the group's effect bounded like an intercept): by default
  the fit runs in the effects' coordinates with NUTS on exact prior x surrogate.
  Its "scale" column is the hyper sd ``tau``, with the Wasserstein distance of its draws to
  NUTS' over NUTS' sd (the issue's target).

``python -m benchmarks.everyday [--names ...] [--eps 1 2 4] [--runs 10] [--glm [--nuts]]``
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings

import numpy as np
import pymc as pm

import pymc_dp as pdp
from benchmarks import realdata
from benchmarks.timing import format_table

__all__ = [
    "GLM_NAMES",
    "GROUPED_NAMES",
    "HEADER",
    "LINEAR_NAMES",
    "glm_model",
    "glm_rows",
    "grouped_data",
    "grouped_model",
    "linear_data",
    "linear_model",
    "linear_rows",
    "main",
]

LINEAR_NAMES = ("fair_linear", "synthetic_linear", "randhie_linear")
GLM_NAMES = ("poisson", "robust", "hierarchical")
GROUPED_NAMES = ("fair_occupation",)

HEADER = [
    "data",
    "n",
    "eps",
    "median",
    "p90",
    "reported",
    "sigma med",
    "own sds max",
    "coverage",
    "sd ratio",
    "runs ok",
    "s/run",
]
#: Kept draws per chain of the DP runs (4 chains) and of the NUTS reference.
DRAWS = 500
NUTS_SEED = 20221


def linear_data(name: str) -> tuple[np.ndarray, np.ndarray, tuple[float, float]]:
    """``(X without intercept, y, public outcome range)`` of a linear-regression data set."""
    if name == "fair_linear":
        from statsmodels.datasets import fair

        df = fair.load_pandas().data
        table = {k: v for k, v in realdata.PUBLIC_BOUNDS["fair"].items() if k != "rate_marriage"}
        raw = {c: df[c].to_numpy(np.float64) for c in table}
        enc = pdp.encode_covariates(raw, {c: (lo, hi) for c, (lo, hi, _) in table.items()})
        return enc.X[:, 1:], df["rate_marriage"].to_numpy(np.float64), (1.0, 5.0)
    if name == "synthetic_linear":
        rng = np.random.default_rng(22)
        X = rng.uniform(-1, 1, (20_000, 3))
        y = 0.5 + X @ np.array([1.0, -2.0, 0.3]) + rng.normal(0, 0.8, 20_000)
        return X, np.clip(y, -6, 6), (-6.0, 6.0)
    if name == "randhie_linear":
        from statsmodels.datasets import randhie

        df = randhie.load_pandas().data
        table = realdata.PUBLIC_BOUNDS["randhie"]
        raw = {c: df[c].to_numpy(np.float64) for c in table}
        enc = pdp.encode_covariates(raw, {c: (lo, hi) for c, (lo, hi, _) in table.items()})
        cap = float(realdata.POISSON_CAP)
        return enc.X[:, 1:], np.minimum(df["mdvis"].to_numpy(np.float64), cap), (0.0, cap)
    raise KeyError(f"unknown data set {name!r}; expected one of {LINEAR_NAMES}")


def linear_model(X: np.ndarray, y: np.ndarray) -> pm.Model:
    with pm.Model() as m:
        Xd = pm.Data("X", X)
        alpha = pm.Normal("alpha", 0.0, 5.0)
        beta = pm.Normal("beta", 0.0, 2.5, shape=X.shape[1])
        sigma = pm.HalfNormal("sigma", 2.5)
        pm.Normal("y", alpha + Xd @ beta, sigma, observed=y)
    return m


def grouped_data(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``(X without intercept, binary y, group codes 0..G-1, G)`` of a real grouped data set.

    ``fair_occupation``: statsmodels' ``fair`` (n = 6 366), "any affair" on the marriage rating
    and religiousness (codebook ranges onto [-1, 1]), grouped by the wife's occupation (codebook
    categories 1-6: 41-2 783 rows each)."""
    if name == "fair_occupation":
        from statsmodels.datasets import fair

        df = fair.load_pandas().data
        table = {k: realdata.PUBLIC_BOUNDS["fair"][k] for k in ("rate_marriage", "religious")}
        raw = {c: df[c].to_numpy(np.float64) for c in table}
        enc = pdp.encode_covariates(raw, {c: (lo, hi) for c, (lo, hi, _) in table.items()})
        groups = df["occupation"].to_numpy().astype(int) - 1
        return enc.X[:, 1:], (df["affairs"].to_numpy() > 0).astype(int), groups, 6
    raise KeyError(f"unknown data set {name!r}; expected one of {GROUPED_NAMES}")


def grouped_model(X: np.ndarray, y: np.ndarray, groups: np.ndarray, n_groups: int) -> pm.Model:
    """Random-intercept logistic regression, ``mu + tau * z[group] + X @ beta``."""
    with pm.Model() as m:
        Xd, gd = pm.Data("X", X), pm.Data("g", groups)
        mu, tau = pm.Normal("mu", 0.0, 2.5), pm.HalfNormal("tau", 1.0)
        z = pm.Normal("z", 0.0, 1.0, shape=n_groups)
        beta = pm.Normal("beta", 0.0, 2.5, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=mu + tau * z[gd] + Xd @ beta, observed=y)
    return m


def _flat(posterior) -> np.ndarray:
    """``(draws, parameters)``: alpha, beta..., sigma."""
    parts = []
    for v in ("alpha", "beta", "sigma"):
        values = posterior[v].values
        parts.append(values.reshape(values.shape[0] * values.shape[1], -1))
    return np.concatenate(parts, axis=1)


def _nuts(m: pm.Model):
    """The non-private reference: NUTS, 4 chains x (1000 + 1000), fixed seed."""
    with m:
        return pm.sample(
            draws=1000,
            tune=1000,
            chains=4,
            cores=2,
            random_seed=NUTS_SEED,
            progressbar=False,
            compute_convergence_checks=False,
        )


def _reported_largest(idata) -> float:
    """What the run's report predicts for its largest error, from released values (NaN if none)."""
    fit_error = pdp.privacy_report(idata).fit_error or {}
    value = fit_error.get("expected_largest_error")  # None: the release bounds no mean
    return np.nan if value is None else float(value)


def _reference(m: pm.Model) -> tuple[np.ndarray, np.ndarray]:
    draws = _flat(_nuts(m).posterior)
    return draws.mean(0), draws.std(0, ddof=1)


def linear_rows(names=LINEAR_NAMES, eps=(1.0, 2.0, 4.0), runs: int = 10) -> list[list]:
    rows = []
    for name in names:
        X, y, y_bounds = linear_data(name)
        m = linear_model(X, y)
        ref_mean, ref_sd = _reference(m)
        for e in eps:
            errs, sigma_errs, own, inside, ratio, ok, secs = [], [], [], [], [], 0, []
            reported = []
            for _ in range(runs):
                t0 = time.perf_counter()
                with m, warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    step = pdp.DPSuffStats(epsilon=e, outcome_bounds=y_bounds, nuts_tune=500)
                    idata = pdp.sample(
                        step=step, draws=DRAWS, tune=0, chains=4, cores=2, progressbar=False
                    )
                secs.append(time.perf_counter() - t0)
                draws = _flat(idata.posterior)
                reported.append(_reported_largest(idata))
                mean, sd = draws.mean(0), draws.std(0, ddof=1)
                z = np.abs(mean - ref_mean) / ref_sd
                errs.append(z.max())
                sigma_errs.append(z[-1])
                own.append((np.abs(mean - ref_mean) / sd).max())
                lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
                inside.extend((lo <= ref_mean) & (ref_mean <= hi))
                ratio.append(np.median(sd / ref_sd))
                ok += bool(z.max() <= 1.5 and own[-1] <= 3.0)
            rows.append(
                [
                    name,
                    len(y),
                    e,
                    f"{np.median(errs):.2f}",
                    f"{np.quantile(errs, 0.9):.2f}",
                    f"{np.median(reported):.2f}",
                    f"{np.median(sigma_errs):.2f}",
                    f"{max(own):.2f}",
                    f"{np.mean(inside):.0%}",
                    f"{np.median(ratio):.2f}",
                    f"{ok}/{runs}",
                    f"{np.median(secs):.0f}",
                ]
            )
            print(format_table(HEADER, rows[-1:]), flush=True)
    return rows


#: Data seeds of the GLM rows (fixed: the same data in every run and on every machine).
GLM_SEEDS = {"poisson": 25, "robust": 23, "hierarchical": 24}


def glm_model(name: str, n: int = 20_000, group_sd: float = 0.5) -> tuple[pm.Model, dict, str]:
    """``(model, DPLaplace's clip arguments, the scale variable)`` of a GLM row (fixed seed);
    ``group_sd`` is the spread of the hierarchical row's true group effects (3: near-separable
    groups, logits beyond +-4)."""
    rng = np.random.default_rng(GLM_SEEDS[name])
    X = rng.uniform(-1, 1, (n, 3))
    with pm.Model() as m:
        if name == "poisson":
            y = rng.poisson(np.exp(0.7 + X @ np.array([0.5, -0.3, 0.2])))
            Xd = pm.Data("X", X)
            alpha, beta = pm.Normal("alpha", 0, 2.5), pm.Normal("beta", 0, 2.5, shape=3)
            pm.Poisson("y", mu=pm.math.exp(alpha + Xd @ beta), observed=y)
            clip = pdp.glm_clip(np.ones(4), "poisson", y_bound=20, eta_bound=3)
            return m, {"grad_clip": clip.grad_clip, "hess_clip": clip.hess_clip}, "alpha"
        if name == "robust":
            noise = 0.8 * rng.standard_t(3, n)
            y = np.clip(0.5 + X @ np.array([1.0, -2.0, 0.3]) + noise, -10, 10)
            Xd = pm.Data("X", X)
            alpha, beta = pm.Normal("alpha", 0, 5), pm.Normal("beta", 0, 2.5, shape=3)
            sigma = pm.HalfNormal("sigma", 2.5)
            pm.StudentT("y", nu=4, mu=alpha + Xd @ beta, sigma=sigma, observed=y)
            return m, {"grad_clip": 5.0}, "sigma"
        if name == "hierarchical":
            g = rng.integers(0, 20, n)
            a = rng.normal(-0.3, group_sd, 20)
            p = 1 / (1 + np.exp(-(a[g] + X[:, :2] @ np.array([1.0, -0.5]))))
            y = rng.binomial(1, p)
            Xd, gd = pm.Data("X", X[:, :2]), pm.Data("g", g)
            mu, tau = pm.Normal("mu", 0, 2.5), pm.HalfNormal("tau", 1.0)
            z = pm.Normal("z", 0, 1, shape=20)
            beta = pm.Normal("beta", 0, 2.5, shape=2)
            pm.Bernoulli("y", logit_p=mu + tau * z[gd] + Xd @ beta, observed=y)
            # the group's effect is bounded like an intercept (1), the covariates by 1
            clip = pdp.glm_clip(np.ones(3))
            return m, {"grad_clip": clip.grad_clip, "hess_clip": clip.hess_clip}, "tau"
    raise KeyError(f"unknown GLM row {name!r}; expected one of {GLM_NAMES}")


GLM_HEADER = [*HEADER[:6], "scale med", "W(scale)", *HEADER[7:]]


def _draws(posterior, names) -> np.ndarray:
    parts = []
    for v in names:
        values = posterior[v].values
        parts.append(values.reshape(values.shape[0] * values.shape[1], -1))
    return np.concatenate(parts, axis=1)


def glm_rows(names=GLM_NAMES, eps=(2.0,), runs: int = 10, nuts: bool | None = None) -> list[list]:
    """DPLaplace (``nuts``: with NUTS on exact prior x surrogate) against NUTS, per GLM row."""
    from scipy.stats import wasserstein_distance

    rows = []
    for name in names:
        m, clip, scale = glm_model(name)
        free = [v.name for v in m.free_RVs]
        ref = _nuts(m)
        ref_draws = _draws(ref.posterior, free)
        ref_mean, ref_sd = ref_draws.mean(0), ref_draws.std(0, ddof=1)
        at = int(
            np.cumsum([0] + [ref.posterior[v].values[0, 0].size for v in free])[free.index(scale)]
        )
        for e in eps:
            errs, scale_errs, wass, own, inside, ratio, ok, secs = [], [], [], [], [], [], 0, []
            reported = []
            for _ in range(runs):
                t0 = time.perf_counter()
                with m, warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    step = pdp.DPLaplace(epsilon=e, nuts=nuts, nuts_tune=500, **clip)
                    idata = pdp.sample(
                        step=step, draws=DRAWS, tune=0, chains=4, cores=2, progressbar=False
                    )
                secs.append(time.perf_counter() - t0)
                draws = _draws(idata.posterior, free)
                reported.append(_reported_largest(idata))
                mean, sd = draws.mean(0), draws.std(0, ddof=1)
                z = np.abs(mean - ref_mean) / ref_sd
                errs.append(z.max())
                scale_errs.append(z[at])
                wass.append(wasserstein_distance(draws[:, at], ref_draws[:, at]) / ref_sd[at])
                own.append((np.abs(mean - ref_mean) / sd).max())
                lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
                inside.extend((lo <= ref_mean) & (ref_mean <= hi))
                ratio.append(np.median(sd / ref_sd))
                ok += bool(z.max() <= 1.5 and own[-1] <= 3.0)
            rows.append(
                [
                    f"{name}{' (nuts)' if step.nuts else ''}",
                    20_000,
                    e,
                    f"{np.median(errs):.2f}",
                    f"{np.quantile(errs, 0.9):.2f}",
                    f"{np.median(reported):.2f}",
                    f"{np.median(scale_errs):.2f}",
                    f"{np.median(wass):.2f}",
                    f"{max(own):.2f}",
                    f"{np.mean(inside):.0%}",
                    f"{np.median(ratio):.2f}",
                    f"{ok}/{runs}",
                    f"{np.median(secs):.0f}",
                ]
            )
            print(format_table(GLM_HEADER, rows[-1:]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", nargs="+", default=list(LINEAR_NAMES))
    parser.add_argument("--eps", nargs="+", type=float, default=[1.0, 2.0, 4.0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--glm", action="store_true", help=f"the DPLaplace rows {GLM_NAMES}")
    parser.add_argument(
        "--nuts", action="store_true", default=None, help="--glm: DPLaplace(nuts=True)"
    )
    args = parser.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    if args.glm:
        names = [n for n in args.names if n in GLM_NAMES] or list(GLM_NAMES)
        rows = glm_rows(names, tuple(args.eps), args.runs, args.nuts)
        print("\nEveryday GLMs, DPLaplace against NUTS")
        print(format_table(GLM_HEADER, rows))
        return
    rows = linear_rows(args.names, tuple(args.eps), args.runs)
    print("\nLinear regression with an unknown noise sd, DPSuffStats against NUTS")
    print(format_table(HEADER, rows))


if __name__ == "__main__":
    main()
