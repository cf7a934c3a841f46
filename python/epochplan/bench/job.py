"""``epochplan bench`` for the user's own job: their world size, global
batch, order kind, lengths file (a token plan) or space file, timed as one
rank computes its share and as the whole job does (every rank's share), with
the peers side by side where one computes the same thing.

Cases are built as code for the runner's fresh processes (see
:mod:`epochplan.bench.cases`); a file's path is written into the code, and
its length is the case's N.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from epochplan.bench.cases import Case

__all__ = ["Job", "job_cases"]


@dataclass(frozen=True)
class Job:
    """The parameters of the user's job (None: not given)."""

    world_size: int = 8
    global_batch_size: int = 4096
    kind: str = "cipher"
    lengths: Path | None = None
    max_tokens: int | None = None
    space: Path | None = None

    def describe(self) -> str:
        parts = [f"W={self.world_size}", f"G={self.global_batch_size}", f"kind={self.kind}"]
        if self.space is not None:
            parts.append(f"space {self.space.name}")
        if self.lengths is not None:
            parts.append(f"lengths {self.lengths.name}, max_tokens={self.max_tokens}")
        return ", ".join(parts)


def job_cases(job: Job) -> list[Case]:
    """The cases of ``job``: ours (one rank, every rank) and the peers'."""
    w, g = job.world_size, job.global_batch_size
    setup = "import numpy as np\nimport epochplan as ep\n"
    space = "n"
    if job.space is not None:
        setup += f"space = ep.load_space({str(job.space)!r})\n"
        space = "space"
    kind = "" if job.kind == "cipher" else f", kind={job.kind!r}"
    if job.kind == "chunked":
        kind = ", kind=ep.Chunked(1000)"
    tokens = ""
    if job.lengths is not None:
        setup += f"lengths = np.load({str(job.lengths)!r}, mmap_mode='r')\n"
        tokens = ", tokens=ep.Tokens(lengths)"
    setup += f"plan = ep.EpochPlan({space}, {g}{kind}{tokens})\n"
    group = f"your job ({job.describe()})"
    if job.lengths is None:
        one = f"plan.rank_indices(0, {w})"
        every = f"[plan.rank_indices(r, {w}) for r in range({w})]"
    else:
        caps = f"max_tokens={job.max_tokens}"
        one = f"[len(s) for s in plan.micro_batches(0, {w}, {caps})]"
        every = f"[[len(s) for s in plan.micro_batches(r, {w}, {caps})] for r in range({w})]"
    cases = [
        Case(f"{group}: one rank's epoch", "epochplan (one rank)", True, "", one, 12, setup=setup),
        Case(
            f"{group}: every rank's epoch (the whole job)",
            f"epochplan (all {w} ranks)",
            True,
            "",
            every,
            12,
            setup=setup,
        ),
    ]
    if job.lengths is None and job.kind in ("cipher", "uniform"):
        # torch computes the same thing: each rank's shuffled share.
        ids = "range(n)" if job.space is None else "np.asarray(space)"
        torch_setup = (
            "import numpy as np\nimport epochplan as ep\n"
            + (f"space = ep.load_space({str(job.space)!r})\n" if job.space is not None else "")
            + "class _D:\n    def __init__(self, ids): self.ids = ids\n"
            "    def __len__(self): return len(self.ids)\n"
            f"data = _D({ids})\n"
        )
        sampler = "DistributedSampler(data, num_replicas={w}, rank={r}, shuffle=True, seed=0)"
        cases += [
            Case(
                f"{group}: one rank's epoch",
                "torch DistributedSampler (one rank)",
                False,
                "from torch.utils.data import DistributedSampler",
                # The dataset's ids looked up, as a Subset's sampler is used.
                f"[data.ids[i] for i in {sampler.format(w=w, r=0)}]",
                60,
                setup=torch_setup,
                needs=("torch",),
            ),
            Case(
                f"{group}: every rank's epoch (the whole job)",
                f"torch DistributedSampler (all {w} ranks)",
                False,
                "from torch.utils.data import DistributedSampler",
                f"[[data.ids[i] for i in {sampler.format(w=w, r='r')}] for r in range({w})]",
                60,
                setup=torch_setup,
                needs=("torch",),
            ),
        ]
    return cases
