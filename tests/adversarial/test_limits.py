"""Resource limits: no thread to start, address-space limits from none to
plenty, out of memory on copies and micro-batches, and many threads under a
limit. Each call returns or raises a Python exception (never an abort), and
files written are complete or absent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_no_thread_to_start_is_a_runtime_error(tmp_path: Path) -> None:
    # A stack too large to map makes every thread start fail, as a process
    # thread limit does: calls that need a thread raise RuntimeError (not a
    # Rust panic, which no `except Exception` catches), the others run on the
    # calling thread, and a plan write leaves nothing behind.
    script = f"""
import numpy as np
import epochplan as ep
from epochplan import planfile
from epochplan.compat import streaming
calls = {{
    "cipher": lambda: ep.Permutation(10**6)[:],
    "rank_indices": lambda: ep.EpochPlan(10**6, 64).rank_indices(0, 2),
    "partitions": lambda: streaming.get_partitions("orig", 10**6, 2, 2, 2, 2, 8),
    "uniform": lambda: ep.permutation(10**6),
    "py1e": lambda: streaming.get_shuffle("py1e", np.full(100, 10**4), 2, 0, 0, 1 << 18),
    "write_plan": lambda: planfile.write_plan(
        {str(tmp_path / "plan")!r}, ep.PlanSpec(10**5, 64), 2
    ),
}}
for name, call in calls.items():
    try:
        call()
        print(name, "returned")
    except Exception as e:
        print(name, type(e).__name__, e)
"""
    env = {**os.environ, "RUST_MIN_STACK": str(2**40), "RUST_BACKTRACE": "0"}
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr
    lines = dict(line.split(" ", 1) for line in res.stdout.splitlines())
    for name in ("cipher", "rank_indices", "partitions"):
        assert lines[name] == "returned"
    for name in ("uniform", "py1e"):
        assert lines[name].startswith("RuntimeError cannot start a worker thread"), lines[name]
    assert lines["write_plan"].startswith("RuntimeError cannot start a plan file thread")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "call",
    [
        *["permutation", "uniform", "rank_indices", "partitions", "partition_part"],
        *["naive", "py1s", "py2s", "py1br", "py1e", "py1e_one_block", "write_plan"],
        "micro_batches",  # steps made ahead on the pool's threads
    ],
)
def test_no_memory_limit_crashes_a_call(call: str, tmp_path: Path) -> None:
    # Under address-space limits from none to plenty above what the call
    # needs, each call returns or raises; a small allocation failing after
    # the output fitted (a thread's malloc arena, a sort bucket) would
    # abort the process instead. Files are complete or absent.
    script = f"""
import os, resource, shutil
from collections import Counter
import numpy as np, epochplan as ep
from epochplan import planfile
from epochplan.compat import streaming
shards = np.full(200, 10**4)  # 2 * 10**6 samples, a 16 MB output
out = {str(tmp_path / "plan")!r}
lengths = np.random.default_rng(0).integers(1, 2000, size=2 * 10**6).astype(np.int32)
tokens = ep.PlanSpec(2 * 10**6, 2**17, tokens=ep.Tokens(lengths)).plan()
plain = ep.EpochPlan(2 * 10**6, 2**17)
calls = {{
    "permutation": lambda: ep.Permutation(2 * 10**6)[:],
    "uniform": lambda: ep.permutation(2 * 10**6),
    "rank_indices": lambda: ep.EpochPlan(4 * 10**6, 64).rank_indices(0, 2),
    "partitions": lambda: streaming.get_partitions("orig", 2 * 10**6, 2, 2, 2, 2, 8),
    "partition_part": lambda: streaming.get_partition_part(
        "orig", 4 * 10**6, 2, 2, 2, 2, 8, node=0, rank=0
    ),
    "py1e_one_block": lambda: streaming.get_shuffle("py1e", shards, 1, 0, 0, 10**9),
    "write_plan": lambda: planfile.write_plan(out, ep.PlanSpec(2 * 10**6, 64), 2),
    "micro_batches": lambda: (
        [len(s) for s in tokens.micro_batches(1, 3, max_tokens=8192)],
        [len(s) for s in plain.micro_batches(1, 3, 64)],
    ),
}}
algo = {call!r}
call = calls.get(algo) or (lambda: streaming.get_shuffle(algo, shards, 2, 0, 0, 1 << 18))
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
outcomes = Counter()
for extra_mb in range(0, 400, 5):
    with open("/proc/self/status") as f:
        size = next(int(l.split()[1]) for l in f if l.startswith("VmSize:")) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size + (extra_mb << 20), hard))
    try:
        call()
        outcomes["returned"] += 1
    except (MemoryError, OverflowError, RuntimeError) as e:
        outcomes[type(e).__name__] += 1
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    if algo == "write_plan" and os.path.exists(out):
        planfile.verify_plan(out)  # raises unless the plan is whole
        shutil.rmtree(out)
