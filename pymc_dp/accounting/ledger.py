"""The privacy ledger: what a run released, how often, and what that costs.

Modelled on dp-accounting's split: a :class:`GaussianMechanism` *describes* a batch of releases (it
converts to a ``dp_accounting`` event), and :class:`PrivacyLedger` *counts* them with the tightest
accountant that applies. For compositions of Gaussian mechanisms that is the exact closed form of
the privacy loss distribution (:mod:`pymc_dp.accounting.gaussian`): the PLD of the composition is
N(mu, 2 mu) with mu = sum of count / (2 s^2) over mechanisms and chains.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import dp_accounting

from pymc_dp.accounting._validate import check_delta
from pymc_dp.accounting.gaussian import gaussian_epsilon, gaussian_mu

__all__ = ["GaussianMechanism", "PrivacyLedger", "LEDGER_ATTR"]

LEDGER_ATTR = "pymc_dp_ledger"
GAUSSIAN_ACCOUNTANT = "Gaussian PLD, exact closed form (Sommer et al. 2019; Raisa et al. Thm 2.4)"


@dataclass(frozen=True)
class GaussianMechanism:
    """``count`` releases of a Gaussian mechanism, each with noise std = ``noise_multiplier`` x
    (L2 sensitivity under replace-one neighbours)."""

    name: str
    noise_multiplier: float
    count: int

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
class PrivacyLedger:
    """Everything one sampling run released from the private data.

    Parameters
    ----------
    sampler : str
        Name of the step method.
    per_chain : tuple of GaussianMechanism
        Releases made by *one* chain (every chain of a run makes the same releases).
    chains : int
        Number of chains; each chain is a separate release of the same data.
    delta : float
        The delta at which epsilon is reported.
    target_epsilon : float or None
        Budget the run was calibrated to or checked against, if any.
    releasable : bool
        False when the run computed unprivatised diagnostics.
    """

    sampler: str
    per_chain: tuple[GaussianMechanism, ...]
    chains: int
    delta: float
    target_epsilon: float | None = None
    releasable: bool = True
    neighbouring: str = "replace-one (substitution) of one row; n is public"
    unit: str = "one row of the observed data (one person)"
    accountant: str = field(default=GAUSSIAN_ACCOUNTANT)

    def __post_init__(self) -> None:
        check_delta(self.delta)
        if self.chains < 1:
            raise ValueError(f"`chains` must be >= 1, got {self.chains}")

    @property
    def mu_per_chain(self) -> float:
        return float(sum(m.mu for m in self.per_chain))

    @property
    def mu(self) -> float:
        return self.chains * self.mu_per_chain

    @property
    def epsilon(self) -> float:
        """Epsilon of the whole run (all chains) at :attr:`delta`."""
        return float(gaussian_epsilon(self.mu, self.delta))

    @property
    def epsilon_per_chain(self) -> float:
        return float(gaussian_epsilon(self.mu_per_chain, self.delta))

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
        record["per_chain"] = tuple(GaussianMechanism(**m) for m in record["per_chain"])
        return cls(**record)
