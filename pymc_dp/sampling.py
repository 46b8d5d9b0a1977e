"""Safe outputs: ``pdp.sample``, ``pdp.sanitize`` and ``pdp.privacy_report``.

``pm.sample`` stores the observed and constant data in its result, and PyMC's own step methods
report the exact model log-density. ``pdp.sample`` runs ``pm.sample`` with one DP step that covers
every free variable, under a run plan made before any data is touched, and returns a DataTree
kept by whitelist: the posterior of the free variables and of the deterministics that read no
private data, the DP step's declared privatised stats, and the privacy ledger in ``attrs``.
"""

from __future__ import annotations

import contextlib
import json
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pymc as pm
from pymc.model import Model, modelcontext
from xarray import DataTree

from pymc_dp import compiling
from pymc_dp.accounting.gaussian import gaussian_epsilon
from pymc_dp.accounting.ledger import GAUSSIAN_ACCOUNTANT, LEDGER_ATTR, PrivacyLedger
from pymc_dp.boundary import guarded
from pymc_dp.diagnostics import dp_warnings
from pymc_dp.diagnostics import warn as dp_warn
from pymc_dp.graph import ModelGraph, analyse
from pymc_dp.runplan import PrivacyBudgetError
from pymc_dp.step_methods.base import DPStep, default_chains
from pymc_dp.step_methods.registry import registered_steps

__all__ = ["PrivacyReport", "privacy_report", "sample", "sanitize"]

#: The only groups a released result may hold (everything else, e.g. observed_data,
#: posterior_predictive or log_likelihood, is dropped).
KEPT_GROUPS = ("posterior", "sample_stats", "warmup_posterior", "warmup_sample_stats")
#: Group attrs that describe software, not the data (``sampling_time`` is a timing side channel).
KEPT_GROUP_ATTRS = frozenset(
    {
        "created_at",
        "creation_library",
        "creation_library_version",
        "creation_library_language",
        "inference_library",
        "inference_library_version",
        "sample_dims",
        "tuning_steps",
    }
)


def _dp_stat_names() -> frozenset[str]:
    """Every stat some registered step declares releasable (``Stat``: declared once, there)."""
    return frozenset().union(*(cls.releasable_stat_names() for cls in registered_steps()))


def _graph_of(model: Model | None, step: DPStep | None) -> ModelGraph:
    if step is not None:
        return step.likelihood.graph
    try:
        model = modelcontext(model)
    except TypeError as err:
        raise ValueError(
            "pdp.sanitize needs the model (pass `model=` or call it inside `with model:`) to "
            "know which deterministics are functions of the private data."
        ) from err
    return analyse(model, validate=False)


def _clean_dataset(ds, keep: set[str], row_dims: frozenset[str]):
    ds = ds.drop_vars([v for v in ds.data_vars if v not in keep])
    # coordinates of a dim that indexes people (names, ids) would publish who is in the data
    for dim in row_dims & set(ds.dims):
        ds = ds.assign_coords({dim: np.arange(ds.sizes[dim])})
    extra = [c for c in ds.coords if c not in ds.dims]
    ds = ds.drop_vars(extra)
    ds.attrs = {k: v for k, v in ds.attrs.items() if k in KEPT_GROUP_ATTRS}
    return ds


