"""The public stage of ABCDP: proposals ``(theta_t, Y_t)`` from the prior and a ``pm.Simulator``.

Park, Vinaroz & Jitkrittum (2021), Sec. 4, step 1 ("public step"): the modeller draws parameters
from the prior and pseudo-data from the simulator without touching the private data. This module
reads the model once (refusing models where that is not true), compiles one forward-sampling
function for the prior, and calls the simulator's Python function with a NumPy Generator, so a
``random_seed`` reproduces every proposal bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pymc.distributions.simulator import SimulatorRV
from pymc.model import Model
from pymc.pytensorf import reseed_rngs
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Variable
from pytensor.tensor.random.type import RandomGeneratorType
from pytensor.tensor.type_other import NoneTypeT

from pymc_dp import compiling
from pymc_dp.graph import analyse_simulator

__all__ = ["PriorSampler", "Simulation", "SimulatorModel", "simulate", "simulator_model"]


@dataclass(frozen=True)
class SimulatorModel:
    """What ABCDP needs from a PyMC model whose likelihood is one ``pm.Simulator``.

    ``observed`` is the private data: it is only ever handed to a distance. It is None when the
    rows are held in a Dask cluster: ``rows`` is then the Dask collection and ``client`` its
    cluster, ``shape`` the bound rows' shape (n is public) and ``fixed_size`` the simulator's
    ``size`` for that shape.
    """

    model: Model
    name: str
    op: SimulatorRV
    observed: NDArray[np.float64] | None
    params: tuple[Variable, ...]
    size: Variable | None
    var_names: tuple[str, ...]
    var_outputs: tuple[Variable, ...]
    shape: tuple[int, ...] = ()
    fixed_size: tuple[int, ...] | None = None
    rows: Any = None
    client: Any = None

    def __post_init__(self) -> None:
        if not self.shape and self.observed is not None:
            object.__setattr__(self, "shape", tuple(self.observed.shape))

    @property
    def n(self) -> int:
        return int(self.shape[0])

    @property
    def row_size(self) -> int:
        return int(np.prod(self.shape[1:], dtype=int))

    @property
    def simulation(self) -> Simulation:
        """The public part a worker needs to run the simulator."""
        return Simulation(self.name, self.op, self.shape, len(self.params), self.fixed_size)


@dataclass(frozen=True)
class Simulation:
    """The simulator function and the shape of one simulated data set (public, picklable)."""

    name: str
    op: SimulatorRV
    shape: tuple[int, ...]
    n_params: int
    fixed_size: tuple[int, ...] | None = None


def _data_value(var: Variable) -> np.ndarray:
    if isinstance(var, SharedVariable):
        return np.asarray(var.get_value(borrow=True))
    return np.asarray(var.data)


def simulator_model(model: Model) -> SimulatorModel:
    """Check that ``model`` is a ``pm.Simulator`` model ABCDP can run, and extract its parts.

    Raises
    ------
    ValueError
        If the model has no ``pm.Simulator`` observed variable, other observed variables or
        potentials (rejection ABC samples the prior forward and would ignore them), observed data
        that is empty, NaN or inf, or a prior / simulator input that reads the private data.
    """
    observed_rvs = list(model.observed_RVs)
    imputed = [rv.name for rv in model.free_RVs if isinstance(rv.owner.op, SimulatorRV)]
    if imputed:
        # PyMC turned NaN entries of the observed array into free variables (imputation).
        raise ValueError(
            f"The observed data of the pm.Simulator contains NaN (PyMC created {imputed} to "
            "impute them); ABCDP needs complete, finite data."
        )
    sims = [rv for rv in observed_rvs if isinstance(rv.owner.op, SimulatorRV)]
    if not sims:
        raise ValueError(
            "`model` has no pm.Simulator observed variable: ABCDP needs the likelihood to be a "
            "pm.Simulator(..., observed=data)."
        )
    if len(observed_rvs) > 1:
        names = [rv.name for rv in observed_rvs]
        raise ValueError(
            f"`model` has several observed variables {names}; ABCDP supports exactly one, a "
            "pm.Simulator (simulate all outputs in one simulator with one row per person)."
        )
    if model.potentials:
        raise ValueError(
            "`model` has potentials; rejection ABC draws from the prior forward and would ignore "
            "them. Express the prior with distributions."
        )
    if not model.free_RVs:
        raise ValueError("`model` has no free variables: there is nothing to infer.")
    (rv,) = sims
    value = model.rvs_to_values[rv]
    observed = np.asarray(_data_value(value), dtype=np.float64)
    if observed.ndim == 0 or observed.shape[0] == 0:
        raise ValueError(
            f"The observed data of `{rv.name}` must have at least one row (leading axis); got "
            f"shape {observed.shape}."
        )
    if not np.all(np.isfinite(observed)):
        raise ValueError(f"The observed data of `{rv.name}` contains NaN or inf.")
    n = observed.shape[0]
    op = rv.owner.op
    params = tuple(op.dist_params(rv.owner))
    size = op.size_param(rv.owner)
    size = None if isinstance(size.type, NoneTypeT) else size

    graph = analyse_simulator(model, rv)  # the one rule for what is private (pymc_dp.graph)
    free = list(model.free_RVs)
    reads = graph.private_reads([*free, *params, *([size] if size is not None else [])])
    if reads:
        raise ValueError(
            f"The prior or the inputs of the simulator `{rv.name}` read {reads}, which are "
            f"private data (the observed variable, or data with rows of its n = {n} people). "
            "The simulation stage of ABCDP must be public. If such an input is public (e.g. a "
            "time grid), build it into the simulator function instead."
        )
    dets = [d for d in model.deterministics if d.name not in graph.private_deterministics]
    outputs = [*free, *dets]
    return SimulatorModel(
        model=model,
        name=rv.name,
        op=op,
        observed=observed,
        params=params,
        size=size,
        var_names=tuple(v.name for v in outputs),
        var_outputs=tuple(outputs),
    )


class PriorSampler:
    """Forward draws of the free variables, public deterministics and simulator inputs.

    One compiled PyTensor function; its random generators are seeded from an integer taken from
    the caller's NumPy Generator, and can be reseeded (the pilot simulations for the kernel
    bandwidth use their own stream, so they do not shift the proposals).
    """

    def __init__(self, spec: SimulatorModel, seed: int) -> None:
        self.spec = spec
        outputs = [*spec.var_outputs, *spec.params]
        if spec.size is not None:
            outputs.append(spec.size)
        self._fn = compiling.pymc_compile(inputs=[], outputs=outputs, random_seed=seed, mode=None)
        self._rngs = [v for v in self._fn.get_shared() if isinstance(v.type, RandomGeneratorType)]
        self._nvars = len(spec.var_outputs)
        self._nparams = len(spec.params)

    def reseed(self, seed: int) -> None:
        reseed_rngs(self._rngs, seed)

    def draw(self, k: int) -> tuple[dict[str, NDArray], list[tuple[NDArray, ...]], tuple | None]:
        """k prior draws: variables stacked on a leading axis, simulator inputs per draw, size."""
        draws = [self._fn() for _ in range(k)]
        values = {
            name: np.stack([d[i] for d in draws]) for i, name in enumerate(self.spec.var_names)
        }
        params = [tuple(d[self._nvars : self._nvars + self._nparams]) for d in draws]
        size = None
        if self.spec.size is not None:
            size = tuple(int(s) for s in draws[0][-1])
        return values, params, size


def simulate(
    spec: SimulatorModel | Simulation,
    params: list[tuple[NDArray, ...]],
    size: tuple | None,
    rng: np.random.Generator,
    vectorized: bool,
) -> NDArray[np.float64]:
    """Pseudo-data ``Y_t`` for each draw of the simulator inputs, stacked: (k, *observed.shape).

    Calls the simulator exactly as PyTensor's ``RandomVariable.perform`` does,
    ``fn(rng, *params, size)``, with our Generator. ``vectorized=True`` makes one call per batch
    following PyTensor's batching rule: every input gets a leading batch axis and
    ``size = (k, *size)``, so a function written with NumPy broadcasting (e.g.
    ``rng.normal(mu, sigma, size=size)``) works unchanged.
    """
    sim = spec.simulation if isinstance(spec, SimulatorModel) else spec
    shape = sim.shape
    if sim.fixed_size is not None:
        size = sim.fixed_size
    k = len(params)
    if vectorized:
        stacked = [np.stack([p[j] for p in params]) for j in range(sim.n_params)]
        base = size if size is not None else shape[: len(shape) - sim.op.ndim_supp]
        out = np.asarray(sim.op.rng_fn(rng, *stacked, (k, *base)), dtype=np.float64)
        if out.shape != (k, *shape):
            raise ValueError(
                f"The simulator of `{sim.name}` returned shape {out.shape} for a batch of {k} "
                f"(expected {(k, *shape)}). With `vectorized=True` it must broadcast a leading "
                "batch axis of every input against size=(k, ...); otherwise use vectorized=False."
            )
    else:
        out = np.empty((k, *shape))
        for t, p in enumerate(params):
            y = np.asarray(sim.op.rng_fn(rng, *p, size), dtype=np.float64)
            if y.shape != shape:
                raise ValueError(
                    f"The simulator of `{sim.name}` returned shape {y.shape}; the observed data "
                    f"has shape {shape}."
                )
            out[t] = y
    if not np.all(np.isfinite(out)):
        raise ValueError(f"The simulator of `{sim.name}` returned NaN or inf.")
    return out
