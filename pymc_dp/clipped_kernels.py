"""The clipped kernels a step compiles from the per-row graph: clip inside, sum, release outside.

:class:`ClippedKernels` is mixed into :class:`~pymc_dp.likelihood.PerRowLikelihood`, which holds
the per-row graph (``_rows``, ``_batch_rows``, ``_prior``, the raveled point ``_q``) and compiles
(``_compile``). Every kernel clips each row's contribution before it sums, maps a non-finite row
inside the clip bound, and returns sums only: nothing per row leaves a kernel.
"""

from __future__ import annotations

import functools

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import pushforward
from pytensor.graph.basic import Variable
from pytensor.graph.replace import clone_replace, graph_replace, vectorize_graph
from pytensor.graph.traversal import graph_inputs, io_toposort
from pytensor.tensor.variable import TensorConstant

from pymc_dp.kernel_rewrites import common_factor

__all__ = ["ClippedKernels"]

#: Above this many coordinates the empirical Fisher is summed as a matrix product
#: (:meth:`ClippedKernels._fisher_kernel`), not entry by entry.
_MAX_UNROLLED_FISHER_DIM = 10


def _shape_of(outs) -> tuple:
    """The graph of ``outs`` up to the values of its arrays: its ops in order, what each reads,
    every one-value constant by value, every array constant by type and first appearance."""
    names: dict = {}
    arrays: list = []

    def name(v: Variable):
        if v not in names:
            if isinstance(v, TensorConstant) and np.size(v.data) == 1:
                names[v] = ("value", str(v.type), np.asarray(v.data).tobytes())
            elif isinstance(v, TensorConstant):
                names[v] = ("array", str(v.type), len(arrays))
                arrays.append(v)
            else:  # a parameter or a symbol: the same variable in both graphs compared
                names[v] = ("input", id(v))
        return names[v]

    shape = []
    for node in io_toposort(graph_inputs(outs), outs):
        shape.append((node.op, tuple(name(i) for i in node.inputs)))
        for k, o in enumerate(node.outputs):
            names[o] = ("node", len(shape) - 1, k)
    return (*shape, tuple(name(o) for o in outs))


#: Integer arrays of fewer entries make the factoring's kernel uncached: their random draw
#: could fold as the rows do (all 1 at n = 3: review), and the kernel would then hold the value.
_FEWEST_DRAWN = 64