def sanitize(
    idata: DataTree, model: Model | None = None, *, step: DPStep | None = None
) -> DataTree:
    """Keep only what a DP run may release from a ``pm.sample`` result (a whitelist).

    Kept: the groups ``posterior`` and ``sample_stats`` (and their ``warmup_`` versions); in the
    posterior, the free variables and the deterministics that read no private data (decided by
    :func:`pymc_dp.graph.analyse`); in the stats, the DP step's declared privatised stats (only if
    the stats come from a DP step); the privacy ledger attrs. Coordinates of dims that index people
    become ``0 .. n-1``; attrs other than software versions (e.g. ``sampling_time``) are dropped.

    Parameters
    ----------
    idata : DataTree
        Result of ``pm.sample`` (or of ``pdp.sample``, which is already clean).
    model : pm.Model, optional
        The model that produced it (default: the model on the context stack). It tells which
        deterministics read the data.
    step : DPStep, optional
        The DP step that produced it: its own declared stats are kept. Without it, stats are kept
        only if the run was made by a DP step (it emits ``dp_epsilon``), and only those that a
        registered DP step (:mod:`pymc_dp.step_methods.registry`) declares privatised: a step of
        your own that is not registered keeps its stats only with ``step=``.
    """
    graph = _graph_of(model, step)
    model = graph.model
    public = {v.name for v in model.free_RVs}
    public |= {d.name for d in model.deterministics if d.name not in graph.private_deterministics}
    groups = {name: idata[name].to_dataset() for name in KEPT_GROUPS if name in idata.children}
    stats_names: set[str] = set()
    if step is not None:
        stats_names = set(step.releasable_stat_names())
    elif any("dp_epsilon" in ds.data_vars for k, ds in groups.items() if "stats" in k):
        stats_names = set(_dp_stat_names())
    out = {}
    for name, ds in groups.items():
        keep = stats_names if name.endswith("sample_stats") else public
        out[name] = _clean_dataset(ds, keep, graph.row_dim_names)
    tree = DataTree.from_dict(out)
    tree.attrs = {k: v for k, v in idata.attrs.items() if k.startswith("pymc_dp_")}
    return tree


#: Chains of :func:`sample` by default, whatever the number of cores: R-hat needs several.
DEFAULT_CHAINS = 4


def sample(
    draws: int = 1000,
    *,
    step: DPStep,
    tune: int = 1000,
    chains: int | None = None,
    cores: int | None = None,
    random_seed=None,
    noise_seed: int | None = None,
    model: Model | None = None,
    data: Mapping | None = None,
    client=None,
    **kwargs,
) -> DataTree:
    """Run ``pm.sample`` with a DP step and return an output that is safe to publish.

    The run holds pymc-dp's compile lock (:mod:`pymc_dp.compiling`; not with rows on Dask
    workers): PyMC compiles inside it, and a compile in another thread at the same time could
    change the process's default mode. Runs from several threads of one process take turns.

    Parameters
    ----------
    draws, tune, chains, cores, random_seed
        As in :func:`pymc.sample`, except that ``chains`` defaults to 4 on any machine (so that
        R-hat exists; the budget is split over the chains, not multiplied). Tuning iterations
        are burn-in that spends privacy budget like draws; every chain is a separate release, so
        the budget covers ``chains x (tune + draws)`` iterations. ``random_seed`` reproduces
        proposals, not the privacy noise.
    step : DPStep
        One DP step method covering every free variable of the model.
    noise_seed : int, optional
        Seed of the privacy noise for this run (default: the step's, normally OS entropy). Only
        for tests and reproducible research; the ledger records it.
    data : dict, optional
        ``{pm.Data container name: rows}`` bound for this run: NumPy arrays (set into the model)
        or Dask arrays / DataFrame columns, which stay on the workers of ``client``
        (:mod:`pymc_dp.distributed`; ``pip install "pymc-dp[dask]"``). The model's containers
        hold placeholders with the right trailing shape; ``step`` is rebuilt with its own
        arguments on the bound rows (n, calibration, warm start). Chains then run one after
        another in this process (the cluster is the parallelism).
    client : distributed.Client, optional
        The Dask client holding the rows (default: the current one).
    **kwargs
        Passed to :func:`pymc.sample` (for example ``progressbar``, ``discard_tuned_samples``,
        ``initvals``). Options that could store private data are refused.

    Returns
    -------
    DataTree
        The whitelisted result of :func:`sanitize`; ``attrs`` holds the privacy ledger
        (``pymc_dp_epsilon``, ``pymc_dp_delta``, ``pymc_dp_accountant``, ``pymc_dp_ledger``).

    Raises
    ------
    PrivacyBudgetError
        Before any data is touched, when the run would overspend.
    """
    model = modelcontext(model)
    step = _the_step(step, model)
    if data is not None:
        step, cores = _bound(step, data, client, cores)
    _check_run_options(step, model, kwargs)
    kwargs.pop("return_inferencedata", None)
    chains = DEFAULT_CHAINS if chains is None else chains
    cores = min(chains, default_chains()) if cores is None else cores
    plan = step.plan(tune=tune, draws=draws, chains=chains)  # refuses before any data is touched
    advice = _planner_advice(step, model, plan)
    if noise_seed is not None:
        plan = _with_noise_seed(step, plan, noise_seed)
    step.use_plan(plan)
    # PyMC compiles inside (initial points, the trace): under the lock, so that a compile in
    # another thread cannot change the default mode (review), unless the rows are on Dask workers
    # of this process, which compile under the lock while the run waits on them
    lock = contextlib.nullcontext() if _on_workers(step) else compiling.COMPILE_LOCK
    try:
        with lock:  # PyMC's and PyTensor's errors while sampling may print inputs: replaced
            idata = guarded(
                f"Sampling with {type(step).__name__}",
                pm.sample,
                draws=draws,
                tune=tune,
                chains=chains,
                cores=cores,
                random_seed=random_seed,
                step=step,
                model=model,
                var_names=_public_var_names(model, step.likelihood.graph),
                **kwargs,
            )
    finally:
        step.use_plan(None)
    idata = sanitize(idata, model, step=step)
    _record_releases(idata, step, plan)
    if kwargs.get("compute_convergence_checks", True):
        _warn_after(idata, step, advice)
    return idata


