"""The step registry: what the privacy contract runs, and its refusals."""

from __future__ import annotations

import sys

import pytest

import pymc_dp as pdp
from pymc_dp.step_methods.registry import Example, contract_examples, register, registered_steps


def test_every_shipped_step_and_the_test_file_toy_are_registered():
    """The toy step of ``tests/toy_step.py`` reaches the contract through ``conftest.py`` alone:
    this file does not import it, and the contract's parametrisation holds it."""
    import test_privacy_contract as contract

    shipped = {
        pdp.DPPenalty,
        pdp.DPHMC,
        pdp.DPBarker,
        pdp.DPMinibatchPenalty,
        pdp.DPLaplace,
        pdp.DPSuffStats,
        pdp.DPGroupGibbs,
    }
    toy = sys.modules["toy_step"].ToyWalk  # imported by conftest.py, not here
    assert shipped | {toy} <= set(registered_steps())
    step, example = contract_examples()["toy_walk"]
    assert step is toy and example.kwargs == {"llr_clip": 3.0, "proposal_scale": 0.05}
    assert contract.STEPS["toy_walk"] == (toy, example)


def test_registration_refuses_what_would_hide_a_step():
    class Other(pdp.DPStep):
        pass

    with pytest.raises(ValueError, match="at least one example"):
        register(Other)
    with pytest.raises(ValueError, match=r"already registered by another step: \['toy_walk'\]"):
        register(Other, toy_walk=Example())
    with pytest.raises(TypeError, match="must be an Example"):
        register(Other, other={"llr_clip": 1.0})
    assert Other not in registered_steps()
    # review: a second registration of a step replaced its examples (the contract then skipped
    # them) and bypassed the name check
    before = dict(contract_examples())
    with pytest.raises(ValueError, match="DPPenalty is registered already"):
        register(pdp.DPPenalty, hmc=Example({"llr_clip": 1.0}))
    assert dict(contract_examples()) == before
