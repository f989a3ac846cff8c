"""Normal-form game helpers: validation, action values, and the exact two-player solvers."""

import itertools

import numpy as np
import pytest

from marljoint.best_response.matrix import (
    action_values,
    is_constant_sum,
    lemke_howson,
    validate_payoffs,
    validate_strategies,
    zero_sum_nash,
)


def naive_action_values(payoff, strategies, player):
    """Loop over every pure profile and weight it by the others' probabilities."""
    values = np.zeros(payoff.shape[player])
    for profile in itertools.product(*(range(size) for size in payoff.shape)):
        weight = np.prod([strategies[q][i] for q, i in enumerate(profile) if q != player])
        values[profile[player]] += weight * payoff[profile]
    return values


def bimatrix_nash_conv(a, b, x, y):
    return (a @ y).max() - x @ a @ y + (x @ b).max() - x @ b @ y


def support_enumeration(a, b):
    """All equilibria of a nondegenerate bimatrix game: equal-size supports, indifference equations."""
    n, m = a.shape
    equilibria = []
    for size in range(1, min(n, m) + 1):
        for rows in itertools.combinations(range(n), size):
            for cols in itertools.combinations(range(m), size):
                # y on cols makes the row player indifferent over rows; x on rows does so for the columns.
                lhs_y = np.vstack(
                    [np.hstack([a[np.ix_(rows, cols)], -np.ones((size, 1))]), [[1] * size + [0]]]
                )
                lhs_x = np.vstack(
                    [np.hstack([b[np.ix_(rows, cols)].T, -np.ones((size, 1))]), [[1] * size + [0]]]
                )
                rhs = np.r_[np.zeros(size), 1.0]
                try:
                    solution_y = np.linalg.solve(lhs_y, rhs)
                    solution_x = np.linalg.solve(lhs_x, rhs)
                except np.linalg.LinAlgError:
                    continue
                x, y = np.zeros(n), np.zeros(m)
                x[list(rows)], y[list(cols)] = solution_x[:size], solution_y[:size]
                if x.min() < -1e-12 or y.min() < -1e-12:
                    continue
                if bimatrix_nash_conv(a, b, x, y) < 1e-9:
                    equilibria.append((x, y))
    return equilibria


def test_action_values_match_naive_loop_for_three_players():
    rng = np.random.default_rng(0)
    payoff = rng.normal(size=(3, 4, 2))
    strategies = [rng.dirichlet(np.ones(size)) for size in payoff.shape]
    for player in range(3):
        np.testing.assert_allclose(
            action_values(payoff, strategies, player),
            naive_action_values(payoff, strategies, player),
            atol=1e-12,
        )


def test_action_values_by_hand():
    payoff = np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(action_values(payoff, [None, np.array([0.25, 0.75])], 0), [1.75, 3.75])
    np.testing.assert_allclose(action_values(payoff, [np.array([0.5, 0.5]), None], 1), [2.0, 3.0])


