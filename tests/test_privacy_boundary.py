"""Privacy, round 3 (issue 20): the data boundary. One test per leak, each failing before the fix.

* Item 2: every helper returns by whitelist. ``pdp.posterior_predictive`` handed back PyMC's
  ``predictions_constant_data`` whole (private containers the prediction does not read, person
  ids as coordinates) and accepted the private rows themselves as ``new_data``.
* Item 3: no person's value in any message, log or warning, including those raised underneath
  (PyTensor printed the rows it could not store; a Dask worker logged them).
* Item 4: what is refused does not depend on how rows are partitioned (a 3-row partition with
  d = 3 columns was "ambiguous", an empty one had "no rows").

Values are made distinctive (``1234.5678 + i * 0.001``) and searched for in every text the run
produces: the exception and its whole ``__cause__``/``__context__`` chain, warnings, and the logs
of Dask (an in-process ``LocalCluster``, so the workers log here), PyMC and PyTensor.
"""

from __future__ import annotations

import contextlib
import logging
import re
import traceback
import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pdp

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.xdist_group("dask")

N, D = 600, 3
SCALE = np.array([1.0, 0.5, 2.0])  # a public constant of length d: never a row input
RUN = dict(draws=8, tune=4, chains=1, cores=1, random_seed=1, progressbar=False)
#: Partitionings of the same N rows: halves, a tail of d rows, empty partitions, one row,
#: square (d x d) blocks.
CHUNKINGS = [
    (300, 300),
    (N - 3, 3),
    (0, N),
    (N, 0),
    (1, N - 4, 3),
    (3, 3, 0, N - 6),
]

#: Distinctive private values and how they print (fixed point or scientific, any precision).
SECRET = 1234.5678 + np.arange(N) * 0.001
#: a secret printed as a number of its own (not digits inside a longer number: a Dask
#: stimulus id's timestamp, 1796102951.2369952, held "1.2369952" in one run of the suite)
LEAK = re.compile(r"(?<![\d.])(123[4-7]\.\d|1\.23[4-7]\d*(e\+0?3)?\b)")


def _step():
    return pdp.DPPenalty(epsilon=4.0, llr_clip=0.05, proposal_scale=0.03, noise_seed=5)


def _model(x: np.ndarray, y: np.ndarray) -> pm.Model:
    with pm.Model() as model:
        xd = pm.Data("X", x)
        yd = pm.Data("y", y)
        beta = pm.Normal("beta", 0, 2.5, shape=D)
        pm.Bernoulli("obs", logit_p=pm.math.dot(xd * SCALE, beta), observed=yd)
    return model


def _placeholder() -> pm.Model:
    return _model(np.zeros((2, D)), np.zeros(2, dtype=np.int64))


def _sample(model, quiet: bool = True, **kw):
    with model, warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore", UserWarning)  # planner / mixing advice
        return pdp.sample(step=_step(), **RUN, **kw)


def _chunked(a: np.ndarray, chunks: tuple[int, ...]):
    return da.from_array(a, chunks=(chunks,) + tuple((s,) for s in a.shape[1:]))


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (N, D))
    y = (rng.random(N) < 1 / (1 + np.exp(-x @ np.array([0.3, -1.0, 0.5])))).astype(np.int64)
    return x, y


# ------------------------------------------------------------------------------ capture
@contextlib.contextmanager
def _everything_said():
    """Every warning and every log record (DEBUG and up) of Dask, PyMC, PyTensor and pymc-dp."""
    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            said.append(logging.Formatter().format(record))

    handler = Keep(level=logging.DEBUG)
    loggers = [logging.getLogger(n) for n in ("distributed", "dask", "pymc", "pytensor", "pymc_dp")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield said
        said.extend(f"{w.category.__name__}: {w.message}" for w in caught)
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)


def _chain(err: BaseException) -> list[BaseException]:
    out, todo = [], [err]
    while todo:
        e = todo.pop()
        if e is None or any(e is o for o in out):
            continue
        out.append(e)
        todo += [e.__cause__, e.__context__]
    return out


def _texts(err: BaseException) -> list[str]:
    """The exception, every exception chained to it (shown or not), their tracebacks."""
    return [
        "".join(traceback.format_exception(type(e), e, e.__traceback__)) + repr(e.args)
        for e in _chain(err)
    ]


def _assert_no_values(texts) -> None:
    for text in texts:
        found = LEAK.search(text)
        assert found is None, f"a data value ({found.group()!r}) in: {text[:2000]}"


