"""Adapters: the package's own mechanisms as :func:`~pymc_dp.audit.core.audit` mechanisms.

Each runs the package's own code (a step's ratio and test, its noisy gradient, an iteration of
DP Barker, an expfam release, ABCDP's sparse vector) on neighbouring data sets, with every random
draw from the audit's generator, and carries the epsilon the accountant claims for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pymc_dp.audit.core import Mechanism
from pymc_dp.checks import _as_float, check_count, check_positive

__all__ = [
    "barker_iteration",
    "claimed_epsilon",
    "expfam_release",
    "first_acceptance",
    "gradient_release",
    "one_iteration_plan",
    "penalty_release",
    "sparse_vector",
]


# --------------------------------------------------------------------------------------------
# Adapters: the package's own mechanisms as audit() mechanisms
# --------------------------------------------------------------------------------------------
#
# Each adapter returns a mechanism object for :func:`audit` with ``__call__(which, rng)``, a
# ``batch(which, rng, size)`` method, and two attributes: ``claimed_epsilon`` (what the package's
# accountant claims for exactly the release that is run, at ``delta``) and ``delta``. The step
# adapters run the steps' own code (``_ratio`` and the penalty test, ``_noisy_grad``,
# ``_iterate``) on a step built on D0 and a step built on D1, with every random draw taken from
# the audit's generator: each batch of runs gets a secret NoiseSource seeded from it (successive
# runs draw successive, independent noise from that stream) and the steps' own state (plan, noise
# source, prior cache, proposal) is lent to the run and restored afterwards.


@contextmanager
def _lent(obj: Any, **attrs: Any) -> Iterator[None]:
    """Set attributes of ``obj`` for the duration of a block; restore (or delete) them after."""
    missing = object()
    saved = {name: obj.__dict__.get(name, missing) for name in attrs}
    try:
        for name, value in attrs.items():
            setattr(obj, name, value)
        yield
    finally:
        for name, value in saved.items():
            if value is missing:
                obj.__dict__.pop(name, None)
            else:
                setattr(obj, name, value)


class _CachedKernel:
    """A compiled PyTensor kernel memoised on its inputs (the kernels are pure functions).

    Outputs are copied in and out of the cache (PyTensor may reuse its output buffers), so a
    cached call returns exactly what a fresh call would. A cache of at most ``maxsize`` entries:
    minibatch kernels, whose row indices change on every call, simply miss.
    """

    def __init__(self, kernel: Callable, maxsize: int = 256) -> None:
        self.kernel = kernel
        self.maxsize = maxsize
        self.cache: dict[tuple, list[np.ndarray]] = {}

    def __call__(self, *args: Any) -> list[np.ndarray]:
        key = tuple((a.dtype.str, a.shape, a.tobytes()) for a in map(np.asarray, args))
        hit = self.cache.get(key)
        if hit is None:
            hit = [np.array(o, copy=True) for o in self.kernel(*args)]
            if len(self.cache) < self.maxsize:
                self.cache[key] = hit
        return [o.copy() for o in hit]


def _check_which(which: Any) -> int:
    if which not in (0, 1) or isinstance(which, bool):
        raise ValueError(f"`which` must be 0 or 1, got {which!r}")
    return int(which)


def _unit_direction(direction: ArrayLike, dim: int, expected: str) -> NDArray[np.float64]:
    """``direction`` normalised to a unit vector; it must be a nonzero finite vector of length
    ``dim`` (``expected`` says what it must match, in the error)."""
    u = np.array(direction, dtype=np.float64).reshape(-1)
    norm = float(np.sqrt(np.sum(u * u)))
    if u.shape != (dim,) or not (np.isfinite(norm) and norm > 0):
        raise ValueError(f"`direction` must be a nonzero finite vector of {expected}")
    return u / norm


def _projections(direction: NDArray, released: Iterable[NDArray], size: int) -> NDArray[np.float64]:
    """The projections ``direction @ y`` of the ``size`` released vectors ``y``, one at a time."""
    out = np.empty(size)
    for i, y in enumerate(released):
        out[i] = float(direction @ y)
    return out


def _point(step: Any, q: ArrayLike, name: str) -> NDArray:
    """A raveled point of ``step``'s model, in the dtype its compiled kernels expect."""
    arr = np.array(q, dtype=step.likelihood._q.dtype).reshape(-1)
    if arr.shape != (step.likelihood.dim,) or not np.all(np.isfinite(arr)):
        raise ValueError(
            f"`{name}` must hold {step.likelihood.dim} finite value(s) (a raveled point of the "
            f"model), got {q!r}"
        )
    return arr


