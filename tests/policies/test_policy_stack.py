"""PolicyStack: many frozen members of one seat acting as one batched computation, each row under its own member."""

import numpy as np
import pytest
import torch

from marljoint import PettingZooJointEnv
from marljoint.best_response.opponents import MetaStrategyAssigner, PopulationEnv
from marljoint.best_response.population import ConstantPolicy
from marljoint.env.spaces import ActionLayout, ObservationLayout
from marljoint.policies import ActorCritic, AgentPolicy, PolicyStack
from marljoint_envs import matrix_game_v0

OBS = ObservationLayout("flat", (6,), np.dtype(np.float32))
DISCRETE = ActionLayout("discrete", (4,), ())
MULTI = ActionLayout("multidiscrete", (3, 2), (2,))
BOX = ActionLayout("box", (), (2,), low=np.full(2, -1.0, np.float32), high=np.full(2, 1.0, np.float32))


def members(action=DISCRETE, shared=False, count=4, normalise=False, hidden=(16, 8), agents=3):
    """``count`` AgentPolicy of different networks and slots, with non-zero biases and head weights (the
    initial ones are zero or tiny, which would hide a misplaced bias or head)."""
    out = []
    for k in range(count):
        net = ActorCritic(
            OBS, action, agents, shared, hidden, normalize_observations=normalise,
            generator=torch.Generator().manual_seed(k),
        )
        with torch.no_grad():
            g = torch.Generator().manual_seed(100 + k)
            for layer in [*net.encoder.layers, net.actor_head]:
                layer.bias.normal_(generator=g)
            net.actor_head.weight.normal_(generator=g)
            if net.log_std is not None:
                net.log_std.normal_(generator=g)
            if normalise:
                data = torch.randn(64, net.members, OBS.size, generator=g) * (k + 1) + k
                net.obs_normalizer.update(data, torch.ones(64, net.members, dtype=torch.bool))
        out.append(AgentPolicy(net, slot=k % agents))
    return out


@pytest.mark.parametrize("shared", [False, True], ids=["stacked", "shared"])
@pytest.mark.parametrize("normalise", [False, True], ids=["raw", "normalised"])
@pytest.mark.parametrize("action", [DISCRETE, MULTI], ids=["discrete", "multidiscrete"])
def test_each_row_gets_its_own_members_probabilities(shared, normalise, action):
    policies = members(action, shared, normalise=normalise)
    stack = PolicyStack(policies)
    which = torch.tensor([3, 0, 2, 2, 1, 0, 3])
    obs = torch.randn(len(which), OBS.size, generator=torch.Generator().manual_seed(1)) * 3
    mask = torch.ones(len(which), action.mask_size, dtype=torch.bool)
    mask[0, 1] = mask[3, 0] = False
    got = stack.distribution(which, obs, mask).head_probs()
    for row, member in enumerate(which.tolist()):
        want = policies[member].action_probs(obs[row : row + 1], mask[row : row + 1])
        for head_got, head_want in zip(got, want):
            torch.testing.assert_close(head_got[row], head_want[0], rtol=1e-5, atol=1e-6)
    modes = stack.act(which, obs, torch.Generator(), mask, deterministic=True)
    for row, member in enumerate(which.tolist()):
        want_mode = policies[member].act(obs[row : row + 1], torch.Generator(), mask[row : row + 1], True)
        assert torch.equal(modes[row], want_mode[0])


def test_box_members_keep_their_means_and_log_std():
    policies = members(BOX)
    which = torch.tensor([1, 3, 0])
    obs = torch.randn(3, OBS.size, generator=torch.Generator().manual_seed(2))
    dist = PolicyStack(policies).distribution(which, obs)
    actions = torch.randn(3, 2, generator=torch.Generator().manual_seed(3))
    for row, member in enumerate(which.tolist()):
        want = policies[member].distribution(obs[row : row + 1])
        torch.testing.assert_close(dist.log_prob(actions)[row], want.log_prob(actions[row : row + 1])[0])


