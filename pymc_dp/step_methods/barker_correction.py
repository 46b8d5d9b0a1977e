"""Correction distribution of the (DP) Barker acceptance test.

Barker's test accepts a proposal if ``Delta + V_log > 0`` with ``V_log ~ Logistic(0, 1)``.
Seita et al. (2017) and Heikkilä et al. (2019, "Differentially private MCMC") split the logistic
noise as ``V_log = N(0, C) + V_corr``: the Gaussian part is supplied by the (privatised,
subsampled) log-likelihood ratio, and only the data-independent correction ``V_corr`` is drawn
explicitly. ``V_corr`` would need characteristic function ``pi t e^{C t^2/2} / sinh(pi t)``, which
grows without bound, so no exact ``V_corr`` exists: it is approximated by a symmetric mixture

    V_corr ~ sum_k w_k / 2 * (N(m_k, v_k) + N(-m_k, v_k)),   sum_k w_k = 1,

chosen so that the CDF of ``N(0, C) + V_corr`` (a Gaussian mixture with variances ``C + v_k``) is
uniformly close to the logistic CDF. The minimax (sup-norm) fit
(:func:`~pymc_dp.step_methods.fit_barker_correction.fit_correction`) is a linear program over the
weights of candidate means on a grid, with ``Var(V_corr) = pi^2/3 - C`` imposed exactly. For
``C = 2`` the optimum is 5.89e-4 and refining the candidate grid (point masses approximate any
distribution) does not lower it, so about 5.9e-4 is the best any ``V_corr``
achieves (Heikkilä et al. report 2.45e-3 for their 100-component mixture); it falls quickly for
smaller ``C`` (about 3e-5 at ``C = 1.5``, 1e-7 at ``C = 1``) and rises for larger ``C``
(3.8e-3 at ``C = 2.5``).

The fit for ``C = 2`` ships in ``pymc_dp/data/barker_correction_C2.json``; the fitter and its
command line (``make correction``) are in :mod:`pymc_dp.step_methods.fit_barker_correction`: this
module is what a run reads.
"""

from __future__ import annotations

import bisect
import functools
import importlib.resources
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit, ndtr

from pymc_dp.checks import check_positive

__all__ = [
    "DATA_FILE",
    "CorrectionDistribution",
    "load_correction",
]

#: Name of the shipped fit for ``C = 2`` inside ``pymc_dp/data``.
DATA_FILE = "barker_correction_C2.json"
#: ``C`` of the shipped fit.
SHIPPED_C = 2.0
#: Dense grid (start, stop, num) on which :meth:`CorrectionDistribution.sup_cdf_error` is measured.
ERROR_GRID = (-40.0, 40.0, 200_001)
#: Variance of the standard logistic distribution.
LOGISTIC_VARIANCE = math.pi**2 / 3
# Slack allowed in sum(weights) == 1 when a distribution is built from stored numbers.
_WEIGHT_SUM_TOL = 1e-9


def _check_C(C: Any) -> float:
    """Return ``C`` as a float after checking ``0 < C < pi^2/3`` (the logistic variance)."""
    value = check_positive(C, "C")
    if value >= LOGISTIC_VARIANCE:
        raise ValueError(
            f"`C` must be smaller than the logistic variance pi^2/3 = {LOGISTIC_VARIANCE:.6f} "
            f"(Var(V_corr) = pi^2/3 - C must be positive), got {C}"
        )
    return value


def _float_vector(x: ArrayLike, name: str) -> NDArray[np.float64]:
    """Read-only 1-D float copy of ``x``; finite and >= 0, or a ValueError naming ``name``."""
    arr = np.array(x, dtype=np.float64, ndmin=1)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"`{name}` must be a non-empty 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr) & (arr >= 0.0)):
        raise ValueError(f"`{name}` must contain finite numbers >= 0, got {arr}")
    arr.setflags(write=False)
    return arr


def _pair_cdf(
    x: NDArray[np.float64], means: NDArray[np.float64], sd: NDArray[np.float64]
) -> NDArray[np.float64]:
    """``(P(m + sd Z <= x) + P(-m + sd Z <= x)) / 2`` per component; ``sd = 0`` gives atoms.

    ``x`` carries a trailing axis of length 1 so the result has one column per component.
    """
    spread = sd > 0.0
    safe_sd = np.where(spread, sd, 1.0)
    upper = np.where(spread, ndtr((x - means) / safe_sd), x >= means)
    lower = np.where(spread, ndtr((x + means) / safe_sd), x >= -means)
    return 0.5 * (upper + lower)