def _bound(step: DPStep, data: Mapping, client, cores: int | None) -> tuple[DPStep, int | None]:
    """``step`` rebuilt on the rows of ``data`` (:func:`pymc_dp.distributed.bind_data`), and the
    cores to run its chains on."""
    from pymc_dp.distributed import DistributedLikelihood, bind_data

    step = bind_data(step, data, client=client)
    if isinstance(step.likelihood, DistributedLikelihood):
        cores = 1  # the step holds the workers' actors: chains run here, one by one
    return step, cores


def _warn_after(idata: DataTree, step: DPStep, advice) -> None:
    """The DP-aware convergence warnings of a run (from its public draws and statistics)."""
    if getattr(step, "fit_draws", False):
        return  # a fit's draws are not a chain: R-hat and ESS would only measure their noise
    dp_warn(
        dp_warnings(
            idata,
            target_accept=getattr(step, "target_accept", None),
            advice=advice,
            free=getattr(step, "release", None) is not None or getattr(step, "nuts", False),
        )
    )


def _on_workers(step) -> bool:
    """Whether ``step`` reads rows held by Dask workers (none unless pymc_dp.distributed was
    imported: it imports Dask)."""
    module = sys.modules.get("pymc_dp.distributed")
    return module is not None and isinstance(step.likelihood, module.DistributedLikelihood)


def _public_var_names(model: Model, graph: ModelGraph) -> list[str]:
    """What the trace keeps: free variables and deterministics that read no private data."""
    private = graph.private_deterministics
    return [v.name for v in model.free_RVs] + [
        d.name for d in model.deterministics if d.name not in private
    ]


def _the_step(step, model: Model) -> DPStep:
    """The one DP step of the run, for this model, unspent, on the data it was built on."""
    if isinstance(step, list | tuple):
        if len(step) != 1:
            raise ValueError(
                "pdp.sample takes one DP step covering every free variable; several steps would "
                "each touch the data (and PyMC's would report the exact log-density)."
            )
        step = step[0]
    if not isinstance(step, DPStep):
        raise TypeError(
            f"`step` must be a pymc-dp step (DPPenalty, ...), got {type(step).__name__}: PyMC's "
            "own samplers use the exact likelihood and report it without noise."
        )
    if step.likelihood.model is not model:
        raise ValueError("`step` was built for another model than the one sampled.")
    step.check_data()
    if step.spent:
        raise PrivacyBudgetError(step.spent_message())
    return step


