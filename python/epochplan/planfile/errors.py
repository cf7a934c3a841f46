"""The exceptions of plan files (see :mod:`epochplan.errors`, their home)."""

from __future__ import annotations

from epochplan.errors import (
    PlanError,
    PlanFileExistsError,
    PlanFileNotFoundError,
    PlanOSError,
    PlanPermissionError,
    plan_os_error,
)

__all__ = [
    "PlanError",
    "PlanFileExistsError",
    "PlanFileNotFoundError",
    "PlanOSError",
    "PlanPermissionError",
    "plan_os_error",
]
