"""Shared fixtures: models are compiled once per test session (PyTensor compiles take seconds)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytensor
import pytest

sys.path.insert(0, str(Path(__file__).parent))

import models  # noqa: E402
import toy_step  # noqa: E402, F401  (registers a test-only step: the contract runs it too)

import pymc_dp as pdp  # noqa: E402
from pymc_dp import compiling  # noqa: E402
from pymc_dp.examples import banana  # noqa: E402

MODEL_BUILDERS = {
    "logistic_regression": models.logistic_regression,
    "normal_scale": models.normal_scale,
    "hierarchical": models.hierarchical,
    "two_observed": models.two_observed,
}


@pytest.fixture(scope="session", params=list(MODEL_BUILDERS))
def model_and_likelihood(request):
    model = MODEL_BUILDERS[request.param]()
    return request.param, model, pdp.PerRowLikelihood(model)


@pytest.fixture(scope="session")
def gaussian_banana():
    """Theorem 12 banana with a = 0 (Gaussian posterior), d = 2, n = 1e4."""
    return banana(n=10_000, d=2, a=0.0, seed=11)


@pytest.fixture(scope="session")
def gaussian_model(gaussian_banana):
    return gaussian_banana.model()


@pytest.fixture(scope="session")
def easy_banana():
    """The thesis' easy-2d banana (Table 6.1): d = 2, n = 1e5, a = 20."""
    return banana(n=100_000, d=2, a=20.0, seed=0)


@pytest.fixture(scope="session")
def easy_banana_model(easy_banana):
    return easy_banana.model()


#: Tempering of the minibatch tests: the posterior is as wide as with N0 rows (T = N0 / n).
TEMPERED_N0 = 100


@pytest.fixture(scope="session")
def tempered_banana():
    """Theorem 12 banana, d = 2, n = 1e5, a = 1, tempered with T = N0 / n (N0 = 100): the target."""
    return banana(n=100_000, d=2, a=1.0, seed=0, tempering=TEMPERED_N0 / 100_000)


@pytest.fixture(scope="session")
def tempered_banana_model(tempered_banana):
    """The same data with the untempered likelihood: the minibatch steps apply T themselves."""
    return dataclasses.replace(tempered_banana, tempering=1.0).model()


@pytest.fixture(scope="module")
def client():
    """A Dask cluster in this process (2 workers x 1 thread), one per test module."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


@pytest.fixture(autouse=True)
def _default_mode_unchanged():
    """Fails the test after which PyTensor's process-wide default mode changed (compiles from
    threads left it Python-linked in CI: every later test of that worker ran in NumPy); the mode
    is restored so that later tests run as they should."""
    with compiling.COMPILE_LOCK:  # not while a Dask worker's compile has set it for itself
        before = pytensor.config.mode
    yield
    with compiling.COMPILE_LOCK:
        after = pytensor.config.mode
        if after is not before and after != before:
            pytensor.config.mode = before
    if after is not before and after != before:
        pytest.fail(f"pytensor.config.mode changed during the test: {before!r} -> {after!r}")
