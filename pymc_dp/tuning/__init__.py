"""Zero tuning: what a step learns before and while its chains run, from released values only.

* :mod:`~pymc_dp.tuning.warm_start`: the private warm start (noisy Newton steps to the mode and a
  noise-aware Laplace fit), the one place a step spends budget before its chains;
* :mod:`~pymc_dp.tuning.adaptation`: the proposal covariance / mass matrix adapted from the
  released warm-up draws (post-processing: no budget).
"""
