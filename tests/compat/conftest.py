"""Fixtures of the tests against MosaicML Streaming and megatron-core."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import epochplan as ep
from tests._support.folders import folder_marker

# Streaming's own tests run against ours only on its sdist, which is not in
# the repository: CI downloads it and names it here (see .ci/run).
collect_ignore = [] if os.environ.get("EPOCHPLAN_STREAMING_SDIST") else ["test_streaming_suite.py"]


@pytest.fixture
def restore_threads() -> Iterator[None]:
    """Restores the default thread count after a test that changes it."""
    yield
    ep.set_num_threads(0)


# Each test of the folder is marked with its name (tests._support.folders).
pytest_collection_modifyitems = folder_marker(__file__)
