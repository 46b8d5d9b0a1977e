"""The private noise-aware fit (issue 21): curvature and whitened releases and their bounds, the
clip chosen from a released histogram, the exact limit, calibration by simulation and the
report of the fit's error against measurement."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_dp as pdp
import pymc_dp.tuning.warm_start as warm_start_module
from pymc_dp.accounting import gaussian_mu_for_budget
from pymc_dp.kernel_rewrites import hessian_fn
from pymc_dp.noise import NoiseSource
from pymc_dp.tuning.warm_start import (
    FAKED_NORM_MARGIN,
    WALK_RHO,
    _geometric_mean,
    _Line,
    _retreat,
    _travel_noise,
    _unpack,
    _walk_remaining,
    choose_clip,
    warm_start,
)

N, D = 400, 3
FAST = {"mode": "FAST_COMPILE"}  # small models: compile in Python in a second


def _logistic(X: np.ndarray, y: np.ndarray, prior_sd: float = 2.5) -> pm.Model:
    with pm.Model() as model:
        b = pm.Normal("b", 0, prior_sd, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=y)
    return model


@pytest.fixture(scope="module")
def neighbours():
    """Two data sets that differ in one row, the second's row chosen to move the sums most
    (largest covariates, the outcome the model finds least likely)."""
    rng = np.random.default_rng(11)
    X = np.column_stack([np.ones(N), rng.uniform(-1, 1, (N, D - 1))])
    y = (rng.random(N) < 0.5).astype(int)
    X2, y2 = X.copy(), y.copy()
    X2[7], y2[7] = np.array([1.0, 1.0, -1.0]), 1 - y[7]
    X3 = X.copy()
    X3[7] = np.array([1.0, 1e155, -1.0])  # finite, but its squares overflow (found in review)
    # the default mode: the curvature and whitened kernels in NumPy, as users run them
    return (
        pdp.PerRowLikelihood(_logistic(X, y)),
        pdp.PerRowLikelihood(_logistic(X2, y2)),
        X,
        y,
        pdp.PerRowLikelihood(_logistic(X3, y2)),
    )


def _weighted(m: np.ndarray) -> np.ndarray:
    """The released vector of a symmetric matrix: its L2 norm is the Frobenius norm."""
    rows, cols = np.triu_indices(m.shape[0])
    return m[rows, cols] * np.where(rows == cols, 1.0, np.sqrt(2.0))


@pytest.mark.parametrize("observed", [True, False])
def test_replacing_one_row_moves_the_curvature_by_at_most_its_bound(neighbours, observed):
    """The released curvature moves by at most 2 c (observed information) or sqrt(2) c (outer
    products, positive semidefinite) in L2, for any metric and any clip, clipping active or not;
    the histogram of norms by at most sqrt(2)."""
    lik, lik2, _, _, lik3 = neighbours
    rng = np.random.default_rng(2)
    sens = 2.0 if observed else np.sqrt(2.0)
    largest = 0.0
    for trial in range(12):
        q = rng.normal(0, 1.5, D)
        w = rng.normal(0, 1, (D, D)) + 2 * np.eye(D)
        bound = np.asarray(10.0 ** rng.uniform(-3, 1))
        edges = np.r_[0.0, np.geomspace(1e-4, 10.0, 12)]
        s1, c1, _ = lik.curvature_kernel(observed)(q, w, bound, edges)
        for other in (lik2, lik3):
            s2, c2, _ = other.curvature_kernel(observed)(q, w, bound, edges)
            moved = np.linalg.norm(_weighted(s1) - _weighted(s2))
            assert moved <= sens * bound * (1 + 1e-12), (trial, moved / bound)
            assert np.linalg.norm(c1 - c2) <= np.sqrt(2.0) + 1e-12
        moved = np.linalg.norm(
            _weighted(s1) - _weighted(lik2.curvature_kernel(observed)(q, w, bound, edges)[0])
        )
        assert c1.sum() == N  # every row counted once
        largest = max(largest, moved / bound)
    assert largest > 1.0  # the bound is approached: the test can fail


def test_the_matrix_form_of_the_empirical_fisher_matches_the_unrolled_one(neighbours, monkeypatch):
    """Above ``_MAX_UNROLLED_FISHER_DIM`` coordinates, and wherever the kernel runs op by op in
    NumPy (the default here), the empirical Fisher is one matrix product (the unrolled kernel
    took Numba 150 s to compile at D = 24). Against the unrolled kernel, forced: the same sums
    and counts, clipping active or not, and replacing one row (the overflowing one included)
    moves it by at most sqrt(2) c."""
    import pymc_dp.clipped_kernels as kernels_module

    monkeypatch.setattr(kernels_module, "_MAX_UNROLLED_FISHER_DIM", 0)
    lik, lik2, X, y, lik3 = neighbours
    fresh = [pdp.PerRowLikelihood(other.model) for other in (lik, lik2, lik3)]
    with monkeypatch.context() as forced:
        forced.setattr(kernels_module.ClippedKernels, "_unrolled_fisher", lambda self: True)
        unrolled = pdp.PerRowLikelihood(lik.model).curvature_kernel(False)
    rng = np.random.default_rng(3)
    edges = np.r_[0.0, np.geomspace(1e-4, 10.0, 12)]
    largest = 0.0
    for trial in range(8):
        q = rng.normal(0, 1.5, D)
        w = rng.normal(0, 1, (D, D)) + 2 * np.eye(D)
        bound = np.asarray(10.0 ** rng.uniform(-3, 1))
        s1, c1, g1 = fresh[0].curvature_kernel(False)(q, w, bound, edges)
        s0, c0, g0 = unrolled(q, w, bound, edges)
        np.testing.assert_allclose(s1, s0, rtol=1e-9, atol=1e-12 * float(bound))
        np.testing.assert_array_equal(c1, c0)
        np.testing.assert_allclose(g1, g0)
        for other in fresh[1:]:
            s2, c2, _ = other.curvature_kernel(False)(q, w, bound, edges)
            moved = np.linalg.norm(_weighted(s1) - _weighted(s2))
            assert moved <= np.sqrt(2.0) * bound * (1 + 1e-12), (trial, moved / bound)
            assert np.all(np.isfinite(s2)) and np.linalg.norm(c1 - c2) <= np.sqrt(2.0) + 1e-12
            largest = max(largest, moved / float(bound))
    assert largest > 1.0  # the bound is approached: the test can fail


def test_replacing_one_row_moves_the_whitened_gradient_by_at_most_its_bound(neighbours):
    """Also for a row whose whitened norm overflows (it adds 0, never its unclipped value)."""
    lik, lik2, _, _, lik3 = neighbours
    rng = np.random.default_rng(3)
    largest = 0.0
    for _ in range(12):
        q = rng.normal(0, 1.5, D)
        w = rng.normal(0, 1, (D, D)) + 2 * np.eye(D)
        bound = np.asarray(10.0 ** rng.uniform(-2, 1))
        edges = np.r_[0.0, np.geomspace(1e-3, 10.0, 12)]
        s1, c1, _ = lik.whitened_kernel()(q, w, bound, edges)
        for other in (lik2, lik3):
            s2, c2, _ = other.whitened_kernel()(q, w, bound, edges)
            moved = np.linalg.norm(s1 - s2)
            assert moved <= 2.0 * bound * (1 + 1e-12)
            assert np.linalg.norm(c1 - c2) <= np.sqrt(2.0) + 1e-12
        moved = np.linalg.norm(s1 - lik2.whitened_kernel()(q, w, bound, edges)[0])
        largest = max(largest, moved / bound)
    assert largest > 1.0


def test_glm_hess_clip_never_clips_and_the_kernels_match_numpy(neighbours):
    """With the public bound of pdp.glm_clip nothing is clipped: the release is X^T diag(p (1 -
    p)) X exactly; the whitened kernel sums W x_i (y_i - p_i)."""
    lik, _, X, y, _ = neighbours
    clip = pdp.glm_clip(np.ones(D))
    q = np.array([0.3, -1.0, 2.0])
    p = 1 / (1 + np.exp(-X @ q))
    info = (X * (p * (1 - p))[:, None]).T @ X
    total, _, _ = lik.curvature_kernel()(q, np.eye(D), np.asarray(clip.hess_clip), np.zeros(1))
    np.testing.assert_allclose(total, info, rtol=1e-10)
    w = np.linalg.inv(np.linalg.cholesky(info))
    total, counts, _ = lik.whitened_kernel()(q, w, np.asarray(1e6), np.array([0.0, 0.1]))
    white = (X * (y - p)[:, None]) @ w.T
    np.testing.assert_allclose(total, white.sum(0), rtol=1e-10)
    assert counts[1] == np.sum(np.linalg.norm(white, axis=1) >= 0.1)
    # the tracked triangle is the Frobenius norm: unpack inverts it
    np.testing.assert_allclose(_unpack(_weighted(info), D, True), info)


def test_the_weighted_gradient_kernel_matches_numpy_and_keeps_its_sensitivity(neighbours):
    """Each row's whitened gradient times its curvature's clipping factor ``min(1, c_h / |W_c
    H_i W_c^T|_F)`` (logistic: ``H_i = p(1-p) x x^T``, Frobenius norm ``p(1-p) |W_c x|^2``),
    then clipped and summed; factors in [0, 1] keep the bound on one row's move."""
    lik, lik2, X, y, _ = neighbours
    q = np.array([0.3, -1.0, 2.0])
    p = 1 / (1 + np.exp(-X @ q))
    w = np.array([[2.0, 0.0, 0.0], [0.5, 1.5, 0.0], [-0.3, 0.2, 3.0]])
    w_c = np.array([[1.0, 0.2, 0.0], [0.0, 2.0, 0.0], [0.1, 0.0, 0.5]])
    norm_h = p * (1 - p) * np.sum((X @ w_c.T) ** 2, axis=1)
    c_h = float(np.quantile(norm_h, 0.5))  # half the rows' curvature clipped
    factor = np.minimum(1.0, c_h / norm_h)
    assert np.mean(factor < 1.0) > 0.4
    white = (X * (factor * (y - p))[:, None]) @ w.T
    edges = np.array([0.0, 0.1, 0.5])
    for bound in (1e6, 0.2):
        kept = np.minimum(1.0, bound / np.linalg.norm(white, axis=1))
        total, counts, _ = lik.whitened_kernel(weighted=True)(
            q, w, np.asarray(bound), edges, w_c, np.asarray(c_h)
        )
        np.testing.assert_allclose(total, (white * kept[:, None]).sum(0), rtol=1e-10)
        norms = np.linalg.norm(white, axis=1)
        assert counts[1] == np.sum((norms >= 0.1) & (norms < 0.5))
        moved = (
            total
            - lik2.whitened_kernel(weighted=True)(
                q, w, np.asarray(bound), edges, w_c, np.asarray(c_h)
            )[0]
        )
        assert np.linalg.norm(moved) <= 2 * bound * (1 + 1e-12)


