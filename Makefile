# pymc-dp: `make demo`, `make test`, `make bench` bootstrap .venv with Python >= 3.12 on first use.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
# .python-version (3.12) makes pyenv's python3.12 shim resolve here; otherwise any python3.12/3.13.
PYTHON ?= $(shell for p in python3.12 python3.13 python3; do \
	  if command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; \
	  then echo $$p; break; fi; done)

.PHONY: demo test bench lint venv clean correction

$(VENV)/.installed: pyproject.toml
	@if [ -z "$(PYTHON)" ]; then echo "error: Python >= 3.12 not found (tried python3.12, python3.13, python3)"; exit 1; fi
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	@touch $@

venv: $(VENV)/.installed

demo: venv
	$(PY) -m pymc_dp demo

test: venv
	$(PY) -m ruff check pymc_dp tests benchmarks
	PYMC_DP_NOTEBOOK_FAST=1 $(PY) -m pytest -n 2 --dist loadgroup -q --durations=25 --nbmake tests notebooks

bench: venv
	$(PY) -m benchmarks

# Refit DP Barker's logistic correction distribution (deterministic) into pymc_dp/data/.
correction: venv
	$(PY) -c "from pymc_dp.step_methods.fit_barker_correction import main; main([])"

lint: venv
	$(PY) -m ruff check pymc_dp tests benchmarks

clean:
	rm -rf $(VENV) demo_output .pytest_cache
