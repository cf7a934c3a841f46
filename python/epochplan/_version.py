"""The package's version, as its installed metadata records it (one source:
the Cargo workspace's version, which maturin writes into the metadata)."""

from __future__ import annotations

from importlib.metadata import version

__version__ = version("epochplan")
