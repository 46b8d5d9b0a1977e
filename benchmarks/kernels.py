"""Per-row log-likelihood and gradient kernels against PyMC's summed logp / dlogp.

The DP kernels compute something PyMC never needs (a value or gradient *per row*, clipped, then
summed), so the fair baselines are PyMC's compiled functions on the same model and point:

* the ratio kernel evaluates the log-likelihood at two points, like the ``delta_logp`` function
  that ``pm.Metropolis`` compiles (``logp(q1) - logp(q0)``);
* the gradient kernel evaluates ``D`` per-row push-forwards; PyMC's ``dlogp`` is one reverse-mode
  gradient of the summed log-density.
"""

from __future__ import annotations

import numpy as np
from pymc.pytensorf import compile as pm_compile
from pymc.pytensorf import join_nonshared_inputs
from pymc.step_methods.metropolis import delta_logp

from benchmarks.models import Problem
from benchmarks.timing import compare_ms
from pymc_dp import PerRowLikelihood

__all__ = ["kernel_rows"]


def _raveled_dlogp(problem: Problem):
    """PyMC's dlogp on a raveled vector with ``trust_input`` (what its samplers call)."""
    model = problem.model
    [grad], q = join_nonshared_inputs(problem.point, [model.dlogp()], model.value_vars, {})
    fn = pm_compile([q], grad)
    fn.trust_input = True
    return fn


def kernel_rows(problem: Problem, repeats: int) -> list[tuple[str, float, str, float]]:
    """Rows ``(function, ms/call, baseline, ratio)`` for one problem."""
    model, point = problem.model, problem.point
    lik = PerRowLikelihood(model)
    q = lik.ravel(point)
    q_new = q + 1e-3 * np.random.default_rng(1).standard_normal(q.size)
    llr_bound = np.asarray(problem.row_norm_bound * np.linalg.norm(q_new - q))
    grad_bound = np.asarray(problem.row_norm_bound)
    ratio, grad = lik.ratio_kernel(), lik.grad_kernel()

    logp_fn, dlogp_fn = model.compile_logp(), model.compile_dlogp()
    metropolis_delta = delta_logp(point, model.logp(), model.value_vars, {}, None)
    dlogp_raveled = _raveled_dlogp(problem)
    logp_dlogp = model.logp_dlogp_function(ravel_inputs=True)
    logp_dlogp.set_extra_values({})

    base = {
        "compile_logp": lambda: logp_fn(point),
        "compile_dlogp": lambda: dlogp_fn(point),
        "Metropolis delta_logp": lambda: metropolis_delta(q_new, q),
        "dlogp (raveled)": lambda: dlogp_raveled(q),
        "logp_dlogp_function": lambda: logp_dlogp(q),
    }
    dp = {
        "ratio_kernel (fused)": lambda: ratio(q_new, q, llr_bound),
        "grad_kernel (fused)": lambda: grad(q, grad_bound),
        "logp_rows (unfused)": lambda: lik.logp_rows(q),
        "grad_rows (unfused)": lambda: lik.grad_rows(q),
    }
    ms = compare_ms({**dp, **base}, repeats=repeats)
    pairs = [
        ("ratio_kernel (fused)", "Metropolis delta_logp"),
        ("grad_kernel (fused)", "dlogp (raveled)"),
        ("grad_kernel (fused)", "logp_dlogp_function"),  # what NUTS calls: logp and gradient
        ("logp_rows (unfused)", "compile_logp"),
        ("grad_rows (unfused)", "compile_dlogp"),
    ]
    rows = [(name, ms[name], ref, ms[name] / ms[ref]) for name, ref in pairs]
    rows += [(f"PyMC {name}", ms[name], "", float("nan")) for name in base]
    return rows
