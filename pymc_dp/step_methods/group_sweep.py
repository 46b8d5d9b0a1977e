r"""One sweep of :class:`~pymc_dp.step_methods.group_gibbs.DPGroupGibbs`: the kernel, its tests
and their public bounds.

A sweep from ``q`` (Gibbs by group in centred coordinates ``psi = (a, beta)``, ``a = loc(h) +
scale(h) z``):

1. the hyperparameters ``h`` given the effects: exact random-walk moves on the prior alone (no
   data, no budget);
2. each group's effect ``a_g`` from the anchored surrogate's Gaussian conditional, tested with
   the penalty test on the remainder beyond the anchor's released gradient, summed over that
   group's rows only (parallel composition: one release for all groups);
3. the coefficients from the surrogate's conditional, tested on every row (the other release).

The remainder bounds are public functions of the points (module functions below: for a GLM with
curvature bound ``w`` and covariate bounds ``c``, ``w |x'D| (|x'u| + |x'u'|) / 2``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pymc_dp.anchor import Anchor
from pymc_dp.bounds import GLMClip
from pymc_dp.mechanisms import PenaltyTest, clipped_sum_sensitivity
from pymc_dp.noise import NoiseSource

__all__ = ["FIRST_HYPER_MOVES", "GROUP_TESTS", "GroupSweep", "coefficient_bound", "group_bound"]

#: One sweep's releases: the group tests (one test's loss together) and the coefficients' test.
GROUP_TESTS = PenaltyTest(
    "group sweep's remainder tests at the Taylor anchor (its group tests one release by "
    "parallel composition, its coefficients' test the other)",
    2,
)
#: Exact hyperparameter moves at a chain's first sweep (from the model's initial point).
FIRST_HYPER_MOVES = 200


def _eta_bound(c: np.ndarray, v: np.ndarray, ng: int) -> float:
    """``max |x'v|`` over the rows of any group: ``c_0 max_g |v_g| + sum_j c_j |v_beta_j|``."""
    top = float(np.abs(v[:ng]).max()) if ng else 0.0
    return float(c[0]) * top + float(c[1:] @ np.abs(v[ng:]))


def group_bound(
    glm: GLMClip, anchor: np.ndarray, psi: np.ndarray, new: np.ndarray, g: int, ng: int
) -> float:
    """Bound on the Taylor remainder of every row of group ``g`` for a move of ``a_g`` alone
    (module docstring): ``w |x'D| (|x'u| + |x'u'|) / 2`` on the block ``(a_g, beta)``."""
    c = np.asarray(glm.covariate_bounds, float)
    u0, u1 = psi - anchor, new - anchor
    block = np.r_[g, np.arange(ng, psi.size)]
    step = float(c[0]) * abs(new[g] - psi[g])
    far = _eta_bound(c, u0[block], 1) + _eta_bound(c, u1[block], 1)
    return 0.5 * glm.curvature * step * far


def coefficient_bound(
    glm: GLMClip, anchor: np.ndarray, psi: np.ndarray, new: np.ndarray, ng: int
) -> float:
    """The same for a move of the coefficients alone, over every row (any row may be in any
    group: the largest ``|a_g - A_g|``)."""
    c = np.asarray(glm.covariate_bounds, float)
    step = float(c[1:] @ np.abs(new[ng:] - psi[ng:]))
    far = _eta_bound(c, psi - anchor, ng) + _eta_bound(c, new - anchor, ng)
    return 0.5 * glm.curvature * step * far


