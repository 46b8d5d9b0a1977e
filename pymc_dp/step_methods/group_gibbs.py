r"""DPGroupGibbs: Gibbs by group for random-effect GLMs, each group's move tested on its own rows.

A random-intercept GLM (``eta_i = loc + scale * z[g_i] + x_i' beta``) is a GLM in the group effects
``psi = (a, beta)``, ``a = loc + scale * z`` (:mod:`pymc_dp.effects` finds them in the graph). A
joint DP move of all coordinates pays the worst group's remainder bound in a test whose move
spans every group, and at epsilon 4 its noise was 3-11 nats (``benchmarks.hierarchical_chain``:
R-hat 1.5-5.7). This step sweeps in centred coordinates ``(h, a, beta)`` (``h`` the
hyperparameters, e.g. ``mu`` and ``log tau``) instead:

1. ``h`` given ``a``: exact Metropolis moves on
   :math:`\log p(h, z(a, h), \beta) - \sum_g \log|\mathrm{scale}_g(h)|` (the model's prior in
   its own coordinates, ``z = (a - loc) / scale``, and the Jacobian of ``z -> a``): no data, no
   noise (like :mod:`pymc_dp.prior_block`);
2. each ``a_g``: an independence proposal from the conditional of the anchored surrogate
   (:mod:`pymc_dp.anchor`: ``G'(psi - A) - (psi - A)' P (psi - A) / 2``, ``P`` the private fit's
   likelihood precision) times ``N(loc_g, scale_g^2)``, corrected by a penalty test on the
   remainder of group ``g``'s rows only (a mask over all rows, from the private group column);
3. ``beta``: the same, one test over all rows.

**Remainder bound** (public, from :class:`pymc_dp.GLMClip`): a row's log-likelihood is
``f(x_i' psi)`` with ``|f''| <= w`` (``curvature``) and covariates ``|x_ij| <= c_j``
(``covariate_bounds``: the group effect's first, 1 for an intercept, then one per coefficient), so
its Taylor remainder at the anchor ``A`` is at most ``w |x'D| (|x'u| + |x'u'|) / 2`` with
``|x'v| <= sum_j c_j |v_j|`` (``D`` the move, ``u``, ``u'`` the two points less ``A``). A row of
group ``g`` reads only ``(a_g, beta)``, so a move of ``a_g`` has the bound ``b_g`` of that block;
``beta``'s takes the largest ``|a_g - A_g|`` (the group is private). Every row's remainder is
clipped to it: a false bound biases the chain, never the privacy.

**Accounting** (parallel composition; checked by an independent review against Dong, Roth & Su
2022's adaptive composition). The test of group ``g`` releases its masked sum with noise
``2 s b_g``. Replacing one row changes only the tests of its old group ``g`` and new group ``g'``:
by at most ``2 b_g`` if ``g = g'`` (loss ``1 / s``), else by at most ``b_g`` and ``b_g'`` (loss
``sqrt(2) / (2 s)``). The bounds depend on the history, the losses do not: a sweep's group tests
together cost one test's ``1 / s``, and a sweep costs two Gaussian releases at multiplier ``s``
(:attr:`GROUP_TESTS`, ``per_iteration=2``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import pytensor.tensor as pt
from pymc.pytensorf import join_nonshared_inputs
from pymc.step_methods.step_sizes import DualAverageAdaptation
from pytensor.compile.mode import Mode
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors, io_toposort
from pytensor.scalar import basic as ps
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.subtensor import AdvancedSubtensor
from pytensor.tensor.variable import TensorConstant

from pymc_dp import compiling
from pymc_dp.accounting.ledger import GaussianMechanism
from pymc_dp.anchor import ANCHOR_NAME, release_anchor
from pymc_dp.boundary import guarded
from pymc_dp.bounds import GLMClip, glm_clip
from pymc_dp.budget import GROUP_ANCHOR_STREAM
from pymc_dp.checks import check_count, check_positive
from pymc_dp.likelihood import PerRowLikelihood
from pymc_dp.mechanisms import PenaltyTest
from pymc_dp.step_methods.base import PRIVACY_STATS, DPStep, Stat
from pymc_dp.step_methods.group_mixing import predict_mixing
from pymc_dp.step_methods.group_sweep import (
    GROUP_TESTS,
    GroupSweep,
    coefficient_bound,
    group_bound,
)
from pymc_dp.step_methods.laplace import _effect_likelihood
from pymc_dp.step_methods.registry import Example, register
from pymc_dp.surrogate import gaussian_surrogate

__all__ = [
    "DEFAULT_GROUP_ANCHOR",
    "GROUP_TESTS",
    "DPGroupGibbs",
    "coefficient_bound",
    "group_bound",
]

#: Budget shares (of the PLD mean) of the warm start and the anchor; the tests get the rest.
#: Measured on ``benchmarks.hierarchical_chain --design step`` (20 groups, n = 2e4, epsilon 4):
#: test noise 1.05-1.16 nats, R-hat 1.01, bulk ESS 327-377 over three seeds.
DEFAULT_GROUP_WARM_START = 0.5
DEFAULT_GROUP_ANCHOR = 0.3
#: Exact (noise-free) hyperparameter moves per sweep (a chain's first sweep makes
#: :data:`~pymc_dp.step_methods.group_sweep.FIRST_HYPER_MOVES`).
HYPER_MOVES = 5
_FAST = Mode(linker="py", optimizer="fast_compile")
#: Public seed of the points at which the effect is checked to be affine in ``z``.
_CHECK_SEED = 20261128


def _check_one_gather(effects) -> None:
    """The rows read the effect only as ``effect[group]``, through one group column given
    directly (a ``pm.Data`` or constant of one integer code per row, possibly cast): a row then
    reads its own group's effect, and a replaced row changes at most two groups' tests. A
    computed index (``g - g.min()``) could move every row's group (review)."""
    (stand_in,), (idx,) = effects.inputs[:1], effects.indices
    message = (
        "DPGroupGibbs needs the rows to read the group effect only as `effect[group]`, with "
        "`group` one integer code per row in 0..G-1 given directly as a pm.Data column"
    )
    for node in io_toposort([], [effects.rows]):
        if stand_in in node.inputs and not (
            isinstance(node.op, AdvancedSubtensor) and node.inputs[1] is idx
        ):
            raise ValueError(message + " (here it is read otherwise, or by two indices).")
    column = idx
    while column.owner is not None and isinstance(column.owner.op, Elemwise):
        if not isinstance(column.owner.op.scalar_op, ps.Cast) or len(column.owner.inputs) != 1:
            raise ValueError(message + " (here the index is computed).")
        column = column.owner.inputs[0]
    if not isinstance(column, SharedVariable | TensorConstant):
        raise ValueError(message + " (here the index is computed).")


