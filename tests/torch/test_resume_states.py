"""Resume states that are not what they claim: a torchdata.nodes wrapper
state whose parts disagree or are missing, a plan state with unknown keys in
its space record, another sampler's state, another space's state. Each is
refused naming the key and what differs, never resumed silently."""

from __future__ import annotations

from typing import Any

import pytest

import epochplan as ep

pytest.importorskip("torchdata.nodes")
from epochplan.torch import DistributedSampler, ElasticBatchSampler
from epochplan.torch.nodes import SamplerWrapper


def saved_state(epoch: int = 2) -> dict[str, Any]:
    node = SamplerWrapper(ElasticBatchSampler(ep.PlanSpec(40, 8), 4, rank=0, num_replicas=2))
    node.reset()
    for _ in range(epoch):  # epochs 0 .. epoch-1, then two items of `epoch`
        for _ in node:
            pass
        node.reset()
    next(node)
    next(node)
    return node.get_state()


def fresh() -> SamplerWrapper[Any]:
    return SamplerWrapper(ElasticBatchSampler(ep.PlanSpec(40, 8), 4, rank=0, num_replicas=2))


def test_a_good_state_resumes() -> None:
    state = saved_state()
    node = fresh()
    node.reset(state)
    assert node.epoch == 2 and next(node).step == 2  # one micro-batch a step


def test_an_epoch_other_than_the_samplers_is_refused() -> None:
    state = saved_state()
    state["_epoch"] = 5
    with pytest.raises(ValueError, match=r"initial_state\['_epoch'\] is 5 but .*\['epoch'\], is 2"):
        fresh().reset(state)


@pytest.mark.parametrize("key", ["_epoch", "_num_yielded", "_sampler"])
def test_a_missing_key_is_named(key: str) -> None:
    state = saved_state()
    del state[key]
    with pytest.raises(ValueError, match=rf"initial_state is missing the keys \['{key}'\]"):
        fresh().reset(state)


def test_unknown_keys_and_bad_counts_are_named() -> None:
    state = saved_state()
    with pytest.raises(ValueError, match=r"has unknown keys \['extra'\]"):
        fresh().reset({**state, "extra": 1})
    with pytest.raises(ValueError, match=r"initial_state\[._num_yielded.\] must be an int >= 0"):
        fresh().reset({**state, "_num_yielded": -1})
    with pytest.raises(TypeError, match=r"initial_state\['_num_yielded'\] must be an int"):
        fresh().reset({**state, "_num_yielded": "2"})
    with pytest.raises(TypeError, match=r"initial_state\['_sampler'\] must be the sampler's"):
        fresh().reset({**state, "_sampler": [1]})


def space_state() -> tuple[ep.Selection, dict[str, Any]]:
    part = ep.random_split(100, [0.5, 0.5], seed=1)[0]
    return part, ep.EpochPlan(part, 10).state_dict()


def test_unknown_keys_in_the_space_record_are_refused() -> None:
    part, state = space_state()
    state["space"]["note"] = "x"
    with pytest.raises(ValueError, match=r"state\['space'\] has an unknown key note"):
        ep.EpochPlan.from_state_dict(state, space=part)


def test_a_digest_that_is_not_a_string_names_its_key() -> None:
    part, state = space_state()
    state["space"]["digest"] = None
    with pytest.raises(TypeError, match=r"state\['space'\]\['digest'\] must be a str, got None"):
        ep.EpochPlan.from_state_dict(state, space=part)


def test_another_split_says_what_differs() -> None:
    _, state = space_state()
    other = ep.random_split(100, [0.5, 0.5], seed=2)[0]  # the same size, other ids
    with pytest.raises(ValueError, match=r"other ids or another order \(another split"):
        ep.EpochPlan.from_state_dict(state, space=other)


def test_a_distributed_samplers_state_is_named_as_such() -> None:
    strided = DistributedSampler(range(40), num_replicas=2, rank=0).state_dict()
    with pytest.raises(ValueError, match=r"^state_dict is a DistributedSampler's state"):
        ElasticBatchSampler(ep.PlanSpec(40, 8), 4, rank=0, num_replicas=2).load_state_dict(strided)


def test_torch_batch_size_points_at_the_global_batch_size() -> None:
    with pytest.raises(TypeError, match=r"ElasticBatchSampler\(\) takes no batch_size=: give "):
        ElasticBatchSampler(40, batch_size=8)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"takes no shuffle=: give the spec kind='identity'"):
        ElasticBatchSampler(ep.PlanSpec(40, 8), 4, shuffle=False)  # type: ignore[call-arg]
