r"""Empirical privacy audits: statistical lower bounds on the epsilon of a randomised mechanism.

An audit runs a mechanism :math:`M` many times on two neighbouring data sets :math:`D_0` and
:math:`D_1` (differing in one row, chosen as adversarially as the caller can), scores every output
with a statistic, and uses a threshold test "say :math:`D_1` when score > threshold". If :math:`M`
is :math:`(\varepsilon, \delta)`-DP, *every* such test has false-positive rate (FPR, saying
:math:`D_1` on a run on :math:`D_0`) and false-negative rate (FNR) with

.. math::

    \mathrm{FPR} + e^{\varepsilon}\,\mathrm{FNR} \ge 1 - \delta, \qquad
    \mathrm{FNR} + e^{\varepsilon}\,\mathrm{FPR} \ge 1 - \delta

(the hypothesis-testing view of DP: Kairouz, Oh & Viswanath 2015; Jagielski, Ullman & Oprea
2020), hence

.. math::

    \varepsilon \ge \max\left(\log\frac{1 - \delta - \mathrm{FNR}}{\mathrm{FPR}},
        \log\frac{1 - \delta - \mathrm{FPR}}{\mathrm{FNR}}\right).

The rates are only estimated, so they are replaced by one-sided Clopper-Pearson upper confidence
bounds :math:`\overline{\mathrm{FPR}}, \overline{\mathrm{FNR}}` at level :math:`\alpha/2` each
(Bonferroni, :math:`\alpha = 1 - \text{confidence}`); the right-hand side is decreasing in both
rates, so with probability at least ``confidence`` the bound computed from the upper bounds is a
valid lower bound on the true epsilon of :math:`M` (at that delta). An audit whose lower bound
exceeds the epsilon claimed by the accountant has found a privacy bug (or, with probability at most
:math:`\alpha`, a statistical fluke); an audit whose bound stays below the claim proves nothing
about the mechanism, only that this test on these data sets found no violation (Nasr et al. 2021
show how close such bounds get to the claim with worst-case data sets and tests).

When the threshold is not given it is chosen on a separate *calibration* half of the runs (the one
that maximises the lower bound computed on that half) and the errors are counted on the other,
independent, *evaluation* half only: choosing the threshold on the data it is evaluated on would
make the confidence statement invalid (the maximum over thresholds of many bounds is biased up).
On the calibration half the candidates are compared by their bounds at the Bonferroni level
:math:`\alpha / m` for :math:`m` candidates (simultaneously valid for all of them), so that a
threshold in a sparse tail whose few errors were lucky does not win: with the plain level, audits
of mechanisms whose best tests are many (the Laplace mechanism: every threshold is optimal)
occasionally picked such a threshold and certified almost nothing on the evaluation half (2 of 40
seeds gave 0.02 and 0.05 instead of ~0.94 for a Laplace mechanism with epsilon = 1 at 1.2e4
evaluation runs; with the corrected level all 40 gave 0.90-0.99, and audits of the Gaussian
mechanism kept their median and lost their worst cases).

Adapters turn the package's own mechanisms into audit mechanisms: :func:`penalty_release`
(:class:`~pymc_dp.DPPenalty`, :class:`~pymc_dp.DPMinibatchPenalty`), :func:`gradient_release`
(one noisy gradient of :class:`~pymc_dp.DPHMC`), :func:`barker_iteration`
(:class:`~pymc_dp.DPBarker`), :func:`expfam_release` (:func:`pymc_dp.expfam.release`) and
:func:`sparse_vector` (ABCDP's private stage); each carries the epsilon the package's accountant
claims for what it runs (``mechanism.claimed_epsilon``, see also :func:`claimed_epsilon`) and the
delta of that claim::

    mech = pdp.audit.penalty_release(step0, step1, q, q_new)
    result = pdp.audit.audit(mech, trials=200_000, delta=mech.delta,
                             claimed_epsilon=mech.claimed_epsilon, seed=0)

The core is pure numpy/scipy; the adapters import PyMC-dependent parts of the package only when
called.

References
----------
.. [1] Jagielski, M., Ullman, J. and Oprea, A. (2020). Auditing differentially private machine
   learning: how private is private SGD? NeurIPS.
.. [2] Nasr, M., Song, S., Thakurta, A., Papernot, N. and Carlini, N. (2021). Adversary
   instantiation: lower bounds for differentially private machine learning. IEEE S&P.
.. [3] Kairouz, P., Oh, S. and Viswanath, P. (2015). The composition theorem for differential
   privacy. ICML.
.. [4] Clopper, C. J. and Pearson, E. S. (1934). The use of confidence or fiducial limits
   illustrated in the case of the binomial. Biometrika 26(4).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
    "barker_iteration",
    "claimed_epsilon",
    "clopper_pearson",
    "clopper_pearson_upper",
    "epsilon_lower_bound",
    "expfam_release",
    "first_acceptance",
    "gaussian_mechanism",
    "gradient_release",
    "one_iteration_plan",
    "penalty_release",
    "sparse_vector",
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
    if not callable(mechanism):
        raise TypeError("`mechanism` must be callable as mechanism(which, rng)")
    if statistic is not None and not callable(statistic):
        raise TypeError("`statistic` must be callable as statistic(output)")
    dlt = _check_delta(delta)
    conf = check_delta(confidence, "confidence")
    alpha = 1.0 - conf
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

    rng0, rng1 = np.random.default_rng(seed).spawn(2)
    n_eval = n
    if threshold is None:
        n_cal = n // 2
        n_eval = n - n_cal
        cal0 = _run(mechanism, statistic, 0, rng0, n_cal)
        cal1 = _run(mechanism, statistic, 1, rng1, n_cal)
        candidates = _candidate_thresholds(cal0, cal1, grid)
        fp_c, fn_c = _error_counts(cal0, cal1, candidates)
        n_c = np.full(candidates.shape, float(n_cal))
        # Bonferroni over the candidates: a lucky sparse tail does not win (module docstring).
        eps_c, _, _ = _bound_arrays(fp_c, n_c, fn_c, n_c, dlt, alpha / candidates.size)
        threshold = float(candidates[int(np.argmax(eps_c))])
        del cal0, cal1  # the calibration runs play no further part
    # Evaluation runs: fresh, independent of the threshold.
    ev0 = _run(mechanism, statistic, 0, rng0, n_eval)
    ev1 = _run(mechanism, statistic, 1, rng1, n_eval)
    fp, fn = _error_counts(ev0, ev1, np.array([threshold]))
    ne = np.array([float(n_eval)])
    eps, fpr_u, fnr_u = _bound_arrays(fp, ne, fn, ne, dlt, alpha)
    return AuditResult(
        epsilon_lower=float(eps[0]),
        claimed_epsilon=claimed_epsilon,
        delta=dlt,
        confidence=conf,
        trials=n,
        eval_trials=n_eval,
        threshold=threshold,
        fpr=float(fp[0]) / n_eval,
        fnr=float(fn[0]) / n_eval,
        fpr_upper=float(fpr_u[0]),
        fnr_upper=float(fnr_u[0]),
    )


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
    confidence: float = 0.95,
    threshold: float | None = None,
    seed: int | np.random.Generator | np.random.SeedSequence | None = None,
    grid_size: int = 1000,
) -> AuditResult:
    r"""Audit the reference scalar Gaussian mechanism (see :func:`gaussian_mechanism`).

    Parameters
    ----------
    sensitivity, noise_std : float
        The released statistic differs by ``sensitivity`` between D0 and D1; the noise has this
        standard deviation.
    trials, delta, confidence, threshold, seed, grid_size
        As in :func:`audit`.
    claimed_epsilon : float, optional
        Defaults to the exact epsilon at ``delta`` of one Gaussian release with noise multiplier
        ``s = noise_std / sensitivity`` (:func:`pymc_dp.accounting.gaussian_epsilon` with
        :math:`\mu = 1/(2 s^2)`; ``inf`` when ``delta = 0``). Pass a value to audit a wrong claim.

    Returns
    -------
    AuditResult
    """
    mech = gaussian_mechanism(sensitivity, noise_std)
    dlt = _check_delta(delta)
    if claimed_epsilon is None:
        if dlt == 0.0:
            claimed_epsilon = math.inf  # the Gaussian mechanism is not pure DP
        else:
            from pymc_dp.accounting import gaussian_epsilon

            s = mech.noise_std / mech.sensitivity
            claimed_epsilon = float(gaussian_epsilon(1.0 / (2.0 * s * s), dlt))
    return audit(
        mech,
        trials=trials,
        delta=dlt,
        claimed_epsilon=claimed_epsilon,
        confidence=confidence,
        threshold=threshold,
        seed=seed,
        grid_size=grid_size,
    )


# --------------------------------------------------------------------------------------------
# Adapters: the package's own mechanisms as audit() mechanisms
# --------------------------------------------------------------------------------------------
#
# Each adapter returns a mechanism object for :func:`audit` with ``__call__(which, rng)``, a
# ``batch(which, rng, size)`` method, and two attributes: ``claimed_epsilon`` (what the package's
# accountant claims for exactly the release that is run, at ``delta``) and ``delta``. The step
# adapters run the steps' own code (``_ratio`` and the penalty test, ``_noisy_grad``,
# ``_iterate``) on a step built on D0 and a step built on D1, with every random draw taken from
# the audit's generator: each batch of runs gets a secret NoiseSource seeded from it (successive
# runs draw successive, independent noise from that stream) and the steps' own state (plan, noise
# source, prior cache, proposal) is lent to the run and restored afterwards.


@contextmanager
def _lent(obj: Any, **attrs: Any) -> Iterator[None]:
    """Set attributes of ``obj`` for the duration of a block; restore (or delete) them after."""
    missing = object()
    saved = {name: obj.__dict__.get(name, missing) for name in attrs}
    try:
        for name, value in attrs.items():
            setattr(obj, name, value)
        yield
    finally:
        for name, value in saved.items():
            if value is missing:
                obj.__dict__.pop(name, None)
            else:
                setattr(obj, name, value)


class _CachedKernel:
    """A compiled PyTensor kernel memoised on its inputs (the kernels are pure functions).

    Outputs are copied in and out of the cache (PyTensor may reuse its output buffers), so a
    cached call returns exactly what a fresh call would. A cache of at most ``maxsize`` entries:
    minibatch kernels, whose row indices change on every call, simply miss.
    """

    def __init__(self, kernel: Callable, maxsize: int = 256) -> None:
        self.kernel = kernel
        self.maxsize = maxsize
        self.cache: dict[tuple, list[np.ndarray]] = {}

    def __call__(self, *args: Any) -> list[np.ndarray]:
        key = tuple((a.dtype.str, a.shape, a.tobytes()) for a in map(np.asarray, args))
        hit = self.cache.get(key)
        if hit is None:
            hit = [np.array(o, copy=True) for o in self.kernel(*args)]
            if len(self.cache) < self.maxsize:
                self.cache[key] = hit
        return [o.copy() for o in hit]


def _check_which(which: Any) -> int:
    if which not in (0, 1) or isinstance(which, bool):
        raise ValueError(f"`which` must be 0 or 1, got {which!r}")
    return int(which)


def _point(step: Any, q: ArrayLike, name: str) -> NDArray:
    """A raveled point of ``step``'s model, in the dtype its compiled kernels expect."""
    arr = np.array(q, dtype=step.likelihood._q.dtype).reshape(-1)
    if arr.shape != (step.likelihood.dim,) or not np.all(np.isfinite(arr)):
        raise ValueError(
            f"`{name}` must hold {step.likelihood.dim} finite value(s) (a raveled point of the "
            f"model), got {q!r}"
        )
    return arr