def _check_run_options(step: DPStep, model: Model, kwargs: Mapping) -> None:
    """Refuse a run that would leave a free variable to PyMC or let ``pm.sample`` keep what the
    whitelist removes (a trace, a callback, start values read from the data)."""
    covered = set(step.vars)
    missing = [v.name for v in model.value_vars if v not in covered]
    if missing:
        raise ValueError(
            f"Free variables {missing} are not sampled by the DP step; PyMC would give them NUTS "
            "on the exact likelihood. Refusing to run."
        )
    for key in ("trace", "idata_kwargs", "callback"):
        if kwargs.get(key):
            raise ValueError(f"`{key}` is not supported by pdp.sample (it could see private data).")
    _check_initvals(step.likelihood.graph, kwargs.get("initvals"))
    if kwargs.get("return_inferencedata", True) is not True:
        raise ValueError(
            "`return_inferencedata=False` is not supported by pdp.sample: the raw trace holds "
            "what the whitelist removes. Use the returned DataTree."
        )


def _record_releases(idata: DataTree, step: DPStep, plan) -> None:
    """The ledger and the releases made once per run (public) in ``idata.attrs``."""
    if not plan.ledger.releasable:
        warnings.warn(
            "This result was made with diagnostics=True: it holds exact statistics of the private "
            "data and is marked pymc_dp_releasable=0.",
            UserWarning,
            stacklevel=3,
        )
    idata.attrs.update(plan.ledger.to_attrs())
    if getattr(step, "release", None) is not None:
        idata.attrs[RELEASE_ATTR] = step.release.to_attr()
        idata.attrs[FIT_ATTR] = step.error_attr()
    if getattr(step, "warm", None) is not None:
        idata.attrs[FIT_ATTR] = step.warm.to_attr(_coordinate_labels(step.fit_likelihood))
    if getattr(step, "anchor", None) is not None:
        idata.attrs[ANCHOR_ATTR] = step.anchor_attr(_coordinate_labels(step.fit_likelihood))


def _check_initvals(graph: ModelGraph, initvals) -> None:
    """Starting points are public: a chain that never moves releases its start exactly."""
    if initvals is None:
        return
    from pytensor.graph.basic import Variable

    for point in [initvals] if isinstance(initvals, Mapping) else list(initvals):
        for name, value in (point or {}).items():
            if isinstance(value, Variable):
                private = bool(graph.private_reads([value], stop=graph.model.free_RVs))
            else:
                private = not isinstance(value, str) and graph.matches_private(value)
            if private:
                raise ValueError(
                    f"`initvals` for {name!r} reads or copies private data: chains start there, "
                    "and a chain that never moves releases its start exactly. Give public values."
                )


def _planner_advice(step: DPStep, model: Model, run) -> str:
    """Ask the planner (public information only) before the run; warn if it predicts failure."""
    from pymc_dp.planner import plan as planner
    from pymc_dp.step_methods.group_gibbs import DPGroupGibbs

    if isinstance(step, DPGroupGibbs):
        return _group_advice(step, run)
    clip = getattr(step, "llr_clip", None)
    grad = getattr(step, "grad_clip", None)
    if step.epsilon is None or (clip is None and grad is None):
        return ""
    if getattr(step, "anchored", False):
        return _anchored_advice(step, run)
    try:
        predicted = planner(
            model,
            epsilon=step.epsilon,
            delta=step.delta,
            draws=run.draws,
            tune=run.tune,
            chains=run.chains,
            llr_clip=clip,
            grad_clip=grad,
            n_rows=step.n_rows,
            row_dim=step.likelihood_kwargs["row_dim"],
            row_axes=step.likelihood_kwargs["row_axes"],
            public=step.likelihood_kwargs["public"],
            _graph=step.likelihood.graph,  # analysed with these arguments; data checked unchanged
        )
    except Exception:  # noqa: BLE001 - advice only: never block a run
        return ""
    advice = "; ".join(predicted.advice)
    name = type(step).__name__
    if not predicted.feasible:
        dp_warn(
            [
                f"the planner predicts no usable posterior here, from {name}"
                + ("" if name == predicted.recommended else f" or {predicted.recommended}")
                + f": {advice}"
            ]
        )
    elif predicted.recommended == "DPSuffStats":
        dp_warn([f"the planner recommends DPSuffStats over {name} for this model: {advice}"])
    elif predicted.recommended == "DPLaplace" and name != "DPLaplace":
        # the planner models MCMC by DPPenalty: a chain that cannot mix, whatever its kernel
        dp_warn(
            [
                f"the planner predicts {name} will not give a usable posterior here (a chain "
                f"would not mix at this budget); it recommends DPLaplace: {advice}"
            ]
        )
    return advice


