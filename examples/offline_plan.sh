#!/usr/bin/env bash
# Write an epoch plan once, verify it, then train from its files.
#
# What it shows: the offline workflow. `epochplan plan --out DIR` computes every
# rank's sample ids of some epochs and writes them to a plan directory
# (manifest.json plus epoch-EEEE/rank-RRRRR.npy, checksummed, published
# atomically); `epochplan verify DIR` checks every file (checksums, every id
# as planned, each id once per epoch, equal steps) and exits 0 only when all
# holds; `epochplan.torch.PlanSampler` then serves each rank its micro-batches
# and loss weights from its file, as `ElasticBatchSampler` would compute them.
#
# How to run it (needs torch: pip install 'epochplan[torch]'):
#
#     bash examples/offline_plan.sh
#     N=100000 G=512 W=8 EPOCHS=3 bash examples/offline_plan.sh
#
# The training part simulates the W ranks of a DDP job in one process: each
# rank's loader feeds the same linear model, each rank's micro-batch losses are
# (weight * per-sample loss).sum(), and the summed gradients are divided by W,
# as DDP averages them. It prints one line per epoch and exits 1 unless every
# sample of every epoch was in exactly one step with a non-zero weight and
# every rank ran the same number of micro-batches. Everything is written to a
# temporary directory, removed on exit. The guide: docs/guides/offline-plans.md.
set -euo pipefail

N=${N:-10007}            # samples per epoch
G=${G:-256}              # global batch: samples per optimizer step over all ranks
W=${W:-3}                # world size the plan is written for
B=${B:-32}               # micro-batch size: the most samples per forward/backward
EPOCHS=${EPOCHS:-2}
SEED=${SEED:-7}
PYTHON=${PYTHON:-python}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
plan="$tmp/plan"

# 1. Write (verification is step 2 here, so skip the writer's own pass).
epochplan plan --num-samples "$N" --global-batch-size "$G" --world-size "$W" \
    --epochs "$EPOCHS" --seed "$SEED" --out "$plan" --no-verify --quiet
(cd "$plan" && find . -type f | sort)

# 2. Verify: exit 0 only when every check holds (set -e stops the script otherwise).
epochplan verify "$plan"

# 3. Train from the plan directory, every rank of the job in this process.
"$PYTHON" - "$plan" "$B" <<'PY'
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from epochplan.planfile import open_plan
from epochplan.torch import PlanSampler

plan_dir, micro_batch_size = open_plan(sys.argv[1]), int(sys.argv[2])
n, world = plan_dir.num_samples, plan_dir.world_size

g = torch.Generator().manual_seed(0)
x = torch.randn(n, 4, generator=g, dtype=torch.float64)
y = x @ torch.tensor([1.0, -2.0, 3.0, 0.5], dtype=torch.float64) + 0.1 * torch.randn(
    n, generator=g, dtype=torch.float64
)
dataset = TensorDataset(x, y)
model = torch.nn.Linear(4, 1, dtype=torch.float64)
torch.nn.init.zeros_(model.weight)
torch.nn.init.zeros_(model.bias)

# One sampler and loader per rank (in a real job: rank and world size from
# torch.distributed; the world size must be the plan's).
samplers = [
    PlanSampler(plan_dir, micro_batch_size=micro_batch_size, rank=r, num_replicas=world)
    for r in range(world)
]
loaders = [
    DataLoader(
        s.wrap_dataset(dataset), batch_sampler=s, collate_fn=s.collate(dtype=torch.float64)
    )
    for s in samplers
]
ok = True
for epoch in plan_dir.epochs:
    counts = torch.zeros(n, dtype=torch.int64)
    steps, loss_sum = 0, 0.0
    for s in samplers:
        s.set_epoch(epoch)
    # zip(strict=True): every rank runs the same number of micro-batches (no DDP hang).
    for batches in zip(*loaders, strict=True):
        for batch in batches:  # rank by rank; DDP would run them in parallel
            xb, yb = batch.data
            loss = (batch.sample_weight * (model(xb).squeeze(1) - yb) ** 2).sum()
            loss.backward()
            loss_sum += loss.item() / world
            counts[batch.indices[batch.sample_weight > 0]] += 1
        if batches[0].step_end:  # the same on every rank
            with torch.no_grad():  # plain SGD, as torch.optim.SGD(lr=0.1) would do
                for p in model.parameters():
                    p -= 0.1 * p.grad / world  # DDP's average over ranks
                    p.grad = None
            steps += 1
    once = bool((counts == 1).all())
    ok &= once and steps == plan_dir.plan(epoch).num_steps
    print(
        f"epoch {epoch}: {world} ranks, {steps} steps, {int(counts.sum())} of {n} samples, "
        f"each once: {once}, mean step loss {loss_sum / steps:.4f}",
        flush=True,
    )
sys.exit(0 if ok else 1)
PY
echo "trained from $plan"
