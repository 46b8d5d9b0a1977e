r"""The planner: what a DP run can deliver, predicted from public information only.

``pdp.plan(model, epsilon=..., ...)`` reads the number of rows n, the number of parameters, the
clip bounds and the priors, never the data values, and predicts:

* the noise multiplier of every release at this budget and run length;
* the posterior scale to expect at this n (per-row Fisher information ``I`` is at most of order
  :math:`B^2`; the planner assumes ``I_j = info_per_row`` per coordinate, by default
  ``0.04 B_j^2``: a logistic regression on covariates spread uniformly over their public range
  has :math:`p(1-p)\,E[x^2] \approx 0.2 / 3 = 0.067` before correlations between covariates
  take their share (measured marginal precisions :math:`1/(n\,\mathrm{sd}^2)` on the
  benchmark's synthetic data: 0.033-0.096). Real covariates bunched inside loose public ranges
  carry less (measured on statsmodels' ``randhie``: 0.002-0.18, ``fair``: 0.011-0.059), so
  pass ``info_per_row`` from a similar public study when you have one);
* the ratio :math:`r_j = \sqrt{n I_j} / B_j`, which decides everything: a Gaussian release of a
  sum clipped to :math:`B` with multiplier :math:`s` moves the estimate by :math:`2s/r` posterior
  sds;
* for :class:`~pymc_dp.DPLaplace` (all budget in the private fit): the error of its mode in
  posterior sds. Its last gradient release is whitened by the released curvature, so every
  direction is measured in posterior sds, and clipped near a high quantile of the whitened norms,
  about :data:`WHITENED_TAIL` times their rms :math:`\sqrt{d/n}`: the error per coordinate is
  :math:`2 s_w \cdot 3 \sqrt{d/n}`, :math:`s_w = 1/\sqrt{2 \cdot 0.4 \mu^*}`, whatever the
  covariates' scale or correlations (no Fisher information is assumed); the largest over the
  :math:`d` coordinates, and the widening of the noise-aware intervals
  :math:`\sqrt{1 + e^2}`;
* for :class:`~pymc_dp.DPPenalty` with zero tuning (half the budget in the warm start): the noise
  multiplier :math:`s` of its ratio releases, the step (in posterior sds) that keeps the noise on
  the log ratio near 2.4 (where the accepted diffusion per iteration peaks, acceptance ~0.25),
  :math:`h = 2.4\, r / (2 s)`, and the effective sample size of the run. One-coordinate moves of
  that size diffuse :math:`0.25 h^2 / d` squared sds per iteration per coordinate, and the
  integrated autocorrelation time of such a walk is :math:`2 / \text{diffusion}`, so

  .. math:: \mathrm{ESS} \approx \text{chains}\cdot\text{draws}\cdot 0.18\, r^2 / (d\, s^2)
            = 0.36\, r^2 \mu_s\, \frac{\text{draws}}{d\,(\text{tune} + \text{draws})},

  which does not grow with the number of iterations (a longer run needs more noise per step):
  the budget, not the run length, buys effective samples;
* for a Normal likelihood whose mean is affine in the covariates (detected from the graph on
  synthetic designs, :mod:`pymc_dp.linear_gaussian`): :class:`~pymc_dp.DPSuffStats`, which
  releases the Gram matrix of (1, covariates, outcome) once with noise sd :math:`s` per diagonal
  entry (exact, from the budget and the column count) and has no clipping bias, is recommended.
  Its error in posterior sds is about :math:`s / (\sqrt 2\,\tilde\sigma \sqrt{n/3})` per
  coefficient (covariates spread uniformly over [-1, 1]: second moment 1/3) and
  :math:`s / (\tilde\sigma^2 \sqrt{2n})` for the noise sd, with :math:`\tilde\sigma` the
  residual sd on the outcome's [-1, 1] encoding (``residual_sd`` in outcome units; default a
  quarter of the outcome's half-range). Correlated or bunched covariates make it larger (fair:
  measured about 2x this);
* with ``hess_clip``, for an anchored DPPenalty (the Taylor anchor, :mod:`pymc_dp.anchor`;
  warm start 0.1, anchor 0.6, chains 0.3 of the budget): the acceptance of its test, its bulk
  ESS and R-hat (:mod:`pymc_dp.mixing`: the chain's own algorithm simulated on a Gaussian
  posterior of the sds above, its test's noise ``2 s hess_clip |q' - q| (|q - a| + |q' - a|) /
  2``, the anchor and warm start off by the warm start's predicted error, the independence
  proposal adapted from the simulated warm-up draws; seeded), the tilt of a mean by the anchor's
  noise (sd ``sd_j x 2 grad_clip / sqrt(2 x 0.6 mu)``) and the largest error of a mean.
  Measured (4 x (1000 + 1000); bulk ESS min / median of three runs): 608 predicted against
  367 / 693 on a d = 3 logistic regression, 206 against 86 / 219 at d = 10 on
  ``synthetic_1e5`` (48-335 over eight runs), 4 against 4 on ``fair``, where the chain never
  moves. It is not recommended when the likelihood reads a
  transformed variable (a GLM's ``hess_clip`` does not hold there);
* feasibility (will the recommended sampler, in at least half of its runs, give every mean
  within 0.5 posterior sd and every sd within [0.67, 1.5] of the non-private posterior? With
  independent errors of sd :math:`e` on :math:`d` coordinates that needs
  :math:`(2\Phi(0.5/e) - 1)^d \ge 1/2`, e.g. :math:`e \le 0.27` for :math:`d = 10`), the
  recommended sampler, and what would make an infeasible run feasible.

``pdp.sample`` calls the planner and warns with its advice when a run is predicted to fail.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
from pymc.blocking import DictToArrayBijection
from pymc.model import Model, modelcontext
from pymc.pytensorf import join_nonshared_inputs
from scipy.special import ndtr, ndtri

from pymc_dp import compiling
from pymc_dp.budget import Budget
from pymc_dp.checks import check_count, check_epsilon, check_positive
from pymc_dp.graph import ModelGraph, analyse
from pymc_dp.kernel_rewrites import hessian_fn
from pymc_dp.mixing import simulate_anchored_chain
from pymc_dp.step_methods.anchoring import ANCHORED_WARM_START, DEFAULT_ANCHOR_SHARE
from pymc_dp.tuning.warm_start import LAST_SHARE

__all__ = ["Plan", "plan"]

#: Assumed per-row Fisher information per coordinate, as a fraction of B_j^2 (module docstring).
DEFAULT_INFO_FRACTION = 0.04
#: Whitened per-row gradient norms the fit clips at, over their rms ``sqrt(d / n)``: calibrated
#: on the benchmark's synthetic logistic regression (n = 1e5; measured largest errors over the
#: prediction 2.6-3.1 at epsilon 1-4, 20 runs each) and checked on real data it was not fitted
#: to: fair 2.5-3.3, breast cancer 2.5-5, randhie 4.5-12 (rows of high leverage, and at small
#: budgets Newton steps that do not reach the mode: 2-4x optimistic there).
WHITENED_TAIL = 3.0
#: Noise std on the log ratio the zero-tuning penalty steps settle at (acceptance ~0.25).
_SIGMA = 2.4
_ACCEPT = 0.25
#: Effective samples (all chains) from which a chain mixes well enough for R-hat <= 1.1.
ESS_FOR_MCMC = 400.0
#: Tuning iterations the dual averaging of the zero-tuning steps needs to settle.
MIN_TUNE = 200
#: The advice that recommends DPSuffStats for a linear-Gaussian likelihood.
_SUFFSTATS_ADVICE = (
    "the likelihood is Normal with a mean affine in its covariates: pdp.DPSuffStats "
    "releases its sufficient statistics once (no clipping bias; the noise sd keeps its "
    "true shape); give it outcome_bounds (the outcome's public range)"
)


@dataclass(frozen=True)
class _Run:
    """The run planned (public): its rows, parameters, budget and length."""

    n: int
    dim: int
    epsilon: float
    delta: float
    chains: int
    tune: int
    draws: int


@dataclass(frozen=True)
class Plan(_Run):
    """The planner's predictions for one run (see the module docstring)."""

    ratio: np.ndarray
    posterior_sd: np.ndarray
    laplace_error_sd: float
    laplace_sd_ratio: float
    laplace_largest_error: float
    penalty_noise_multiplier: float
    penalty_step_sd: float
    penalty_acceptance: float
    penalty_ess: float
    recommended: str
    feasible: bool
    advice: list[str] = field(default_factory=list)
    #: The recommended split of the budget and the run: ``warm_start`` (share of the budget
    #: spent before sampling), ``tune``, ``draws``, ``chains``, and the ``ess`` it predicts.
    split: dict = field(default_factory=dict)
    #: DPSuffStats (a linear-Gaussian likelihood; else None): ``noise_sd`` of a diagonal entry
    #: of the released Gram matrix (encoded units), ``largest_error`` (median of the largest
    #: over coefficients and the noise sd, in posterior sds).
    suffstats: dict | None = None
    #: An anchored DPPenalty (``hess_clip`` given; else NaN): predicted ``ess`` (all chains),
    #: ``acceptance`` (of its independence proposals), ``rhat``, ``tilt`` (largest sd of a
    #: mean's shift by the anchor's noise, posterior sds), ``largest_error`` (median of the
    #: largest error of a mean, tilt and Monte Carlo error), and whether it is ``usable`` (see
    #: the module docstring).
    anchored: dict | None = None

    def _anchored_line(self) -> str:
        an = self.anchored
        return (
            f"  DPPenalty(hess_clip) (Taylor anchor): acceptance ~{an['acceptance']:.2f}, ESS "
            f"~{an['ess']:.3g} (all chains), R-hat ~{an['rhat']:.3g}, anchor tilt sd "
            f"~{an['tilt']:.2f} posterior sds; "
            f"largest error ~{an['largest_error']:.2f}"
            + ("" if an["usable"] else "  -- will not give a usable chain")
        )

    def _suffstats_line(self) -> str:
        st = self.suffstats
        return (
            f"  DPSuffStats (linear-Gaussian likelihood): {st['release']} release, Gram noise "
            f"sd {st['noise_sd']:.3g} per diagonal entry at the whole budget; largest error "
            f"~{st['largest_error']:.2f} posterior sds"
        )

    def __str__(self) -> str:
        r = self.ratio
        head = (
            f"pdp.plan: n = {self.n}, {self.dim} parameters, epsilon = {self.epsilon:g}, "
            f"delta = {self.delta:.1e}, {self.chains} chains x ({self.tune} + {self.draws})"
        )
        recommended = f"  recommended: {self.recommended}" + (
            "" if self.feasible else "  -- NOT FEASIBLE for a usable posterior"
        )
        advice = [f"  advice: {a}" for a in self.advice]
        if np.isnan(self.laplace_error_sd) and self.suffstats:  # planned without clip bounds
            return "\n".join([head, self._suffstats_line(), recommended, *advice])
        lines = [
            head,
            f"  r = sqrt(n I) / B per coordinate: {r.min():.3g} .. {r.max():.3g}"
            " (posterior sds moved by a release of multiplier s: 2 s / r)",
            f"  expected posterior sd: {self.posterior_sd.min():.3g} .. "
            f"{self.posterior_sd.max():.3g} (unconstrained coordinates)",
            f"  DPLaplace: mode error ~{self.laplace_error_sd:.2f} posterior sds per coordinate "
            f"(the largest of {self.dim} ~{self.laplace_largest_error:.2f}), noise-aware sd "
            f"x{self.laplace_sd_ratio:.2f}",
            f"  DPPenalty (zero tuning): noise multiplier {self.penalty_noise_multiplier:.3g}, "
            f"step ~{self.penalty_step_sd:.3g} posterior sds at acceptance "
            f"~{self.penalty_acceptance:.2f}, ESS ~{self.penalty_ess:.3g} (all chains)",
            *([self._anchored_line()] if self.anchored else []),
            *([self._suffstats_line()] if self.suffstats else []),
            recommended,
        ]
        if self.split:
            sp = self.split
            lines.append(
                f"  split: warm start {sp['warm_start']:.0%} of the budget"
                + (f", anchor {sp['anchor']:.0%}" if "anchor" in sp else "")
                + f", tune={sp['tune']}, "
                f"draws={sp['draws']}, chains={sp['chains']} (ESS ~{sp['ess']:.3g})"
            )
        return "\n".join(lines + advice)


