"""A plan's `micro_batches` iterator makes the next steps on the thread pool
while the caller works on one: the steps, their order and their count are
those of `step_micro_batches` at every thread count, shared between threads,
interleaved with `len`, dropped half way, and continued in a forked child."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import epochplan as ep

Step = list[tuple[list[int], list[float]]]
Batch = tuple[np.ndarray, np.ndarray]


def plain(step: list[Batch]) -> Step:
    return [(ids.tolist(), weights.tolist()) for ids, weights in step]


def plans() -> Iterator[tuple[ep.EpochPlan, dict[str, int]]]:
    lengths = np.random.default_rng(4).integers(1, 300, size=5_003).astype(np.int32)
    yield ep.EpochPlan(5_003, 97, seed=2), {"micro_batch_size": 5}
    for packing in ["sorted", "first_fit"]:
        tokens = ep.PlanSpec(5_003, 97, seed=2, tokens=ep.Tokens(lengths, packing=packing))
        yield tokens.plan(), {"max_tokens": 600}


@pytest.fixture(params=[1, 2, 7])
def threads(request: pytest.FixtureRequest) -> Iterator[int]:
    ep.set_num_threads(request.param)
    yield request.param
    ep.set_num_threads(0)


def test_every_step_in_order_at_every_thread_count(threads: int) -> None:
    for plan, caps in plans():
        for rank, world in [(0, 1), (2, 3)]:
            want = [
                plain(plan.step_micro_batches(t, rank, world, **caps))
                for t in range(plan.num_steps)
            ]
            steps = plan.micro_batches(rank, world, **caps)
            got = []
            for left in range(plan.num_steps, 0, -1):
                assert len(steps) == left  # steps made ahead still count
                got.append(plain(next(steps)))
            assert len(steps) == 0
            assert next(steps, None) is None
            assert got == want


def test_a_resumed_plan_starts_at_its_step(threads: int) -> None:
    for plan, caps in plans():
        resumed = plan.at_step(40)
        want = [plain(plan.step_micro_batches(t, 1, 2, **caps)) for t in range(40, plan.num_steps)]
        assert [plain(s) for s in resumed.micro_batches(1, 2, **caps)] == want


def test_an_iterator_shared_by_threads_gives_each_step_once() -> None:
    ep.set_num_threads(2)
    try:
        for plan, caps in plans():
            steps = plan.micro_batches(1, 4, **caps)
            taken: list[list[Step]] = [[] for _ in range(4)]

            def take(shared: Iterator[list[Batch]], mine: list[Step]) -> None:
                for step in shared:
                    mine.append(plain(step))

            workers = [threading.Thread(target=take, args=(steps, mine)) for mine in taken]
            for w in workers:
                w.start()
            for w in workers:
                w.join(timeout=120)
            got = sorted(s for mine in taken for s in mine)
            want = sorted(
                plain(plan.step_micro_batches(t, 1, 4, **caps)) for t in range(plan.num_steps)
            )
            assert got == want
    finally:
        ep.set_num_threads(0)


def test_an_iterator_dropped_with_steps_ahead() -> None:
    ep.set_num_threads(2)
    try:
        for plan, caps in plans():
            for _ in range(20):
                steps = plan.micro_batches(0, 2, **caps)
                next(steps)
                del steps  # its steps ahead finish on the pool, unread
        plan, caps = next(plans())
        assert len(list(plan.micro_batches(0, 2, **caps))) == plan.num_steps
    finally:
        ep.set_num_threads(0)


FORKED = textwrap.dedent(
    """
    import os

    import numpy as np

    import epochplan as ep

    ep.set_num_threads(2)
    # Steps slow to deal and quick to return (one micro-batch a rank): the
    # last ones are still in the making when the process forks.
    lengths = np.random.default_rng(4).integers(1, 300, size=2_000_003).astype(np.int32)
    plan = ep.PlanSpec(2_000_003, 300_000, seed=2, tokens=ep.Tokens(lengths)).plan()
    want = [
        [ids.tolist() for ids, _ in plan.step_micro_batches(t, 1, 3, max_tokens=2**40)]
        for t in range(plan.num_steps)
    ]
    steps = plan.micro_batches(1, 3, max_tokens=2**40)
    first = [[ids.tolist() for ids, _ in next(steps)]]  # the next four are ahead
    pid = os.fork()
    rest = [[ids.tolist() for ids, _ in step] for step in steps]
    if pid == 0:
        os._exit(0 if first + rest == want else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    assert first + rest == want
    print("ok")
    """
)


def test_a_forked_child_makes_the_steps_ahead_itself(tmp_path: Path) -> None:
    script = tmp_path / "forked.py"
    script.write_text(FORKED)
    try:
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=150
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hang: no result after 150 s\n{e.stderr!r}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok"]
