"""Structure of the compiled kernels: what each reads and in which layout (issue 12's speed work).

The values are tested against NumPy in test_likelihood.py; these tests pin the layout choices that
the benchmarks measured, so a refactor that silently undoes one fails here, not only in a bench.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from pytensor.graph.basic import Constant
from pytensor.tensor.math import Dot
from pytensor.tensor.rewriting.fused_elemwise import FusedElemwise
from pytensor.tensor.subtensor import AdvancedSubtensor

import pymc_dp as pdp
from pymc_dp.step_methods.minibatch import draw_batch

N, D = 500, 4


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
    # the full kernel reads the (n, d) matrix only in the BLAS product X @ beta; every
    # element-wise loop reads contiguous (n,) columns
    for node in full.maker.fgraph.toposort():
        for v in node.inputs:
            if isinstance(v, Constant) and np.ndim(v.data) == 2 and np.shape(v.data)[0] == N:
                assert isinstance(node.op, Dot), node.op
    batch = lik.ratio_kernel(batch=True, squares=True)
    gathers = [
        node
        for node in batch.maker.fgraph.toposort()
        if isinstance(node.op, AdvancedSubtensor)
    ]
    gathered = [np.asarray(n.inputs[0].data) for n in gathers if isinstance(n.inputs[0], Constant)]
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
