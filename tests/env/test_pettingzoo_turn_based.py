"""Turn-based (AEC) games through PettingZooJointEnv: one mover per copy, rewards credited to whoever earns them,
action masks; and random_actions, which samples within the masks."""

from __future__ import annotations

import numpy as np
import pytest
from _custom_envs import ScriptedEnv, box_obs
from gymnasium import spaces

from marljoint.env import JointObs, JointStep, PettingZooJointEnv, random_actions

pytest.importorskip("pettingzoo.classic")
from pettingzoo.classic import leduc_holdem_v4, rps_v2, tictactoe_v3


def board(*squares: int) -> np.ndarray:
    """A 3x3 tictactoe plane with ones on the given squares (square k is row k // 3, column k % 3)."""
    plane = np.zeros(9, np.float32)
    plane[list(squares)] = 1.0
    return plane.reshape(3, 3)


def play(env: PettingZooJointEnv, state: JointObs | JointStep, moves: list[int]) -> JointStep:
    """Plays one move per copy: ``moves[e]`` goes to the acting agent of copy e in ``state``."""
    actions = np.full((env.num_envs, 2), 99, np.int64)  # out of range: must be ignored for the waiting agent
    for e, move in enumerate(moves):
        actions[e, np.flatnonzero(state.acting[e])[0]] = move
    return env.step([actions])


def test_tictactoe_rewards_reach_the_loser_on_the_winners_move() -> None:
    env = PettingZooJointEnv(tictactoe_v3.env, num_envs=2, seed=0)
    out = env.reset()
    assert env.spec.agents == ("player_1", "player_2")
    assert out.acting.tolist() == [[True, False], [True, False]]
    assert out.alive.all()
    # Copy 0: player_1 takes squares 0, 1, 2 (wins on move 5). Copy 1: player_2 takes 3, 4, 5 (wins on move 6).
    script = [[0, 0], [3, 3], [1, 1], [4, 4], [2, 8], [0, 5]]
    for t, moves in enumerate(script[:4]):
        out = play(env, out, moves)
        assert out.rewards.tolist() == [[0.0, 0.0], [0.0, 0.0]]
        assert not (out.terminated | out.truncated | out.reset_envs[:, None]).any()
        # One mover per copy, alternating.
        mover = (t + 1) % 2
        assert out.acting.tolist() == [[mover == 0, mover == 1]] * 2
        # The masks of the mover exclude the taken squares; the waiting player's action is ignored, so it may
        # choose anything (tictactoe gives it an all-zero mask).
        taken = sorted({m for row in script[: t + 1] for m in row[:1]})
        expected = np.ones(9, bool)
        expected[taken] = False
        np.testing.assert_array_equal(out.action_masks[0][0, mover], expected)
        assert out.action_masks[0][0, 1 - mover].all()

    out = play(env, out, script[4])
    assert out.rewards.tolist() == [[1.0, -1.0], [0.0, 0.0]]
    assert out.terminated.tolist() == [[True, True], [False, False]]
    assert not out.truncated.any()
    assert out.reset_envs.tolist() == [True, False]
    assert out.episode_returns.tolist() == [[1.0, -1.0]]
    assert out.episode_lengths.tolist() == [5]
    # The loser's final observation shows the lost board from its own side: its marks, then the winner's.
    np.testing.assert_array_equal(out.final_obs[0][0, 1], np.stack([board(3, 4), board(0, 1, 2)], -1))
    np.testing.assert_array_equal(out.final_obs[0][0, 0], np.stack([board(0, 1, 2), board(3, 4)], -1))
    # Copy 0 was reset: an empty board, player_1 to move, every square allowed.
    assert not out.obs[0][0].any()
    assert out.acting[0].tolist() == [True, False]
    assert out.action_masks[0][0, 0].all()

    out = play(env, out, script[5])
    assert out.rewards.tolist() == [[0.0, 0.0], [-1.0, 1.0]]
    assert out.terminated.tolist() == [[False, False], [True, True]]
    assert out.episode_returns.tolist() == [[-1.0, 1.0]]
    assert out.episode_lengths.tolist() == [6]
    assert out.acting.tolist() == [[False, True], [True, False]]


