"""bucket_brigade_v0: fire dynamics, rewards on hand-made states, episode end, observations, scenarios,
baselines."""

from __future__ import annotations

import numpy as np
import pytest

from marljoint_envs import bucket_brigade_v0 as bb
from marljoint_envs.bucket_brigade_v0 import BURNING, RUINED, SAFE, BucketBrigadeParams

# Deterministic dynamics: no spontaneous fires, no spread, and one worker always extinguishes.
CERTAIN = {"beta": 0.0, "kappa": 1.0, "p_ignite": 0.0}


def _night(houses: list[int], workers: list[int], **params) -> tuple[list[int], list[bool]]:
    config = BucketBrigadeParams(num_agents=1, num_houses=len(houses), **params)
    dawn, saved = bb.simulate_night(np.array(houses), np.array(workers), config, np.random.default_rng(0))
    return dawn.tolist(), saved.tolist()


def _town_after(beta: float, nights: int) -> np.ndarray:
    env = bb.parallel_env(num_agents=2, num_houses=6, beta=beta, kappa=0.0, p_ignite=0.0, min_nights=0)
    env.reset(seed=0, options={"houses": [1, 0, 0, 0, 0, 0]})
    for _ in range(nights):
        if not env.agents:
            break
        env.step({agent: [0, 0, 0] for agent in env.agents})
    return env.houses


def test_beta_matters() -> None:
    assert np.sum(_town_after(beta=0.0, nights=6) == RUINED) == 1
    assert np.sum(_town_after(beta=1.0, nights=6) == RUINED) == 6


def test_fire_spreads_before_burning_out_and_new_fires_wait_a_night() -> None:
    dawn, saved = _night([1, 0, 0, 0, 0], [0] * 5, beta=1.0, kappa=0.0, p_ignite=0.0)
    assert dawn == [RUINED, BURNING, SAFE, SAFE, BURNING]
    assert saved == [False] * 5
    dawn, _ = _night(dawn, [0] * 5, beta=1.0, kappa=0.0, p_ignite=0.0)
    assert dawn == [RUINED, RUINED, BURNING, BURNING, RUINED]


def test_extinguished_house_can_catch_fire_again_from_a_neighbour() -> None:
    dawn, saved = _night([1, 1, 0, 0], [1, 0, 0, 0], beta=1.0, kappa=1.0, p_ignite=0.0)
    assert saved == [True, False, False, False]
    assert dawn == [BURNING, RUINED, BURNING, SAFE]


def test_extinguish_probability_grows_with_workers() -> None:
    houses = np.full(20000, BURNING)
    config = BucketBrigadeParams(num_agents=1, num_houses=houses.size, beta=0.0, kappa=0.5, p_ignite=0.0)
    rng = np.random.default_rng(0)
    for workers, expected in [(0, 0.0), (1, 0.5), (2, 0.75), (3, 0.875)]:
        _, saved = bb.simulate_night(houses, np.full(houses.size, workers), config, rng)
        assert saved.mean() == pytest.approx(expected, abs=0.015)


def test_spontaneous_ignition_only_hits_safe_houses() -> None:
    dawn, _ = _night([0, 2, 0, 2], [0] * 4, beta=0.0, kappa=0.0, p_ignite=1.0)
    assert dawn == [BURNING, RUINED, BURNING, RUINED]


def test_rewards_on_a_hand_made_state() -> None:
    # Owners: house 0 -> agent_0, 1 -> agent_1, 2 -> agent_0, 3 -> agent_1.
    env = bb.parallel_env(num_agents=2, num_houses=4, min_nights=5, **CERTAIN)
    env.reset(seed=0, options={"houses": [BURNING, BURNING, RUINED, SAFE]})
    obs, rewards, terminations, truncations, _ = env.step({"agent_0": [0, 1, 1], "agent_1": [3, 0, 0]})
    assert env.houses.tolist() == [SAFE, RUINED, RUINED, SAFE]
    team = 100 * 2 / 4 - 100 * 2 / 4
    assert rewards == {
        # works (-0.5), own house 0 saved (+20), own house 2 ruined (-40), other house 1 ruined (-20)
        "agent_0": -0.5 + 20 - 40 - 20 + team,
        # rests (+0.25), other house 0 saved (+10), own house 1 ruined (-40), other house 2 ruined (-20)
        "agent_1": 0.25 + 10 - 40 - 20 + team,
    }
    assert terminations == {"agent_0": False, "agent_1": False}
    assert truncations == {"agent_0": False, "agent_1": False}

    slices = bb.observation_slices(2, 4)
    observation = obs["agent_1"]
    assert observation[slices["houses"]].reshape(4, 3).argmax(axis=1).tolist() == [SAFE, RUINED, RUINED, SAFE]
    assert observation[slices["agent_id"]].tolist() == [0, 1]
    assert observation[slices["positions"]].reshape(2, 4).tolist() == [[1, 0, 0, 0], [0, 0, 0, 1]]
    assert observation[slices["modes"]].tolist() == [1, 0]
    assert observation[slices["signals"]].tolist() == [1, 0]
    assert observation[slices["progress"]].tolist() == [pytest.approx(1 / 100)]


