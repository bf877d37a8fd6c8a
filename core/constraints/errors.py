"""The one error of core/constraints/ (a module of its own, so every part can raise it without a cycle)."""
from __future__ import annotations

from ..errors import UsageError


class ConstraintError(UsageError):
    """A constraint that cannot be compiled, or that no canvas of the given length can meet (exit 2)."""
