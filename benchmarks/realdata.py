"""Utility benchmark on real data sets that pymc-dp does not generate.

Data sets (all shipped inside a package, nothing is downloaded):

================== ======= == ======== =========================================================
name               n       d  family   source
================== ======= == ======== =========================================================
randhie            20190   10 logistic ``statsmodels.datasets.randhie``, ``mdvis > 0``
randhie_poisson    20190   10 poisson  same covariates, ``min(mdvis, 30)`` (public cap)
fair               6366    9  logistic ``statsmodels.datasets.fair``, ``affairs > 0``
breast_cancer      569     8  logistic ``sklearn.datasets.load_breast_cancer``, malignant
synthetic_1e5      100000  10 logistic i.i.d. uniform covariates, fixed seed
synthetic_1e6      1000000 10 logistic i.i.d. uniform covariates, fixed seed
================== ======= == ======== =========================================================

``d`` counts the intercept. Every covariate is clipped to a **public** range ``[lo, hi]`` (see
:data:`PUBLIC_BOUNDS`, one line of source per variable) and mapped affinely onto ``[-1, 1]``;
no scale is derived from the data values. So every entry of a row of ``X`` is in ``[-1, 1]``
and the L2 norm of a row is at most ``sqrt(d)``.

The model (:func:`model`) is a Bayesian GLM with ``beta ~ Normal(0, prior_sd)`` i.i.d. on the
encoded scale (default :data:`PRIOR_SD` = 2.5, the weakly informative scale of Gelman et al. 2008
for inputs of unit range) and either ``Bernoulli(logit_p = X @ beta)`` or
``Poisson(exp(X @ beta))``.

:func:`nuts_reference` gives the non-private posterior mean and sd of ``beta`` (PyMC NUTS, 4 chains
x 1000 draws, 1000 tuning steps, fixed seed), cached under ``benchmarks/_cache/``.
:func:`d3p_fit` fits the same model with d3p's DP variational inference in the separate
environment ``.venv-d3p`` (create it with ``bash benchmarks/d3p_env.sh``) through
``benchmarks/d3p_runner.py``.

``python -m benchmarks.realdata [--names ...] [--eps 1 4] [--seeds 0 1 2]`` computes (or reads
from the cache) the references and the d3p fits and prints the comparison tables.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pymc as pm

import pymc_dp as pdp

__all__ = [
    "CACHE_DIR",
    "D3P_PYTHON",
    "NAMES",
    "POISSON_CAP",
    "PRIOR_SD",
    "PUBLIC_BOUNDS",
    "RealData",
    "compare",
    "d3p_delta",
    "d3p_fit",
    "potential_model",
    "load",
    "main",
    "model",
    "nuts_reference",
]

ROOT = Path(__file__).resolve().parent.parent
#: Computed references and d3p fits (not meant to be committed).
CACHE_DIR = ROOT / "benchmarks" / "_cache"
#: Interpreter of the d3p environment made by ``benchmarks/d3p_env.sh``.
D3P_PYTHON = ROOT / ".venv-d3p" / "bin" / "python"
D3P_RUNNER = ROOT / "benchmarks" / "d3p_runner.py"

NAMES: tuple[str, ...] = (
    "randhie",
    "randhie_poisson",
    "fair",
    "breast_cancer",
    "synthetic_1e5",
    "synthetic_1e6",
)
#: Default prior sd of every coefficient on the encoded ([-1, 1]) scale.
PRIOR_SD = 2.5
#: Public cap of the outpatient-visit count of ``randhie_poisson``: ``y = min(mdvis, 30)``. Thirty
#: MD visits a year (more than one every two weeks) is a round a-priori cap; it bounds one
#: person's Poisson log-likelihood term and its gradient.
POISSON_CAP = 30

#: NUTS settings of :func:`nuts_reference`.
NUTS_DRAWS = 1000
NUTS_TUNE = 1000
NUTS_CHAINS = 4
NUTS_SEED = 20240601

#: Seed of the synthetic covariates, coefficients and responses.
SYNTHETIC_SEED = 12345
SYNTHETIC_D = 10

_LN101 = math.log(101.0)
_LN4000 = math.log(4000.0)
_LN10000 = math.log(10000.0)

#: Public range ``(lo, hi, source)`` of each covariate, before encoding. Values outside are
#: clipped (a data-independent map). Binary flags are ``(0, 1)``.
PUBLIC_BOUNDS: dict[str, dict[str, tuple[float, float, str]]] = {
    "randhie": {
        "lncoins": (0.0, _LN101, "codebook: ln(coinsurance + 1) with 0 <= coinsurance <= 100"),
        "idp": (0.0, 1.0, "codebook: binary flag (individual deductible plan)"),
        "lpi": (
            0.0,
            _LN10000,
            "codebook: ln(max(1, annual participation incentive $)); a-priori cap of $10,000 a "
            "year (the HIE incentive only had to exceed the <= $1,000 MDE)",
        ),
        "fmde": (
            0.0,
            _LN4000,
            "codebook: 0 or ln(max(1, MDE / (0.01 coinsurance))); HIE design (Manning et al. "
            "1987): MDE <= $1,000 and the smallest non-zero coinsurance is 25%",
        ),
        "physlm": (0.0, 1.0, "codebook: binary flag (physical limitation)"),
        "disea": (
            0.0,
            100.0,
            "codebook: number of chronic diseases; no published maximum, loose a-priori cap 100",
        ),
        "hlthg": (0.0, 1.0, "codebook: binary flag (self-rated health good)"),
        "hlthf": (0.0, 1.0, "codebook: binary flag (self-rated health fair)"),
        "hlthp": (0.0, 1.0, "codebook: binary flag (self-rated health poor)"),
    },
    "fair": {
        "rate_marriage": (1.0, 5.0, "codebook: 1 = very poor ... 5 = very good"),
        "age": (17.5, 42.0, "Fair (1978) interval codes 17.5, 22, 27, 32, 37, 42"),
        "yrs_married": (0.0, 23.0, "Fair (1978) interval codes 0.5 ... 23 (top interval)"),
        "children": (0.0, 5.5, "Fair (1978) codes 0, 1, 2, 3, 4, 5.5 (= 5 or more)"),
        "religious": (1.0, 4.0, "codebook: 1 = not ... 4 = strongly"),
        "educ": (9.0, 20.0, "codebook: 9 = grade school ... 20 = advanced degree"),
        "occupation": (1.0, 6.0, "codebook: categories 1 ... 6"),
        "occupation_husb": (1.0, 6.0, "codebook: categories 1 ... 6 (same as occupation)"),
    },
    # The sklearn DESCR publishes the min / max of each feature in its "Summary Statistics"
    # table; these are the brief's "documented range", rounded outwards. NB: they are summary
    # statistics of this same data set, so they are public by documentation, not by design (a
    # strict DP analysis would have to pay for them or use a-priori bounds).
    "breast_cancer": {
        "mean radius": (5.0, 30.0, "sklearn DESCR range 6.981-28.11, rounded outwards"),
        "mean texture": (5.0, 40.0, "sklearn DESCR range 9.71-39.28, rounded outwards"),
        "mean smoothness": (0.05, 0.17, "sklearn DESCR range 0.053-0.163, rounded outwards"),
        "mean concavity": (0.0, 0.45, "sklearn DESCR range 0.0-0.427, rounded outwards"),
        "mean concave points": (0.0, 0.21, "sklearn DESCR range 0.0-0.201, rounded outwards"),
        "mean symmetry": (0.1, 0.31, "sklearn DESCR range 0.106-0.304, rounded outwards"),
        "mean fractal dimension": (0.05, 0.1, "sklearn DESCR range 0.05-0.097, rounded outwards"),
    },
    "synthetic": {
        f"x{j}": (-1.0, 1.0, "generated uniform on [-1, 1] (by construction)")
        for j in range(1, SYNTHETIC_D)
    },
}
PUBLIC_BOUNDS["randhie_poisson"] = PUBLIC_BOUNDS["randhie"]
PUBLIC_BOUNDS["synthetic_1e5"] = PUBLIC_BOUNDS["synthetic"]
PUBLIC_BOUNDS["synthetic_1e6"] = PUBLIC_BOUNDS["synthetic"]


@dataclass(frozen=True)
class RealData:
    """A GLM data set with covariates encoded into ``[-1, 1]`` by public bounds.

    Attributes
    ----------
    name : str
        Name of the data set (one of :data:`NAMES`).
    X : numpy.ndarray
        ``(n, d)`` float64 design matrix, intercept column (all ones) first, every entry in
        ``[-1, 1]``.
    y : numpy.ndarray
        ``(n,)`` responses: 0/1 (``int64``) for ``"logistic"``, counts in
        ``[0, POISSON_CAP]`` for ``"poisson"``.
    names : tuple of str
        Column names of ``X`` (``"intercept"`` first).
    family : str
        ``"logistic"`` or ``"poisson"``.
    bounds : dict
        Public range ``(lo, hi)`` of each covariate before encoding.
    sources : dict
        One-line source or justification of each bound.
    row_norm_bound : float
        Upper bound of the L2 norm of a row of ``X`` implied by the encoding (``sqrt(d)``).
    abs_bounds : numpy.ndarray
        ``(d,)`` upper bound of ``|X[:, j]|`` implied by the encoding (all ones).
    y_bound : float
        Public bound of ``|y|`` (1 for logistic, :data:`POISSON_CAP` for Poisson).
    n_clipped : dict
        Number of values clipped to the public range, per covariate (0 when the public range
        covers the data; reported, never used to choose the range).
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    names: tuple[str, ...]
    family: str
    bounds: dict[str, tuple[float, float]]
    sources: dict[str, str]
    row_norm_bound: float
    abs_bounds: np.ndarray
    y_bound: float
    n_clipped: dict[str, int] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Number of rows."""
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        """Number of columns of ``X`` (intercept included)."""
        return int(self.X.shape[1])


def _assemble(
    name: str, raw: dict[str, np.ndarray], y: np.ndarray, family: str, y_bound: float
) -> RealData:
    """Encode the covariates of ``raw`` by :data:`PUBLIC_BOUNDS` (``pdp.encode_covariates``) and
    build a :class:`RealData`."""
    table = PUBLIC_BOUNDS[name]
    bounds = {var: (lo, hi) for var, (lo, hi, _) in table.items()}
    enc = pdp.encode_covariates(raw, bounds)
    # A benchmark-only diagnostic on public-domain data; pdp.encode_covariates never returns it
    # (on private data the count is a statistic of the data).
    n_clipped = {
        var: int(np.count_nonzero((raw[var] < lo) | (raw[var] > hi)))
        for var, (lo, hi) in bounds.items()
    }
    return RealData(
        name=name,
        X=enc.X,
        y=np.asarray(y),
        names=enc.names,
        family=family,
        bounds=bounds,
        sources={var: src for var, (_, _, src) in table.items()},
        row_norm_bound=float(math.sqrt(enc.X.shape[1])),
        abs_bounds=enc.covariate_bounds,
        y_bound=float(y_bound),
        n_clipped=n_clipped,
    )


def _synthetic(name: str, n: int) -> RealData:
    """Logistic data with an intercept and 9 i.i.d. uniform[-1, 1] covariates (fixed seed).

    The coefficients ``beta ~ Normal(0, 1)`` are drawn from :data:`SYNTHETIC_SEED` and shared by
    both sizes; the covariates and responses of each size come from a seed derived from ``n``.
    """
    beta = np.random.default_rng(SYNTHETIC_SEED).normal(0.0, 1.0, SYNTHETIC_D)
    rng = np.random.default_rng([SYNTHETIC_SEED, n])
    Z = rng.uniform(-1.0, 1.0, (n, SYNTHETIC_D - 1))
    eta = beta[0] + Z @ beta[1:]
    y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int64)
    raw = {f"x{j}": Z[:, j - 1] for j in range(1, SYNTHETIC_D)}
    return _assemble(name, raw, y, "logistic", 1.0)


def load(name: str) -> RealData:
    """Load and encode one of the benchmark data sets.

    Parameters
    ----------
    name : str
        One of :data:`NAMES`.

    Returns
    -------
    RealData
        Encoded design matrix (intercept first), responses and the public bounds.
    """
    if name in ("randhie", "randhie_poisson"):
        from statsmodels.datasets import randhie

        df = randhie.load_pandas().data
        raw = {c: df[c].to_numpy(np.float64) for c in PUBLIC_BOUNDS["randhie"]}
        mdvis = df["mdvis"].to_numpy(np.float64)
        if name == "randhie":
            return _assemble(name, raw, (mdvis > 0).astype(np.int64), "logistic", 1.0)
        y = np.minimum(mdvis, POISSON_CAP).astype(np.int64)
        return _assemble(name, raw, y, "poisson", POISSON_CAP)
    if name == "fair":
        from statsmodels.datasets import fair

        df = fair.load_pandas().data
        raw = {c: df[c].to_numpy(np.float64) for c in PUBLIC_BOUNDS["fair"]}
        y = (df["affairs"].to_numpy() > 0).astype(np.int64)
        return _assemble(name, raw, y, "logistic", 1.0)
    if name == "breast_cancer":
        from sklearn.datasets import load_breast_cancer

        bunch = load_breast_cancer()
        feats = list(bunch.feature_names)
        raw = {c: bunch.data[:, feats.index(c)] for c in PUBLIC_BOUNDS["breast_cancer"]}
        y = (bunch.target == 0).astype(np.int64)  # target 0 is malignant in sklearn
        return _assemble(name, raw, y, "logistic", 1.0)
    if name == "synthetic_1e5":
        return _synthetic(name, 100_000)
    if name == "synthetic_1e6":
        return _synthetic(name, 1_000_000)
    raise KeyError(f"unknown data set {name!r}; expected one of {NAMES}")


def model(data: RealData, prior_sd: float = PRIOR_SD) -> pm.Model:
    """The Bayesian GLM of ``data``.

    Parameters
    ----------
    data : RealData
        Encoded data set.
    prior_sd : float, default :data:`PRIOR_SD`
        Sd of the i.i.d. ``Normal(0, prior_sd)`` prior of each coefficient on the encoded scale.

    Returns
    -------
    pymc.Model
        ``beta`` (shape ``d``, dims ``"coef"``), ``X`` as ``pm.Data`` and observed ``y``:
        ``Bernoulli(logit_p = X @ beta)`` or ``Poisson(exp(X @ beta))``.
    """
    with pm.Model(coords={"coef": list(data.names)}) as m:
        X = pm.Data("X", data.X)
        beta = pm.Normal("beta", 0.0, prior_sd, dims="coef")
        eta = pm.math.dot(X, beta)
        if data.family == "logistic":
            pm.Bernoulli("y", logit_p=eta, observed=data.y)
        elif data.family == "poisson":
            pm.Poisson("y", mu=pm.math.exp(eta), observed=data.y)
        else:
            raise ValueError(f"unknown family {data.family!r}")
    return m


#: From this many rows on, :func:`nuts_reference` samples :func:`potential_model` compiled with
#: numba instead of :func:`model` (same posterior; ~5x faster gradient at n = 1e5).
FAST_NUTS_N = 500_000


def potential_model(data: RealData, prior_sd: float = PRIOR_SD) -> pm.Model:
    """The posterior of :func:`model` with the log-likelihood written as one ``pm.Potential``.

    ``sum(y eta - log(1 + exp(eta)))`` (logistic) or ``sum(y eta - exp(eta))`` (Poisson, the
    constant ``-sum(log y!)`` dropped), ``eta = X @ beta``: the same unnormalised posterior as
    :func:`model`, without the per-row parameter checks of ``pm.Bernoulli`` / ``pm.Poisson``, so
    NUTS on a million rows takes minutes instead of hours.

    Parameters
    ----------
    data : RealData
        Encoded data set.
    prior_sd : float, default :data:`PRIOR_SD`
        Prior sd of the coefficients.

    Returns
    -------
    pymc.Model
        ``beta`` (dims ``"coef"``) and the potential ``loglik``.
    """
    import pytensor.tensor as pt

    with pm.Model(coords={"coef": list(data.names)}) as m:
        X = pt.constant(data.X)
        y = pt.constant(data.y.astype(np.float64))
        beta = pm.Normal("beta", 0.0, prior_sd, dims="coef")
        eta = pt.dot(X, beta)
        if data.family == "logistic":
            pm.Potential("loglik", pt.sum(y * eta - pt.log1pexp(eta)))
        elif data.family == "poisson":
            pm.Potential("loglik", pt.sum(y * eta - pt.exp(eta)))
        else:
            raise ValueError(f"unknown family {data.family!r}")
    return m


def _cache_path(stem: str, suffix: str) -> Path:
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    return CACHE_DIR / f"{stem}{suffix}"


def nuts_reference(
    name: str, prior_sd: float = PRIOR_SD, refresh: bool = False, cores: int = 2
) -> dict[str, Any]:
    """Non-private posterior mean and sd of ``beta`` by NUTS, cached.

    Parameters
    ----------
    name : str
        Data set (one of :data:`NAMES`).
    prior_sd : float, default :data:`PRIOR_SD`
        Prior sd of the coefficients.
    refresh : bool, default False
        Recompute even if ``benchmarks/_cache/<name>_nuts.npz`` exists.
    cores : int, default 2
        Chains run in parallel (the 4 chains share these cores).

    Returns
    -------
    dict
        ``mean`` and ``sd`` (``(d,)`` arrays), and the diagnostics ``rhat_max``, ``ess_bulk_min``,
        ``divergences``, ``seconds`` (sampling wall time), ``prior_sd`` and ``potential_numba``
        (whether :func:`potential_model` compiled with numba was sampled, for
        ``n >= FAST_NUTS_N``).
    """
    suffix = "_nuts.npz" if prior_sd == PRIOR_SD else f"_nuts_prior{prior_sd:g}.npz"
    path = _cache_path(name, suffix)
    if path.exists() and not refresh:
        with np.load(path) as z:
            return {k: (z[k] if z[k].ndim else z[k].item()) for k in z.files}

    import arviz as az

    data = load(name)
    fast = data.n >= FAST_NUTS_N
    m = potential_model(data, prior_sd) if fast else model(data, prior_sd)
    t0 = time.perf_counter()
    with m:
        idata = pm.sample(
            draws=NUTS_DRAWS,
            tune=NUTS_TUNE,
            chains=NUTS_CHAINS,
            cores=cores,
            random_seed=NUTS_SEED,
            progressbar=False,
            compute_convergence_checks=False,
            compile_kwargs={"mode": "NUMBA"} if fast else None,
        )
    seconds = time.perf_counter() - t0
    draws = idata.posterior["beta"].values.reshape(-1, data.d)
    rhat = az.rhat(idata, var_names=["beta"])["beta"].values
    ess = az.ess(idata, var_names=["beta"], method="bulk")["beta"].values
    out: dict[str, Any] = {
        "mean": draws.mean(axis=0),
        "sd": draws.std(axis=0, ddof=1),
        "rhat_max": float(np.max(rhat)),
        "ess_bulk_min": float(np.min(ess)),
        "divergences": int(idata.sample_stats["diverging"].values.sum()),
        "seconds": float(seconds),
        "prior_sd": float(prior_sd),
        "potential_numba": bool(fast),
    }
    np.savez(path, **out)
    return out


def d3p_delta(n: int) -> float:
    """The delta of the d3p fits: ``min(1e-6, 1 / (10 n))``."""
    return min(1e-6, 1.0 / (10.0 * n))


def _d3p_env() -> dict[str, str]:
    """Environment of the d3p subprocess: one BLAS / XLA thread, CPU only."""
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    env.pop("PYTHONPATH", None)
    return env


def d3p_fit(
    name: str,
    epsilon: float,
    seed: int,
    prior_sd: float = PRIOR_SD,
    refresh: bool = False,
    **settings: float,
) -> dict[str, Any]:
    """Fit the model of ``name`` with d3p's DP variational inference, cached.

    Writes the encoded data and settings to an ``.npz`` in a temporary directory, runs
    ``.venv-d3p/bin/python benchmarks/d3p_runner.py in.npz out.json`` and reads the result.

    Parameters
    ----------
    name : str
        Data set (one of :data:`NAMES`).
    epsilon : float
        Privacy budget; ``delta`` is :func:`d3p_delta` of ``n``.
    seed : int
        Seed of d3p's (ChaCha) PRNG.
    prior_sd : float, default :data:`PRIOR_SD`
        Prior sd of the coefficients.
    refresh : bool, default False
        Refit even if the cached json exists.
    **settings : float
        Overrides of the runner's DPVI settings (``num_iter``, ``batch_size``,
        ``clipping_threshold``, ``learning_rate``); the defaults are in
        ``benchmarks/d3p_runner.py`` and are recorded in the result.

    Returns
    -------
    dict
        ``mean`` and ``sd`` of ``beta`` under the variational posterior (arrays), ``seconds``
        (wall time of the subprocess, JAX compilation and accounting included), and what the
        runner reports (``settings``, ``dp_scale``, ``epsilon_accounted``, ``fit_seconds``, ...).
    """
    tag = "".join(f"_{k}{v:g}" for k, v in sorted(settings.items()))
    prior_tag = "" if prior_sd == PRIOR_SD else f"_prior{prior_sd:g}"
    path = _cache_path(f"{name}_d3p_eps{epsilon:g}_seed{seed}{prior_tag}{tag}", ".json")
    if path.exists() and not refresh:
        out = json.loads(path.read_text())
    else:
        if not D3P_PYTHON.exists():
            raise FileNotFoundError(f"{D3P_PYTHON} missing: run `bash benchmarks/d3p_env.sh`")
        data = load(name)
        with tempfile.TemporaryDirectory(prefix="d3p_") as tmp:
            inp, outp = Path(tmp) / "in.npz", Path(tmp) / "out.json"
            np.savez(
                inp,
                X=data.X,
                y=data.y.astype(np.float64),
                family=data.family,
                epsilon=float(epsilon),
                delta=d3p_delta(data.n),
                prior_sd=float(prior_sd),
                seed=int(seed),
                **{k: float(v) for k, v in settings.items()},
            )
            t0 = time.perf_counter()
            proc = subprocess.run(
                [str(D3P_PYTHON), str(D3P_RUNNER), str(inp), str(outp)],
                env=_d3p_env(),
                capture_output=True,
                text=True,
                check=False,
            )
            seconds = time.perf_counter() - t0
            if proc.returncode != 0:
                raise RuntimeError(f"d3p runner failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
            out = json.loads(outp.read_text())
        out["seconds"] = seconds
        out["name"] = name
        path.write_text(json.dumps(out, indent=1))
    out["mean"] = np.asarray(out["mean"], dtype=np.float64)
    out["sd"] = np.asarray(out["sd"], dtype=np.float64)
    return out


def compare(fit: dict[str, Any], ref: dict[str, Any]) -> dict[str, float]:
    """Error of a fit in units of the reference posterior sd.

    Parameters
    ----------
    fit, ref : dict
        ``mean`` and ``sd`` arrays of the fit and of the NUTS reference.

    Returns
    -------
    dict
        ``z_max`` and ``z_med`` (max and median over coefficients of
        ``|mean_fit - mean_ref| / sd_ref``), and ``sd_ratio_med``, ``sd_ratio_min``,
        ``sd_ratio_max`` of ``sd_fit / sd_ref``, and ``z_own_max``: the largest error in the
        fit's own sds (about 2 or less when its intervals cover the reference mean).
    """
    z = np.abs(np.asarray(fit["mean"]) - ref["mean"]) / ref["sd"]
    r = np.asarray(fit["sd"]) / ref["sd"]
    return {
        "z_own_max": float(np.max(z / r)),
        "z_max": float(np.max(z)),
        "z_med": float(np.median(z)),
        "sd_ratio_med": float(np.median(r)),
        "sd_ratio_min": float(np.min(r)),
        "sd_ratio_max": float(np.max(r)),
    }


def main(argv: list[str] | None = None) -> None:
    """Print the NUTS references and the d3p comparison (everything cached).

    Parameters
    ----------
    argv : list of str, optional
        Command-line arguments (``--names``, ``--eps``, ``--seeds``, ``--no-d3p``).
    """
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--names", nargs="+", default=list(NAMES))
    p.add_argument("--eps", nargs="+", type=float, default=[1.0, 4.0])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--no-d3p", action="store_true", help="only the NUTS references")
    args = p.parse_args(argv)

    print("name                 n    d  fisher  nuts_s  rhat   posterior sds")
    for name in args.names:
        data = load(name)
        ref = nuts_reference(name)
        fisher = math.sqrt(data.n) * float(np.median(ref["sd"]))
        sds = " ".join(f"{s:.3g}" for s in ref["sd"])
        print(
            f"{name:16s} {data.n:7d} {data.d:3d} {fisher:6.2f} {ref['seconds']:7.0f} "
            f"{ref['rhat_max']:5.3f}  {sds}"
        )
    if args.no_d3p:
        return
    print("\nname              eps seed  z_max  z_med  sdr_med [min, max]   secs")
    for name in args.names:
        ref = nuts_reference(name)
        for eps in args.eps:
            for seed in args.seeds:
                fit = d3p_fit(name, eps, seed)
                c = compare(fit, ref)
                print(
                    f"{name:16s} {eps:4g} {seed:4d} {c['z_max']:6.2f} {c['z_med']:6.2f} "
                    f"{c['sd_ratio_med']:7.2f} [{c['sd_ratio_min']:.2f}, "
                    f"{c['sd_ratio_max']:.2f}] {fit['seconds']:6.1f}"
                )


if __name__ == "__main__":
    main()
