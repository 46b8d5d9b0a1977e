"""The data boundary: where private rows enter a model or a worker, and what may come back out.

Rows are bound to a model (``pm.set_data``), to a Dask worker's shard, or computed on by worker
tasks; the code underneath (PyMC, PyTensor, NumPy, Dask) prints the values it was given when it
fails (PyTensor's ``TypeError`` shows the array it could not store) and Dask logs a failed task's
exception on the worker. At this boundary:

* rows are validated before anything is bound, from metadata where possible: numeric dtype that
  PyMC stores in the container without loss, ndim and trailing shape, a fixed (static) shape, at
  least one row (:func:`check_rows`); finiteness of rows in memory (:func:`check_finite`);
* :func:`guarded` runs a call on the driver: an exception raised by pymc-dp's own code (whose
  refusals name containers and variables, never values) passes with its ``__cause__`` and
  ``__context__`` cut; anything raised underneath becomes a :class:`DataBoundaryError` that names
  the step and the exception's type only, with no chained original. Warnings raised underneath
  are re-emitted with their category and a fixed text;
* on a worker, :func:`worker_safe` lets only a :class:`DataRefusal` (a per-row check of our own,
  naming public things) leave with its text; any other exception becomes a :class:`WorkerError`
  (type name and fixed text), raised outside the ``except`` block so that neither the pickled
  exception (Dask sends the chain) nor the worker's log holds a value.
"""

from __future__ import annotations

import dis
import functools
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

__all__ = [
    "DataBoundaryError",
    "DataRefusal",
    "WorkerError",
    "check_finite",
    "check_rows",
    "guarded",
    "worker_safe",
]

_PACKAGE = Path(__file__).resolve().parent

#: What replaces a message from underneath.
WITHHELD = "its message is withheld, as it may print data values"


class DataBoundaryError(RuntimeError):
    """Code underneath pymc-dp (PyMC, PyTensor, NumPy, Dask) failed on private rows; the original
    exception is not attached (its message may print the rows)."""


class WorkerError(RuntimeError):
    """A computation on a Dask worker failed; only the exception's type name leaves the worker."""


class DataRefusal(ValueError):
    """A per-row check of the data failed (non-finite, non-integer, outside a support).

    Its message names public things only (the argument, a container, a family's support) and
    never a value, a row or a count, so it may leave a worker. ``rank`` is the check's position in
    the order the in-memory code runs its checks: over row partitions the lowest rank is reported,
    which is the check the in-memory run reports, whatever the partitioning.
    """

    def __init__(self, message: str, rank: int = 0) -> None:
        super().__init__(message)
        self.rank = int(rank)

    def __reduce__(self):
        return (type(self), (str(self), self.rank))


# ------------------------------------------------------------------------------ validation
def _label(name: str) -> str:
    return f"`data[{name!r}]`"


def check_rows(name: str, var, shape: tuple, dtype) -> int:
    """Refuse rows for the ``pm.Data`` container ``var`` from their metadata only; return n.

    ``shape`` and ``dtype`` are the rows' (a NumPy array's or a Dask array's): rows on axis 0,
    the other axes as the container's placeholder; a numeric dtype that PyMC stores in the
    container (PyMC's conversion, then PyTensor's check, run on an empty array of that dtype:
    float rows into an integer container are refused whatever their values, as PyMC refuses
    them); the container's static shape, if it has one.
    """
    dtype = np.dtype(dtype)
    placeholder = np.asarray(var.get_value(borrow=True))
    shape = tuple(shape)
    if any(s is None or (isinstance(s, float) and np.isnan(s)) for s in shape):
        raise ValueError(f"{_label(name)} has unknown chunk sizes: compute them first.")
    shape = tuple(int(s) for s in shape)
    if len(shape) != placeholder.ndim or shape[1:] != placeholder.shape[1:]:
        raise ValueError(
            f"{_label(name)} has shape {shape}; the placeholder of {name!r} has shape "
            f"{placeholder.shape}: rows on axis 0, the other axes must match."
        )
    static = tuple(getattr(var.type, "shape", ()) or ())
    if any(s is not None and s != shape[a] for a, s in enumerate(static)):
        raise ValueError(
            f"{_label(name)} has shape {shape}; pm.Data {name!r} was made with the fixed shape "
            f"{static}. Make the container without `shape=` to bind other rows."
        )
    if dtype.kind not in "biuf":
        raise TypeError(f"{_label(name)} has dtype {dtype}: rows must be numbers.")
    if not _stores(var, dtype):
        raise TypeError(
            f"{_label(name)} has dtype {dtype}; pm.Data {name!r} holds {var.dtype} values and "
            f"PyMC cannot store {dtype} rows in it without losing precision. Cast the rows "
            f"(e.g. `.astype({str(var.dtype)!r})` after checking they are whole numbers) or make "
            "the container with a matching dtype."
        )
    return shape[0]