def one_iteration_plan(step: Any) -> Any:
    """The run plan of one iteration of one chain of ``step``: ``step.plan(tune=0, draws=1,
    chains=1)``.

    Its ``scale`` is the noise a step built with ``epsilon`` calibrates for a single iteration,
    and its ``ledger.epsilon`` is what the accountant claims for that iteration at
    ``step.delta``.
    """
    return step.plan(tune=0, draws=1, chains=1)


def claimed_epsilon(step: Any, plan: Any = None, *, release: str = "iteration") -> float:
    r"""Epsilon the package's accountant claims (at ``step.delta``) for one audited release.

    Parameters
    ----------
    step : DPStep
        A DP step (:class:`~pymc_dp.DPPenalty`, :class:`~pymc_dp.DPMinibatchPenalty`,
        :class:`~pymc_dp.DPHMC`, :class:`~pymc_dp.DPBarker`).
    plan : RunPlan, optional
        Plan whose noise knob ``plan.scale`` is audited (default: :func:`one_iteration_plan`).
        Only its knob matters: the claim is for *one* iteration (or one gradient release) of
        one chain at that knob, whatever the plan's length.
    release : {"iteration", "gradient"}
        ``"iteration"``: everything one iteration releases (what :func:`penalty_release` and
        :func:`barker_iteration` audit). ``"gradient"``: a single noisy gradient of
        :class:`~pymc_dp.DPHMC` (what :func:`gradient_release` audits), a Gaussian mechanism with
        noise multiplier ``plan.scale * step.grad_noise_ratio``; an iteration makes
        ``n_steps + 1`` of them plus one penalty test.

    Returns
    -------
    float
        The epsilon of that release computed by :func:`pymc_dp.runplan.run_ledger`, the accounting
        the step's own ledger uses. Releases made once per run outside the iterations (a private
        warm start) are not part of it.
    """
    import dataclasses

    from pymc_dp.runplan import run_ledger

    plan = one_iteration_plan(step) if plan is None else plan
    if release == "iteration":
        mechanisms = tuple(plan.mechanisms)
    elif release == "gradient":
        gradient = getattr(step, "_gradient", None)
        if gradient is None:
            raise ValueError(f"{type(step).__name__} makes no gradient releases")
        mechanisms = (dataclasses.replace(gradient, per_iteration=1),)
    else:
        raise ValueError(f"`release` must be 'iteration' or 'gradient', got {release!r}")
    return float(run_ledger(mechanisms, plan.scale, 1, 1, plan.delta).epsilon)


class _Scalar:
    """A mechanism with one float output per run: one run is a batch of one."""

    def __call__(self, which: int, rng: np.random.Generator) -> float:
        return float(self.batch(which, rng, 1)[0])

    def batch(self, which: int, rng: np.random.Generator, size: int) -> NDArray[np.float64]:
        raise NotImplementedError


