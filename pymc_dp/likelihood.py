"""Compiled per-row kernels of a PyMC model: log-likelihood ratios and gradients, clipped.

DP samplers bound the influence of one person (one row of the data) on what they release, so they
need the log-likelihood split by row rather than PyMC's summed ``model.logp()``. Which inputs are
private and which axis holds the rows is decided once, by :func:`pymc_dp.graph.analyse`; this
module compiles, from that analysis,

* the per-row log-likelihood vector ``l_i(q)`` and per-row gradients ``d l_i / d q`` in forward
  mode (a push-forward per coordinate, so the cost is ~D log-likelihood evaluations, not a scan),
* the prior (with the log-Jacobian of the transforms, plus potentials) and its gradient,
* *fused* kernels that clip per row and sum inside PyTensor, so that no n-vector crosses into
  Python on the hot path, and minibatch kernels that index every per-row input to the batch, so
  an evaluation costs O(batch), not O(n).

Every kernel maps a non-finite per-row term to a data-independent value inside the clip bound (a
NaN ratio to 0, an infinite one to the bound, a non-finite gradient row to 0): whatever a row
holds, its contribution stays within the sensitivity the accountant assumes.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property

import numpy as np
import pytensor
import pytensor.tensor as pt
from pymc.blocking import DictToArrayBijection, RaveledVars
from pymc.model import Model, modelcontext
from pymc.pytensorf import join_nonshared_inputs
from pytensor.compile.mode import Mode, get_mode
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.gradient import pushforward
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.op import Op
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.graph.traversal import graph_inputs, io_toposort
from pytensor.tensor.type import TensorType, discrete_dtypes

from pymc_dp import compiling
from pymc_dp.clipped_kernels import ClippedKernels
from pymc_dp.graph import ModelGraph, analyse, batch_graph
from pymc_dp.kernel_rewrites import (
    hessian_fn,
    narrowed,
    numpy_mode,
    optimise_rows,
    python_linked,
)
from pymc_dp.spending import data_fingerprint

__all__ = ["PerRowLikelihood", "model_likelihood"]

#: Whether numba may cache the compiled kernels on disk (PyTensor's compiledir): off unless the
#: environment sets ``PYMC_DP_CACHE_KERNELS=1``. The kernels read every array of the rows from
#: storage, but a value PyMC or PyTensor folds from them into one inline number (a covariate
#: column every row shares, outcomes all 0: found in review) would be written there and hashed
#: into a file's name; a warm cache builds the quickstart's step in 1.4 s instead of 16-19 s.
CACHE_KERNELS = os.environ.get("PYMC_DP_CACHE_KERNELS") == "1"
#: Up to this many rows, kernels a fit calls a few times run in NumPy, compiled in a fraction of a
#: second; above, their passes cost more than Numba's compile (measured, logistic d = 4: 9 s of
#: compile against 3 ms a pass in NumPy, 1 ms in Numba, at n = 2e4; 0.18 s against 0.05 at 1e6).
_NUMPY_MAX_ROWS = 2_000_000
#: Up to this many coordinates, per-row gradients are built one coordinate at a time.
_MAX_COMPONENT_DIM = 32


#: Likelihoods alive in this process, by model and arguments: every step's, held weakly, so a
#: model and its rows are freed with the last step that uses them (never written anywhere), and
#: compiled kernels stay shared while any step that uses them lives (one entry per key lost them
#: when the step that compiled them died: a loop building one step after another recompiled
#: every other step, 22 s against 2 s).
_LIVE: dict[tuple, weakref.WeakSet] = {}
_LIVE_LOCK = threading.Lock()


class _Untrusted(Exception):
    """An argument with no hashable form we trust to mean the same kernels."""


def _frozen(value):
    """A hashable form of a likelihood argument (plain values, tuples, lists, mappings)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return tuple(sorted(((str(k), _frozen(v)) for k, v in value.items()), key=repr))
    if isinstance(value, tuple | list):
        return tuple(_frozen(v) for v in value)
    raise _Untrusted


