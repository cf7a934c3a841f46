"""examples/ddp_train_tokens.py under torchrun (torch.distributed.run), gloo on
CPU: every sample once an epoch, micro-batches under the token cap, and a run
stopped on 3 ranks and resumed on 2 ends with the uninterrupted run's model."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests._support.torchrun import torchrun as run_example

pytest.importorskip("torch")

EXAMPLE = Path(__file__).parents[2] / "examples" / "ddp_train_tokens.py"
# Small sizes: 10 steps of 24 samples an epoch, startup dominates.
SIZES = ("--num-samples", "240", "--global-batch-size", "24", "--epochs", "2")
EPOCH = re.compile(
    r"epoch (\d): (\d) ranks, (\d+) steps, (\d+) of 240 samples, each exactly once: (\w+), "
    r"largest micro-batch (\d+) tokens \(cap 256\), mean token loss ([\d.]+)"
)


def torchrun(nproc: int, *args: str, cwd: Path) -> str:
    return run_example(EXAMPLE, nproc, *SIZES, *args, cwd=cwd, timeout=120)


def final_params(stdout: str) -> np.ndarray:
    (line,) = re.findall(r"final params (\S+) (\S+)", stdout)
    return np.array([float(v) for v in line])


def test_token_example_counts_each_sample_once_and_resumes_on_fewer_ranks(
    tmp_path: Path,
) -> None:
    full = torchrun(3, cwd=tmp_path)
    epochs = EPOCH.findall(full)
    assert [e[:5] for e in epochs] == [
        ("0", "3", "10", "240", "True"),
        ("1", "3", "10", "240", "True"),
    ]
    assert all(0 < int(e[5]) <= 256 for e in epochs)  # the token cap holds
    assert float(epochs[1][6]) < float(epochs[0][6]) * 0.8  # it learns
    final = final_params(full)

    # Preempted after 4 steps of epoch 0 on 3 ranks, resumed on 2: the resumed
    # epoch 0 takes its 6 remaining steps and the epoch's samples are each
    # consumed once over both runs; the model is the uninterrupted run's.
    ckpt = tmp_path / "ck.pt"
    stop = torchrun(3, "--stop-after-steps", "4", "--checkpoint", str(ckpt), cwd=tmp_path)
    assert f"saved {ckpt} after step 3" in stop and ckpt.exists()
    assert not EPOCH.search(stop)
    resumed = torchrun(2, "--resume", str(ckpt), cwd=tmp_path)
    epochs = EPOCH.findall(resumed)
    assert [e[:5] for e in epochs] == [
        ("0", "2", "6", "240", "True"),
        ("1", "2", "10", "240", "True"),
    ]
    np.testing.assert_allclose(final_params(resumed), final, rtol=0, atol=1e-10)
    assert np.abs(final).max() > 1  # the model moved: the comparison is not vacuous
