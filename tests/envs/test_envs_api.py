"""PettingZoo conformance of every bundled environment: API tests, seed tests, cached spaces, bounds,
doctests."""

from __future__ import annotations

import doctest
from collections.abc import Callable

import numpy as np
import pytest
from pettingzoo import ParallelEnv
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

import marljoint_envs
from marljoint_envs import (
    bucket_brigade_v0,
    counter_v0,
    identity_v0,
    kuhn_poker_v0,
    matrix_game_v0,
    memory_v0,
    mock_v0,
    variable_agents_v0,
)

PARALLEL_VARIANTS: dict[str, Callable[[], ParallelEnv]] = {
    "mock": lambda: mock_v0.parallel_env(),
    "mock_multidiscrete": lambda: mock_v0.parallel_env(num_agents=3, nvec=(3, 2, 4)),
    "mock_one_hot": lambda: mock_v0.parallel_env(num_agents=4, one_hot_obs=True, max_cycles=20),
    "mock_16_agents": lambda: mock_v0.parallel_env(num_agents=16, obs_dim=8, max_cycles=50),
    "counter": lambda: counter_v0.parallel_env(),
    "counter_schedule": lambda: counter_v0.parallel_env(
        num_agents=3, terminate_at={"agent_1": 3}, truncate_at=7
    ),
    "counter_constant": lambda: counter_v0.parallel_env(constant_reward=-1.5, terminate_at=5),
    "variable_agents": lambda: variable_agents_v0.parallel_env(),
    "variable_agents_custom": lambda: variable_agents_v0.parallel_env(
        episode_length=6, death_step=6, join_step=1
    ),
    **{
        f"matrix_{game}": (lambda game=game: matrix_game_v0.parallel_env(game=game))
        for game in matrix_game_v0.GAMES
    },
    "matrix_custom": lambda: matrix_game_v0.parallel_env(payoffs=np.arange(24.0).reshape(4, 3, 2)),
    "kuhn_poker_parallel": lambda: kuhn_poker_v0.parallel_env(),
    **{
        f"bucket_brigade_{scenario}": (lambda scenario=scenario: bucket_brigade_v0.parallel_env(scenario))
        for scenario in bucket_brigade_v0.SCENARIOS
    },
    "bucket_brigade_small": lambda: bucket_brigade_v0.parallel_env(num_agents=3, num_houses=3, max_nights=20),
    "identity_multidiscrete": lambda: identity_v0.parallel_env(),
    "identity_single_head": lambda: identity_v0.parallel_env(num_agents=3, nvec=(5,)),
    "identity_box": lambda: identity_v0.parallel_env(action_type="box", box_dim=3),
    "memory": lambda: memory_v0.parallel_env(),
    "memory_short": lambda: memory_v0.parallel_env(num_agents=3, num_cues=2, delay=1),
    "memory_long": lambda: memory_v0.parallel_env(num_agents=1, num_cues=7, delay=12),
}


@pytest.mark.parametrize("make_env", PARALLEL_VARIANTS.values(), ids=PARALLEL_VARIANTS.keys())
def test_parallel_api(make_env: Callable[[], ParallelEnv]) -> None:
    parallel_api_test(make_env(), num_cycles=300)


@pytest.mark.parametrize("make_env", PARALLEL_VARIANTS.values(), ids=PARALLEL_VARIANTS.keys())
def test_parallel_seed(make_env: Callable[[], ParallelEnv]) -> None:
    parallel_seed_test(make_env)


@pytest.mark.parametrize("make_env", PARALLEL_VARIANTS.values(), ids=PARALLEL_VARIANTS.keys())
def test_spaces_are_cached_for_every_possible_agent(make_env: Callable[[], ParallelEnv]) -> None:
    env = make_env()
    for agent in env.possible_agents:
        assert env.observation_space(agent) is env.observation_space(agent)
        assert env.action_space(agent) is env.action_space(agent)


