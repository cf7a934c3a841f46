"""The one exception of plan files."""

from __future__ import annotations

__all__ = ["PlanError"]


class PlanError(ValueError):
    """A plan directory that is missing, incomplete, corrupt or of another
    format, or a request it cannot serve. The message names the file."""
