"""Minibatch draws (pymc_dp.batches): a Poisson batch includes each row
independently with probability q, and is the same whoever draws which range of rows."""

from __future__ import annotations

import numpy as np
from scipy import stats

from pymc_dp.batches import POISSON_BLOCK, PoissonBatch, draw_batch

N = 2 * POISSON_BLOCK + 12_345  # three blocks, the last one short


def test_a_poisson_batch_is_the_same_over_any_split_of_its_rows():
    rng = np.random.default_rng(1)
    batch = PoissonBatch.draw(rng, N, 3000)
    whole = batch.rows()
    assert np.all(np.diff(whole) > 0) and whole[0] >= 0 and whole[-1] < N
    for _ in range(5):
        cuts = np.sort(rng.choice(np.arange(1, N), 6, replace=False))
        cuts = np.concatenate([[0], cuts, [POISSON_BLOCK, 2 * POISSON_BLOCK], [N]])
        cuts = np.unique(cuts)
        parts = [batch.rows(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
        np.testing.assert_array_equal(np.concatenate(parts), whole)
    assert batch.rows(5, 5).size == 0
    # the key decides the batch: the same key gives it again, another key another batch
    assert np.array_equal(PoissonBatch(batch.key, batch.rate, N).rows(), whole)
    other = PoissonBatch.draw(rng, N, 3000).rows()
    assert not np.array_equal(other, whole)


def test_a_poisson_batch_includes_each_row_independently_with_probability_q():
    """K = 400 batches of n = 2^20 + 1000 rows (two blocks) at q = 0.01. Each check is against
    its Monte Carlo error: the size's mean and variance (Binomial(n, q)), the inclusion rate of
    each of 32 row ranges (chi-square), and the correlation of the two blocks' sizes (zero for
    independent blocks; SE 1 / sqrt(K))."""
    n, q, k = POISSON_BLOCK + 1000, 0.01, 400
    rng = np.random.default_rng(7)
    bins = np.linspace(0, n, 33).astype(int)
    sizes, first, hits = np.empty(k), np.empty(k), np.zeros(32)
    for i in range(k):
        rows = PoissonBatch.draw(rng, n, q * n).rows()
        sizes[i], first[i] = rows.size, np.sum(rows < POISSON_BLOCK)
        hits += np.histogram(rows, bins)[0]
    mean, var = n * q, n * q * (1 - q)
    assert abs(sizes.mean() - mean) < 4 * np.sqrt(var / k)
    assert abs(sizes.var(ddof=1) / var - 1) < 4 * np.sqrt(2 / (k - 1))
    expected = k * q * np.diff(bins)
    chi2 = np.sum((hits - expected) ** 2 / expected)
    assert stats.chi2.sf(chi2, df=31) > 1e-4, chi2
    second = sizes - first
    assert abs(np.corrcoef(first, second)[0, 1]) < 4 / np.sqrt(k)
    assert abs(second.mean() - 1000 * q) < 4 * np.sqrt(1000 * q / k)


def test_a_fixed_size_batch_has_b_distinct_sorted_rows():
    rng = np.random.default_rng(3)
    idx = draw_batch(rng, 1000, 50, "fixed_size")
    assert idx.size == 50 and np.all(np.diff(idx) > 0) and 0 <= idx[0] and idx[-1] < 1000
    poisson = draw_batch(rng, 1000, 50, "poisson")
    assert np.all(np.diff(poisson) > 0) and 20 < poisson.size < 80  # Binomial(1000, 0.05)
