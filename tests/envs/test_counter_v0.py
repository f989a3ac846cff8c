"""counter_v0: every output stated as a literal."""

from __future__ import annotations

import math

import numpy as np
import pytest

from marljoint_envs import counter_v0


def _values(observations: dict) -> dict:
    return {agent: observation.tolist() for agent, observation in observations.items()}


def test_reset_observes_zero_and_steps_count_up() -> None:
    env = counter_v0.parallel_env(num_agents=2, num_actions=3)
    obs, infos = env.reset(seed=0)
    assert _values(obs) == {"agent_0": [0.0], "agent_1": [0.0]}
    assert infos == {"agent_0": {}, "agent_1": {}}
    assert all(o.dtype == np.float32 for o in obs.values())
    obs, rewards, terminations, truncations, infos = env.step({"agent_0": 2, "agent_1": 0})
    assert _values(obs) == {"agent_0": [1.0], "agent_1": [1.0]}
    assert rewards == {"agent_0": 2.0, "agent_1": 0.0}
    assert terminations == {"agent_0": False, "agent_1": False}
    assert truncations == {"agent_0": False, "agent_1": False}
    assert infos == {"agent_0": {}, "agent_1": {}}
    obs, rewards, *_ = env.step({"agent_0": np.int64(1), "agent_1": np.array(2)})
    assert _values(obs) == {"agent_0": [2.0], "agent_1": [2.0]}
    assert rewards == {"agent_0": 1.0, "agent_1": 2.0}


def test_schedule_removes_terminated_then_truncates_the_rest() -> None:
    env = counter_v0.parallel_env(num_agents=3, terminate_at={"agent_1": 2}, truncate_at=3)
    env.reset(seed=0)
    actions = {"agent_0": 0, "agent_1": 1, "agent_2": 2}

    assert env.step(actions)[2] == {"agent_0": False, "agent_1": False, "agent_2": False}
    obs, rewards, terminations, truncations, _ = env.step(actions)
    assert _values(obs) == {"agent_0": [2.0], "agent_1": [2.0], "agent_2": [2.0]}
    assert rewards == {"agent_0": 0.0, "agent_1": 1.0, "agent_2": 2.0}
    assert terminations == {"agent_0": False, "agent_1": True, "agent_2": False}
    assert truncations == {"agent_0": False, "agent_1": False, "agent_2": False}
    assert env.agents == ["agent_0", "agent_2"]

    obs, rewards, terminations, truncations, _ = env.step({"agent_0": 1, "agent_2": 1})
    assert _values(obs) == {"agent_0": [3.0], "agent_2": [3.0]}
    assert rewards == {"agent_0": 1.0, "agent_2": 1.0}
    assert terminations == {"agent_0": False, "agent_2": False}
    assert truncations == {"agent_0": True, "agent_2": True}
    assert env.agents == []


def test_termination_wins_over_truncation_on_the_same_step() -> None:
    env = counter_v0.parallel_env(num_agents=2, terminate_at=1, truncate_at=1)
    env.reset()
    _, _, terminations, truncations, _ = env.step({"agent_0": 0, "agent_1": 0})
    assert terminations == {"agent_0": True, "agent_1": True}
    assert truncations == {"agent_0": False, "agent_1": False}


def test_constant_reward_ignores_the_action() -> None:
    env = counter_v0.parallel_env(num_agents=2, constant_reward=-0.5)
    env.reset()
    assert env.step({"agent_0": 2, "agent_1": 0})[1] == {"agent_0": -0.5, "agent_1": -0.5}


def test_reset_restarts_the_count_and_the_agents() -> None:
    env = counter_v0.parallel_env(num_agents=2, terminate_at={"agent_0": 1})
    env.reset()
    env.step({"agent_0": 0, "agent_1": 0})
    obs, _ = env.reset()
    assert env.agents == ["agent_0", "agent_1"]
    assert _values(obs) == {"agent_0": [0.0], "agent_1": [0.0]}


def test_actions_of_other_agents_are_ignored() -> None:
    env = counter_v0.parallel_env(num_agents=2, terminate_at={"agent_1": 1})
    env.reset()
    env.step({"agent_0": 0, "agent_1": 0})
    assert env.step({"agent_0": 1, "agent_1": 2, "agent_9": 0})[1] == {"agent_0": 1.0}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_agents": 0}, r"num_agents must be an integer >= 1, got 0"),
        ({"num_agents": True}, r"num_agents must be an integer >= 1, got True"),
        ({"num_actions": 0}, r"num_actions must be an integer >= 1, got 0"),
        ({"terminate_at": 0}, r"terminate_at must be an integer >= 1, got 0"),
        ({"terminate_at": {"agent_0": 0}}, r"terminate_at\['agent_0'\] must be an integer >= 1, got 0"),
        ({"terminate_at": {"agent_7": 2}}, r"terminate_at names unknown agents \['agent_7'\]"),
        ({"terminate_at": "soon"}, r"terminate_at must be None, an integer >= 1 or a dict"),
        ({"truncate_at": -1}, r"truncate_at must be an integer >= 1, got -1"),
        ({"constant_reward": math.nan}, r"constant_reward must be a finite real number, got nan"),
        ({"constant_reward": "1"}, r"constant_reward must be a finite real number, got '1'"),
    ],
)
def test_invalid_arguments_raise(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        counter_v0.parallel_env(**kwargs)


def test_invalid_steps_raise() -> None:
    env = counter_v0.parallel_env(num_agents=2, num_actions=3, terminate_at=1)
    env.reset()
    with pytest.raises(
        ValueError, match=r"action 3 of agent 'agent_0' is not in its action space Discrete\(3\)"
    ):
        env.step({"agent_0": 3, "agent_1": 0})
    with pytest.raises(ValueError, match=r"action 1.0 of agent 'agent_0' is not in its action space"):
        env.step({"agent_0": 1.0, "agent_1": 0})
    with pytest.raises(ValueError, match=r"no action for live agents \['agent_1'\]"):
        env.step({"agent_0": 0})
    env.step({"agent_0": 0, "agent_1": 0})
    with pytest.raises(
        RuntimeError, match=r"step\(\) was called after the episode ended; call reset\(\) first"
    ):
        env.step({"agent_0": 0, "agent_1": 0})
