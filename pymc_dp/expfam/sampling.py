"""PyMC integration: ``pdp.expfam.sample`` turns a conjugate PyMC model into a private posterior.

Why a function and not a step method for ``pm.sample``
------------------------------------------------------
The input of this method is the *released noisy statistic*, not the model's observed data. A
step inside ``pm.sample`` would (1) run in a model whose observed data PyMC stores in
``observed_data`` and whose log-density (``lp``, log-likelihood) it evaluates exactly; (2) need
the data to exist at all, while the modeler receiving a release typically never sees it; (3) run
one Python step per draw and chain, while this Gibbs sampler is a few vectorised NumPy operations
for all chains at once; (4) mix its latent ``s`` and ``sigma^2`` into PyMC's value variables. So
:func:`sample` reads the model graph only to recognise the conjugate pair (prior hyperparameters,
likelihood family, public structure such as trials or the known sigma), releases once if asked
to, runs the Gibbs sampler on the release and returns a DataTree shaped like ``pm.sample``'s
(``posterior`` with the model's variable name, dims and coords), without any data.
"""

from __future__ import annotations

import datetime
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import xarray as xr
from numpy.typing import ArrayLike, NDArray
from pymc.model import Model, modelcontext
from pytensor.compile.mode import Mode
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.replace import clone_replace
from pytensor.graph.traversal import ancestors, graph_inputs
from pytensor.tensor.random.op import RandomVariable
from xarray import DataTree

from pymc_dp import compiling
from pymc_dp.checks import check_count, check_epsilon
from pymc_dp.expfam.families import Binomial, Exponential, Family, Multinomial, Normal, Poisson
from pymc_dp.expfam.gibbs import GibbsTrace, gibbs, naive_posterior
from pymc_dp.expfam.release import RELEASE_ATTR, NoisyStatistic, release_statistic
from pymc_dp.noise import NoiseSource

__all__ = ["ConjugateModel", "find_conjugate_pair", "sample"]

METHOD_ATTR = "pymc_dp_expfam_method"
_METHODS = {
    "gibbs": "gibbs: noise-aware Gibbs sampler (Bernstein & Sheldon 2018, Algorithms 1-3)",
    "naive": "naive: conjugate update on the noisy statistic as if exact (MISCALIBRATED baseline)",
}
#: Which likelihoods each conjugate prior pairs with (PyTensor RandomVariable names).
_PAIRS = {
    "beta": ("binomial", "bernoulli"),
    "dirichlet": ("multinomial", "categorical"),
    "gamma": ("poisson", "exponential"),
    "normal": ("normal",),
}
_SUPPORTED = (
    "Beta -> Binomial/Bernoulli, Dirichlet -> Multinomial/Categorical, Gamma -> Poisson/"
    "Exponential, Normal -> Normal with known sigma"
)


_NUMPY = Mode(linker="py", optimizer=None)
#: Sample stats: ``name -> (dims, values)``.
_Stats = dict[str, tuple[tuple[str, ...], NDArray[np.float64]]]
#: The posterior variable: ``(name, dims, coords, deterministics)``.
_Variable = tuple[str, tuple[str, ...], dict[str, Any], tuple]


def _value(var: Variable) -> NDArray[Any]:
    if isinstance(var, SharedVariable):
        return np.asarray(var.get_value(borrow=True))
    return np.asarray(var.data)  # type: ignore[attr-defined]


def _check_prior_reads_no_data(model: Model, theta: Variable, lik: Variable) -> None:
    """Refuse a prior whose parameters read data (contract item 3; found in review: a prior
    ``Normal(mean(y), std(y))`` was accepted and the release rested on exact statistics): a
    ``pm.Data`` container, the observed values, or a copy of them (float values matched, as
    :meth:`pymc_dp.graph.ModelGraph.matches_private` matches them). Graph and values only;
    nothing is evaluated."""
    params = theta.owner.op.dist_params(theta.owner)
    observed = _value(model.rvs_to_values[lik]) if lik in model.observed_RVs else None
    floats = None
    if observed is not None and observed.dtype.kind == "f":
        floats = np.unique(observed[np.isfinite(observed) & (observed != np.round(observed))])
    for a in ancestors(params):
        data = a.type.ndim > 0 if hasattr(a.type, "ndim") else False
        if isinstance(a, SharedVariable) and data:
            raise ValueError(
                f"the prior of {theta.name!r} reads the data container {a.name!r}: a prior must "
                "not depend on the data (its exact values would be released)"
            )
        if not (isinstance(a, Constant) and data and np.size(a.data) > 1):
            continue
        value = np.asarray(a.data)
        same = (
            observed is not None
            and value.size == observed.size
            and np.array_equal(value.ravel(), observed.ravel())
        )
        if not same and floats is not None and floats.size >= 3 and value.dtype.kind == "f":
            same = np.isin(floats, value).mean() > 0.5
        if same:
            raise ValueError(
                f"the prior of {theta.name!r} reads a copy of the observed values of "
                f"{lik.name!r}: a prior must not depend on the data"
            )


