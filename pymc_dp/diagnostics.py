"""Diagnostics that speak DP: warnings after sampling, from released quantities only.

The acceptance rate, R-hat and the effective sample size are computed from the draws and the
privatised accept decisions, so checking them costs no privacy. A DP chain fails in DP-specific
ways (the noise per step is too large for its step, or the budget buys too few effective samples
for the chains to mix), so the warnings name the likely cause and what the planner advises.
"""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
from xarray import DataTree

__all__ = ["dp_warnings", "warn"]


def dp_warnings(
    idata: DataTree, *, target_accept: float | None = None, advice: str = "", free: bool = False
) -> list:
    """Messages about a released run (empty when nothing looks wrong). ``free``: the draws are
    post-processing of one release (more of them cost no budget)."""
    msgs = []
    post, stats = idata["posterior"], idata["sample_stats"]
    if "surrogate_diverging" in stats.data_vars:
        div = int(stats["surrogate_diverging"].sum())
        if div:
            msgs.append(
                f"{div} divergences of NUTS on the released statistics: its draws may be biased; "
                "raise target_accept (e.g. 0.98) or nuts_tune (free: no further budget)"
            )
    if "accepted" in stats.data_vars and target_accept is not None:
        acc = float(stats["accepted"].mean())
        if acc < 0.5 * target_accept or acc > min(0.95, 2.0 * target_accept):
            msgs.append(
                f"acceptance {acc:.2f} is far from the {target_accept:.2f} the step aims at: with "
                "a fixed proposal_scale or step_size the privacy noise per step is "
                + ("too large for the step (shorten it)" if acc < target_accept else "small")
                + "; the zero-tuning call (no proposal_scale / step_size) adapts it"
            )
    chains = post.sizes.get("chain", 1)
    if chains < 2:
        msgs.append("one chain: R-hat cannot be computed; run several chains (pdp.sample does)")
        return msgs
    ds = post.to_dataset()
    rhat = float(np.nanmax(az.rhat(ds).to_array().values))
    ess = float(np.nanmin(az.ess(ds).to_array().values))
    if not (rhat <= 1.01) and free:
        msgs.append(
            f"R-hat {rhat:.3f} > 1.01 and bulk ESS {ess:.0f}: NUTS on the released statistics "
            "has not mixed; more draws or nuts_tune cost no budget"
        )
    elif not (rhat <= 1.01):
        msgs.append(
            f"R-hat {rhat:.3f} > 1.01 and bulk ESS {ess:.0f}: the chains have not mixed. A DP "
            "chain's effective sample size is bought by the budget (it grows with n and "
            "epsilon^2, hardly with draws), so longer runs do not help"
            + (f"; {advice}" if advice else "")
        )
    elif ess < 100:
        msgs.append(f"bulk ESS {ess:.0f} < 100: intervals from these draws are rough")
    return msgs


def warn(messages: list, stacklevel: int = 3) -> None:
    for m in messages:
        warnings.warn(f"pymc-dp: {m}", UserWarning, stacklevel=stacklevel)
