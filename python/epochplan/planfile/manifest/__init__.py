"""A plan directory's manifest: :mod:`.document` (the plan, its files and
their checksums, sealed) and :mod:`.tokens` (a token plan's part of it)."""

from epochplan.planfile.manifest.document import (
    MANIFEST,
    MAX_FILES,
    PART_FILE,
    PART_FORMAT,
    PLAN_FILE_FORMAT,
    PLAN_FILE_VERSION,
    FileEntry,
    Manifest,
    files_bytes,
    manifest_checksum,
    part_document,
    part_places,
    rank_file_name,
    read_json,
)

__all__ = [
    "MANIFEST",
    "MAX_FILES",
    "PART_FILE",
    "PART_FORMAT",
    "PLAN_FILE_FORMAT",
    "PLAN_FILE_VERSION",
    "FileEntry",
    "Manifest",
    "files_bytes",
    "manifest_checksum",
    "part_document",
    "part_places",
    "rank_file_name",
    "read_json",
]
