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


def check_epsilon(epsilon: Any, name: str = "epsilon") -> float:
    """Check that a privacy parameter epsilon is a finite number > 0.

    Parameters
    ----------
    epsilon : float
        Value to check.
    name : str, default "epsilon"
        Argument name used in the error message.

    Returns
    -------
    float
        ``epsilon`` as a Python float.

    Raises
    ------
    TypeError
        If ``epsilon`` is not a real number (a string, a bool, an array).
    ValueError
        If ``epsilon`` is not finite and > 0 (NaN and inf included).
    """
    return check_positive(epsilon, name)


def check_delta(delta: Any, name: str = "delta") -> float:
    """Check that a privacy parameter delta lies in the open interval (0, 1).

    Parameters
    ----------
    delta : float
        Value to check.
    name : str, default "delta"
        Argument name used in the error message.

    Returns
    -------
    float
        ``delta`` as a Python float.

    Raises
    ------
    ValueError
        If ``delta`` is not in (0, 1) (NaN included).
    """
    value = _as_float(delta, name)
    if not 0.0 < value < 1.0:
        raise ValueError(f"`{name}` must be a number in (0, 1), got {delta}")
    return value


def check_positive(x: Any, name: str) -> float:
    """Check that ``x`` is a finite number > 0.

    Parameters
    ----------
    x : float
        Value to check.
    name : str
        Argument name used in the error message.

    Returns
    -------
    float
        ``x`` as a Python float.

    Raises
    ------
    ValueError
        If ``x`` is not a finite number > 0.
    """
    value = _as_float(x, name)
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"`{name}` must be a finite number > 0, got {x}")
    return value


def check_nonnegative(x: Any, name: str) -> float:
    """Check that ``x`` is a finite number >= 0.

    Parameters
    ----------
    x : float
        Value to check.
    name : str
        Argument name used in the error message.

    Returns
    -------
    float
        ``x`` as a Python float.

    Raises
    ------
    ValueError
        If ``x`` is not a finite number >= 0.
    """
    value = _as_float(x, name)
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"`{name}` must be a finite number >= 0, got {x}")
    return value


def check_probability(x: Any, name: str) -> float:
    """Check that ``x`` is a probability in (0, 1].

    Parameters
    ----------
    x : float
        Value to check.
    name : str
        Argument name used in the error message.

    Returns
    -------
    float
        ``x`` as a Python float.

    Raises
    ------
    ValueError
        If ``x`` is not in (0, 1].
    """
    value = _as_float(x, name)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"`{name}` must be a number in (0, 1], got {x}")
    return value


def check_count(x: Any, name: str, minimum: int = 0) -> int:
    """Check that ``x`` is an integer >= ``minimum``.

    Parameters
    ----------
    x : int
        Value to check. Integral floats such as ``1e4`` are accepted.
    name : str
        Argument name used in the error message.
    minimum : int, default 0
        Smallest allowed value.

    Returns
    -------
    int
        ``x`` as a Python int.

    Raises
    ------
    ValueError
        If ``x`` is not an integer >= ``minimum``.
    """
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
