"""Exponential families with conjugate priors, as the noisy-sufficient-statistics method needs them.

Bernstein & Sheldon (2018), "Differentially Private Bayesian Inference for Exponential Families",
NeurIPS. A family supplies, for one person's record ``x``:

* the sufficient statistic ``t(x)`` and the L1 sensitivity of ``s = sum_i t(x_i)`` under
  replace-one neighbours (one person's record replaced, ``n`` public);
* the mean and covariance of ``t(x)`` given ``theta`` (Eq. 1; for truncated families Lemma 1 by
  PyTensor autodiff of the log-partition plus ``log(F(b) - F(a))``, see :func:`lemma1_function`);
* the conjugate update ``lambda' = Conjugate-Update(lambda, s, n)`` and a posterior draw;
* the valid range of ``s`` (where the normal approximation is restricted, Algorithms 1-2).

Bounded families (:class:`Binomial`, :class:`Multinomial`) release ``s`` itself. Unbounded
families (:class:`Poisson`, :class:`Exponential`, :class:`Normal`) are *truncated* (Sec. 3.3):
records outside public bounds ``[a, b]`` are redacted and ``s_hat = sum_i 1[a <= x_i <= b] x_i``
is released. The bounds are public inputs chosen without looking at the data (nor at the true
parameter, which the reference experiments used).

Every family here has ``t(x) = x`` (a scalar) except the multinomial (``t(x)`` = counts per
category). Shapes: a batch of ``B`` parameters is ``(B,)`` (scalar theta) or ``(B, K)``; a batch
of statistics is ``(B, dim)``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np
import pytensor
import pytensor.tensor as pt
from numpy.typing import ArrayLike, NDArray
from scipy.special import log_ndtr

from pymc_dp import compiling
from pymc_dp.boundary import DataRefusal
from pymc_dp.checks import check_count, check_positive

__all__ = [
    "Binomial",
    "Exponential",
    "Family",
    "Multinomial",
    "Normal",
    "Poisson",
    "TruncatedFamily",
    "family_from_dict",
    "get_family",
]

_TINY = np.finfo(np.float64).tiny

Array = NDArray[np.float64]


# --------------------------------------------------------------------------------- validation
def _data_array(data: ArrayLike, check_shape: Callable[[tuple[int, ...]], None]) -> Array:
    """``data`` as a float array, one row per person; a ValueError names ``data`` otherwise.
    ``check_shape`` is the family's :meth:`Family.check_shape`."""
    try:
        arr = np.asarray(data, dtype=np.float64)
    except (TypeError, ValueError):  # NumPy's message quotes the value it could not convert
        arr = None
    if arr is None:  # raised outside the except block: the original is not even its context
        raise ValueError(f"`data` must be a numeric array, got {type(data).__name__}")
    check_shape(arr.shape)
    if arr.shape[0] == 0:
        raise ValueError("`data` is empty: n must be >= 1")
    if not np.all(np.isfinite(arr)):
        raise DataRefusal("`data` contains NaN or inf", rank=_RANK_FINITE)
    return arr


#: The order of the per-row checks (:class:`~pymc_dp.boundary.DataRefusal`): over row partitions
#: the lowest rank found is reported, the check an in-memory call reports first.
_RANK_FINITE, _RANK_INTEGER, _RANK_SUPPORT = 1, 2, 3


def _check_shape(shape: tuple[int, ...], ndim: tuple[int, ...]) -> None:
    """From the shape alone (the whole data set's, also for rows held in a cluster)."""
    if len(shape) not in ndim:
        raise ValueError(
            f"`data` must have {' or '.join(map(str, ndim))} dimension(s) (one row per person), "
            f"got shape {tuple(shape)}"
        )


def _check_integers(arr: Array, what: str) -> None:
    if not np.all(arr == np.round(arr)):
        raise DataRefusal(
            f"`data` must hold integers ({what}); got non-integer values", rank=_RANK_INTEGER
        )


def _prior_array(prior: ArrayLike, size: int, names: str, family: str) -> Array:
    try:
        arr = np.asarray(prior, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"`prior` must be numeric ({names}) for {family}, got {prior!r}") from None
    if arr.size != size or not np.all(np.isfinite(arr)):
        raise ValueError(
            f"`prior` must be {size} finite numbers ({names}) for {family}, got {prior!r}"
        )
    return arr


def _check_positive_prior(arr: Array, names: tuple[str, ...]) -> Array:
    for value, name in zip(arr, names, strict=True):
        if not value > 0:
            raise ValueError(f"`prior` {name} must be a finite number > 0, got {value}")
    return arr


