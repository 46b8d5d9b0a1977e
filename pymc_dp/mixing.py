r"""How well an anchored chain will mix, predicted by simulating it on a Gaussian posterior.

An anchored :class:`~pymc_dp.DPPenalty` (``hess_clip``, :mod:`pymc_dp.anchor`) mixes an
independence proposal (a share :data:`~pymc_dp.anchor.INDEPENDENT_SHARE` of its
iterations) with one-coordinate guided-walk moves, and tests each with the penalty test whose
noise is known before the data are read: ``sigma = 2 s C |q' - q| (|q - a| + |q' - a|) / 2``
(``s`` the noise multiplier, ``C`` the bound on the rows' curvature, ``a`` the anchor). Its ESS
therefore depends on three things a closed form gets wrong together:

* **the Hastings term.** The independence proposal is the warm start's noise-aware Gaussian,
  then the warm-up draws' ESS-weighted mean and covariance
  (:class:`~pymc_dp.tuning.adaptation.WindowedCovariance`): it is off the posterior by
  the error of a mean and a covariance from a few dozen effective draws, and the log ratio of
  posterior to proposal enters every test;
* **a fixed point.** How well the proposal is estimated depends on how well the chain mixed
  while it was estimated;
* **sticky states.** States far from the anchor meet a noisier test and are left rarely, and
  they are where a coordinate's square is large.

A quadrature over the posterior with the proposal taken as the posterior (the planner's model
until this module) was 1.4-2.2x optimistic against the median coordinate's bulk ESS and 1.7-6x
against the smallest, at d = 10 (acceptance 0.38 predicted against 0.30 measured). So the
prediction runs the chain's own algorithm: the same proposals, the same test noise, PyMC's dual
averaging and this package's windowed adaptation, on the Gaussian posterior with the sds the
warm start released (or the planner assumes), the anchor and warm start off by their predicted
error, for :data:`REPLICATES` runs of ``chains`` chains, and reports the median over runs of the
run's bulk ESS (smallest over coordinates, ArviZ) and R-hat (largest). It reads public values
only and is seeded: the same inputs give the same prediction. What it leaves out: the
posterior's correlations and non-Gaussian shape, and the anchor's tilt (which moves the chain's
target, not its mixing).
"""

from __future__ import annotations

import numpy as np
from arviz_stats.base import array_stats
from pymc.step_methods.step_sizes import DualAverageAdaptation

from pymc_dp.anchor import INDEPENDENT_SHARE, LOCAL_TARGET_ACCEPT
from pymc_dp.tuning.adaptation import WindowedCovariance

__all__ = ["REPLICATES", "run_diagnostics", "simulate_anchored_chain", "simulated_draws"]

#: Runs (of ``chains`` chains each, with their own warm-start error and tilt) the prediction is
#: the median over. Between runs of one setting the smallest bulk ESS varies about 3x (measured
#: on real runs at d = 10: 48-335). Measured spread of the prediction over five simulation seeds
#: at d = 10: 8 runs 224-438 (review), 16 runs 127-241, 32 runs 128-162 (7 s a call).
REPLICATES = 32
#: Replicates simulated together (memory: draws x chains x D per group).
_GROUP = 8


def run_diagnostics(run: np.ndarray) -> tuple[float, float]:
    """``(bulk ESS, R-hat)`` of a simulated run ``(chains, draws, dim)``: the smallest ESS and
    the largest R-hat over the coordinates. A coordinate that never moved has no ESS: a stuck run
    is worth one draw per chain (and R-hat inf)."""
    chains = run.shape[0]
    with np.errstate(all="ignore"):
        e = array_stats.ess(run, chain_axis=0, draw_axis=1, method="bulk")
        h = array_stats.rhat(run, chain_axis=0, draw_axis=1) if chains > 1 else np.ones(1)
    return (
        float(np.min(np.where(np.isfinite(e), e, chains))),
        float(np.max(np.where(np.isfinite(h), h, np.inf))),
    )


def simulate_anchored_chain(
    s: float,
    hess_clip: float,
    posterior_sd: np.ndarray,
    offset_sd: float | np.ndarray,
    chains: int,
    tune: int,
    draws: int,
    *,
    tilt_sd: float | np.ndarray = 0.0,
    anchor_cov: np.ndarray | None = None,
    warm_cov: np.ndarray | None = None,
    replicates: int = REPLICATES,
    seed: int = 0,
) -> dict:
    """Predicted ``acceptance`` (of the independence proposals), bulk ``ess`` (all chains,
    smallest over coordinates) and ``rhat`` (largest over coordinates) of an anchored chain: the
    median over ``replicates`` simulated runs (module docstring).

    Parameters
    ----------
    s : float
        Noise multiplier of the chain's tests (times the tempering).
    hess_clip : float
        The public bound ``C`` on the rows' curvature.
    posterior_sd : ndarray (D,)
        Posterior sds of the coordinates the likelihood reads.
    offset_sd : float or ndarray (D,)
        The warm start's error (its mean is the anchor and the proposal's first centre) in
        posterior sds per coordinate; ignored where ``anchor_cov`` is given.
    chains, tune, draws : int
        The run.
    tilt_sd : float or ndarray (D,)
        Sd of the shift of the chain's target by the anchor's noise, in posterior sds: it moves
        the target away from the anchor, where the test is noisier.
    anchor_cov, warm_cov : ndarray (D, D), optional
        The warm start's error covariance and its noise-aware covariance (the proposal's first
        shape), as released; default ``diag((offset_sd sd)^2)`` and ``diag(sd^2) + anchor_cov``.
    """
    sd = np.asarray(posterior_sd, float)
    dim = sd.size
    if anchor_cov is None:
        off = np.broadcast_to(np.asarray(offset_sd, float), (dim,))
        anchor_cov = np.diag((off * sd) ** 2)
    if warm_cov is None:
        warm_cov = np.diag(sd**2) + anchor_cov
    tilt = np.broadcast_to(np.asarray(tilt_sd, float), (dim,)) * sd
    rng = np.random.default_rng(seed)
    ess, rhat, accepted = [], [], []
    for first in range(0, replicates, _GROUP):
        runs = min(_GROUP, replicates - first)
        kept, acceptance = simulated_draws(
            s, hess_clip, sd, anchor_cov, warm_cov, tilt, runs, chains, tune, draws, rng
        )
        accepted.append(acceptance)
        for r in range(runs):
            e, h = run_diagnostics((kept[:, r * chains : (r + 1) * chains] / sd).transpose(1, 0, 2))
            ess.append(e)
            rhat.append(h)
    return {
        "acceptance": float(np.mean(accepted)),
        "ess": float(np.median(ess)),
        "rhat": float(np.median(rhat)),
    }


