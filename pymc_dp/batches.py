"""Batches of the minibatch DP steps: drawn secretly, so that subsampling amplifies privacy.

A minibatch step reads ``batch_size`` rows per iteration, so an iteration costs O(batch) whatever
n is, and the random choice of the rows amplifies privacy: the accountant assumes nobody knows
which rows were read. The batch is therefore drawn from the chain's secret
:class:`~pymc_dp.noise.NoiseSource`, never from the generator that ``random_seed`` reproduces
(whoever knew the seed would know every batch), and never with ``pm.Minibatch`` (a graph RNG no
accountant sees):

* ``"fixed_size"``: b rows uniformly without replacement; accounted under replace-one neighbours
  by Wang, Balle & Kasiviswanathan (2019);
* ``"poisson"``: every row independently with probability q = b / n; accounted with
  dp-accounting's PLD under replace-one neighbours. The realised batch size is *not* released:
  knowing it changes the mechanism the accountant analyses. The rows are cut into blocks of
  :data:`POISSON_BLOCK`; in each block a Binomial(m, q) count and then that many rows without
  replacement (the same distribution, in O(b)), from a generator keyed by the iteration's
  secret key and the block's index (:class:`PoissonBatch`). So whoever holds a range of rows
  (a worker of a Dask cluster) draws the same inclusions for it as one process drawing all n,
  and the batch never travels.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal

import numpy as np

from pymc_dp.checks import check_count

__all__ = ["POISSON_BLOCK", "SAMPLING", "PoissonBatch", "Sampling", "check_batch", "draw_batch"]

#: Rows per block of a Poisson batch (each block has its own keyed generator).
POISSON_BLOCK = 1 << 20

Sampling = Literal["fixed_size", "poisson"]
SAMPLING: tuple[str, ...] = ("fixed_size", "poisson")


def check_batch(batch_size: int, n_rows: int, sampling: str, allowed=SAMPLING) -> int:
    """Validate ``batch_size`` (2 <= b <= n) and ``sampling``; return b."""
    if sampling not in allowed:
        raise ValueError(f"`sampling` must be one of {allowed}, got {sampling!r}")
    b = check_count(batch_size, "batch_size", minimum=2)
    if b > n_rows:
        raise ValueError(
            f"`batch_size` ({b}) must be at most the number of rows n = {n_rows} (a pm.Data "
            "placeholder for rows bound later with `data=` needs at least batch_size rows)"
        )
    return b


def _subset(rng: np.random.Generator, m: int, k: int) -> np.ndarray:
    # order is irrelevant (sums over the batch): skip the shuffle (~30% of the draw) and sort,
    # so the kernels gather rows in address order (fewer cache and TLB misses at large n)
    idx = rng.choice(m, k, replace=False, shuffle=False)
    idx.sort()
    return idx


_local = threading.local()


def _keyed(key: tuple[int, int], j: int) -> np.random.Generator:
    """``Generator(Philox(key, counter=(0, 0, j, 0)))``, by resetting one Philox per thread
    (a new one costs ~5 us, a fifth of a minibatch draw)."""
    gen = getattr(_local, "philox", None)
    if gen is None:
        gen = _local.philox = np.random.Generator(np.random.Philox(0))
    state = gen.bit_generator.state
    state["state"] = {
        "counter": np.array([0, 0, j, 0], dtype=np.uint64),
        "key": np.array(key, dtype=np.uint64),
    }
    state.update(buffer_pos=4, has_uint32=0, uinteger=0)  # an empty buffer: fresh draws
    gen.bit_generator.state = state
    return gen


@dataclass(frozen=True)
class PoissonBatch:
    """One Poisson batch as its secret key: row i of n is in it with probability ``rate``,
    independently. :meth:`rows` draws the members in any range of rows, the same whoever draws
    them (a block's generator is ``Philox(key, counter=block << 128)``: streams 2^128 apart)."""

    key: tuple[int, int]
    rate: float
    n: int

    @classmethod
    def draw(cls, rng: np.random.Generator, n: int, b: int) -> PoissonBatch:
        key = rng.bit_generator.random_raw(2)  # 128 uniform bits
        return cls((int(key[0]), int(key[1])), b / n, n)

    def block(self, j: int) -> np.ndarray:
        """Members of block ``j`` (global row indices, sorted)."""
        start = j * POISSON_BLOCK
        m = min(POISSON_BLOCK, self.n - start)
        rng = _keyed(self.key, j)
        return _subset(rng, m, int(rng.binomial(m, self.rate))) + start

    def rows(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Members in rows ``[start, stop)`` (global indices, sorted)."""
        stop = self.n if stop is None else stop
        if stop <= start:
            return np.zeros(0, dtype=np.int64)
        first, last = start // POISSON_BLOCK, (stop - 1) // POISSON_BLOCK
        parts = [self.block(j) for j in range(first, last + 1)]
        idx = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if start % POISSON_BLOCK or stop < min(self.n, (last + 1) * POISSON_BLOCK):
            idx = idx[(idx >= start) & (idx < stop)]
        return idx


def draw_batch(rng: np.random.Generator, n: int, b: int, sampling: str) -> np.ndarray:
    """Row indices of one batch, drawn with the secret generator ``rng``."""
    if sampling == "poisson":
        return PoissonBatch.draw(rng, n, b).rows()
    return _subset(rng, n, b)
