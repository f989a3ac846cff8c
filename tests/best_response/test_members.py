"""Population members as plain values: every kind comes back acting bit for bit, and nothing else is stored."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.best_response.members import member_from_plain, member_to_plain
from marljoint.best_response.openspiel_game import OpenSpielTablePolicy
from marljoint.best_response.population import ConstantPolicy, KuhnTablePolicy, UniformPolicy
from marljoint.checkpoint import atomic_torch_save, load_checkpoint
from marljoint.env.spaces import ActionLayout, ObservationLayout
from marljoint.policies import ActorCritic, AgentPolicy
from marljoint.policies.description import actor_critic_from_description, describe_actor_critic
from marljoint_envs import kuhn_poker_v0


def _network_member(**config):
    env = PettingZooJointEnv(kuhn_poker_v0.raw_env, num_envs=2, seed=0)
    settings = {"num_envs": 2, "hidden_sizes": (8,), "share_parameters": False, "seed": 3, **config}
    trainer = JointMultiAgentTrainer.from_env(env, JointTrainerConfig(**settings))
    with torch.no_grad():
        for p in trainer.policies[0].parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    return trainer.agent_policy(1)


MEMBERS = {
    "uniform": lambda: UniformPolicy(ActionLayout("multidiscrete", (3, 2), (2,))),
    "constant": lambda: ConstantPolicy([np.array([0.1, 0.2, 0.7]) / 0.3]),
    "kuhn_table": lambda: KuhnTablePolicy(np.full((6, 2), 0.5) + np.array([0.1, -0.1]) / 3, 1),
    "network": _network_member,
    "recurrent_network": lambda: _network_member(recurrent="gru", rnn_hidden_size=4),
}


def _through_a_file(plain, tmp_path):
    atomic_torch_save({"member": plain}, tmp_path / "m.pt")
    return load_checkpoint(tmp_path / "m.pt")["member"]  # weights-only


@pytest.mark.parametrize("kind", sorted(MEMBERS))
def test_a_member_comes_back_acting_bit_for_bit(kind, tmp_path):
    member = MEMBERS[kind]()
    again = member_from_plain(_through_a_file(member_to_plain(member), tmp_path))
    assert type(again) is type(member)
    obs = torch.rand(16, 9, generator=torch.Generator().manual_seed(0))
    if isinstance(member, AgentPolicy):
        state = member.initial_state(16) if member.recurrent else None
        for a, b in zip(member.action_probs(obs, state=state), again.action_probs(obs, state=state)):
            assert torch.equal(a, b)
        for (name, a), (_, b) in zip(member.state_dict().items(), again.state_dict().items()):
            assert torch.equal(a, b), name
    elif kind == "uniform":
        assert again.nvec == member.nvec and again.has_head_axis
    else:
        for a, b in zip(member.action_probs(obs), again.action_probs(obs)):
            assert torch.equal(a, b)


def test_an_openspiel_table_member_keeps_its_lookup():
    member = OpenSpielTablePolicy("game", {b"\x00\x01": 0, b"\x02\x03": 1}, np.array([[0.25, 0.75], [1.0, 0.0]]), 1)
    again = member_from_plain(member_to_plain(member))
    assert again.lookup == member.lookup and again.player == 1 and np.array_equal(again.table, member.table)


def test_kinds_outside_the_allow_list_are_refused():
    with pytest.raises(TypeError, match=r"member of type object cannot be saved as plain values; the kinds"):
        member_to_plain(object())
    with pytest.raises(ValueError, match=r"unknown population member kind 'pickle'; a checkpoint may hold"):
        member_from_plain({"kind": "pickle"})


def _network(activation=None):
    obs = ObservationLayout("flat", (5,), np.dtype(np.float32))
    kwargs = {} if activation is None else {"activation": activation}
    return ActorCritic(obs, ActionLayout("discrete", (3,), ()), 2, False, (4,), generator=torch.Generator(), **kwargs)


def test_a_network_description_names_allow_listed_architectures_and_activations_only():
    with pytest.raises(ValueError, match=r"activation <function .*<lambda> at .*> is not one a checkpoint can name"):
        describe_actor_critic(_network(activation=lambda x: x))
    description = describe_actor_critic(_network(activation=torch.relu))
    assert description["activation"] == "torch.relu"
    with pytest.raises(ValueError, match=r"unknown network architecture 'os.system'; a checkpoint may name"):
        actor_critic_from_description({**description, "architecture": "os.system"})
    with pytest.raises(ValueError, match=r"unknown activation 'eval'; a checkpoint may name one of"):
        actor_critic_from_description({**description, "activation": "eval"})
    with pytest.raises(TypeError, match="only an ActorCritic can be described, got Linear"):
        describe_actor_critic(torch.nn.Linear(2, 2))
