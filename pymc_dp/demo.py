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
* **Proposal.** Guided-walk one-coordinate moves (GWMH): the privacy noise scales with the step
  length, and a walk that keeps its direction while accepted covers ground in a straight line.
  The step is set so that the noise on the log acceptance ratio has std ``NOISE_STD``, from the
  noise multiplier that (epsilon, delta, iterations) imply.
* **One chain.** Every chain is a separate release of the same data: at a fixed budget, two
  chains would each need sqrt(2) times more noise. One long chain spends the budget best.
"""

from __future__ import annotations

import logging
import math
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
from pymc_dp.accounting import noise_multiplier_for_budget
from pymc_dp.examples import synthetic_patients

__all__ = ["main"]

EPSILON = 1.0
#: Public winsorising bound for the standardised covariates (published range is +-3).
WINSOR = 2.0
#: Target std of the privacy noise on the log acceptance ratio (acceptance ~2 Phi(-1) on flat
#: ground); a public design choice, not tuned on the data.
NOISE_STD = 2.0
#: Per-person bound on the log-likelihood change per unit step of one coefficient (see above).
LLR_CLIP = 1.0
#: E|Z| for Z ~ N(0, 1): the mean length of a one-coordinate Gaussian step of scale 1.
MEAN_ABS_NORMAL = math.sqrt(2.0 / math.pi)
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
    finally:
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


def proposal_scale(tune: int, draws: int, chains: int, delta: float) -> float:
    """GWMH step whose privacy noise on the log acceptance ratio has std ~ ``NOISE_STD``.

    DPPenalty adds noise of std ``2 s llr_clip |step|`` with ``s`` the noise multiplier that the
    budget buys for ``chains * (tune + draws)`` releases; all of these are public.
    """
    s = noise_multiplier_for_budget(EPSILON, delta, chains * (tune + draws))
    return NOISE_STD / (2.0 * s * LLR_CLIP * MEAN_ABS_NORMAL)


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


def plot(
    dp: xr.Dataset, dp_warm: xr.Dataset, nuts: xr.Dataset, truth: np.ndarray, path: Path
) -> None:
    """Posterior densities (top) and the DP chain with its burn-in (bottom), per coefficient."""
    import matplotlib  # a [test] extra, not a core dependency: imported only to plot

    matplotlib.use("Agg")  # files only: the demo must run without a display
    import matplotlib.pyplot as plt
    from scipy.stats import gaussian_kde

    names = list(dp.coords["coef"].values)
    fig, axes = plt.subplots(2, len(names), figsize=(3.2 * len(names), 5.6), squeeze=False)
    for k, name in enumerate(names):
        ax = axes[0, k]
        for ds, label, color in ((nuts, "NUTS, no privacy", "C0"), (dp, "DP, eps = 1", "C3")):
            x = ds["beta"].sel(coef=name).values.ravel()
            grid = np.linspace(x.min(), x.max(), 200)
            pad = 0.5 * (grid[-1] - grid[0])
            grid = np.linspace(grid[0] - pad, grid[-1] + pad, 300)
            ax.plot(grid, gaussian_kde(x)(grid), color=color, label=label)
        ax.axvline(truth[k], color="k", ls="--", lw=1, label="true value")
        ax.set_title(name)
        ax.set_yticks([])
        # Bottom row: the DP chain from its public start (0) through burn-in, against NUTS.
        ax = axes[1, k]
        warm = dp_warm["beta"].sel(coef=name).values[0]
        post = dp["beta"].sel(coef=name).values[0]
        ax.plot(np.arange(warm.size), warm, color="0.6", lw=0.8, label="DP burn-in")
        ax.plot(warm.size + np.arange(post.size), post, color="C3", lw=0.8, label="DP draws")
        ax.axhline(float(nuts["beta"].sel(coef=name).mean()), color="C0", lw=1, label="NUTS mean")
        ax.set_xlabel("iteration")
    axes[0, 0].legend(fontsize=8, loc="upper left")
    axes[1, 0].legend(fontsize=8, loc="lower right")
    axes[0, 0].set_ylabel("posterior density")
    axes[1, 0].set_ylabel("DP chain")
    fig.suptitle("Logistic regression on synthetic patients: DP penalty (GWMH, eps = 1) vs NUTS")
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
    # DP penalty needs many people: the noise does not shrink with n, the signal grows with it.
    n, tune, draws = (5_000, 300, 300) if quick else (100_000, 2_500, 1_500)
    data = synthetic_patients(n=n, seed=1)
    names = [str(v) for v in data["names"]]
    model = build_model(encode(data), data["y"], names)
    delta = 0.1 / n  # the thesis' choice, well below 1/n
    chains = 1
    h = proposal_scale(tune, draws, chains, delta)
    print(f"pymc-dp demo: logistic regression, n = {n:_} synthetic patients, d = {len(names)}")
    print(
        f"DPPenalty: GWMH proposal, step {h:.3g}, llr_clip {LLR_CLIP:g} (never clips), "
        f"eps = {EPSILON:g}, delta = {delta:.0e}, {chains} chain x ({tune} tune + {draws} draws)\n"
    )

    with model, single_threaded_blas():
        step = pdp.DPPenalty(
            epsilon=EPSILON, delta=delta, llr_clip=LLR_CLIP, proposal_scale=h, proposal="gwmh"
        )
        t0 = time.perf_counter()
        idata_dp = pdp.sample(
            draws=draws,
            tune=tune,
            chains=chains,
            cores=1,
            step=step,
            random_seed=2024,
            progressbar=False,
            discard_tuned_samples=False,  # the burn-in is plotted; it is part of the release
            compute_convergence_checks=False,
        )
        t1 = time.perf_counter()
        with warnings.catch_warnings():
            # The non-private reference: plain PyMC on the same model, for comparison only.
            warnings.simplefilter("ignore", UserWarning)
            idata_nuts = pm.sample(
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
    stats = idata_dp["sample_stats"]
    print(
        f"  acceptance (draws) {float(stats['accepted'].mean()):.2f}, "
        f"mean noise std on log acceptance ratio {float(stats['noise_std'].mean()):.2f}\n"
    )

    dp, nuts = coefficients(idata_dp), coefficients(idata_nuts)
    truth = data["beta"]
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(
            "Posterior of the log-odds coefficients (raw covariate units; 89% equal-tailed "
            "intervals):"
        )
        print(summary_table(dp, nuts, truth))
    print(f"\n'true' = data-generating values (age and BMI before winsorising at +-{WINSOR:g}).")
    print(
        "The DP chain is one chain of noisy, small steps: its effective sample size (ess_bulk) is "
        "small,\nso read its intervals as rough. The plot's bottom row shows it walking from its "
        "public start (0)\nto the posterior; plain NUTS on the same model is the reference."
    )

    path = out / "comparison.png"
    plot(dp, coefficients(idata_dp, "warmup_posterior"), nuts, truth, path)
    print(f"Saved {path} ({time.perf_counter() - start:.0f} s)")
