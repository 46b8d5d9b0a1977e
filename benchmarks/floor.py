"""Hand-written Numba floor of a DP iteration: the per-row work alone, in one compiled loop.

A DP iteration cannot cost much less than the arithmetic it must do on every row. This module
writes that work by hand as ``numba.njit`` loops (no ``parallel``) for two models:

* the 2-d banana of :func:`pymc_dp.examples.banana` (``a = 20``): ``x_i ~ N(m(theta), s^2)``
  per column with ``m = (theta_1, theta_2 + a theta_1^2)``;
* logistic regression (:func:`benchmarks.models.logistic_problem`):
  ``l_i = log sigmoid(+-x_i . beta)`` with the sign given by ``y_i``,

and times, per iteration,

* **DPPenalty**: the per-row log-likelihood at two points, difference, clip to ``+-bound``, sum,
  plus the log prior at the proposal (one ``ratio_kernel`` call);
* **DPHMC**: a leapfrog trajectory of ``L`` steps with ``L + 1`` per-row gradient evaluations,
  each row clipped to L2 norm ``bound`` and summed, plus the prior gradient, then one ratio
  evaluation (``L + 1`` ``grad_kernel`` calls and one ``ratio_kernel`` call).

Nothing is privatised (no noise, no accept test: a few scalar operations). The loops are compiled
with ``fastmath`` off by default, so every sum runs in row order and nothing is vectorised; with
``fastmath=True`` they use PyTensor's own flag set (``numba__fastmath``, on by default), whose
``reassoc`` lets LLVM vectorise the sums -- the fair floor for PyTensor's kernels, which can beat
the strict one. :func:`check_rows` verifies that the loops compute what
:meth:`pymc_dp.likelihood.PerRowLikelihood.ratio_kernel` and ``grad_kernel`` compute.

``python -m benchmarks.floor [--n N] [--repeats R] [--steps L] [--wall]`` prints the check and the
compiled kernels against both floors.
"""

from __future__ import annotations

import argparse
import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import numba
import numpy as np
from numba.core.dispatcher import Dispatcher
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import ancestors

from benchmarks.models import logistic_problem
from benchmarks.timing import compare_ms, format_table, set_clock
from pymc_dp.examples import banana

__all__ = [
    "FloorModel",
    "banana_floor",
    "check_rows",
    "floor_models",
    "floor_rows",
    "kernel_rows",
    "kernels",
    "logistic_floor",
    "main",
]

#: Leapfrog steps of the DPHMC floor (as in :mod:`benchmarks.hmc`).
N_STEPS = 10
#: Smallest positive float64: the clip scale of a zero-norm row at bound 0 is 0 / tiny, not 0 / 0.
_TINY = float(np.finfo(np.float64).tiny)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)

#: PyTensor's default ``numba__fastmath`` flags. ``reassoc`` is the one that matters: it lets
#: LLVM vectorise the sums (about 5x on the banana); none of them changes NaN/inf semantics.
PYTENSOR_FASTMATH = frozenset({"arcp", "contract", "afn", "reassoc", "nsz"})