def one_iteration_plan(step: Any) -> Any:
    """The run plan of one iteration of one chain of ``step``: ``step.plan(tune=0, draws=1,
    chains=1)``.

    Its ``scale`` is the noise a step built with ``epsilon`` calibrates for a single iteration,
    and its ``ledger.epsilon`` is what the accountant claims for that iteration at
    ``step.delta``.
    """
    return step.plan(tune=0, draws=1, chains=1)


def claimed_epsilon(step: Any, plan: Any = None, *, release: str = "iteration") -> float:
    r"""Epsilon the package's accountant claims (at ``step.delta``) for one audited release.

    Parameters
    ----------
    step : DPStep
        A DP step (:class:`~pymc_dp.DPPenalty`, :class:`~pymc_dp.DPMinibatchPenalty`,
        :class:`~pymc_dp.DPHMC`, :class:`~pymc_dp.DPBarker`).
    plan : RunPlan, optional
        Plan whose noise knob ``plan.scale`` is audited (default: :func:`one_iteration_plan`).
        Only its knob matters: the claim is for *one* iteration (or one gradient release) of
        one chain at that knob, whatever the plan's length.
    release : {"iteration", "gradient"}
        ``"iteration"``: everything one iteration releases (what :func:`penalty_release` and
        :func:`barker_iteration` audit). ``"gradient"``: a single noisy gradient of
        :class:`~pymc_dp.DPHMC` (what :func:`gradient_release` audits), a Gaussian mechanism with
        noise multiplier ``plan.scale * step.grad_noise_ratio``; an iteration makes
        ``n_steps + 1`` of them plus one penalty test.

    Returns
    -------
    float
        The epsilon of that release computed by :func:`pymc_dp.runplan.run_ledger`, the accounting
        the step's own ledger uses. Releases made once per run outside the iterations (a private
        warm start) are not part of it.
    """
    import dataclasses

    from pymc_dp.runplan import run_ledger

    plan = one_iteration_plan(step) if plan is None else plan
    if release == "iteration":
        mechanisms = tuple(plan.mechanisms)
    elif release == "gradient":
        gradient = getattr(step, "_gradient", None)
        if gradient is None:
            raise ValueError(f"{type(step).__name__} makes no gradient releases")
        mechanisms = (dataclasses.replace(gradient, per_iteration=1),)
    else:
        raise ValueError(f"`release` must be 'iteration' or 'gradient', got {release!r}")
    return float(run_ledger(mechanisms, plan.scale, 1, 1, plan.delta).epsilon)


