"""matrix_game_v0: the named payoff arrays, payoff_tensors, one-shot play, custom payoffs."""

from __future__ import annotations

import numpy as np
import pytest

from marljoint_envs import matrix_game_v0
from marljoint_envs.matrix_game_v0 import GAMES, payoff_tensors


def test_named_games_have_the_documented_shapes() -> None:
    assert {name: payoffs.shape for name, payoffs in GAMES.items()} == {
        "rps": (3, 3, 2),
        "biased_rps": (3, 3, 2),
        "matching_pennies": (2, 2, 2),
        "prisoners_dilemma": (2, 2, 2),
        "coordination": (3, 3, 2),
        "three_player": (2, 2, 2, 3),
    }
    for payoffs in GAMES.values():
        assert not payoffs.flags.writeable


@pytest.mark.parametrize("name", ["rps", "biased_rps", "matching_pennies", "three_player"])
def test_zero_sum_games_sum_to_zero(name: str) -> None:
    np.testing.assert_array_equal(GAMES[name].sum(axis=-1), 0.0)


def test_payoff_tensors_of_named_games() -> None:
    row, column = payoff_tensors("biased_rps")
    assert row.tolist() == [[0, -25, 50], [25, 0, -5], [-50, 5, 0]]
    np.testing.assert_array_equal(column, -row)
    row, column = payoff_tensors("rps")
    assert row.tolist() == [[0, -1, 1], [1, 0, -1], [-1, 1, 0]]
    row, column = payoff_tensors("prisoners_dilemma")
    assert row.tolist() == [[3, 0], [5, 1]]
    assert column.tolist() == [[3, 5], [0, 1]]
    row.fill(0.0)  # copies: the named game is untouched
    assert GAMES["prisoners_dilemma"][0, 0, 0] == 3.0


def test_coordination_game_is_cooperative_with_a_unique_optimum() -> None:
    row, column = payoff_tensors("coordination")
    np.testing.assert_array_equal(row, column)
    assert row.tolist() == [[11, -30, 0], [-30, 7, 6], [0, 0, 5]]
    assert np.sum(row == row.max()) == 1 and np.unravel_index(row.argmax(), row.shape) == (0, 0)


def test_three_player_odd_one_out() -> None:
    payoffs = GAMES["three_player"]
    assert payoffs[0, 0, 0].tolist() == [0, 0, 0]
    assert payoffs[1, 1, 1].tolist() == [0, 0, 0]
    assert payoffs[1, 0, 0].tolist() == [2, -1, -1]
    assert payoffs[0, 1, 1].tolist() == [2, -1, -1]
    assert payoffs[0, 0, 1].tolist() == [-1, -1, 2]
    tensors = payoff_tensors("three_player")
    assert len(tensors) == 3 and all(t.shape == (2, 2, 2) for t in tensors)


@pytest.mark.parametrize("name", list(GAMES))
def test_one_step_pays_every_joint_action_and_terminates(name: str) -> None:
    env = matrix_game_v0.parallel_env(game=name)
    assert env.possible_agents == [f"player_{p}" for p in range(GAMES[name].shape[-1])]
    for joint in np.ndindex(*GAMES[name].shape[:-1]):
        obs, _ = env.reset()
        assert all(o.tolist() == [1.0] for o in obs.values())
        _, rewards, terminations, truncations, _ = env.step(dict(zip(env.possible_agents, joint)))
        assert list(rewards.values()) == GAMES[name][joint].tolist()
        assert all(terminations.values()) and not any(truncations.values())
        assert env.agents == []


def test_custom_payoffs_replace_the_named_game() -> None:
    payoffs = np.arange(24.0).reshape(4, 3, 2)
    env = matrix_game_v0.parallel_env(payoffs=payoffs)
    assert [env.action_space(a).n for a in env.possible_agents] == [4, 3]
    env.reset()
    assert env.step({"player_0": 3, "player_1": 1})[1] == {"player_0": 20.0, "player_1": 21.0}
    assert [t.tolist() for t in payoff_tensors(payoffs.tolist())] == [
        payoffs[..., 0].tolist(),
        payoffs[..., 1].tolist(),
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"game": "chess"}, r"game must be one of 'rps', 'biased_rps', .* got 'chess'"),
        (
            {"payoffs": np.zeros((3, 3, 3))},
            r"payoffs must have shape \[n_1, \.\.\., n_P, P\] .* got shape \(3, 3, 3\)",
        ),
        ({"payoffs": np.zeros(3)}, r"got shape \(3,\)"),
        ({"payoffs": np.zeros((0, 2, 2))}, r"got shape \(0, 2, 2\)"),
        ({"payoffs": [[[1.0, np.nan]]]}, r"payoffs must be finite"),
        ({"payoffs": [[[1.0, np.inf]]]}, r"payoffs must be finite"),
        ({"payoffs": "abc"}, r"payoffs must be a numeric array"),
    ],
)
def test_invalid_games_raise(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        matrix_game_v0.parallel_env(**kwargs)


def test_payoff_tensors_rejects_unknown_names_and_bad_arrays() -> None:
    with pytest.raises(ValueError, match=r"game_or_array must be one of 'rps'"):
        payoff_tensors("chicken")
    with pytest.raises(ValueError, match=r"payoffs must have shape"):
        payoff_tensors(np.zeros((2, 2, 3)))


def test_out_of_range_action_raises() -> None:
    env = matrix_game_v0.parallel_env(game="matching_pennies")
    env.reset()
    with pytest.raises(
        ValueError, match=r"action 2 of agent 'player_1' is not in its action space Discrete\(2\)"
    ):
        env.step({"player_0": 0, "player_1": 2})
