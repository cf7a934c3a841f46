"""Fixtures of the core's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import epochplan as ep
from tests._support.folders import folder_marker


@pytest.fixture
def restore_threads() -> Iterator[None]:
    """Restores the default thread count after a test that changes it."""
    yield
    ep.set_num_threads(0)


# Each test of the folder is marked with its name (tests._support.folders).
pytest_collection_modifyitems = folder_marker(__file__)