@functools.cache
def kernels(fastmath: bool = False) -> SimpleNamespace:
    """The Numba loops, compiled lazily with ``fastmath`` off or with :data:`PYTENSOR_FASTMATH`.

    Parameters
    ----------
    fastmath : bool
        ``False`` (default): strict IEEE semantics, so every sum runs in row order and nothing is
        vectorised. ``True``: PyTensor's flags, as its compiled kernels use them.

    Returns
    -------
    types.SimpleNamespace
        ``banana_ratio``, ``banana_grad``, ``banana_prior``, ``logistic_ratio``,
        ``logistic_grad``, ``logistic_prior``, ``penalty_iteration`` and ``hmc_iteration``.
        Ratios are ``(q_new, q_old, bound, data) -> float``, gradients ``(q, bound, data) ->
        (D,)``, priors ``(q, data) -> (log prior, gradient)``.
    """
    jit = numba.njit(fastmath=set(PYTENSOR_FASTMATH) if fastmath else False, nogil=True)

    @jit
    def softplus(x):
        # log(1 + exp(x)) without overflow: the branches of PyTensor's Softplus
        if x < -37.0:
            return math.exp(x)
        if x < 18.0:
            return math.log1p(math.exp(x))
        if x < 33.3:
            return x + math.exp(-x)
        return x

    @jit
    def clip(r, bound):
        return min(max(r, -bound), bound)

    @jit
    def clip_scale(norm, bound):
        # factor clipping a row gradient of L2 norm `norm` to `bound` (0 / tiny at bound 0)
        return bound / max(max(norm, bound), _TINY)

    # ------------------------------------------------------------------ banana
    # data = (x0, x1, sd, a, prior_sd): the two data columns, likelihood sds, curvature, prior sd
    @jit
    def banana_prior(theta, data):
        _, _, _, a, prior_sd = data
        u0 = theta[0]
        u1 = theta[1] + a * theta[0] * theta[0]
        s2 = prior_sd * prior_sd
        lp = -0.5 * (u0 * u0 + u1 * u1) / s2 - 2.0 * (math.log(prior_sd) + _HALF_LOG_2PI)
        grad = np.empty(2)
        grad[0] = -(u0 + 2.0 * a * theta[0] * u1) / s2
        grad[1] = -u1 / s2
        return lp, grad

    @jit
    def banana_ratio(q_new, q_old, bound, data):
        x0, x1, sd, a, _ = data
        n0, n1 = q_new[0], q_new[1] + a * q_new[0] * q_new[0]
        o0, o1 = q_old[0], q_old[1] + a * q_old[0] * q_old[0]
        w0, w1 = 1.0 / sd[0], 1.0 / sd[1]
        const = -math.log(sd[0]) - math.log(sd[1]) - 2.0 * _HALF_LOG_2PI
        total = 0.0
        for i in range(x0.shape[0]):
            zn0, zn1 = (x0[i] - n0) * w0, (x1[i] - n1) * w1
            zo0, zo1 = (x0[i] - o0) * w0, (x1[i] - o1) * w1
            l_new = const - 0.5 * (zn0 * zn0 + zn1 * zn1)
            l_old = const - 0.5 * (zo0 * zo0 + zo1 * zo1)
            total += clip(l_new - l_old, bound)
        return total

    @jit
    def banana_grad(q, bound, data):
        x0, x1, sd, a, _ = data
        m0, m1 = q[0], q[1] + a * q[0] * q[0]
        p0, p1 = 1.0 / (sd[0] * sd[0]), 1.0 / (sd[1] * sd[1])
        dm1 = 2.0 * a * q[0]  # d m_2 / d theta_1
        g0 = 0.0
        g1 = 0.0
        for i in range(x0.shape[0]):
            z0 = (x0[i] - m0) * p0  # d l_i / d m
            z1 = (x1[i] - m1) * p1
            d0 = z0 + dm1 * z1
            s = clip_scale(math.sqrt(d0 * d0 + z1 * z1), bound)
            g0 += d0 * s
            g1 += z1 * s
        out = np.empty(2)
        out[0] = g0
        out[1] = g1
        return out

    # ------------------------------------------------------------------ logistic regression
    # data = (x, y, prior_sd): (n, d) C-ordered covariates, 0/1 outcomes, Normal prior sd
    @jit
    def logistic_prior(beta, data):
        prior_sd = data[2]
        s2 = prior_sd * prior_sd
        lp = 0.0
        grad = np.empty(beta.size)
        for j in range(beta.size):
            lp += -0.5 * beta[j] * beta[j] / s2 - math.log(prior_sd) - _HALF_LOG_2PI
            grad[j] = -beta[j] / s2
        return lp, grad

    @jit
    def logistic_ratio(q_new, q_old, bound, data):
        x, y, _ = data
        total = 0.0
        for i in range(x.shape[0]):
            eta_new = 0.0
            eta_old = 0.0
            for j in range(x.shape[1]):
                eta_new += x[i, j] * q_new[j]
                eta_old += x[i, j] * q_old[j]
            if y[i]:  # log sigmoid(eta) = -softplus(-eta)
                r = softplus(-eta_old) - softplus(-eta_new)
            else:  # log(1 - sigmoid(eta)) = -softplus(eta)
                r = softplus(eta_old) - softplus(eta_new)
            total += clip(r, bound)
        return total

    @jit
    def logistic_grad(q, bound, data):
        x, y, _ = data
        d = x.shape[1]
        out = np.zeros(d)
        for i in range(x.shape[0]):
            eta = 0.0
            sq = 0.0
            for j in range(d):
                eta += x[i, j] * q[j]
                sq += x[i, j] * x[i, j]
            resid = y[i] - 1.0 / (1.0 + math.exp(-eta))  # d l_i / d eta
            s = resid * clip_scale(abs(resid) * math.sqrt(sq), bound)
            for j in range(d):
                out[j] += x[i, j] * s
        return out

    # ------------------------------------------------------------------ iterations
    @jit
    def penalty_iteration(ratio, prior, q_new, q_old, bound, data):
        # the per-row work of one DPPenalty iteration: clipped ratio sum and log prior(q_new)
        return ratio(q_new, q_old, bound, data), prior(q_new, data)[0]

    @jit
    def hmc_iteration(grad, ratio, prior, q, p, eta, n_steps, grad_bound, llr_clip, data):
        # leapfrog with n_steps + 1 clipped gradient sums (unit mass), then one ratio
        q_new = q.copy()
        p = p.copy()
        p += 0.5 * eta * (grad(q_new, grad_bound, data) + prior(q_new, data)[1])
        for i in range(n_steps):
            q_new += eta * p
            g = grad(q_new, grad_bound, data) + prior(q_new, data)[1]
            p += (eta if i < n_steps - 1 else 0.5 * eta) * g
        dist = math.sqrt(np.sum((q_new - q) ** 2))
        return ratio(q_new, q, llr_clip * dist, data), prior(q_new, data)[0], q_new

    return SimpleNamespace(**{k: v for k, v in locals().items() if isinstance(v, Dispatcher)})


