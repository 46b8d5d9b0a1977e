"""Rows in a Dask cluster (issue 14): iterations at n = 2e7 and the cost of the round trip.

A ``LocalCluster`` of 2 worker processes (1 thread each) on this 2-core machine. The logistic
regression (d = 10) rows are generated block by block *on the workers* (``dask.delayed`` per
block from a per-block seed: the driver never holds them), bound to a model of ``pm.Data``
placeholders with :func:`pymc_dp.distributed.bind_data`, and each full-data step runs 200
iterations (``step.step`` after ``setup_chain``, as :mod:`benchmarks.samplers` times them).
The driver's peak resident memory (``ru_maxrss``) is read after the large runs: the target is
under 1 GiB. Then at n = 1e6 the same DPPenalty iteration in memory and on the cluster, and the
round trip alone: one gather of a no-op from both workers' actors (target: under 5 ms). Last,
ABCDP on the toy mixture of Park et al. (n = 1e6 rows made on the workers): the same proposals
simulated and embedded in one process and as tasks on the 2 workers.

Run: ``python -m benchmarks.bench_dask [--n 20000000] [--iterations 200]``.
"""

from __future__ import annotations

import argparse
import resource
import time
import warnings

import numpy as np
import pymc as pm

import pymc_dp as pdp
from benchmarks.timing import format_table
from pymc_dp.distributed import bind_data

__all__ = ["abcdp_rows", "dask_rows", "logistic_rows", "main"]

D = 10
CHUNK = 1_000_000
BETA = np.linspace(-1.0, 1.0, D) / np.sqrt(D)
#: The full-data steps with fixed settings (no warm start: the bench times iterations).
STEPS = {
    "DPPenalty": lambda: pdp.DPPenalty(epsilon=4.0, llr_clip=0.5, proposal_scale=1e-4),
    "DPHMC (L = 3)": lambda: pdp.DPHMC(
        epsilon=4.0, llr_clip=1.0, grad_clip=2.0, step_size=1e-4, n_steps=3
    ),
}


def _block(i: int, size: int, what: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, i])
    x = rng.uniform(-1.0, 1.0, (size, D))
    x[:, 0] = 1.0
    if what == "X":
        return x
    return (rng.random(size) < 1 / (1 + np.exp(-x @ BETA))).astype(np.int64)


def logistic_rows(n: int, chunk: int = CHUNK, seed: int = 0):
    """``(X, y)`` Dask arrays of a logistic regression, each block made where it is computed."""
    import dask
    import dask.array as da

    sizes = [min(chunk, n - s) for s in range(0, n, chunk)]
    make = dask.delayed(_block, pure=True)
    xs = [da.from_delayed(make(i, s, "X", seed), (s, D), np.float64) for i, s in enumerate(sizes)]
    ys = [da.from_delayed(make(i, s, "y", seed), (s,), np.int64) for i, s in enumerate(sizes)]
    return da.concatenate(xs), da.concatenate(ys)


def _placeholder() -> pm.Model:
    with pm.Model() as model:
        X = pm.Data("X", np.zeros((2, D)))
        y = pm.Data("y", np.zeros(2, dtype=np.int64))
        beta = pm.Normal("beta", 0, 2.5, shape=D)
        pm.Bernoulli("obs", logit_p=pm.math.dot(X, beta), observed=y)
    return model


def _iterate(step, iterations: int) -> float:
    """Seconds per ``step.step`` over ``iterations`` (after 2 warm-up iterations, which compile
    the workers' kernels)."""
    step.setup_chain(np.random.default_rng(0), 0, iterations + 2)
    step.tune = False
    point = {"beta": BETA.copy()}
    for _ in range(2):
        point, _ = step.step(point)
    start = time.perf_counter()
    for _ in range(iterations):
        point, _ = step.step(point)
    return (time.perf_counter() - start) / iterations


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def dask_rows(client, n: int, iterations: int) -> list[tuple]:
    """``(step, n, ms/iter, seconds to bind)`` per full-data step on rows generated on workers."""
    X, y = logistic_rows(n)
    rows = []
    for name, make in STEPS.items():
        with _placeholder():
            step = make()
        start = time.perf_counter()
        bound = bind_data(step, {"X": X, "y": y}, client=client)
        bind_s = time.perf_counter() - start
        rows.append((name, f"{n:_}", 1e3 * _iterate(bound, iterations), bind_s))
        del bound
    return rows