#: Longest run (draws per chain) the advice to an anchored step searches for one that mixes.
LONGEST_ADVISED_RUN = 20_000


def _anchored_advice(step: DPStep, run) -> str:
    """An anchored chain's prediction from its released warm start; warn if it will not mix,
    and say whether a longer run would (the same budget over more iterations makes each test
    noisier, so the search asks the prediction itself)."""
    from pymc_dp.planner import ESS_FOR_MCMC

    try:
        mix = step.predicted_mixing(run.chains, run.tune, run.draws)
        if mix["ess"] >= ESS_FOR_MCMC:
            return ""
        longer, draws = None, run.draws
        while longer is None and draws < LONGEST_ADVISED_RUN:
            draws = min(2 * draws, LONGEST_ADVISED_RUN)
            # a screen: a quarter of the replicates (the search may ask five lengths)
            screen = step.predicted_mixing(run.chains, run.tune, draws, replicates=8)
            if screen["ess"] >= ESS_FOR_MCMC:
                longer = draws
    except Exception:  # noqa: BLE001 - advice only: never block a run
        return ""
    if longer is not None:
        advice = (
            f"ESS ~{mix['ess']:.2g} predicted (all chains) from its released warm start: the "
            f"run is short; {longer} draws per chain are predicted to mix"
        )
    else:
        advice = (
            f"its released warm start predicts acceptance ~{mix['acceptance']:.2g} and ESS "
            f"~{mix['ess']:.2g} (all chains), and no run up to {LONGEST_ADVISED_RUN} draws per "
            "chain mixes: the anchored test's noise grows like d^2 / (n epsilon); sample the "
            "private fit (pdp.DPLaplace) instead, or give a larger epsilon"
        )
    dp_warn([f"{type(step).__name__}(hess_clip) will not give a usable chain here: {advice}"])
    return advice


#: A run predicted below this bulk ESS (all chains) or above this R-hat does not mix; below
#: this acceptance of its group moves the tests' noise is the cause (not the run's length).
UNMIXED_ESS, UNMIXED_RHAT, STUCK_ACCEPTANCE = 100.0, 1.1, 0.1


def _group_advice(step, run) -> str:
    """The group sweep's prediction from its released fit and anchor: warn before a run it
    predicts will not mix: with moves rarely accepted the tests' noise stops it (near-separable
    groups, few rows, a small budget); otherwise the run is short for the chain (whether a
    longer one mixes, the prediction at that length says: it is not searched here, each
    prediction runs the whole sweep)."""
    try:
        mix = step.predicted_mixing(run.chains, run.tune, run.draws)
    except Exception:  # noqa: BLE001 - advice only: never block a run
        return ""
    if mix["ess"] >= UNMIXED_ESS and mix["rhat"] <= UNMIXED_RHAT:
        return ""
    rhat = f"{mix['rhat']:.3g}" if mix["rhat"] < 10 else "> 10"
    coefficients = mix["coefficient_acceptance"]
    found = (
        f"its released fit and anchor predict acceptance ~{mix['acceptance']:.2f} of the group "
        "moves"
        + ("" if np.isnan(coefficients) else f" and ~{coefficients:.2f} of the coefficients'")
        + f", test noise ~{mix['noise']:.3g} nats, bulk ESS ~{mix['ess']:.0f} (all chains) "
        f"and R-hat {rhat}"
    )
    # the slower of the two kinds of move decides (no coefficients: NaN, ignored)
    accepted = np.nanmin([mix["acceptance"], mix["coefficient_acceptance"]])
    if accepted < STUCK_ACCEPTANCE:
        advice = (
            f"{found}: the tests' noise stops the chain; sample the private fit (pdp.DPLaplace) "
            "instead, or give a larger epsilon"
        )
        dp_warn([f"DPGroupGibbs will not give a usable chain here: {advice}"])
    else:
        advice = (
            f"{found}: the run is short for this chain. A longer run spreads the same budget "
            "over more tests, each noisier: step.predicted_mixing(chains, tune, draws) predicts "
            "the length you plan"
        )
        dp_warn([f"DPGroupGibbs is predicted not to mix in this run: {advice}"])
    return advice