def _assert_clean(err: BaseException, said) -> None:
    assert err.__cause__ is None and err.__context__ is None, _chain(err)
    _assert_no_values(_texts(err))
    _assert_no_values(said)


# ---------------------------------------------------------------------- item 2: predictive
@pytest.fixture(scope="module")
def fitted(rows):
    """Two observed variables; the second reads a private container W the prediction of the
    first does not; people have names as coordinates."""
    x, y = rows
    rng = np.random.default_rng(1)
    w = SECRET.copy()
    z = 0.01 * (w - w.mean()) + rng.normal(size=N)
    ids = [f"patient-{i}" for i in range(N)]
    with pm.Model(coords={"person": ids}) as model:
        xd = pm.Data("X", x, dims=("person", "coef"))
        wd = pm.Data("W", w, dims="person")
        beta = pm.Normal("beta", 0, 2.5, shape=D)
        gamma = pm.Normal("gamma", 0, 1)
        pm.Bernoulli("y", logit_p=pm.math.dot(xd, beta), observed=y, dims="person")
        pm.Normal("z", gamma * (wd - 1234.8), 1.0, observed=z, dims="person")
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        step = pdp.DPPenalty(epsilon=4.0, llr_clip=4.0, proposal_scale=0.05, noise_seed=5)
        idata = pdp.sample(step=step, draws=10, tune=2, chains=2, cores=1, progressbar=False)
    return model, idata, x


def test_predictions_return_the_requested_variables_and_the_given_data_only(fitted):
    """PyMC's ``predictions_constant_data`` holds every container of the model (here the
    private W, which predicting y does not read) and the people's names as coordinates."""
    from pymc_dp.sampling import KEPT_GROUP_ATTRS

    model, idata, x = fitted
    new = np.random.default_rng(9).uniform(-1, 1, size=(N, D))  # public, as many rows as people
    pred = pdp.posterior_predictive(idata, model, new_data={"X": new}, var_names=["y"])
    assert set(pred.children) <= {"predictions", "predictions_constant_data"}
    assert set(pred["predictions"].data_vars) == {"y"}
    assert set(pred["predictions_constant_data"].data_vars) == {"X"}
    np.testing.assert_array_equal(pred["predictions_constant_data"]["X"].values, new)
    for node in pred.subtree:
        assert set(node.attrs) <= KEPT_GROUP_ATTRS, node.path
        for name, var in node.dataset.variables.items():
            values = np.asarray(var.values)
            assert values.dtype.kind != "U" or not any("patient" in str(v) for v in values.ravel())
            if values.dtype.kind == "f":
                assert not np.isin(SECRET[:50], values).any(), (node.path, name)
    assert list(pred["predictions"]["person"].values) == list(range(N))
    np.testing.assert_array_equal(model["X"].get_value(), x)  # restored


def test_predictions_refuse_the_private_rows_as_new_data(fitted):
    """The private covariates themselves (or their transpose, or the observed values) given as
    "new" data: predictions there are functions of the people's data."""
    model, idata, x = fitted
    for name, value in [("X", x), ("X", x.T.copy()), ("W", SECRET.copy())]:
        with pytest.raises(ValueError, match=f"`new_data\\['{name}'\\]` holds the values") as err:
            pdp.posterior_predictive(idata, model, new_data={name: value}, var_names=["y"])
        _assert_no_values(_texts(err.value))
        assert re.search(r"\d\.\d{3}", str(err.value)) is None  # no covariate value either


# ---------------------------------------------------------- item 3: no value in any message
def test_float_rows_for_an_integer_container_are_refused_naming_it_in_memory(rows):
    """PyTensor's TypeError printed the rows: ``Value: "array([1234.5678, ...])"``."""
    x, _ = rows
    with _everything_said() as said, _placeholder():
        step = _step()
        with pytest.raises(TypeError, match=r"`data\['y'\]` has dtype float64.*'y' holds int") as e:
            pdp.distributed.bind_data(step, {"X": x, "y": SECRET.copy()})
    _assert_clean(e.value, said)