class _StepRelease:
    """Shared plumbing of the step adapters: two steps, one plan, lent state, cached kernels."""

    #: Names of the compiled kernels (instance attributes of the step) that may be memoised.
    kernels: tuple[str, ...] = ()

    def __init__(self, step0: Any, step1: Any, plan: Any, cache_kernels: bool) -> None:
        from pymc_dp.step_methods.base import DPStep

        for step, name in ((step0, "step0"), (step1, "step1")):
            if not isinstance(step, DPStep):
                raise TypeError(f"`{name}` must be a DP step, got {type(step).__name__}")
        if type(step0) is not type(step1):
            raise TypeError(
                f"the two steps must be the same mechanism, got {type(step0).__name__} and "
                f"{type(step1).__name__}"
            )
        if step0.n_rows != step1.n_rows or step0.likelihood.dim != step1.likelihood.dim:
            raise ValueError(
                "replace-one neighbours have the same number of rows and the same parameters: "
                f"got n = {step0.n_rows}, {step1.n_rows} and dim = {step0.likelihood.dim}, "
                f"{step1.likelihood.dim}"
            )
        if step0.delta != step1.delta:
            raise ValueError(f"the steps' deltas differ: {step0.delta} and {step1.delta}")
        self.steps = (step0, step1)
        self.plan = one_iteration_plan(step0) if plan is None else plan
        self.delta = float(self.plan.delta)
        self.cache_kernels = bool(cache_kernels)

    def _lend(self, step: Any, rng: np.random.Generator) -> dict[str, Any]:
        from pymc_dp.noise import NoiseSource
        from pymc_dp.step_methods.chain import ChainState

        # a chain state of the run's own: secret noise from the audit's generator
        attrs: dict[str, Any] = {
            "_plan": self.plan,
            "chain": ChainState(NoiseSource(int(rng.integers(2**63)))),
        }
        if self.cache_kernels:
            attrs.update({k: _CachedKernel(getattr(step, k)) for k in self.kernels})
        return attrs

    def __call__(self, which: int, rng: np.random.Generator) -> float:
        return float(self.batch(which, rng, 1)[0])

    def batch(self, which: int, rng: np.random.Generator, size: int) -> NDArray[np.float64]:
        step = self.steps[_check_which(which)]
        with _lent(step, **self._lend(step, rng)):
            return self._run(step, int(size))

    def _run(self, step: Any, size: int) -> NDArray[np.float64]:
        raise NotImplementedError


