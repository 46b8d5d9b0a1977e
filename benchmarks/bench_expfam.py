"""Gibbs iterations per second of the noisy-sufficient-statistics sampler, per family.

The sampler (Bernstein & Sheldon 2018, Algorithms 1-3) runs a batch of chains as NumPy arrays,
so its cost per iteration is mostly Python overhead for one chain and mostly arithmetic for many.
Reported: iterations per second of one chain, of each of 4 chains run together (one
``pdp.expfam.sample`` call), and chain-iterations per second of a batch of 1000 (the calibration
experiment's setting). Lemma 1 (PyTensor) is compiled before timing.

Run ``python -m benchmarks.bench_expfam [--quick]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.timing import format_table
from pymc_dp.expfam import Binomial, Exponential, Family, Multinomial, Normal, Poisson, gibbs

#: (label, family, prior, n, epsilon, a plausible noisy statistic)
CASES: list[tuple[str, Family, tuple[float, ...], int, float, list[float]]] = [
    ("binomial (Beta)", Binomial(), (10.0, 10.0), 1000, 0.1, [480.0]),
    ("multinomial K=3 (Dirichlet)", Multinomial(categories=3), (5.0, 5.0, 5.0), 1000, 0.1,
     [330.0, 350.0, 320.0]),
    ("multinomial K=10 (Dirichlet)", Multinomial(categories=10), (2.0,) * 10, 1000, 0.1,
     [100.0] * 10),
    ("poisson [0, 10] (Gamma)", Poisson(bounds=(0, 10)), (2.0, 1.0), 1000, 0.1, [2900.0]),
    ("exponential [0, 1] (Gamma)", Exponential(bounds=(0.0, 1.0)), (8.0, 2.0), 1000, 0.1, [240.0]),
    ("normal [-5, 7] (Normal)", Normal(bounds=(-5.0, 7.0), sigma=2.0), (0.0, 10.0), 1000, 0.1,
     [1000.0]),
]  # fmt: skip


def _rate(
    family: Family,
    prior: tuple[float, ...],
    n: int,
    eps: float,
    y: list[float],
    batch: int,
    iters: int,
    repeats: int,
) -> float:
    """Iterations per second of a batch of ``batch`` chains, best of ``repeats`` (timeit-style:
    the minimum is the least disturbed by other load on the machine)."""
    ys = np.repeat(np.asarray(y, dtype=np.float64)[None, :], batch, axis=0)
    gibbs(family, prior, ys, n, eps, draws=2, tune=0, random_seed=0)  # compile / warm up
    best = np.inf
    for rep in range(repeats):
        start = time.perf_counter()
        gibbs(family, prior, ys, n, eps, draws=iters, tune=0, random_seed=rep)
        best = min(best, time.perf_counter() - start)
    return iters / best


def main(quick: bool = False) -> None:
    """Print a plain-text table of Gibbs iterations per second per family."""
    iters, big_iters, repeats = (300, 30, 1) if quick else (2000, 200, 3)
    print(
        "Noisy sufficient statistics: Gibbs iterations per second (n = 1000, eps = 0.1; best of "
        f"{repeats} after a warm-up)"
    )
    rows = []
    for label, family, prior, n, eps, y in CASES:
        one = _rate(family, prior, n, eps, y, 1, iters, repeats)
        four = _rate(family, prior, n, eps, y, 4, iters, repeats)
        many = _rate(family, prior, n, eps, y, 1000, big_iters, repeats) * 1000
        rows.append((label, round(one), round(four), round(many)))
    header = ["family (prior)", "1 chain it/s", "4 chains it/s", "1000 chains chain-it/s"]
    print(format_table(header, rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    main(quick=parser.parse_args().quick)