def test_sampling_follows_each_rows_member():
    policies = members(count=3)
    with torch.no_grad():  # member k plays action k almost surely
        for k, policy in enumerate(policies):
            policy.network.actor_head.weight.zero_()
            policy.network.actor_head.bias.zero_()
            policy.network.actor_head.bias[:, k] = 30.0
    which = torch.tensor([2, 0, 1, 1, 2, 0] * 50)
    actions = PolicyStack(policies).act(which, torch.randn(len(which), OBS.size), torch.Generator().manual_seed(0))
    assert torch.equal(actions, which)


def test_the_stack_keeps_the_weights_it_was_built_with():
    policies = members(count=2)
    obs = torch.randn(2, OBS.size)
    stack = PolicyStack(policies)
    before = stack.distribution(torch.tensor([0, 1]), obs).head_probs()[0]
    with torch.no_grad():
        policies[0].network.actor_head.bias.add_(5.0)
    torch.testing.assert_close(stack.distribution(torch.tensor([0, 1]), obs).head_probs()[0], before)


def test_what_stacks_and_what_is_refused():
    assert PolicyStack.stackable(members(count=2))
    assert not PolicyStack.stackable(members(count=1))  # one member gains nothing
    assert not PolicyStack.stackable([*members(count=1), *members(hidden=(16,), count=1)])
    assert not PolicyStack.stackable([*members(count=1), *members(shared=True, count=1)])
    recurrent = ActorCritic(OBS, DISCRETE, 3, False, (16, 8), recurrent="gru")
    assert not PolicyStack.stackable([*members(count=1), AgentPolicy(recurrent, 0)])
    with pytest.raises(ValueError, match="at least one policy"):
        PolicyStack([])
    with pytest.raises(ValueError, match="policy 1 .*does not stack with policy 0"):
        PolicyStack([*members(count=1), AgentPolicy(recurrent, 0)])
    with pytest.raises(ValueError, match="policy 1 .*does not stack"):
        PolicyStack([*members(count=1), object()])
    with pytest.raises(IndexError, match="out of range for a stack of 2"):
        PolicyStack(members(count=2)).distribution(torch.tensor([0, 2]), torch.zeros(2, OBS.size))


def test_the_largest_set_that_stacks_is_stacked():
    policies = [*members(count=2), ConstantPolicy([np.ones(4) / 4]), *members(hidden=(16,), count=3)]
    stack, position = PolicyStack.largest(policies)
    assert stack is not None and stack.size == 3
    assert position.tolist() == [-1, -1, -1, 0, 1, 2]
    stack, position = PolicyStack.largest([ConstantPolicy([np.ones(4) / 4]), *members(count=1)])
    assert stack is None and position.tolist() == [-1, -1]


def test_population_env_plays_each_copy_with_its_drawn_member():
    """Rock-paper-scissors: seat 0 mixes a tabular member (always scissors) and three networks (member k + 1 always
    plays k, stacked); seat 1 always plays rock. Each episode's return follows its drawn controller."""
    env = PettingZooJointEnv(lambda: matrix_game_v0.parallel_env(game="rps"), num_envs=64, seed=0)
    group = env.spec.groups[0]
    seat = [ConstantPolicy([np.eye(3)[2]])]
    for k in range(3):
        net = ActorCritic(group.observation, group.action, 2, False, (8,), generator=torch.Generator().manual_seed(k))
        with torch.no_grad():
            net.actor_head.weight.zero_()
            net.actor_head.bias.zero_()
            net.actor_head.bias[:, k] = 30.0
        seat.append(AgentPolicy(net, slot=0))
    rock = AgentPolicy(seat[1].network, 1)
    wrapped = PopulationEnv(env, [seat, [rock]], MetaStrategyAssigner([np.ones(4) / 4, [1.0]]))
    assert wrapped._stack(0)[1].tolist() == [-1, 0, 1, 2] and wrapped._stack(1)[0] is None
    wrapped.reset(seed=0)
    for _ in range(4):
        wrapped.step(None)
    episodes = wrapped.drain_log()
    assert len(episodes) == 4 * 64
    # Against rock: scissors (members 0 and 3) loses, rock (1) ties, paper (2) wins.
    for episode in episodes:
        assert episode.returns[0] == {0: -1.0, 1: 0.0, 2: 1.0, 3: -1.0}[int(episode.controllers[0])]
    assert {int(e.controllers[0]) for e in episodes} == {0, 1, 2, 3}