def _random_intercepts(groups: int) -> pm.Model:
    """Random intercepts of ``groups`` groups, two covariates, Normal rows of unknown sd: D =
    groups + 5 coordinates in the model's own (mu, tau, z, beta, sigma)."""
    rng = np.random.default_rng(groups)
    g = np.repeat(np.arange(groups), 12)
    x = rng.uniform(-1, 1, (g.size, 2))
    y = 1 + rng.normal(0, 1, groups)[g] + x @ [0.5, -1.0] + rng.normal(0, 0.5, g.size)
    with pm.Model() as model:
        index, covariates = pm.Data("g", g), pm.Data("X", x)
        mu, tau = pm.Normal("mu", 0, 3), pm.HalfNormal("tau", 2)
        z = pm.Normal("z", 0, 1, shape=groups)
        beta, sigma = pm.Normal("beta", 0, 2, shape=2), pm.HalfNormal("sigma", 1)
        eta = mu + tau * z[index] + pm.math.dot(covariates, beta)
        pm.Normal("y", eta, sigma, observed=y)
    return model


def test_the_observed_curvature_kernel_does_not_grow_with_the_coordinates():
    """The observed information is one second directional derivative vectorised over the
    triangle's pairs of rows of W: its compiled graph is as large for 6 groups (D = 11) as for
    1 (D = 6). Built entry by entry (a push-forward pair for each of the D (D + 1) / 2 entries),
    it grew with D^2 (1231 nodes at D = 7, 2737 at D = 11) and its rewriting faster still:
    statsmodels' grunfeld (11 firms, D = 14) took 80 s to build, 0.2 s now. At a point far
    from the mode and with nothing clipped, it is ``-W H W^T``, ``H`` the Hessian of the rows'
    sum (review: a random ``W``, as ``I`` cannot tell ``W`` from ``W^T``)."""
    sizes = []
    for groups in (1, 6):
        model = _random_intercepts(groups)
        lik = pdp.PerRowLikelihood(model)
        kernel = lik.curvature_kernel()
        assert type(kernel.maker.linker).__name__ == "PerformLinker"  # run once: in NumPy
        sizes.append(len(kernel.maker.fgraph.apply_nodes))
    assert sizes[1] <= 1.1 * sizes[0], sizes  # (a rewrite may shift a node or two)
    rng = np.random.default_rng(0)
    q = rng.normal(0, 1, lik.dim)
    w = rng.normal(0, 1, (lik.dim, lik.dim))  # not symmetric: W and W^T differ
    total, _, _ = kernel(q, w, np.asarray(1e12), np.zeros(1))
    # reverse over reverse mode, a vectorised Jacobian of the rows' summed gradient
    minus_hessian = -hessian_fn(pt.sum(lik._rows), lik._q)(q)
    np.testing.assert_allclose(total, w @ minus_hessian @ w.T, rtol=1e-9, atol=1e-9)


def test_counts_within_noise_above_the_bulk_read_as_empty_where_asked():
    """``significant``: a noise count of 2 sds in an empty top bin no longer holds the clip up
    (the sd lottery of the last curvature release); a bump of rows beyond it still does; a
    histogram whose modal count is itself within noise keeps every count."""
    edges = np.r_[0.0, np.geomspace(0.01, 10.0, 8)]
    bulk = np.array([50.0, 400.0, 3000.0, 800.0, 60.0, 0.0, 0.0, 0.0, 0.0])
    noisy = bulk + np.r_[np.zeros(8), 34.0]  # 2 sds of 17 in the top bin
    per_unit, sd = 1e-3, 17.0
    plain, _ = choose_clip(noisy, edges, 20.0, per_unit, 4, pool=False)
    read, _ = choose_clip(noisy, edges, 20.0, per_unit, 4, pool=False, significant=3 * sd)
    clean, _ = choose_clip(bulk, edges, 20.0, per_unit, 4, pool=False)
    assert plain == 20.0 and read == clean < 1.0, (plain, read, clean)
    bump = bulk + np.r_[np.zeros(8), 120.0]  # 7 sds: rows
    assert choose_clip(bump, edges, 20.0, per_unit, 4, pool=False, significant=3 * sd)[0] == 20.0
    drowned = np.array([10.0, 30.0, 20.0, 0.0, 0.0, 0.0, 0.0, 0.0, 34.0])
    assert (
        choose_clip(drowned, edges, 20.0, per_unit, 4, pool=False, significant=3 * sd)[0]
        == choose_clip(drowned, edges, 20.0, per_unit, 4, pool=False)[0]
    )


