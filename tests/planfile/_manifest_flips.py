"""The every-byte check of a plan manifest's authentication, shared by the
plan-file tests of each plan version."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from epochplan.planfile import PlanError
from epochplan.planfile.manifest import MANIFEST


def assert_every_manifest_byte_refused(
    out: Path, readers: Mapping[str, Callable[[], object]]
) -> None:
    """One bit flipped at each byte of `out`'s manifest: every reader refuses
    every flip with a PlanError naming the manifest; restored, all read."""
    manifest = out / MANIFEST
    original = manifest.read_bytes()
    for i in range(len(original)):
        flipped = bytearray(original)
        flipped[i] ^= 0x01
        manifest.write_bytes(bytes(flipped))
        for name, read in readers.items():
            with pytest.raises(PlanError, match=r"manifest\.json") as caught:
                read()
            assert issubclass(caught.type, PlanError), (name, i)
    manifest.write_bytes(original)
    for read in readers.values():
        read()
