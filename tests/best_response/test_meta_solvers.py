"""Meta-solvers against literature equilibria, a naive projection, and their error messages."""

import functools

import numpy as np
import pytest

from marljoint.best_response.exploitability import matrix_exploitability, matrix_nash_conv
from marljoint.best_response.meta_solvers import (
    META_SOLVERS,
    fictitious_play,
    get_meta_solver,
    nash,
    prd,
    project_to_simplex,
    regret_matching,
    uniform,
)

ROCK_PAPER_SCISSORS = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])
MATCHING_PENNIES = np.array([[1.0, -1.0], [-1.0, 1.0]])
# OpenSpiel's biased rock-paper-scissors, player 0's payoffs.
BIASED_RPS = np.array([[0.0, -25.0, 50.0], [25.0, 0.0, -5.0], [-50.0, 5.0, 0.0]])
# Prisoners' dilemma, (cooperate, defect): cooperating is strictly dominated.
PRISONERS_ROW = np.array([[3.0, 0.0], [5.0, 1.0]])
# Battle of the sexes: pure equilibria (0, 0) and (1, 1), mixed equilibrium x = (2/3, 1/3), y = (1/3, 2/3).
SEXES_ROW = np.array([[2.0, 0.0], [0.0, 1.0]])
SEXES_COL = np.array([[1.0, 0.0], [0.0, 2.0]])

ZERO_SUM_GAMES = {"rps": ROCK_PAPER_SCISSORS, "matching_pennies": MATCHING_PENNIES}
ITERATIVE_SOLVERS = {"prd": prd, "regret_matching": regret_matching}


def zero_sum(payoff):
    return [payoff, -payoff]


def indifference_nash(payoff):
    """Interior equilibrium of a square zero-sum game: the opponent's mix equalises every row's payoff."""
    size = payoff.shape[0]
    lhs = np.vstack([np.hstack([payoff, -np.ones((size, 1))]), np.r_[np.ones(size), 0.0]])
    solution = np.linalg.solve(lhs, np.r_[np.zeros(size), 1.0])
    return solution[:size], solution[size]


def random_game(rng, shape):
    return [rng.normal(size=shape) for _ in shape]


def test_registry_names():
    assert set(META_SOLVERS) == {"uniform", "fictitious_play", "nash", "prd", "regret_matching"}
    for name, solver in META_SOLVERS.items():
        assert get_meta_solver(name) is solver


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(
        ValueError, match=r"unknown meta-solver 'alpharank'; choose one of \['fictitious_play', 'nash'"
    ):
        get_meta_solver("alpharank")


@pytest.mark.parametrize("name", sorted(META_SOLVERS))
@pytest.mark.parametrize("shape", [(1, 1), (1, 4), (3, 2), (5, 5)])
def test_two_player_outputs_are_distributions(name, shape):
    game = random_game(np.random.default_rng(sum(shape)), shape)
    solver = get_meta_solver(name)
    if name in ITERATIVE_SOLVERS:
        solver = functools.partial(solver, iterations=200)
    strategies = solver(game)
    assert len(strategies) == 2
    for strategy, size in zip(strategies, shape):
        assert strategy.dtype == np.float64 and strategy.shape == (size,)
        assert strategy.min() >= 0 and strategy.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("solver", [uniform, fictitious_play, prd, regret_matching])
def test_three_player_outputs_are_distributions(solver):
    game = random_game(np.random.default_rng(5), (3, 4, 2))
    strategies = solver(game)
    assert [strategy.shape for strategy in strategies] == [(3,), (4,), (2,)]
    for strategy in strategies:
        assert strategy.dtype == np.float64
        assert strategy.min() >= 0 and strategy.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("solver", [prd, regret_matching])
def test_three_player_dominant_strategies_are_found(solver):
    # Each player's strategy 0 pays 1 more than any other, whatever the others play.
    rng = np.random.default_rng(6)
    game = [rng.normal(size=(2, 3, 2)) * 0.1 for _ in range(3)]
    for player, payoff in enumerate(game):
        index = [slice(None)] * 3
        index[player] = 0
        payoff[tuple(index)] += 1.0
    for strategy in solver(game):
        assert strategy[0] > 0.99


def test_uniform_and_fictitious_play():
    game = random_game(np.random.default_rng(7), (2, 4, 5))
    expected = [np.full(2, 0.5), np.full(4, 0.25), np.full(5, 0.2)]
    for solver in (uniform, fictitious_play):
        for strategy, want in zip(solver(game), expected):
            np.testing.assert_array_equal(strategy, want)


