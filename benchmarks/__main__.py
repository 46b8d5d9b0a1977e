"""``python -m benchmarks [--quick]``: DP kernels and samplers against PyMC on the same model."""

from __future__ import annotations

import argparse
import logging
import time
import warnings

from benchmarks.kernels import kernel_rows
from benchmarks.models import logistic_problem
from benchmarks.samplers import sampler_rows
from benchmarks.timing import format_table

#: Goals from the issue: per-row gradients within 2x of PyMC's summed gradient, and a DP
#: iteration within 1.5x of a Metropolis iteration.
GRAD_GOAL, ITERATION_GOAL = 2.0, 1.5


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (seconds)")
    parser.add_argument("--d", type=int, default=10, help="number of coefficients (default 10)")
    args = parser.parse_args(argv)

    # pm.sample logs each run and the DP step warns that plain pm.sample keeps the data: noise here.
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=UserWarning)
    if args.quick:
        sizes, repeats, iters = (1_000,), 3, (20, 60)
    else:
        sizes, repeats, iters = (10_000, 100_000), 7, (150, 450)

    start = time.perf_counter()
    summary = []
    for n in sizes:
        problem = logistic_problem(n, args.d)
        print(f"\n== Logistic regression, n = {n:_}, d = {args.d} ==")
        print("(a) kernels, ms per call (median); ratio = ms / baseline ms")
        k_rows = kernel_rows(problem, repeats)
        print(format_table(["function", "ms", "baseline", "ratio"], k_rows))
        # Each iteration costs ~ one ratio kernel call, which grows with n: fewer draws at large n.
        steps = iters if n <= 10_000 else (iters[0] // 3, iters[1] // 3)
        print(f"\n(b) samplers, ms per iteration (slope of pm.sample between {steps} draws)")
        s_rows = sampler_rows(problem, steps, repeats=3)
        print(format_table(["sampler", "ms/iter", "baseline", "ratio"], s_rows))
        summary += [(n, r[0], r[2], r[3], GRAD_GOAL) for r in k_rows if r[0].startswith("grad_")]
        summary += [(n, r[0], r[2], r[3], ITERATION_GOAL) for r in s_rows if r[0].startswith("DP")]
    print("\n== Goals (ratio <= goal) ==")
    rows = [
        (f"{n:_}", name, ref, ratio, goal, "yes" if ratio <= goal else "NO")
        for n, name, ref, ratio, goal in summary
    ]
    print(format_table(["n", "DP", "vs", "ratio", "goal", "met"], rows))
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
