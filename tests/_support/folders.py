"""Each test folder's marker: a folder's conftest marks its own tests with
the folder's name, so that areas can be chosen across the tree
(``pytest -m "not frameworks"``, ``pytest -m "cli or planfile"``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

__all__ = ["FOLDERS", "folder_marker"]

#: The test folders, each a marker of the same name (registered in
#: pyproject.toml).
FOLDERS = (
    "adversarial",
    "audit",
    "bench",
    "cli",
    "compat",
    "core",
    "docs",
    "frameworks",
    "grain",
    "planfile",
    "torch",
)


def folder_marker(conftest: str) -> Callable[[list[pytest.Item]], None]:
    """The ``pytest_collection_modifyitems`` hook of the conftest at
    ``conftest``: it marks the tests below its folder (pytest calls every
    conftest's hook with the whole session's items)."""
    folder = Path(conftest).resolve().parent
    marker = getattr(pytest.mark, folder.name)

    def mark(items: list[pytest.Item]) -> None:
        for item in items:
            if item.path.is_relative_to(folder):
                item.add_marker(marker)

    return mark
