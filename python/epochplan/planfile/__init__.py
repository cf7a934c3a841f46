"""Offline plans: every rank's sample ids of some epochs, written once as files.

A plan directory holds a JSON manifest and, per epoch, one int64 ``.npy`` file
per rank with exactly ``EpochPlan(...).rank_indices(rank, world_size)``::

    DIR/manifest.json
    DIR/epoch-0000/rank-00000.npy
    DIR/epoch-0000/rank-00001.npy
    ...

Files are written in Rust in bounded memory (independent of the number of
samples, except for ``kind="uniform"``, whose whole permutation is held in
memory: about 16 bytes per sample while it is built), checksummed with BLAKE3
as they are written, and published atomically: everything goes into a hidden
sibling directory, the manifest last, which is then renamed into place. An
interrupted write never leaves a directory at ``DIR``.

The modules: :mod:`~epochplan.planfile.manifest` (the format, parsed and
checked once), :mod:`~epochplan.planfile.write`, :mod:`~epochplan.planfile.publish`
(atomic publication), :mod:`~epochplan.planfile.reader` and
:mod:`~epochplan.planfile.verify`; :mod:`~epochplan.planfile.parts` for
plans written in parts by several processes and merged;
:mod:`~epochplan.planfile.tokens` for
token plans and :mod:`~epochplan.planfile.space` for plans over an index
space (a ``Selection`` or ``Mixture``, stored beside the rank files).

Examples:
    >>> from epochplan import PlanSpec
    >>> from epochplan.planfile import write_plan, open_plan
    >>> spec = PlanSpec(10**6, 4096)
    >>> d = write_plan("plan", spec, 8, epochs=range(2))  # doctest: +SKIP
    >>> ids = open_plan("plan").rank_ids(epoch=1, rank=3)  # doctest: +SKIP
"""

from __future__ import annotations

from epochplan._native import PlanSpec
from epochplan.planfile._checks import Progress
from epochplan.planfile.errors import PlanError
from epochplan.planfile.manifest import (
    MANIFEST,
    MAX_FILES,
    PLAN_FILE_FORMAT,
    PLAN_FILE_VERSION,
    FileEntry,
    Manifest,
    manifest_checksum,
    rank_file_name,
)
from epochplan.planfile.parts import Part, merge_plan, verify_part, write_plan_part
from epochplan.planfile.reader import PlanDirectory, RankFile, open_plan
from epochplan.planfile.verify import verify_plan
from epochplan.planfile.write import write_plan

__all__ = [
    "MANIFEST",
    "MAX_FILES",
    "PLAN_FILE_FORMAT",
    "PLAN_FILE_VERSION",
    "FileEntry",
    "Manifest",
    "Part",
    "PlanDirectory",
    "PlanError",
    "PlanSpec",
    "Progress",
    "RankFile",
    "manifest_checksum",
    "merge_plan",
    "open_plan",
    "rank_file_name",
    "verify_part",
    "verify_plan",
    "write_plan",
    "write_plan_part",
]