def _with_noise_seed(step: DPStep, plan, noise_seed: int):
    from dataclasses import replace

    if isinstance(noise_seed, bool) or int(noise_seed) != noise_seed:
        raise TypeError(f"`noise_seed` must be an integer, got {noise_seed!r}")
    if plan.exact_noise:
        raise ValueError("`noise_seed` cannot seed OpenDP's exact samplers: give one or other.")
    # a warm start or a one-shot release ran when the step was made
    early = any(getattr(step, a, None) is not None for a in ("warm", "release"))
    if early and step.noise_seed != int(noise_seed):
        # the warm start ran when the step was made: a seed given now cannot reproduce it
        raise ValueError(
            f"`noise_seed` of pdp.sample cannot reach the private warm start {type(step).__name__} "
            "ran when it was created; give `noise_seed=` to the step instead."
        )
    ledger = replace(plan.ledger, noise_seeded=True)
    return replace(plan, noise_seed=int(noise_seed), ledger=ledger)


#: Attr of the private fit's error figures (released quantities only).
FIT_ATTR = "pymc_dp_fit"
#: A one-release step's description of its release (public).
RELEASE_ATTR = "pymc_dp_release"
#: The Taylor anchor's predicted tilt (``pymc_dp.anchor.tilt_sds``), from released values.
ANCHOR_ATTR = "pymc_dp_anchor"


def _coordinate_labels(likelihood) -> list[str]:
    """``name[i, j]`` of each raveled (unconstrained) coordinate."""
    labels = []
    for name, shape, *_ in likelihood._point_map_info:
        if not shape:
            labels.append(name)
        else:
            labels += [f"{name}[{', '.join(map(str, i))}]" for i in np.ndindex(*shape)]
    return labels