def test_tictactoe_refuses_an_occupied_square() -> None:
    env = PettingZooJointEnv(tictactoe_v3.env, num_envs=1)
    out = env.reset(seed=0)
    out = play(env, out, [4])
    with pytest.raises(ValueError, match=r"agent 'player_2' \(env copy 0\): action \[4\] is forbidden by its action"):
        out = play(env, out, [4])
    out = play(env, out, [0])  # the refused move changed nothing


def test_rps_reward_of_the_first_mover_arrives_on_the_second_move() -> None:
    env = PettingZooJointEnv(lambda: rps_v2.env(max_cycles=2), num_envs=1)
    out = env.reset(seed=0)
    # Discrete(4) observations (the opponent's last move, or 3 = none yet) are one-hot.
    np.testing.assert_array_equal(out.obs[0], [[[0, 0, 0, 1], [0, 0, 0, 1]]])
    ROCK, PAPER, SCISSORS = 0, 1, 2
    out = play(env, out, [ROCK])
    assert out.rewards.tolist() == [[0.0, 0.0]]
    assert out.acting.tolist() == [[False, True]]
    out = play(env, out, [PAPER])
    assert out.rewards.tolist() == [[-1.0, 1.0]]
    assert out.acting.tolist() == [[True, False]]
    np.testing.assert_array_equal(out.obs[0], [[[0, 1, 0, 0], [1, 0, 0, 0]]])
    out = play(env, out, [ROCK])
    out = play(env, out, [SCISSORS])
    # The second round ends the game by its round limit: truncated, not terminated.
    assert out.rewards.tolist() == [[1.0, -1.0]]
    assert out.truncated.tolist() == [[True, True]]
    assert not out.terminated.any()
    assert out.episode_returns.tolist() == [[0.0, 0.0]]
    assert out.episode_lengths.tolist() == [4]
    np.testing.assert_array_equal(out.final_obs[0], [[[0, 0, 1, 0], [1, 0, 0, 0]]])
    np.testing.assert_array_equal(out.obs[0], [[[0, 0, 0, 1], [0, 0, 0, 1]]])


@pytest.mark.parametrize("module", [tictactoe_v3, leduc_holdem_v4, rps_v2], ids=lambda m: m.__name__.split(".")[-1])
def test_turn_based_games_are_zero_sum_with_one_mover(module) -> None:
    env = PettingZooJointEnv(module.env, num_envs=3)
    assert env.spec.turn_based
    rng = np.random.default_rng(0)
    state = env.reset(seed=5)
    finished = 0
    for _ in range(200):
        assert (state.acting.sum(1) == 1).all()
        assert not (state.acting & ~state.alive).any()
        actions = random_actions(env, state, rng)
        for g, group in enumerate(env.spec.groups):
            chosen = np.take_along_axis(state.action_masks[g], actions[g][..., None], -1)[..., 0]
            assert chosen[state.acting[:, list(group.agent_indices)]].all()
        state = env.step(actions)
        finished += len(state.episode_lengths)
        np.testing.assert_allclose(state.episode_returns.sum(1), 0.0, atol=1e-6)
    assert finished > 0


def test_leduc_rewards_only_at_the_end() -> None:
    env = PettingZooJointEnv(leduc_holdem_v4.env, num_envs=4)
    rng = np.random.default_rng(1)
    state = env.reset(seed=0)
    for _ in range(100):
        state = env.step(random_actions(env, state, rng))
        ended = state.terminated.any(1)
        assert (state.rewards[~ended] == 0).all()
        assert (state.terminated[ended]).all()
        np.testing.assert_array_equal(ended, state.reset_envs)