class _StepRelease(_Scalar):
    """Shared plumbing of the step adapters: two steps, the point ``q`` of the audited release,
    one plan, lent state, cached kernels."""

    #: Names of the compiled kernels (instance attributes of the step) that may be memoised.
    kernels: tuple[str, ...] = ()
    #: The adapter's name and the steps it audits: ``(module, class)`` (imported when used:
    #: the audit's core imports no step) and their names in the error.
    adapter: str
    audited: tuple[str, str, str]

    def __init__(
        self, step0: Any, step1: Any, q: ArrayLike, plan: Any, cache_kernels: bool
    ) -> None:
        import importlib

        from pymc_dp.step_methods.base import DPStep

        module, cls, names = self.audited
        if not isinstance(step0, getattr(importlib.import_module(module), cls)):
            raise TypeError(f"{self.adapter} audits {names}, got {type(step0).__name__}")
        for step, name in ((step0, "step0"), (step1, "step1")):
            if not isinstance(step, DPStep):
                raise TypeError(f"`{name}` must be a DP step, got {type(step).__name__}")
        if type(step0) is not type(step1):
            raise TypeError(
                f"the two steps must be the same mechanism, got {type(step0).__name__} and "
                f"{type(step1).__name__}"
            )
        if step0.n_rows != step1.n_rows or step0.likelihood.dim != step1.likelihood.dim:
            raise ValueError(
                "replace-one neighbours have the same number of rows and the same parameters: "
                f"got n = {step0.n_rows}, {step1.n_rows} and dim = {step0.likelihood.dim}, "
                f"{step1.likelihood.dim}"
            )
        if step0.delta != step1.delta:
            raise ValueError(f"the steps' deltas differ: {step0.delta} and {step1.delta}")
        self.steps = (step0, step1)
        self.plan = one_iteration_plan(step0) if plan is None else plan
        self.delta = float(self.plan.delta)
        self.cache_kernels = bool(cache_kernels)
        self.q = _point(step0, q, "q")

    def _lend(self, step: Any, rng: np.random.Generator) -> dict[str, Any]:
        from pymc_dp.noise import NoiseSource
        from pymc_dp.step_methods.chain import ChainState

        # a chain state of the run's own: secret noise from the audit's generator
        attrs: dict[str, Any] = {
            "_plan": self.plan,
            "chain": ChainState(NoiseSource(int(rng.integers(2**63)))),
        }
        if self.cache_kernels:
            attrs.update({k: _CachedKernel(getattr(step, k)) for k in self.kernels})
        return attrs

    def batch(self, which: int, rng: np.random.Generator, size: int) -> NDArray[np.float64]:
        step = self.steps[_check_which(which)]
        with _lent(step, **self._lend(step, rng)):
            return self._run(step, int(size))

    def _run(self, step: Any, size: int) -> NDArray[np.float64]:
        raise NotImplementedError


class _PenaltyRelease(_StepRelease):
    kernels = ("_kernel",)
    adapter = "penalty_release"
    audited = (
        "pymc_dp.step_methods.penalty",
        "PenaltyMetropolis",
        "DPPenalty or DPMinibatchPenalty",
    )

    def __init__(self, step0, step1, q, q_new, plan, cache_kernels) -> None:
        super().__init__(step0, step1, q, plan, cache_kernels)
        self.q_new = _point(step0, q_new, "q_new")
        self.dist = float(np.sqrt(np.sum((self.q_new - self.q) ** 2)))
        if self.dist == 0.0:
            raise ValueError("`q_new` equals `q`: the ratio is 0 on every data set")
        # What PenaltyMetropolis._iterate passes to _ratio: the per-row clip bound of this step
        # (steps with _clip_norm), or the step length (steps whose _ratio scales it by llr_clip).
        clip_norm = getattr(step0, "_clip_norm", None)
        self.ratio_arg = float(clip_norm(self.q_new - self.q)) if clip_norm else self.dist
        self.claimed_epsilon = claimed_epsilon(step0, self.plan)

    def _run(self, step: Any, size: int) -> NDArray[np.float64]:
        out = np.empty(size)
        scale = step._scale
        for i in range(size):
            value, _, sensitivity, _ = step._ratio(self.q_new, self.q, self.ratio_arg)
            log_ratio, sigma = step._test.log_ratio(step.chain.noise, value, sensitivity, scale)
            out[i] = log_ratio + 0.5 * sigma * sigma
        return out

    def __repr__(self) -> str:
        return f"penalty_release({type(self.steps[0]).__name__}, dist={self.dist:.4g})"


