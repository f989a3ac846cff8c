"""mock_v0: the shared sinusoidal observation, one-hot observations, summed rewards, truncation."""

from __future__ import annotations

import numpy as np
import pytest

from marljoint_envs import mock_v0


def test_observation_is_a_shared_function_of_the_step_counter() -> None:
    env = mock_v0.parallel_env(num_agents=3, obs_dim=4)
    obs, _ = env.reset(seed=0)
    expected_t0 = np.sin(0.1 * 1 * np.arange(1, 5)).astype(np.float32)
    for observation in obs.values():
        np.testing.assert_array_equal(observation, expected_t0)
        assert observation.dtype == np.float32
    env.step(dict.fromkeys(env.agents, 0))
    obs, *_ = env.step(dict.fromkeys(env.agents, 0))
    expected_t2 = np.sin(0.1 * 3 * np.arange(1, 5)).astype(np.float32)
    for observation in obs.values():
        np.testing.assert_array_equal(observation, expected_t2)


def test_agents_get_independent_observation_arrays() -> None:
    env = mock_v0.parallel_env(num_agents=2)
    obs, _ = env.reset()
    obs["agent_0"][:] = 7.0
    assert obs["agent_1"].max() <= 1.0


def test_one_hot_observation_is_the_agent_index() -> None:
    env = mock_v0.parallel_env(num_agents=3, obs_dim=9, one_hot_obs=True)
    obs, _ = env.reset()
    assert {a: o.tolist() for a, o in obs.items()} == {
        "agent_0": [1.0, 0.0, 0.0],
        "agent_1": [0.0, 1.0, 0.0],
        "agent_2": [0.0, 0.0, 1.0],
    }
    obs, *_ = env.step(dict.fromkeys(env.agents, 1))
    assert obs["agent_2"].tolist() == [0.0, 0.0, 1.0]


def test_reward_is_the_sum_of_all_actions_over_ten() -> None:
    env = mock_v0.parallel_env(num_agents=3, num_actions=3)
    env.reset()
    rewards = env.step({"agent_0": 2, "agent_1": 2, "agent_2": 1})[1]
    assert rewards == {"agent_0": 0.5, "agent_1": 0.5, "agent_2": 0.5}


def test_multidiscrete_actions_count_the_sum_of_their_components() -> None:
    env = mock_v0.parallel_env(num_agents=2, nvec=(3, 2))
    env.reset()
    assert str(env.action_space("agent_0")) == "MultiDiscrete([3 2])"
    rewards = env.step({"agent_0": np.array([2, 1]), "agent_1": [1, 0]})[1]
    assert rewards == {"agent_0": 0.4, "agent_1": 0.4}


def test_never_terminates_and_truncates_at_max_cycles() -> None:
    env = mock_v0.parallel_env(num_agents=2, max_cycles=3)
    env.reset()
    for _ in range(2):
        _, _, terminations, truncations, _ = env.step(dict.fromkeys(env.agents, 0))
        assert not any(terminations.values()) and not any(truncations.values())
    _, _, terminations, truncations, _ = env.step(dict.fromkeys(env.agents, 0))
    assert terminations == {"agent_0": False, "agent_1": False}
    assert truncations == {"agent_0": True, "agent_1": True}
    assert env.agents == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_agents": 0}, r"num_agents must be an integer >= 1, got 0"),
        ({"obs_dim": 0}, r"obs_dim must be an integer >= 1, got 0"),
        ({"num_actions": 0}, r"num_actions must be an integer >= 1, got 0"),
        ({"nvec": ()}, r"nvec must be a non-empty sequence of integers >= 1"),
        ({"nvec": (3, 0)}, r"nvec must be a non-empty sequence of integers >= 1 .* got \(3, 0\)"),
        ({"nvec": (2.5,)}, r"nvec must be a non-empty sequence of integers >= 1"),
        ({"nvec": [[2, 2]]}, r"nvec must be a non-empty sequence of integers >= 1"),
        ({"max_cycles": 0}, r"max_cycles must be an integer >= 1, got 0"),
    ],
)
def test_invalid_arguments_raise(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        mock_v0.parallel_env(**kwargs)


def test_invalid_actions_raise() -> None:
    env = mock_v0.parallel_env(num_agents=1, nvec=(3, 2))
    env.reset()
    with pytest.raises(ValueError, match=r"action \[3, 0\] of agent 'agent_0' is not in its action space"):
        env.step({"agent_0": [3, 0]})
    with pytest.raises(ValueError, match=r"pass integers of shape \(2,\)"):
        env.step({"agent_0": 1})