@pytest.mark.parametrize("make_env", PARALLEL_VARIANTS.values(), ids=PARALLEL_VARIANTS.keys())
def test_rollout_observations_lie_in_their_spaces_and_seeds_reproduce(
    make_env: Callable[[], ParallelEnv],
) -> None:
    def rollout(seed: int) -> list:
        env = make_env()
        obs, _ = env.reset(seed=seed)
        trace = [obs]
        for agent in env.possible_agents:
            env.action_space(agent).seed(seed)
        for _ in range(40):
            if not env.agents:
                break
            for agent, observation in obs.items():
                assert env.observation_space(agent).contains(observation), (agent, observation)
            actions = {agent: _sample(env, obs, agent) for agent in env.agents}
            obs, rewards, terminations, truncations, _ = env.step(actions)
            assert all(isinstance(r, float) and np.isfinite(r) for r in rewards.values())
            assert all(isinstance(flag, bool) for flag in [*terminations.values(), *truncations.values()])
            for agent, observation in obs.items():
                assert env.observation_space(agent).contains(observation), (agent, observation)
            trace.append((obs, rewards))
        return trace

    first, second = repr(rollout(3)), repr(rollout(3))
    assert first == second


def _sample(env: ParallelEnv, obs: dict, agent: str):
    observation = obs.get(agent)
    if isinstance(observation, dict) and "action_mask" in observation:
        return env.action_space(agent).sample(mask=observation["action_mask"])
    return env.action_space(agent).sample()


def test_kuhn_poker_aec_api() -> None:
    api_test(kuhn_poker_v0.env(), num_cycles=300)


def test_kuhn_poker_aec_seed() -> None:
    seed_test(kuhn_poker_v0.env)


def test_package_lists_every_environment_module() -> None:
    assert marljoint_envs.__all__ == [
        "bucket_brigade_v0",
        "counter_v0",
        "identity_v0",
        "kuhn_poker_v0",
        "matrix_game_v0",
        "memory_v0",
        "mock_v0",
        "variable_agents_v0",
    ]
    for name in marljoint_envs.__all__:
        module = getattr(marljoint_envs, name)
        env = module.parallel_env()
        assert env.metadata["name"] == name
        assert env.metadata["render_modes"] == ["ansi"]
    assert callable(kuhn_poker_v0.env) and isinstance(kuhn_poker_v0.raw_env(), kuhn_poker_v0.raw_env)


@pytest.mark.parametrize("name", marljoint_envs.__all__)
def test_ansi_render_returns_text(name: str) -> None:
    module = getattr(marljoint_envs, name)
    env = module.parallel_env(render_mode="ansi")
    env.reset(seed=0)
    assert isinstance(env.render(), str)
    silent = module.parallel_env()
    silent.reset(seed=0)
    with pytest.warns(UserWarning, match="without a render_mode"):
        assert silent.render() is None


def test_kuhn_poker_ansi_render() -> None:
    env = kuhn_poker_v0.raw_env(render_mode="ansi")
    env.reset(seed=0)
    env.step(1)
    assert env.render().endswith("history 'b'")


@pytest.mark.parametrize(
    "make_env",
    [
        mock_v0.parallel_env,
        counter_v0.parallel_env,
        identity_v0.parallel_env,
        memory_v0.parallel_env,
        bucket_brigade_v0.parallel_env,
        matrix_game_v0.parallel_env,
        variable_agents_v0.parallel_env,
        kuhn_poker_v0.raw_env,
    ],
)
def test_unknown_render_mode_is_rejected(make_env: Callable) -> None:
    with pytest.raises(ValueError, match=r"render_mode must be one of 'ansi', got 'human'"):
        make_env(render_mode="human")


@pytest.mark.parametrize("name", marljoint_envs.__all__)
def test_docstring_examples_run(name: str) -> None:
    results = doctest.testmod(getattr(marljoint_envs, name))
    assert results.attempted > 0 and results.failed == 0
