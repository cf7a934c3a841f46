"""The core's token plan writer and verifier: every file equal to what the
in-memory plan (``EpochPlan`` with lengths) deals, over sizes, world sizes,
caps, dtypes and cost models; and peak memory that does not grow with the
number of samples."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import epochplan as ep
from epochplan.planfile import PlanError, verify_plan, write_plan

CASES = [
    # n, g, w, micro_batch_size, max_tokens, loss tokens, cost, dtype
    (0, 4, 2, None, 64, False, "tokens", np.int32),
    (1, 1, 3, 1, None, False, "tokens", np.int64),
    (977, 16, 3, None, 64, False, "tokens", np.int32),
    (5000, 64, 7, 4, None, True, "tokens", np.uint16),
    (3000, 33, 40, 2, 50, True, (1.0, 0.01), np.int16),
    (20000, 256, 130, 3, 40, False, "tokens", np.uint8),
    (9000, 1000, 8, None, 200, True, (0.5, 0.0), np.int64),
]


@pytest.mark.parametrize(("n", "g", "w", "b", "m", "loss", "cost", "dtype"), CASES)
def test_every_file_of_the_native_writer_is_what_the_in_memory_plan_deals(
    tmp_path: Path,
    n: int,
    g: int,
    w: int,
    b: int | None,
    m: int | None,
    loss: bool,
    cost: Any,
    dtype: Any,
) -> None:
    rng = np.random.default_rng(n + w)
    lengths = rng.integers(0, 30, n).astype(dtype)
    loss_tokens = (lengths // rng.integers(1, 4, n)).astype(np.int32) if loss else None
    np.save(tmp_path / "lengths.npy", lengths)
    if loss_tokens is not None:
        np.save(tmp_path / "loss.npy", loss_tokens)
    epochs = (0, 3)
    d = write_plan(
        tmp_path / "p",
        ep.PlanSpec(
            n,
            g,
            seed=5,
            tokens=ep.Tokens(
                np.load(tmp_path / "lengths.npy", mmap_mode="r"),
                None if loss_tokens is None else np.load(tmp_path / "loss.npy", mmap_mode="r"),
                cost=cost,
            ),
        ),
        w,
        epochs=epochs,
        micro_batch_size=b,
        max_tokens=m,
    )
    assert verify_plan(d.path) is True
    all_lengths = lengths.astype(np.int64)
    all_loss = all_lengths if loss_tokens is None else loss_tokens.astype(np.int64)
    for epoch in epochs:
        plan = ep.EpochPlan(
            n, g, seed=5, epoch=epoch, tokens=ep.Tokens(lengths, loss_tokens, cost=cost)
        )
        e = d.path / f"epoch-{epoch:04d}"
        table = np.load(e / "steps.npy").reshape(-1, 4)
        assert len(table) == plan.num_steps
        for t in range(plan.num_steps):
            step = plan.step_indices(t, 0, 1)
            filler = int(step[np.argmin(all_lengths[step])])
            want = [plan.step_tokens(t), plan.num_micro_batches(t, w, b, max_tokens=m)]
            assert table[t].tolist() == [*want, filler, int(all_lengths[filler])]
        for r in range(w):
            shares = [plan.step_indices(t, r, w) for t in range(plan.num_steps)]
            ids = np.concatenate([np.zeros(0, np.int64), *shares])
            offsets = np.cumsum([0] + [len(s) for s in shares])
            assert np.load(e / f"rank-{r:05d}.npy").tolist() == ids.tolist()
            assert np.load(e / f"rank-{r:05d}.offsets.npy").tolist() == offsets.tolist()
            stored = np.load(e / f"rank-{r:05d}.lengths.npy")
            # The source's own type up to 32 bits (plan-file version 7).
            want_dtype = np.dtype(dtype) if np.dtype(dtype).itemsize <= 4 else np.int64
            assert stored.dtype == want_dtype and stored.tolist() == all_lengths[ids].tolist()
            loss_file = e / f"rank-{r:05d}.loss_tokens.npy"
            assert loss_file.exists() == loss
            if loss:
                stored_loss = np.load(loss_file)
                assert stored_loss.dtype == np.int32
                assert stored_loss.tolist() == all_loss[ids].tolist()


def test_verify_refuses_a_token_file_whose_bytes_changed(tmp_path: Path) -> None:
    lengths = np.arange(1, 201, dtype=np.int32)
    d = write_plan(
        tmp_path / "p", ep.PlanSpec(200, 20, tokens=ep.Tokens(lengths)), 3, max_tokens=400
    )
    f = d.path / "epoch-0000/rank-00002.lengths.npy"
    data = bytearray(f.read_bytes())
    data[-1] ^= 1
    f.write_bytes(bytes(data))
    with pytest.raises(PlanError, match=r"rank-00002\.lengths\.npy: checksum mismatch"):
        verify_plan(d.path)


_PEAK = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    from epochplan import PlanSpec, Tokens
    from epochplan.planfile import verify_plan, write_plan
    n, where = int(sys.argv[1]), sys.argv[2]
    rng = np.random.default_rng(0)
    out = np.lib.format.open_memmap(f"{where}/l.npy", mode="w+", dtype=np.int16, shape=(n,))
    for a in range(0, n, 1 << 20):
        k = min(n, a + (1 << 20)) - a
        out[a : a + k] = np.clip(rng.lognormal(5.0, 1.0, k), 1, 4000)
    out.flush()
    del out
    spec = PlanSpec(n, 1024, tokens=Tokens(np.load(f"{where}/l.npy", mmap_mode="r")))
    write_plan(f"{where}/p", spec, 8, max_tokens=4096)
    assert verify_plan(f"{where}/p") is True
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    """
)


def _peak_rss(tmp_path: Path, n: int) -> int:
    where = tmp_path / str(n)
    where.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, str(n), str(where)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def test_peak_memory_of_writing_and_verifying_does_not_grow_with_the_plan(
    tmp_path: Path,
) -> None:
    # 3x the samples: a writer holding per-sample arrays (the Python one
    # reached 2.0 GB at 10^8 samples, about 15 bytes a sample beyond the
    # mapped lengths) would add over 100 MB; the lengths' mapped pages add
    # 2 bytes a sample (16 MB).
    small = _peak_rss(tmp_path, 4_000_000)
    large = _peak_rss(tmp_path, 12_000_000)
    assert large - small < 48 * 2**20, (small, large)