def simulated_draws(
    s: float,
    hess_clip: float,
    sd: np.ndarray,
    anchor_cov: np.ndarray,
    warm_cov: np.ndarray,
    tilt: np.ndarray,
    runs: int,
    chains: int,
    tune: int,
    draws: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, float]:
    """``(draws (draws, runs x chains, D), acceptance of the independence proposals)`` of
    ``runs`` simulated runs of ``chains`` anchored chains. Each run has its own warm start (the
    anchor, off the posterior mean 0 by a draw of ``anchor_cov``) and its own target
    ``N(c, diag(sd^2))``, ``c`` a draw of ``N(0, diag(tilt^2))`` (the anchor's tilt); its chains
    share both, as a real run's do. :func:`simulate_anchored_chain` summarises them."""
    dim, n = sd.size, runs * chains
    warm_cov = np.asarray(warm_cov, float)
    w, v = np.linalg.eigh(np.asarray(anchor_cov, float))  # PSD: a zero error is allowed
    per_run = rng.standard_normal((runs, dim)) @ (v * np.sqrt(np.maximum(w, 0.0))).T
    anchor = np.repeat(per_run, chains, axis=0)
    target = np.repeat(rng.standard_normal((runs, dim)) * tilt, chains, axis=0)
    warm_chol = np.linalg.cholesky(warm_cov)
    q = anchor + rng.standard_normal((n, dim)) @ warm_chol.T  # a draw of the warm start
    centre = anchor.copy()
    chol = np.repeat(warm_chol[None], n, axis=0)
    solve = np.linalg.inv(chol)
    windows = [WindowedCovariance(warm_cov, tune, initial_mean=a) for a in anchor]
    steps = [DualAverageAdaptation(1.0, LOCAL_TARGET_ACCEPT, 0.05, 0.75, 10) for _ in range(n)]
    direction = rng.choice([-1.0, 1.0], size=(n, dim))
    rows = np.arange(n)
    kept = np.empty((draws, n, dim))
    accepted = proposed = 0.0
    factor = np.ones(n)
    for it in range(tune + draws):
        tuning = it < tune
        if tuning or it == tune:  # after tuning the step size is fixed
            factor = np.array([a.current(tuning) for a in steps])
        local = rng.uniform(size=n) >= INDEPENDENT_SHARE
        # an independence proposal with its Hastings term log g(q) - log g(q')
        new = centre + np.einsum("nij,nj->ni", chol, rng.standard_normal((n, dim)))
        hastings = _log_g(q, centre, solve) - _log_g(new, centre, solve)
        # a guided move along one whitened coordinate of the proposal's metric
        j = rng.integers(dim, size=n)
        move = direction[rows, j] * np.abs(rng.standard_normal(n)) * factor
        walk = q + chol[rows, :, j] * move[:, None]
        new = np.where(local[:, None], walk, new)
        hastings = np.where(local, 0.0, hastings)
        log_post = -0.5 * ((((new - target) / sd) ** 2).sum(1) - (((q - target) / sd) ** 2).sum(1))
        far = np.linalg.norm(q - anchor, axis=1) + np.linalg.norm(new - anchor, axis=1)
        sigma = s * hess_clip * np.linalg.norm(new - q, axis=1) * far
        log_alpha = log_post + hastings + sigma * rng.standard_normal(n) - 0.5 * sigma**2
        ok = np.log(rng.uniform(size=n)) < log_alpha
        q = np.where(ok[:, None], new, q)
        flip = local & ~ok
        direction[rows[flip], j[flip]] *= -1.0
        if tuning:
            prob = np.exp(np.minimum(log_alpha, 0.0))
            for i in np.flatnonzero(local):
                steps[i].update(prob[i], True)
            for i, w in enumerate(windows):
                cov = w.update(q[i], it)
                if cov is not None:  # as DPPenalty._set_shape: re-shaped and re-centred
                    chol[i] = np.linalg.cholesky(cov)
                    solve[i] = np.linalg.inv(chol[i])
                    centre[i] = w.mean
        else:
            kept[it - tune] = q
            accepted += float(np.sum(ok & ~local))
            proposed += float(np.sum(~local))
    return kept, accepted / max(proposed, 1.0)


def _log_g(x: np.ndarray, centre: np.ndarray, solve: np.ndarray) -> np.ndarray:
    z = np.einsum("nij,nj->ni", solve, x - centre)
    return -0.5 * (z**2).sum(1)
