"""DPSuffStats: Normal linear regression from its sufficient statistics, released up front.

The whole budget buys Gaussian releases of the Gram matrix of ``(1, covariates, outcome)``
(:mod:`pymc_dp.linear_gaussian`) and, where the pilot says it helps, of the residuals at the
pilot's coefficients (:mod:`pymc_dp.linear_residuals`); every chain is then a NUTS chain on
the noise-aware posterior *exact prior x density of the true statistics given the released
ones*, with the privacy noise as latent variables. Post-processing: no further access to the
data, so chains and draws cost nothing, and there is no clipping of scores (only residuals
beyond 4 sds, after a private check of the tails): the noise sd, the coefficients and
hierarchical or bounded priors keep their true shape.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors

from pymc_dp import compiling
from pymc_dp.budget import WARM_START_STREAM
from pymc_dp.checks import check_count, check_probability
from pymc_dp.linear_gaussian import (
    NotLinearGaussian,
    bounds_for,
    cholesky_latent,
    cholesky_start,
    expected_error,
    find_linear_gaussian,
    noise_entries,
    rows_of,
    start_noise,
    surrogate_logp,
)
from pymc_dp.linear_residuals import release_two_stage
from pymc_dp.step_methods.base import ONE_RELEASE_STATS, DPStep, Stat
from pymc_dp.step_methods.registry import Example, register
from pymc_dp.surrogate import compile_logp_dlogp, sample_chain, surrogate_model

__all__ = ["DPSuffStats"]


def _signal_to_noise(release) -> tuple[float, float]:
    """Smallest eigenvalue of the released Gram matrix of ``(1, covariates)`` and the noise's
    spectral norm (about 2 sqrt(k) entry sds); post-processing of the release: public."""
    k = release.gram.shape[0] - 1
    if k < 2:
        return np.inf, 1.0
    smallest = float(np.linalg.eigvalsh(release.gram[:k, :k])[0])
    return smallest, 2.0 * np.sqrt(k) * float(release.noise_sd[0, 1])


def _spread_to_noise(release) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The covariates' spread in the release against its noise, post-processing: the released
    centred Gram matrix ``S = B - s s^T / n`` (``n`` times the covariates' covariance, in the
    [-1, 1] encoding) as its diagonal and smallest eigenvalue, and a noise level for each (about
    2 entry sds; the spectral norm's ``2 sqrt(p)`` for the eigenvalue)."""
    k = release.gram.shape[0] - 1
    n, s, sd = float(release.n), release.gram[1:k, 0], release.noise_sd
    spread = release.gram[1:k, 1:k] - np.outer(s, s) / n
    # S's noise: B's own and s's through -(s e^T + e s^T) / n (independent entries)
    var = (
        sd[1:k, 1:k] ** 2
        + (np.outer(s**2, sd[1:k, 0] ** 2) + np.outer(sd[1:k, 0] ** 2, s**2)) / n**2
    )
    entry_sd = np.sqrt(var)
    diag_level = 2.0 * np.sqrt(np.diag(var))
    smallest = float(np.linalg.eigvalsh(spread)[0])
    return np.diag(spread), diag_level, smallest, 2.0 * np.sqrt(k - 1) * float(entry_sd.max())


def _within_noise(release) -> bool:
    """Whether the covariates' spread in the release is within its noise (post-processing)."""
    if release.gram.shape[0] < 3:
        return False
    _, _, smallest, level = _spread_to_noise(release)
    return smallest < level


