"""Public encoding (issue 21, item 5): ``pdp.encode_covariates`` and ``GLMClip.hess_clip``."""

from __future__ import annotations

import dataclasses
import doctest
import math
import warnings

import numpy as np
import pandas as pd
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

import pymc_dp as pdp
import pymc_dp.encoding


def _encode_quietly(columns, ranges, **kw) -> pdp.Encoded:
    """Encode with every warning turned into an error: a warning on data values is a leak."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return pdp.encode_covariates(columns, ranges, **kw)


def test_exported_and_doctest():
    assert {"encode_covariates", "Encoded"} <= set(pdp.__all__)
    assert doctest.testmod(pymc_dp.encoding).failed == 0


def test_values_in_unit_box_and_range_ends():
    rng = np.random.default_rng(0)
    raw = {"a": rng.normal(0, 50, 1000), "b": rng.uniform(-3, 7, 1000)}
    enc = _encode_quietly(raw, {"a": (-10, 30), "b": (0.5, 2.5)})
    assert enc.X.dtype == np.float64 and enc.X.shape == (1000, 3)
    assert np.all(np.abs(enc.X) <= 1.0)
    assert np.all(enc.X[:, 0] == 1.0) and enc.names == ("intercept", "a", "b")
    np.testing.assert_array_equal(enc.covariate_bounds, np.ones(3))
    assert enc.ranges == {"a": (-10.0, 30.0), "b": (0.5, 2.5)}

    ends = _encode_quietly({"x": np.array([-10.0, 10.0, 30.0])}, {"x": (-10, 30)}, intercept=False)
    np.testing.assert_array_equal(ends.X[:, 0], [-1.0, 0.0, 1.0])
    assert ends.names == ("x",)


def test_out_of_range_values_are_clipped():
    x = np.array([-1e6, -10.0, 0.0, 5.0, 10.0, 11.0, 1e300])
    enc = _encode_quietly({"x": x}, {"x": (0, 10)}, intercept=False)
    np.testing.assert_array_equal(enc.X[:, 0], [-1.0, -1.0, -1.0, 0.0, 1.0, 1.0, 1.0])


def test_flags_and_rates():
    flags = np.array([0, 1, 1, 0, 2, -1])  # 2 and -1 are not flags: clipped, never refused
    rates = np.array([0.0, 0.25, 1.0, 0.5, 1.5, -0.5])
    enc = _encode_quietly({"f": flags, "r": rates}, {"f": "flag", "r": "rate"})
    np.testing.assert_array_equal(enc.X[:, 1], [-1, 1, 1, -1, 1, -1])
    np.testing.assert_array_equal(enc.X[:, 2], [-1, -0.5, 1, 0, 1, -1])
    assert enc.ranges == {"f": (0.0, 1.0), "r": (0.0, 1.0)}
    bools = _encode_quietly({"f": flags[:4].astype(bool)}, {"f": "flag"}, intercept=False)
    np.testing.assert_array_equal(bools.X[:, 0], [-1, 1, 1, -1])


def test_non_finite_values_map_silently():
    x = np.array([np.nan, np.inf, -np.inf, 3.0])
    enc = _encode_quietly({"x": x, "f": x}, {"x": (2, 4), "f": "flag"}, intercept=False)
    np.testing.assert_array_equal(enc.X[:, 0], [0.0, 1.0, -1.0, 0.0])
    np.testing.assert_array_equal(enc.X[:, 1], [0.0, 1.0, -1.0, 1.0])
    # pandas' missing values too
    s = pd.Series([1, pd.NA, 0], dtype="Int64")
    np.testing.assert_array_equal(_encode_quietly({"s": s}, {"s": "flag"}).X[:, 1], [1, 0, -1])


def test_order_follows_ranges_and_dataframe_works():
    df = pd.DataFrame({"a": [0.0, 1.0], "b": [10.0, 20.0], "unused": ["x", "y"]})
    enc = _encode_quietly(df, {"b": (10, 20), "a": "flag"})
    assert enc.names == ("intercept", "b", "a")
    np.testing.assert_array_equal(enc.X, [[1, -1, -1], [1, 1, 1]])


def test_same_as_the_readmes_old_hand_arithmetic_on_randhie():
    from statsmodels.datasets import randhie

    df = randhie.load_pandas().data
    public = np.column_stack([df["lncoins"] / np.log(101), df["idp"], df["physlm"]])
    X_old = np.column_stack([np.ones(len(df)), 2 * public - 1])
    enc = _encode_quietly(df, {"lncoins": (0, np.log(101)), "idp": "flag", "physlm": "flag"})
    np.testing.assert_array_equal(enc.X, X_old)  # bit for bit
    clip = enc.clip()
    old = pdp.glm_clip(np.ones(4))
    assert clip.grad_clip == old.grad_clip == 2.0
    np.testing.assert_array_equal(clip.llr_clip, old.llr_clip)


def test_clip_passes_family_and_bounds():
    enc = _encode_quietly({"x": np.zeros(3)}, {"x": (-1, 1)})
    got = enc.clip("poisson", y_bound=30, eta_bound=2.0)
    want = pdp.glm_clip(np.ones(2), "poisson", y_bound=30, eta_bound=2.0)
    np.testing.assert_array_equal(got.llr_clip, want.llr_clip)
    assert (got.grad_clip, got.lipschitz, got.hess_clip) == (
        want.grad_clip,
        want.lipschitz,
        want.hess_clip,
    )
    with pytest.raises(TypeError, match="sigma"):
        enc.clip("normal", y_bound=1.0, eta_bound=1.0)


# ------------------------------------------------------------------------------------ errors

SECRET = 987654.321  # a data value that must never appear in a message


@pytest.mark.parametrize(
    ("ranges", "exc", "match"),
    [
        ({"x": "flags"}, ValueError, r"ranges\['x'\].*'flag' or 'rate'"),
        ({"x": (1, 2, 3)}, ValueError, r"ranges\['x'\]"),
        ({"x": 5}, ValueError, r"ranges\['x'\]"),
        ({"x": (2, 2)}, ValueError, r"ranges\['x'\].*lo < hi"),
        ({"x": (3, 2)}, ValueError, r"ranges\['x'\].*lo < hi"),
        ({"x": (0, math.inf)}, ValueError, r"ranges\['x'\].*finite"),
        ({"x": (math.nan, 1)}, ValueError, r"ranges\['x'\].*finite"),
        ({"x": (-1e308, 1e308)}, ValueError, r"ranges\['x'\].*finite"),
        ({"x": ("0", 1)}, TypeError, r"ranges\['x'\]\[0\]"),
        ({"x": (0, True)}, TypeError, r"ranges\['x'\]\[1\]"),
        ({}, ValueError, r"`ranges` is empty"),
        ({"x": (0, 1), "z": "flag"}, ValueError, r"`columns` does not have: \['z'\]"),
        ({"intercept": (0, 1)}, ValueError, r"'intercept'"),
        ([("x", (0, 1))], TypeError, r"`ranges` must be a mapping"),
    ],
)
def test_public_argument_errors_name_the_argument(ranges, exc, match):
    columns = {"x": np.array([SECRET, 0.5]), "intercept": np.array([1.0, 1.0])}
    with pytest.raises(exc, match=match) as info:
        pdp.encode_covariates(columns, ranges)
    assert str(SECRET)[:6] not in str(info.value)


def test_column_errors_name_the_column_never_a_value():
    with pytest.raises(ValueError, match="different lengths") as info:
        pdp.encode_covariates({"a": [SECRET, 1.0], "b": [0.0]}, {"a": (0, 1), "b": "flag"})
    assert str(SECRET)[:6] not in str(info.value)
    with pytest.raises(ValueError, match="column 'a' of `columns` must be 1-D"):
        pdp.encode_covariates({"a": np.full((2, 2), SECRET)}, {"a": (0, 1)})
    with pytest.raises(TypeError, match="`columns` must be a mapping"):
        pdp.encode_covariates(np.zeros((3, 2)), {"a": (0, 1)})
    # NumPy's message would quote the value; nothing of it is chained either.
    with pytest.raises(TypeError, match="column 'a' of `columns` is not numeric") as info:
        pdp.encode_covariates({"a": ["1.0", "secret-value"]}, {"a": (0, 1)})
    err = info.value
    assert "secret" not in str(err) and err.__cause__ is None and err.__context__ is None
    # the public arguments are checked before any column is read
    with pytest.raises(ValueError, match=r"ranges\['a'\]"):
        pdp.encode_covariates({"a": ["secret-value"]}, {"a": (1, 0)})


def test_nothing_data_dependent_outside_X():
    """Two data sets that differ only in how many values fall outside the public ranges (and
    where NaN/inf are) give objects equal in every field but ``X``: no clip count, no flag."""
    ranges = {"x": (0, 10), "f": "flag"}
    inside = {"x": np.linspace(0, 10, 50), "f": np.tile([0.0, 1.0], 25)}
    outside = {"x": np.linspace(-100, 100, 50), "f": np.r_[np.full(25, 7.0), np.full(25, np.nan)]}
    a, b = _encode_quietly(inside, ranges), _encode_quietly(outside, ranges)
    fields = [f.name for f in dataclasses.fields(pdp.Encoded)]
    assert fields == ["X", "names", "covariate_bounds", "ranges"]  # a new field needs review
    for name in fields[1:]:
        va, vb = getattr(a, name), getattr(b, name)
        if isinstance(va, np.ndarray):
            np.testing.assert_array_equal(va, vb)
        else:
            assert va == vb
    assert not np.array_equal(a.X, b.X)
    assert repr(a) == repr(b) and "X=" not in repr(a)  # a logged result shows no values
    ca, cb = a.clip(), b.clip()
    np.testing.assert_array_equal(ca.llr_clip, cb.llr_clip)
    assert (ca.grad_clip, ca.hess_clip) == (cb.grad_clip, cb.hess_clip)


# ------------------------------------------------------------------------------- hess_clip


def test_hess_clip_values():
    c = np.array([1.0, 0.5, 2.0])
    c2 = 1.0 + 0.25 + 4.0
    assert pdp.glm_clip(c).hess_clip == pytest.approx(0.25 * c2)
    assert pdp.glm_clip(np.ones(4)).hess_clip == 1.0
    assert pdp.glm_clip(np.ones(3)).hess_clip == 0.75  # exactly |c|^2 = 3, not sqrt(3)**2
    pois = pdp.glm_clip(c, "poisson", y_bound=30, eta_bound=2.0)
    assert pois.hess_clip == pytest.approx(math.exp(2.0) * c2)
    normal = pdp.glm_clip(c, "normal", y_bound=3.0, eta_bound=2.0, sigma=2.0)
    assert normal.hess_clip == pytest.approx(c2 / 4.0)
    # the existing fields are unchanged
    assert pois.lipschitz == 30 and normal.lipschitz == pytest.approx(5.0 / 4.0)


def _row_hessian(family: str, sigma: float = 1.0):
    """Compiled Hessian in beta of one row's negative log-likelihood, from PyMC's own logp."""
    beta, x, y = pt.dvector("beta"), pt.dvector("x"), pt.dscalar("y")
    eta = pt.dot(x, beta)
    if family == "logistic":
        dist = pm.Bernoulli.dist(logit_p=eta)
    elif family == "poisson":
        dist = pm.Poisson.dist(mu=pt.exp(eta))
    else:
        dist = pm.Normal.dist(mu=eta, sigma=sigma)
    nll = -pm.logp(dist, y)
    return pytensor.function([beta, x, y], pytensor.gradient.hessian(nll, beta))


@pytest.mark.parametrize("family", ["logistic", "poisson", "normal"])
def test_row_hessian_frobenius_norm_is_within_hess_clip(family):
    """For random beta and rows in the box ``|x_j| <= c_j`` (with ``|eta| <= eta_bound`` where
    the family needs it), the Frobenius norm of PyMC's per-row Hessian is at most ``hess_clip``,
    and the bound is reached at a corner of the box where the curvature peaks."""
    rng = np.random.default_rng(21)
    c = np.array([1.0, 1.0, 0.5, 2.0])
    eta_bound, sigma, y_bound = 1.5, 0.7, 20.0
    clip = pdp.glm_clip(c, family, y_bound=y_bound, eta_bound=eta_bound, sigma=sigma)
    hess = _row_hessian(family, sigma)
    worst = 0.0
    for _ in range(300):
        x = c * rng.choice([-1.0, 1.0], size=c.size) * rng.uniform(0.5, 1.0, c.size)
        beta = rng.normal(0, 1.5, c.size)
        if family != "logistic":  # keep |eta| <= eta_bound: the public bound Poisson relies on
            beta *= min(1.0, eta_bound / abs(x @ beta)) * rng.uniform(0, 1)
        y = {"logistic": rng.integers(0, 2), "poisson": rng.integers(0, y_bound + 1)}.get(
            family, rng.uniform(-y_bound, y_bound)
        )
        h = hess(beta, x, float(y))
        assert np.all(np.isfinite(h))
        worst = max(worst, np.linalg.norm(h, "fro"))
    assert worst <= clip.hess_clip * (1 + 1e-12)

    # Tight at a corner: logistic at eta = 0, Poisson at eta = eta_bound, normal anywhere.
    corner = c.copy()
    beta = {
        "logistic": np.zeros(c.size),
        "poisson": corner * eta_bound / (corner @ corner),
    }.get(family, rng.normal(size=c.size))
    tight = np.linalg.norm(hess(beta, corner, 1.0), "fro")
    assert tight == pytest.approx(clip.hess_clip, rel=1e-9)
