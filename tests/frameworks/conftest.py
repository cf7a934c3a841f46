"""What the tests of epochplan under other frameworks' training loops share."""

from __future__ import annotations

import importlib.util

# Ray Train is not in the test extra (its install and a local Ray take
# minutes of CI's time): its tests run where the `ray` extra is installed.
collect_ignore = [] if importlib.util.find_spec("ray") else ["test_frameworks_ray.py"]
