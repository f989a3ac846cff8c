"""memory_v0: the observation sequence, rewards only at the decision step, termination, seeding, the memoryless
baseline, argument and action checks."""

from __future__ import annotations

import numpy as np
import pytest

from marljoint_envs import memory_v0


def _cues(obs: dict[str, np.ndarray], num_cues: int) -> dict[str, int]:
    return {agent: int(observation[:num_cues].argmax()) for agent, observation in obs.items()}


def _cue_draws(seed: int, resets: int) -> list[list[int]]:
    env = memory_v0.parallel_env(num_agents=3, num_cues=4)
    draws = [env.reset(seed=seed)[0]]
    draws += [env.reset()[0] for _ in range(resets - 1)]
    return [list(_cues(obs, 4).values()) for obs in draws]


def test_observations_show_the_cue_then_zeros_then_the_act_now_flag() -> None:
    env = memory_v0.parallel_env(num_agents=3, num_cues=5, delay=4)
    obs, infos = env.reset(seed=0)
    assert infos == {"agent_0": {}, "agent_1": {}, "agent_2": {}}
    for i, agent in enumerate(env.possible_agents):
        expected = np.zeros(6, dtype=np.float32)
        expected[env.cues[i]] = 1.0
        assert obs[agent].dtype == np.float32
        np.testing.assert_array_equal(obs[agent], expected)
    for _ in range(3):
        obs = env.step(dict.fromkeys(env.agents, 0))[0]
        for agent in env.possible_agents:
            np.testing.assert_array_equal(obs[agent], np.zeros(6, dtype=np.float32))
    obs = env.step(dict.fromkeys(env.agents, 0))[0]
    for agent in env.possible_agents:
        np.testing.assert_array_equal(obs[agent], [0, 0, 0, 0, 0, 1])


def test_each_agent_sees_its_own_cue() -> None:
    env = memory_v0.parallel_env(num_agents=4, num_cues=3)
    for seed in range(5):
        obs, _ = env.reset(seed=seed)
        assert list(_cues(obs, 3).values()) == env.cues.tolist()
        assert all(observation[:3].sum() == 1.0 and observation[3] == 0.0 for observation in obs.values())


def test_reward_only_at_the_decision_step_and_only_for_the_cue() -> None:
    env = memory_v0.parallel_env(num_agents=2, num_cues=4, delay=3)
    obs, _ = env.reset(seed=1)
    cues = _cues(obs, 4)
    wrong = {agent: (cue + 1) % 4 for agent, cue in cues.items()}
    for _ in range(3):
        # Naming the cue before the decision step earns nothing.
        assert env.step(cues)[1] == {"agent_0": 0.0, "agent_1": 0.0}
    rewards = env.step({"agent_0": cues["agent_0"], "agent_1": wrong["agent_1"]})[1]
    assert rewards == {"agent_0": 1.0, "agent_1": 0.0}
    assert all(isinstance(reward, float) for reward in rewards.values())


def test_episode_lasts_delay_plus_one_steps_and_then_terminates_everyone() -> None:
    for delay in (1, 2, 6):
        env = memory_v0.parallel_env(num_agents=2, delay=delay)
        env.reset(seed=delay)
        for step in range(delay + 1):
            assert env.agents == ["agent_0", "agent_1"]
            _, _, terminations, truncations, infos = env.step(dict.fromkeys(env.agents, 0))
            assert terminations == dict.fromkeys(env.possible_agents, step == delay)
            assert truncations == dict.fromkeys(env.possible_agents, False)
            assert set(infos) == set(env.possible_agents)
        assert env.agents == []
        with pytest.raises(RuntimeError, match=r"memory_v0: step\(\) was called after the episode ended"):
            env.step(dict.fromkeys(env.possible_agents, 0))


def test_same_seed_gives_the_same_cues_and_different_seeds_differ() -> None:
    assert _cue_draws(seed=7, resets=6) == _cue_draws(seed=7, resets=6)
    assert _cue_draws(seed=7, resets=6) != _cue_draws(seed=8, resets=6)
    draws = _cue_draws(seed=7, resets=6)
    assert len({tuple(draw) for draw in draws}) > 1, "reset() without a seed must draw new cues"


def test_recalling_the_cue_is_optimal_and_a_constant_policy_gets_chance() -> None:
    num_cues, delay, episodes = 4, 2, 500
    env = memory_v0.parallel_env(num_agents=2, num_cues=num_cues, delay=delay)
    recall, constant = [], []
    for seed in range(episodes):
        for returns, policy in ((recall, "recall"), (constant, "constant")):
            obs, _ = env.reset(seed=seed)
            cues = _cues(obs, num_cues)
            total = dict.fromkeys(env.possible_agents, 0.0)
            while env.agents:
                actions = cues if policy == "recall" else dict.fromkeys(env.agents, 0)
                rewards = env.step(actions)[1]
                total = {agent: total[agent] + rewards[agent] for agent in total}
            returns += total.values()
    assert np.mean(recall) == memory_v0.optimal_return(num_cues=num_cues, delay=delay) == 1.0
    # 1000 returns of a Bernoulli(1/4): standard error 0.014, so 0.05 is more than three of them.
    assert np.mean(constant) == pytest.approx(memory_v0.chance_return(num_cues=num_cues, delay=delay), abs=0.05)


def test_return_helpers() -> None:
    assert memory_v0.optimal_return() == 1.0
    assert memory_v0.chance_return() == 0.25
    assert memory_v0.chance_return(num_cues=5, num_agents=3, delay=2) == 0.2
    with pytest.raises(ValueError, match=r"num_cues must be an integer >= 2, got 1"):
        memory_v0.chance_return(num_cues=1)
    with pytest.raises(ValueError, match=r"delay must be an integer >= 1, got 0"):
        memory_v0.optimal_return(delay=0)


def test_spaces_and_render() -> None:
    env = memory_v0.parallel_env(num_agents=2, num_cues=3, delay=2, render_mode="ansi")
    assert env.possible_agents == ["agent_0", "agent_1"]
    assert env.observation_space("agent_1").shape == (4,) and env.observation_space("agent_1").dtype == np.float32
    assert env.action_space("agent_0").n == 3
    env.reset(seed=0)
    assert env.render() == f"memory_v0 t=0/2 cues={env.cues.tolist()}"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_agents": 0}, r"num_agents must be an integer >= 1, got 0"),
        ({"num_cues": 1}, r"num_cues must be an integer >= 2, got 1"),
        ({"delay": 0}, r"delay must be an integer >= 1, got 0"),
        ({"delay": 2.0}, r"delay must be an integer >= 1, got 2.0"),
    ],
)
def test_invalid_arguments_raise(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        memory_v0.parallel_env(**kwargs)


@pytest.mark.parametrize("action", [4, -1, 1.0, True, [0]])
def test_invalid_actions_raise_on_every_step(action) -> None:
    env = memory_v0.parallel_env(num_agents=2, num_cues=4, delay=1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"of agent 'agent_1' is not in its action space Discrete\(4\)"):
        env.step({"agent_0": 0, "agent_1": action})
    env.step({"agent_0": 0, "agent_1": 0})
    with pytest.raises(ValueError, match=r"of agent 'agent_1' is not in its action space Discrete\(4\)"):
        env.step({"agent_0": 0, "agent_1": action})
