"""Exact prior x a noise-aware surrogate of the likelihood, sampled by PyMC's NUTS.

A one-release step (``DPSuffStats``, ``DPLaplace(nuts=True)``) turns its release into a
log-density of the model's raveled, unconstrained point ``q`` (and of latent variables of its
own). :func:`surrogate_model` adds the model's exact log prior (log-Jacobians and prior-only
variables included, read from :class:`~pymc_dp.graph.ModelGraph`), so hierarchical, bounded and
prior-only variables keep their true shape; :func:`sample_chain` runs one NUTS chain on it.
Everything here is post-processing of released values: no data, no budget.

:func:`gaussian_surrogate` is the surrogate of a noise-aware Laplace fit ``N(m, C)``: the
likelihood's Gaussian, ``log L(q) = -1/2 d' P d + g' d`` on the coordinates the likelihood reads
(``d = q - m`` there), with ``P = C^-1 - PD(-H_prior(m))`` (the prior precision the fit used;
eigenvalues floored at 0: directions the fit does not know more about than the prior stay the
prior's, and a warning says how many) and ``g`` the prior's pull at ``m`` cancelled along
``P``'s range, so that exact prior x surrogate has its mode at ``m`` (its implied centre capped
at :data:`CENTRE_CAP` fit sds). For a Gaussian prior, where ``P`` is positive semidefinite and
the pull small, it is the fit itself (tested).

A fit whose Newton walk was still moving (``WarmStart.walk``) knows the direction of the
distance it has left: the mode lies ahead along the last step, not behind. Its covariance holds
that as the symmetric spread ``walk walk^T``; divided by the prior, a long walk leaves its
direction uninformed and the exact prior pulls the draws *back* along it (found measuring:
near-separable random intercepts, where the walk runs along the extreme groups' spread, came
out with the hierarchy's scale 3.8-7.4 of its own sds low). :func:`gaussian_surrogate` takes
the spread out (``walk=``) and :func:`walk_left` puts it back one-sided: the likelihood's centre
at ``m + s walk`` with a latent ``s ~ HalfNormal(1)``, which NUTS integrates over (the
posterior's mode then moves by ``s (I - C0 Lambda) walk``, ``Lambda`` the prior's precision). The
scale 1 keeps the removed spread's second moment; the exact hierarchical prior decides ``s``.
``DPLaplace`` puts only the group effects' part of the walk ahead: elsewhere (the coefficients,
models without effects) the symmetric spread is honest, the walk's length overstates the
distance left of a walk nearly arrived, and a share their prior does not decide would move
them by about half their walk whether or not it was left. With one share for the whole walk,
the groups (nearly arrived) held the coefficients' part back where slow coefficients set it (a
review: 2.1-3.8 own sds short; 2.4-2.7 with their spread kept).
"""

from __future__ import annotations

import logging
import re
import threading
import warnings
from collections.abc import Callable

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.replace import graph_replace

from pymc_dp import compiling
from pymc_dp.boundary import WITHHELD

__all__ = [
    "CENTRE_CAP",
    "WALK_LEFT",
    "compile_logp_dlogp",
    "gaussian_surrogate",
    "sample_chain",
    "surrogate_model",
    "walk_left",
]

#: What PyMC's NUTS says on a surrogate that is dropped (:func:`sample_chain`): the notice of the
#: dense metric the step chose, and NumPy's floating-point errors on a diverging trajectory (the
#: divergences are counted and warned about by :mod:`pymc_dp.diagnostics`).
_DROPPED = re.compile(
    r"QuadPotentialFullAdapt is an experimental feature"
    r"|(overflow|invalid value|divide by zero|underflow) encountered"
)

#: Largest distance, in fit sds, of the Gaussian surrogate's centre from the fit's mean.
CENTRE_CAP = 3.0
#: Name of the surrogate model's latent share of a walk left (:func:`walk_left`); never returned.
WALK_LEFT = "walk_left"


def surrogate_model(
    likelihood, loglik: Callable[[pt.TensorVariable], pt.TensorVariable]
) -> pm.Model:
    """``q`` (flat) with the model's exact log prior and ``loglik(q)`` as potentials; ``loglik``
    may add free variables of its own (it is called inside the new model's context)."""
    from pymc.pytensorf import join_nonshared_inputs

    model = likelihood.model
    (prior,), q_in = join_nonshared_inputs(
        compiling.initial_point(model), [likelihood.graph.prior], likelihood.vars, likelihood.shared
    )
    with pm.Model(model=None) as sur:  # not a sub-model of the user's
        q = pm.Flat("q", shape=likelihood.dim)
        pm.Potential("prior", graph_replace(prior, {q_in: q}, strict=False))
        pm.Potential("likelihood", loglik(q))
    return sur


