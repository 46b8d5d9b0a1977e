"""``python -m pymc_dp demo``: a differentially private logistic regression, next to plain NUTS.

The data are synthetic patients (:func:`pymc_dp.examples.synthetic_patients`): one row per person,
standardised age and BMI, smoker and treatment flags, and a binary outcome. Every choice below
that shapes the privacy noise is made from *public* knowledge (the published covariate ranges,
the privacy budget, the number of iterations), never by looking at the private rows:

* **Encoding.** Age and BMI are standardised; we winsorise them at +-2 and divide by 2, and code
  the flags as -1 / +1. Every covariate is then in [-1, 1], so moving one coefficient by ``h``
  changes one person's log-likelihood by at most ``|h|`` (the Bernoulli log-likelihood is
  1-Lipschitz in the linear predictor). ``llr_clip = 1`` is therefore a bound that never clips.
  Winsorising at 2 rather than the published 3 trades a little bias for less noise: how much
  signal survives the noise depends on the bound of age and BMI relative to their typical size.
  It is a design decision made from the public ranges, as a data owner would make it.
* **Clip bound.** ``pdp.glm_clip`` turns those ranges into the per-row gradient bound
  ``sqrt(d)``, which never clips.
* **Plan, then zero tuning.** ``pdp.plan`` reads n, the priors and the bounds (no data values),
  predicts what the budget can buy and recommends a sampler and the split of the run; the demo
  runs what it recommends with nothing else set: no proposal scale, step size or start.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm
import xarray as xr
from threadpoolctl import threadpool_limits

import pymc_dp as pdp
from pymc_dp import compiling
from pymc_dp.examples import synthetic_patients

__all__ = ["main"]

EPSILON = 1.0
#: Public winsorising bound for the standardised covariates (published range is +-3).
WINSOR = 2.0
ENCODED = ["intercept", f"age/{WINSOR:g}", f"bmi/{WINSOR:g}", "smoker(+-1)", "treated(+-1)"]


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """One BLAS thread per process, here and in the processes PyMC starts for its chains.

    The matrix products are thin (n x 5): extra BLAS threads gain no wall time, double the CPU
    time and slow everything down on a busy machine.
    """
    names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(dict.fromkeys(names, "1"))  # read by the chain processes at start-up
    try:
        with threadpool_limits(limits=1):
            yield
    finally:  # only these names: the rest of the environment is the caller's
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def encode(data: dict[str, np.ndarray]) -> np.ndarray:
    """Covariates in [-1, 1] from their public ranges (one row per person)."""
    X = data["X"].copy()
    X[:, 1:3] = np.clip(X[:, 1:3], -WINSOR, WINSOR) / WINSOR
    X[:, 3:] = 2.0 * X[:, 3:] - 1.0
    return X


def decode_matrix() -> np.ndarray:
    """``A`` with ``beta_original = A @ beta_encoded`` (log-odds per unit of the raw covariate)."""
    # eta = c0 + c1 age/W + c2 bmi/W + c3 (2 s - 1) + c4 (2 t - 1)
    #     = (c0 - c3 - c4) + (c1/W) age + (c2/W) bmi + 2 c3 s + 2 c4 t
    A = np.diag([1.0, 1.0 / WINSOR, 1.0 / WINSOR, 2.0, 2.0])
    A[0, 3:] = -1.0
    return A


def build_model(X: np.ndarray, y: np.ndarray, names: list[str]) -> pm.Model:
    """Logistic regression on the encoded covariates; ``beta`` reports raw-covariate units."""
    with pm.Model(coords={"term": ENCODED, "coef": names}) as model:
        # Weakly informative: a log odds ratio beyond ~10 per unit is implausible a priori.
        beta_encoded = pm.Normal("beta_encoded", 0.0, 5.0, dims="term")
        # A function of the parameters only (no data), so pdp.sample keeps it in the release.
        pm.Deterministic("beta", pm.math.dot(decode_matrix(), beta_encoded), dims="coef")
        pm.Bernoulli("y", logit_p=pm.math.dot(X, beta_encoded), observed=y)
    return model


def coefficients(idata: xr.DataTree, group: str = "posterior") -> xr.Dataset:
    """The raw-unit coefficients ``beta`` of one group, as a (chain, draw, coef) dataset."""
    return idata[group].to_dataset()[["beta"]]


def summary_table(dp: xr.Dataset, nuts: xr.Dataset, truth: np.ndarray) -> pd.DataFrame:
    cols = ["mean", "sd", "eti89_lb", "eti89_ub"]
    s_dp = az.summary(dp, kind="stats", round_to=3)[cols]
    s_nuts = az.summary(nuts, kind="stats", round_to=3)[cols]
    ess = az.summary(dp, kind="diagnostics")["ess_bulk"].astype(float).round(0)
    table = pd.concat(
        {"DP (eps=1)": s_dp.assign(ess_bulk=ess), "NUTS (no privacy)": s_nuts}, axis=1
    )
    table[("", "true")] = truth
    return table


def plot(dp: xr.Dataset, nuts: xr.Dataset, truth: np.ndarray, path: Path, title: str) -> None:
    """Posterior densities (top) and the DP chains (bottom), per coefficient."""
    import matplotlib  # a [test] extra, not a core dependency: imported only to plot

    matplotlib.use("Agg")  # files only: the demo must run without a display
    import matplotlib.pyplot as plt
    from scipy.stats import gaussian_kde

    names = list(dp.coords["coef"].values)
    fig, axes = plt.subplots(2, len(names), figsize=(3.2 * len(names), 5.6), squeeze=False)
    for k, name in enumerate(names):
        ax = axes[0, k]
        for ds, label, color in ((nuts, "NUTS, no privacy", "C0"), (dp, "DP", "C3")):
            x = ds["beta"].sel(coef=name).values.ravel()
            grid = np.linspace(x.min(), x.max(), 200)
            pad = 0.5 * (grid[-1] - grid[0])
            grid = np.linspace(grid[0] - pad, grid[-1] + pad, 300)
            ax.plot(grid, gaussian_kde(x)(grid), color=color, label=label)
        ax.axvline(truth[k], color="k", ls="--", lw=1, label="true value")
        ax.set_title(name)
        ax.set_yticks([])
        # Bottom row: every DP chain, against the NUTS mean.
        ax = axes[1, k]
        for c, chain in enumerate(dp["beta"].sel(coef=name).values):
            ax.plot(chain, color=f"C{3 + c}", lw=0.5, alpha=0.8, label=f"DP chain {c}")
        ax.axhline(float(nuts["beta"].sel(coef=name).mean()), color="C0", lw=1, label="NUTS mean")
        ax.set_xlabel("iteration")
    axes[0, 0].legend(fontsize=8, loc="upper left")
    axes[1, 0].legend(fontsize=8, loc="lower right")
    axes[0, 0].set_ylabel("posterior density")
    axes[1, 0].set_ylabel("DP chain")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(out_dir: str | Path = "demo_output", quick: bool = False) -> None:
    """Run the demo and write ``comparison.png`` to ``out_dir``.

    ``quick`` shrinks the data and chains to a smoke run whose numbers mean nothing.
    """
    start = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    logging.getLogger("pymc").setLevel(logging.ERROR)  # keep the output to the results
    # DP needs many people: the noise does not shrink with n, the signal grows with it.
    n, draws = (5_000, 300) if quick else (100_000, 1000)
    data = synthetic_patients(n=n, seed=1)
    names = [str(v) for v in data["names"]]
    model = build_model(encode(data), data["y"], names)
    clip = pdp.glm_clip(np.ones(len(ENCODED)))  # every encoded covariate is in [-1, 1]
    print(f"pymc-dp demo: logistic regression, n = {n:_} synthetic patients, d = {len(names)}\n")

    with model, single_threaded_blas():
        planned = pdp.plan(epsilon=EPSILON, llr_clip=clip.llr_clip, draws=draws, tune=draws)
        print(planned)
        print()
        if planned.recommended == "DPLaplace":
            step = pdp.DPLaplace(epsilon=EPSILON, grad_clip=clip.grad_clip)
        else:
            step = pdp.DPPenalty(epsilon=EPSILON, llr_clip=clip.llr_clip)
        t0 = time.perf_counter()
        idata_dp = pdp.sample(
            draws=draws,
            tune=planned.split["tune"],
            step=step,
            random_seed=2024,
            progressbar=False,
            compute_convergence_checks=False,
        )
        t1 = time.perf_counter()
        with warnings.catch_warnings():
            # The non-private reference: plain PyMC on the same model, for comparison only.
            warnings.simplefilter("ignore", UserWarning)
            idata_nuts = compiling.locked(
                pm.sample,
                draws=300,
                tune=300,
                chains=2,
                cores=2,
                random_seed=2024,
                progressbar=False,
                compute_convergence_checks=False,
            )
        t2 = time.perf_counter()
    print(f"Sampling took {t1 - t0:.0f} s (DP) and {t2 - t1:.0f} s (NUTS).\n")
    print(pdp.privacy_report(idata_dp))
    print()

    dp, nuts = coefficients(idata_dp), coefficients(idata_nuts)
    truth = data["beta"]
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(
            "Posterior of the log-odds coefficients (raw covariate units; 89% equal-tailed "
            "intervals):"
        )
        print(summary_table(dp, nuts, truth))
    print(f"\n'true' = data-generating values (age and BMI before winsorising at +-{WINSOR:g}).")
    err = np.abs(dp["beta"].mean(("chain", "draw")) - nuts["beta"].mean(("chain", "draw")))
    z = (err / nuts["beta"].std(("chain", "draw"))).values
    ratio = (dp["beta"].std(("chain", "draw")) / nuts["beta"].std(("chain", "draw"))).values
    print(
        f"Against NUTS: largest |mean error| {z.max():.2f} NUTS sds, sd ratio "
        f"{ratio.min():.2f}-{ratio.max():.2f} (the extra width is the privacy noise)."
    )

    path = out / "comparison.png"
    title = f"Logistic regression on synthetic patients: {type(step).__name__} (eps = 1) vs NUTS"
    plot(dp, nuts, truth, path, title)
    print(f"Saved {path} ({time.perf_counter() - start:.0f} s)")
