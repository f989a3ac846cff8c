"""TD targets computed by hand: termination stops the bootstrap, truncation bootstraps from the final observation,
dead agents and illegal actions are masked out of the next state's maximum."""

import functools

import numpy as np
import pytest
import torch

from marljoint import PettingZooJointEnv
from marljoint.collect import LocalCollector
from marljoint.offpolicy import (
    OffPolicyConfig,
    ValueDecomposition,
    double_q_values,
    masked_max,
    rollout_transitions,
    td_targets,
    team_rewards,
)
from marljoint.offpolicy.functional import decode_actions, encode_actions, joint_action_mask
from marljoint.offpolicy.reward_scale import RewardScale
from marljoint_envs import counter_v0


def test_masked_max_skips_illegal_actions_and_treats_an_all_masked_row_as_unmasked():
    q = torch.tensor([[1.0, 5.0, 3.0], [1.0, 5.0, 3.0]])
    mask = torch.tensor([[True, False, True], [False, False, False]])
    values, actions = masked_max(q, mask)
    assert values.tolist() == [3.0, 5.0] and actions.tolist() == [2, 1]


def test_double_q_values_choose_with_the_online_and_value_with_the_target_network():
    online = torch.tensor([[0.0, 1.0, 9.0]])
    target = torch.tensor([[5.0, 2.0, 7.0]])
    legal = torch.tensor([[True, True, False]])
    assert double_q_values(online, target, legal).tolist() == [2.0]  # online picks 1 (9 is illegal)
    assert double_q_values(online, target, legal, double_q=False).tolist() == [5.0]


def test_team_rewards_average_or_sum_over_the_present_agents():
    rewards = torch.tensor([[1.0, 2.0, 0.0], [4.0, 0.0, 0.0]])
    alive = torch.tensor([[True, True, False], [True, False, False]])
    assert team_rewards(rewards, alive).tolist() == [1.5, 4.0]
    assert team_rewards(rewards, alive, "sum").tolist() == [3.0, 4.0]


def test_td_targets_bootstrap_only_rows_that_continue():
    y = td_targets(torch.tensor([1.0, 2.0]), torch.tensor([True, False]), torch.tensor([4.0, 100.0]), 0.5)
    assert y.tolist() == [3.0, 2.0]


class Scripted:
    """A StepActing that plays the given actions, step by step."""

    def __init__(self, spec, actions):
        self.spec, self.actions, self.device = spec, actions, torch.device("cpu")

    def weights(self):
        return {}

    def load_weights(self, weights):
        pass

    def act_step(self, obs, step, generators, rows=None):
        return [np.array(self.actions[step], np.int64)]


def _counter_steps():
    # agent_1 terminates when t becomes 1; every remaining agent is truncated when t becomes 2.
    env_fn = functools.partial(counter_v0.parallel_env, num_agents=2, terminate_at={"agent_1": 1}, truncate_at=2)
    env = PettingZooJointEnv(env_fn, num_envs=1, seed=0)
    rollout = LocalCollector(env, seed=0).collect(Scripted(env.spec, [[[1, 2]], [[2, 0]]]), 2)
    transitions = rollout_transitions(env.spec, rollout)
    return [type(transitions)(*(_row(field, t) for field in transitions)) for t in range(2)]


def _row(field, t):
    return tuple(x[t : t + 1] for x in field) if isinstance(field, tuple) else field[t : t + 1]


def test_transitions_of_a_termination_a_dead_agent_and_a_truncation():
    first, second = _counter_steps()
    # Step 1: agent_1 terminated: absent from the next state, its final observation [1] kept as next obs.
    assert first.rewards.tolist() == [[1.0, 2.0]] and first.terminated.tolist() == [[False, True]]
    assert first.next_present.tolist() == [[True, False]] and first.next_deciding.tolist() == [[True, False]]
    assert first.next_obs[0].tolist() == [[[1.0], [1.0]]]
    # Step 2: agent_1 is dead (not present, not deciding); agent_0 is truncated: present in its final state [2]
    # (bootstrapped) although its copy was reset.
    assert second.alive.tolist() == [[True, False]] and second.deciding.tolist() == [[True, False]]
    assert second.truncated.tolist() == [[True, False]] and second.next_present.tolist() == [[True, False]]
    assert second.next_obs[0][0, 0].tolist() == [2.0]


