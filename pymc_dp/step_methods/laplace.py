"""DPLaplace: draws from a noise-aware Laplace approximation fitted privately, once.

All of the budget goes to the private fit of :mod:`pymc_dp.tuning.warm_start`: a few noisy Newton
steps to the posterior mode, each releasing the model's curvature and its gradient whitened by the
previous release (every direction in posterior sds, clipped at a privately chosen quantile). The
fit is a Gaussian in the model's unconstrained coordinates: the Laplace approximation at the
private mode estimate, widened by the errors that estimate may carry (privacy noise, a bound on
the clipping bias, the linearisation of a noisy Newton step), so its intervals account for them
("noise-aware"); ``pdp.privacy_report`` states the expected error of every mean. Every iteration of
every chain is a draw from it: post-processing, no further access to the data.

This is not MCMC on the posterior. It is the right tool when the posterior is close to Gaussian
(many rows per parameter, a GLM) and the budget is too small for a chain to mix: the planner
(:func:`pymc_dp.plan`) recommends it there. The chains it returns are draws of the fit in
antithetic pairs (``mean + z``, ``mean - z``; tuning draws are independent), so the mean of an
even number of kept draws is the fit's mean exactly; R-hat and ESS describe the draws (the pairs'
negative correlation makes ESS of the mean exceed the draw count), not the quality of the
approximation.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import pytensor.tensor as pt

from pymc_dp import compiling
from pymc_dp.boundary import guarded
from pymc_dp.checks import check_count, check_positive, check_probability
from pymc_dp.likelihood import PerRowLikelihood
from pymc_dp.step_methods.base import ONE_RELEASE_STATS, DPStep, Stat
from pymc_dp.step_methods.registry import Example, register
from pymc_dp.surrogate import (
    gaussian_surrogate,
    likelihood_precision,
    sample_chain,
    surrogate_model,
    walk_left,
)
from pymc_dp.tuning.warm_start import WarmStart

__all__ = ["DPLaplace"]


def _effect_likelihood(likelihood: PerRowLikelihood):
    """The likelihood in the coordinates it reads, or None where they are the model's own: its
    group effects', or, where only the prior reads some variables (hyperparameters of a
    shrinkage prior), the others (measured: fitted with the hyperparameters, the hierarchical
    prior's curvature made the fit's metric a lottery, sds 0.05-8 on a shrinkage logistic
    regression). Kept on ``likelihood`` (the same rows: steps sharing it share these kernels
    too, as they share its own)."""
    from pymc_dp.effects import EffectLikelihood, Effects, find_effects, prior_moments
    from pymc_dp.spending import data_fingerprint

    # keyed by the rows' digest: kernels built before a pm.set_data must not serve after it
    key = data_fingerprint(likelihood.model, likelihood.graph, rows_only=True)
    cached = likelihood.__dict__.get("_effects_cache")
    if cached is not None and cached[0] == key:
        return cached[1]
    effects = find_effects(likelihood.graph, likelihood.vars)
    graph = likelihood.graph
    if effects is None and graph.rows is not None and not likelihood.likelihood_mask.all():
        reads = set(graph.likelihood_vars)
        read = tuple(v for v in likelihood.vars if v.name in reads)
        if not read:  # the rows read no free variable: nothing to fit there (review)
            return None
        effects = Effects(rows=graph.rows, inputs=read, psi=read, n_effects=0)
    moments = (
        None if effects is None else prior_moments(likelihood.model, likelihood.vars, effects.psi)
    )
    # a prior without draws (pm.Flat): the fit stays in the model's coordinates
    found = None if moments is None else EffectLikelihood(likelihood, effects, moments)
    likelihood.__dict__["_effects_cache"] = (key, found)
    return found


def _spread_and_ahead(lik, warm, effects, walk_ahead: bool):
    """``(walk, covariance, ahead)`` of the surrogate: the Newton walk's distance left, put
    ahead of the fit (``ahead``) or kept as a spread (in ``covariance``)."""
    walk = warm.walk if walk_ahead else None
    cov, ahead = warm.posterior_cov, None
    if walk is not None and effects is not None:
        # (no group effects: the mask is empty, nothing goes ahead)
        # only the group effects' part goes ahead, where the hierarchy decides its share;
        # the coefficients keep theirs as a spread, as models without effects do (a share
        # of their own, which their prior does not decide, moved them by about half their
        # walk whether or not it was left: 8 NUTS sds on a near-separable seed)
        on_effects = lik.variable_blocks < lik.effects.n_effects
        kept = np.where(on_effects, 0.0, walk)
        cov = cov + np.outer(kept, kept)
        ahead = np.where(on_effects, walk, 0.0)
    elif walk is not None:
        ahead = walk
    if ahead is not None and not np.any(ahead[lik.likelihood_mask]):
        walk = ahead = None  # nothing to put ahead where the likelihood reads: keep the spread
        cov = warm.posterior_cov
    return walk, cov, ahead


def _warn_uninformed(uninformed: int, size: int, grouped: bool, nuts: bool = True) -> None:
    """Warn that ``uninformed`` of ``size`` directions follow the prior (public counts)."""
    if not nuts:
        warnings.warn(
            f"pymc-dp: in {uninformed} of the {size} directions of the private fit the draws "
            "are at least as wide as the prior: the budget bought no information there, and "
            "the fit's noisy walk may have ended far from the mode (its intervals widen for "
            "it, not always enough). More budget or rows inform them; pdp.plan says what a "
            "budget buys before the run.",
            UserWarning,
            stacklevel=3,
        )
        return
    effects_note = (
        " With group effects this can pull groups near separation (a rare or certain "
        "outcome) towards the others under the hierarchical prior and bias its scale "
        "low, or leave coefficients whose walk had far to go to their prior (README, "
        "'Hierarchical models')."
        if grouped
        else ""
    )
    warnings.warn(
        f"pymc-dp: {uninformed} of the {size} directions of the private fit carry "
        "no more information than the prior: there the NUTS draws follow the prior (the "
        "fit's own spread is not kept). More budget or rows inform them." + effects_note,
        UserWarning,
        stacklevel=3,
    )


def _warn_if_fit_uninformed(lik: PerRowLikelihood, warm: WarmStart) -> None:
    """Warn where the fit's draws are at least as wide as the prior (public: the fit and the
    prior's curvature at its mean). The NUTS path warns as it builds its surrogate."""
    with np.errstate(all="ignore"):
        hessian = lik.prior_hessian(warm.mean)
    if not np.all(np.isfinite(hessian)):
        return
    idx = np.flatnonzero(lik.likelihood_mask)
    _, _, informed = likelihood_precision(warm.posterior_cov, hessian, idx)
    if not informed.all():
        _warn_uninformed(int(np.sum(~informed)), idx.size, grouped=False, nuts=False)