class _PenaltyRelease(_StepRelease):
    kernels = ("_kernel",)

    def __init__(self, step0, step1, q, q_new, plan, cache_kernels) -> None:
        from pymc_dp.step_methods.penalty import PenaltyMetropolis

        if not isinstance(step0, PenaltyMetropolis):
            raise TypeError(
                "penalty_release audits DPPenalty or DPMinibatchPenalty, got "
                f"{type(step0).__name__}"
            )
        super().__init__(step0, step1, plan, cache_kernels)
        self.q = _point(step0, q, "q")
        self.q_new = _point(step0, q_new, "q_new")
        self.dist = float(np.sqrt(np.sum((self.q_new - self.q) ** 2)))
        if self.dist == 0.0:
            raise ValueError("`q_new` equals `q`: the ratio is 0 on every data set")
        # What PenaltyMetropolis._iterate passes to _ratio: the per-row clip bound of this step
        # (steps with _clip_norm), or the step length (steps whose _ratio scales it by llr_clip).
        clip_norm = getattr(step0, "_clip_norm", None)
        self.ratio_arg = float(clip_norm(self.q_new - self.q)) if clip_norm else self.dist
        self.claimed_epsilon = claimed_epsilon(step0, self.plan)

    def _run(self, step: Any, size: int) -> NDArray[np.float64]:
        out = np.empty(size)
        scale = step._scale
        for i in range(size):
            value, _, sensitivity, _ = step._ratio(self.q_new, self.q, self.ratio_arg)
            log_ratio, sigma = step._test.log_ratio(step.chain.noise, value, sensitivity, scale)
            out[i] = log_ratio + 0.5 * sigma * sigma
        return out

    def __repr__(self) -> str:
        return f"penalty_release({type(self.steps[0]).__name__}, dist={self.dist:.4g})"


