"""Accuracy metrics against a reference posterior (for experiments; they read exact draws)."""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import cdist, pdist

__all__ = ["mmd", "median_bandwidth"]


def median_bandwidth(x: np.ndarray, y: np.ndarray, subsample: int = 50, seed: int = 0) -> float:
    """Median pairwise distance of 50 + 50 points drawn with replacement (Raisa 2021, 5.4)."""
    rng = np.random.default_rng(seed)
    pts = np.vstack(
        [x[rng.integers(len(x), size=subsample)], y[rng.integers(len(y), size=subsample)]]
    )
    return float(np.median(pdist(pts)))


def mmd(x: np.ndarray, y: np.ndarray, bandwidth: float | None = None) -> float:
    """Maximum mean discrepancy with a Gaussian kernel (biased V-statistic, square root).

    ``x`` (m, d) and ``y`` (k, d); ``bandwidth`` defaults to :func:`median_bandwidth`.
    """
    x = np.asarray(x, float).reshape(len(x), -1)
    y = np.asarray(y, float).reshape(len(y), -1)
    h = median_bandwidth(x, y) if bandwidth is None else float(bandwidth)

    def k(a, b):
        return np.exp(-cdist(a, b, "sqeuclidean") / (2 * h**2))

    val = k(x, x).mean() + k(y, y).mean() - 2 * k(x, y).mean()
    return float(np.sqrt(max(val, 0.0)))