def test_float_rows_for_an_integer_container_are_refused_on_the_driver_from_metadata(rows, client):
    """Dask rows: the worker raised PyTensor's TypeError and logged the rows ("Compute
    Failed ... Value: array([1234.5678, ...])"); now refused from the dtype, before any task."""
    x, _ = rows
    with _everything_said() as said:
        with pytest.raises(TypeError, match=r"`data\['y'\]` has dtype float64") as e:
            _sample(
                _placeholder(),
                quiet=False,
                data={"X": _chunked(x, (300, 300)), "y": _chunked(SECRET, (300, 300))},
                client=client,
            )
    _assert_clean(e.value, said)


def test_worker_side_failures_carry_only_the_exception_type(rows, client):
    """Rows whose metadata lies (declared int64, float values) pass the driver's checks and
    fail on the worker: the worker's exception and its log name the type only, and nothing is
    chained to what the driver raises."""
    x, _ = rows
    lying = _chunked(SECRET, (300, 300)).map_blocks(lambda b: b, dtype=np.int64)
    with _everything_said() as said:
        with pytest.raises(Exception) as e:  # noqa: B017, PT011 - checked below
            _sample(
                _placeholder(),
                quiet=False,
                data={"X": _chunked(x, (300, 300)), "y": lying},
                client=client,
            )
    _assert_clean(e.value, said)
    assert any("Compute Failed" in s for s in said)  # the worker did log the failure
    assert type(e.value).__name__ == "WorkerError"
    assert "TypeError in RowShard" in str(e.value)


def test_worker_tasks_do_not_return_or_log_values(client):
    """A function mapped over row partitions that fails with a value in its message."""

    def boom(block):
        raise ValueError(f"bad row {block[0]!r}")

    with _everything_said() as said:
        with pytest.raises(Exception) as e:  # noqa: B017, PT011 - checked below
            pdp.distributed.map_partitions(boom, _chunked(SECRET, (200, 400)), client=client)
    _assert_clean(e.value, said)
    assert type(e.value).__name__ == "WorkerError" and "ValueError in boom" in str(e.value)


def test_errors_and_warnings_from_pymc_while_binding_are_replaced(rows, monkeypatch):
    """Whatever PyMC raises or warns while the rows are set (here a stand-in that prints them)
    reaches the caller as the step and the exception's type, with nothing chained."""
    x, _ = rows

    def leaky_set_data(values, *args, **kwargs):
        shown = {k: np.asarray(v)[:3] for k, v in values.items()}
        warnings.warn(f"odd rows {shown}", RuntimeWarning, stacklevel=2)
        raise TypeError(f"cannot store {shown}")

    xs = x + 1235.0  # distinctive values, finite, the right dtype
    with _placeholder():
        step = _step()
    monkeypatch.setattr(pm, "set_data", leaky_set_data)
    with _everything_said() as said:
        with pytest.raises(Exception) as e:  # noqa: B017, PT011 - checked below
            pdp.distributed.bind_data(step, {"X": xs, "y": np.zeros(N, dtype=np.int64)})
    _assert_clean(e.value, said)
    assert type(e.value).__name__ == "DataBoundaryError"
    assert re.match(r"Binding the rows of \['X', 'y'\] failed with TypeError", str(e.value))
    assert any("RuntimeWarning" in s and "withheld" in s for s in said)


# ------------------------------------------------ item 4: refusals independent of partitions
def test_every_partitioning_gives_the_in_memory_draws(rows, client):
    """Empty partitions, one row, d rows (a d x d block): all run, with the in-memory draws.
    Before, the worker re-analysed its own rows: 3 rows were "ambiguous: several axes of length
    n = 3", 0 rows "no rows", and the public constant SCALE (length d) a row input."""
    x, y = rows
    memory = _sample(_model(x, y)).posterior["beta"].values
    failures = {}
    for chunks in CHUNKINGS:
        try:
            got = (
                _sample(
                    _placeholder(),
                    data={"X": _chunked(x, chunks), "y": _chunked(y, chunks)},
                    client=client,
                )
                .posterior["beta"]
                .values
            )
        except Exception as err:  # noqa: BLE001 - collected: every layout is reported
            failures[chunks] = f"{type(err).__name__}: {err}"
            continue
        np.testing.assert_allclose(got, memory, rtol=1e-9, atol=1e-12, err_msg=str(chunks))
    assert not failures, failures


