"""The off-policy trainer's pieces for data-parallel ranks that need no process group: how replay shards are dealt
out again for another number of ranks, each rank's share of the capacity and of every batch, and the refusals."""

import doctest

import pytest
import torch

import marljoint.offpolicy.sharded
from marljoint.collect.config import CollectionConfig
from marljoint.distributed.ranks import RankGroup
from marljoint.offpolicy import OffPolicyConfig, OffPolicyTrainer
from marljoint.offpolicy.sharded import RankShards, dealt
from tests.offpolicy._helpers import TINY, mock_env


def _shard(values, position=None, capacity=None):
    size = len(values)
    if position is not None:  # a full ring buffer: its oldest row sits at the write position
        values = values[-position:] + values[:-position] if position else values
    return {
        "transitions": {"x": torch.tensor(values), "obs": (torch.tensor(values),)},
        "position": position or 0,
        "size": size,
    }


def test_the_modules_examples_run():
    assert doctest.testmod(marljoint.offpolicy.sharded).failed == 0


def test_a_full_ring_buffer_is_read_oldest_first_and_dealt_by_age_round_robin():
    wrapped = _shard([1, 2, 3, 4], position=1)  # storage [4, 1, 2, 3]: 4 written last, over the oldest
    assert wrapped["transitions"]["x"].tolist() == [4, 1, 2, 3]
    merged = dealt([wrapped, _shard([10, 20])], 1, 0, 100)
    assert merged["transitions"]["x"].tolist() == [1, 2, 3, 10, 4, 20]  # oldest first, equal ages in shard order
    assert merged["transitions"]["obs"][0].tolist() == [1, 2, 3, 10, 4, 20]
    assert (merged["size"], merged["position"]) == (6, 6)
    halves = [dealt([wrapped, _shard([10, 20])], 2, r, 100)["transitions"]["x"].tolist() for r in range(2)]
    assert halves == [[1, 3, 4], [2, 10, 20]]
    newest = dealt([wrapped, _shard([10, 20])], 1, 0, 4)  # a smaller capacity keeps the newest
    assert newest["transitions"]["x"].tolist() == [3, 10, 4, 20] and (newest["size"], newest["position"]) == (4, 0)


def test_empty_shards_deal_nothing():
    assert dealt([None, {"transitions": {"x": torch.zeros(0)}, "position": 0, "size": 0}], 2, 0, 10) is None
    assert dealt([_shard([1])], 2, 1, 10) is None  # one transition for two ranks: the second gets none


def test_each_rank_holds_its_copies_share_of_the_capacity_and_its_share_of_every_batch():
    shards = [
        RankShards(RankGroup(r, 3, r, "gloo"), num_envs=5, buffer_size=100, batch_size=16, seed=0) for r in range(3)
    ]
    assert [s.capacity for s in shards] == [40, 20, 40]  # copies [0, 2), [2, 3), [3, 5): 2/5, 1/5, 2/5
    assert [s.rows for s in shards] == [(0, 6), (6, 9), (9, 16)]  # rows too, in proportion to the copies
    # Each rank samples from a generator of its own, the same for the same seed and rank.
    again = RankShards(RankGroup(1, 3, 1, "gloo"), num_envs=5, buffer_size=100, batch_size=16, seed=0)
    assert torch.equal(again.generator.get_state(), shards[1].generator.get_state())
    assert not torch.equal(shards[0].generator.get_state(), shards[1].generator.get_state())


def test_a_batch_smaller_than_the_ranks_is_refused_naming_both():
    with pytest.raises(ValueError, match=r"batch_size=3 cannot be shared by 4 data-parallel ranks .* at least 4 or"):
        RankShards(RankGroup(0, 4, 0, "gloo"), num_envs=4, buffer_size=100, batch_size=3, seed=0)
    with pytest.raises(ValueError, match=r"buffer_size=2 cannot be shared by 4 data-parallel ranks"):
        RankShards(RankGroup(0, 4, 0, "gloo"), num_envs=4, buffer_size=2, batch_size=8, seed=0)
    # Copies split 2, 1, 2 of 5: a batch of 3 gives the middle rank no row; 4 is the least that gives every rank one.
    with pytest.raises(ValueError, match=r"batch_size=3 cannot be shared by 3 .* at least 4 or use fewer ranks"):
        RankShards(RankGroup(0, 3, 0, "gloo"), num_envs=5, buffer_size=100, batch_size=3, seed=0)


def test_ranks_refuse_env_workers_and_ray():
    group = RankGroup(0, 2, 0, "gloo")
    config = OffPolicyConfig(**TINY)
    with pytest.raises(ValueError, match=r"data-parallel ranks step their own env copies in-process; .*'subprocess'"):
        OffPolicyTrainer(mock_env(1), config, collection=CollectionConfig("subprocess", workers=2), ranks=group)


def test_ranks_refuse_an_env_that_is_not_the_ranks_slice():
    group = RankGroup(1, 2, 1, "gloo")
    with pytest.raises(ValueError, match=r"rank 1 of 2 steps env copies \[1, 2\) of num_envs=2, but its env holds"):
        OffPolicyTrainer(mock_env(1), OffPolicyConfig(**TINY), ranks=group)
