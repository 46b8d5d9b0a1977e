"""Argument checks shared by the accounting functions and the rest of pymc-dp.

Every check raises ``ValueError`` with a message that names the offending argument, so a user who
passes ``epsilon=-1`` deep inside a step method sees which knob is wrong.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "check_count",
    "check_delta",
    "check_epsilon",
    "check_nonnegative",
    "check_positive",
    "check_probability",
]


def _as_float(x: Any, name: str) -> float:
    """Convert a real scalar to float, or raise a TypeError naming ``name``.

    Strings, booleans, complex numbers and arrays are refused even where ``float()`` would take
    them: ``epsilon="1"`` or ``epsilon=True`` is a bug in the caller, not a budget.
    """
    real = isinstance(x, numbers.Real) or (isinstance(x, np.ndarray) and x.ndim == 0)
    if isinstance(x, bool | np.bool_) or not real or np.ndim(x) != 0:
        raise TypeError(f"`{name}` must be a real number, got {type(x).__name__} {x!r}")
    if isinstance(x, np.ndarray) and not np.issubdtype(x.dtype, np.number):
        raise TypeError(f"`{name}` must be a real number, got {x!r}")
    return float(x)


def _finite(x: Any, name: str, *, strict: bool) -> float:
    value = _as_float(x, name)
    if not (math.isfinite(value) and (value > 0.0 if strict else value >= 0.0)):
        raise ValueError(f"`{name}` must be a finite number {'>' if strict else '>='} 0, got {x}")
    return value


def check_epsilon(epsilon: Any, name: str = "epsilon") -> float:
    """A privacy parameter epsilon: a finite number > 0, as a float.

    ``name`` is the argument's name in the error. Raises ``TypeError`` for what is not a real
    number (a string, a bool, an array) and ``ValueError`` for NaN, inf and values <= 0.
    """
    return check_positive(epsilon, name)


def check_delta(delta: Any, name: str = "delta") -> float:
    """A privacy parameter delta in the open interval (0, 1), as a float (``ValueError``
    naming ``name`` otherwise, NaN included)."""
    value = _as_float(delta, name)
    if not 0.0 < value < 1.0:
        raise ValueError(f"`{name}` must be a number in (0, 1), got {delta}")
    return value


def check_positive(x: Any, name: str) -> float:
    """``x`` as a float, a finite number > 0 (``ValueError`` naming ``name`` otherwise)."""
    return _finite(x, name, strict=True)


def check_nonnegative(x: Any, name: str) -> float:
    """``x`` as a float, a finite number >= 0 (``ValueError`` naming ``name`` otherwise)."""
    return _finite(x, name, strict=False)


def check_probability(x: Any, name: str) -> float:
    """``x`` as a float, a probability in (0, 1] (``ValueError`` naming ``name`` otherwise)."""
    value = _as_float(x, name)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"`{name}` must be a number in (0, 1], got {x}")
    return value


def check_count(x: Any, name: str, minimum: int = 0) -> int:
    """``x`` as an int >= ``minimum`` (integral floats such as ``1e4`` accepted;
    ``ValueError`` naming ``name`` otherwise, ``TypeError`` for a bool, string or array)."""
    if isinstance(x, bool | np.bool_) or np.ndim(x) != 0 or isinstance(x, str):
        raise TypeError(f"`{name}` must be an integer >= {minimum}, got {x!r}")
    if isinstance(x, numbers.Integral):
        value = int(x)
    else:
        as_float = _as_float(x, name)
        if not (math.isfinite(as_float) and as_float.is_integer()):
            raise ValueError(f"`{name}` must be an integer >= {minimum}, got {x}")
        value = int(as_float)
    if value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}, got {x}")
    return value


def _check_array(x: ArrayLike, name: str, *, positive: bool = False) -> NDArray[np.float64]:
    """Return ``x`` as a float array after checking every element is >= 0 (or > 0), not NaN."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a real number or array, got {x!r}") from None
    bad = ~(arr > 0.0) if positive else ~(arr >= 0.0)
    if np.any(bad):
        first = arr[bad].flat[0] if arr.ndim else arr
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"`{name}` must be {bound} (and not NaN), got {first}")
    return arr