def penalty_release(
    step0: Any,
    step1: Any,
    q: ArrayLike,
    q_new: ArrayLike,
    *,
    plan: Any = None,
    cache_kernels: bool = True,
) -> Mechanism:
    r"""The privatised log-likelihood ratio of a penalty step, as a mechanism for :func:`audit`.

    One run computes the step's clipped (tempered) ratio of ``q_new`` against ``q``
    (``step._ratio``; for :class:`~pymc_dp.DPMinibatchPenalty` on a batch drawn from the run's
    secret noise, minus half its variance estimate) and privatises it with the step's penalty
    test (``step._test.log_ratio``) at the noise knob of ``plan``: one iteration's release.

    Parameters
    ----------
    step0, step1 : PenaltyMetropolis
        The same step (class and arguments) built inside two models whose data are
        replace-one neighbours :math:`D_0, D_1`. Orient them so that the ratio on
        :math:`D_1` is the larger (or score with ``statistic=lambda r: -r``). Worst case for a
        Gaussian mean model: one row at a far outlier, of opposite sign in the two data sets,
        so that its clipped ratio is :math:`-b` on one and :math:`+b` on the other.
    q, q_new : array_like
        Current and proposed raveled points (``step.likelihood.dim`` values), ``q_new != q``.
    plan : RunPlan, optional
        The plan whose knob ``plan.scale`` sets the noise (default
        :func:`one_iteration_plan` of ``step0``). Pass e.g.
        ``dataclasses.replace(plan, scale=plan.scale / 2)`` to audit a broken variant, with
        ``claimed_epsilon`` taken from the unbroken plan.
    cache_kernels : bool, default True
        Memoise the compiled ratio kernel on its inputs during a batch of runs (exact: kernels
        are pure functions; the full-data ratio is then computed once per batch instead of once
        per run). Minibatch kernels see new row indices on every run and are evaluated anew.

    Returns
    -------
    callable
        ``mechanism(which, rng) -> float``, the released ratio (the test's privatised ratio,
        before the ``-sigma^2/2`` penalty); with ``batch``, ``claimed_epsilon`` (one iteration
        at ``plan.scale``, :func:`claimed_epsilon`) and ``delta`` (the plan's).
    """
    return _PenaltyRelease(step0, step1, q, q_new, plan, cache_kernels)


class _GradientRelease(_StepRelease):
    kernels = ("_grad",)
    adapter = "gradient_release"
    audited = ("pymc_dp.step_methods.hmc", "DPHMC", "DPHMC")

    def __init__(self, step0, step1, q, direction, plan, cache_kernels) -> None:
        super().__init__(step0, step1, q, plan, cache_kernels)
        if direction is None:
            sums = [
                s.tempering * np.asarray(s._grad(self.q, np.asarray(s.grad_clip))[0])
                for s in self.steps
            ]
            direction = sums[1] - sums[0]
        self.direction = _unit_direction(
            direction,
            step0.likelihood.dim,
            "the model's dimension (the default, D1's clipped gradient sum minus D0's, is zero "
            "at this `q`)",
        )
        self.claimed_epsilon = claimed_epsilon(step0, self.plan, release="gradient")

    def _run(self, step: Any, size: int) -> NDArray[np.float64]:
        gradients = (step._noisy_grad(self.q)[0] for _ in range(size))
        return _projections(self.direction, gradients, size)

    def __repr__(self) -> str:
        return f"gradient_release(DPHMC, direction={self.direction!r})"