def penalty_release(
    step0: Any,
    step1: Any,
    q: ArrayLike,
    q_new: ArrayLike,
    *,
    plan: Any = None,
    cache_kernels: bool = True,
) -> Mechanism:
    r"""The privatised log-likelihood ratio of a penalty step, as a mechanism for :func:`audit`.

    One run computes the step's clipped (tempered) ratio of ``q_new`` against ``q``
    (``step._ratio``; for :class:`~pymc_dp.DPMinibatchPenalty` on a batch drawn from the run's
    secret noise, minus half its variance estimate) and privatises it with the step's penalty
    test (``step._test.log_ratio``) at the noise knob of ``plan``: one iteration's release.

    Parameters
    ----------
    step0, step1 : PenaltyMetropolis
        The same step (class and arguments) built inside two models whose data are
        replace-one neighbours :math:`D_0, D_1`. Orient them so that the ratio on
        :math:`D_1` is the larger (or score with ``statistic=lambda r: -r``). Worst case for a
        Gaussian mean model: one row at a far outlier, of opposite sign in the two data sets,
        so that its clipped ratio is :math:`-b` on one and :math:`+b` on the other.
    q, q_new : array_like
        Current and proposed raveled points (``step.likelihood.dim`` values), ``q_new != q``.
    plan : RunPlan, optional
        The plan whose knob ``plan.scale`` sets the noise (default
        :func:`one_iteration_plan` of ``step0``). Pass e.g.
        ``dataclasses.replace(plan, scale=plan.scale / 2)`` to audit a broken variant, with
        ``claimed_epsilon`` taken from the unbroken plan.
    cache_kernels : bool, default True
        Memoise the compiled ratio kernel on its inputs during a batch of runs (exact: kernels
        are pure functions; the full-data ratio is then computed once per batch instead of once
        per run). Minibatch kernels see new row indices on every run and are evaluated anew.

    Returns
    -------
    callable
        ``mechanism(which, rng) -> float``, the released ratio (the test's privatised ratio,
        before the ``-sigma^2/2`` penalty); with ``batch``, ``claimed_epsilon`` (one iteration
        at ``plan.scale``, :func:`claimed_epsilon`) and ``delta`` (the plan's).
    """
    return _PenaltyRelease(step0, step1, q, q_new, plan, cache_kernels)


class _GradientRelease(_StepRelease):
    kernels = ("_grad",)

    def __init__(self, step0, step1, q, direction, plan, cache_kernels) -> None:
        from pymc_dp.step_methods.hmc import DPHMC

        if not isinstance(step0, DPHMC):
            raise TypeError(f"gradient_release audits DPHMC, got {type(step0).__name__}")
        super().__init__(step0, step1, plan, cache_kernels)
        self.q = _point(step0, q, "q")
        if direction is None:
            sums = [
                s.tempering * np.asarray(s._grad(self.q, np.asarray(s.grad_clip))[0])
                for s in self.steps
            ]
            direction = sums[1] - sums[0]
        u = np.array(direction, dtype=np.float64).reshape(-1)
        norm = float(np.sqrt(np.sum(u * u)))
        if u.shape != (step0.likelihood.dim,) or not (np.isfinite(norm) and norm > 0):
            raise ValueError(
                "`direction` must be a nonzero finite vector of the model's dimension (the "
                "default, D1's clipped gradient sum minus D0's, is zero at this `q`)"
            )
        self.direction = u / norm
        self.claimed_epsilon = claimed_epsilon(step0, self.plan, release="gradient")

    def _run(self, step: Any, size: int) -> NDArray[np.float64]:
        out = np.empty(size)
        for i in range(size):
            g, _ = step._noisy_grad(self.q)
            out[i] = float(self.direction @ g)
        return out

    def __repr__(self) -> str:
        return f"gradient_release(DPHMC, direction={self.direction!r})"


