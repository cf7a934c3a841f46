"""Type aliases shared by the public API."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

#: One micro-batch: the sample ids and their loss weights (0 for fillers).
MicroBatch = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]