def test_choose_clip_trades_noise_against_what_clipping_removes():
    edges = np.array([0.0, 1.0, 2.0, 4.0])  # bins [0,1) [1,2) [2,4) [4, top=8)
    counts = np.array([1000.0, 100.0, 10.0, 0.0])
    # no noise: the smallest clip that removes nothing
    assert choose_clip(counts, edges, 8.0, 0.0, 3) == (4.0, 0.0)
    # noise: clipping at 2 removes at most 10 x (4 - 2) = 20 in norm
    c, bias = choose_clip(counts, edges, 8.0, 5.0, 3)
    assert c == 2.0 and bias == pytest.approx(20.0)
    # much noise: clip at 1, removing at most 100 x 1 + 10 x 3 = 130
    c, bias = choose_clip(counts, edges, 8.0, 200.0, 3)
    assert c == 1.0 and bias == pytest.approx(130.0)
    # counts drowned in noise (std x sqrt(bins) > 10% of the rows): never below 3x the median
    c, _ = choose_clip(counts, edges, 8.0, 200.0, 3, count_std=100.0)
    assert c >= 3.0


@pytest.fixture(scope="module")
def glm():
    """Logistic regression with correlated, uncentred covariates, its exact MAP and Laplace
    covariance."""
    rng = np.random.default_rng(5)
    n = 20_000
    z = rng.uniform(-1, 1, (n, 2))
    X = np.column_stack([np.ones(n), z[:, 0], 0.6 * z[:, 0] + 0.4 * z[:, 1], rng.random(n) < 0.1])
    X[:, 3] = 2 * X[:, 3] - 1  # a rare flag, centred on its public range
    beta = np.array([0.8, 1.0, -0.7, 0.5])
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ beta))).astype(int)
    model = _logistic(X, y)
    q = np.zeros(4)
    for _ in range(30):
        p = 1 / (1 + np.exp(-X @ q))
        h = (X * (p * (1 - p))[:, None]).T @ X + np.eye(4) / 6.25
        q = q + np.linalg.solve(h, X.T @ (y - p) - q / 6.25)
    clip = pdp.glm_clip(np.ones(4))
    return model, pdp.PerRowLikelihood(model), q, np.linalg.inv(h), clip


def test_without_noise_the_fit_is_the_exact_laplace_approximation(glm):
    _, lik, q, cov, clip = glm
    ws = warm_start(
        lik, grad_clip=clip.grad_clip, hess_clip=clip.hess_clip, mu=1e14, noise=NoiseSource(0)
    )
    sd = np.sqrt(np.diag(cov))
    np.testing.assert_allclose(ws.mean, q, atol=1e-3 * sd.min())
    np.testing.assert_allclose(ws.cov, cov, rtol=1e-3)
    assert np.all(np.sqrt(np.diag(ws.noise_cov)) < 1e-3 * sd)
    assert ws.errors["walk"] < 1e-3


def test_a_walk_still_moving_carries_the_distance_left_in_its_intervals(glm):
    """One noise-free Newton step from 0 stops 3.4 posterior sds short of the mode (logistic
    curvature at 0 overstates the curvature on the way), with no privacy noise to widen the fit:
    without the walk's term its intervals were ~0 wide around a wrong mean. The term (the last
    step's length while the walk still moves, released values only) covers it; four steps reach
    the mode and add nothing (the exact-Laplace test above)."""
    _, lik, q, cov, clip = glm
    sd = np.sqrt(np.diag(cov))
    ws = warm_start(
        lik,
        grad_clip=clip.grad_clip,
        hess_clip=clip.hess_clip,
        mu=1e14,
        noise=NoiseSource(0),
        steps=1,
    )
    assert np.max(np.abs(ws.mean - q) / sd) > 1.0  # the walk is short of the mode
    own = np.abs(ws.mean - q) / np.sqrt(np.diag(ws.posterior_cov))
    assert np.all(own < 1.645), own
    assert ws.errors["walk"] > 1.0 and ws.expected_largest_error > np.max(np.abs(ws.mean - q) / sd)


def _far_mode_logistic(beta: np.ndarray, n: int = 5000):
    """Kernels of a logistic regression with large coefficients (its mode far from 0: the
    Newton walk is slow) on uniform covariates (fixed seed), and its exact mode (prior sd 2.5)."""
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(n), rng.uniform(-1, 1, (n, beta.size - 1))])
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ beta))).astype(int)
    lik = pdp.PerRowLikelihood(_logistic(X, y), compile_kwargs=FAST)
    q = np.zeros(beta.size)
    for _ in range(100):
        p = 1 / (1 + np.exp(-X @ q))
        h = (X * (p * (1 - p))[:, None]).T @ X + np.eye(beta.size) / 6.25
        q = q + np.linalg.solve(h, X.T @ (y - p) - q / 6.25)
    return lik, q


def _own_errors(lik, q, clip, eps, seeds, **kwargs) -> list[float]:
    """Per seed, the fit's largest distance from the exact mode ``q`` in its own sds."""
    mu = gaussian_mu_for_budget(eps, 1e-6)
    out = []
    for seed in seeds:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ws = warm_start(
                lik,
                grad_clip=clip.grad_clip,
                hess_clip=clip.hess_clip,
                mu=mu,
                noise=NoiseSource(seed),
                **kwargs,
            )
        out.append(float(np.max(np.abs(ws.mean - q) / np.sqrt(np.diag(ws.posterior_cov)))))
        # what the report publishes: floats from released values only (no step vector)
        assert all(type(v) is float for v in ws.errors.values()), ws.errors
        ws.to_attr([f"b[{j}]" for j in range(q.size)])
    return out


def test_a_slow_walk_is_not_confidently_wrong_when_its_last_targets_agree():
    """Found in review: large coefficients (a mode far from 0: logistic curvature there is a
    fraction of that at 0), n = 5000, epsilon 1, three steps. The walk is still moving, its last
    two Newton targets fall short by the same amount and agree within their noise, and
    averaging them dropped the walk's term: seeds 6, 14, 22 and 39 ended 3.6-5.7 of their own
    sds from the exact mode. With the term kept they are within 3 (measured: 1.4 at most over
    seeds 0-39; 1.27 with the term taken along the step before, 1.6 with four steps)."""
    lik, q = _far_mode_logistic(np.array([3.0, 4.0, -3.0]))
    own = _own_errors(lik, q, pdp.glm_clip(np.ones(3)), 1.0, (6, 14, 22, 39), steps=3)
    assert max(own) < 3.0, own


@pytest.fixture(scope="module")
def few_rows():
    """Kernels of a logistic regression on 32 rows (four coefficients, prior sd 2.5, fixed
    seed), its exact mode and the posterior's sds there (the Laplace approximation)."""
    rng = np.random.default_rng(3)
    n = 32
    X = np.column_stack([np.ones(n), rng.uniform(-1, 1, (n, 3))])
    y = rng.binomial(1, 1 / (1 + np.exp(-(X @ [-0.5, 1.0, 0.5, -1.0]))))
    lik = pdp.PerRowLikelihood(_logistic(X, y), compile_kwargs=FAST)
    q = np.zeros(4)
    for _ in range(100):
        p = 1 / (1 + np.exp(-X @ q))
        h = (X * (p * (1 - p))[:, None]).T @ X + np.eye(4) / 6.25
        q = q + np.linalg.solve(h, X.T @ (y - p) - q / 6.25)
    return lik, q, np.sqrt(np.diag(np.linalg.inv(h)))