def gradient_release(
    step0: Any,
    step1: Any,
    q: ArrayLike,
    direction: ArrayLike | None = None,
    *,
    plan: Any = None,
    cache_kernels: bool = True,
) -> Mechanism:
    r"""One noisy gradient of :class:`~pymc_dp.DPHMC`, projected on a direction, for :func:`audit`.

    One run is ``step._noisy_grad(q)``: the per-row gradients clipped to norm ``grad_clip``,
    summed, tempered, plus Gaussian noise of multiplier ``plan.scale * grad_noise_ratio`` over
    the sensitivity ``2 T grad_clip``, plus the exact prior gradient (public). Its claim is that
    of one such Gaussian release (:func:`claimed_epsilon` with ``release="gradient"``), not of a
    whole iteration (``n_steps + 1`` gradients and one penalty test).

    Parameters
    ----------
    step0, step1 : DPHMC
        The same step built on neighbouring data sets :math:`D_0, D_1`.
    q : array_like
        Raveled point at which the gradient is released.
    direction : array_like, optional
        The output is the projection of the noisy gradient on this direction (normalised).
        Default: D1's clipped gradient sum minus D0's (computed exactly from the steps' kernels,
        as an auditor who knows both data sets can), which makes the projection the likelihood
        ratio statistic of the two Gaussian output distributions. For a worst-case pair its norm
        is the sensitivity ``2 T grad_clip``.
    plan, cache_kernels
        As in :func:`penalty_release` (``cache_kernels`` memoises the gradient kernel).

    Returns
    -------
    callable
        ``mechanism(which, rng) -> float``, with ``batch``, ``claimed_epsilon``, ``delta`` and
        ``direction`` (unit vector).
    """
    return _GradientRelease(step0, step1, q, direction, plan, cache_kernels)


class _FixedProposal:
    """A proposal that always proposes ``q_new`` (the audit fixes the public proposal)."""

    def __init__(self, q_new: NDArray) -> None:
        self.q_new = q_new

    def __call__(self, rng: Any, q: NDArray) -> tuple[NDArray, int]:
        return self.q_new.copy(), 0

    def reset(self, rng: Any) -> None:
        pass

    def update(self, j: int, accepted: bool) -> None:
        pass


class _BarkerIteration(_StepRelease):
    kernels = ("_kernel",)
    adapter = "barker_iteration"
    audited = ("pymc_dp.step_methods.barker", "DPBarker", "DPBarker")

    def __init__(self, step0, step1, q, q_new, plan, cache_kernels) -> None:
        super().__init__(step0, step1, q, plan, cache_kernels)
        self.q_new = _point(step0, q_new, "q_new")
        # The log prior at q is public (no data): computed once, as step._prior_at would.
        self.prior = float(step0.likelihood.prior_value(self.q))
        self.claimed_epsilon = claimed_epsilon(step0, self.plan)

    def _lend(self, step: Any, rng: np.random.Generator) -> dict[str, Any]:
        attrs = super()._lend(step, rng)
        attrs["_proposal"] = _FixedProposal(self.q_new)
        attrs["chain"].moved_to(self.q.copy(), self.prior)
        return attrs

    def _run(self, step: Any, size: int) -> NDArray[np.float64]:
        out = np.empty(size)
        for i in range(size):
            # _iterate moves the chain to q_new on acceptance: put it back at q every run.
            step.chain.moved_to(self.q, self.prior)
            _, stats = step._iterate(self.q)
            out[i] = float(stats["accepted"])
        return out

    def __repr__(self) -> str:
        return "barker_iteration(DPBarker)"


def barker_iteration(
    step0: Any,
    step1: Any,
    q: ArrayLike,
    q_new: ArrayLike,
    *,
    plan: Any = None,
    cache_kernels: bool = True,
) -> Mechanism:
    r"""One iteration of :class:`~pymc_dp.DPBarker` from ``q`` proposing ``q_new``, for
    :func:`audit`.

    One run is ``step._iterate(q)`` with the (public) proposal fixed to ``q_new`` and the prior
    cache at ``q``: a secret batch, the clipped batch ratio and variance estimate, the Gaussian
    and correction noise, and the accept bit, which is the iteration's only release.

    Parameters
    ----------
    step0, step1 : DPBarker
        The same step built on neighbouring data sets; orient them so that :math:`D_1` accepts
        more often (or score with ``statistic=lambda a: 1 - a``).
    q, q_new : array_like
        Current and proposed raveled points.
    plan : RunPlan, optional
        Default :func:`one_iteration_plan` (DP Barker has no noise knob: only the plan's
        mechanisms matter for the claim).
    cache_kernels : bool, default True
        Memoise the batch ratio kernel (hits only when a batch repeats).

    Returns
    -------
    callable
        ``mechanism(which, rng) -> float``, 1.0 if accepted else 0.0; with ``batch``,
        ``claimed_epsilon`` (one iteration, :func:`claimed_epsilon`) and ``delta``. A single
        bit carries at most :math:`\log(p_1 / p_0)` of privacy loss for accept probabilities
        :math:`p_0, p_1`, so expect a bound far below the claim.
    """
    return _BarkerIteration(step0, step1, q, q_new, plan, cache_kernels)