def _bounds(dim: int, llr_clip, grad_clip) -> tuple[np.ndarray, float]:
    """Per-coordinate bounds B_j and the gradient's L2 bound."""
    if llr_clip is None and grad_clip is None:
        raise ValueError("Give `llr_clip` or `grad_clip`: the planner needs the clip bounds.")
    if llr_clip is not None and np.ndim(llr_clip):
        per = np.asarray(llr_clip, dtype=float)
        if per.shape != (dim,) or not np.all(np.isfinite(per) & (per > 0)):
            raise ValueError(f"`llr_clip` must be > 0 with {dim} entries, got {llr_clip}")
        return per, float(np.linalg.norm(per))
    # one L2 bound: the public facts behind it do not say how it splits over the coordinates;
    # assume evenly (|x_j| <= B / sqrt(d)), as for covariates sharing one public range, so that
    # grad_clip = sqrt(d) plans like llr_clip = ones(d)
    l2 = check_positive(grad_clip if grad_clip is not None else llr_clip, "grad_clip")
    return np.full(dim, l2 / np.sqrt(dim)), l2


def plan(
    model: Model | None = None,
    *,
    epsilon: float,
    delta: float | None = None,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    llr_clip: float | np.ndarray | None = None,
    grad_clip: float | None = None,
    info_per_row: float | np.ndarray | None = None,
    n_rows: int | None = None,
    row_dim: str | None = None,
    row_axes: Mapping[str, int] | None = None,
    public: Iterable[str] = (),
    outcome_bounds: tuple[float, float] | None = None,
    residual_sd: float | None = None,
    hess_clip: float | None = None,
    _graph: ModelGraph | None = None,
) -> Plan:
    """Predict what a DP run of ``model`` can deliver, from public information only.

    Parameters
    ----------
    model : pm.Model, optional
        Default: the model on the context stack. Only its structure, its priors and the number
        of rows are read.
    epsilon, delta : float
        The budget (``delta`` defaults to ``min(1e-6, 1 / (10 n))``).
    draws, tune, chains : int
        The run to plan.
    llr_clip, grad_clip : float or array
        The clip bounds the steps would use (per raveled coordinate, or one L2 bound).
    info_per_row : float or array, optional
        Expected per-row Fisher information per raveled coordinate (public knowledge, e.g. from
        a similar public study). Default ``0.04 B_j^2`` (module docstring).
    n_rows : int, optional
        The number of rows, when the model holds placeholders for rows bound at sampling time
        (``pdp.sample(data=...)``). Default: the model's.
    row_dim, row_axes, public
        As for the steps (:func:`pymc_dp.graph.analyse`). The planner refuses what a step
        refuses (priors, potentials or initial values that read private data, ...), before it
        computes anything from the priors.
    outcome_bounds, residual_sd : optional
        For a linear-Gaussian likelihood (:class:`~pymc_dp.DPSuffStats`): the outcome's public
        range, and a public guess of the residual sd in outcome units (default a quarter of the
        half-range).
    hess_clip : float, optional
        The curvature bound an anchored step would use (``DPPenalty(hess_clip=...)``, the Taylor
        anchor); the plan then predicts that chain too and may recommend it.
    _graph : ModelGraph, optional
        Internal: :func:`pymc_dp.graph.analyse` of ``model`` with these ``row_dim``,
        ``row_axes`` and ``public``, already made (a step's, whose data is checked unchanged).

    Returns
    -------
    Plan
        Printable; see the module docstring for every prediction.
    """
    model = modelcontext(model)
    epsilon = check_epsilon(epsilon)
    draws = check_count(draws, "draws", minimum=1)
    tune = check_count(tune, "tune")
    chains = check_count(chains, "chains", minimum=1)
    # the steps' checks: a prior that reads private data must not feed the predictions. A step's
    # own analysis (same model, arguments and data: pdp.sample's advice) is not made again
    if _graph is None:
        _graph = analyse(model, row_dim=row_dim, row_axes=row_axes, public=public)
    graph = _graph
    n = graph.n_rows if n_rows is None else check_count(n_rows, "n_rows", minimum=1)
    # the budget the steps would hold (default delta, checks), and its Gaussian privacy loss
    budget = Budget.of(n, epsilon=epsilon, delta=delta, chains=chains)
    delta = budget.delta
    q0 = _initial_q(model)
    run = _Run(n, int(q0.size), epsilon, delta, chains, tune, draws)
    mu = budget.mu(what="The plan")
    if hess_clip is not None:
        hess_clip = check_positive(hess_clip, "hess_clip")
    suffstats = _suffstats_prediction(graph, n, mu, outcome_bounds, residual_sd)
    if suffstats is not None and llr_clip is None and grad_clip is None:
        return _suffstats_plan(run, suffstats)
    per, l2 = _bounds(run.dim, llr_clip, grad_clip)
    fc = _forecast(model, q0, run, mu, per, info_per_row)
    anchored = transformed = None
    if hess_clip is not None:
        anchored = _anchored_prediction(
            run,
            mu=mu,
            posterior_sd=fc.posterior_sd,
            warm_error=fc.lap_err,
            hess_clip=hess_clip,
            grad_clip=l2,
            active=_likelihood_mask(model, graph),
            e_max=fc.e_max,
        )
        transformed = _transformed_reads(model, graph)
    return _clipped_plan(run, fc, suffstats, anchored, transformed)