def test_a_few_rows_at_a_small_budget_are_not_confidently_wrong(few_rows):
    """Found in the sweep of real data (statsmodels' spector, n = 32, epsilon 1): the first
    Newton step's noise (~70 posterior sds in its metric) threw the walk up to 25 prior sds
    away; every later curvature was its noise floor, 100x the information, and the steps under
    it could not come back, while the spread held the last step's noise only: 8 seeded fits
    1-26 of their own sds off. On these 32 rows 7 of 20 seeds ended beyond 3 own sds (the
    worst 45) at epsilon 1, one (12) at epsilon 4. The travel steps' noise the later steps
    could not remove is now in the spread: measured at most 2.04 own sds at epsilon 1, 2.48 at
    epsilon 4, and the fit says how little it knows (its stated error beyond the posterior's sd)."""
    lik, q, sd = few_rows
    clip = pdp.glm_clip(np.ones(4))
    for eps in (1.0, 4.0):
        own = _own_errors(lik, q, clip, eps, range(20))
        assert max(own) < 3.0, (eps, np.round(own, 2))
    ws = warm_start(
        lik,
        grad_clip=clip.grad_clip,
        hess_clip=clip.hess_clip,
        mu=gaussian_mu_for_budget(1.0, 1e-6),
        noise=NoiseSource(4),
    )
    assert ws.errors["travel"] > ws.errors["location"]
    # the error the fit states exceeds the posterior's own sd (measured 2.2-2.95 against
    # 0.57-0.91; before, the last step's noise alone: ~0.4)
    assert np.all(np.sqrt(np.diag(ws.noise_cov)) > sd), (np.diag(ws.noise_cov), sd)


def test_a_prior_the_data_disagree_with_does_not_make_the_fit_confidently_wrong():
    """Found in review of a pull of the estimate towards the prior's centre (the Gaussian
    posterior of the mode given the estimate, coherent when the data come from the prior): a
    slope of 5 under a Normal(0, 1) prior on 100 rows at epsilon 1 (exact mode 3.31, sd 0.52)
    came out as the prior itself, 8 of 10 seeds beyond 3 own sds (the parent commit: 1 of
    10). The travel steps' noise goes into the spread, the mean stays: measured at most 1.35
    own sds over seeds 0-9."""
    n = 100
    rng = np.random.default_rng(1)
    X = np.column_stack([np.ones(n), rng.uniform(-1, 1, n)])
    y = rng.binomial(1, 1 / (1 + np.exp(-(X @ [0.0, 5.0]))))
    lik = pdp.PerRowLikelihood(_logistic(X, y, prior_sd=1.0), compile_kwargs=FAST)
    q = np.zeros(2)
    for _ in range(100):
        p = 1 / (1 + np.exp(-X @ q))
        h = (X * (p * (1 - p))[:, None]).T @ X + np.eye(2)
        q = q + np.linalg.solve(h, X.T @ (y - p) - q)
    own = _own_errors(lik, q, pdp.glm_clip(np.ones(2)), 1.0, range(10))
    assert max(own) < 3.0, np.round(own, 2)


def test_travel_noise_is_removed_by_a_metric_that_matches_and_kept_by_a_floored_one():
    """A Newton step under the posterior's own curvature removes the error it starts from (its
    noise alone is left, the fit's ``location``); under a metric 100x too stiff it removes 1% of
    it: the first step's noise stays nearly whole."""
    h = np.diag([4.0, 1.0])
    matched = [(h, 9.0), (h, 4.0), (h, 1.0)]
    np.testing.assert_allclose(_travel_noise(matched, h), 0.0, atol=1e-12)
    stiff = 100.0 * h
    carried = _travel_noise([(stiff, 9.0), (stiff, 4.0), (stiff, 1.0)], h)
    keep = 0.99  # 1 - h / (100 h) per step
    expected = (9.0 * keep**4 + 4.0 * keep**2) * np.linalg.inv(stiff)
    np.testing.assert_allclose(carried, expected, rtol=1e-12)


def test_the_geometric_mean_of_two_curvatures():
    """``a # b``: symmetric, ``sqrt(a b)`` where they commute, and ``(a # b) a^{-1} (a # b)
    = b`` (its defining Riccati equation) where they do not."""
    np.testing.assert_allclose(
        _geometric_mean(np.diag([0.16, 4.0]), np.diag([72.0, 9.0])), np.diag([np.sqrt(11.52), 6.0])
    )
    rng = np.random.default_rng(0)
    u, v = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
    a, b = u @ u.T + 0.1 * np.eye(3), v @ v.T + 0.1 * np.eye(3)
    g = _geometric_mean(a, b)
    np.testing.assert_allclose(g, g.T, atol=1e-10)
    np.testing.assert_allclose(g @ np.linalg.solve(a, g), b, rtol=1e-8, atol=1e-10)


def test_only_the_part_of_the_last_step_along_the_one_before_counts_as_walk_left():
    """Found measuring: the README's quickstart fit (randhie, d = 4, epsilon 4) had arrived
    within 0.2 posterior sds, yet 13% of 30 runs came out 1.6-2.5x too wide: its last step,
    nearly orthogonal to the one before (cosine 0.04) or along it within its noise, was taken
    for a walk still moving and 4x its length added to the spread. The values are from those
    runs (metric = identity: lengths in posterior sds)."""
    m = np.eye(4)
    noise = 0.37  # expected norm of the last step's noise: 0.185 per direction
    previous = np.array([0.56, 0.0, 0.0, 0.0])
    across = np.array([0.016, 0.45, 0.0, 0.0])  # cosine 0.036 with the step before
    assert _walk_remaining(across, previous, m, float(np.linalg.norm(across)), noise) is None
    within = np.array([0.3, 0.3, 0.0, 0.0])  # along it by 0.3 < 2 x 0.185
    assert _walk_remaining(within, previous, m, float(np.linalg.norm(within)), noise) is None
    # a walk still moving (its steps aligned, shrinking by 0.6): 1.5x the last step is left
    moving = np.array([1.2, 0.1, 0.0, 0.0])
    length = float(np.linalg.norm(moving))
    left = _walk_remaining(moving, np.array([2.0, 0.0, 0.0, 0.0]), m, length, noise)
    rho = length / 2.0
    np.testing.assert_allclose(left, rho / (1 - rho) * moving)
    # read direction by direction: across it the step is within its noise and adds nothing
    left = _walk_remaining(moving, np.array([2.0, 0.0, 0.0, 0.0]), m, length, noise, True)
    np.testing.assert_allclose(left, [0.6 / 0.4 * 1.2, 0.0, 0.0, 0.0], atol=1e-12)


def test_a_two_step_walk_far_from_its_mode_keeps_the_whole_last_step_in_its_spread():
    """Found in review of the fix above: taking as left only the last step's part along the one
    before (not the whole step), a two-step fit with large coefficients (n = 5000, epsilon 2)
    ended beyond 3 of its own sds from the exact mode in 25 of 40 seeds, against 2 of 40 with
    the whole step: the distance left lies along the last step. Seeds 0-19 here: at most 3 fits
    beyond 3 own sds (the partial rule measured about half of them)."""
    lik, q = _far_mode_logistic(np.array([4.0, 0.5, -0.5, 3.0, -4.0]))
    own = _own_errors(lik, q, pdp.glm_clip(np.ones(5)), 2.0, range(20), steps=2)
    beyond = sum(o > 3.0 for o in own)
    assert beyond <= 3, beyond


