"""torchrun's elastic agent keeps the guarantees: two agents on one c10d
rendezvous (`--nnodes=1:2`) train; after step 8 one agent and its worker are
killed (SIGKILL to its whole process tree); the survivor re-rendezvouses at
world size 1, reloads the last checkpoint and goes on with step 9. Every
sample of both epochs is trained exactly once, every step on the samples of
the one-process plan, and the parameters end equal to a one-process run
(the worker is tests/frameworks/_elastic_worker.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._support.torchrun import descendants, torchrun
from tests.frameworks._elastic_worker import EPOCHS, PAUSE_AT, N

WORKER = Path(__file__).with_name("_elastic_worker.py")
TIMEOUT = 240.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def kill_tree(proc: subprocess.Popen[str]) -> None:
    for pid in [*descendants(proc.pid), proc.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def wait_for(paths: list[Path], procs: list[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not all(p.exists() for p in paths):
        for proc in procs:
            if proc.poll() is not None:
                pytest.fail(f"an agent ended early: {proc.communicate()[1][-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {paths}")
        time.sleep(0.1)


def store_host(port: int, procs: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    """The agent whose process listens on `port`: it hosts the rendezvous
    store (the agents race for it)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        listening = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(OSError):
                for line in Path(table).read_text().splitlines()[1:]:
                    fields = line.split()
                    if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # LISTEN
                        listening.add(f"socket:[{fields[9]}]")
        for proc in procs:
            with contextlib.suppress(OSError):
                for fd in Path(f"/proc/{proc.pid}/fd").iterdir():
                    with contextlib.suppress(OSError):
                        if os.readlink(fd) in listening:
                            return proc
            if proc.poll() is not None:
                pytest.fail(f"an agent ended early: {proc.communicate()[1][-3000:]}")
        time.sleep(0.1)
    pytest.fail(f"no agent listens on port {port}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("elastic")
    ref = out / "ref"
    ref.mkdir()
    torchrun(WORKER, 1, str(ref), cwd=ref)
    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1:2", "--nproc-per-node=1"]
    cmd += ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=elastic-test"]
    # Both agents start together and the first rendezvous completes when both
    # have joined (a node joining a running job fails inside torchrun 2.15);
    # the dead agent is dropped after 2 missed keep-alives.
    cmd += ["--rdzv-conf=last_call_timeout=8,keep_alive_interval=1,keep_alive_max_attempt=2"]
    cmd += ["--max-restarts=3", "--monitor-interval=0.5"]
    cmd += [str(WORKER), str(out)]
    agents: list[subprocess.Popen[str]] = []
    try:
        for _ in range(2):
            agents.append(
                subprocess.Popen(
                    cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=out
                )
            )
        # The agent hosting the rendezvous store survives; the other is killed.
        survivor = store_host(port, agents)
        victim = agents[1] if survivor is agents[0] else agents[0]
        wait_for([out / "paused-0", out / "paused-1"], agents)
        kill_tree(victim)
        victim.communicate()
        (out / "go").touch()
        try:
            _, stderr = survivor.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail("the surviving agent did not finish")
        assert survivor.returncode == 0, stderr[-3000:]
    finally:
        for agent in agents:
            if agent.poll() is None:
                kill_tree(agent)
                agent.communicate()
    return {
        "elastic": json.loads((out / "result.json").read_text()),
        "ref": json.loads((ref / "result.json").read_text()),
    }


def test_the_survivor_goes_on_alone_with_the_next_step(runs: dict[str, Any]) -> None:
    worlds = [world for _, _, world, *_ in runs["elastic"]["history"]]
    assert worlds[:PAUSE_AT] == [2] * PAUSE_AT
    assert set(worlds[PAUSE_AT:]) == {1}


def test_every_sample_of_both_epochs_once_on_the_steps_of_one_process(
    runs: dict[str, Any],
) -> None:
    steps = [(epoch, step, ids) for epoch, step, _, *ids in runs["elastic"]["history"]]
    reference = [(epoch, step, ids) for epoch, step, _, *ids in runs["ref"]["history"]]
    assert steps == reference  # each step once, in order, with the same samples
    for epoch in range(EPOCHS):
        assert Counter(i for e, _, ids in steps if e == epoch for i in ids) == Counter(range(N))


def test_the_parameters_end_equal_to_one_process(runs: dict[str, Any]) -> None:
    np.testing.assert_allclose(runs["elastic"]["params"], runs["ref"]["params"], rtol=0, atol=1e-12)