def test_zero_sum_nash_of_a_game_with_a_saddle_point():
    payoff = np.array([[3.0, 1.0, 4.0], [2.0, 0.0, -1.0]])
    row, col, value = zero_sum_nash(payoff)
    np.testing.assert_allclose(row, [1.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(col, [0.0, 1.0, 0.0], atol=1e-12)
    assert value == pytest.approx(1.0)


def test_zero_sum_nash_value_agrees_with_lemke_howson():
    rng = np.random.default_rng(1)
    for _ in range(20):
        payoff = rng.normal(size=tuple(rng.integers(1, 6, size=2)))
        row, col, value = zero_sum_nash(payoff)
        lh_row, lh_col = lemke_howson(payoff, -payoff)
        assert bimatrix_nash_conv(payoff, -payoff, row, col) < 1e-8
        assert lh_row @ payoff @ lh_col == pytest.approx(value, abs=1e-8)


def test_lemke_howson_finds_one_of_the_enumerated_equilibria_of_nondegenerate_games():
    rng = np.random.default_rng(2)
    for _ in range(40):
        n, m = rng.integers(1, 5, size=2)
        a, b = rng.normal(size=(n, m)), rng.normal(size=(n, m))
        equilibria = support_enumeration(a, b)
        for label in range(n + m):
            x, y = lemke_howson(a, b, initial_label=label)
            assert any(
                np.allclose(x, ex, atol=1e-9) and np.allclose(y, ey, atol=1e-9) for ex, ey in equilibria
            )


def test_lemke_howson_on_degenerate_games_ends_at_an_equilibrium():
    rng = np.random.default_rng(3)
    for trial in range(150):
        n, m = rng.integers(1, 6, size=2)
        a = rng.integers(0, 3, size=(n, m)).astype(float)
        b = rng.integers(0, 3, size=(n, m)).astype(float) if trial % 3 else np.repeat(a[:1], n, axis=0)
        for label in range(n + m):
            x, y = lemke_howson(a, b, initial_label=label)
            assert x.min() >= 0 and y.min() >= 0
            assert x.sum() == pytest.approx(1.0) and y.sum() == pytest.approx(1.0)
            assert bimatrix_nash_conv(a, b, x, y) < 1e-12


def test_lemke_howson_rejects_bad_input():
    with pytest.raises(ValueError, match=r"same shape \[n, m\]"):
        lemke_howson(np.zeros((2, 2)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"initial_label=4 is out of range; pass a label in \[0, 4\)"):
        lemke_howson(np.zeros((2, 2)), np.zeros((2, 2)), initial_label=4)


def test_is_constant_sum():
    payoff = np.array([[1.0, -2.0], [0.5, 3.0]])
    assert is_constant_sum(payoff, -payoff)
    assert is_constant_sum(payoff, 7.0 - payoff)
    assert not is_constant_sum(payoff, payoff)


def test_validate_payoffs_errors():
    with pytest.raises(ValueError, match="payoffs is empty"):
        validate_payoffs([])
    with pytest.raises(ValueError, match="got a single array of shape"):
        validate_payoffs(np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match=r"payoffs\[1\] has 1 dimensions .* one axis per player"):
        validate_payoffs([np.zeros((2, 2)), np.zeros(4)])
    with pytest.raises(
        ValueError, match=r"payoffs\[1\] has shape \(2, 3\) but payoffs\[0\] has shape \(2, 2\)"
    ):
        validate_payoffs([np.zeros((2, 2)), np.zeros((2, 3))])
    with pytest.raises(ValueError, match=r"payoffs\[0\] holds inf at index \(1, 0\)"):
        validate_payoffs([np.array([[0.0, 0.0], [np.inf, 0.0]]), np.zeros((2, 2))])
    with pytest.raises(ValueError, match="at least one strategy"):
        validate_payoffs([np.zeros((0, 2)), np.zeros((0, 2))])


def test_validate_strategies_errors():
    shape = (2, 3)
    with pytest.raises(ValueError, match="got 1 strategies for a game of 2 players"):
        validate_strategies([np.ones(2) / 2], shape)
    with pytest.raises(ValueError, match=r"strategies\[1\] has shape \(2,\); player 1 has 3 strategies"):
        validate_strategies([np.ones(2) / 2, np.ones(2) / 2], shape)
    with pytest.raises(ValueError, match=r"strategies\[0\] = .* negative or non-finite"):
        validate_strategies([np.array([1.5, -0.5]), np.ones(3) / 3], shape)
    with pytest.raises(ValueError, match=r"strategies\[1\] sums to 2.0; .* divide it by its sum"):
        validate_strategies([np.ones(2) / 2, np.array([1.0, 1.0, 0.0])], shape)


def test_action_values_of_a_single_player_game_are_its_payoffs():
    np.testing.assert_array_equal(action_values(np.array([1.0, 3.0, 2.0]), [None], 0), [1.0, 3.0, 2.0])