def test_night_rewards_team_term_and_custom_rest_reward() -> None:
    params = BucketBrigadeParams(
        num_agents=2,
        num_houses=4,
        rest_reward=1.0,
        team_survive=8.0,
        team_burn=4.0,
        own_save_bonus=0.0,
        other_save_bonus=0.0,
        own_ruin_penalty=0.0,
        other_ruin_penalty=0.0,
    )
    dawn = np.array([SAFE, SAFE, SAFE, RUINED])
    rewards = bb.night_rewards(dawn, np.zeros(4, bool), np.array([True, False]), params)
    assert rewards.tolist() == [-0.5 + 8 * 3 / 4 - 4 * 1 / 4, 1.0 + 8 * 3 / 4 - 4 * 1 / 4]


def test_rest_reward_defaults_to_half_the_work_cost() -> None:
    assert BucketBrigadeParams().rest_reward == 0.25
    assert BucketBrigadeParams(work_cost=0.2).rest_reward == pytest.approx(0.1)
    assert bb.parallel_env("rest_trap").params.rest_reward == pytest.approx(0.1)
    assert bb.parallel_env("rest_trap", rest_reward=0.0).params.rest_reward == 0.0


def test_episode_terminates_once_settled_after_min_nights() -> None:
    env = bb.parallel_env(num_agents=1, num_houses=3, min_nights=3, **CERTAIN)
    env.reset(options={"houses": [BURNING, SAFE, SAFE]})
    flags = []
    for _ in range(3):
        _, _, terminations, truncations, _ = env.step({"agent_0": [0, 1, 1]})
        flags.append((terminations["agent_0"], truncations["agent_0"]))
    assert flags == [(False, False), (False, False), (True, False)]
    assert env.agents == [] and env.night == 3


def test_episode_terminates_when_everything_is_ruined() -> None:
    env = bb.parallel_env(num_agents=1, num_houses=3, min_nights=1, beta=0.0, kappa=0.0, p_ignite=0.0)
    env.reset(options={"houses": [BURNING, BURNING, BURNING]})
    _, _, terminations, _, _ = env.step({"agent_0": [0, 0, 0]})
    assert terminations == {"agent_0": True}


def test_unsettled_town_is_truncated_at_max_nights() -> None:
    env = bb.parallel_env(num_agents=2, num_houses=4, min_nights=0, max_nights=5, **CERTAIN)
    env.reset(options={"houses": [RUINED, SAFE, SAFE, SAFE]})
    for night in range(1, 6):
        _, _, terminations, truncations, _ = env.step({agent: [1, 0, 0] for agent in env.agents})
        assert not any(terminations.values())
        assert all(truncations.values()) == (night == 5)
    assert env.agents == []


def test_random_reset_always_starts_with_a_fire() -> None:
    env = bb.parallel_env(initial_burn_prob=0.0)
    env.reset(seed=0)
    assert np.sum(env.houses == BURNING) == 1
    env = bb.parallel_env()
    env.reset(seed=0)
    counts = []
    for _ in range(200):
        counts.append(np.sum(env.houses == BURNING))
        assert not np.any(env.houses == RUINED)
        env.reset()
    assert min(counts) >= 1 and np.mean(counts) == pytest.approx(3.0, abs=0.5)


