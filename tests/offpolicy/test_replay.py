"""The replay buffer: ring storage of joint transitions, uniform sampling, exact save and restore."""

import pytest
import torch

from marljoint.offpolicy import JointTransitions, ReplayBuffer


def _transitions(first: int, rows: int = 2, agents: int = 2) -> JointTransitions:
    ids = torch.arange(first, first + rows, dtype=torch.float32)
    per_agent = ids[:, None].expand(rows, agents)
    flags = torch.zeros(rows, agents, dtype=torch.bool)
    return JointTransitions(
        obs=(per_agent[..., None].repeat(1, 1, 3),),
        actions=per_agent.long(),
        rewards=per_agent.clone(),
        terminated=flags,
        truncated=flags,
        alive=~flags,
        deciding=~flags,
        next_obs=(per_agent[..., None].repeat(1, 1, 3) + 0.5,),
        next_masks=(torch.ones(rows, agents, 4, dtype=torch.bool),),
        next_present=~flags,
        next_deciding=~flags,
    )


def test_the_buffer_wraps_around_overwriting_the_oldest_transitions():
    buffer = ReplayBuffer(5, _transitions(0))
    for first in (0, 2, 4):
        buffer.add(_transitions(first))
    assert len(buffer) == 5 and buffer.position == 1
    # Rows hold transitions 5, 1, 2, 3, 4: transition 5 overwrote transition 0.
    assert buffer.storage.rewards[:, 0].tolist() == [5.0, 1.0, 2.0, 3.0, 4.0]
    assert torch.equal(buffer.storage.next_obs[0][0, 0], torch.full((3,), 5.5))


def test_sampling_draws_only_stored_rows_from_the_given_generator():
    buffer = ReplayBuffer(10, _transitions(0))
    buffer.add(_transitions(0, rows=3))
    a = buffer.sample(64, torch.Generator().manual_seed(1))
    b = buffer.sample(64, torch.Generator().manual_seed(1))
    assert set(a.rewards[:, 0].tolist()) == {0.0, 1.0, 2.0}
    assert all(torch.equal(x, y) for x, y in zip(a.rewards, b.rewards))
    assert a.obs[0].shape == (64, 2, 3) and a.next_masks[0].dtype == torch.bool


def test_state_dict_round_trip_restores_every_row_and_the_position():
    buffer = ReplayBuffer(4, _transitions(0))
    buffer.add(_transitions(0, rows=3))
    restored = ReplayBuffer(4, _transitions(0))
    restored.load_state_dict(buffer.state_dict())
    assert (restored.position, len(restored)) == (3, 3)
    for x, y in zip(buffer.storage.obs + buffer.storage.next_obs, restored.storage.obs + restored.storage.next_obs):
        assert torch.equal(x, y)
    assert torch.equal(buffer.storage.actions, restored.storage.actions)


def test_bad_capacity_empty_sampling_and_misfit_states_are_refused():
    with pytest.raises(ValueError, match="buffer_size must be a positive integer, got 0"):
        ReplayBuffer(0, _transitions(0))
    buffer = ReplayBuffer(4, _transitions(0))
    with pytest.raises(ValueError, match="cannot sample from an empty replay buffer"):
        buffer.sample(2, torch.Generator())
    big = ReplayBuffer(8, _transitions(0, agents=3))
    big.add(_transitions(0, rows=2, agents=3))
    with pytest.raises(ValueError, match="do not fit storage"):
        buffer.load_state_dict(big.state_dict())
    big.add(_transitions(0, rows=6, agents=3))
    with pytest.raises(ValueError, match="more than buffer_size=4"):
        ReplayBuffer(4, _transitions(0, agents=3)).load_state_dict(big.state_dict())
