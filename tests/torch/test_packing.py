"""Packed micro-batches (epochplan.torch.packing, epochplan.torch.token_loss):
the packed row is the micro-batch's samples one after the other, its
boundaries agree in every field, labels never cross a sample, the mask is
block-diagonal causal, and the weighted loss is the plan's weighted sum of
per-sample summed token losses, so a step's weighted losses over all ranks
sum to W times the step's mean token loss."""

from __future__ import annotations

import doctest
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import epochplan.torch.packing as packing_module  # noqa: E402
from epochplan import PlanSpec, Tokens  # noqa: E402
from epochplan.torch import (  # noqa: E402
    ElasticBatchSampler,
    PackedBatch,
    PackedCollate,
    sample_losses,
    token_losses,
    weighted_loss,
)

VOCAB = 11


def make_data(lengths: np.ndarray, seed: int = 0) -> list[dict[str, list[int]]]:
    """Samples with token ids and SFT-style labels: a prompt of random length
    is outside the loss."""
    rng = np.random.default_rng(seed)
    data = []
    for length in lengths:
        ids = rng.integers(0, VOCAB, int(length))
        labels = ids.copy()
        labels[: rng.integers(0, int(length) + 1)] = -100
        data.append({"input_ids": ids.tolist(), "labels": labels.tolist()})
    return data


def loss_tokens_of(data: list[dict[str, list[int]]]) -> np.ndarray:
    """The targets of each sample: labels after its first that are not -100."""
    return np.array([sum(x != -100 for x in d["labels"][1:]) for d in data], dtype=np.int64)


def batches(data, plan_lengths, loss_tokens, world, rank, cap, **kw) -> list[PackedBatch]:
    sampler = ElasticBatchSampler(
        PlanSpec(len(data), 7, seed=3, tokens=Tokens(plan_lengths, loss_tokens)),
        None,
        max_tokens=cap,
        rank=rank,
        num_replicas=world,
    )
    loader = torch.utils.data.DataLoader(
        sampler.wrap_dataset(data), batch_sampler=sampler, collate_fn=PackedCollate(**kw)
    )
    return list(loader)


def test_the_docstring_examples_run() -> None:
    result = doctest.testmod(packing_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 9), min_size=1, max_size=30),
    world=st.integers(1, 4),
    data_seed=st.integers(0, 2**16),
)
def test_a_packed_row_is_its_samples_with_consistent_boundaries(
    lengths: list[int], world: int, data_seed: int
) -> None:
    lens = np.array(lengths, dtype=np.int64)
    data = make_data(lens, data_seed)
    max_tokens = max(9, int(lens.max()))
    for rank in range(world):
        for batch in batches(data, lens, None, world, rank, max_tokens, attention_mask=True):
            ids = batch.indices.tolist()
            sizes = lens[ids]
            cu = batch.cu_seqlens.tolist()
            assert cu == [0, *np.cumsum(sizes).tolist()]
            assert batch.num_tokens == sizes.sum() <= max_tokens
            assert batch.max_seqlen == sizes.max()
            got_ids = batch.input_ids[0].tolist()
            got_labels = batch.labels[0].tolist()
            for row, sample in enumerate(ids):
                a, b = cu[row], cu[row + 1]
                assert got_ids[a:b] == data[sample]["input_ids"]
                # The sample's own labels, its first never a target.
                assert got_labels[a:b][1:] == data[sample]["labels"][1:]
                if b > a:
                    assert got_labels[a] == -100
                assert batch.position_ids[0, a:b].tolist() == list(range(b - a))
                assert (batch.seq_idx[0, a:b] == row).all()
            # Block-diagonal causal: q attends to k iff same sample and k <= q.
            mask = batch.attention_mask[0, 0]
            seq = batch.seq_idx[0]
            pos = torch.arange(batch.num_tokens)
            expected = (seq[:, None] == seq[None, :]) & (pos[:, None] >= pos[None, :])
            assert torch.equal(mask, expected)


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=30),
    world=st.integers(1, 4),
    data_seed=st.integers(0, 2**16),
)
def test_weighted_losses_over_all_ranks_are_w_times_each_steps_token_mean(
    lengths: list[int], world: int, data_seed: int
) -> None:
    lens = np.array(lengths, dtype=np.int64)
    data = make_data(lens, data_seed)
    loss_tokens = loss_tokens_of(data)
    # A fixed per-token loss table: token id -> loss, logits with one hot rows.
    rng = np.random.default_rng(data_seed)
    logits_of = torch.tensor(rng.standard_normal((VOCAB, VOCAB)))
    totals: dict[int, float] = {}
    for rank in range(world):
        for batch in batches(data, lens, loss_tokens, world, rank, 9):
            assert batch.sample_weight.dtype == torch.float64
            logits = logits_of[batch.input_ids[0]]
            loss = weighted_loss(logits[None], batch)
            totals[batch.step] = totals.get(batch.step, 0.0) + float(loss)
    # One device: each step's token losses summed, over its loss tokens.
    sampler = ElasticBatchSampler(
        PlanSpec(len(data), 7, seed=3, tokens=Tokens(lens, loss_tokens)),
        None,
        max_tokens=9,
        rank=0,
        num_replicas=1,
    )
    plan = sampler.plan
    for step in range(plan.num_steps):
        ids = plan.step_indices(step, 0, 1).tolist()
        total, count = 0.0, 0
        for i in ids:
            x = torch.tensor(data[i]["input_ids"])
            y = torch.tensor(data[i]["labels"])
            ce = torch.nn.functional.cross_entropy(logits_of[x[:-1]], y[1:], reduction="sum")
            total += float(ce) if len(x) > 1 and (y[1:] != -100).any() else 0.0
            count += int((y[1:] != -100).sum())
        mean = total / count if count else 0.0
        np.testing.assert_allclose(totals[step], world * mean, rtol=1e-13, atol=1e-13)


