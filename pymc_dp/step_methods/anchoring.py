"""What a step needs to test against the Taylor anchor (:mod:`pymc_dp.anchor`): its arguments,
its one release (after the warm start, before any chain) and the anchored penalty test.

Used by :class:`~pymc_dp.step_methods.penalty.DPPenalty` and
:class:`~pymc_dp.step_methods.hmc.DPHMC` when ``hess_clip`` is given with zero tuning.
"""

from __future__ import annotations

import numpy as np

from pymc_dp.accounting.ledger import GaussianMechanism
from pymc_dp.anchor import (
    ANCHOR_NAME,
    INDEPENDENT_SHARE,
    LOCAL_TARGET_ACCEPT,
    Anchor,
    AnchoredRatio,
    release_anchor,
)
from pymc_dp.budget import ANCHOR_STREAM
from pymc_dp.checks import check_positive
from pymc_dp.mechanisms import PenaltyTest, clipped_sum_sensitivity

__all__ = [
    "INDEPENDENT_SHARE",
    "LOCAL_TARGET_ACCEPT",
    "ANCHORED_TEST",
    "ANCHORED_WARM_START",
    "DEFAULT_ANCHOR_SHARE",
    "AnchoredStep",
    "check_anchor_share",
]

#: Shares of the budget (of its PLD mean) with ``hess_clip``: the Taylor anchor's release, and the
#: warm start's (it only places the anchor and the proposal, and with ``hess_clip`` it uses the
#: model's curvature, so it needs far less than its default). Measured with DPPenalty on a
#: logistic regression (n = 2e4, d = 3, epsilon 5, 4 x (1000 + 1000), 3 runs each), largest mean
#: error in NUTS sds and smallest bulk ESS: warm start 0.2 / anchor 0.5: 0.13-0.52, ESS 425-707;
#: 0.1 / 0.6: 0.08-0.37, ESS 573-738 (the chains keep 0.3 in both).
DEFAULT_ANCHOR_SHARE = 0.6
ANCHORED_WARM_START = 0.1
#: The per-iteration release of an anchored step.
ANCHORED_TEST = PenaltyTest("log-likelihood remainder at the Taylor anchor")


def check_anchor_share(hess_clip: float | None, anchor: float | None, tuned: bool) -> float:
    """The anchor's budget share (0 without ``hess_clip``), after checking its arguments;
    ``tuned`` names the argument that turned zero tuning off, or is empty."""
    if hess_clip is None:
        if anchor is not None:
            raise ValueError(
                "`anchor` is the budget share of the Taylor anchor, which needs `hess_clip`."
            )
        return 0.0
    if tuned:
        raise ValueError(
            f"`hess_clip` (the Taylor anchor) is part of zero tuning: it anchors at the private "
            f"fit and proposes from it. Leave `{tuned}` unset."
        )
    share = DEFAULT_ANCHOR_SHARE if anchor is None else check_positive(anchor, "anchor")
    if share >= 1.0:
        raise ValueError(f"`anchor` must be a share in (0, 1), got {anchor!r}")
    return float(share)


