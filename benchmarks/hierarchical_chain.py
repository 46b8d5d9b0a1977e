"""DP chains on the random-intercept row (issue 24's hierarchical target): three designs measured.

The likelihood of ``benchmarks.everyday``'s hierarchical row is a GLM in the group effects
``psi = (a, beta)``, ``a = mu + tau z``, so the chains test there, against a Taylor anchor at the
private fit (:mod:`pymc_dp.anchor`), with the penalty test (noise ``2 s b`` for a per-row
remainder bound ``b``). Budget shares (of the PLD mean): the fit ``--fit``, the anchor
``--anchor``, the tests the rest.

* ``fit``: a **surrogate-transition chain** (Liu 2001; delayed acceptance, Christen & Fox 2005).
  NUTS on ``DPLaplace``'s free surrogate posterior proposes all coordinates (``--thin`` NUTS
  transitions a test); the test releases the rows' remainder with the Frobenius bound
  ``hess_clip |Delta| (|psi - A| + |psi' - A|) / 2`` over a row's (effect, coefficients) block,
  the largest over the groups (any row may be in any group).
* ``anchored``: the same with the surrogate built on the anchor's released gradient (its linear
  part cancels in the test) and the logistic rank-one bound ``|v'Delta| (|v'u| + |v'u'|) / 8``.
* ``groups``: Gibbs by group in centred coordinates (:func:`run_groups`): each test sees one
  group's width, and the group tests of a sweep cost one test (parallel composition).

The first ``--free`` iterations of a chain follow the surrogate alone (post-processing, no test)
so that the tests start near the anchor. Figures: README, "Hierarchical models".

* ``step`` / ``laplace``: the library's :class:`pymc_dp.DPGroupGibbs` (with its own prediction
  of the run, ``pred_*``) and :class:`pymc_dp.DPLaplace`; ``--group-sd 3`` draws the true group
  effects with sd 3 (near-separable groups, logits beyond +-4) instead of 0.5.

``python -m benchmarks.hierarchical_chain [--design groups] [--eps 4] [--fit 0.5]
[--anchor 0.3] [--free 1000] [--thin 1] [--seed 1] [--group-sd 0.5]``
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.blocking import DictToArrayBijection, RaveledVars
from scipy.stats import wasserstein_distance

import pymc_dp as pdp
from benchmarks.everyday import _draws, _nuts, glm_model
from pymc_dp.accounting.gaussian import gaussian_epsilon, gaussian_mu_for_budget
from pymc_dp.anchor import release_anchor
from pymc_dp.noise import NoiseSource
from pymc_dp.surrogate import gaussian_surrogate, surrogate_model

__all__ = ["main", "run_chain", "run_groups", "run_laplace", "run_step"]

N_GROUPS = 20
#: The runs' delta, ``1 / n^1.1`` (1.9e-5; the package's default at this n is 1e-6).
DELTA = 1.0 / 20_000**1.1


def _reference(group_sd: float = 0.5) -> np.ndarray:
    """NUTS draws of (mu, tau, z, beta), (4000, 24), cached for the session in the temp dir."""
    tag = "" if group_sd == 0.5 else f"_{group_sd:g}"
    path = Path(tempfile.gettempdir()) / f"pymc_dp_hierarchical_nuts{tag}.npy"
    if path.exists():
        return np.load(path)
    model = glm_model("hierarchical", group_sd=group_sd)[0]
    ref = _draws(_nuts(model).posterior, ["mu", "tau", "z", "beta"])
    np.save(path, ref)
    return ref


def _setup(eps: float, fit: float, anchor_share: float, seed: int):
    """``(DPLaplace, clip bounds, PLD mean of the budget, anchor, remainder kernel, surrogate
    precision, surrogate pull)`` on the row: the fit and the anchor spend their shares."""
    model, clip, _ = glm_model("hierarchical")
    mu = gaussian_mu_for_budget(eps, DELTA)  # the PLD mean, as everywhere in the package
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lap = pdp.DPLaplace(epsilon=gaussian_epsilon(fit * mu, DELTA), delta=DELTA, **clip)
    eff, warm = lap.fit_likelihood, lap.warm
    anchor, ratio = release_anchor(
        eff,
        warm.mean,
        grad_clip=clip["grad_clip"],
        hess_clip=clip["hess_clip"],
        mu=anchor_share * mu,
        noise=NoiseSource.for_chain(seed, 7),
    )
    _, grad = eff.prior_logp_and_grad(warm.mean)
    _, prec, pull, _ = gaussian_surrogate(
        warm.mean, warm.posterior_cov, eff.prior_hessian(warm.mean), grad, eff.likelihood_mask
    )
    return lap, clip, mu, anchor, ratio, prec, pull


def run_chain(
    eps: float,
    fit: float,
    anchor_share: float,
    free: int,
    thin: int,
    seed: int,
    ref: np.ndarray,
    design: str = "anchored",
) -> dict:
    """One run of the surrogate-transition chain (module docstring); its figures."""
    lap, clip, mu, anchor, ratio, prec, pull = _setup(eps, fit, anchor_share, seed)
    eff, warm = lap.fit_likelihood, lap.warm

    a = anchor.point
    centre, linear = (warm.mean, pull) if design == "fit" else (a, anchor.gradient)

    def surrogate(psi: np.ndarray) -> float:
        d = psi - centre
        return float(-0.5 * d @ prec @ d + linear @ d)

    qv = pt.vector("q")
    psi_of = pytensor.function([qv], eff.psi_of(qv))
    c = clip["hess_clip"]

    def block(v: np.ndarray) -> float:  # the largest (effect, coefficients) block of a row
        return float(np.sqrt(np.max(v[:N_GROUPS] ** 2) + v[N_GROUPS:] @ v[N_GROUPS:]))

    def eta(v: np.ndarray) -> float:  # the largest |v' w| of a row: |x_j| <= 1
        return float(np.max(np.abs(v[:N_GROUPS])) + np.abs(v[N_GROUPS:]).sum())

    def bound(p0: np.ndarray, p1: np.ndarray) -> float:
        if design == "fit":
            return c * block(p1 - p0) * 0.5 * (block(p0 - a) + block(p1 - a))
        # a logistic row's gradient is l'(eta) v with |l''| <= 1/4: |rho| <= |v'D| (|v'u0| +
        # |v'u1|) / 8
        return 0.25 * eta(p1 - p0) * 0.5 * (eta(p0 - a) + eta(p1 - a))

    chains, tune, draws = 4, 1000, 1000
    tests = chains * (tune + draws - free)
    s = np.sqrt(tests / (2.0 * (1.0 - fit - anchor_share) * mu))
    rng = np.random.default_rng(seed)
    if design == "fit":
        sur = lap.surrogate_model()
    else:  # the anchor's released gradient and the fit's curvature: the linear parts cancel

        def loglik(q):
            d = eff.psi_of(q) - a
            return pt.dot(anchor.gradient, d) - 0.5 * pt.dot(d, pt.dot(prec, d))

        sur = surrogate_model(lap.likelihood, loglik)
    start = lap._nuts_start()
    info = DictToArrayBijection.map({"q": start}).point_map_info
    kept, accepted, sigmas, bounds = [], [], [], []
    t0 = time.perf_counter()
    for _ in range(chains):
        with sur:
            nuts = pm.NUTS(target_accept=0.8)
        q = start + 0.1 * rng.standard_normal(start.size)
        ratio.reset()
        chain = []
        for it in range(tune + draws):
            if it == tune:
                nuts.stop_tuning()
            q_new = q
            for _ in range(1 if it < free else thin):
                q_new = nuts.astep(RaveledVars(q_new.copy(), info))[0].data
            if it < free:
                q = q_new
                continue
            p0, p1 = psi_of(q), psi_of(q_new)
            b = bound(p0, p1)
            value, _ = ratio(p1, p0, b)
            sigma = s * 2.0 * b
            released = value + anchor.gradient @ (p1 - p0) + sigma * rng.standard_normal()
            log_alpha = released - sigma**2 / 2.0 - (surrogate(p1) - surrogate(p0))
            ok = bool(np.log(rng.uniform()) < log_alpha)
            if ok:
                q = q_new
                ratio.accept()
            if it >= tune:
                chain.append(q.copy())
                accepted.append(ok)
                sigmas.append(sigma)
                bounds.append(b)
        kept.append(np.array(chain))
    secs = time.perf_counter() - t0
    draws_ = np.array(kept)
    d = draws_.reshape(-1, draws_.shape[-1]).copy()
    d[:, 1] = np.exp(d[:, 1])  # raveled order (mu, tau_log__, z, beta)
    # tests of noise 2 at the median bound: s' = 2 / (2 b), mu' = tests / (2 s'^2)
    b_med = float(np.median(bounds))
    mu_needed = tests / (2.0 * (1.0 / b_med) ** 2) / (1.0 - fit - anchor_share)
    return {
        **_summary(d, ref, chains, accepted, sigmas),
        "eps_for_noise_2": float(gaussian_epsilon(mu_needed, DELTA)),
        "secs": secs,
    }


def _summary(d: np.ndarray, ref: np.ndarray, chains: int, accepted, sigmas) -> dict:
    """Figures of the draws ``d`` ((chains x draws, 24) of (mu, tau, z, beta)) against NUTS'."""
    ref_mean, ref_sd = ref.mean(0), ref.std(0, ddof=1)
    per_chain = d.shape[0] // chains

    def diag(fn):
        return [float(fn(d[:, j].reshape(chains, per_chain))) for j in range(d.shape[1])]

    return {
        "accept": float(np.mean(accepted)),
        "sigma": float(np.median(sigmas)),
        "max_err": float((np.abs(d.mean(0) - ref_mean) / ref_sd).max()),
        "w_tau": float(wasserstein_distance(d[:, 1], ref[:, 1]) / ref_sd[1]),
        "tau_err": float((d[:, 1].mean() - ref_mean[1]) / ref_sd[1]),
        "tau_sd_ratio": float(d[:, 1].std(ddof=1) / ref_sd[1]),
        "tau_own": float((d[:, 1].mean() - ref_mean[1]) / d[:, 1].std(ddof=1)),
        "max_own": float((np.abs(d.mean(0) - ref_mean) / d.std(0, ddof=1)).max()),
        "rhat": max(diag(az.rhat)),
        "ess": min(diag(az.ess)),
        "ess_tau": float(az.ess(d[:, 1].reshape(chains, per_chain))),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eps", type=float, default=4.0)
    parser.add_argument("--fit", type=float, default=0.5, help="the fit's share (PLD mean)")
    parser.add_argument("--anchor", type=float, default=0.3, help="the anchor's share")
    parser.add_argument("--free", type=int, default=1000, help="untested surrogate iterations")
    parser.add_argument("--thin", type=int, default=1, help="NUTS transitions per test")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--group-sd",
        type=float,
        default=0.5,
        help="spread of the true group effects (step and laplace designs; 3: near-separable)",
    )
    parser.add_argument(
        "--design",
        choices=("anchored", "fit", "groups", "step", "laplace"),
        default="anchored",
        help="anchored: the surrogate built on the anchor's gradient, the GLM's rank-one "
        "remainder bound; fit: DPLaplace's surrogate, the Frobenius bound hess_clip",
    )
    args = parser.parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    if args.design in ("step", "laplace"):
        ref = _reference(args.group_sd)
        out = (
            run_step(args.eps, args.fit, args.anchor, args.seed, ref, args.group_sd)
            if args.design == "step"
            else run_laplace(args.eps, args.seed, ref, args.group_sd)
        )
        print(
            f"{args.design}: eps {args.eps} fit {args.fit} anchor {args.anchor} "
            f"group sd {args.group_sd}: " + ", ".join(f"{k} {v:.3g}" for k, v in out.items())
        )
        return
    ref = _reference()
    if args.design == "groups":
        out = run_groups(args.eps, args.fit, args.anchor, args.free, args.seed, ref)
        print(
            f"groups: eps {args.eps} fit {args.fit} anchor {args.anchor} free {args.free}: "
            + ", ".join(f"{k} {v:.3g}" for k, v in out.items())
        )
        return
    out = run_chain(
        args.eps, args.fit, args.anchor, args.free, args.thin, args.seed, ref, args.design
    )
    print(
        f"{args.design}: eps {args.eps} fit {args.fit} anchor {args.anchor} free {args.free} "
        f"thin {args.thin}: " + ", ".join(f"{k} {v:.3g}" for k, v in out.items())
    )