def _drawn(data: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random 0/1 of ``data``'s shape and dtype, 0 and 1 both in every column (no fold of a
    column every row shares)."""
    values = rng.integers(0, 2, data.shape)
    if data.ndim and data.shape[0] >= 2:
        values[0], values[1] = 0, 1
    return values.astype(data.dtype)


def _factored(comps: list, wrt: Variable) -> tuple[tuple | None, bool]:
    """:func:`common_factor` of ``comps`` and whether no value of the rows is inline in it.

    The canonical folds that find the factor read constants' values: a column every row shares
    or outcomes all 0 fold into one inline value (found in review), and a kernel that holds one
    must not be cached on disk (numba writes its constants there). Real-valued arrays (the
    covariates, continuous outcomes) are read as symbols while the factor is found, so no
    rewrite reads their values (the factoring is algebra, valid for every value; a check on
    them stays and may hide the factor), then the arrays are put back. Integer arrays (counts,
    classes, group codes) stay constants, as their support checks fold only on their values:
    the factoring is then the data's own, and it is cached only where the same factoring on
    integers drawn at random (no two arrays equal, no column uniform) has the same ops and
    one-value constants. Whether it is cached then says whether the rows' integers fold (the
    cache is opt-in: README). Where the symbols hide the factor, it is found on the rows' values
    and not cached."""
    arrays = [c for c in graph_inputs(comps) if isinstance(c, TensorConstant) and c.data.size > 1]
    symbols = {c: c.type() for c in arrays if np.issubdtype(c.data.dtype, np.floating)}
    on_symbols = graph_replace(comps, symbols, strict=False) if symbols else comps
    found = common_factor(on_symbols, wrt)
    if found is None:  # a check on the symbols hides the factor: the rows' own, not cached
        found = common_factor(comps, wrt) if symbols else None
        return found, found is None
    rng = np.random.default_rng(0)  # the same check in every run
    drawn = {c: TensorConstant(c.type, _drawn(c.data, rng)) for c in arrays if c not in symbols}
    cacheable = _same_on_draws(found, on_symbols, drawn, wrt)
    u, group, ks = found
    if symbols:
        u, *ks = graph_replace([u, *ks], {v: c for c, v in symbols.items()}, strict=False)
    return (u, group, ks), cacheable


def _same_on_draws(found, on_symbols: list, drawn: dict, wrt: Variable) -> bool:
    """Whether :func:`common_factor` of ``on_symbols`` with the integer arrays ``drawn`` at
    random has the ops and one-value constants of ``found`` (the factoring on the rows)."""
    if not drawn:
        return True
    if any(c.data.size < _FEWEST_DRAWN for c in drawn):  # a draw could fold as the rows do
        return False
    try:
        other = common_factor(graph_replace(on_symbols, drawn), wrt)
    except Exception:  # a fold the drawn integers cannot take (an index out of range)
        return False
    return other is not None and _shape_of([other[0], *other[2]]) == _shape_of(
        [found[0], *found[2]]
    )


def _finite_or_zero(x: Variable) -> Variable:
    """``x`` with every non-finite entry replaced by 0 (a clipped row can only lose norm)."""
    return pt.switch(pt.isfinite(x), x, 0.0)


class ClippedKernels:
    """The clipped-sum kernels of a :class:`~pymc_dp.likelihood.PerRowLikelihood`."""

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
            rows_new, prior_new = (self._batch_rows if batch else self._rows), self._prior
            rows_old = clone_replace(rows_new, replace={self._q: q_old})
            inputs = [self._q, q_old, bound]
            if batch:
                rows_new, rows_old = self._batched([rows_new, rows_old])
                inputs.append(self._idx)
            diff = rows_new - rows_old
            # NaN (e.g. -inf - -inf) -> 0; +-inf -> +-bound: inside the bound for every input
            clipped = pt.switch(pt.isnan(diff), 0.0, pt.clip(diff, -bound, bound))
            outputs = [clipped.sum(), prior_new]
            if squares:
                outputs.append(pt.sum(clipped**2))
            if diagnostics:
                outputs.append(pt.mean(pt.gt(pt.abs(diff), bound)))
            self._kernels[key] = self._compile(inputs, outputs)
        return self._kernels[key]

    def _clipped_gradients(self, bound: Variable, batch: bool) -> tuple[list, Variable, list]:
        """Per-row gradient components scaled by ``bound / max(|g|, bound)`` (a row with a
        non-finite component contributes 0: data-independent, inside the ball), the row norms,
        and the extra kernel inputs."""
        extra = []
        if batch:
            comps = self._batched(self._grad_components(self._batch_rows))
            extra.append(self._idx)
        else:
            comps = self._grad_components(self._rows)
        finite, norms, scale = self._norm_scale(
            functools.reduce(pt.add, [c**2 for c in comps]), bound
        )
        return [pt.switch(finite, c, 0.0) * scale for c in comps], norms, extra

    def _norm_scale(self, sq: Variable, bound: Variable) -> tuple[Variable, Variable, Variable]:
        """From the rows' squared gradient norms: which are finite, the norms (0 where not), and
        the clipping factor ``bound / max(|g|, bound)``."""
        finite = pt.isfinite(sq)
        norms = pt.sqrt(pt.switch(finite, sq, 0.0))
        tiny = np.finfo(self._q.dtype).tiny  # bound = 0 with a zero-norm row: 0 / tiny, not 0 / 0
        return finite, norms, bound / pt.maximum(pt.maximum(norms, bound), tiny)

    def _clipped_gradient_sum(self, bound: Variable) -> tuple[Variable, Variable, bool]:
        """``sum_i clip_norm(g_i, bound)`` and the row norms, over all n rows.

        Where the components share a factor, ``g_ij = u_i k_ij`` (:func:`~pymc_dp.kernel_rewrites
        .common_factor`; a GLM's ``u = dl/d eta``, ``k_j = x_j``), the group's sum is ``K^T w``
        with ``w = u * scale``: one element-wise pass for ``w``, one BLAS product, and row norms
        from ``|u| sqrt(sum_j k_ij^2)`` with the square sum folded at compile time. A row whose
        squared norm is not finite gets ``w_i = 0`` and a non-finite ``k_ij`` is read as 0, so
        such a row adds exactly 0 (no ``0 * inf``), as in the unfactored form.
        """
        comps = self._grad_components(self._rows)
        found, cache = _factored(comps, self._q)
        if found is None:
            clipped, norms, _ = self._clipped_gradients(bound, batch=False)
            return pt.stack([pt.sum(c) for c in clipped]), norms, True
        u, group, ks = found
        others = [j for j in range(self.dim) if j not in group]
        sq = u**2 * functools.reduce(pt.add, [k**2 for k in ks])
        for j in others:
            sq = sq + comps[j] ** 2
        finite, norms, scale = self._norm_scale(sq, bound)
        kmat = pt.stack(ks, axis=1)
        kmat = pt.switch(pt.isfinite(kmat), kmat, 0.0)
        sums = [None] * self.dim
        group_sum = pt.dot(pt.switch(finite, u * scale, 0.0), kmat)
        for t, j in enumerate(group):
            sums[j] = group_sum[t]
        for j in others:
            sums[j] = pt.sum(pt.switch(finite, comps[j], 0.0) * scale)
        return pt.stack(sums), norms, cache

    def grad_kernel(self, *, batch: bool = False, diagnostics: bool = False):
        """Compile ``(q, bound[, idx]) -> (sum_i clip_norm(grad l_i(q), bound), grad log
        prior(q)[, clipped fraction])``.

        Clipping scales a row gradient ``g`` by ``bound / max(|g|, bound)``: rows of zero norm
        keep a zero gradient (never NaN).
        """
        key = ("grad", batch, diagnostics)
        if key not in self._kernels:
            bound = pt.scalar("bound", dtype=self._q.dtype)
            if batch:
                clipped, norms, extra = self._clipped_gradients(bound, batch)
                total = pt.stack([pt.sum(c) for c in clipped])
            else:
                (total, norms, cache), extra = self._clipped_gradient_sum(bound), []
            outputs = [total, self._prior_grad]
            if diagnostics:
                outputs.append(pt.mean(pt.gt(norms, bound)))
            self._kernels[key] = self._compile(
                [self._q, bound, *extra], outputs, cache=batch or cache
            )
        return self._kernels[key]

    def curvature_kernel(self, observed: bool = True):
        """Compile ``(q, W, bound, edges) -> (sum_i clip_F(W H_i W^T, bound), counts, grad log
        prior(q))``: per-row curvature ``H_i`` in the metric of the public matrix ``W``, clipped
        to Frobenius norm ``bound`` and summed ((D, D), symmetric), and the number of rows whose
        whitened Frobenius norm falls in each bin ``[edges_k, edges_k+1)`` (the last open).

        ``H_i`` is the observed information ``-d^2 l_i / dq dq^T`` (``observed``), or the outer
        product ``g_i g_i^T`` of the row's gradient (the empirical Fisher) otherwise. Replacing
        one row moves the sum by at most ``2 bound`` in Frobenius norm (``sqrt(2) bound`` for
        outer products, which are positive semidefinite) and the counts by ``sqrt(2)``. A row
        with a non-finite entry counts as norm 0 and adds 0. For a GLM ``H_i = w_i x_i x_i^T``
        with ``w_i`` bounded a priori (1/4 for the logistic): with ``W = I`` its bound follows
        from public covariate bounds (:attr:`pymc_dp.GLMClip.hess_clip`).
        """
        key = ("curvature", observed)
        if key not in self._kernels and not observed and not self._unrolled_fisher():
            self._kernels[key] = self._fisher_kernel()
        if key not in self._kernels:
            w = pt.matrix("W", dtype=self._q.dtype, shape=(self.dim, self.dim))
            bound = pt.scalar("bound", dtype=self._q.dtype)
            edges = pt.vector("edges", dtype=self._q.dtype)
            rows, cols = np.triu_indices(self.dim)
            weights = np.where(rows == cols, 1.0, 2.0)
            if observed:
                entries = self._observed_entries(w, rows, cols)
                sq = pt.sum(pt.as_tensor(weights)[:, None] * entries**2, axis=0)
            else:
                # directional derivatives along the rows of W, (W g_i)_a: no (n, D, D) tensor
                dirs = [
                    pushforward(self._rows, self._q, w[a], disconnected_outputs="ignore")
                    for a in range(self.dim)
                ]
                entries = [dirs[a] * dirs[b] for a, b in zip(rows, cols, strict=True)]
                sq = functools.reduce(
                    pt.add, [k * e**2 for k, e in zip(weights, entries, strict=True)]
                )
            finite, norms, scale = self._norm_scale(sq, bound)
            # each entry's contribution checked as summed: rewrites may compute the norm and the
            # entry in forms that disagree on overflow (a NaN past the norm's check: review 2)
            if observed:
                kept = pt.switch(finite[None, :], entries, 0.0) * scale[None, :]
                upper = pt.sum(_finite_or_zero(kept), axis=1)
            else:
                upper = pt.stack(
                    [pt.sum(_finite_or_zero(pt.switch(finite, e, 0.0) * scale)) for e in entries]
                )
            total = pt.zeros((self.dim, self.dim), dtype=self._q.dtype)
            total = pt.set_subtensor(total[rows, cols], upper)
            total = pt.set_subtensor(total[cols, rows], upper)
            outputs = [total, self._bin_counts(norms, edges), self._prior_grad]
            self._kernels[key] = self._compile([self._q, w, bound, edges], outputs, few=True)
        return self._kernels[key]

    def _observed_entries(self, w: Variable, rows: np.ndarray, cols: np.ndarray) -> Variable:
        """The (m, n) upper-triangle entries ``-(W H_i W^T)_ab``, ``(a, b) = (rows_k, cols_k)``:
        the second directional derivative ``-d^2 l_i [t, s]`` built once for symbolic
        directions ``t, s`` and vectorised over the m pairs of rows of ``W`` (for a GLM it folds
        to ``-u'' (x.w_a)(x.w_b)``). One push-forward pair per entry (the graph quadratic in
        D) took 80 s to rewrite for random intercepts of 11 groups (D = 14, 105 entries, 16631
        nodes before rewriting); this graph's size does not grow with D (326 nodes there). Its
        (m, n) temporaries peak near 4 m n floats in NumPy mode (the old kernel's 2 m n; review):
        32 m n bytes, 15 GB at D = 30 and n = 1e6. Summing blocks of rows would be exact."""
        t = pt.vector("t", shape=(self.dim,), dtype=self._q.dtype)
        s = pt.vector("s", shape=(self.dim,), dtype=self._q.dtype)
        first = pushforward(self._rows, self._q, t, disconnected_outputs="ignore")
        second = pushforward(first, self._q, s, disconnected_outputs="ignore")
        entries = -vectorize_graph(second, {t: w[rows], s: w[cols]})
        # rows whose curvature reads neither direction (linear in q): one (n,) graph of zeros
        return pt.broadcast_to(entries, (len(rows), self._rows.shape[0]))

    def _unrolled_fisher(self) -> bool:
        """Whether :meth:`curvature_kernel` sums the empirical Fisher entry by entry: under
        Numba up to ``_MAX_UNROLLED_FISHER_DIM`` coordinates (one fused loop per entry).
        Evaluated op by op in NumPy (the warm start's default), the matrix form
        (:meth:`_fisher_kernel`) compiles in half the time and runs twice as fast (logistic,
        n = 2e4, d = 4: 0.19 s against 0.42, 3.5 ms a pass against 7.6)."""
        return self.dim <= _MAX_UNROLLED_FISHER_DIM and not self._few_op_by_op()

    def _whitened_rows(self) -> tuple[Variable, Variable, Variable, Variable]:
        """The public inputs ``W``, ``bound``, ``edges`` of a whitened kernel and the rows'
        gradients mapped by ``W`` (a row with a non-finite gradient maps to 0)."""
        w = pt.matrix("W", dtype=self._q.dtype, shape=(self.dim, self.dim))
        bound = pt.scalar("bound", dtype=self._q.dtype)
        edges = pt.vector("edges", dtype=self._q.dtype)
        grads = pt.stack(self._grad_components(self._rows), axis=1)
        finite_rows = pt.all(pt.isfinite(grads), axis=1)
        return w, bound, edges, pt.dot(pt.switch(finite_rows[:, None], grads, 0.0), w.T)

    def _fisher_kernel(self):
        """:meth:`curvature_kernel`'s empirical Fisher as matrix products: the whitened rows
        ``v_i = W g_i``, the outer products' Frobenius norms ``|v_i|^2``, and ``sum_i s_i v_i
        v_i^T = U^T U`` with ``u_i = sqrt(s_i) v_i``, ``s_i`` the clipping factor. Its unrolled
        form (one fused loop per upper-triangle entry) is quadratic in D: for a random-intercept
        model with D = 24, Numba took 150 s to compile it, against seconds for this one."""
        w, bound, edges, white = self._whitened_rows()
        # |v v^T|_F = |v|^2: the squared Frobenius norm is |v|^4
        finite, norms, scale = self._norm_scale(pt.sum(white**2, axis=1) ** 2, bound)
        # a row can only lose norm: a non-finite entry of u (an overflow the norm's check
        # missed) reads as 0, and |u_i|^2 = s_i |v_i|^2 <= bound
        u = _finite_or_zero(pt.switch(finite[:, None], white, 0.0) * pt.sqrt(scale)[:, None])
        total = _finite_or_zero(pt.dot(u.T, u))
        return self._compile(
            [self._q, w, bound, edges],
            [total, self._bin_counts(norms, edges), self._prior_grad],
            few=True,
        )

    def _bin_counts(self, norms: Variable, edges: Variable) -> Variable:
        """Rows whose norm is in ``[edges_k, edges_k+1)``, the last bin open above."""
        above = pt.sum(pt.ge(norms[:, None], edges[None, :]), axis=0).astype(self._q.dtype)
        return above - pt.concatenate([above[1:], pt.zeros((1,), dtype=above.dtype)])

    def whitened_kernel(self, weighted: bool = False):
        """Compile ``(q, W, bound, edges) -> (sum_i clip_norm(W g_i, bound), counts, grad log
        prior(q))``: per-row gradients ``g_i`` mapped by the public matrix ``W`` (a whitening
        of the released curvature), clipped to L2 norm ``bound`` in that metric and summed, and
        the number of rows whose whitened norm falls in each bin ``[edges_k, edges_k+1)`` (the
        last bin open above). Replacing one row moves the sum by at most ``2 bound`` in L2 and
        the counts by at most ``sqrt(2)``. A row whose gradient or whitened norm is not finite
        counts as norm 0 and adds 0, and so does any entry of a row's clipped contribution that
        is not finite (a row can only lose norm). All outputs are sums over rows (shards add up).

        ``weighted`` adds two public inputs, ``W_c`` and ``c_h``: the metric and the clip of an
        observed-curvature release (:meth:`curvature_kernel`) at the same ``q``. Each row's
        gradient is first multiplied by that release's clipping factor of its curvature,
        ``min(1, c_h / |W_c H_i W_c^T|_F)`` (0 where the norm is not finite), so a Newton step
        solves the equations of the weighted likelihood whose curvature was released: a row whose
        curvature was clipped no longer pulls with its whole gradient (a step along it
        overshoots). Factors lie in [0, 1]: the sensitivities stay.
        """
        key = ("whitened", weighted)
        if key not in self._kernels:
            w, bound, edges, white = self._whitened_rows()
            inputs = [self._q, w, bound, edges]
            if weighted:
                w_c = pt.matrix("W_c", dtype=self._q.dtype, shape=(self.dim, self.dim))
                c_h = pt.scalar("c_h", dtype=self._q.dtype)
                rows, cols = np.triu_indices(self.dim)
                entries = self._observed_entries(w_c, rows, cols)
                weights = pt.as_tensor(np.where(rows == cols, 1.0, 2.0))
                sq = pt.sum(weights[:, None] * entries**2, axis=0)
                finite_h, _, factor = self._norm_scale(sq, c_h)
                white = white * pt.switch(finite_h, factor, 0.0)[:, None]
                inputs += [w_c, c_h]
            # a finite row can still overflow once whitened: it adds 0, never unclipped
            finite, norms, scale = self._norm_scale(pt.sum(white**2, axis=1), bound)
            clipped = pt.switch(finite[:, None], white, 0.0) * scale[:, None]
            total = pt.sum(_finite_or_zero(clipped), axis=0)
            self._kernels[key] = self._compile(
                inputs, [total, self._bin_counts(norms, edges), self._prior_grad], few=True
            )
        return self._kernels[key]