# ------------------------------------------------------------------------------------------------ random_actions
def _masked_env(action_space, num_envs: int = 2) -> PettingZooJointEnv:
    return PettingZooJointEnv(lambda: ScriptedEnv(box_obs(), action_space), num_envs=num_envs)


def _state(env: PettingZooJointEnv, masks: np.ndarray | None) -> JointObs:
    E, N = env.num_envs, env.spec.num_agents
    alive = np.ones((E, N), bool)
    return JointObs((np.zeros((E, N, 3), np.float32),), alive, alive, (masks,))


def test_random_actions_only_picks_allowed_choices_and_every_one_of_them() -> None:
    env = _masked_env(spaces.Discrete(5))
    masks = np.zeros((2, 2, 5), bool)
    masks[0, 0, [1, 3]] = True
    masks[0, 1, 4] = True
    masks[1, 0] = True
    masks[1, 1, [0, 2]] = True
    rng = np.random.default_rng(0)
    draws = np.stack([random_actions(env, _state(env, masks), rng)[0] for _ in range(2000)])
    assert draws.shape == (2000, 2, 2) and draws.dtype == np.int64
    for e in range(2):
        for j in range(2):
            assert set(np.unique(draws[:, e, j])) == set(np.flatnonzero(masks[e, j]))
    # Uniform over the allowed choices.
    assert abs((draws[:, 1, 0] == 4).mean() - 0.2) < 0.04


def test_random_actions_masks_each_multidiscrete_head() -> None:
    env = _masked_env(spaces.MultiDiscrete([3, 2]), num_envs=1)
    masks = np.array([[[False, True, True, True, False], [True, False, False, False, True]]])
    rng = np.random.default_rng(0)
    draws = np.stack([random_actions(env, _state(env, masks), rng)[0] for _ in range(500)])
    assert draws.shape == (500, 1, 2, 2)
    assert set(np.unique(draws[:, 0, 0, 0])) == {1, 2}
    assert set(np.unique(draws[:, 0, 0, 1])) == {0}
    assert set(np.unique(draws[:, 0, 1, 0])) == {0}
    assert set(np.unique(draws[:, 0, 1, 1])) == {1}


class _TopDraw:
    """A generator stand-in whose uniform draws are all the largest value below 1."""

    def random(self, size):
        return np.full(size, np.nextafter(1.0, 0.0))


def test_random_actions_stays_inside_the_mask_on_the_largest_draw() -> None:
    # With 7 allowed choices the cumulative weights end at 1 - 2**-52, below the largest draw 1 - 2**-53:
    # the draw passes every allowed choice and must not spill onto the masked ones after them.
    env = _masked_env(spaces.Discrete(9), num_envs=1)
    masks = np.zeros((1, 2, 9), bool)
    masks[0, :, :7] = True
    actions = random_actions(env, _state(env, masks), _TopDraw())[0]
    assert actions.tolist() == [[6, 6]]


def test_random_actions_gives_choice_zero_where_nothing_is_allowed() -> None:
    env = _masked_env(spaces.Discrete(4), num_envs=1)
    masks = np.zeros((1, 2, 4), bool)
    masks[0, 0, 2] = True
    actions = random_actions(env, _state(env, masks), np.random.default_rng(0))[0]
    assert actions.tolist() == [[2, 0]]


def test_random_box_actions_lie_in_the_bounds() -> None:
    low = np.array([-1.0, 0.0, 5.0], np.float32)
    high = np.array([1.0, 0.5, 6.0], np.float32)
    env = _masked_env(spaces.Box(low, high), num_envs=3)
    rng = np.random.default_rng(0)
    actions = random_actions(env, _state(env, None), rng)[0]
    assert actions.shape == (3, 2, 3) and actions.dtype == np.float32
    assert ((actions >= low) & (actions <= high)).all()
    env.reset(seed=0)
    env.step([actions])
