r"""Normal linear regression from its sufficient statistics: detection, release, surrogate.

A Normal likelihood whose mean is affine in the row's covariates,

.. math:: y_i \sim N(w_0(\theta) + w(\theta)^\top z_i,\ \sigma(\theta)^2),

depends on the data only through the Gram matrix :math:`G = \sum_i u_i u_i^\top` of
:math:`u_i = (1, \tilde z_i, \tilde y_i)`, the rows mapped onto :math:`[-1, 1]` from declared
public ranges. :func:`release_gram` releases :math:`G` once with Gaussian noise (Sheffet 2017;
Bernstein & Sheldon 2019 release the same statistics). One row moves :math:`G` by
:math:`\|uu^\top - u'u'^\top\|_F \le \sqrt{2}\,\|u\|^2 \le \sqrt 2 (k + 1)` (``k`` columns of
``(1, z)``); the upper triangle is released with off-diagonal entries scaled by :math:`\sqrt 2`,
so the vector's L2 norm is the Frobenius norm. ``G[0, 0] = n`` is public and not noised.

The noise-aware posterior (:func:`surrogate_logp`) treats the true statistics as latent:
:math:`G = \tilde G - E` with :math:`E` the known Gaussian noise. With :math:`A = G_{:k,:k}`,
:math:`b = G_{:k,k}`, :math:`c = G_{k,k}`, standard regression theory gives the exact density of
:math:`(b, c)` given :math:`A` and :math:`\theta`: :math:`b \sim N(A\beta, \sigma^2 A)` and,
independently, :math:`\mathrm{RSS} = c - b^\top A^{-1} b \sim \sigma^2 \chi^2_{n-k}`. The Gram
matrix of the covariates :math:`A` gets a flat prior (Bernstein & Sheldon model the covariates
instead, with a normal model and a central limit approximation of all statistics; conditioning
on :math:`A` needs no covariate model and keeps the outcome's part exact). At zero noise the
surrogate equals the model's likelihood up to a constant (tested).

Everything here that reads rows is :func:`release_gram`; the detection evaluates the model's
graphs on synthetic designs only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt
from pymc.blocking import DictToArrayBijection
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import NormalRV

from pymc_dp import compiling
from pymc_dp.accounting.ledger import GaussianMechanism
from pymc_dp.checks import check_positive
from pymc_dp.graph import _CHECK_MODE, DataInput, _value_of
from pymc_dp.noise import NoiseSource

__all__ = [
    "EncodedRows",
    "GramRelease",
    "LinearGaussian",
    "NotLinearGaussian",
    "encode_rows",
    "expected_error",
    "find_linear_gaussian",
    "gram_sensitivity",
    "release_gram",
    "surrogate_logp",
]

#: Name of the release in the ledger and the report.
RELEASE_NAME = "sufficient statistics (Gram matrix of 1, covariates, outcome)"
#: Scales of the synthetic designs of the linearity check (public, fixed).
_CHECK_SCALES = (1.0, 30.0, 1e4)


class NotLinearGaussian(ValueError):
    """The model is not a Normal likelihood with a mean affine in its covariates (the message
    says which part; it names variables, never values)."""


@dataclass(frozen=True, eq=False)
class LinearGaussian:
    """A model's Normal likelihood with an affine mean, as graphs of the raveled point ``q``.

    ``covariates`` are the private per-row inputs of the mean, in design order; ``widths`` the
    columns each contributes to a row's design ``z_i``. ``intercept`` (scalar), ``coefs``
    (``(p,)``) and ``sigma`` (scalar) are the model's :math:`w_0, w, \\sigma` at ``q``.
    """

    observed: DataInput
    covariates: tuple[DataInput, ...]
    widths: tuple[int, ...]
    q: Variable
    intercept: Variable
    coefs: Variable
    sigma: Variable

    @property
    def p(self) -> int:
        return int(sum(self.widths))

    def has_intercept(self, dim: int) -> bool:
        """Whether the mean's intercept moves with the parameters (it is the mean at a design of
        zeros: evaluated at two random points, no data)."""
        if self.q not in set(ancestors([self.intercept])):
            return False
        try:
            fn = compiling.function([self.q], self.intercept, mode="FAST_COMPILE")
        except Exception:  # it reads more than the point (a variable left out of vars)
            return True
        rng = np.random.default_rng(0)
        points = rng.normal(size=(2, dim)).astype(self.q.dtype)
        return any(float(fn(p)) != 0.0 for p in points)


def _rows_first(value: np.ndarray, axis: int, n: int) -> np.ndarray:
    return np.moveaxis(np.asarray(value, dtype=np.float64), axis, 0).reshape(n, -1)


def _from_rows(design: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray:
    moved = (shape[axis], *shape[:axis], *shape[axis + 1 :])
    return np.moveaxis(design.reshape(moved), 0, axis)


def _split_design(design: np.ndarray, covariates, widths) -> dict:
    out, start = {}, 0
    for inp, w in zip(covariates, widths, strict=True):
        shape = tuple(_value_of(inp.var).shape)
        block = design[:, start : start + w]
        out[inp.var] = pt.constant(_from_rows(block, shape, inp.row_axis).astype(inp.var.dtype))
        start += w
    return out


def find_linear_gaussian(graph, vars=None, shared=None) -> LinearGaussian:
    """The model's Normal likelihood with an affine mean, or :class:`NotLinearGaussian`.

    ``graph`` is the model's :class:`~pymc_dp.graph.ModelGraph`; ``vars`` the value variables
    raveled into ``q`` (default: all), ``shared`` the others' shared values. Reads no private
    values: the mean is evaluated on synthetic designs of the rows' shape (a public fact), and
    compared with its affine form at random parameter points.
    """
    model = graph.model
    vars_ = list(model.value_vars) if vars is None else list(vars)
    shared = {} if shared is None else shared
    if graph.potentials or len(graph.observed) != 1:
        raise NotLinearGaussian(
            "the sufficient-statistics release needs exactly one observed variable and no "
            "per-row potentials"
        )
    term = graph.observed[0]
    rv = model[term.name]
    if not isinstance(rv.owner.op, NormalRV):
        raise NotLinearGaussian(
            f"observed {term.name!r} is {type(rv.owner.op).__name__}, not Normal: its sufficient "
            "statistics are not a Gram matrix"
        )
    n = graph.n_rows
    if rv.type.ndim != 1 or term.row_axis != 0:
        raise NotLinearGaussian(f"observed {term.name!r} must be one value per row (shape (n,))")
    mu, sigma = model.replace_rvs_by_values(list(rv.owner.op.dist_params(rv.owner)))
    if graph.private_nodes([sigma]):
        raise NotLinearGaussian(f"the sd of {term.name!r} reads private data (heteroskedastic)")
    if not all(sigma.type.broadcastable):
        raise NotLinearGaussian(f"the sd of {term.name!r} must be one scalar for every row")
    observed = next(i for i in graph.inputs if i.kind == "observed")
    read = {id(v) for v in graph.private_nodes([mu])}
    if id(observed.var) in read:
        raise NotLinearGaussian(f"the mean of {term.name!r} reads the outcome itself")
    covariates = tuple(i for i in graph.inputs if id(i.var) in read)
    if len(covariates) != len(read) or any(i.kind != "row" for i in covariates):
        raise NotLinearGaussian(
            f"the mean of {term.name!r} reads private inputs without rows (only per-row "
            "covariates can enter the Gram matrix)"
        )
    widths = tuple(int(_value_of(i.var).size // n) for i in covariates)
    p = int(sum(widths))
    if n <= p + 3:
        raise NotLinearGaussian(f"{n} rows for {p} covariates: too few for the Gram release")
    basis = np.zeros((n, p))
    basis[1 : p + 1] = np.eye(p)
    mu_basis = graph_replace(mu, _split_design(basis, covariates, widths), strict=False)
    mu_basis = pt.broadcast_to(mu_basis, (n,))
    intercept, coefs = mu_basis[0], mu_basis[1 : p + 1] - mu_basis[0]
    _check_affine(graph, vars_, shared, mu, (intercept, coefs), covariates, widths, term.name)
    point = compiling.initial_point(model)
    (intercept, coefs, sigma), q = _join(
        point, [intercept, coefs, pt.reshape(sigma, ())], vars_, shared
    )
    return LinearGaussian(observed, covariates, widths, q, intercept, coefs, sigma)


def _join(point, outputs, inputs, shared):
    from pymc.pytensorf import join_nonshared_inputs

    return join_nonshared_inputs(point, outputs, inputs, shared)


def _check_affine(graph, vars_, shared, mu, parts, covariates, widths, name) -> None:
    """``mu(Z, q) == w0(q) + Z w(q)`` on synthetic designs ``Z`` at random points ``q``."""
    model, n, p = graph.model, graph.n_rows, int(sum(widths))
    rng = np.random.default_rng(20191208)  # public: synthetic designs, no data
    point = compiling.initial_point(model)
    q0 = DictToArrayBijection.map({v.name: point[v.name] for v in vars_}).data
    outs, q = _join(point, [pt.broadcast_to(mu, (n,)), *parts], vars_, shared)
    integer = any(i.var.dtype.startswith(("int", "uint")) for i in covariates)
    for scale in _CHECK_SCALES:  # kinks far out (a clip at 6, a switch at 8) show at large scales
        design = rng.normal(scale=scale, size=(n, p))
        if integer:
            design = np.round(design)
        swap = _split_design(design, covariates, widths)
        fn = compiling.function([q], graph_replace(outs, swap, strict=False), mode=_CHECK_MODE)
        q_at = q0 + rng.normal(scale=0.5, size=q0.size)
        try:
            with np.errstate(all="ignore"):
                mu_z, w0, w = (np.asarray(v, dtype=float) for v in fn(q_at))
        except Exception:  # noqa: BLE001 - on synthetic values only; e.g. a private index
            raise NotLinearGaussian(
                f"the mean of {name!r} cannot be evaluated on synthetic covariates (does it "
                "index by a private input, e.g. a group code?)"
            ) from None
        affine = w0 + design @ w
        if not np.allclose(mu_z, affine, rtol=1e-7, atol=1e-9 * (1 + np.abs(affine).max())):
            raise NotLinearGaussian(
                f"the mean of {name!r} is not affine in its covariates (a transformed covariate "
                "must be computed outside the model, as a column of its own)"
            )


def gram_sensitivity(k: int) -> float:
    r"""L2 sensitivity of the weighted upper triangle of ``G``: :math:`\sqrt 2 (k + 1)` for rows
    ``u`` in :math:`\{1\} \times [-1, 1]^{k}` (``k`` = covariates + outcome)."""
    return float(np.sqrt(2.0) * (k + 1))


@dataclass(frozen=True)
class GramRelease:
    """The released (noisy) Gram matrix and what its noise and encoding are (all public).

    ``gram`` is ``(m, m)`` with ``m = p + 2`` (intercept, ``p`` covariates, outcome), in encoded
    units; ``noise_sd`` the std of each entry's noise (0 for ``gram[0, 0] = n``). Encoding:
    ``z_enc = z * x_scale + x_shift``, ``y_enc = y * y_scale + y_shift``.
    """

    gram: np.ndarray
    noise_sd: np.ndarray
    n: int
    x_scale: np.ndarray
    x_shift: np.ndarray
    y_scale: float
    y_shift: float
    mechanisms: tuple[GaussianMechanism, ...]
    #: The second, residual release of the two-stage release
    #: (:mod:`pymc_dp.linear_residuals`), or None.
    residual: object | None = None
    #: What the two-stage release decided (for the report), or "".
    note: str = ""

    def to_attr(self) -> str:
        sd = self.noise_sd[np.triu_indices_from(self.noise_sd)]
        text = (
            f"{RELEASE_NAME}: {self.gram.shape[0]}x{self.gram.shape[0]} over n = {self.n} rows, "
            f"Gaussian noise sd {sd.max():.4g} (diagonal) in units of the [-1, 1] encoding"
        )
        if len(self.mechanisms) > 1 and self.residual is None:
            text += f" (two releases of it combined, {len(self.mechanisms)} in the ledger)"
        if self.residual is not None:
            text += "; then " + self.residual.to_attr()
        if self.note:
            text += f" ({self.note})"
        return text + "; the posterior models the noise (noise-aware)"


def _encoding(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return 2.0 / (hi - lo), -(hi + lo) / (hi - lo)


@dataclass(frozen=True)
class EncodedRows:
    """Private rows clipped into their public ranges and mapped onto [-1, 1]: ``u = (1, z)``
    ``(n, k)`` and the outcome ``y`` ``(n,)``, with the (public) encoding."""

    u: np.ndarray
    y: np.ndarray
    x_scale: np.ndarray
    x_shift: np.ndarray
    y_scale: float
    y_shift: float


def encode_rows(design, outcome, x_bounds, y_bounds) -> EncodedRows:
    """Clip rows into the public bounds and encode them onto [-1, 1] (every release's input)."""
    n, p = design.shape
    x_lo, x_hi = (np.broadcast_to(np.asarray(b, float), (p,)) for b in x_bounds)
    x_scale, x_shift = _encoding(x_lo, x_hi)
    y_scale, y_shift = _encoding(np.float64(y_bounds[0]), np.float64(y_bounds[1]))
    with np.errstate(all="ignore"):
        # clipped again after the encoding: its rounding can leave [-1, 1] (review: bounds a
        # few ulps apart gave |z| = 2, a row moving the release past its sensitivity)
        z = np.clip(np.clip(design, x_lo, x_hi) * x_scale + x_shift, -1.0, 1.0)
        y = np.clip(np.clip(outcome, y_bounds[0], y_bounds[1]) * y_scale + y_shift, -1.0, 1.0)
    # NaN rows are refused by the analysis before any release; were one to arrive, it maps to
    # the range's centre (a data-independent value inside the bounds), never into the release
    z, y = np.where(np.isnan(z), 0.0, z), np.where(np.isnan(y), 0.0, y)
    return EncodedRows(
        np.column_stack([np.ones(n), z]), y, x_scale, x_shift, float(y_scale), float(y_shift)
    )


def release_gram(
    design: np.ndarray,
    outcome: np.ndarray,
    *,
    x_bounds: tuple[np.ndarray, np.ndarray],
    y_bounds: tuple[float, float],
    mu: float,
    noise: NoiseSource,
) -> GramRelease:
    """Clip rows into the public bounds, encode them onto [-1, 1] and release their Gram matrix
    with Gaussian noise of privacy loss ``mu`` (the PLD mean: multiplier ``1 / sqrt(2 mu)``,
    replace-one)."""
    check_positive(mu, "mu")
    enc = encode_rows(design, outcome, x_bounds, y_bounds)
    n, m = enc.u.shape[0], enc.u.shape[1] + 1
    u = np.column_stack([enc.u, enc.y])
    gram = u.T @ u
    rows, cols = np.triu_indices(m)
    keep = ~((rows == 0) & (cols == 0))
    weight = np.where(rows == cols, 1.0, np.sqrt(2.0))[keep]
    multiplier = 1.0 / np.sqrt(2.0 * mu)  # mu: the PLD mean, mu = 1 / (2 multiplier^2)
    sens = gram_sensitivity(m - 1)
    noisy = noise.gaussian(gram[rows, cols][keep] * weight, sens, multiplier) / weight
    sd_vec = NoiseSource.gaussian_std(sens, multiplier, int(keep.sum())) / weight
    released, sd = np.zeros((m, m)), np.zeros((m, m))
    released[rows[keep], cols[keep]] = noisy
    sd[rows[keep], cols[keep]] = sd_vec
    released[0, 0] = n
    released = released + np.triu(released, 1).T
    sd = sd + np.triu(sd, 1).T
    return GramRelease(
        gram=released,
        noise_sd=sd,
        n=n,
        x_scale=enc.x_scale,
        x_shift=enc.x_shift,
        y_scale=enc.y_scale,
        y_shift=enc.y_shift,
        mechanisms=(GaussianMechanism(RELEASE_NAME, multiplier, 1),),
    )


def noise_entries(m: int) -> tuple[np.ndarray, np.ndarray]:
    """Latent noise entries of an ``(m, m)`` Gram matrix: the upper triangle of the first
    ``m - 1`` columns but ``[0, 0]`` (the outcome's sum of squares is integrated out)."""
    rows, cols = np.triu_indices(m)
    keep = ~((rows == 0) & (cols == 0)) & (cols < m - 1) | ((cols == m - 1) & (rows < m - 1))
    return rows[keep], cols[keep]


def start_noise(release: GramRelease) -> np.ndarray:
    """Standardised latent noise at which the latent ``A`` is the released one with its
    eigenvalues raised to a positive floor (the released matrix may be indefinite; NUTS must
    start inside the support). Post-processing of the release."""
    m = release.gram.shape[0]
    k = m - 1
    a = release.gram[:k, :k]
    n = float(release.gram[0, 0])  # exact
    floor = max(float(release.noise_sd[0, min(1, k - 1)]), 1e-6 * float(release.n))
    # A = [[n, s'], [s, B]] is positive definite iff the Schur complement B - s s' / n is:
    # floor that, given the exact n (flooring A and resetting A[0, 0] to n could leave A
    # indefinite: found in review at n = 60, ten covariates, epsilon 1)
    s = a[1:, 0]
    vals, vecs = np.linalg.eigh(a[1:, 1:] - np.outer(s, s) / n)
    a_pd = a.copy()
    a_pd[1:, 1:] = (vecs * np.maximum(vals, floor)) @ vecs.T + np.outer(s, s) / n
    rows, cols = noise_entries(m)
    delta = np.zeros((m, m))
    delta[:k, :k] = a - a_pd
    sd = release.noise_sd[rows, cols]
    return np.where(sd > 0, delta[rows, cols] / np.where(sd > 0, sd, 1.0), 0.0)


def _cholesky_entries(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows, columns and diagonal flags of the free entries of a lower-triangular ``(k, k)``
    ``L`` whose ``[0, 0]`` is fixed."""
    rows, cols = np.tril_indices(k)
    keep = ~((rows == 0) & (cols == 0))
    return rows[keep], cols[keep], (rows == cols)[keep]


def cholesky_latent(release: GramRelease, chol: Variable, noise_b: Variable):
    r"""``(latent, log_density)``: the standardised noise of :func:`noise_entries` where the
    latent ``A = L L^T`` (``L[0, 0] = sqrt(n)``, so ``A[0, 0] = n``; ``chol`` its other entries,
    the diagonal's logs) and ``noise_b`` the outcome column's, and the log density of ``chol``
    that makes ``A``'s noise standard Normal, as the plain latent would.

    Every value of ``chol`` is a positive definite ``A``: NUTS meets no wall where the release
    is singular within its noise (sklearn's diabetes, n = 442, ten covariates: hundreds of
    divergences a chain in the plain latent). With ``A``'s free entries ``a(v)``, the density of
    ``v`` is :math:`\phi((\tilde A - a(v)) / s) |\partial a / \partial v|`, and
    :math:`\log|\partial a / \partial v| = (k - 1)\log(2\sqrt n) + \sum_{i \ge 1}
    (k - i + 1) \log L_{ii}` (``A = L L^T`` without its fixed ``[0, 0]``, and the log of the
    diagonal)."""
    m = release.gram.shape[0]
    k = m - 1
    rows, cols = noise_entries(m)
    in_a = cols < k
    lr, lc, diag = _cholesky_entries(k)
    n = float(release.gram[0, 0])
    values = pt.switch(diag, pt.exp(chol), chol)
    low = pt.set_subtensor(pt.zeros((k, k))[0, 0], np.sqrt(n))
    low = pt.set_subtensor(low[lr, lc], values)
    a = low @ low.T
    ar, ac = rows[in_a], cols[in_a]
    latent_a = (release.gram[ar, ac] - a[ar, ac]) / release.noise_sd[ar, ac]
    latent = pt.zeros(rows.size)
    latent = pt.set_subtensor(latent[np.flatnonzero(in_a)], latent_a)
    latent = pt.set_subtensor(latent[np.flatnonzero(~in_a)], noise_b)
    log_diag = chol[np.flatnonzero(diag)]  # log L_ii, i = 1 .. k - 1
    order = np.arange(1, k)
    log_jac = (k - 1) * np.log(2.0 * np.sqrt(n)) + pt.sum((k - order + 1) * log_diag)
    return latent, -0.5 * pt.sum(latent_a**2) + log_jac


def cholesky_start(release: GramRelease) -> tuple[np.ndarray, np.ndarray]:
    """``(chol, noise_b)`` at :func:`start_noise`'s positive definite ``A`` (post-processing)."""
    m = release.gram.shape[0]
    k = m - 1
    rows, cols = noise_entries(m)
    latent = start_noise(release)
    d = np.zeros((m, m))
    d[rows, cols] = release.noise_sd[rows, cols] * latent
    low = np.linalg.cholesky((release.gram - (d + np.triu(d, 1).T))[:k, :k])
    lr, lc, diag = _cholesky_entries(k)
    chol = low[lr, lc]
    chol[diag] = np.log(chol[diag])
    return chol, latent[cols == k]


def log_rss_density(x, s2, noise_var, nu: int):
    r"""Saddlepoint log-density of :math:`x = \sigma^2 \chi^2_\nu + N(0, v)` at ``x``.

    The cumulant generating function is :math:`K(t) = -\tfrac\nu2 \log(1 - 2\sigma^2 t) +
    v t^2 / 2`; with :math:`w = 1 - 2\sigma^2 t` the saddlepoint equation :math:`K'(t) = x`
    is the quadratic :math:`\kappa w^2 + (x - \kappa) w - \nu\sigma^2 = 0`,
    :math:`\kappa = v / (2\sigma^2)`, whose positive root is taken in the form that does not
    cancel. At ``v = 0`` this is the chi-square density up to a constant that depends on
    :math:`\nu` only (the saddlepoint approximation is exact for the gamma family after
    normalisation), so the noise-free limit is the exact likelihood of :math:`\sigma`.
    """
    kappa = noise_var / (2 * s2)
    lin = x - kappa
    root = pt.sqrt(lin**2 + 4 * kappa * nu * s2)
    w = pt.switch(
        pt.ge(lin, 0),
        2 * nu * s2 / (lin + root),
        (root - lin) / (2 * pt.maximum(kappa, 1e-300)),
    )
    t = (1 - w) / (2 * s2)
    k = -0.5 * nu * pt.log(w) + 0.5 * noise_var * t**2
    k2 = 2 * nu * s2**2 / w**2 + noise_var
    return k - t * x - 0.5 * pt.log(2 * np.pi * k2)


def surrogate_logp(
    release: GramRelease,
    intercept: Variable,
    coefs: Variable,
    sigma: Variable,
    latent: Variable,
    *,
    whitened: bool = False,
) -> Variable:
    r"""Log-density of the released statistics given the model's parameters and the latent
    noise of the covariates' Gram matrix and cross products (module docstring).

    ``latent`` holds the standardised noise of every entry of :func:`noise_entries`; the true
    ``A`` and ``b`` are the released ones minus ``noise_sd * latent``. The outcome's sum of
    squares ``c`` is integrated out: :math:`\tilde c - b^\top A^{-1} b` is the residual sum of
    squares (:math:`\sigma^2\chi^2_{n-k}`) plus the release's noise (:func:`log_rss_density`).
    ``-inf`` where the latent ``A`` is not positive definite.

    ``whitened``: ``b``'s entries of ``latent`` are instead the standardised coordinates ``z``
    of ``b`` given everything but ``c`` (:func:`_whitened_b`), the same joint density in other
    coordinates (their standard Normal prior is the caller's, as for the noise).
    """
    m = release.gram.shape[0]
    k = m - 1
    rows, cols = noise_entries(m)
    delta = pt.zeros((m, m))
    delta = pt.set_subtensor(delta[rows, cols], release.noise_sd[rows, cols] * latent)
    delta = delta + pt.triu(delta, 1).T
    g = pt.as_tensor(release.gram) - delta
    a, b, c = g[:k, :k], g[:k, k], g[k, k]
    noise_c = float(release.noise_sd[k, k]) ** 2
    consistency = 0.0
    b_obs, b_var = pt.as_tensor(release.gram[:k, k]), release.noise_sd[:k, k] ** 2
    if release.residual is not None:
        b_obs, b_var, consistency = _with_residuals(release, a)
        b = b_obs - np.sqrt(b_var) * latent[cols == k]
    beta, s2 = _encoded(release, intercept, coefs, sigma)
    chol = pt.linalg.cholesky(a, lower=True, on_error="nan")
    if whitened:
        b, log_b = _whitened_b(a, chol, beta, s2, b_obs, b_var, latent[cols == k])
        h = pt.linalg.solve_triangular(chol, b, lower=True)
    else:
        h = pt.linalg.solve_triangular(chol, b, lower=True)
        resid = h - chol.T @ beta  # L^-1 (b - A beta)
        half_logdet = pt.sum(pt.log(pt.diag(chol)))
        log_b = -0.5 * k * pt.log(2 * np.pi * s2) - half_logdet - pt.sum(resid**2) / (2 * s2)
    if release.residual is not None:
        c, noise_c, consistency_c = _residual_c(release, a, b)
        consistency = consistency + consistency_c
    log_c = log_rss_density(c - pt.sum(h**2), s2, noise_c, release.n - k)
    ok = pt.all(pt.isfinite(chol))
    return pt.switch(ok, log_b + log_c + consistency, -np.inf)


def _encoded(release: GramRelease, intercept, coefs, sigma):
    """The model's coefficients and noise variance in encoded units: ``y_enc = y_scale (w0 +
    w z) + y_shift`` with ``z = (z_enc - shift) / scale``."""
    slope = coefs / release.x_scale
    beta = pt.concatenate(
        [
            pt.stack(
                [release.y_scale * (intercept - pt.sum(slope * release.x_shift)) + release.y_shift]
            ),
            release.y_scale * slope,
        ]
    )
    return beta, (release.y_scale * sigma) ** 2


def _whitened_b(a, chol, beta, s2, b_obs, b_var, z):
    r"""``(b, log density)``: the true cross products ``b`` at standardised coordinates ``z``,
    and the density of what was observed of ``b`` with ``b`` integrated out.

    The model says :math:`b \sim N(A\beta, s^2 A)`; the release observes
    :math:`b_{obs} = b + e`, :math:`e \sim N(0, V)` (``V`` diagonal). Their joint is
    :math:`N(b_{obs}; A\beta, s^2A + V)\, N(b; m, C)` with :math:`C^{-1} = A^{-1}/s^2 + V^{-1}`,
    :math:`m = C(\beta / s^2 + V^{-1} b_{obs})`; ``b = m + R^{-T} z`` (``C^{-1} = R R^T``) has
    density :math:`N(z; 0, I)` times the first factor. Sampling ``z`` instead of the noise
    of ``b`` removes the funnel between the noise sd and ``b`` where :math:`s^2 A` is small
    against ``V`` (few rows, a noisy release: statsmodels' engel, n = 235, hundreds of NUTS
    divergences a chain), and is the plain latent where ``V`` is small."""
    k = a.shape[0]
    cov = s2 * a + pt.diag(b_var)
    chol_m = pt.linalg.cholesky(cov, lower=True, on_error="nan")
    r = pt.linalg.solve_triangular(chol_m, b_obs - a @ beta, lower=True)
    log_b = -0.5 * k * np.log(2 * np.pi) - pt.sum(pt.log(pt.diag(chol_m))) - 0.5 * pt.sum(r**2)
    inv_l = pt.linalg.solve_triangular(chol, pt.eye(k), lower=True)
    precision = inv_l.T @ inv_l / s2 + pt.diag(1.0 / b_var)
    chol_p = pt.linalg.cholesky(precision, lower=True, on_error="nan")
    rhs = beta / s2 + b_obs / b_var
    mean = pt.linalg.solve_triangular(
        chol_p.T, pt.linalg.solve_triangular(chol_p, rhs, lower=True), lower=False
    )
    b = mean + pt.linalg.solve_triangular(chol_p.T, z, lower=False)
    ok = pt.all(pt.isfinite(chol_m)) & pt.all(pt.isfinite(chol_p))
    return b, pt.switch(ok, log_b, -np.inf)


def _with_residuals(release: GramRelease, a):
    r"""``(b_obs, V, log consistency)``: the two-stage release's two observations of ``b`` as
    one, :math:`b_{obs} = b + N(0, V)`, exact.

    The residual release observes :math:`\tilde t = b - A\beta_p + e_t` and
    :math:`\tilde s = c - 2\beta_p^\top b + \beta_p^\top A\beta_p + e_s`: given the latent
    ``A`` (and ``b``) they are second observations :math:`\tilde t + A\beta_p` of ``b`` and
    :math:`\tilde s + 2\beta_p^\top b - \beta_p^\top A\beta_p` of ``c``. Two Gaussian
    observations of one value are one at their precision-weighted mean times the density of
    their difference, which depends on the latent ``A`` (and ``b``, :func:`_residual_c`) and is
    kept (``consistency``).
    """
    res = release.residual
    k = release.gram.shape[0] - 1
    v1_b = release.noise_sd[:k, k] ** 2
    v2_b = np.full(k, res.cross_sd**2)
    vb = 1.0 / (1.0 / v1_b + 1.0 / v2_b)
    b1 = release.gram[:k, k]
    b2 = res.cross + a @ res.pilot
    consistency = -0.5 * pt.sum((b1 - b2) ** 2 / (v1_b + v2_b))
    return (b1 / v1_b + b2 / v2_b) * vb, vb, consistency


def _residual_c(release: GramRelease, a, b):
    """``(c, noise variance of c, log consistency)`` of the two-stage release given the latent
    ``A`` and ``b`` (:func:`_with_residuals`)."""
    res = release.residual
    k = release.gram.shape[0] - 1
    pilot = res.pilot
    v1_c, v2_c = float(release.noise_sd[k, k]) ** 2, res.squares_sd**2
    vc = 1.0 / (1.0 / v1_c + 1.0 / v2_c)
    c1 = float(release.gram[k, k])
    c2 = res.squares + 2.0 * pt.dot(pilot, b) - pt.dot(pilot, a @ pilot)
    return (c1 / v1_c + c2 / v2_c) * vc, vc, -0.5 * (c1 - c2) ** 2 / (v1_c + v2_c)


def bounds_for(
    lg: LinearGaussian,
    outcome_bounds,
    covariate_bounds,
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[float, float]]:
    """Checked public bounds: per design column ``(lo, hi)`` and the outcome's ``(lo, hi)``."""
    y_lo, y_hi = check_outcome_bounds(outcome_bounds)
    given = covariate_bounds
    if given is None:
        given = (-1.0, 1.0)
    if isinstance(given, Mapping):
        labels = {_key(i): i for i in lg.covariates}
        unknown = set(given) - set(labels)
        if unknown:
            raise ValueError(
                f"`covariate_bounds` names {sorted(unknown)}; the mean reads {sorted(labels)}."
            )
        missing = sorted(set(labels) - set(given))
        if missing:
            raise ValueError(f"`covariate_bounds` has no range for {missing}.")
        parts = [
            _pair(given[_key(i)], f"covariate_bounds[{_key(i)!r}]", w)
            for i, w in zip(lg.covariates, lg.widths, strict=True)
        ]
        lo = np.concatenate([pr[0] for pr in parts])
        hi = np.concatenate([pr[1] for pr in parts])
    else:
        lo, hi = _pair(given, "covariate_bounds", lg.p)
    return (lo, hi), (y_lo, y_hi)


def check_outcome_bounds(spec) -> tuple[float, float]:
    """The outcome's public range ``(lo, hi)``, checked (finite, lo < hi)."""
    lo, hi = _pair(spec, "outcome_bounds", 1)
    if lo[0] == hi[0]:
        raise ValueError("`outcome_bounds` must have lo < hi")
    return float(lo[0]), float(hi[0])


def _key(inp: DataInput) -> str:
    """How ``covariate_bounds`` names an input: its ``pm.Data`` name, else its label."""
    return inp.var.name if isinstance(inp.var, SharedVariable) and inp.var.name else inp.label


def rows_of(lg: LinearGaussian, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The private design ``(n, p)`` (covariates in design order) and outcome ``(n,)``."""
    design = [_rows_first(_value_of(i.var), i.row_axis, n) for i in lg.covariates]
    outcome = _rows_first(_value_of(lg.observed.var), lg.observed.row_axis, n)[:, 0]
    return (np.column_stack(design) if design else np.zeros((n, 0))), outcome


def _pair(spec, name: str, width: int) -> tuple[np.ndarray, np.ndarray]:
    try:
        lo, hi = spec
        lo = np.broadcast_to(np.asarray(lo, dtype=float), (width,)).copy()
        hi = np.broadcast_to(np.asarray(hi, dtype=float), (width,)).copy()
    except (TypeError, ValueError):
        raise ValueError(
            f"`{name}` must be a public range (lo, hi): scalars or {width} per column"
        ) from None
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo <= hi)):
        raise ValueError(
            f"`{name}` must be finite with lo < hi (lo == hi: a public constant column, e.g. "
            "an intercept column of ones)"
        )
    ranged = lo < hi
    with np.errstate(all="ignore"):
        scale, shift = _encoding(lo[ranged], hi[ranged])
    if not (np.all(np.isfinite(scale)) and np.all(np.isfinite(shift))):
        # a subnormal width overflows the encoding: an exact inf or NaN would be released
        raise ValueError(f"`{name}`: a range too narrow to encode onto [-1, 1] in floats")
    return lo, hi


#: Parametric bootstrap draws of :func:`expected_error` (post-processing of the release): kept
#: draws (a positive definite A), the attempts allowed per kept draw, and the fewest kept draws
#: that give a figure.
_ERROR_DRAWS = 400
_ERROR_TRIES = 25
_ERROR_MIN_DRAWS = 40
#: The sd of a Normal over its median absolute deviation.
_MAD_TO_SD = 1.482602218505602


def expected_error(release: GramRelease, draws: int = _ERROR_DRAWS) -> dict[str, np.ndarray]:
    r"""How far the release's noise moves the posterior means, in non-private posterior sds.

    Post-processing of the release only (a parametric bootstrap, seeded: the same figures for
    the same release). For large ``n`` the non-private posterior of the encoded coefficients is
    about :math:`N(A^{-1}b, s^2 A^{-1})`, :math:`s^2 = (c - b^\top A^{-1} b) / (n - k)`, and the
    noise-aware posterior's mean about the average of :math:`A^{-1}b` over the true statistics
    the release allows; their distance has the spread of :math:`A^{-1}b` over statistics drawn
    as the released ones minus noise of the release's own law (the residual release's
    statistics given the drawn ``A``, as :func:`surrogate_logp` reads them). The prior's pull is
    not in it, and where the noise rivals the signal (few rows, a residual sd small against the
    outcome's range) the figure is rough: it is normalised by the release's own noisy residual
    sd (a review measured sigma's error 2x above its figure at n = 1000, epsilon 2). Draws
    whose ``A`` is indefinite or whose residual sum of squares is negative are left out (no
    data set has those statistics); the spread is
    the median absolute deviation's. ``inf`` where the noise leaves the covariates' Gram matrix
    indefinite in nearly every draw (fewer than 40 of 10 000), or n <= k.

    Returns
    -------
    dict
        ``"error_sd"``: the spread (MAD, as an sd) of each model parameter's non-private mean
        over the draws, in its non-private posterior sds (intercept, the coefficients of the
        released columns, sigma); ``"largest"``: the median over draws of the largest distance
        from their median.
    """
    m = release.gram.shape[0]
    k = m - 1
    unknown = {"error_sd": np.full(k + 1, np.inf), "largest": np.inf}
    if release.n <= k:
        return unknown
    rng = np.random.default_rng(20191)  # public post-processing: fixed, reproducible
    upper = np.triu(np.ones((k, k), bool))
    upper[0, 0] = False  # n is exact
    sd_a = np.where(upper, release.noise_sd[:k, :k], 0.0)
    betas, sigmas = [], []
    for _ in range(_ERROR_TRIES * draws):
        e = np.triu(rng.standard_normal((k, k)) * sd_a)
        a = release.gram[:k, :k] - e - np.triu(e, 1).T
        b, c = _statistics_given(release, a, rng)
        if np.linalg.eigvalsh(a)[0] <= 0:
            continue  # not a Gram matrix: the statistics of no data set (nor of the posterior)
        beta = np.linalg.solve(a, b)
        if c - b @ beta <= 0:
            continue  # a negative residual sum of squares: no data set either
        betas.append(beta)
        sigmas.append(np.sqrt((c - b @ beta) / (release.n - k)))
        if len(betas) == draws:
            break
    if len(betas) < _ERROR_MIN_DRAWS:  # the noise swamps A: nothing to say but "unbounded"
        return unknown
    betas, sigmas = np.asarray(betas), np.asarray(sigmas)
    # encoded -> the model's intercept and coefficients (a linear map: the ratio is invariant)
    scale = np.r_[1.0, release.x_scale] / release.y_scale
    to_model = np.diag(scale)
    to_model[0, 1:] = release.x_shift / release.y_scale
    a_hat = _nearest_positive(release.gram[:k, :k], float(release.noise_sd[0, min(1, k - 1)]))
    b_hat, c_hat = _statistics_given(release, a_hat, None)
    # the released residual sum of squares may be <= 0 (noise): floored at its noise sd
    rss = c_hat - b_hat @ np.linalg.solve(a_hat, b_hat)
    s2 = max(rss, _rss_noise_sd(release), 1e-12 * release.n) / (release.n - k)
    cov = s2 * to_model @ np.linalg.inv(a_hat) @ to_model.T
    sd_w = np.sqrt(np.diag(cov))
    sigma = np.sqrt(s2)
    sd_sigma = sigma / np.sqrt(2.0 * (release.n - k))
    w = betas @ to_model.T
    spread = np.c_[w / sd_w, sigmas / max(sd_sigma, 1e-300)]
    # robust: where A may be near singular, A^-1 b has heavy tails (a ratio) whose sd says
    # nothing of a posterior the prior holds (statsmodels' engel: sds of 84-858 posterior sds,
    # inf where half the draws were indefinite); the median absolute deviation is the sd for
    # Gaussian spread
    spread = spread - np.median(spread, axis=0)
    return {
        "error_sd": _MAD_TO_SD * np.median(np.abs(spread), axis=0),
        "largest": float(np.median(np.abs(spread).max(1))),
    }


def _statistics_given(release: GramRelease, a: np.ndarray, rng) -> tuple[np.ndarray, float]:
    """``(b, c)`` given the covariates' Gram ``a``: the released ones, or with ``rng`` a draw
    of their noise (the residual release read as in :func:`_with_residuals`)."""
    k = a.shape[0]
    z = (lambda size: rng.standard_normal(size)) if rng is not None else np.zeros
    res = release.residual
    if res is None:
        b = release.gram[:k, k] - release.noise_sd[:k, k] * z(k)
        c = float(release.gram[k, k] - release.noise_sd[k, k] * z(1)[0])
        return b, c
    v1_b, v2_b = release.noise_sd[:k, k] ** 2, res.cross_sd**2
    vb = 1.0 / (1.0 / v1_b + 1.0 / v2_b)
    b = (release.gram[:k, k] / v1_b + (res.cross + a @ res.pilot) / v2_b) * vb
    b = b - np.sqrt(vb) * z(k)
    v1_c, v2_c = float(release.noise_sd[k, k]) ** 2, res.squares_sd**2
    vc = 1.0 / (1.0 / v1_c + 1.0 / v2_c)
    c2 = res.squares + 2.0 * res.pilot @ b - res.pilot @ a @ res.pilot
    c = (float(release.gram[k, k]) / v1_c + c2 / v2_c) * vc - np.sqrt(vc) * z(1)[0]
    return b, float(c)


def _rss_noise_sd(release: GramRelease) -> float:
    """Sd of the noise on the outcome's sum of squares (both stages' where there are two)."""
    k = release.gram.shape[0] - 1
    v1 = float(release.noise_sd[k, k]) ** 2
    if release.residual is None:
        return float(np.sqrt(v1))
    return float(np.sqrt(1.0 / (1.0 / v1 + 1.0 / release.residual.squares_sd**2)))


def _nearest_positive(a: np.ndarray, floor: float) -> np.ndarray:
    """``a`` with its eigenvalues raised to ``floor`` (a released Gram may be indefinite)."""
    vals, vecs = np.linalg.eigh(a)
    return (vecs * np.maximum(vals, max(floor, 1e-12))) @ vecs.T