@dataclass(frozen=True)
class _Forecast:
    """What the clipped samplers deliver (module docstring): the ratio r_j and the posterior sd
    per coordinate; DPLaplace's mode error per coordinate (``lap_err``, posterior sds), the
    widening of its intervals (``lap_sd``) and its largest error (``lap_largest``); the
    zero-tuning DPPenalty's noise multiplier ``s``, step (``step_sd``, posterior sds), ``ess``
    and the ``acceptance`` it is planned at; ``e_max``, the largest error sd per coordinate of a
    usable posterior."""

    ratio: np.ndarray
    posterior_sd: np.ndarray
    lap_err: float
    lap_sd: float
    lap_largest: float
    s: float
    step_sd: float
    ess: float
    e_max: float
    acceptance: float = _ACCEPT

    @classmethod
    def unknown(cls, dim: int) -> _Forecast:
        """No forecast, NaN throughout: a run planned without clip bounds (DPSuffStats)."""
        nan = dict.fromkeys((f.name for f in fields(cls)), np.nan)
        return cls(**{**nan, "ratio": np.full(dim, np.nan), "posterior_sd": np.full(dim, np.nan)})

    # "usable": every mean within 0.5 posterior sd and every sd within [0.67, 1.5] x; with d
    # coordinates of error sd e the first holds with probability (2 Phi(0.5 / e) - 1)^d
    @property
    def laplace_ok(self) -> bool:
        return self.lap_err <= self.e_max and self.lap_sd <= 1.5

    @property
    def mcmc_ok(self) -> bool:
        return self.ess >= ESS_FOR_MCMC


