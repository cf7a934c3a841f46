"""The cases of ``epochplan bench``: each operation as the peers and
epochplan do it, as code run in a fresh process (imports, setup, the call)
with an estimate of its memory."""

from __future__ import annotations

from dataclasses import dataclass

from epochplan.bench.streaming_peer import STREAMING_STUBS

#: World size and rank of the sampler cases.
WORLD, RANK = 8, 3

_DATASET = f"""
class _Dataset:
    def __len__(self):
        return n
sampler = DistributedSampler(_Dataset(), num_replicas={WORLD}, rank={RANK}, shuffle=True, seed=0)
"""

_SHARDS = """
import numpy as np
_size = 10_000
shard_sizes = np.full(n // _size, _size, dtype=np.int64)
if n % _size:
    shard_sizes = np.append(shard_sizes, n % _size).astype(np.int64)
"""

_PARTITION_ARGS = "n, 8, 1, 8, 4, 64"

# A split of a store: 0.9 n of its ids, as a boolean mask.
_MASK = """
import numpy as np
mask = np.ones(n, dtype=bool)
mask[3::10] = False
"""

# Three datasets of 0.6 n, 0.3 n and 0.1 n samples, mixed 0.5 n : 0.3 n : 0.1 n.
_SOURCES = """
sizes = [6 * n // 10, 3 * n // 10, n - 9 * n // 10]
quotas = [5 * n // 10, 3 * n // 10, n - 9 * n // 10]
"""


@dataclass(frozen=True)
class Case:
    """One implementation of one operation."""

    group: str
    name: str
    ours: bool
    imports: str
    call: str
    bytes_per_sample: float
    setup: str = ""
    needs: tuple[str, ...] = ()
    note: str = ""