class _ExpfamRelease(_Scalar):
    def __init__(self, data0, data1, family, epsilon, direction, family_kwargs) -> None:
        from pymc_dp.checks import check_epsilon
        from pymc_dp.expfam.families import get_family
        from pymc_dp.expfam.release import release

        self.epsilon = check_epsilon(epsilon)
        self.data = (np.asarray(data0), np.asarray(data1))
        d0, d1 = self.data
        if d0.shape != d1.shape or d0.ndim == 0:
            raise ValueError(
                f"replace-one neighbours have the same number of records, got shapes {d0.shape} "
                f"and {d1.shape}"
            )
        differ = np.any((d0 != d1).reshape(d0.shape[0], -1), axis=1).sum()
        if differ > 1:
            raise ValueError(f"the data sets differ in {differ} records; neighbours differ in one")
        self.family_kwargs = dict(family_kwargs)
        options = {k: v for k, v in self.family_kwargs.items() if k != "bounds"}
        fam = get_family(family, self.family_kwargs.get("bounds"), **options)
        self.family = family
        if direction is None:
            direction = fam.statistic(d1)[0] - fam.statistic(d0)[0]
        self.direction = _unit_direction(
            direction,
            fam.dim,
            "the statistic's dimension (the default, s(D1) - s(D0), is zero for these data sets)",
        )
        self._release = release
        probe = release(d0, family, self.epsilon, noise_seed=0, **self.family_kwargs)
        self.claimed_epsilon = float(probe.ledger.epsilon)
        self.delta = float(probe.ledger.delta)

    def batch(self, which: int, rng: np.random.Generator, size: int) -> NDArray[np.float64]:
        data = self.data[_check_which(which)]
        seeds = rng.integers(2**63, size=int(size))
        releases = (
            self._release(
                data, self.family, self.epsilon, noise_seed=int(seed), **self.family_kwargs
            ).y
            for seed in seeds
        )
        return _projections(self.direction, releases, int(size))

    def __repr__(self) -> str:
        return f"expfam_release({self.family!r}, epsilon={self.epsilon!r})"


def expfam_release(
    data0: ArrayLike,
    data1: ArrayLike,
    family: Any,
    epsilon: float,
    *,
    direction: ArrayLike | None = None,
    **family_kwargs: Any,
) -> Mechanism:
    r"""The Laplace release of :func:`pymc_dp.expfam.release`, as a mechanism for :func:`audit`.

    One run is ``release(data, family, epsilon, noise_seed=<fresh seed from the audit's rng>,
    **family_kwargs)``; its output ``y`` (the snapped noisy sufficient statistic) is projected on
    ``direction``.

    Parameters
    ----------
    data0, data1 : array_like
        Replace-one neighbours (same number of records, at most one record different), e.g.
        Bernoulli records with one 0 changed to 1.
    family : str or Family
        As in :func:`~pymc_dp.expfam.release`.
    epsilon : float
        Epsilon of the release (> 0).
    direction : array_like, optional
        Default :math:`s(D_1) - s(D_0)` (exact statistics), normalised.
    **family_kwargs
        ``bounds``, ``trials``, ``categories``, ``sigma``: passed to ``release``.

    Returns
    -------
    callable
        ``mechanism(which, rng) -> float``, with ``batch``, ``claimed_epsilon`` (the release's
        ledger: ``epsilon``) and ``delta`` (0: pure DP).
    """
    return _ExpfamRelease(data0, data1, family, epsilon, direction, family_kwargs)


