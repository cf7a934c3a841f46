"""Fixtures of the core's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import epochplan as ep


@pytest.fixture
def restore_threads() -> Iterator[None]:
    """Restores the default thread count after a test that changes it."""
    yield
    ep.set_num_threads(0)