def test_token_losses_are_aligned_with_labels_and_sample_losses_sum_them() -> None:
    data = [[1, 2, 3], [4, 5], [6]]
    sampler = ElasticBatchSampler(
        PlanSpec(3, 3, tokens=Tokens([3, 2, 1])), None, max_tokens=6, rank=0, num_replicas=1
    )
    loader = torch.utils.data.DataLoader(
        sampler.wrap_dataset(data), batch_sampler=sampler, collate_fn=PackedCollate()
    )
    (batch,) = list(loader)
    logits = torch.randn(1, batch.num_tokens, 8, dtype=torch.float64)
    losses = token_losses(logits, batch.labels)
    labels = batch.labels[0]
    for t in range(batch.num_tokens):
        if labels[t] == -100:
            assert losses[t] == 0
        else:
            expected = torch.nn.functional.cross_entropy(logits[0, t - 1], labels[t])
            assert torch.allclose(losses[t], expected, rtol=0, atol=1e-15)
    per_sample = sample_losses(losses, batch)
    cu = batch.cu_seqlens.tolist()
    for row in range(batch.num_samples):
        assert per_sample[row] == losses[cu[row] : cu[row + 1]].sum()
    assert batch.num_samples == 3 and (losses != 0).sum() == 3  # 2 + 1 + 0 targets


def test_a_filler_weighs_zero_and_the_batch_moves_and_pickles() -> None:
    # Three samples on two ranks, each rank's micro-batches padded by fillers.
    data = [[1] * 5, [2] * 5, [3] * 5]
    got = batches(data, np.array([5, 5, 5]), None, 2, 1, 5)
    weights = torch.cat([b.sample_weight for b in got])
    assert (weights == 0).any() and (weights > 0).any()
    batch = got[0].to("cpu")
    assert isinstance(batch, PackedBatch) and batch.step == got[0].step
    assert set(batch.model_inputs()) == {"input_ids", "position_ids"}
    assert batch.flash_attn_kwargs()["cu_seq_lens_q"] is batch.cu_seqlens
    collate = pickle.loads(pickle.dumps(PackedCollate(attention_mask=True)))
    assert "attention_mask=True" in repr(collate)


def test_bad_arguments_and_samples_raise_errors_naming_them() -> None:
    with pytest.raises(TypeError, match="attention_mask"):
        PackedCollate(attention_mask=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ignore_index"):
        PackedCollate(ignore_index=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="weight_dtype"):
        PackedCollate(weight_dtype=torch.int64)
    with pytest.raises(ValueError, match="max_tokens"):
        PackedCollate(max_tokens=0)
    with pytest.raises(TypeError, match="without weights"):
        PackedCollate()([[1, 2]])

    def run(data, **kw):
        return batches(data, np.array([len(d) for d in data]), None, 1, 0, 10, **kw)

    with pytest.raises(ValueError, match="labels must have"):
        run([{"input_ids": [1, 2], "labels": [1]}])
    with pytest.raises(ValueError, match="'input_ids'"):
        run([{"tokens": [1, 2]}])
    with pytest.raises(ValueError, match="1-d"):
        run([[[1, 2]]])
    with pytest.raises(TypeError, match="integers"):
        run([[1.5, 2.0]])
    with pytest.raises(ValueError, match=r"lengths\[0\]"):
        run([[1, 2, 3]], lengths=[2])
    with pytest.raises(ValueError, match="more than max_tokens"):
        run([[1, 2, 3]], max_tokens=2)
    logits = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="one packed row"):
        token_losses(logits, torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="same T"):
        token_losses(torch.zeros(3, 4), torch.zeros(2, dtype=torch.long))
    (batch,) = run([[1, 2, 3]])
    with pytest.raises(ValueError, match="3 tokens"):
        sample_losses(torch.zeros(4), batch)


def test_max_length_cuts_samples_as_a_truncating_plan_counts_them() -> None:
    data = [list(range(1, 9)), [9, 10]]  # 8 and 2 tokens
    lengths = np.array([8, 2])
    sampler = ElasticBatchSampler(
        PlanSpec(2, 2, tokens=Tokens(lengths, lengths - 1, oversize="truncate")),
        None,
        max_tokens=5,
        rank=0,
        num_replicas=1,
    )
    cut = np.minimum(lengths, 5)
    loader = torch.utils.data.DataLoader(
        sampler.wrap_dataset(data),
        batch_sampler=sampler,
        collate_fn=PackedCollate(max_length=5, lengths=cut, max_tokens=5),
    )
    rows = {b.indices[0].item(): b for b in loader}
    assert rows[0].input_ids[0].tolist() == [1, 2, 3, 4, 5]
    targets = sum(int((b.labels[0] != -100).sum()) for b in rows.values())
    assert targets == sampler.plan.step_tokens(0) == 4 + 1
    with pytest.raises(ValueError, match="max_length"):
        PackedCollate(max_length=0)