@dataclass(frozen=True)
class CorrectionDistribution:
    """Symmetric Gaussian mixture approximating the Barker correction ``V_corr``.

    ``V_corr`` puts weight ``weights[k] / 2`` on each of ``N(means[k], variances[k])`` and
    ``N(-means[k], variances[k])``; a zero variance is a point mass. Instances are immutable
    (the arrays are read-only copies), so cached objects can be shared freely.

    Parameters
    ----------
    C : float
        Variance of the Gaussian part ``N(0, C)`` of the logistic noise, ``0 < C < pi^2/3``.
    means : array_like, shape (K,)
        Non-negative component means ``m_k``.
    weights : array_like, shape (K,)
        Non-negative weights of the symmetric pairs, summing to 1.
    variances : array_like, shape (K,)
        Non-negative component variances ``v_k`` of ``V_corr``.
    """

    C: float
    means: np.ndarray
    weights: np.ndarray
    variances: np.ndarray
    # Signed two-sided tables for the sampler (one entry per half-component), precomputed because
    # a scalar draw happens in every MCMC iteration.
    _edges: np.ndarray = field(init=False, repr=False, compare=False)
    _edges_list: list[float] = field(init=False, repr=False, compare=False)
    _signed_means: np.ndarray = field(init=False, repr=False, compare=False)
    _signed_means_list: list[float] = field(init=False, repr=False, compare=False)
    _signed_sd: np.ndarray = field(init=False, repr=False, compare=False)
    _signed_sd_list: list[float] = field(init=False, repr=False, compare=False)
    _has_spread: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        C = _check_C(self.C)
        means = _float_vector(self.means, "means")
        weights = _float_vector(self.weights, "weights")
        variances = _float_vector(self.variances, "variances")
        if not means.shape == weights.shape == variances.shape:
            raise ValueError(
                "`means`, `weights` and `variances` must have the same length, got "
                f"{means.size}, {weights.size} and {variances.size}"
            )
        if abs(weights.sum() - 1.0) > _WEIGHT_SUM_TOL:
            raise ValueError(f"`weights` must sum to 1, got sum {weights.sum()!r}")
        half = 0.5 * weights
        # Entries k and K + k are the +m_k and -m_k halves of component k.
        signed_means = np.concatenate([means, -means])
        signed_sd = np.sqrt(np.concatenate([variances, variances]))
        # Interior cumulative edges only: bisect then always returns a valid index, even when
        # the cumulative sum ends a rounding error below 1.
        edges = np.cumsum(np.concatenate([half, half]))[:-1]
        for name, value in [
            ("C", C),
            ("means", means),
            ("weights", weights),
            ("variances", variances),
            ("_edges", edges),
            ("_edges_list", edges.tolist()),
            ("_signed_means", signed_means),
            ("_signed_means_list", signed_means.tolist()),
            ("_signed_sd", signed_sd),
            ("_signed_sd_list", signed_sd.tolist()),
            ("_has_spread", bool(np.any(variances > 0.0))),
        ]:
            object.__setattr__(self, name, value)

    # Arrays make the generated __eq__/__hash__ unusable, so compare by value explicitly.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CorrectionDistribution):
            return NotImplemented
        return (
            self.C == other.C
            and np.array_equal(self.means, other.means)
            and np.array_equal(self.weights, other.weights)
            and np.array_equal(self.variances, other.variances)
        )

    def __hash__(self) -> int:
        return hash(
            (self.C, self.means.tobytes(), self.weights.tobytes(), self.variances.tobytes())
        )

    @property
    def n_components(self) -> int:
        """Number of symmetric pairs ``K``."""
        return int(self.means.size)

    @property
    def variance(self) -> float:
        """``Var(V_corr) = sum_k w_k (m_k^2 + v_k)``; the target is ``pi^2/3 - C``."""
        return float(self.weights @ (self.means**2 + self.variances))

    @property
    def target_variance(self) -> float:
        """Variance an exact correction would have: ``pi^2/3 - C``."""
        return LOGISTIC_VARIANCE - self.C

    def sample(
        self, rng: np.random.Generator, size: int | Sequence[int] | None = None
    ) -> float | NDArray[np.float64]:
        """Draw ``V_corr`` using only ``rng``.

        Parameters
        ----------
        rng : numpy.random.Generator
            Source of all randomness (one uniform per draw, plus one standard normal per draw if
            any component has positive variance).
        size : int or tuple of int, optional
            Output shape. ``None`` (the per-iteration case) returns a Python float through a
            fast path without array allocation.

        Returns
        -------
        float or numpy.ndarray
            Draws of ``V_corr``.
        """
        if size is None:
            # One uniform picks component and sign together from the two-sided table.
            k = bisect.bisect_right(self._edges_list, rng.random())
            if self._has_spread:
                return self._signed_means_list[k] + self._signed_sd_list[k] * rng.standard_normal()
            return self._signed_means_list[k]
        idx = np.searchsorted(self._edges, rng.random(size), side="right")
        out = self._signed_means[idx]
        if self._has_spread:
            out = out + self._signed_sd[idx] * rng.standard_normal(size)
        return out

    def cdf(self, x: ArrayLike) -> NDArray[np.float64]:
        """CDF of ``V_corr`` (right-continuous at the atoms of zero-variance components).

        Parameters
        ----------
        x : array_like
            Evaluation points.

        Returns
        -------
        numpy.ndarray
            ``P(V_corr <= x)``, same shape as ``x``.
        """
        return self._mixture_cdf(x, self.variances)

    def convolved_cdf(self, x: ArrayLike) -> NDArray[np.float64]:
        """CDF of ``N(0, C) + V_corr``, the approximation of the Logistic(0, 1) CDF.

        Parameters
        ----------
        x : array_like
            Evaluation points.

        Returns
        -------
        numpy.ndarray
            ``P(N(0, C) + V_corr <= x)``, same shape as ``x``.
        """
        return self._mixture_cdf(x, self.C + self.variances)

    def _mixture_cdf(self, x: ArrayLike, variances: NDArray[np.float64]) -> NDArray[np.float64]:
        """CDF of the symmetric mixture with this correction's means and weights and the
        components' ``variances``."""
        x = np.asarray(x, dtype=np.float64)[..., None]
        return _pair_cdf(x, self.means, np.sqrt(variances)) @ self.weights

    def sup_cdf_error(self, grid: ArrayLike | None = None) -> float:
        """Largest ``|convolved_cdf(x) - expit(x)|`` over ``grid``.

        Parameters
        ----------
        grid : array_like, optional
            Evaluation points; default ``linspace(-40, 40, 200001)`` (spacing 4e-4, far finer
            than the error curve's features, which vary on the scale ``sqrt(C)``).

        Returns
        -------
        float
            Sup-norm distance to the logistic CDF on the grid.
        """
        x = np.linspace(*ERROR_GRID) if grid is None else np.asarray(grid, dtype=np.float64)
        # Chunked so memory stays bounded for many components.
        err = 0.0
        for chunk in np.array_split(x.ravel(), max(1, x.size // 20_000)):
            err = max(err, float(np.max(np.abs(self.convolved_cdf(chunk) - expit(chunk)))))
        return err

    def to_dict(self) -> dict[str, Any]:
        """Parameters as a JSON-serialisable dict (floats round-trip exactly through JSON)."""
        return {
            "C": self.C,
            "means": self.means.tolist(),
            "weights": self.weights.tolist(),
            "variances": self.variances.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CorrectionDistribution:
        """Inverse of :meth:`to_dict`; extra keys (metadata of the data file) are ignored."""
        return cls(
            C=data["C"], means=data["means"], weights=data["weights"], variances=data["variances"]
        )

    def to_json(self, **metadata: Any) -> str:
        """JSON text of :meth:`to_dict` plus any ``metadata`` keys."""
        return json.dumps({**self.to_dict(), **metadata}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> CorrectionDistribution:
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))


def _data_path() -> Path:
    """Writable path of the shipped data file inside the source tree (for regeneration)."""
    return Path(__file__).resolve().parent.parent / "data" / DATA_FILE


@functools.lru_cache(maxsize=1)
def _load_shipped() -> CorrectionDistribution:
    """Parse the shipped file once; cached apart from ``load_correction`` so that every spelling
    of ``C = 2`` (default, ``2``, ``2.0``, ``C=2``) returns the same object."""
    text = (importlib.resources.files("pymc_dp") / "data" / DATA_FILE).read_text("utf-8")
    return CorrectionDistribution.from_json(text)


def load_correction(C: float = 2.0) -> CorrectionDistribution:
    """Load the shipped correction distribution (cached; the result is immutable).

    Only ``C = 2`` is shipped, because the DP Barker test fixes ``C`` once per run and refitting
    takes about a second. For another ``C`` call
    :func:`~pymc_dp.step_methods.fit_barker_correction.fit_correction` (and keep the result).

    Parameters
    ----------
    C : float, default 2.0
        Variance of the Gaussian part of the logistic noise; must be 2.

    Returns
    -------
    CorrectionDistribution
        The fit stored in ``pymc_dp/data/barker_correction_C2.json``.

    Raises
    ------
    ValueError
        If ``C`` is invalid, or valid but not 2.
    """
    C = _check_C(C)
    if C != SHIPPED_C:
        raise ValueError(
            f"only C = {SHIPPED_C:g} is shipped, got `C`={C}; fit it instead with "
            f"`pymc_dp.step_methods.fit_barker_correction.fit_correction(C={C})` (about a second), "
            f"or save one with `python -m pymc_dp.step_methods.fit_barker_correction --C {C} "
            "--out PATH` and load it with `CorrectionDistribution.from_json`"
        )
    return _load_shipped()


def __getattr__(name: str):
    # the offline fitter moved out in 0.2.0 (deprecated here until 0.3.0)
    from pymc_dp._moved import moved_name

    fitter = "pymc_dp.step_methods.fit_barker_correction"
    return moved_name(__name__, name, {"fit_correction": fitter, "main": fitter})