def test_observation_layout_and_parameter_block() -> None:
    slices = bb.observation_slices(4, 10)
    assert [(name, s.start, s.stop) for name, s in slices.items()] == [
        ("houses", 0, 30),
        ("agent_id", 30, 34),
        ("positions", 34, 74),
        ("modes", 74, 78),
        ("signals", 78, 82),
        ("params", 82, 93),
        ("progress", 93, 94),
    ]
    env = bb.parallel_env("minimal_specialization")
    obs, _ = env.reset(seed=0)
    assert env.observation_space("agent_0").shape == (94,)
    observation = obs["agent_2"]
    assert observation[slices["agent_id"]].tolist() == [0, 0, 1, 0]
    assert observation[slices["positions"].start : slices["signals"].stop].sum() == 0
    np.testing.assert_allclose(
        observation[slices["params"]],
        [0.25, 0.5, 0.02, 0.5, 0.0025, 0.5, 0.25, 1.0, 0.5, 0.1, 0.1],
        rtol=1e-6,
    )
    assert observation[slices["progress"]].tolist() == [0.0]
    saturated = bb.parallel_env(work_cost=3.0, own_ruin_penalty=250.0).reset(seed=0)[0]["agent_0"]
    assert saturated[slices["params"]][[3, 7]].tolist() == [1.0, 1.0]


def test_scenarios_set_the_documented_parameters() -> None:
    assert list(bb.SCENARIOS) == ["default", "easy", "hard", "rest_trap", "minimal_specialization"]
    table = {
        name: (
            p.beta,
            p.kappa,
            p.p_ignite,
            p.work_cost,
            p.own_save_bonus,
            p.own_ruin_penalty,
            p.other_save_bonus,
            p.other_ruin_penalty,
            p.team_survive,
            p.team_burn,
            p.min_nights,
        )
        for name in bb.SCENARIOS
        for p in [bb.parallel_env(name).params]
    }
    assert table == {
        "default": (0.25, 0.5, 0.02, 0.5, 20, 40, 10, 20, 100, 100, 12),
        "easy": (0.1, 0.8, 0.01, 0.5, 1, 2, 0.5, 1, 100, 100, 10),
        "hard": (0.4, 0.3, 0.05, 0.5, 1, 2, 0.5, 1, 100, 100, 15),
        "rest_trap": (0.05, 0.95, 0.02, 0.2, 1, 2, 0.5, 1, 100, 100, 12),
        "minimal_specialization": (0.25, 0.5, 0.02, 0.5, 50, 100, 25, 50, 10, 10, 12),
    }
    assert bb.parallel_env("hard", beta=0.9, num_agents=2).params.beta == 0.9


def test_specialist_works_its_lowest_burning_house_else_rests_at_home() -> None:
    env = bb.parallel_env(num_agents=2, num_houses=6)
    obs, _ = env.reset(seed=0, options={"houses": [SAFE, SAFE, SAFE, BURNING, BURNING, RUINED]})
    # agent_0 owns houses 0, 2, 4; agent_1 owns 1, 3, 5.
    assert bb.specialist_policy(obs["agent_0"], 0, 2, 6).tolist() == [4, 1, 1]
    assert bb.specialist_policy(obs["agent_1"], 1, 2, 6).tolist() == [3, 1, 1]
    obs, _ = env.reset(seed=0, options={"houses": [BURNING, SAFE, SAFE, SAFE, SAFE, RUINED]})
    assert bb.specialist_policy(obs["agent_1"], 1, 2, 6).tolist() == [1, 0, 0]


def test_random_policy_is_uniform_over_the_action_space_and_seeded() -> None:
    env = bb.parallel_env()
    obs, _ = env.reset(seed=0)
    draws = np.array([bb.random_policy(obs["agent_0"], 0, np.random.default_rng(s)) for s in range(600)])
    assert all(env.action_space("agent_0").contains(a) for a in draws)
    assert set(draws[:, 0]) == set(range(10)) and set(draws[:, 1]) == {0, 1} and set(draws[:, 2]) == {0, 1}
    np.testing.assert_array_equal(
        bb.random_policy(obs["agent_0"], 0, np.random.default_rng(5)),
        bb.random_policy(obs["agent_0"], 0, np.random.default_rng(5)),
    )


