"""pymc_dp.graph: the one rule for what is private, rows and refusals (analysis only, no steps)."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_dp as pdp
from pymc_dp.graph import analyse

RNG = np.random.default_rng(11)
N = 60
X = RNG.normal(size=(N, 2))
Y = X @ np.array([1.0, -2.0]) + RNG.normal(size=N)


def _regression(**data_kw):
    with pm.Model(coords={"person": range(N), "k": range(2)}) as model:
        Xd = pm.Data("X", X, **data_kw)
        b = pm.Normal("b", shape=2)
        pm.Normal("y", Xd @ b, 1.0, observed=Y)
    return model


def test_inputs_rows_and_describe():
    graph = analyse(_regression())
    kinds = {i.label: (i.kind, i.row_axis) for i in graph.inputs}
    assert kinds["observed 'y'"] == ("observed", 0)
    assert kinds["pm.Data 'X'"] == ("row", 0)
    assert graph.n_rows == N and graph.likelihood_vars == ("b",)
    text = graph.describe()
    assert "60 rows" in text and "pm.Data 'X' (row axis 0)" in text
    assert pdp.analyse is analyse


def test_row_axis_from_dims_and_from_row_axes():
    with pm.Model(coords={"person": range(N), "k": range(2)}) as model:
        Xd = pm.Data("Xt", X.T.copy(), dims=("k", "person"))
        b = pm.Normal("b", shape=2)
        pm.Normal("y", b @ Xd, 1.0, observed=Y, dims="person")
    assert analyse(model).inputs[-1].row_axis == 1
    square = RNG.normal(size=(N, N))
    with pm.Model() as model:
        S = pm.Data("S", square)
        b = pm.Normal("b", shape=N)
        pm.Normal("y", b @ S, 1.0, observed=Y)
    with pytest.raises(ValueError, match="ambiguous"):
        analyse(model)
    graph = analyse(model, row_axes={"S": 1})
    assert [i.row_axis for i in graph.inputs if i.label == "pm.Data 'S'"] == [1]
    with pytest.raises(ValueError, match="not pm.Data"):
        analyse(model, row_axes={"nope": 0})
    with pytest.raises(ValueError, match="row length"):
        analyse(model, row_axes={"S": 5})


def test_public_containers_are_not_private():
    scales = np.array([1.0, 2.0])
    with pm.Model() as model:
        s = pm.Data("scales", scales)
        b = pm.Normal("b", shape=2)
        pm.Normal("y", X @ b, s[0], observed=Y)
        pm.Deterministic("scaled", b * s)
    with pytest.raises(ValueError, match="public=\\['scales'\\]"):
        analyse(model)  # a private container without rows: refused, never guessed
    graph = analyse(model, public=["scales"])
    assert "scaled" not in graph.private_deterministics
    assert all(i.label != "pm.Data 'scales'" for i in graph.inputs)
    with pytest.raises(ValueError, match="not pm.Data"):
        analyse(model, public=["b"])


@pytest.mark.parametrize("kind", ["mean_in_model", "lag_container", "lag_constant", "shift"])
def test_likelihood_that_is_not_row_local_is_refused(kind):
    y = Y.copy()
    with pm.Model() as model:
        b = pm.Normal("b", shape=2)
        if kind == "mean_in_model":
            Xd = pm.Data("X", X)
            pm.Normal("y", (Xd - Xd.mean(axis=0)) @ b, 1.0, observed=y)
        elif kind == "lag_container":
            yd = pm.Data("y_all", y)
            pm.Normal("y", b[0] * yd[:-1], 1.0, observed=y[1:])
        elif kind == "lag_constant":
            pm.Normal("y", b[0] * y[:-1], 1.0, observed=y[1:])
        else:
            Xd = pm.Data("X", X)
            pm.Normal("y", pt.roll(Xd @ b, 1), 1.0, observed=y)
    with pytest.raises(ValueError, match="other rows|no axis of the row|private data"):
        analyse(model)


def test_constants_are_matched_by_value():
    """PyMC embeds each NumPy array as a fresh constant; a copy of the data is the data."""
    with pm.Model() as model:
        b = pm.Normal("b", shape=2)
        pm.Normal("y", X @ b, 1.0, observed=Y)
        pm.Deterministic("copy_sum", pt.as_tensor(X.copy()).sum())
        pm.Deterministic("transposed", pt.as_tensor(X.T.copy())[0] * b[0])
        pm.Deterministic("int_copy", pt.as_tensor(np.round(Y).astype(int)).sum() * 1.0)
        pm.Deterministic("public", b.sum())
    graph = analyse(model)
    assert set(graph.private_deterministics) == {"copy_sum", "transposed"}


def test_validate_false_only_classifies():
    yy = Y.copy()
    with pm.Model() as model:
        mu = pm.Normal("mu", mu=pt.as_tensor(yy).mean())
        pm.Normal("y", mu, 1.0, observed=yy)
    with pytest.raises(ValueError, match="prior"):
        analyse(model)
    graph = analyse(model, validate=False)
    assert graph.private_reads([model["mu"]]) == ["a constant array of shape (60,)"]


def test_no_observed_variable():
    with pm.Model() as model:
        pm.Normal("a")
    with pytest.raises(ValueError, match="no observed variable"):
        analyse(model)