#: Prior sds of the row's model (``benchmarks.everyday.glm_model("hierarchical")``).
MU_SD, BETA_SD, TAU_SD = 2.5, 2.5, 1.0


def _log_tau(lt: float, ss: float, ng: int) -> float:
    """``log tau``'s conditional given the effects' sum of squares about ``mu`` (no data)."""
    t = np.exp(lt)
    return -0.5 * (t / TAU_SD) ** 2 + lt - ng * lt - ss / (2.0 * t * t)


def run_groups(
    eps: float, fit: float, anchor_share: float, free: int, seed: int, ref: np.ndarray
) -> dict:
    """Gibbs by group in centred coordinates ``(mu, tau, a, beta)``: ``mu`` and ``tau`` given ``a``
    exactly (no data); each ``a_g`` from the anchored surrogate's conditional, corrected by a
    penalty test over its group's rows (the others' remainders are 0); ``beta`` the same over
    all rows. A replaced row changes at most two group tests of a sweep, each by at most its
    bound ``b_g`` with noise ``2 s b_g`` (or one by ``2 b_g``): the sweep's group tests cost one
    test's privacy loss (parallel composition), so a sweep is two tests (a review checked it
    against Dong, Roth & Su's adaptive composition: the per-test loss ``c_h / (2 s)`` is fixed by
    the pair of data sets, not by the history).

    A measurement of utility, not a private output: the tests' noise comes from the public
    ``seed``, in the proposals' stream. Before it is a step (review): mask each remainder by its
    row's group explicitly over all rows (the zeros outside ``g`` hold by construction and were
    measured exact, but depend on how the kernel is compiled), draw the noise from a secret
    stream of its own, snapped like the package's releases."""
    lap, _, mu, anchor, ratio, prec, _ = _setup(eps, fit, anchor_share, seed)
    warm = lap.warm
    a, big = anchor.point, anchor.gradient
    ng = N_GROUPS
    chains, tune, draws = 4, 1000, 1000
    tests = 2 * chains * (tune + draws - free)
    s = np.sqrt(tests / (2.0 * (1.0 - fit - anchor_share) * mu))
    rng = np.random.default_rng(seed)

    def quad(psi: np.ndarray) -> float:
        d = psi - a
        return float(0.5 * d @ prec @ d)

    def test(p0: np.ndarray, p1: np.ndarray, b: float) -> tuple[bool, float]:
        value, _ = ratio(p1, p0, b)
        sigma = s * 2.0 * b
        released = value + sigma * rng.standard_normal()
        # L / S: the anchor's linear term cancels, the surrogate's quadratic stays
        log_alpha = released - sigma**2 / 2.0 + quad(p1) - quad(p0)
        ok = bool(np.log(rng.uniform()) < log_alpha)
        if ok:
            ratio.accept()
        return ok, sigma

    kept, accepted, sigmas = [], [], []
    t0 = time.perf_counter()
    for _ in range(chains):
        psi = warm.draw(rng)
        m_, tau = float(psi[:ng].mean()), float(psi[:ng].std()) + 0.05
        ratio.reset()
        chain = []
        for it in range(tune + draws):
            tested = it >= free
            # hyperparameters given the effects: no data
            prec_mu = 1.0 / MU_SD**2 + ng / tau**2
            m_ = psi[:ng].sum() / tau**2 / prec_mu + rng.standard_normal() / np.sqrt(prec_mu)
            ss = float(((psi[:ng] - m_) ** 2).sum())
            lt = np.log(tau)
            for _ in range(3):
                prop = lt + 0.3 * rng.standard_normal()
                if np.log(rng.uniform()) < _log_tau(prop, ss, ng) - _log_tau(lt, ss, ng):
                    lt = prop
            tau = float(np.exp(lt))
            for g in range(ng):  # the surrogate's conditional of a_g (prior N(mu, tau))
                d = psi - a
                h = prec[g, g] + 1.0 / tau**2
                rest = prec[g] @ d - prec[g, g] * d[g]
                mean = (big[g] - rest + (m_ - a[g]) / tau**2) / h
                new = psi.copy()
                new[g] = a[g] + mean + rng.standard_normal() / np.sqrt(h)
                if not tested:
                    psi = new
                    continue
                u = np.abs(psi[ng:] - a[ng:]).sum() + np.abs(new[ng:] - a[ng:]).sum()
                b = 0.125 * abs(new[g] - psi[g]) * (abs(psi[g] - a[g]) + abs(new[g] - a[g]) + u)
                ok, sigma = test(psi, new, b)
                psi = new if ok else psi
                if it >= tune:
                    accepted.append(ok)
                    sigmas.append(sigma)
            # beta from the surrogate's conditional (prior N(0, BETA_SD^2))
            d = psi - a
            hb = prec[ng:, ng:] + np.eye(psi.size - ng) / BETA_SD**2
            lin = big[ng:] - prec[ng:, :ng] @ d[:ng] - a[ng:] / BETA_SD**2
            cb = np.linalg.cholesky(np.linalg.inv(hb))
            new = psi.copy()
            new[ng:] = a[ng:] + np.linalg.solve(hb, lin) + cb @ rng.standard_normal(psi.size - ng)
            if tested:
                db, u0, u1 = new[ng:] - psi[ng:], psi - a, new - a
                far = (np.abs(u0[:ng]).max() + np.abs(u0[ng:]).sum()) + (
                    np.abs(u1[:ng]).max() + np.abs(u1[ng:]).sum()
                )
                ok, sigma = test(psi, new, 0.125 * np.abs(db).sum() * far)
                psi = new if ok else psi
            else:
                psi = new
            if it >= tune:
                z = (psi[:ng] - m_) / tau
                chain.append(np.concatenate([[m_, tau], z, psi[ng:]]))
        kept.append(np.array(chain))
    secs = time.perf_counter() - t0
    draws_ = np.array(kept)
    d = draws_.reshape(-1, draws_.shape[-1])
    return {**_summary(d, ref, chains, accepted, sigmas), "secs": secs}