def _has_random_variable(variables: list[Variable]) -> bool:
    return any(
        a.owner is not None and isinstance(a.owner.op, RandomVariable) for a in ancestors(variables)
    )


@dataclass(frozen=True)
class ConjugateModel:
    """A recognised conjugate pair in a PyMC model.

    Attributes
    ----------
    theta : str
        Name of the free parameter (the prior variable).
    dims : tuple of str
        Its dims (model dims, or ``<name>_dim_<i>``), without chain/draw.
    coords : dict
        Coordinates of those dims.
    family_cls : type
        Likelihood family; :meth:`family` builds it with its public options and bounds.
    options : dict
        Public structure read from the model (``trials``, ``categories``, known ``sigma``).
    prior : ndarray
        Conjugate-prior hyperparameters (order of the family's ``prior_name``).
    likelihood : str
        Name of the likelihood variable.
    n : int or None
        Number of records implied by the model (None if unknown).
    aggregate : bool
        The observation is an aggregate count (a scalar binomial ``k`` of ``n=N`` people, or one
        multinomial count vector): ``N`` people with one trial each.
    observed : ndarray or None
        The model's observed values (private; read only to release them).
    deterministics : tuple
        ``(name, compiled function of theta, dims)`` of the deterministics that depend on theta
        and scalar constants only.
    """

    theta: str
    dims: tuple[str, ...]
    coords: dict[str, Any]
    family_cls: type[Family]
    options: dict[str, Any]
    prior: NDArray[np.float64]
    likelihood: str
    n: int | None
    aggregate: bool
    observed: NDArray[Any] | None = field(default=None, repr=False)
    deterministics: tuple[tuple[str, Any, tuple[str, ...]], ...] = ()

    def family(self, bounds: tuple[float, float] | None = None) -> Family:
        """The likelihood family (truncated families need ``bounds``)."""
        if self.family_cls.truncated:
            if bounds is None:
                raise ValueError(
                    f"`bounds` are required for the {self.family_cls.name} likelihood of "
                    f"{self.likelihood!r}: records outside public truncation bounds are redacted "
                    "before the release. Choose them without looking at the data."
                )
            fam = self.family_cls(bounds=tuple(bounds), **self.options)  # type: ignore[call-arg]
        else:
            if bounds is not None:
                raise ValueError(
                    f"`bounds` apply to truncated likelihoods only; {self.likelihood!r} is "
                    f"{self.family_cls.name}, whose statistic is bounded already"
                )
            fam = self.family_cls(**self.options)
        fam.check_prior(self.prior)
        return fam

    def exact_statistic(
        self, family: Family, data: ArrayLike | None = None
    ) -> tuple[NDArray[np.float64], int]:
        """Exact statistic and n of ``data`` (default: the observed data). Data owner only."""
        if data is not None:
            return family.statistic(data)
        if self.observed is None:
            raise ValueError(
                f"the likelihood variable {self.likelihood!r} is not observed: pass `data=` (data "
                "owner) or `released=` (modeler)"
            )
        if not self.aggregate:
            return family.statistic(self.observed)
        counts = np.asarray(self.observed, dtype=np.float64).reshape(family.dim)
        total = int(self.n)  # type: ignore[arg-type]
        bad = (
            not np.all(np.isfinite(counts))
            or np.any(counts < 0)
            or not np.all(counts == np.round(counts))
            or counts.sum() > total
            or (family.dim > 1 and counts.sum() != total)
        )
        if bad:
            raise ValueError(
                f"observed counts of {self.likelihood!r} are outside the support for {total} "
                "people with one trial each"
            )
        return counts, total


