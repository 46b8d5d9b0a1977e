"""Modules and names moved in 0.2.0 (issue 23), importable from where they were until 0.3.0."""

from __future__ import annotations

import importlib
import sys
import warnings

__all__ = ["alias", "moved_name"]


def _warn(old: str, new: str) -> None:
    warnings.warn(
        f"`{old}` moved to `{new}` in pymc-dp 0.2.0; the old name goes in 0.3.0.",
        DeprecationWarning,
        stacklevel=4,
    )


def alias(old: str, new: str) -> None:
    """Make module ``old`` (being imported) the module ``new``, with a deprecation warning."""
    _warn(old, new)
    sys.modules[old] = importlib.import_module(new)


def moved_name(module: str, name: str, moves: dict[str, str]):
    """A module's ``__getattr__`` for ``moves`` (name -> module it moved to)."""
    if name not in moves:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    _warn(f"{module}.{name}", f"{moves[name]}.{name}")
    return getattr(importlib.import_module(moves[name]), name)
