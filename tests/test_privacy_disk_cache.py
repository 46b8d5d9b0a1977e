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


def test_no_private_value_is_written_to_the_compile_cache(tmp_path):
    cache, values = tmp_path / "compiledir", tmp_path / "values.npy"
    env = dict(os.environ, PYTENSOR_FLAGS=f"base_compiledir={cache}")
    env["PYTHONPATH"] = os.pathsep.join([str(PROBE.parents[1]), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(PROBE), str(values)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    private = np.load(values)
    patterns = {v.tobytes() for v in private} | {v.tobytes() for v in private.astype(np.float32)}
    files = [p for p in cache.rglob("*") if p.is_file()]
    numba = [p for p in files if "numba" in p.parts]
    assert numba, "the probe compiled nothing into the cache: the test would prove nothing"
    found = {}
    for path in files:
        blob = path.read_bytes()
        hits = sum(pattern in blob for pattern in patterns)
        # a float32 pattern is 4 bytes: one may occur by chance in a few MB of machine code
        if hits > 2:
            found[str(path.relative_to(cache))] = hits
    assert not found, f"private values written to the compile cache: {found}"