def gradient_release(
    step0: Any,
    step1: Any,
    q: ArrayLike,
    direction: ArrayLike | None = None,
    *,
    plan: Any = None,
    cache_kernels: bool = True,
) -> Mechanism:
    r"""One noisy gradient of :class:`~pymc_dp.DPHMC`, projected on a direction, for :func:`audit`.

    One run is ``step._noisy_grad(q)``: the per-row gradients clipped to norm ``grad_clip``,
    summed, tempered, plus Gaussian noise of multiplier ``plan.scale * grad_noise_ratio`` over
    the sensitivity ``2 T grad_clip``, plus the exact prior gradient (public). Its claim is that
    of one such Gaussian release (:func:`claimed_epsilon` with ``release="gradient"``), not of a
    whole iteration (``n_steps + 1`` gradients and one penalty test).

    Parameters
    ----------
    step0, step1 : DPHMC
        The same step built on neighbouring data sets :math:`D_0, D_1`.
    q : array_like
        Raveled point at which the gradient is released.
    direction : array_like, optional
        The output is the projection of the noisy gradient on this direction (normalised).
        Default: D1's clipped gradient sum minus D0's (computed exactly from the steps' kernels,
        as an auditor who knows both data sets can), which makes the projection the likelihood
        ratio statistic of the two Gaussian output distributions. For a worst-case pair its norm
        is the sensitivity ``2 T grad_clip``.
    plan, cache_kernels
        As in :func:`penalty_release` (``cache_kernels`` memoises the gradient kernel).

    Returns
    -------
    callable
        ``mechanism(which, rng) -> float``, with ``batch``, ``claimed_epsilon``, ``delta`` and
        ``direction`` (unit vector).
    """
    return _GradientRelease(step0, step1, q, direction, plan, cache_kernels)


class _FixedProposal:
    """A proposal that always proposes ``q_new`` (the audit fixes the public proposal)."""

    def __init__(self, q_new: NDArray) -> None:
        self.q_new = q_new

    def __call__(self, rng: Any, q: NDArray) -> tuple[NDArray, int]:
        return self.q_new.copy(), 0

    def reset(self, rng: Any) -> None:
        pass

    def update(self, j: int, accepted: bool) -> None:
        pass


class _BarkerIteration(_StepRelease):
    kernels = ("_kernel",)

    def __init__(self, step0, step1, q, q_new, plan, cache_kernels) -> None:
        from pymc_dp.step_methods.barker import DPBarker

        if not isinstance(step0, DPBarker):
            raise TypeError(f"barker_iteration audits DPBarker, got {type(step0).__name__}")
        super().__init__(step0, step1, plan, cache_kernels)
        self.q = _point(step0, q, "q")
        self.q_new = _point(step0, q_new, "q_new")
        # The log prior at q is public (no data): computed once, as step._prior_at would.
        self.prior = float(step0.likelihood.prior_value(self.q))
        self.claimed_epsilon = claimed_epsilon(step0, self.plan)

    def _lend(self, step: Any, rng: np.random.Generator) -> dict[str, Any]:
        attrs = super()._lend(step, rng)
        attrs["_proposal"] = _FixedProposal(self.q_new)
        attrs["chain"].moved_to(self.q.copy(), self.prior)
        return attrs

    def _run(self, step: Any, size: int) -> NDArray[np.float64]:
        out = np.empty(size)
        for i in range(size):
            # _iterate moves the chain to q_new on acceptance: put it back at q every run.
            step.chain.moved_to(self.q, self.prior)
            _, stats = step._iterate(self.q)
            out[i] = float(stats["accepted"])
        return out

    def __repr__(self) -> str:
        return "barker_iteration(DPBarker)"


