"""examples/ddp_train.py under torchrun (torch.distributed.run), gloo on CPU."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from tests._support.torchrun import torchrun as run_example

EXAMPLE = Path(__file__).parents[2] / "examples" / "ddp_train.py"


def torchrun(nproc: int, *args: str, cwd: Path) -> str:
    return run_example(EXAMPLE, nproc, *args, cwd=cwd)


def test_ddp_example_runs_exactly_and_resumes_on_fewer_ranks(tmp_path: Path) -> None:
    full = torchrun(3, "--epochs", "2", cwd=tmp_path)
    epochs = re.findall(
        r"epoch (\d): 3 ranks, (\d+) steps, (\d+) samples, each once: (\w+), "
        r"mean step loss ([\d.]+)",
        full,
    )
    assert [e[:4] for e in epochs] == [("0", "16", "1001", "True"), ("1", "16", "1001", "True")]
    assert float(epochs[1][4]) < float(epochs[0][4]) / 10  # it learns
    final = final_params(full)
    # One rank computes the same model (up to the order of float64 sums).
    one = torchrun(1, "--epochs", "2", cwd=tmp_path)
    np.testing.assert_allclose(final_params(one), final, rtol=0, atol=1e-12)
    # Preempted after 20 steps (4 into epoch 1) on 3 ranks, resumed on 2: same model.
    ckpt = tmp_path / "ck.pt"
    stop = torchrun(3, "--stop-after-steps", "20", "--checkpoint", str(ckpt), cwd=tmp_path)
    assert "saved" in stop and ckpt.exists()
    resumed = torchrun(2, "--epochs", "2", "--resume", str(ckpt), cwd=tmp_path)
    assert re.search(r"epoch 1: 2 ranks, 12 steps, 745 samples, each once: True", resumed)
    np.testing.assert_allclose(final_params(resumed), final, rtol=0, atol=1e-12)
    assert np.abs(final).max() > 0.1  # the model moved: the comparisons are not vacuous


def final_params(stdout: str) -> np.ndarray:
    """The weights and bias the run printed, every digit."""
    (line,) = re.findall(r"final weight (.*) bias (\S+)", stdout)
    return np.array([float(v) for v in line[0].split()] + [float(line[1])])