def round_trip_rows(client, n: int, iterations: int) -> list[tuple]:
    """At ``n``: a DPPenalty iteration in memory and on the cluster, and the round trip alone.
    The rows come in 8 blocks, so that both workers hold some (one block of ``CHUNK`` rows
    would put all of n = 1e6 on one worker)."""
    X, y = logistic_rows(n, chunk=-(-n // 8))
    with _placeholder():
        step = STEPS["DPPenalty"]()
    bound = bind_data(step, {"X": X, "y": y}, client=client)
    on_cluster = _iterate(bound, iterations)
    shards = bound.likelihood._shards
    for _ in range(3):
        [s.rows().result() for s in shards]
    start = time.perf_counter()
    for _ in range(iterations):
        futures = [s.rows() for s in shards]
        [f.result() for f in futures]
    trip = (time.perf_counter() - start) / iterations
    del bound
    x, yv = (np.asarray(a) for a in client.compute([X, y], sync=True))
    with _placeholder() as model, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        pm.set_data({"X": x, "y": yv})
        memory = STEPS["DPPenalty"]()
    del model
    in_memory = _iterate(memory, iterations)
    return [
        ("DPPenalty iteration, in memory (1 process)", f"{n:_}", 1e3 * in_memory),
        (f"DPPenalty iteration, {len(shards)} workers", f"{n:_}", 1e3 * on_cluster),
        ("round trip: gather a no-op from every worker", "-", 1e3 * trip),
    ]


def abcdp_rows(client, n: int, proposals: int) -> list[tuple]:
    """ABCDP with ``proposals`` simulated data sets of n rows (MMD, 100 random features, batches
    of 8), in one process and on the cluster; a threshold no data set passes, so both run all
    proposals. Returns seconds per proposal."""
    import dask
    import dask.array as da

    from pymc_dp.abcdp import MMD, sample_abcdp
    from pymc_dp.abcdp.examples import TOY_THETA, mixture_simulator

    blocks = 8
    size = -(-n // blocks)
    make = dask.delayed(mixture_simulator, pure=True)
    rows = da.concatenate(
        [
            da.from_delayed(make(np.random.default_rng([5, i]), TOY_THETA, (size,)), (size,), float)
            for i in range(blocks)
        ]
    )

    def model(observed):
        with pm.Model() as m:
            theta = pm.Dirichlet("theta", a=np.ones(5))
            pm.Simulator(
                "y", mixture_simulator, theta, signature="(k)->()", observed=pm.Data("r", observed)
            )
        return m

    kw = dict(
        epsilon=1.0,
        threshold=1e-9,
        n_accept=1,
        n_proposals=proposals,
        batch_size=8,
        distance=MMD(bandwidth=0.6, n_features=100),
        vectorized=False,
        random_seed=1,
        noise_seed=2,
        progressbar=False,
    )
    out = []
    start = time.perf_counter()
    cluster = sample_abcdp(model(np.zeros(2)), data=rows, client=client, **kw)
    out.append(
        (
            f"ABCDP proposal, {len(client.scheduler_info()['workers'])} workers",
            time.perf_counter() - start,
        )
    )
    local = np.asarray(rows.compute())
    start = time.perf_counter()
    memory = sample_abcdp(model(local), **kw)
    out.insert(0, ("ABCDP proposal, in memory (1 process)", time.perf_counter() - start))
    assert cluster.attrs["abcdp_proposals_used"] == memory.attrs["abcdp_proposals_used"]
    return [(name, f"{blocks * size:_}", 1e3 * t / proposals) for name, t in out]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_dask")
    parser.add_argument("--n", type=int, default=20_000_000, help="rows of the large runs")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--round-trip-n", type=int, default=1_000_000)
    parser.add_argument("--abcdp-n", type=int, default=1_000_000, help="0 skips ABCDP")
    parser.add_argument("--abcdp-proposals", type=int, default=64)
    args = parser.parse_args(argv)
    from distributed import Client, LocalCluster

    warnings.filterwarnings("ignore", category=UserWarning)
    start = time.perf_counter()
    print(
        "== Rows in a Dask cluster: LocalCluster of 2 worker processes x 1 thread, logistic "
        f"regression d = {D}, rows generated on the workers =="
    )
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        if args.n:  # --n 0: the round trip only
            rows = dask_rows(client, args.n, args.iterations)
            peak = _peak_rss_mib()
            print(format_table(["step", "n", "ms/iter", "bind + compile s"], rows))
            print(f"driver peak resident memory after these runs: {peak:.0f} MiB (target < 1024)")
        trip = round_trip_rows(client, args.round_trip_n, args.iterations)
        if args.abcdp_n:
            trip += abcdp_rows(client, args.abcdp_n, args.abcdp_proposals)
        print(format_table(["what", "n", "ms"], trip))
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
