"""Rows held in a Dask cluster: the steps sum clipped per-row terms where the rows live.

Optional extra: ``pip install "pymc-dp[dask]"``. Nothing here imports Dask until a Dask collection
is bound; the rest of the package never does.

Why the privacy analysis does not change: every per-row term is clipped *before* it is summed, so
the clipped sum over all n rows is exactly the sum of the clipped sums over any partition of the
rows. Each worker holds its partitions in memory with the compiled per-row kernels of
:class:`~pymc_dp.likelihood.PerRowLikelihood` (one :class:`RowShard` actor per worker); each
iteration the driver sends the parameters, gathers one number (or one d-vector) per worker, adds
them, and the step adds the noise once, centrally, exactly as in memory. A Poisson minibatch is
local: the driver sends the batch's secret key and each worker draws which of its rows are in
it (:class:`~pymc_dp.batches.PoissonBatch`: the same inclusions as in memory). A
fixed-size batch is drawn on the driver with the same secret generator as in memory (O(b) per
iteration, never O(n)) and each worker sums its rows of it. The rows never reach the driver,
and nothing about them leaves a worker but these sums and the per-row checks' verdicts: rows are
validated on the driver from their metadata, every worker-side function is
:func:`~pymc_dp.boundary.worker_safe` (an exception leaves as its type name, never its message),
and rows travel as task dependencies, never as task arguments. With the same seeds the draws
equal those of the in-memory run up to the rounding of the summation order.
:func:`map_reduce_statistic` does the same for the noisy sufficient statistics of
:func:`pymc_dp.expfam.release`, and :func:`private_embedding` for ABCDP's distance, whose public
simulations run as tasks (:func:`stream_tasks`).

How the user says it: the model holds ``pm.Data`` containers with small placeholder arrays of the
right trailing shape (at least ``batch_size`` rows for a minibatch step, which checks it when
made), and ``pdp.sample(..., step=step, data={"X": dask_X, "y": dask_y})`` binds the rows
(:func:`bind_data`); the same ``data=`` with NumPy arrays binds in-memory rows.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pymc as pm
from pymc.model import Model
from pytensor.compile.sharedvalue import SharedVariable

from pymc_dp import compiling
from pymc_dp.boundary import (
    WITHHELD,
    DataRefusal,
    WorkerError,
    check_finite,
    check_rows,
    guarded,
    nonfinite_message,
    worker_safe,
)
from pymc_dp.graph import support_refusal
from pymc_dp.likelihood import PerRowLikelihood

__all__ = [
    "DistributedLikelihood",
    "RowShard",
    "WorkerLostError",
    "bind_data",
    "as_dask_array",
    "is_dask",
    "map_partitions",
    "map_reduce_statistic",
    "private_embedding",
    "require_distributed",
    "stream_tasks",
]


# What the ledger records for rows in a cluster. No partition or worker counts: dask-expr merges
# partitions by their (data-dependent) sizes, and where a block lands is the scheduler's choice.
STEP_LOCATION = "dask cluster (clipped sums gathered per worker, noise added once on the driver)"
ABCDP_LOCATION = (
    "dask cluster (private embedding summed per partition, simulations as tasks, noise added "
    "once on the driver)"
)


class WorkerLostError(RuntimeError):
    """A worker holding rows failed during a run: the run stops (no release after it is made)."""


def is_dask(value) -> bool:
    """Whether ``value`` is a Dask collection (checked without importing Dask)."""
    return hasattr(value, "__dask_graph__")


def require_distributed():
    try:
        import dask.array  # noqa: F401
        import distributed
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            'Rows held in Dask collections need the optional extra: pip install "pymc-dp[dask]"'
        ) from err
    return distributed


def _dumps(model: Model) -> bytes:
    import cloudpickle

    buf = io.BytesIO()
    cloudpickle.dump(model, buf)
    return buf.getvalue()


# ---------------------------------------------------------------------------------- worker side
class RowShard:
    """The rows one worker holds and their compiled kernels (a Dask actor; lives on the worker).

    Parameters
    ----------
    model_blob : bytes
        The cloudpickled model with placeholder data and the driver's analysis of it
        (:class:`~pymc_dp.graph.ModelGraph`): the worker sets its rows' values into the
        containers and compiles the kernels of that analysis; it classifies nothing itself, so
        a partition's size (0, 1, d rows) cannot change what is computed or refused. Every method
        is :func:`~pymc_dp.boundary.worker_safe`: an exception leaves the worker as its type
        name only.
    names : sequence of str
        The ``pm.Data`` containers the blocks fill, in order.
    blocks : sequence of sequences of arrays
        For each name, the worker's partitions (row blocks), concatenated in the given order.
    likelihood_kwargs : dict
        ``row_dim``, ``row_axes``, ``public`` and ``compile_kwargs`` of the step (only
        ``compile_kwargs`` is used: the analysis comes with the model).
    ranges : sequence of (int, int)
        The global rows ``[start, stop)`` of each partition, in the same order (Poisson batches
        are drawn here, for these rows).
    """

    @worker_safe
    def __init__(
        self,
        model_blob: bytes,
        names: Sequence[str],
        blocks: Sequence[Sequence[np.ndarray]],
        likelihood_kwargs: Mapping,
        ranges: Sequence[tuple[int, int]] = (),
    ) -> None:
        import cloudpickle
        from pymc.pytensorf import convert_data

        # the driver's analysis of the model (made on the placeholder, from public metadata):
        # the worker classifies nothing, so its rows' count cannot change what is refused
        model, graph = cloudpickle.loads(model_blob)
        data = {
            name: np.concatenate([np.asarray(b) for b in parts])
            for name, parts in zip(names, blocks, strict=True)
        }
        self.n_rows = int(len(next(iter(data.values()))))
        self._ranges = [(int(a), int(b)) for a, b in ranges]
        self.likelihood = None
        # per-row checks, reported to the driver by `check` (the driver refuses once, naming
        # the container, whatever the partitions)
        self._nonfinite = tuple(
            name for name, v in data.items() if v.dtype.kind in "fc" and not np.isfinite(v).all()
        )
        self._unsupported: tuple[str, ...] = ()
        if self._nonfinite:
            return
        for name, value in data.items():  # the values only: dims and coords are the driver's
            model[name].set_value(convert_data(value))
        graph = dataclasses.replace(graph, n_rows=self.n_rows)
        with compiling.COMPILE_LOCK:  # workers in threads of one process compile one at a time
            self._unsupported = _outside_support(graph)
            if self._unsupported:
                return
            self.likelihood = PerRowLikelihood(
                model, graph=graph, compile_kwargs=dict(likelihood_kwargs).get("compile_kwargs")
            )

    @worker_safe
    def check(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The bound containers holding NaN or inf, and the likelihood terms with rows outside
        their support (at the model's initial point), among this worker's rows."""
        return self._nonfinite, self._unsupported

    @worker_safe
    def rows(self) -> int:
        return self.n_rows

    @worker_safe
    def ratio(self, q_new: np.ndarray, q_old: np.ndarray, bound: np.ndarray) -> float:
        return float(self.likelihood.ratio_kernel()(q_new, q_old, bound)[0])

    @worker_safe
    def grad(self, q: np.ndarray, bound: np.ndarray) -> np.ndarray:
        return np.asarray(self.likelihood.grad_kernel()(q, bound)[0])

    @worker_safe
    def batch_ratio(
        self, q_new: np.ndarray, q_old: np.ndarray, bound: np.ndarray, idx: np.ndarray
    ) -> tuple[float, float]:
        """Clipped ratio sum and sum of squares over this worker's rows ``idx`` (local)."""
        out = self.likelihood.ratio_kernel(batch=True, squares=True)(q_new, q_old, bound, idx)
        return float(out[0]), float(out[2])

    @worker_safe
    def poisson_ratio(
        self, q_new: np.ndarray, q_old: np.ndarray, bound: np.ndarray, batch
    ) -> tuple[float, float]:
        """:meth:`batch_ratio` over this worker's members of a Poisson batch, drawn here from
        its key (the same inclusions the driver would draw; the batch never travels)."""
        local, offset = [], 0
        for start, stop in self._ranges:
            local.append(batch.rows(start, stop) - start + offset)
            offset += stop - start
        idx = np.concatenate(local) if local else np.zeros(0, dtype=np.int64)
        if not idx.size:
            return 0.0, 0.0
        out = self.likelihood.ratio_kernel(batch=True, squares=True)(q_new, q_old, bound, idx)
        return float(out[0]), float(out[2])

    @worker_safe
    def curvature(
        self, q: np.ndarray, w: np.ndarray, bound: np.ndarray, edges: np.ndarray, observed: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        total, counts, _ = self.likelihood.curvature_kernel(observed)(q, w, bound, edges)
        return np.asarray(total), np.asarray(counts)

    @worker_safe
    def whitened(
        self, q: np.ndarray, w: np.ndarray, bound: np.ndarray, edges: np.ndarray, *curvature
    ) -> tuple[np.ndarray, np.ndarray]:
        """``curvature``: the metric and clip of the curvature release weighting the rows."""
        kernel = self.likelihood.whitened_kernel(weighted=bool(curvature))
        total, counts, _ = kernel(q, w, bound, edges, *curvature)
        return np.asarray(total), np.asarray(counts)


def _outside_support(graph) -> tuple[str, ...]:
    """Likelihood terms with a row outside its support (a -inf or NaN term at the model's
    initial point): the in-memory refusal of :func:`pymc_dp.graph.analyse`, per row."""
    from pytensor.compile.mode import Mode

    model = graph.model
    terms = getattr(graph, "terms", graph.observed)
    fn = compiling.function(
        model.value_vars,
        [t.term for t in terms],
        mode=Mode(linker="py", optimizer=None),
        on_unused_input="ignore",
    )
    point = compiling.initial_point(model)
    values = fn(*[np.asarray(point[v.name], dtype=v.dtype) for v in model.value_vars])
    return tuple(t.name for t, v in zip(terms, values, strict=True) if not np.isfinite(v).all())


# ---------------------------------------------------------------------------------- driver side
@dataclass(frozen=True)
class _Binding:
    """Where the rows are: row block ``k`` starts at global row ``starts[k]``, lives on worker
    ``worker[k]`` (index into the actors) at offset ``offset[k]`` of that worker's rows."""

    n_rows: int
    location: str
    starts: np.ndarray
    worker: np.ndarray
    offset: np.ndarray

    def split(self, idx: np.ndarray) -> list[np.ndarray]:
        """Global row indices -> each worker's local indices (order kept)."""
        block = np.searchsorted(self.starts, idx, side="right") - 1
        local = idx - self.starts[block] + self.offset[block]
        owner = self.worker[block]
        return [local[owner == w] for w in range(int(self.worker.max()) + 1)]


class DistributedLikelihood(PerRowLikelihood):
    """A :class:`~pymc_dp.likelihood.PerRowLikelihood` whose per-row sums run on Dask workers.

    Built on the model with its placeholder data (the prior, the raveling and the graph analysis
    read no rows); ``n_rows`` is the bound data's. Kernels: the clipped log-likelihood-ratio sum,
    the clipped gradient sum and the warm start's clipped curvature and whitened gradient sums
    (with their norm histograms) over all rows, and the minibatch ratio sums (with squares). A
    fixed-size batch is drawn on the driver with its secret generator exactly as in memory and
    split by the worker holding each row; a Poisson batch travels as its secret key and each
    worker draws its own rows' inclusions (the same as in memory). No exact diagnostics.
    """

    def __init__(self, model: Model, shards: Sequence, binding: _Binding, **kwargs) -> None:
        super().__init__(model, **kwargs)
        self._shards = list(shards)
        self._binding = binding
        self.n_rows = binding.n_rows
        self.location = binding.location

    def _gather(self, method: str, *args):
        return self._results(method, [getattr(shard, method)(*args) for shard in self._shards])

    def _results(self, method: str, futures: list):
        return _gathered(method, futures)

    def draw_batch(self, rng: np.random.Generator, b: int, sampling: str):
        from pymc_dp.batches import PoissonBatch

        if sampling == "poisson":  # the key only: the workers draw their rows' inclusions
            return PoissonBatch.draw(rng, self.n_rows, b)
        return super().draw_batch(rng, b, sampling)

    def ratio_kernel(self, *, batch: bool = False, diagnostics: bool = False, squares=False):
        if diagnostics:
            raise NotImplementedError("Rows in a Dask cluster: no exact diagnostics.")
        prior = self._prior_value_fn
        if batch:
            from pymc_dp.batches import PoissonBatch

            def batch_kernel(q_new, q_old, bound, idx):
                if isinstance(idx, PoissonBatch):
                    futures = [s.poisson_ratio(q_new, q_old, bound, idx) for s in self._shards]
                    sums = self._results("poisson_ratio", futures)
                else:  # each worker sums its own rows of the driver's batch
                    parts = self._binding.split(np.asarray(idx))
                    futures = [
                        (shard.batch_ratio(q_new, q_old, bound, local) if local.size else None)
                        for shard, local in zip(self._shards, parts, strict=True)
                    ]
                    sums = self._results("batch_ratio", [f for f in futures if f is not None])
                total = sum(t for t, _ in sums)
                out = [np.asarray(total), np.asarray(prior(q_new))]
                if squares:
                    out.append(np.asarray(sum(sq for _, sq in sums)))
                return out

            return batch_kernel

        def kernel(q_new, q_old, bound):
            total = sum(self._gather("ratio", q_new, q_old, bound))
            out = [np.asarray(total), np.asarray(prior(q_new))]
            if squares:
                raise NotImplementedError("full-data squares are not gathered")
            return out

        return kernel

    def grad_kernel(self, *, batch: bool = False, diagnostics: bool = False):
        if batch or diagnostics:
            raise NotImplementedError("Rows in a Dask cluster: full-data gradients only.")
        prior = self.prior_fn

        def kernel(q, bound):
            total = sum(self._gather("grad", q, bound))
            return [total, prior(q)[1]]

        return kernel

    def curvature_kernel(self, observed: bool = True):
        prior = self.prior_fn

        def kernel(q, w, bound, edges):
            parts = self._gather("curvature", q, w, bound, edges, observed)
            return [sum(p[0] for p in parts), sum(p[1] for p in parts), prior(q)[1]]

        return kernel

    def whitened_kernel(self, weighted: bool = False):
        prior = self.prior_fn

        def kernel(q, w, bound, edges, *curvature):
            if len(curvature) != (2 if weighted else 0):
                raise TypeError("the weighted kernel takes W_c and c_h, the plain one neither")
            parts = self._gather("whitened", q, w, bound, edges, *curvature)
            return [sum(p[0] for p in parts), sum(p[1] for p in parts), prior(q)[1]]

        return kernel


def _gathered(method: str, futures: list) -> list:
    """The results of actor calls; a lost worker or a failed call stops the run (never a
    partial sum), raised without the original exception attached."""
    failure = None
    try:
        return [f.result() for f in futures]
    except Exception as err:  # noqa: BLE001 - replaced below, outside this block
        failure = WorkerLostError(
            f"A Dask worker holding rows failed during `{method}` ({type(err).__name__}). "
            "The run stopped before releasing anything computed without those rows; start "
            "it again (a new run spends a new budget)."
        )
    raise failure


def _containers(model: Model, data: Mapping) -> dict[str, SharedVariable]:
    if not isinstance(data, Mapping) or not data:
        raise TypeError("`data` must be a non-empty dict {pm.Data name: rows}.")
    found = {}
    names = sorted(name for name, v in model.named_vars.items() if isinstance(v, SharedVariable))
    for key in data:
        var = model.named_vars.get(key)
        if not isinstance(var, SharedVariable):
            raise ValueError(
                f"`data` key {key!r} is not a pm.Data container of the model; its containers "
                f"are {names}."
            )
        found[key] = var
    return found


def _check_shapes(containers: Mapping[str, SharedVariable], data: Mapping) -> int:
    """Validate the rows from their metadata (:func:`pymc_dp.boundary.check_rows`: trailing
    shape, dtype PyMC stores, static shape); one row count for all, at least one row. Returns n.
    Nothing here reads a value, so NumPy and Dask rows are refused alike."""
    rows = {
        key: check_rows(key, var, tuple(data[key].shape), data[key].dtype)
        for key, var in containers.items()
    }
    if len(set(rows.values())) != 1:
        raise ValueError(f"`data` arrays must have the same number of rows, got {rows}.")
    n = next(iter(rows.values()))
    if n == 0:
        raise ValueError("`data` has no rows: bind at least one row (one per person).")
    return n


def as_dask_array(value):
    if hasattr(value, "to_dask_array"):  # a Dask DataFrame or Series
        # optimise first: dask-expr may merge small Parquet partitions when it optimises, and
        # lengths computed on the unoptimised frame would then not match its partitions
        return value.optimize().to_dask_array(lengths=True)
    return value


def _shards(
    model: Model, graph, data: Mapping, likelihood_kwargs: Mapping, client
) -> tuple[list, _Binding]:
    """One :class:`RowShard` actor per worker holding rows, from partitions already there.

    Partitions of any size are normal (dask-expr sizes them from the data): empty ones hold
    nobody and get no shard; the shards share the driver's analysis ``graph`` and only compute.
    NumPy rows given beside Dask rows are chunked as those (random keys: a key named by a hash
    of the rows would be a digest of the data in every log and dashboard).
    """
    import dask
    import dask.array as da
    from distributed import futures_of, wait

    names = list(data)
    first = next(a for a in data.values() if isinstance(a, da.Array))
    chunks = first.chunks[0]
    arrays = {
        k: (a if a.chunks[0] == chunks else a.rechunk({0: chunks}))
        if isinstance(a, da.Array)
        else da.from_array(a, chunks=(chunks,) + tuple(-1 for _ in a.shape[1:]), name=False)
        for k, a in data.items()
    }
    # one block per row partition (all trailing axes in one chunk)
    arrays = {k: a.rechunk({i: -1 for i in range(1, a.ndim)}) for k, a in arrays.items()}
    persisted = dict(zip(names, client.persist([arrays[k] for k in names]), strict=True))
    wait([f for a in persisted.values() for f in futures_of(a)])
    by_key = {f.key: f for a in persisted.values() for f in futures_of(a)}
    blocks = {
        k: [by_key[key] for key in dask.core.flatten(a.__dask_keys__())]
        for k, a in persisted.items()
    }
    sizes_all = np.asarray(chunks, dtype=np.int64)
    starts_all = np.concatenate([[0], np.cumsum(sizes_all)[:-1]]).astype(np.int64)
    kept = [i for i, size in enumerate(sizes_all) if size > 0]
    owners = client.who_has([blocks[names[0]][i] for i in kept])
    by_worker: dict[str, list[int]] = {}
    for j, i in enumerate(kept):  # j: index among the kept (non-empty) partitions
        worker = sorted(owners[blocks[names[0]][i].key])[0]
        by_worker.setdefault(worker, []).append(j)
    sizes, starts = sizes_all[kept], starts_all[kept]
    owner = np.zeros(len(kept), dtype=np.int64)
    offset = np.zeros(len(kept), dtype=np.int64)
    for w, (_, idx) in enumerate(sorted(by_worker.items())):
        owner[idx] = w
        offset[idx] = np.concatenate([[0], np.cumsum(sizes[idx])[:-1]])
    blob = _dumps((model, graph))
    futures = []
    for worker, idx in sorted(by_worker.items()):
        parts = [[blocks[k][kept[j]] for j in idx] for k in names]
        ranges = [(int(starts[j]), int(starts[j] + sizes[j])) for j in idx]
        futures.append(
            client.submit(
                RowShard,
                blob,
                names,
                parts,
                dict(likelihood_kwargs),
                ranges,
                workers=[worker],
                allow_other_workers=False,
                actor=True,
                pure=False,
            )
        )
    actors = [guarded("Building the row shards on the workers", f.result) for f in futures]
    _refuse_bad_rows(graph, names, _gathered("check", [a.check() for a in actors]))
    return actors, _Binding(int(sizes.sum()), STEP_LOCATION, starts, owner, offset)


def _refuse_bad_rows(graph, names: Sequence[str], reports: Sequence) -> None:
    """Refuse, as in memory, rows some worker found non-finite or outside a term's support:
    one refusal for all the workers' reports (they cover every row), in a fixed order (the
    containers as given, then the likelihood terms), so the same rows give the same error
    whatever their partitions."""
    nonfinite = {name for bad, _ in reports for name in bad}
    unsupported = {name for _, bad in reports for name in bad}
    for name in names:
        if name in nonfinite:
            raise ValueError(nonfinite_message(name))
    for term in getattr(graph, "terms", graph.observed):
        if term.name in unsupported:
            raise ValueError(support_refusal(term))


def _set_data(model: Model, values: Mapping[str, np.ndarray]) -> None:
    with model:
        pm.set_data(dict(values))


def bind_data(step, data: Mapping, client=None):
    """Bind the rows of ``data`` to the model of ``step``; return a step rebuilt on them.

    The rows are validated before anything is bound, from their metadata (trailing shape, a
    dtype PyMC stores in the container without loss, one row count, at least one row), and
    in-memory rows also for NaN and inf; rows in a cluster are checked per row on the workers
    (NaN or inf, values outside a likelihood term's support) and refused once, on the driver.
    What is refused never depends on how the rows are partitioned. Errors from PyMC, PyTensor,
    NumPy or Dask while binding are replaced by :class:`~pymc_dp.boundary.DataBoundaryError`
    (their messages print the rows).

    Parameters
    ----------
    step : DPStep
        A step built on the model with its placeholder data; it is rebuilt with the same
        arguments (its privacy calibration reads the bound n; a warm start runs on the bound rows).
    data : dict
        ``{pm.Data container name: rows}``: NumPy arrays (set into the model, in memory) or Dask
        arrays / DataFrame columns (kept on the workers). Rows on axis 0; the other axes as the
        placeholder's.
    client : distributed.Client, optional
        The cluster holding Dask rows (default: the current client).
    """
    model = step.likelihood.model
    containers = _containers(model, data)
    dask_values = [k for k, v in data.items() if is_dask(v)]
    if dask_values and not getattr(step, "distributed_rows", False):
        raise NotImplementedError(
            f"{type(step).__name__} cannot read rows held in a Dask cluster: bind NumPy arrays."
        )
    names = list(data)
    if not dask_values:
        values = {k: guarded(f"Reading `data[{k!r}]`", np.asarray, v) for k, v in data.items()}
        _check_shapes(containers, values)
        for k, v in values.items():
            check_finite(k, v)
        guarded(f"Binding the rows of {names}", _set_data, model, values)
        step.claim_run()
        return guarded(f"Building {type(step).__name__} on the rows of {names}", step.rebuild)
    distributed = require_distributed()
    values = {
        k: (
            guarded(f"Reading `data[{k!r}]`", as_dask_array, v)
            if is_dask(v)
            else guarded(f"Reading `data[{k!r}]`", np.asarray, v)
        )
        for k, v in data.items()
    }
    n = _check_shapes(containers, values)
    client = client or distributed.get_client()
    graph = step.likelihood.graph
    shards, binding = _shards(model, graph, values, step.likelihood_kwargs, client)
    if binding.n_rows != n:
        raise RuntimeError(f"the workers hold {binding.n_rows} rows, the arrays declare {n}")
    lik = DistributedLikelihood(model, shards, binding, graph=graph, **step.likelihood_kwargs)
    step.claim_run()
    return guarded(
        f"Building {type(step).__name__} on the rows of {names}", step.rebuild, likelihood=lik
    )


class _Captured:
    """``fn(block, *args)`` on a worker, its outcome returned instead of raised: ``("ok",
    result)``, ``("refused", rank, text)`` for a :class:`~pymc_dp.boundary.DataRefusal`, or
    ``("failed", type name)``. No exception leaves the worker (nothing for its log, no chained
    original with values), and the driver sees every partition's outcome, so it reports the same
    refusal whatever the partitioning."""

    def __init__(self, fn) -> None:
        self.fn = fn

    def __call__(self, *args):
        try:
            return ("ok", self.fn(*args))
        except DataRefusal as err:
            return ("refused", err.rank, str(err))
        except Exception as err:  # noqa: BLE001 - only its type name leaves the worker
            return ("failed", type(err).__name__)

    def __repr__(self) -> str:
        return f"captured({getattr(self.fn, '__name__', type(self.fn).__name__)})"


def _outcomes(outcomes: Sequence, name: str) -> list:
    """The partitions' results, or one refusal for all of them: the per-row check that runs
    first in memory (lowest rank), else a :class:`~pymc_dp.boundary.WorkerError` naming the
    exception types only."""
    refused = sorted((o[1], o[2]) for o in outcomes if o[0] == "refused")
    failed = sorted({o[1] for o in outcomes if o[0] == "failed"})
    if refused:
        rank, text = refused[0]
        raise DataRefusal(text, rank)
    if failed:
        raise WorkerError(f"{', '.join(failed)} in {name} on a Dask worker; {WITHHELD}.")
    return [o[1] for o in outcomes]


def map_partitions(fn, data, *args, client=None) -> list:
    """``fn(block, *args)`` for each non-empty row partition of a Dask collection, run on the
    workers of ``client`` (default: Dask's current scheduler), all trailing axes in one block;
    the results in row order.

    Rows travel as task dependencies (never in a task's arguments). A
    :class:`~pymc_dp.boundary.DataRefusal` raised by ``fn`` is raised here, the first check in
    the in-memory order over all partitions; any other exception only by its type name
    (:class:`~pymc_dp.boundary.WorkerError`)."""
    require_distributed()
    import dask

    array = as_dask_array(data)
    array = array.rechunk({i: -1 for i in range(1, array.ndim)})
    blocks = [
        b for b, size in zip(array.to_delayed().ravel(), array.chunks[0], strict=True) if size != 0
    ]
    captured = _Captured(fn)
    tasks = [dask.delayed(captured)(b, *args) for b in blocks]
    if client is not None:
        outcomes = guarded("Computing on the row partitions", client.compute, tasks, sync=True)
    else:
        outcomes = guarded("Computing on the row partitions", dask.compute, *tasks)
    return _outcomes(list(outcomes), getattr(fn, "__name__", "a partition task"))


def _statistic(block: np.ndarray, family) -> tuple[np.ndarray, int]:
    return family.statistic(block)


def map_reduce_statistic(family, data) -> tuple[np.ndarray, int]:
    """``family.statistic`` of rows held in a Dask collection: per row partition on the workers,
    summed here. The statistic is a sum over rows of bounded (truncated) terms, so the sum of the
    partitions' statistics is exactly the statistic of all rows; the noise is added once, by the
    caller (:func:`pymc_dp.expfam.release`). The shape is checked here, once, from the metadata
    (``family.check_shape``), and no rows at all as in memory; partitions with no rows are
    skipped; the per-row checks run on the workers and are reported as in memory."""
    array = as_dask_array(data)
    family.check_shape(tuple(array.shape))
    if array.shape[0] == 0:
        return family.statistic(np.zeros((0,) + array.shape[1:], dtype=array.dtype))
    parts = map_partitions(_statistic, array, family)
    total = np.sum([np.asarray(s) for s, _ in parts], axis=0)
    return total, int(sum(n for _, n in parts))


def _observed_sum(block: np.ndarray, distance, name: str) -> tuple[np.ndarray, int]:
    block = np.asarray(block, dtype=np.float64)
    if not np.all(np.isfinite(block)):  # the in-memory check, per partition
        raise DataRefusal(f"The observed data of `{name}` contains NaN or inf.")
    return distance.observed_sum(block), len(block)


def private_embedding(distance, data, name: str, client=None) -> np.ndarray:
    """ABCDP's private embedding of rows held in a Dask collection: ``distance.observed_sum`` per
    row partition on the workers (each a sum of per-row terms of bounded norm), added here and
    finished once, so its sensitivity is that of the in-memory embedding."""
    parts = map_partitions(_observed_sum, data, distance, name, client=client)
    total = np.sum([np.asarray(s) for s, _ in parts], axis=0)
    return distance.finish(total, int(sum(n for _, n in parts)))


def stream_tasks(client, fn, jobs, window: int):
    """Yield ``(tag, fn(*args))`` for ``(tag, args)`` in ``jobs``, in order, with up to ``window``
    tasks running on the cluster ahead of the consumer. The tasks are public computations (a lost
    worker's task is rerun by Dask with the same arguments, so with the same result); closing
    the generator cancels the tasks still queued."""
    from collections import deque

    pending: deque = deque()
    jobs = iter(jobs)
    try:
        while True:
            while len(pending) < window:
                job = next(jobs, None)
                if job is None:
                    break
                tag, args = job
                pending.append((tag, client.submit(fn, *args, pure=False)))
            if not pending:
                return
            tag, future = pending.popleft()
            yield tag, future.result()
    finally:
        client.cancel([f for _, f in pending])
