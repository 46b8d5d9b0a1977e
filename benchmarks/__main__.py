"""``python -m benchmarks [--quick]``: DP kernels and samplers against PyMC on the same model."""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time
import warnings

# scipy's OpenBLAS must be loaded before threadpool_limits, or it escapes the one-thread limit
import scipy.linalg  # noqa: F401
from threadpoolctl import threadpool_limits

from benchmarks import bench_abcdp, bench_expfam, construction, floor, mixing, utility
from benchmarks.hmc import banana_mmd_rows, hmc_rows
from benchmarks.kernels import kernel_rows
from benchmarks.minibatch import minibatch_goal_rows, minibatch_rows, minibatch_tables
from benchmarks.models import logistic_problem
from benchmarks.samplers import sampler_rows
from benchmarks.timing import format_table, set_clock

#: Goals from the issues: per-row gradients within 2x of PyMC's summed gradient; a DPPenalty
#: iteration no slower than a Metropolis iteration and a DPHMC iteration no slower than HMC's
#: (issue 12); the per-row work within 1.5x of a hand-written Numba loop doing the same work
#: (fastmath off, as the issue measured it); a minibatch iteration at n = 1e6 within 1.2x of one
#: at n = 1e4 (``benchmarks.minibatch``).
GRAD_GOAL, ITERATION_GOAL, HMC_GOAL, FLOOR_GOAL = 2.0, 1.0, 1.0, 1.5

GoalRow = tuple[int, str, str, float, float]


def bench_problem(n: int, d: int, repeats: int) -> list[GoalRow]:
    """Print the kernel and sampler tables of one problem; return its rows that have a goal."""
    problem = logistic_problem(n, d)
    print(f"\n== Logistic regression, n = {n:_}, d = {d} ==")
    print("(a) kernels, ms per call (median); ratio = ms / baseline ms")
    k_rows = kernel_rows(problem, repeats)
    print(format_table(["function", "ms", "baseline", "ratio"], k_rows))
    print("\n(b) samplers, ms per iteration of step.step(point) (median)")
    s_rows = sampler_rows(problem, repeats)
    print(format_table(["sampler", "ms/iter", "baseline", "ratio"], s_rows))
    print("\n(c) DPHMC against pm.HamiltonianMC, same number of leapfrog steps")
    h_rows = hmc_rows(problem, repeats)
    print(format_table(["sampler", "ms/iter", "baseline", "ratio"], h_rows))
    goals = [(n, r[0], r[2], r[3], GRAD_GOAL) for r in k_rows if r[0].startswith("grad_kernel")]
    # exact_noise rows are an option's cost (README), not a goal
    dp_rows = [r for r in s_rows + h_rows if r[0].startswith("DP") and "exact" not in r[0]]
    goals += [
        (n, r[0], r[2], r[3], HMC_GOAL if r[0].startswith("DPHMC") else ITERATION_GOAL)
        for r in dp_rows
    ]
    return goals


