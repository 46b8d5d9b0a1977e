"""ABCDP: differentially private rejection ABC over ``pm.Simulator`` models.

Park, Vinaroz & Jitkrittum (2021), "ABCDP: Approximate Bayesian Computation with Differential
Privacy". A public stage simulates ``(theta_t, Y_t)`` from the prior and the simulator; a private
stage runs the sparse vector technique on distances ``rho(Y*, Y_t)`` with a proven replace-one
sensitivity, and releases which ``theta_t`` it accepted. Pure epsilon-DP.

* :func:`sample_abcdp`: the private sampler (result is a ``DataTree`` with the privacy ledger);
* :func:`sample_abc_nonprivate`: the same proposals and stopping rule without noise (baseline,
  NOT private, marked so);
* :class:`MMD`, :class:`SummaryDistance`: distances and their sensitivities;
  :func:`prior_predictive_distances`: public distances between simulated data sets, to choose
  the threshold without the private data;
* :func:`noise_scale`, :func:`svt_epsilon`, :func:`flip_probability`: Theorem 4.1 and
  Proposition 4.2; :class:`SparseVector`: Algorithm 1's private stage on its own.
"""

from pymc_dp.abcdp.distances import MMD, Distance, SummaryDistance, median_heuristic
from pymc_dp.abcdp.sampler import prior_predictive_distances, sample_abc_nonprivate, sample_abcdp
from pymc_dp.abcdp.svt import SparseVector, flip_probability, noise_scale, svt_epsilon

__all__ = [
    "MMD",
    "Distance",
    "SparseVector",
    "SummaryDistance",
    "flip_probability",
    "median_heuristic",
    "noise_scale",
    "prior_predictive_distances",
    "sample_abc_nonprivate",
    "sample_abcdp",
    "svt_epsilon",
]
