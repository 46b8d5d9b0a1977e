"""Every PyTensor compile of pymc-dp, one at a time per process.

PyTensor's ``FunctionMaker`` sets the process-wide ``config.mode`` to the mode it compiles with
(``config.change_flags``) while it rewrites, and restores it after; two threads compiling at once
can restore each other's value, leaving a mode one of them asked for as the default of every later
compile. Measured: two threads compiling 300 small functions each, one in the Python linker,
left ``config.mode`` a Python-linked mode in 4 of 4 runs. In CI, Dask workers in threads compiled
beside the driver: every later kernel of that process ran op by op in NumPy (the suite took 48
min against 30, and a sum over 60 coordinates was refused by ``Elemwise.perform``). So pymc-dp
compiles only here, under one lock; steps may still be built from several threads (they wait for
each other), and ``pdp.sample`` runs from several threads take turns. PyTensor's maintainers:
"PyTensor compilation isn't thread safe" (pymc-devs/pymc#7819, 2025).
"""

from __future__ import annotations

import os
import threading

import pytensor
from pymc.model import Model
from pymc.pytensorf import compile as _pm_compile

__all__ = ["COMPILE_LOCK", "function", "initial_point", "locked", "pymc_compile"]

#: Held by every compile of pymc-dp (re-entrant: a compile may run inside a held section, e.g.
#: a likelihood built while a Dask worker holds it).
COMPILE_LOCK = threading.RLock()


def function(inputs, outputs, **kwargs):
    """:func:`pytensor.function` under :data:`COMPILE_LOCK`."""
    with COMPILE_LOCK:
        return pytensor.function(inputs, outputs, **kwargs)


def pymc_compile(inputs, outputs, **kwargs):
    """:func:`pymc.compile` (failed parameter checks as -inf) under :data:`COMPILE_LOCK`."""
    with COMPILE_LOCK:
        return _pm_compile(inputs, outputs, **kwargs)


def initial_point(model: Model) -> dict:
    """``model.initial_point()`` (PyMC compiles a function for it) under :data:`COMPILE_LOCK`."""
    with COMPILE_LOCK:
        return model.initial_point()


def locked(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` under :data:`COMPILE_LOCK`: a PyMC call that compiles inside
    (``pm.draw``, ``pm.sample`` on a surrogate, posterior predictive draws). Never a call that
    waits on another thread which compiles or forks (Dask workers in threads, a pool refilling
    its processes): that thread waits for the lock, which is never released. Other threads'
    compiles and forks wait until ``fn`` returns."""
    with COMPILE_LOCK:
        return fn(*args, **kwargs)


# A fork waits for a compile in another thread to end: the child would keep that compile's
# temporary config.mode and numba__cache (PyMC forks chain processes), and a lock another
# thread held at the fork would never be released in the child.
os.register_at_fork(
    before=COMPILE_LOCK.acquire,
    after_in_parent=COMPILE_LOCK.release,
    after_in_child=COMPILE_LOCK._at_fork_reinit,
)