def _evaluate_constants(params: list[Variable], what: str) -> list[NDArray[np.float64]]:
    """Evaluate parameters that must not depend on any random variable."""
    if _has_random_variable(params):
        raise ValueError(
            f"the {what} parameters depend on another random variable (hierarchical model): "
            f"only a single conjugate pair is supported ({_SUPPORTED})"
        )
    # NumPy, nothing compiled to disk: these may read the rows (review: numba's cache held
    # every per-row trial count of a model then refused)
    fn = compiling.function([], params, on_unused_input="ignore", mode=_NUMPY)
    return [np.asarray(v, dtype=np.float64) for v in fn()]


def _link(theta_rv: Variable, params: list[Variable]) -> Any:
    """``theta value -> likelihood parameters``, compiled to check the link numerically (robust to
    how PyMC writes it, e.g. the exponential's ``scale = 1 / lam``)."""
    theta_in = theta_rv.type()
    replaced = clone_replace(params, {theta_rv: theta_in})
    if _has_random_variable(replaced):
        raise ValueError(
            "the likelihood parameters depend on random variables other than the prior variable "
            f"{theta_rv.name!r}: only a single conjugate pair is supported ({_SUPPORTED})"
        )
    fn = compiling.function([theta_in], replaced, on_unused_input="ignore", mode=_NUMPY)
    return lambda t: [np.asarray(v, dtype=np.float64) for v in fn(t)]


def _test_points(prior_op: str, k: int) -> list[NDArray[np.float64]]:
    if prior_op == "beta":
        return [np.array(0.3), np.array(0.71)]
    if prior_op == "gamma":
        return [np.array(0.7), np.array(2.9)]
    if prior_op == "normal":
        return [np.array(-1.3), np.array(0.45)]
    base = np.arange(1.0, k + 1.0)
    return [base / base.sum(), base[::-1] ** 2 / (base**2).sum()]


def _constant_across(values: list[NDArray[np.float64]], name: str, lik: str) -> float:
    flat = np.concatenate([np.ravel(v) for v in values])
    if flat.size == 0 or not np.all(flat == flat[0]):
        raise ValueError(
            f"`{name}` of {lik!r} must be one constant shared by all records (not a function of "
            "the parameter, not varying by row)"
        )
    return float(flat[0])


def _find_pair(model: Model) -> tuple[Variable, Variable]:
    if model.potentials:
        raise ValueError("models with pm.Potential are not supported: the posterior would change")
    rvs = list(model.basic_RVs)
    pairs = [
        (theta, lik)
        for lik in rvs
        for theta in model.free_RVs
        if theta is not lik
        and lik.owner.op.name in _PAIRS.get(theta.owner.op.name, ())
        and theta in ancestors(lik.owner.op.dist_params(lik.owner))
    ]
    if len(pairs) != 1 or len(rvs) != 2:
        raise ValueError(
            f"pdp.expfam.sample needs a model made of exactly one conjugate pair ({_SUPPORTED}); "
            f"got random variables {[rv.name for rv in rvs]}. Models with other parameters, "
            "several likelihoods or missing values are not supported."
        )
    return pairs[0]


def find_conjugate_pair(model: Model | None = None) -> ConjugateModel:
    """Recognise the conjugate pair of a PyMC model.

    Parameters
    ----------
    model : pm.Model, optional
        Default: the model on the context stack. It must hold exactly two random variables: a
        prior (Beta, Dirichlet, Gamma or Normal with constant parameters) and a likelihood
        (Binomial/Bernoulli, Multinomial/Categorical, Poisson/Exponential, Normal with constant
        sigma) whose parameter *is* the prior variable. The likelihood may be observed (data
        owner) or not (a modeler who only has the release).

    Returns
    -------
    ConjugateModel

    Notes
    -----
    Records are the leading axis of the observed variable. A *scalar* binomial observation
    ``k`` with ``n=N`` (and a single multinomial count vector with ``n=N``) is read as ``N``
    people contributing one trial each; a vector of binomial counts (rows of multinomial
    counts) as one person per element (row) with ``n`` trials each.
    """
    model = modelcontext(model)
    theta, lik = _find_pair(model)
    _check_prior_reads_no_data(model, theta, lik)
    prior, k = _prior_hyperparameters(theta)
    evals = _checked_link_values(theta, lik, k)
    # the number of records is read from observed data only: an unobserved likelihood (the
    # modeler's placeholder) takes n from the release
    observed = _value(model.rvs_to_values[lik]) if lik in model.observed_RVs else None
    shape = tuple(observed.shape) if observed is not None else None
    family_cls, options, n, aggregate = _likelihood_structure(lik, k, evals, shape)
    dims, coords = _theta_dims(model, theta, k)
    return ConjugateModel(
        theta=theta.name,
        dims=dims,
        coords=coords,
        family_cls=family_cls,
        options=options,
        prior=prior,
        likelihood=lik.name,
        n=n,
        aggregate=aggregate,
        observed=observed,
        deterministics=_public_deterministics(model, theta),
    )