# ---------------------------------------------------------------------------------- models
@dataclass(frozen=True)
class FloorModel:
    """A model, a point, the arguments of its loops and the clip bounds of the DP steps.

    Attributes
    ----------
    name : str
        Label used in the rows.
    kind : {"banana", "logistic"}
        Which loops of :func:`kernels` compute it.
    model : pm.Model
        The PyMC model whose per-row kernels the loops reproduce.
    q : np.ndarray
        A raveled point (ravel order of :class:`~pymc_dp.likelihood.PerRowLikelihood`).
    data : tuple
        The data argument of the loops (arrays and public constants).
    llr_clip, grad_clip : float
        Clip bounds ``b_l`` (per unit of step length) and ``b_g``.
    step_size : float
        Leapfrog step size (timing only: it changes no cost).
    """

    name: str
    kind: str
    model: object
    q: np.ndarray
    data: tuple
    llr_clip: float
    grad_clip: float
    step_size: float

    def loops(self, fastmath: bool = False) -> tuple[Callable, Callable, Callable]:
        """``(ratio, grad, prior)`` loops of this model."""
        k = kernels(fastmath)
        return (
            getattr(k, f"{self.kind}_ratio"),
            getattr(k, f"{self.kind}_grad"),
            getattr(k, f"{self.kind}_prior"),
        )

    def proposal(self, scale: float = 1e-3, seed: int = 1) -> np.ndarray:
        """A nearby point ``q + scale * N(0, I)`` (fixed seed)."""
        return self.q + scale * np.random.default_rng(seed).standard_normal(self.q.size)

    def work(
        self, n_steps: int = N_STEPS, fastmath: bool = False
    ) -> dict[str, Callable[[], object]]:
        """No-argument callables: one DPPenalty and one DPHMC iteration, one ratio, one gradient.

        Keys are ``"<name> DPPenalty"``, ``"<name> DPHMC (L = n_steps)"``, ``"<name> ratio"``
        and ``"<name> grad"``.
        """
        k = kernels(fastmath)
        ratio, grad, prior = self.loops(fastmath)
        q, q_new, data = self.q, self.proposal(), self.data
        bound = self.llr_clip * float(np.linalg.norm(q_new - q))
        p = np.random.default_rng(2).standard_normal(q.size)
        eta, gb, lc = self.step_size, self.grad_clip, self.llr_clip
        return {
            f"{self.name} DPPenalty": lambda: k.penalty_iteration(
                ratio, prior, q_new, q, bound, data
            ),
            f"{self.name} DPHMC (L = {n_steps})": lambda: k.hmc_iteration(
                grad, ratio, prior, q, p, eta, n_steps, gb, lc, data
            ),
            f"{self.name} ratio": lambda: ratio(q_new, q, bound, data),
            f"{self.name} grad": lambda: grad(q, gb, data),
        }


