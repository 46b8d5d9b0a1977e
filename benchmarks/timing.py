"""Timing helpers shared by the benchmarks: warm up, repeat, take the median."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

__all__ = ["compare_ms", "format_table", "per_call_ms", "set_clock"]

#: Wall time by default; process CPU time (``set_clock(cpu=True)``) is robust to other processes
#: sharing the cores, at the price of missing time spent waiting.
_clock: Callable[[], float] = time.perf_counter


def set_clock(*, cpu: bool) -> None:
    """Time with process CPU time (``cpu=True``) or wall time (``time.perf_counter``)."""
    global _clock
    _clock = time.process_time if cpu else time.perf_counter


def _batch_seconds(fn: Callable[[], object], number: int) -> float:
    start = _clock()
    for _ in range(number):
        fn()
    return (_clock() - start) / number


def per_call_ms(fn: Callable[[], object], *, repeats: int = 7, target_s: float = 0.2) -> float:
    """Median milliseconds per call of ``fn()``; see :func:`compare_ms`."""
    return compare_ms({"fn": fn}, repeats=repeats, target_s=target_s)["fn"]


def compare_ms(
    fns: Mapping[str, Callable[[], object]], *, repeats: int = 7, target_s: float = 0.2
) -> dict[str, float]:
    """Median milliseconds per call of each ``fn()`` over ``repeats`` batches.

    Each batch has enough calls to last about ``target_s`` seconds, so sub-millisecond functions
    are not dominated by timer resolution. The functions take turns batch by batch, so a change
    of machine load during the run hits all of them alike and their ratios stay fair.
    """
    numbers = {}
    for name, fn in fns.items():
        fn()  # warm-up: first calls pay for lazy allocation and caches
        numbers[name] = max(1, int(target_s / max(_batch_seconds(fn, 1), 1e-7)))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(_batch_seconds(fn, numbers[name]))
    return {name: 1e3 * statistics.median(s) for name, s in samples.items()}


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Plain-text table; floats with 3 significant digits (NaN left blank), right-aligned."""

    def cell(v: object) -> str:
        if isinstance(v, float):
            return "" if math.isnan(v) else f"{v:.3g}"
        return str(v)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)
