"""Per-row log-likelihood and gradient graphs extracted from a PyMC model.

DP samplers bound the influence of one person (one row of the data) on what they release, so they
need the log-likelihood split by row rather than PyMC's summed ``model.logp()``. This module builds,
once per model, PyTensor graphs for

* the per-row log-likelihood vector ``l_i(q)`` (rows = leading axis of the observed variables),
* the per-row gradient matrix ``d l_i / d q`` in forward mode (a push-forward vectorised over the
  unit tangents, so the cost is ~D log-likelihood evaluations, not a scan over rows),
* the prior (with the log-Jacobian of the transforms, plus potentials) and its gradient,

and compiles *fused* kernels that clip per row and sum inside PyTensor so that no n-vector crosses
into Python on the hot path. Minibatch kernels replace every per-row input ``x`` by ``x[idx]`` so an
evaluation costs O(batch), not O(n).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np
import pytensor
import pytensor.tensor as pt
from pymc.blocking import DictToArrayBijection, RaveledVars
from pymc.model import Model, modelcontext
from pymc.pytensorf import compile as pm_compile
from pymc.pytensorf import join_nonshared_inputs
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.rewriting import inline_ofg_node
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.gradient import pushforward
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.replace import clone_replace, graph_replace, vectorize_graph
from pytensor.graph.traversal import ancestors, io_toposort
from pytensor.tensor.basic import Alloc
from pytensor.tensor.shape import SpecifyShape
from pytensor.tensor.type import TensorType, discrete_dtypes

__all__ = ["PerRowLikelihood", "data_dependent_variables"]

#: Up to this many coordinates, per-row gradients are built one coordinate at a time.
_MAX_COMPONENT_DIM = 32


def _value_of(var: Variable) -> np.ndarray:
    if isinstance(var, SharedVariable):
        return np.asarray(var.get_value(borrow=True))
    return np.asarray(var.data)


def _is_data_node(var: Variable) -> bool:
    """A constant or shared tensor (not an RNG): where PyMC keeps data."""
    return (
        var.owner is None
        and isinstance(var, Constant | SharedVariable)
        and isinstance(var.type, TensorType)
    )


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


class PerRowLikelihood:
    """Per-row log-likelihood, per-row gradients and prior of a PyMC model, in raveled form.

    Parameters
    ----------
    model : pm.Model, optional
        The model; defaults to the model on the context stack.
    vars : sequence of value variables, optional
        Value variables to differentiate with respect to, in raveling order. Default: all free
        value variables of the model. Value variables left out are read from shared variables
        (see :attr:`shared`), as PyMC's own step methods do.
    row_dim : str, optional
        Name of the model dim that indexes rows (people). Needed only when the observed
        variables do not all share the length of their leading axis; each observed variable must
        then have ``row_dim`` among its dims.

    Notes
    -----
    *Rows.* One row of the private data is one person. Rows are the leading axis (or ``row_dim``)
    of the observed variables; several observed variables sharing it are summed per row, trailing
    axes are summed within a row. Every constant or ``pm.Data`` input of the likelihood graph whose
    leading axis has the row length is treated as per-row data (covariates such as ``X`` in
    ``X @ beta``): it is private, checked for NaN/inf, and indexed by minibatches.

    *Prior.* ``model.logp(vars=model.free_RVs, jacobian=True)`` plus every ``pm.Potential``.
    Potentials are treated as public prior terms; one that reads per-row data is refused.
    """

    def __init__(
        self,
        model: Model | None = None,
        vars: Sequence[Variable] | None = None,
        *,
        row_dim: str | None = None,
        compile_kwargs: dict | None = None,
    ) -> None:
        model = modelcontext(model)
        self.model = model
        self._compile_kwargs = dict(compile_kwargs or {})
        if not model.observed_RVs:
            raise ValueError(
                "The model has no observed variable: there is no private data to protect. "
                "Use pm.sample without a DP step."
            )
        if vars is None:
            vars = model.value_vars
        vars = list(vars)
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
        self._check_no_imputation()

        obs_terms = model.logp(vars=model.observed_RVs, sum=False)
        rows_per_obs = self._rows_per_observed(obs_terms, row_dim)
        self.n_rows = int(rows_per_obs[0][1])
        rows = rows_per_obs[0][0]
        for term, _ in rows_per_obs[1:]:
            rows = rows + term
        self.row_inputs = self._find_row_inputs(rows)
        self._check_finite_data()

        prior_terms = [model.logp(vars=model.free_RVs, jacobian=True)]
        potentials = model.replace_rvs_by_values(model.potentials)
        for pot, name in zip(potentials, (p.name for p in model.potentials), strict=True):
            if self._reads_row_data(pot):
                raise ValueError(
                    f"Potential '{name}' reads per-row data. Potentials are treated as public "
                    "prior terms; write the likelihood as observed variables so it can be clipped "
                    "and privatised."
                )
            prior_terms.append(pt.sum(pot))
        prior = pt.add(*prior_terms) if len(prior_terms) > 1 else prior_terms[0]

        point = model.initial_point()
        self._point_map_info = DictToArrayBijection.map(
            {v.name: point[v.name] for v in vars}
        ).point_map_info
        self.shared = {
            v: pytensor.shared(point[v.name], v.name + "_shared", shape=point[v.name].shape)
            for v in model.value_vars
            if v not in vars
        }
        (self._rows, self._prior), self._q = join_nonshared_inputs(
            point, [rows, prior], vars, self.shared
        )
        self._q.name = "q"
        self.dim = int(sum(np.prod(info[1], dtype=int) for info in self._point_map_info))
        if self.dim == 0:
            raise ValueError("No free variable to sample.")

    # ------------------------------------------------------------------ construction helpers
    def _check_no_imputation(self) -> None:
        for rv in self.model.free_RVs:
            if rv.name.endswith("_unobserved"):
                raise ValueError(
                    f"Free variable '{rv.name}' comes from missing values (NaN) in observed data. "
                    "DP samplers need complete data: impute or drop rows before modelling."
                )

    def _rows_per_observed(self, obs_terms, row_dim):
        out = []
        for rv, term in zip(self.model.observed_RVs, obs_terms, strict=True):
            value = self.model.rvs_to_values[rv]
            shape = _value_of(value).shape if _is_data_node(value) else None
            if not shape:
                raise ValueError(
                    f"Observed variable '{rv.name}' is a scalar: it has no rows. DP samplers need "
                    "one row per person along the leading axis."
                )
            length = shape[0]
            if row_dim is not None:
                dims = tuple(self.model.named_vars_to_dims.get(rv.name, ()))
                if row_dim not in dims:
                    raise ValueError(
                        f"`row_dim`={row_dim!r} is not a dim of observed variable '{rv.name}' "
                        f"(its dims: {dims})."
                    )
                axis = dims.index(row_dim)
                length = shape[axis]
                term = pt.moveaxis(term, axis, 0) if term.ndim > axis else term
            if length == 0:
                raise ValueError(f"Observed variable '{rv.name}' has no rows (empty data).")
            if term.ndim == 0:
                raise ValueError(
                    f"The log-likelihood of '{rv.name}' does not have one entry per row; "
                    "DP samplers need an element-wise log-likelihood."
                )
            if term.ndim > 1:
                term = term.sum(axis=tuple(range(1, term.ndim)))
            out.append((term, length))
        lengths = {length for _, length in out}
        if len(lengths) > 1:
            obs = self.model.observed_RVs
            names = {rv.name: length for rv, (_, length) in zip(obs, out, strict=True)}
            raise ValueError(
                f"Observed variables have different numbers of rows {names}; pass `row_dim=` "
                "naming the dim that indexes people."
            )
        return out

    def _find_row_inputs(self, rows: Variable) -> list[Variable]:
        found = []
        for var in ancestors([rows]):
            if not _is_data_node(var) or var.type.ndim == 0:
                continue
            value = _value_of(var)
            if value.ndim >= 1 and value.shape[0] == self.n_rows:
                found.append(var)
        return found

    def _reads_row_data(self, var: Variable) -> bool:
        """Whether ``var`` depends on an array with the row length (conservatively: private)."""
        return any(
            _is_data_node(a) and a.type.ndim >= 1 and _value_of(a).shape[0] == self.n_rows
            for a in ancestors([var])
        )

    def _check_finite_data(self) -> None:
        obs_names = {id(self.model.rvs_to_values[rv]): rv.name for rv in self.model.observed_RVs}
        for var in self.row_inputs:
            value = _value_of(var)
            if np.issubdtype(value.dtype, np.number) and not np.all(np.isfinite(value)):
                label = obs_names.get(id(var)) or var.name or "a per-row input"
                raise ValueError(
                    f"Data '{label}' contains NaN or inf values; DP samplers need finite data "
                    "(impute, drop or clip rows before modelling)."
                )

    # ------------------------------------------------------------------ raveling
    def ravel(self, point: dict) -> np.ndarray:
        """Raveled vector ``q`` of a point (dict of value-variable name -> value)."""
        return DictToArrayBijection.map({v.name: point[v.name] for v in self.vars}).data

    def unravel(self, q: np.ndarray) -> dict:
        return DictToArrayBijection.rmap(RaveledVars(q, self._point_map_info))

    # ------------------------------------------------------------------ symbolic pieces
    @cached_property
    def _grad_components(self) -> list[Variable] | None:
        """Per-row partial derivatives, one (n,) push-forward per unit tangent (small D only).

        One 1-D graph per coordinate lets the clip-and-sum fuse into flat loops; measured
        1.4-2x faster than the vectorised (D, n) form at n = 1e5 for D = 2 and 10.
        """
        if self.dim > _MAX_COMPONENT_DIM:
            return None
        eye = np.eye(self.dim, dtype=self._q.dtype)
        return [
            pushforward(self._rows, self._q, pt.as_tensor(e), disconnected_outputs="ignore")
            for e in eye
        ]

    @cached_property
    def _grad_rows(self) -> Variable:
        """(n, D) per-row gradients in forward mode (no scan Jacobian)."""
        if self._grad_components is not None:
            return pt.stack(self._grad_components, axis=1)
        t = pt.vector("t", shape=(self.dim,), dtype=self._q.dtype)
        jvp = pushforward(self._rows, self._q, t, disconnected_outputs="ignore")
        return vectorize_graph(jvp, {t: pt.eye(self.dim, dtype=self._q.dtype)}).T

    @cached_property
    def _idx(self) -> Variable:
        return pt.vector("idx", dtype="int64")

    def _batched(self, outputs: list[Variable]) -> list[Variable]:
        """Replace every per-row input ``x`` by ``x[idx]`` so the graph costs O(batch)."""
        # PyMC's logp graphs pin the row count in shape-only ops: SpecifyShape asserts and an
        # Alloc that broadcasts the element-wise logp to the (already full) observed shape. Both are
        # no-ops on the full data, so drop them before swapping the data for its minibatch.
        # Inner graphs (e.g. logaddexp of mixtures) fix their input types to the full row count and
        # would re-impose it when rebuilt on a batch: inline them first.
        outputs = _inline_op_from_graph(outputs)
        pinned = {}
        for node in io_toposort([self._q, *self.row_inputs], outputs):
            x = node.inputs[0] if node.inputs else None
            out = node.outputs[0] if node.outputs else None
            if isinstance(node.op, SpecifyShape):
                pinned[out] = x
            elif isinstance(node.op, Alloc) and x.type.ndim == out.type.ndim:
                same = x.type.shape == out.type.shape and None not in x.type.shape
                if same or all(s != 1 for s in x.type.shape):
                    pinned[out] = x
        if pinned:
            outputs = graph_replace(outputs, pinned, strict=False)
        replace = {x: x[self._idx] for x in self.row_inputs}
        return clone_replace(outputs, replace=replace, rebuild_strict=False)

    @cached_property
    def _prior_grad(self) -> Variable:
        return pytensor.grad(self._prior, self._q, disconnected_inputs="ignore")

    def _compile(self, inputs, outputs):
        fn = pm_compile(inputs, outputs, **self._compile_kwargs)
        fn.trust_input = True
        return fn

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

    @cached_property
    def batch_logp_rows_fn(self):
        """``(q, idx) -> (b,)`` per-row log-likelihood of the rows ``idx``."""
        return self._compile([self._q, self._idx], self._batched([self._rows])[0])

    @cached_property
    def batch_grad_rows_fn(self):
        """``(q, idx) -> (b, D)`` per-row gradients of the rows ``idx``."""
        return self._compile([self._q, self._idx], self._batched([self._grad_rows])[0])

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
    def ratio_kernel(
        self, *, batch: bool = False, diagnostics: bool = False, squares: bool = False
    ):
        """Compile ``(q_new, q_old, bound[, idx]) -> (sum_i r_i, log prior(q_new)[, sum_i r_i^2]
        [, clipped fraction])`` with ``r_i = clip(l_i(q_new) - l_i(q_old), +-bound)``.

        ``squares`` adds the sum of squared clipped ratios (minibatch variance estimates). The
        clipped fraction is an exact, unprivatised statistic: request it only for diagnostics.
        """
        key = ("ratio", batch, diagnostics, squares)
        if key not in self._kernels:
            q_old = self._q.type("q_old")
            bound = pt.scalar("bound", dtype=self._q.dtype)
            rows_new, prior_new = self._rows, self._prior
            rows_old = clone_replace(self._rows, replace={self._q: q_old})
            inputs = [self._q, q_old, bound]
            if batch:
                rows_new, rows_old = self._batched([rows_new, rows_old])
                inputs.append(self._idx)
            diff = rows_new - rows_old
            clipped = pt.clip(diff, -bound, bound)
            outputs = [clipped.sum(), prior_new]
            if squares:
                outputs.append(pt.sum(clipped**2))
            if diagnostics:
                outputs.append(pt.mean(pt.gt(pt.abs(diff), bound)))
            self._kernels[key] = self._compile(inputs, outputs)
        return self._kernels[key]

    def grad_kernel(self, *, batch: bool = False, diagnostics: bool = False):
        """Compile ``(q, bound[, idx]) -> (sum_i clip_norm(grad l_i(q), bound), grad log
        prior(q)[, clipped fraction])``.

        Clipping scales a row gradient ``g`` by ``bound / max(|g|, bound)``: rows of zero norm
        keep a zero gradient (never NaN).
        """
        key = ("grad", batch, diagnostics)
        if key not in self._kernels:
            bound = pt.scalar("bound", dtype=self._q.dtype)
            comps = self._grad_components or [self._grad_rows[:, j] for j in range(self.dim)]
            inputs = [self._q, bound]
            if batch:
                comps = self._batched(comps)
                inputs.append(self._idx)
            sq = comps[0] ** 2
            for c in comps[1:]:
                sq = sq + c**2
            norms = pt.sqrt(sq)
            tiny = np.finfo(
                self._q.dtype
            ).tiny  # bound = 0 with a zero-norm row: 0 / tiny, not 0 / 0
            scale = bound / pt.maximum(pt.maximum(norms, bound), tiny)
            total = pt.stack([pt.sum(c * scale) for c in comps])
            outputs = [total, self._prior_grad]
            if diagnostics:
                outputs.append(pt.mean(pt.gt(norms, bound)))
            self._kernels[key] = self._compile(inputs, outputs)
        return self._kernels[key]

    @cached_property
    def _kernels(self) -> dict:
        return {}


def data_dependent_variables(model: Model, likelihood: PerRowLikelihood | None = None) -> list[str]:
    """Names of deterministics whose value is a function of the private data.

    A deterministic that reads an observed variable or any per-row input (e.g. fitted values
    ``X @ beta``) would publish a function of the data without noise. PyMC embeds a NumPy array
    as a new constant each time it is used, so per-row inputs are recognised as in
    :class:`PerRowLikelihood` (a constant or ``pm.Data`` whose leading axis has the row length),
    not by identity.
    """
    if likelihood is None:
        likelihood = PerRowLikelihood(model)
    observed = set(model.observed_RVs) | {model.rvs_to_values[rv] for rv in model.observed_RVs}
    return [
        det.name
        for det in model.deterministics
        if set(ancestors([det])) & observed or likelihood._reads_row_data(det)
    ]
