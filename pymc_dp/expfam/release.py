"""The data owner's side: release noisy sufficient statistics with the Laplace mechanism.

Bernstein & Sheldon (2018), Sec. 3.1 and 3.3: ``y = s + Lap(Delta / epsilon)``, independent
noise on every component of ``s = sum_i t_hat(x_i)``, with ``Delta`` the L1 sensitivity under
replace-one neighbours (one person's record replaced; ``n`` public). This is pure
``epsilon``-DP (Dwork et al. 2006); everything computed from the returned
:class:`NoisyStatistic` alone (the Gibbs sampler, any number of chains and draws) is
post-processing and costs nothing more.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pymc_dp.accounting.ledger import PrivacyLedger, PureDPMechanism
from pymc_dp.checks import check_count, check_epsilon
from pymc_dp.expfam.families import Family, family_from_dict, get_family
from pymc_dp.noise import NoiseSource

__all__ = ["NoisyStatistic", "release"]

RELEASE_ATTR = "pymc_dp_expfam_release"


@dataclass(frozen=True, eq=False)
class NoisyStatistic:
    """A released noisy sufficient statistic: everything a modeler needs, nothing private.

    Attributes
    ----------
    y : ndarray, shape (dim,)
        The noisy statistic ``s_hat + Laplace(sensitivity / epsilon)`` (read-only).
    n : int
        Number of records (public).
    epsilon : float
        Privacy parameter of the release (pure DP, delta = 0).
    sensitivity : float
        L1 sensitivity of ``s_hat`` under replace-one neighbours.
    family : Family
        The likelihood family, including its truncation bounds.
    mechanism : str
        Human-readable description of the mechanism.
    """

    y: NDArray[np.float64]
    n: int
    epsilon: float
    sensitivity: float
    family: Family
    mechanism: str = field(default="")
    noise_seeded: bool = False

    def __post_init__(self) -> None:
        y = np.array(self.y, dtype=np.float64).reshape(-1)
        if y.size != self.family.dim or not np.all(np.isfinite(y)):
            raise ValueError(
                f"`y` must hold {self.family.dim} finite value(s) for {self.family.describe()}, "
                f"got {self.y!r}"
            )
        y.setflags(write=False)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "n", check_count(self.n, "n", minimum=1))
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        if not math.isclose(float(self.sensitivity), self.family.sensitivity, rel_tol=1e-12):
            raise ValueError(
                f"`sensitivity` {self.sensitivity} does not match the replace-one sensitivity "
                f"{self.family.sensitivity} of {self.family.describe()}"
            )
        object.__setattr__(self, "sensitivity", float(self.sensitivity))
        if not self.mechanism:
            object.__setattr__(
                self,
                "mechanism",
                f"Laplace mechanism, independent noise of scale {self.scale:.6g} "
                f"(= L1 sensitivity {self.sensitivity:.6g} / epsilon) on each of "
                f"{self.family.dim} component(s), snapped to a grid of scale / 2^20",
            )

    @property
    def bounds(self) -> tuple[float, float] | None:
        """Truncation bounds (public) or None for bounded families."""
        return self.family.bounds

    @property
    def scale(self) -> float:
        """Laplace scale ``sensitivity / epsilon`` of every component."""
        return self.sensitivity / self.epsilon

    @property
    def ledger(self) -> PrivacyLedger:
        """The privacy spent: one pure ``epsilon``-DP release, whatever is sampled from it."""
        return PrivacyLedger(
            sampler="expfam.release",
            per_chain=(
                PureDPMechanism(
                    f"Laplace release of sufficient statistics (family {self.family.describe()})",
                    self.epsilon,
                ),
            ),
            chains=1,
            delta=0.0,
            target_epsilon=self.epsilon,
            noise_seeded=self.noise_seeded,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe record (for sending the release to a modeler)."""
        return {
            "y": self.y.tolist(),
            "n": self.n,
            "epsilon": self.epsilon,
            "sensitivity": self.sensitivity,
            "family": self.family.to_dict(),
            "bounds": None if self.bounds is None else list(self.bounds),
            "mechanism": self.mechanism,
            "noise_seeded": self.noise_seeded,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> NoisyStatistic:
        """Inverse of :meth:`to_dict` (checks the sensitivity against the family)."""
        return cls(
            y=np.asarray(record["y"], dtype=np.float64),
            n=record["n"],
            epsilon=record["epsilon"],
            sensitivity=record["sensitivity"],
            family=family_from_dict(record["family"]),
            mechanism=record.get("mechanism", ""),
            noise_seeded=bool(record.get("noise_seeded", False)),
        )

    @classmethod
    def from_json(cls, text: str) -> NoisyStatistic:
        return cls.from_dict(json.loads(text))

    def __repr__(self) -> str:
        return (
            f"NoisyStatistic(y={np.array2string(self.y, precision=4)}, n={self.n}, "
            f"epsilon={self.epsilon:g}, sensitivity={self.sensitivity:g}, "
            f"family={self.family.describe()})"
        )


def release_statistic(
    s: ArrayLike, n: int, family: Family, epsilon: float, noise: NoiseSource
) -> NoisyStatistic:
    """Laplace release of an exact statistic ``s`` of ``n`` records (no checks of ``s``), snapped
    (:mod:`pymc_dp.noise`) with secret noise."""
    epsilon = check_epsilon(epsilon)
    s = np.asarray(s, dtype=np.float64).reshape(family.dim)
    y = noise.laplace_release(s, family.sensitivity, epsilon)
    return NoisyStatistic(
        y=y,
        n=n,
        epsilon=epsilon,
        sensitivity=family.sensitivity,
        family=family,
        noise_seeded=noise.seeded,
    )


def release(
    data: ArrayLike,
    family: str | Family,
    epsilon: float,
    bounds: tuple[float, float] | None = None,
    *,
    noise_seed: int | None = None,
    exact_noise: bool = False,
    trials: int | None = None,
    categories: int | None = None,
    sigma: float | None = None,
) -> NoisyStatistic:
    """Release the sufficient statistics of ``data`` with pure ``epsilon``-DP (Laplace mechanism).

    Bernstein & Sheldon (2018), Sec. 3.1 (bounded ``t``) and Sec. 3.3 (truncation): the data owner
    computes ``s_hat = sum_i 1[a <= x_i <= b] t(x_i)`` (no truncation for bounded families) and
    publishes ``y = s_hat + Lap(Delta / epsilon)`` with independent noise on every component.

    Parameters
    ----------
    data : array_like or Dask array / DataFrame column
        One row per person: counts in ``{0..trials}`` (binomial); category labels, or an
        ``(n, categories)`` array of counts (multinomial); non-negative integers (Poisson);
        non-negative reals (exponential); reals (normal). A Dask collection stays on its
        workers: each partition's (truncated) statistic is computed there and only the sums
        reach this process (:func:`pymc_dp.distributed.map_reduce_statistic`).
    family : str or Family
        See :func:`~pymc_dp.expfam.get_family`.
    epsilon : float
        Privacy parameter, > 0. The release is ``(epsilon, 0)``-DP under replace-one neighbours.
    bounds : (a, b), optional
        Truncation bounds for the Poisson, exponential and normal families (required there).
        They are public inputs: choose them from domain knowledge, never from this data set (that
        would leak) and never from a true parameter. Records outside are redacted.
    noise_seed : int, optional
        Seed of the noise. Default: OS entropy, which nobody can reproduce. A seed reproduces the
        release bit for bit (tests, reproducible research) and is recorded; whoever knows it can
        subtract the noise.
    exact_noise : bool
        Draw the integer noise with OpenDP's exact discrete Laplace sampler.
    trials, categories, sigma
        Public options of the family when ``family`` is a name.

    Returns
    -------
    NoisyStatistic
        ``y``, ``n``, ``epsilon``, ``sensitivity``, ``family`` (with ``bounds``), ``mechanism``,
        and the privacy ``ledger``.

    Raises
    ------
    ValueError
        For ``epsilon <= 0``, bounds with ``a >= b`` (or missing/unneeded bounds), and data outside
        a bounded family's support, non-finite or empty.

    Notes
    -----
    L1 sensitivity under replace-one neighbours: ``trials`` (binomial), ``2 trials``
    (multinomial: a count vector changes in two components), ``max(b, 0) - min(a, 0)``
    (truncated families). The release is snapped (:mod:`pymc_dp.noise`): its low-order bits
    carry nothing about the data (Mironov 2012).
    """
    epsilon = check_epsilon(epsilon)
    fam = get_family(family, bounds, trials=trials, categories=categories, sigma=sigma)
    from pymc_dp.distributed import is_dask, map_reduce_statistic  # imports no Dask

    if is_dask(data):
        s, n = map_reduce_statistic(fam, data)  # per partition on the workers, then summed
    else:
        s, n = fam.statistic(data)
    return release_statistic(s, n, fam, epsilon, NoiseSource(noise_seed, exact=exact_noise))