class _Structure:
    """Where ``a = loc(h) + scale(h) * z`` lives in the model's raveled point ``q`` (graph and
    public points only)."""

    def __init__(self, base: PerRowLikelihood, eff) -> None:
        effects = eff.effects
        if effects.n_effects != 1:
            raise ValueError(
                f"DPGroupGibbs needs the rows to read one vector of group effects (found "
                f"{effects.n_effects}): e.g. `mu + tau * z[group]`."
            )
        x = effects.psi[0]
        if any(x is v for v in base.vars):
            raise ValueError(
                f"DPGroupGibbs needs the group effect non-centred, `loc + scale * z[group]`; the "
                f"rows read the free vector `{x.name}` directly (the centred form): write it as "
                "`mu + tau * z[group]` with `z ~ Normal(0, 1)`, or use DPLaplace."
            )
        sizes, offsets, start = {}, {}, 0
        for name, _, size, _ in base._point_map_info:
            sizes[name], offsets[name] = int(size), start
            start += int(size)
        self.dim = start
        self.n_groups = int(effects.inputs[0].type.shape[0])
        up = set(ancestors([x]))
        candidates = [
            v for v in base.vars if v in up and v.ndim == 1 and sizes[v.name] == self.n_groups
        ]
        if len(candidates) != 1:
            raise ValueError(
                f"DPGroupGibbs needs the group effect to be `loc + scale * z` with one free vector "
                f"`z` of one entry per group ({self.n_groups}); found "
                f"{[v.name for v in candidates] or 'none'}."
            )
        z = candidates[0]
        betas = list(effects.psi[1:])
        if any(v is z for v in betas):
            raise ValueError(f"The rows read `{z.name}` outside the group effect.")
        shared = [v.name for v in betas if v in up]
        if shared:
            raise ValueError(
                f"The rows read {shared} both inside the group effect and directly: a move of "
                "the coefficients would move every group's effect untested. DPGroupGibbs needs "
                "the effect's `loc` and `scale` built of variables the rows do not read."
            )
        _check_one_gather(effects)
        self.z = slice(offsets[z.name], offsets[z.name] + sizes[z.name])
        self.beta = np.concatenate(
            [np.arange(offsets[v.name], offsets[v.name] + sizes[v.name]) for v in betas]
            or [np.zeros(0, int)]
        ).astype(int)
        taken = np.zeros(self.dim, bool)
        taken[self.z] = True
        taken[self.beta] = True
        self.hyper = np.flatnonzero(~taken)
        loc = graph_replace(x, {z: pt.zeros_like(z)}, strict=False)
        scale = graph_replace(x, {z: pt.ones_like(z)}, strict=False) - loc
        grid = pt.zeros((self.n_groups,), dtype=x.dtype)
        (loc_q, scale_q, x_q), q = join_nonshared_inputs(
            compiling.initial_point(base.model),
            [loc + grid, scale + grid, x],
            base.vars,
            base.shared,
        )
        self._fn = compiling.function([q], [loc_q, scale_q, x_q], mode=_FAST)
        self._fn.trust_input = True
        q0 = base.ravel(compiling.initial_point(base.model))
        rng = np.random.default_rng(_CHECK_SEED)
        for _ in range(3):  # public points: the model's initial point, moved by a fixed seed
            qk = q0 + 0.5 * rng.standard_normal(q0.size)
            loc_k, scale_k, x_k = self._fn(qk.astype(q0.dtype))
            if not np.allclose(loc_k + scale_k * qk[self.z], x_k, rtol=1e-8, atol=1e-10):
                raise ValueError(
                    f"DPGroupGibbs needs the group effect affine in `{z.name}` "
                    "(`loc + scale * z`); this one is not."
                )

    def loc_scale(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        loc, scale, _ = self._fn(q)
        return np.asarray(loc, float), np.asarray(scale, float)


def _check_glm(glm) -> None:
    """The bounds DPGroupGibbs' tests need, finite and positive (else a test without noise)."""
    if not isinstance(glm, GLMClip) or glm.covariate_bounds is None:
        raise TypeError(
            f"`glm` must be the GLMClip of pymc_dp.glm_clip (it carries the covariate bounds "
            f"and the curvature bound the tests need), got {type(glm).__name__}."
        )
    curvature = float(glm.curvature)
    bounds = np.asarray(glm.covariate_bounds, float)
    if not (np.isfinite(curvature) and curvature > 0) or not np.all(
        np.isfinite(bounds) & (bounds > 0)
    ):
        raise ValueError(
            "`glm` must have a finite curvature bound > 0 and covariate bounds finite and > 0 "
            "(pymc_dp.glm_clip makes them): a bound of the wrong sign would release a test "
            "without noise."
        )


def _check_budget_arguments(kwargs) -> None:
    if kwargs.get("epsilon") is None:
        raise ValueError("DPGroupGibbs needs `epsilon`: its fit, anchor and tests share it.")
    if kwargs.get("noise_multiplier") is not None:
        raise ValueError("DPGroupGibbs calibrates its tests to `epsilon`: no `noise_multiplier`.")


def _check_shares(warm, anchor: float) -> None:
    if isinstance(warm, int | float) and warm + anchor >= 1.0:
        raise ValueError(
            f"`warm_start` ({warm}) and `anchor` ({anchor}) leave nothing of the budget for "
            "the tests: their sum must be below 1."
        )


def _group_column(effects, structure: _Structure, n_rows: int) -> np.ndarray:
    """Each row's group (private: kept inside the step, never returned), from the graph's
    gather index, as the kernels embed it."""
    (idx,) = effects.effects.indices
    # the values the kernels embed (frozen when they were built), not the live container
    idx = graph_replace(idx, effects._frozen, strict=False)
    groups = np.asarray(compiling.function([], idx, mode=_FAST)(), dtype=np.int64)
    if groups.shape != (n_rows,):
        raise ValueError(
            "DPGroupGibbs needs one group index per row; the group column's shape differs "
            "from the rows'."
        )
    return np.where(groups < 0, groups + structure.n_groups, groups)  # NumPy's negative indices


class DPGroupGibbs(DPStep):
    r"""Differentially private Gibbs sampler by group for random-effect GLMs (module docstring).

    Parameters
    ----------
    vars : list, optional
        Free variables; must be all of them (the default).
    glm : GLMClip
        Public bounds of the GLM in the group effects (:func:`pymc_dp.glm_clip`):
        ``covariate_bounds`` lists the group effect's bound first (1 for a random intercept,
        ``mu + tau * z[g]``), then one per coefficient the rows read directly, in the order of
        the model's variables; ``grad_clip`` and ``hess_clip`` serve the private fit and the
        anchor, ``curvature`` the tests' remainder bound.
    anchor : float
        Share of the budget (of its PLD mean) of the Taylor anchor's release (default 0.3).
    warm_start : float
        Share of the private fit that places the anchor and the proposals (default 0.5); the
        tests get ``1 - warm_start - anchor``.
    hyper_moves : int
        Exact (noise-free) Metropolis moves of the hyperparameters per sweep (default 5).
    epsilon, delta, chains, noise_seed, exact_noise, diagnostics, row_dim, row_axes, public
        See :class:`~pymc_dp.step_methods.base.DPStep`. ``epsilon`` is required.

    Notes
    -----
    Scope: one vector of group effects ``loc + scale * z[g]`` (``z`` a free vector, one entry per
    group; ``loc`` and ``scale`` any graphs of the other free variables the rows do not read),
    and coefficients the rows read directly, in a GLM whose curvature ``glm.curvature`` bounds
    on every segment the chain tests (logistic: always; Poisson's ``exp(eta_bound)`` only while
    the linear predictor stays below ``eta_bound``: rows beyond it are clipped, which biases the
    chain, never the privacy). In centred coordinates a group informed by few rows, or a small
    ``scale``, mixes slowly (the centred funnel).
    Measured on a logistic regression with 20 random intercepts (n = 2e4, epsilon 4; README,
    "Hierarchical models"). Rows held in a Dask cluster are not supported (the anchor keeps
    per-row gradients next to the driver).

    The anchor's noise, released once, tilts the target by ``exp(e'(psi - A))``: its shift is
    not in the intervals. At epsilon 4 on that row the largest mean error was 0.34-0.50 NUTS
    sds and the hyper sd's Wasserstein distance 0.065-0.142 NUTS sds, against 0.036-0.051 for
    :class:`~pymc_dp.DPLaplace` (three seeds each), which the planner recommends there.

    Stats: ``accepted`` (the coefficients' move), ``accept_rate`` (the share of the sweep's group
    moves accepted), ``noise_std`` (the median noise of the sweep's tests, in nats),
    ``hyper_scale`` (the hyperparameters' random-walk scale), ``dp_epsilon`` / ``dp_mu`` /
    ``dp_delta``; ``clip_fraction`` with ``diagnostics=True``.

    References
    ----------
    .. [1] Ceperley, D. and Dewing, M. (1999). The penalty method for random walks with
       uncertain energies. J. Chem. Phys. (The penalty test.)
    .. [2] Bardenet, R., Doucet, A. and Holmes, C. (2017). On Markov chain Monte Carlo methods
       for tall data. JMLR, section 6. (Taylor control variates.)
    .. [3] Dong, J., Roth, A. and Su, W. (2022). Gaussian differential privacy. JRSS B.
       (Adaptive composition.)
    """

    name = "dp_group_gibbs"
    stats: ClassVar[dict[str, Stat]] = {
        **PRIVACY_STATS,
        "dp_mu": Stat(np.float64),
        "accept_rate": Stat(np.float64),
        "noise_std": Stat(np.float64),
        "hyper_scale": Stat(np.float64),
        "clip_fraction": Stat(np.float64, releasable=False),
    }

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        glm: GLMClip,
        anchor: float = DEFAULT_GROUP_ANCHOR,
        hyper_moves: int = HYPER_MOVES,
        **kwargs,
    ) -> None:
        _check_glm(glm)
        _check_budget_arguments(kwargs)
        self.glm = glm
        self.anchor_share = check_positive(anchor, "anchor")
        _check_shares(kwargs.setdefault("warm_start", DEFAULT_GROUP_WARM_START), self.anchor_share)
        self.hyper_moves = check_count(hyper_moves, "hyper_moves", minimum=1)
        super().__init__(vars, **kwargs)
        if getattr(self.likelihood, "location", "in memory") != "in memory":
            raise ValueError(
                "DPGroupGibbs keeps per-row gradients and the group column next to the driver: "
                "rows in a Dask cluster are not supported."
            )
        effects = None
        if type(self.likelihood) is PerRowLikelihood:
            # graph structure and the model's prior only: no data is read to decide
            effects = guarded(
                "Finding the group effects for DPGroupGibbs", _effect_likelihood, self.likelihood
            )
        if effects is None:
            raise ValueError(
                "DPGroupGibbs needs rows that read group effects gathered by a group column, "
                "e.g. `mu + tau * z[group]` (pymc_dp.effects found none)."
            )
        self._effects = effects
        self._structure = _Structure(self.likelihood, effects)
        n_beta = self._structure.beta.size
        c = np.asarray(glm.covariate_bounds, float)
        if c.size != 1 + n_beta:
            raise ValueError(
                f"`glm` has {c.size} covariate bounds; DPGroupGibbs needs {1 + n_beta}: the group "
                f"effect's (1 for a random intercept), then one per coefficient the rows read "
                f"({n_beta})."
            )
        groups = _group_column(self._effects, self._structure, self.n_rows)
        self._run_warm_start()
        self._release_anchor(groups)

    # ------------------------------------------------------------------ set-up
    def _release_anchor(self, groups: np.ndarray) -> None:
        """The anchor's release (once per run), then the sweep that tests against it."""
        eff, warm = self._effects, self.warm
        noise = self.budget.noise(GROUP_ANCHOR_STREAM)
        mu = self.budget.mu(self.anchor_share, what="`anchor`")
        self.anchor, ratio = release_anchor(
            eff,
            warm.mean,
            grad_clip=self.glm.grad_clip,
            hess_clip=self.glm.hess_clip,
            mu=mu,
            noise=noise,
        )
        _, grad = eff.prior_logp_and_grad(warm.mean)
        _, precision, _, _ = gaussian_surrogate(
            warm.mean, warm.posterior_cov, eff.prior_hessian(warm.mean), grad, eff.likelihood_mask
        )
        ng = self._structure.n_groups
        beta_prior = (np.asarray(eff.centre, float)[ng:], np.asarray(eff.scale, float)[ng:])
        self.sweep = GroupSweep(
            self._structure,
            self.likelihood.prior_value,
            self.glm,
            self.anchor,
            precision,
            beta_prior,
            ratio,
            groups,
            self.hyper_moves,
        )

    def anchor_attr(self, labels: list[str]) -> str:
        """JSON of the anchor's predicted tilt per coordinate of ``psi``, in posterior sds (the
        warm start's metric; public), as :meth:`DPPenalty.anchor_attr
        <pymc_dp.step_methods.anchoring.AnchoredStep.anchor_attr>`."""
        import json

        from pymc_dp.anchor import tilt_sds

        warm = self.warm
        sds = np.asarray(warm.unit, float) if warm.unit is not None else np.sqrt(np.diag(warm.cov))
        tilt = tilt_sds(self.anchor, np.diag(sds**2))
        return json.dumps({k: float(v) for k, v in zip(labels, tilt, strict=True)})

    def predicted_mixing(
        self, chains: int = 4, tune: int = 1000, draws: int = 1000, replicates: int = 1
    ) -> dict:
        """The sweep's predicted ``acceptance`` (of the group moves), ``coefficient_acceptance``
        (of the coefficients' moves; NaN where the rows read none), median test ``noise``
        (nats), bulk ``ess`` (all chains, smallest over the free coordinates) and ``rhat``
        (largest), from released values only.

        It runs this step's own sweep (its proposals, bounds, exact hyperparameter moves and
        adaptation) in the world its surrogate describes: the likelihood equal to its
        second-order expansion at the anchor (the released gradient, the warm start's released
        curvature). There a test rejects by its noise, whose scale the public bounds of the
        simulated moves set, and by the gap between that curvature and the noise-aware one the
        proposals use. Seeded (:mod:`~pymc_dp.step_methods.group_mixing`): the same step
        predicts the same; its noise is not the chain's. Optimistic where a group's likelihood
        is far from Gaussian (a few rows, near separation): there the real remainders add to
        the noise. Measured on the 20-group row (README, "Hierarchical models"): acceptance and
        noise within 10%, bulk ESS 1.3-2.2x low. ``replicates``: simulated runs of ``chains``
        chains (medians)."""
        return predict_mixing(self, chains, tune, draws, replicates)

    # ------------------------------------------------------------------ DPStep interface
    @property
    def fit_likelihood(self) -> PerRowLikelihood:
        return self._effects

    def _needs_warm_start(self) -> bool:
        return True

    def _free_moves(self) -> bool:
        return False  # the hyperparameters move in the sweep, given the effects

    def _warm_grad_clip(self) -> float:
        return self.glm.grad_clip

    def _warm_hess_clip(self) -> float | None:
        return self.glm.hess_clip

    def mechanisms(self) -> tuple[PenaltyTest]:
        return (GROUP_TESTS,)

    def _shared_entries(self) -> tuple:
        anchor = getattr(self, "anchor", None)
        if anchor is not None:
            return super()._shared_entries() + anchor.mechanisms
        mu = self.budget.mu(self.anchor_share, what="`anchor`")
        return super()._shared_entries() + (GaussianMechanism(ANCHOR_NAME, 1 / np.sqrt(2 * mu), 1),)

    def _adaptation(self) -> str:
        return "the hyperparameters' random-walk scale by dual averaging (exact moves, no data)"

    def _reset_chain(self) -> None:
        self.sweep.ratio.reset()
        self._hyper_adapt = DualAverageAdaptation(0.5, 0.3, 0.05, 0.75, 10)
        # start: a draw of the private fit for (a, beta), the model's initial hyperparameters
        psi = self.warm.draw(self.rng)
        q = self.likelihood.ravel(compiling.initial_point(self.likelihood.model)).astype(float)
        hyper = self._structure.hyper
        for _ in range(100):  # a scale of 0 there (tau ~ Normal(0, 1)) maps no effect to z
            _, scale = self._structure.loc_scale(q)
            if np.all(np.isfinite(scale) & (scale != 0)):
                break
            q[hyper] += 0.5 * self.rng.standard_normal(hyper.size)
        else:
            raise ValueError(
                "DPGroupGibbs found no start whose group effect has a non-zero, finite scale "
                "near the model's initial point: give the scale's variable a public `initval`."
            )
        self.chain.start = self.sweep.to_q(q, psi)

    def _iterate(self, q: np.ndarray) -> tuple[np.ndarray, dict]:
        chain, tuning = self.chain, self._tuning
        q, stats, clips = self.sweep(
            q, self.rng, chain.noise, self._scale, self._hyper_adapt, tuning, chain.iteration == 0
        )
        stats["hyper_scale"] = float(self._hyper_adapt.current(tuning))
        if self.diagnostics:
            stats["clip_fraction"] = float(np.mean(clips))
        return q, stats


# the effect, beta (2) and sigma: a Normal row with its scale free is no GLM, so these bound
# nothing there: clipped, like the anchored examples
register(
    DPGroupGibbs,
    group_gibbs=Example(
        {"glm": glm_clip(np.ones(4)), "compile_kwargs": {"mode": "FAST_COMPILE"}}, grouped=True
    ),
)