def _check_bounds(
    bounds: Any, family: str, support: tuple[float, float], integer: bool
) -> tuple[float, float]:
    if bounds is None:
        raise ValueError(
            f"`bounds` are required for the {family} family: its sufficient statistic is "
            "unbounded, so records outside public truncation bounds (a, b) are redacted before "
            "release. Choose them from public knowledge, never from the data."
        )
    try:
        a, b = (float(v) for v in bounds)
    except (TypeError, ValueError):
        raise ValueError(f"`bounds` must be a pair (a, b) of numbers, got {bounds!r}") from None
    if not (math.isfinite(a) and math.isfinite(b)):
        raise ValueError(f"`bounds` must be finite (the sensitivity grows with them), got {bounds}")
    if not a < b:
        raise ValueError(f"`bounds` (a, b) must satisfy a < b, got {bounds}")
    if a < support[0] or b > support[1]:
        raise ValueError(
            f"`bounds` {bounds} must lie inside the support [{support[0]}, {support[1]}] of the "
            f"{family} family"
        )
    if integer and not (a.is_integer() and b.is_integer()):
        raise ValueError(f"`bounds` must be integers for the {family} family, got {bounds}")
    return a, b


# --------------------------------------------------------------------------------- base classes
@dataclass(frozen=True)
class Family(ABC):
    """An exponential family with a conjugate prior (Bernstein & Sheldon 2018, Sec. 3).

    Subclasses are small frozen dataclasses holding the public structure of the model (number of
    trials or categories, truncation bounds, a known variance): never data, never a prior.
    """

    name: ClassVar[str]
    #: Name and hyperparameter order of the conjugate prior, e.g. ``"Beta(alpha, beta)"``.
    prior_name: ClassVar[str]
    truncated: ClassVar[bool] = False
    #: Truncation bounds (a field of the truncated families).
    bounds: ClassVar[tuple[float, float] | None] = None

    # ------------------------------------------------------------- release side
    @property
    @abstractmethod
    def dim(self) -> int:
        """Number of components of the released statistic."""

    @property
    @abstractmethod
    def sensitivity(self) -> float:
        """L1 sensitivity of the released statistic under replace-one neighbours."""

    def check_shape(self, shape: tuple[int, ...]) -> None:
        """Refuse data of this shape (one record per row); reads the shape only, so rows held
        in a cluster are checked once, from their metadata, whatever their partitions."""
        _check_shape(shape, (1,))

    @abstractmethod
    def statistic(self, data: ArrayLike) -> tuple[Array, int]:
        """Exact statistic ``sum_i t_hat(x_i)`` (shape ``(dim,)``) and ``n`` of ``data``.

        Raises ValueError for data outside the family's support (bounded families) or not
        representable (NaN, inf, wrong shape, empty). For truncated families, records outside
        the bounds are redacted, not refused: that is the release mechanism.
        """

    # ------------------------------------------------------------- inference side
    @property
    def theta_shape(self) -> tuple[int, ...]:
        return ()

    @abstractmethod
    def check_prior(self, prior: ArrayLike) -> Array:
        """Conjugate-prior hyperparameters as a float array (order of :attr:`prior_name`)."""

    @abstractmethod
    def sample_prior(self, rng: np.random.Generator, prior: Array, size: int) -> Array:
        """``size`` draws of theta from the prior."""

    @abstractmethod
    def conjugate_update(self, prior: Array, s: Array, n: int) -> Array:
        """Posterior hyperparameters ``(B, k)`` given full sufficient statistics ``s``."""

    @abstractmethod
    def sample_theta(self, rng: np.random.Generator, posterior: Array) -> Array:
        """One theta per row of ``posterior`` hyperparameters."""

    @abstractmethod
    def moments(self, theta: Array) -> tuple[Array, Array]:
        """Mean and (co)variance of ``t(x)`` for one untruncated record (Eq. 1)."""

    @abstractmethod
    def valid_range(self, n: int) -> tuple[float, float]:
        """Range of the full statistic ``s`` of ``n`` records (per component)."""

    @abstractmethod
    def simulate(self, rng: np.random.Generator, theta: Array, n: int) -> tuple[Array, Array]:
        """Draw data sets of ``n`` records, one per theta; return ``(s_hat, s)``, each ``(B, dim)``:
        the statistic the release mechanism sees and the full sufficient statistic."""

    def clip_statistic(self, s: Array, n: int) -> Array:
        """Project a noisy statistic onto the valid range (for initialisation and the naive
        baseline)."""
        lo, hi = self.valid_range(n)
        return np.clip(s, lo, hi)

    # ------------------------------------------------------------- description
    def describe(self) -> str:
        opts = ", ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))
        return f"{self.name}({opts})"

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["name"] = self.name
        return record


