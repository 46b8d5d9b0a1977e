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

See :mod:`pymc_dp.audit.core` (the statistics) and :mod:`pymc_dp.audit.adapters` (the package's
mechanisms as audit mechanisms).
"""

from pymc_dp.audit.adapters import (
    barker_iteration,
    claimed_epsilon,
    expfam_release,
    first_acceptance,
    gradient_release,
    one_iteration_plan,
    penalty_release,
    sparse_vector,
)
from pymc_dp.audit.core import (
    AuditResult,
    audit,
    audit_gaussian,
    clopper_pearson,
    clopper_pearson_upper,
    epsilon_lower_bound,
    gaussian_mechanism,
)

__all__ = [
    "audit",
    "audit_gaussian",
    "AuditResult",
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
