"""Structure of the compiled kernels: what each reads and in which layout (issue 12's speed work).

The values are tested against NumPy in test_likelihood.py; these tests pin the layout choices that
the benchmarks measured, so a refactor that silently undoes one fails here, not only in a bench.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant
from pytensor.tensor.math import Dot
from pytensor.tensor.rewriting.fused_elemwise import FusedElemwise
from pytensor.tensor.subtensor import AdvancedSubtensor

import pymc_dp as pdp
from pymc_dp.batches import draw_batch

N, D = 500, 4


def _data(kernel) -> dict:
    """The arrays a compiled kernel reads, by its graph's variable: the rows come from shared
    storage (so that numba may cache the code on disk), what else from constants."""
    fgraph = kernel.maker.fgraph
    found = {v: np.asarray(v.data) for v in fgraph.variables if isinstance(v, Constant)}
    for v, given in zip(fgraph.inputs, kernel.maker.inputs, strict=True):
        if isinstance(given.variable, SharedVariable):
            found[v] = given.variable.get_value(borrow=True)
    return found


@pytest.fixture(scope="module")
def logistic():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((N, D))
    y = rng.integers(0, 2, N)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 2, shape=D)
        pm.Bernoulli("y", logit_p=pm.math.dot(x, beta), observed=y)
    return model, pdp.PerRowLikelihood(model), x


def test_full_kernels_read_columns_and_batch_kernels_gather_rows(logistic):
    _, lik, x = logistic
    full = lik.ratio_kernel()
    data = _data(full)
    # the full kernel reads the (n, d) matrix only in the BLAS product X @ beta; every
    # element-wise loop reads contiguous (n,) columns
    read = 0
    for node in full.maker.fgraph.toposort():
        for v in node.inputs:
            if v in data and np.ndim(data[v]) == 2 and np.shape(data[v])[0] == N:
                assert isinstance(node.op, Dot), node.op
                read += 1
    assert read  # it does read the matrix (the check above is not vacuous)
    batch = lik.ratio_kernel(batch=True, squares=True)
    data = _data(batch)
    gathers = [
        node for node in batch.maker.fgraph.toposort() if isinstance(node.op, AdvancedSubtensor)
    ]
    gathered = [data[n.inputs[0]] for n in gathers if n.inputs[0] in data]
    # the batch kernel gathers b rows of the row-major (n, d) matrix: one cache line per row
    assert any(g.shape == (N, D) and np.array_equal(g, x) for g in gathered)
    # ... in a loop of its own: no indexed read fused into the arithmetic loop
    for node in batch.maker.fgraph.toposort():
        if isinstance(node.op, FusedElemwise):
            assert not node.op.indexed_inputs


def test_batch_kernels_equal_full_kernels_on_the_batch(logistic):
    _, lik, _ = logistic
    rng = np.random.default_rng(0)
    q = 0.3 * rng.standard_normal(D)
    q2 = q + 0.05 * rng.standard_normal(D)
    idx = np.sort(rng.choice(N, 60, replace=False))
    bound = np.asarray(0.02)
    diff = lik.logp_rows(q2)[idx] - lik.logp_rows(q)[idx]
    total, _, squares = lik.ratio_kernel(batch=True, squares=True)(q2, q, bound, idx)
    clipped = np.clip(diff, -0.02, 0.02)
    assert float(total) == pytest.approx(clipped.sum(), rel=1e-12)
    assert float(squares) == pytest.approx((clipped**2).sum(), rel=1e-12)
    g = lik.grad_rows(q)[idx]
    norms = np.linalg.norm(g, axis=1)
    expected = (g * (1.0 / np.maximum(norms, 1.0))[:, None]).sum(0)
    np.testing.assert_allclose(lik.grad_kernel(batch=True)(q, np.asarray(1.0), idx)[0], expected)


@pytest.mark.parametrize("sampling", ["fixed_size", "poisson"])
def test_batches_are_sorted_distinct_rows(sampling):
    rng = np.random.default_rng(1)
    for _ in range(20):
        idx = draw_batch(rng, 10_000, 100, sampling)
        assert np.all(np.diff(idx) > 0)  # sorted and without repeats
        assert idx.min() >= 0 and idx.max() < 10_000


def _numpy_clipped_sum(lik, q, bound):
    g = lik.grad_rows(q)
    sq = (g**2).sum(1)
    finite = np.isfinite(sq)
    g = np.where(finite[:, None], g, 0.0)
    norms = np.sqrt(np.where(finite, sq, 0.0))
    return (g * (bound / np.maximum(norms, bound))[:, None]).sum(0)


def _uses_blas_sum(lik) -> bool:
    """Whether the gradient kernel sums ``K^T w`` in a product with a fixed (n, k) matrix."""
    fn = lik.grad_kernel()
    data = _data(fn)
    return any(
        isinstance(node.op, Dot)
        and any(
            v in data and np.ndim(data[v]) == 2 and np.shape(data[v])[0] == N for v in node.inputs
        )
        and node.outputs[0].type.shape[-1] != 1
        for node in fn.maker.fgraph.toposort()
    )


def test_glm_gradient_sum_is_one_blas_product_and_exact(logistic):
    _, lik, _ = logistic
    assert _uses_blas_sum(lik)
    rng = np.random.default_rng(5)
    for _ in range(3):
        q = rng.standard_normal(D)
        b = float(np.quantile(np.linalg.norm(lik.grad_rows(q), axis=1), 0.5))  # clips half
        got = lik.grad_kernel()(q, np.asarray(b))[0]
        np.testing.assert_allclose(got, _numpy_clipped_sum(lik, q, b), rtol=1e-12, atol=1e-12)


def test_mixed_components_and_overflowing_rows():
    """beta's components share (dl/d eta) exp(s); a and s have factors of their own. Row 3's
    covariate makes its squared norm overflow: it must add exactly 0, never 0 * inf = NaN."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((N, 2))
    x[3] = 1e200
    y = rng.integers(0, 2, N)
    y[3] = 1  # eta_3 = -1.2e10 at q below: dl/d eta = 1, not 0
    with pm.Model() as model:
        a = pm.Normal("a", 0, 1)
        beta = pm.Normal("beta", 0, 1, shape=2)
        s = pm.Normal("s", 0, 1)
        pm.Bernoulli("y", logit_p=a + pm.math.dot(x, beta) * pm.math.exp(s), observed=y)
    lik = pdp.PerRowLikelihood(model)
    assert _uses_blas_sum(lik)
    q = np.array([0.1, 1e-190, -2e-190, 0.2])  # row 3's gradient is finite, its square is not
    g3 = lik.grad_rows(q)[3]
    assert np.all(np.isfinite(g3)) and not np.isfinite((g3**2).sum())
    for b in (0.5, 3.0):
        got = lik.grad_kernel()(q, np.asarray(b))[0]
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, _numpy_clipped_sum(lik, q, b), rtol=1e-10, atol=1e-10)


