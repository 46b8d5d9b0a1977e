"""Predictions from a released posterior for new, public covariates.

``pm.sample_posterior_predictive(idata)`` on the model that was fitted draws the observed variables
at the *private* covariates (a function of the data) and, with ``extend_inferencedata=True``, puts
``observed_data`` back into the result; ``pm.compute_log_likelihood`` computes the exact per-row
log-likelihoods. Neither output is releasable. :func:`posterior_predictive` is the safe path: it
binds new public values to the model's ``pm.Data`` containers, refuses if the predictive graph
would still read private data, refuses new data that are the private rows, and returns by
whitelist: the ``predictions`` group with the requested variables and the new data given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pymc as pm
from numpy.typing import ArrayLike
from pymc.model import Model, modelcontext
from pytensor.compile.sharedvalue import SharedVariable
from xarray import DataTree

from pymc_dp import compiling
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
        Built by whitelist, as :func:`pymc_dp.sample`'s result: the group ``predictions`` with
        the requested variables only, and ``predictions_constant_data`` with at most the arrays
        given in ``new_data`` (never another container of the model, nor the zeros put in the
        observed containers). Coordinates of dims that index people become ``0 .. m-1``; group
        attrs other than software versions are dropped.

    Raises
    ------
    ValueError
        If a key is not a ``pm.Data`` container; if a ``new_data`` array holds the values of
        private data (the rows the model was fitted to, or their transpose: predictions at the
        people's own covariates are functions of their data), naming the container; or if the
        predictive graph would read private data that ``new_data`` does not replace (for example
        covariates embedded as NumPy arrays).
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
    values = _public_values(graph, new_data)
    given = set(values)
    _add_observed_placeholders(model, graph, containers, values)
    _check_private_reads_replaced(model, graph, containers, values, targets)
    pp = _predict_and_restore(model, containers, values, idata, targets, random_seed)
    return _whitelisted(pp, targets, given, graph.row_dim_names)


def _public_values(graph, new_data: Mapping[str, ArrayLike]) -> dict[str, np.ndarray]:
    """``new_data`` as arrays, refusing any that holds the values of private data."""
    from pymc_dp.boundary import guarded

    values = {k: guarded(f"Reading `new_data[{k!r}]`", np.asarray, v) for k, v in new_data.items()}
    for name, value in values.items():
        if graph.matches_private(value):
            raise ValueError(
                f"`new_data[{name!r}]` holds the values of private data the model was fitted to "
                "(the rows, or their transpose): predictions there are functions of the people's "
                f"data, not of public covariates. Give new, public values for {name!r}."
            )
    return values


def _add_observed_placeholders(model, graph, containers, values) -> None:
    """Add to ``values`` zeros of the new length for the observed containers not given (only
    their shape is used)."""
    rows = _new_row_count(graph, containers, values)
    observed = {o.value for o in graph.observed} | {
        model.rvs_to_values[rv] for rv in model.observed_RVs
    }
    for value in observed:
        if isinstance(value, SharedVariable) and value.name not in values and rows is not None:
            old = value.get_value(borrow=True)
            values[value.name] = np.zeros((rows, *old.shape[1:]), dtype=old.dtype)


def _check_private_reads_replaced(model, graph, containers, values, targets) -> None:
    """Refuse when predicting ``targets`` would read private data that ``values`` does not
    replace."""
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


def _predict_and_restore(model, containers, values, idata, targets, random_seed) -> DataTree:
    """The predictions with ``values`` set into the model's containers; their data restored
    afterwards."""
    from pymc_dp.boundary import guarded

    saved = {k: containers[k].get_value() for k in values}
    try:
        return guarded(
            f"Predicting {targets}", _predict, model, values, idata, targets, random_seed
        )
    finally:
        guarded("Restoring the model's data", _set_data, model, saved)


def _whitelisted(pp: DataTree, targets, given: set[str], people) -> DataTree:
    """The result, by whitelist: the requested variables and, of the constant data, at most the
    arrays given in ``new_data``."""
    from pymc_dp.sampling import _clean_dataset

    out = {"predictions": _clean_dataset(pp["predictions"].to_dataset(), set(targets), people)}
    if given and "predictions_constant_data" in pp.children:
        data = _clean_dataset(pp["predictions_constant_data"].to_dataset(), given, people)
        if data.data_vars:
            out["predictions_constant_data"] = data
    return DataTree.from_dict(out)


def _set_data(model, values) -> None:
    with model:
        pm.set_data(values)


def _predict(model, values, idata, targets, random_seed) -> DataTree:
    _set_data(model, values)
    with model:
        return compiling.locked(
            pm.sample_posterior_predictive,
            idata,
            var_names=targets,
            predictions=True,
            extend_inferencedata=False,
            random_seed=random_seed,
            progressbar=False,
        )


def _new_row_count(graph, containers, values) -> int | None:
    """Rows of the new data, read from a given container's row axis."""
    for i in graph.row_inputs:
        name = getattr(i.var, "name", None)
        if isinstance(i.var, SharedVariable) and name in values and i.row_axis is not None:
            return int(values[name].shape[i.row_axis])
    return None