print(dict(outcomes))
"""
    # Two threads on any machine: the room a call needs grows with the
    # threads, and the sweep must reach it.
    env = {**os.environ, "EPOCHPLAN_NUM_THREADS": "2"}
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600
    )
    assert res.returncode == 0, res.stderr[-2000:]
    outcomes = eval(res.stdout)
    # The sweep spans the call's need: it failed under the tight limits and
    # returned under the loose ones.
    assert outcomes.get("returned", 0) > 0 and len(outcomes) > 1, outcomes


@pytest.mark.parametrize(
    "call", ["take", "get_shuffle", "step_micro_batches", "step_micro_batches_in_python"]
)
def test_out_of_memory_is_an_exception(call: str) -> None:
    # Under an address-space limit (as cluster schedulers set), copies of
    # inputs and the many micro-batches of a step fail with an exception;
    # Rust's default on a failed allocation is to abort the process, and
    # numpy's array creation crashes when Python's memory runs out.
    script = f"""
import resource, numpy as np, epochplan as ep
from epochplan.compat import streaming
def limit(extra_mb):
    with open("/proc/self/status") as f:
        size = next(int(l.split()[1]) for l in f if l.startswith("VmSize:")) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size + (extra_mb << 20),) * 2)
call = {call!r}
if call.startswith("step_micro_batches"):
    plan = ep.EpochPlan(10**7, 10**7, kind="identity")
    # 800 MB: the step's ids and its list fit, its 10**7 micro-batches do
    # not. 2500 MB: they fit (1.2 GB), their Python objects (5 GB) do not.
    limit(800 if call == "step_micro_batches" else 2500)
    f = lambda: plan.step_micro_batches(0, 0, 1, 1)
else:
    a = np.zeros(5 * 10**7, dtype=np.int64)
    limit(100)  # the 400 MB input is there, its copy does not fit
    if call == "take":
        f = lambda: ep.Permutation(10).take(a)
    else:
        f = lambda: streaming.get_shuffle("py1s", a, 1, 0, 0, 1 << 18)
try:
    f()
    print("returned")
except Exception as e:
    print(type(e).__name__, e)
"""
    env = {**os.environ, "EPOCHPLAN_NUM_THREADS": "1"}
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    want = {
        "take": "OverflowError cannot allocate positions",
        "get_shuffle": "MemoryError cannot allocate shard_sizes",
        "step_micro_batches": "OverflowError cannot allocate a micro-batch",
        "step_micro_batches_in_python": "OverflowError cannot allocate the step's 10000000",
    }[call]
    assert res.stdout.startswith(want), res.stdout


def test_small_calls_on_many_threads_fit_an_address_space_limit() -> None:
    # A node of 128 cores under `ulimit -v` (as schedulers set): a call counts
    # the room of the threads yet to start that it runs on, which its size
    # caps (10**6 ids are 16 pieces of work), not of the whole pool; a call
    # that cannot fit says how many threads it counted and what lowers them.
    script = """
import resource, sys, epochplan as ep
with open("/proc/self/status") as f:
    size = next(int(l.split()[1]) for l in f if l.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (int(sys.argv[1]) << 20),) * 2)
if sys.argv[2] == "small":
    print(len(ep.permutation(10**6)), len(ep.Permutation(10**6)[:]))
else:
    try:
        ep.Permutation(10**7)[:]
    except OverflowError as e:
        print(e)
"""
    env = {**os.environ, "EPOCHPLAN_NUM_THREADS": "128"}
    out = []
    for limit_mb, case in (("2048", "small"), ("1024", "large")):
        res = subprocess.run(
            [sys.executable, "-c", script, limit_mb, case],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert res.returncode == 0, res.stderr[-2000:]
        out.append(res.stdout.strip())
    assert out[0] == "1000000 1000000"
    assert "the 129 threads the call runs on" in out[1]
    assert "EPOCHPLAN_NUM_THREADS" in out[1]