@pytest.mark.parametrize("payoff", ZERO_SUM_GAMES.values(), ids=ZERO_SUM_GAMES.keys())
def test_nash_of_symmetric_zero_sum_games_is_uniform(payoff):
    size = payoff.shape[0]
    for strategy in nash(zero_sum(payoff)):
        np.testing.assert_allclose(strategy, np.full(size, 1.0 / size), atol=1e-6)


def test_nash_of_biased_rps_matches_the_indifference_equations():
    analytic, value = indifference_nash(BIASED_RPS)
    # Solving by hand: 25 x_R = 5 x_S and 25 x_P = 50 x_S give (1, 10, 5) / 16.
    np.testing.assert_allclose(analytic, np.array([1.0, 10.0, 5.0]) / 16, atol=1e-12)
    assert value == pytest.approx(0.0, abs=1e-12)
    for strategy in nash(zero_sum(BIASED_RPS)):
        np.testing.assert_allclose(strategy, analytic, atol=1e-6)


def test_nash_solves_constant_sum_games():
    row, col = nash([BIASED_RPS, 3.0 - BIASED_RPS])
    np.testing.assert_allclose(row, np.array([1.0, 10.0, 5.0]) / 16, atol=1e-6)
    np.testing.assert_allclose(col, np.array([1.0, 10.0, 5.0]) / 16, atol=1e-6)


def test_nash_puts_no_mass_on_a_dominated_strategy():
    row, col = nash([PRISONERS_ROW, PRISONERS_ROW.T])
    np.testing.assert_array_equal(row, [0.0, 1.0])
    np.testing.assert_array_equal(col, [0.0, 1.0])


@pytest.mark.parametrize("solver", ITERATIVE_SOLVERS.values(), ids=ITERATIVE_SOLVERS.keys())
def test_iterative_solvers_nearly_drop_a_dominated_strategy(solver):
    for strategy in solver([PRISONERS_ROW, PRISONERS_ROW.T]):
        assert strategy[0] < 1e-2


def test_nash_of_battle_of_the_sexes_is_an_equilibrium():
    game = [SEXES_ROW, SEXES_COL]
    assert matrix_nash_conv(game, nash(game)) < 1e-9
    # The mixed equilibrium, derived from the indifference conditions, is an equilibrium too.
    assert matrix_nash_conv(game, [np.array([2 / 3, 1 / 3]), np.array([1 / 3, 2 / 3])]) < 1e-12


def test_nash_of_a_general_sum_game_with_a_unique_mixed_equilibrium():
    # No pure equilibrium (the column player always wants to mismatch). The column mix y makes the row player
    # indifferent: 2 y_0 = y_1, so y = (1/3, 2/3); the row mix x makes the column player indifferent:
    # x_1 = x_0, so x = (1/2, 1/2).
    row_payoff = np.array([[2.0, 0.0], [0.0, 1.0]])
    col_payoff = np.array([[0.0, 1.0], [1.0, 0.0]])
    row, col = nash([row_payoff, col_payoff])
    np.testing.assert_allclose(row, [0.5, 0.5], atol=1e-12)
    np.testing.assert_allclose(col, [1 / 3, 2 / 3], atol=1e-12)


def test_nash_rejects_more_than_two_players():
    with pytest.raises(ValueError, match=r"got 3 players; use 'prd'"):
        nash(random_game(np.random.default_rng(8), (2, 2, 2)))


@pytest.mark.parametrize("name", sorted(META_SOLVERS))
def test_nan_entry_names_the_player_and_the_fix(name):
    game = [np.zeros((2, 2)), np.zeros((2, 2))]
    game[1][0, 1] = np.nan
    with pytest.raises(ValueError, match=r"payoffs\[1\] holds nan at index \(0, 1\).*simulate"):
        get_meta_solver(name)(game)


@pytest.mark.parametrize("solver", ITERATIVE_SOLVERS.values(), ids=ITERATIVE_SOLVERS.keys())
@pytest.mark.parametrize("payoff", ZERO_SUM_GAMES.values(), ids=ZERO_SUM_GAMES.keys())
def test_iterative_solvers_approach_nash_on_symmetric_games(solver, payoff):
    assert matrix_exploitability(zero_sum(payoff), solver(zero_sum(payoff))) < 1e-2


@pytest.mark.parametrize("solver", ITERATIVE_SOLVERS.values(), ids=ITERATIVE_SOLVERS.keys())
def test_iterative_solvers_approach_nash_away_from_uniform(solver):
    # Uniform is not an equilibrium of biased RPS, so the dynamics must move; the payoff range is 100.
    strategies = solver(zero_sum(BIASED_RPS))
    assert matrix_exploitability(zero_sum(BIASED_RPS), strategies) / np.ptp(BIASED_RPS) < 1e-2
    np.testing.assert_allclose(strategies[0], np.array([1.0, 10.0, 5.0]) / 16, atol=3e-2)