def test_models_without_a_shared_factor_keep_the_elementwise_sum():
    """A Normal GLM: PyTensor writes dl/d mu as a quotient per coordinate (no shared product
    factor), so the kernel keeps the per-component sums; values must match all the same."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((N, 2))
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=2)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", pm.math.dot(x, beta), sigma, observed=rng.standard_normal(N))
    lik = pdp.PerRowLikelihood(model)
    q = np.array([0.3, -0.2, 0.1])
    for b in (0.5, 3.0):
        got = lik.grad_kernel()(q, np.asarray(b))[0]
        np.testing.assert_allclose(got, _numpy_clipped_sum(lik, q, b), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("op", ["add", "mul"])
def test_numpy_mode_evaluates_sums_and_products_wider_than_numpy_allows(op):
    """Canonicalize flattens a sum of many terms into one Add (a curvature's 55 squared entries
    at D = 10), which NumPy evaluates for at most 32 operands: ``numpy_mode`` nests it."""
    import pytensor
    import pytensor.tensor as pt

    from pymc_dp.kernel_rewrites import numpy_mode

    xs = [pt.vector(f"x{i}") for i in range(70)]
    terms = [x**2 if op == "add" else pt.exp(x) for x in xs]
    out = pt.add(*terms) if op == "add" else pt.mul(*terms)
    fn = pytensor.function(xs, out, mode=numpy_mode())
    assert type(fn.maker.linker).__name__ == "PerformLinker"
    values = np.random.default_rng(0).normal(0, 0.1, (70, 5))
    want = (values**2).sum(0) if op == "add" else np.exp(values.sum(0))
    np.testing.assert_allclose(fn(*values), want, rtol=1e-12)
