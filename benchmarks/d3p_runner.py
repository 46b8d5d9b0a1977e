"""Fit a Bayesian GLM with d3p's differentially private variational inference (DPVI).

Runs INSIDE the separate environment ``.venv-d3p`` (Python 3.10, d3p 0.2.0, jax 0.4.13,
numpyro 0.12.1; see ``benchmarks/d3p_env.sh``), so it imports only numpy, jax, numpyro and d3p.
:func:`benchmarks.realdata.d3p_fit` calls it by subprocess::

    .venv-d3p/bin/python benchmarks/d3p_runner.py in.npz out.json

``in.npz`` holds ``X`` (``(n, d)``, intercept column included), ``y``, ``family``
(``"logistic"`` or ``"poisson"``), ``epsilon``, ``delta``, ``prior_sd``, ``seed`` and optionally
``num_iter``, ``batch_size``, ``clipping_threshold``, ``learning_rate``. ``out.json`` receives the
variational posterior mean and sd of ``beta`` and every setting used.

The model is ``beta ~ Normal(0, prior_sd)`` i.i.d. and ``Bernoulli(logits = X @ beta)`` or
``Poisson(exp(X @ beta))`` inside a ``plate`` of size ``n`` (subsampled), as d3p requires. The guide
is numpyro's ``AutoDiagonalNormal`` (mean-field Gaussian, as in d3p's README), started at the prior
mean with numpyro's default initial scale 0.1. The DPVI settings follow d3p's README and its
``examples/logistic_regression.py`` (no tuning on the data):

* optimiser ``Adam(1e-3)`` (README and examples);
* per-example gradient clipping threshold ``C = 10``, the value of the README's logistic
  regression example (d3p clips the *unscaled* per-example ELBO gradient, so ``C`` does not
  depend on ``n``). With rows in ``[-1, 1]^d`` the coefficient part of a logistic per-example
  gradient, ``(y - p) x``, has norm at most ``sqrt(d) < 10``, so it is never clipped. The
  ``C = 1`` of ``examples/logistic_regression.py`` clips most rows and biases the means away
  from zero (see the report); it stays available as an override;
* minibatches of fixed size drawn uniformly without replacement
  (``d3p.minibatch.subsample_batchify_data``, as in the README), size
  ``min(n, 1000, max(200, round(n / 100)))``: about 1% of the data, never fewer than the
  example's 200, and at most 1000 to keep a fit within minutes on one core (in the high-noise
  regime the noise std of the averaged gradient, ``sigma C / batch``, hardly depends on the
  batch size at a fixed iteration count, because sigma grows about linearly with ``q``);
* 30,000 iterations (the example's 600 epochs x 50 batches), a fixed count chosen before seeing
  the data so the accounting does not depend on it;
* ``dp_scale`` (the noise multiplier sigma) from ``d3p.dputil.approximate_sigma`` for the target
  ``(epsilon, delta)``, subsampling ratio ``q = batch / n`` and the iteration count, with
  ``force_smaller=True`` so the accounted epsilon never exceeds the target. That is d3p's Fourier
  accountant for the *substitute* neighbour relation, which matches its fixed-size sampling
  without replacement (the README's recipe). The add/remove-relation epsilon of the same sigma
  (``fourier_accountant.get_epsilon_R``, what ``DPSVI.get_epsilon`` reports) is recorded too;
* the ChaCha PRNG of ``d3p.random`` (d3p's default) seeded with ``seed``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import d3p.random as rng_suite
import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import numpyro.optim as optimizers
from d3p.dputil import approximate_sigma
from d3p.minibatch import subsample_batchify_data
from d3p.svi import DPSVI
from d3p.version import VERSION as D3P_VERSION
from fourier_accountant.compute_eps import get_epsilon_R
from numpyro.infer import Trace_ELBO
from numpyro.infer.autoguide import AutoDiagonalNormal
from numpyro.infer.initialization import init_to_mean
from numpyro.primitives import plate, sample

#: Defaults of the DPVI settings (see the module docstring for their sources).
NUM_ITER = 30_000
LEARNING_RATE = 1e-3
CLIPPING_THRESHOLD = 10.0
MIN_BATCH = 200
MAX_BATCH = 1000
BATCH_FRACTION = 0.01
#: Iterations per jitted chunk (progress granularity only; no effect on the result).
CHUNK = 1000


def default_batch_size(n: int) -> int:
    """About 1% of ``n``, at least 200, at most 1000 and at most ``n``.

    Parameters
    ----------
    n : int
        Number of records.

    Returns
    -------
    int
        Minibatch size.
    """
    return int(min(n, MAX_BATCH, max(MIN_BATCH, round(BATCH_FRACTION * n))))


def _epsilon_add_remove(delta: float, dp_scale: float, q: float, num_iter: int) -> float | None:
    """Add/remove-relation epsilon of the chosen sigma (recorded only; ``None`` if it fails).

    The Fourier accountant raises when epsilon falls outside its ``[-L, L]`` grid; the grid is
    widened once before giving up.

    Parameters
    ----------
    delta, dp_scale, q : float
        Target delta, noise multiplier and subsampling ratio.
    num_iter : int
        Number of compositions.

    Returns
    -------
    float or None
        The epsilon, or ``None`` when the accountant cannot compute it.
    """
    for L in (20.0, 40.0):
        try:
            eps = float(get_epsilon_R(delta, dp_scale, q, ncomp=num_iter, L=L, nx=1e6 * L / 20))
        except ValueError:
            continue
        if math.isfinite(eps):
            return eps
    return None


def make_model(family: str, prior_sd: float) -> Any:
    """NumPyro GLM ``model(X, y=None, N=None)`` with a plate over the (sub-sampled) records.

    Parameters
    ----------
    family : str
        ``"logistic"`` or ``"poisson"``.
    prior_sd : float
        Sd of the i.i.d. Normal(0, prior_sd) prior of the coefficients.

    Returns
    -------
    callable
        The model function.
    """
    if family not in ("logistic", "poisson"):
        raise ValueError(f"unknown family {family!r}")

    def model(X: jnp.ndarray, y: jnp.ndarray | None = None, N: int | None = None) -> None:
        batch, d = jnp.shape(X)
        total = batch if N is None else N
        beta = sample("beta", dist.Normal(jnp.zeros(d), prior_sd).to_event(1))
        eta = X @ beta
        with plate("batch", total, batch):
            if family == "logistic":
                sample("obs", dist.Bernoulli(logits=eta), obs=y)
            else:
                sample("obs", dist.Poisson(jnp.exp(eta)), obs=y)

    return model


def fit(
    X: np.ndarray,
    y: np.ndarray,
    family: str,
    epsilon: float,
    delta: float,
    prior_sd: float,
    seed: int,
    num_iter: int = NUM_ITER,
    batch_size: int | None = None,
    clipping_threshold: float = CLIPPING_THRESHOLD,
    learning_rate: float = LEARNING_RATE,
) -> dict[str, Any]:
    """Run DPVI and return the variational posterior of ``beta`` with the settings used.

    Parameters
    ----------
    X : numpy.ndarray
        ``(n, d)`` design matrix.
    y : numpy.ndarray
        ``(n,)`` responses.
    family : str
        ``"logistic"`` or ``"poisson"``.
    epsilon, delta : float
        Target privacy budget.
    prior_sd : float
        Prior sd of the coefficients.
    seed : int
        Seed of the ChaCha PRNG (minibatches, DP noise, reparametrisation draws).
    num_iter : int, default :data:`NUM_ITER`
        Number of DPVI iterations.
    batch_size : int, optional
        Minibatch size; :func:`default_batch_size` when omitted.
    clipping_threshold : float, default :data:`CLIPPING_THRESHOLD`
        Per-example gradient clipping threshold.
    learning_rate : float, default :data:`LEARNING_RATE`
        Adam step size.

    Returns
    -------
    dict
        ``mean``, ``sd`` (lists), ``settings``, ``dp_scale``, ``epsilon_substitute`` (accounted,
        the relation d3p's recipe uses), ``epsilon_add_remove``, ``accounting_seconds``,
        ``fit_seconds`` and ``final_loss`` (mean minibatch loss of the last chunk, a non-private
        diagnostic).
    """
    n, d = X.shape
    batch = default_batch_size(n) if batch_size is None else int(batch_size)
    q = batch / n

    t0 = time.perf_counter()
    dp_scale, eps_s, _ = approximate_sigma(epsilon, delta, q, num_iter, force_smaller=True)
    eps_r = _epsilon_add_remove(delta, dp_scale, q, num_iter)
    accounting_seconds = time.perf_counter() - t0

    model = make_model(family, prior_sd)
    guide = AutoDiagonalNormal(model, init_loc_fn=init_to_mean)
    Xj = jnp.asarray(X, dtype=jnp.float32)
    yj = jnp.asarray(y, dtype=jnp.float32)

    rng = rng_suite.PRNGKey(seed)
    rng, init_rng, batch_rng = rng_suite.split(rng, 3)
    batch_init, get_batch = subsample_batchify_data((Xj, yj), batch_size=batch)
    _, batch_state = batch_init(batch_rng)

    dpsvi = DPSVI(
        model,
        guide,
        optimizers.Adam(learning_rate),
        Trace_ELBO(),
        clipping_threshold=clipping_threshold,
        dp_scale=dp_scale,
        rng_suite=rng_suite,
        N=n,
    )
    state = dpsvi.init(init_rng, *get_batch(0, batch_state))

    @jax.jit
    def run_chunk(state: Any, start: jnp.ndarray, length: int) -> tuple[Any, jnp.ndarray]:
        def body(i: int, carry: tuple[Any, jnp.ndarray]) -> tuple[Any, jnp.ndarray]:
            st, loss_sum = carry
            xb, yb = get_batch(start + i, batch_state)
            st, loss = dpsvi.update(st, xb, yb)
            return st, loss_sum + loss

        return jax.lax.fori_loop(0, length, body, (state, jnp.zeros(())))

    t0 = time.perf_counter()
    done = 0
    loss_sum = jnp.zeros(())
    while done < num_iter:
        length = min(CHUNK, num_iter - done)
        state, loss_sum = run_chunk(state, jnp.asarray(done), length)
        done += length
        loss_sum.block_until_ready()
        last_len = length
    fit_seconds = time.perf_counter() - t0

    params = dpsvi.get_params(state)
    mean = np.asarray(params["auto_loc"], dtype=np.float64)
    sd = np.asarray(params["auto_scale"], dtype=np.float64)
    return {
        "mean": mean.tolist(),
        "sd": sd.tolist(),
        "settings": {
            "num_iter": int(num_iter),
            "batch_size": batch,
            "q": q,
            "epochs": num_iter * q,
            "clipping_threshold": float(clipping_threshold),
            "learning_rate": float(learning_rate),
            "optimizer": "Adam",
            "guide": "AutoDiagonalNormal(init_loc_fn=init_to_mean, init_scale=0.1)",
            "sampling": "subsample_batchify_data (fixed size, without replacement)",
            "accountant": "d3p.dputil.approximate_sigma (Fourier, substitute relation)",
            "prng": "d3p.random (ChaCha20)",
            "epsilon": float(epsilon),
            "delta": float(delta),
            "prior_sd": float(prior_sd),
            "seed": int(seed),
            "family": family,
            "n": int(n),
            "d": int(d),
        },
        "dp_scale": float(dp_scale),
        "epsilon_substitute": float(eps_s),
        "epsilon_add_remove": eps_r,
        "accounting_seconds": accounting_seconds,
        "fit_seconds": fit_seconds,
        "final_loss": float(loss_sum) / last_len,
        "versions": {
            "jax": jax.__version__,
            "d3p": D3P_VERSION,
            "numpyro": __import__("numpyro").__version__,
        },
    }


def main(argv: list[str]) -> None:
    """Read ``argv[0]`` (.npz), fit, write ``argv[1]`` (.json).

    Parameters
    ----------
    argv : list of str
        ``[in.npz, out.json]``.
    """
    if len(argv) != 2:
        raise SystemExit("usage: d3p_runner.py in.npz out.json")
    with np.load(argv[0]) as z:
        inp = {k: z[k] for k in z.files}
    optional: dict[str, Any] = {}
    if "num_iter" in inp:
        optional["num_iter"] = int(inp["num_iter"])
    if "batch_size" in inp:
        optional["batch_size"] = int(inp["batch_size"])
    for key in ("clipping_threshold", "learning_rate"):
        if key in inp:
            optional[key] = float(inp[key])
    out = fit(
        X=np.asarray(inp["X"], dtype=np.float64),
        y=np.asarray(inp["y"], dtype=np.float64),
        family=str(inp["family"]),
        epsilon=float(inp["epsilon"]),
        delta=float(inp["delta"]),
        prior_sd=float(inp["prior_sd"]),
        seed=int(inp["seed"]),
        **optional,
    )
    with open(argv[1], "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