def barker_iteration(
    step0: Any,
    step1: Any,
    q: ArrayLike,
    q_new: ArrayLike,
    *,
    plan: Any = None,
    cache_kernels: bool = True,
) -> Mechanism:
    r"""One iteration of :class:`~pymc_dp.DPBarker` from ``q`` proposing ``q_new``, for
    :func:`audit`.

    One run is ``step._iterate(q)`` with the (public) proposal fixed to ``q_new`` and the prior
    cache at ``q``: a secret batch, the clipped batch ratio and variance estimate, the Gaussian
    and correction noise, and the accept bit, which is the iteration's only release.

    Parameters
    ----------
    step0, step1 : DPBarker
        The same step built on neighbouring data sets; orient them so that :math:`D_1` accepts
        more often (or score with ``statistic=lambda a: 1 - a``).
    q, q_new : array_like
        Current and proposed raveled points.
    plan : RunPlan, optional
        Default :func:`one_iteration_plan` (DP Barker has no noise knob: only the plan's
        mechanisms matter for the claim).
    cache_kernels : bool, default True
        Memoise the batch ratio kernel (hits only when a batch repeats).

    Returns
    -------
    callable
        ``mechanism(which, rng) -> float``, 1.0 if accepted else 0.0; with ``batch``,
        ``claimed_epsilon`` (one iteration, :func:`claimed_epsilon`) and ``delta``. A single
        bit carries at most :math:`\log(p_1 / p_0)` of privacy loss for accept probabilities
        :math:`p_0, p_1`, so expect a bound far below the claim.
    """
    return _BarkerIteration(step0, step1, q, q_new, plan, cache_kernels)


class _ExpfamRelease:
    def __init__(self, data0, data1, family, epsilon, direction, family_kwargs) -> None:
        from pymc_dp.checks import check_epsilon
        from pymc_dp.expfam.families import get_family
        from pymc_dp.expfam.release import release

        self.epsilon = check_epsilon(epsilon)
        self.data = (np.asarray(data0), np.asarray(data1))
        d0, d1 = self.data
        if d0.shape != d1.shape or d0.ndim == 0:
            raise ValueError(
                f"replace-one neighbours have the same number of records, got shapes {d0.shape} "
                f"and {d1.shape}"
            )
        differ = np.any((d0 != d1).reshape(d0.shape[0], -1), axis=1).sum()
        if differ > 1:
            raise ValueError(f"the data sets differ in {differ} records; neighbours differ in one")
        self.family_kwargs = dict(family_kwargs)
        options = {k: v for k, v in self.family_kwargs.items() if k != "bounds"}
        fam = get_family(family, self.family_kwargs.get("bounds"), **options)
        self.family = family
        if direction is None:
            direction = fam.statistic(d1)[0] - fam.statistic(d0)[0]
        u = np.array(direction, dtype=np.float64).reshape(-1)
        norm = float(np.sqrt(np.sum(u * u)))
        if u.shape != (fam.dim,) or not (np.isfinite(norm) and norm > 0):
            raise ValueError(
                "`direction` must be a nonzero finite vector of the statistic's dimension (the "
                "default, s(D1) - s(D0), is zero for these data sets)"
            )
        self.direction = u / norm
        self._release = release
        probe = release(d0, family, self.epsilon, noise_seed=0, **self.family_kwargs)
        self.claimed_epsilon = float(probe.ledger.epsilon)
        self.delta = float(probe.ledger.delta)

    def __call__(self, which: int, rng: np.random.Generator) -> float:
        return float(self.batch(which, rng, 1)[0])

    def batch(self, which: int, rng: np.random.Generator, size: int) -> NDArray[np.float64]:
        data = self.data[_check_which(which)]
        seeds = rng.integers(2**63, size=int(size))
        out = np.empty(int(size))
        for i, seed in enumerate(seeds):
            y = self._release(
                data, self.family, self.epsilon, noise_seed=int(seed), **self.family_kwargs
            ).y
            out[i] = float(self.direction @ y)
        return out

    def __repr__(self) -> str:
        return f"expfam_release({self.family!r}, epsilon={self.epsilon!r})"


def expfam_release(
    data0: ArrayLike,
    data1: ArrayLike,
    family: Any,
    epsilon: float,
    *,
    direction: ArrayLike | None = None,
    **family_kwargs: Any,
) -> Mechanism:
    r"""The Laplace release of :func:`pymc_dp.expfam.release`, as a mechanism for :func:`audit`.

    One run is ``release(data, family, epsilon, noise_seed=<fresh seed from the audit's rng>,
    **family_kwargs)``; its output ``y`` (the snapped noisy sufficient statistic) is projected on
    ``direction``.

    Parameters
    ----------
    data0, data1 : array_like
        Replace-one neighbours (same number of records, at most one record different), e.g.
        Bernoulli records with one 0 changed to 1.
    family : str or Family
        As in :func:`~pymc_dp.expfam.release`.
    epsilon : float
        Epsilon of the release (> 0).
    direction : array_like, optional
        Default :math:`s(D_1) - s(D_0)` (exact statistics), normalised.
    **family_kwargs
        ``bounds``, ``trials``, ``categories``, ``sigma``: passed to ``release``.

    Returns
    -------
    callable
        ``mechanism(which, rng) -> float``, with ``batch``, ``claimed_epsilon`` (the release's
        ledger: ``epsilon``) and ``delta`` (0: pure DP).
    """
    return _ExpfamRelease(data0, data1, family, epsilon, direction, family_kwargs)