class _SparseVectorRelease:
    def __init__(
        self, distances0, distances1, threshold, epsilon, n_accept, sensitivity, resample
    ) -> None:
        from pymc_dp.abcdp.svt import SparseVector, noise_scale, svt_epsilon

        d0 = np.array(distances0, dtype=np.float64).reshape(-1)
        d1 = np.array(distances1, dtype=np.float64).reshape(-1)
        if d0.shape != d1.shape or d0.size == 0:
            raise ValueError(
                f"the two distance streams must have the same nonzero length, got {d0.size} "
                f"and {d1.size}"
            )
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        gap = float(np.max(np.abs(d1 - d0)))
        if not gap <= self.sensitivity * (1.0 + 1e-12):
            raise ValueError(
                f"neighbouring data move every distance by at most the sensitivity "
                f"{self.sensitivity}; these streams differ by up to {gap}"
            )
        self.distances = (d0, d1)
        self.threshold = _as_float(threshold, "threshold")
        self.n_accept = check_count(n_accept, "n_accept", minimum=1)
        self.resample = bool(resample)
        self.b = noise_scale(epsilon, self.n_accept, self.sensitivity, self.resample)
        self.claimed_epsilon = float(
            svt_epsilon(self.b, self.n_accept, self.sensitivity, self.resample)
        )
        self.delta = 0.0
        self._svt = SparseVector

    def __call__(self, which: int, rng: np.random.Generator) -> NDArray[np.intp]:
        distances = self.distances[_check_which(which)]
        svt = self._svt(self.threshold, self.b, self.n_accept, self.resample, rng, rng)
        return svt.offer(distances)

    def batch(self, which: int, rng: np.random.Generator, size: int) -> list[NDArray[np.intp]]:
        return [self(which, rng) for _ in range(int(size))]

    def __repr__(self) -> str:
        return (
            f"sparse_vector(n={self.distances[0].size}, b={self.b:.4g}, "
            f"n_accept={self.n_accept}, resample={self.resample})"
        )


def sparse_vector(
    distances0: ArrayLike,
    distances1: ArrayLike,
    threshold: float,
    epsilon: float,
    n_accept: int,
    sensitivity: float,
    resample: bool = False,
) -> Mechanism:
    r"""ABCDP's private stage (:class:`pymc_dp.abcdp.svt.SparseVector`), as a mechanism for
    :func:`audit`.

    One run offers the whole stream of distances to a fresh ``SparseVector(threshold, b,
    n_accept, resample, rng, rng)`` with ``b = noise_scale(epsilon, n_accept, sensitivity,
    resample)`` and returns the accepted indices.

    Parameters
    ----------
    distances0, distances1 : array_like
        The distances of the same stream of proposals to :math:`D_0` and to :math:`D_1`;
        neighbouring data move each by at most ``sensitivity`` (checked), in either direction.
        The loss of the whole claimed budget needs distances that move in *both* directions:
        with all of them shifted the same way the noisy threshold absorbs the shift. A strong
        pair: a run of queries near the threshold that :math:`D_1` pushes up by the sensitivity,
        then one that it pulls down (see :func:`first_acceptance`).
    threshold, epsilon, n_accept, sensitivity, resample
        As in :func:`pymc_dp.abcdp.svt.noise_scale` and :class:`~pymc_dp.abcdp.svt.SparseVector`.

    Returns
    -------
    callable
        ``mechanism(which, rng) -> ndarray`` of accepted indices; with ``batch``,
        ``claimed_epsilon`` (:func:`pymc_dp.abcdp.svt.svt_epsilon` at ``b``, i.e. ``epsilon``) and
        ``delta`` (0: pure DP). Score it with e.g. :func:`first_acceptance`.
    """
    return _SparseVectorRelease(
        distances0, distances1, threshold, epsilon, n_accept, sensitivity, resample
    )


def first_acceptance(indices: ArrayLike) -> float:
    """Statistic for :func:`sparse_vector`: the index of the first accepted query, -1 if none.

    Larger means "the early queries were rejected and a later one accepted": the event whose
    probability rises most on :math:`D_1` when :math:`D_1` pushes the early distances up and a
    later one down.
    """
    idx = np.asarray(indices).reshape(-1)
    return float(idx[0]) if idx.size else -1.0