@dataclass(frozen=True)
class PrivacyReport:
    """Privacy spent by a sampling run."""

    epsilon: float
    delta: float
    accountant: str
    neighbouring: str
    chains: int
    epsilon_per_chain: tuple[float, ...]
    mechanisms: tuple[str, ...]
    releasable: bool
    target_epsilon: float | None = None
    source: str = "ledger"
    noise_seeded: bool = False
    delta_rule: str = ""
    warm_start_epsilon: float | None = None
    #: Epsilon of the Taylor anchor's one release and the shift of each mean its noise causes,
    #: in posterior sds (expected, from released values), keyed by coordinate.
    anchor_epsilon: float | None = None
    anchor_tilt: dict | None = None
    adaptation: str = ""
    data_location: str = "in memory"
    fit_error: dict | None = None
    #: What a one-release step released (DPSuffStats: the noisy sufficient statistics).
    release: str = ""

    @property
    def expected_error(self) -> dict[str, float | None]:
        """Expected distance of each posterior mean from the non-private posterior's, in
        posterior sds, from released quantities only (private warm start, DPLaplace or
        DPSuffStats' release); ``{}`` without one; ``None`` per mean where the release does not
        bound them (DPSuffStats: its noise leaves the covariates' Gram matrix indefinite)."""
        if not self.fit_error:
            return {}
        return dict(zip(self.fit_error["labels"], self.fit_error["expected_error"], strict=True))

    def __str__(self) -> str:
        lines = [
            f"(epsilon, delta) = ({self.epsilon:.6g}, {self.delta:.3g})-DP"
            f" over {self.chains} chain{'s' if self.chains != 1 else ''}",
            f"  accountant:   {self.accountant}",
            f"  neighbouring: {self.neighbouring}",
            "  per chain:    " + ", ".join(f"{e:.4g}" for e in self.epsilon_per_chain),
        ]
        if self.target_epsilon is not None:
            lines.append(f"  budget:       epsilon = {self.target_epsilon:.6g}")
        if self.delta_rule:
            lines.append(f"  delta:        {self.delta_rule}")
        if self.release:
            lines.append(f"  release:      {self.release}")
        elif self.warm_start_epsilon is not None:
            lines.append(
                f"  warm start:   epsilon {self.warm_start_epsilon:.4g} of the total (spent once, "
                "before sampling; the rest by the chains)"
            )
        if self.anchor_epsilon is not None:
            tilt = max(self.anchor_tilt.values()) if self.anchor_tilt else float("nan")
            lines.append(
                f"  anchor:       epsilon {self.anchor_epsilon:.4g} of the total (the Taylor "
                f"anchor, spent once); its noise shifts every chain's mean alike, by ~{tilt:.2g} "
                "posterior sds expected at most (not in the intervals, not seen by R-hat)"
            )
        lines += [f"  mechanism:    {m}" for m in self.mechanisms]
        if self.fit_error and self.release and self.fit_error["expected_largest_error"] is None:
            lines.append(
                "  fit error:    not bounded by the release: its noise leaves the covariates' "
                "Gram matrix indefinite in nearly every draw, so the likelihood does not hold "
                "the means; the prior does (in the intervals: compare them with the prior's)"
            )
        elif self.fit_error and self.release:
            f = self.fit_error
            lines.append(
                "  fit error:    distance of the means from the non-private posterior's, from "
                f"the release (its noise; the prior's pull left out): "
                f"{max(f['expected_error']):.2g} posterior sds expected per mean, the largest of "
                f"them ~{f['expected_largest_error']:.2g}; in the intervals"
            )
        elif self.fit_error:
            f = self.fit_error
            lines.append(
                "  fit error:    distance of the means from the non-private posterior's, from "
                f"released values: {max(f['expected_error']):.2g} posterior sds expected per "
                f"mean, the largest of them ~{f['expected_largest_error']:.2g}; parts "
                f"(posterior sds): noise {f['noise']:.2g}, clipping bias <= {f['bias']:.2g}, "
                f"curvature {f['curvature']:.2g}, linearisation {f['linearisation']:.2g}, "
                f"walk left {f.get('walk', 0.0):.2g}"
                + (
                    f", a retreat from an overshoot: last step {f.get('last_step', 0.0):.2g}, "
                    f"bracket {f.get('bracket', 0.0):.2g}"
                    if f.get("retreats")
                    else ""
                )
                + "; all in the intervals"
            )
        if self.adaptation:
            lines.append(f"  adaptation:   {self.adaptation}")
        if self.data_location != "in memory":
            lines.append(f"  data:         {self.data_location}")
        if not self.releasable:
            lines.append("  NOT RELEASABLE: computed with exact diagnostics (diagnostics=True)")
        if self.noise_seeded:
            lines.append(
                "  NOISE SEEDED: noise_seed was given; whoever knows it can remove the noise"
            )
        if self.source != "ledger":
            lines.append(f"  source:       {self.source}")
        return "\n".join(lines)