def model_likelihood(
    model: Model,
    vars: Sequence[Variable],
    *,
    row_dim: str | None = None,
    row_axes: Mapping[str, int] | None = None,
    public: Iterable[str] = (),
    compile_kwargs: dict | None = None,
) -> PerRowLikelihood:
    """A new :class:`PerRowLikelihood` of ``model`` over ``vars`` that adopts the compiled
    kernels of any likelihood still alive on the same model, variables, arguments and data.

    Kernels compile once (tens of seconds at D = 10 under Numba), so a second step on the same
    model (another epsilon, another sampler) starts at once. Everything else is new: the model is
    analysed anew (every refusal of :func:`pymc_dp.graph.analyse` runs, and what is private,
    e.g. a Deterministic, is decided on the model as it is now). Kernels are adopted only where
    the key matches and so does every array the rows and the prior read (digests); they hold no
    budget and no noise (:meth:`DPStep.renew` has always shared them), and each is called by one
    thread at a time.
    """
    graph = analyse(model, row_dim=row_dim, row_axes=row_axes, public=public)
    before = data_fingerprint(model, graph, rows_only=True)
    made = PerRowLikelihood(model, vars, graph=graph, compile_kwargs=compile_kwargs)
    try:
        args = _frozen((row_dim, row_axes, tuple(public), compile_kwargs))
    except _Untrusted:  # e.g. a Mode object in compile_kwargs: no sharing
        return made
    with compiling.COMPILE_LOCK:  # not another thread's mode while it compiles
        mode = str(pytensor.config.mode)
    key = (
        id(model),
        tuple(id(v) for v in vars),
        tuple(id(v) for v in model.named_vars.values()),
        args,
        mode,
        pytensor.config.floatX,
    )
    made.fingerprint = data_fingerprint(model, graph, rows_only=True)
    if made.fingerprint != before:  # data set by another thread during the build: not shared
        return made
    with _LIVE_LOCK:  # steps may be built from several threads
        for stale in [k for k, steps in _LIVE.items() if not steps]:
            del _LIVE[stale]
        sharers = _LIVE.setdefault(key, weakref.WeakSet())
        for found in list(sharers):
            if found.model is model and found.fingerprint == made.fingerprint:
                made.adopt_kernels(found)
                break
        sharers.add(made)
    return made


#: Every kernel lock in this process: a forked chain process gets new ones (a lock held by
#: another thread at the fork would never be released in the child).
_LOCKED: weakref.WeakSet = weakref.WeakSet()


def _new_locks_after_fork() -> None:
    for kernel in list(_LOCKED):
        kernel._lock = threading.Lock()
    _LIVE_LOCK._at_fork_reinit()


os.register_at_fork(after_in_child=_new_locks_after_fork)


class _Serialised:
    """A compiled kernel called by one thread at a time. Steps on one model share kernels, and
    a PyTensor function's storage is not thread-safe: two steps called from threads got each
    other's sums (review), a clip of 1e-6 returning a sum of 4e4."""

    def __init__(self, fn, cache: bool = True, quiet: bool = False) -> None:
        self.fn = fn
        self.cache = cache  # whether numba may cache it on disk (unpickling compiles it again)
        # evaluated in NumPy: an overflow on one row would warn (or raise, under a user's
        # np.seterr), a side channel of that row's value (review); Numba kernels never warn
        self.quiet = quiet
        self._dtypes = [i.variable.type.dtype for i in fn.maker.inputs if not i.shared]
        self._n_inputs = len(self._dtypes)
        self._lock = threading.Lock()
        _LOCKED.add(self)

    def __call__(self, *args, **kwargs):
        # trust_input: an extra argument would be written into the rows' storage (review), and
        # a Python float or list reaches the ops as it is (a step written with `bound = float(..)`):
        # PyTensor's Python linker refuses it, and Numba compiles the kernel again for its type
        # (review: 0.3-0.6 s for each new scalar type), so every argument becomes an array here
        if len(args) > self._n_inputs:
            raise TypeError(f"a kernel of {self._n_inputs} inputs called with {len(args)}")
        args = [
            a if isinstance(a, np.ndarray) else np.asarray(a, dtype=t)
            for a, t in zip(args, self._dtypes, strict=False)
        ]
        with self._lock, np.errstate(all="ignore") if self.quiet else contextlib.nullcontext():
            out = self.fn(*args, **kwargs)
            # copied under the lock: a function compiled to reuse its output buffers
            # (allow_gc=False) would otherwise hand this caller the next caller's values
            if isinstance(out, list):
                return [np.array(o, copy=True) if isinstance(o, np.ndarray) else o for o in out]
            return np.array(out, copy=True) if isinstance(out, np.ndarray) else out

    def __getattr__(self, name: str):
        if name in ("fn", "_lock", "cache", "quiet", "_dtypes", "_n_inputs"):  # unpickling
            raise AttributeError(name)
        return getattr(self.fn, name)

    def __reduce__(self):
        # a PyTensor function compiles again when unpickled (a chain in a spawned process),
        # with the process's numba__cache: one that must not be cached is pickled on its own,
        # to be unpickled with the cache off
        if self.cache:
            return _Serialised, (self.fn, True, self.quiet)
        return _uncached_kernel, (pickle.dumps(self.fn), self.quiet)


