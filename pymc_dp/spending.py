"""A step is spent once: which chains have read the data, and on which data.

A DP step's noise is calibrated for one run of ``chains`` chains on one data set. Running the same
step object again would release the data a second time while the report still says epsilon, and
running it after ``pm.set_data`` would apply a calibration (n, delta, clip-bound checks, a warm
start) made for other rows. Two records prevent both, kept together by :class:`DataSeal`
(checked before any chain reads the data); :class:`SpentOnce`, mixed into every DP step, adds
``spent``, ``renew`` and ``rebuild`` on top:

* :class:`SpendRecord`: the chains that have started, seen by every process that runs the step.
  PyMC runs chains in forked or spawned processes, which get copies of the step, so the record
  lives outside the object: one marker file per chain in a private temporary directory, created
  with ``O_EXCL`` (atomic across processes). The directory goes when the step that made it does.
* :func:`data_fingerprint`: shapes, dtypes and a digest of every ``pm.Data`` container, taken
  when the step is built and compared before any chain reads the data.

Neither record holds data: the fingerprint is a 16-byte digest per container and is never
released.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
import weakref

import numpy as np
import scipy.sparse as sp
from pymc.model import Model
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import graph_inputs
from pytensor.tensor.type import TensorType

from pymc_dp.graph import _check_initvals
from pymc_dp.runplan import PrivacyBudgetError

__all__ = ["DataSeal", "SpendRecord", "SpentOnce", "data_fingerprint"]


def data_fingerprint(model: Model, graph=None, rows_only: bool = False) -> tuple:
    """Shapes, dtypes and digests of the model's ``pm.Data`` containers and of every other
    array (a plain ``pytensor.shared`` or constant) that the analysed likelihood ``graph``, the
    model's Deterministics or its Potentials read (``rows_only``: the rows and the prior alone,
    what compiled kernels read): what a step was built on; compared, never released."""
    out = [_digest(var.name, var.get_value(borrow=True)) for var in model.data_vars]
    if graph is None:
        return tuple(out)
    known = {id(v) for v in model.data_vars}
    outputs = [v for v in (graph.rows, graph.prior) if v is not None]
    if not rows_only:
        outputs += [*model.deterministics, *model.potentials]
    for var in graph_inputs(outputs):
        if id(var) in known or not isinstance(var.type, TensorType):
            continue
        known.add(id(var))
        if isinstance(var, SharedVariable):
            out.append(_digest(var.name or "(a pytensor.shared)", var.get_value(borrow=True)))
        elif isinstance(var, Constant) and var.type.ndim:
            out.append(_digest(var.name or "(a constant)", var.data))
    return tuple(out)


def _digest(name: str, value) -> tuple:
    if sp.issparse(value):  # a sparse constant: its three arrays
        parts = [np.ascontiguousarray(a) for a in (value.data, value.indices, value.indptr)]
        digest = hashlib.blake2b(digest_size=16)
        for part in parts:
            digest.update(part.reshape(-1).view(np.uint8))
        return (name, value.shape, value.dtype.str, digest.digest())
    value = np.ascontiguousarray(value)  # C-ordered rows: hashed in place, not via tobytes
    digest = hashlib.blake2b(value.reshape(-1).view(np.uint8), digest_size=16).digest()
    return (name, value.shape, value.dtype.str, digest)


def _remove(path: str, owner: int) -> None:
    if os.getpid() == owner:  # a forked child's copy must not remove the parent's record
        shutil.rmtree(path, ignore_errors=True)


class SpendRecord:
    """The chains of one step that have started reading the data, across processes."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="pymc_dp_step_")
        self._owner = os.getpid()
        weakref.finalize(self, _remove, self._dir, self._owner)

    def __getstate__(self) -> dict:
        return {"_dir": self._dir, "_owner": self._owner}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)  # a copy in a chain's process: no finalizer of its own

    def claim(self, chain: int | str) -> bool:
        """Mark ``chain`` (an index, or ``"bind"``: rows bound for a run) as started; False if
        it had started before (in any process)."""
        name = chain if isinstance(chain, str) else f"chain-{int(chain)}"
        path = os.path.join(self._dir, name)
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return False
        except FileNotFoundError as err:  # the record was removed under us: refuse, safely
            raise RuntimeError(
                "The step's spend record is gone (its temporary directory was removed); build "
                "a new step."
            ) from err
        return True

    @property
    def spent(self) -> bool:
        """Whether any chain has started."""
        try:
            return bool(os.listdir(self._dir))
        except FileNotFoundError:
            return True


