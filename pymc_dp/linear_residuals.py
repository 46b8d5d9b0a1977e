r"""The two-stage release of Normal linear regression: a pilot Gram matrix, then residuals.

One release of the Gram matrix of ``(1, z, y)`` (:mod:`pymc_dp.linear_gaussian`) pays for the
covariates' Gram matrix ``A`` (most of its entries) in every statistic, and its outcome column
carries the outcome's whole range although a fitted line leaves residuals of a few noise sds.
The two-stage release spends :data:`PILOT_SHARE` of the budget on the Gram matrix, takes the
pilot coefficients :math:`\beta_p` and noise sd from it (post-processing), and spends the rest on
the residuals :math:`r_i = \mathrm{clip}(y_i - u_i^\top \beta_p, \pm R)`, ``u = (1, z)``:

.. math:: \tilde t = \sum_i u_i r_i + e_t, \qquad \tilde s = \sum_i r_i^2 + e_s / w,

one Gaussian release of :math:`(t, w s)` whose L2 sensitivity (replace-one) is below
:math:`R\sqrt{4k + w^2R^2}` (:func:`residual_sensitivity` computes it exactly). Unclipped,
:math:`t = b - A\beta_p` and :math:`s = c - 2\beta_p^\top b + \beta_p^\top A\beta_p` are
linear in the true statistics, so the noise-aware posterior stays exact
(:func:`pymc_dp.linear_gaussian.surrogate_logp`): ``A``'s noise now multiplies only the pilot's
error :math:`\beta - \beta_p`, and the noise on ``b`` and ``c`` scales with ``R`` instead of the
outcome's range.

The radius is :data:`RADIUS_SDS` upper pilot residual sds (plus the pilot's mean shift): under
the model a row's residual lies beyond it with probability about 6e-5. Before the residuals
are released the model's tails are checked: a noisy count of the rows beyond the clip
(:data:`TAIL_SHARE` of the budget; skipped where no residual can reach the radius); where it
exceeds the Normal model's expected count by :data:`TAIL_SDS` noise sds (heavy-tailed
outcomes: the model is misspecified), the residual release is declined and the Gram matrix
released again instead.

**What the check cannot see.** The count's noise sd is 1 / sqrt(2 TAIL_SHARE mu) rows (7 at
epsilon 2, delta 1e-6): a handful of gross outliers, fewer than about ``TAIL_SDS`` of those
sds, pass it and are winsorised at the clip. The posterior of the noise sd is then that of the
winsorised residuals, smaller than a non-private fit of the Normal model, whose noise sd the
outliers inflate (a review measured 10 rows of 20 000 at the outcome's bound moving it 1.4
posterior sds at epsilon 2 before the check was tightened to its present share). The report
gives the noisy count and the limit. Coefficients move far less (intercept <= 0.5 sds there).

After the pilot, :func:`second_stage` predicts from the pilot release alone (public) the largest
error of each option in posterior sds and takes the better: the residual release, or the Gram
matrix released again and averaged with the first (then the two releases are exactly one at the
whole budget, so choosing costs nothing where residuals do not help: outcomes whose noise sd is
a large share of their range, weak covariates).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

from pymc_dp.accounting.ledger import GaussianMechanism
from pymc_dp.checks import check_positive, check_probability
from pymc_dp.linear_gaussian import GramRelease, encode_rows, release_gram
from pymc_dp.noise import NoiseSource

__all__ = [
    "PILOT_SHARE",
    "RADIUS_SDS",
    "TAIL_SDS",
    "TAIL_SHARE",
    "ResidualRelease",
    "SecondStage",
    "combine_grams",
    "release_residuals",
    "release_two_stage",
    "residual_sensitivity",
    "second_stage",
]

#: Share of the budget (PLD mean) of the pilot Gram release. Simulated on the bench's synthetic
#: design at epsilon 2: 0.1 and 0.25 gave the same median error (0.85, 0.88 sds), 0.4 gave 0.96.
PILOT_SHARE = 0.2
#: Radius of the residual clip in upper pilot residual sds (4: 6e-5 of Normal rows beyond;
#: 6 doubled the error of the simulated synthetic design at epsilon 2).
RADIUS_SDS = 4.0
#: Share of the budget of the tail check (a noisy count of the rows beyond the clip), and the
#: noise sds above the Normal model's expected count at which the residual release is declined.
TAIL_SHARE = 0.1
TAIL_SDS = 2.0
#: Name of the tail check in the ledger.
TAIL_NAME = "rows beyond the residual clip (count)"
#: Name of the residual release in the ledger and the report.
RESIDUAL_NAME = "residuals at the pilot coefficients (cross products and sum of squares)"
#: Weights of the sum of squares against the cross products tried by :func:`second_stage`.
_WEIGHTS = np.geomspace(0.05, 100.0, 121)


def residual_sensitivity(radius: float, k: int, weight: float) -> float:
    r"""L2 sensitivity of ``(sum u r, weight sum r^2)`` under replace-one, residuals in
    :math:`[-R, R]`, ``u`` in :math:`\{1\}\times[-1,1]^{k-1}`.

    Two rows with :math:`|r| = a \ge |r'| = x` move the vector by at most
    :math:`\sqrt{k (a + x)^2 + w^2 (a^2 - x^2)^2}` (``u' = -u`` at a corner), largest at
    :math:`a = R`; the maximum over :math:`x \in [0, R]` is at an end point or a root of the
    derivative :math:`4w^2x^3 + (2k - 4w^2R^2)x + 2kR` (exact, attained)."""
    r, w2 = float(radius), float(weight) ** 2
    # every candidate is a point of [0, R], so the maximum never exceeds the true one; roots
    # are taken generously (a double root's imaginary part is rounding, not absence) and a
    # grid backs them up
    candidates = list(np.linspace(0.0, r, 257))
    for root in np.roots([4.0 * w2, 0.0, 2.0 * k - 4.0 * w2 * r * r, 2.0 * k * r]):
        if abs(root.imag) <= 1e-6 * max(r, 1e-300):
            candidates.append(min(max(float(root.real), 0.0), r))
    worst = max(k * (r + x) ** 2 + w2 * (r * r - x * x) ** 2 for x in candidates)
    return float(np.sqrt(worst))


@dataclass(frozen=True)
class ResidualRelease:
    """The residual release (module docstring), in the Gram release's encoded units."""

    pilot: np.ndarray  # beta_p, (k,)
    radius: float
    weight: float
    cross: np.ndarray  # t~, (k,)
    squares: float  # s~
    cross_sd: float
    squares_sd: float

    def to_attr(self) -> str:
        return (
            f"{RESIDUAL_NAME}: residuals clipped at +-{self.radius:.4g}, noise sd "
            f"{self.cross_sd:.4g} (cross products) and {self.squares_sd:.4g} (sum of squares)"
        )


@dataclass(frozen=True)
class SecondStage:
    """What the pilot release says to do next (public: post-processing of the pilot)."""

    residuals: bool
    pilot: np.ndarray
    radius: float
    weight: float
    predicted_residuals: float
    predicted_gram: float
    #: Whether a residual can exceed the radius at all (else the tail check is skipped).
    clipped: bool = True


def _pilot(release: GramRelease) -> tuple[np.ndarray, float, np.ndarray, float]:
    """``(beta_p, sigma_p^2, A positive definite, A's entry noise sd)`` of a Gram release."""
    k = release.gram.shape[0] - 1
    n = release.n
    d_off = float(release.noise_sd[0, min(1, k)])  # an off-diagonal entry's noise sd
    vals, vecs = np.linalg.eigh(release.gram[:k, :k])
    floor = max(2.0 * np.sqrt(k) * d_off, 1e-6 * n)
    a = (vecs * np.maximum(vals, floor)) @ vecs.T
    b, c = release.gram[:k, k], float(release.gram[k, k])
    beta = np.linalg.solve(a, b)
    s2 = max(c - b @ beta, float(release.noise_sd[k, k]), 1e-12 * n) / max(n - k, 1)
    return beta, s2, a, d_off


def second_stage(
    release: GramRelease, mu_rest: float, sigma_free: bool = True, mu_gram: float | None = None
) -> SecondStage:
    """Choose the second release from the pilot ``release`` (public): residuals at
    ``mu_rest`` (PLD mean) or the Gram matrix again at ``mu_gram`` (default ``mu_rest``),
    whichever has the smaller predicted largest error (posterior sds of the coefficients and,
    when ``sigma_free``, the noise sd)."""
    check_positive(mu_rest, "mu_rest")
    mu_gram = mu_rest if mu_gram is None else check_positive(mu_gram, "mu_gram")
    k, n = release.gram.shape[0] - 1, release.n
    beta, s2, a, d1 = _pilot(release)
    ainv = np.linalg.inv(a)
    # per coefficient: error sd of A^-1 e over the posterior sd sigma sqrt(A^-1_jj), e iid
    gain = np.sqrt(np.diag(ainv @ ainv) / np.diag(ainv) / s2).max()
    norm2 = float(beta @ beta)
    dof = np.sqrt(2.0 * max(n - k, 1))
    # the Gram matrix again, averaged with the pilot: one release at the whole budget
    mu_all = mu_gram + _mu_of(release)
    d = float(release.noise_sd[k, k]) * np.sqrt(_mu_of(release) / mu_all)
    gram_coef = gain * d / np.sqrt(2.0) * np.sqrt(1.0 + norm2)
    gram_sd = d * (1.0 + norm2) / (s2 * dof) if sigma_free else 0.0
    gram_err = max(gram_coef, gram_sd)
    # residuals: A's pilot noise acts on the pilot's error only
    pilot_err2 = (d1**2) * (1.0 + norm2) * float(np.trace(ainv @ ainv))
    mean_shift2 = (d1**2) * (1.0 + norm2) * float(np.trace(ainv)) / n
    upper = s2 + 2.0 * float(release.noise_sd[k, k]) / max(n - k, 1)
    radius_max = 1.0 + float(np.abs(beta).sum())
    radius = float(min(radius_max, RADIUS_SDS * np.sqrt(upper + mean_shift2)))
    best = (np.inf, 1.0)
    for w in _WEIGHTS if sigma_free else _WEIGHTS[:1]:
        s_t = residual_sensitivity(radius, k, w) / np.sqrt(2.0 * mu_rest)
        coef = gain * np.sqrt(s_t**2 + d1**2 * pilot_err2)
        sd = s_t / w / (s2 * dof) if sigma_free else 0.0
        best = min(best, (max(coef, sd), w))
    return SecondStage(
        residuals=bool(best[0] < gram_err),
        pilot=beta,
        radius=radius,
        weight=float(best[1]),
        predicted_residuals=float(best[0]),
        predicted_gram=float(gram_err),
        clipped=radius < radius_max,
    )


def _mu_of(release: GramRelease) -> float:
    return float(sum(1.0 / (2.0 * m.noise_multiplier**2) for m in release.mechanisms))


def release_residuals(
    design, outcome, *, x_bounds, y_bounds, plan: SecondStage, mu: float, noise: NoiseSource
) -> tuple[ResidualRelease, GaussianMechanism]:
    """Release ``(sum u r, weight sum r^2)`` of the clipped residuals at ``plan.pilot``."""
    check_positive(mu, "mu")
    rows = encode_rows(design, outcome, x_bounds, y_bounds)
    r = np.clip(rows.y - rows.u @ plan.pilot, -plan.radius, plan.radius)
    k = rows.u.shape[1]
    sens = residual_sensitivity(plan.radius, k, plan.weight)
    multiplier = 1.0 / np.sqrt(2.0 * mu)
    vec = np.r_[rows.u.T @ r, plan.weight * (r @ r)]
    noisy = noise.gaussian(vec, sens, multiplier)
    sd = NoiseSource.gaussian_std(sens, multiplier, k + 1)
    release = ResidualRelease(
        pilot=plan.pilot,
        radius=plan.radius,
        weight=plan.weight,
        cross=np.asarray(noisy[:k], dtype=np.float64),
        squares=float(noisy[k]) / plan.weight,
        cross_sd=float(sd),
        squares_sd=float(sd) / plan.weight,
    )
    return release, GaussianMechanism(RESIDUAL_NAME, multiplier, 1)


def combine_grams(first: GramRelease, second: GramRelease) -> GramRelease:
    """Two releases of one Gram matrix as one: the precision-weighted mean (exact: Gaussian)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p1 = np.where(first.noise_sd > 0, 1.0 / first.noise_sd**2, 0.0)
        p2 = np.where(second.noise_sd > 0, 1.0 / second.noise_sd**2, 0.0)
        both = p1 + p2
        gram = np.where(both > 0, (first.gram * p1 + second.gram * p2) / both, first.gram)
        sd = np.where(both > 0, 1.0 / np.sqrt(both), 0.0)
    return dataclasses.replace(
        first, gram=gram, noise_sd=sd, mechanisms=first.mechanisms + second.mechanisms
    )


def release_two_stage(
    design,
    outcome,
    *,
    x_bounds,
    y_bounds,
    mu: float,
    noise: NoiseSource,
    sigma_free: bool = True,
    pilot_share: float = PILOT_SHARE,
) -> GramRelease:
    """The pilot Gram release at ``pilot_share * mu``, then the better second release
    (:func:`second_stage`); before residuals, a noisy count of the rows the clip would cut
    (:data:`TAIL_SHARE` of the budget) checks the model's Normal tails, and the Gram matrix is
    released again where they are heavier. The ledger holds every mechanism."""
    check_positive(mu, "mu")
    check_probability(pilot_share, "pilot_share")
    mu1 = pilot_share * mu
    kw = {"x_bounds": x_bounds, "y_bounds": y_bounds}
    pilot = release_gram(design, outcome, mu=mu1, noise=noise, **kw)
    mu_tail = TAIL_SHARE * mu
    plan = second_stage(pilot, mu - mu1 - mu_tail, sigma_free, mu_gram=mu - mu1)
    if not plan.clipped:  # nothing can be clipped: no tail check, its share to the residuals
        plan = second_stage(pilot, mu - mu1, sigma_free, mu_gram=mu - mu1)
        mu_tail = 0.0
    if not plan.residuals:
        again = release_gram(design, outcome, mu=mu - mu1, noise=noise, **kw)
        return combine_grams(pilot, again)
    mu_rest = mu - mu1 - mu_tail
    checks: tuple = ()
    note = ""
    if mu_tail > 0.0:
        tail, tail_mech, tail_sd = _tail_count(design, outcome, plan, mu_tail, noise, **kw)
        checks = (tail_mech,)
        expected = pilot.n * 2.0 * ndtr(-RADIUS_SDS)
        limit = expected + TAIL_SDS * tail_sd
        shown = f"about {max(tail, 0.0):.0f} rows (noisy count, sd {tail_sd:.3g})"
        radius = f"the residual clip (radius {plan.radius:.3g} in encoded units)"
        if tail > limit:
            again = release_gram(design, outcome, mu=mu_rest, noise=noise, **kw)
            both = combine_grams(pilot, again)
            return dataclasses.replace(
                both,
                mechanisms=(*both.mechanisms, tail_mech),
                note=(
                    f"residual release declined: {shown} beyond {radius}, above the "
                    f"{limit:.3g} a Normal model allows (heavier tails than it: clipping would "
                    "bias the noise sd); the Gram matrix released again"
                ),
            )
        note = (
            f"{shown} beyond {radius}, within the {limit:.3g} a Normal model allows; the noise "
            "sd's posterior is that of residuals winsorised there"
        )
    residual, mechanism = release_residuals(
        design, outcome, plan=plan, mu=mu_rest, noise=noise, **kw
    )
    return dataclasses.replace(
        pilot, mechanisms=(*pilot.mechanisms, *checks, mechanism), residual=residual, note=note
    )


def _tail_count(design, outcome, plan, mu, noise, *, x_bounds, y_bounds):
    """Noisy count of the rows whose residual at the pilot lies beyond the clip (sensitivity
    1 under replace-one)."""
    rows = encode_rows(design, outcome, x_bounds, y_bounds)
    count = float(np.sum(np.abs(rows.y - rows.u @ plan.pilot) > plan.radius))
    multiplier = 1.0 / np.sqrt(2.0 * mu)
    noisy = float(noise.gaussian(count, 1.0, multiplier))
    sd = NoiseSource.gaussian_std(1.0, multiplier, 1)
    return noisy, GaussianMechanism(TAIL_NAME, multiplier, 1), sd


def planned_errors(
    n: int, p: int, resid: float, mu: float, sigma_free: bool = True, pilot_share=PILOT_SHARE
) -> tuple[bool, np.ndarray, float]:
    """From public facts (``n`` rows, ``p`` covariates, a guessed residual sd ``resid`` in
    encoded units, the budget ``mu``): ``(two-stage residual release chosen, error sds in
    posterior sds per coefficient (intercept first) and noise sd, the Gram noise sd per
    diagonal entry)``. Covariates assumed uniform on [-1, 1] (second moment 1/3), coefficients
    small against the outcome's range; the pilot's own error is left out."""
    from pymc_dp.linear_gaussian import gram_sensitivity

    k = p + 1
    entries = (k + 1) * (k + 2) // 2 - 1
    moment = np.r_[1.0, np.full(p, 1.0 / 3.0)]
    dof = np.sqrt(2.0 * max(n - k, 1))

    def errors(cross_sd, squares_sd):
        coef = cross_sd / (resid * np.sqrt(n * moment))
        return np.r_[coef, [squares_sd / (resid**2 * dof)] if sigma_free else []]

    diag = NoiseSource.gaussian_std(gram_sensitivity(k), 1.0 / np.sqrt(2.0 * mu), entries)
    gram = errors(diag / np.sqrt(2.0), diag)
    radius = RADIUS_SDS * resid
    mu2 = (1.0 - pilot_share - TAIL_SHARE) * mu
    best = None
    for w in _WEIGHTS if sigma_free else _WEIGHTS[:1]:
        s_t = residual_sensitivity(radius, k, w) / np.sqrt(2.0 * mu2)
        errs = errors(s_t, s_t / w)
        if best is None or errs.max() < best.max():
            best = errs
    two = p > 0 and radius < 1.0 and best.max() < gram.max()
    return bool(two), (best if two else gram), float(diag)
