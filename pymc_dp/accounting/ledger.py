"""The privacy ledger: what a run released, how often, and what that costs.

Modelled on dp-accounting's split: a mechanism record (:class:`GaussianMechanism`,
:class:`SubsampledGaussianMechanism`, :class:`BarkerMechanism`, :class:`PureDPMechanism`)
*describes* a batch of releases; :class:`PrivacyLedger` *counts* them with the tightest accountant
that applies:

* Gaussian mechanisms only: the exact closed form of the privacy loss distribution
  (:mod:`pymc_dp.accounting.gaussian`), PLD N(mu, 2 mu), mu = sum of count / (2 s^2) over
  mechanisms and chains;
* Poisson-subsampled Gaussians (with plain Gaussians): dp-accounting's PLD accountant under
  replace-one neighbours, an upper bound tight up to its discretisation;
* fixed-size subsampled Gaussians or DP Barker (with plain Gaussians): RDP curves added over
  mechanisms, releases and chains, converted with the classic and the improved formula; the
  tighter is reported and named;
* pure epsilon-DP mechanisms (Laplace, sparse vector): basic composition, sum of epsilons, added
  to the rest (basic composition of an (eps1, delta)- and an (eps2, 0)-DP mechanism).

Every noise multiplier in a ledger is noise std / (L2 sensitivity under *replace-one*
neighbours, n public); conversions to dp-accounting's own conventions (its issue #378) happen here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from functools import cached_property, lru_cache

import dp_accounting
import numpy as np
from dp_accounting import pld
from dp_accounting.privacy_accountant import NeighboringRelation

from pymc_dp.accounting.gaussian import gaussian_epsilon, gaussian_mu
from pymc_dp.checks import check_delta

__all__ = [
    "BarkerMechanism",
    "GaussianMechanism",
    "LEDGER_ATTR",
    "PrivacyLedger",
    "PureDPMechanism",
    "SubsampledGaussianMechanism",
]

LEDGER_ATTR = "pymc_dp_ledger"
GAUSSIAN_ACCOUNTANT = "Gaussian PLD, exact closed form (Sommer et al. 2019; Raisa et al. Thm 2.4)"
PURE_ACCOUNTANT = "pure epsilon-DP, basic composition (sum of epsilons)"
PLD_ACCOUNTANT = "dp-accounting PLD, Poisson subsampling, replace-one (pessimistic, grid {grid:g})"
RDP_ACCOUNTANT = "RDP ({curves}), composed; {method} conversion at order {order:g}"
#: PLD grid of the ledger: pessimistic (an upper bound) and ~5e-4 relative above the exact value
#: for q = 0.01, 1e4 steps, at ~0.04 s per evaluation, which calibration needs dozens of.
PLD_DISCRETIZATION = 1e-3


@dataclass(frozen=True)
class GaussianMechanism:
    """``count`` releases of a Gaussian mechanism, each with noise std = ``noise_multiplier`` x
    (L2 sensitivity under replace-one neighbours)."""

    name: str
    noise_multiplier: float
    count: int

    kind: str = "gaussian"

    def describe(self) -> str:
        return (
            f"{self.name}: {self.count} Gaussian releases, noise multiplier "
            f"{self.noise_multiplier:.6g} (std / replace-one L2 sensitivity)"
        )

    @property
    def mu(self) -> float:
        return gaussian_mu(self.noise_multiplier, self.count)

    def to_dp_event(self) -> dp_accounting.DpEvent:
        """dp-accounting event. Evaluate it with ``NeighboringRelation.ADD_OR_REMOVE_ONE``: the
        multiplier is already relative to the replace-one sensitivity, and dp-accounting's PLD
        accountant would double the shift again under ``REPLACE_ONE`` (its issue #378)."""
        event = dp_accounting.GaussianDpEvent(self.noise_multiplier)
        return dp_accounting.SelfComposedDpEvent(event, self.count)


@lru_cache(maxsize=256)
def _wor_gaussian_rdp(s: float, n: int, b: int, orders: tuple[float, ...]) -> tuple[float, ...]:
    # dp-accounting's WOR bound takes ~0.2 s per curve; calibration and running stats reuse it
    from pymc_dp.accounting.rdp import fixed_size_subsampled_gaussian_rdp

    return tuple(fixed_size_subsampled_gaussian_rdp(s, n, b, np.asarray(orders)).tolist())


@dataclass(frozen=True)
class SubsampledGaussianMechanism:
    """``count`` Gaussian releases, each computed on a random batch of the rows.

    ``noise_multiplier`` is noise std / (L2 sensitivity of the *batch* statistic under replacing
    one row). ``sampling="fixed_size"``: ``batch_size`` rows drawn uniformly without replacement,
    accounted with RDP (Wang, Balle & Kasiviswanathan 2019, Thm 27, via dp-accounting).
    ``sampling="poisson"``: every row enters independently with probability
    ``batch_size / dataset_size``; the released statistic must be a sum of per-row terms, each
    bounded by half the replace-one sensitivity; accounted with dp-accounting's PLD.
    """

    name: str
    noise_multiplier: float
    dataset_size: int
    batch_size: int
    count: int
    sampling: str = "fixed_size"
    kind: str = "subsampled_gaussian"

    def __post_init__(self) -> None:
        if self.sampling not in ("fixed_size", "poisson"):
            raise ValueError(f"`sampling` must be 'fixed_size' or 'poisson', got {self.sampling!r}")
        if not 1 <= self.batch_size <= self.dataset_size:
            raise ValueError(
                f"`batch_size` must be in [1, dataset_size={self.dataset_size}], "
                f"got {self.batch_size}"
            )

    @property
    def sampling_ratio(self) -> float:
        return self.batch_size / self.dataset_size

    def describe(self) -> str:
        how = (
            f"fixed-size batches of {self.batch_size} of {self.dataset_size} rows"
            if self.sampling == "fixed_size"
            else f"Poisson batches (q = {self.sampling_ratio:.4g}, {self.dataset_size} rows)"
        )
        return (
            f"{self.name}: {self.count} Gaussian releases on {how}, noise multiplier "
            f"{self.noise_multiplier:.6g} (std / replace-one L2 sensitivity)"
        )

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        """Per-release RDP curve (fixed-size sampling only)."""
        if self.sampling != "fixed_size":
            raise ValueError("Poisson-subsampled releases are accounted with PLD, not RDP")
        key = (self.noise_multiplier, self.dataset_size, self.batch_size)
        return np.asarray(_wor_gaussian_rdp(*key, tuple(np.asarray(orders, float).tolist())))

    def to_dp_event(self) -> dp_accounting.DpEvent:
        """dp-accounting event, for its ``REPLACE_ONE`` accountants.

        Fixed-size: its WOR RDP reads the multiplier over the replace-one sensitivity (as ours).
        Poisson: its REPLACE_ONE PLD compares q N(+C) + (1-q) N(0) with q N(-C) + (1-q) N(0) for
        per-row terms bounded by C = sensitivity / 2, so the multiplier is doubled.
        """
        if self.sampling == "fixed_size":
            inner = dp_accounting.SampledWithoutReplacementDpEvent(
                self.dataset_size,
                self.batch_size,
                dp_accounting.GaussianDpEvent(self.noise_multiplier),
            )
        else:
            inner = dp_accounting.PoissonSampledDpEvent(
                self.sampling_ratio, dp_accounting.GaussianDpEvent(2.0 * self.noise_multiplier)
            )
        return dp_accounting.SelfComposedDpEvent(inner, self.count)


@dataclass(frozen=True)
class BarkerMechanism:
    """``count`` DP Barker acceptance tests on fixed-size batches of ``batch_size`` of
    ``dataset_size`` rows (Heikkilä et al. 2019, eq. 11, amplified by WBK19 Thm 9)."""

    name: str
    batch_size: int
    dataset_size: int
    count: int
    kind: str = "barker"

    def describe(self) -> str:
        return (
            f"{self.name}: {self.count} DP Barker tests on fixed-size batches of "
            f"{self.batch_size} of {self.dataset_size} rows (RDP of Heikkila et al. 2019, eq. 11)"
        )

    def orders(self) -> np.ndarray:
        from pymc_dp.accounting.barker import barker_orders

        return barker_orders(self.batch_size)

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        """Per-test RDP curve at ``orders`` (integers 2, 3, ..., as :meth:`orders`)."""
        from pymc_dp.accounting.barker import barker_rdp

        own, curve = barker_rdp(self.batch_size, self.dataset_size)
        lookup = dict(zip(own.tolist(), curve.tolist(), strict=True))
        return np.asarray([lookup.get(float(a), np.inf) for a in orders])

    def to_dp_event(self) -> dp_accounting.DpEvent:
        # no dp-accounting event for this curve
        return dp_accounting.SelfComposedDpEvent(dp_accounting.UnsupportedDpEvent(), self.count)


@dataclass(frozen=True)
class PureDPMechanism:
    """``count`` releases of a pure ``epsilon``-DP mechanism (Laplace, sparse vector, ...) under
    replace-one neighbours; ``epsilon`` is the cost of one release."""

    name: str
    epsilon: float
    count: int = 1
    kind: str = "pure"

    def describe(self) -> str:
        return f"{self.name}: {self.count} release(s), epsilon {self.epsilon:.6g} each (pure DP)"

    def to_dp_event(self) -> dp_accounting.DpEvent:
        # dp-accounting has no generic pure-DP event; epsilon is carried as an opaque event
        return dp_accounting.SelfComposedDpEvent(dp_accounting.UnsupportedDpEvent(), self.count)


_CURVE_NAMES = {
    "gaussian": "Gaussian alpha / (2 s^2)",
    "subsampled_gaussian": "fixed-size subsampled Gaussian, WBK19 Thm 27 via dp-accounting",
    "barker": "DP Barker eq. 11 amplified by WBK19 Thm 9",
}
_MECHANISMS = {
    "gaussian": GaussianMechanism,
    "pure": PureDPMechanism,
    "subsampled_gaussian": SubsampledGaussianMechanism,
    "barker": BarkerMechanism,
}
Mechanism = GaussianMechanism | PureDPMechanism | SubsampledGaussianMechanism | BarkerMechanism


@dataclass(frozen=True)
class PrivacyLedger:
    """Everything one sampling run released from the private data.

    Parameters
    ----------
    sampler : str
        Name of the step method.
    per_chain : tuple of mechanisms
        Releases made by *one* chain (every chain of a run makes the same releases). Methods
        without chains use ``chains=1``.
    shared : tuple of mechanisms
        Releases made once for the whole run, whatever the number of chains (a private warm
        start that every chain starts from).
    chains : int
        Number of chains; each chain is a separate release of the same data.
    delta : float
        The delta at which epsilon is reported (0 for pure epsilon-DP ledgers).
    target_epsilon : float or None
        Budget the run was calibrated to or checked against, if any.
    releasable : bool
        False when the run computed unprivatised diagnostics.
    noise_seeded : bool
        True when the privacy noise was drawn from a seed the user gave (``noise_seed``): whoever
        knows the seed can subtract the noise: publish such a result only if the seed stays
        secret.
    exact_noise : bool
        Whether the integer noise of snapped releases came from OpenDP's exact samplers.
    delta_rule : str
        How ``delta`` was chosen (e.g. the default rule), for the record.
    adaptation : str
        What the run tuned and from what (released values only: post-processing, no budget);
        empty when nothing adapted.
    data_location : str
        Where the rows were when the per-row sums were computed ("in memory", or a Dask cluster,
        without partition or worker counts, which can depend on the data's sizes); the analysis
        is the same (noise on the exact clipped sum).
    """

    sampler: str
    per_chain: tuple[Mechanism, ...]
    chains: int
    delta: float
    target_epsilon: float | None = None
    releasable: bool = True
    neighbouring: str = "replace-one (substitution) of one row; n is public"
    unit: str = "one row of the observed data (one person)"
    accountant: str = ""
    noise_seeded: bool = False
    exact_noise: bool = False
    delta_rule: str = ""
    shared: tuple[Mechanism, ...] = ()
    adaptation: str = ""
    data_location: str = "in memory"

    def __post_init__(self) -> None:
        if self.chains < 1:
            raise ValueError(f"`chains` must be >= 1, got {self.chains}")
        regime = self.regime
        if regime != "pure" or self.delta != 0:
            check_delta(self.delta)
        if not self.accountant:
            name = self._approximate_all[1]
            if regime == "pure" or any(isinstance(m, PureDPMechanism) for m in self._all):
                name = " + ".join(filter(None, [name, PURE_ACCOUNTANT]))
            object.__setattr__(self, "accountant", name)

    @property
    def regime(self) -> str:
        """Which accountant composes the (epsilon, delta) part: ``"gaussian"`` (exact PLD),
        ``"pld"`` (dp-accounting, Poisson subsampling), ``"rdp"`` or ``"pure"``."""
        kinds = {m.kind for m in self._all} - {"pure"}
        poisson = any(getattr(m, "sampling", "") == "poisson" for m in self._all)
        if not kinds:
            return "pure"
        if kinds == {"gaussian"}:
            return "gaussian"
        if poisson:
            if "barker" in kinds or any(
                getattr(m, "sampling", "") == "fixed_size" for m in self._all
            ):
                raise ValueError(
                    "A ledger cannot compose Poisson-subsampled releases (PLD) with fixed-size "
                    "subsampled or DP Barker releases (RDP)."
                )
            return "pld"
        return "rdp"

    @property
    def _all(self) -> tuple[Mechanism, ...]:
        return (*self.per_chain, *self.shared)

    @staticmethod
    def _mu(mechanisms) -> float:
        return float(sum(m.mu for m in mechanisms if isinstance(m, GaussianMechanism)))

    @property
    def mu_per_chain(self) -> float:
        return self._mu(self.per_chain)

    @property
    def mu_shared(self) -> float:
        return self._mu(self.shared)

    @property
    def mu(self) -> float:
        return self.chains * self.mu_per_chain + self.mu_shared

    def _pure_epsilon(self, chains: int) -> float:
        def total(mechanisms) -> float:
            return float(
                sum(m.epsilon * m.count for m in mechanisms if isinstance(m, PureDPMechanism))
            )

        return chains * total(self.per_chain) + total(self.shared)

    def _curve(self, mechanisms, orders) -> np.ndarray:
        from pymc_dp.accounting.rdp import gaussian_rdp

        total = np.zeros_like(orders)
        for m in mechanisms:
            if isinstance(m, GaussianMechanism):
                total = total + m.count * gaussian_rdp(m.noise_multiplier, orders)
            elif not isinstance(m, PureDPMechanism) and m.count:
                total = total + m.count * m.rdp(orders)
        return total

    def _orders(self) -> np.ndarray:
        from pymc_dp.accounting.rdp import DP_ACCOUNTING_ORDERS

        barker = [m for m in self._all if isinstance(m, BarkerMechanism)]
        return barker[0].orders() if barker else DP_ACCOUNTING_ORDERS

    def rdp_curve(self) -> tuple[np.ndarray, np.ndarray]:
        """``(orders, RDP of one chain)`` for the ``"rdp"`` regime (shared releases excluded)."""
        orders = self._orders()
        return orders, self._curve(self.per_chain, orders)

    def _approximate(self, chains: int) -> tuple[float, str]:
        """Epsilon of the non-pure mechanisms of ``chains`` chains, and the accountant's name."""
        regime = self.regime
        if regime == "pure":
            return 0.0, ""
        if regime == "gaussian":
            mu = chains * self.mu_per_chain + self.mu_shared
            return float(gaussian_epsilon(mu, self.delta)), GAUSSIAN_ACCOUNTANT
        if regime == "pld":
            accountant = pld.PLDAccountant(
                NeighboringRelation.REPLACE_ONE, value_discretization_interval=PLD_DISCRETIZATION
            )

            def events(mechanisms) -> list:
                out = []
                for m in mechanisms:
                    if isinstance(m, GaussianMechanism):  # REPLACE_ONE doubles the shift itself
                        event = dp_accounting.GaussianDpEvent(2.0 * m.noise_multiplier)
                        out.append(dp_accounting.SelfComposedDpEvent(event, m.count))
                    elif isinstance(m, SubsampledGaussianMechanism):
                        out.append(m.to_dp_event())
                return out

            if self.per_chain:
                accountant.compose(dp_accounting.ComposedDpEvent(events(self.per_chain)), chains)
            if self.shared:
                accountant.compose(dp_accounting.ComposedDpEvent(events(self.shared)))
            eps = float(accountant.get_epsilon(self.delta))
            return eps, PLD_ACCOUNTANT.format(grid=PLD_DISCRETIZATION)
        eps, order, method = self._rdp_epsilon(chains)
        curves = sorted({_CURVE_NAMES[m.kind] for m in self._all if m.kind != "pure"})
        return eps, RDP_ACCOUNTANT.format(curves="; ".join(curves), method=method, order=order)

    def _rdp_epsilon(self, chains: int, max_order: float = np.inf) -> tuple[float, float, str]:
        from pymc_dp.accounting.rdp import rdp_to_epsilon_best

        orders = self._orders()
        orders = orders[orders <= max_order]
        curve = chains * self._curve(self.per_chain, orders) + self._curve(self.shared, orders)
        return rdp_to_epsilon_best(orders, curve, self.delta)

    def epsilon_up_to(self, max_order: float) -> tuple[float, bool]:
        """:attr:`epsilon` with the ``"rdp"`` regime's conversion over the orders up to
        ``max_order`` only (a subsampled curve's cost grows with the square of its orders), and
        whether its best order lies below the largest of them. Never below :attr:`epsilon`; equal
        to it where the best order of all is among them. Outside that regime: ``(epsilon,
        True)``. Reads only the mechanisms (not :attr:`accountant`)."""
        if self.regime != "rdp":
            return self.epsilon, True
        orders = self._orders()
        eps, order, _ = self._rdp_epsilon(self.chains, max_order)
        inside = order < orders[orders <= max_order].max()
        return eps + self._pure_epsilon(self.chains), bool(inside)

    @cached_property
    def _approximate_all(self) -> tuple[float, str]:
        return self._approximate(self.chains)

    @cached_property
    def epsilon(self) -> float:
        """Epsilon of the whole run (all chains) at :attr:`delta`."""
        return self._approximate_all[0] + self._pure_epsilon(self.chains)

    @cached_property
    def epsilon_per_chain(self) -> float:
        return self._approximate(1)[0] + self._pure_epsilon(1)

    def to_dp_event(self) -> dp_accounting.DpEvent:
        """The whole run as a dp-accounting event, for use with its accountants."""
        chain = dp_accounting.ComposedDpEvent([m.to_dp_event() for m in self.per_chain])
        run = dp_accounting.SelfComposedDpEvent(chain, self.chains)
        if not self.shared:
            return run
        shared = [m.to_dp_event() for m in self.shared]
        return dp_accounting.ComposedDpEvent([run, *shared])

    # ------------------------------------------------------------------ DataTree attrs
    def to_attrs(self) -> dict:
        """Flat, netCDF-safe attrs: headline numbers plus the full ledger as JSON."""
        record = {f.name: getattr(self, f.name) for f in fields(self)}
        record["per_chain"] = [asdict(m) for m in self.per_chain]
        record["shared"] = [asdict(m) for m in self.shared]
        return {
            "pymc_dp_epsilon": self.epsilon,
            "pymc_dp_delta": self.delta,
            "pymc_dp_accountant": self.accountant,
            "pymc_dp_neighbouring": self.neighbouring,
            "pymc_dp_releasable": int(self.releasable),
            "pymc_dp_noise_seeded": int(self.noise_seeded),
            LEDGER_ATTR: json.dumps(record),
        }

    @classmethod
    def from_attrs(cls, attrs) -> PrivacyLedger:
        if LEDGER_ATTR not in attrs:
            raise KeyError(f"no '{LEDGER_ATTR}' in attrs: this result was not made by pdp.sample")
        record = json.loads(attrs[LEDGER_ATTR])
        for key in ("per_chain", "shared"):
            record[key] = tuple(
                _MECHANISMS[m.get("kind", "gaussian")](**m) for m in record.get(key, ())
            )
        return cls(**record)
