"""JointPolicy: every agent group's network evaluated, sampled and exchanged together."""

import numpy as np
import pytest
import torch

from marljoint import JointMultiAgentTrainer, JointTrainerConfig, PettingZooJointEnv
from marljoint.policies import JointPolicy, NetworkSlot
from marljoint_envs import mock_v0, variable_agents_v0


def _trainer(env_fn=mock_v0.parallel_env, **cfg):
    config = JointTrainerConfig(num_envs=3, rollout_steps=4, minibatch_size=12, n_epochs=1, **cfg)
    return JointMultiAgentTrainer.from_env(PettingZooJointEnv(env_fn, num_envs=3, seed=0), config)


@pytest.mark.parametrize("cfg", [{}, {"share_parameters": False, "centralized_critic": True}])
def test_the_trainer_acts_through_its_joint_policy(cfg):
    trainer = _trainer(variable_agents_v0.parallel_env, **cfg)
    policy = trainer.joint_policy
    state = trainer.env.reset(seed=1)
    assert [a.tolist() for a in trainer.act(state, deterministic=True)] == [
        a.tolist() for a in policy.act(state, deterministic=True)
    ]
    torch.testing.assert_close(trainer.predict_values(state), policy.predict_values(state), rtol=0, atol=0)
    group_obs = [torch.as_tensor(o) for o in state.obs]
    outputs = policy.forward(group_obs, torch.as_tensor(state.alive))
    masks = [None if m is None else torch.as_tensor(m) for m in state.action_masks]
    actions, log_probs = policy.sample(outputs, masks, generator=torch.Generator().manual_seed(0))
    again, entropy, features = policy.evaluate(outputs, actions, [None] * len(actions))
    assert log_probs.shape == again.shape == entropy.shape == (3, trainer.spec.num_agents)
    assert len(features) == trainer.spec.num_agents and all(f.shape[0] == 3 for f in features)


def test_weights_travel_as_numpy_and_load_exactly():
    source, target = _trainer(), _trainer()
    for p in source.policies[0].parameters():
        torch.nn.init.normal_(p.data, generator=torch.Generator().manual_seed(1))
    weights = source.joint_policy.weights()
    assert all(isinstance(v, np.ndarray) for state in weights["policies"] for v in state.values())
    target.joint_policy.load_weights(weights)
    for a, b in zip(source.policies[0].state_dict().values(), target.policies[0].state_dict().values()):
        assert torch.equal(a, b)


def test_bad_slots_and_missing_noise_are_refused():
    trainer = _trainer()
    policy = trainer.joint_policy
    with pytest.raises(ValueError, match="got 1 networks for 2 slots"):
        JointPolicy(trainer.spec, policy.networks, [NetworkSlot(0, (0,), False), NetworkSlot(0, (1,), False)])
    with pytest.raises(ValueError, match=r"the slots serve agents \[0\]; together they must serve each of the 2"):
        JointPolicy(trainer.spec, policy.networks, [NetworkSlot(0, (0,), True)])
    state = trainer.env.reset(seed=0)
    outputs = policy.forward([torch.as_tensor(o) for o in state.obs], torch.as_tensor(state.alive))
    with pytest.raises(ValueError, match="sampling needs a generator or a noise source"):
        policy.sample(outputs, [None])
    with pytest.raises(ValueError, match="unknown agent 'nobody'"):
        policy.network_of("nobody")


def test_the_groups_states_need_one_size_per_group():
    # Two per-agent networks of one group whose recurrent cores differ: the group has no one state size.
    from marljoint.policies import ActorCritic

    spec = _trainer().spec
    group = spec.groups[0]
    networks = [
        ActorCritic(group.observation, group.action, 1, False, recurrent="gru", rnn_hidden_size=size) for size in (4, 8)
    ]
    policy = JointPolicy(spec, networks, [NetworkSlot(0, (0,), False), NetworkSlot(0, (1,), False)])
    assert policy.recurrent and policy.group_states.network_recurrent == [True, True]
    with pytest.raises(ValueError, match=r"recurrent states of sizes \[8, 16\]; one group's networks need one state"):
        policy.group_states.sizes()
    same = JointPolicy(spec, networks[:1] * 2, [NetworkSlot(0, (0,), False), NetworkSlot(0, (1,), False)])
    assert same.group_states.sizes() == (8,)  # the actor core's 4 numbers, then the critic core's
    assert [s.shape for s in same.group_states.initial(3)] == [(3, 2, 8)]