def _stores(var, dtype: np.dtype) -> bool:
    """Whether PyMC's ``set_data`` stores rows of ``dtype`` in ``var`` (decided on an empty
    array: by dtype, never by values)."""
    from pymc.pytensorf import convert_data
    from pytensor.tensor.type import TensorType

    probe = convert_data(np.empty(0, dtype=dtype))
    try:
        TensorType(var.dtype, shape=(None,)).filter(probe)
    except TypeError:
        return False
    return True


def check_finite(name: str, value: np.ndarray) -> None:
    """Refuse in-memory rows holding NaN or inf (naming the container, not the rows)."""
    value = np.asarray(value)
    if value.dtype.kind in "fc" and not np.all(np.isfinite(value)):
        raise ValueError(nonfinite_message(name))


def nonfinite_message(name: str) -> str:
    return (
        f"Data pm.Data {name!r} contains NaN or inf values; DP samplers need finite data "
        "(impute, drop or clip rows before modelling)."
    )


# ------------------------------------------------------------------------------ the driver
def _innermost_frame(err: BaseException):
    tb = err.__traceback__
    if tb is None:
        return "", 0
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename, tb.tb_lineno


def _in_package(filename: str) -> bool:
    try:
        return bool(filename) and Path(filename).resolve().is_relative_to(_PACKAGE)
    except (OSError, ValueError):
        return False


def _raised_here(err: BaseException) -> bool:
    """Whether ``err`` is one of pymc-dp's own: the boundary's exceptions, or raised by a
    ``raise`` statement of the package (its innermost frame; an error raised by NumPy's C code
    called from the package, whose message may quote a value, is not). Our messages name
    containers and variables, never values."""
    if isinstance(err, DataRefusal | WorkerError | DataBoundaryError):
        return True
    tb = err.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    if not _in_package(tb.tb_frame.f_code.co_filename):
        return False
    # the instruction that raised: a `raise` statement (however many lines it spans), not a
    # call into C code whose exception surfaced in this frame
    op = next(
        (i.opname for i in dis.get_instructions(tb.tb_frame.f_code) if i.offset == tb.tb_lasti),
        "",
    )
    return op in ("RAISE_VARARGS", "RERAISE")


def _innermost(err: BaseException) -> str:
    return _origin(_innermost_frame(err)[0])


def _origin(filename: str) -> str:
    """Where code lives, for messages: an installed package's name, else the file's name."""
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            i = parts.index(marker)
            if i + 1 < len(parts):
                return parts[i + 1].removesuffix(".py")
    return Path(filename).name or "unknown code"


def _cut(err: BaseException) -> BaseException:
    """The exception without its chain (a cause or context may hold values)."""
    err.__cause__ = None
    err.__context__ = None
    err.__suppress_context__ = False
    return err


def guarded(what: str, fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)`` at the data boundary, on the driver.

    pymc-dp's own exceptions pass with their chain cut; any other exception becomes a
    :class:`DataBoundaryError` ("``what`` failed with TypeError in pytensor; ...") raised with no
    ``__cause__`` and no ``__context__``. Warnings from pymc-dp pass; others are re-emitted with
    their category and a fixed text naming ``what``.
    """
    failure: BaseException | None = None
    caught: list = []
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        # record each warning with the file that called warnings.warn (not the one its
        # `stacklevel` names: PyMC's warnings name their caller, which may be pymc-dp)
        warnings._showwarnmsg_impl = lambda msg: caught.append((msg, _warning_caller()))
        try:
            result = fn(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - replaced below, outside this block
            if _raised_here(err):
                failure = _cut(err)
            else:
                failure = DataBoundaryError(
                    f"{what} failed with {type(err).__name__} in {_innermost(err)}; {WITHHELD}."
                )
    _reemit(caught, what)
    if failure is not None:
        raise failure  # outside the except block: nothing is chained to it
    return result


def _warning_caller() -> str:
    """The file of the frame that called ``warnings.warn`` (seen from the recording hook)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in (__file__, warnings.__file__):
        frame = frame.f_back
    return frame.f_code.co_filename if frame is not None else ""


def _reemit(caught, what: str) -> None:
    for w, caller in caught:
        if _in_package(caller):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            continue
        text = f"{w.category.__name__} from {_origin(caller)} while {what}; {WITHHELD}."
        try:
            message = w.category(text)
        except Exception:  # noqa: BLE001 - a warning class with another signature
            message = UserWarning(text)
        warnings.warn(message, stacklevel=3)


# ------------------------------------------------------------------------------ the workers
def worker_safe(fn: Callable) -> Callable:
    """Wrap a function that runs on a worker: a :class:`DataRefusal` leaves as a fresh copy (its
    text, its rank); any other exception as a :class:`WorkerError` naming its type. Both are
    raised outside the ``except`` block, so no original exception (which may print rows) is
    chained to them, pickled to the driver or logged by the worker."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except DataRefusal as err:
            failure: Exception = DataRefusal(str(err), err.rank)
        except Exception as err:  # noqa: BLE001 - replaced below, outside this block
            failure = WorkerError(
                f"{type(err).__name__} in {fn.__qualname__} on a Dask worker; {WITHHELD}."
            )
        raise failure

    return wrapper
