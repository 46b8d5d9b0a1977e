"""pymc_dp.noise: secret, snapped noise."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from pymc_dp.noise import SNAP_GRID, NoiseSource


def test_default_noise_cannot_be_reproduced():
    a, b = NoiseSource(), NoiseSource()
    assert not a.seeded
    assert a.standard_normal(4).tolist() != b.standard_normal(4).tolist()


def test_seeded_noise_is_reproducible_and_per_chain():
    a, b = NoiseSource.for_chain(7, 0), NoiseSource.for_chain(7, 0)
    assert a.seeded and a.standard_normal(3).tolist() == b.standard_normal(3).tolist()
    c = NoiseSource.for_chain(7, 1)
    assert NoiseSource.for_chain(7, 0).standard_normal() != c.standard_normal()
    assert not NoiseSource.for_chain(None, 0).seeded


def test_snapped_gaussian_has_the_right_law():
    """KS against N(x, sigma^2) at 20 000 draws (fixed seed); the snapping moves each value by
    at most sigma / 2^21, far below what KS can see."""
    noise = NoiseSource(1)
    x, sens, s = 2.5, 0.8, 1.7
    out = np.array([noise.gaussian(x, sens, s) for _ in range(20_000)])
    sigma = noise.gaussian_std(sens, s)
    assert stats.kstest(out, stats.norm(x, sigma).cdf).pvalue > 1e-3
    vec = noise.gaussian(np.zeros(4), sens, s)
    assert vec.shape == (4,)
    assert noise.gaussian_std(sens, s, dim=4) > sigma  # sqrt(dim) grid cells of rounding


def test_snapped_gaussian_sensitivity_accounting():
    """The rounded input moves by at most sqrt(dim) grid cells: sigma is raised so that
    sigma / (sensitivity + sqrt(dim) grid) is exactly the multiplier asked for."""
    for dim in (1, 10):
        s, sens = 3.0, 0.5
        sigma = NoiseSource.gaussian_std(sens, s, dim)
        grid = sigma / SNAP_GRID
        assert sigma / (sens + np.sqrt(dim) * grid) == pytest.approx(s, rel=1e-12)
    with pytest.raises(ValueError, match="too large"):
        NoiseSource.gaussian_std(1.0, SNAP_GRID, 1)


def test_zero_sensitivity_releases_unchanged():
    assert NoiseSource(0).gaussian(1.25, 0.0, 3.0) == 1.25


def test_snapped_laplace_law_and_budget():
    noise = NoiseSource(2)
    sens, eps = 2.0, 0.5
    out = noise.laplace_release(np.full(20_000, 10.0), sens, eps)
    scale = sens / (eps - 20_000 / SNAP_GRID)  # the rounding of 20 000 inputs costs 0.019
    assert stats.kstest(out, stats.laplace(10.0, scale).cdf).pvalue > 1e-3
    grid = scale / SNAP_GRID
    np.testing.assert_array_equal(out, grid * np.rint(out / grid))
    with pytest.raises(ValueError, match="too small"):
        noise.laplace_release(np.zeros(10), 1.0, 1e-6)


def test_exact_noise_from_opendp():
    pytest.importorskip("opendp")
    noise = NoiseSource(exact=True)
    out = np.array([noise.gaussian(0.0, 1.0, 2.0) for _ in range(3000)])
    sigma = noise.gaussian_std(1.0, 2.0)
    # mean within 4 standard errors, sd within 4 standard errors (sd of a sample sd: sigma/sqrt(2m))
    assert abs(out.mean()) < 4 * sigma / np.sqrt(out.size)
    assert abs(out.std() - sigma) < 4 * sigma / np.sqrt(2 * out.size)
    with pytest.raises(ValueError, match="cannot seed"):
        NoiseSource(3, exact=True)
