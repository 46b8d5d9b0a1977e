"""Covariates onto [-1, 1] from public ranges, and the clip bounds that go with them.

A DP step's clip bounds must come from public facts (``bounds.py``). For a GLM the simplest
public fact is a range per covariate from a codebook or a study design: clip each covariate into
it and map it affinely onto ``[-1, 1]``. Then every ``|x_ij| <= 1``, the clip bounds follow from
:func:`pymc_dp.glm_clip` with all-ones covariate bounds, and centring the range keeps the
coefficients from correlating with the intercept (which the private warm start needs).

The encoding is a fixed, data-independent map applied row by row, so it changes nothing in the
privacy analysis. Nothing it returns, prints or warns depends on the values: no count of clipped
values (the count itself is a statistic of the private data), no error or warning on a value
(raising on a private value releases one bit about it), and non-finite values map silently to
data-independent points.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from pymc_dp.bounds import GLMClip, glm_clip
from pymc_dp.checks import _as_float

__all__ = ["Encoded", "RangeSpec", "encode_covariates"]

#: A public range ``(lo, hi)``, or ``"flag"`` (a 0/1 indicator) or ``"rate"`` (a proportion).
RangeSpec = tuple[float, float] | Literal["flag", "rate"]

# Named specs and the public range they stand for.
_NAMED: dict[str, tuple[float, float]] = {"flag": (0.0, 1.0), "rate": (0.0, 1.0)}


@dataclass(frozen=True)
class Encoded:
    """Covariates encoded onto ``[-1, 1]`` by public ranges (see :func:`encode_covariates`).

    Attributes
    ----------
    X : numpy.ndarray
        ``(n, d)`` float64 design matrix, every entry in ``[-1, 1]``; a column of ones first when
        the encoding has an intercept.
    names : tuple of str
        Column names of ``X`` (``"intercept"`` first when there is one).
    covariate_bounds : numpy.ndarray
        ``(d,)`` public bounds ``c_j >= |X[i, j]|`` (all ones): what :func:`pymc_dp.glm_clip`
        takes.
    ranges : dict
        The public range ``(lo, hi)`` of each encoded covariate, before encoding (``"flag"`` and
        ``"rate"`` resolved to ``(0.0, 1.0)``).

    Every field except ``X`` is a function of the public arguments only. ``X`` is private like
    the rows it encodes, and the repr leaves it out (a logged ``Encoded`` shows no values).
    """

    X: np.ndarray = field(repr=False)
    names: tuple[str, ...]
    covariate_bounds: np.ndarray
    ranges: dict[str, tuple[float, float]]

    def clip(self, family: str = "logistic", **kwargs: Any) -> GLMClip:
        """Clip bounds of a GLM on these covariates: ``pdp.glm_clip(self.covariate_bounds, ...)``.

        Parameters
        ----------
        family : {"logistic", "poisson", "normal"}, default "logistic"
            The GLM family.
        **kwargs
            ``y_bound``, ``eta_bound``, ``sigma``: the public bounds the non-logistic families
            need (see :func:`pymc_dp.glm_clip`).

        Returns
        -------
        GLMClip
            ``llr_clip``, ``grad_clip``, ``hess_clip`` and the Lipschitz constant.
        """
        return glm_clip(self.covariate_bounds, family, **kwargs)


def _resolve(name: str, spec: Any) -> tuple[float, float]:
    """The public range ``(lo, hi)`` of one spec; errors name the argument, never the data."""
    label = f"ranges[{name!r}]"
    where = f"`{label}`"
    if isinstance(spec, str):
        if spec not in _NAMED:
            raise ValueError(f"{where} must be (lo, hi), 'flag' or 'rate', got {spec!r}")
        return _NAMED[spec]
    if not isinstance(spec, tuple | list) or len(spec) != 2:
        raise ValueError(f"{where} must be (lo, hi), 'flag' or 'rate', got {spec!r}")
    lo, hi = _as_float(spec[0], f"{label}[0]"), _as_float(spec[1], f"{label}[1]")
    # hi - lo must be finite too: the encoding divides by it.
    if not (math.isfinite(lo) and math.isfinite(hi) and math.isfinite(hi - lo)):
        raise ValueError(f"{where} must be finite bounds, got ({lo!r}, {hi!r})")
    if not lo < hi:
        raise ValueError(f"{where} needs lo < hi, got ({lo!r}, {hi!r})")
    return lo, hi


def _column(columns: Any, name: str) -> np.ndarray:
    """One column as a 1-D float64 array; errors name the column, never a value."""
    try:
        values = np.asarray(columns[name], dtype=np.float64)
    except Exception:  # noqa: BLE001 -- NumPy's message quotes the value it could not convert
        values = None
    # Raised outside the handler so that nothing (NumPy's message) is chained as its context.
    if values is None:
        raise TypeError(f"column {name!r} of `columns` is not numeric (its values are not shown)")
    if values.ndim != 1:
        raise ValueError(f"column {name!r} of `columns` must be 1-D, got shape {values.shape}")
    return values


def _encode(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Clip into ``[lo, hi]`` and map onto ``[-1, 1]``; NaN to 0, +-inf to the ends."""
    # No warning may depend on the values (an invalid-value warning would say a NaN is there).
    with np.errstate(all="ignore"):
        # (x - lo) / (hi - lo) first, then 2 u - 1: for lo = 0 this is bit for bit the familiar
        # 2 * (x / hi) - 1, and rounding is monotone, so u is in [0, 1] and the result in [-1, 1].
        u = (np.clip(values, lo, hi) - lo) / (hi - lo)
        encoded = 2.0 * u - 1.0
    encoded[np.isnan(encoded)] = 0.0  # the range's midpoint: a NaN is neither end
    return encoded


