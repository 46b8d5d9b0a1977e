"""Compiling from threads and in Python-linked modes (a CI run, 2026-11-30).

Dask workers in threads compiled beside the driver; PyTensor's ``FunctionMaker`` sets
``config.mode`` while it rewrites (not thread-safe), and the process's default mode was left
Python-linked: every later kernel ran op by op in NumPy (a 1.6x slower suite), a gradient sum over
60 coordinates was refused by ``Elemwise.perform`` (more than 32 operands) and a test step passing
a Python float as the clip bound failed. A chain that reached a prior scale of 0 failed too: the
prior's value raised PyMC's ``ParameterValueError`` where every kernel gives -inf.
"""

from __future__ import annotations

import re
import threading
import tokenize
from pathlib import Path

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode

import pymc_dp as pdp
from pymc_dp import compiling

PACKAGE = Path(pdp.__file__).parent
#: What compiles a PyTensor graph (``model.initial_point()`` compiles one in PyMC), called or
#: passed on (``compiling.locked(pm.draw, ...)``).
_COMPILES = re.compile(
    r"pytensor\.function\b|pytensorf import compile|from pytensor import function|compile_pymc"
    r"|\bpm\.(compile|sample|draw|sample_posterior_predictive|sample_prior_predictive)\b(?!_)"
    r"|(?<!compiling)\.initial_point\(|\.compile_(logp|dlogp|d2logp|fn)\b|\.eval\(|point_logps"
)
#: The one compile passed on outside ``compiling.locked``: the run of ``pdp.sample``, under the
#: lock unless the rows are on Dask workers of this process (they compile under it meanwhile).
_ALLOWED = {("sampling.py", "pm.sample,")}


def _code_lines(path: Path) -> list[str]:
    """The lines of ``path`` with strings and comments blanked (prose may name ``pm.sample``)."""
    lines = [list(line) for line in path.read_text().splitlines()]
    with path.open() as f:
        for tok in tokenize.generate_tokens(f.readline):
            if tok.type in (tokenize.STRING, tokenize.COMMENT, tokenize.FSTRING_MIDDLE):
                (r0, c0), (r1, c1) = tok.start, tok.end
                for r in range(r0, r1 + 1):
                    lo = c0 if r == r0 else 0
                    hi = c1 if r == r1 else len(lines[r - 1])
                    lines[r - 1][lo:hi] = " " * (hi - lo)
    return ["".join(line) for line in lines]


def _compiles_outside_the_lock() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "compiling.py":
            continue
        lines = _code_lines(path)
        for k, code in enumerate(lines):
            if not _COMPILES.search(code):
                continue
            before = lines[k - 1].rstrip() if k else ""
            if "compiling.locked(" in code or before.endswith("compiling.locked("):
                continue
            if (str(path.relative_to(PACKAGE)), code.strip()) not in _ALLOWED:
                found.append(f"{path.relative_to(PACKAGE)}:{k + 1}: {code.strip()}")
    return found


def test_the_package_compiles_only_under_the_lock():
    assert _compiles_outside_the_lock() == []


def test_compiles_from_threads_leave_the_default_mode():
    """Two threads compiling 300 functions each in different modes: without the lock the default
    mode was left changed in 4 of 4 runs (measured with ``pytensor.function``)."""
    before = pytensor.config.mode
    x = pt.dvector("x")
    python = Mode(linker="py", optimizer=None)

    def compile_many(mode):
        for i in range(300):
            compiling.function([x], (x * i).sum(), mode=mode)

    thread = threading.Thread(target=compile_many, args=(python,))
    thread.start()
    compile_many("FAST_COMPILE")
    thread.join()
    assert pytensor.config.mode == before


def _many_coordinates():
    rng = np.random.default_rng(0)
    with pm.Model() as model:
        u = pm.Normal("u", 0, 1, shape=60)
        pm.Normal("y", u * rng.uniform(-1, 1, 60), 1.0, observed=rng.normal(size=60))
    return model


def test_a_python_linked_mode_sums_over_many_coordinates_and_takes_python_floats():
    model = _many_coordinates()
    fast = pdp.PerRowLikelihood(model, compile_kwargs={"mode": "FAST_COMPILE"})
    numba = pdp.PerRowLikelihood(model)
    q = fast.ravel(model.initial_point())
    q_new = q + 0.1
    grad = fast.grad_kernel()(q, 1e12)[0]  # a Python float for the bound
    np.testing.assert_allclose(grad, numba.grad_kernel()(q, np.asarray(1e12))[0], rtol=1e-12)
    np.testing.assert_allclose(
        grad + fast.prior_logp_and_grad(q)[1], model.compile_dlogp()(model.initial_point())
    )
    ratio = fast.ratio_kernel()(q_new, q, 1e12)[0]
    expected = fast.logp_rows(q_new).sum() - fast.logp_rows(q).sum()
    np.testing.assert_allclose(ratio, expected, rtol=1e-12)
    for lik in (fast, numba):  # an extra argument was written into the rows' storage (review)
        with pytest.raises(TypeError, match="3 inputs called with 4"):
            lik.ratio_kernel()(q_new, q, np.asarray(1.0), np.arange(3))
    np.testing.assert_allclose(numba.ratio_kernel()(q_new, q, 1e12)[0], expected, rtol=1e-12)
    # a list reaches Numba as an array (review: it raised a TypingError)
    np.testing.assert_allclose(numba.ratio_kernel()(list(q_new), list(q), 1e12)[0], expected)


def test_the_prior_value_is_minus_inf_where_a_parameter_check_fails():
    with pm.Model() as model:
        tau = pm.HalfNormal("tau", 1.0)
        u = pm.Normal("u", 0, tau, shape=5)
        pm.Normal("y", u, 1.0, observed=np.zeros(5))
    lik = pdp.PerRowLikelihood(model)
    point = model.initial_point()
    assert np.isfinite(lik.prior_value(lik.ravel(point)))
    point["tau_log__"] = np.asarray(-1000.0)  # tau = exp(-1000) = 0: Normal's sigma > 0 fails
    assert lik.prior_value(lik.ravel(point)) == -np.inf
