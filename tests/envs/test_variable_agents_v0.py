"""variable_agents_v0: the leave/join schedule, step by step."""

from __future__ import annotations

import pytest

from marljoint_envs import variable_agents_v0


def test_default_schedule() -> None:
    env = variable_agents_v0.parallel_env()
    obs, _ = env.reset(seed=0)
    assert env.agents == ["agent_0", "agent_1"]
    assert obs["agent_1"].tolist() == [0.0, 0.5, pytest.approx(2 / 3)]
    seen = []
    for t in range(1, 11):
        obs, rewards, terminations, truncations, infos = env.step(dict.fromkeys(env.agents, 1))
        seen.append(
            (
                t,
                sorted(obs),
                sorted(k for k, v in terminations.items() if v),
                sorted(k for k, v in truncations.items() if v),
                list(env.agents),
            )
        )
        assert set(obs) == set(rewards) == set(terminations) == set(truncations) == set(infos)
        if t == 3:
            assert rewards["agent_2"] == 0.0  # joined this step without acting
    assert seen == [
        (1, ["agent_0", "agent_1"], [], [], ["agent_0", "agent_1"]),
        (2, ["agent_0", "agent_1"], [], [], ["agent_0", "agent_1"]),
        (3, ["agent_0", "agent_1", "agent_2"], [], [], ["agent_0", "agent_1", "agent_2"]),
        (4, ["agent_0", "agent_1", "agent_2"], ["agent_1"], [], ["agent_0", "agent_2"]),
        (5, ["agent_0", "agent_2"], [], [], ["agent_0", "agent_2"]),
        (6, ["agent_0", "agent_2"], [], [], ["agent_0", "agent_2"]),
        (7, ["agent_0", "agent_2"], [], [], ["agent_0", "agent_2"]),
        (8, ["agent_0", "agent_2"], [], [], ["agent_0", "agent_2"]),
        (9, ["agent_0", "agent_2"], [], [], ["agent_0", "agent_2"]),
        (10, ["agent_0", "agent_2"], ["agent_0"], ["agent_2"], []),
    ]


def test_observation_and_reward_values() -> None:
    env = variable_agents_v0.parallel_env(episode_length=4, death_step=2, join_step=1)
    env.reset()
    obs, rewards, *_ = env.step({"agent_0": 1, "agent_1": 0})
    assert rewards == {"agent_0": 1.0, "agent_1": 0.0, "agent_2": 0.0}
    assert obs["agent_2"].tolist() == [0.25, 1.0, 1.0]
    obs, rewards, *_ = env.step({"agent_0": 0, "agent_1": 1, "agent_2": 1})
    assert rewards == {"agent_0": 0.0, "agent_1": 1.0, "agent_2": 1.0}
    assert obs["agent_1"].tolist() == [0.5, 0.5, pytest.approx(2 / 3)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"episode_length": 1}, r"episode_length must be an integer >= 2, got 1"),
        ({"death_step": 0}, r"death_step must be an integer in \[1, 10\], got 0"),
        ({"death_step": 11}, r"death_step must be an integer in \[1, 10\], got 11"),
        ({"join_step": 0}, r"join_step must be an integer in \[1, 9\], got 0"),
        ({"join_step": 10}, r"join_step must be an integer in \[1, 9\], got 10"),
    ],
)
def test_invalid_schedule_raises(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        variable_agents_v0.parallel_env(**kwargs)


def test_action_of_a_live_agent_is_checked() -> None:
    env = variable_agents_v0.parallel_env()
    env.reset()
    with pytest.raises(
        ValueError, match=r"action 2 of agent 'agent_1' is not in its action space Discrete\(2\)"
    ):
        env.step({"agent_0": 0, "agent_1": 2})