def encode_covariates(
    columns: Any, ranges: Mapping[str, RangeSpec], *, intercept: bool = True
) -> Encoded:
    """Encode covariates onto ``[-1, 1]`` by their declared public ranges.

    Each covariate ``x`` with public range ``[lo, hi]`` becomes ``2 (clip(x, lo, hi) - lo) /
    (hi - lo) - 1``: ``lo`` maps to -1, ``hi`` to +1, the midpoint to 0. The ranges must be public
    (a codebook, a study design, a cap fixed a priori), never read off the data: they set the
    clip bounds, so a range taken from the private values would leak them. A loose range costs
    utility (the encoded values bunch up), never privacy.

    Parameters
    ----------
    columns : mapping or DataFrame
        ``name -> 1-D array`` of the raw covariates (a :class:`pandas.DataFrame` works); columns
        not named in ``ranges`` are ignored.
    ranges : mapping
        ``name -> spec``, in the order of the columns of ``X``. ``spec`` is

        * ``(lo, hi)``: a public range, ``lo < hi`` and both finite; values outside are clipped
          into it;
        * ``"flag"``: a 0/1 indicator, mapped to -1/+1 (centred); the same as ``(0, 1)``, so a
          value other than 0 or 1 is clipped and mapped like any other, never refused (an error
          on a private value would release something about it);
        * ``"rate"``: a proportion in ``[0, 1]``; the same as ``(0, 1)``.
    intercept : bool, default True
        Prepend a column of ones named ``"intercept"``.

    Returns
    -------
    Encoded
        ``X`` (float64, ``(n, d)``), ``names``, ``covariate_bounds`` (all ones) and the resolved
        ``ranges``; ``Encoded.clip(family, ...)`` gives the matching :class:`GLMClip`.

    Raises
    ------
    TypeError
        If ``columns`` is not a mapping or DataFrame, or a column is not numeric.
    ValueError
        If ``ranges`` is empty or has an unknown spec, non-finite bounds or ``lo >= hi``; if
        ``ranges`` names a column ``columns`` does not have, a name twice, or ``"intercept"``
        beside an intercept; if a column is not 1-D or the columns have different lengths.
        Messages name the argument and the public bounds, never a data value.

    Notes
    -----
    Non-finite values are mapped silently, by rules that do not look at the other values: NaN to
    the midpoint of the range (0 after encoding), ``+inf`` to ``hi`` (+1) and ``-inf`` to ``lo``
    (-1). Nothing data-dependent is returned, printed or warned: in particular not how many values
    were clipped (a count of the private data). ``X`` is a per-row map of the private rows and is
    private like them: pass it to the model, not to a report.

    Examples
    --------
    >>> import numpy as np
    >>> import pymc_dp as pdp
    >>> enc = pdp.encode_covariates(
    ...     {"age": np.array([18.0, 60.0, 102.0]), "smoker": np.array([0, 1, 1])},
    ...     {"age": (18, 102), "smoker": "flag"},
    ... )
    >>> enc.names
    ('intercept', 'age', 'smoker')
    >>> enc.X
    array([[ 1., -1., -1.],
           [ 1.,  0.,  1.],
           [ 1.,  1.,  1.]])
    >>> enc.clip().grad_clip  # logistic: every |x_j| <= 1, so a row's gradient is <= sqrt(3)
    1.7320508075688772
    """
    names, bounds = _public_arguments(columns, ranges, intercept)
    values, n = _read_columns(columns, ranges)
    cols = [np.ones(n)] if intercept else []
    cols += [_encode(values[name], *bounds[name]) for name in names]
    # Clipped once more for certainty: [-1, 1] is the promise the clip bounds rest on.
    X = np.clip(np.column_stack(cols), -1.0, 1.0)
    return Encoded(
        X=np.ascontiguousarray(X, dtype=np.float64),
        names=(("intercept",) if intercept else ()) + tuple(names),
        covariate_bounds=np.ones(X.shape[1]),
        ranges=bounds,
    )


def _public_arguments(
    columns: Any, ranges: Any, intercept: bool
) -> tuple[list[str], dict[str, tuple[float, float]]]:
    """The covariate names and their resolved public ranges, checked in full before any column
    is read (errors name the argument and the public bounds, never the data)."""
    if not isinstance(ranges, Mapping):
        raise TypeError(f"`ranges` must be a mapping name -> spec, got {type(ranges).__name__}")
    if not ranges:
        raise ValueError("`ranges` is empty: name at least one covariate and its public range")
    # A DataFrame is not a collections.abc.Mapping, but `in` and [] look up its columns.
    if not (isinstance(columns, Mapping) or hasattr(columns, "columns")):
        raise TypeError(
            f"`columns` must be a mapping name -> 1-D array or a DataFrame, "
            f"got {type(columns).__name__}"
        )
    names = [str(name) for name in ranges]
    if intercept and "intercept" in names:
        raise ValueError("`ranges` names 'intercept', the name of the intercept column")
    if len(set(names)) < len(names):
        raise ValueError(f"`ranges` names a column twice (as text): {names}")
    bounds = {str(name): _resolve(str(name), spec) for name, spec in ranges.items()}
    missing = [name for name in ranges if name not in columns]
    if missing:
        raise ValueError(f"`ranges` names columns that `columns` does not have: {missing}")
    return names, bounds


def _read_columns(columns: Any, ranges: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int]:
    """The named columns as 1-D float64 arrays, and their common length ``n`` (public)."""
    values = {str(name): _column(columns, name) for name in ranges}
    lengths = {name: len(v) for name, v in values.items()}  # n is public
    if len(set(lengths.values())) > 1:
        raise ValueError(f"the columns of `columns` have different lengths: {lengths}")
    return values, next(iter(lengths.values()))
