"""Time per iteration of the minibatch DP samplers as n grows, with the batch size fixed.

A minibatch step reads ``batch_size`` rows per iteration (the batch kernels index every per-row
input with ``x[idx]``), so its iteration time should grow with n only as much as gathering b
random rows of a larger array does (cache misses): the goal is that the growth from n = 1e4 to
1e6 at b = 1000 is at most 1.2x the growth of gathering the batch rows alone (``GATHER``:
``X[idx]`` and ``y[idx]`` of a row-major (n, d) array, ``idx`` sorted and fresh each call). The
same gather from d separate columns (the layout the compiled kernels read) is timed beside it.
The full-data :class:`~pymc_dp.DPPenalty` and non-DP ``pm.Metropolis`` (one joint proposal) on
the same model, which read all n rows, are timed alongside.

The model is the logistic regression of the other tables (:func:`benchmarks.models
.logistic_problem`, d = 10): its per-row work is that of a typical regression, unlike the 2-d
banana, whose cheap rows would leave the fixed per-iteration overhead dominant. At n = 1e6 its
design matrix is 80 MB. One model is built per n and shared by all samplers.

Each sampler is timed as in :mod:`benchmarks.samplers`: ``step.step(point)`` after
``step.setup_chain``, with the chain state carried over between calls. The accounting of a chain
is prepared for ``draws`` iterations (PLD accounting of Poisson sampling evaluates its ledger on
about 40 iteration counts, so this is kept modest); a timing loop that runs past them only repeats
the last ``dp_epsilon``, which costs the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from benchmarks.models import Problem, logistic_problem
from benchmarks.samplers import JOINT, _joint_metropolis
from benchmarks.timing import compare_ms
from pymc_dp import DPPenalty
from pymc_dp.step_methods.barker import DPBarker
from pymc_dp.step_methods.minibatch_penalty import DPMinibatchPenalty

__all__ = [
    "FULL_DATA",
    "MINIBATCH_GOAL",
    "minibatch_goal_rows",
    "minibatch_rows",
    "minibatch_tables",
]

#: Goal from the issue: the growth of an iteration's time from the smallest to the largest n at
#: most 1.2x the growth of gathering the batch rows alone.
MINIBATCH_GOAL = 1.2
#: Gathering the batch rows alone: row-major, and from d separate columns.
GATHER = "gather b rows (row-major X, y)"
GATHER_COLUMNS = "gather b rows (d columns)"
#: Batches in the gather's pool of index arrays (see :func:`_gather`).
POOL = 1024
#: The full-data DP sampler the minibatch samplers are compared with.
FULL_DATA = "DPPenalty (full data)"
#: Tempered posterior as wide as with this many rows (Heikkilä et al. 2019 use 100).
N0 = 100.0

#: ``(sampler, n, ms/iter, ratio to the smallest n, ratio to pm.Metropolis, ratio to DPPenalty)``
Row = tuple[str, int, float, float, float, float]


def _iteration(problem: Problem, make_step: Callable[[], object], draws: int) -> Callable[[], None]:
    """One chain iteration as ``pm.sample`` runs it; the chain state persists across calls."""
    with problem.model:
        step = make_step()
    step.setup_chain(np.random.default_rng(0), 0, draws)
    step.tune = False
    state = {"point": dict(problem.point)}

    def iterate() -> None:
        state["point"], _ = step.step(state["point"])

    return iterate


def _gather(n: int, d: int, batch_size: int, columns: bool) -> Callable[[], None]:
    """Gather ``batch_size`` random rows of n; a pool of sorted index arrays, cycled, so the
    draw is not timed. The pool holds ``POOL`` batches: a row comes back only after about
    ``POOL * batch_size`` other rows (1e6 at b = 1000, 90 MB of X and y), more than the 32 MB
    last-level cache, so each call reads fresh rows from memory as a sampler's fresh batch does
    (a pool of 64 batches, 6 MB of rows, stayed cached and understated the gather's growth)."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((n, d))
    cols = [np.ascontiguousarray(X[:, j]) for j in range(d)]
    y = rng.integers(0, 2, n).astype(np.float64)
    pool = [np.sort(rng.choice(n, batch_size, replace=False)) for _ in range(POOL)]
    state = {"i": 0}

    def gather() -> None:
        idx = pool[state["i"] % len(pool)]
        state["i"] += 1
        if columns:
            for c in cols:
                c[idx]
        else:
            X[idx]
        y[idx]

    return gather


def _makers(problem: Problem, batch_size: int) -> dict[str, Callable[[], object]]:
    n, clip = problem.n, problem.row_norm_bound
    # Timing only: scales and noise change acceptance, not the cost of an iteration. With
    # tempering N0 / n the minibatch posteriors are as wide as with N0 rows.
    tempered_scale = 0.1 / np.sqrt(N0)
    full_scale = 0.1 / np.sqrt(n)

    def penalty(sampling: str) -> Callable[[], DPMinibatchPenalty]:
        return lambda: DPMinibatchPenalty(
            batch_size=batch_size,
            sampling=sampling,
            noise_multiplier=1.0,
            llr_clip=clip,
            proposal_scale=tempered_scale,
            tempering=N0 / n,
            chains=1,
        )

    return {
        # no epsilon: DP Barker has no noise knob, and a timing loop must not hit a budget
        "DPBarker": lambda: DPBarker(
            batch_size=batch_size, n0=N0, proposal_scale=tempered_scale, chains=1
        ),
        "DPMinibatchPenalty (fixed_size)": penalty("fixed_size"),
        "DPMinibatchPenalty (poisson)": penalty("poisson"),
        FULL_DATA: lambda: DPPenalty(
            noise_multiplier=100.0, llr_clip=clip, proposal_scale=full_scale, chains=1
        ),
        JOINT: _joint_metropolis,
    }


def minibatch_rows(
    sizes: Sequence[int] = (10_000, 100_000, 1_000_000),
    batch_size: int = 1000,
    d: int = 10,
    repeats: int = 5,
    draws: int = 10_000,
) -> list[Row]:
    """Rows ``(sampler, n, ms/iter, vs smallest n, vs pm.Metropolis, vs DPPenalty)``.

    One logistic-regression model of dimension ``d`` per n in ``sizes``; the minibatch samplers
    draw ``batch_size`` rows per iteration. The ratio to the smallest n compares a sampler with
    itself; the other two compare it with the full-data samplers at the same n. All models stay
    in memory until the timing ends (about 0.7 GB at n = 1e6, d = 10).
    """
    fns: dict[tuple[str, int], Callable[[], None]] = {}
    for n in sizes:
        problem = logistic_problem(n, d)
        for name, make in _makers(problem, batch_size).items():
            fns[name, n] = _iteration(problem, make, draws)
        fns[GATHER, n] = _gather(n, d, batch_size, columns=False)
        fns[GATHER_COLUMNS, n] = _gather(n, d, batch_size, columns=True)
    # All sizes take turns batch by batch: a change of machine load (which also changes how much
    # of the shared cache is left to this process) hits every n alike, so the ratios stay fair.
    timed = compare_ms(fns, repeats=repeats)
    ms: dict[int, dict[str, float]] = {n: {} for n in sizes}
    for (name, n), t in timed.items():
        ms[n][name] = t
    first = sizes[0]
    rows: list[Row] = []
    for name in ms[first]:
        for n in sizes:
            t = ms[n][name]
            other = name in (JOINT, GATHER, GATHER_COLUMNS)
            vs_joint = t / ms[n][JOINT] if not other else float("nan")
            vs_full = t / ms[n][FULL_DATA] if not other and name != FULL_DATA else float("nan")
            rows.append((name, n, t, t / ms[first][name], vs_joint, vs_full))
    return rows


def minibatch_goal_rows(rows: Sequence[Row]) -> list[tuple[int, str, str, float, float]]:
    """Goal rows ``(n, sampler, reference, ratio, goal)``: each minibatch sampler's growth in time
    from the smallest n to the largest over the growth of gathering the batch rows alone (goal
    :data:`MINIBATCH_GOAL`)."""
    first, last = min(r[1] for r in rows), max(r[1] for r in rows)
    ms = {(r[0], r[1]): r[2] for r in rows}
    growth = ms[GATHER, last] - ms[GATHER, first]
    return [
        (
            last,
            name,
            f"gather growth from n = {first:_}",
            (ms[name, last] - ms[name, first]) / growth,
            MINIBATCH_GOAL,
        )
        for name in dict.fromkeys(r[0] for r in rows)
        if name.startswith("DP") and name != FULL_DATA
    ]


def minibatch_tables(rows: Sequence[Row]) -> list[tuple[str, list[tuple]]]:
    """``(sampler, table rows)`` per sampler, rows ``(n, ms/iter, vs smallest n, vs pm.Metropolis,
    vs DPPenalty)`` formatted for :func:`benchmarks.timing.format_table`."""
    names = list(dict.fromkeys(r[0] for r in rows))
    return [(name, [(f"{r[1]:_}", *r[2:]) for r in rows if r[0] == name]) for name in names]
