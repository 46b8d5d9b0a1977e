"""Privacy noise: secret, independent of ``random_seed``, with outputs whose low bits carry nothing.

Two rules, both from attacks on deployed DP systems:

* **Nobody can reproduce the noise.** Whoever knows the seed of the noise can subtract it, and a
  guessable ``random_seed`` (0, 1, 42) is recovered from a few released statistics. Noise comes
  from a generator seeded with 128 bits of OS entropy, separately from the generator that
  reproduces proposals. Seeded noise exists only on explicit request (``noise_seed``, for tests
  and reproducible research), and the privacy ledger records it (``noise_seeded``).
* **No low-order bits.** ``x + sigma * Z`` computed in floating point has a set of possible
  outputs that depends on ``x``, and its low bits reveal ``x`` (Mironov 2012; Jin et al. 2022).
  Every released Gaussian or Laplace value is therefore *snapped*: the input is rounded to a grid
  ``g = sigma / G`` (``G = 2^20``), integer noise ``K`` of scale ``G`` is added, and the output is
  ``g (round(x / g) + K)``. ``K`` is drawn without looking at the data, so every output bit is a
  function of the integer ``round(x / g) + K``; in exact arithmetic this is the continuous
  Gaussian (Laplace) mechanism applied to the integer ``round(x / g)``, followed by rounding
  (post-processing). Rounding the input adds at most ``sqrt(dim) g`` to the L2 sensitivity
  (``dim g`` to the L1), and the noise scale is raised so that the multiplier the accountant sees
  is exactly the one asked for.

``K`` comes from NumPy (``rint(G Z)`` with ``Z`` standard normal, resp. Laplace): its distribution
is data-independent and differs from the ideal rounded Gaussian only through the floating-point
accuracy of NumPy's samplers. ``exact=True`` draws ``K`` from OpenDP's exact discrete Gaussian
(Canonne, Kamath & Steinke 2020) and discrete Laplace samplers instead (``pip install opendp``),
at about 14 us per sample (batched); ``make bench`` reports what it costs per iteration.

Values that are never released, only compared (the Barker test, the sparse vector technique:
they release one decision bit), use :meth:`NoiseSource.standard_normal` and friends directly.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["NoiseSource", "SNAP_GRID"]

#: Noise standard deviation in grid units of a snapped release.
SNAP_GRID = 2.0**20
_BATCH = 4096


class _OpenDPIntegers:
    """Buffers of OpenDP's exact discrete Gaussian / discrete Laplace integers of scale G."""

    def __init__(self) -> None:
        try:
            import opendp.prelude as dp
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError(
                "exact noise needs OpenDP: pip install opendp (or pymc-dp[exact])"
            ) from err
        dp.enable_features("contrib")
        domain = dp.vector_domain(dp.atom_domain(T=int), size=_BATCH)
        self._zeros = [0] * _BATCH
        self._make = {
            "gaussian": dp.m.make_gaussian(domain, dp.l2_distance(T=int), scale=SNAP_GRID),
            "laplace": dp.m.make_laplace(domain, dp.l1_distance(T=int), scale=SNAP_GRID),
        }
        self._buffers: dict[str, list[int]] = {"gaussian": [], "laplace": []}

    def draw(self, kind: str, size: int) -> np.ndarray:
        buf = self._buffers[kind]
        while len(buf) < size:
            buf.extend(self._make[kind](self._zeros))
        out, self._buffers[kind] = buf[:size], buf[size:]
        return np.asarray(out, dtype=np.float64)