def _uncached_kernel(blob: bytes, quiet: bool = False) -> _Serialised:
    with compiling.COMPILE_LOCK, pytensor.config.change_flags(numba__cache=False):
        return _Serialised(pickle.loads(blob), cache=False, quiet=quiet)


class _StorageCompiler:
    """How a :class:`PerRowLikelihood` compiles a kernel: every array of the rows read from
    storage (never embedded as a constant), what the rewrites would fold from the rows computed
    once into storage, a few-call kernel in NumPy, one caller at a time."""

    def _compile(self, inputs, outputs, cache: bool = True, few: bool = False):
        """``cache=False``: numba must not cache it on disk (a value of the rows may be inline).
        ``few``: a kernel a fit calls a handful of times (the warm start's passes), evaluated in
        NumPy (:func:`~pymc_dp.kernel_rewrites.numpy_mode`) unless a mode was asked for or the
        rows are many (see ``_NUMPY_MAX_ROWS``)."""
        cache = CACHE_KERNELS and cache and self.n_rows > 1  # one row: a one-value array
        kwargs = dict(self._compile_kwargs)
        outputs = self._rows_as_storage(outputs)
        # the folds may prove an input unused (no rows: a Dask driver's empty placeholder)
        kwargs.setdefault("on_unused_input", "ignore")
        # One compile at a time per process: change_flags and PyTensor's rewrite databases are
        # process-global, and Dask workers in threads (processes=False) compile concurrently.
        # The default mode is read under the lock too: another thread's compile sets it to its
        # own while it rewrites (review: a kernel compiled in the other thread's Python linker).
        with compiling.COMPILE_LOCK:
            if few and self._few_in_numpy():
                kwargs["mode"], cache = numpy_mode(), False
            mode = get_mode(kwargs.get("mode"))
            if self._idx in inputs:
                # Batch kernels gather rows first, in tight loops. Fused into the arithmetic
                # loop (PyTensor's indexed reads), each row's cache miss at large n stalls that
                # loop: measured at b = 1000, n = 1e6, 4x the growth of a plain gather (1.3x).
                mode = mode.excluding("fuse_indexed_into_elemwise")
            kwargs["mode"] = narrowed(mode)  # a Python linker: sums over > 32 coordinates
            with pytensor.config.change_flags(numba__cache=cache):
                fn = compiling.pymc_compile(inputs, outputs, **kwargs)
        fn.trust_input = True
        # evaluated in NumPy (numpy_mode, or a Python-linked mode asked for): an overflow on one
        # row would warn, a side channel of its value (review); Numba kernels never warn
        quiet = python_linked(mode)
        return _Serialised(fn, cache=cache, quiet=quiet)

    def _few_in_numpy(self) -> bool:
        """Whether :meth:`_compile` puts a kernel compiled with ``few`` in
        :func:`~pymc_dp.kernel_rewrites.numpy_mode`: no mode asked for, rows up to
        ``_NUMPY_MAX_ROWS``."""
        return "mode" not in self._compile_kwargs and self.n_rows <= _NUMPY_MAX_ROWS

    def _few_op_by_op(self) -> bool:
        """Whether a kernel compiled with ``few`` is evaluated op by op: in NumPy
        (:meth:`_few_in_numpy`) or in a Python-linked mode asked for."""
        if "mode" not in self._compile_kwargs:
            return self._few_in_numpy()
        with compiling.COMPILE_LOCK:  # the default mode is read under the lock (_compile)
            return python_linked(get_mode(self._compile_kwargs["mode"]))

    def _rows_as_storage(self, outputs):
        """``outputs`` reading every array of the rows from a shared variable, never a constant.

        Numba writes a compiled graph's constants into its on-disk cache (PyTensor's compiledir,
        which outlives the process) and hashes them into the cache files' names, so a kernel
        that embeds the rows must not be cached, and then every new process compiles it again
        (16 s of a 17 s ``DPLaplace`` on the quickstart). Read from storage, the rows are data
        the compiled code is called with: the cache holds code only.

        Which constants hold private values cannot be told after the graph was cloned and
        rewritten (PyMC and :func:`optimise_rows` make new ones from the rows, ``2 y - 1`` for a
        Bernoulli row), so every constant of more than one value moves (with a single row, every
        array). They move *before* PyTensor's rewrites, which would otherwise read their values
        (found in review: a column every row shares, all-zero outcomes, equal weights were
        folded into one inline value, cached on disk). One value left inline is then a
        parameter of the model (public by the contract); kept inline, a fused loop stays
        vectorised (moved, the banana's ratio kernel ran 23x slower). What the rewrites would
        have folded from the rows (a GLM's ``sum_j x_ij^2``, the finite covariate matrix: the
        gradient kernel ran 2.4x slower without) is computed once, after them, into storage
        (:meth:`_fold_rows`)."""
        single = isinstance(outputs, Variable)
        outs = self._in_storage([outputs] if single else list(outputs))
        outs = self._fold_rows(rewrite_graph(outs, include=("canonicalize",)))
        return outs[0] if single else outs

    def _in_storage(self, outs: list) -> list:
        """``outs`` with every constant of more than one value (with one row, every array) read
        from storage: before any rewrite that could read its values (:meth:`_rows_as_storage`)."""
        every = self.n_rows <= 1
        swap = {
            c: self._storage_of(c)
            for c in graph_inputs(outs)
            if isinstance(c, Constant)
            and (np.size(c.data) > 1 or (every and getattr(c.type, "ndim", 0) > 0))
        }
        return graph_replace(outs, swap, strict=False) if swap else outs

    def _fold_rows(self, outs: list) -> list:
        """``outs`` with every graph of the rows alone (storage and constants, no parameter)
        replaced by its value, computed once here (NumPy, nothing cached) into storage."""
        rows = {id(v) for v in self._storage.values()}
        fixed: set = set()  # variables of storage and constants only
        reads: set = set()  # ... that read the rows
        folds: dict = {}
        for node in io_toposort(graph_inputs(outs), outs):
            ins = node.inputs
            if (
                type(node.op).do_constant_folding is Op.do_constant_folding
                and all(isinstance(o.type, TensorType) for o in node.outputs)  # storage's types
                and all(isinstance(i, Constant) or id(i) in rows or i in fixed for i in ins)
            ):
                fixed.update(node.outputs)
                if any(id(i) in rows or i in reads for i in ins):
                    reads.update(node.outputs)
                continue
            folds.update((i, None) for i in ins if i in reads)
        folds.update((o, None) for o in outs if o in reads)
        if not folds:
            return outs
        todo = list(folds)
        fn = compiling.function([], todo, mode=Mode(linker="py", optimizer=None))
        with np.errstate(all="ignore"):  # a row's overflow must not warn
            values = fn()
        swap = {
            v: pytensor.shared(np.asarray(x, dtype=v.type.dtype), borrow=True, shape=v.type.shape)
            for v, x in zip(todo, values, strict=True)
        }
        return graph_replace(outs, swap, strict=False)

    def _storage_of(self, c: Constant) -> SharedVariable:
        """One shared variable per array and static type (clones of a constant share their
        array), shared by the kernels that read it: a copy made once, so that editing a
        ``pm.Data`` value in place does not reach kernels built before (review). Of the
        constant's static type: a looser one would make the replacement wrap it in a
        ``SpecifyShape`` of the row count all the same."""
        key = (id(c.data), c.type)
        found = self._storage.get(key)
        if found is None:
            found = pytensor.shared(np.array(c.data), name=c.name, borrow=True, shape=c.type.shape)
            self._storage[key] = found
            self._storage_keep.append(c.data)  # its id stays its own while the key lives
        return found