CASES: list[Case] = [
    Case(
        "full permutation",
        "numpy default_rng().permutation",
        False,
        "import numpy as np",
        "np.random.default_rng(0).permutation(n)",
        16,
        needs=("numpy",),
    ),
    Case(
        "full permutation",
        "torch.randperm",
        False,
        "import torch",
        "torch.randperm(n, generator=torch.Generator().manual_seed(0))",
        16,
        needs=("torch",),
    ),
    Case(
        "full permutation",
        "epochplan permutation(kind='uniform')",
        True,
        "import epochplan as ep",
        "ep.permutation(n, kind='uniform')",
        17,
    ),
    Case(
        "full permutation",
        "epochplan Permutation(n)[::] (cipher)",
        True,
        "import epochplan as ep",
        "ep.Permutation(n)[::]",
        9,
    ),
    Case(
        f"DistributedSampler W={WORLD}: first index",
        "torch DistributedSampler",
        False,
        "from torch.utils.data import DistributedSampler",
        "next(iter(sampler))",
        60,
        setup=_DATASET,
        needs=("torch",),
    ),
    Case(
        f"DistributedSampler W={WORLD}: first index",
        "epochplan.torch.DistributedSampler",
        True,
        "from epochplan.torch import DistributedSampler",
        "next(iter(sampler))",
        2,
        setup=_DATASET,
        needs=("torch", "epochplan.torch:DistributedSampler"),
    ),
    Case(
        f"DistributedSampler W={WORLD}: one rank's epoch",
        "torch DistributedSampler",
        False,
        "import collections\nfrom torch.utils.data import DistributedSampler",
        "collections.deque(iter(sampler), maxlen=0)",
        60,
        setup=_DATASET,
        needs=("torch",),
    ),
    Case(
        f"DistributedSampler W={WORLD}: one rank's epoch",
        "epochplan.torch.DistributedSampler",
        True,
        "import collections\nfrom epochplan.torch import DistributedSampler",
        "collections.deque(iter(sampler), maxlen=0)",
        4,
        setup=_DATASET,
        needs=("torch", "epochplan.torch:DistributedSampler"),
    ),
    Case(
        f"one rank's epoch as an int64 array, W={WORLD}",
        f"torch.randperm(n)[{RANK}::{WORLD}]",
        False,
        "import torch",
        f"torch.randperm(n, generator=torch.Generator().manual_seed(0))[{RANK}::{WORLD}]",
        16,
        needs=("torch",),
    ),
    Case(
        f"one rank's epoch as an int64 array, W={WORLD}",
        f"epochplan Permutation(n)[{RANK}::{WORLD}]",
        True,
        "import epochplan as ep",
        f"ep.Permutation(n)[{RANK}::{WORLD}]",
        2,
    ),
    Case(
        f"one rank's epoch as an int64 array, W={WORLD}",
        "epochplan EpochPlan.rank_indices",
        True,
        "import epochplan as ep",
        f"ep.EpochPlan(n, 4096).rank_indices({RANK}, {WORLD})",
        2,
        note="its steps of G=4096",
    ),
    Case(
        f"one rank's share of a mask's ids (0.9 N), W={WORLD}",
        "torch DistributedSampler(Subset(range(n), ids))",
        False,
        "from torch.utils.data import DistributedSampler, Subset",
        "[subset.indices[i] for i in DistributedSampler("
        f"subset, num_replicas={WORLD}, rank={RANK}, shuffle=True, seed=0)]",
        60,
        setup=_MASK + "subset = Subset(range(n), np.flatnonzero(mask).astype(np.int64))",
        needs=("torch",),
        note="its ids mapped through the subset",
    ),
    Case(
        f"one rank's share of a mask's ids (0.9 N), W={WORLD}",
        "epochplan EpochPlan(Selection.from_mask(mask)).rank_indices",
        True,
        "import epochplan as ep",
        f"ep.EpochPlan(space, 4096).rank_indices({RANK}, {WORLD})",
        3,
        setup=_MASK + "space = ep.Selection.from_mask(mask)",
        note="its steps of G=4096",
    ),
    Case(
        f"one rank's share of a mixture of three datasets, W={WORLD}",
        "streaming StreamingDataset epoch, three streams with choose",
        False,
        "from epochplan.bench.streaming_peer import streaming_mixture_epoch",
        f"(lambda ids: ids[ids != -1])(epoch()[0, {RANK}].ravel())",
        50,
        setup=_SOURCES + "epoch = streaming_mixture_epoch("
        f"sizes, quotas, ranks={WORLD}, batch_size={4096 // WORLD})",
        needs=("find:streaming", "torch"),
        note="the whole epoch, as every node builds it",
    ),
    Case(
        f"one rank's share of a mixture of three datasets, W={WORLD}",
        "epochplan EpochPlan(Mixture(...)).rank_indices",
        True,
        "import epochplan as ep",
        "ep.EpochPlan(ep.Mixture(sizes, quotas=quotas, seed=1), 4096)"
        f".rank_indices({RANK}, {WORLD})",
        3,
        setup=_SOURCES,
        note="its steps of G=4096",
    ),
    Case(
        "Streaming get_partitions",
        "streaming get_partitions('orig')",
        False,
        STREAMING_STUBS + "from streaming.base.partition import get_partitions",
        f"get_partitions('orig', {_PARTITION_ARGS})",
        40,
        needs=("find:streaming",),
    ),
    Case(
        "Streaming get_partitions",
        "epochplan.compat.streaming",
        True,
        "from epochplan.compat.streaming import get_partitions",
        f"get_partitions('orig', {_PARTITION_ARGS})",
        16,
    ),
    Case(
        "Streaming get_shuffle py1s",
        "streaming get_shuffle('py1s')",
        False,
        STREAMING_STUBS + "from streaming.base.shuffle import get_shuffle",
        "get_shuffle('py1s', shard_sizes, 8, 0, 0)",
        40,
        setup=_SHARDS,
        needs=("find:streaming",),
    ),
    Case(
        "Streaming get_shuffle py1s",
        "epochplan.compat.streaming",
        True,
        "from epochplan.compat.streaming import get_shuffle",
        "get_shuffle('py1s', shard_sizes, 8, 0, 0)",
        16,
        setup=_SHARDS,
    ),
    Case(
        "Streaming get_shuffle py1e",
        "streaming get_shuffle('py1e')",
        False,
        STREAMING_STUBS + "from streaming.base.shuffle import get_shuffle",
        "get_shuffle('py1e', shard_sizes, 8, 0, 0)",
        48,
        setup=_SHARDS,
        needs=("find:streaming",),
    ),
    Case(
        "Streaming get_shuffle py1e",
        "epochplan.compat.streaming",
        True,
        "from epochplan.compat.streaming import get_shuffle",
        "get_shuffle('py1e', shard_sizes, 8, 0, 0)",
        16,
        setup=_SHARDS,
    ),
]
