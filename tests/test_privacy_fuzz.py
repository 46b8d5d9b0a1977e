"""Property-based fuzz of the privacy contract (docs/design.md, "The privacy contract").

Hypothesis builds random small PyMC models from the building blocks users combine (``pm.Data``
with and without dims, covariates stored (n, d) or transposed (d, n), NumPy constants,
per-row / summed / prior-only ``pm.Potential``, deterministics of parameters, of covariates and
of data only, ``initval=`` numbers and graphs, several observed variables, ``pm.Censored``,
extra private containers read only by a deterministic or a potential, containers declared
``public=[...]``, rows bound through Dask partitions of random sizes), works out from how the
model was built what the contract demands, and asserts exactly that:

1. every graph that reads private data is a counted likelihood term (a per-row potential is a
   row term), a deterministic computed but never returned, or refused before any release with a
   ``ValueError`` / ``TypeError`` naming the variable (the planner included);
2. outputs by whitelist, and no private value (element, column sum or mean) in any array or
   attr of a result, ``pdp.posterior_predictive`` included;
3. no private value in any error message (and its cause/context chain), warning or log record;
4. refusals are clear errors raised by the library, never AttributeError / KeyError / ... nor a
   TypeError from inside PyTensor;
5. the same refusal (type and message) for any partitioning of the same rows in Dask;
6. a step is spent once (a second ``pdp.sample`` is refused or accounted in one ledger), and
   ``pm.set_data`` after the step was built is refused before any release.

Every model is generated as Python source and executed, so a failing example prints a
self-contained reproduction. Data values are distinctive (``1234.5678 + 0.0013 i``, ...) so that
they cannot appear in an output or a message by chance; they are searched at several printed
precisions. Runs are tiny (n = 21 or 30, draws = 3, tune = 2, one chain) and compiled in
PyTensor's FAST_COMPILE mode (``compile_kwargs``). Hypothesis is derandomised (the same examples
on every run) and does not shrink (a failing example is already small, and shrinking would
rebuild many models); since derandomised generation starts from the simplest models, every
reason to refuse and every building block also runs as a named case (``*_CASES``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import traceback
import warnings
from pathlib import Path

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import pymc_dp as pdp

FAST = {"mode": "FAST_COMPILE"}
RUN = dict(draws=3, tune=2, chains=1, cores=1, progressbar=False, random_seed=1)
#: Exceptions a refusal may be (contract item 4); PrivacyBudgetError is a ValueError.
CLEAR_ERRORS = (ValueError, TypeError)
#: Group attrs that describe software, not data.
SOFTWARE_ATTRS = frozenset(
    {
        "created_at",
        "creation_library",
        "creation_library_version",
        "creation_library_language",
        "inference_library",
        "inference_library_version",
        "arviz_version",
        "sample_dims",
        "tuning_steps",
    }
)
PERSON_ID = "pid-"
#: Censoring bounds: public round numbers (all private y lie strictly inside).
LOWER, UPPER = 1200.0, 1300.0
BAD_VALUE = 1311.1357  # one person's value outside the censoring bounds (private)
PACKAGE_DIR = str(Path(pdp.__file__).resolve().parent)

#: NO_ZERO_TUNING_WITH_PERSON_EFFECTS: zero-tuning steps are not built for models with
#: per-person effects (30+ coordinates). Their warm start's fused Fisher kernel has more than 32
#: operands, which FAST_COMPILE evaluates in Python (NotImplementedError), and the default numba
#: mode takes about a minute per such model on this machine.
COMMON = dict(
    derandomize=True,
    deadline=None,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=list(HealthCheck),
    print_blob=False,
)


# ================================================================================ model specs
X_STORES = ("data", "data_dims", "data_t", "data_t_dims", "const", "const_t")
Y_STORES = ("data", "data_dims", "const")
EXTRAS = ("none", "rows", "rows_dims", "norows")
DETS = (
    "det_params",
    "det_fitted",
    "det_data",
    "det_extra",
    "det_public",
    "det_resid",
    "det_copy",
    "det_copy_x",
    "det_pot",
    "det_shape",
)
POTS = ("pot_rows", "pot_sum", "pot_prior", "pot_public", "pot_vec")
#: Per-row potentials that must be refused: standardised by the private mean (row i reads
#: every row), or reading a private container without rows (every row reads all of it).
BAD_POTS = ("pot_agg", "pot_mixed")


@dataclasses.dataclass(frozen=True)
class Spec:
    n: int
    d: int  # 0: no covariates
    x_store: str  # see X_STORES ("none" when d == 0)
    y_store: str
    x_public: bool  # X is a pm.Data container declared public
    y_public_attempt: bool  # the observed container named in public= (observed stays private)
    family: str  # "normal" or "censored"
    bad_row: bool  # one censored value outside the bounds
    second_obs: bool
    extra: str  # an extra private container Z: see EXTRAS
    z_in_mu: bool  # Z (with rows) is also a covariate of y_obs
    grid: bool  # a pm.Data container "grid" declared public
    dets: tuple[str, ...]
    pots: tuple[str, ...]
    pot_src: str  # what pot_rows reads: "y", "Z" (with a support of its own) or "X" (a column)
    bad_pot_row: bool  # one Z value outside pot_rows' support
    initval: str  # "none", "number", "private", "public"
    prior_private: bool  # a free variable whose prior reads private data
    re: bool = False  # a per-person random effect u (dims "obs": its coordinates are ids)
    x_centered: bool = False  # X centred by its own column means inside the model

    @property
    def dims(self) -> bool:
        return "dims" in self.x_store or "dims" in self.y_store or self.extra == "rows_dims"

    @property
    def x_container(self) -> bool:
        return self.x_store.startswith("data")

    @property
    def y_container(self) -> bool:
        return self.y_store.startswith("data")

    @property
    def predictable(self) -> bool:
        """Predictions on new covariates: X a container without dims, the observed variable's
        shape taken from it (the PyMC idiom)."""
        return self.x_store in ("data", "data_t") and self.y_store == "data" and not self.dims

    # ---------------------------------------------------------------- what the contract demands
    @property
    def x_private(self) -> bool:
        return self.d > 0 and not (self.x_container and self.x_public)

    @property
    def pot_rows_private(self) -> bool:
        return "pot_rows" in self.pots and (self.pot_src != "X" or self.x_private)

    def must_refuse(self) -> set[str]:
        """Names one of which the refusal must name (empty: the model must be accepted)."""
        names = set()
        if "pot_sum" in self.pots:
            names.add("pot_sum")
        if self.initval == "private":
            names.add("intercept")
        if self.prior_private:
            names.add("tau_prior")
        if self.bad_row:
            names.add("y_obs")
        if self.bad_pot_row:
            names.add("pot_rows")
        if "pot_agg" in self.pots:
            names.add("pot_agg")
        if "pot_mixed" in self.pots:
            names |= {"pot_mixed", "Z"}
        if self.x_centered and self.x_private:  # row i's term reads every row of X
            names |= {"y_obs", "X"}
        return names

    def may_refuse(self) -> set[str]:
        """Refusals the contract allows but does not demand (declaring an observed container
        public: refused, or ignored with the observed values kept private)."""
        return {"y_data"} if self.y_public_attempt else set()

    def planner_must_refuse(self) -> set[str]:
        """The planner evaluates the initial point and the priors: a private initval or prior
        must be refused there too."""
        names = set()
        if self.initval == "private":
            names.add("intercept")
        if self.prior_private:
            names.add("tau_prior")
        return names

    def private_dets(self) -> set[str]:
        private = set()
        for det in self.dets:
            if det == "det_fitted" and (self.x_private or self.z_in_mu):
                private.add(det)
            elif det == "det_data" and (self.x_private or self.d == 0):
                private.add(det)
            elif det in ("det_extra", "det_resid", "det_copy"):
                private.add(det)
            elif det == "det_pot" and self.pot_rows_private:
                private.add(det)
            elif det == "det_copy_x" and self.x_private:
                private.add(det)
        return private

    def public_dets(self) -> set[str]:
        return set(self.dets) - self.private_dets()

    def free_names(self) -> set[str]:
        names = {"intercept", "noise_sd"} | ({"coefs"} if self.d else set())
        names |= {"u"} if self.re else set()
        return names | ({"tau_prior"} if self.prior_private else set())

    def public_containers(self) -> list[str]:
        names = ["grid"] if self.grid else []
        if self.x_container and self.x_public:
            names.append("X")
        if self.y_public_attempt:
            names.append("y_data")
        return names

    def private_containers(self) -> list[str]:
        names = []
        if self.y_container:
            names.append("y_data")
        if self.x_container and not self.x_public:
            names.append("X")
        if self.extra != "none":
            names.append("Z")
        return names


#: Defaults of the explicit examples (a covariate matrix, nothing else).
BASE = dict(
    n=21,
    d=2,
    x_store="data",
    y_store="data",
    x_public=False,
    y_public_attempt=False,
    family="normal",
    bad_row=False,
    second_obs=False,
    extra="none",
    z_in_mu=False,
    grid=False,
    dets=(),
    pots=(),
    pot_src="y",
    bad_pot_row=False,
    initval="none",
    prior_private=False,
)


def spec_of(**kw) -> Spec:
    return Spec(**{**BASE, **kw})


def _note(text: str) -> None:
    """The reproduction: a Hypothesis note, or printed (shown by pytest on failure)."""
    try:
        note(text)
    except InvalidArgument:  # a named case, outside Hypothesis
        print(text)


def _weighted(true_weight: int, false_weight: int):
    return st.sampled_from([True] * true_weight + [False] * false_weight)


@st.composite
def specs(draw, runnable: bool = False) -> Spec:
    """A random model. ``runnable``: only models the contract says must be accepted; otherwise
    about half of the models carry one reason to refuse them."""
    n = draw(st.sampled_from((21, 30)))
    d = draw(st.sampled_from((0, 1, 2, 3)))
    x_store = draw(st.sampled_from(X_STORES)) if d else "none"
    y_store = draw(st.sampled_from(Y_STORES))
    x_public = x_store.startswith("data") and draw(_weighted(1, 3))
    family = draw(st.sampled_from(("normal", "censored")))
    extra = draw(st.sampled_from(EXTRAS))
    grid = draw(st.booleans())
    reasons = ["pot_sum", "initval", "prior", "bad_row", "bad_pot_row", "pot_agg", "pot_mixed"]
    reasons += ["x_centered"] if d else []
    reason = draw(st.sampled_from([None] if runnable else [None] * 8 + reasons))
    if reason == "bad_row":
        family = "censored"
    if reason == "bad_pot_row" and extra not in ("rows", "rows_dims"):
        extra = "rows"
    if reason == "pot_mixed":
        extra = "norows"
    dets_ok = [
        k
        for k in DETS
        if not (k in ("det_fitted", "det_copy_x") and d == 0)
        and not (k == "det_extra" and extra == "none")
        and not (k == "det_public" and not grid)
    ]
    dets = set(draw(st.sets(st.sampled_from(dets_ok), max_size=3)))
    pots_ok = [k for k in POTS if k != "pot_sum" and not (k == "pot_public" and not grid)]
    pots = set(draw(st.sets(st.sampled_from(pots_ok), max_size=2)))
    if reason == "pot_sum":
        pots.add("pot_sum")
    if reason == "bad_pot_row":
        pots.add("pot_rows")
    if reason in BAD_POTS:
        pots.add(reason)
    if "pot_rows" not in pots:
        dets.discard("det_pot")
    if not (y_store.startswith("data") or x_store.startswith("data") or extra != "none"):
        dets.discard("det_shape")  # no container: the row count is a literal
    dets, pots = tuple(sorted(dets)), tuple(sorted(pots))
    srcs = ["y"] + (["Z"] if extra in ("rows", "rows_dims") else []) + (["X"] if d else [])
    pot_src = "Z" if reason == "bad_pot_row" else draw(st.sampled_from(srcs))
    z_in_mu = extra in ("rows", "rows_dims") and draw(_weighted(1, 3))
    dims = "dims" in x_store or "dims" in y_store or extra == "rows_dims"
    re = dims and draw(_weighted(1, 3))
    inits = ["none", "number"] + (["public"] if grid else [])
    initval = "private" if reason == "initval" else draw(st.sampled_from(inits))
    y_public_attempt = y_store.startswith("data") and not runnable and draw(_weighted(1, 7))
    bad_row = reason == "bad_row"
    prior_private = reason == "prior"
    return Spec(
        n=n,
        d=d,
        x_store=x_store,
        y_store=y_store,
        x_public=x_public,
        y_public_attempt=y_public_attempt,
        family=family,
        bad_row=bad_row,
        second_obs=draw(st.booleans()),
        extra=extra,
        z_in_mu=z_in_mu,
        grid=grid,
        dets=dets,
        pots=pots,
        pot_src=pot_src,
        bad_pot_row=reason == "bad_pot_row",
        initval=initval,
        re=re,
        x_centered=reason == "x_centered",
        prior_private=prior_private,
    )


# ================================================================================ the source
def _values(n: int, d: int, variant: int) -> dict[str, str]:
    """Source of the data arrays (distinctive values; ``variant`` 1 is another data set of the
    same shape, for invariance checks)."""
    s = 11.1111 * variant  # y stays inside the censoring bounds
    return {
        "y": f"{1234.5678 + s!r} + 0.0013 * np.arange({n})",
        "X": f"{2345.6789 + s!r} + 0.0017 * np.arange({n * d}).reshape({n}, {d})",
        "Z": f"{3456.7891 + s!r} + 0.0019 * np.arange({n})",
        "Zn": f"{4567.8912 + s!r} + 0.0023 * np.arange(4)",
        "w": f"{5678.9123 + s!r} + 0.0011 * np.arange({n})",
    }


def model_source(spec: Spec, variant: int = 0) -> str:
    """Python source that builds the model of ``spec`` (executed by :func:`build`)."""
    n, d = spec.n, spec.d
    vals = _values(n, d, variant)
    L = ["import numpy as np", "import pymc as pm", "import pytensor.tensor as pt", ""]
    L.append(f"y = {vals['y']}")
    if spec.bad_row:
        L.append(f"y[5] = {BAD_VALUE!r}  # outside the censoring bounds")
    if d:
        L.append(f"X = {vals['X']}")
        if spec.x_store.endswith("_t") or "_t_" in spec.x_store:
            L.append("Xt = X.T.copy()")
    if spec.extra in ("rows", "rows_dims"):
        L.append(f"Z = {vals['Z']}")
        if spec.bad_pot_row:
            L.append("Z[5] = 3511.1357  # outside the support of pot_rows")
    elif spec.extra == "norows":
        L.append(f"Z = {vals['Zn']}")
    if spec.second_obs:
        L.append(f"w = {vals['w']}")
    if spec.grid:
        L.append("grid = 777.25 + 0.5 * np.arange(5)  # public")
    coords = ""
    if spec.dims:
        L.append(f"ids = [f'{PERSON_ID}{{7919 * i + 104729}}' for i in range({n})]")
        coords = "coords={'obs': ids}"
    L.append(f"with pm.Model({coords}) as model:")
    B = []
    obs_dims = ", dims='obs'" if spec.dims else ""
    # -- data
    if spec.y_store == "data":
        B.append("y_data = pm.Data('y_data', y)")
    elif spec.y_store == "data_dims":
        B.append("y_data = pm.Data('y_data', y, dims='obs')")
    y_src = "y_data" if spec.y_container else "pt.as_tensor(y.copy())"
    if d:
        x_src = {
            "data": "pm.Data('X', X)",
            "data_dims": "pm.Data('X', X, dims=('obs', 'coef'))",
            "data_t": "pm.Data('X', Xt)",
            "data_t_dims": "pm.Data('X', Xt, dims=('coef', 'obs'))",
        }.get(spec.x_store)
        if x_src:
            B.append(f"Xd = {x_src}")
    if spec.extra == "rows":
        B.append("Zd = pm.Data('Z', Z)")
    elif spec.extra == "rows_dims":
        B.append("Zd = pm.Data('Z', Z, dims='obs')")
    elif spec.extra == "norows":
        B.append("Zd = pm.Data('Z', Z)  # private, no rows")
    if spec.grid:
        B.append("gd = pm.Data('grid', grid)")
    # -- free variables
    init = {
        "none": "",
        "number": ", initval=0.25",
        "private": f", initval={y_src}.mean()",
        "public": ", initval=gd.mean() / 1000",
    }[spec.initval]
    B.append(f"intercept = pm.Normal('intercept', 0, 5{init})")
    B.append("noise_sd = pm.HalfNormal('noise_sd', 5)")
    if d:
        B.append(f"coefs = pm.Normal('coefs', 0, 1, shape={d})")
    if spec.prior_private:
        B.append(f"tau_prior = pm.Normal('tau_prior', mu={y_src}.mean() / 1000, sigma=1)")
    # -- likelihood
    if d:
        x = {"const": "pt.as_tensor(X)", "const_t": "pt.as_tensor(Xt)"}.get(spec.x_store, "Xd")
        transposed = "_t" in spec.x_store
        if spec.x_centered:  # column means of the (private) covariates, inside the model
            x = f"({x} - {x}.mean(axis={int(transposed)}, keepdims=True))"
        lin = f"pm.math.dot(coefs, {x})" if transposed else f"pm.math.dot({x}, coefs)"
        B.append(f"mu = intercept + {lin}")
    else:
        B.append("mu = intercept")
    if spec.z_in_mu:
        B.append("mu = mu + 0.001 * Zd")
    if spec.re:
        B.append("u = pm.Normal('u', 0, 1, dims='obs')  # one effect per person")
        B.append("mu = mu + u")
    observed = "y_data" if spec.y_container else "y"
    shape = ""
    if spec.predictable:
        shape = ", shape=Xd.shape[1]" if spec.x_store == "data_t" else ", shape=Xd.shape[0]"
    if spec.family == "normal":
        B.append(f"y_obs = pm.Normal('y_obs', mu, noise_sd, observed={observed}{obs_dims}{shape})")
    else:
        B.append(
            f"y_obs = pm.Censored('y_obs', pm.Normal.dist(mu, noise_sd), lower={LOWER}, "
            f"upper={UPPER}, observed={observed}{obs_dims}{shape})"
        )
    if spec.second_obs:
        B.append(f"pm.Normal('w_obs', intercept / 10, 1.0, observed=w{obs_dims})")
    # -- potentials
    rows_term = f"-0.5 * (({y_src} - intercept) / 1000) ** 2"
    if spec.pot_src == "Z":
        rows_term = (
            "pm.logp(pm.Uniform.dist(3400.0, 3500.0), Zd) - 0.5 * ((Zd - intercept) / 1000) ** 2"
        )
    elif spec.pot_src == "X":
        col = {
            "data": "Xd[:, 0]",
            "data_dims": "Xd[:, 0]",
            "data_t": "Xd[0]",
            "data_t_dims": "Xd[0]",
            "const": "pt.as_tensor(X)[:, 0]",
            "const_t": "pt.as_tensor(Xt)[0]",
        }[spec.x_store]
        rows_term = f"-0.5 * (({col} - intercept) / 1000) ** 2"
    sum_src = "Zd" if spec.extra != "none" else y_src
    for pot in spec.pots:
        B.append(
            {
                "pot_rows": f"pot_rows = pm.Potential('pot_rows', {rows_term}{obs_dims})"
                "  # one term per row",
                "pot_sum": f"pm.Potential('pot_sum', -0.5 * ((({sum_src} - intercept) / 1000) ** 2)"
                ".sum())",
                "pot_prior": "pm.Potential('pot_prior', -0.5 * intercept ** 2)",
                "pot_public": "pm.Potential('pot_public', -0.5 * ((gd / 1000 - intercept) ** 2)"
                ".sum())",
                "pot_vec": f"pm.Potential('pot_vec', -0.001 * intercept ** 2 * pt.ones({n}))",
                "pot_agg": f"pm.Potential('pot_agg', -0.5 * (({y_src} - {y_src}.mean() - "
                f"intercept) / 1000) ** 2{obs_dims})  # standardised by the private mean",
                "pot_mixed": f"pm.Potential('pot_mixed', -0.5 * (({y_src} - Zd.mean() - "
                f"intercept) / 1000) ** 2{obs_dims})  # every row reads Z",
            }[pot]
        )
    # -- deterministics
    x_any = ""
    if d:
        x_any = {
            "const": "pt.as_tensor(X.copy())",
            "const_t": "pt.as_tensor(Xt.copy())",
        }.get(spec.x_store, "Xd")
    for det in spec.dets:
        B.append(
            {
                "det_params": "pm.Deterministic('det_params', pt.exp(intercept / 10) + noise_sd)",
                "det_fitted": f"pm.Deterministic('det_fitted', mu{obs_dims})",
                "det_data": (
                    f"pm.Deterministic('det_data', {x_any}.sum())"
                    if d
                    else f"pm.Deterministic('det_data', {y_src}.mean())"
                ),
                "det_extra": "pm.Deterministic('det_extra', Zd.mean() * intercept)",
                "det_public": "pm.Deterministic('det_public', gd.sum() * intercept)",
                "det_resid": f"pm.Deterministic('det_resid', y_obs - mu{obs_dims})",
                "det_copy": "pm.Deterministic('det_copy', pt.as_tensor(y.copy()).std() * 1.0)",
                "det_pot": "pm.Deterministic('det_pot', pot_rows.sum() * 1.0)",
                # a copy of the covariates in the other layout (constants match by value and
                # transpose)
                "det_copy_x": "pm.Deterministic('det_copy_x', pt.as_tensor("
                + ("X.copy()" if "_t" in spec.x_store else "X.T.copy()")
                + ").sum(axis=1))",
                # the public row count of a private container
                "det_shape": "pm.Deterministic('det_shape', intercept * "
                + ("y_data" if spec.y_container else "Xd" if spec.x_container else "Zd")
                + ".shape[0])",
            }[det]
        )
    L += ["    " + b for b in B]
    return "\n".join(L) + "\n"


@dataclasses.dataclass
class Built:
    spec: Spec
    source: str
    model: pm.Model
    ns: dict
    private: dict[str, np.ndarray]  # name -> private array (as stored)

    def step_source(self, zero_tuning: bool = False) -> str:
        public = self.spec.public_containers()
        scale = "" if zero_tuning else ", proposal_scale=0.1"
        pub = f", public={public!r}" if public else ""
        return (
            f"pdp.DPPenalty(epsilon=1.0, llr_clip=2.0{scale}{pub}, "
            "compile_kwargs={'mode': 'FAST_COMPILE'})"
        )


def build(spec: Spec, variant: int = 0) -> Built:
    source = model_source(spec, variant)
    ns: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(source, "<fuzz model>", "exec"), ns)  # noqa: S102 - our own generated source
    private = {"y": ns["y"]}
    if spec.second_obs:
        private["w"] = ns["w"]
    if spec.d and spec.x_private:
        private["X"] = ns["X"]
    if spec.extra != "none":
        private["Z"] = ns["Z"]
    return Built(spec, source, ns["model"], ns, private)


def make_step(built: Built, zero_tuning: bool = False, **kw):
    with built.model:
        return pdp.DPPenalty(
            epsilon=1.0,
            llr_clip=2.0,
            **({} if zero_tuning else {"proposal_scale": 0.1}),
            public=built.spec.public_containers(),
            compile_kwargs=FAST,
            **kw,
        )


# ================================================================================ leak search
#: Fewest significant digits a printed number needs to be matched as a rounded private value
#: (fewer print too many of the released numbers' own values to tell apart).
MIN_DIGITS = 5
#: A number as text prints it: sign, digits, point, exponent.
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


class Secrets:
    """The private numbers of a model: every element, and every column and total sum and mean,
    with the strings they print as."""

    def __init__(self, arrays) -> None:
        numbers = []
        for arr in arrays:
            arr = np.asarray(arr, dtype=float)
            numbers.append(arr.ravel())
            numbers += [np.atleast_1d(arr.sum()), np.atleast_1d(arr.mean())]
            if arr.ndim == 2:
                for axis in (0, 1):
                    numbers += [arr.sum(axis=axis), arr.mean(axis=axis)]
        self.numbers = np.unique(np.concatenate(numbers))
        forms = set()
        for v in self.numbers:
            v = float(v)
            forms |= {repr(v), str(v), f"{v:.6g}", f"{v:.8g}", f"{v:.4f}", f"{v:.3f}", f"{v:.2f}"}
        self.forms = sorted(forms, key=len, reverse=True)

    def in_text(self, text: str) -> list[str]:
        """The private numbers ``text`` prints: a number in it that reads as one of their forms,
        or that is one of them rounded to the digits it prints (at least ``MIN_DIGITS``
        significant ones: ``26.89960`` for 26.899597...) or to float32. Whole numbers, not
        substrings: a released float's digits held the 5-digit form of a column sum about once
        in 100 runs (``49260`` inside ``0.1492604...``)."""
        tokens = set(_NUMBER.findall(text))
        tokens |= {t.lstrip("+-") for t in tokens}
        found = [f for f in self.forms if f in tokens]
        return found + [t for t in sorted(tokens) if self._rounds_to(t)]

    def _rounds_to(self, token: str) -> bool:
        mantissa = re.split("[eE]", token.lstrip("+-"))[0]
        digits = mantissa.replace(".", "").lstrip("0")
        if len(digits) < MIN_DIGITS:
            return False
        x = float(token)
        if not np.isfinite(x) or x == 0.0:
            return False
        half = 0.5 * 10.0 ** (np.floor(np.log10(abs(x))) - len(digits) + 1) * (1 + 1e-9)
        # or stored in float32 (or nearly equal: a longer print of the same value)
        half = max(half, float(np.finfo(np.float32).eps) * abs(x))
        i = np.searchsorted(self.numbers, x - half)
        return bool(i < self.numbers.size and self.numbers[i] <= x + half)

    def in_array(self, arr: np.ndarray) -> np.ndarray:
        """Elements of ``arr`` equal (to 1e-10 relative) to a private number."""
        a = np.asarray(arr, dtype=float).ravel()
        a = a[np.isfinite(a)]
        if not a.size:
            return a
        p = self.numbers
        idx = np.clip(np.searchsorted(p, a), 1, len(p) - 1)
        near = np.minimum(np.abs(a - p[idx - 1]), np.abs(a - p[idx]))
        return a[near <= 1e-10 * np.maximum(np.abs(a), 1.0)]


def secrets_of(built: Built, *more) -> Secrets:
    return Secrets([*built.private.values(), *more])


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def capture():
    """Record every warning and every log record (INFO and above) emitted inside."""
    root = logging.getLogger()
    handler, level = _Records(), root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    out = {"warnings": [], "logs": handler.records}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield out
            out["warnings"] = list(caught)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _chain(err: BaseException):
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def assert_nothing_leaks(secrets: Secrets, where: str, cap=None, err=None) -> None:
    """Contract item 3: no person's value in an error (and its chain), warning or log record."""
    texts = []
    if err is not None:
        for e in _chain(err):
            texts.append((f"{type(e).__name__}", str(e)))
            texts += [(f"{type(e).__name__}.args", repr(a)) for a in e.args]
    if cap is not None:
        texts += [("warning", str(w.message)) for w in cap["warnings"]]
        texts += [("log", r.getMessage()) for r in cap["logs"]]
    for kind, text in texts:
        found = secrets.in_text(text)
        assert not found, f"LEAK in {kind} ({where}): private value(s) {found[:3]} in {text!r}"


