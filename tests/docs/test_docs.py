"""The examples in the docstrings run and print what they show."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

MODULES = [
    "epochplan._native",
    "epochplan._split",
    "epochplan._workers",
    "epochplan.torch.rank",
    "epochplan.torch.distributed",
    "epochplan.torch.elastic",
    "epochplan.torch.dcp",
    "epochplan.torch.nodes",
    "epochplan.grain",
    "epochplan.compat._partition",
    "epochplan.compat._shuffle",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # nothing an example leaves stays behind
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
