"""Rows held in a Dask cluster: full-data steps sum clipped per-row terms where the rows live.

Optional extra: ``pip install "pymc-dp[dask]"``. Nothing here imports Dask until a Dask collection
is bound; the rest of the package never does.

Why the privacy analysis does not change: every per-row term is clipped *before* it is summed, so
the clipped sum over all n rows is exactly the sum of the clipped sums over any partition of the
rows. Each worker holds its partitions in memory with the compiled per-row kernels of
:class:`~pymc_dp.likelihood.PerRowLikelihood` (one :class:`RowShard` actor per worker); each
iteration the driver sends the parameters, gathers one number (or one d-vector) per worker, adds
them, and the step adds the noise once, centrally, exactly as in memory. The rows never reach the
driver. With the same seeds the draws equal those of the in-memory run up to the rounding of the
summation order.

How the user says it: the model holds ``pm.Data`` containers with small placeholder arrays of the
right trailing shape, and ``pdp.sample(..., step=step, data={"X": dask_X, "y": dask_y})`` binds
the rows (:func:`bind_data`); the same ``data=`` with NumPy arrays binds in-memory rows.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pymc as pm
from pymc.model import Model
from pytensor.compile.sharedvalue import SharedVariable

from pymc_dp.likelihood import PerRowLikelihood

__all__ = ["DistributedLikelihood", "RowShard", "WorkerLostError", "bind_data", "is_dask"]


class WorkerLostError(RuntimeError):
    """A worker holding rows failed during a run: the run stops (no release after it is made)."""


def is_dask(value) -> bool:
    """Whether ``value`` is a Dask collection (checked without importing Dask)."""
    return hasattr(value, "__dask_graph__")


def _require_distributed():
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
        The cloudpickled model with placeholder data.
    names : sequence of str
        The ``pm.Data`` containers the blocks fill, in order.
    blocks : sequence of sequences of arrays
        For each name, the worker's partitions (row blocks), concatenated in the given order.
    likelihood_kwargs : dict
        ``row_dim``, ``row_axes``, ``public`` and ``compile_kwargs`` of the step.
    """

    def __init__(
        self,
        model_blob: bytes,
        names: Sequence[str],
        blocks: Sequence[Sequence[np.ndarray]],
        likelihood_kwargs: Mapping,
    ) -> None:
        import cloudpickle

        model = cloudpickle.loads(model_blob)
        data = {
            name: np.concatenate([np.asarray(b) for b in parts])
            for name, parts in zip(names, blocks, strict=True)
        }
        with model:
            pm.set_data(data)
        self.likelihood = PerRowLikelihood(model, **dict(likelihood_kwargs))
        self.n_rows = self.likelihood.n_rows

    def rows(self) -> int:
        return self.n_rows

    def ratio(self, q_new: np.ndarray, q_old: np.ndarray, bound: np.ndarray) -> float:
        return float(self.likelihood.ratio_kernel()(q_new, q_old, bound)[0])

    def grad(self, q: np.ndarray, bound: np.ndarray) -> np.ndarray:
        return np.asarray(self.likelihood.grad_kernel()(q, bound)[0])

    def fisher(self, q: np.ndarray, bound: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        total, outer, _ = self.likelihood.fisher_kernel()(q, bound)
        return np.asarray(total), np.asarray(outer)


# ---------------------------------------------------------------------------------- driver side
@dataclass(frozen=True)
class _Binding:
    names: tuple[str, ...]
    n_rows: int
    location: str


class DistributedLikelihood(PerRowLikelihood):
    """A :class:`~pymc_dp.likelihood.PerRowLikelihood` whose per-row sums run on Dask workers.

    Built on the model with its placeholder data (the prior, the raveling and the graph analysis
    read no rows); ``n_rows`` is the bound data's. Only the full-data kernels exist: the clipped
    log-likelihood-ratio sum, the clipped gradient sum and the clipped Fisher sums (warm start).
    """

    def __init__(self, model: Model, shards: Sequence, binding: _Binding, **kwargs) -> None:
        super().__init__(model, **kwargs)
        self._shards = list(shards)
        self.n_rows = binding.n_rows
        self.location = binding.location

    def _gather(self, method: str, *args):
        futures = [getattr(shard, method)(*args) for shard in self._shards]
        try:
            return [f.result() for f in futures]
        except Exception as err:  # a lost worker or actor: stop, never release a partial sum
            raise WorkerLostError(
                f"A Dask worker holding rows failed during `{method}` ({type(err).__name__}). "
                "The run stopped before releasing anything computed without those rows; start "
                "it again (a new run spends a new budget)."
            ) from None

    def ratio_kernel(self, *, batch: bool = False, diagnostics: bool = False, squares=False):
        if batch or diagnostics or squares:
            raise NotImplementedError(
                "Rows in a Dask cluster serve the full-data steps (DPPenalty, DPHMC, DPLaplace) "
                "without diagnostics."
            )
        prior = self._prior_value_fn

        def kernel(q_new, q_old, bound):
            total = sum(self._gather("ratio", q_new, q_old, bound))
            return [np.asarray(total), np.asarray(prior(q_new))]

        return kernel

    def grad_kernel(self, *, batch: bool = False, diagnostics: bool = False):
        if batch or diagnostics:
            raise NotImplementedError("Rows in a Dask cluster: full-data gradients only.")
        prior = self.prior_fn

        def kernel(q, bound):
            total = sum(self._gather("grad", q, bound))
            return [total, prior(q)[1]]

        return kernel

    def fisher_kernel(self):
        prior = self.prior_fn

        def kernel(q, bound):
            parts = self._gather("fisher", q, bound)
            return [sum(p[0] for p in parts), sum(p[1] for p in parts), prior(q)[1]]

        return kernel


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
    """Trailing shapes as the placeholders'; one row count for all. Returns n."""
    rows = {}
    for key, var in containers.items():
        placeholder = var.get_value(borrow=True)
        value = data[key]
        shape = tuple(value.shape)
        if len(shape) != placeholder.ndim or shape[1:] != placeholder.shape[1:]:
            raise ValueError(
                f"`data[{key!r}]` has shape {shape}; the placeholder of {key!r} has shape "
                f"{placeholder.shape}: rows on axis 0, the other axes must match."
            )
        if any(s is None or (isinstance(s, float) and np.isnan(s)) for s in shape):
            raise ValueError(f"`data[{key!r}]` has unknown chunk sizes: compute them first.")
        rows[key] = int(shape[0])
    if len(set(rows.values())) != 1:
        raise ValueError(f"`data` arrays must have the same number of rows, got {rows}.")
    return next(iter(rows.values()))


def _as_dask_array(value):
    if hasattr(value, "to_dask_array"):  # a Dask DataFrame or Series
        # optimise first: dask-expr may merge small Parquet partitions when it optimises, and
        # lengths computed on the unoptimised frame would then not match its partitions
        return value.optimize().to_dask_array(lengths=True)
    return value


def _shards(model: Model, data: Mapping, likelihood_kwargs: Mapping, client) -> tuple[list, str]:
    """One :class:`RowShard` actor per worker holding rows, from partitions already there."""
    import dask
    import dask.array as da
    from distributed import futures_of, wait

    names = list(data)
    arrays = {k: _as_dask_array(v) for k, v in data.items()}
    first = arrays[names[0]]
    chunks = first.chunks[0]
    arrays = {
        k: (a if a.chunks[0] == chunks else a.rechunk({0: chunks}))
        if isinstance(a, da.Array)
        else da.from_array(np.asarray(a), chunks=(chunks,) + tuple(-1 for _ in a.shape[1:]))
        for k, a in arrays.items()
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
    owners = client.who_has([f for f in blocks[names[0]]])
    by_worker: dict[str, list[int]] = {}
    for i, f in enumerate(blocks[names[0]]):
        worker = sorted(owners[f.key])[0]
        by_worker.setdefault(worker, []).append(i)
    blob = _dumps(model)
    actors = []
    for worker, idx in sorted(by_worker.items()):
        parts = [[blocks[k][i] for i in idx] for k in names]
        future = client.submit(
            RowShard,
            blob,
            names,
            parts,
            dict(likelihood_kwargs),
            workers=[worker],
            allow_other_workers=False,
            actor=True,
            pure=False,
        )
        actors.append(future.result())
    location = (
        f"dask: {len(chunks)} row partition{'s' * (len(chunks) != 1)} held on {len(actors)} "
        f"worker{'s' * (len(actors) != 1)} (clipped sums gathered per worker, noise added once "
        "on the driver)"
    )
    return actors, location


def bind_data(step, data: Mapping, client=None):
    """Bind the rows of ``data`` to the model of ``step``; return a step rebuilt on them.

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
            f"{type(step).__name__} cannot read rows held in a Dask cluster yet: rows there serve "
            "the full-data steps (DPPenalty, DPHMC, DPLaplace). Bind NumPy arrays instead."
        )
    if not dask_values:
        _check_shapes(containers, {k: np.asarray(v) for k, v in data.items()})
        with model:
            pm.set_data({k: np.asarray(v) for k, v in data.items()})
        return step.rebuild()
    distributed = _require_distributed()
    values = {k: _as_dask_array(v) for k, v in data.items()}
    n = _check_shapes(containers, values)
    client = client or distributed.get_client()
    shards, location = _shards(model, values, step.likelihood_kwargs, client)
    lik = DistributedLikelihood(
        model, shards, _Binding(tuple(data), n, location), **step.likelihood_kwargs
    )
    return step.rebuild(likelihood=lik)
