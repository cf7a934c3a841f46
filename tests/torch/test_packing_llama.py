"""Packed training equals unpacked training, on a tiny Llama built from a
transformers config (random weights, nothing downloaded), in float64 with
the SDPA backend and the packed collate's block-diagonal mask:

* the per-sample summed token losses of a packed row equal those of each
  sample run alone, to 1e-10 (position ids alone, without the mask, miss by
  far more: the test checks that too, so the mask is what makes them equal);
* two gloo DDP ranks training on packed micro-batches of a token plan (SFT
  labels: prompts outside the loss, loss_tokens counted from the labels)
  end every optimizer step with the parameters of one device that takes the
  step's whole global batch, each sample alone, and the mean over its loss
  tokens, to 1e-12."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
transformers = pytest.importorskip("transformers")

import epochplan as ep  # noqa: E402
from epochplan import PlanSpec, Tokens  # noqa: E402
from epochplan.torch import (  # noqa: E402
    ElasticBatchSampler,
    PackedCollate,
    sample_losses,
    token_losses,
    weighted_loss,
)

VOCAB, N, G, MAX_TOKENS, LR = 48, 24, 8, 32, 0.5
LENGTHS = np.random.default_rng(1).integers(2, 13, N)
STEPS = -(-N // G)


def tiny_llama() -> torch.nn.Module:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(torch.float64)


def dataset() -> list[dict[str, list[int]]]:
    """SFT samples: a prompt (labels -100) then a response, for each length."""
    rng = np.random.default_rng(2)
    data = []
    for length in LENGTHS:
        ids = rng.integers(0, VOCAB, int(length))
        labels = ids.copy()
        labels[: rng.integers(0, int(length))] = -100
        data.append({"input_ids": ids.tolist(), "labels": labels.tolist()})
    return data


def loss_tokens() -> np.ndarray:
    """The targets of each sample: its labels after the first that count."""
    return np.array([sum(x != -100 for x in d["labels"][1:]) for d in dataset()])


def alone(model: torch.nn.Module, sample: dict[str, list[int]]) -> torch.Tensor:
    """A sample's summed token loss, run alone (no packing, no padding)."""
    ids = torch.tensor([sample["input_ids"]])
    logits = model(input_ids=ids).logits
    return token_losses(logits, torch.tensor([sample["labels"]])).sum()


def test_packed_per_sample_losses_equal_each_sample_run_alone() -> None:
    model = tiny_llama().eval()
    data = dataset()
    sampler = ElasticBatchSampler(
        PlanSpec(N, N, tokens=Tokens(LENGTHS)), None, max_tokens=MAX_TOKENS, rank=0, num_replicas=1
    )
    loader = torch.utils.data.DataLoader(
        sampler.wrap_dataset(data),
        batch_sampler=sampler,
        collate_fn=PackedCollate(attention_mask=True, lengths=LENGTHS),
    )
    packed_rows, without_mask = 0, 0.0
    with torch.no_grad():
        for batch in loader:
            losses = sample_losses(
                token_losses(model(**batch.model_inputs()).logits, batch.labels), batch
            )
            expected = torch.stack([alone(model, data[i]) for i in batch.indices.tolist()])
            torch.testing.assert_close(losses, expected, rtol=0, atol=1e-10)
            packed_rows += batch.num_samples > 1
            # Position ids alone let the samples of a row see each other.
            unmasked = model(input_ids=batch.input_ids, position_ids=batch.position_ids).logits
            gap = sample_losses(token_losses(unmasked, batch.labels), batch) - expected
            without_mask = max(without_mask, float(gap.abs().max()))
    assert packed_rows > 0
    assert without_mask > 1e-3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def flat_params(model: torch.nn.Module) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = tiny_llama()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=LR)
        sampler = ElasticBatchSampler(
            PlanSpec(N, G, tokens=Tokens(LENGTHS, loss_tokens())),
            None,
            max_tokens=MAX_TOKENS,
            rank=rank,
            num_replicas=world,
        )
        loader = torch.utils.data.DataLoader(
            sampler.wrap_dataset(dataset()),
            batch_sampler=sampler,
            collate_fn=PackedCollate(attention_mask=True),
        )
        history, packed = [], 0
        for batch in loader:
            packed += batch.num_samples > 1
            loss = weighted_loss(ddp(**batch.model_inputs()).logits, batch)
            if not batch.step_end:
                with ddp.no_sync():
                    loss.backward()
                continue
            loss.backward()
            opt.step()
            opt.zero_grad()
            history.append(flat_params(model))
        np.save(Path(out, f"{rank}.npy"), np.stack(history))
        np.save(Path(out, f"packed-{rank}.npy"), np.array(packed))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # gloo's threads can abort an interpreter tearing down


def reference() -> np.ndarray:
    """One device: each step's whole global batch, each sample alone, the
    sum of its token losses over the step's loss tokens."""
    model = tiny_llama()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    data, targets = dataset(), loss_tokens()
    plan = ep.EpochPlan(N, G)
    history = []
    for step in range(plan.num_steps):
        ids = plan.step_indices(step, 0, 1).tolist()
        loss = torch.stack([alone(model, data[i]) for i in ids]).sum() / int(targets[ids].sum())
        loss.backward()
        opt.step()
        opt.zero_grad()
        history.append(flat_params(model))
    return np.stack(history)


def test_packed_ddp_on_two_ranks_equals_one_device_with_the_whole_batch(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    expected = reference()
    assert expected.shape[0] == STEPS
    for rank in range(2):
        got = np.load(tmp_path / f"{rank}.npy")
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
        assert int(np.load(tmp_path / f"packed-{rank}.npy")) > 0  # rows held several samples
    # The run moved the parameters: the comparison is not of untouched values.
    assert np.abs(expected[-1] - flat_params(tiny_llama())).max() > 1e-3