class NoiseSource:
    """The secret randomness of one chain (or one release).

    Parameters
    ----------
    seed : int, sequence of int or SeedSequence, optional
        ``None`` (the default): 128 bits of OS entropy, which nobody can reproduce. Anything else
        makes the noise reproducible: tests and reproducible research only.
    exact : bool
        Draw the integer noise of snapped releases with OpenDP's exact samplers (cannot be
        seeded).
    """

    def __init__(self, seed: Any = None, *, exact: bool = False) -> None:
        if exact and seed is not None:
            raise ValueError(
                "`noise_seed` cannot seed OpenDP's exact samplers, which draw from the OS: "
                "give one or the other."
            )
        self.seeded = seed is not None
        self.exact = bool(exact)
        seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        self._rng = np.random.Generator(np.random.PCG64(seq))
        self._exact = _OpenDPIntegers() if exact else None

    @classmethod
    def for_chain(cls, noise_seed: Any, chain: int, *, exact: bool = False) -> NoiseSource:
        """Chain ``chain``'s source: OS entropy, or a stream spawned from ``noise_seed``."""
        if noise_seed is None:
            return cls(exact=exact)
        return cls(np.random.SeedSequence(noise_seed, spawn_key=(int(chain),)), exact=exact)

    # ------------------------------------------------------------------ raw draws (never released)
    def standard_normal(self, size: int | tuple[int, ...] | None = None) -> Any:
        return self._rng.standard_normal(size)

    def random(self, size: int | tuple[int, ...] | None = None) -> Any:
        return self._rng.random(size)

    def laplace(self, scale: float, size: int | tuple[int, ...] | None = None) -> Any:
        return self._rng.laplace(0.0, scale, size)

    @property
    def generator(self) -> np.random.Generator:
        """The underlying NumPy generator (secret): for samplers that take a Generator."""
        return self._rng

    # ------------------------------------------------------------------ snapped releases
    @staticmethod
    def gaussian_std(sensitivity: float, noise_multiplier: float, dim: int = 1) -> float:
        """Noise std of a snapped Gaussian release whose multiplier, for the accountant, is
        exactly ``noise_multiplier`` over the L2 ``sensitivity`` (see the module docstring)."""
        excess = noise_multiplier * math.sqrt(dim) / SNAP_GRID
        if excess >= 0.5:
            raise ValueError(
                f"noise_multiplier {noise_multiplier:.3g} is too large for snapped noise in "
                f"{dim} dimensions"
            )
        return noise_multiplier * sensitivity / (1.0 - excess)

    def gaussian(self, value: Any, sensitivity: float, noise_multiplier: float) -> Any:
        """``value + N(0, sigma^2 I)``, snapped; ``sigma`` from :meth:`gaussian_std`.

        ``value`` is a float or a 1-D array (L2 sensitivity ``sensitivity``); a zero sensitivity
        releases ``value`` unchanged (nothing private in it).
        """
        x = np.asarray(value, dtype=np.float64)
        if sensitivity <= 0.0:
            return value
        sigma = self.gaussian_std(sensitivity, noise_multiplier, max(1, x.size))
        grid = sigma / SNAP_GRID
        if self._exact is not None:
            k = self._exact.draw("gaussian", x.size).reshape(x.shape)
        else:
            k = np.rint(SNAP_GRID * self._rng.standard_normal(x.shape))
        out = grid * (np.rint(x / grid) + k)
        return float(out) if out.ndim == 0 else out

    def laplace_release(self, value: Any, sensitivity: float, epsilon: float) -> np.ndarray:
        """``value + Lap(sensitivity / epsilon)`` per component, snapped, pure ``epsilon``-DP for
        the L1 ``sensitivity`` (the scale is raised by the rounding of the input)."""
        x = np.asarray(value, dtype=np.float64)
        # rounding the input moves it by up to dim grid units: epsilon dim / G at unit scale
        slack = max(1, x.size) / SNAP_GRID
        if slack >= 0.5 * epsilon:
            raise ValueError(f"epsilon {epsilon:.3g} is too small for snapped noise")
        scale = sensitivity / (epsilon - slack)
        grid = scale / SNAP_GRID
        if self._exact is not None:
            k = self._exact.draw("laplace", x.size).reshape(x.shape)
        else:
            k = np.rint(SNAP_GRID * self._rng.laplace(0.0, 1.0, x.shape))
        return grid * (np.rint(x / grid) + k)