def _forecast(model: Model, q0: np.ndarray, run: _Run, mu: float, per, info_per_row) -> _Forecast:
    """The predictions for DPLaplace and the zero-tuning DPPenalty (public facts only)."""
    info = (
        DEFAULT_INFO_FRACTION * per**2
        if info_per_row is None
        else np.broadcast_to(np.asarray(info_per_row, dtype=float), (run.dim,)).copy()
    )
    prior_precision = _prior_precision(model, q0)
    posterior_sd = 1.0 / np.sqrt(run.n * info + prior_precision)
    # r = sqrt(n I) / B, with the prior's information counted: a release moves the estimate by
    # 2 s B sd posterior sds
    ratio = 1.0 / (per * posterior_sd)
    lap_err, lap_sd, lap_largest = _laplace_error(mu, run.dim, run.n)
    s, step_sd, ess = _penalty_mixing(mu, ratio, run)
    return _Forecast(
        ratio=ratio,
        posterior_sd=posterior_sd,
        lap_err=lap_err,
        lap_sd=lap_sd,
        lap_largest=lap_largest,
        s=s,
        step_sd=step_sd,
        ess=ess,
        e_max=_largest_error(run.dim),
    )


def _laplace_error(mu: float, dim: int, n: int) -> tuple[float, float, float]:
    """DPLaplace's mode error per coordinate (posterior sds), the widening of its noise-aware
    intervals, and the median of its largest error over the coordinates."""
    # the fit's last release is whitened (every direction in posterior sds) and clipped near
    # WHITENED_TAIL x the rms whitened norm sqrt(d / n): 2 s_w c posterior sds per coordinate,
    # whatever the covariates' scale or correlations
    s_w = 1.0 / math.sqrt(2.0 * LAST_SHARE * mu)
    lap_err = 2.0 * s_w * WHITENED_TAIL * math.sqrt(dim / n)
    lap_sd = math.sqrt(1.0 + lap_err**2)
    lap_largest = lap_err * _median_largest(dim)
    return lap_err, lap_sd, lap_largest