def test_a_step_under_growing_curvature_retreats_short_of_the_root():
    """Along a Newton step (``s = 1`` under the start's curvature) the curvature of a sum of
    rows grows as ``sum_i c_i exp(k_i s)``: the retreat lands short of the directional
    derivative's root (the near side, whence Newton does not overshoot again), but not by much;
    a growth within the curvature's noise, or below ``RETREAT_GROWTH``, keeps the step."""
    from scipy.optimize import brentq

    step, m_from = np.array([1.0, 0.0]), np.eye(2)
    assert _retreat(step, m_from, 1.9 * np.eye(2), 0.0) == 1.0
    assert _retreat(step, m_from, 5.0 * np.eye(2), 4.0) == 1.0  # within the noise
    for c, k in (([1.0], [3.0]), ([0.7, 0.3], [1.0, 6.0]), ([0.2, 0.5, 0.3], [0.5, 2.0, 8.0])):
        c, k = np.array(c), np.array(k)
        grown = float(np.sum(c * np.exp(k)))  # curvature at s = 1 over that at s = 0 (= 1)
        root = brentq(lambda s, c=c, k=k: 1.0 - np.sum(c * np.expm1(k * s) / k), 0.0, 1.0)
        back = _retreat(step, m_from, grown * np.eye(2), 0.0)
        assert 0.5 * root < back <= root + 1e-12, (c, k, back, root)


def test_the_bracket_finds_the_root_of_an_exponentially_growing_curvature():
    """Along a segment where the curvature grows as ``k0 exp(k s)``, the derivative is
    ``d0 - k0 (exp(k s) - 1) / k``: from the derivatives at both ends and the curvature at the
    near one the bracket's root is exact; with a constant curvature it is the secant's; and a
    growth beyond what a float holds falls back on the secant's root (finite, inside)."""
    d0, k0, k = 1.0, 1.0, 3.0
    d1 = d0 - k0 * np.expm1(k) / k
    line = _Line(np.zeros(2), np.array([1.0, 0.0]), 0.0, d0, k0, 1.0, d1)
    np.testing.assert_allclose(line.root(), np.log1p(k * d0 / k0) / k, rtol=1e-8)
    flat = _Line(np.zeros(2), np.array([1.0, 0.0]), 0.0, 1.0, 3.0, 1.0, -2.0)
    np.testing.assert_allclose(flat.root(), 1.0 / 3.0)
    extreme = _Line(np.zeros(2), np.array([1.0, 0.0]), 0.0, 1.0, 1e-300, 1.0, -1e10)
    assert 0.0 < extreme.root() < 1.0


def _poisson(X: np.ndarray, beta, seed: int = 0):
    """A Poisson regression on ``X`` (FAST_COMPILE) and its exact mode (Newton in the clear)."""
    y = np.random.default_rng(seed).poisson(np.exp(X @ np.asarray(beta, dtype=float)))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 2.5, shape=X.shape[1])
        pm.Poisson("y", mu=pm.math.exp(pm.math.dot(X, b)), observed=y)
    prec = np.eye(X.shape[1]) / 2.5**2

    def log_post(q):
        eta = X @ q
        return float(y @ eta - np.exp(eta).sum() - 0.5 * q @ prec @ q)

    q = np.zeros(X.shape[1])
    for _ in range(200):  # Newton, halving a step that does not climb
        mean = np.exp(X @ q)
        step = np.linalg.solve((X * mean[:, None]).T @ X + prec, X.T @ (y - mean) - prec @ q)
        while log_post(q + step) < log_post(q) and np.abs(step).max() > 1e-12:
            step = 0.5 * step
        q = q + step
    return pdp.PerRowLikelihood(model, compile_kwargs=FAST), q