def banana_floor(n: int = 100_000, a: float = 20.0, seed: int = 0) -> FloorModel:
    """The thesis' easy-2d banana (:func:`pymc_dp.examples.banana`) near its mode.

    The loops read the two data columns as separate contiguous arrays, as a hand-written kernel
    would: with ``reassoc`` the row-major ``(n, 2)`` array is ~5x slower (its loads do not
    vectorise); without it the layout makes no difference.

    Parameters
    ----------
    n : int
        Rows of data.
    a : float
        Curvature of the banana.
    seed : int
        Seed of the synthetic data.
    """
    b = banana(n=n, d=2, a=a, seed=seed)
    x = np.asarray(b.data, dtype=float)
    return FloorModel(
        name="banana (d = 2)",
        kind="banana",
        model=b.model(),
        q=np.array([0.01, 3.0]),  # near the mode theta* = (0, 3)
        data=(
            np.ascontiguousarray(x[:, 0]),
            np.ascontiguousarray(x[:, 1]),
            np.sqrt(b.likelihood_var),
            float(b.a),
            float(np.sqrt(b.prior_var)),
        ),
        llr_clip=2.0,  # thesis protocol (benchmarks.hmc.banana_mmd_rows)
        grad_clip=1.0,
        step_size=5e-4,
    )


def logistic_floor(n: int = 100_000, d: int = 10, seed: int = 0) -> FloorModel:
    """Logistic regression of :func:`benchmarks.models.logistic_problem` at its true beta.

    Parameters
    ----------
    n, d : int
        Rows and coefficients (intercept included).
    seed : int
        Seed of the synthetic data.
    """
    problem = logistic_problem(n, d, seed)
    model = problem.model
    y = np.asarray(_value(model.rvs_to_values[model.observed_RVs[0]]), dtype=np.int64)
    [x] = [
        _value(v)
        for v in ancestors(model.observed_RVs)
        if isinstance(v, Constant) and v.ndim == 2 and _value(v).shape == (n, d)
    ]
    bound = problem.row_norm_bound
    return FloorModel(
        name=f"logistic (d = {d})",
        kind="logistic",
        model=model,
        q=np.asarray(problem.point["beta"], dtype=float),
        data=(np.ascontiguousarray(x, dtype=float), y, 5.0),  # 5: prior sd of the model
        llr_clip=bound,
        grad_clip=bound,
        step_size=0.1 / math.sqrt(n),  # as benchmarks.hmc
    )


def _value(var) -> np.ndarray:
    """The array held by a constant or shared variable."""
    return np.asarray(var.get_value(borrow=True) if hasattr(var, "get_value") else var.data)


def floor_models(n: int = 100_000) -> list[FloorModel]:
    """The two models of the floor, at ``n`` rows."""
    return [banana_floor(n), logistic_floor(n)]


