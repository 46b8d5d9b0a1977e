"""The one rule for what is private: a PyMC model read by node identity.

Every DP mechanism of pymc-dp, every output filter and every refusal asks this module, and nothing
else, which parts of a model hold private data. The rule:

* **Private is a property of the data, not of where it is read.** Observed values and every
  ``pm.Data`` container are private unless the container is declared ``public=[...]``; a
  non-scalar NumPy constant is private when it reaches the likelihood or holds private values
  (PyMC embeds a NumPy array as a fresh constant at each use, so constants are matched by value:
  shape and float64 bytes, and the transpose). Every graph that reads private data is a counted
  likelihood term, a deterministic computed but never returned, or refused before any release.
* **Likelihood terms** are the observed variables' log-densities and every ``pm.Potential`` that
  reads private data with one entry per row (shape ``(n, ...)``, rows on the leading axis or the
  dim ``row_dim``): a per-row potential is a custom likelihood, clipped and noised like any other
  row term. A potential that reads private data without rows (e.g. summed) is refused.
* **Rows.** One row = one person. The rows of an observed variable are its leading axis, or the
  model dim ``row_dim``. The row axis of every other private input is read from its ``pm.Data``
  dims, or given by ``row_axes``, or inferred when exactly one of its axes has the row length; an
  inference is accepted only if the likelihood is *row-local* with it (below). Inputs with no axis
  of the row length enter the likelihood as fixed parameters (``kind == "fixed"``): they are
  listed by :meth:`ModelGraph.describe` and must not be computed from the private data.
* **Row-local likelihood.** Row i's log-likelihood must depend on row i of the private inputs
  only, or replacing one person would move every term and the per-row clipping would not bound
  the sensitivity. This is checked by evaluating the per-row log-likelihood of a subset of rows
  two ways, on the full inputs and on the inputs indexed to the subset; a likelihood that
  standardises ``X`` by ``X.mean()`` inside the model, or that reads ``y[i - 1]``, fails. The
  check runs on a logp derived with embedded arrays read as symbols (nothing of the rows folded
  by PyMC's rewrites), and is also structural: a step that reduces over the rows, or sorts or
  accumulates along them (a flag ``max(X) > 1e5`` no trial reaches), is refused. An array
  inside an inner graph that PyMC derives whole (a CustomDist under ``pm.Truncated``) is
  refused by name.
* **Refused**: free variables whose prior reads private data, potentials that read it without one
  entry per row, initial values computed from it (``initval=y.mean()``: a chain starts there, and
  a rejected first move releases it exactly), missing values that PyMC would impute,
  ``pm.Minibatch`` data, and observed values (or per-row potentials) outside the support of their
  distribution (one such row would make a chain freeze: one unaccounted bit about a person).
* **Dropped from outputs**: deterministics that depend on private data through any path.

This module analyses graphs; :mod:`pymc_dp.likelihood` compiles kernels from the analysis.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import pytensor.tensor as pt
from pymc.data import MinibatchOp
from pymc.distributions.distribution import SymbolicRandomVariable
from pymc.logprob.basic import transformed_conditional_logp
from pymc.logprob.utils import CheckParameterValue, ParameterValueError
from pymc.model import Model, modelcontext
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode
from pytensor.compile.rewriting import inline_ofg_node
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.replace import clone_replace, graph_replace
from pytensor.graph.traversal import ancestors, graph_inputs, io_toposort
from pytensor.raise_op import CheckAndRaise
from pytensor.scalar.basic import AND
from pytensor.scan.op import Scan
from pytensor.tensor.basic import Alloc, MakeVector, ScalarFromTensor
from pytensor.tensor.elemwise import CAReduce
from pytensor.tensor.extra_ops import CumOp
from pytensor.tensor.random.op import RandomVariable, RNGConsumerOp
from pytensor.tensor.shape import Shape, Shape_i, SpecifyShape
from pytensor.tensor.sort import ArgSortOp, SortOp
from pytensor.tensor.type import TensorType, discrete_dtypes

from pymc_dp import compiling
from pymc_dp.kernel_rewrites import provably_true

__all__ = [
    "DataInput",
    "ModelGraph",
    "analyse",
    "analyse_simulator",
    "batch_graph",
    "value_ancestors",
]

#: Python linker, no rewrites: compiles in milliseconds; used only for the checks in this module.
_CHECK_MODE = Mode(linker="py", optimizer=None)
#: Rows compared by the row-locality check (a public, fixed choice).
_LOCALITY_ROWS = 24
#: People the structural row-locality check evaluates the per-row graph on (public, fixed).
_STRUCTURE_ROWS = 48

InputKind = Literal["observed", "row", "fixed", "unread"]


@dataclass(frozen=True, eq=False)
class DataInput:
    """A private input of the likelihood.

    Attributes
    ----------
    var : Variable
        The graph node: a constant, a ``pm.Data`` container, or an observed value node.
    label : str
        How errors name it (``pm.Data`` name, ``"observed 'y'"`` or the constant's shape).
    kind : {"observed", "row", "fixed", "unread"}
        Observed values; per-row inputs (covariates); fixed inputs without rows; private
        ``pm.Data`` containers the likelihood does not read (whatever reads them is dropped
        from outputs or refused).
    row_axis : int or None
        The axis that indexes people (None for fixed inputs).
    """

    var: Variable
    label: str
    kind: InputKind
    row_axis: int | None


@dataclass(frozen=True, eq=False)
class ObservedRows:
    """One likelihood term: an observed variable (its value node) or a per-row potential (value
    None), its row axis and its (n,) per-row log-likelihood term."""

    name: str
    value: Variable | None
    row_axis: int
    term: Variable


def _is_data_node(var: Variable) -> bool:
    """A root constant or shared tensor (not an RNG): where PyMC keeps data."""
    return (
        var.owner is None
        and isinstance(var, Constant | SharedVariable)
        and isinstance(var.type, TensorType)
    )


def _value_of(var: Variable) -> np.ndarray:
    if isinstance(var, SharedVariable):
        return np.asarray(var.get_value(borrow=True))
    if isinstance(var, Constant):
        return np.asarray(var.data)
    fn = compiling.function([], var, mode=_CHECK_MODE)
    return np.asarray(fn())


def _signature(value: np.ndarray) -> tuple:
    """Value identity of a constant: shape and a digest of its values (as float64 if numeric)."""
    arr = np.asarray(value)
    if arr.dtype.kind in "biuf":  # int data embedded as float elsewhere is the same data
        arr = arr.astype(np.float64)
    arr = np.ascontiguousarray(arr)
    return (arr.shape, hashlib.blake2b(arr.tobytes(), digest_size=16).digest())


def _signatures(value: np.ndarray) -> list[tuple]:
    """Signatures of an array and of its transpose (graph rewrites transpose constants)."""
    return [_signature(value)] + ([_signature(value.T)] if value.ndim == 2 else [])


def _label(var: Variable) -> str:
    if isinstance(var, SharedVariable) and var.name:
        return f"pm.Data {var.name!r}"
    return f"a constant array of shape {_value_of(var).shape}"


def value_ancestors(
    outputs: Sequence[Variable], stop: Iterable[Variable] = (), *, scan: bool = True
) -> list[Variable]:
    """Ancestors whose *values* the outputs read, not through the ``stop`` variables (e.g. free
    random variables, whose own graphs are their priors).

    The shape of a data node itself (``Xd.shape[0]``: the public row count) is not a read of
    its values; the shape of anything computed from it is (``X[X > 95].shape[0]`` counts
    people). Inner graphs (``OpFromGraph``, and ``scan`` bodies unless ``scan=False``) are
    entered: a constant used inside one is read like any other."""
    seen = {id(v) for v in stop}
    out: list[Variable] = []
    stack = [v for v in outputs if id(v) not in seen]
    while stack:
        var = stack.pop()
        if id(var) in seen:
            continue
        seen.add(id(var))
        out.append(var)
        node = var.owner
        if node is None:
            continue
        if isinstance(node.op, Shape | Shape_i) and _unpin(node.inputs[0]).owner is None:
            continue
        stack.extend(node.inputs)
        inner = getattr(node.op, "inner_outputs", None)
        if inner is not None and not scan:
            continue
        if inner is None and isinstance(getattr(node.op, "fgraph", None), FunctionGraph):
            inner = node.op.fgraph.outputs
        stack.extend(inner or ())
    return out


def _inline_op_from_graph(outputs: list[Variable]) -> list[Variable]:
    """Replace every ``OpFromGraph`` node by a copy of its inner graph (repeatedly: nested)."""
    for _ in range(20):
        nodes = [n for n in io_toposort([], outputs) if isinstance(n.op, OpFromGraph)]
        if not nodes:
            return outputs
        replace = {}
        for node in nodes:
            replace.update(zip(node.outputs, inline_ofg_node(node), strict=True))
        outputs = graph_replace(outputs, replace, strict=False)
    raise RuntimeError("OpFromGraph nesting deeper than 20 levels")  # pragma: no cover


def _unpin(var: Variable) -> Variable:
    while var.owner is not None and isinstance(var.owner.op, SpecifyShape):
        var = var.owner.inputs[0]
    return var


def batch_graph(
    outputs: Sequence[Variable],
    inputs: Mapping[Variable, int],
    idx: Variable,
    stop: Sequence[Variable] = (),
) -> list[Variable]:
    """Rebuild ``outputs`` with every input ``x`` (row axis ``a``) replaced by ``take(x, idx, a)``.

    PyMC's logp graphs pin the row count in shape-only ops: ``SpecifyShape`` asserts and an
    ``Alloc`` that broadcasts the element-wise logp to the (already full) observed shape. Both are
    no-ops on the full data, so they are dropped before the swap. Inner graphs (e.g. the
    ``logaddexp`` of mixtures) fix their input types to the full row count: they are inlined.
    ``stop`` are variables the walk treats as inputs (parameters).
    """
    outputs = _inline_op_from_graph(list(outputs))
    pinned = {}
    for node in io_toposort([*stop, *inputs], outputs):
        x = node.inputs[0] if node.inputs else None
        out = node.outputs[0] if node.outputs else None
        if isinstance(node.op, SpecifyShape):
            pinned[out] = x
        elif isinstance(node.op, Alloc) and x.type.ndim == out.type.ndim:
            same = x.type.shape == out.type.shape and None not in x.type.shape
            if same or all(s != 1 for s in x.type.shape) or _alloc_to_own(node):
                pinned[out] = x
    if pinned:
        outputs = graph_replace(outputs, pinned, strict=False)
    # graph_replace leaves an output that is itself pinned; with constant data its pinned shape
    # is a folded literal (n), which the batch would violate
    outputs = [_unpin(o) for o in outputs]
    replace = {
        x: (x[idx] if axis == 0 else pt.take(x, idx, axis=axis)) for x, axis in inputs.items()
    }
    return clone_replace(outputs, replace=replace, rebuild_strict=False)


def _alloc_to_own(node) -> bool:
    """An ``Alloc`` to its input's own static shape, given as literals (an observed (n, 1))."""
    x, *shape = node.inputs
    if None in x.type.shape:
        return False
    try:
        sizes = tuple(int(pt.get_underlying_scalar_constant_value(s)) for s in shape)
    except Exception:  # noqa: BLE001 - a symbolic size
        return False
    return sizes == x.type.shape


@dataclass
class ModelGraph:
    """What a PyMC model releases about its data, by node identity (see the module docstring).

    Build it with :func:`analyse`. ``rows`` is the (n,) per-row log-likelihood and ``prior`` the
    log prior (with the log-Jacobian of the transforms, plus potentials), both as graphs of the
    model's value variables.
    """

    model: Model
    n_rows: int
    row_dim: str | None
    observed: tuple[ObservedRows, ...]
    inputs: tuple[DataInput, ...]
    rows: Variable | None
    prior: Variable | None
    private_deterministics: tuple[str, ...]
    likelihood_vars: tuple[str, ...]
    #: Per-row potentials that read private data: likelihood terms like the observed ones.
    potentials: tuple[ObservedRows, ...] = ()
    #: Private pm.Data containers that the likelihood does not read.
    unread: tuple[DataInput, ...] = ()
    _shared: frozenset[int] = field(default_factory=frozenset, repr=False)
    _constants: frozenset[tuple] = field(default_factory=frozenset, repr=False)

    @property
    def row_inputs(self) -> tuple[DataInput, ...]:
        """Private inputs with a row axis (observed values and per-row covariates)."""
        return tuple(i for i in self.inputs if i.row_axis is not None)

    @property
    def batch_inputs(self) -> dict[Variable, int]:
        """Root data nodes with their row axis: indexing these to a batch batches the rows."""
        return {i.var: i.row_axis for i in self.row_inputs if i.var.owner is None}

    @property
    def row_dim_names(self) -> frozenset[str]:
        """Model dims that index people (their coordinates may identify them)."""
        dims_of = self.model.named_vars_to_dims
        names = {self.row_dim} if self.row_dim else set()
        # a dim as long as the rows (one random effect per person) may be labelled by who they are
        names |= {
            d for d, c in self.model.coords.items() if c is not None and len(c) == self.n_rows
        }
        for o in self.observed:
            dims = dims_of.get(o.name) or ()
            if len(dims) > o.row_axis:
                names.add(dims[o.row_axis])
        for i in self.row_inputs:
            dims = dims_of.get(getattr(i.var, "name", None) or "", ()) or ()
            if isinstance(i.var, SharedVariable) and len(dims) > i.row_axis:
                names.add(dims[i.row_axis])
        return frozenset(names)

    def is_private(self, var: Variable) -> bool:
        """Whether ``var`` is a private data node: by identity; constants and raw
        ``pytensor.shared`` arrays (not ``pm.Data``) also by value (:meth:`matches_private`)."""
        if isinstance(var, SharedVariable):
            if id(var) in self._shared:
                return True
            if any(var is v for v in self.model.data_vars):
                return False  # declared public
            return isinstance(var.type, TensorType) and self.matches_private(_value_of(var))
        if isinstance(var, Constant) and isinstance(var.type, TensorType) and var.type.ndim > 0:
            return self.matches_private(np.asarray(var.data))
        return any(var is i.var for i in self.inputs if i.kind != "fixed")

    @property
    def terms(self) -> tuple[ObservedRows, ...]:
        """Every likelihood term: observed variables, then per-row potentials."""
        return self.observed + self.potentials

    def matches_private(self, value) -> bool:
        """Whether an array holds the values of a private input: itself or its transpose (as
        float64), or mostly its float values in any order, subset or precision (a float32
        copy, some rows): e.g. ``new_data`` or ``initvals`` that are the private rows."""
        arr = np.asarray(value)
        if arr.dtype.kind not in "biuf" or arr.size <= 1:
            return False
        if any(sig in self._constants for sig in _signatures(arr)):
            return True
        if arr.dtype.kind != "f":
            return False
        # continuous values do not coincide by chance; whole numbers (codes, counts, ages) may
        values = np.unique(arr.ravel().astype(np.float32))
        values = values[np.isfinite(values) & (values != np.round(values))]
        if values.size < 3:
            return False
        pool = self._private_pool
        hit = np.searchsorted(pool, values).clip(0, max(pool.size - 1, 0))
        return bool(pool.size and np.mean(pool[hit] == values) > 0.5)

    @functools.cached_property
    def _private_pool(self) -> np.ndarray:
        """Sorted distinct float32 values of the private float inputs (for value matching)."""
        floats = [
            _value_of(i.var).ravel().astype(np.float32)
            for i in (*self.inputs, *self.unread)
            if i.kind != "fixed" and _value_of(i.var).dtype.kind == "f"
        ]
        return np.unique(np.concatenate(floats)) if floats else np.zeros(0, np.float32)

    def private_nodes(
        self, outputs: Sequence[Variable], stop: Iterable[Variable] = ()
    ) -> list[Variable]:
        """The private data nodes whose values ``outputs`` read (not through ``stop``)."""
        inputs = {id(i.var) for i in (*self.inputs, *self.unread)}
        return [
            var
            for var in value_ancestors(outputs, stop)
            if (var.owner is None or id(var) in inputs) and self.is_private(var)
        ]

    def private_reads(
        self, outputs: Sequence[Variable], stop: Iterable[Variable] = ()
    ) -> list[str]:
        """Labels of the private inputs whose values ``outputs`` read (not through ``stop``)."""
        labels = {id(i.var): i.label for i in (*self.inputs, *self.unread)}
        return sorted({labels.get(id(v)) or _label(v) for v in self.private_nodes(outputs, stop)})

    def describe(self) -> str:
        """A table of what is private and how, for the user to check."""
        lines = [
            f"{self.n_rows} rows (one per person)"
            + (f", dim {self.row_dim!r}" * bool(self.row_dim))
        ]
        for p in self.potentials:
            lines.append(f"  term     potential {p.name!r} (a per-row likelihood term)")
        for i in self.inputs:
            where = f"row axis {i.row_axis}" if i.row_axis is not None else "no rows: fixed"
            lines.append(f"  {i.kind:<8} {i.label} ({where})")
        for i in self.unread:
            lines.append(f"  private  {i.label} (not read by the likelihood)")
        if self.private_deterministics:
            lines.append(
                "  deterministics dropped (read private data): "
                + ", ".join(self.private_deterministics)
            )
        return "\n".join(lines)


def _observed_rows(model: Model, row_dim: str | None) -> tuple[ObservedRows, ...]:
    if not model.observed_RVs:
        return ()
    terms = _unfolded_logp(model, model.observed_RVs)
    out = []
    for rv, term in zip(model.observed_RVs, terms, strict=True):
        value = model.rvs_to_values[rv]
        shape = _value_of(value).shape
        if len(shape) == 0:
            raise ValueError(
                f"Observed variable '{rv.name}' is a scalar: it has no rows. DP samplers need one "
                "row per person along the leading axis (or the dim `row_dim`)."
            )
        axis = 0
        if row_dim is not None:
            dims = tuple(model.named_vars_to_dims.get(rv.name, ()) or ())
            if row_dim not in dims:
                raise ValueError(
                    f"`row_dim`={row_dim!r} is not a dim of observed variable '{rv.name}' "
                    f"(its dims: {dims})."
                )
            axis = dims.index(row_dim)
        if shape[axis] == 0:
            raise ValueError(f"Observed variable '{rv.name}' has no rows (empty data).")
        if term.ndim == 0:
            raise ValueError(
                f"The log-likelihood of '{rv.name}' does not have one entry per row; DP samplers "
                "need an element-wise log-likelihood."
            )
        if term.ndim > axis and axis != 0:
            term = pt.moveaxis(term, axis, 0)
        if term.ndim > 1:
            term = term.sum(axis=tuple(range(1, term.ndim)))
        out.append(ObservedRows(rv.name, value, axis, term))
    lengths = {o.name: _value_of(o.value).shape[o.row_axis] for o in out}
    if len(set(lengths.values())) > 1:
        raise ValueError(
            f"Observed variables have different numbers of rows {lengths}; pass `row_dim=` naming "
            "the dim that indexes people."
        )
    return tuple(out)


def _unfolded_logp(model: Model, rvs: Sequence[Variable]) -> list[Variable]:
    """``model.logp(vars=rvs, sum=False)`` (``rvs`` observed), derived with every embedded array
    read as a symbol.

    PyMC's logp rewrites fold what reads constants alone: ``x - x.mean()`` of an embedded NumPy
    array becomes one new array that looks row-local, and the row-locality check could not see
    the mean any more. For built-in distributions the model's own graph of the parameters still
    shows it; inside a CustomDist's ``dist=`` function (an argument or an array it closes over)
    nothing did (review). Derived on symbols, the logp graph keeps every aggregate; the arrays
    are put back afterwards (what reads the rows alone is folded when the kernels are compiled,
    after the analysis: :meth:`pymc_dp.likelihood.PerRowLikelihood._fold_rows`)."""
    rvs = list(rvs)
    values = [model.rvs_to_values[rv] for rv in rvs]
    free = list(model.free_RVs)
    outs = [_inline_arrays(rv, free) for rv in rvs] + values
    lengths = {int(s) for v in values for s in np.shape(_value_of(v))}
    _check_no_arrays_in_inner_graphs(outs, free, lengths)
    arrays = {c: c.type() for c in graph_inputs(outs) if _swappable(c)}
    if not arrays and all(o is rv for o, rv in zip(outs, rvs, strict=False)):
        return model.logp(vars=rvs, sum=False)
    # the free variables stay themselves (their values and transforms are the model's)
    keep = {rv: rv for rv in free}
    new = graph_replace(outs, {**keep, **arrays}, strict=False)
    new_rvs, new_values = new[: len(rvs)], new[len(rvs) :]
    terms = transformed_conditional_logp(
        rvs=new_rvs,
        rvs_to_values={
            **{rv: model.rvs_to_values[rv] for rv in model.free_RVs},
            **dict(zip(new_rvs, new_values, strict=True)),
        },
        rvs_to_transforms={
            **{rv: model.rvs_to_transforms.get(rv) for rv in model.free_RVs},
            **{r: model.rvs_to_transforms.get(rv) for r, rv in zip(new_rvs, rvs, strict=True)},
        },
        jacobian=True,
    )
    back = {symbol: c for c, symbol in arrays.items()}
    return graph_replace(terms, back, strict=False) if back else list(terms)


def _inline_arrays(rv: Variable, stop: Sequence[Variable]) -> Variable:
    """``rv`` with every inner graph in its history that holds arrays inlined where PyMC's logp
    would inline it (``inline_logprob``: a CustomDist's ``dist=``, mixtures; nested ones too:
    review), so that their arrays are arrays of the outer graph. ``stop``: the free variables
    (their own graphs are priors)."""
    for _ in range(20):
        nodes = [
            v.owner
            for v in ancestors([rv], blockers=stop)
            if v.owner is not None
            and v not in stop
            and isinstance(v.owner.op, SymbolicRandomVariable)
            and v.owner.op.inline_logprob
            and any(_swappable(c) for c in value_ancestors(v.owner.op.inner_outputs))
        ]
        if not nodes:
            return rv
        swap = {}
        for node in dict.fromkeys(nodes):
            swap.update(zip(node.outputs, inline_ofg_node(node), strict=True))
        rv = graph_replace([rv], {**swap, **{f: f for f in stop}}, strict=False)[0]
    return rv


def _check_no_arrays_in_inner_graphs(outs: list[Variable], stop, lengths: set[int]) -> None:
    """An array inside an inner graph that PyMC's logp does not inline (a Truncated's base
    distribution, a scan) is folded with it where no check can see the fold (review: a
    CustomDist closing over ``X - X.mean()`` inside ``pm.Truncated``): refused."""
    outer = {id(v) for v in value_ancestors(outs, stop, scan=False)}
    hidden = [
        v
        for v in value_ancestors(outs, stop)
        if id(v) not in outer
        and _swappable(v)
        and (np.asarray(v.data).dtype.kind == "f" or lengths & set(np.shape(v.data)))
    ]
    if hidden:
        raise ValueError(
            f"The likelihood holds {_label(hidden[0])} inside the inner graph of a distribution "
            "PyMC derives as a whole (e.g. a CustomDist's dist= function under pm.Truncated): "
            "whether each row reads only its own person cannot be checked there. Pass the "
            "array to the CustomDist as an argument, or as a pm.Data container."
        )


def _swappable(var: Variable) -> bool:
    """An embedded array of more than one value (scalars are structure, and bounds such as a
    Censored's -inf are recognised by PyMC as constants)."""
    return isinstance(var, Constant) and isinstance(var.type, TensorType) and np.size(var.data) > 1


def _check_model(model: Model) -> None:
    named = [*model.data_vars, *model.basic_RVs, *model.rvs_to_values.values()]
    if any(type(v.type).__name__ == "XTensorType" for v in named):
        raise ValueError(
            "The model uses pymc.dims (named-dimension XTensor variables), which pymc-dp does "
            "not read by rows yet: write it with pm.* distributions and pm.Data(..., dims=...)."
        )
    observed = {rv.name for rv in model.observed_RVs}
    imputed = [
        rv.name
        for rv in model.free_RVs
        if rv.name.endswith("_unobserved")
        and rv.name[: -len("_unobserved")] + "_observed" in observed
    ]
    if imputed:
        base = [n[: -len("_unobserved")] for n in imputed]
        raise ValueError(
            f"Observed variable(s) {base} contain missing values (NaN): missing values are "
            "imputed by PyMC, which reads them exactly. Drop or impute them beforehand."
        )
    for rv in model.observed_RVs:
        value = model.rvs_to_values[rv]
        nodes = list(ancestors([value]))
        if any(
            n.owner is not None and isinstance(n.owner.op, MinibatchOp | RandomVariable)
            for n in nodes
        ):
            raise ValueError(
                f"Observed variable '{rv.name}' reads pm.Minibatch data. pm.Minibatch draws rows "
                "with a graph RNG that no privacy accountant sees: give the full data and use a "
                "minibatch DP step (pdp.DPMinibatchPenalty or pdp.DPBarker), which draw and "
                "account for the batches."
            )
    discrete = [v.name for v in model.value_vars if v.dtype in discrete_dtypes]
    if discrete:
        raise ValueError(
            f"DP samplers need continuous free variables; discrete free variables {discrete} "
            "are not supported (marginalise them out, e.g. with pymc-extras)."
        )


def _candidate_axes(value: np.ndarray, n: int) -> list[int]:
    if value.size <= 1:
        return []
    return [a for a, s in enumerate(value.shape) if s == n]


def _dims_axis(model: Model, var: Variable, row_dim: str | None, obs_dim: str | None) -> int | None:
    if not isinstance(var, SharedVariable) or not var.name:
        return None
    dims = tuple(model.named_vars_to_dims.get(var.name, ()) or ())
    for dim in (row_dim, obs_dim):
        if dim is not None and dim in dims:
            return dims.index(dim)
    return None


def _forward_inputs(model: Model, rvs: Sequence[Variable]) -> list[Variable]:
    """What the model's own graph of ``rvs`` reads, cut at the free variables (their priors)."""
    free = [*model.free_RVs, *model.value_vars]
    return value_ancestors([i for rv in rvs for i in rv.owner.inputs], free)


def _shared_ids(inputs: Sequence[DataInput]) -> frozenset[int]:
    return frozenset(id(i.var) for i in inputs if isinstance(i.var, SharedVariable))


def _constant_signatures(inputs: Sequence[DataInput]) -> frozenset[tuple]:
    """Value signatures of the private data, so that a constant copy of it is recognised (the
    values of private pm.Data containers included)."""
    return frozenset(
        sig
        for i in inputs
        if i.var.owner is None and (i.kind != "fixed" or isinstance(i.var, SharedVariable))
        for sig in _signatures(_value_of(i.var))
    )


class _Collector:
    """Classifies the data nodes of graphs: observed, per-row (with its axis) or fixed."""

    def __init__(self, model, n, row_dim, obs_dim, row_axes, public, validate) -> None:
        self.model, self.n, self.row_dim, self.obs_dim = model, n, row_dim, obs_dim
        self.row_axes, self.public, self.validate = row_axes, public, validate

    def classify(self, var: Variable, same_as: DataInput | None = None) -> DataInput:
        n, value, label = self.n, _value_of(var), _label(var)
        axis = _dims_axis(self.model, var, self.row_dim, self.obs_dim)
        if axis is None and same_as is not None and value.shape == _value_of(same_as.var).shape:
            axis = same_as.row_axis
        if axis is None and isinstance(var, SharedVariable) and var.name in self.row_axes:
            axis = int(self.row_axes[var.name])
            if not -value.ndim <= axis < value.ndim or value.shape[axis] != n:
                raise ValueError(
                    f"`row_axes` gives axis {axis} for {label} of shape {value.shape}, which "
                    f"does not have the row length n = {n}."
                )
            axis %= value.ndim
        if axis is None:
            candidates = _candidate_axes(value, n)
            if len(candidates) > 1 and not self.validate:
                return DataInput(var, label, "row", None)  # private; its rows are not needed
            if len(candidates) > 1:
                raise ValueError(
                    f"{label} reaches the likelihood and has several axes of the row length "
                    f"n = {n}: which one indexes people is ambiguous. Give it dims (pm.Data with "
                    "dims including the observed variable's row dim) or `row_axes={name: axis}`."
                )
            axis = candidates[0] if candidates else None
        return DataInput(var, label, "row" if axis is not None else "fixed", axis)

    def __call__(
        self, observed: Sequence[tuple[Variable, str, int]], graphs: Sequence[list[Variable]]
    ) -> list[DataInput]:
        inputs = [DataInput(value, label, "observed", axis) for value, label, axis in observed]
        seen = {id(i.var) for i in inputs}

        def add(var: Variable, same_as: DataInput | None = None) -> None:
            if id(var) in seen or not _is_data_node(var) or _value_of(var).size <= 1:
                return  # scalars and length-1 arrays are structure, not data
            if isinstance(var, SharedVariable) and var.name in self.public:
                return
            seen.add(id(var))
            inputs.append(self.classify(var, same_as))

        for obs in inputs[: len(observed)]:  # data under observed values, e.g. Cast(pm.Data)
            for var in ancestors([obs.var]):
                add(var, obs)
        for nodes in graphs:
            for var in nodes:
                add(var)
        return inputs


def analyse(
    model: Model | None = None,
    *,
    row_dim: str | None = None,
    row_axes: Mapping[str, int] | None = None,
    public: Iterable[str] = (),
    validate: bool = True,
) -> ModelGraph:
    """Read a model's private inputs, rows and the variables that read them.

    Parameters
    ----------
    model : pm.Model, optional
        Default: the model on the context stack.
    row_dim : str, optional
        The model dim that indexes people, when the observed variables' leading axes differ.
    row_axes : dict, optional
        ``{pm.Data name: axis}`` for private inputs whose row axis cannot be inferred (e.g. a
        square array, or covariates stored transposed without dims).
    public : iterable of str
        Names of ``pm.Data`` containers that are public (e.g. a grid, per-column scales); they
        are neither private nor checked.
    validate : bool
        Refuse what DP sampling cannot run (the refusals in the module docstring: priors reading
        data, non-finite or out-of-support data, a likelihood that is not row-local, ambiguous
        row axes). ``False`` only classifies what is private (for filtering outputs).

    Raises
    ------
    ValueError
        For every refusal listed in the module docstring, naming the variable or input, never
        printing data values or row indices.
    DataBoundaryError
        When PyMC or PyTensor fail while the graphs are evaluated on the rows (their messages
        may print values; withheld).
    """
    from pymc_dp.boundary import guarded

    args = (modelcontext(model), row_dim, row_axes, public, validate)
    return guarded("Analysing the model", _analyse, *args)


def _analyse(model: Model, row_dim, row_axes, public, validate: bool) -> ModelGraph:
    """:func:`analyse` (its arguments, in order), outside the data boundary."""
    if validate:
        _check_model(model)
    public = set(public)
    row_axes = dict(row_axes or {})
    unknown = (public | set(row_axes)) - {v.name for v in model.data_vars}
    if unknown:
        raise ValueError(
            f"`public`/`row_axes` name {sorted(unknown)}, which are not pm.Data containers."
        )
    observed = _observed_rows(model, row_dim)
    potentials = _row_potentials(model, observed, row_dim, public)
    terms = observed + potentials
    if not terms:
        raise ValueError(
            "The model has no observed variable and no per-row pm.Potential reading data: there "
            "is no private data to protect. Use pm.sample without a DP step."
        )
    first = terms[0]
    n = _rows_of(first) if first.value is not None else _shape_at(model, first.term)[0]
    rows = first.term
    for o in terms[1:]:
        rows = rows + o.term
    first_dims = tuple(model.named_vars_to_dims.get(first.name, ()) or ())
    obs_dim = first_dims[first.row_axis] if first_dims else None
    collect = _Collector(model, n, row_dim, obs_dim, row_axes, public, validate)
    inputs = collect(
        [(o.value, f"observed {o.name!r}", o.row_axis) for o in observed],
        # the logp graph (whose rewrites can copy constants, e.g. transposed), then the model's
        # own graph of the observed variables
        [value_ancestors([rows]), _forward_inputs(model, model.observed_RVs)],
    )
    if validate:
        _check_no_data_in_scan_bodies(model, rows, inputs)
    checked = _row_local_checks(
        [o.term for o in terms], {i.var for i in inputs if i.row_axis is not None}
    )
    observed = tuple(replace(o, term=t) for o, t in zip(observed, checked, strict=False))
    potentials = tuple(
        replace(o, term=t) for o, t in zip(potentials, checked[len(observed) :], strict=True)
    )
    terms = observed + potentials
    rows = functools.reduce(lambda a, b: a + b, [o.term for o in terms])
    unread = _unread_containers(model, inputs, collect)
    graph = ModelGraph(
        model=model,
        n_rows=n,
        row_dim=row_dim,
        observed=observed,
        inputs=tuple(inputs),
        rows=rows,
        prior=_prior(model, {p.name for p in potentials}),
        private_deterministics=(),
        likelihood_vars=(),
        potentials=potentials,
        unread=unread,
        _shared=_shared_ids([*inputs, *unread]),
        _constants=_constant_signatures([*inputs, *unread]),
    )
    graph.private_deterministics = _private_deterministics(graph)
    graph.likelihood_vars = tuple(v.name for v in model.value_vars if v in set(ancestors([rows])))
    if validate:
        _check_inputs_hold_no_other_rows(graph)
        _check_priors_and_potentials(graph)
        _check_initvals(graph)
        _check_finite(graph)
        _check_support(graph)
        _check_row_local(graph)
        _check_rows_stay_rows(graph)
    return graph


def _conjuncts(cond: Variable) -> list[Variable]:
    """The conditions PyMC's ``check_parameters`` joined into one scalar,
    ``all([all(c_1), all(c_2), ...])``, each before its ``all``; else ``[cond]``."""
    node = cond.owner
    if node is not None and isinstance(node.op, ScalarFromTensor):
        return _conjuncts(node.inputs[0])
    if node is not None and isinstance(node.op, CAReduce) and isinstance(node.op.scalar_op, AND):
        inner = node.inputs[0]
        if node.op.axis is None or tuple(node.op.axis) == tuple(range(inner.ndim)):
            if inner.owner is not None and isinstance(inner.owner.op, MakeVector):
                return [c for part in inner.owner.inputs for c in _conjuncts(part)]
            return _conjuncts(inner) if inner.ndim == 0 else [inner]  # all(all(s > 0))
    return [cond]


def _broadcasts(c: Variable, expr: Variable) -> bool:
    """Whether ``c`` broadcasts against ``expr`` from the trailing axes without enlarging it
    (static shapes; an unknown length is taken to match)."""
    if c.ndim > expr.ndim:
        return False
    for a, b in zip(reversed(c.type.shape), reversed(expr.type.shape), strict=False):
        if a is not None and a != 1 and b is not None and a != b:
            return False
    return True


def _row_local_checks(terms: list[Variable], rows: set) -> list[Variable]:
    """``terms`` with every parameter check that reads the rows applied row by row.

    PyMC checks a distribution's parameters over all rows at once, ``switch(all(conditions),
    logp, -inf)`` once compiled: one row whose parameter leaves its domain (a per-row sd of 0, a
    probability ``c_i sigmoid(a)`` above 1 at some ``a``) made every row's term -inf, so one
    person changed all n terms (the kernels' sensitivity assumes one), and the row-locality check
    refused such models with PyTensor's withheld error. A condition that reads an input with
    rows (``rows``) becomes ``switch(condition, logp, -inf)``, broadcast against the term from
    the trailing axes as PyMC broadcast the parameters with the value (axes beyond the term's, a
    multivariate parameter's core axes, reduced), so it holds per row. A condition that is
    provably true for finite inputs (``0 <= sigmoid(eta) <= 1``) is dropped: a NaN parameter
    row (the log of a negative mean) then gives a NaN term, which the kernels bound, instead of
    every row's -inf (review). The others (public parameters) stay one check. Checks nested in
    checks (a mixture's weights around its components') are rewritten from the inside out.
    Whether the result is row-local is still decided by the row-locality check.
    """
    done: dict = {}
    for node in io_toposort(graph_inputs(terms), terms):
        op = node.op
        if not (isinstance(op, CheckParameterValue) and op.can_be_replaced_by_ninf):
            continue
        # what this check wraps and tests, with the checks inside it already rewritten
        expr, *conds = graph_replace(list(node.inputs), done, strict=False) if done else node.inputs
        parts = [c for cond in conds for c in _conjuncts(cond)]
        per_row, whole, dropped = [], [], False
        for c in parts:
            if provably_true(c):
                dropped = True
            elif rows & set(ancestors([c])):
                if c.ndim > expr.ndim:  # a multivariate parameter's core axes
                    c = pt.all(c, axis=tuple(range(expr.ndim, c.ndim)))
                if c.ndim == 0 or not _broadcasts(c, expr):
                    # one condition for every row at once (check_parameters(lp, min(s) > 0)):
                    # one person's row would turn every row's term -inf (review)
                    raise ValueError(
                        f"A parameter check in the log-likelihood ({op.msg or 'a check'!r}) "
                        "reads the rows but holds for all of them at once: one person's row "
                        "would change every row's term. Write the condition per row (`s > 0`, "
                        "not `pt.all(s > 0)` or `pt.min(s) > 0`)."
                    )
                per_row.append(c)
            else:
                whole.append(c)
        if not per_row and not dropped and expr is node.inputs[0]:
            continue
        if whole:
            expr = CheckParameterValue(op.msg, True)(
                expr, pt.all(pt.stack([pt.all(c) for c in whole]))
            )
        out = expr
        if per_row:
            ok = functools.reduce(pt.and_, per_row)
            out = pt.switch(ok, expr, -np.inf).astype(expr.dtype)
        done[node.outputs[0]] = out
    if not done:
        return list(terms)
    return list(graph_replace(list(terms), done, strict=False))


def _check_no_data_in_scan_bodies(model: Model, rows: Variable, inputs: list[DataInput]) -> None:
    """Data used inside a ``scan`` body of the likelihood cannot be split by rows (the kernels
    and checks see only the scan's outer inputs)."""
    graphs = [rows, *[i for rv in model.observed_RVs for i in rv.owner.inputs]]
    stop = [*model.free_RVs]
    outer = {id(v) for v in value_ancestors(graphs, stop, scan=False)}
    inner = {id(v) for v in value_ancestors(graphs, stop)} - outer
    hidden = [i.label for i in inputs if id(i.var) in inner]
    if hidden:
        raise ValueError(
            f"The likelihood reads {', '.join(hidden)} inside a scan body (or another inner "
            "graph): its rows cannot be clipped and checked one by one there. Pass the data to "
            "scan as a sequence (sequences=[...])."
        )


def _rows_of(term: ObservedRows) -> int:
    return int(_value_of(term.value).shape[term.row_axis])


def _reads_data(
    graph: Variable,
    private: frozenset[int],
    signatures: frozenset[tuple],
    rows: int | None,
    public: frozenset[int] = frozenset(),
) -> bool:
    """Whether ``graph`` reads a private container, an observed value, a copy of either, or an
    array embedded otherwise (a NumPy constant or a raw ``pytensor.shared``): float arrays, and
    integer arrays with an axis of ``rows`` (counts of the people). In a potential that is the
    idiom of a custom likelihood over NumPy data; public constants go in a ``pm.Data``
    declared public (``public``: their ids)."""
    for var in value_ancestors([graph]):
        if not _is_data_node(var) or id(var) in public:
            continue
        if id(var) in private:
            return True
        value = _value_of(var)
        if value.ndim == 0 or value.size <= 1:
            continue
        if value.dtype.kind == "f" or (rows is not None and rows in value.shape):
            return True
        if any(sig in signatures for sig in _signatures(value)):
            return True
    return False


def _row_potentials(
    model: Model,
    observed: tuple[ObservedRows, ...],
    row_dim: str | None,
    public: set[str],
) -> tuple[ObservedRows, ...]:
    """The potentials that read private data with one entry per row: likelihood terms.

    What is private here is what :func:`analyse` will call private before it looks at the
    likelihood: observed values, every ``pm.Data`` container not declared public, and float
    arrays embedded as constants (see :func:`_reads_data`). A potential that reads private data
    without rows stays out and is refused by the checks.
    """
    if not model.potentials:
        return ()
    shared = [v for v in model.data_vars if v.name not in public]
    declared = frozenset(id(v) for v in model.data_vars if v.name in public)
    values = [model.rvs_to_values[rv] for rv in model.observed_RVs]
    private = frozenset(id(v) for v in (*shared, *values))
    arrays = [_value_of(v) for v in (*shared, *values)]
    signatures = frozenset(sig for a in arrays if a.size > 1 for sig in _signatures(a))
    n = _rows_of(observed[0]) if observed else None
    out = []
    graphs = model.replace_rvs_by_values(model.potentials)
    point = compiling.initial_point(model)
    for pot, g in zip(model.potentials, graphs, strict=True):
        if g.ndim == 0:
            continue
        dims = tuple(model.named_vars_to_dims.get(pot.name, ()) or ())
        axis = dims.index(row_dim) if row_dim is not None and row_dim in dims else 0
        shape = _shape_at(model, g, point)
        rows = shape[axis] if n is None else n
        if not _reads_data(g, private, signatures, rows, declared):
            continue
        if shape[axis] < 1 or (n is not None and shape[axis] != n):
            continue
        term = pt.moveaxis(g, axis, 0) if axis else g
        if term.ndim > 1:
            term = term.sum(axis=tuple(range(1, term.ndim)))
        out.append(ObservedRows(pot.name, None, axis, term))
    lengths = {_shape_at(model, o.term, point)[0] for o in out}
    if n is None and len(lengths) > 1:
        return ()  # no common row count: refused as potentials without rows
    return tuple(out)


def _shape_at(model: Model, g: Variable, point: Mapping | None = None) -> tuple[int, ...]:
    if None not in g.type.shape:
        return tuple(int(s) for s in g.type.shape)
    point = compiling.initial_point(model) if point is None else point
    fn = compiling.function(model.value_vars, g.shape, mode=_CHECK_MODE, on_unused_input="ignore")
    args = [np.asarray(point[v.name], dtype=v.dtype) for v in model.value_vars]
    return tuple(int(s) for s in fn(*args))


def _unread_containers(
    model: Model, inputs: Sequence[DataInput], collect: _Collector
) -> tuple[DataInput, ...]:
    """Private ``pm.Data`` containers the likelihood does not read (rows where they can be
    told; an ambiguous axis is no error here: nothing is computed from their rows)."""
    seen = {id(i.var) for i in inputs}
    out = []
    for var in model.data_vars:
        if id(var) in seen or var.name in collect.public:
            continue
        value = _value_of(var)
        axis = _dims_axis(model, var, collect.row_dim, collect.obs_dim)
        if axis is None and var.name in collect.row_axes:
            axis = int(collect.row_axes[var.name]) % max(value.ndim, 1)
        if axis is None:
            candidates = _candidate_axes(value, collect.n)
            axis = candidates[0] if len(candidates) == 1 else None
        out.append(DataInput(var, _label(var), "unread", axis))
    return tuple(out)


def analyse_simulator(model: Model, rv: Variable) -> ModelGraph:
    """What is private in a model whose likelihood is the ``pm.Simulator`` ``rv`` (ABCDP).

    The observed value (rows on its leading axis) and the data its simulator reads are private
    by the same rule as :func:`analyse`; there is no per-row log-likelihood (``rows`` is None).
    """
    value = model.rvs_to_values[rv]
    n = int(_value_of(value).shape[0])
    collect = _Collector(model, n, None, None, {}, set(), validate=False)
    inputs = collect([(value, f"observed {rv.name!r}", 0)], [_forward_inputs(model, [rv])])
    unread = _unread_containers(model, inputs, collect)
    graph = ModelGraph(
        model=model,
        n_rows=n,
        row_dim=None,
        observed=(),
        inputs=tuple(inputs),
        rows=None,
        prior=None,
        private_deterministics=(),
        likelihood_vars=(),
        unread=unread,
        _shared=_shared_ids([*inputs, *unread]),
        _constants=_constant_signatures([*inputs, *unread]),
    )
    graph.private_deterministics = _private_deterministics(graph)
    return graph


def _prior(model: Model, row_potentials: set[str] = frozenset()) -> Variable:
    """Log prior with the transforms' Jacobians and the potentials that are not row terms."""
    terms = [model.logp(vars=model.free_RVs, jacobian=True)]
    pots = [p for p in model.potentials if p.name not in row_potentials]
    terms += [pt.sum(p) for p in model.replace_rvs_by_values(pots)]
    return pt.add(*terms) if len(terms) > 1 else terms[0]


def _mostly_in(values: np.ndarray, data: np.ndarray) -> bool:
    """Most of many distinct float values are values of ``data``: a copy, a lag or a subset of
    it (continuous values do not coincide by chance; coded values such as 0/1 are skipped)."""
    distinct = np.unique(values)
    if distinct.size < max(3, values.size // 2):
        return False
    return bool(np.mean(np.isin(values, data)) > 0.5)


def _columns(value: np.ndarray, axis: int) -> list[np.ndarray]:
    v = np.moveaxis(value, axis, 0)
    return list(v.reshape(v.shape[0], -1).T)


def _check_inputs_hold_no_other_rows(graph: ModelGraph) -> None:
    """Inputs must not carry other people's data into a row: not without rows (every row would
    read them), and a per-row covariate must not be a shifted copy of an observed variable (a
    lag puts one person into two rows). The second check compares float values (defence in
    depth: it cannot see every transformation)."""
    observed = [
        col
        for i in graph.inputs
        if i.kind == "observed" and _value_of(i.var).dtype.kind == "f"
        for col in _columns(_value_of(i.var), i.row_axis)
    ]
    observed_values = np.concatenate(observed) if observed else np.zeros(0)
    for i in graph.inputs:
        value = _value_of(i.var)
        if i.kind != "row" or value.dtype.kind != "f" or not observed:
            continue
        for col in _columns(value, i.row_axis):
            aligned = any(np.array_equal(col, o) for o in observed)
            if not aligned and _mostly_in(col, observed_values):
                raise ValueError(
                    f"{i.label} holds values of the observed data in other rows (a lag or a "
                    "shift): one person would enter two rows' terms, and the per-row privacy "
                    "analysis would not hold. Lagged data cannot be privatised row by row."
                )
    private_floats: np.ndarray | None = None
    for i in graph.inputs:
        if i.kind != "fixed":
            continue
        if isinstance(i.var, SharedVariable):
            raise ValueError(
                f"{i.label} reaches the likelihood but has no axis of the row length n = "
                f"{graph.n_rows}: every row's term would read all of it. If it holds data about "
                "people, its rows must line up with the observed rows (give it the row dim, or "
                f"`row_axes`); if it is public (e.g. a grid or known scales), declare it with "
                f"public=[{i.var.name!r}]."
            )
        value = _value_of(i.var)
        if value.dtype.kind != "f":
            continue
        if private_floats is None:
            private_floats = np.concatenate(
                [
                    _value_of(j.var).ravel()
                    for j in graph.inputs
                    if j.kind != "fixed" and _value_of(j.var).dtype.kind == "f"
                ]
                or [np.zeros(0)]
            )
        if private_floats.size and _mostly_in(value.ravel(), private_floats):
            raise ValueError(
                f"{i.label} reaches the likelihood without rows, and every value in it is a "
                "value of the private data (a lag, a subset, or a copy): every row's term would "
                "read other people's data. Lagged or aggregated data cannot be privatised row by "
                "row."
            )


def _check_priors_and_potentials(graph: ModelGraph) -> None:
    model = graph.model
    free = list(model.free_RVs)
    terms = model.logp(vars=free, sum=False) if free else []
    for rv, term in zip(free, terms, strict=True):
        # the model's own prior graph (before logp rewrites fold constants) and the logp term
        others = [v for v in free if v is not rv]
        reads = graph.private_reads(rv.owner.inputs, stop=others) + graph.private_reads([term])
        if reads:
            raise ValueError(
                f"The prior of free variable '{rv.name}' reads private data "
                f"({', '.join(sorted(set(reads)))}). A prior is evaluated exactly, without noise: "
                "write it with public constants (e.g. not mu=y.mean()), or declare a container "
                "that holds no data about people public=[...]."
            )
    terms = {p.name for p in graph.potentials}
    pots = [p for p in model.potentials if p.name not in terms]
    private = graph._shared | {id(i.var) for i in graph.inputs if i.kind == "observed"}
    declared = frozenset(id(v) for v in model.data_vars) - graph._shared
    for pot, g in zip(pots, model.replace_rvs_by_values(pots), strict=True):
        reads = graph.private_reads([pot], stop=free) + graph.private_reads([g])
        if not reads and _reads_data(g, private, graph._constants, graph.n_rows, declared):
            reads = ["an array embedded as a constant"]
        if reads:
            raise ValueError(
                f"Potential '{pot.name}' reads private data ({', '.join(sorted(set(reads)))}) "
                f"but does not have one entry per row (n = {graph.n_rows} on its leading axis, "
                "or the dim `row_dim`). A per-row potential is a likelihood term, clipped and "
                "privatised like an observed variable; a summed one cannot be: return the "
                "per-row log-likelihood (do not sum it); arrays that hold no data about people "
                "go in pm.Data containers declared public=[...]."
            )


def _check_initvals(graph: ModelGraph) -> None:
    """Initial values must be public: a chain (and the private Newton walk) starts there, and a
    first move that is rejected releases the starting point exactly."""
    model = graph.model
    for rv, init in model.rvs_to_initial_values.items():
        if init is None or isinstance(init, str):
            continue
        if isinstance(init, Variable):
            reads = graph.private_reads([init], stop=model.free_RVs)
        else:
            reads = ["a copy of the private data"] if graph.matches_private(init) else []
        if reads:
            raise ValueError(
                f"The initial value of free variable '{rv.name}' reads private data "
                f"({', '.join(sorted(set(reads)))}). Chains start from it and an unmoved chain "
                "releases it exactly: give a public number (or none)."
            )


def _private_deterministics(graph: ModelGraph) -> tuple[str, ...]:
    model = graph.model
    if not model.deterministics:
        return ()
    graphs = model.replace_rvs_by_values(model.deterministics)
    return tuple(
        det.name
        for det, g in zip(model.deterministics, graphs, strict=True)
        if graph.private_reads([det], stop=model.free_RVs) or graph.private_reads([g])
    )


def _check_finite(graph: ModelGraph) -> None:
    for i in graph.inputs:
        value = _value_of(i.var)
        if np.issubdtype(value.dtype, np.inexact) and not np.all(np.isfinite(value)):
            raise ValueError(
                f"Data {i.label} contains NaN or inf values; DP samplers need finite data "
                "(impute, drop or clip rows before modelling)."
            )


def _check_support(graph: ModelGraph) -> None:
    """Every observed value inside its distribution's support, checked at the initial point."""
    model = graph.model
    point = compiling.initial_point(model)
    fn = compiling.function(
        model.value_vars,
        [o.term for o in graph.terms],
        mode=_CHECK_MODE,
        on_unused_input="ignore",
    )
    args = [np.asarray(point[v.name], dtype=v.dtype) for v in model.value_vars]
    try:
        with np.errstate(all="ignore"):  # a row's overflow must not warn
            values = fn(*args)
    except ParameterValueError:
        # a per-row parameter outside its domain (a row's sigma of 0): PyTensor's message would
        # print the values, so the term and its checks' conditions (graph text) are named
        raise ValueError(_parameter_refusal(graph, point)) from None
    for o, v in zip(graph.terms, values, strict=True):
        if not np.all(np.isfinite(v)):
            raise ValueError(support_refusal(o))


def support_refusal(term: ObservedRows) -> str:
    """The refusal of a term with a row outside its support (one text, in memory or on Dask)."""
    what = "Observed variable" if term.value is not None else "Per-row potential"
    return (
        f"{what} '{term.name}' has values outside the support of its distribution, or per-row "
        "parameters outside their domain (a scale of 0, a probability above 1): its "
        "log-density is -inf or NaN at the model's initial point. Correct or drop those rows "
        "before modelling: one such row would change how the sampler behaves, which no privacy "
        "accountant sees."
    )


def _parameter_refusal(graph: ModelGraph, point: dict) -> str:
    """The refusal of :func:`_check_support` for terms whose parameter checks fail: which terms
    (each evaluated alone) and the conditions their checks state, never a value."""
    model = graph.model
    args = [np.asarray(point[v.name], dtype=v.dtype) for v in model.value_vars]
    failing = []
    for o in graph.terms:
        fn = compiling.function(
            model.value_vars, o.term, mode=_CHECK_MODE, on_unused_input="ignore"
        )
        try:
            with np.errstate(all="ignore"):
                fn(*args)
        except ParameterValueError:
            conditions = sorted(
                {
                    str(node.op.msg)
                    for node in io_toposort(model.value_vars, [o.term])
                    if isinstance(node.op, CheckParameterValue)
                }
            )
            failing.append(f"'{o.name}' ({', '.join(conditions) or 'a parameter check'})")
    names = ", ".join(failing) or "a likelihood term"
    return (
        f"Per-row parameters of {names} are outside their domain in some row (a scale of 0, a "
        "probability above 1: the condition named fails). Correct or drop those rows before "
        "modelling: one such row would change how the sampler behaves, which no privacy "
        "accountant sees."
    )


def _distinct_rows(value: np.ndarray, axis: int, rng: np.random.Generator) -> np.ndarray:
    if value.dtype.kind != "f" or value.shape[axis] < 2:
        return value
    first = np.take(value, [0], axis=axis)
    if not np.all(value == first):
        return value
    return first + rng.standard_normal(value.shape).astype(value.dtype)


def _check_row_local(graph: ModelGraph) -> None:
    """Replacing one person's row may change that row's log-likelihood term only.

    Evaluated on the data with row ``j`` of every per-row input replaced by row ``k``, and (float
    inputs) by a far-off value, for pairs from a fixed public generator at public parameter
    points, then with half the people changed at once, and with every row of one input made
    like its largest (smallest) person's: every other term (hers) must stay the same, to the
    last bits (a row-local graph computes each row from that row alone). Also checked on the
    model's own graph of the observed variables' parameters, before PyMC's rewrites fold
    ``X - X.mean()`` of an embedded NumPy array into a new constant that looks row-local. A
    likelihood that standardises by ``X.mean()`` or reads ``y[i - 1]`` fails.
    """
    trials = _RowTrials(graph)
    if trials.swaps() or trials.aggregates():
        _not_row_local(graph, trials.inputs)


class _RowTrials:
    """The trials of :func:`_check_row_local`: every other row's term compared on the rows and on
    moved rows (and the model's graph of the observed variables' parameters with them), at
    points and rows drawn from one public generator, in a fixed order."""

    def __init__(self, graph: ModelGraph) -> None:
        model = graph.model
        self.inputs = inputs = [i for i in graph.row_inputs if i.var.owner is None]
        syms = [i.var.type() for i in inputs]
        swap = dict(zip([i.var for i in inputs], syms, strict=True))
        self.fn = compiling.function(
            [*model.value_vars, *syms],
            clone_replace(graph.rows, swap),
            mode=_CHECK_MODE,
            on_unused_input="ignore",
        )
        self.params, self.axes = _forward_parameters(graph, swap, syms)
        self.rng = rng = np.random.default_rng(20261123)  # public: which rows, which points
        # rows that are all alike (the placeholders of rows bound later, pdp.sample(data=))
        # cannot show a dependence between rows: check the structure on public random rows
        self.values = [_distinct_rows(_value_of(i.var), i.row_axis, rng) for i in inputs]
        self.value_vars = model.value_vars
        self.point = compiling.initial_point(model)
        self.n = n = graph.n_rows
        self.half = rng.random(n) < 0.5
        # one shift for every float input of a row keeps their order (a Censored's lower <=
        # upper with per-row bounds: moved apart by their own sizes they crossed, review)
        values = self.values
        largest = [
            np.abs(v[np.isfinite(v)]).max(initial=0.0) for v in values if v.dtype.kind == "f"
        ]
        self.shift = 1e3 * (1.0 + min(float(max(largest, default=0.0)), 1e297))  # finite

    def changed(self, args, moved, touched) -> bool:
        """Whether a term (or a parameter) of a row not in ``touched`` moved with ``moved``."""
        fn, params = self.fn, self.params
        with np.errstate(all="ignore"):
            pairs = [(fn(*args, *self.values), fn(*args, *moved), 0)]
            if params is not None:
                try:
                    before, after = params(*args, *self.values), params(*args, *moved)
                    forward = list(zip(before, after, self.axes, strict=True))
                except Exception:  # noqa: BLE001 - review: a far-off row overflowed a random
                    # draw in the parameters' graph (a zero-inflated Poisson's exp(eta)): a
                    # refusal that depended on that row; its terms above are still compared
                    forward = []
                pairs += forward
        return any(_other_rows_changed(a, b, axis, touched, self.n) for a, b, axis in pairs)

    def _args(self, jitter: float) -> list:
        """The initial point, continuous variables jittered (the draws are made either way)."""
        rng, point = self.rng, self.point
        return [
            np.asarray(point[v.name], dtype=v.dtype)
            + (jitter * rng.standard_normal(np.shape(point[v.name])) if "float" in v.dtype else 0)
            for v in self.value_vars
        ]

    def swaps(self) -> bool:
        """One person replaced by another, or (float rows) far off; then a random half of the
        people changed at once, and the other half: a row that reads any particular other
        person (the max, person 17) sees one of them move."""
        rng, n, inputs, values = self.rng, self.n, self.inputs, self.values
        for trial in range(8):
            # at the initial point a coefficient may be 0 and hide a dependence: jitter
            args = self._args(0.3 * (trial % 2 or trial >= 6))
            if trial < 6:
                j, k = (int(r) for r in rng.choice(n, size=2, replace=False)) if n > 1 else (0, 0)
                touched = np.arange(n) == j
                shift = self.shift if trial >= 4 else 0.0
                moved = [
                    _replace_row(v, i.row_axis, j, k, shift, up=trial == 4)
                    for i, v in zip(inputs, values, strict=True)
                ]
            else:
                touched = self.half if trial == 6 else ~self.half
                moved = [
                    _change_rows(v, i.row_axis, touched, rng, self.shift, up=trial == 6)
                    for i, v in zip(inputs, values, strict=True)
                ]
            if self.changed(args, moved, touched):
                return True
        return False

    def aggregates(self) -> bool:
        """Aggregates no swap of people moves, at one jittered point: :meth:`_all_like`, then
        :meth:`_beyond`."""
        args = self._args(0.3)
        return self._all_like(args) or self._beyond(args)

    def _all_like(self, args) -> bool:
        """One input's rows all made like its largest (smallest) person's, who alone stays as
        she was: an aggregate of integer codes with ties (g - g.min()), which no swap of people
        moves, moves, and her term with it (review). A model that cannot evaluate such rows (a
        Censored's per-row lower bounds all made like the largest above the upper ones) skips
        it."""
        values, n = self.values, self.n
        for k, inp in enumerate(self.inputs):
            for largest in (True, False):
                j, like = _all_like(values[k], inp.row_axis, largest)
                moved = [*values[:k], like, *values[k + 1 :]]
                try:
                    moved_others = self.changed(args, moved, np.arange(n) != j)
                except Exception:  # noqa: BLE001 - evaluated on rows the model may not accept
                    continue
                if moved_others:
                    return True
        return False

    def _beyond(self, args) -> bool:
        """One person's integer row moved beyond every other's (review: a condition on all
        counts, all(c <= 2), that no swap of people moves); a model that cannot evaluate such a
        row (an index beyond its range) skips this trial, which only adds to the ones above."""
        values, n = self.values, self.n
        for k, inp in enumerate(self.inputs):
            if values[k].dtype.kind not in "iu" or n < 2:
                continue
            j = int(self.rng.integers(n))
            # column by column: a group id beyond its range fails, a count in the next column
            # must still be tried; above and below (all(c >= 1) flips below: review)
            for beyond in _beyond(values[k], inp.row_axis, j):
                moved = [*values[:k], beyond, *values[k + 1 :]]
                try:
                    moved_others = self.changed(args, moved, np.arange(n) == j)
                except Exception:  # noqa: BLE001 - evaluated on a row the model may not accept
                    continue
                if moved_others:
                    return True
        return False


def _check_rows_stay_rows(graph: ModelGraph) -> None:
    """Every step of the per-row graph keeps the rows whole and in order.

    The trials of :func:`_check_row_local` see a dependence on other rows only where moving
    rows moves it: a flag ``max(X) > 1e5``, ``any(|X - t| < 1e-9)`` (is person t in the data?)
    or ``|X[::-1] - t| < 1e-9`` that no trial reaches shifts other rows' terms for one person
    (reviews). This is structural. The graph is evaluated on the first ``m`` people for two
    ``m`` (an axis whose length follows ``m`` is a row axis), and on people ``1..m`` against
    ``0..m-1``. A step that reads the data is refused if its output has fewer row axes than an
    input (a sum, max or any over people, ``X.T @ X``, ``X[0]``), if it sorts or accumulates
    along a row axis (a scan over people that carries a state), or if its rows are not the
    same person's on both subsets (a reversal, a
    roll, a lag). Shapes (``X.shape[0]``, the public row count) are not reads; what meets the
    data with an axis of length n without reading it (a random effect per person, centred or
    not; ``pt.zeros(n)``) is taken with the rows."""
    model, n = graph.model, graph.n_rows
    if n < 4:
        return
    m = min(n - 1, _STRUCTURE_ROWS)
    point = compiling.initial_point(model)
    args = [np.asarray(point[v.name], dtype=v.dtype) for v in model.value_vars]
    rows = _without_data_checks(graph.rows, model.value_vars)
    data = set(graph.batch_inputs)
    reads = _reading(rows, data)
    boundary = [
        i
        for node in io_toposort(graph_inputs([rows]), [rows])
        if any(o in reads for o in node.outputs)
        for i in node.inputs
        if i not in reads
        and isinstance(i.type, TensorType)
        and i.type.ndim > 0
        # not sized by the data (an Alloc to x.shape[0] is subset by the rows already)
        and not data & set(ancestors([i]))
    ]
    boundary = list(dict.fromkeys(boundary))
    per_person = {}
    if boundary:
        fn = compiling.function(
            model.value_vars,
            [b.shape for b in boundary],
            mode=_CHECK_MODE,
            on_unused_input="ignore",
        )
        for b, shape in zip(boundary, fn(*args), strict=True):
            if n in tuple(shape):
                per_person[b] = tuple(shape).index(n)
    # first as it is, then with what has an axis of length n taken with the rows (a public
    # axis of length n beside a row axis, b @ S for a square S, must not be subset)
    for extra in ({}, per_person) if per_person else ({},):
        try:
            nodes, variables, k, a, shorter, b = _evaluate_on_subsets(
                rows, {**graph.batch_inputs, **extra}, data, model.value_vars, args, m
            )
            break
        except Exception:  # noqa: BLE001 - a shape pinned to n inside the model
            continue
    else:
        # skipping the check here would let a flag over all people through behind a literal
        # n (review); the subsets are valid rows, so this depends on the graph, not the data
        raise ValueError(
            "The per-row log-likelihood cannot be evaluated on a subset of the rows (a shape "
            f"fixed to the row count n = {n} inside the model, e.g. a reshape to a literal "
            "n?), which the row-locality check needs. Write shapes from the data "
            "(x.shape[0]) or leave them to PyMC."
        )
    reads = set(variables)
    changing = {
        v: tuple(ax for ax, (s1, s2) in enumerate(zip(x1, x2, strict=True)) if s1 != s2)
        for v, x1, x2 in zip(variables, a[:k], shorter, strict=True)
    }
    values_a = dict(zip(variables, a[k:], strict=True))
    values_b = dict(zip(variables, b, strict=True))
    for node in nodes:
        within = max((len(changing[i]) for i in node.inputs if i in changing), default=0)
        out = min((len(changing[o]) for o in node.outputs if o in changing), default=within)
        x = node.inputs[0]
        along: tuple[int, ...] = ()  # the axes a sort or an accumulation runs along
        if isinstance(node.op, CumOp):
            axis = node.op.axis
            along = tuple(range(x.ndim)) if axis is None else (axis % max(x.ndim, 1),)
        elif isinstance(node.op, SortOp | ArgSortOp):
            axis = _constant_axis(node.inputs[1]) if len(node.inputs) > 1 else None
            along = tuple(range(x.ndim)) if axis is None else (axis % max(x.ndim, 1),)
        mixes = x in reads and bool(set(along) & set(changing.get(x, ())))
        if isinstance(node.op, Scan):  # a state carried from person to person
            info = node.op.info
            carried = info.n_mit_mot + info.n_mit_sot + info.n_sit_sot > 0
            seqs = node.inputs[1 : 1 + info.n_seqs]
            mixes |= carried and any(0 in changing.get(q, ()) for q in seqs)
        moved = any(
            not _same_people(values_a[o], values_b[o], changing[o])
            for o in node.outputs
            if o in values_a
        )
        if out < within or mixes or moved:
            _not_row_local(graph, list(graph.row_inputs))


def _evaluate_on_subsets(rows, inputs: dict, data: set, params, args, m: int):
    """The steps of ``rows`` batched over ``inputs`` that read data, the variables they read or
    make, and those variables' shapes on people ``0..m-1`` and ``0..m-2`` and values on people
    ``0..m-1`` and ``1..m``; ``data``: the inputs that are private rows."""
    idx = pt.vector("idx", dtype="int64")
    (batched,) = batch_graph([rows], inputs, idx)
    reads = _reading(batched, data)
    nodes = [
        node
        for node in io_toposort([*params, idx], [batched])
        if any(i in reads for i in node.inputs)
    ]
    variables = list(
        dict.fromkeys(
            v
            for node in nodes
            for v in (*node.inputs, *node.outputs)
            if v in reads and isinstance(v.type, TensorType)
        )
    )
    fn = compiling.function(
        [*params, idx],
        [*(v.shape for v in variables), *variables],
        mode=_CHECK_MODE,
        on_unused_input="ignore",
    )
    k = len(variables)
    with np.errstate(all="ignore"):
        a = fn(*args, np.arange(m))
        shorter = fn(*args, np.arange(m - 1))[:k]
        b = fn(*args, np.arange(1, m + 1))[k:]
    return nodes, variables, k, a, shorter, b


def _without_data_checks(rows: Variable, params) -> Variable:
    """``rows`` without the checks of the data alone (a Censored's ``lower <= upper``, which
    raises rather than gives -inf): they change no term, held at analysis, and hold for the run."""
    params = set(params)
    checks = {
        node.outputs[0]: node.inputs[0]
        for node in io_toposort(graph_inputs([rows]), [rows])
        if isinstance(node.op, CheckAndRaise) and not params & set(ancestors(node.inputs[1:]))
    }
    return graph_replace([rows], checks, strict=False)[0] if checks else rows


def _reading(out: Variable, data: set) -> set:
    """The variables of ``out``'s graph that read the values of ``data`` (not only shapes)."""
    reads: set = set()
    for node in io_toposort(graph_inputs([out]), [out]):
        if isinstance(node.op, Shape | Shape_i):
            continue
        if any(i in data or i in reads for i in node.inputs):
            reads.update(node.outputs)
    return reads


def _same_people(a, b, axes: tuple[int, ...]) -> bool:
    """Whether ``a`` (people ``0..m-1`` on ``axes``) and ``b`` (people ``1..m``) agree on the
    people they share."""
    a, b = np.asarray(a), np.asarray(b)
    if not axes or a.shape != b.shape:
        return a.shape == b.shape or bool(axes)
    for ax in axes:
        a = np.take(a, np.arange(1, a.shape[ax]), axis=ax)
        b = np.take(b, np.arange(0, b.shape[ax] - 1), axis=ax)
    same = (a == b) | np.isclose(a, b, rtol=1e-12, atol=0.0, equal_nan=True)
    return bool(np.all(same))


def _constant_axis(var: Variable) -> int | None:
    try:
        return int(pt.get_underlying_scalar_constant_value(var))
    except Exception:  # noqa: BLE001 - a symbolic axis: treated as any
        return None


def _not_row_local(graph: ModelGraph, inputs) -> None:
    names = ", ".join(i.label for i in inputs)
    terms = ", ".join(repr(t.name) for t in graph.terms)
    raise ValueError(
        f"The log-likelihood of one row (terms {terms}) depends on other rows (checked "
        f"by replacing people's rows of {names}). Replacing one person would then move "
        "other rows' terms, and clipping would not bound the privacy loss. Compute "
        "aggregates such as X.mean() from public constants, outside the model; or, if an "
        "input's row axis was inferred wrongly, give `row_axes`."
    )


def _all_like(value: np.ndarray, axis: int, largest: bool) -> tuple[int, np.ndarray]:
    """``(j, value with every row equal to row j)``, ``j`` the largest (smallest) row by its
    sum: a value that occurs in the data, so codes and counts stay in their support."""
    v = np.moveaxis(np.asarray(value), axis, 0)
    with np.errstate(all="ignore"):
        sums = np.nan_to_num(v.reshape(v.shape[0], -1).astype(float).sum(axis=1))
    j = int(np.argmax(sums) if largest else np.argmin(sums))
    like = np.broadcast_to(v[j : j + 1], v.shape).copy()
    return j, np.moveaxis(like, 0, axis)


def _replace_row(
    value: np.ndarray, axis: int, j: int, k: int, shift: float, up: bool = True
) -> np.ndarray:
    """``value`` with row ``j`` replaced by row ``k`` (``shift`` > 0: float rows also moved far
    off by it, up or down, so that an aggregate over rows moves by more than rounding)."""
    out = np.array(value, copy=True)
    src = np.take(value, [k], axis=axis)
    if shift and value.dtype.kind == "f":
        src = _far_off(src, shift, up)
    idx = [slice(None)] * value.ndim
    idx[axis] = slice(j, j + 1)
    out[tuple(idx)] = src
    return out


def _beyond(value: np.ndarray, axis: int, j: int) -> list[np.ndarray]:
    """``value`` (integers) with one entry of row ``j`` set above every value in its column, and
    one with it set below every value, one array per entry of the row and direction where the
    dtype has room."""
    info = np.iinfo(value.dtype)
    v = np.moveaxis(value, axis, 0)
    flat = v.reshape(v.shape[0], -1)
    out = []
    for col in range(flat.shape[1]):
        hi, lo = int(flat[:, col].max()), int(flat[:, col].min())
        for new in (hi + 1, lo - 1):
            if info.min <= new <= info.max:
                moved = flat.copy()
                moved[j, col] = new
                out.append(np.moveaxis(moved.reshape(v.shape), 0, axis))
    return out


def _far_off(x: np.ndarray, shift: float, up: bool = True) -> np.ndarray:
    """``x`` moved far off by ``shift`` (up or down), and finite where ``x`` is: a row of 3e305
    moved to inf made the check warn and fail, a refusal that depended on that row (review)."""
    with np.errstate(all="ignore"):
        far = x + (1.0 if up else -1.0) * shift
    return np.where(np.isfinite(far) | ~np.isfinite(x), far, -x).astype(x.dtype)


def _change_rows(
    value: np.ndarray, axis: int, rows: np.ndarray, rng, shift: float, up: bool = True
) -> np.ndarray:
    """``value`` with the rows ``rows`` changed: float rows moved far off by ``shift`` (up or
    down), others shuffled among themselves (codes and counts stay in their support)."""
    v = np.moveaxis(np.array(value, copy=True), axis, 0)
    idx = np.flatnonzero(rows)
    if value.dtype.kind == "f":
        v[idx] = _far_off(v[idx], shift, up)
    else:
        v[idx] = v[rng.permutation(idx)]
    return np.moveaxis(v, 0, axis)


def _other_rows_changed(a, b, axis: int | None, touched: np.ndarray, n: int) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    same = np.isclose(a, b, rtol=1e-12, atol=0.0, equal_nan=True) | (a == b)
    if axis is not None and a.ndim > axis and a.shape[axis] == n:
        same = np.moveaxis(same, axis, 0).copy()
        same[touched] = True
    return not bool(np.all(same))


def _forward_parameters(graph: ModelGraph, swap: dict, syms: list):
    """A function of (value variables, per-row inputs) giving the observed variables' parameters
    from the model's own graph, and each parameter's row axis (None: it has none and must not
    move at all). The parameters of a distribution made of others (a mixture's or a
    zero-inflated model's components) are its components' parameters: a component is a draw,
    which changes between two evaluations whatever the rows (review). None if that graph cannot
    be evaluated alone."""
    model = graph.model
    params, axes = [], []

    def aligned(node, ndim: int):
        """Each parameter with the number of its trailing core axes: from the distribution's
        signature where it has one (a Categorical's p (n, K), a mixture's weights (n, K), a
        Multinomial's n (n,) beside p (n, K): review), else none (a parameter with more axes
        than the variable is then skipped)."""
        op = node.op
        try:
            dist = list(op.dist_params(node))
            core, supp = list(op.ndims_params), int(op.ndim_supp)
        except Exception:  # noqa: BLE001 - no signature: align from the right
            dist, core, supp = None, None, 0
        if dist is None or len(core) != len(dist):
            return [(p, 0) for p in node.inputs if isinstance(p.type, TensorType)], ndim
        return list(zip(dist, core, strict=True)), ndim - supp

    def collect(node, ndim: int, row_axis: int) -> None:
        pairs, batch = aligned(node, ndim)
        for p, core in pairs:
            if not isinstance(p.type, TensorType) or p.type.ndim - core > batch:
                continue
            axis = row_axis - (batch - (p.type.ndim - core))  # batch axes align from the right
            if p.owner is not None and isinstance(p.owner.op, RNGConsumerOp) and p not in rvs:
                # a component draw: its parameters (with no row axis, none may move at all)
                collect(p.owner, p.type.ndim, axis)
                continue
            params.append(p)
            axes.append(axis if axis >= 0 else None)

    rvs = set(model.basic_RVs)
    for o in graph.observed:
        rv = model[o.name]
        collect(rv.owner, rv.type.ndim, o.row_axis)
    if not params:
        return None, []
    try:
        outs = [clone_replace(p, swap) for p in model.replace_rvs_by_values(params)]
        fn = compiling.function(
            [*model.value_vars, *syms], outs, mode=_CHECK_MODE, on_unused_input="ignore"
        )
    except Exception:  # noqa: BLE001 - an extra check; the log-likelihood check stands alone
        return None, []
    return fn, axes
