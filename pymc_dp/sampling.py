"""Safe outputs: ``pdp.sample``, ``pdp.sanitize`` and ``pdp.privacy_report``.

``pm.sample`` stores the observed and constant data in its result, and PyMC's own step methods
report the exact model log-density. ``pdp.sample`` runs ``pm.sample`` with a DP step that covers
every free variable, tells it the exact chain count, and returns a DataTree that holds only what
was privatised, with the privacy ledger in ``attrs``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pymc as pm
from pymc.model import Model, modelcontext
from xarray import DataTree

from pymc_dp.accounting.gaussian import gaussian_epsilon
from pymc_dp.accounting.ledger import GAUSSIAN_ACCOUNTANT, LEDGER_ATTR, PrivacyLedger
from pymc_dp.likelihood import data_dependent_variables
from pymc_dp.step_methods.base import DPStep, default_chains

__all__ = ["sample", "sanitize", "privacy_report", "PrivacyReport"]

#: Groups that only ever hold private data or functions of it computed without noise.
PRIVATE_GROUPS = ("observed_data", "constant_data", "log_likelihood", "log_prior")
#: Groups whose variables are checked one by one.
_POSTERIOR_GROUPS = ("posterior", "warmup_posterior")
_STATS_GROUPS = ("sample_stats", "warmup_sample_stats")


def _releasable_stat_names() -> set[str]:
    names: set[str] = set()
    stack = [DPStep]
    while stack:
        cls = stack.pop()
        names |= set(cls.releasable_stats)
        stack.extend(cls.__subclasses__())
    return names


def sanitize(idata: DataTree, model: Model | None = None) -> DataTree:
    """Strip everything that holds private data from a ``pm.sample`` result.

    Removes the groups ``observed_data``, ``constant_data``, ``log_likelihood`` and
    ``log_prior``; deterministics computed from the data (for example fitted values
    ``X @ beta``); and every sample stat that is not a privatised DP-step stat (``lp``, energies,
    exact clip fractions). Also removes ``warmup_*`` counterparts.

    Parameters
    ----------
    idata : DataTree
        Result of ``pm.sample`` (or of ``pdp.sample``, which is already clean).
    model : pm.Model, optional
        The model that produced it (default: the model on the context stack). It tells which
        deterministics read the data.
    """
    try:
        model = modelcontext(model)
    except TypeError as err:
        raise ValueError(
            "pdp.sanitize needs the model (pass `model=` or call it inside `with model:`) to "
            "know which deterministics are functions of the private data."
        ) from err
    private_dets = set(data_dependent_variables(model))
    keep_stats = _releasable_stat_names()
    drop = [g for g in PRIVATE_GROUPS if g in idata.children]
    drop += [g for g in idata.children if g.startswith("warmup_") and g[7:] in PRIVATE_GROUPS]
    out = idata.drop_nodes(drop) if drop else idata.copy()
    for group in _POSTERIOR_GROUPS:
        if group in out.children:
            names = [v for v in out[group].data_vars if v in private_dets]
            if names:
                out[group] = out[group].to_dataset().drop_vars(names)
    for group in _STATS_GROUPS:
        if group in out.children:
            names = [v for v in out[group].data_vars if v not in keep_stats]
            if names:
                out[group] = out[group].to_dataset().drop_vars(names)
    return out


def sample(
    draws: int = 1000,
    *,
    step: DPStep,
    tune: int = 1000,
    chains: int | None = None,
    cores: int | None = None,
    random_seed=None,
    model: Model | None = None,
    **kwargs,
) -> DataTree:
    """Run ``pm.sample`` with a DP step and return an output that is safe to publish.

    Parameters
    ----------
    draws, tune, chains, cores, random_seed
        As in :func:`pymc.sample`. Tuning iterations are burn-in that spends privacy budget like
        draws; every chain is a separate release, so the budget covers ``chains x (tune + draws)``
        iterations.
    step : DPStep
        A DP step method covering every free variable of the model.
    **kwargs
        Passed to :func:`pymc.sample` (for example ``progressbar``, ``discard_tuned_samples``).

    Returns
    -------
    DataTree
        Posterior and privatised sample stats only; no ``observed_data`` or ``constant_data``; no
        deterministic computed from the data. ``attrs`` holds the privacy ledger
        (``pymc_dp_epsilon``, ``pymc_dp_delta``, ``pymc_dp_accountant``, ``pymc_dp_ledger``).
    """
    model = modelcontext(model)
    if isinstance(step, list | tuple):
        if len(step) != 1:
            raise ValueError(
                "pdp.sample takes one DP step covering every free variable; several steps would "
                "each touch the data and the budget would not be split."
            )
        step = step[0]
    if not isinstance(step, DPStep):
        raise TypeError(
            f"`step` must be a pymc-dp step (DPPenalty, ...), got {type(step).__name__}: PyMC's "
            "own samplers use the exact likelihood and report it without noise."
        )
    covered = set(step.vars)
    missing = [v.name for v in model.value_vars if v not in covered]
    if missing:
        raise ValueError(
            f"Free variables {missing} are not sampled by the DP step; PyMC would give them NUTS "
            "on the exact likelihood. Refusing to run."
        )
    for key in ("trace", "idata_kwargs"):
        if kwargs.get(key):
            raise ValueError(
                f"`{key}` is not supported by pdp.sample (it could store private data)."
            )
    if cores is None:
        cores = min(4, default_chains())
    if chains is None:
        chains = max(2, cores)
    step.chains = int(chains)
    ledger = step.ledger(tune, draws)  # refuses an overspending run before any data is touched
    step._managed = True
    private_dets = data_dependent_variables(model, step.likelihood)
    var_names = [v.name for v in model.free_RVs]
    var_names += [d.name for d in model.deterministics if d.name not in private_dets]
    idata = pm.sample(
        draws=draws,
        tune=tune,
        chains=chains,
        cores=cores,
        random_seed=random_seed,
        step=step,
        model=model,
        var_names=var_names,
        **kwargs,
    )
    idata = sanitize(idata, model)
    if not ledger.releasable:
        warnings.warn(
            "This result was made with diagnostics=True: it holds exact statistics of the private "
            "data and is marked pymc_dp_releasable=0.",
            UserWarning,
            stacklevel=2,
        )
    idata.attrs.update(ledger.to_attrs())
    return idata


@dataclass(frozen=True)
class PrivacyReport:
    """Privacy spent by a sampling run."""

    epsilon: float
    delta: float
    accountant: str
    neighbouring: str
    chains: int
    epsilon_per_chain: tuple[float, ...]
    mechanisms: tuple[str, ...]
    releasable: bool
    target_epsilon: float | None = None
    source: str = "ledger"

    def __str__(self) -> str:
        lines = [
            f"(epsilon, delta) = ({self.epsilon:.6g}, {self.delta:.3g})-DP"
            f" over {self.chains} chain{'s' if self.chains != 1 else ''}",
            f"  accountant:   {self.accountant}",
            f"  neighbouring: {self.neighbouring}",
            "  per chain:    " + ", ".join(f"{e:.4g}" for e in self.epsilon_per_chain),
        ]
        if self.target_epsilon is not None:
            lines.append(f"  budget:       epsilon = {self.target_epsilon:.6g}")
        lines += [f"  mechanism:    {m}" for m in self.mechanisms]
        if not self.releasable:
            lines.append("  NOT RELEASABLE: computed with exact diagnostics (diagnostics=True)")
        if self.source != "ledger":
            lines.append(f"  source:       {self.source}")
        return "\n".join(lines)


def privacy_report(idata: DataTree) -> PrivacyReport:
    """Read the privacy spent by a run back from its DataTree.

    For a ``pdp.sample`` result this reads the ledger in ``attrs``. For a plain ``pm.sample`` result
    it composes the per-chain ``dp_mu`` stats of the DP step exactly (Gaussian PLD), so a run with
    more chains than the step was calibrated for is reported truthfully.
    """
    if LEDGER_ATTR in idata.attrs:
        ledger = PrivacyLedger.from_attrs(idata.attrs)
        return PrivacyReport(
            epsilon=ledger.epsilon,
            delta=ledger.delta,
            accountant=ledger.accountant,
            neighbouring=ledger.neighbouring,
            chains=ledger.chains,
            epsilon_per_chain=(ledger.epsilon_per_chain,) * ledger.chains,
            mechanisms=tuple(m.describe() + " per chain" for m in ledger.per_chain),
            releasable=ledger.releasable,
            target_epsilon=ledger.target_epsilon,
        )
    stats = idata["sample_stats"] if "sample_stats" in idata.children else None
    if stats is None or "dp_epsilon" not in stats.data_vars:
        raise ValueError("No privacy ledger and no DP step stats in this DataTree.")
    releasable = not ({"clip_fraction", "batch_variance"} & set(stats.data_vars))
    if "dp_mu" not in stats.data_vars:
        return _basic_composition_report(stats, releasable)
    # dp_mu is cumulative per chain and includes tuning, so the last draw is the chain's spend.
    mu_chain = stats["dp_mu"].max("draw").values.astype(float)
    delta = float(np.max(stats["dp_delta"].values))

    def eps(mu: float) -> float:  # mu = inf: a testing mode that released exact values
        return float(gaussian_epsilon(mu, delta)) if np.isfinite(mu) else np.inf

    return PrivacyReport(
        epsilon=eps(float(mu_chain.sum())),
        delta=delta,
        accountant=GAUSSIAN_ACCOUNTANT,
        neighbouring="replace-one (substitution) of one row; n is public",
        chains=int(mu_chain.size),
        epsilon_per_chain=tuple(eps(m) for m in mu_chain),
        mechanisms=(f"Gaussian releases composed from sample_stats: mu = {mu_chain.sum():.6g}",),
        releasable=releasable,
        source="composed from the per-chain dp_mu sample stats (plain pm.sample result)",
    )


def _basic_composition_report(stats, releasable: bool) -> PrivacyReport:
    """Minibatch steps: per-chain (epsilon, delta) stats, composed across chains by basic
    composition (epsilons and deltas add). Valid but loose; ``pdp.sample`` records the ledger,
    which composes the chains inside the accountant."""
    eps_chain = stats["dp_epsilon"].max("draw").values.astype(float)
    delta = float(np.max(stats["dp_delta"].values))
    chains = int(eps_chain.size)
    return PrivacyReport(
        epsilon=float(eps_chain.sum()),
        delta=chains * delta,
        accountant="basic composition across chains of each chain's own accountant",
        neighbouring="replace-one (substitution) of one row; n is public",
        chains=chains,
        epsilon_per_chain=tuple(float(e) for e in eps_chain),
        mechanisms=(
            f"{chains} chains, each ({', '.join(f'{e:.4g}' for e in eps_chain)})-DP "
            f"at delta = {delta:.3g}",
        ),
        releasable=releasable,
        source="per-chain dp_epsilon stats of a plain pm.sample result (loose: use pdp.sample)",
    )