def _prior_hyperparameters(theta: Variable) -> tuple[NDArray[np.float64], int]:
    """The prior's constant hyperparameters (order of the family's ``prior_name``) and the size
    ``k`` of theta (1 for a scalar prior)."""
    p_op = theta.owner.op.name
    prior_params = _evaluate_constants(theta.owner.op.dist_params(theta.owner), "prior")
    if p_op == "dirichlet":
        if theta.type.ndim != 1:
            raise ValueError(f"the Dirichlet prior {theta.name!r} must be one vector (ndim 1)")
        prior = prior_params[0].reshape(-1)
        return prior, prior.size
    if theta.type.ndim != 0 or any(v.size != 1 for v in prior_params):
        raise ValueError(
            f"the prior variable {theta.name!r} must be a scalar with scalar parameters: "
            "batched conjugate pairs are not supported"
        )
    vals = [float(v.reshape(-1)[0]) for v in prior_params]
    # PyTensor's gamma takes (shape, scale); the family wants (shape, rate)
    return np.array([vals[0], 1.0 / vals[1]] if p_op == "gamma" else vals), 1


def _checked_link_values(theta: Variable, lik: Variable, k: int) -> list[list[NDArray[np.float64]]]:
    """The likelihood's parameters at test values of theta, after checking that its parameter is
    theta itself (the link of a conjugate pair)."""
    l_op = lik.owner.op.name
    link = _link(theta, lik.owner.op.dist_params(lik.owner))
    points = _test_points(theta.owner.op.name, k)
    evals = [link(t) for t in points]
    theta_slot = 1 if l_op in ("binomial", "multinomial") else 0
    for t, ev in zip(points, evals, strict=True):
        target = 1.0 / t if l_op == "exponential" else t
        got = ev[theta_slot]
        if got.size == 0 or not np.allclose(got, np.broadcast_to(target, got.shape), rtol=1e-10):
            what = "1 / rate (PyMC's scale)" if l_op == "exponential" else "the variable itself"
            raise ValueError(
                f"the parameter of {lik.name!r} must be the prior variable {theta.name!r} "
                f"({what}); transformations of it (logit, scaling, ...) are not conjugate"
            )
    return evals


def _likelihood_structure(
    lik: Variable, k: int, evals: list[list[NDArray[np.float64]]], shape: tuple[int, ...] | None
) -> tuple[type[Family], dict[str, Any], int | None, bool]:
    """The likelihood family, its public options, the number of records (None if unobserved) and
    whether the observation is an aggregate count, from the link values and the observed shape."""
    l_op = lik.owner.op.name
    if l_op in ("binomial", "multinomial"):
        trials = check_count(
            _constant_across([e[0] for e in evals], "n", lik.name), f"n of {lik.name!r}", 1
        )
        n: int | None = None
        aggregate = False
        if shape is not None:
            aggregate = len(shape) == (0 if l_op == "binomial" else 1)
            if aggregate:  # N people, one trial each
                n, trials = trials, 1
            else:
                n = int(shape[0])
        if l_op == "binomial":
            return Binomial, {"trials": trials}, n, aggregate
        return Multinomial, {"categories": k, "trials": trials}, n, aggregate
    n = _vector_records(lik, shape)
    if l_op == "bernoulli":
        return Binomial, {"trials": 1}, n, False
    if l_op == "categorical":
        return Multinomial, {"categories": k, "trials": 1}, n, False
    options: dict[str, Any] = {}
    if l_op == "normal":
        options = {"sigma": _constant_across([e[1] for e in evals], "sigma", lik.name)}
    family_cls = {"poisson": Poisson, "exponential": Exponential, "normal": Normal}[l_op]
    return family_cls, options, n, False


def _vector_records(lik: Variable, shape: tuple[int, ...] | None) -> int | None:
    """Records of a likelihood observed as one record per element of a vector (None if
    unobserved)."""
    if shape is None:
        return None
    if len(shape) > 1:
        raise ValueError(f"{lik.name!r} must be one record per element of a vector")
    return int(np.prod(shape, dtype=np.int64))