# --------------------------------------------------------------------------------- bounded
@dataclass(frozen=True)
class Binomial(Family):
    """Binomial(``trials``, theta) records with a Beta(alpha, beta) prior; Bernoulli is
    ``trials=1``.

    Each person contributes a count ``x_i`` in ``{0, ..., trials}``, ``t(x) = x``. Replacing one
    person moves ``s`` by at most ``trials``: L1 sensitivity ``trials``. Valid range of ``s``:
    ``[0, n trials]``. Conjugate update: ``Beta(alpha + s, beta + n trials - s)``.
    """

    trials: int = 1

    name: ClassVar[str] = "binomial"
    prior_name: ClassVar[str] = "Beta(alpha, beta)"

    def __post_init__(self) -> None:
        object.__setattr__(self, "trials", check_count(self.trials, "trials", minimum=1))

    @property
    def dim(self) -> int:
        return 1

    @property
    def sensitivity(self) -> float:
        return float(self.trials)

    def statistic(self, data: ArrayLike) -> tuple[Array, int]:
        x = _data_array(data, self.check_shape)
        _check_integers(x, f"counts of successes out of trials={self.trials}")
        if np.any((x < 0) | (x > self.trials)):
            raise DataRefusal(
                f"`data` outside the support {{0, ..., {self.trials}}} of the binomial family "
                f"with trials={self.trials}",
                rank=_RANK_SUPPORT,
            )
        return np.array([x.sum()]), int(x.shape[0])

    def check_prior(self, prior: ArrayLike) -> Array:
        arr = _prior_array(prior, 2, "alpha, beta", "the Beta prior")
        return _check_positive_prior(arr, ("alpha", "beta"))

    def sample_prior(self, rng: np.random.Generator, prior: Array, size: int) -> Array:
        return rng.beta(prior[0], prior[1], size=size)

    def conjugate_update(self, prior: Array, s: Array, n: int) -> Array:
        s = np.reshape(s, -1)
        return np.stack([prior[0] + s, prior[1] + n * self.trials - s], axis=-1)

    def sample_theta(self, rng: np.random.Generator, posterior: Array) -> Array:
        return rng.beta(posterior[:, 0], posterior[:, 1])

    def moments(self, theta: Array) -> tuple[Array, Array]:
        return self.trials * theta, self.trials * theta * (1.0 - theta)

    def valid_range(self, n: int) -> tuple[float, float]:
        return 0.0, float(n * self.trials)

    def simulate(self, rng: np.random.Generator, theta: Array, n: int) -> tuple[Array, Array]:
        s = rng.binomial(n * self.trials, theta).astype(np.float64)[:, None]
        return s, s


