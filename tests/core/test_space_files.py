"""Space files as users can get them wrong: FIFOs and devices refused before
they are opened for reading (nothing blocks, nothing is read without end),
a size cap, and one-line errors naming the file, from the library and from
the command line (exit status 2, as for every argument)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import epochplan as ep
from epochplan._space_spec import MAX_SPEC_BYTES


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    # A timeout: a FIFO that blocked the read would otherwise hang the test.
    return subprocess.run(
        [sys.executable, "-m", "epochplan.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_line_usage_error(res: subprocess.CompletedProcess[str], *words: str) -> None:
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    for word in words:
        assert word in res.stderr, res.stderr


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def test_a_fifo_as_the_spec_is_refused_without_blocking(fifo: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot read the space spec .*fifo.*not a regular file"):
        ep.load_space(fifo)
    one_line_usage_error(cli("plan", "--space", str(fifo)), "--space", "not a regular file")


def test_a_fifo_named_by_the_spec_is_refused_without_blocking(tmp_path: Path, fifo: Path) -> None:
    spec = tmp_path / "space.json"
    spec.write_text(json.dumps({"indices": "fifo", "num_samples": 10}))
    with pytest.raises(ValueError, match=r"spec\['indices'\]: cannot load .*not a regular file"):
        ep.load_space(spec)


def test_a_device_is_not_read_without_end() -> None:
    with pytest.raises(ValueError, match="not a regular file"):
        ep.load_space("/dev/zero")
    one_line_usage_error(cli("plan", "--space", "/dev/zero"), "/dev/zero", "not a regular file")


def test_a_spec_over_the_size_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    spec = tmp_path / "big.json"
    with open(spec, "wb") as f:
        f.truncate(MAX_SPEC_BYTES + 1)  # sparse: nothing is written
    with pytest.raises(ValueError, match="larger than"):
        ep.load_space(spec)


def test_deep_json_is_one_line_not_a_recursion_error(tmp_path: Path) -> None:
    spec = tmp_path / "deep.json"
    spec.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=r"deep.json.* nested too deeply"):
        ep.load_space(spec)
    one_line_usage_error(cli("plan", "--space", str(spec)), "nested too deeply")


def test_text_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    spec = tmp_path / "latin1.json"
    spec.write_bytes(b'{"ranges": [[0, 5]], "num_samples": 10, "x\xe9": 1}')
    with pytest.raises(ValueError, match=r"latin1.json' is not UTF-8 text"):
        ep.load_space(spec)
    one_line_usage_error(cli("plan", "--space", str(spec)), "latin1.json", "not UTF-8")


def test_a_missing_file_is_a_usage_error_for_every_file_flag(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.npy")
    one_line_usage_error(cli("plan", "--space", missing), "--space", "missing.npy")
    res = cli("plan", "-n", "100", "--lengths", missing, "--max-tokens", "64")
    one_line_usage_error(res, "--lengths", "missing.npy", "No such file")
    lengths = tmp_path / "lengths.npy"
    np.save(lengths, np.ones(100, dtype=np.int32))
    res = cli("plan", "-n", "100", "--lengths", str(lengths), "--loss-tokens", missing,
              "--max-tokens", "64")  # fmt: skip
    one_line_usage_error(res, "--loss-tokens", "missing.npy")
    not_npy = tmp_path / "text.npy"
    not_npy.write_text("hello")
    res = cli("plan", "-n", "100", "--lengths", str(not_npy), "--max-tokens", "64")
    one_line_usage_error(res, "--lengths", "not a .npy array")


def test_whole_numbers_with_a_decimal_point_are_counts() -> None:
    res = cli("plan", "-n", "1.5e4", "-g", "2.5e2", "-w", "2", "--quiet")
    assert res.returncode == 0, res.stderr
    one_line_usage_error(cli("plan", "-n", "1.25e1"), "expected a whole number")