class _SparseVectorRelease:
    def __init__(
        self, distances0, distances1, threshold, epsilon, n_accept, sensitivity, resample
    ) -> None:
        from pymc_dp.abcdp.svt import SparseVector, noise_scale, svt_epsilon

        d0 = np.array(distances0, dtype=np.float64).reshape(-1)
        d1 = np.array(distances1, dtype=np.float64).reshape(-1)
        if d0.shape != d1.shape or d0.size == 0:
            raise ValueError(
                f"the two distance streams must have the same nonzero length, got {d0.size} "
                f"and {d1.size}"
            )
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        gap = float(np.max(np.abs(d1 - d0)))
        if not gap <= self.sensitivity * (1.0 + 1e-12):
            raise ValueError(
                f"neighbouring data move every distance by at most the sensitivity "
                f"{self.sensitivity}; these streams differ by up to {gap}"
            )
        self.distances = (d0, d1)
        self.threshold = _as_float(threshold, "threshold")
        self.n_accept = check_count(n_accept, "n_accept", minimum=1)
        self.resample = bool(resample)
        self.b = noise_scale(epsilon, self.n_accept, self.sensitivity, self.resample)
        self.claimed_epsilon = float(
            svt_epsilon(self.b, self.n_accept, self.sensitivity, self.resample)
        )
        self.delta = 0.0
        self._svt = SparseVector

    def __call__(self, which: int, rng: np.random.Generator) -> NDArray[np.intp]:
        distances = self.distances[_check_which(which)]
        svt = self._svt(self.threshold, self.b, self.n_accept, self.resample, rng, rng)
        return svt.offer(distances)

    def batch(self, which: int, rng: np.random.Generator, size: int) -> list[NDArray[np.intp]]:
        return [self(which, rng) for _ in range(int(size))]

    def __repr__(self) -> str:
        return (
            f"sparse_vector(n={self.distances[0].size}, b={self.b:.4g}, "
            f"n_accept={self.n_accept}, resample={self.resample})"
        )


def sparse_vector(
    distances0: ArrayLike,
    distances1: ArrayLike,
    threshold: float,
    epsilon: float,
    n_accept: int,
    sensitivity: float,
    resample: bool = False,
) -> Mechanism:
    r"""ABCDP's private stage (:class:`pymc_dp.abcdp.svt.SparseVector`), as a mechanism for
    :func:`audit`.

    One run offers the whole stream of distances to a fresh ``SparseVector(threshold, b,
    n_accept, resample, rng, rng)`` with ``b = noise_scale(epsilon, n_accept, sensitivity,
    resample)`` and returns the accepted indices.

    Parameters
    ----------
    distances0, distances1 : array_like
        The distances of the same stream of proposals to :math:`D_0` and to :math:`D_1`;
        neighbouring data move each by at most ``sensitivity`` (checked), in either direction.
        The loss of the whole claimed budget needs distances that move in *both* directions:
        with all of them shifted the same way the noisy threshold absorbs the shift. A strong
        pair: a run of queries near the threshold that :math:`D_1` pushes up by the sensitivity,
        then one that it pulls down (see :func:`first_acceptance`).
    threshold, epsilon, n_accept, sensitivity, resample
        As in :func:`pymc_dp.abcdp.svt.noise_scale` and :class:`~pymc_dp.abcdp.svt.SparseVector`.

    Returns
    -------
    callable
        ``mechanism(which, rng) -> ndarray`` of accepted indices; with ``batch``,
        ``claimed_epsilon`` (:func:`pymc_dp.abcdp.svt.svt_epsilon` at ``b``, i.e. ``epsilon``) and
        ``delta`` (0: pure DP). Score it with e.g. :func:`first_acceptance`.
    """
    return _SparseVectorRelease(
        distances0, distances1, threshold, epsilon, n_accept, sensitivity, resample
    )


def first_acceptance(indices: ArrayLike) -> float:
    """Statistic for :func:`sparse_vector`: the index of the first accepted query, -1 if none.

    Larger means "the early queries were rejected and a later one accepted": the event whose
    probability rises most on :math:`D_1` when :math:`D_1` pushes the early distances up and a
    later one down.
    """
    idx = np.asarray(indices).reshape(-1)
    return float(idx[0]) if idx.size else -1.0