@dataclass(frozen=True)
class Multinomial(Family):
    """Multinomial(``trials``, theta) records over ``categories`` with a Dirichlet(alpha) prior;
    Categorical is ``trials=1``.

    ``t(x)`` is the vector of counts per category (one-hot for a categorical record). Replacing
    one person moves ``trials`` counts from some categories to others: L1 sensitivity
    ``2 trials`` (the reference code used 1, half the true sensitivity). The number of categories
    is public and must be given: deriving it from the data would leak. Valid range: each
    ``s_j`` in ``[0, n trials]`` with ``sum_j s_j = n trials``. Conjugate update:
    ``Dirichlet(alpha + s)``.
    """

    categories: int = 2
    trials: int = 1

    name: ClassVar[str] = "multinomial"
    prior_name: ClassVar[str] = "Dirichlet(alpha_1, ..., alpha_K)"

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "categories", check_count(self.categories, "categories", minimum=2)
        )
        object.__setattr__(self, "trials", check_count(self.trials, "trials", minimum=1))

    @property
    def dim(self) -> int:
        return self.categories

    @property
    def sensitivity(self) -> float:
        return 2.0 * self.trials

    @property
    def theta_shape(self) -> tuple[int, ...]:
        return (self.categories,)

    def check_shape(self, shape: tuple[int, ...]) -> None:
        _check_shape(shape, (1, 2))
        k = self.categories
        if len(shape) == 1 and self.trials != 1:
            raise ValueError(
                "`data` of category labels needs trials=1; pass an (n, categories) array of "
                f"counts for trials={self.trials}"
            )
        if len(shape) == 2 and shape[1] != k:
            raise ValueError(f"`data` must have {k} columns (categories), got shape {tuple(shape)}")

    def statistic(self, data: ArrayLike) -> tuple[Array, int]:
        x = _data_array(data, self.check_shape)
        k = self.categories
        if x.ndim == 1:
            _check_integers(x, "category labels")
            if np.any((x < 0) | (x >= k)):
                raise DataRefusal(
                    f"`data` outside the support {{0, ..., {k - 1}}} of the categorical family "
                    f"with categories={k}",
                    rank=_RANK_SUPPORT,
                )
            return np.bincount(x.astype(np.int64), minlength=k).astype(np.float64), x.shape[0]
        _check_integers(x, "counts per category")
        if np.any(x < 0) or np.any(x.sum(axis=1) != self.trials):
            raise DataRefusal(
                f"`data` outside the support of the multinomial family: every row must hold "
                f"non-negative counts summing to trials={self.trials}",
                rank=_RANK_SUPPORT,
            )
        return x.sum(axis=0), int(x.shape[0])

    def check_prior(self, prior: ArrayLike) -> Array:
        arr = _prior_array(prior, self.categories, "alpha_1, ..., alpha_K", "the Dirichlet prior")
        return _check_positive_prior(arr, tuple(f"alpha_{j + 1}" for j in range(arr.size)))

    def sample_prior(self, rng: np.random.Generator, prior: Array, size: int) -> Array:
        return self.sample_theta(rng, np.broadcast_to(prior, (size, self.categories)))

    def conjugate_update(self, prior: Array, s: Array, n: int) -> Array:
        return prior + np.reshape(s, (-1, self.categories))

    def sample_theta(self, rng: np.random.Generator, posterior: Array) -> Array:
        # Dirichlet by normalised gammas: Generator.dirichlet takes one alpha vector only
        g = np.maximum(rng.standard_gamma(posterior), _TINY)
        return g / g.sum(axis=-1, keepdims=True)

    def moments(self, theta: Array) -> tuple[Array, Array]:
        m = self.trials
        cov = -theta[..., :, None] * theta[..., None, :]
        idx = np.arange(self.categories)
        cov[..., idx, idx] += theta
        return m * theta, m * cov

    def valid_range(self, n: int) -> tuple[float, float]:
        return 0.0, float(n * self.trials)

    def simulate(self, rng: np.random.Generator, theta: Array, n: int) -> tuple[Array, Array]:
        p = theta / theta.sum(axis=-1, keepdims=True)
        s = rng.multinomial(n * self.trials, p).astype(np.float64)
        return s, s


