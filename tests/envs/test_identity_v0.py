"""identity_v0: optimal and partial rewards for both variants, truncation, argument checks."""

from __future__ import annotations

import numpy as np
import pytest

from marljoint_envs import identity_v0


def _targets_from_one_hot(observation: np.ndarray, nvec: tuple[int, ...]) -> list[int]:
    return [int(head.argmax()) for head in np.split(observation, np.cumsum(nvec)[:-1])]


def test_multidiscrete_observation_is_one_hot_per_head() -> None:
    env = identity_v0.parallel_env(num_agents=2, nvec=(3, 2))
    obs, _ = env.reset(seed=0)
    for i, agent in enumerate(env.agents):
        observation = obs[agent]
        assert observation.shape == (5,) and observation.dtype == np.float32
        assert observation[:3].sum() == 1.0 and observation[3:].sum() == 1.0
        assert _targets_from_one_hot(observation, (3, 2)) == env.targets[i].tolist()


def test_multidiscrete_reward_is_the_fraction_of_matching_heads() -> None:
    nvec = (3, 2)
    env = identity_v0.parallel_env(num_agents=2, nvec=nvec, episode_length=4)
    obs, _ = env.reset(seed=0)
    target = _targets_from_one_hot(obs["agent_0"], nvec)
    other = _targets_from_one_hot(obs["agent_1"], nvec)
    wrong_second = [target[0], 1 - target[1]]
    rewards = env.step({"agent_0": target, "agent_1": [(other[0] + 1) % 3, 1 - other[1]]})[1]
    assert rewards == {"agent_0": 1.0, "agent_1": 0.0}
    env.reset(seed=0)
    rewards = env.step({"agent_0": wrong_second, "agent_1": other})[1]
    assert rewards == {"agent_0": 0.5, "agent_1": 1.0}


def test_optimal_policy_returns_episode_length_then_truncates() -> None:
    nvec = (4, 3, 2)
    env = identity_v0.parallel_env(num_agents=3, nvec=nvec, episode_length=5)
    obs, _ = env.reset(seed=1)
    total = 0.0
    for step in range(5):
        actions = {agent: _targets_from_one_hot(obs[agent], nvec) for agent in env.agents}
        obs, rewards, terminations, truncations, _ = env.step(actions)
        total += rewards["agent_2"]
        assert not any(terminations.values())
        assert all(truncations.values()) == (step == 4)
    assert total == 5.0 and env.agents == []


def test_box_reward_is_one_minus_a_quarter_of_the_mean_squared_error() -> None:
    env = identity_v0.parallel_env(num_agents=1, action_type="box", box_dim=2)
    obs, _ = env.reset(seed=0)
    target = obs["agent_0"].astype(np.float64)
    assert env.step({"agent_0": target})[1]["agent_0"] == pytest.approx(1.0)
    obs, _ = env.reset(seed=0)
    action = target - 0.5 * np.sign(target)  # each coordinate 0.5 closer to 0, so inside [-1, 1]
    assert env.step({"agent_0": action})[1]["agent_0"] == pytest.approx(1.0 - 0.25 / 4)


def test_box_actions_are_clipped_so_the_reward_stays_in_unit_interval() -> None:
    env = identity_v0.parallel_env(num_agents=1, action_type="box", box_dim=3)
    obs, _ = env.reset(seed=0)
    target = obs["agent_0"].astype(np.float64)
    reward = env.step({"agent_0": np.full(3, 50.0)})[1]["agent_0"]
    assert reward == pytest.approx(1.0 - np.mean((1.0 - target) ** 2) / 4)
    assert 0.0 <= reward <= 1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_agents": 0}, r"num_agents must be an integer >= 1, got 0"),
        ({"nvec": ()}, r"nvec must be a non-empty sequence of integers >= 1"),
        ({"action_type": "discrete"}, r"action_type must be one of 'multidiscrete', 'box', got 'discrete'"),
        ({"episode_length": 0}, r"episode_length must be an integer >= 1, got 0"),
        ({"action_type": "box", "box_dim": 0}, r"box_dim must be an integer >= 1, got 0"),
    ],
)
def test_invalid_arguments_raise(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        identity_v0.parallel_env(**kwargs)


def test_invalid_actions_raise() -> None:
    env = identity_v0.parallel_env(num_agents=1, action_type="box", box_dim=2)
    env.reset()
    with pytest.raises(ValueError, match=r"of agent 'agent_0' must be 2 finite numbers"):
        env.step({"agent_0": [0.0, 0.0, 0.0]})
    with pytest.raises(ValueError, match=r"of agent 'agent_0' must be 2 finite numbers"):
        env.step({"agent_0": [0.0, np.nan]})
    env = identity_v0.parallel_env(num_agents=1, nvec=(3, 2))
    env.reset()
    with pytest.raises(ValueError, match=r"action \[0, 2\] of agent 'agent_0' is not in its action space"):
        env.step({"agent_0": [0, 2]})
