"""Runs MosaicML Streaming's own partition and shuffle tests against ours.

Usage::

    python tests/compat/streaming_suite.py SDIST_DIR [PYTEST_ARGS...]

``SDIST_DIR`` is an unpacked mosaicml-streaming 0.13.0 source distribution
(``pip download --no-deps --no-binary :all: mosaicml-streaming==0.13.0``,
then ``tar xzf``). Its ``tests/test_partition.py`` and ``tests/test_shuffle.py``
are copied to a temporary directory and run by pytest, in this process, with
``streaming.base.partition.get_partitions``, ``streaming.base.shuffle.get_shuffle``
and the per-algorithm ``get_shuffle_<algo>`` replaced by
``epochplan.compat.streaming``'s: the tests import those names after the swap,
so every call they make is ours. The rest of what they import (``World``)
is Streaming's, loaded from the sdist by path: ``streaming``'s package
``__init__`` (cloud clients, torch datasets, ...) never runs. The exit status
is pytest's, and non-zero on a skip too.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import shutil
import sys
import tempfile
import types
from pathlib import Path

import pytest

from epochplan.compat import streaming as ours

#: Streaming's test files run here, from the sdist's ``tests/``.
TEST_FILES = ("test_partition.py", "test_shuffle.py")
#: The algorithms that have a ``get_shuffle_<algo>`` of their own.
SHUFFLE_ALGOS = ("naive", "py1s", "py2s", "py1br", "py1e")


def _stub_package(name: str, where: Path) -> None:
    """Registers an empty package ``name`` whose submodules load from ``where``."""
    stub = types.ModuleType(name)
    stub.__path__ = [str(where)]
    stub.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    stub.__spec__.submodule_search_locations = [str(where)]
    sys.modules[name] = stub


def swap_in(source: Path) -> None:
    """Loads Streaming's ``base.partition`` and ``base.shuffle`` from ``source``
    (the sdist's ``streaming`` directory) and puts our functions in their place."""
    for name in [m for m in sys.modules if m == "streaming" or m.startswith("streaming.")]:
        del sys.modules[name]
    _stub_package("streaming", source)
    _stub_package("streaming.base", source / "base")
    partition = importlib.import_module("streaming.base.partition")
    partition.get_partitions = ours.get_partitions  # type: ignore[attr-defined]
    shuffle = importlib.import_module("streaming.base.shuffle")
    shuffle.get_shuffle = ours.get_shuffle  # type: ignore[attr-defined]
    for algo in SHUFFLE_ALGOS:
        mine = functools.partial(ours.get_shuffle, algo)
        setattr(shuffle, f"get_shuffle_{algo}", mine)
        setattr(
            importlib.import_module(f"streaming.base.shuffle.{algo}"), f"get_shuffle_{algo}", mine
        )


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 2
    sdist = Path(argv[0]).resolve()
    missing = [f for f in TEST_FILES if not (sdist / "tests" / f).is_file()]
    if missing or not (sdist / "streaming" / "base").is_dir():
        print(
            f"{sdist} is not an unpacked mosaicml-streaming sdist (no tests/{', '.join(missing)})"
        )
        return 2
    swap_in(sdist / "streaming")
    skips = _Skips()
    with tempfile.TemporaryDirectory(prefix="streaming-suite-") as tmp:
        # Streaming's own pytest configuration (coverage, plugins) is not wanted:
        # an empty one in the temporary directory makes that directory the root.
        (Path(tmp) / "pytest.ini").write_text("[pytest]\n")
        for name in TEST_FILES:
            shutil.copy(sdist / "tests" / name, tmp)
        args = ["-c", str(Path(tmp) / "pytest.ini"), "--rootdir", tmp, "-p", "no:cacheprovider"]
        args += ["-q", "--disable-warnings", *argv[1:], *(str(Path(tmp) / f) for f in TEST_FILES)]
        status = int(pytest.main(args, plugins=[skips]))
    if status == 0 and skips.count:
        print(f"{skips.count} tests were skipped: every test must run")
        return 1
    return status


class _Skips:
    """Counts skipped tests: a skip is a failure here, as in CI."""

    def __init__(self) -> None:
        self.count = 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.count += report.skipped


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