def _penalty_mixing(mu: float, ratio: np.ndarray, run: _Run) -> tuple[float, float, float]:
    """The zero-tuning DPPenalty's noise multiplier, step (posterior sds) and ESS (all chains)."""
    mu_s = 0.5 * mu  # zero-tuning steps spend half on the warm start
    k = run.chains * (run.tune + run.draws)
    s = math.sqrt(k / (2.0 * mu_s))
    step_sd = float(np.median(_SIGMA * ratio / (2.0 * s)))
    ess = float(np.min(run.chains * run.draws * 0.18 * ratio**2 / (run.dim * s**2)))
    return s, step_sd, ess


def _recommend_split(run: _Run, fc: _Forecast) -> dict:
    """The split of the budget and the run for the unanchored recommendation."""
    # the split: a DP chain's ESS is 0.36 r^2 mu_s draws / (d (tune + draws)) whatever the
    # number of chains, so tuning is kept to what dual averaging needs (~200 iterations)
    if fc.mcmc_ok:
        short_tune = min(run.tune, max(MIN_TUNE, run.draws // 4))
        split_ess = fc.ess * (run.tune + run.draws) / (short_tune + run.draws)
        return dict(
            warm_start=0.5, tune=short_tune, draws=run.draws, chains=run.chains, ess=split_ess
        )
    # draws of the noise-aware fit: no tuning, every draw effective
    return dict(
        warm_start=1.0, tune=0, draws=run.draws, chains=run.chains, ess=run.chains * run.draws
    )


def _unanchored_choice(run: _Run, fc: _Forecast) -> tuple[str, list[str]]:
    """DPPenalty where its chain mixes, else DPLaplace, and what would make an infeasible run
    feasible."""
    if fc.mcmc_ok:
        return "DPPenalty", []
    if fc.laplace_ok:
        return "DPLaplace", [
            f"an unanchored chain would diffuse only ~{fc.ess:.2g} effective samples at this "
            "budget (R-hat would not converge): sample the noise-aware Laplace fit "
            "(pdp.DPLaplace) instead"
        ]
    need_n = run.n * (fc.lap_err / fc.e_max) ** 2
    return "DPLaplace", [
        f"even the best use of the budget (DPLaplace) misplaces the mode by ~{fc.lap_err:.2f} "
        f"posterior sds per coordinate (every one of the {run.dim} within 0.5 sd needs "
        f"<= {fc.e_max:.2f}): about {need_n:.3g} rows, or a {fc.lap_err / fc.e_max:.2g}x larger "
        "epsilon (error ~ 1 / epsilon), would make it usable",
        "for a conjugate exponential-family model, pdp.expfam releases the sufficient "
        "statistics once; tighter public clip bounds (per-coordinate bounds of bounded "
        "covariates: pdp.glm_clip) also reduce the noise",
    ]


def _weigh_anchored(
    anchored: dict,
    transformed: list[str],
    recommended: str,
    advice: list[str],
    split: dict,
    run: _Run,
    fc: _Forecast,
) -> tuple[str, list[str], dict]:
    """The anchored chain against the recommendation so far: recommended, with its split, where
    it is usable and closer than the private fit (or the fit is not usable); else advised on."""
    if transformed:
        advice.append(
            "hess_clip must bound every row's curvature in the unconstrained coordinates, and "
            f"the likelihood reads transformed variables ({', '.join(transformed)}): a GLM "
            "bound does not hold there, so the anchored chain is not recommended"
        )
    elif (
        anchored["usable"]
        and recommended != "DPSuffStats"
        and (anchored["largest_error"] <= fc.lap_largest or not fc.laplace_ok)
    ):
        recommended = "DPPenalty(hess_clip)"
        advice = [
            f"an anchored chain (DPPenalty with hess_clip) is predicted to mix (ESS "
            f"~{anchored['ess']:.3g}) and stay within ~{anchored['largest_error']:.2f} "
            "posterior sds, closer than the private fit: sample it"
        ]
        split = dict(
            warm_start=ANCHORED_WARM_START,
            anchor=DEFAULT_ANCHOR_SHARE,
            tune=run.tune,
            draws=run.draws,
            chains=run.chains,
            ess=anchored["ess"],
        )
    elif anchored["usable"]:
        advice.append(
            f"an anchored chain (DPPenalty with hess_clip) would mix too (ESS "
            f"~{anchored['ess']:.3g}, largest error ~{anchored['largest_error']:.2f} "
            "posterior sds, above the recommended release's)"
        )
    else:
        advice.append(
            f"an anchored chain (hess_clip) would give only ~{anchored['ess']:.3g} effective "
            f"samples at this budget (largest error ~{anchored['largest_error']:.2f} "
            "posterior sds): its test noise grows with d^2 / (n epsilon)"
        )
    return recommended, advice, split


def _clipped_plan(
    run: _Run,
    fc: _Forecast,
    suffstats: dict | None,
    anchored: dict | None,
    transformed: list[str] | None,
) -> Plan:
    """The plan of a run with clip bounds: the recommended sampler, its split, the advice."""
    split = _recommend_split(run, fc)
    recommended, advice = _unanchored_choice(run, fc)
    # with a free noise sd DPLaplace's clipped score biases it (not in its error figure)
    if suffstats is not None and (
        suffstats["sd_error"] > 0 or suffstats["largest_error"] <= fc.lap_largest
    ):
        recommended = "DPSuffStats"
        advice.insert(0, _SUFFSTATS_ADVICE)
    if anchored is not None:
        recommended, advice, split = _weigh_anchored(
            anchored, transformed, recommended, advice, split, run, fc
        )
    if not fc.mcmc_ok and fc.ess > 0 and recommended != "DPPenalty(hess_clip)":
        advice.append(
            f"MCMC (DPPenalty) predicted ESS {fc.ess:.3g}: it grows with n and epsilon^2, not "
            "with draws; one-coordinate (gwmh) proposals and per-coordinate clip bounds help most"
        )
    suffstats_ok = suffstats is not None and _suffstats_usable(suffstats, fc.e_max)
    anchored_ok = bool(anchored and anchored["usable"])
    return _plan(
        run,
        fc,
        recommended=recommended,
        feasible=fc.mcmc_ok or fc.laplace_ok or suffstats_ok or anchored_ok,
        advice=advice,
        split=split,
        suffstats=suffstats,
        anchored=anchored,
    )


def _plan(run: _Run, fc: _Forecast, **choice: Any) -> Plan:
    """The Plan of ``run``: the forecast's predictions under the Plan's names, and ``choice``,
    the Plan's other fields (the recommendation, whether it is feasible, advice, split, ...)."""
    return Plan(
        **asdict(run),
        ratio=fc.ratio,
        posterior_sd=fc.posterior_sd,
        laplace_error_sd=fc.lap_err,
        laplace_sd_ratio=fc.lap_sd,
        laplace_largest_error=fc.lap_largest,
        penalty_noise_multiplier=fc.s,
        penalty_step_sd=fc.step_sd,
        penalty_acceptance=fc.acceptance,
        penalty_ess=fc.ess,
        **choice,
    )


def _anchored_prediction(
    run: _Run,
    *,
    mu: float,
    posterior_sd: np.ndarray,
    warm_error: float,
    hess_clip: float,
    grad_clip: float,
    e_max: float,
    active: np.ndarray | None = None,
) -> dict:
    """Acceptance, ESS, tilt and largest error of an anchored DPPenalty at its default shares
    (module docstring; DPHMC's trajectories are not modelled). Public inputs only; the
    chain is a seeded simulation (:mod:`pymc_dp.mixing`), not noise."""
    chain_share = 1.0 - ANCHORED_WARM_START - DEFAULT_ANCHOR_SHARE
    s = math.sqrt(run.chains * (run.tune + run.draws) / (2.0 * chain_share * mu))
    # the warm start at its share misplaces the anchor by warm_error / sqrt(share) sds per
    # coordinate (its error scales as 1 / sqrt(mu))
    offset_sd = warm_error / math.sqrt(ANCHORED_WARM_START)
    if active is not None:  # prior-only coordinates move freely: not in the test's bound
        posterior_sd = posterior_sd[np.asarray(active, bool)]
    # the anchor's noise shifts each mean by sd_j x noise_sd posterior sds (its tilt)
    noise_sd = 2.0 * grad_clip / math.sqrt(2.0 * DEFAULT_ANCHOR_SHARE * mu)
    mix = simulate_anchored_chain(
        s,
        hess_clip,
        posterior_sd,
        offset_sd,
        run.chains,
        run.tune,
        run.draws,
        tilt_sd=posterior_sd * noise_sd,
    )
    ess = mix["ess"]
    tilt = float(np.max(posterior_sd) * noise_sd)
    # a mean's error sd: the tilt (one draw of the anchor's noise) and the Monte Carlo error
    per = math.sqrt(tilt**2 + 1.0 / max(ess, 1e-12))
    usable = ess >= ESS_FOR_MCMC and per <= e_max
    largest = per * _median_largest(posterior_sd.size)
    return dict(
        ess=ess,
        acceptance=mix["acceptance"],
        rhat=mix["rhat"],
        tilt=tilt,
        largest_error=largest,
        usable=bool(usable),
    )


def _transformed_reads(model: Model, graph) -> list[str]:
    """Free variables the likelihood reads through a transform (a scale, a bounded parameter):
    a GLM's curvature bound does not hold in their unconstrained coordinates."""
    reads = set(graph.likelihood_vars)
    return [
        rv.name
        for rv in model.free_RVs
        if model.rvs_to_values[rv].name in reads and model.rvs_to_transforms.get(rv) is not None
    ]


def _likelihood_mask(model: Model, graph) -> np.ndarray:
    """Raveled coordinates the likelihood reads (the anchored test's bound ignores the others),
    from the model's structure."""
    point = compiling.initial_point(model)
    reads = set(graph.likelihood_vars)
    return np.concatenate(
        [np.full(np.size(point[v.name]), v.name in reads) for v in model.value_vars]
    )


def _suffstats_usable(suffstats: dict, e_max: float) -> bool:
    """Whether DPSuffStats' coefficients and noise sd land within a usable posterior's error."""
    return max(suffstats["coef_error"], suffstats["sd_error"]) <= e_max


def _suffstats_plan(run: _Run, suffstats: dict) -> Plan:
    """A linear-Gaussian model planned without clip bounds: DPSuffStats needs none."""
    ok = _suffstats_usable(suffstats, _largest_error(run.dim))
    advice = [_SUFFSTATS_ADVICE]
    if not ok:
        advice.append(
            f"its noise moves the coefficients by ~{suffstats['coef_error']:.2f} and the noise "
            f"sd by ~{suffstats['sd_error']:.2f} posterior sds: the error falls as 1 / epsilon "
            "and 1 / sqrt(n); fewer covariates (the noise grows with the column count) or a "
            "tighter public outcome range also help"
        )
    return _plan(
        run,
        _Forecast.unknown(run.dim),
        recommended="DPSuffStats",
        feasible=ok,
        advice=advice,
        split=dict(warm_start=1.0, tune=0, draws=run.draws, chains=run.chains, ess=np.nan),
        suffstats=suffstats,
    )


def _suffstats_prediction(graph, n, mu, outcome_bounds, residual_sd) -> dict | None:
    """DPSuffStats' noise and expected error (module docstring), or None when the likelihood
    is not linear-Gaussian. Reads the graph on synthetic designs only."""
    from pymc_dp.linear_gaussian import NotLinearGaussian, find_linear_gaussian
    from pymc_dp.linear_residuals import planned_errors

    try:
        lg = find_linear_gaussian(graph)
    except NotLinearGaussian:
        return None
    from pytensor.graph.traversal import ancestors

    from pymc_dp.linear_gaussian import check_outcome_bounds

    if outcome_bounds is not None:
        outcome_bounds = check_outcome_bounds(outcome_bounds)
    sigma_free = lg.q in set(ancestors([lg.sigma]))
    half = 1.0
    if outcome_bounds is not None:
        half = 0.5 * (float(outcome_bounds[1]) - float(outcome_bounds[0]))
    resid = 0.25 if residual_sd is None else check_positive(residual_sd, "residual_sd") / half
    two_stage, sds, noise_sd = planned_errors(n, lg.p, min(resid, 1.0), mu, sigma_free)
    coef = float(sds[1 : lg.p + 1].max()) if lg.p else float(sds[0])
    scale = float(sds[-1]) if sigma_free else 0.0
    return {
        "noise_sd": noise_sd,
        "release": "two-stage (pilot Gram matrix, then residuals)" if two_stage else "Gram",
        "coef_error": coef,
        "sd_error": scale,
        "largest_error": _median_largest_of(sds),
    }


def _median_largest_of(sds: np.ndarray) -> float:
    """Median of the largest of independent ``|N(0, sd_i^2)|``."""
    lo, hi = 0.0, 10.0 * float(np.max(sds))
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if np.prod(2.0 * ndtr(mid / sds) - 1.0) < 0.5:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _median_largest(dim: int) -> float:
    """Median of the largest of ``dim`` independent ``|N(0, 1)|``."""
    return float(ndtri(0.5 * (1.0 + 0.5 ** (1.0 / dim))))


def _largest_error(dim: int, within: float = 0.5, chance: float = 0.5) -> float:
    """Largest per-coordinate error sd with which all ``dim`` coordinates land within ``within``
    posterior sds with probability ``chance`` (errors independent N(0, e^2))."""
    return within / float(ndtri(0.5 * (1.0 + chance ** (1.0 / dim))))


def _initial_q(model: Model) -> np.ndarray:
    point = compiling.initial_point(model)
    return DictToArrayBijection.map({v.name: point[v.name] for v in model.value_vars}).data


def _prior_precision(model: Model, q0: np.ndarray) -> np.ndarray:
    """Diagonal of the prior's precision at the initial point (public)."""
    point = compiling.initial_point(model)
    prior = model.logp(vars=model.free_RVs, jacobian=True)
    [prior], q = join_nonshared_inputs(point, [prior], model.value_vars, {})
    fn = hessian_fn(prior, q)
    return np.maximum(-np.diag(np.asarray(fn(np.asarray(q0, dtype=q.dtype)))), 0.0)
