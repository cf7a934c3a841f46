"""The library after fork(): DataLoader workers (fork and spawn) compute the
same orders as the parent, and a fork after a large multi-threaded call does
not deadlock. Each scenario runs in a fresh interpreter with a timeout, so a
hang fails the test instead of hanging the suite."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

TIMEOUT = 150

WORKERS = textwrap.dedent(
    """
    import hashlib
    import sys

    import numpy as np
    from torch.utils.data import DataLoader, Dataset

    import epochplan as ep


    class Orders(Dataset):
        # Holds a Permutation, so spawned workers receive it pickled.
        def __init__(self, perm):
            self.perm = perm

        def __len__(self):
            return 6

        def __getitem__(self, i):
            ids = np.concatenate([
                ep.permutation(200_003, seed=i, kind="uniform"),  # parallel shuffle
                self.perm[i::3],  # a parallel range (> 65,536 positions)
                self.perm.take(np.arange(i, 10**6, 7)),
            ])
            return i, hashlib.sha256(ids.tobytes()).hexdigest()


    if __name__ == "__main__":
        context = sys.argv[1]
        ep.set_num_threads(2)
        # A large multi-threaded call: the thread pool is running when the
        # workers fork.
        big = ep.permutation(5 * 10**6, kind="uniform")
        assert len(big) == 5 * 10**6
        perm = ep.Permutation(10**6, seed=9, epoch=2)
        want = dict(Orders(perm)[i] for i in range(6))
        loader = DataLoader(
            Orders(perm), batch_size=None, num_workers=2, multiprocessing_context=context
        )
        # Forked workers start again every epoch: twice. Spawning is slow: once.
        for epoch in range(2 if context == "fork" else 1):
            got = {int(i): h for i, h in loader}
            assert got == want, (context, epoch)
        print("ok", context)
    """
)

PLAIN_FORK = textwrap.dedent(
    """
    import multiprocessing as mp

    import numpy as np

    import epochplan as ep


    def child(queue):
        queue.put(ep.permutation(10**6, seed=1, kind="uniform")[:5].tolist())


    if __name__ == "__main__":
        ep.set_num_threads(2)
        ep.permutation(5 * 10**6, kind="uniform")
        want = ep.permutation(10**6, seed=1, kind="uniform")[:5].tolist()
        ctx = mp.get_context("fork")
        queue = ctx.Queue()
        procs = [ctx.Process(target=child, args=(queue,)) for _ in range(2)]
        for p in procs:
            p.start()
        results = [queue.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        assert results == [want, want]
        print("ok fork")
    """
)


def run_script(tmp_path: Path, source: str, *args: str) -> str:
    script = tmp_path / "scenario.py"
    script.write_text(source)
    try:
        done = subprocess.run(
            [sys.executable, str(script), *args],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            cwd=tmp_path,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"deadlock: no result after {TIMEOUT}s\n{e.stderr!r}")
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_compute_the_parents_orders(tmp_path: Path, context: str) -> None:
    assert run_script(tmp_path, WORKERS, context).split() == ["ok", context]


def test_plain_fork_after_a_multithreaded_call(tmp_path: Path) -> None:
    assert run_script(tmp_path, PLAIN_FORK).split() == ["ok", "fork"]
