"""The objective-perturbation yardstick's privacy bound (``benchmarks.objective_perturbation``),
pinned to independent computations: the Gaussian mechanism's closed-form profile and a seeded
Monte Carlo of the dominating loss."""

import numpy as np
import pytest
from scipy import stats

from benchmarks.objective_perturbation import op_delta, op_mu_for_budget


def _gaussian_delta(eps: float, mu: float) -> float:
    """Balle & Wang 2018, Theorem 8: the Gaussian mechanism's delta at ``eps``."""
    return stats.norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)


@pytest.mark.parametrize("eps, mu", [(0.5, 0.4), (1.0, 0.5), (2.0, 0.8), (4.0, 1.0)])
def test_the_bound_sits_between_one_and_two_absolute_normals(eps, mu):
    # |z| <= max(|z1|, |z2|) and P(max > t) <= 2 P(|z| > t); E[(1 - e^(eps - mu|z| - mu^2/2))_+]
    # is twice the Gaussian mechanism's delta
    value = op_delta(eps, mu, 0.0)
    gauss = _gaussian_delta(eps, mu)
    assert 2 * gauss < value < 4 * gauss


@pytest.mark.parametrize("eps, mu, eps_j", [(0.3, 0.8, 0.1), (1.5, 0.8, 0.1)])
def test_the_bound_matches_a_monte_carlo_of_its_loss(eps, mu, eps_j):
    # the first integrates from 0, the second from (eps - eps_j - mu^2/2) / mu = 1.35 (the
    # branch calibration uses)
    m = np.abs(np.random.default_rng(7).standard_normal((2, 2_000_000))).max(axis=0)
    samples = np.maximum(0.0, -np.expm1(eps - eps_j - mu * m - mu * mu / 2))
    mc, se = samples.mean(), samples.std() / np.sqrt(m.size)
    assert abs(op_delta(eps, mu, eps_j) - mc) < 4 * se


def test_the_jacobian_term_shifts_epsilon_and_calibration_inverts_the_bound():
    assert op_delta(2.0, 0.7, 0.3) == pytest.approx(op_delta(1.7, 0.7, 0.0), rel=1e-9)
    mu = op_mu_for_budget(2.0, 1e-6, 0.05)
    assert op_delta(2.0, mu, 0.05) == pytest.approx(1e-6, rel=1e-6)
    with pytest.raises(ValueError, match="eps_j"):
        op_mu_for_budget(1.0, 1e-6, 1.0)