class DataSeal:
    """What a step was built on (the model's variables, a digest of every array it reads) and
    which of its chains have run: checked before any chain reads the data."""

    def __init__(self, model: Model, graph=None) -> None:
        self.fingerprint = data_fingerprint(model, graph)
        self.model_vars = frozenset(model.named_vars)
        self.record = SpendRecord()

    def check(self, model: Model, graph, step_name: str) -> None:
        """Refuse if the model or its data changed since the step was built (digests and names,
        never a value), or a start value set since reads private data."""
        # by name: a chain process may hold an unpickled copy of the model (new objects)
        added = sorted(set(model.named_vars) - self.model_vars)
        if added:
            raise ValueError(
                f"The model changed since {step_name} was built (variables added: "
                f"{', '.join(added)}): its analysis (what is private, what it releases) was made "
                "on the old model. Build a new step."
            )
        now = data_fingerprint(model, graph)
        if now != self.fingerprint:
            if len(now) == len(self.fingerprint):
                pairs = zip(now, self.fingerprint, strict=True)
                changed = [new[0] for new, old in pairs if new != old]
            else:
                changed = ["(containers)"]
            raise ValueError(
                f"The model's data changed since {step_name} was built "
                f"(changed: {', '.join(sorted(set(changed)))}): its calibration (n, delta), checks "
                "and kernels were made for the old rows. Build a new step on the new data."
            )
        if graph is not None:
            _check_initvals(graph)


class SpentOnce:
    """What a DP step is, before it is a sampler: spent once, renewable, rebuilt on other rows.

    Mixed into :class:`~pymc_dp.step_methods.base.DPStep`, which sets ``self.seal`` (a
    :class:`DataSeal`) and ``self.likelihood``. The arguments of the outermost constructor are
    recorded so that :meth:`rebuild` can make the same step on other rows (``pdp.sample(data=)``).
    """

    def __init_subclass__(cls, **kwargs) -> None:
        # record the arguments of the outermost constructor, so that rebuild() can make the
        # same step on other rows (pdp.sample(data=...))
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return

        @functools.wraps(init)
        def recording_init(self, *args, **kw):
            if "_init_call" not in self.__dict__:
                self._init_call = (args, dict(kw))
            init(self, *args, **kw)

        cls.__init__ = recording_init

    @property
    def spent(self) -> bool:
        """Whether a chain of this step has read the data, or rows were bound to it for a run
        (``pdp.sample(data=)``): a second run is refused."""
        return self.seal.record.spent

    def spent_message(self) -> str:
        return (
            f"This {type(self).__name__} has run before: a step is spent once (its noise was "
            "calibrated for one run, and a second one would release the data again while the "
            "report still says epsilon). Build a new step, or step.renew() (same compiled "
            "kernels, a budget of its own)."
        )

    def claim_run(self) -> None:
        """Mark the step as used for a run on rows bound to it (``pdp.sample(data=)``)."""
        if not self.seal.record.claim("bind"):
            raise PrivacyBudgetError(self.spent_message())

    def check_data(self) -> None:
        """Refuse if the model or its data changed since the step was built."""
        lik = self.likelihood
        self.seal.check(lik.model, getattr(lik, "graph", None), type(self).__name__)

    def renew(self):
        """A new step with the same arguments and compiled kernels, and a budget of its own:
        running it is a second release of the data, whose epsilon adds to the first run's."""
        self.check_data()
        return self.rebuild(self.likelihood)

    def rebuild(self, likelihood=None):
        """The same step (same arguments) built again on the model's current data, or on
        ``likelihood`` (rows bound elsewhere, :mod:`pymc_dp.distributed`)."""
        args, kwargs = self._init_call
        kwargs = {**kwargs, "model": self.likelihood.model}
        if likelihood is not None:
            kwargs["likelihood"] = likelihood
        with self.likelihood.model:
            return type(self)(*args, **kwargs)
