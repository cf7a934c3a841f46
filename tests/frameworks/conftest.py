"""What the tests of epochplan under other frameworks' training loops share."""

from __future__ import annotations

import importlib.util

from tests._support.folders import folder_marker

# Ray Train is not in the test extra (its install and a local Ray take
# minutes of CI's time): its tests run where the `ray` extra is installed.
collect_ignore = [] if importlib.util.find_spec("ray") else ["test_frameworks_ray.py"]


# Each test of the folder is marked with its name (tests._support.folders).
pytest_collection_modifyitems = folder_marker(__file__)
