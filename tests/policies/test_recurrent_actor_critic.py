"""The recurrent actor-critic: one step at a time against a replayed sequence chunk, the state layout, episode
starts and agents that wait, in every parameter layout and with a centralised critic."""

import numpy as np
import pytest
import torch

from marljoint.env.spaces import ActionLayout, ObservationLayout
from marljoint.policies import ActorCritic

OBS = ObservationLayout("flat", (5,), np.dtype(np.float32))
ACTION = ActionLayout("discrete", (3,), ())
LAYOUTS = {
    "shared": {"share_parameters": True},
    "per-agent": {"share_parameters": False},
    "shared-trunk": {"share_parameters": True, "share_trunk": True},
    "centralised": {"share_parameters": False, "critic_input_size": 7},
}


def _net(kind, layout, n=3):
    return ActorCritic(
        OBS,
        ACTION,
        n,
        hidden_sizes=(16,),
        recurrent=kind,
        rnn_hidden_size=8,
        generator=torch.Generator().manual_seed(0),
        **LAYOUTS[layout],
    )


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_a_replayed_chunk_equals_stepping_one_step_at_a_time(kind, layout):
    torch.manual_seed(1)
    net = _net(kind, layout)
    length, batch, n = 6, 4, 3
    obs = torch.randn(length, batch, n, 5)
    critic_obs = torch.randn(length, batch, n, 7) if layout == "centralised" else None
    starts = torch.rand(length, batch, n) < 0.2
    advance = torch.rand(length, batch, n) < 0.8
    state0 = torch.randn(batch, n, net.state_size)
    replay = net.forward_sequence(obs, state0, starts, advance, critic_obs)
    state = state0
    for t in range(length):
        state = torch.where(starts[t].unsqueeze(-1), torch.zeros_like(state), state)
        out = net(obs[t], None if critic_obs is None else critic_obs[t], state)
        torch.testing.assert_close(replay.head[t], out.head, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(replay.values[t], out.values, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(replay.features[t], out.features, rtol=1e-5, atol=1e-6)
        state = torch.where(advance[t].unsqueeze(-1), out.state, state)
    torch.testing.assert_close(replay.state, state, rtol=1e-5, atol=1e-6)
    assert replay.head.shape == (length, batch, n, 3) and replay.values.shape == (length, batch, n)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_state_holds_the_actor_core_then_the_critic_core(layout):
    net = _net("lstm", layout)
    critic_core = 0 if layout == "shared-trunk" else 16
    assert net.state_size == 16 + critic_core
    assert net.initial_state(2).shape == (2, 3, net.state_size) and not net.initial_state(2).any()
    if critic_core:  # the critic's core is the critic's: the value loss never moves the actor's core
        critic = {id(p) for p in net.critic_parameters()}
        assert all(id(p) in critic for p in net.critic_core.parameters())
        assert all(id(p) not in critic for p in net.core.parameters())


def test_the_state_carries_memory_and_each_agent_has_its_own():
    net = _net("gru", "per-agent")
    obs = torch.ones(1, 3, 5)
    first = net(obs, state=net.initial_state(1))
    second = net(obs, state=first.state)
    assert not torch.allclose(first.head, second.head)  # the same observation, another state
    state = first.state.clone()
    state[:, 1] = 0.0
    third = net(obs, state=state)
    torch.testing.assert_close(third.head[:, [0, 2]], second.head[:, [0, 2]])
    torch.testing.assert_close(third.head[:, 1], first.head[:, 1])


def test_missing_or_unexpected_states_are_refused():
    net = _net("gru", "shared")
    with pytest.raises(ValueError, match=r"this network is recurrent \(gru\); pass state of shape \[2, 3, 16\]"):
        net(torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match="got shape"):
        net(torch.zeros(2, 3, 5), state=torch.zeros(2, 3, 4))
    plain = ActorCritic(OBS, ACTION, 3, True)
    with pytest.raises(ValueError, match="state was given, but this network is feed-forward"):
        plain(torch.zeros(2, 3, 5), state=torch.zeros(2, 3, 1))
    with pytest.raises(ValueError, match="forward_sequence replays a recurrent network"):
        plain.forward_sequence(torch.zeros(1, 2, 3, 5), torch.zeros(2, 3, 0), torch.zeros(1, 2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"recurrent must be one of \['gru', 'lstm'\] or None"):
        ActorCritic(OBS, ACTION, 3, True, recurrent="rnn")
    assert plain.state_size == 0 and plain(torch.zeros(2, 3, 5)).state is None
