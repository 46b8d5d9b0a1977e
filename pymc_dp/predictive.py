"""Predictions from a released posterior for new, public covariates.

``pm.sample_posterior_predictive(idata)`` on the model that was fitted draws the observed variables
at the *private* covariates (a function of the data) and, with ``extend_inferencedata=True``, puts
``observed_data`` back into the result; ``pm.compute_log_likelihood`` computes the exact per-row
log-likelihoods. Neither output is releasable. :func:`posterior_predictive` is the safe path: it
binds new public values to the model's ``pm.Data`` containers, refuses if the predictive graph
would still read private data, and returns only the ``predictions`` group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pymc as pm
from numpy.typing import ArrayLike
from pymc.model import Model, modelcontext
from pytensor.compile.sharedvalue import SharedVariable
from xarray import DataTree

from pymc_dp.graph import _forward_inputs, analyse

__all__ = ["posterior_predictive"]


def posterior_predictive(
    idata: DataTree,
    model: Model | None = None,
    *,
    new_data: Mapping[str, ArrayLike],
    var_names: Sequence[str] | None = None,
    random_seed=None,
) -> DataTree:
    """Draw the observed variables at new, public covariates, from a released posterior.

    Parameters
    ----------
    idata : DataTree
        A released result (``pdp.sample``): its ``posterior`` group is used.
    model : pm.Model, optional
        The fitted model (default: the model on the context stack). Covariates must be
        ``pm.Data`` containers, and observed variables should take their shape from them
        (``shape=X.shape[0]``), the PyMC idiom for predictions.
    new_data : dict
        ``{pm.Data name: public values}`` for every private container the predictions read.
        Observed containers not given are replaced by zeros of the new length (only their shape
        is used). The model's data are restored afterwards.
    var_names : sequence of str, optional
        Variables to predict (default: the observed variables).
    random_seed : optional
        Seeds the predictive draws (public randomness).

    Returns
    -------
    DataTree
        Only the group ``predictions`` (and ``predictions_constant_data``: the public new data).

    Raises
    ------
    ValueError
        If a key is not a ``pm.Data`` container, or if the predictive graph would read private
        data that ``new_data`` does not replace (for example covariates embedded as NumPy arrays).
    """
    model = modelcontext(model)
    if "posterior" not in idata.children:
        raise ValueError("`idata` has no posterior group.")
    graph = analyse(model, validate=False)
    containers = {v.name: v for v in model.data_vars}
    unknown = set(new_data) - set(containers)
    if unknown:
        raise ValueError(f"`new_data` names {sorted(unknown)}, which are not pm.Data containers.")
    targets = list(var_names) if var_names is not None else [rv.name for rv in model.observed_RVs]
    values = {k: np.asarray(v) for k, v in new_data.items()}
    rows = _new_row_count(graph, containers, values)
    observed = {o.value for o in graph.observed} | {
        model.rvs_to_values[rv] for rv in model.observed_RVs
    }
    for value in observed:
        if isinstance(value, SharedVariable) and value.name not in values and rows is not None:
            old = value.get_value(borrow=True)
            values[value.name] = np.zeros((rows, *old.shape[1:]), dtype=old.dtype)
    replaced = {id(containers[k]) for k in values}
    rvs = [model[name] for name in targets]
    reads = [
        graph.private_reads([v])[0]
        for v in graph.private_nodes(_forward_inputs(model, rvs))
        if id(v) not in replaced
    ]
    if reads:
        raise ValueError(
            f"Predicting {targets} would read private data ({', '.join(sorted(reads))}). Put "
            "covariates in pm.Data containers and give new, public values for them in `new_data`."
        )
    saved = {k: containers[k].get_value() for k in values}
    try:
        with model:
            pm.set_data(values)
            pp = pm.sample_posterior_predictive(
                idata,
                var_names=targets,
                predictions=True,
                extend_inferencedata=False,
                random_seed=random_seed,
                progressbar=False,
            )
    finally:
        with model:
            pm.set_data(saved)
    keep = {g: pp[g].to_dataset() for g in ("predictions", "predictions_constant_data") if g in pp}
    return DataTree.from_dict(keep)


def _new_row_count(graph, containers, values) -> int | None:
    """Rows of the new data, read from a given container's row axis."""
    for i in graph.row_inputs:
        name = getattr(i.var, "name", None)
        if isinstance(i.var, SharedVariable) and name in values and i.row_axis is not None:
            return int(values[name].shape[i.row_axis])
    return None
