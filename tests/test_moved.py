"""Modules and names moved in 0.2.0 (issue 23) import from their old places, with a
DeprecationWarning naming the new place, and are the same objects."""

from __future__ import annotations

import importlib
import sys

import pytest

MOVED = {
    "pymc_dp.warmstart": "pymc_dp.tuning.warm_start",
    "pymc_dp.step_methods.minibatch": "pymc_dp.batches",
    "pymc_dp.step_methods.spending": "pymc_dp.spending",
    "pymc_dp.step_methods.adaptation": "pymc_dp.tuning.adaptation",
}


@pytest.mark.parametrize("old, new", MOVED.items())
def test_a_moved_module_is_its_new_module_with_a_warning(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_the_barker_fitter_is_importable_from_its_old_module():
    from pymc_dp.step_methods import barker_correction, fit_barker_correction

    for name in ("fit_correction", "main"):
        with pytest.warns(DeprecationWarning, match="fit_barker_correction"):
            assert getattr(barker_correction, name) is getattr(fit_barker_correction, name)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        barker_correction.nothing  # noqa: B018
