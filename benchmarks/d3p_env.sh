#!/usr/bin/env bash
# Create the separate Python 3.10 environment in which d3p 0.2.0 imports (idempotent).
#
# d3p 0.2.0 needs an old JAX stack: its ChaCha PRNG breaks on newer jax, and its pins predate
# numpy 2. The environment lives at <repo>/.venv-d3p and is used only by
# benchmarks/d3p_runner.py, which benchmarks/realdata.py calls by subprocess.
#
# Usage: bash benchmarks/d3p_env.sh   (re-running only checks the imports)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${D3P_VENV:-$ROOT/.venv-d3p}"
PY310="${PY310:-}"
if [[ -z "$PY310" ]]; then
    if [[ -x /root/.pyenv/versions/3.10.13/bin/python3.10 ]]; then
        PY310=/root/.pyenv/versions/3.10.13/bin/python3.10
    elif command -v python3.10 >/dev/null 2>&1; then
        PY310="$(command -v python3.10)"
    else
        PY310="$(PYENV_VERSION=3.10.13 pyenv which python3.10)"
    fi
fi

check() {
    "$VENV/bin/python" - <<'PY'
import d3p, d3p.svi, d3p.minibatch, d3p.dputil, d3p.random  # noqa: F401
import jax, numpyro
print("d3p env ok:", "jax", jax.__version__, "numpyro", numpyro.__version__)
PY
}

if [[ -x "$VENV/bin/python" ]] && check 2>/dev/null; then
    exit 0
fi

"$PY310" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet \
    "jax==0.4.13" "jaxlib==0.4.13" "numpyro==0.12.1" "numpy<2" "scipy<1.12" "ml_dtypes<0.3" \
    "d3p==0.2.0"
check