def _design(kind: str, n: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    if kind.startswith("uniform"):
        d = int(kind[len("uniform") :] or 3)
        return np.column_stack([np.ones(n), rng.uniform(-1, 1, (n, d - 1))])
    if kind == "binary":
        return np.column_stack([np.ones(n), np.where(rng.random((n, 2)) < 0.5, -1.0, 1.0)])
    g = rng.random(n) < 0.5  # two groups' cell means and one covariate
    return np.column_stack([g, ~g, rng.uniform(-1, 1, n)]).astype(float)


@pytest.mark.parametrize(
    ("design", "beta", "eta_bound", "steps", "eps", "start", "before"),
    [
        # found in review; "before": fits beyond 3 own sds of 20 on the reviewer's draw of the
        # data, without the retreat, then with its first version (no bracket, no secant)
        ("uniform", (1.0, 1.5, -1.0), 3.5, 4, 2.0, None, "4, then 0"),
        ("uniform", (2.5, 0.5, -0.5), 3.5, 4, 4.0, None, "20, then 14"),
        ("binary", (1.0, 2.0, -1.0), 4.0, 4, 4.0, None, "20, then 19"),
        ("groups", (1.5, -2.0, 0.3), 2.5, 2, 2.0, None, "1, then 20"),
        ("uniform", (0.0, 2.5, -1.0), 3.5, 2, 4.0, None, "4, then 19"),
        # found in the second review (the bracket held the mode on the first step's line):
        # before the retreat, its first version, the version with that bracket
        ("uniform6", (1.5, 1.0, -0.8, 0.5, 0.3, -0.2), 4.0, 2, 4.0, None, "20, 0, 3-5"),
        ("uniform", (1.0, 1.5, -1.0), 3.5, 4, 4.0, (0.0, -1.5, 1.0), "18-19, 0-1, 3-5"),
    ],
)
def test_poisson_with_hess_clip_is_not_confidently_wrong(
    design, beta, eta_bound, steps, eps, start, before
):
    """Found in review: Poisson regression with ``hess_clip`` walks from 0 past the mode by
    hundreds of posterior sds (the curvature ``exp(eta)`` at the start understates it on the
    way) and crawls back under a curvature now too large; fits ended beyond 3 of their own sds
    in up to 20 of 20 seeds. The walk now retreats, brackets the root along the overshooting
    step and keeps what it cannot resolve in its spread: measured at most 1 of 20 beyond 3 own
    sds in each setting (largest 2.2)."""
    n = 2000 if design == "uniform" else 5000
    lik, q = _poisson(_design(design, n), beta)
    clip = pdp.glm_clip(
        np.ones(len(beta)), "poisson", y_bound=float(np.exp(eta_bound)), eta_bound=eta_bound
    )
    own = _own_errors(
        lik, q, clip, eps, range(20), steps=steps, start=None if start is None else np.array(start)
    )
    assert sum(o > 3.0 for o in own) <= 1 and max(own) < 6.0, (before, np.round(own, 2))


def test_the_report_of_the_fit_error_matches_measurement(glm):
    """Over 20 runs at epsilon 2, the fit's own figure for its largest error (released values
    only) is within 2x of the measured median largest error, and its intervals cover. Measured:
    median largest error 0.55 posterior sds, the report's median 0.56, coverage 1.0."""
    _, lik, q, cov, clip = glm
    sd = np.sqrt(np.diag(cov))
    mu = gaussian_mu_for_budget(2.0, 1e-6)
    fits = [
        warm_start(
            lik, grad_clip=clip.grad_clip, hess_clip=clip.hess_clip, mu=mu, noise=NoiseSource(r)
        )
        for r in range(20)
    ]
    measured = np.median([np.max(np.abs(f.mean - q) / sd) for f in fits])
    reported = np.median([f.expected_largest_error for f in fits])
    assert 0.5 < reported / measured < 2.0, (reported, measured)
    z = np.array([(f.mean - q) / np.sqrt(np.diag(f.posterior_cov)) for f in fits])
    assert np.mean(np.abs(z) < 1.645) >= 0.85 and np.abs(z).max() < 3.0


def test_simulation_based_calibration_of_the_noise_aware_fit():
    """Simulation-based calibration: parameters drawn from the prior, data from the model, one
    private fit each (epsilon 2, n = 500, fixed seeds). The noise-aware 90% intervals cover the
    true parameter in >= 85% of 200 (parameter, data set) pairs (measured 0.94; Monte Carlo sd
    of a 90% coverage over 200 pairs 0.021); the plain Laplace intervals, blind to the noise,
    do not (measured 0.80): the noise is in the spread, and the test can fail. (At epsilon 1
    the noise-aware coverage measured 0.86, at epsilon 0.5 0.80: see the README.)"""
    n, reps = 500, 100
    x = np.random.default_rng(0).uniform(-1, 1, n)
    X = np.column_stack([np.ones(n), x])
    noise_aware, plain = [], []
    mu = gaussian_mu_for_budget(2.0, 1e-6)
    for r in range(reps):
        rng = np.random.default_rng([7, r])
        beta = rng.normal(0, 1, 2)
        y = (rng.random(n) < 1 / (1 + np.exp(-X @ beta))).astype(int)
        lik = pdp.PerRowLikelihood(_logistic(X, y, prior_sd=1.0), compile_kwargs=FAST)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ws = warm_start(lik, grad_clip=np.sqrt(2), hess_clip=0.5, mu=mu, noise=NoiseSource(r))
        noise_aware.append((beta - ws.mean) / np.sqrt(np.diag(ws.posterior_cov)))
        # the Laplace covariance at the fit, blind to the noise: the exact curvature there
        exact = (X.T * np.exp(X @ ws.mean)) @ X + np.eye(2) / 0.25
        plain.append((beta - ws.mean) / np.sqrt(np.diag(np.linalg.inv(exact))))
    assert np.mean(np.abs(noise_aware) < 1.645) >= 0.85
    assert np.mean(np.abs(plain) < 1.645) < 0.85


def test_simulation_based_calibration_where_clipping_bites():
    """Simulation-based calibration of Poisson regression, whose rows' scores and curvatures are
    heavy-tailed: the clips chosen from released histograms cut the tail (a clipping bias in
    >= 80% of fits) and bounds from public facts are loose (``eta_bound`` 3.5 where the rows
    reach about 2.5). Parameters from the prior, counts from the model, one fit each (epsilon 1,
    n = 3000, fixed seeds): the noise-aware 90% intervals cover the true parameter in >= 85% of
    120 (parameter, data set) pairs (measured 0.98, Monte Carlo sd 0.027; clipped in 56 of 60
    fits, the walk retreated in 10); the Laplace intervals at the fit, blind to the noise (the
    exact curvature there), do not (measured 0.54; the fit's own curvature part, ``ws.cov``,
    with what the curvature's noise may fake removed, covers 0.875)."""
    n, reps = 3000, 60
    x = np.random.default_rng(0).uniform(-1, 1, n)
    X = np.column_stack([np.ones(n), x])
    clip = pdp.glm_clip(np.ones(2), "poisson", y_bound=float(np.exp(3.5)), eta_bound=3.5)
    mu = gaussian_mu_for_budget(1.0, 1e-6)
    noise_aware, plain, clipped = [], [], 0
    for r in range(reps):
        rng = np.random.default_rng([7, r])
        beta = np.array([rng.normal(1.0, 0.5), rng.normal(0.0, 0.5)])
        y = rng.poisson(np.exp(X @ beta))
        with pm.Model() as model:
            b0, b1 = pm.Normal("b0", 1.0, 0.5), pm.Normal("b1", 0.0, 0.5)
            pm.Poisson("y", mu=pm.math.exp(b0 + b1 * x), observed=y)
        lik = pdp.PerRowLikelihood(model, compile_kwargs=FAST)
        ws = warm_start(
            lik, grad_clip=clip.grad_clip, hess_clip=clip.hess_clip, mu=mu, noise=NoiseSource(r)
        )
        noise_aware.append((beta - ws.mean) / np.sqrt(np.diag(ws.posterior_cov)))
        # the Laplace covariance at the fit, blind to the noise: the exact curvature there
        exact = (X.T * np.exp(X @ ws.mean)) @ X + np.eye(2) / 0.25
        plain.append((beta - ws.mean) / np.sqrt(np.diag(np.linalg.inv(exact))))
        clipped += ws.errors["bias"] > 0.0
    assert clipped >= 0.8 * reps, clipped
    covered = np.mean(np.abs(noise_aware) < 1.645)
    assert covered >= 0.85, covered
    assert np.mean(np.abs(plain) < 1.645) < 0.85


def test_dplaplace_warns_where_its_fit_is_no_narrower_than_the_prior(few_rows, glm):
    """On 32 rows at epsilon 1 the fit's stated errors reach the prior's width: the step says
    the budget bought nothing there (public: the fit and the prior's curvature). On 20 000
    rows it does not."""
    lik, _, _ = few_rows
    clip = pdp.glm_clip(np.ones(4))
    with lik.model, pytest.warns(UserWarning, match="at least as wide as the prior"):
        pdp.DPLaplace(epsilon=1.0, grad_clip=clip.grad_clip, hess_clip=clip.hess_clip, noise_seed=4)
    model, _, _, _, clip = glm
    with model, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdp.DPLaplace(epsilon=4.0, grad_clip=clip.grad_clip, hess_clip=clip.hess_clip, noise_seed=3)
    assert not [w for w in caught if "as wide as the prior" in str(w.message)]


def test_dplaplace_reports_its_expected_error(glm):
    model, _, q, cov, clip = glm
    with model:
        step = pdp.DPLaplace(
            epsilon=4.0, grad_clip=clip.grad_clip, hess_clip=clip.hess_clip, noise_seed=3
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        idata = pdp.sample(
            draws=200, tune=0, chains=2, cores=1, step=step, progressbar=False, model=model
        )
    # draws of a fit are not a chain: no R-hat / ESS warning about their Monte Carlo noise
    assert not [w for w in caught if "R-hat" in str(w.message) or "ESS" in str(w.message)]
    report = pdp.privacy_report(idata)
    # the kept draws come in antithetic pairs: each chain's mean is the fit's mean exactly
    # (independent draws would be off by sd / sqrt(200), 7% of the fit's sd), and its spread
    # is the fit's (the sd of 200 draws has a relative Monte Carlo error of 5%)
    b = idata.posterior["b"].values
    np.testing.assert_allclose(b.mean(axis=1), np.tile(step.warm.mean, (2, 1)), atol=1e-9)
    np.testing.assert_allclose(b[:, 1::2], 2 * step.warm.mean - b[:, 0::2], atol=1e-9)
    fit_sd = np.sqrt(np.diag(step.warm.posterior_cov))
    np.testing.assert_allclose(b.std(axis=(0, 1)), fit_sd, rtol=0.2)
    assert set(report.expected_error) == {f"b[{i}]" for i in range(4)}
    assert report.fit_error["expected_largest_error"] == pytest.approx(
        step.warm.expected_largest_error
    )
    assert "fit error" in str(report)
    # 16 releases once: per step a curvature, a gradient and a histogram of each's norms
    assert len(pdp.PrivacyLedger.from_attrs(idata.attrs).shared) == 16
    with pytest.raises(ValueError, match="hess_clip"):
        pdp.DPLaplace(epsilon=4.0, grad_clip=clip.grad_clip, hess_clip=-1.0, model=model)


def test_a_rare_subgroup_does_not_make_the_fit_confidently_wrong():
    """Found in review: a flag set in 0.5% of 20 000 rows carries one direction's information,
    its rows sit far above the bulk in the curvature's metric, hidden in the histogram's noise;
    a clip that cut them made the next Newton step overshoot, and 27% of runs at epsilon 2
    missed the exact MAP by more than 3 of their own sds (up to 9). Now none of 20 does
    (measured: 0 of 30, largest |z| 2.2; coverage of the 90% intervals 0.97)."""
    rng = np.random.default_rng(1)
    n = 20_000
    flag = 2.0 * (rng.random(n) < 0.005) - 1.0
    X = np.column_stack([np.ones(n), rng.uniform(-1, 1, n), flag])
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ np.array([-2.0, 1.0, 1.0])))).astype(int)
    q = np.zeros(3)
    for _ in range(50):
        p = 1 / (1 + np.exp(-X @ q))
        h = (X * (p * (1 - p))[:, None]).T @ X + np.eye(3) / 6.25
        q = q + np.linalg.solve(h, X.T @ (y - p) - q / 6.25)
    lik = pdp.PerRowLikelihood(_logistic(X, y), compile_kwargs=FAST)
    clip = pdp.glm_clip(np.ones(3))
    mu = gaussian_mu_for_budget(2.0, 1e-6)
    z = np.array(
        [
            (f.mean - q) / np.sqrt(np.diag(f.posterior_cov))
            for f in (
                warm_start(
                    lik,
                    grad_clip=clip.grad_clip,
                    hess_clip=clip.hess_clip,
                    mu=mu,
                    noise=NoiseSource(r),
                )
                for r in range(20)
            )
        ]
    )
    assert np.abs(z).max() < 3.0
    assert np.mean(np.abs(z) < 1.645) >= 0.85


