"""The epochplan command."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``epochplan`` console script."""
    raise SystemExit("not implemented yet")