@pytest.mark.parametrize("bad", ["nan_covariate", "outside_support"])
def test_bad_rows_are_refused_alike_whatever_the_partitioning(rows, client, bad):
    """The same bad rows give the same refusal for every partitioning and for NumPy rows (no
    partition's size or layout in it, no value), the refusal of a model holding the rows."""
    x, y = rows
    x, y = x.copy(), y.copy()
    if bad == "nan_covariate":
        x[N - 2, 1] = np.nan  # in the last partition of most layouts
        match = "pm.Data 'X' contains NaN or inf"
    else:
        y[N - 2] = 2  # a Bernoulli outcome of 2
        match = "'obs' has values outside the support"
    texts = {}
    for chunks in CHUNKINGS:
        with pytest.raises(ValueError, match=match) as e:
            _sample(
                _placeholder(),
                data={"X": _chunked(x, chunks), "y": _chunked(y, chunks)},
                client=client,
            )
        texts[chunks] = str(e.value)
        _assert_clean(e.value, [])
    with pytest.raises(ValueError, match=match) as e:
        _sample(_placeholder(), data={"X": x, "y": y})
    texts["numpy"] = str(e.value)
    assert len(set(texts.values())) == 1, texts
    if bad == "outside_support":  # (PyMC itself refuses NaN in a pm.Data container)
        with pytest.raises(ValueError, match=match):
            _sample(_model(x, y))


def test_expfam_refusals_do_not_depend_on_the_partitioning(client):
    """A wrong number of columns was refused by each worker with its partition's shape; rows
    failing different checks in different partitions gave whichever task failed first. Now the
    shape is checked once from metadata and the first check in memory order is reported."""
    rng = np.random.default_rng(4)
    counts = rng.multinomial(5, [0.2, 0.3, 0.5, 0.0], size=N).astype(float)  # 4 columns
    labels = rng.integers(0, 6, N).astype(float)
    labels[0] = 9.0  # outside {0, ..., 5}, in the first partition
    labels[N - 2] = np.nan  # non-finite, in the last: in memory the NaN check runs first
    for data, kw in [
        (counts, dict(family="multinomial", categories=3, trials=5)),
        (labels, dict(family="binomial", trials=5)),
    ]:
        with pytest.raises(ValueError) as e:
            pdp.expfam.release(data, epsilon=1.0, **kw)
        want = str(e.value)
        for chunks in CHUNKINGS:
            with pytest.raises(ValueError) as e:
                pdp.expfam.release(_chunked(data, chunks), epsilon=1.0, **kw)
            assert str(e.value) == want, (chunks, str(e.value), want)
    good = rng.integers(0, 6, N)
    memory = pdp.expfam.release(good, "binomial", epsilon=1.0, trials=5, noise_seed=2)
    for chunks in CHUNKINGS:
        dask = pdp.expfam.release(_chunked(good, chunks), "binomial", 1.0, trials=5, noise_seed=2)
        np.testing.assert_allclose(dask.y, memory.y, rtol=1e-12)


def test_abcdp_results_do_not_carry_the_peoples_coordinates():
    """ABCDP's result took the model's coordinates as they were: a public deterministic with the
    people's dim published their names."""
    import pytensor.tensor as pt

    from pymc_dp.abcdp.examples import TOY_THETA, mixture_simulator

    n = 200
    y = mixture_simulator(np.random.default_rng(0), TOY_THETA, (n,))
    ids = [f"patient-{i}" for i in range(n)]
    with pm.Model(coords={"person": ids}) as model:
        w = pm.Dirichlet("theta", a=np.ones(5))
        pm.Deterministic("level", w[0] * pt.ones(n), dims="person")  # reads no data: public
        pm.Simulator("obs", mixture_simulator, w, signature="(k)->()", observed=y, dims="person")
    idata = pdp.abcdp.sample_abcdp(
        model,
        epsilon=1.0,
        threshold=2.0,
        n_accept=2,
        n_proposals=20,
        batch_size=10,
        vectorized=True,
        distance=pdp.abcdp.MMD(n_features=10),
        random_seed=1,
        noise_seed=2,
        progressbar=False,
    )
    assert "level" in idata.posterior.data_vars
    assert list(idata.posterior["person"].values) == list(range(n))


def test_expfam_data_that_is_not_numbers_is_refused_without_the_original():
    """NumPy's ValueError quotes the value it could not convert; ``raise ... from None`` inside
    the ``except`` block still attached it as ``__context__``."""
    data = np.array([f"{v:.4f}" for v in SECRET[:5]] + ["1235.1x"], dtype=object)
    with pytest.raises(ValueError, match="`data` must be a numeric array") as e:
        pdp.expfam.release(data, "binomial", epsilon=1.0, trials=5)
    _assert_clean(e.value, [])