def test_warm_start_checks_its_public_arguments(neighbours):
    lik = neighbours[0]
    for kwargs, name in (
        ({"tempering": -1.0}, "tempering"),
        ({"hess_clip": 0.0}, "hess_clip"),
        ({"steps": 9}, "steps"),
    ):
        with pytest.raises(ValueError, match=name):
            warm_start(lik, grad_clip=1.0, mu=1.0, noise=NoiseSource(0), **kwargs)


def test_a_row_whose_curvature_overflows_is_bounded_like_any_other():
    """Found in the second review: a StudentT row with y = 1e154 has a finite log density, but
    the compiled curvature checked its norm and summed its entries in forms that disagreed on
    overflow, and a NaN reached the release (so whether the fit failed told the data sets
    apart). Every released sum stays finite and within its bound."""
    n, d = 40, 3
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(n), rng.uniform(-1, 1, (n, d - 1))])
    y = rng.normal(size=n)

    def likelihood(values):
        with pm.Model() as model:
            b = pm.Normal("b", 0, 2.5, shape=d)
            pm.StudentT("y", nu=3, mu=pm.math.dot(X, b), sigma=1.0, observed=values)
        return pdp.PerRowLikelihood(model, compile_kwargs=FAST)

    y2 = y.copy()
    y2[5] = 1e154
    base, other = likelihood(y), likelihood(y2)
    q, w, edges = np.zeros(d), np.eye(d), np.array([0.0, 1.0])
    for observed, sens in ((True, 2.0), (False, np.sqrt(2.0))):
        for bound in (0.01, 1.0, 5.0, 50.0):
            s1, _, _ = base.curvature_kernel(observed)(q, w, np.asarray(bound), edges)
            s2, _, _ = other.curvature_kernel(observed)(q, w, np.asarray(bound), edges)
            assert np.all(np.isfinite(s2))
            assert np.linalg.norm(_weighted(s1) - _weighted(s2)) <= sens * bound * (1 + 1e-12)
    for bound in (0.01, 1.0, 50.0):
        s1, _, _ = base.whitened_kernel()(q, w, np.asarray(bound), edges)
        s2, _, _ = other.whitened_kernel()(q, w, np.asarray(bound), edges)
        assert np.all(np.isfinite(s2)) and np.linalg.norm(s1 - s2) <= 2 * bound * (1 + 1e-12)


@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_a_curvature_whose_noise_fakes_information_does_not_make_the_fit_narrow(epsilon):
    """Found on data the benchmarks never saw (statsmodels' ``cancer``: county deaths against
    log population, Poisson, n = 301, the README's public bounds): the curvature's noise floor
    (~60 000) is 20-60x the information, the Newton walk under it stops far short of the mode,
    and where the last release's noise exceeded its typical spectral norm (1 release in 10)
    the excess was taken for information: the fit came out 2-6x narrower than the posterior
    and up to 19 of its own sds off, where the other seeds are as wide as the prior. What the
    noise may fake now includes a margin (exceeded in under 1% of releases): over 600 seeds,
    2 fits were still 6.1 (epsilon 1) and 8.7 (epsilon 4) of their own sds off, the intercept
    known and tilted by the hidden slope through the curvature's noise; that tilt is now in
    the spread (``_with_coupling``): none beyond 3, the largest 2.7 and 1.8. A calibrated
    Gaussian fit would put 3.2 beyond 3 (Poisson sd 1.8: at most 8 allowed) and any of 600
    beyond 4.5 in under 1% of runs."""
    from statsmodels.datasets import cancer

    df = cancer.load_pandas().data
    y = df["cancer"].to_numpy(int)
    enc = pdp.encode_covariates(
        df.assign(logpop=np.log(df["population"])), {"logpop": (np.log(100), np.log(100_000))}
    )
    X = enc.X
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 5, shape=2)
        pm.Poisson("deaths", mu=pm.math.exp(pm.math.dot(X, beta)), observed=y)
    lik = pdp.PerRowLikelihood(model, compile_kwargs=FAST)
    q = np.zeros(2)
    for _ in range(200):  # the exact mode, by damped Newton (the exp link overshoots)
        mu = np.exp(X @ q)
        h = (X.T * mu) @ X + np.eye(2) / 25
        step = np.linalg.solve(h, X.T @ (y - mu) - q / 25)
        q = q + step / max(1.0, float(np.max(np.abs(step))))
    assert np.allclose(X.T @ (y - np.exp(X @ q)) - q / 25, 0.0, atol=1e-6)
    clip = pdp.glm_clip(np.ones(2), "poisson", y_bound=500, eta_bound=6.5)
    own = []
    for seed in range(600):
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fits as wide as the prior say so
            ws = pdp.DPLaplace(
                epsilon=epsilon,
                grad_clip=clip.grad_clip,
                hess_clip=clip.hess_clip,
                noise_seed=seed,
                likelihood=lik,
            ).warm
        own.append(float(np.max(np.abs(ws.mean - q) / np.sqrt(np.diag(ws.posterior_cov)))))
    own = np.array(own)
    beyond = np.flatnonzero(own > 3.0)
    assert beyond.size <= 8, (beyond, np.round(own[beyond], 2))
    assert own.max() < 4.5, (int(own.argmax()), own.max())


