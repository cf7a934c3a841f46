"""Address-space limits (as cluster schedulers set them) over the surfaces
added with parts, audits, locate and Megatron's indices: from no room to
plenty, each call returns or raises an exception, never aborts the process,
and a merge leaves a whole plan or none."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import epochplan as ep
from epochplan import planfile
from epochplan.audit import ConsumptionLog

SWEEP = """
import os, resource, shutil
from collections import Counter
import numpy as np, epochplan as ep
from epochplan import planfile
from epochplan.audit import audit
from epochplan.compat.megatron import gpt_dataset
root = {root!r}
parts = [f"{{root}}/p{{i}}" for i in range(2)]
sizes = np.random.default_rng(0).integers(1, 200, 10**6).astype(np.int32)
out = f"{{root}}/merged"
mixture = ep.Mixture(
    [10**6, 10**6], weights=[1, 1], num_samples=2 * 10**6, seed=1,
    phases=[((0, 2**20), [2, 1])],
)
calls = {{
    "merge_plan": lambda: planfile.merge_plan(out, parts),
    "audit": lambda: audit(f"{{root}}/logs"),
    "locate": lambda: ep.EpochPlan(2 * 10**6, 4096, seed=1).locate(np.arange(2 * 10**6), 8, 4),
    "megatron_gpt_indices": lambda: gpt_dataset.build_gpt_indices(
        sizes, np.arange(10**6, dtype=np.int32), 3 * 10**5, 512, 1
    ),
    "token_rank_indices": lambda: ep.EpochPlan(
        2 * 10**6, 4096, tokens=ep.Tokens(sizes.repeat(2))
    ).rank_indices(0, 3),
    "mixture_micro_batches": lambda: [
        len(step) for step in ep.EpochPlan(mixture, 2**16).micro_batches(1, 3, 64)
    ],
    "mixture_sources": lambda: mixture.epoch(0).sources(np.arange(2 * 10**6)),
    "mixture_locate": lambda: ep.EpochPlan(mixture, 4096).locate(
        np.arange(0, 2 * 10**6, 5), 4, 8
    ),
    "selection_ranges": lambda: (
        ep.Selection.from_ranges([(i * 10, i * 10 + 5) for i in range(10**5)], 2 * 10**6)
        | ep.Selection.from_ranges([(i * 10 + 3, i * 10 + 8) for i in range(10**5)], 2 * 10**6)
    ),
}}
call = calls[{name!r}]
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
outcomes = Counter()
for extra_mb in range(0, 600, 8):
    with open("/proc/self/status") as f:
        size = next(int(l.split()[1]) for l in f if l.startswith("VmSize:")) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size + (extra_mb << 20), hard))
    try:
        call()
        outcomes["returned"] += 1
    except (MemoryError, OverflowError, RuntimeError, ValueError, OSError) as e:
        outcomes[type(e).__name__] += 1
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    if os.path.exists(out):
        planfile.verify_plan(out)  # raises unless the merged plan is whole
        shutil.rmtree(out)
print(dict(outcomes))
"""


def write_inputs(root: Path) -> None:
    """Parts of a plan and a consumption log, written before the sweep (so
    that the swept process holds no memory freed by writing them)."""
    spec = ep.PlanSpec(2 * 10**6, 64, seed=1)
    for i in range(2):
        planfile.write_plan_part(root / f"p{i}", spec, 2, planfile.Part(i, 2))
    plan = ep.EpochPlan(2 * 10**6, 4096, seed=1)
    with ConsumptionLog(root / "logs", plan.state_dict(), rank=0, world_size=1) as log:
        for step in range(plan.num_steps):
            log.record(0, step, plan.step_indices(step, 0, 1))
        log.commit(plan.at_step(plan.num_steps).state_dict())


@pytest.mark.parametrize(
    "name",
    [
        *["merge_plan", "audit", "locate", "megatron_gpt_indices"],
        # Each aborted the process once: a buffer grown or reserved without
        # a fallible reserve (a token plan's rank share, a mixture's batch
        # buffers on a pool thread, a mixture epoch's sources, ranges, the
        # search of a mixture's ids).
        *["token_rank_indices", "mixture_micro_batches", "mixture_sources"],
        *["selection_ranges", "mixture_locate"],
    ],
)
def test_no_memory_limit_crashes_a_new_call(name: str, tmp_path: Path) -> None:
    pytest.importorskip("megatron.core")
    env = {**os.environ, "EPOCHPLAN_NUM_THREADS": "2"}
    write_inputs(tmp_path)
    script = SWEEP.format(root=str(tmp_path), name=name)
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600
    )
    assert res.returncode == 0, res.stderr[-2000:]
    outcomes = eval(res.stdout.strip().splitlines()[-1])
    # The sweep spans the call's need: refused under the tight limits,
    # returned under the loose ones (a merge hard-links its files and needs
    # next to no memory: it returns under every limit).
    assert outcomes.get("returned", 0) > 0, outcomes
    assert len(outcomes) > 1 or name == "merge_plan", outcomes