def _constant_vdn(spec, values):
    """VDN whose every Q network (online and target) outputs ``values`` for any observation."""
    config = OffPolicyConfig(hidden_sizes=(4,), double_q=True, gamma=0.5)
    algorithm = ValueDecomposition(spec, config, torch.Generator().manual_seed(0))
    for network in [*algorithm.groups, *algorithm.targets.targets[:-1]]:
        with torch.no_grad():
            network.head.weight.zero_()
            network.head.bias.copy_(torch.tensor(values))
    return algorithm


def test_vdn_targets_by_hand_with_termination_truncation_masks_and_dead_agents():
    env_fn = functools.partial(counter_v0.parallel_env, num_agents=2, num_actions=3)
    spec = PettingZooJointEnv(env_fn, num_envs=1, seed=0).spec
    algorithm = _constant_vdn(spec, [0.0, 1.0, 2.0])
    first, second = _counter_steps()
    batch = type(first)(
        *(
            tuple(torch.cat(p) for p in zip(a, b)) if isinstance(a, tuple) else torch.cat([a, b])
            for a, b in zip(first, second)
        )
    )
    masks = batch.next_masks[0].clone()
    masks[0, 0, 2] = False  # row 0: agent_0's best action is illegal next, so its maximum is 1
    batch = batch._replace(next_masks=(masks,))
    targets = algorithm.targets_of(batch)
    # Row 0: team reward mean(1, 2) = 1.5; only agent_0 is in the next state, its legal maximum 1: 1.5 + 0.5 * 1.
    # Row 1: reward 2 of the one present agent; truncated agent_0 bootstraps its maximum 2: 2 + 0.5 * 2.
    assert targets.tolist() == [2.0, 3.0]
    terminal = batch._replace(next_present=torch.zeros_like(batch.next_present))
    assert algorithm.targets_of(terminal).tolist() == [1.5, 2.0]
    algorithm.reward_scale = RewardScale(0.5)  # scales the reward, not the bootstrap
    assert algorithm.targets_of(batch).tolist() == [1.25, 2.0]
    algorithm.reward_scale = RewardScale("auto")
    algorithm.observe(batch)  # team rewards [1.5, 2.0]: std 0.25, factor 4
    assert algorithm.targets_of(batch).tolist() == [1.5 * 4 + 0.5, 2.0 * 4 + 1.0]


def test_value_methods_refuse_non_discrete_actions():
    from marljoint_envs import identity_v0

    spec = PettingZooJointEnv(functools.partial(identity_v0.parallel_env, action_type="box"), num_envs=1).spec
    with pytest.raises(
        ValueError, match="qmix needs Discrete or MultiDiscrete actions, but agent .agent_0. acts in a Box space"
    ):
        ValueDecomposition(spec, OffPolicyConfig(algorithm="qmix"), torch.Generator())


def test_factored_actions_map_to_and_from_the_product_space():
    nvec = (3, 2, 2)
    actions = torch.tensor([[0, 0, 0], [2, 1, 1], [1, 0, 1]])
    index = encode_actions(actions, nvec)
    assert index.tolist() == [0, 11, 5]
    assert torch.equal(decode_actions(index, nvec), actions)


def test_the_product_mask_allows_a_combination_only_when_every_head_allows_its_choice():
    mask = torch.tensor([[True, False, True, True, False]])  # head 0: {0, 2} of 3; head 1: {0} of 2
    joint = joint_action_mask(mask, (3, 2))
    assert joint.tolist() == [[True, False, False, False, True, False]]
    blocked = torch.tensor([[False, False, False, True, True]])  # a head with no legal choice counts all legal
    assert joint_action_mask(blocked, (3, 2)).all()