def sample_chain(
    model: pm.Model,
    *,
    draws: int,
    tune: int,
    rng: np.random.Generator,
    start: dict,
    init: str = "jitter+adapt_diag",
    target_accept: float = 0.9,
    compile_kwargs: dict | None = None,
    logp_dlogp=None,
    keep_tuning: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """One NUTS chain on ``model``: ``(keep_tuning + draws, dim)`` values of ``q`` and the
    divergences.

    ``keep_tuning``: how many of NUTS' own last tuning draws lead the values (for the tuning
    iterations of the PyMC chain the step runs in, which PyMC discards: drawing them after
    NUTS' tuning took 1000 of a default chain's 3000 NUTS iterations); NUTS tunes for
    ``max(tune, keep_tuning)`` iterations.

    ``logp_dlogp``: the model's compiled ``logp_dlogp_function`` (:func:`compile_logp_dlogp`),
    shared by the chains of one step instead of compiled again by each (most of a chain's
    time on a small model); then ``init`` is ``"adapt_diag"`` or ``"adapt_full"`` and
    ``start`` is not jittered, as PyMC's own ``init`` of those names."""
    logger = logging.getLogger("pymc")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        caught: list = []
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            # the hook is process-wide: record which thread warned (only this one's known
            # notices are dropped; nothing passes with its text: review)
            warnings.showwarning = _recorder(caught, threading.get_ident())
            seed = int(rng.integers(2**63))
            if logp_dlogp is None:
                kwargs = {"init": init, "compile_kwargs": compile_kwargs}
                kwargs["target_accept"] = target_accept
            else:
                kwargs = {"step": _nuts_step(model, start, init, target_accept, seed, logp_dlogp)}
            idata = _nuts(model, draws, max(tune, keep_tuning), seed, start, kwargs)
    finally:
        logger.setLevel(level)
    _pass_on(caught)
    groups = [("warmup_posterior", "warmup_sample_stats")] if keep_tuning else []
    q, diverging = [], []
    for post, stats in [*groups, ("posterior", "sample_stats")]:
        first = -keep_tuning if post.startswith("warmup") else 0
        q.append(np.asarray(idata[post]["q"].values[0, first:], dtype=np.float64))
        diverging.append(np.asarray(idata[stats]["diverging"].values[0, first:], dtype=bool))
    return np.concatenate(q), np.concatenate(diverging)


def _recorder(caught: list, thread: int) -> Callable:
    """A ``warnings.showwarning`` that records whether ``thread`` warned, and what."""

    def record(message, category, filename, lineno, file=None, line=None):
        caught.append((threading.get_ident() == thread, message, category))

    return record


def _pass_on(caught) -> None:
    """Re-emit what NUTS warned on a surrogate, with a fixed text, but for :data:`_DROPPED`.

    The surrogate model holds released values, the exact prior and public configuration only,
    but the warning hook is process-wide: what another thread warns meanwhile (while it reads
    rows) lands here too, and passing texts on let such warnings out with theirs (review; a
    thread check did not hold across the whole suite). So no text is passed on: the known
    notices of this thread are dropped (the divergences have their own warning), anything
    else is withheld as at the data boundary."""
    for own, message, category in caught:
        if own and _DROPPED.search(str(message)):
            continue
        category = category if issubclass(category, Warning) else UserWarning
        text = f"{category.__name__} during NUTS on a release (or from another thread); {WITHHELD}."
        try:
            warning = category(text)
        except Exception:  # noqa: BLE001 - a warning class with another signature
            warning = UserWarning(text)
        warnings.warn(warning, stacklevel=4)


def _nuts(model, draws, tune, seed, start, kwargs):
    return compiling.locked(  # NUTS on the surrogate: no rows, no Dask worker
        pm.sample,
        draws=draws,
        tune=tune,
        chains=1,
        cores=1,
        model=model,
        random_seed=seed,
        initvals=start,
        progressbar=False,
        compute_convergence_checks=False,
        discard_tuned_samples=False,
        **kwargs,
    )


def compile_logp_dlogp(model: pm.Model, compile_kwargs: dict | None = None):
    """The surrogate's ``logp_dlogp_function`` as PyMC's ``init`` compiles it (under the
    compile lock)."""
    fn = compiling.locked(model.logp_dlogp_function, ravel_inputs=True, **(compile_kwargs or {}))
    fn.trust_input = True
    return fn


def _nuts_step(model, start, init, target_accept, seed, logp_dlogp):
    """PyMC's NUTS with the adaptive metric of ``init`` (``adapt_diag`` / ``adapt_full``, as
    :func:`pymc.init_nuts` makes it) on a compiled ``logp_dlogp``."""
    from pymc.blocking import DictToArrayBijection
    from pymc.step_methods.hmc import quadpotential

    point = {**compiling.initial_point(model), **start}
    point = {v.name: np.asarray(point[v.name]) for v in model.value_vars}
    mean = DictToArrayBijection.map(point).data
    rng = np.random.default_rng(seed)
    if init == "adapt_full":
        potential = quadpotential.QuadPotentialFullAdapt(
            mean.size, mean, np.eye(mean.size), 10, rng=rng
        )
    elif init == "adapt_diag":
        potential = quadpotential.QuadPotentialDiagAdapt(
            mean.size, mean, np.ones(mean.size), 10, rng=rng
        )
    else:
        raise ValueError(
            f"a shared logp_dlogp takes init 'adapt_diag' or 'adapt_full', not {init!r}"
        )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "QuadPotentialFullAdapt is an experimental feature")
        return pm.NUTS(
            potential=potential,
            model=model,
            rng=rng,
            initial_point=point,
            logp_dlogp_func=logp_dlogp,
            target_accept=target_accept,
        )