def _theta_dims(model: Model, theta: Variable, k: int) -> tuple[tuple[str, ...], dict[str, Any]]:
    """Dims of theta (the model's, or ``<name>_dim_0`` for an unnamed vector) and their coords."""
    dims = tuple(model.named_vars_to_dims.get(theta.name, ()) or ())
    if not dims and k > 1:
        dims = (f"{theta.name}_dim_0",)
    coords = {d: list(model.coords[d]) for d in dims if model.coords.get(d) is not None}
    return dims, coords


def _public_deterministics(model: Model, theta: Variable) -> tuple:
    """Deterministics that are functions of theta and scalar constants only (never of data: PyMC
    embeds data arrays as constants, so any array constant or shared input disqualifies)."""
    kept, dropped = [], []
    for det in model.deterministics:
        theta_in = theta.type()
        (graph,) = clone_replace([det], {theta: theta_in})
        inputs = [v for v in graph_inputs([graph]) if v is not theta_in]
        public = not _has_random_variable([graph]) and all(
            isinstance(v, Constant) and (v.data is None or np.size(v.data) <= 1) for v in inputs
        )
        if public:
            fn = compiling.function([theta_in], graph)
            kept.append((det.name, fn, tuple(model.named_vars_to_dims.get(det.name, ()) or ())))
        else:
            dropped.append(det.name)
    if dropped:
        warnings.warn(
            f"deterministics {dropped} read data, array constants or other variables and are "
            "left out of the private posterior",
            UserWarning,
            stacklevel=3,
        )
    return tuple(kept)


def _check_release(conj: ConjugateModel, family: Family, released: NoisyStatistic) -> Family:
    """The family to use with ``released``, after checking that they describe the same model."""
    rf = released.family
    if (
        conj.observed is None
        and isinstance(family, Binomial | Multinomial)
        and type(rf) is type(family)
        and rf.trials == 1
        and family.trials == released.n
    ):
        # an unobserved binomial(n=N) / multinomial(n=N) read as N people with one trial each
        family = replace(family, trials=1)
    # a release may omit the normal's sigma (not needed to release); if it has one it must agree
    comparable = family
    if isinstance(family, Normal) and isinstance(rf, Normal) and rf.sigma is None:
        comparable = replace(family, sigma=None)
    if type(rf) is not type(family) or rf.to_dict() != comparable.to_dict():
        raise ValueError(
            f"`released` is a {rf.describe()} statistic but the model needs {family.describe()}"
        )
    if conj.n is not None and conj.n != released.n:
        raise ValueError(
            f"the model's {conj.likelihood!r} has {conj.n} records but the release has "
            f"n={released.n}"
        )
    return family


def _release_for(
    conj: ConjugateModel,
    released: NoisyStatistic | None,
    data: ArrayLike | None,
    epsilon: float | None,
    bounds: tuple[float, float] | None,
    noise: NoiseSource,
) -> tuple[Family, NoisyStatistic]:
    """The family and the release to infer from: release now (data owner) or check a given one."""
    if released is None:
        if epsilon is None:
            raise ValueError(
                "pass `epsilon` to release the model's data, or `released` to use an existing "
                "release"
            )
        epsilon = check_epsilon(epsilon)
        family = conj.family(bounds)
        s, n = conj.exact_statistic(family, data)
        return family, release_statistic(s, n, family, epsilon, noise)
    if type(released.family) is not conj.family_cls:
        raise ValueError(
            f"`released` is a {released.family.describe()} statistic but the model needs a "
            f"{conj.family_cls.name} one for {conj.likelihood!r}"
        )
    rel_bounds = released.family.bounds
    if bounds is not None and rel_bounds is not None and tuple(bounds) != rel_bounds:
        raise ValueError(f"`bounds` {bounds} disagree with the release's {rel_bounds}")
    family = _check_release(conj, conj.family(rel_bounds), released)
    if isinstance(family, Normal) and released.family.sigma is None:
        released = replace(released, family=family)  # the known sigma comes from the model
    return family, released


