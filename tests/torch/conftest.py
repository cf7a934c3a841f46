"""Fixtures of the torch samplers' tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._support.folders import folder_marker
from tests._support.plan_dirs import write_small_plan


@pytest.fixture
def plan_dir(tmp_path: Path) -> Path:
    """A plan of 40,000 samples in steps of 1,000 on 4 ranks, epochs 0 and 1."""
    return write_small_plan(tmp_path / "plan")


# Each test of the folder is marked with its name (tests._support.folders).
pytest_collection_modifyitems = folder_marker(__file__)