class DPLaplace(DPStep):
    r"""Differentially private Laplace approximation (noise-aware), sampled by ``pm.sample``.

    Parameters
    ----------
    vars : list, optional
        Free variables; must be all of them (the default).
    grad_clip : float
        :math:`B`: per-row gradients of the log-likelihood are clipped to L2 norm :math:`B`
        (public; for a GLM whose log-likelihood is L-Lipschitz in the linear predictor, L times
        a bound on the covariates' norm: :func:`pymc_dp.glm_clip`).
    hess_clip : float, optional
        :math:`C`: per-row observed information ``-d^2 l_i / dq dq^T`` is clipped to Frobenius
        norm :math:`C` in its first release (public; :attr:`pymc_dp.GLMClip.hess_clip` for a
        GLM, where nothing is clipped). Default: the curvature is estimated from per-row
        gradient outer products (empirical Fisher, bound ``grad_clip**2``), often 4x noisier.
        Give it for GLMs only (their rows' Hessians are positive semidefinite) and at most 32
        coordinates (its kernel grows as their square).
    steps : int
        Noisy Newton steps of the fit (default 4, at most 5; each releases a curvature and a
        gradient, each with a histogram of its rows' norms).
    nuts : bool, optional
        Sample the model's exact prior times the fit's Gaussian likelihood surrogate with NUTS
        (:func:`pymc_dp.surrogate.gaussian_surrogate`: post-processing, no budget) instead of
        drawing from the fit: hierarchical scales, bounded and prior-only variables keep their
        true shape. For a Gaussian prior the two agree. Default: True where the likelihood reads
        group effects (``mu + tau * z[g]``, or a centred ``a[g]`` with ``a ~ Normal(mu, tau)``:
        :mod:`pymc_dp.effects`) or the prior has variables the likelihood does not read
        (hyperparameters: the fit then runs in the others), False otherwise and where those
        coordinates cannot be built (a prior without draws, rows on Dask workers). With NUTS
        and group effects the fit runs in the coordinates the likelihood reads (each group's
        effect ``a = mu + tau * z`` and the free variables read directly), where a
        random-intercept GLM is a GLM: ``hess_clip`` then bounds the rows' curvature there
        (:func:`pymc_dp.glm_clip` with bound 1 for the group's effect, like an intercept).
    nuts_tune, target_accept
        NUTS tuning iterations and target acceptance on the surrogate (``nuts=True``).
    epsilon, delta, chains, noise_seed, exact_noise, diagnostics, row_dim, row_axes, public
        See :class:`~pymc_dp.step_methods.base.DPStep`. The whole budget is spent when the step
        is created; chains and draws then cost nothing.

    Notes
    -----
    Scope: the fit is measured on GLMs (logistic, Poisson regressions) and on GLMs with random
    intercepts (``mu + tau * z[g]``, or centred ``a[g]``: fitted in the groups' effects, see
    ``nuts``; a random-intercept logistic regression with 20 groups of ~1000 rows at epsilon 2 gave
    the hyper sd within 0.1 NUTS sds in Wasserstein distance, against 7.6 for the fit in the model's
    own coordinates; written centred, at epsilon 4, 0.015-0.063 against 0.2-0.97). Variables only
    the prior reads (hyperparameters) are left to the exact prior: a shrinkage logistic regression
    at epsilon 2 came out within 0.78 NUTS sds, sds 1.04-1.62x, against up to 17 NUTS sds and 53x
    fitted with its scale. Where groups are near-separable (``tau = 3``: effects beyond +-4 on the
    logit scale, which four Newton steps do not reach) the walk's distance left is put ahead of the
    fit, not around it (:func:`pymc_dp.surrogate.walk_left`): at 20 groups and epsilon 4 the hyper
    sd within 0.26-0.44 NUTS sds (W), 0.26-0.44 of its own sds, where the symmetric spread had left
    it 3.8-7.4 of its own sds low; the most extreme group (no failure in ~1700 rows) still came out
    3.05-3.41 own sds short in 2 of 10 seeds of a 6-group model (its likelihood is one-sided), and
    on a second 20-group data set about half the runs (noise seeds 0-5) came out beyond 3 own sds
    (the worst 5.5): a lottery, centred and non-centred alike. Only the groups' part of the walk
    goes ahead; the coefficients keep theirs as a spread (slow coefficients (5, -4) at n = 5000 and
    epsilon 2: 2.4-2.7 own sds short, 2.1-3.8 with the whole walk ahead, and wide: 6-10x NUTS' sds,
    15-20 NUTS sds off, where four steps do not reach them). It is wide where groups are small (30
    rows per group: 6-11 NUTS sds off, within 1.4 own sds) or one is empty. For models with a scale
    parameter (Normal with unknown sigma, StudentT) a review found runs several of their own sds off
    (the clipped score of the scale biases the fit): use :class:`~pymc_dp.DPSuffStats` for Normal
    linear regression, MCMC or :mod:`pymc_dp.expfam` otherwise. Logistic regressions with a mode far
    from 0 (coefficients of 5-7 on [-1, 1] covariates, near-separable binary designs) make the
    Newton walk slow; its distance left is in the spread, widely, but a review still found 15-20% of
    runs more than 3 of their own sds off with 2 or 5 steps at 5000 rows, and with fewer than ~1000
    rows at epsilon 0.5 (the curvature is then mostly noise); keep the default 4 steps. Poisson
    regressions walk from a start below the mode past it (the curvature ``exp(eta)`` grows along the
    step): the fit retreats, brackets the mode and keeps what its steps could not resolve in its
    spread, honestly but widely where the public bounds are loose; with 2 steps a retreat at the
    last step widens it in every direction. A public ``initval`` near the mode (a known typical
    count for the intercept) avoids the overshoot. With tens of rows per coefficient (statsmodels'
    ``spector``, n = 32, at epsilon 1-4) the released curvature is its noise and the first
    step's noise stays in the estimate: the fit holds it in its spread (as wide as the prior or
    wider, with a warning), within 2.7 of its own sds where it was up to 26.

    Stats: ``accepted`` (always true: draws of the fit), ``dp_epsilon`` / ``dp_mu`` /
    ``dp_delta`` (the warm start's, the whole budget from the first draw).

    References
    ----------
    .. [1] Raisa, O., Jälkö, J. and Honkela, A. (2024). Noise-aware differentially private
       regression via meta-learning. (For noise-aware DP posteriors.)
    .. [2] Bernstein, G. and Sheldon, D. (2018). Differentially private Bayesian inference for
       exponential families. NeurIPS. (Inference that models the privacy noise.)
    """

    name = "dp_laplace"
    fit_draws = True
    distributed_rows = True  # full-data kernels only: rows may stay on Dask workers
    stats: ClassVar[dict[str, Stat]] = ONE_RELEASE_STATS

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        grad_clip: float,
        hess_clip: float | None = None,
        steps: int = 4,
        nuts: bool | None = None,
        nuts_tune: int = 1000,
        target_accept: float = 0.9,
        **kwargs,
    ) -> None:
        for knob in ("noise_multiplier", "warm_start"):
            if kwargs.get(knob) is not None:
                raise ValueError(f"DPLaplace spends all of `epsilon` on its fit: no `{knob}`.")
        self.grad_clip = check_positive(grad_clip, "grad_clip")
        self.hess_clip = None if hess_clip is None else check_positive(hess_clip, "hess_clip")
        self.steps = check_count(steps, "steps", minimum=1)
        if nuts is not None and not isinstance(nuts, bool | np.bool_):
            raise TypeError(f"`nuts` must be True, False or None, got {nuts!r}")
        self.nuts_tune = check_count(nuts_tune, "nuts_tune", minimum=1)
        self.nuts_target_accept = check_probability(target_accept, "target_accept")
        super().__init__(vars, **kwargs)
        if self.epsilon is None:
            raise ValueError("DPLaplace needs `epsilon`: it spends all of it on its fit.")
        self._effects = None
        if nuts is not False and type(self.likelihood) is PerRowLikelihood:
            # graph structure and the model's prior only: no data is read to decide
            self._effects = guarded(
                "Building the fit's coordinates for DPLaplace", _effect_likelihood, self.likelihood
            )
        if nuts is None:
            # where the fit runs in the coordinates the likelihood reads (group effects, or the
            # variables left when hyperparameters stay with the prior); not where it could not
            # (a prior without draws, rows on Dask workers): NUTS on a fit of the hierarchical
            # prior's own coordinates was measured 0.5-17 NUTS sds off (review)
            nuts = self._effects is not None
        self.nuts = bool(nuts)
        self.fit_draws = not self.nuts  # NUTS chains: R-hat and ESS mean something
        if self.hess_clip is not None and self.fit_likelihood.dim > 32:
            raise ValueError(
                f"`hess_clip` releases the observed information, whose kernel grows as the "
                f"square of the {self.fit_likelihood.dim} coordinates (over 32): leave it out "
                "(the curvature then comes from gradient outer products)."
            )
        self.warm_start_share = 1.0
        self._run_warm_start(steps=self.steps)
        if not self.nuts:
            _warn_if_fit_uninformed(self.fit_likelihood, self.warm)

    @property
    def fit_likelihood(self) -> PerRowLikelihood:
        """The coordinates the likelihood reads where NUTS samples the surrogate and they differ
        from the model's: group effects (:mod:`pymc_dp.effects`), or the model's variables less
        those only the prior reads (hyperparameters); the model's own coordinates otherwise."""
        return self._effects if self._effects is not None else self.likelihood

    @classmethod
    def _tunable(cls) -> bool:
        return False

    def _warm_grad_clip(self) -> float:
        return self.grad_clip

    def _warm_hess_clip(self) -> float | None:
        return self.hess_clip

    def _free_moves(self) -> bool:
        return False  # every draw is already independent

    def mechanisms(self) -> tuple:
        return ()

    def surrogate_model(self, walk_ahead: bool | None = None):
        """Exact prior x the fit's Gaussian likelihood surrogate, as a PyMC model of ``q``.

        ``walk_ahead``: where the fit's Newton walk was still moving, put its distance left
        ahead of the fit (:func:`pymc_dp.surrogate.walk_left`) instead of around it. Default:
        with group effects, where the symmetric spread divided by the hierarchical prior left
        the extreme groups' spread uninformed and NUTS pulled it back (near-separable groups:
        the scale 3.8-7.4 own sds low); without, the fit's spread is kept (on logistic
        regressions with a mode far from 0, 40 seeds, the walk overstates the distance left
        once the walk has nearly arrived: the median error grew from 0.2 to 1.1 own sds). With
        group effects only their part goes ahead; the coefficients keep their spread.
        """
        if walk_ahead is not None and not isinstance(walk_ahead, bool | np.bool_):
            raise TypeError(f"`walk_ahead` must be True, False or None, got {walk_ahead!r}")
        lik, warm = self.fit_likelihood, self.warm
        grouped = self._effects is not None and self._effects.effects.n_effects > 0
        if walk_ahead is None:
            walk_ahead = grouped
        walk, cov, ahead = _spread_and_ahead(lik, warm, self._effects, walk_ahead)
        _, grad = lik.prior_logp_and_grad(warm.mean)
        idx, precision, pull, uninformed = gaussian_surrogate(
            warm.mean,
            cov,
            lik.prior_hessian(warm.mean),
            grad,
            lik.likelihood_mask,
            walk=walk,
        )
        ahead = None if ahead is None else ahead[idx]
        if uninformed:
            _warn_uninformed(uninformed, idx.size, grouped)
        centre = warm.mean[idx]
        effects = self._effects

        def gaussian(q):
            coords = q if effects is None else effects.psi_of(q)
            d = coords[idx] - centre
            if ahead is not None:
                d = d - walk_left(ahead)
            return -0.5 * pt.dot(d, pt.dot(precision, d)) + pt.dot(pull, d)

        return surrogate_model(self.likelihood, gaussian)

    def _reset_chain(self) -> None:
        super()._reset_chain()
        self._pair: np.ndarray | None = None
        if self.nuts:
            plan = self._plan
            self._draws, self._diverging = sample_chain(
                self.surrogate_model(),
                draws=plan.draws,
                tune=self.nuts_tune,
                keep_tuning=plan.tune,
                rng=self.rng,
                start={"q": self._nuts_start()},
                target_accept=self.nuts_target_accept,
                compile_kwargs=self.likelihood_kwargs["compile_kwargs"],
            )

    def _nuts_start(self) -> np.ndarray:
        """NUTS' start on the surrogate: the fit's mean, or the model's initial point where the
        fit is in the effects' coordinates (public either way)."""
        if self._effects is None:
            return self.warm.mean
        return self.likelihood.ravel(compiling.initial_point(self.likelihood.model))

    def _iterate(self, q: np.ndarray) -> tuple[np.ndarray, dict]:
        if self.nuts:
            i = self.chain.iteration
            return self._draws[i].astype(q.dtype), {
                "accepted": True,
                "surrogate_diverging": bool(self._diverging[i]),
            }
        # antithetic pairs among the kept draws (``mean + z``, then ``mean - z``): each is a
        # draw of the fit, and an even number of them averages to the fit's mean exactly, so
        # a summary's mean carries no Monte Carlo error (a wide fit's 2000 independent draws
        # put up to a NUTS sd of it into the mean)
        kept = self.chain.iteration - self._plan.tune
        if kept >= 0 and kept % 2 == 1 and self._pair is not None:
            draw, self._pair = 2.0 * self.warm.mean - self._pair, None
        else:
            draw = self.warm.draw(self.rng)
            self._pair = draw if kept >= 0 else None
        return draw.astype(q.dtype), {"accepted": True, "surrogate_diverging": False}


register(
    DPLaplace,
    laplace=Example({"grad_clip": 3.0}),
    laplace_nuts=Example({"grad_clip": 3.0, "nuts": True, "nuts_tune": 50}),
)
