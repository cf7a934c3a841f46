"""Selection.from_indices keeps the caller's array without a copy, and its
duplicate check does not copy it either: the check's temporary is an eighth
of the array (64 MiB at least), measured as the process's peak memory."""

from __future__ import annotations

import subprocess
import sys

# 2**25 distinct ids (256 MiB) spread over a store of 2**40, in no order:
# the store's bitmap would be 128 GiB, a sorted copy 256 MiB.
SCRIPT = """
import resource, sys
import numpy as np
import epochplan as ep
n = 1 << 25
# An odd multiplier modulo a power of two is a bijection: the ids are distinct.
ids = np.arange(n, dtype=np.int64) * 0x9E3779B97 % (1 << 40)
ids[:] = ids  # touched: counted in the peak before the check
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
sel = ep.Selection.from_indices(ids, 1 << 40)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
assert len(sel) == n and sel[5] == ids[5]
ids[7] = ids[3]
try:
    ep.Selection.from_indices(ids, 1 << 40)
except ValueError as e:
    assert "ids[7] = " in str(e) and "appears earlier" in str(e), e
else:
    raise AssertionError("a repeated id was accepted")
print((after - before) * 1024)
"""


def test_the_duplicate_check_takes_far_less_than_a_copy() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, check=True
    )
    grown = int(out.stdout)
    # A sorted copy would add 256 MiB; the check's budget is 64 MiB (and a
    # histogram of half a MiB).
    assert grown < 100 << 20, grown