def _datatree(
    name: str,
    dims: tuple[str, ...],
    coords: dict[str, Any],
    theta: NDArray[np.float64],
    stats: _Stats,
    deterministics: tuple,
    attrs: dict[str, Any],
) -> DataTree:
    chains, draws = theta.shape[:2]
    base = {"chain": np.arange(chains), "draw": np.arange(draws)}

    def dims_for(var: str, arr: NDArray[Any], given: tuple[str, ...]) -> tuple[str, ...]:
        extra = arr.ndim - 2
        if len(given) == extra:
            return given
        return tuple(f"{var}_dim_{i}" for i in range(extra))

    now = datetime.datetime.now(datetime.UTC).isoformat()
    group_attrs = {"created_at": now, "inference_library": "pymc_dp.expfam"}
    variables = {name: (("chain", "draw", *dims_for(name, theta, dims)), theta)}
    for det_name, fn, det_dims in deterministics:
        flat = theta.reshape(chains * draws, *theta.shape[2:])
        vals = np.stack([np.asarray(fn(t)) for t in flat])  # a compiled scalar graph per draw
        vals = vals.reshape(chains, draws, *vals.shape[1:])
        variables[det_name] = (("chain", "draw", *dims_for(det_name, vals, det_dims)), vals)
    posterior = xr.Dataset(variables, coords={**base, **coords}, attrs=group_attrs)
    groups = {"posterior": posterior}
    if stats:
        groups["sample_stats"] = xr.Dataset(
            {k: (("chain", "draw", *d), v) for k, (d, v) in stats.items()},
            coords={**base, **coords},
            attrs=group_attrs,
        )
    tree = DataTree.from_dict(groups)
    tree.attrs.update(attrs)
    return tree


def sample(
    model: Model | None = None,
    *,
    released: NoisyStatistic | None = None,
    data: ArrayLike | None = None,
    epsilon: float | None = None,
    bounds: tuple[float, float] | None = None,
    prior: ArrayLike | None = None,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    random_seed: int | np.random.Generator | None = None,
    noise_seed: int | None = None,
    method: str = "gibbs",
    var_name: str = "theta",
) -> DataTree:
    """Private posterior of a conjugate exponential-family model from noisy sufficient statistics.

    Bernstein & Sheldon (2018): one Laplace release of the sufficient statistics (pure
    ``epsilon``-DP, :func:`~pymc_dp.expfam.release`), then the Gibbs sampler of Algorithms 1-3
    (:func:`~pymc_dp.expfam.gibbs`), which is post-processing: draws, burn-in and chains cost no
    privacy. See the module docstring for why this is a function rather than a PyMC step.

    Parameters
    ----------
    model : pm.Model, optional
        A model with one conjugate pair (see :func:`find_conjugate_pair`), e.g.
        ``p = pm.Beta("p", 1, 1); pm.Binomial("k", n=1, p=p, observed=x)``. Default: the model on
        the context stack. The likelihood may be unobserved when ``released`` is given.
    released : NoisyStatistic, optional
        An existing release (the modeler's path: the data are never needed).
    data : array_like, optional
        Private records to release (data owner's path; default: the model's observed data).
    epsilon : float, optional
        Budget of the release (required unless ``released`` is given).
    bounds : (a, b), optional
        Public truncation bounds for Poisson, exponential and normal likelihoods (a release
        carries its own).
    prior : array_like, optional
        Without a model: conjugate-prior hyperparameters for ``released.family`` (order of its
        ``prior_name``); the posterior variable is then called ``var_name``.
    draws, tune, chains : int
        Kept draws, discarded burn-in iterations and number of chains (run as one vectorised
        batch).
    random_seed : int or Generator, optional
        Seeds the chains (the Gibbs sampler), not the release noise.
    noise_seed : int, optional
        Seed of the release noise (default: OS entropy); only when ``epsilon`` releases now.
    method : {"gibbs", "naive"}
        ``"naive"`` is the miscalibrated baseline (conjugate update on the noisy statistic as if
        exact), for comparison only; the result is labelled so in ``attrs``.
    var_name : str
        Name of the parameter without a model.

    Returns
    -------
    DataTree
        ``posterior`` (the parameter, and deterministics of it alone); ``sample_stats`` (Gibbs
        only: latent ``s`` and, for truncated families, ``s_hat``, both functions of the release);
        no ``observed_data`` or other data. ``attrs`` hold the privacy ledger (one release,
        ``epsilon`` independent of draws and chains; read by :func:`pymc_dp.privacy_report`),
        the release record and the method.
    """
    _check_sample_arguments(method, released, data, epsilon)
    draws = check_count(draws, "draws", minimum=1)
    tune = check_count(tune, "tune")
    chains = check_count(chains, "chains", minimum=1)
    chain_rng = np.random.default_rng(random_seed)
    if prior is not None:
        family, prior_arr, variable = _variable_without_model(model, released, prior, var_name)
    else:
        conj = find_conjugate_pair(_context_model(model))
        noise = NoiseSource(noise_seed)
        family, released = _release_for(conj, released, data, epsilon, bounds, noise)
        prior_arr = conj.prior
        variable = (conj.theta, conj.dims, conj.coords, conj.deterministics)
    name, dims, coords, dets = variable
    y = np.repeat(released.y[None, :], chains, axis=0)  # one chain per copy of the release
    theta, stats = _posterior_draws(
        method, family, prior_arr, released, y, dims, draws, tune, chain_rng
    )
    attrs = _result_attrs(released, method, family, prior_arr)
    return _datatree(name, dims, coords, theta, stats, dets, attrs)


