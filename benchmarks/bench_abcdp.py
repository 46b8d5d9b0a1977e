"""ABCDP throughput: proposals per second (simulation + distance) on the paper's toy.

Park, Vinaroz & Jitkrittum (2021), Sec. 5.1: n = 5000 private rows, T = 10000 proposals, MMD with
100 random Fourier features. The public stage (prior + simulator) and the distance dominate; the
private stage (sparse vector technique) costs microseconds per proposal. Run with
``python -m benchmarks.bench_abcdp [--quick]``.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable

import numpy as np

from benchmarks.timing import format_table
from pymc_dp.abcdp import MMD, SparseVector, sample_abc_nonprivate, sample_abcdp
from pymc_dp.abcdp.examples import mixture_model
from pymc_dp.abcdp.public import PriorSampler, simulate, simulator_model


def _stream(spec, rho: Callable | None, total: int, batch: int, vectorized: bool) -> float:
    """Seconds to draw ``total`` proposals in batches, simulate them and (optionally) compute
    their distances: the public stage plus the distance, as inside ``sample_abcdp``."""
    prior = PriorSampler(spec, seed=1)
    rng = np.random.default_rng(2)
    _, params, size = prior.draw(2)  # warm-up: the PyTensor backend compiles on first call
    ys = simulate(spec, params, size, rng, vectorized)
    if rho is not None:
        rho(ys)
    start = time.perf_counter()
    done = 0
    while done < total:
        k = min(batch, total - done)
        _, params, size = prior.draw(k)
        ys = simulate(spec, params, size, rng, vectorized)
        if rho is not None:
            rho(ys)
        done += k
    return time.perf_counter() - start


def main(quick: bool = False) -> None:
    n, total = (1000, 500) if quick else (5000, 10_000)
    exact_n, exact_total = (300, 20) if quick else (1000, 50)
    model = mixture_model(n=n, seed=1)
    spec = simulator_model(model)
    rff = MMD(bandwidth=0.6, n_features=100).prepare(None, 1, np.random.default_rng(0))
    rho = rff.against(spec.observed)

    rows: list[tuple[str, int, float]] = []
    rows.append(("prior + simulator (vectorized)", total, _stream(spec, None, total, 100, True)))
    rows.append(
        ("prior + simulator + MMD-RFF (vectorized)", total, _stream(spec, rho, total, 100, True))
    )
    few = max(total // 10, 50)
    rows.append(
        ("prior + simulator + MMD-RFF (per-proposal)", few, _stream(spec, rho, few, 100, False))
    )
    small = simulator_model(mixture_model(n=exact_n, seed=1))
    exact = MMD(bandwidth=0.6, n_features=None).against(small.observed)
    rows.append(
        (
            f"prior + simulator + exact MMD (n = {exact_n})",
            exact_total,
            _stream(small, exact, exact_total, 10, True),
        )
    )
    svt = SparseVector(0.1, 0.02, 10**9, True, np.random.default_rng(3), np.random.default_rng(4))
    fake = np.random.default_rng(5).uniform(0.0, 1.0, size=total)
    start = time.perf_counter()
    for chunk in np.array_split(fake, max(total // 100, 1)):
        svt.offer(chunk)
    rows.append(("sparse vector technique only", total, time.perf_counter() - start))

    print(f"== ABCDP toy (Park et al. 2021), n = {n:_} rows, T = {total:_} proposals ==")
    table = [(name, count, secs, f"{count / secs:.0f}") for name, count, secs in rows]
    print(format_table(["stage", "proposals", "seconds", "proposals/s"], table))

    settings = dict(
        threshold=0.1,
        n_accept=10,
        n_proposals=total,
        distance=MMD(bandwidth=0.6, n_features=100),
        vectorized=True,
        random_seed=0,
        progressbar=False,
    )
    print("\nEnd to end (c = 10, threshold 0.1; the SVT stops at the 10th acceptance):")
    for label, run in (
        ("sample_abcdp, eps = 1, resample", lambda: sample_abcdp(model, epsilon=1.0, **settings)),
        ("sample_abc_nonprivate (baseline)", lambda: sample_abc_nonprivate(model, **settings)),
    ):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = run()
        secs = time.perf_counter() - start
        used = tree.attrs["abcdp_proposals_used"]
        print(
            f"{label:<36} {secs:6.2f} s, {used:5d} proposals tested, "
            f"{tree.attrs['abcdp_accepted']} accepted ({used / secs:.0f} proposals/s incl. setup)"
        )


if __name__ == "__main__":
    main(quick="--quick" in sys.argv[1:])