def privacy_report(idata: DataTree) -> PrivacyReport:
    """Read the privacy spent by a run back from its DataTree.

    For a ``pdp.sample`` result this reads the ledger in ``attrs``. For a plain ``pm.sample`` result
    it composes the per-chain ``dp_mu`` stats of the DP step exactly (Gaussian PLD), so a run with
    more chains than the step was calibrated for is reported truthfully.
    """
    if LEDGER_ATTR in idata.attrs:
        ledger = PrivacyLedger.from_attrs(idata.attrs)
        warm = anchor = None
        if ledger.shared:
            from dataclasses import replace

            from pymc_dp.anchor import ANCHOR_NAME

            def once(entries):
                return replace(ledger, per_chain=(), shared=entries, accountant="").epsilon

            rest = tuple(e for e in ledger.shared if e.name != ANCHOR_NAME)
            anchored = tuple(e for e in ledger.shared if e.name == ANCHOR_NAME)
            warm = once(rest) if rest else None
            anchor = once(anchored) if anchored else None
        return PrivacyReport(
            epsilon=ledger.epsilon,
            delta=ledger.delta,
            accountant=ledger.accountant,
            neighbouring=ledger.neighbouring,
            chains=ledger.chains,
            epsilon_per_chain=(ledger.epsilon_per_chain,) * ledger.chains,
            mechanisms=tuple(m.describe() + " per chain" for m in ledger.per_chain)
            + tuple(m.describe() + " once" for m in ledger.shared),
            releasable=ledger.releasable,
            target_epsilon=ledger.target_epsilon,
            noise_seeded=ledger.noise_seeded,
            delta_rule=ledger.delta_rule,
            warm_start_epsilon=warm,
            anchor_epsilon=anchor,
            anchor_tilt=json.loads(idata.attrs[ANCHOR_ATTR])
            if ANCHOR_ATTR in idata.attrs
            else None,
            adaptation=ledger.adaptation,
            data_location=ledger.data_location,
            fit_error=json.loads(idata.attrs[FIT_ATTR]) if FIT_ATTR in idata.attrs else None,
            release=str(idata.attrs.get(RELEASE_ATTR, "")),
        )
    stats = idata["sample_stats"] if "sample_stats" in idata.children else None
    if stats is not None and any(str(v).endswith("__dp_epsilon") for v in stats.data_vars):
        raise ValueError(
            "These stats come from several step methods (a CompoundStep): pymc-dp refuses such "
            "runs, and their privacy cannot be read back."
        )
    if stats is None or "dp_epsilon" not in stats.data_vars:
        raise ValueError("No privacy ledger and no DP step stats in this DataTree.")
    releasable = not ({"clip_fraction", "batch_variance"} & set(stats.data_vars))
    if "dp_mu" not in stats.data_vars:
        return _basic_composition_report(stats, releasable)
    # dp_mu is cumulative per chain and includes tuning, so the last draw is the chain's spend.
    mu_chain = stats["dp_mu"].max("draw").values.astype(float)
    delta = float(np.max(stats["dp_delta"].values))

    def eps(mu: float) -> float:
        return float(gaussian_epsilon(mu, delta))

    return PrivacyReport(
        epsilon=eps(float(mu_chain.sum())),
        delta=delta,
        accountant=GAUSSIAN_ACCOUNTANT,
        neighbouring="replace-one (substitution) of one row; n is public",
        chains=int(mu_chain.size),
        epsilon_per_chain=tuple(eps(m) for m in mu_chain),
        mechanisms=(f"Gaussian releases composed from sample_stats: mu = {mu_chain.sum():.6g}",),
        releasable=releasable,
        source="composed from the per-chain dp_mu sample stats (plain pm.sample result)",
    )


def _basic_composition_report(stats, releasable: bool) -> PrivacyReport:
    """Minibatch steps: per-chain (epsilon, delta) stats, composed across chains by basic
    composition (epsilons and deltas add). Valid but loose; ``pdp.sample`` records the ledger,
    which composes the chains inside the accountant."""
    eps_chain = stats["dp_epsilon"].max("draw").values.astype(float)
    delta = float(np.max(stats["dp_delta"].values))
    chains = int(eps_chain.size)
    return PrivacyReport(
        epsilon=float(eps_chain.sum()),
        delta=chains * delta,
        accountant="basic composition across chains of each chain's own accountant",
        neighbouring="replace-one (substitution) of one row; n is public",
        chains=chains,
        epsilon_per_chain=tuple(float(e) for e in eps_chain),
        mechanisms=(
            f"{chains} chains, each ({', '.join(f'{e:.4g}' for e in eps_chain)})-DP "
            f"at delta = {delta:.3g}",
        ),
        releasable=releasable,
        source="per-chain dp_epsilon stats of a plain pm.sample result (loose: use pdp.sample)",
    )