def assert_clear_refusal(err: BaseException, names: set[str], where: str) -> None:
    """Contract item 4: a ValueError / TypeError raised by the library, naming a variable."""
    tb = traceback.extract_tb(err.__traceback__)
    origin = tb[-1].filename if tb else "?"
    assert isinstance(err, CLEAR_ERRORS), (
        f"WRONG EXCEPTION ({where}): {type(err).__name__} from {origin}: {err}"
    )
    if isinstance(err, TypeError):
        assert str(Path(origin).resolve()).startswith(PACKAGE_DIR), (
            f"WRONG EXCEPTION ({where}): TypeError from inside {origin}, not a refusal of "
            f"pymc_dp: {err}"
        )
    msg = str(err)
    assert any(_names(msg, n) for n in names), (
        f"UNCLEAR REFUSAL ({where}): {type(err).__name__} does not name any of {sorted(names)}: "
        f"{msg!r}"
    )


def _names(msg: str, name: str) -> bool:
    """Whether ``msg`` names ``name``: as a word, and a one- or two-letter name quoted (or as
    ``pm.Data X``), so that e.g. a generic "X.mean()" in a message does not count."""
    if len(name) <= 2:
        return bool(re.search(rf"['\"`]{name}['\"`]|pm\.Data {name}\b", msg))
    return bool(re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", msg))


def attempt(fn):
    """``(result, exception)`` of ``fn()``, with its warnings and log records."""
    with capture() as cap:
        try:
            return fn(), None, cap
        except Exception as err:  # noqa: BLE001 - classified by the caller
            return None, err, cap


# ================================================================================ output checks
def _float_arrays(tree):
    for node in tree.subtree:
        for name, var in node.dataset.variables.items():
            arr = np.asarray(var.values)
            yield node.path, name, arr


def assert_output_is_clean(idata, built: Built, step, secrets: Secrets, public_dets) -> None:
    """Contract item 2 on a pdp.sample result."""
    spec = built.spec
    groups = set(idata.children)
    assert groups <= {"posterior", "sample_stats", "warmup_posterior", "warmup_sample_stats"}, (
        f"WHITELIST: groups {sorted(groups)}"
    )
    assert "posterior" in groups and "sample_stats" in groups, groups
    want = spec.free_names() | set(public_dets)
    got = set(idata.posterior.data_vars)
    assert got == want, (
        f"WHITELIST: posterior holds {sorted(got)}, the contract {sorted(want)} "
        f"(private deterministics {sorted(spec.private_dets())} must be absent)"
    )
    stats = set(idata.sample_stats.data_vars)
    allowed = set(type(step).releasable_stat_names())
    assert stats <= allowed, f"WHITELIST: stats {sorted(stats - allowed)} are not releasable"
    assert all(k.startswith("pymc_dp_") for k in idata.attrs), (
        f"WHITELIST: attrs {sorted(k for k in idata.attrs if not k.startswith('pymc_dp_'))}"
    )
    for node in idata.subtree:
        extra = set(node.dataset.attrs) - SOFTWARE_ATTRS
        assert node.path == "/" or not extra, f"WHITELIST: {node.path} attrs {sorted(extra)}"
    for path, name, arr in _float_arrays(idata):
        if arr.dtype.kind in "fc":
            hits = secrets.in_array(arr.real)
            assert not hits.size, f"LEAK in output {path}/{name}: private value(s) {hits[:3]}"
        if arr.dtype.kind in "UO":
            bad = [v for v in arr.ravel() if PERSON_ID in str(v) or secrets.in_text(str(v))]
            assert not bad, f"LEAK in output {path}/{name}: {bad[:3]}"
    for node in idata.subtree:
        text = repr(dict(node.dataset.attrs)) if node.path != "/" else repr(dict(idata.attrs))
        found = secrets.in_text(text) + ([PERSON_ID] if PERSON_ID in text else [])
        assert not found, f"LEAK in attrs of {node.path}: {found[:3]}"


# ================================================================================ properties
#: Named building-block models (the derandomised generation starts from the simplest models, so
#: every reason to refuse, and one model with every accepted building block, is also run by name).
ANALYSIS_CASES = {
    "initval_private": spec_of(x_store="data_t", initval="private", dets=("det_fitted",)),
    "censored_row_outside_bounds": spec_of(
        x_store="data_dims",
        y_store="data_dims",
        family="censored",
        bad_row=True,
        extra="rows_dims",
        pots=("pot_rows",),
        pot_src="Z",
    ),
    "per_row_potential_outside_its_support": spec_of(
        extra="rows", pots=("pot_rows",), pot_src="Z", bad_pot_row=True, dets=("det_pot",)
    ),
    "prior_private": spec_of(
        d=3, x_store="const_t", prior_private=True, extra="norows", dets=("det_extra", "det_copy_x")
    ),
    "per_row_potential_reads_container_without_rows": spec_of(
        d=1, y_store="const", extra="norows", pots=("pot_mixed",)
    ),
    "per_row_potential_standardised_by_private_mean": spec_of(
        d=0, x_store="none", pots=("pot_agg",)
    ),
    "constant_covariates_centred_inside_the_model": spec_of(x_store="const_t", x_centered=True),
    "every_accepted_building_block": spec_of(
        n=30,
        x_store="data_dims",
        y_store="data_dims",
        x_public=True,
        extra="rows_dims",
        z_in_mu=True,
        grid=True,
        second_obs=True,
        re=True,
        dets=("det_fitted", "det_data", "det_public", "det_copy_x", "det_shape", "det_pot"),
        pots=("pot_rows", "pot_public"),
        pot_src="X",
        initval="public",
    ),
}


@settings(max_examples=16, **COMMON)
@given(spec=specs(), invariance=_weighted(1, 1), zero_tuning=_weighted(1, 6))
def test_every_model_is_accepted_counted_or_refused_by_name(spec, invariance, zero_tuning):
    """Analysis level (no sampling), random models: see :func:`check_analysis`."""
    check_analysis(spec, invariance, zero_tuning)


@pytest.mark.parametrize("name", list(ANALYSIS_CASES))
def test_named_building_blocks_are_accepted_counted_or_refused(name):
    check_analysis(ANALYSIS_CASES[name], invariance=True, zero_tuning=name.startswith("every"))


def check_analysis(spec: Spec, invariance: bool, zero_tuning: bool) -> None:
    """Analysis level (no sampling): building the step runs every refusal. A model the contract
    accepts is accepted, its per-row potentials become row terms (nothing private in the prior),
    its private deterministics are exactly the ones reading private data, and the planner reads
    no private value; a model it refuses is refused with a clear error naming the variable;
    nothing private in any message, warning or log record."""
    zero_tuning = zero_tuning and not spec.re  # see NO_ZERO_TUNING_WITH_PERSON_EFFECTS
    built = build(spec)
    _note(built.source)
    _note("step = " + built.step_source(zero_tuning))
    secrets = secrets_of(built)
    must, may = spec.must_refuse(), spec.may_refuse()
    step, err, cap = attempt(lambda: make_step(built, zero_tuning))
    assert_nothing_leaks(secrets, "building the step", cap, err)
    if must:
        assert err is not None, f"NOT REFUSED: the contract refuses this model ({sorted(must)})"
        assert_clear_refusal(err, must | may, "building the step")
    elif err is not None:
        if not may:
            raise AssertionError(
                f"REFUSED a model the contract accepts: {type(err).__name__}: {err}"
            ) from err
        assert_clear_refusal(err, may, "building the step")
    else:
        _check_accepted_analysis(built, step)
    _check_planner(built, secrets, must | may, step_ok=err is None, invariance=invariance)


def _check_accepted_analysis(built: Built, step) -> None:
    spec, model = built.spec, built.model
    lik = step.likelihood
    assert lik.n_rows == spec.n, f"ROWS: n = {lik.n_rows}, built with {spec.n}"
    private = set(lik.graph.private_deterministics)
    assert private == spec.private_dets(), (
        f"DETERMINISTICS: dropped {sorted(private)}, the contract drops "
        f"{sorted(spec.private_dets())} (those reading private data)"
    )
    # the split of the model's log density: per-row terms (observed and per-row potentials
    # reading private data) and a public prior (priors, Jacobians, public potentials)
    point = model.initial_point()
    q = lik.ravel(point)
    rows = np.asarray(lik.logp_rows(q))
    assert rows.shape == (spec.n,), f"ROWS: per-row terms of shape {rows.shape}"
    prior = lik.prior_value(q)
    inputs = model.value_vars
    total = float(model.compile_logp(**FAST)(point))
    free = float(model.compile_logp(vars=model.free_RVs, **FAST)(point))
    pots = {p.name: p for p in model.potentials}
    fn = pytensor.function(
        inputs,
        [pt.sum(p) for p in model.replace_rvs_by_values(list(pots.values()))],
        on_unused_input="ignore",
        **FAST,
    )
    pot_values = dict(
        zip(pots, (float(v) for v in fn(*[point[v.name] for v in inputs])), strict=True)
    )
    private_pots = {"pot_rows"} if spec.pot_rows_private else set()
    public = free + sum(v for k, v in pot_values.items() if k not in private_pots)
    allowed = [public]
    for either in {"pot_vec", "pot_rows"} & set(pot_values) - private_pots:
        # a public (n,) potential may be counted as a prior term or as a row term
        allowed += [a - pot_values[either] for a in allowed]
    assert any(np.isclose(prior, a, rtol=1e-9, atol=1e-6) for a in allowed), (
        f"PRIOR: the step's prior is {prior!r}, the public part of the model is {public!r}; "
        f"potentials {pot_values} (a per-row potential reading private data is a row term)"
    )
    assert np.isclose(rows.sum() + prior, total, rtol=1e-9, atol=1e-6), (
        f"ROWS: per-row terms {rows.sum()!r} + prior {prior!r} != model logp {total!r} "
        "(a per-row potential must be counted exactly once)"
    )


def _plan(model, public):
    with model:
        return str(pdp.plan(epsilon=1.0, llr_clip=2.0, draws=3, tune=2, chains=1, public=public))


def _check_planner(
    built: Built, secrets: Secrets, names: set[str], step_ok: bool, invariance: bool
) -> None:
    """The planner reads only public facts: it refuses graphs that read private data (an
    initval or a prior), and otherwise (checked for half the models: it compiles) says the same
    for another data set of the same size."""
    spec = built.spec
    must = spec.planner_must_refuse()
    plan, err, cap = attempt(lambda: _plan(built.model, spec.public_containers()))
    assert_nothing_leaks(secrets, "pdp.plan", cap, err)
    if plan is not None:
        found = secrets.in_text(plan)
        assert not found, f"LEAK in pdp.plan output: {found[:3]}"
    if must:
        assert err is not None, (
            f"NOT REFUSED by pdp.plan: the planner evaluates {sorted(must)}, which read private "
            "data"
        )
        assert_clear_refusal(err, must | names, "pdp.plan")
        return
    if err is not None:
        if step_ok:
            raise AssertionError(
                f"pdp.plan REFUSED a model the step accepts: {type(err).__name__}: {err}"
            ) from err
        assert_clear_refusal(err, names, "pdp.plan")
        return
    if not invariance:
        return
    other = build(spec, variant=1)
    plan2, err2, _ = attempt(lambda: _plan(other.model, spec.public_containers()))
    if err2 is not None:
        # the planner runs the steps' checks (issue 20, item 6): it may refuse another data set
        # only where a step refuses it too, with the same message
        _, step_err, _ = attempt(lambda: make_step(other, False))
        assert step_err is not None and str(step_err) == str(err2), (
            f"pdp.plan refused another data set of the same size that a step accepts: {err2}"
        )
        return
    assert plan == plan2, (
        "PLANNER reads private data: its output changed with the data values (same n, "
        f"same structure):\n{plan}\n---\n{plan2}"
    )


@st.composite
def sampling_cases(draw):
    spec = draw(specs(runnable=True))
    zero_tuning = draw(_weighted(1, 5))
    initvals = draw(st.sampled_from(["none", "none", "number", "private_graph"]))
    if spec.re and draw(_weighted(1, 2)):
        initvals = "private_array"
    reuse = draw(st.sampled_from(["none", "none", "second_sample", "set_data", "plain_second"]))
    if reuse == "set_data" and not spec.private_containers():
        reuse = "second_sample"
    return spec, zero_tuning, initvals, reuse


SAMPLING_CASES = {
    "initvals_graph_of_private_data": (
        spec_of(
            extra="rows",
            z_in_mu=True,
            pots=("pot_rows",),
            pot_src="Z",
            dets=("det_fitted", "det_params", "det_pot"),
        ),
        False,
        "private_graph",
        "none",
    ),
    "initvals_array_of_private_data": (
        spec_of(y_store="data_dims", re=True, dets=("det_params",)),
        False,
        "private_array",
        "none",
    ),
    "set_data_after_the_step": (
        spec_of(extra="norows", dets=("det_extra", "det_params")),
        False,
        "number",
        "set_data",
    ),
    "second_pdp_sample_and_predictions": (
        spec_of(
            extra="rows",
            z_in_mu=True,
            grid=True,
            dets=("det_fitted", "det_params", "det_public"),
            pots=("pot_public",),
        ),
        False,
        "none",
        "second_sample",
    ),
    "zero_tuning_then_plain_pm_sample": (
        spec_of(x_store="const_t", family="censored", dets=("det_copy_x", "det_resid")),
        True,
        "none",
        "plain_second",
    ),
    "person_effects_with_ids": (
        spec_of(
            n=30,
            x_store="data_t_dims",
            y_store="data_dims",
            extra="rows_dims",
            re=True,
            second_obs=True,
            dets=("det_fitted", "det_shape", "det_params"),
            pots=("pot_rows", "pot_vec"),
            pot_src="X",
        ),
        False,
        "number",
        "none",
    ),
}


@settings(max_examples=6, **COMMON)
@given(case=sampling_cases())
def test_sampling_releases_only_the_whitelist(case):
    """Full runs of random models the contract accepts: see :func:`check_sampling`."""
    check_sampling(case)


@pytest.mark.parametrize("name", list(SAMPLING_CASES))
def test_named_runs_release_only_the_whitelist(name):
    check_sampling(SAMPLING_CASES[name])


def check_sampling(case) -> None:
    """Full runs of models the contract accepts: the result holds only the whitelist and no
    private value; initvals graphs reading private data are refused; a step is spent once;
    pm.set_data after the step was built is refused; posterior_predictive returns predictions
    and the new data only."""
    spec, zero_tuning, initvals, reuse = case
    zero_tuning = zero_tuning and not spec.re  # see NO_ZERO_TUNING_WITH_PERSON_EFFECTS
    built = build(spec)
    model = built.model
    _note(built.source)
    _note(f"step = {built.step_source(zero_tuning)}; initvals: {initvals}; reuse: {reuse}")
    secrets = secrets_of(built)
    step, err, cap = attempt(lambda: make_step(built, zero_tuning))
    assert_nothing_leaks(secrets, "building the step", cap, err)
    assert err is None, f"REFUSED a model the contract accepts: {type(err).__name__}: {err}"

    kwargs = dict(RUN, compile_kwargs=FAST)
    if initvals == "number":
        kwargs["initvals"] = {"intercept": 0.3}
    elif initvals == "private_graph":
        y_src = model["y_data"] if spec.y_container else pt.as_tensor(built.ns["y"].copy())
        kwargs["initvals"] = {"intercept": y_src.mean()}
    elif initvals == "private_array":  # the person effects start at the people's values
        kwargs["initvals"] = {"u": built.ns["y"].copy()}
    changed = None
    if reuse == "set_data":
        changed = spec.private_containers()[0]
        old = model[changed].get_value()
        new = old + 1.0 + 0.0007 * np.arange(old.size).reshape(old.shape)
        secrets = secrets_of(built, new)
        with model:
            pm.set_data({changed: new})

    def run():
        with model:
            return pdp.sample(step=step, **kwargs)

    idata, err, cap = attempt(run)
    assert_nothing_leaks(secrets, "pdp.sample", cap, err)
    if changed is not None:
        assert err is not None, (
            f"NOT REFUSED: pm.set_data changed {changed!r} after the step was built, and "
            "pdp.sample released a result"
        )
        assert_clear_refusal(err, {changed, "set_data"}, "pdp.sample after pm.set_data")
        return
    if initvals == "private_graph":
        assert err is not None, (
            "NOT REFUSED: pdp.sample(initvals={'intercept': <graph of private data>}) ran "
            + (_leaked_start(idata, secrets) if idata is not None else "")
        )
        assert_clear_refusal(err, {"intercept", "initvals"}, "pdp.sample(initvals=)")
        return
    if initvals == "private_array":
        assert err is not None, "NOT REFUSED: pdp.sample(initvals={'u': <the observed y>}) ran"
        assert_clear_refusal(err, {"u", "initvals"}, "pdp.sample(initvals=)")
        return
    assert err is None, f"pdp.sample REFUSED a model the contract accepts: {err!r}"
    assert_output_is_clean(idata, built, step, secrets, spec.public_dets())

    if reuse == "second_sample":
        again, err2, cap2 = attempt(run)
        assert_nothing_leaks(secrets, "second pdp.sample", cap2, err2)
        if err2 is not None:
            assert_clear_refusal(err2, {"step", type(step).__name__}, "second pdp.sample")
        else:
            first = pdp.privacy_report(idata).epsilon
            second = pdp.privacy_report(again).epsilon
            assert second > first * (1 + 1e-6), (
                f"SPENT TWICE: a second pdp.sample with the same step ran and its ledger says "
                f"epsilon = {second:.6g}, the first run's {first:.6g}: two releases of the "
                "same data, neither ledger accounts for both"
            )
    if reuse == "plain_second":
        with model:
            again, err2, cap2 = attempt(
                lambda: pm.sample(step=step, **RUN, compile_kwargs=FAST, return_inferencedata=True)
            )
        assert_nothing_leaks(secrets, "plain pm.sample after pdp.sample", cap2, err2)
        assert err2 is not None, (
            "SPENT TWICE: plain pm.sample ran the step that pdp.sample had already run (a second "
            "release of the same data that no ledger accounts for)"
        )
        assert_clear_refusal(err2, {"step", type(step).__name__}, "pm.sample with a spent step")
    _check_predictions(built, idata, secrets)


def _leaked_start(idata, secrets: Secrets) -> str:
    hits = secrets.in_array(idata.posterior["intercept"].values)
    return f"(the chain started at {hits[:1]}, a private mean)" if hits.size else ""


def _check_predictions(built: Built, idata, secrets: Secrets) -> None:
    """pdp.posterior_predictive: only predictions and the new data given; refused (naming the
    variable) when the prediction would read private data that new_data does not replace."""
    spec, model = built.spec, built.model
    if spec.predictable:
        d = spec.d
        new_x = 0.5 + 0.25 * np.arange(4 * d).reshape(4, d)
        if spec.x_store == "data_t":
            new_x = new_x.T.copy()
        new_data = {"X": new_x}
        if spec.z_in_mu:  # Z is a covariate too: predicting without new Z values reads Z
            _, err, cap = attempt(
                lambda: pdp.posterior_predictive(idata, model, new_data=new_data, random_seed=1)
            )
            assert_nothing_leaks(secrets, "pdp.posterior_predictive", cap, err)
            assert err is not None, "NOT REFUSED: predictions that read the private covariate Z"
            assert_clear_refusal(err, {"Z", "y_obs"}, "pdp.posterior_predictive")
            new_data["Z"] = 0.25 + 0.5 * np.arange(4)
        pred, err, cap = attempt(
            lambda: pdp.posterior_predictive(idata, model, new_data=new_data, random_seed=1)
        )
        assert_nothing_leaks(secrets, "pdp.posterior_predictive", cap, err)
        assert err is None, f"pdp.posterior_predictive refused public new data: {err!r}"
        for path, name, arr in _float_arrays(pred):
            if arr.dtype.kind == "f":
                hits = secrets.in_array(arr)
                assert not hits.size, f"LEAK in predictions {path}/{name}: {hits[:3]}"
        groups = set(pred.children)
        assert groups <= {"predictions", "predictions_constant_data"}, groups
        if "predictions_constant_data" in groups:
            held = set(pred["predictions_constant_data"].data_vars)
            # the observed container is replaced by zeros of the new length (shape only)
            allowed = set(new_data) | {"y_data"}
            assert held <= allowed, (
                f"PREDICTIONS hold containers {sorted(held - allowed)} that were not given in "
                f"new_data (the result must hold predictions and {sorted(new_data)} only)"
            )
    elif spec.x_store in ("const", "const_t") and spec.y_store == "data" and not spec.dims:
        pred, err, cap = attempt(
            lambda: pdp.posterior_predictive(idata, model, new_data={}, random_seed=1)
        )
        assert_nothing_leaks(secrets, "pdp.posterior_predictive", cap, err)
        assert err is not None, "NOT REFUSED: predictions at the private (constant) covariates"
        assert_clear_refusal(err, {"y_obs"}, "pdp.posterior_predictive")


# ================================================================================ Dask
@dataclasses.dataclass(frozen=True)
class DaskCase:
    n: int
    d: int
    dims: bool
    censored: bool
    bad_row: bool
    extra: str  # "none", "pot_rows" (a per-row potential on Z), "det" (Z read by a det)
    partitions: tuple[tuple[int, ...], ...]


@st.composite
def partitionings(draw, n: int) -> tuple[int, ...]:
    """Row partition sizes summing to n: zeros, ones, small and large blocks."""
    parts = draw(st.lists(st.sampled_from((0, 1, 2, 3, 5)), min_size=1, max_size=3))
    while sum(parts) > n - 1:
        parts.pop()
    where = draw(st.integers(0, len(parts)))
    parts.insert(where, n - sum(parts))
    return tuple(parts)


@st.composite
def dask_cases(draw) -> DaskCase:
    n = draw(st.sampled_from((21, 30)))
    censored = draw(st.booleans())
    return DaskCase(
        n=n,
        d=draw(st.sampled_from((2, 3))),
        dims=draw(st.booleans()),
        censored=censored,
        bad_row=censored and draw(st.booleans()),
        extra=draw(st.sampled_from(("none", "pot_rows", "det"))),
        partitions=(draw(partitionings(n)), draw(partitionings(n))),
    )


def dask_source(case: DaskCase, rows: int) -> str:
    """A model of ``rows`` placeholder rows (public values inside the support)."""
    d = case.d
    dims_x = ", dims=('obs', 'coef')" if case.dims else ""
    dims_y = ", dims='obs'" if case.dims else ""
    y0 = (LOWER + UPPER) / 2 if case.censored else 0.0
    L = [
        "with pm.Model() as model:",
        f"    Xd = pm.Data('X', np.zeros(({rows}, {d})){dims_x})",
        f"    y_data = pm.Data('y_data', np.full({rows}, {y0}){dims_y})",
    ]
    if case.extra != "none":
        L.append(f"    Zd = pm.Data('Z', np.zeros({rows}){dims_y})")
    L += [
        "    intercept = pm.Normal('intercept', 0, 5)",
        "    noise_sd = pm.HalfNormal('noise_sd', 5)",
        f"    coefs = pm.Normal('coefs', 0, 1, shape={d})",
        "    mu = intercept + pm.math.dot(Xd, coefs)",
        "    pm.Deterministic('det_params', pt.exp(intercept / 10) + noise_sd)",
        f"    pm.Deterministic('det_fitted', mu{dims_y})",
    ]
    if case.censored:
        L.append(
            f"    pm.Censored('y_obs', pm.Normal.dist(mu, noise_sd), lower={LOWER}, "
            f"upper={UPPER}, observed=y_data{dims_y})"
        )
    else:
        L.append(f"    pm.Normal('y_obs', mu, noise_sd, observed=y_data{dims_y})")
    if case.extra == "pot_rows":
        L.append("    pm.Potential('pot_rows', -0.5 * ((Zd - intercept) / 1000) ** 2)")
    elif case.extra == "det":
        L.append("    pm.Deterministic('det_extra', Zd.mean() * intercept)")
    return (
        "\n".join(["import numpy as np", "import pymc as pm", "import pytensor.tensor as pt"] + L)
        + "\n"
    )


def dask_rows(case: DaskCase) -> dict[str, np.ndarray]:
    n, d = case.n, case.d
    vals = _values(n, d, 0)
    rows = {"X": eval(vals["X"], {"np": np}), "y_data": eval(vals["y"], {"np": np})}  # noqa: S307
    if case.bad_row:
        rows["y_data"][5] = BAD_VALUE
    if case.extra != "none":
        rows["Z"] = eval(vals["Z"], {"np": np})  # noqa: S307
    return rows


DASK_CASES = {
    # row 5 (outside the bounds) alone in a partition, an empty partition, a partition of d rows
    # (that worker's X is square)
    "row_outside_bounds": DaskCase(
        21, 2, False, True, True, "pot_rows", partitions=((0, 5, 1, 15), (2, 19))
    ),
    "empty_and_one_row_partitions": DaskCase(
        30, 3, False, False, False, "det", partitions=((3, 0, 27), (1, 29))
    ),
}


@settings(max_examples=2, **COMMON)
@given(case=dask_cases())
def test_dask_partitions_give_the_same_refusal_or_the_same_release(client, case):
    """Random partitionings: see :func:`check_dask`."""
    check_dask(client, case)


@pytest.mark.parametrize("name", list(DASK_CASES))
def test_named_dask_partitions(client, name):
    check_dask(client, DASK_CASES[name])


def check_dask(client, case: DaskCase) -> None:
    """Rows bound through pdp.sample(data=..., client=...): for every partitioning of the same
    rows (empty and one-row partitions included), the same refusal (type and message) or the
    same draws (seeded), as with the rows bound in memory; results hold only the whitelist."""
    da = pytest.importorskip("dask.array")
    rows = dask_rows(case)
    _note(dask_source(case, 5))
    _note(f"data: {sorted(rows)}, n = {case.n}; partitions {case.partitions}")
    secrets = Secrets(list(rows.values()))

    def one(binding):
        ns: dict = {}
        exec(compile(dask_source(case, 5), "<fuzz dask model>", "exec"), ns)  # noqa: S102
        model = ns["model"]
        with model:
            step = pdp.DPPenalty(
                epsilon=1.0, llr_clip=2.0, proposal_scale=0.1, noise_seed=5, compile_kwargs=FAST
            )
        if binding == "memory":
            data = {k: v.copy() for k, v in rows.items()}
            extra = {}
        else:
            data = {
                k: da.from_array(v, chunks=(binding,) + tuple((s,) for s in v.shape[1:]))
                for k, v in rows.items()
            }
            extra = {"client": client}
        with model:
            return pdp.sample(step=step, data=data, **extra, **RUN, compile_kwargs=FAST), step

    outcomes = {}
    bindings = {"memory": "memory"}
    bindings.update({f"dask {i} {sizes}": sizes for i, sizes in enumerate(case.partitions)})
    for label, binding in bindings.items():
        result, err, cap = attempt(lambda binding=binding: one(binding))
        assert_nothing_leaks(secrets, f"rows bound as {label}", cap, err)
        outcomes[label] = (result, err)
    kinds = {
        b: (type(e).__name__, str(e)) if e is not None else ("released", "a result")
        for b, (_, e) in outcomes.items()
    }
    assert len(set(kinds.values())) == 1, (
        "PARTITION-DEPENDENT outcome (contract item 5; 'memory' = the same rows bound as NumPy): "
        + "; ".join(f"{b}: {k}" for b, k in kinds.items())
    )
    for b, (_, err) in outcomes.items():
        if case.bad_row:
            assert err is not None, f"NOT REFUSED: a row outside the censoring bounds ({b})"
            assert_clear_refusal(err, {"y_obs"}, f"rows bound as {b}")
        elif err is not None:
            raise AssertionError(
                f"REFUSED rows the contract accepts (bound as {b}): {type(err).__name__}: {err}"
            ) from err
    if case.bad_row:
        return
    draws = {}
    for binding, ((idata, _step), _) in outcomes.items():
        public = {"det_params"}  # det_fitted and det_extra read private data
        groups = set(idata.children)
        assert groups <= {"posterior", "sample_stats"}, groups
        assert set(idata.posterior.data_vars) == {"intercept", "noise_sd", "coefs"} | public, (
            f"WHITELIST ({binding}): {sorted(idata.posterior.data_vars)}"
        )
        assert all(k.startswith("pymc_dp_") for k in idata.attrs)
        found = secrets.in_text(repr(dict(idata.attrs)))
        assert not found, f"LEAK ({binding}) in attrs: {found[:3]}"
        for path, name, arr in _float_arrays(idata):
            if arr.dtype.kind == "f":
                hits = secrets.in_array(arr)
                assert not hits.size, f"LEAK ({binding}) in {path}/{name}: {hits[:3]}"
        draws[binding] = idata.posterior["coefs"].values
    ref = draws.pop("memory")
    for binding, got in draws.items():
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12, err_msg=str(binding))
