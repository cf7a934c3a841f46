"""The ``epochplan`` command line: one module per command (``plan``,
``verify``, ``permute``, ``bench``), the parser's argument types in
:mod:`~epochplan.cli.arguments` and the entry point in :mod:`~epochplan.cli.main`."""

from __future__ import annotations

from epochplan.cli.main import main

__all__ = ["main"]