# --------------------------------------------------------------------------------- truncated
@dataclass(frozen=True)
class TruncatedFamily(Family):
    """A univariate family with ``t(x) = x``, released after truncation to public bounds.

    The data owner redacts records outside ``[a, b]`` and releases
    ``s_hat = sum_i 1[a <= x_i <= b] x_i + Laplace`` (Bernstein & Sheldon 2018, Sec. 3.3). One
    record's ``t_hat(x)`` ranges over ``{0} U [a, b]``, so the L1 sensitivity is
    ``max(b, 0) - min(a, 0)`` (``b`` for non-negative data): the paper's bound
    ``max(max |t|, max |t(x) - t(y)|)``, which is tight here.
    """

    bounds: tuple[float, float] | None = None  # type: ignore[misc]

    truncated: ClassVar[bool] = True
    #: Support of x.
    support: ClassVar[tuple[float, float]] = (-math.inf, math.inf)
    integer: ClassVar[bool] = False

    def __post_init__(self) -> None:
        a, b = _check_bounds(self.bounds, self.name, self.support, self.integer)
        object.__setattr__(self, "bounds", (a, b))

    @property
    def dim(self) -> int:
        return 1

    @property
    def sensitivity(self) -> float:
        a, b = self.bounds
        return max(b, 0.0) - min(a, 0.0)

    def statistic(self, data: ArrayLike) -> tuple[Array, int]:
        x = _data_array(data, self.check_shape)
        lo, hi = self.support
        if self.integer:
            _check_integers(x, f"{self.name} counts")
        if np.any((x < lo) | (x > hi)):
            raise DataRefusal(
                f"`data` outside the support [{lo}, {hi}] of the {self.name} family",
                rank=_RANK_SUPPORT,
            )
        a, b = self.bounds
        inside = (x >= a) & (x <= b)
        return np.array([x[inside].sum()]), int(x.shape[0])

    # --- natural parameterisation, for Lemma 1 (t(x) = x for every family here)
    @abstractmethod
    def natural(self, theta: Array) -> Array:
        """Natural parameter eta(theta)."""

    @abstractmethod
    def pt_log_partition(self, eta: pt.TensorVariable) -> pt.TensorVariable:
        """Log-partition A(eta) of the untruncated family, elementwise (PyTensor)."""

    @abstractmethod
    def pt_log_mass(self, eta: pt.TensorVariable) -> pt.TensorVariable:
        """``log(F(b; eta) - F(a; eta))``, the log-probability of ``[a, b]`` (PyTensor)."""

    def truncated_moments(self, theta: ArrayLike) -> tuple[Array, Array, Array]:
        """``(log q, mu_hat, Sigma_hat)`` of ``x | a <= x <= b`` by Lemma 1 (PyTensor autodiff).

        ``q = F(b) - F(a)``; ``mu_hat`` and ``Sigma_hat`` are the first two derivatives in eta of
        ``A_hat(eta) = A(eta) + log(F(b; eta) - F(a; eta))`` (Bernstein & Sheldon 2018, Lemma 1,
        Eqs. 3-4). The function is compiled once per family and cached.
        """
        eta = np.atleast_1d(self.natural(np.asarray(theta, dtype=np.float64)))
        log_q, mean, var = lemma1_function(self)(eta)
        return log_q, mean, var

    def section_moments(
        self, theta: Array, n: int, *, covariance: bool = True
    ) -> tuple[Array, Array, Array, Array, Array]:
        """Joint normal approximation of ``(s_hat, s_out)``, the sums inside and outside
        ``[a, b]`` of ``n`` records: ``(m_in, m_out, v_in, v_out, c)``.

        Each record contributes ``z = (1_in x, 1_out x)``; ``s = sum_i z_i`` is a sum of iid
        vectors, so the CLT gives ``N(n E z, n Cov z)``. The diagonal blocks are the random-sum
        CLT of Proposition 1 / Algorithm 3 (``n q Sigma_hat + n q (1 - q) mu_hat^2``). The
        off-diagonal ``c = -n E[1_in x] E[1_out x]`` is there because a record inside is not
        outside: the section counts are multinomial, not independent. Algorithm 2 (and the
        reference code) treats the sections as independent (``covariance=False``, kept only to
        reproduce that miscalibration). The two outer sections ``(-inf, a)`` and ``(b, inf)`` are
        merged, which includes their mutual covariance automatically.
        """
        log_q, mu_in, var_in = self.truncated_moments(theta)
        q = np.exp(log_q)
        mu, var = self.moments(theta)
        e_in = q * mu_in
        e_out = mu - e_in
        m2_in = q * (var_in + mu_in * mu_in)
        m2_out = var + mu * mu - m2_in  # the outside section as the complement of the inside
        v_in = np.maximum(m2_in - e_in * e_in, 0.0)
        v_out = np.maximum(m2_out - e_out * e_out, 0.0)
        c = -e_in * e_out if covariance else np.zeros_like(e_in)
        return n * e_in, n * e_out, n * v_in, n * v_out, n * c

    def inside_range(self, n: int) -> tuple[float, float]:
        """Range of ``s_hat``: a sum of ``n`` terms in ``{0} U [a, b]``."""
        a, b = self.bounds
        return n * min(a, 0.0), n * max(b, 0.0)

    def valid_range(self, n: int) -> tuple[float, float]:
        lo, hi = self.support
        return n * lo, n * hi

    @abstractmethod
    def sample_data(self, rng: np.random.Generator, theta: Array, n: int) -> Array:
        """``(B, n)`` records, one data set per theta."""

    def simulate(self, rng: np.random.Generator, theta: Array, n: int) -> tuple[Array, Array]:
        theta = np.reshape(theta, -1)
        s_hat = np.empty((theta.size, 1))
        s = np.empty((theta.size, 1))
        a, b = self.bounds
        chunk = max(1, 2_000_000 // n)  # bound the memory of the (B, n) draws
        for start in range(0, theta.size, chunk):
            x = self.sample_data(rng, theta[start : start + chunk], n)
            s_hat[start : start + chunk, 0] = np.where((x >= a) & (x <= b), x, 0.0).sum(axis=1)
            s[start : start + chunk, 0] = x.sum(axis=1)
        return s_hat, s


class _GammaPrior:
    """Gamma(alpha, beta) prior (shape, rate) shared by the Poisson and exponential families."""

    prior_name: ClassVar[str] = "Gamma(alpha, beta) (shape, rate)"

    def check_prior(self, prior: ArrayLike) -> Array:
        arr = _prior_array(prior, 2, "alpha, beta (shape, rate)", "the Gamma prior")
        return _check_positive_prior(arr, ("alpha", "beta"))

    def sample_prior(self, rng: np.random.Generator, prior: Array, size: int) -> Array:
        return rng.gamma(prior[0], 1.0 / prior[1], size=size)

    def sample_theta(self, rng: np.random.Generator, posterior: Array) -> Array:
        return np.maximum(rng.gamma(posterior[:, 0], 1.0 / posterior[:, 1]), _TINY)


@dataclass(frozen=True)
class Poisson(_GammaPrior, TruncatedFamily):
    """Poisson(theta) counts with a Gamma(alpha, beta) prior, truncated to integer bounds [a, b].

    ``eta = log theta``, ``A(eta) = e^eta``; ``F(b) - F(a)`` is the finite sum of the pmf over
    ``a..b``, evaluated as a log-sum-exp (exact, no incomplete-gamma cancellation). L1
    sensitivity ``b``. Conjugate update: ``Gamma(alpha + s, beta + n)``.
    """

    name: ClassVar[str] = "poisson"
    support: ClassVar[tuple[float, float]] = (0.0, math.inf)
    integer: ClassVar[bool] = True

    def natural(self, theta: Array) -> Array:
        return np.log(theta)

    def pt_log_partition(self, eta: pt.TensorVariable) -> pt.TensorVariable:
        return pt.exp(eta)

    def pt_log_mass(self, eta: pt.TensorVariable) -> pt.TensorVariable:
        a, b = self.bounds
        x = pt.as_tensor_variable(np.arange(a, b + 1.0))
        terms = eta[:, None] * x[None, :] - pt.gammaln(x + 1.0)[None, :]
        return pt.logsumexp(terms, axis=1) - pt.exp(eta)

    def conjugate_update(self, prior: Array, s: Array, n: int) -> Array:
        s = np.reshape(s, -1)
        return np.stack([prior[0] + s, np.full_like(s, prior[1] + n)], axis=-1)

    def moments(self, theta: Array) -> tuple[Array, Array]:
        return theta, theta

    def sample_data(self, rng: np.random.Generator, theta: Array, n: int) -> Array:
        return rng.poisson(theta[:, None], size=(theta.size, n)).astype(np.float64)


@dataclass(frozen=True)
class Exponential(_GammaPrior, TruncatedFamily):
    """Exponential(rate theta) records with a Gamma(alpha, beta) prior, truncated to [a, b].

    ``eta = -theta``, ``A(eta) = -log(-eta)``, ``F(x) = 1 - e^{eta x}``, so
    ``log(F(b) - F(a)) = eta a + log(1 - e^{eta (b - a)})`` (``log1mexp``: no cancellation).
    L1 sensitivity ``b`` (``a >= 0``). Conjugate update: ``Gamma(alpha + n, beta + s)``.
    """

    name: ClassVar[str] = "exponential"
    support: ClassVar[tuple[float, float]] = (0.0, math.inf)

    def natural(self, theta: Array) -> Array:
        return -theta

    def pt_log_partition(self, eta: pt.TensorVariable) -> pt.TensorVariable:
        return -pt.log(-eta)

    def pt_log_mass(self, eta: pt.TensorVariable) -> pt.TensorVariable:
        a, b = self.bounds
        return eta * a + pt.log1mexp(eta * (b - a))

    def conjugate_update(self, prior: Array, s: Array, n: int) -> Array:
        s = np.reshape(s, -1)
        return np.stack([np.full_like(s, prior[0] + n), prior[1] + s], axis=-1)

    def moments(self, theta: Array) -> tuple[Array, Array]:
        return 1.0 / theta, 1.0 / (theta * theta)

    def sample_data(self, rng: np.random.Generator, theta: Array, n: int) -> Array:
        return rng.exponential(1.0 / theta[:, None], size=(theta.size, n))


def _pt_log_ndtr(z: pt.TensorVariable) -> pt.TensorVariable:
    """log Phi(z) in PyTensor, accurate in both tails and with a finite gradient everywhere.

    Each branch of the switch sees an argument clamped to its own region, so the branch not
    taken cannot send inf * 0 = nan into the gradient.
    """
    z_lo = pt.minimum(z, -1.0)
    z_hi = pt.maximum(z, -1.0)
    lower = pt.log(pt.erfcx(-z_lo / math.sqrt(2.0)) / 2.0) - z_lo * z_lo / 2.0
    upper = pt.log1p(-pt.erfc(z_hi / math.sqrt(2.0)) / 2.0)
    return pt.switch(z < -1.0, lower, upper)


@dataclass(frozen=True)
class Normal(TruncatedFamily):
    """Normal(theta, sigma^2) records with known ``sigma`` and a Normal(mu0, sigma0) prior on
    the mean, truncated to [a, b].

    ``t(x) = x``, ``eta = theta / sigma^2``, ``A(eta) = sigma^2 eta^2 / 2``;
    ``log(Phi(beta) - Phi(alpha))`` is evaluated on the side of the interval where both CDF
    values are small, in log space. L1 sensitivity ``max(b, 0) - min(a, 0)``. ``sigma`` is needed
    for inference only (a data owner may release without it). Conjugate update: precision
    ``1/sigma0^2 + n/sigma^2``, mean ``(mu0/sigma0^2 + s/sigma^2) / precision``.
    """

    sigma: float | None = None

    name: ClassVar[str] = "normal"
    prior_name: ClassVar[str] = "Normal(mu0, sigma0)"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sigma is not None:
            object.__setattr__(self, "sigma", check_positive(self.sigma, "sigma"))

    def _sigma(self) -> float:
        if self.sigma is None:
            raise ValueError(
                "the normal family needs its known `sigma` for inference (Normal(bounds, "
                "sigma=...)); it is not needed for the release"
            )
        return self.sigma

    def natural(self, theta: Array) -> Array:
        return theta / self._sigma() ** 2

    def pt_log_partition(self, eta: pt.TensorVariable) -> pt.TensorVariable:
        return self._sigma() ** 2 * eta * eta / 2.0

    def pt_log_mass(self, eta: pt.TensorVariable) -> pt.TensorVariable:
        sig = self._sigma()
        a, b = self.bounds
        mu = sig * sig * eta
        alpha, beta = (a - mu) / sig, (b - mu) / sig
        flip = (alpha + beta) > 0.0  # Phi(beta) - Phi(alpha) = Phi(-alpha) - Phi(-beta)
        lo = pt.switch(flip, -beta, alpha)
        hi = pt.switch(flip, -alpha, beta)
        log_hi = _pt_log_ndtr(hi)
        return log_hi + pt.log1mexp(_pt_log_ndtr(lo) - log_hi)

    def check_prior(self, prior: ArrayLike) -> Array:
        arr = _prior_array(prior, 2, "mu0, sigma0", "the Normal prior")
        _check_positive_prior(arr[1:], ("sigma0",))
        return arr

    def sample_prior(self, rng: np.random.Generator, prior: Array, size: int) -> Array:
        return rng.normal(prior[0], prior[1], size=size)

    def conjugate_update(self, prior: Array, s: Array, n: int) -> Array:
        s = np.reshape(s, -1)
        var = self._sigma() ** 2
        precision = 1.0 / prior[1] ** 2 + n / var
        mean = (prior[0] / prior[1] ** 2 + s / var) / precision
        return np.stack([mean, np.full_like(s, precision**-0.5)], axis=-1)

    def sample_theta(self, rng: np.random.Generator, posterior: Array) -> Array:
        return rng.normal(posterior[:, 0], posterior[:, 1])

    def moments(self, theta: Array) -> tuple[Array, Array]:
        theta = np.asarray(theta, dtype=np.float64)
        return theta, np.full_like(theta, self._sigma() ** 2)

    def sample_data(self, rng: np.random.Generator, theta: Array, n: int) -> Array:
        return rng.normal(theta[:, None], self._sigma(), size=(theta.size, n))

    def log_mass_numpy(self, theta: Array) -> Array:
        """``log(Phi(beta) - Phi(alpha))`` in NumPy (a second implementation, for tests)."""
        sig = self._sigma()
        a, b = self.bounds
        alpha, beta = (a - theta) / sig, (b - theta) / sig
        flip = alpha + beta > 0
        lo, hi = np.where(flip, -beta, alpha), np.where(flip, -alpha, beta)
        log_hi = log_ndtr(hi)
        return log_hi + np.log(-np.expm1(log_ndtr(lo) - log_hi))


# --------------------------------------------------------------------------------- registry
_TRUNCATED = {"poisson": Poisson, "exponential": Exponential, "normal": Normal}


def get_family(
    family: str | Family,
    bounds: tuple[float, float] | None = None,
    *,
    trials: int | None = None,
    categories: int | None = None,
    sigma: float | None = None,
) -> Family:
    """A :class:`Family` from a name and its public options.

    Parameters
    ----------
    family : str or Family
        ``"bernoulli"``, ``"binomial"``, ``"categorical"``, ``"multinomial"``, ``"poisson"``,
        ``"exponential"`` or ``"normal"``; a :class:`Family` is returned as is (after checking
        that ``bounds`` agree with it).
    bounds : (a, b), optional
        Truncation bounds; required for the truncated families, refused for the bounded ones.
    trials : int, optional
        Trials per person (binomial, multinomial; default 1).
    categories : int, optional
        Number of categories (categorical, multinomial; required, public).
    sigma : float, optional
        Known standard deviation (normal; needed for inference, not for release).
    """
    if isinstance(family, Family):
        if bounds is not None and tuple(map(float, bounds)) != family.bounds:
            raise ValueError(
                f"`bounds` {bounds} disagree with the bounds {family.bounds} of `family`"
            )
        if any(v is not None for v in (trials, categories, sigma)):
            raise ValueError("pass trials/categories/sigma to the Family, not alongside one")
        return family
    if not isinstance(family, str):
        raise ValueError(f"`family` must be a name or a Family, got {family!r}")
    key = family.lower()
    if key in _TRUNCATED:
        if trials is not None or categories is not None:
            raise ValueError(f"`trials` / `categories` do not apply to the {key} family")
        if key == "normal":
            return Normal(bounds=bounds, sigma=sigma)  # type: ignore[arg-type]
        if sigma is not None:
            raise ValueError(f"`sigma` does not apply to the {key} family")
        return _TRUNCATED[key](bounds=bounds)  # type: ignore[arg-type]
    if key not in ("bernoulli", "binomial", "categorical", "multinomial"):
        raise ValueError(
            f"unknown `family` {family!r}; expected one of bernoulli, binomial, categorical, "
            "multinomial, poisson, exponential, normal"
        )
    if bounds is not None:
        raise ValueError(
            f"`bounds` apply to the truncated families (poisson, exponential, normal) only: the "
            f"{key} statistic is bounded already"
        )
    if sigma is not None:
        raise ValueError(f"`sigma` does not apply to the {key} family")
    if key in ("bernoulli", "categorical") and trials not in (None, 1):
        raise ValueError(f"the {key} family has trials=1, got trials={trials}")
    trials = 1 if trials is None else trials
    if key in ("bernoulli", "binomial"):
        if categories is not None:
            raise ValueError(f"`categories` does not apply to the {key} family")
        return Binomial(trials=trials)
    if categories is None:
        raise ValueError(
            f"`categories` is required for the {key} family (public: never derived from data)"
        )
    return Multinomial(categories=categories, trials=trials)


def family_from_dict(record: dict[str, Any]) -> Family:
    """Inverse of :meth:`Family.to_dict`."""
    record = dict(record)
    name = record.pop("name")
    classes = {c.name: c for c in (Binomial, Multinomial, Poisson, Exponential, Normal)}
    if name not in classes:
        raise ValueError(f"unknown family {name!r} in release record")
    if record.get("bounds") is not None:
        record["bounds"] = tuple(record["bounds"])
    return classes[name](**record)


# ------------------------------------------------------------------ Lemma 1 by autodiff
# Truncating ``p(x | eta) = h(x) exp(eta t(x) - A(eta))`` to ``[a, b]`` keeps an exponential
# family with log-partition ``A_hat(eta) = A(eta) + log(F(b; eta) - F(a; eta))``, so (Eq. 1)
# ``mu_hat = A_hat'(eta)`` and ``Sigma_hat = A_hat''(eta)`` (Eqs. 3-4). ``A_hat`` is built in
# PyTensor and differentiated twice; the graph is elementwise over a batch of ``eta``, so the
# gradient of the *sum* gives every element's derivative and the Hessian is diagonal: two reverse
# passes cost O(batch), not the O(batch^2) of a full Jacobian.


@lru_cache(maxsize=32)
def lemma1_function(
    family: TruncatedFamily,
) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Compiled ``eta -> (log q, mu_hat, Sigma_hat)`` for one truncated family (cached per family).

    Parameters
    ----------
    family : TruncatedFamily
        Supplies ``A(eta)`` and ``log(F(b; eta) - F(a; eta))`` as PyTensor graphs.

    Returns
    -------
    callable
        Takes a float64 vector of natural parameters; returns three vectors of the same length.
    """
    eta = pt.dvector("eta")
    log_mass = family.pt_log_mass(eta)
    a_hat = family.pt_log_partition(eta) + log_mass  # Lemma 1
    mean = pytensor.grad(a_hat.sum(), eta)  # Eq. 3
    var = pytensor.grad(mean.sum(), eta)  # Eq. 4 (diagonal Hessian of a batch of scalars)
    fn = compiling.function([eta], [log_mass, mean, var], trust_input=True)

    def evaluate(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return tuple(fn(np.ascontiguousarray(x, dtype=np.float64)))  # type: ignore[return-value]

    return evaluate