# ---------------------------------------------------------------------------------- public API
def floor_rows(
    n: int = 100_000, repeats: int = 7, n_steps: int = N_STEPS, fastmath: bool = False
) -> list[tuple[str, float]]:
    """Milliseconds per iteration of the hand-written loops: rows ``(name, ms)``.

    Parameters
    ----------
    n : int
        Rows of data.
    repeats : int
        Timed batches per function (median reported; the functions take turns batch by batch).
    n_steps : int
        Leapfrog steps of the DPHMC iteration.
    fastmath : bool
        Compile the loops with PyTensor's fastmath flags (see :func:`kernels`).

    Returns
    -------
    list of (str, float)
        Per model (``"banana (d = 2)"``, ``"logistic (d = 10)"``): ``"<model> DPPenalty"``
        (one clipped ratio sum and the prior), ``"<model> DPHMC (L = n_steps)"`` (a leapfrog
        trajectory: ``n_steps + 1`` clipped gradient sums and one ratio), ``"<model> ratio"`` and
        ``"<model> grad"``. Timed with the clock of :func:`benchmarks.timing.set_clock` (process
        CPU time is advisable on a shared machine); the caller sets BLAS threads.
    """
    fns: dict[str, Callable[[], object]] = {}
    for m in floor_models(n):
        fns.update(m.work(n_steps, fastmath))
    return list(compare_ms(fns, repeats=repeats).items())


def check_rows(
    n: int = 100_000, fastmath: bool = False
) -> list[tuple[str, str, float, float, float]]:
    """Compare the loops with the compiled kernels of :class:`~pymc_dp.PerRowLikelihood`.

    Each model is checked at its point and a proposal, with the DP clip bounds and with bounds a
    thousand times smaller (most rows clipped).

    Returns
    -------
    list of (str, str, float, float, float)
        Rows ``(model, quantity, loop value, kernel value, relative error)``; vectors are shown
        by their Euclidean norms and the error is ``||loop - kernel|| / ||kernel||``.
    """
    from pymc_dp.likelihood import PerRowLikelihood

    rows = []
    for m in floor_models(n):
        ratio, grad, prior = m.loops(fastmath)
        lik = PerRowLikelihood(m.model)
        ratio_k, grad_k = lik.ratio_kernel(), lik.grad_kernel()
        q, q_new = m.q, m.proposal()
        dist = float(np.linalg.norm(q_new - q))
        for label, scale in (("DP", 1.0), ("tight", 1e-3)):
            bound = scale * m.llr_clip * dist
            total, _ = ratio_k(q_new, q, np.asarray(bound))
            loop = ratio(q_new, q, bound, m.data)
            rows.append(_compare(m.name, f"ratio ({label} bound)", loop, total))
        # A difference, at a farther point: PyMC folds log(sigma) of a float prior sd in float32
        # (3e-8 off per coordinate), a constant that cancels in every acceptance ratio.
        q_far = m.proposal(scale=0.1)
        far, near = (ratio_k(x, q, np.asarray(0.0))[1] for x in (q_far, q))
        loop = prior(q_far, m.data)[0] - prior(q, m.data)[0]
        rows.append(_compare(m.name, "log prior difference", loop, far - near))
        for label, scale in (("DP", 1.0), ("tight", 1e-3)):
            bound = scale * m.grad_clip
            total, prior_grad = grad_k(q, np.asarray(bound))
            rows.append(_compare(m.name, f"grad ({label} bound)", grad(q, bound, m.data), total))
        rows.append(_compare(m.name, "prior grad", prior(q, m.data)[1], prior_grad))
    return rows


def _compare(model: str, what: str, loop, kernel) -> tuple[str, str, float, float, float]:
    loop, kernel = np.asarray(loop, dtype=float), np.asarray(kernel, dtype=float)
    err = float(np.linalg.norm(loop - kernel) / max(np.linalg.norm(kernel), _TINY))
    return model, what, float(np.linalg.norm(loop)), float(np.linalg.norm(kernel)), err


