"""The audit's statistics: Clopper-Pearson bounds, the epsilon lower bound, :func:`audit`
itself, and the scalar Gaussian mechanism as a reference (pure NumPy and SciPy; see
:mod:`pymc_dp.audit`)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from pymc_dp.checks import _as_float, check_count, check_delta, check_positive

__all__ = [
    "AuditResult",
    "audit",
    "audit_gaussian",
    "clopper_pearson",
    "clopper_pearson_upper",
    "epsilon_lower_bound",
    "gaussian_mechanism",
]

Mechanism = Callable[[int, np.random.Generator], Any]
Statistic = Callable[[Any], float]


# --------------------------------------------------------------------------------------------
# Argument checks (the package's own, from pymc_dp.checks, which imports no PyMC;
# check_delta(x, name) is its open-unit-interval check, also used for alpha and confidence)
# --------------------------------------------------------------------------------------------


def _check_delta(x: Any) -> float:
    """``delta`` in [0, 1): unlike the accountant's :func:`check_delta`, the audit takes
    ``delta = 0`` (a pure-DP claim)."""
    if isinstance(x, numbers.Real) and not isinstance(x, bool) and x == 0:
        return 0.0
    try:
        return check_delta(x)
    except ValueError:
        raise ValueError(f"`delta` must be a number in [0, 1), got {x!r}") from None


def _check_counts(k: ArrayLike, n: ArrayLike, k_name: str, n_name: str) -> tuple[NDArray, NDArray]:
    k_arr = np.asarray(k)
    n_arr = np.asarray(n)
    for arr, name in ((k_arr, k_name), (n_arr, n_name)):
        if arr.dtype == bool or not (
            np.issubdtype(arr.dtype, np.integer)
            or (np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr)))
        ):
            raise ValueError(f"`{name}` must hold integer counts, got {arr!r}")
    k_arr = k_arr.astype(np.float64)
    n_arr = n_arr.astype(np.float64)
    if np.any(n_arr < 0) or np.any(k_arr < 0) or np.any(k_arr > n_arr):
        raise ValueError(f"need 0 <= `{k_name}` <= `{n_name}`, got {k!r} and {n!r}")
    return k_arr, n_arr


def _scalar_or_array(x: NDArray) -> float | NDArray[np.float64]:
    return float(x) if x.ndim == 0 else x


# --------------------------------------------------------------------------------------------
# Clopper-Pearson intervals and the epsilon lower bound
# --------------------------------------------------------------------------------------------


def clopper_pearson(
    k: ArrayLike, n: ArrayLike, alpha: float = 0.05
) -> tuple[float | NDArray[np.float64], float | NDArray[np.float64]]:
    r"""Two-sided Clopper-Pearson ("exact") confidence interval for a binomial proportion.

    Parameters
    ----------
    k : int or array_like of int
        Number of successes, ``0 <= k <= n``.
    n : int or array_like of int
        Number of trials (``n = 0`` gives the vacuous interval (0, 1)); broadcast against ``k``.
    alpha : float, default 0.05
        One minus the confidence level, in (0, 1); each tail gets ``alpha / 2``.

    Returns
    -------
    lo, hi : float or ndarray
        :math:`\mathrm{Beta}^{-1}(\alpha/2; k, n - k + 1)` (0 when ``k = 0``) and
        :math:`\mathrm{Beta}^{-1}(1 - \alpha/2; k + 1, n - k)` (1 when ``k = n``), the interval
        of ``scipy.stats.binomtest(k, n).proportion_ci(1 - alpha, method="exact")``.

    References
    ----------
    Clopper & Pearson (1934), Biometrika 26(4).
    """
    a = check_delta(alpha, "alpha")
    k_arr, n_arr = _check_counts(k, n, "k", "n")
    k_arr, n_arr = np.broadcast_arrays(k_arr, n_arr)
    lo = np.zeros(k_arr.shape)
    pos = k_arr > 0
    lo[pos] = stats.beta.ppf(a / 2.0, k_arr[pos], n_arr[pos] - k_arr[pos] + 1.0)
    return _scalar_or_array(lo), _scalar_or_array(_cp_upper(k_arr, n_arr, a / 2.0))


def clopper_pearson_upper(
    k: ArrayLike, n: ArrayLike, alpha: float = 0.05
) -> float | NDArray[np.float64]:
    r"""One-sided Clopper-Pearson upper confidence bound for a binomial proportion.

    Parameters
    ----------
    k : int or array_like of int
        Number of successes, ``0 <= k <= n``.
    n : int or array_like of int
        Number of trials (``n = 0`` gives 1); broadcast against ``k``.
    alpha : float, default 0.05
        One minus the confidence level, in (0, 1), all of it in the upper tail.

    Returns
    -------
    float or ndarray
        :math:`\mathrm{Beta}^{-1}(1 - \alpha; k + 1, n - k)`, and 1 when ``k = n``. For ``k = 0``
        this is :math:`1 - \alpha^{1/n}`: the bound never reaches 0, which is what caps the
        epsilon an audit with ``n`` runs can certify at about :math:`\log(n / \log(1/\alpha))`.
    """
    a = check_delta(alpha, "alpha")
    k_arr, n_arr = _check_counts(k, n, "k", "n")
    k_arr, n_arr = np.broadcast_arrays(k_arr, n_arr)
    return _scalar_or_array(_cp_upper(k_arr, n_arr, a))


def _cp_upper(k: NDArray, n: NDArray, alpha: float) -> NDArray[np.float64]:
    """Unchecked vectorised one-sided upper bound at level ``alpha`` (float arrays)."""
    out = np.ones(np.shape(k))
    inner = k < n
    out[inner] = stats.beta.ppf(1.0 - alpha, k[inner] + 1.0, n[inner] - k[inner])
    return out


def _bound_arrays(
    fp: NDArray, neg: NDArray, fn: NDArray, pos: NDArray, delta: float, alpha: float
) -> tuple[NDArray, NDArray, NDArray]:
    """Vectorised epsilon lower bound; returns (epsilon_lower, fpr_upper, fnr_upper)."""
    fpr_u = _cp_upper(fp, neg, alpha / 2.0)
    fnr_u = _cp_upper(fn, pos, alpha / 2.0)
    # fpr_u, fnr_u > 0 always (the upper bound of k = 0 is 1 - (alpha/2)^(1/n) > 0).
    with np.errstate(divide="ignore", invalid="ignore"):
        num1 = 1.0 - delta - fnr_u
        num2 = 1.0 - delta - fpr_u
        eps1 = np.where(num1 > 0, np.log(np.maximum(num1, 1e-300) / fpr_u), -np.inf)
        eps2 = np.where(num2 > 0, np.log(np.maximum(num2, 1e-300) / fnr_u), -np.inf)
    return np.maximum(0.0, np.maximum(eps1, eps2)), fpr_u, fnr_u


def epsilon_lower_bound(
    false_positives: int,
    negatives: int,
    false_negatives: int,
    positives: int,
    delta: float,
    confidence: float = 0.95,
) -> float:
    r"""Lower confidence bound on epsilon from the error counts of one fixed test.

    Parameters
    ----------
    false_positives : int
        Runs on :math:`D_0` that the test attributed to :math:`D_1`.
    negatives : int
        Runs on :math:`D_0` (``>= false_positives``).
    false_negatives : int
        Runs on :math:`D_1` that the test attributed to :math:`D_0`.
    positives : int
        Runs on :math:`D_1` (``>= false_negatives``).
    delta : float
        The delta of the claim being audited, in [0, 1).
    confidence : float, default 0.95
        Confidence level in (0, 1); :math:`\alpha = 1 - \text{confidence}` is split equally
        between the two one-sided Clopper-Pearson upper bounds (Bonferroni).

    Returns
    -------
    float
        :math:`\max(0, \log\frac{1-\delta-\overline{\mathrm{FNR}}}{\overline{\mathrm{FPR}}},
        \log\frac{1-\delta-\overline{\mathrm{FPR}}}{\overline{\mathrm{FNR}}})`, a term counting
        as :math:`-\infty` when its numerator is <= 0. If the test was fixed before the runs were
        made, then with probability at least ``confidence`` every :math:`(\varepsilon,
        \delta)`-DP mechanism has :math:`\varepsilon` at least this value (Jagielski, Ullman &
        Oprea 2020; Nasr et al. 2021). 0 when nothing can be claimed (e.g. rates 1/2 and 1/2, or
        no runs).
    """
    dlt = _check_delta(delta)
    conf = check_delta(confidence, "confidence")
    fp, neg = _check_counts(false_positives, negatives, "false_positives", "negatives")
    fn, pos = _check_counts(false_negatives, positives, "false_negatives", "positives")
    if fp.ndim or fn.ndim:
        raise ValueError("epsilon_lower_bound takes scalar counts")
    eps, _, _ = _bound_arrays(fp, neg, fn, pos, dlt, 1.0 - conf)
    return float(eps)


# --------------------------------------------------------------------------------------------
# The audit
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AuditResult:
    """Outcome of :func:`audit`.

    Attributes
    ----------
    epsilon_lower : float
        Lower confidence bound on epsilon (at ``delta``), valid with probability ``confidence``.
    claimed_epsilon : float or None
        Epsilon claimed for the mechanism (by the accountant), if given.
    delta : float
        Delta of the audited claim.
    confidence : float
        Confidence level of ``epsilon_lower``.
    trials : int
        Runs of the mechanism per data set (calibration and evaluation together).
    eval_trials : int
        Runs per data set on which the errors were counted (``trials`` when the threshold was
        given, the second ``trials - trials // 2`` runs otherwise).
    threshold : float
        The test says "D1" when score > threshold.
    fpr, fnr : float
        Observed false-positive / false-negative rates on the evaluation runs.
    fpr_upper, fnr_upper : float
        Their one-sided Clopper-Pearson upper bounds at level ``(1 - confidence) / 2`` each.
    """

    epsilon_lower: float
    claimed_epsilon: float | None = None
    delta: float
    confidence: float
    trials: int
    eval_trials: int
    threshold: float
    fpr: float
    fnr: float
    fpr_upper: float
    fnr_upper: float

    @property
    def passes(self) -> bool:
        """True when the audit found no violation: ``epsilon_lower <= claimed_epsilon``.

        Raises
        ------
        ValueError
            If no ``claimed_epsilon`` was given.
        """
        if self.claimed_epsilon is None:
            raise ValueError("no claimed_epsilon to compare with; pass claimed_epsilon to audit()")
        return self.epsilon_lower <= self.claimed_epsilon

    def __str__(self) -> str:
        verdict = ""
        if self.claimed_epsilon is not None:
            tag = "PASS" if self.passes else "FAIL"
            verdict = f" vs claimed {self.claimed_epsilon:.4g} [{tag}]"
        return (
            f"epsilon >= {self.epsilon_lower:.4g} at delta={self.delta:.3g} "
            f"({100 * self.confidence:.4g}% conf.){verdict}; threshold={self.threshold:.4g}, "
            f"FPR={self.fpr:.4g} (<= {self.fpr_upper:.4g}), "
            f"FNR={self.fnr:.4g} (<= {self.fnr_upper:.4g}) on {self.eval_trials} of "
            f"{self.trials} runs per data set"
        )


def _run(
    mechanism: Mechanism,
    statistic: Statistic | None,
    which: int,
    rng: np.random.Generator,
    size: int,
) -> NDArray[np.float64]:
    """Scores of ``size`` runs of ``mechanism`` on D_which (batched when possible)."""
    batch = getattr(mechanism, "batch", None)
    if batch is not None:
        outputs = batch(which, rng, size)
        if len(outputs) != size:
            raise ValueError(
                f"mechanism.batch(which, rng, {size}) returned {len(outputs)} outputs, not {size}"
            )
        if statistic is None:
            scores = np.asarray(outputs, dtype=np.float64).reshape(size)
        elif getattr(statistic, "batch", None) is not None:
            scores = np.asarray(statistic.batch(outputs), dtype=np.float64).reshape(size)
        else:
            scores = np.fromiter((statistic(o) for o in outputs), np.float64, count=size)
    else:
        score = float if statistic is None else statistic
        scores = np.fromiter((score(mechanism(which, rng)) for _ in range(size)), np.float64, size)
    if np.any(np.isnan(scores)):
        raise ValueError(f"the statistic returned NaN on a run on D{which}")
    return scores


def _error_counts(
    scores0: NDArray, scores1: NDArray, thresholds: NDArray
) -> tuple[NDArray, NDArray]:
    """(false positives, false negatives) of the tests "D1 iff score > t" for each t."""
    s0 = np.sort(scores0)
    s1 = np.sort(scores1)
    fp = s0.size - np.searchsorted(s0, thresholds, side="right")
    fn = np.searchsorted(s1, thresholds, side="right")
    return fp.astype(np.float64), fn.astype(np.float64)


def _candidate_thresholds(scores0: NDArray, scores1: NDArray, grid_size: int) -> NDArray:
    """Candidate thresholds: order statistics of each sample at ranks spaced geometrically from
    both of its ends, so that the error counts the bound is sensitive to (FP and n - FP on D0,
    FN and n - FN on D1) are resolved to a few per cent wherever they are small."""
    per_end = max(2, grid_size // 4)
    pieces = []
    for scores in (scores0, scores1):
        ordered = np.sort(scores)
        n = ordered.size
        ranks = np.unique(np.round(np.geomspace(1, n, per_end)).astype(np.int64)) - 1
        pieces.append(ordered[np.unique(np.concatenate([ranks, n - 1 - ranks]))])
    return np.unique(np.concatenate(pieces))


def audit(
    mechanism: Mechanism,
    statistic: Statistic | None = None,
    *,
    trials: int,
    delta: float,
    claimed_epsilon: float | None = None,
    confidence: float = 0.95,
    threshold: float | None = None,
    seed: int | np.random.Generator | np.random.SeedSequence | None = None,
    grid_size: int = 1000,
) -> AuditResult:
    r"""Empirical lower bound on the epsilon of a mechanism from a threshold test on its outputs.

    Parameters
    ----------
    mechanism : callable
        ``mechanism(which, rng)`` runs the mechanism once on :math:`D_\text{which}` (``which`` in
        {0, 1}) with fresh randomness drawn from the ``numpy.random.Generator`` ``rng`` and
        returns its output. All randomness of a run must come from ``rng`` (or be otherwise
        fresh): runs must be independent. If ``mechanism`` has an attribute ``batch``,
        ``mechanism.batch(which, rng, size)`` must return ``size`` independent outputs (a
        sequence or an array whose first axis indexes runs) and is used instead.
    statistic : callable, optional
        ``statistic(output) -> float``, the score of one output; larger scores should point to
        :math:`D_1`. Default ``float(output)``. If it has an attribute ``batch``,
        ``statistic.batch(outputs)`` scores a whole batch of outputs at once (used only with a
        batched mechanism). NaN scores are rejected; infinite ones are fine.
    trials : int
        Runs of the mechanism on *each* data set (``>= 1``, and ``>= 2`` without ``threshold``).
    delta : float
        The delta of the claim being audited, in [0, 1).
    claimed_epsilon : float, optional
        The epsilon the accountant claims at ``delta``; only recorded (see
        :attr:`AuditResult.passes`).
    confidence : float, default 0.95
        Confidence level of the lower bound, in (0, 1).
    threshold : float, optional
        Threshold of the test "D1 iff score > threshold". If given, all runs count errors. If
        None, the first ``trials // 2`` runs on each data set (made first: on D0, then on D1) are a
        calibration set on which the threshold maximising the lower bound (at the Bonferroni
        level ``(1 - confidence) / m`` for the ``m`` candidates) is chosen among about
        ``grid_size`` candidate order statistics of the calibration scores; the errors are
        then counted only on the remaining ``trials - trials // 2`` runs on each data set (made
        next: on D0, then on D1), so the bound keeps its confidence level.
    seed : int, Generator, SeedSequence or None
        Seeds ``numpy.random.default_rng``; D0 and D1 runs use two independent spawned streams.
    grid_size : int, default 1000
        Number of candidate thresholds: order statistics of the calibration scores of each data
        set at ranks spaced geometrically from both ends (a quarter of the grid per end).

    Returns
    -------
    AuditResult
        With probability at least ``confidence`` (over the runs),
        ``epsilon_lower <= epsilon`` for every :math:`(\varepsilon, \delta)` the mechanism
        satisfies on this pair of data sets.

    Notes
    -----
    The bound can never exceed about :math:`\log(n / \log(2/\alpha))` with :math:`n` evaluation
    runs per data set (an observed FPR of 0 still has upper bound :math:`1 - (\alpha/2)^{1/n}`),
    and it is only as strong as the data sets and the statistic. By Neyman-Pearson the best
    statistic is (a monotone function of) the likelihood ratio of the two output distributions;
    Nasr et al. (2021) find that only the strongest adversaries (worst-case neighbours, every
    intermediate release observed) come close to the claimed epsilon of DP-SGD.

    References
    ----------
    Jagielski, Ullman & Oprea (2020), NeurIPS; Nasr, Song, Thakurta, Papernot & Carlini (2021),
    IEEE S&P.
    """
    dlt, conf, n, grid, claimed_epsilon, threshold = _check_audit_arguments(
        mechanism, statistic, trials, delta, claimed_epsilon, confidence, threshold, grid_size
    )
    alpha = 1.0 - conf
    rng0, rng1 = np.random.default_rng(seed).spawn(2)
    n_eval = n
    if threshold is None:
        n_cal = n // 2
        n_eval = n - n_cal
        threshold = _calibrated_threshold(mechanism, statistic, rng0, rng1, n_cal, grid, dlt, alpha)
    return AuditResult(
        claimed_epsilon=claimed_epsilon,
        delta=dlt,
        confidence=conf,
        trials=n,
        **_evaluation(mechanism, statistic, rng0, rng1, n_eval, threshold, dlt, alpha),
    )


def _evaluation(
    mechanism: Mechanism,
    statistic: Statistic | None,
    rng0: np.random.Generator,
    rng1: np.random.Generator,
    n_eval: int,
    threshold: float,
    delta: float,
    alpha: float,
) -> dict[str, Any]:
    """The :class:`AuditResult` fields measured on ``n_eval`` evaluation runs per data set (on
    D0, then on D1): fresh runs, independent of the threshold."""
    ev0 = _run(mechanism, statistic, 0, rng0, n_eval)
    ev1 = _run(mechanism, statistic, 1, rng1, n_eval)
    fp, fn = _error_counts(ev0, ev1, np.array([threshold]))
    ne = np.array([float(n_eval)])
    eps, fpr_u, fnr_u = _bound_arrays(fp, ne, fn, ne, delta, alpha)
    return {
        "epsilon_lower": float(eps[0]),
        "eval_trials": n_eval,
        "threshold": threshold,
        "fpr": float(fp[0]) / n_eval,
        "fnr": float(fn[0]) / n_eval,
        "fpr_upper": float(fpr_u[0]),
        "fnr_upper": float(fnr_u[0]),
    }


def _check_audit_arguments(
    mechanism: Any,
    statistic: Any,
    trials: Any,
    delta: Any,
    claimed_epsilon: Any,
    confidence: Any,
    threshold: Any,
    grid_size: Any,
) -> tuple[float, float, int, int, float | None, float | None]:
    """The checked ``(delta, confidence, trials, grid_size, claimed_epsilon, threshold)`` of
    :func:`audit`."""
    if not callable(mechanism):
        raise TypeError("`mechanism` must be callable as mechanism(which, rng)")
    if statistic is not None and not callable(statistic):
        raise TypeError("`statistic` must be callable as statistic(output)")
    dlt = _check_delta(delta)
    conf = check_delta(confidence, "confidence")
    n = check_count(trials, "trials", 1 if threshold is not None else 2)
    grid = check_count(grid_size, "grid_size", 2)
    if claimed_epsilon is not None:
        claimed_epsilon = _as_float(claimed_epsilon, "claimed_epsilon")
        if not claimed_epsilon >= 0:
            raise ValueError(f"`claimed_epsilon` must be >= 0, got {claimed_epsilon!r}")
    if threshold is not None:
        threshold = _as_float(threshold, "threshold")
        if math.isnan(threshold):
            raise ValueError("`threshold` must not be NaN")
    return dlt, conf, n, grid, claimed_epsilon, threshold


def _calibrated_threshold(
    mechanism: Mechanism,
    statistic: Statistic | None,
    rng0: np.random.Generator,
    rng1: np.random.Generator,
    n_cal: int,
    grid: int,
    delta: float,
    alpha: float,
) -> float:
    """The threshold maximising the lower bound on ``n_cal`` calibration runs per data set (on
    D0, then on D1), among the candidate order statistics of their scores."""
    cal0 = _run(mechanism, statistic, 0, rng0, n_cal)
    cal1 = _run(mechanism, statistic, 1, rng1, n_cal)
    candidates = _candidate_thresholds(cal0, cal1, grid)
    fp_c, fn_c = _error_counts(cal0, cal1, candidates)
    n_c = np.full(candidates.shape, float(n_cal))
    # Bonferroni over the candidates: a lucky sparse tail does not win (module docstring).
    eps_c, _, _ = _bound_arrays(fp_c, n_c, fn_c, n_c, delta, alpha / candidates.size)
    return float(candidates[int(np.argmax(eps_c))])


# --------------------------------------------------------------------------------------------
# Reference mechanism: the scalar Gaussian mechanism
# --------------------------------------------------------------------------------------------


class _GaussianMechanism:
    """Releases q(D) + N(0, noise_std^2) with q(D0) = 0 and q(D1) = sensitivity."""

    def __init__(self, sensitivity: float, noise_std: float) -> None:
        self.sensitivity = sensitivity
        self.noise_std = noise_std

    def __call__(self, which: int, rng: np.random.Generator) -> float:
        return float(self.batch(which, rng, 1)[0])

    def batch(self, which: int, rng: np.random.Generator, size: int) -> NDArray[np.float64]:
        if which not in (0, 1):
            raise ValueError(f"`which` must be 0 or 1, got {which!r}")
        return which * self.sensitivity + self.noise_std * rng.standard_normal(size)

    def __repr__(self) -> str:
        return f"gaussian_mechanism(sensitivity={self.sensitivity!r}, noise_std={self.noise_std!r})"


def gaussian_mechanism(sensitivity: float, noise_std: float) -> Mechanism:
    r"""Reference scalar Gaussian mechanism for :func:`audit`.

    Parameters
    ----------
    sensitivity : float
        :math:`|q(D_1) - q(D_0)|` (finite, > 0); :math:`q(D_0) = 0`, :math:`q(D_1)` = sensitivity.
    noise_std : float
        Standard deviation of the added noise (finite, > 0).

    Returns
    -------
    callable
        ``mechanism(which, rng) -> float`` releasing :math:`q(D_\text{which}) + N(0, \sigma^2)`
        (:math:`\sigma` = ``noise_std``), with a vectorised ``mechanism.batch(which, rng, size)``.
        Its exact privacy profile is that of noise multiplier ``noise_std / sensitivity`` (Balle &
        Wang 2018), and its likelihood ratio is increasing in the output, so the default statistic
        (the output itself) gives the optimal tests.
    """
    sens = check_positive(sensitivity, "sensitivity")
    std = check_positive(noise_std, "noise_std")
    return _GaussianMechanism(sens, std)


def audit_gaussian(
    sensitivity: float,
    noise_std: float,
    trials: int,
    delta: float,
    *,
    claimed_epsilon: float | None = None,
    **options: Any,
) -> AuditResult:
    r"""Audit the reference scalar Gaussian mechanism (see :func:`gaussian_mechanism`).

    Parameters
    ----------
    sensitivity, noise_std : float
        The released statistic differs by ``sensitivity`` between D0 and D1; the noise has this
        standard deviation.
    trials, delta
        As in :func:`audit`.
    claimed_epsilon : float, optional
        Defaults to the exact epsilon at ``delta`` of one Gaussian release with noise multiplier
        ``s = noise_std / sensitivity`` (:func:`pymc_dp.accounting.gaussian_epsilon` with
        :math:`\mu = 1/(2 s^2)`; ``inf`` when ``delta = 0``). Pass a value to audit a wrong claim.
    **options
        ``confidence``, ``threshold``, ``seed``, ``grid_size``: as in :func:`audit` (its defaults).

    Returns
    -------
    AuditResult
    """
    unknown = sorted(set(options) - {"confidence", "threshold", "seed", "grid_size"})
    if unknown:
        raise TypeError(f"audit_gaussian() got unexpected keyword argument(s) {unknown}")
    mech = gaussian_mechanism(sensitivity, noise_std)
    dlt = _check_delta(delta)
    if claimed_epsilon is None:
        if dlt == 0.0:
            claimed_epsilon = math.inf  # the Gaussian mechanism is not pure DP
        else:
            from pymc_dp.accounting import gaussian_epsilon

            s = mech.noise_std / mech.sensitivity
            claimed_epsilon = float(gaussian_epsilon(1.0 / (2.0 * s * s), dlt))
    return audit(mech, trials=trials, delta=dlt, claimed_epsilon=claimed_epsilon, **options)
