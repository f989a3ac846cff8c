"""The bundled environments through PettingZooJointEnv: literal outputs of the counting and variable-agent envs,
Kuhn poker played turn by turn, and the conformance check on every bundled module."""

from __future__ import annotations

import numpy as np
import pytest

import marljoint_envs
from marljoint.env import PettingZooJointEnv, check_joint_env, random_actions
from marljoint_envs import counter_v0, kuhn_poker_v0, variable_agents_v0


def f32(values) -> np.ndarray:
    return np.asarray(values, np.float32)


def column(values) -> np.ndarray:
    """Per-copy, per-agent scalar observations ``[E, N]`` as the counter's ``[E, N, 1]`` observation array."""
    return f32(values)[..., None]


# ------------------------------------------------------------------------------------------------ counter_v0
def test_counter_episode_with_a_death_a_time_limit_and_an_auto_reset() -> None:
    env = PettingZooJointEnv(
        lambda: counter_v0.parallel_env(num_agents=3, terminate_at={"agent_1": 2}, truncate_at=4), num_envs=2
    )
    assert [g.agents for g in env.spec.groups] == [("agent_0", "agent_1", "agent_2")]
    state = env.reset(seed=0)
    np.testing.assert_array_equal(state.obs[0], column([[0, 0, 0], [0, 0, 0]]))
    assert state.alive.all() and state.acting.all()
    assert state.action_masks[0].shape == (2, 3, 3) and state.action_masks[0].all()

    out = env.step([np.array([[1, 2, 0], [2, 2, 2]])])
    np.testing.assert_array_equal(out.rewards, f32([[1, 2, 0], [2, 2, 2]]))
    np.testing.assert_array_equal(out.obs[0], column([[1, 1, 1], [1, 1, 1]]))
    assert not (out.terminated.any() or out.truncated.any() or out.reset_envs.any())
    assert out.episode_returns.shape == (0, 3) and out.episode_lengths.shape == (0,)

    # t = 2: agent_1 terminates; its final observation is [2], and from now on it is absent (zero observation).
    out = env.step([np.array([[0, 1, 2], [1, 0, 1]])])
    np.testing.assert_array_equal(out.rewards, f32([[0, 1, 2], [1, 0, 1]]))
    assert out.terminated.tolist() == [[False, True, False]] * 2
    assert not out.truncated.any()
    np.testing.assert_array_equal(out.final_obs[0][:, 1], f32([[2], [2]]))
    np.testing.assert_array_equal(out.obs[0], column([[2, 0, 2], [2, 0, 2]]))
    assert out.alive.tolist() == [[True, False, True]] * 2
    assert out.acting.tolist() == [[True, False, True]] * 2

    # The dead agent's action is ignored, however invalid, and it gets no reward.
    out = env.step([np.array([[2, 99, 1], [0, -5, 0]])])
    np.testing.assert_array_equal(out.rewards, f32([[2, 0, 1], [0, 0, 0]]))
    np.testing.assert_array_equal(out.obs[0], column([[3, 0, 3], [3, 0, 3]]))
    assert not (out.terminated.any() or out.truncated.any())

    # t = 4: the others are truncated (not terminated); final observations [4]; both copies reset at once.
    out = env.step([np.array([[1, 0, 1], [2, 0, 2]])])
    np.testing.assert_array_equal(out.rewards, f32([[1, 0, 1], [2, 0, 2]]))
    assert out.truncated.tolist() == [[True, False, True]] * 2
    assert not out.terminated.any()
    np.testing.assert_array_equal(out.final_obs[0][:, [0, 2]], column([[4, 4], [4, 4]]))
    assert out.reset_envs.tolist() == [True, True]
    np.testing.assert_array_equal(out.obs[0], column([[0, 0, 0], [0, 0, 0]]))
    assert out.alive.all() and out.acting.all()
    assert out.episode_returns.dtype == np.float64 and out.episode_lengths.dtype == np.int64
    np.testing.assert_array_equal(out.episode_returns, [[4, 3, 4], [5, 2, 5]])
    np.testing.assert_array_equal(out.episode_lengths, [4, 4])

    out = env.step([np.ones((2, 3), np.int64)])
    np.testing.assert_array_equal(out.rewards, np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(out.obs[0], column([[1, 1, 1], [1, 1, 1]]))
    assert out.episode_returns.shape == (0, 3)


def test_counter_termination_wins_over_a_truncation_on_the_same_step() -> None:
    env = PettingZooJointEnv(
        lambda: counter_v0.parallel_env(num_agents=2, terminate_at={"agent_0": 2}, truncate_at=2), num_envs=1
    )
    env.reset(seed=0)
    env.step([np.zeros((1, 2), np.int64)])
    out = env.step([np.zeros((1, 2), np.int64)])
    assert out.terminated.tolist() == [[True, False]]
    assert out.truncated.tolist() == [[False, True]]
    np.testing.assert_array_equal(out.final_obs[0], column([[2, 2]]))
    assert out.reset_envs.tolist() == [True]


def test_counter_everyone_terminates_with_a_constant_reward() -> None:
    env = PettingZooJointEnv(
        lambda: counter_v0.parallel_env(num_agents=2, terminate_at=3, constant_reward=0.5), num_envs=3
    )
    env.reset(seed=0)
    for _ in range(3):
        out = env.step([np.full((3, 2), 2, np.int64)])
        np.testing.assert_array_equal(out.rewards, np.full((3, 2), 0.5, np.float32))
    assert out.terminated.all() and not out.truncated.any()
    np.testing.assert_array_equal(out.final_obs[0], np.full((3, 2, 1), 3, np.float32))
    np.testing.assert_array_equal(out.episode_returns, np.full((3, 2), 1.5))
    np.testing.assert_array_equal(out.episode_lengths, [3, 3, 3])
    np.testing.assert_array_equal(out.obs[0], np.zeros((3, 2, 1), np.float32))


def test_counter_never_ends_without_limits() -> None:
    env = PettingZooJointEnv(counter_v0.parallel_env, num_envs=2, seed=0)
    first = env.reset()
    assert first.obs[0].shape == (2, 2, 1)
    for _ in range(50):
        out = env.step([np.ones((2, 2), np.int64)])
        assert not (out.terminated.any() or out.truncated.any() or out.reset_envs.any())
    np.testing.assert_array_equal(out.obs[0], np.full((2, 2, 1), 50, np.float32))


# ------------------------------------------------------------------------------------------------ variable_agents_v0
def test_variable_agents_alive_mask_over_an_episode() -> None:
    env = PettingZooJointEnv(
        lambda: variable_agents_v0.parallel_env(episode_length=5, death_step=2, join_step=3), num_envs=1
    )
    # obs = [t / 5, i / 2, present / 3] for agent_i; absent agents have zero observations.
    state = env.reset(seed=0)
    assert state.alive.tolist() == [[True, True, False]]
    np.testing.assert_array_equal(state.obs[0][0], f32([[0, 0, 2 / 3], [0, 0.5, 2 / 3], [0, 0, 0]]))

    out = env.step([np.array([[1, 1, 1]])])
    assert out.alive.tolist() == [[True, True, False]]
    np.testing.assert_array_equal(out.rewards, f32([[1, 1, 0]]))
    np.testing.assert_array_equal(out.obs[0][0], f32([[0.2, 0, 2 / 3], [0.2, 0.5, 2 / 3], [0, 0, 0]]))

    # t = 2: agent_1 dies.
    out = env.step([np.array([[0, 1, 1]])])
    assert out.terminated.tolist() == [[False, True, False]]
    assert out.alive.tolist() == [[True, False, False]]
    np.testing.assert_array_equal(out.rewards, f32([[0, 1, 0]]))
    np.testing.assert_array_equal(out.final_obs[0][0, 1], f32([0.4, 0.5, 1 / 3]))
    np.testing.assert_array_equal(out.obs[0][0], f32([[0.4, 0, 1 / 3], [0, 0, 0], [0, 0, 0]]))

    # t = 3: agent_2 joins late (reward 0 on its joining step, no flags).
    out = env.step([np.array([[1, 1, 1]])])
    assert out.alive.tolist() == [[True, False, True]]
    assert out.acting.tolist() == [[True, False, True]]
    assert not (out.terminated.any() or out.truncated.any())
    np.testing.assert_array_equal(out.rewards, f32([[1, 0, 0]]))
    np.testing.assert_array_equal(out.obs[0][0], f32([[0.6, 0, 2 / 3], [0, 0, 0], [0.6, 1, 2 / 3]]))

    out = env.step([np.array([[1, 0, 1]])])
    np.testing.assert_array_equal(out.rewards, f32([[1, 0, 1]]))
    np.testing.assert_array_equal(out.obs[0][0], f32([[0.8, 0, 2 / 3], [0, 0, 0], [0.8, 1, 2 / 3]]))

    # t = 5: agent_0 terminates, agent_2 is truncated; the copy resets.
    out = env.step([np.array([[0, 0, 1]])])
    assert out.terminated.tolist() == [[True, False, False]]
    assert out.truncated.tolist() == [[False, False, True]]
    np.testing.assert_array_equal(out.final_obs[0][0, [0, 2]], f32([[1, 0, 0], [1, 1, 0]]))
    assert out.reset_envs.tolist() == [True]
    np.testing.assert_array_equal(out.episode_returns, [[3, 2, 2]])
    np.testing.assert_array_equal(out.episode_lengths, [5])
    assert out.alive.tolist() == [[True, True, False]]
    np.testing.assert_array_equal(out.obs[0][0], f32([[0, 0, 2 / 3], [0, 0.5, 2 / 3], [0, 0, 0]]))


def test_variable_agents_dead_and_unjoined_agents_always_have_zero_obs() -> None:
    env = PettingZooJointEnv(variable_agents_v0, num_envs=3)
    rng = np.random.default_rng(0)
    state = env.reset(seed=0)
    for _ in range(40):
        assert not state.obs[0][~state.alive].any()
        state = env.step(random_actions(env, state, rng))


# ------------------------------------------------------------------------------------------------ kuhn_poker_v0
def _play_hand(env: PettingZooJointEnv, history: str):
    """Plays one hand; checks that players alternate and nothing is paid before the end. Returns (cards, last)."""
    state = env.reset(seed=3)
    cards = env.envs[0].unwrapped.cards
    for k, move in enumerate(history):
        mover = k % 2
        assert state.acting.tolist() == [[mover == 0, mover == 1]]
        assert state.alive.all()
        actions = np.array([[0, 0]])
        actions[0, mover] = "pb".index(move)
        state = env.step([actions])
        if k < len(history) - 1:
            assert state.rewards.tolist() == [[0.0, 0.0]]
            assert not (state.terminated.any() or state.reset_envs.any())
    return cards, state


@pytest.mark.parametrize("history", ["pp", "pbp", "pbb", "bp", "bb"])
def test_kuhn_poker_acting_alternates_and_both_players_are_paid_at_the_end(history: str) -> None:
    env = PettingZooJointEnv(kuhn_poker_v0.env, num_envs=1)
    assert env.spec.turn_based
    assert [g.agents for g in env.spec.groups] == [("player_0", "player_1")]
    cards, last = _play_hand(env, history)
    expected = kuhn_poker_v0.payoff(cards, history)
    assert last.rewards.tolist() == [list(expected)]
    assert last.terminated.tolist() == [[True, True]]
    assert not last.truncated.any()
    assert last.reset_envs.tolist() == [True]
    assert last.episode_returns.tolist() == [list(expected)]
    assert last.episode_lengths.tolist() == [len(history)]
    for player in range(2):
        np.testing.assert_array_equal(
            last.final_obs[0][0, player], kuhn_poker_v0.encode_observation(cards[player], player, history)
        )
    # A new hand: player_0 to act again.
    assert last.acting.tolist() == [[True, False]]


def test_kuhn_poker_observations_and_masks_follow_the_turn() -> None:
    env = PettingZooJointEnv(kuhn_poker_v0.env, num_envs=1)
    state = env.reset(seed=3)
    cards = env.envs[0].unwrapped.cards
    for player in range(2):
        np.testing.assert_array_equal(
            state.obs[0][0, player], kuhn_poker_v0.encode_observation(cards[player], player, "")
        )
    assert state.action_masks[0].tolist() == [[[True, True], [True, True]]]
    state = env.step([np.array([[1, 0]])])  # player_0 bets
    np.testing.assert_array_equal(state.obs[0][0, 1], kuhn_poker_v0.encode_observation(cards[1], 1, "b"))
    assert state.acting.tolist() == [[False, True]]
    # player_1 folds (player_0's junk action is ignored): player_0's +1 arrives on player_1's move.
    state = env.step([np.array([[7, 0]])])
    assert state.rewards.tolist() == [[1.0, -1.0]]


def test_kuhn_poker_random_play_is_zero_sum_and_uses_every_history() -> None:
    env = PettingZooJointEnv(kuhn_poker_v0.env, num_envs=4)
    rng = np.random.default_rng(0)
    state = env.reset(seed=0)
    lengths = []
    for _ in range(300):
        assert (state.acting.sum(1) == 1).all()
        state = env.step(random_actions(env, state, rng))
        np.testing.assert_array_equal(state.episode_returns.sum(1), 0.0)
        assert set(np.abs(state.episode_returns).ravel()) <= {1.0, 2.0}
        lengths += state.episode_lengths.tolist()
    assert set(lengths) == {2, 3}


# ------------------------------------------------------------------------------------------------ every module
MODULES = sorted(marljoint_envs.__all__)


def test_every_bundled_module_is_present() -> None:
    assert MODULES == [
        "bucket_brigade_v0",
        "counter_v0",
        "identity_v0",
        "kuhn_poker_v0",
        "matrix_game_v0",
        "memory_v0",
        "mock_v0",
        "variable_agents_v0",
    ]


@pytest.mark.parametrize("name", MODULES)
def test_check_joint_env_passes_on_the_module(name: str) -> None:
    module = getattr(marljoint_envs, name)
    env = PettingZooJointEnv(module, num_envs=3)
    check_joint_env(env, num_steps=100, seed=2)


@pytest.mark.parametrize(
    ("factory", "turn_based"),
    [
        (kuhn_poker_v0.env, True),
        (kuhn_poker_v0.parallel_env, True),
        (lambda: marljoint_envs.identity_v0.parallel_env(action_type="box"), False),
        (lambda: marljoint_envs.matrix_game_v0.parallel_env(game="three_player"), False),
        (lambda: marljoint_envs.mock_v0.parallel_env(nvec=(2, 3), max_cycles=5), False),
        (lambda: marljoint_envs.bucket_brigade_v0.parallel_env(scenario="easy", max_nights=20), False),
    ],
    ids=["kuhn-aec", "kuhn-parallel", "identity-box", "matrix-three-player", "mock-multidiscrete", "bucket-easy"],
)
def test_check_joint_env_passes_on_variants(factory, turn_based: bool) -> None:
    env = PettingZooJointEnv(factory, num_envs=3)
    assert env.spec.turn_based == turn_based
    check_joint_env(env, num_steps=100, seed=2)