def kernel_rows(
    n: int = 100_000, repeats: int = 7, n_steps: int = N_STEPS
) -> list[tuple[str, float, float, float, float, float]]:
    """The same work through the compiled kernels, timed interleaved with both floors.

    A DPPenalty iteration is one ``ratio_kernel`` call; a DPHMC iteration is a NumPy leapfrog
    (unit mass, no noise) making ``n_steps + 1`` ``grad_kernel`` calls and one ``ratio_kernel``
    call: the DP steps' hot loops without the privacy arithmetic.

    Returns
    -------
    list of tuple
        Rows ``(work, kernels ms, floor ms, floor ms with fastmath, kernels / floor,
        kernels / fastmath floor)``.
    """
    from pymc_dp.likelihood import PerRowLikelihood

    fns: dict[tuple[str, str], Callable[[], object]] = {}
    for m in floor_models(n):
        lik = PerRowLikelihood(m.model)
        ratio_k, grad_k = lik.ratio_kernel(), lik.grad_kernel()
        q, q_new = m.q, m.proposal()
        bound = np.asarray(m.llr_clip * float(np.linalg.norm(q_new - q)))
        gb = np.asarray(m.grad_clip)
        compiled = {
            f"{m.name} DPPenalty": lambda r=ratio_k, qn=q_new, q=q, b=bound: r(qn, q, b),
            f"{m.name} DPHMC (L = {n_steps})": _kernel_hmc(m, ratio_k, grad_k, n_steps),
            f"{m.name} ratio": lambda r=ratio_k, qn=q_new, q=q, b=bound: r(qn, q, b),
            f"{m.name} grad": lambda g=grad_k, q=q, b=gb: g(q, b),
        }
        fns.update({(k, "kernels"): f for k, f in compiled.items()})
        fns.update({(k, "floor"): f for k, f in m.work(n_steps).items()})
        fns.update({(k, "fastmath"): f for k, f in m.work(n_steps, fastmath=True).items()})
    ms = compare_ms(fns, repeats=repeats)
    names = dict.fromkeys(k for k, _ in fns)
    return [
        (
            k,
            ms[k, "kernels"],
            ms[k, "floor"],
            ms[k, "fastmath"],
            ms[k, "kernels"] / ms[k, "floor"],
            ms[k, "kernels"] / ms[k, "fastmath"],
        )
        for k in names
    ]


def _kernel_hmc(m: FloorModel, ratio_k, grad_k, n_steps: int) -> Callable[[], object]:
    """The leapfrog of :func:`kernels`' ``hmc_iteration``, through the compiled kernels."""
    q = m.q
    p0 = np.random.default_rng(2).standard_normal(q.size)
    eta, gb = m.step_size, np.asarray(m.grad_clip)

    def iteration():
        q_new, p = q.copy(), p0.copy()
        g, pg = grad_k(q_new, gb)
        p += 0.5 * eta * (g + pg)
        for i in range(n_steps):
            q_new += eta * p
            g, pg = grad_k(q_new, gb)
            p += (eta if i < n_steps - 1 else 0.5 * eta) * (g + pg)
        dist = float(np.sqrt(np.sum((q_new - q) ** 2)))
        return ratio_k(q_new, q, np.asarray(m.llr_clip * dist))

    return iteration


def main(argv: list[str] | None = None) -> None:
    """Print the numerical check and the compiled kernels against both floors."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.floor",
        description="Hand-written Numba floor of DPPenalty and DPHMC iterations.",
    )
    parser.add_argument("--n", type=int, default=100_000, help="rows (default 100000)")
    parser.add_argument("--repeats", type=int, default=7, help="timed batches (default 7)")
    parser.add_argument("--steps", type=int, default=N_STEPS, help="leapfrog steps (default 10)")
    parser.add_argument("--wall", action="store_true", help="wall time instead of CPU time")
    args = parser.parse_args(argv)

    # PyTensor's Numba Dot calls SciPy's own OpenBLAS, a second library next to NumPy's; it must
    # be loaded before the limit is set or it keeps one thread per core.
    import scipy.linalg  # noqa: F401
    from threadpoolctl import threadpool_limits

    set_clock(cpu=not args.wall)
    clock = "wall" if args.wall else "process CPU"
    start = time.perf_counter()
    with threadpool_limits(limits=1):
        print(f"Loops against PerRowLikelihood's kernels, n = {args.n:_} (fastmath off)")
        rows = check_rows(args.n)
        print(format_table(["model", "quantity", "loop", "kernel", "rel. error"], rows))
        print(
            f"\nms per call ({clock} time, median of {args.repeats} interleaved batches, 1 BLAS "
            "thread); floor = Numba loops with fastmath off, fm floor = with PyTensor's flags"
        )
        rows = kernel_rows(args.n, args.repeats, args.steps)
        header = ["work", "kernels", "floor", "fm floor", "kernels/floor", "kernels/fm floor"]
        print(format_table(header, rows))
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
