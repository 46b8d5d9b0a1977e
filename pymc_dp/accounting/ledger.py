"""The privacy ledger: what a run released, how often, and what that costs.

Modelled on dp-accounting's split: a mechanism record (:class:`GaussianMechanism`,
:class:`PureDPMechanism`) *describes* a batch of releases and converts to a ``dp_accounting``
event; :class:`PrivacyLedger` *counts* them with the tightest accountant that applies:

* Gaussian mechanisms only: the exact closed form of the privacy loss distribution
  (:mod:`pymc_dp.accounting.gaussian`), PLD N(mu, 2 mu), mu = sum of count / (2 s^2) over
  mechanisms and chains;
* pure epsilon-DP mechanisms only (Laplace, sparse vector): basic composition, sum of epsilons,
  which is tight for delta = 0;
* both: the Gaussian part at ``delta`` plus the sum of the pure epsilons (basic composition of an
  (eps1, delta)- and an (eps2, 0)-DP mechanism).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import dp_accounting

from pymc_dp.accounting._validate import check_delta
from pymc_dp.accounting.gaussian import gaussian_epsilon, gaussian_mu

__all__ = ["GaussianMechanism", "PureDPMechanism", "PrivacyLedger", "LEDGER_ATTR"]

LEDGER_ATTR = "pymc_dp_ledger"
GAUSSIAN_ACCOUNTANT = "Gaussian PLD, exact closed form (Sommer et al. 2019; Raisa et al. Thm 2.4)"
PURE_ACCOUNTANT = "pure epsilon-DP, basic composition (sum of epsilons)"


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


_MECHANISMS = {"gaussian": GaussianMechanism, "pure": PureDPMechanism}
Mechanism = GaussianMechanism | PureDPMechanism


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
    chains : int
        Number of chains; each chain is a separate release of the same data.
    delta : float
        The delta at which epsilon is reported (0 for pure epsilon-DP ledgers).
    target_epsilon : float or None
        Budget the run was calibrated to or checked against, if any.
    releasable : bool
        False when the run computed unprivatised diagnostics.
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

    def __post_init__(self) -> None:
        gaussian = any(isinstance(m, GaussianMechanism) for m in self.per_chain)
        pure = any(isinstance(m, PureDPMechanism) for m in self.per_chain)
        if gaussian or self.delta != 0:
            check_delta(self.delta)
        if self.chains < 1:
            raise ValueError(f"`chains` must be >= 1, got {self.chains}")
        if not self.accountant:
            names = [GAUSSIAN_ACCOUNTANT] * gaussian + [PURE_ACCOUNTANT] * pure
            object.__setattr__(self, "accountant", " + ".join(names))

    @property
    def mu_per_chain(self) -> float:
        return float(sum(m.mu for m in self.per_chain if isinstance(m, GaussianMechanism)))

    @property
    def mu(self) -> float:
        return self.chains * self.mu_per_chain

    def _pure_epsilon(self, chains: int) -> float:
        pure = [m for m in self.per_chain if isinstance(m, PureDPMechanism)]
        return chains * float(sum(m.epsilon * m.count for m in pure))

    def _epsilon(self, chains: int) -> float:
        eps = self._pure_epsilon(chains)
        if self.mu_per_chain > 0:
            eps += float(gaussian_epsilon(chains * self.mu_per_chain, self.delta))
        return eps

    @property
    def epsilon(self) -> float:
        """Epsilon of the whole run (all chains) at :attr:`delta`."""
        return self._epsilon(self.chains)

    @property
    def epsilon_per_chain(self) -> float:
        return self._epsilon(1)

    def to_dp_event(self) -> dp_accounting.DpEvent:
        """The whole run as a dp-accounting event, for use with its accountants."""
        chain = dp_accounting.ComposedDpEvent([m.to_dp_event() for m in self.per_chain])
        return dp_accounting.SelfComposedDpEvent(chain, self.chains)

    # ------------------------------------------------------------------ DataTree attrs
    def to_attrs(self) -> dict:
        """Flat, netCDF-safe attrs: headline numbers plus the full ledger as JSON."""
        record = asdict(self)
        record["per_chain"] = [asdict(m) for m in self.per_chain]
        return {
            "pymc_dp_epsilon": self.epsilon,
            "pymc_dp_delta": self.delta,
            "pymc_dp_accountant": self.accountant,
            "pymc_dp_neighbouring": self.neighbouring,
            "pymc_dp_releasable": int(self.releasable),
            LEDGER_ATTR: json.dumps(record),
        }

    @classmethod
    def from_attrs(cls, attrs) -> PrivacyLedger:
        if LEDGER_ATTR not in attrs:
            raise KeyError(f"no '{LEDGER_ATTR}' in attrs: this result was not made by pdp.sample")
        record = json.loads(attrs[LEDGER_ATTR])
        record["per_chain"] = tuple(
            _MECHANISMS[m.get("kind", "gaussian")](**m) for m in record["per_chain"]
        )
        return cls(**record)