@pytest.mark.parametrize(
    "informed_hidden", [([1.0], [0.01]), ([1.0, 1.5, 2.0], [0.01, 0.02, 0.03])]
)
def test_the_coupling_term_is_the_variance_of_the_newton_target_s_tilt(informed_hidden):
    """``_with_coupling`` against the error it describes, in a linear model with an
    anisotropic previous metric ``U`` (as the walk builds it): the Newton target from a point
    ``d ~ N(0, fit)`` away from the mode, under the released curvature (noise packed as the
    release packs it), misses by ``(I - M^-1 H) d``; its variance along the informed
    directions of the release over 2000 releases against the term's (a review measured 1.08
    and 1.27 here, 0.00-0.02 with the map back transposed, 5x with a fifth of the noise's
    moment). The measured error also holds the informed directions' own distance left (the
    linearisation's, a separate term): the ratio is at least 1 and at most 1.5."""
    from pymc_dp.tuning.warm_start import (
        WarmStart,
        _Curvature,
        _positive_definite,
        _shrink,
        _with_coupling,
    )

    informed, hidden = informed_hidden
    rng = np.random.default_rng(0)
    dim = len(informed) + len(hidden)
    tau = 0.1 if dim == 2 else 0.06
    nu = np.sqrt(2 * dim) * tau
    q_h, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    v, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    u = v * np.sqrt(np.geomspace(1e-2, 1e2, dim))
    h_z = (q_h * np.r_[informed, hidden]) @ q_h.T  # the data's information, release coordinates
    h = u @ h_z @ u.T
    prec = np.eye(dim) / 1e4
    measured, term = [], []
    for _ in range(2000):
        released = h_z + _unpack(tau * rng.normal(size=dim * (dim + 1) // 2), dim, True)
        cur = _Curvature(
            released=released,
            nu=nu,
            unwhiten=u,
            floored=u @ _positive_definite(released, nu) @ u.T,
            known=u @ _shrink(released, nu + FAKED_NORM_MARGIN * tau) @ u.T,
            metric=np.linalg.inv(u),
            clip=1.0,
        )
        cov = np.linalg.inv(_positive_definite(cur.known + prec, 1e-12))
        zero = np.zeros((dim, dim))
        fit = WarmStart(np.zeros(dim), cov, zero, unit=np.sqrt(np.diag(cov)))
        extra = _with_coupling(fit, cur, prec).noise_cov
        d = np.linalg.cholesky(cov) @ rng.normal(size=dim)
        miss = d - np.linalg.solve(cur.floored + prec, (h + prec) @ d)
        vals, vecs = np.linalg.eigh(released)
        keep = vecs[:, vals > nu + FAKED_NORM_MARGIN * tau]
        measured += list((keep.T @ u.T @ miss) ** 2)
        term += list(np.diag(keep.T @ u.T @ extra @ u @ keep))
    ratio = np.mean(measured) / np.mean(term)
    assert 1.0 <= ratio <= 1.5, ratio


def test_what_the_curvature_noise_may_fake_is_exceeded_in_under_one_release_in_a_hundred():
    """The spread's information bound removes ``(sqrt(2 d) + FAKED_NORM_MARGIN) tau`` from the
    released curvature: the largest eigenvalue of the released noise (entries of sd ``tau``
    packed as the release packs them) exceeds it in under 1% of releases (measured 0.4-0.8%
    over d = 2-10; Monte Carlo sd about 0.1% at 8000 draws), the typical norm alone in 9-13%."""
    rng = np.random.default_rng(11)
    for dim in (2, 4, 6, 10):
        size = dim * (dim + 1) // 2
        largest = np.array(
            [np.linalg.eigvalsh(_unpack(rng.normal(size=size), dim, True))[-1] for _ in range(8000)]
        )
        typical = np.sqrt(2.0 * dim)
        assert 0.07 < np.mean(largest > typical) < 0.16, dim
        assert np.mean(largest > typical + FAKED_NORM_MARGIN) < 0.0125, dim


def test_a_tiny_budget_s_noisy_step_does_not_leave_the_prior_s_reach():
    """Found in the contract test (1 build in 40 at epsilon 0.01 on 300 rows): a first step of
    62 posterior sds of noise took log sigma to 44 under a HalfNormal(2) prior, where no data
    could balance the prior's gradient; Newton's steps come back by 0.5 each, and the fit's
    linear algebra failed after the budget was spent (here seeds 0 and 29). A step is now
    halved until the prior's whitened gradient is within what the clipped rows can balance
    (public): every seed gives a finite fit.

    Not yet fixed (measured over 100 seeds, the same before): 4 fits are 3.1-4.5 own sds off in
    log sigma, their mean placed by noise where the prior is stiff and the Laplace covariance
    taking the prior's local curvature (``nuts=True`` samples the exact prior)."""
    rng = np.random.default_rng(8)
    X = np.clip(rng.normal(size=(300, 2)), -3, 3)
    y = X @ np.array([1.0, -0.5]) + rng.normal(size=300)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 3, shape=2)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", pm.math.dot(X, beta), sigma, observed=y)
    lik = pdp.PerRowLikelihood(model, compile_kwargs=FAST)
    mu = gaussian_mu_for_budget(0.01, 1e-6)
    for seed in range(40):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ws = warm_start(lik, grad_clip=3.0, mu=mu, noise=NoiseSource(seed))
        assert np.all(np.isfinite(ws.mean)) and np.all(np.isfinite(ws.posterior_cov)), seed
        np.linalg.cholesky(ws.posterior_cov)


def test_a_walk_along_a_ridge_is_seen_direction_by_direction():
    """Found on statsmodels' cancer with the last curvature resolved (6 of 600 fits 3.1-5.3 own
    sds off, ``walk`` 0): the steps across the ridge correct each other's noise and hide, as a
    whole, a walk still moving along it. Metric diag(1, 100), noise sd 1 per direction."""
    m = np.diag([1.0, 100.0])
    noise = np.sqrt(2.0)  # sqrt(kappa d), kappa = 1
    previous, step = np.array([-10.0, 3.0]), np.array([-8.0, -2.5])
    length = float(np.sqrt(step @ m @ step))
    assert _walk_remaining(step, previous, m, length, noise) is None  # as a whole: none
    left = _walk_remaining(step, previous, m, length, noise, True)
    np.testing.assert_allclose(left, [WALK_RHO / (1 - WALK_RHO) * -8.0, 0.0], atol=1e-12)
    # against the step before: the part beyond undoing it (46 sds after 17 back)
    left = _walk_remaining(np.array([46.0, 0.0]), np.array([-17.0, 0.0]), m, 46.0, noise, True)
    np.testing.assert_allclose(left, [WALK_RHO / (1 - WALK_RHO) * 29.0, 0.0], atol=1e-12)
    # a walk stepping back and forth within its noise has arrived
    back_and_forth = (np.array([-2.5, 0.2]), np.array([2.0, -0.1]), m, 3.2, noise, True)
    assert _walk_remaining(*back_and_forth) is None


@pytest.mark.parametrize("switch", ["RESOLVED_LAST_CURVATURE", "LAST_CURVATURE_THRESHOLD"])
def test_the_resolved_last_curvature_ends_the_lottery_on_real_covariates(monkeypatch, switch):
    """statsmodels' fair (n = 6366, d = 9) at epsilon 4, the quickstart's call: by default 20
    of 30 seeded fits are 7-85x the posterior's width (a noise count of 1-2 sds in an empty
    upper bin of the last curvature histogram read as rows: the clip 4-10x up, the weak
    directions prior-wide). With :data:`RESOLVED_LAST_CURVATURE` or the threshold alone,
    :data:`LAST_CURVATURE_THRESHOLD` (both off by default: confidently wrong on a misspecified
    Poisson GLM, see their comments) at most 3 (measured 1 with either), none beyond 3 own
    sds."""
    from benchmarks import realdata, utility

    monkeypatch.setattr(warm_start_module, switch, True)

    data = realdata.load("fair")
    clip = utility.glm_clip(data)
    model = realdata.model(data)
    X, y = data.X, data.y
    prior_prec = np.eye(data.d) / realdata.PRIOR_SD**2
    q = np.zeros(data.d)
    for _ in range(50):  # the exact mode and Laplace sds
        p = 1 / (1 + np.exp(-X @ q))
        h = (X * (p * (1 - p))[:, None]).T @ X + prior_prec
        q = q + np.linalg.solve(h, X.T @ (y - p) - prior_prec @ q)
    sd = np.sqrt(np.diag(np.linalg.inv(h)))
    lik = pdp.PerRowLikelihood(model, compile_kwargs=FAST)
    wide, own = 0, []
    for seed in range(30):
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ws = pdp.DPLaplace(
                epsilon=4.0,
                grad_clip=clip.grad_clip,
                hess_clip=clip.hess_clip,
                noise_seed=seed,
                likelihood=lik,
            ).warm
        fit_sd = np.sqrt(np.diag(ws.posterior_cov))
        wide += float(np.median(fit_sd / sd)) > 5.0
        own.append(float(np.max(np.abs(ws.mean - q) / fit_sd)))
    assert wide <= 3, wide
    assert max(own) < 3.0, np.round(own, 2)