def _warn_if_singular(release, labels: Sequence[str]) -> None:
    """Warn when the covariates' spread in the release is within its noise, saying which of
    three causes the release shows: too few rows for the noise whatever the covariates (n rows
    spread over their declared ranges, as a uniform design, would give a spread of n / 3 each),
    covariates that vary little within their declared ranges, or covariates that are (nearly)
    collinear. From the release and public values only."""
    if not _within_noise(release):
        return
    diag, diag_level, smallest, level = _spread_to_noise(release)
    full = release.n / 3.0  # a design spread over the declared ranges
    head = "pymc-dp: the covariates' spread in the released Gram matrix is within its noise"
    tail = ". Their coefficients' posterior is then wide (mostly prior)."
    narrow = [
        f"{lab} ({d:.3g})" for lab, d, lv in zip(labels, diag, diag_level, strict=True) if d < lv
    ]
    if full < level:
        text = (
            f"{head} ({smallest:.3g} against a noise level {level:.3g}): too few rows for this "
            f"epsilon, as n = {release.n} rows spread over their declared ranges would give "
            f"about {full:.3g} each; more rows or a larger epsilon"
        )
    elif narrow:
        text = (
            f"{head} for {', '.join(narrow)}, against a noise level {level:.3g} where "
            f"n = {release.n} rows spread over the declared range would give about {full:.3g}: "
            "most values lie in a small part of their declared range. Narrower public bounds "
            "(if known without the data; values beyond are clipped) or a transformed covariate "
            "that spreads over its range (e.g. a log) help; a constant column (an intercept "
            "column in X?) is declared with covariate_bounds lo == hi"
        )
    else:
        text = (
            f"{head}: the covariates are (nearly) collinear (an intercept column in X? declare "
            "it with covariate_bounds lo == hi), or too few rows for this many (smallest "
            f"eigenvalue of their spread {smallest:.3g} against a noise level {level:.3g}, where "
            f"rows spread over the declared ranges would give about {full:.3g})"
        )
    warnings.warn(text + tail, UserWarning, stacklevel=3)


def _labels(linear, constant: np.ndarray) -> list[str]:
    """``intercept``, the released design columns by their container's name, ``sigma``."""
    columns = []  # the design's columns, by the container they come from
    pairs = zip(linear.covariates, linear.widths, strict=True)
    for i, (inp, width) in enumerate(pairs):
        name = inp.var.name or f"x{i}"
        columns += [f"{name}[{j}]" for j in range(width)] if width > 1 else [name]
    return ["intercept", *np.asarray(columns)[~constant].tolist(), "sigma"]


