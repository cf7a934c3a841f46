"""The one exception of plan files."""

from __future__ import annotations

# Raised where the fault is found, in Rust or in Python: a ValueError naming
# the file. An I/O fault is also the OSError of its kind (the native
# PlanFileNotFoundError is both a PlanError and a FileNotFoundError, say),
# with its errno and file name.
from epochplan._native import PlanError

__all__ = ["PlanError"]