class AnchoredStep:
    """Mixin of a :class:`~pymc_dp.step_methods.base.DPStep` subclass: call
    :meth:`_init_anchor` before ``DPStep.__init__`` (it sets the warm start's default share),
    :meth:`_check_anchor_budget` after it, and :meth:`_release_anchor` after the warm start."""

    hess_clip: float | None = None
    anchor_share: float = 0.0
    anchor: Anchor | None = None
    _anchored_ratio: AnchoredRatio | None = None

    @property
    def anchored(self) -> bool:
        """Whether the step tests against the Taylor anchor (``hess_clip`` given)."""
        return self.hess_clip is not None

    def _init_anchor(self, hess_clip, anchor, tuned: str, kwargs: dict) -> None:
        self.hess_clip = None if hess_clip is None else check_positive(hess_clip, "hess_clip")
        self.anchor_share = check_anchor_share(self.hess_clip, anchor, tuned)
        if not self.anchored:
            return
        if kwargs.get("warm_start") is None:
            kwargs["warm_start"] = ANCHORED_WARM_START
        warm = kwargs["warm_start"]
        # before the model analysis reads any data
        if isinstance(warm, int | float) and warm + self.anchor_share >= 1.0:
            raise ValueError(
                f"`warm_start` ({warm}) and `anchor` ({self.anchor_share}) leave nothing of the "
                "budget for the chains: their sum must be below 1."
            )

    def _check_anchor_budget(self) -> None:
        if not self.anchored:
            return
        if self.warm_start_share + self.anchor_share >= 1.0:  # a warm_start of another type
            raise ValueError(
                f"`warm_start` ({self.warm_start_share}) and `anchor` ({self.anchor_share}) "
                "leave nothing of the budget for the chains: their sum must be below 1."
            )
        if getattr(self.likelihood, "location", "in memory") != "in memory":
            raise ValueError(
                "`hess_clip` (the Taylor anchor) keeps per-row gradients next to the driver: "
                "rows in a Dask cluster are not supported with it; drop `hess_clip`."
            )

    def anchor_attr(self, labels: list[str]) -> str:
        """JSON of the anchor's predicted tilt per coordinate, in posterior sds (public)."""
        import json

        from pymc_dp.anchor import tilt_sds

        # the tilt moves the posterior's mean by T Sigma e: the posterior's sds, not the
        # noise-aware spread (the fit's error); only the metric's diagonal is kept, which
        # understates the tilt on correlated covariates
        tilt = tilt_sds(
            self.anchor, np.diag(self._posterior_sds() ** 2), self.tempering, self._active
        )
        return json.dumps(
            {k: float(v) for k, v, a in zip(labels, tilt, self._active, strict=True) if a}
        )

    def predicted_mixing(
        self, chains: int, tune: int, draws: int, replicates: int | None = None
    ) -> dict:
        """The anchored chain's predicted ``acceptance`` (of its independence proposals), bulk
        ``ess`` (all chains, smallest over coordinates) and ``rhat`` (largest), from released
        values only (the warm start's posterior sds, its error and noise-aware covariances, the
        anchor's tilt), by simulating the chain on that Gaussian
        (:func:`pymc_dp.mixing.simulate_anchored_chain`; seeded, so the same step predicts the
        same). DPHMC is predicted as DPPenalty (its trajectories are not
        modelled). ``replicates``: simulated runs (default :data:`pymc_dp.mixing.REPLICATES`;
        fewer is faster and noisier)."""
        from pymc_dp.anchor import tilt_sds
        from pymc_dp.checks import check_count
        from pymc_dp.mixing import simulate_anchored_chain

        if not self.anchored:
            raise ValueError(
                "predicted_mixing predicts a chain anchored with `hess_clip`; this step has none "
                "(pdp.plan predicts the unanchored chain)."
            )
        chains = check_count(chains, "chains", minimum=1)
        tune = check_count(tune, "tune")
        draws = check_count(draws, "draws", minimum=1)
        active = self._active
        sd = self._posterior_sds()[active]
        offset = np.sqrt(np.diag(self.warm.noise_cov)[active]) / sd
        block = np.ix_(active, active)
        # E|shift| = sqrt(2 / pi) x its sd
        tilt = tilt_sds(self.anchor, np.diag(self._posterior_sds() ** 2), self.tempering, active)
        chain_mu = self.budget.mu(1.0 - self.warm_start_share - self.anchor_share)
        s = self.tempering * np.sqrt(chains * (tune + draws) / (2.0 * chain_mu))
        return simulate_anchored_chain(
            s,
            self.hess_clip,
            sd,
            offset,
            chains,
            tune,
            draws,
            tilt_sd=tilt[active] * np.sqrt(np.pi / 2.0),
            anchor_cov=self.warm.noise_cov[block],
            warm_cov=self.warm.posterior_cov[block],
            **(
                {}
                if replicates is None
                else {"replicates": check_count(replicates, "replicates", minimum=1)}
            ),
        )

    def _posterior_sds(self) -> np.ndarray:
        """Posterior sds the warm start measured (its metric: released curvature and prior),
        not its noise-aware spread, nor its ``cov`` (shrunk towards the prior at small
        budgets)."""
        if self.warm.unit is not None:
            return np.asarray(self.warm.unit, float)
        return np.sqrt(np.diag(self.warm.cov))

    def _anchor_mu(self) -> float:
        return self.budget.mu(self.anchor_share, what="`anchor`")

    def _release_anchor(self) -> None:
        """Release the gradient sum at the warm start's mean, once for every chain."""
        noise = self.budget.noise(ANCHOR_STREAM)
        self.anchor, self._anchored_ratio = release_anchor(
            self.likelihood,
            self.warm.mean,
            grad_clip=self._warm_grad_clip(),
            hess_clip=self.hess_clip,
            mu=self._anchor_mu(),
            noise=noise,
        )
        # prior-only coordinates: no likelihood, their entries are noise alone
        self.anchor.gradient[~self._active] = 0.0

    def _anchor_entries(self) -> tuple:
        """The anchor's ledger entry (known from public facts before the release)."""
        if not self.anchored:
            return ()
        if self.anchor is not None:
            return self.anchor.mechanisms
        return (GaussianMechanism(ANCHOR_NAME, 1.0 / np.sqrt(2.0 * self._anchor_mu()), 1),)

    def _anchored_log_ratio(self, q: np.ndarray, q_new: np.ndarray) -> tuple[float, float, float]:
        """``(T (G^T Delta + released remainder) - sigma^2 / 2, sigma, exact clip fraction)``:
        the penalised, privatised log-likelihood ratio of the anchored test. The remainder is
        the only release; the linear term is post-processing of the anchor."""
        ratio, t = self._anchored_ratio, self.tempering
        bound = ratio.bound(q, q_new)
        value, clip = ratio(q_new, q, bound)
        log_ratio, sigma = ANCHORED_TEST.log_ratio(
            self.chain.noise, t * value, clipped_sum_sensitivity(bound, t), self._scale
        )
        linear = t * float(self.anchor.gradient @ (q_new - q))
        return log_ratio + linear, sigma, clip
