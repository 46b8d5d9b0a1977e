"""Every DP step, registered once with the configurations the privacy contract runs it in.

Adding a step is one module plus one registration line at its end::

    register(DPMyStep, my_step=Example({"llr_clip": 3.0}))

The privacy contract's test (``tests/test_privacy_contract.py``) runs every registered example,
so no step can skip it. An example is public configuration for the contract's models: a Normal
linear regression with ``n = 300`` rows, two covariates clipped to [-3, 3] and a free noise sd
(``grouped=True``: the same with a random intercept ``tau * z[group]`` over four groups).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["Example", "contract_examples", "register", "registered_steps"]


@dataclass(frozen=True)
class Example:
    """One configuration of a step for the contract run: its keyword arguments (besides the
    budget), whether it needs the grouped model, and the epsilon it runs at."""

    kwargs: Mapping[str, Any] = field(default_factory=dict)
    grouped: bool = False
    epsilon: float = 2.0

    def build(self, step: type, **kwargs: Any):
        """The step built with this example's arguments (``kwargs`` win)."""
        return step(**{"epsilon": self.epsilon, **self.kwargs, **kwargs})


_STEPS: dict[type, dict[str, Example]] = {}


def register(step: type, **examples: Example) -> type:
    """Register ``step``, once, with its contract examples (at least one; names unique across
    steps)."""
    if not examples:
        raise ValueError(f"register({step.__name__}) needs at least one example")
    if step in _STEPS:  # once: a second call would replace the examples the contract runs
        raise ValueError(f"{step.__name__} is registered already")
    taken = {name for known in _STEPS.values() for name in known}
    clash = sorted(set(examples) & taken)
    if clash:
        raise ValueError(f"example names already registered by another step: {clash}")
    for name, example in examples.items():
        if not isinstance(example, Example):
            raise TypeError(f"example {name!r} of {step.__name__} must be an Example")
    _STEPS[step] = dict(examples)
    return step


def registered_steps() -> tuple[type, ...]:
    """The registered step classes, in registration order."""
    return tuple(_STEPS)


def contract_examples() -> Mapping[str, tuple[type, Example]]:
    """Every registered example by name: ``name -> (step class, example)``."""
    return MappingProxyType(
        {name: (step, ex) for step, examples in _STEPS.items() for name, ex in examples.items()}
    )