def run_step(
    eps: float, fit: float, anchor_share: float, seed: int, ref: np.ndarray, group_sd: float = 0.5
) -> dict:
    """The ``groups`` design as the library's step: ``pdp.sample`` with
    :class:`pymc_dp.DPGroupGibbs` (every iteration tested: no free sweeps; noise seeded by
    ``seed`` for reproducibility, the ledger records it), and the step's own prediction of the
    run (``pred_*``: :meth:`~pymc_dp.DPGroupGibbs.predicted_mixing`, before sampling)."""
    model, _, _ = glm_model("hierarchical", group_sd=group_sd)
    t0 = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pdp.DPGroupGibbs(
            glm=pdp.glm_clip(np.ones(3)),
            epsilon=eps,
            delta=DELTA,
            warm_start=fit,
            anchor=anchor_share,
            noise_seed=seed,
        )
        build = time.perf_counter() - t0
        pred = step.predicted_mixing(4, 1000, 1000)  # released values only, seeded
        pred_secs = time.perf_counter() - t0 - build
        idata = pdp.sample(step=step, chains=4, random_seed=seed, progressbar=False)
    d = _draws(idata.posterior, ["mu", "tau", "z", "beta"])
    stats = idata.sample_stats
    return {
        **_summary(
            d, ref, 4, stats["accept_rate"].values.ravel(), stats["noise_std"].values.ravel()
        ),
        "epsilon": float(pdp.privacy_report(idata).epsilon),
        **{f"pred_{k}": v for k, v in pred.items()},
        "pred_secs": pred_secs,
        "build_secs": build,
        "secs": time.perf_counter() - t0,
    }


def run_laplace(eps: float, seed: int, ref: np.ndarray, group_sd: float = 0.5) -> dict:
    """``DPLaplace`` (NUTS on exact prior x its surrogate, the default with group effects) on the
    same row, its whole budget on the fit: the comparison the hierarchical target names."""
    model, clip, _ = glm_model("hierarchical", group_sd=group_sd)
    t0 = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pdp.DPLaplace(epsilon=eps, delta=DELTA, noise_seed=seed, **clip)
        idata = pdp.sample(step=step, chains=4, random_seed=seed, progressbar=False)
    d = _draws(idata.posterior, ["mu", "tau", "z", "beta"])
    ones = np.ones(d.shape[0])
    return {**_summary(d, ref, 4, ones, 0 * ones), "secs": time.perf_counter() - t0}


if __name__ == "__main__":
    main()