def likelihood_precision(
    cov: np.ndarray, prior_hessian: np.ndarray, idx: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eigenvalues and vectors of a fit ``N(., cov)``'s precision less the prior's, on the
    coordinates ``idx``, and which of them the fit informs (positive: the fit is narrower than
    the prior there)."""
    h = -0.5 * (prior_hessian + prior_hessian.T)
    vals_h, vecs_h = np.linalg.eigh(h)
    prior_precision = (vecs_h * np.maximum(vals_h, 0.0)) @ vecs_h.T
    p = (np.linalg.inv(cov) - prior_precision)[np.ix_(idx, idx)]
    vals, vecs = np.linalg.eigh(0.5 * (p + p.T))
    return vals, vecs, vals > 1e-10 * max(float(vals.max()), 1e-300)


def gaussian_surrogate(
    mean: np.ndarray,
    cov: np.ndarray,
    prior_hessian: np.ndarray,
    prior_grad: np.ndarray,
    active: np.ndarray,
    cap: float = CENTRE_CAP,
    walk: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``(idx, P, g, uninformed)`` of the Gaussian likelihood surrogate of a fit
    ``N(mean, cov)`` (module docstring): ``idx`` the coordinates the likelihood reads,
    ``uninformed`` the directions floored to the prior. With ``walk`` (the fit's
    ``WarmStart.walk``, whose spread ``cov`` holds), that spread is left out: the caller puts
    back what it keeps, one-sided with :func:`walk_left` or as spread added to ``cov``
    (``DPLaplace``: the group effects' part ahead, the coefficients' part as spread).

    The prior precision subtracted is the one the fit used, ``PD(-H)`` (a prior that is not
    log-concave, e.g. Student-t tails or a centred hierarchy, must not lend its convexity to the
    likelihood). The likelihood's implied centre ``m + P^-1 g`` is kept within ``cap`` fit sds of
    ``m`` along every direction (a weakly informed direction would otherwise put it far away,
    where a heavy-tailed prior cannot hold it).
    """
    idx = np.flatnonzero(active)
    if walk is not None:
        cov = cov - np.outer(walk, walk)
    vals, vecs, keep = likelihood_precision(cov, prior_hessian, idx)
    p = (vecs * np.where(keep, vals, 0.0)) @ vecs.T
    along = vecs.T @ (-np.asarray(prior_grad)[idx])
    fit_sd = np.sqrt(np.maximum(np.einsum("ij,ik,kj->j", vecs, cov[np.ix_(idx, idx)], vecs), 0))
    offset = np.where(keep, along / np.where(keep, vals, 1.0), 0.0)
    offset = np.clip(offset, -cap * fit_sd, cap * fit_sd)
    g = vecs @ (np.where(keep, vals, 0.0) * offset)
    return idx, p, g, int(np.sum(~keep))


def walk_left(walk: np.ndarray) -> pt.TensorVariable:
    """``s walk`` with ``s ~ HalfNormal(1)`` a latent of the surrogate model (call inside it): the
    likelihood's centre moves ahead along the walk still moving, never behind (module
    docstring)."""
    return pm.HalfNormal(WALK_LEFT, 1.0) * pt.as_tensor_variable(np.asarray(walk, float))