def bench_minibatch(sizes: tuple[int, ...], batch_size: int, d: int, repeats: int) -> list[GoalRow]:
    """Print the minibatch tables (iteration time against n at a fixed batch size); return the
    goal rows (time at the largest n over time at the smallest)."""
    print(f"\n== Minibatch samplers: logistic regression, d = {d}, batch b = {batch_size} ==")
    print("ms per iteration of step.step(point) (median); ratios = ms / the reference's ms")
    rows = minibatch_rows(sizes, batch_size, d, repeats)
    header = ["n", "ms/iter", f"vs n = {sizes[0]:_}", "vs pm.Metropolis", "vs DPPenalty"]
    for name, table in minibatch_tables(rows):
        print(f"\n{name}")
        print(format_table(header, table))
    return minibatch_goal_rows(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="pymc-dp kernels and samplers against PyMC on the same model.",
    )
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (n = 1000)")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time with process CPU time instead of wall time (for machines under load)",
    )
    parser.add_argument("--d", type=int, default=10, help="number of coefficients (default 10)")
    parser.add_argument(
        "--no-utility", action="store_true", help="skip the real-data utility tables (long)"
    )
    parser.add_argument(
        "--no-dask", action="store_true", help="skip the Dask cluster table (n = 2e7, long)"
    )
    args = parser.parse_args(argv)

    # pm.sample logs each run and the DP step warns that plain pm.sample keeps the data: noise here.
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=UserWarning)
    sizes, repeats = ((1_000,), 3) if args.quick else ((10_000, 100_000), 7)
    set_clock(cpu=args.cpu_time)
    clock = "CPU time" if args.cpu_time else "wall time"
    print(
        f"pymc-dp benchmarks ({clock}, median of {repeats} batches after a warm-up, 1 BLAS thread)"
    )

    start = time.perf_counter()
    goals: list[GoalRow] = []
    # One BLAS thread: the products are thin (n x d), so extra threads gain nothing, and when
    # another process holds a core they wait on each other and triple the time of DP and PyMC alike.
    with threadpool_limits(limits=1):
        for n in sizes:
            goals += bench_problem(n, args.d, repeats)
        mb_sizes, mb_batch = (
            ((2_000, 20_000), 500) if args.quick else ((10_000, 100_000, 1_000_000), 1000)
        )
        goals += bench_minibatch(mb_sizes, mb_batch, args.d, repeats)
        floor_n = 2_000 if args.quick else 100_000
        print(f"\n== The hardware floor: hand-written Numba loops, n = {floor_n:_} ==")
        print(
            "ms per iteration of the per-row work alone (no noise, no test); ratio = compiled "
            "kernels / floor (fastmath: the floor with PyTensor's fastmath flags)"
        )
        rows = floor.kernel_rows(floor_n, repeats)
        goals += [(floor_n, r[0], "numba floor", r[4], FLOOR_GOAL) for r in rows]
        print(
            format_table(
                ["work", "kernels", "floor", "fastmath floor", "ratio", "vs fastmath"], rows
            )
        )

    print("\n== Goals (ratio <= goal) ==")
    rows = [
        (f"{n:_}", name, ref, ratio, goal, "yes" if ratio <= goal else "NO")
        for n, name, ref, ratio, goal in goals
    ]
    print(format_table(["n", "DP", "vs", "ratio", "goal", "met"], rows))

    print("\n== Step construction on the quickstart model, fresh process (issue 23), seconds ==")
    construction.main()

    runs = 2 if args.quick else 10
    print(f"\n== Easy-2d banana (thesis Table 6.1), eps = 4: median MMD over {runs} runs ==")
    mmd_rows = banana_mmd_rows(runs=runs)
    print(format_table(["sampler", "MMD", "thesis", "acceptance", "thesis", "runs"], mmd_rows))
    print("\n== DP chains that mix (issue 24): zero tuning against NUTS ==")
    mixing.main(["--runs", "1", "--draws", "200", "--real"] if args.quick else ["--runs", "5"])
    print("\n== ABCDP ==")
    bench_abcdp.main(args.quick)
    print("\n== Noisy sufficient statistics: Gibbs iterations per second ==")
    bench_expfam.main(args.quick)
    if not args.no_dask:
        # a process of its own: its driver-memory figure must not include this one's models
        print(flush=True)
        quick = ["--n", "200000", "--iterations", "20", "--round-trip-n", "100000"]
        subprocess.run(
            [sys.executable, "-m", "benchmarks.bench_dask", *(quick if args.quick else [])],
            check=True,
        )
    if args.no_utility:
        print(f"\ntotal {time.perf_counter() - start:.0f} s")
        return
    runs, draws = (2, 200) if args.quick else (10, 500)
    print(f"\n== The private fit on real data: DPLaplace, {runs} unseeded runs per cell ==")
    print(
        "largest |mean - NUTS mean| / NUTS sd over coefficients (median, p90 over runs); coverage "
        "of the NUTS means by the 90% intervals; own sds = the largest error in the fit's sds; "
        "planner before (public facts) and after (released values); floor = fit_floor; d3p from "
        "benchmarks/_cache; target and checks from issue 21"
    )
    with threadpool_limits(limits=1):
        if args.quick:
            rows = utility.fit_rows(["synthetic_1e5"], [4.0], runs, draws)
        else:
            rows = utility.fit_rows(utility.FIT_NAMES, [1.0, 2.0, 4.0], runs, draws)
    print(format_table(utility.FIT_HEADER, rows))
    print("\n== Utility on real data: zero-tuning calls at epsilon 1 and 4 against NUTS ==")
    print(
        "|z| = |mean - NUTS mean| / NUTS sd (max, median over coefficients); sd ratio = sd / NUTS "
        "sd; 4 chains; planner = its verdict before the run; d3p rows from benchmarks/_cache"
    )
    with threadpool_limits(limits=1):
        if args.quick:
            rows = utility.utility_rows(["synthetic_1e5"], [4.0], ["DPLaplace"], 200, 200)
        else:
            rows = utility.utility_rows(
                utility.NAMES, [1.0, 4.0], list(utility.SAMPLERS), 1000, 1000
            )
    print(format_table(utility.HEADER, rows))
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