def test_prd_keeps_the_exploration_floor():
    strategies = prd([PRISONERS_ROW, PRISONERS_ROW.T], gamma=0.1, iterations=2_000, average_over_last=100)
    for strategy in strategies:
        assert strategy.min() >= 0.1 / 2 - 1e-12
        assert strategy[0] == pytest.approx(0.05, abs=1e-9)


def test_prd_settings_bind_with_partial():
    solver = functools.partial(prd, iterations=10, step_size=0.1, gamma=0.0)
    strategies = solver(zero_sum(ROCK_PAPER_SCISSORS))
    for strategy in strategies:
        np.testing.assert_allclose(strategy, np.full(3, 1 / 3), atol=1e-12)


def test_regret_matching_first_step_by_hand():
    # Iterate 1 is uniform; matching pennies is symmetric at uniform: regrets stay 0, play stays uniform.
    np.testing.assert_allclose(regret_matching(zero_sum(MATCHING_PENNIES), iterations=1)[0], [0.5, 0.5])
    # Against the row player's uniform start, the column player's regrets in [[1, 0], [0, 0]] (column payoffs)
    # are (0.5 - 0.25, 0 - 0.25), so its second iterate is (1, 0); the average of the two is (0.75, 0.25).
    row_payoff = np.zeros((2, 2))
    col_payoff = np.array([[1.0, 0.0], [0.0, 0.0]])
    _, col = regret_matching([row_payoff, col_payoff], iterations=2, refine=False)
    np.testing.assert_allclose(col, [0.75, 0.25])
    # Refined, the solver compares that average with the last iterate (1, 0) and a best-response profile: the
    # column player is indifferent against row's (0.5, 0.5) average only at (1, 0), whose NashConv is 0.
    _, refined = regret_matching([row_payoff, col_payoff], iterations=2)
    np.testing.assert_allclose(refined, [1.0, 0.0])


def test_refined_regret_matching_finds_a_pure_equilibrium_of_a_common_interest_game():
    rng = np.random.default_rng(0)
    common = rng.normal(size=(5, 5, 5, 5))
    payoffs = [common + 0.1 * rng.normal(size=common.shape) for _ in range(4)]
    plain = regret_matching(payoffs, refine=False)
    refined = regret_matching(payoffs)
    assert matrix_nash_conv(payoffs, plain) > 1e-4
    assert matrix_nash_conv(payoffs, refined) == 0.0
    assert all(sorted(s.tolist()) == [0, 0, 0, 0, 1] for s in refined)  # pure
    # In matching pennies no pure profile is stable, so the average is kept.
    np.testing.assert_allclose(regret_matching(zero_sum(MATCHING_PENNIES))[0], [0.5, 0.5], atol=1e-2)


def test_iterative_solver_settings_are_validated():
    game = zero_sum(MATCHING_PENNIES)
    with pytest.raises(ValueError, match=r"iterations=0; pass a positive integer"):
        prd(game, iterations=0)
    with pytest.raises(ValueError, match=r"iterations=2.5; pass a positive integer"):
        regret_matching(game, iterations=2.5)
    with pytest.raises(ValueError, match=r"step_size=-1.0; pass a positive step size"):
        prd(game, step_size=-1.0)
    with pytest.raises(ValueError, match=r"gamma=1.0; the exploration floor must lie in \[0, 1\)"):
        prd(game, gamma=1.0)
    with pytest.raises(ValueError, match=r"average_over_last=20; pass an integer in \[1, iterations=10\]"):
        prd(game, iterations=10, average_over_last=20)


def naive_floor_projection(vector, floor):
    """Bisection on the threshold t with sum(max(vector - t, floor)) = 1."""
    low, high = vector.min() - 1.0, vector.max()
    for _ in range(200):
        middle = (low + high) / 2
        if np.maximum(vector - middle, floor).sum() > 1.0:
            low = middle
        else:
            high = middle
    return np.maximum(vector - (low + high) / 2, floor)


def test_project_to_simplex_matches_bisection():
    rng = np.random.default_rng(9)
    for _ in range(50):
        size = int(rng.integers(1, 8))
        vector = rng.normal(size=size) * 2
        floor = float(rng.uniform(0, 1 / size))
        projected = project_to_simplex(vector, floor)
        np.testing.assert_allclose(projected, naive_floor_projection(vector, floor), atol=1e-10)
        assert projected.sum() == pytest.approx(1.0) and projected.min() >= floor - 1e-12
    np.testing.assert_allclose(project_to_simplex(np.array([0.2, 0.3, 0.5])), [0.2, 0.3, 0.5])
    np.testing.assert_allclose(project_to_simplex(np.array([2.0, 0.0])), [1.0, 0.0])
