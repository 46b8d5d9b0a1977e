"""ABCDP: differentially private rejection ABC over ``pm.Simulator`` models.

Park, Vinaroz & Jitkrittum (2021), "ABCDP: Approximate Bayesian Computation with Differential
Privacy", Algorithm 1. A public stage draws ``(theta_t, Y_t)`` from the prior and the simulator in
batches; a private stage runs the sparse vector technique on ``rho(Y*, Y_t)`` and keeps the
``theta_t`` it accepts. The run is pure ``epsilon``-DP (Theorem 4.1) under replace-one neighbours.

Rows bound as a Dask collection stay on the workers: the private embedding (a sum over rows) is
computed per partition and added on the driver, and the public simulations run as tasks on the
cluster, several batches at a time.

References
----------
.. [1] Park, M., Vinaroz, M. and Jitkrittum, W. (2021). ABCDP: Approximate Bayesian
   Computation with Differential Privacy. Entropy 23(8), 961. Algorithm 1, Theorem 4.1.
.. [2] Lyu, M., Su, D. and Li, N. (2017). Understanding the Sparse Vector Technique for
   Differential Privacy. PVLDB 10(6). Algorithm 1.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import arviz_base
import numpy as np
import pytensor.tensor as pt
from numpy.typing import NDArray
from pymc.model import Model, modelcontext
from pymc.progress_bar import create_simple_progress, default_progress_theme
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant
from pytensor.graph.replace import graph_replace
from pytensor.graph.rewriting.utils import rewrite_graph
from xarray import DataTree

from pymc_dp.abcdp.distances import MMD, Distance
from pymc_dp.abcdp.public import (
    PriorSampler,
    Simulation,
    SimulatorModel,
    simulate,
    simulator_model,
)
from pymc_dp.abcdp.svt import SparseVector, noise_scale
from pymc_dp.accounting.ledger import PrivacyLedger, PureDPMechanism
from pymc_dp.checks import check_count, check_epsilon, check_positive
from pymc_dp.noise import NoiseSource

__all__ = ["prior_predictive_distances", "sample_abcdp", "sample_abc_nonprivate"]

# Independent public streams spawned from ``random_seed``: the proposals do not depend on whether
# the bandwidth was given. The privacy noise is secret (pymc_dp.noise).
_PRIOR, _SIMULATOR, _PILOT_PRIOR, _PILOT_SIMULATOR, _DISTANCE = range(5)
# Rows kept per pilot data set: what the median heuristic reads (its max_rows).
_PILOT_ROWS = 200


def sample_abcdp(
    model: Model | None = None,
    *,
    epsilon: float,
    threshold: float,
    n_accept: int,
    n_proposals: int,
    resample: bool = False,
    distance: Distance | None = None,
    vectorized: bool = False,
    batch_size: int = 100,
    random_seed: Any = None,
    noise_seed: int | None = None,
    progressbar: bool = True,
    data: Any = None,
    client: Any = None,
) -> DataTree:
    """Draw differentially private posterior samples of a ``pm.Simulator`` model (ABCDP).

    Implements Algorithm 1 of Park, Vinaroz & Jitkrittum (2021). For t = 1, ..., T: draw
    ``theta_t`` from the prior and ``Y_t`` from the simulator (public); accept ``theta_t`` when
    ``rho(Y*, Y_t) + nu_t <= threshold + m``, ``nu_t ~ Lap(2 b)``, ``m ~ Lap(b)`` (``m`` redrawn
    after every acceptance when ``resample``); stop after ``n_accept`` acceptances. With ``Delta =
    distance.sensitivity(n)``, Theorem 4.1 (eq. 8) sets ``b = (c + 1) Delta / epsilon``
    (``resample=False``) or ``b = 2 c Delta / epsilon`` (``resample=True``): pure epsilon-DP.

    Privacy: the unit is one row of the observed data (leading axis); neighbours differ by
    replacing one row, n public. Released: the accepted ``theta`` (and public deterministics of
    them) in order, and how many proposals the SVT tested; never the data, the distances or the
    noisy threshold. Only accept decisions leave the SVT, so the floating-point Laplace draws
    carry no low-order bits into the output.

    Parameters
    ----------
    model : pm.Model, optional
        Free variables (the prior) and one observed ``pm.Simulator`` (the private data); default:
        the context's model. The simulator runs in the public stage and must not read the private
        data; its ``distance``, ``sum_stat`` and ``epsilon`` (for ``pm.sample_smc``) are ignored.
    epsilon : float
        Total privacy budget ``epsilon_total`` > 0 of the run.
    threshold : float
        ABC threshold ``epsilon_abc`` > 0 on the scale of the distance (MMD lies in [0, 2]),
        chosen without looking at the private data (e.g. from simulated data sets).
    n_accept : int
        ``c``: the SVT stops after this many acceptances. The noise grows linearly with ``c``.
    n_proposals : int
        ``T``: the most proposals to simulate and test; ``>= n_accept``.
    resample : bool, default False
        Redraw the threshold noise after every acceptance (Algorithm 1, line 9).
    distance : Distance, optional
        :class:`~pymc_dp.abcdp.MMD` (default ``MMD()``: Gaussian kernel, 100 random Fourier
        features, median-heuristic bandwidth) or :class:`~pymc_dp.abcdp.SummaryDistance`.
    vectorized : bool, default False
        Call the simulator once per batch, with a leading batch axis on every input and
        ``size=(k, *size)`` (PyTensor's ``RandomVariable`` batching rule); else once per proposal.
    batch_size : int, default 100
        Proposals simulated per batch.
    random_seed : int, sequence of int, SeedSequence or Generator, optional
        Seeds the public stage (prior, simulator, and the distance's tuning, which reads only
        simulated data): the same seed gives the same proposals. Not the privacy noise.
    noise_seed : int, optional
        Seed of the SVT's Laplace noise. Default: OS entropy, which nobody can reproduce; a seed
        (tests, reproducible research) is recorded in the ledger.
    progressbar : bool, default True
        Show a progress bar over the proposals (the simulation is the long part).
    data : array, Dask collection or dict, optional
        The private rows, bound to the ``pm.Data`` container the simulator observes (the model
        holds a placeholder of the right trailing shape): an array, a Dask array or DataFrame
        column, or ``{container name: rows}`` as for :func:`pymc_dp.sample`. NumPy rows are set
        into the model; Dask rows stay on the workers (module docstring), for a distance that is
        a sum over rows (MMD with random features, or a per-row :class:`SummaryDistance`), with
        the in-memory result for the same seeds up to the rounding of the summation order.
    client : distributed.Client, optional
        The cluster for Dask rows (default: the current client).

    Returns
    -------
    DataTree
        Group ``posterior``, dims ``(chain=1, draw=accepted)``: the accepted free variables (and
        deterministics that do not read the data). Root ``attrs``: the privacy ledger (read by
        :func:`pymc_dp.privacy_report`), ``abcdp_epsilon``, ``abcdp_threshold``, ``abcdp_c``,
        ``abcdp_resample``, ``abcdp_b``, ``abcdp_sensitivity``, ``abcdp_n_proposals``,
        ``abcdp_proposals_used``, ``abcdp_accepted`` and a description of the distance. Fewer
        than ``n_accept`` acceptances: those found, with a warning; the privacy cost is the same.

    References
    ----------
    Park, Vinaroz & Jitkrittum (2021), Entropy 23(8), 961: Algorithm 1, Theorem 4.1; Lyu, Su & Li
    (2017), PVLDB 10(6): Algorithm 1 (the sparse vector technique). Full titles: module docstring.
    """
    epsilon = check_epsilon(epsilon)
    spec, distance, args = _setup(model, threshold, n_accept, n_proposals, distance, batch_size)
    spec = _bind(spec, distance, data, client)
    b, attrs = _svt_ledger(spec, distance, epsilon, args["n_accept"], bool(resample), noise_seed)
    noise = _noise_streams(noise_seed)
    return _run(
        spec, distance, b, bool(resample), args, attrs, vectorized, random_seed, progressbar, noise
    )


def _svt_ledger(
    spec: SimulatorModel,
    distance: Distance,
    epsilon: float,
    c: int,
    resample: bool,
    noise_seed: int | None,
) -> tuple[float, dict[str, Any]]:
    """The SVT's noise scale ``b`` for a pure ``epsilon``-DP run (Theorem 4.1), and the root
    attrs recording it: the privacy ledger, ``abcdp_epsilon`` and ``abcdp_b``."""
    sensitivity = distance.sensitivity(spec.n)
    b = noise_scale(epsilon, c, sensitivity, resample)
    mechanism = (
        f"sparse vector technique (ABCDP, Park et al. 2021 Alg. 1; c = {c}, "
        f"resample = {resample}, threshold noise Lap(b), distance noise Lap(2b), "
        f"b = {b:.6g}, sensitivity = {sensitivity:.6g})"
    )
    ledger = PrivacyLedger(
        sampler="ABCDP",
        per_chain=(PureDPMechanism(mechanism, epsilon),),
        chains=1,
        delta=0.0,
        target_epsilon=epsilon,
        noise_seeded=noise_seed is not None,
        data_location=_location(spec),
    )
    return b, {**ledger.to_attrs(), "abcdp_epsilon": epsilon, "abcdp_b": b}


def _noise_streams(noise_seed: int | None) -> tuple[np.random.Generator, np.random.Generator]:
    """Secret generators of the threshold and the query noise (separate: the SVT outcome does
    not depend on how the proposals are batched)."""
    return tuple(NoiseSource.for_chain(noise_seed, k).generator for k in range(2))


def sample_abc_nonprivate(
    model: Model | None = None,
    *,
    threshold: float,
    n_accept: int,
    n_proposals: int,
    distance: Distance | None = None,
    vectorized: bool = False,
    batch_size: int = 100,
    random_seed: Any = None,
    progressbar: bool = True,
    data: Any = None,
    client: Any = None,
) -> DataTree:
    """Rejection ABC with the same proposals and stopping rule as :func:`sample_abcdp`, NO privacy.

    Algorithm 1 of Park et al. (2021) without noise (``b = 0``): accept ``theta_t`` when
    ``rho(Y*, Y_t) <= threshold``, stop after ``n_accept`` acceptances. With the same
    ``random_seed`` and ``distance`` it sees exactly the proposals :func:`sample_abcdp` sees, so
    it is the baseline of the paper's comparisons. It is **not differentially private**: the
    result has no privacy ledger (``pdp.privacy_report`` refuses it), carries
    ``attrs["pymc_dp_releasable"] = 0`` and ``attrs["abc_not_private"]``, and a warning says so.
    Parameters are those of :func:`sample_abcdp`.
    """
    spec, distance, args = _setup(model, threshold, n_accept, n_proposals, distance, batch_size)
    spec = _bind(spec, distance, data, client)
    warnings.warn(
        "sample_abc_nonprivate is NOT differentially private: its output is an exact function of "
        "the private data. Use it for comparisons only; publish sample_abcdp results.",
        UserWarning,
        stacklevel=2,
    )
    attrs = {
        "pymc_dp_releasable": 0,
        "abc_not_private": "rejection ABC without noise: NOT differentially private",
    }
    noise = _noise_streams(0)  # unused: b = 0 draws no noise
    return _run(
        spec, distance, 0.0, False, args, attrs, vectorized, random_seed, progressbar, noise
    )


def _setup(
    model: Model | None,
    threshold: float,
    n_accept: int,
    n_proposals: int,
    distance: Distance | None,
    batch_size: int,
) -> tuple[SimulatorModel, Distance, dict[str, Any]]:
    """Validate the arguments (naming them) and read the model."""
    args = {
        "threshold": check_positive(threshold, "threshold"),
        "n_accept": check_count(n_accept, "n_accept", minimum=1),
        "n_proposals": check_count(n_proposals, "n_proposals", minimum=1),
        "batch_size": check_count(batch_size, "batch_size", minimum=1),
    }
    if args["n_proposals"] < args["n_accept"]:
        raise ValueError(
            f"`n_proposals` ({args['n_proposals']}) must be >= `n_accept` ({args['n_accept']})"
        )
    if distance is None:
        distance = MMD()
    if not isinstance(distance, Distance):
        raise ValueError(
            f"`distance` must be a pymc_dp.abcdp distance (MMD, SummaryDistance), got "
            f"{distance!r}: its sensitivity must be known."
        )
    return simulator_model(modelcontext(model)), distance, args


def _local(fn: Callable, *args: Any) -> Any:
    return fn(*args)


def _remote(client: Any) -> Callable:
    def run(fn: Callable, *args: Any) -> Any:
        return client.submit(fn, *args, pure=False).result()

    return run


def _bind(spec: SimulatorModel, distance: Distance, data: Any, client: Any) -> SimulatorModel:
    """Bind ``data=`` rows to the container the simulator observes: NumPy rows are set into the
    model (and checked like any observed data); Dask rows stay on the workers."""
    if data is None:
        return spec
    model = spec.model
    value = model.rvs_to_values[model[spec.name]]
    if not isinstance(value, SharedVariable):
        raise ValueError(
            f"`data` binds rows to the pm.Data container the simulator `{spec.name}` observes; "
            f"its observed data is a constant. Write observed=pm.Data(name, placeholder)."
        )
    if isinstance(data, Mapping):
        if set(data) != {value.name}:
            raise ValueError(
                f"`data` keys {sorted(data)} must be exactly [{value.name!r}], the pm.Data "
                f"container the simulator `{spec.name}` observes."
            )
        data = data[value.name]
    from pymc_dp.boundary import check_rows, guarded
    from pymc_dp.distributed import _set_data, as_dask_array, is_dask, require_distributed

    placeholder = value.get_value(borrow=True)
    read = as_dask_array if is_dask(data) else np.asarray
    rows = guarded("Reading `data`", read, data)
    shape = tuple(rows.shape)
    if len(shape) != placeholder.ndim or shape[1:] != placeholder.shape[1:]:
        raise ValueError(
            f"`data` has shape {shape}; the placeholder of {value.name!r} has shape "
            f"{placeholder.shape}: rows on axis 0, the other axes must match."
        )
    if any(not isinstance(k, int | np.integer) for k in shape):
        raise ValueError("`data` has unknown chunk sizes: compute them first.")
    check_rows(value.name, value, shape, rows.dtype)  # a dtype PyMC stores: from metadata
    if not is_dask(rows):
        guarded(f"Binding the rows of {[value.name]}", _set_data, model, {value.name: rows})
        return guarded(f"Reading the rows of {[value.name]}", simulator_model, model)
    if shape[0] == 0:
        raise ValueError("`data` must have at least one row (leading axis).")
    if not distance.row_summable:
        raise ValueError(
            f"`distance` {type(distance).__name__} is not a sum over rows, so it cannot read rows "
            "held in a Dask cluster: use MMD with random features (n_features) or a "
            "SummaryDistance with row_bound."
        )
    distributed = require_distributed()
    client = client or distributed.get_client()
    return _with_rows(replace(spec, observed=None, rows=rows, client=client), shape)


def _with_rows(spec: SimulatorModel, shape: tuple[int, ...]) -> SimulatorModel:
    """The spec simulating data sets of ``shape``: the simulator's ``size`` is read from the model
    with the observed container's rows replaced by a symbolic array of that (public) shape."""
    size = None
    if spec.size is not None:
        value = spec.model.rvs_to_values[spec.model[spec.name]]
        # an Alloc stand-in: the shape rewrites fold Shape(Alloc) to the constant shape (Alloc
        # itself is never constant-folded, so no n-row array is made)
        stand_in = pt.zeros(shape, dtype=value.dtype)
        graph = graph_replace(spec.size, {value: stand_in}, strict=False)
        graph = rewrite_graph(graph, include=("canonicalize",))
        if not isinstance(graph, Constant):
            raise ValueError(
                f"The size of the simulator `{spec.name}` is not fixed by its observed rows; "
                "bound rows need a size that follows them (leave `size` unset)."
            )
        size = tuple(int(s) for s in np.asarray(graph.data).ravel())
    return replace(spec, shape=tuple(int(s) for s in shape), fixed_size=size)


def _workers(client: Any) -> int:
    return max(1, len(client.scheduler_info()["workers"]))


def _location(spec: SimulatorModel) -> str:
    if spec.rows is None:
        return "in memory"
    from pymc_dp.distributed import ABCDP_LOCATION

    return ABCDP_LOCATION


def _public_setup(
    spec: SimulatorModel,
    distance: Distance,
    streams: list,
    vectorized: bool,
    run: Callable = _local,
) -> tuple[PriorSampler, Distance]:
    """Compile the prior sampler and fix the distance's tuning from pilot simulations.

    ``run(fn, *args)`` calls ``fn``: here, or as a task on a Dask cluster."""
    seed = int(streams[_PRIOR].integers(2**63))
    pilot_seed = int(streams[_PILOT_PRIOR].integers(2**63))
    prior = PriorSampler(spec, seed)

    def pilot(k: int) -> NDArray[np.float64]:
        prior.reseed(pilot_seed)
        _, params, size = prior.draw(k)
        sim_rng, rows_rng = streams[_PILOT_SIMULATOR].spawn(2)
        out = run(_pilot_rows, spec.simulation, params, size, sim_rng, rows_rng, vectorized)
        prior.reseed(seed)  # back to the start of the proposal stream
        return out

    return prior, distance.prepare(pilot, spec.row_size, streams[_DISTANCE])


def _pilot_rows(
    sim: Simulation,
    params: list,
    size: tuple | None,
    rng: np.random.Generator,
    rows_rng: np.random.Generator,
    vectorized: bool,
    max_rows: int = _PILOT_ROWS,
) -> NDArray[np.float64]:
    """Pilot data sets, each cut to ``max_rows`` random rows (all a median heuristic reads), so
    a pilot of data sets with 1e8 rows returns kilobytes. One data set at a time unless
    vectorized."""
    batches = [params] if vectorized else [[p] for p in params]
    out = []
    for batch in batches:
        for y in simulate(sim, batch, size, rng, vectorized):
            keep = min(max_rows, len(y))
            out.append(y[np.sort(rows_rng.choice(len(y), size=keep, replace=False))])
    return np.stack(out)


def _simulate_embed(
    sim: Simulation,
    distance: Distance,
    params: list,
    size: tuple | None,
    rng: np.random.Generator,
    vectorized: bool,
) -> NDArray[np.float64]:
    """Public embeddings (k, m) of one batch of simulated data sets (a task on a worker); one data
    set at a time unless vectorized, with the same draws as one call for the batch."""
    if vectorized:
        return distance.embed(simulate(sim, params, size, rng, True))
    return np.concatenate([distance.embed(simulate(sim, [p], size, rng, False)) for p in params])


def prior_predictive_distances(
    model: Model | None = None,
    *,
    distance: Distance | None = None,
    n_pairs: int = 200,
    vectorized: bool = False,
    random_seed: Any = None,
    n_rows: int | None = None,
    client: Any = None,
) -> NDArray[np.float64]:
    """Distances between independent prior-predictive data sets, to choose ``threshold``.

    Public: only simulated data are used (the observed data is never read), so quantiles of the
    result can set ABCDP's ``threshold`` without spending privacy. The distance is prepared as
    :func:`sample_abcdp` prepares it with the same ``random_seed`` (same bandwidth and random
    features). A low quantile is a threshold that a data set typical of the prior would pass
    that often. ``n_rows`` simulates data sets of that many rows (public), for a model that holds
    a placeholder for rows bound later with ``sample_abcdp(data=)``; with a Dask ``client`` the
    pairs are simulated as tasks on its workers (the same values). One pair at a time: memory
    for two data sets.

    Returns
    -------
    ndarray, shape (n_pairs,)
        ``rho(Y_s, Y_t)`` for independent ``Y_s, Y_t`` from the prior predictive.
    """
    n_pairs = check_count(n_pairs, "n_pairs", minimum=1)
    spec, distance, _ = _setup(model, 1.0, 1, 1, distance, 1)
    if n_rows is not None:
        n_rows = check_count(n_rows, "n_rows", minimum=1)
        spec = _with_rows(spec, (n_rows, *spec.shape[1:]))
    streams = np.random.default_rng(random_seed).spawn(5)
    run = _local if client is None else _remote(client)
    prior, distance = _public_setup(spec, distance, streams, vectorized, run)
    sim = spec.simulation

    def jobs():  # a generator per pair, spawned in order: the same pairs wherever they run
        for _ in range(n_pairs):
            _, params, size = prior.draw(2)
            yield None, (sim, distance, params, size, streams[_SIMULATOR].spawn(1)[0], vectorized)

    if client is None:
        return np.array([_pair_distance(*job) for _, job in jobs()])
    from pymc_dp.distributed import stream_tasks

    window = 2 * _workers(client)  # batches in flight: every worker busy, one more queued
    return np.array([rho for _, rho in stream_tasks(client, _pair_distance, jobs(), window)])


def _pair_distance(
    sim: Simulation,
    distance: Distance,
    params: list,
    size: tuple | None,
    rng: np.random.Generator,
    vectorized: bool,
) -> float:
    """``rho`` between two simulated data sets (a task on a worker, or here)."""
    ys = simulate(sim, params, size, rng, vectorized)
    return float(distance.against(ys[0])(ys[1:2])[0])


def _run(
    spec: SimulatorModel,
    distance: Distance,
    b: float,
    resample: bool,
    args: dict[str, Any],
    attrs: dict[str, Any],
    vectorized: bool,
    random_seed: Any,
    progressbar: bool,
    noise: tuple[np.random.Generator, np.random.Generator],
) -> DataTree:
    streams = np.random.default_rng(random_seed).spawn(5)
    rows, client = spec.rows, spec.client
    run = _local if client is None else _remote(client)
    prior, distance = _public_setup(spec, distance, streams, vectorized, run)
    c, total, batch = args["n_accept"], args["n_proposals"], args["batch_size"]
    svt = SparseVector(args["threshold"], b, c, resample, *noise)
    sim = spec.simulation

    def jobs():
        # every batch simulates with a generator of its own, spawned in order, so a batch gives
        # the same data sets wherever and whenever it runs
        for start in range(0, total, batch):
            values, params, size = prior.draw(min(batch, total - start))
            yield values, (sim, distance, params, size, streams[_SIMULATOR].spawn(1)[0])

    # the private data (or its embedding) is held only by the generators, dropped below
    if rows is None:
        tasks = _in_memory(distance.against(spec.observed), jobs(), vectorized)
        batches = tasks
    else:
        from pymc_dp.distributed import private_embedding, stream_tasks

        window = 2 * _workers(client)
        jobs_ = ((values, (*job, vectorized)) for values, job in jobs())
        tasks = stream_tasks(client, _simulate_embed, jobs_, window)
        private = private_embedding(distance, rows, spec.name, client)
        batches = _compared(private, distance, tasks)
        del private
    accepted: dict[str, list[NDArray]] = {name: [] for name in spec.var_names}
    shapes: dict[str, tuple[int, ...]] = {}
    drawn = 0
    progress = create_simple_progress(progressbar, default_progress_theme)
    with progress:  # the null backend's __enter__ returns None, so keep the object
        task = progress.add_task("ABC proposals", completed=0, total=total)
        for values, distances in batches:
            idx = svt.offer(distances)
            for name, v in values.items():
                shapes[name] = v.shape[1:]
                accepted[name].extend(v[idx])
            drawn += len(distances)
            progress.update(task, refresh=True, completed=drawn)
            if svt.done:
                break
    batches.close()
    tasks.close()  # cancels the simulations still queued on a cluster
    del batches, tasks

    n_acc = svt.n_accepted
    # "Proposals used" is where the SVT stopped: the position of its c-th "accept", a function
    # of the released indicator sequence (or T if it never stopped), so it is releasable.
    attrs = {
        **attrs,
        "abcdp_threshold": args["threshold"],
        "abcdp_c": c,
        "abcdp_resample": int(resample),
        "abcdp_sensitivity": distance.sensitivity(spec.n),
        "abcdp_n_proposals": total,
        "abcdp_proposals_used": svt.n_seen,
        "abcdp_accepted": n_acc,
        **distance.describe(),
    }
    if n_acc < c:
        warnings.warn(
            f"Only {n_acc} of n_accept = {c} proposals were accepted within n_proposals = "
            f"{total}; returning them. The privacy cost is that of the full run. Raise "
            "`n_proposals` or `threshold` (chosen without the private data).",
            UserWarning,
            stacklevel=3,
        )
    return _to_datatree(spec, accepted, shapes, attrs)


def _in_memory(rho: Callable, jobs, vectorized: bool):
    """``(values, rho(Y_t))`` per batch, simulated here."""
    for values, (sim, _, params, size, rng) in jobs:
        yield values, rho(simulate(sim, params, size, rng, vectorized))


def _compared(private: NDArray, distance: Distance, embedded):
    """``(values, rho)`` per batch from the simulated embeddings of a cluster's tasks."""
    for values, emb in embedded:
        yield values, distance.compare(private, emb)


def _people_dims(spec: SimulatorModel) -> set[str]:
    """Dims that index people: the row dim of the observed simulator and of its container."""
    model = spec.model
    value = model.rvs_to_values[model[spec.name]]
    names = [spec.name] + ([value.name] if isinstance(value, SharedVariable) else [])
    return {
        dims[0] for name in names if (dims := model.named_vars_to_dims.get(name) or ()) and dims[0]
    }


def _to_datatree(
    spec: SimulatorModel,
    accepted: dict[str, list[NDArray]],
    shapes: dict[str, tuple[int, ...]],
    attrs: dict[str, Any],
) -> DataTree:
    """Posterior group (chain=1, draw=accepted) with the model's dims and coords."""
    model = spec.model
    posterior = {}
    for name, vals in accepted.items():
        arr = np.stack(vals) if vals else np.empty((0, *shapes[name]))
        posterior[name] = arr[None, ...]
    dims = {
        name: list(model.named_vars_to_dims[name])
        for name in posterior
        if name in model.named_vars_to_dims
    }
    used = {d for ds in dims.values() for d in ds}
    people = _people_dims(spec)
    # coordinates of a dim that indexes people (names, ids) would publish who is in the data
    coords = {
        d: (np.arange(len(v)) if d in people else np.asarray(v))
        for d, v in model.coords.items()
        if d in used and v is not None
    }
    tree = arviz_base.from_dict(
        {"posterior": posterior},
        dims=dims,
        coords=coords,
        check_conventions=False,
        attrs={"posterior": {"inference_library": "pymc_dp.abcdp"}},
    )
    tree.attrs.update(attrs)
    return tree
