r"""DP Barker: the minibatch Barker acceptance test whose own noise is the privacy noise.

Heikkilä, Jälkö, Dikmen & Honkela (2019), poster eqs. (5)-(12); Raisa (2021), section 3.2,
Theorem 7. Barker's test accepts :math:`\theta'` when :math:`\Delta + V_{log} > 0` with
:math:`V_{log} \sim \mathrm{Logistic}(0, 1)`. Write :math:`V_{log} = N(0, C) + V_{corr}` (C = 2) and
estimate :math:`\Delta` on a batch of b rows, with tempering :math:`T = N_0 / n`:

.. math::

    \Delta^* = \frac{nT}{b} \sum_{j \in B} r_j + \log\frac{p(\theta')}{p(\theta)}, \qquad
    s^2 = \Big(\frac{nT}{b}\Big)^2 \Big(\sum_{j \in B} r_j^2 - \frac{R^2}{b}\Big),

where :math:`s^2` estimates the subsampling variance of :math:`\Delta^*`, which by the CLT is
approximately normal. The test :math:`\Delta^* + N(0, C - s^2) + V_{corr} > 0` then approximates
Barker's full-data test, and the Gaussian part is a Gaussian mechanism whose Rényi divergence is
bounded (poster eq. 11) when every per-row ratio satisfies
:math:`|r_j| \le \sqrt{b} / N_0` (eq. 12). The step clips :math:`r_j` to
:math:`\pm 0.99 \sqrt{b} / N_0`, so every scaled term :math:`(nT/b) r_j` lies in
:math:`\pm 0.99 / \sqrt{b}` and :math:`s^2 \le b \cdot 0.99^2 / b = 0.9801 < 1 \le C - 1`: the
variance condition of the analysis holds by construction, for every batch and every dataset.
(The reference implementation could fail the check and then wrote zeros into the chain; here a
failure is impossible, and the code still guards it by rejecting, which keeps the chain valid.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from pymc_dp.accounting.barker import barker_orders
from pymc_dp.batches import check_batch
from pymc_dp.mechanisms import BarkerTest
from pymc_dp.step_methods.barker_correction import load_correction
from pymc_dp.step_methods.base import PRIVACY_STATS, DPStep, Stat
from pymc_dp.step_methods.proposals import RandomWalkProposal
from pymc_dp.step_methods.registry import Example, register

__all__ = ["DPBarker"]

#: Variance of the Gaussian part of the logistic decomposition (:attr:`BarkerTest.C`).
BARKER_C = BarkerTest.C
#: Safety factor on the per-row bound of eq. 12 (as in the authors' code).
CLIP_FACTOR = 0.99


class DPBarker(DPStep):
    r"""Differentially private minibatch Barker MCMC.

    Parameters
    ----------
    vars : list, optional
        Free variables; must be all of them (the default).
    batch_size : int
        Rows per iteration b, drawn without replacement; needs b > 10 (the analysis holds for
        integer orders :math:`2 \le \alpha < b/5`) and b <= n.
    n0 : float
        Tempering :math:`N_0 \le n`: the log-likelihood is multiplied by :math:`T = N_0 / n`,
        so the posterior is as wide as with :math:`N_0` rows (Heikkilä et al. 2019 use 100 for
        n = 1e6). The per-row clip bound is :math:`0.99\sqrt{b} / N_0`, so small :math:`N_0`
        and large b clip less.
    proposal_scale : float or array
        Standard deviation of the Gaussian random-walk proposal per raveled coordinate (public).
    proposal : {"random_walk", "ocu"}
        All coordinates, or one chosen at random per iteration.
    epsilon : float, optional
        Budget: DP Barker has no noise knob (its noise is the test's own), so its privacy is fixed
        by b, n and the number of iterations; a run that would exceed ``epsilon`` is refused.
    delta, chains, noise_seed, exact_noise, diagnostics, row_dim, row_axes, public
        See :class:`~pymc_dp.step_methods.base.DPStep`. The batch, the test's Gaussian noise and
        the correction are drawn from the chain's secret noise source.

    Notes
    -----
    Accounting (Raisa 2021, Thm 7): the per-test RDP curve of eq. 11 is amplified by sampling
    without replacement (Wang, Balle & Kasiviswanathan 2019, Thm 9), composed over
    ``chains x (tune + draws)`` tests, and converted with the classic and the improved formula;
    the tighter is reported (:mod:`pymc_dp.accounting.barker`). :math:`N_0` does not enter it.

    Stats: ``accepted``, ``dp_epsilon``, ``dp_delta``, ``batch_size``; with ``diagnostics=True``
    the exact ``clip_fraction`` and ``batch_variance`` :math:`s^2`. No acceptance probability
    or noise scale is released: both would reveal :math:`s^2`, which is not privatised.

    References
    ----------
    .. [1] Heikkilä, M., Jälkö, J., Dikmen, O. and Honkela, A. (2019). Differentially private
       Markov chain Monte Carlo. NeurIPS.
    .. [2] Seita, D., Pan, X., Chen, H. and Canny, J. (2017). An efficient minibatch acceptance
       test for Metropolis-Hastings. UAI.
    .. [3] Raisa, O. (2021). Differentially Private Markov Chain Monte Carlo. MSc thesis,
       University of Helsinki. Section 3.2.
    """

    name = "dp_barker"
    distributed_rows = True  # the driver draws the batch; workers sum their rows of it
    stats: ClassVar[dict[str, Stat]] = {
        **PRIVACY_STATS,
        "batch_size": Stat(np.int64),
        "clip_fraction": Stat(np.float64, releasable=False),
        "batch_variance": Stat(np.float64, releasable=False),
    }

    def __init__(
        self,
        vars: Sequence | None = None,
        *,
        batch_size: int,
        n0: float,
        proposal_scale: float | np.ndarray,
        proposal: str = "random_walk",
        sampling: str = "fixed_size",
        **kwargs,
    ) -> None:
        if kwargs.get("noise_multiplier") is not None:
            raise ValueError(
                "DPBarker has no `noise_multiplier`: its noise is the Barker test's own, and its "
                "privacy is fixed by batch_size, n and the number of iterations."
            )
        barker_orders(int(batch_size))  # b too small for any Renyi order: clear error now
        super().__init__(vars, **kwargs)
        self.batch_size = check_batch(batch_size, self.n_rows, sampling, allowed=("fixed_size",))
        self.sampling = sampling
        n0 = float(n0)
        if not (np.isfinite(n0) and 0 < n0 <= self.n_rows):
            raise ValueError(f"`n0` must be in (0, n = {self.n_rows}], got {n0}")
        self.n0 = n0
        self.tempering = n0 / self.n_rows
        self.clip_bound = CLIP_FACTOR * np.sqrt(self.batch_size) / n0
        self._proposal = RandomWalkProposal(
            proposal_scale, self.likelihood.dim, proposal, allowed=("random_walk", "ocu")
        )
        self.proposal_scale = self._proposal.scale
        self.proposal = proposal
        self._correction = load_correction(BARKER_C)
        (self._test,) = self.mechanisms()
        self._kernel = self.likelihood.ratio_kernel(
            batch=True, squares=True, diagnostics=self.diagnostics
        )

    @classmethod
    def _tunable(cls) -> bool:
        return False

    def mechanisms(self) -> tuple[BarkerTest]:
        return (BarkerTest(self.batch_size, self.n_rows),)

    def _reset_chain(self) -> None:
        self._proposal.reset(self.rng)

    def _iterate(self, q: np.ndarray) -> tuple[np.ndarray, dict]:
        prior_cur = self._prior_at(q)
        b = self.batch_size
        q_new, _ = self._proposal(self.rng, q)
        secret = self.chain.noise.generator
        idx = self.likelihood.draw_batch(secret, b, self.sampling)
        out = self._kernel(q_new, q, np.asarray(self.clip_bound), idx)
        total, prior_new, squares = float(out[0]), float(out[1]), float(out[2])
        scale = self.n0 / b  # n T / b
        delta_star = scale * total + prior_new - prior_cur
        var_b = scale**2 * max(squares - total * total / b, 0.0)
        # C - s^2 < 1 is impossible with the clipping above (s^2 <= 0.9801)
        accepted = self._test.accept(self.chain.noise, delta_star, var_b, self._correction)
        if accepted:
            self.chain.moved_to(q_new, prior_new)
        stats = {"accepted": accepted, "batch_size": b}
        if self.diagnostics:
            stats["clip_fraction"] = float(out[3])
            stats["batch_variance"] = var_b
        return (q_new if accepted else q), stats


# no noise knob: the budget covers what it spends (n = 300, b = 100: about 1.5 per iteration)
register(
    DPBarker,
    barker=Example({"batch_size": 100, "n0": 50, "proposal_scale": 0.05}, epsilon=200.0),
)