class DPSuffStats(DPStep):
    r"""Differentially private Normal linear regression from noisy sufficient statistics.

    For a model whose likelihood is ``pm.Normal(mu=w0 + X @ w, sigma=s, observed=y)`` with
    ``mu`` affine in the private per-row covariates (any number of ``pm.Data`` containers or
    arrays; detected from the graph) and ``sigma`` one scalar, the rows are clipped into public
    ranges and mapped onto :math:`[-1, 1]`; a fifth of the budget releases their Gram matrix
    (the pilot), and the rest goes where the pilot says it buys most
    (:mod:`pymc_dp.linear_residuals`): the residuals at the pilot coefficients (their cross
    products with the covariates and their sum of squares, clipped at 4 pilot residual sds after
    a noisy count of the rows beyond has found the model's Normal tails), or the Gram matrix
    again. The chains are NUTS on the exact prior times the exact density of the true statistics
    given the released ones, the noise integrated as latent variables (noise-aware, after
    Bernstein & Sheldon 2019): intervals carry the privacy noise, and nothing is clipped but the
    data into its declared ranges and, where the tail check passed, residuals beyond 4 sds.

    Parameters
    ----------
    vars : list, optional
        Free variables; must be all of them (the default).
    outcome_bounds : (float, float)
        Public range of the outcome (e.g. a scale's end points). Values outside are clipped
        into it before the release (a bias the posterior does not know: give the true range).
    covariate_bounds : (lo, hi) or dict, optional
        Public ranges of the covariates: one ``(lo, hi)`` for every column (scalars or one per
        column), or ``{pm.Data name: (lo, hi)}``. Default ``(-1, 1)``, the range of
        :func:`pymc_dp.encode_covariates`.
    nuts_tune : int
        NUTS tuning iterations of each chain on the surrogate posterior (public computation).
    target_accept : float
        NUTS target acceptance on the surrogate posterior.
    epsilon, delta, chains, noise_seed, exact_noise, row_dim, row_axes, public
        See :class:`~pymc_dp.step_methods.base.DPStep`. The whole budget is spent when the step
        is created.

    Notes
    -----
    The noise sd of the Gram matrix grows as the number of columns: the release suits many rows
    per column (released before any chain runs, it never runs out of budget as a chain would).
    The residual release helps where the residuals are a small share of the outcome's range (its
    noise scales with their clip, not with the range; the covariates' Gram noise then acts on
    the pilot's error only): on the everyday benchmark's synthetic design at epsilon 2 the
    largest error fell from 2.1-4.9 to 0.82 NUTS sds (median of 10 runs). The
    posterior conditions on the covariates' Gram matrix under a flat prior (no model of the
    covariates). Stats: ``accepted`` (true), ``surrogate_diverging`` (the surrogate's NUTS
    divergences, computed from the release only), ``dp_epsilon`` / ``dp_mu`` / ``dp_delta``.

    References
    ----------
    .. [1] Bernstein, G. and Sheldon, D. (2019). Differentially private Bayesian linear
       regression. NeurIPS.
    .. [2] Sheffet, O. (2017). Differentially private ordinary least squares. ICML.
    """

    name = "dp_suffstats"
    stats: ClassVar[dict[str, Stat]] = ONE_RELEASE_STATS

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        outcome_bounds: tuple[float, float],
        covariate_bounds: tuple | Mapping | None = None,
        nuts_tune: int = 1000,
        target_accept: float = 0.9,
        **kwargs,
    ) -> None:
        for knob in ("noise_multiplier", "warm_start"):
            if kwargs.get(knob):
                raise ValueError(
                    f"DPSuffStats spends all of `epsilon` on one release: no `{knob}`."
                )
        self.nuts_tune = check_count(nuts_tune, "nuts_tune", minimum=1)
        self.nuts_target_accept = check_probability(target_accept, "target_accept")
        super().__init__(vars, **kwargs)
        if self.epsilon is None:
            raise ValueError("DPSuffStats needs `epsilon`: it spends all of it on one release.")
        try:
            lik = self.likelihood
            self.linear = find_linear_gaussian(lik.graph, lik.vars, lik.shared)
        except NotLinearGaussian as err:
            raise ValueError(
                f"DPSuffStats: {err}. Use DPLaplace (any GLM) or an MCMC step instead."
            ) from None
        x_bounds, y_bounds = bounds_for(self.linear, outcome_bounds, covariate_bounds)
        mu = self.budget.mu(what=type(self).__name__)
        noise = self.budget.noise(WARM_START_STREAM)
        # a column with lo == hi is a public constant (an intercept column): not released, its
        # coefficient folds into the intercept (a duplicate of the Gram's own 1 would be singular)
        self._constant = x_bounds[0] == x_bounds[1]
        self._constant_value = x_bounds[0][self._constant]
        vary = ~self._constant
        design, outcome = rows_of(self.linear, self.n_rows)
        sigma_free = bool(lik.vars) and self.linear.q in set(ancestors([self.linear.sigma]))
        self._sigma_free = sigma_free
        self.release = release_two_stage(
            design[:, vary],
            outcome,
            x_bounds=(x_bounds[0][vary], x_bounds[1][vary]),
            y_bounds=y_bounds,
            mu=mu,
            noise=noise,
            sigma_free=bool(sigma_free),
        )
        del design, outcome
        _warn_if_singular(self.release, _labels(self.linear, self._constant)[1:-1])
        self._surrogate: pm.Model | None = None
        self._logp_dlogp_fn = None

    def error_attr(self) -> str:
        """How far the release's noise moves each posterior mean, in non-private posterior sds
        (:func:`~pymc_dp.linear_gaussian.expected_error`; the report's ``expected_error``), as
        a JSON attr: post-processing of the release. Labels: ``intercept`` (constant columns
        folded in; left out where the model has no intercept), the coefficient of each released
        design column by its container's name (``X[1]``), ``sigma`` (where it is free); ``None``
        where A is indefinite in nearly every draw or the covariates' spread is within the noise."""
        figures = expected_error(self.release)
        labels = _labels(self.linear, self._constant)
        mean_abs = np.sqrt(2.0 / np.pi) * figures["error_sd"]  # E|N(0, e^2)|, as DPLaplace's
        keep = np.ones(len(labels), bool)
        keep[0] = self._constant.any() or self.linear.has_intercept(self.likelihood.dim)
        keep[-1] = self._sigma_free  # a fixed noise sd has no posterior to move
        labels, mean_abs = np.asarray(labels)[keep].tolist(), mean_abs[keep]
        # no figure (null, never inf): within the noise the prior decides the means, and the
        # bootstrap, which leaves it out, understated the errors 2-14x there (review)
        bounded = bool(np.all(np.isfinite(mean_abs))) and not _within_noise(self.release)
        return json.dumps(
            {
                "labels": labels,
                "expected_error": [float(e) if bounded else None for e in mean_abs],
                "expected_largest_error": float(figures["largest"]) if bounded else None,
                "noise": float(mean_abs.max()) if bounded else None,
            }
        )

    @classmethod
    def _tunable(cls) -> bool:
        return False

    def _free_moves(self) -> bool:
        return False  # NUTS moves every variable on the surrogate

    def _shared_entries(self) -> tuple:
        return self.release.mechanisms

    def mechanisms(self) -> tuple:
        return ()

    # ------------------------------------------------------------------ the surrogate
    def surrogate_model(self) -> pm.Model:
        """The noise-aware posterior as a PyMC model of released values only: ``q`` (the
        model's raveled free variables, unconstrained) and ``noise`` (the release's standardised
        noise; where the release is singular within its noise, ``chol`` and ``noise_b``: the
        covariates' Gram matrix through its Cholesky factor, :meth:`_cholesky`), with the exact
        prior and the statistics' density as potentials. The cross products' entries of the
        latent are their whitened coordinates given the rest (``surrogate_logp(whitened=True)``),
        not their noise."""
        if self._surrogate is None:
            lg, m = self.linear, self.release.gram.shape[0]

            rows, cols = noise_entries(m)
            chol = self._cholesky()

            def statistics(q):
                extra = 0.0
                if chol:
                    lower = pm.Flat("chol", shape=m * (m - 1) // 2 - 1)
                    noise_b = pm.Normal("noise_b", 0.0, 1.0, shape=int((cols == m - 1).sum()))
                    latent, extra = cholesky_latent(self.release, lower, noise_b)
                else:
                    latent = pm.Normal("noise", 0.0, 1.0, shape=len(rows))
                intercept, coefs, sigma = graph_replace(
                    [lg.intercept, lg.coefs, lg.sigma], {lg.q: q}, strict=False
                )
                const = np.flatnonzero(self._constant)
                if const.size:
                    intercept = intercept + pt.dot(coefs[const], self._constant_value)
                    coefs = coefs[np.flatnonzero(~self._constant)]
                logp = surrogate_logp(self.release, intercept, coefs, sigma, latent, whitened=True)
                return logp + extra

            self._surrogate = surrogate_model(self.likelihood, statistics)
        return self._surrogate

    def sample_surrogate(
        self, draws: int, rng: np.random.Generator, keep_tuning: int = 0
    ) -> tuple:
        """One NUTS chain of ``draws`` kept draws of ``q`` on :meth:`surrogate_model`, after
        ``keep_tuning`` of its tuning draws (:func:`~pymc_dp.surrogate.sample_chain`), and its
        divergences."""
        start = self._start()
        q0 = start["q"]
        # PyMC's jitter (U(-1, 1) on every coordinate, redrawn up to 10 times where the density
        # is not finite) is applied to the parameters only: on the latent noise it moves A by
        # ~1.2 sqrt(k) noise sds, out of its positive definite support where the release is
        # noisy (sklearn's diabetes, n = 442, epsilon 1: every run failed at NUTS' start)
        for _ in range(10):
            q = q0 + rng.uniform(-1.0, 1.0, q0.shape)
            if np.isfinite(self._surrogate_logp({**start, "q": q})):
                start["q"] = q
                break
        return sample_chain(
            self.surrogate_model(),
            draws=draws,
            tune=self.nuts_tune,
            rng=rng,
            start=start,
            init=self._nuts_init(),
            target_accept=self.nuts_target_accept,
            logp_dlogp=self._logp_dlogp(),
            keep_tuning=keep_tuning,
        )

    def _start(self) -> dict:
        """NUTS' start before its jitter: the model's initial point, and latent noise where the
        latent A is positive definite (the released one may not be)."""
        q0 = self.likelihood.ravel(compiling.initial_point(self.likelihood.model))
        if self._cholesky():
            lower, noise_b = cholesky_start(self.release)
            return {"q": q0, "chol": lower, "noise_b": noise_b}
        return {"q": q0, "noise": start_noise(self.release)}

    def _surrogate_logp(self, point: dict) -> float:
        """The surrogate's log density at ``point``, by the shared compiled function (a
        ``compile_logp`` of its own cost a second compile in every process)."""
        fn = self._logp_dlogp()
        values = [np.asarray(point[v.name], dtype=float).ravel() for v in fn._grad_vars]
        return float(fn._pytensor_function(np.concatenate(values))[0])

    def _logp_dlogp(self):
        """The surrogate's compiled density, one for all chains of the process (was 3-4 s a
        chain)."""
        if self._logp_dlogp_fn is None:
            kwargs = self.likelihood_kwargs["compile_kwargs"]
            self._logp_dlogp_fn = compile_logp_dlogp(self.surrogate_model(), kwargs)
        return self._logp_dlogp_fn

    def use_plan(self, plan) -> None:
        """As :meth:`~pymc_dp.budget.Budgeted.use_plan`, and the surrogate's density
        compiled and called once here, before PyMC's workers start: numba compiles it at its
        first call, which every worker process otherwise did for itself (15 of a chain's 25 s
        on the everyday notebook's linear regression)."""
        super().use_plan(plan)
        if plan is not None:
            compiling.locked(self._surrogate_logp, self._start())

    def _cholesky(self) -> bool:
        """Whether the latent A is sampled through its Cholesky factor (:func:`~pymc_dp.
        linear_gaussian.cholesky_latent`): where the release is singular within its noise and
        the plain latent meets the boundary of positive definite matrices. From the release."""
        smallest, level = _signal_to_noise(self.release)
        return smallest < level

    def _nuts_init(self) -> str:
        """A dense mass matrix where the noise rivals the covariates' Gram matrix (the latent
        noise and the coefficients then correlate: measured at n = 500, epsilon 1, divergences
        151/106/18 -> 9/24/21 per 1000 draws and half the time); a diagonal one elsewhere (n =
        5000-20000: no divergences either way, twice as fast). From the release only."""
        smallest, level = _signal_to_noise(self.release)
        return "adapt_full" if smallest < 10.0 * level else "adapt_diag"

    # ------------------------------------------------------------------ per chain
    def _reset_chain(self) -> None:
        plan = self._plan
        self._draws, self._diverging = self.sample_surrogate(
            plan.draws, self.rng, keep_tuning=plan.tune
        )

    def _iterate(self, q: np.ndarray) -> tuple[np.ndarray, dict]:
        i = self.chain.iteration
        draw = self._draws[i].astype(q.dtype)
        return draw, {"accepted": True, "surrogate_diverging": bool(self._diverging[i])}


register(
    DPSuffStats,
    suffstats=Example(
        {"outcome_bounds": (-8.0, 8.0), "covariate_bounds": (-3.0, 3.0), "nuts_tune": 50}
    ),
)
