"""MASAC and MADDPG learn small one-step cooperative games, trained by a minimal loop with an in-test replay."""

import gymnasium
import pytest
import torch
import torch.nn.functional as F

from marljoint.offpolicy.sac import SacAlgorithm, SacConfig
from marljoint.policies import clip_member_grads_

AGENTS, ACTIONS, ENVS, BATCH, CAPACITY = 2, 3, 16, 128, 4096


class ReachTargets:
    """Each agent observes its own target in [-1, 1]; the team reward is −mean_i (a_i − t_i)²."""

    space = gymnasium.spaces.Box(-1.0, 1.0, (1,))
    obs_dim = 1

    def reset(self, generator):
        targets = torch.rand(ENVS, AGENTS, 1, generator=generator) * 2 - 1
        return targets, targets, None

    def rewards(self, targets, actions):
        return -(actions - targets).square().mean((1, 2)).unsqueeze(1).expand(-1, AGENTS)


class MatchTargets:
    """Each agent observes a one-hot target among its legal actions (a random mask per step); the team reward is
    the fraction of agents that name their target."""

    space = gymnasium.spaces.Discrete(ACTIONS)
    obs_dim = ACTIONS

    def reset(self, generator):
        targets = torch.randint(ACTIONS, (ENVS, AGENTS), generator=generator)
        masks = torch.rand(ENVS, AGENTS, ACTIONS, generator=generator) < 0.5
        masks.scatter_(-1, targets.unsqueeze(-1), True)
        return F.one_hot(targets, ACTIONS).float(), targets, masks

    def rewards(self, targets, actions):
        return (actions == targets).float().mean(1, keepdim=True).expand(-1, AGENTS)


def _transitions(game, algo, generator):
    obs, targets, masks = game.reset(generator)
    actions = algo.act(obs, masks, explore=True, generator=generator)
    step = {
        "obs": obs,
        "state": obs.flatten(1),
        "actions": actions,
        "rewards": game.rewards(targets, actions),
        "next_obs": obs,
        "next_state": obs.flatten(1),
        "terminated": torch.ones(ENVS, dtype=torch.bool),  # one-step episodes
        "alive": torch.ones(ENVS, AGENTS, dtype=torch.bool),
        "next_alive": torch.ones(ENVS, AGENTS, dtype=torch.bool),
    }
    if masks is not None:
        step["masks"] = step["next_masks"] = masks
    return step


def _train(game, config, updates):
    algo = SacAlgorithm(
        config, num_agents=AGENTS, obs_dim=game.obs_dim, state_dim=AGENTS * game.obs_dim, action_space=game.space
    )
    rates = algo.learning_rates()
    optimizers = [(net, torch.optim.Adam(net.parameters(), lr=rates[name])) for name, net in algo.networks()]
    generator = torch.Generator().manual_seed(0)
    replay: dict[str, torch.Tensor] = {}
    for _ in range(updates):
        step = _transitions(game, algo, generator)
        replay = {key: torch.cat([replay[key], value])[-CAPACITY:] if replay else value for key, value in step.items()}
        rows = torch.randint(len(replay["obs"]), (BATCH,), generator=generator)
        loss, _ = algo.loss({key: value[rows] for key, value in replay.items()})
        for _, optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        for net, optimizer in optimizers:
            clip_member_grads_(net.parameters(), 10.0)
            optimizer.step()
        algo.update_targets()
    return algo


def _greedy(game, algo):
    obs, targets, masks = game.reset(torch.Generator().manual_seed(99))
    return algo.act(obs, masks, explore=False), targets, masks


FAST = {"hidden_sizes": (32, 32), "critic_hidden_sizes": (32, 32), "actor_lr": 3e-3, "critic_lr": 3e-3}
# MADDPG's deterministic actors run to the bounds of the action space when the critic is too coarse to show the
# curvature of the reward there: a wider critic, a slower actor and wider exploration noise.
MADDPG = {"hidden_sizes": (32, 32), "critic_hidden_sizes": (64, 64), "actor_lr": 1e-3, "critic_lr": 3e-3}


@pytest.mark.parametrize(
    ("variant", "settings", "updates"),
    [("masac", {"alpha_lr": 3e-3, **FAST}, 250), ("maddpg", {"exploration_noise": 0.3, **MADDPG}, 400)],
    ids=["masac", "maddpg"],
)
def test_learns_to_reach_continuous_targets(variant, settings, updates):
    game = ReachTargets()
    algo = _train(game, SacConfig(variant=variant, **settings), updates)
    actions, targets, _ = _greedy(game, algo)
    # A policy that ignores its target is off by 0.58 on average; the untrained one by about as much.
    assert (actions - targets).abs().mean() < 0.15


@pytest.mark.parametrize("variant", ["masac", "maddpg"])
def test_learns_to_match_discrete_targets_among_legal_actions(variant):
    game = MatchTargets()
    algo = _train(game, SacConfig(variant=variant, alpha_lr=3e-3, init_alpha=0.05, **FAST), updates=300)
    actions, targets, masks = _greedy(game, algo)
    assert masks.gather(-1, actions.unsqueeze(-1)).all()
    # Guessing among the legal actions is right about half the time.
    assert (actions == targets).float().mean() > 0.9
