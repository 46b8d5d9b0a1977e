"""Batches of the minibatch DP steps: drawn secretly, so that subsampling amplifies privacy.

A minibatch step reads ``batch_size`` rows per iteration, so an iteration costs O(batch) whatever
n is, and the random choice of the rows amplifies privacy: the accountant assumes nobody knows
which rows were read. The batch is therefore drawn from the chain's secret
:class:`~pymc_dp.noise.NoiseSource`, never from the generator that ``random_seed`` reproduces
(whoever knew the seed would know every batch), and never with ``pm.Minibatch`` (a graph RNG no
accountant sees):

* ``"fixed_size"``: b rows uniformly without replacement; accounted under replace-one neighbours
  by Wang, Balle & Kasiviswanathan (2019);
* ``"poisson"``: every row independently with probability q = b / n, drawn as a Binomial(n, q)
  size and then that many rows without replacement (the same distribution, in O(b)); accounted
  with dp-accounting's PLD under replace-one neighbours. The realised batch size is *not*
  released: knowing it changes the mechanism the accountant analyses.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from pymc_dp.accounting._validate import check_count

__all__ = ["SAMPLING", "Sampling", "check_batch", "draw_batch"]

Sampling = Literal["fixed_size", "poisson"]
SAMPLING: tuple[str, ...] = ("fixed_size", "poisson")


def check_batch(batch_size: int, n_rows: int, sampling: str, allowed=SAMPLING) -> int:
    """Validate ``batch_size`` (2 <= b <= n) and ``sampling``; return b."""
    if sampling not in allowed:
        raise ValueError(f"`sampling` must be one of {allowed}, got {sampling!r}")
    b = check_count(batch_size, "batch_size", minimum=2)
    if b > n_rows:
        raise ValueError(f"`batch_size` ({b}) must be at most the number of rows n = {n_rows}")
    return b


def draw_batch(rng: np.random.Generator, n: int, b: int, sampling: str) -> np.ndarray:
    """Row indices of one batch, drawn with the secret generator ``rng``."""
    if sampling == "poisson":
        b = int(rng.binomial(n, b / n))
    # order is irrelevant (sums over the batch): skip the shuffle (~30% of the draw) and sort,
    # so the kernels gather rows in address order (fewer cache and TLB misses at large n)
    idx = rng.choice(n, b, replace=False, shuffle=False)
    idx.sort()
    return idx