def _posterior_draws(
    method: str,
    family: Family,
    prior: NDArray[np.float64],
    released: NoisyStatistic,
    y: NDArray[np.float64],
    dims: tuple[str, ...],
    draws: int,
    tune: int,
    rng: np.random.Generator,
) -> tuple[NDArray[np.float64], _Stats]:
    """Draws of theta from the chains (one per row of ``y``) of ``method``, and the sample stats
    (the Gibbs sampler's latent statistics; none for the naive baseline)."""
    if method != "gibbs":
        return naive_posterior(family, prior, y, released.n, draws=draws, random_seed=rng), {}
    trace = gibbs(
        family, prior, y, released.n, released.epsilon, draws=draws, tune=tune, random_seed=rng
    )
    return trace.theta, _latent_stats(trace, family, dims)


def _result_attrs(
    released: NoisyStatistic, method: str, family: Family, prior: NDArray[np.float64]
) -> dict[str, Any]:
    """Root attrs of the result: the privacy ledger, the method, the release and the prior."""
    attrs = dict(released.ledger.to_attrs())
    attrs[METHOD_ATTR] = _METHODS[method]
    attrs[RELEASE_ATTR] = released.to_json()
    attrs["pymc_dp_expfam_prior"] = f"{family.prior_name} = {prior.tolist()}"
    return attrs


def _check_sample_arguments(
    method: str, released: NoisyStatistic | None, data: ArrayLike | None, epsilon: float | None
) -> None:
    """Refuse an unknown ``method`` and a ``released`` that is not a release or comes with the
    arguments of a new one."""
    if method not in _METHODS:
        raise ValueError(f"`method` must be one of {sorted(_METHODS)}, got {method!r}")
    if released is not None and (data is not None or epsilon is not None):
        raise ValueError(
            "pass either `released` (an existing release) or `epsilon` (and optionally `data`) "
            "to release now, not both"
        )
    if released is not None and not isinstance(released, NoisyStatistic):
        raise ValueError(f"`released` must be a NoisyStatistic, got {type(released).__name__}")


def _variable_without_model(
    model: Model | None, released: NoisyStatistic | None, prior: ArrayLike, var_name: str
) -> tuple[Family, NDArray[np.float64], _Variable]:
    """The family, the checked prior and the posterior variable of a release without a model."""
    if model is not None:
        raise ValueError("pass either `model` or `prior`, not both")
    if released is None:
        raise ValueError("`prior` without a model needs `released=`")
    family = released.family
    prior_arr = family.check_prior(prior)
    dims = (f"{var_name}_dim_0",) if family.theta_shape else ()
    return family, prior_arr, (var_name, dims, {}, ())


def _context_model(model: Model | None) -> Model:
    """``model``, or the model on the context stack."""
    try:
        return modelcontext(model)
    except TypeError:
        raise ValueError(
            "no model: pass `model=`, call inside `with model:`, or pass `prior=` with `released=`"
        ) from None


def _latent_stats(trace: GibbsTrace, family: Family, dims: tuple[str, ...]) -> _Stats:
    """``sample_stats`` of a Gibbs run: the latent ``s`` and, for truncated families, ``s_hat``."""
    stats: _Stats = {"s": ((), trace.s[..., 0]) if family.dim == 1 else (dims, trace.s)}
    if trace.s_hat is not None:
        stats["s_hat"] = ((), trace.s_hat[..., 0])
    return stats
