"""Nothing private reaches the disk: PyTensor's compiledir outlives the process (numba caches
compiled graphs there, with their array constants), so the package's kernels read the rows from
storage and may be cached. One process builds and runs the steps on rows of distinctive values
(``tests/disk_cache_probe.py``) with a compiledir of its own; every file it wrote is searched for
those values, as float64 and as float32. Checked to fail when the kernels are cached with the
rows as constants (every numba cache file of a kernel then holds all of them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

PROBE = Path(__file__).with_name("disk_cache_probe.py")


def _probe(cache: Path, values: Path, seed: int) -> set[str]:
    """Run the probe with its own compiledir; the names of the numba cache files it wrote."""
    env = dict(os.environ, PYTENSOR_FLAGS=f"base_compiledir={cache}")
    env["PYTHONPATH"] = os.pathsep.join([str(PROBE.parents[1]), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(PROBE), str(values), str(seed)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {p.name for p in cache.rglob("*") if p.is_file() and "numba" in p.parts}


def _found(cache: Path, private: np.ndarray) -> dict[str, tuple[int, int]]:
    """Files holding a private value: (float64 hits, float32 hits) by file."""
    wide = {v.tobytes() for v in private}
    narrow = {v.tobytes() for v in private.astype(np.float32)}
    found = {}
    for path in (p for p in cache.rglob("*") if p.is_file()):
        blob = path.read_bytes()
        hits = sum(x in blob for x in wide), sum(x in blob for x in narrow)
        # 8 bytes of 12-digit values do not occur by chance; 4 bytes may, once in a few MB
        if hits[0] or hits[1] > 2:
            found[str(path.relative_to(cache))] = hits
    return found


def test_no_private_value_is_written_to_the_compile_cache(tmp_path):
    """(That the cache files' names, which hash a compiled graph's constants, do not depend on
    the rows either: ``test_likelihood.py``, on the kernels' graphs; here released values,
    public and different in every run, are compiled too, by NUTS on a surrogate.)"""
    cache, values = tmp_path / "compiledir", tmp_path / "values.npy"
    assert _probe(cache, values, 0), "the probe compiled nothing: the test would prove nothing"
    found = _found(cache, np.load(values))
    assert not found, f"private values written to the compile cache: {found}"
