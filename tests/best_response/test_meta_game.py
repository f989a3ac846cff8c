"""The empirical meta-game: NaN until estimated, growth by new rows/columns only, symmetric averaging."""

import numpy as np
import pytest

from marljoint.best_response.meta_game import MetaGame
from marljoint.best_response.meta_solvers import nash

RPS = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])


def test_growth_lists_only_the_new_rows_and_columns():
    game = MetaGame(2)
    game.grow([1, 1])
    np.testing.assert_array_equal(game.missing_profiles(), [[0, 0]])
    game.fill([[0, 0]], [[0.5, -0.5]])
    assert game.is_complete
    game.grow([2, 2])
    np.testing.assert_array_equal(game.missing_profiles(), [[0, 1], [1, 0], [1, 1]])
    assert np.isnan(game.payoffs[0][1, 1]) and game.payoffs[0][0, 0] == 0.5
    game.fill(game.missing_profiles(), [[1.0, -1.0], [2.0, -2.0], [3.0, -3.0]])
    np.testing.assert_array_equal(game.payoffs[0], [[0.5, 1.0], [2.0, 3.0]])
    np.testing.assert_array_equal(game.payoffs[1], -game.payoffs[0])
    game.grow([3, 2])
    np.testing.assert_array_equal(game.missing_profiles(), [[2, 0], [2, 1]])


def test_three_players():
    game = MetaGame(3)
    game.grow([1, 2, 1])
    assert game.shape == (1, 2, 1) and len(game.missing_profiles()) == 2
    game.fill(game.missing_profiles(), np.ones((2, 3)))
    game.grow([2, 2, 2])
    assert len(game.missing_profiles()) == 8 - 2


def test_symmetric_fill_averages_each_entry_with_its_mirror():
    game = MetaGame(2, symmetric=True)
    game.grow([2, 2])
    # u_0(0, 1) = 1 and u_1(1, 0) = 3 estimate the same quantity; likewise the diagonal with itself.
    game.fill([[0, 0], [0, 1], [1, 0], [1, 1]], [[0.0, 0.2], [1.0, -1.0], [-1.0, 3.0], [0.4, 0.0]])
    np.testing.assert_allclose(game.payoffs[0], [[0.1, 2.0], [-1.0, 0.2]])
    np.testing.assert_allclose(game.payoffs[1], game.payoffs[0].T)
    with pytest.raises(ValueError, match="pass equal sizes"):
        game.grow([3, 2])
    with pytest.raises(ValueError, match="two seats sharing one population"):
        MetaGame(3, symmetric=True)


def test_solve_and_nash_conv_with_padding():
    game = MetaGame(2)
    game.grow([3, 3])
    game.fill(game.missing_profiles(), np.stack([RPS.ravel(), -RPS.ravel()], axis=1))
    strategies = game.solve(nash)
    np.testing.assert_allclose(strategies[0], np.full(3, 1 / 3), atol=1e-9)
    assert game.nash_conv(strategies) == pytest.approx(0.0, abs=1e-9)
    # Rock only (an earlier, shorter meta-strategy) is beaten by paper: each player gains 1.
    assert game.nash_conv([np.ones(1), np.ones(1)]) == pytest.approx(2.0)


def test_errors_name_the_problem():
    game = MetaGame(2)
    game.grow([2, 2])
    with pytest.raises(ValueError, match=r"payoffs\[0\] holds nan"):
        game.solve(nash)
    with pytest.raises(ValueError, match="would shrink"):
        game.grow([1, 2])
    with pytest.raises(ValueError, match="lies outside the meta-game"):
        game.fill([[2, 0]], [[1.0, 1.0]])
    with pytest.raises(ValueError, match="must be finite"):
        game.fill([[0, 0]], [[np.nan, 1.0]])
    with pytest.raises(ValueError, match="got 1 profiles and 2 rows"):
        game.fill([[0, 0]], [[1.0, 1.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match="got 3 sizes for 2 players"):
        game.grow([2, 2, 2])


def test_state_dict_round_trip():
    game = MetaGame(2)
    game.grow([2, 1])
    game.fill([[1, 0]], [[1.0, 2.0]])
    restored = MetaGame.from_state_dict(game.state_dict())
    np.testing.assert_array_equal(restored.payoffs[1], game.payoffs[1])
    assert restored.shape == (2, 1) and restored.missing_profiles().tolist() == [[0, 0]]