def test_evaluate_scripted_is_seeded_and_the_specialist_beats_random() -> None:
    specialist = bb.evaluate_scripted("specialist", "easy", episodes=3, seed=0)
    assert specialist == bb.evaluate_scripted("specialist", "easy", episodes=3, seed=0)
    random_play = bb.evaluate_scripted("random", "easy", episodes=3, seed=0)
    assert random_play == bb.evaluate_scripted("random", "easy", episodes=3, seed=0)
    assert random_play != bb.evaluate_scripted("random", "easy", episodes=3, seed=1)
    assert specialist > random_play
    small = bb.evaluate_scripted("random", "default", episodes=1, seed=0, num_agents=2, num_houses=5)
    assert np.isfinite(small)


def test_reset_without_seed_continues_the_random_stream() -> None:
    env = bb.parallel_env()
    env.reset(seed=3)
    first = env.houses.copy()
    towns = [first]
    for _ in range(5):
        env.reset()
        towns.append(env.houses.copy())
    assert any(not np.array_equal(first, town) for town in towns[1:])
    env.reset(seed=3)
    np.testing.assert_array_equal(env.houses, first)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"scenario": "inferno"},
            (
                r"scenario must be one of 'default', 'easy', 'hard', 'rest_trap', "
                r"'minimal_specialization', got 'inferno'"
            ),
        ),
        (
            {"spread": 0.3},
            r"unknown bucket brigade parameters \['spread'\]; valid overrides are \['num_agents'",
        ),
        ({"beta": 1.5}, r"beta must be a real number in \[0.0, 1.0\], got 1.5"),
        ({"kappa": -0.1}, r"kappa must be a real number in \[0.0, 1.0\], got -0.1"),
        ({"p_ignite": float("nan")}, r"p_ignite must be a real number in \[0.0, 1.0\], got nan"),
        ({"initial_burn_prob": 2}, r"initial_burn_prob must be a real number in \[0.0, 1.0\], got 2"),
        ({"num_houses": 2}, r"num_houses must be an integer >= 3, got 2"),
        ({"num_agents": 11}, r"num_agents must be an integer in \[1, 10\], got 11"),
        ({"max_nights": 0}, r"max_nights must be an integer >= 1, got 0"),
        ({"min_nights": 200}, r"min_nights must be an integer in \[0, 100\], got 200"),
        ({"work_cost": -1.0}, r"work_cost must be a finite real number >= 0.0, got -1.0"),
        ({"rest_reward": -0.5}, r"rest_reward must be a finite real number >= 0.0, got -0.5"),
        (
            {"own_ruin_penalty": float("inf")},
            r"own_ruin_penalty must be a finite real number >= 0.0, got inf",
        ),
    ],
)
def test_invalid_parameters_raise(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bb.parallel_env(**kwargs)


def test_invalid_options_and_actions_raise() -> None:
    env = bb.parallel_env(num_agents=2, num_houses=4)
    with pytest.raises(ValueError, match=r"options\['houses'\] must be 4 integer states"):
        env.reset(options={"houses": [0, 1, 3, 0]})
    with pytest.raises(ValueError, match=r"options\['houses'\] must be 4 integer states"):
        env.reset(options={"houses": [0, 1]})
    env.reset(seed=0, options={"unrelated": 1})
    with pytest.raises(ValueError, match=r"action \[4, 1, 0\] of agent 'agent_1' is not in its action space"):
        env.step({"agent_0": [0, 0, 0], "agent_1": [4, 1, 0]})


def test_invalid_policy_arguments_raise() -> None:
    env = bb.parallel_env(num_agents=2, num_houses=4)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"policy_name must be one of 'random', 'specialist', got 'greedy'"):
        bb.evaluate_scripted("greedy")
    with pytest.raises(ValueError, match=r"episodes must be an integer >= 1, got 0"):
        bb.evaluate_scripted("random", episodes=0)
    with pytest.raises(ValueError, match=r"is not a bucket brigade observation for num_houses=10"):
        bb.random_policy(obs["agent_0"], 0, rng)
    with pytest.raises(ValueError, match=r"agent_index must be an integer in \[0, 1\], got 2"):
        bb.random_policy(obs["agent_0"], 2, rng, num_houses=4)
    with pytest.raises(ValueError, match=r"does not fit num_agents=3 and num_houses=4"):
        bb.specialist_policy(obs["agent_0"], 0, 3, 4)
    with pytest.raises(ValueError, match=r"agent_index must be an integer in \[0, 1\], got -1"):
        bb.specialist_policy(obs["agent_0"], -1, 2, 4)
