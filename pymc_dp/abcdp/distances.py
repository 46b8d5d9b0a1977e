"""Distances between the private data and a simulated data set, with proven sensitivities.

ABCDP (Park, Vinaroz & Jitkrittum 2021) is epsilon-DP for any distance ``rho(Y*, Y)`` whose
sensitivity to the private data ``Y*`` is bounded for every fixed simulated ``Y`` (Theorem 4.1).
Neighbouring data sets here differ by *replacing one row* (the leading axis of the observed
array; n is public), the relation used throughout pymc-dp.

A distance is used in two steps, so that nothing derived from the private data outlives a run:

1. ``distance.prepare(pilot, rng)`` fixes every tuning choice (kernel bandwidth, random Fourier
   frequencies) from *simulated* data and public randomness only, and returns a configured copy;
2. ``configured.against(observed)`` returns a closure computing ``rho(Y*, Y_t)`` for a batch of
   simulated data sets. The closure holds the private embedding; the sampler drops it at the end.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.spatial.distance import pdist

from pymc_dp.checks import check_count, check_positive
from pymc_dp.evaluation import kernel_mean

__all__ = ["Distance", "MMD", "SummaryDistance", "median_heuristic"]

Batch = NDArray[np.float64]  # (B, n, ...) simulated data sets, rows on axis 1
DistanceFn = Callable[[Batch], NDArray[np.float64]]

# Elements per float32 work array in the random-feature kernel: small enough to stay in cache.
_RFF_CHUNK = 1 << 19


def _rows(x: NDArray, leading: int = 1) -> NDArray[np.float64]:
    """Reshape to (..., rows, features): axes after the first ``leading`` ones are flattened."""
    x = np.asarray(x, dtype=np.float64)
    return x.reshape(*x.shape[: leading + 1], -1)


def median_heuristic(
    pilot: NDArray, max_rows: int = 200, rng: np.random.Generator | None = None
) -> float:
    """Median heuristic bandwidth from *simulated* data sets only.

    For each pilot data set, the median Euclidean distance between (up to ``max_rows``) of its
    rows; the bandwidth is the median over data sets. Taking pairs within a data set measures
    the spread of one data set, which is what the kernel compares, rather than the spread of
    the prior predictive.

    Parameters
    ----------
    pilot : ndarray, shape (k, n, ...)
        Data sets simulated from the prior predictive (public).
    max_rows : int
        Rows subsampled per data set.
    rng : numpy.random.Generator, optional
        Subsampling randomness.
    """
    pilot = _rows(pilot)
    rng = np.random.default_rng(rng)
    medians = []
    for data in pilot:
        idx = rng.choice(len(data), size=min(max_rows, len(data)), replace=False)
        d = pdist(data[idx])
        d = d[d > 0]  # ties (discrete data) would give a zero bandwidth
        if d.size:
            medians.append(np.median(d))
    if not medians:
        raise ValueError(
            "The median heuristic found no two distinct simulated rows; pass `bandwidth=`."
        )
    return float(np.median(medians))


class Distance(ABC):
    """A distance ``rho(Y*, Y)`` with a replace-one sensitivity bound (Theorem 4.1's Delta_rho).

    The privacy guarantee of ABCDP is only as good as :meth:`sensitivity`: subclass only with a
    proof that the *computed* distance (floating point included) respects it.
    """

    @abstractmethod
    def sensitivity(self, n: int) -> float:
        """Sup over replace-one neighbours ``Y*, Y*'`` of size n, and over all simulated ``Y``,
        of ``|rho(Y*, Y) - rho(Y*', Y)|``."""

    def prepare(
        self, simulate: Callable[[int], Batch], row_size: int, rng: np.random.Generator
    ) -> Distance:
        """Fix the tuning choices from simulated data and public randomness.

        ``simulate(k)`` draws k data sets from the prior predictive on demand; ``row_size`` is the
        number of values in one row. Must not see the private data.
        """
        return self

    def against(self, observed: NDArray) -> DistanceFn:
        """Closure ``batch -> rho(observed, batch[i])`` for simulated batches (B, n, ...)."""
        if not self.row_summable:
            raise NotImplementedError(f"{type(self).__name__} must define against()")
        observed = np.asarray(observed)
        private = self.finish(self.observed_sum(observed), len(observed))
        return lambda batch: self.compare(private, self.embed(batch))

    # A distance is *row-summable* when ``rho(Y*, Y) = compare(e(Y*), embed(Y))`` with
    # ``e(Y*) = finish(sum_i f(y*_i), n)``: the private side is a sum over rows, so rows held in
    # partitions (a Dask cluster) give it as a sum of partial sums; the simulated side ``embed``
    # is public and can run anywhere.
    row_summable = False

    def observed_sum(self, rows: NDArray) -> NDArray[np.float64]:
        """``sum_i f(y*_i)`` over some rows of the private data (row-summable distances)."""
        raise NotImplementedError(f"{type(self).__name__} is not row-summable")

    def finish(self, total: NDArray, n: int) -> NDArray[np.float64]:
        """The private embedding from the sum over all n rows."""
        raise NotImplementedError(f"{type(self).__name__} is not row-summable")

    def embed(self, batch: Batch) -> NDArray[np.float64]:
        """Embeddings (B, k) of simulated data sets (public)."""
        raise NotImplementedError(f"{type(self).__name__} is not row-summable")

    def compare(self, private: NDArray, embedded: NDArray) -> NDArray[np.float64]:
        """``rho`` of the private embedding against each simulated embedding (B,)."""
        raise NotImplementedError(f"{type(self).__name__} is not row-summable")

    def describe(self) -> dict[str, Any]:
        """Public, netCDF-safe description for the result's attrs."""
        return {"abcdp_distance": type(self).__name__}


@dataclass(frozen=True, eq=False)
class MMD(Distance):
    """Maximum mean discrepancy with a Gaussian kernel: the square root of the biased V-statistic.

    ``rho(Y*, Y) = || mean_i phi(y*_i) - mean_j phi(y_j) ||_H``, with
    ``k(x, y) = exp(-||x - y||^2 / (2 l^2))`` (rows flattened to vectors). Lemma 4.1 of Park et al.
    (2021): for a kernel bounded by ``B_k``,

        |rho(Y*, Y) - rho(Y*', Y)| <= || phi(y*_i) - phi(y*'_i) ||_H / n <= 2 sqrt(B_k) / n

    for ``Y*, Y*'`` of the same size n differing in *one replaced row* i, and any simulated ``Y``
    (of any size; the proof uses the reverse triangle inequality). ``B_k = 1`` here, so
    ``Delta = 2 / n``. This holds for replace-one neighbours only; under add/remove-one the mean
    embedding's weights 1/n change too. (For a kernel with ``k >= 0`` such as the Gaussian, the
    middle term is at most ``sqrt(2 B_k) / n``; we keep the paper's constant.)

    Parameters
    ----------
    bandwidth : float, optional
        Kernel lengthscale ``l``. Default: :func:`median_heuristic` on data sets simulated from
        the prior predictive, never on the private data.
    n_features : int or None, default 100
        Number ``D`` of random Fourier frequencies ``w_j ~ N(0, I / l^2)`` (Rahimi & Recht 2007);
        features ``phi(x) = [cos(w_j . x), sin(w_j . x)]_j / sqrt(D)`` have ``||phi(x)|| = 1``
        exactly, so the RFF kernel is itself bounded by ``B_k = 1`` and Lemma 4.1 applies to the
        computed distance, not only to its limit. Cost O(n D) per proposal. ``None``: the exact
        kernel, O(n^2) per proposal, for small data.
    pilot_draws : int, default 20
        Prior-predictive data sets simulated for the median heuristic.
    """

    bandwidth: float | None = None
    n_features: int | None = 100
    pilot_draws: int = 20
    frequencies: NDArray[np.float64] | None = None  # set by prepare(); public randomness

    #: Bound ``B_k`` on the kernel (Gaussian and its random-feature version).
    kernel_bound = 1.0

    def __post_init__(self) -> None:
        if self.bandwidth is not None:
            object.__setattr__(self, "bandwidth", check_positive(self.bandwidth, "bandwidth"))
        if self.n_features is not None:
            object.__setattr__(self, "n_features", check_count(self.n_features, "n_features", 1))
        object.__setattr__(self, "pilot_draws", check_count(self.pilot_draws, "pilot_draws", 1))
        if self.frequencies is not None:  # given (or set by prepare): D follows from them
            freqs = np.asarray(self.frequencies, dtype=np.float64)
            if freqs.ndim != 2 or not np.all(np.isfinite(freqs)):
                raise ValueError("`frequencies` must be a finite (row size, D) array")
            object.__setattr__(self, "frequencies", freqs)
            object.__setattr__(self, "n_features", freqs.shape[1])

    def sensitivity(self, n: int) -> float:
        return 2.0 * math.sqrt(self.kernel_bound) / check_count(n, "n", minimum=1)

    def prepare(
        self, simulate: Callable[[int], Batch], row_size: int, rng: np.random.Generator
    ) -> MMD:
        out = self
        if out.bandwidth is None:
            out = replace(out, bandwidth=median_heuristic(simulate(out.pilot_draws), rng=rng))
        if out.n_features is not None and out.frequencies is None:
            freqs = rng.standard_normal((row_size, out.n_features)) / out.bandwidth
            out = replace(out, frequencies=freqs)
        return out

    @property
    def row_summable(self) -> bool:  # random features: a mean of per-row features
        return self.n_features is not None

    def _check_prepared(self) -> None:
        if self.bandwidth is None or (self.n_features is not None and self.frequencies is None):
            raise RuntimeError("MMD needs prepare() first (bandwidth, frequencies).")

    def against(self, observed: NDArray) -> DistanceFn:
        self._check_prepared()
        if self.n_features is None:
            return self._exact(_rows(observed, leading=0))
        return super().against(observed)

    def _exact(self, x: NDArray[np.float64]) -> DistanceFn:
        h = self.bandwidth
        kxx = kernel_mean(x, x, h)  # the private data's term, computed once

        def rho(batch: Batch) -> NDArray[np.float64]:
            out = np.empty(len(batch))
            for i, y in enumerate(_rows(batch)):
                value = kxx + kernel_mean(y, y, h) - 2.0 * kernel_mean(x, y, h)
                out[i] = math.sqrt(max(value, 0.0))
            return out

        return rho

    def _frequencies(self, row_size: int) -> NDArray[np.float64]:
        self._check_prepared()
        w = np.asarray(self.frequencies, dtype=np.float64)
        if w.ndim != 2 or w.shape[0] != row_size:
            raise ValueError(
                f"`frequencies` must have shape ({row_size}, n_features), got {w.shape}"
            )
        return w

    def observed_sum(self, rows: NDArray) -> NDArray[np.float64]:
        # The private features in float64: replacing a row changes the sum by at most
        # ||phi(x) - phi(x')|| <= 2 with ||phi|| = 1 to double precision, so the computed rho
        # keeps Delta = 2 / n. (The 1 / sqrt(D) of phi is applied in finish().)
        x = _rows(rows, leading=0)
        w = self._frequencies(x.shape[1])
        total = np.zeros(2 * w.shape[1])
        step = max(1, _RFF_CHUNK // w.shape[1])  # rows per chunk: a partition of 1e7 rows
        for start in range(0, len(x), step):  # never makes a (rows, D) array
            phase = x[start : start + step] @ w
            total[: w.shape[1]] += np.cos(phase).sum(0)
            total[w.shape[1] :] += np.sin(phase).sum(0)
        return total

    def finish(self, total: NDArray, n: int) -> NDArray[np.float64]:
        return np.asarray(total, dtype=np.float64) / (n * math.sqrt(self.n_features))

    def embed(self, batch: Batch) -> NDArray[np.float64]:
        # The simulated side is a fixed function of public data (a query of the SVT), so it
        # may be computed in float32: SIMD sin/cos are ~20x faster than float64, and rounding
        # (~1e-7) changes the query, not its sensitivity to the private data. Features are
        # laid out (D, rows) so the sums run along contiguous rows (pairwise, accurate).
        ys = _rows(batch)
        w = self._frequencies(ys.shape[2])
        n_feat = w.shape[1]
        w_t = np.ascontiguousarray(w.T, dtype=np.float32)  # (D, d)
        m = ys.shape[1]
        cols = max(1, min(m, _RFF_CHUNK // n_feat))
        ph, work = np.empty((n_feat, cols), np.float32), np.empty((n_feat, cols), np.float32)
        out = np.zeros((len(ys), 2 * n_feat))
        for i, y in enumerate(ys):
            y_t = np.ascontiguousarray(y.T, dtype=np.float32)  # (d, m)
            emb = out[i]
            for start in range(0, m, cols):
                seg = y_t[:, start : start + cols]
                p, o = ph[:, : seg.shape[1]], work[:, : seg.shape[1]]
                _phase(w_t, seg, out=p)
                emb[:n_feat] += np.cos(p, out=o).sum(1)
                emb[n_feat:] += np.sin(p, out=o).sum(1)
        return out / (m * math.sqrt(n_feat))

    def compare(self, private: NDArray, embedded: NDArray) -> NDArray[np.float64]:
        return np.linalg.norm(np.asarray(private)[None, :] - embedded, axis=1)

    def describe(self) -> dict[str, Any]:
        return {
            "abcdp_distance": (
                "MMD, Gaussian kernel, sqrt of the biased V-statistic"
                + (f", {self.n_features} random Fourier features" if self.n_features else "")
            ),
            "abcdp_bandwidth": float(self.bandwidth) if self.bandwidth is not None else np.nan,
            "abcdp_n_features": int(self.n_features or 0),
        }


def _phase(w_t: NDArray[np.float32], y_t: NDArray[np.float32], out: NDArray[np.float32]) -> None:
    """``out = w_t @ y_t`` for (D, d) x (d, rows). Broadcast products for small d avoid BLAS, which
    is slow for an inner dimension of 1 and oversubscribes threads on busy machines."""
    if w_t.shape[1] > 8:
        np.matmul(w_t, y_t, out=out)
        return
    np.multiply(w_t[:, :1], y_t[:1], out=out)
    for k in range(1, w_t.shape[1]):
        out += w_t[:, k : k + 1] * y_t[k : k + 1]


@dataclass(frozen=True)
class SummaryDistance(Distance):
    """Euclidean distance of summary statistics, clipped at ``clip`` (Park et al. 2021, Sec. 4).

    ``rho(Y*, Y) = min(|| s(Y*) - s(Y) ||_2, C)``. Two modes, with different sensitivities under
    replace-one neighbours (n public):

    * ``row_bound=None``: ``statistic`` maps a whole data set (observed shape) to a vector. Nothing
      is assumed about it, so only the clipping bounds the sensitivity: ``Delta = C`` (both
      distances lie in [0, C]). Usually very noisy; prefer the next mode.
    * ``row_bound=B``: ``statistic`` maps the rows (observed shape, n rows) to per-row vectors
      ``f(y_i)`` of shape (n, k), and ``s(Y) = mean_i clip_B(f(y_i))``, where ``clip_B`` rescales
      a vector to L2 norm at most B. Replacing one row moves ``s(Y*)`` by at most ``2 B / n``, so
      by the reverse triangle inequality and the 1-Lipschitz ``min(., C)``,
      ``Delta = min(C, 2 B / n)``. The bound is enforced by the clipping, not assumed.

    Parameters
    ----------
    statistic : callable
        See the modes above. Must not read anything but its argument (no private side inputs).
    clip : float
        Clipping bound ``C`` > 0 of the distance.
    row_bound : float, optional
        Per-row L2 bound ``B`` > 0 (enables the second mode).
    weights : array_like, optional
        Per-coordinate weights ``w`` of a weighted distance ``|| w * (s(Y*) - s(Y)) ||``, applied
        to the clipped mean; the sensitivity is multiplied by ``max |w|``.
    """

    statistic: Callable[[NDArray], NDArray]
    clip: float
    row_bound: float | None = None
    weights: NDArray[np.float64] | None = None

    def __post_init__(self) -> None:
        if not callable(self.statistic):
            raise ValueError(f"`statistic` must be callable, got {self.statistic!r}")
        object.__setattr__(self, "clip", check_positive(self.clip, "clip"))
        if self.row_bound is not None:
            object.__setattr__(self, "row_bound", check_positive(self.row_bound, "row_bound"))
        if self.weights is not None:
            w = np.asarray(self.weights, dtype=np.float64).ravel()
            if w.size == 0 or not np.all(np.isfinite(w)) or not np.any(w != 0):
                raise ValueError("`weights` must be finite and not all zero")
            object.__setattr__(self, "weights", w)

    def sensitivity(self, n: int) -> float:
        n = check_count(n, "n", minimum=1)
        if self.row_bound is None:
            return self.clip
        scale = float(np.max(np.abs(self.weights))) if self.weights is not None else 1.0
        return min(self.clip, 2.0 * self.row_bound * scale / n)

    def _clipped_rows(self, data: NDArray) -> NDArray[np.float64]:
        """Per-row statistic vectors rescaled to L2 norm at most ``row_bound``: (rows, k)."""
        stat = np.asarray(self.statistic(data), dtype=np.float64)
        if stat.ndim == 1:
            stat = stat[:, None]
        if stat.ndim != 2 or stat.shape[0] != len(data):
            raise ValueError(
                f"With `row_bound`, `statistic` must return one vector per row, shape "
                f"({len(data)}, k); got {stat.shape}."
            )
        if not np.all(np.isfinite(stat)):
            raise ValueError("`statistic` returned NaN or inf")
        norms = np.linalg.norm(stat, axis=1, keepdims=True)
        return stat * np.minimum(1.0, self.row_bound / np.maximum(norms, 1e-300))

    def _weighted(self, stat: NDArray[np.float64]) -> NDArray[np.float64]:
        stat = stat.ravel()
        if not np.all(np.isfinite(stat)):
            raise ValueError("`statistic` returned NaN or inf")
        return stat * self.weights if self.weights is not None else stat

    def _summary(self, data: NDArray) -> NDArray[np.float64]:
        if self.row_bound is not None:
            return self._weighted(self._clipped_rows(data).mean(0))
        return self._weighted(np.asarray(self.statistic(data), dtype=np.float64))

    @property
    def row_summable(self) -> bool:  # per-row mode: a mean of clipped per-row vectors
        return self.row_bound is not None

    def against(self, observed: NDArray) -> DistanceFn:
        if self.row_summable:
            return super().against(observed)
        s_obs = self._summary(np.asarray(observed))
        return lambda batch: self.compare(s_obs, self.embed(batch))

    def observed_sum(self, rows: NDArray) -> NDArray[np.float64]:
        return self._clipped_rows(np.asarray(rows)).sum(0)

    def finish(self, total: NDArray, n: int) -> NDArray[np.float64]:
        return self._weighted(np.asarray(total, dtype=np.float64) / n)

    def embed(self, batch: Batch) -> NDArray[np.float64]:
        return np.stack([self._summary(y) for y in batch]) if len(batch) else np.zeros((0, 0))

    def compare(self, private: NDArray, embedded: NDArray) -> NDArray[np.float64]:
        if not len(embedded):
            return np.zeros(0)
        dist = np.linalg.norm(np.asarray(private)[None, :] - embedded, axis=1)
        return np.minimum(dist, self.clip)

    def describe(self) -> dict[str, Any]:
        mode = (
            f"per-row statistic clipped to L2 norm {self.row_bound:g}, averaged"
            if self.row_bound is not None
            else "data-set statistic (sensitivity = clip)"
        )
        return {
            "abcdp_distance": f"summary statistic, Euclidean, clipped at {self.clip:g}; {mode}",
            "abcdp_clip": float(self.clip),
        }