@dataclass
class GroupSweep:
    """The sweep's configuration: public, except ``group_of_row`` (each row's group) and the
    rows inside ``ratio`` (the remainder kernel), which never leave it. What is a chain's
    (its generator, secret noise, adaptation) comes with each call."""

    structure: Any  # group_gibbs._Structure: where a = loc + scale z lives in q
    prior_value: Callable[[np.ndarray], float]
    glm: GLMClip
    anchor: Anchor
    precision: np.ndarray  # the surrogate's (the warm start's noise-aware curvature)
    beta_prior: tuple[np.ndarray, np.ndarray]  # the coefficients' prior centre and scale
    # private: kept out of the repr (a printed sweep or a traceback with locals shows neither)
    ratio: Any = field(repr=False)  # remainder kernel: (psi_new, psi, bound, rows) -> sums
    group_of_row: np.ndarray = field(repr=False)
    hyper_moves: int

    def psi(self, q: np.ndarray) -> np.ndarray:
        s = self.structure
        loc, scale = s.loc_scale(q)
        return np.concatenate([loc + scale * q[s.z], q[s.beta]])

    def to_q(self, q: np.ndarray, psi: np.ndarray) -> np.ndarray:
        """``q`` with its ``z`` and coefficients set from ``psi`` at ``q``'s hyperparameters."""
        s = self.structure
        out = q.copy()
        loc, scale = s.loc_scale(out)
        out[s.z] = (psi[: s.n_groups] - loc) / scale
        out[s.beta] = psi[s.n_groups :]
        return out

    def _hyper_target(self, q: np.ndarray, a: np.ndarray) -> tuple[float, np.ndarray]:
        """``log p(h, z(a, h), beta) - sum log|scale|`` and the point, at ``q``'s ``h``."""
        s = self.structure
        loc, scale = s.loc_scale(q)
        out = q.copy()
        out[s.z] = (a - loc) / scale
        with np.errstate(all="ignore"):
            value = self.prior_value(out) - float(np.sum(np.log(np.abs(scale))))
        return (value if np.isfinite(value) else -np.inf), out

    def _test(self, psi, psi_new, bound, rows, noise: NoiseSource, scale: float):
        """``(released remainder - sigma^2 / 2 + G'D, sigma, exact clip fraction)``; a bound
        that is not finite and >= 0 (a move off the support) rejects without reading data."""
        if not (np.isfinite(bound) and bound >= 0.0):
            return -np.inf, 0.0, 0.0
        value, clip = self.ratio(psi_new, psi, bound, rows)
        log_ratio, sigma = GROUP_TESTS.log_ratio(
            noise, value, clipped_sum_sensitivity(bound), scale
        )
        return log_ratio + float(self.anchor.gradient @ (psi_new - psi)), sigma, clip

    def _hyper(self, q, a, rng, adapt, tuning: bool, moves: int) -> np.ndarray:
        """1. The hyperparameters given the effects: exact, no data."""
        s = self.structure
        current, q = self._hyper_target(q, a)
        for _ in range(moves):
            step = float(adapt.current(tuning))
            trial = q.copy()
            trial[s.hyper] += step * rng.standard_normal(s.hyper.size)
            value, trial = self._hyper_target(trial, a)
            log_alpha = value - current
            prob = float(np.exp(min(0.0, log_alpha))) if np.isfinite(log_alpha) else 0.0
            if rng.uniform() < prob:
                q, current = trial, value
            adapt.update(prob, tuning)
        return q

    def _group(self, g, psi, q, prior, loc_scale, rng, noise, scale):
        """2. Group ``g``'s effect from the anchored surrogate's conditional, tested on its
        rows: ``(psi, q, prior, accepted, sigma, clip fraction)``. ``loc_scale``: the effect's
        at the sweep's hyperparameters."""
        s, A, P, G = self.structure, self.anchor.point, self.precision, self.anchor.gradient
        loc, sc = loc_scale
        d = psi - A
        h = P[g, g] + 1.0 / sc[g] ** 2
        rest = P[g] @ d - P[g, g] * d[g]
        mean = A[g] + (G[g] - rest + (loc[g] - A[g]) / sc[g] ** 2) / h
        new = psi.copy()
        new[g] = mean + rng.standard_normal() / np.sqrt(h)
        bound = group_bound(self.glm, A, psi, new, g, s.n_groups)
        log_ratio, sigma, clip = self._test(psi, new, bound, self.group_of_row == g, noise, scale)
        q_new = q.copy()
        q_new[s.z.start + g] = (new[g] - loc[g]) / sc[g]
        prior_new = self.prior_value(q_new)
        hastings = 0.5 * h * ((new[g] - mean) ** 2 - (psi[g] - mean) ** 2)
        log_alpha = log_ratio + prior_new - prior + hastings
        if np.isfinite(log_alpha) and np.log(rng.uniform()) < log_alpha:
            self.ratio.accept()
            return new, q_new, prior_new, True, sigma, clip
        return psi, q, prior, False, sigma, clip

    def _coefficients(self, psi, q, prior, rng, noise, scale):
        """3. The coefficients from the surrogate's conditional, tested on every row:
        ``(psi, q, accepted, sigma, clip fraction)``."""
        s, A, P, G = self.structure, self.anchor.point, self.precision, self.anchor.gradient
        ng = s.n_groups
        d = psi - A
        centre, sd = self.beta_prior
        hb = P[ng:, ng:] + np.diag(1.0 / sd**2)
        lin = G[ng:] - P[ng:, :ng] @ d[:ng] - (A[ng:] - centre) / sd**2
        mean = A[ng:] + np.linalg.solve(hb, lin)
        chol = np.linalg.cholesky(hb)  # hb = L L': a draw is mean + L'^-1 e
        new = psi.copy()
        new[ng:] = mean + np.linalg.solve(chol.T, rng.standard_normal(s.beta.size))
        bound = coefficient_bound(self.glm, A, psi, new, ng)
        log_ratio, sigma, clip = self._test(psi, new, bound, None, noise, scale)
        q_new = q.copy()
        q_new[s.beta] = new[ng:]
        prior_new = self.prior_value(q_new)

        def log_q(x: np.ndarray) -> float:
            r = chol.T @ (x[ng:] - mean)
            return -0.5 * float(r @ r)

        log_alpha = log_ratio + prior_new - prior + log_q(psi) - log_q(new)
        ok = bool(np.isfinite(log_alpha) and np.log(rng.uniform()) < log_alpha)
        if ok:
            self.ratio.accept()
            return new, q_new, True, sigma, clip
        return psi, q, False, sigma, clip

    def __call__(
        self, q, rng, noise: NoiseSource, scale: float, adapt, tuning: bool, first: bool
    ) -> tuple[np.ndarray, dict, list[float]]:
        """One sweep from ``q``: the next point, its releasable stats, the exact clip fractions
        (diagnostics only)."""
        s = self.structure
        psi = self.psi(q)
        moves = FIRST_HYPER_MOVES if first else self.hyper_moves
        q = self._hyper(q, psi[: s.n_groups], rng, adapt, tuning, moves)
        loc_scale = s.loc_scale(q)  # the hyperparameters stay put for the rest of the sweep
        prior = self.prior_value(q)
        sigmas, accepted, clips = [], 0, []
        for g in range(s.n_groups):
            moved = self._group(g, psi, q, prior, loc_scale, rng, noise, scale)
            psi, q, prior, ok, sigma, clip = moved
            accepted += ok
            sigmas.append(sigma)
            clips.append(clip)
        beta_ok = True
        if s.beta.size:
            psi, q, beta_ok, sigma, clip = self._coefficients(psi, q, prior, rng, noise, scale)
            sigmas.append(sigma)
            clips.append(clip)
        stats = {
            "accepted": beta_ok if s.beta.size else accepted > 0,
            "accept_rate": accepted / s.n_groups,
            "noise_std": float(np.median(sigmas)),
        }
        return q, stats, clips
