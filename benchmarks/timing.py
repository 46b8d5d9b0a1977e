"""Timing helpers shared by the benchmarks: warm up, repeat, take the median."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

__all__ = ["format_table", "per_call_ms", "slope_ms"]


def per_call_ms(
    fn: Callable[[], object],
    *,
    number: int | None = None,
    repeats: int = 7,
    target_s: float = 0.2,
) -> float:
    """Median milliseconds per call of ``fn()`` over ``repeats`` batches of ``number`` calls.

    ``number`` defaults to enough calls for one batch to last about ``target_s`` seconds, so
    sub-millisecond functions are not dominated by timer resolution.
    """
    fn()  # warm-up: first calls pay for lazy allocation and caches
    if number is None:
        start = time.perf_counter()
        fn()
        once = max(time.perf_counter() - start, 1e-7)
        number = max(1, int(target_s / once))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return 1e3 * statistics.median(samples)


def slope_ms(run: Callable[[int], object], n_small: int, n_large: int, repeats: int = 3) -> float:
    """Milliseconds per iteration as the slope between runs of ``n_small`` and ``n_large``.

    Fixed costs of a run (compilation, setup, building the result) cancel in the difference;
    the runs are interleaved so drifting machine load hits both sizes alike.
    """
    run(n_small)  # warm-up: compile and fill caches
    small, large = [], []
    for _ in range(repeats):
        for n, out in ((n_small, small), (n_large, large)):
            start = time.perf_counter()
            run(n)
            out.append(time.perf_counter() - start)
    return 1e3 * (statistics.median(large) - statistics.median(small)) / (n_large - n_small)


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Plain-text table; floats with 3 significant digits, columns right-aligned."""

    def cell(v: object) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)
