"""Shared fixtures."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import epochplan as ep
from epochplan.planfile import write_plan

# Streaming's own tests run against ours only on its sdist, which is not in
# the repository: CI downloads it and names it here (see .ci/run).
collect_ignore = [] if os.environ.get("EPOCHPLAN_STREAMING_SDIST") else ["test_streaming_suite.py"]
# Ray Train is not in the test extra (its install and a local Ray take
# minutes of CI's time): its tests run where the `ray` extra is installed.
if importlib.util.find_spec("ray") is None:
    collect_ignore.append("test_frameworks_ray.py")


@pytest.fixture
def restore_threads() -> Iterator[None]:
    """Restores the default thread count after a test that changes it."""
    yield
    ep.set_num_threads(0)


@pytest.fixture
def plan_dir(tmp_path: Path) -> Path:
    """A plan of 40,000 samples in steps of 1,000 on 4 ranks, epochs 0 and 1."""
    out = tmp_path / "plan"
    write_plan(out, 40_000, 1000, 4, epochs=(0, 1))
    return out


def _skipped(config: pytest.Config) -> list[str]:
    """The tests skipped so far, when EPOCHPLAN_NO_SKIPS is set (else none)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if not os.environ.get("EPOCHPLAN_NO_SKIPS") or reporter is None:
        return []
    return sorted({r.nodeid or str(r.fspath) for r in reporter.stats.get("skipped", [])})


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With EPOCHPLAN_NO_SKIPS set (CI), a skipped test fails the run: the
    comparisons with mosaicml-streaming and the torch tests skip when their
    package is missing, which must not pass for a green run there."""
    if exitstatus == 0 and _skipped(session.config):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = _skipped(terminalreporter.config)
    if skipped:
        terminalreporter.write_line(
            f"EPOCHPLAN_NO_SKIPS is set and {len(skipped)} tests were skipped: "
            + ", ".join(skipped[:5])
        )