class PerRowLikelihood(_StorageCompiler, ClippedKernels):
    """Per-row log-likelihood, per-row gradients and prior of a PyMC model, in raveled form.

    Parameters
    ----------
    model : pm.Model, optional
        The model; defaults to the model on the context stack.
    vars : sequence of value variables, optional
        Value variables to differentiate with respect to, in raveling order. Default: all free
        value variables of the model. Value variables left out are read from shared variables
        (see :attr:`shared`), as PyMC's own step methods do.
    row_dim, row_axes, public
        See :func:`pymc_dp.graph.analyse`.
    graph : ModelGraph, optional
        An analysis of ``model`` already made (it is not repeated).

    Notes
    -----
    One row of the private data is one person; see :mod:`pymc_dp.graph` for how rows, private
    inputs and refusals are decided. The prior is ``model.logp(vars=model.free_RVs,
    jacobian=True)`` plus every ``pm.Potential`` (potentials that read private data are refused).
    """

    def __init__(
        self,
        model: Model | None = None,
        vars: Sequence[Variable] | None = None,
        *,
        row_dim: str | None = None,
        row_axes: Mapping[str, int] | None = None,
        public: Iterable[str] = (),
        graph: ModelGraph | None = None,
        compile_kwargs: dict | None = None,
    ) -> None:
        model = modelcontext(model)
        self.model = model
        self._compile_kwargs = dict(compile_kwargs or {})
        self.graph = graph or analyse(model, row_dim=row_dim, row_axes=row_axes, public=public)
        vars = list(model.value_vars if vars is None else vars)
        value_vars = set(model.value_vars)
        for v in vars:
            if v not in value_vars:
                raise ValueError(
                    f"`vars` contains {v}, which is not a value variable of the model."
                )
        discrete = [v.name for v in vars if v.dtype in discrete_dtypes]
        if discrete:
            raise ValueError(
                f"DP samplers need continuous free variables; discrete free variables {discrete} "
                "are not supported (marginalise them out, e.g. with pymc-extras)."
            )
        self.vars = vars
        self.n_rows = self.graph.n_rows
        point = compiling.initial_point(model)
        others = [v for v in model.value_vars if v not in vars]
        self._build(self.graph.rows, self.graph.prior, vars, point, others)

    def _build(self, rows_graph, prior, vars, point: dict, others) -> None:
        """Kernel graphs of ``rows_graph`` and ``prior`` as functions of ``q``, the raveled
        ``vars`` (values in ``point``); ``others`` are read from shared variables."""
        # The kernels embed the rows as they are now: pm.Data containers become constants, so
        # they get the same rewrites as literal arrays (measured at n = 1e6, d = 10: 1.6-1.9x
        # faster). Rows bound later need a new likelihood (DPStep.rebuild does that).
        frozen = {
            x: pt.constant(x.get_value(borrow=True), name=x.name)
            for x in self.graph.batch_inputs
            if isinstance(x, SharedVariable)
        }
        self._frozen = frozen  # what the kernels read: a graph of the rows evaluates on these
        self._storage: dict = {}  # (array id, type) -> the shared variable kernels read it from
        self._storage_keep: list = []
        graph_rows = graph_replace(rows_graph, frozen, strict=False) if frozen else rows_graph
        batch_inputs = {frozen.get(x, x): axis for x, axis in self.graph.batch_inputs.items()}
        # one fused loop per kernel: columns instead of (n, k) arrays, one softplus per
        # Bernoulli-logit row, no provably-true parameter checks (pymc_dp.kernel_rewrites)
        (rows,), inputs = optimise_rows([graph_rows], batch_inputs)
        self.row_inputs = list(inputs)
        # minibatch kernels gather b rows of the original (row-major) arrays: one cache line per
        # row, where d split columns would cost d scattered loads per row at large n
        (batch_rows,) = optimise_rows([graph_rows], batch_inputs, split=False)[0]
        self._batch_inputs = batch_inputs
        self._point_map_info = DictToArrayBijection.map(
            {v.name: point[v.name] for v in vars}
        ).point_map_info
        self.shared = {
            v: pytensor.shared(point[v.name], v.name + "_shared", shape=point[v.name].shape)
            for v in others
        }
        (self._rows, self._batch_rows, self._prior), self._q = join_nonshared_inputs(
            point, [rows, batch_rows, prior], vars, self.shared
        )
        self._q.name = "q"
        self.dim = int(sum(np.prod(info[1], dtype=int) for info in self._point_map_info))
        if self.dim == 0:
            raise ValueError("No free variable to sample.")

    # ------------------------------------------------------------------ raveling
    def ravel(self, point: dict) -> np.ndarray:
        """Raveled vector ``q`` of a point (dict of value-variable name -> value)."""
        return DictToArrayBijection.map({v.name: point[v.name] for v in self.vars}).data

    def unravel(self, q: np.ndarray) -> dict:
        return DictToArrayBijection.rmap(RaveledVars(q, self._point_map_info))

    @cached_property
    def likelihood_mask(self) -> np.ndarray:
        """Raveled coordinates the per-row log-likelihood depends on (the others, e.g. the
        hyperparameters of a hierarchical model, enter only the prior)."""
        reads = set(self.graph.likelihood_vars)
        return np.concatenate(
            [np.full(size, name in reads) for name, _, size, _ in self._point_map_info]
        )

    @cached_property
    def variable_blocks(self) -> np.ndarray:
        """The index (in ``vars``) of the variable each raveled coordinate belongs to."""
        sizes = [size for _, _, size, _ in self._point_map_info]
        return np.repeat(np.arange(len(sizes)), sizes)

    # ------------------------------------------------------------------ symbolic pieces
    def _grad_components(self, rows: Variable) -> list[Variable]:
        """Per-row partial derivatives of ``rows``, one (n,) graph per coordinate.

        One 1-D push-forward per unit tangent (D <= 32) lets the clip-and-sum fuse into flat
        loops, measured 1.4-2x faster than the vectorised (D, n) form at n = 1e5 for D = 2 and
        10; above that, the columns of one vectorised (n, D) Jacobian.
        """
        if self.dim <= _MAX_COMPONENT_DIM:
            return [
                pushforward(rows, self._q, pt.as_tensor(e), disconnected_outputs="ignore")
                for e in np.eye(self.dim, dtype=self._q.dtype)
            ]
        t = pt.vector("t", shape=(self.dim,), dtype=self._q.dtype)
        jvp = pushforward(rows, self._q, t, disconnected_outputs="ignore")
        jac = vectorize_graph(jvp, {t: pt.eye(self.dim, dtype=self._q.dtype)}).T
        return [jac[:, j] for j in range(self.dim)]

    @cached_property
    def _grad_rows(self) -> Variable:
        """(n, D) per-row gradients in forward mode (no scan Jacobian)."""
        return pt.stack(self._grad_components(self._rows), axis=1)

    @cached_property
    def _idx(self) -> Variable:
        return pt.vector("idx", dtype="int64")

    def _batched(self, outputs: list[Variable]) -> list[Variable]:
        """Replace every per-row input ``x`` by its batch ``x[idx]`` so the graph costs O(batch)."""
        return batch_graph(outputs, self._batch_inputs, self._idx, stop=[self._q])

    @cached_property
    def _prior_grad(self) -> Variable:
        return pytensor.grad(self._prior, self._q, disconnected_inputs="ignore")

    # -------------------------------------------------------- unfused (tests, diagnostics)
    @cached_property
    def logp_rows_fn(self):
        """``q -> (n,)`` per-row log-likelihood."""
        return self._compile([self._q], self._rows)

    @cached_property
    def grad_rows_fn(self):
        """``q -> (n, D)`` per-row gradients."""
        return self._compile([self._q], self._grad_rows)

    @cached_property
    def prior_fn(self):
        """``q -> (log prior + log-Jacobian + potentials, its gradient)``."""
        return self._compile([self._q], [self._prior, self._prior_grad])

    def _python_linked(self, output: Variable, **serialised) -> _Serialised:
        """``q -> output`` by the Python linker, which compiles in milliseconds: for the few
        calls of a chain start or a private fit. PyMC's compile turns a failed parameter check
        (a scale of 0 where a walk reached log tau = -1000) into -inf, as in every other kernel:
        it raised, and the run failed (CI)."""
        fn = compiling.pymc_compile(
            [self._q], output, mode=narrowed(Mode(linker="py", optimizer="fast_compile"))
        )
        fn.trust_input = True
        return _Serialised(fn, **serialised)

    @cached_property
    def _prior_value_fn(self):
        return self._python_linked(self._prior, cache=self.n_rows > 1)

    def prior_value(self, q: np.ndarray) -> float:
        """Log prior (with log-Jacobian and potentials) at ``q``; reads no data."""
        return float(self._prior_value_fn(np.asarray(q, dtype=self._q.dtype)))

    @cached_property
    def _prior_gradient_fn(self):
        return self._python_linked(self._prior_grad, cache=False, quiet=True)

    def prior_gradient(self, q: np.ndarray) -> np.ndarray:
        """Gradient of the log prior (with log-Jacobian and potentials) at ``q``; public."""
        return np.asarray(self._prior_gradient_fn(np.asarray(q, dtype=self._q.dtype)))

    @cached_property
    def batch_logp_rows_fn(self):
        """``(q, idx) -> (b,)`` per-row log-likelihood of the rows ``idx``."""
        return self._compile([self._q, self._idx], self._batched([self._batch_rows])[0])

    @cached_property
    def batch_grad_rows_fn(self):
        """``(q, idx) -> (b, D)`` per-row gradients of the rows ``idx``."""
        grad_rows = pt.stack(self._grad_components(self._batch_rows), axis=1)
        return self._compile([self._q, self._idx], self._batched([grad_rows])[0])

    def logp_rows(self, q: np.ndarray) -> np.ndarray:
        return self.logp_rows_fn(np.asarray(q, dtype=self._q.dtype))

    def grad_rows(self, q: np.ndarray) -> np.ndarray:
        return self.grad_rows_fn(np.asarray(q, dtype=self._q.dtype))

    def prior_logp_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        lp, g = self.prior_fn(np.asarray(q, dtype=self._q.dtype))
        return float(lp), g

    def batch_logp_rows(self, q: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return self.batch_logp_rows_fn(np.asarray(q, self._q.dtype), np.asarray(idx, np.int64))

    def batch_grad_rows(self, q: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return self.batch_grad_rows_fn(np.asarray(q, self._q.dtype), np.asarray(idx, np.int64))

    # ------------------------------------------------------------------ fused hot-path kernels
    def draw_batch(self, rng: np.random.Generator, b: int, sampling: str):
        """Row indices of one minibatch, drawn with the secret generator ``rng``, in the form
        the batch kernels take (:func:`pymc_dp.batches.draw_batch`)."""
        from pymc_dp.batches import draw_batch

        return draw_batch(rng, self.n_rows, b, sampling)

    @cached_property
    def _prior_hessian_fn(self):
        return _Serialised(hessian_fn(self._prior, self._q), cache=False, quiet=True)

    def prior_hessian(self, q: np.ndarray) -> np.ndarray:
        """Hessian of the log prior (with log-Jacobian and potentials) at ``q``; public."""
        return np.asarray(self._prior_hessian_fn(np.asarray(q, dtype=self._q.dtype)))

    @cached_property
    def _kernels(self) -> dict:
        return {}

    #: Compiled functions a likelihood may adopt (symbolic pieces stay its own).
    _COMPILED = (
        "logp_rows_fn",
        "grad_rows_fn",
        "prior_fn",
        "_prior_value_fn",
        "_prior_gradient_fn",
        "batch_logp_rows_fn",
        "batch_grad_rows_fn",
        "_prior_hessian_fn",
    )

    def adopt_kernels(self, other: PerRowLikelihood) -> None:
        """Use ``other``'s compiled kernels, present and future (one dict): for a likelihood of
        the same model, variables, arguments and data (:func:`model_likelihood` checks)."""
        self._kernels = other._kernels
        for name in self._COMPILED:
            if name in other.__dict__:
                self.__dict__[name] = other.__dict__[name]
