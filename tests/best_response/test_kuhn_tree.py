"""Exact Kuhn poker: literature values, a brute-force best response, meta-mixtures, and the encoding."""

import functools
import itertools

import numpy as np
import pytest
from _kuhn_tables import ALWAYS_PASS, UNIFORM, equilibrium

from marljoint.best_response.exploitability import kuhn_exploitability, kuhn_nash_conv
from marljoint.best_response.kuhn import (
    KUHN_DEALS,
    KUHN_INFOSETS,
    kuhn_best_response,
    kuhn_infoset_observations,
    kuhn_mixture_table,
    kuhn_policy_value,
    tables_from_policy,
)


def random_tables(rng):
    return [rng.dirichlet(np.ones(2), size=6) for _ in range(2)]


def brute_force_best_response_value(tables, player):
    """Try all 2^6 deterministic policies of `player` and keep the best value."""
    best = -np.inf
    for actions in itertools.product(range(2), repeat=6):
        candidate = list(tables)
        candidate[player] = np.eye(2)[list(actions)]
        best = max(best, kuhn_policy_value(candidate)[player])
    return best


def test_infoset_order():
    assert KUHN_INFOSETS[0] == [(0, ""), (0, "pb"), (1, ""), (1, "pb"), (2, ""), (2, "pb")]
    assert KUHN_INFOSETS[1] == [(0, "p"), (0, "b"), (1, "p"), (1, "b"), (2, "p"), (2, "b")]
    assert len(KUHN_DEALS) == 6 and len(set(KUHN_DEALS)) == 6


def test_observation_encoding():
    observations = kuhn_infoset_observations(0)
    assert observations.dtype == np.float32 and observations.shape == (6, 9)
    # Q after "pb": card Q, player 0, history index 3.
    np.testing.assert_array_equal(observations[3], [0, 1, 0, 1, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(observations[0], [1, 0, 0, 1, 0, 1, 0, 0, 0])
    observations = kuhn_infoset_observations(1)
    # K after "b": card K, player 1, history index 2.
    np.testing.assert_array_equal(observations[5], [0, 0, 1, 0, 1, 0, 0, 1, 0])
    np.testing.assert_array_equal(observations[0], [1, 0, 0, 0, 1, 0, 1, 0, 0])
    for player in (0, 1):
        np.testing.assert_array_equal(kuhn_infoset_observations(player).sum(axis=1), np.full(6, 3.0))


def test_uniform_play_nash_conv_is_eleven_twelfths():
    assert kuhn_nash_conv([UNIFORM, UNIFORM]) == pytest.approx(11 / 12, abs=1e-12)
    assert kuhn_exploitability([UNIFORM, UNIFORM]) == pytest.approx(11 / 24, abs=1e-12)


def test_uniform_play_values_by_hand():
    # Under uniform play player 0 wins 1/8 on average (5 terminal lines, each weighted by its probability).
    assert kuhn_policy_value([UNIFORM, UNIFORM]) == pytest.approx((0.125, -0.125), abs=1e-12)
    assert kuhn_best_response([UNIFORM, UNIFORM], 0)[0] == pytest.approx(0.5, abs=1e-12)
    assert kuhn_best_response([UNIFORM, UNIFORM], 1)[0] == pytest.approx(5 / 12, abs=1e-12)


def test_always_pass_nash_conv_is_two():
    # Both check/fold: every hand is a ±1 showdown, worth 0 to each. Against a player who always folds,
    # betting every hand wins the ante (1) for player 0; player 1 wins 1 by betting after "p" (0 folds).
    tables = [ALWAYS_PASS, ALWAYS_PASS]
    assert kuhn_policy_value(tables) == pytest.approx((0.0, 0.0), abs=1e-12)
    assert kuhn_best_response(tables, 0)[0] == pytest.approx(1.0, abs=1e-12)
    assert kuhn_best_response(tables, 1)[0] == pytest.approx(1.0, abs=1e-12)
    assert kuhn_nash_conv(tables) == pytest.approx(2.0, abs=1e-12)


@pytest.mark.parametrize("alpha", [0.0, 0.1, 1 / 6, 0.25, 1 / 3])
def test_equilibrium_family_has_zero_nash_conv(alpha):
    tables = equilibrium(alpha)
    assert abs(kuhn_nash_conv(tables)) < 1e-12
    assert kuhn_policy_value(tables)[0] == pytest.approx(-1 / 18, abs=1e-12)


def test_best_response_matches_brute_force_over_pure_policies():
    rng = np.random.default_rng(0)
    for tables in [random_tables(rng) for _ in range(4)] + [[UNIFORM, ALWAYS_PASS], equilibrium(0.2)]:
        for player in (0, 1):
            value, br_table = kuhn_best_response(tables, player)
            assert value == pytest.approx(brute_force_best_response_value(tables, player), abs=1e-12)
            # The returned table is deterministic and achieves the value.
            assert set(np.unique(br_table)) <= {0.0, 1.0}
            np.testing.assert_array_equal(br_table.sum(axis=1), np.ones(6))
            played = list(tables)
            played[player] = br_table
            assert kuhn_policy_value(played)[player] == pytest.approx(value, abs=1e-12)


def test_nash_conv_matches_openspiel():
    pyspiel = pytest.importorskip("pyspiel")
    from open_spiel.python import policy as openspiel_policy
    from open_spiel.python.algorithms import exploitability as openspiel_exploitability

    game = pyspiel.load_game("kuhn_poker")
    rng = np.random.default_rng(1)
    for tables in [random_tables(rng) for _ in range(3)] + [[ALWAYS_PASS, ALWAYS_PASS]]:
        tabular = openspiel_policy.TabularPolicy(game)
        for key, index in tabular.state_lookup.items():
            card, history = int(key[0]), key[1:]
            player = len(history) % 2
            tabular.action_probability_array[index] = tables[player][
                KUHN_INFOSETS[player].index((card, history))
            ]
        expected = openspiel_exploitability.nash_conv(game, tabular)
        assert kuhn_nash_conv(tables) == pytest.approx(expected, abs=1e-12)


def test_mixture_weights_by_own_reach_not_naively():
    # Member A bets J at the root, so never reaches (J, "pb"); member B checks J and folds there.
    member_a = UNIFORM.copy()
    member_a[0] = [0.0, 1.0]
    member_a[1] = [0.0, 1.0]
    member_b = UNIFORM.copy()
    member_b[0] = [1.0, 0.0]
    member_b[1] = [1.0, 0.0]
    weights = np.array([0.5, 0.5])
    mixture = kuhn_mixture_table([member_a, member_b], weights, player=0)
    naive = 0.5 * member_a + 0.5 * member_b
    np.testing.assert_allclose(mixture[1], [1.0, 0.0])
    np.testing.assert_allclose(naive[1], [0.5, 0.5])
    # At the root every member reaches with probability 1, so the mixture is the weighted average there.
    np.testing.assert_allclose(mixture[0], naive[0])


def value_against(table, opponent, player):
    """Expected payoff of `player` playing `table` against the other player's `opponent` table."""
    tables = [table, opponent] if player == 0 else [opponent, table]
    return kuhn_policy_value(tables)[player]


def test_mixture_plays_the_weighted_average_of_member_payoffs():
    rng = np.random.default_rng(2)
    for player in (0, 1):
        members = [rng.dirichlet(np.ones(2), size=6) for _ in range(3)]
        weights = rng.dirichlet(np.ones(3))
        opponent = rng.dirichlet(np.ones(2), size=6)
        value_of = functools.partial(value_against, opponent=opponent, player=player)
        mixture = kuhn_mixture_table(members, weights, player)
        expected = sum(weight * value_of(member) for weight, member in zip(weights, members))
        assert value_of(mixture) == pytest.approx(expected, abs=1e-12)
        naive = sum(weight * member for weight, member in zip(weights, members))
        if player == 1:
            # Player 1 has no earlier decisions, so its reach is always 1 and the naive average is right.
            np.testing.assert_allclose(mixture, naive, atol=1e-12)
        else:
            assert value_of(naive) != pytest.approx(expected, abs=1e-6)


def test_mixture_weights_are_normalised_and_unreached_rows_fall_back_to_the_average():
    always_bet = np.tile([0.0, 1.0], (6, 1))
    other = always_bet.copy()
    other[1::2] = [1.0, 0.0]  # differs only at the "pb" rows, which neither member reaches
    mixture = kuhn_mixture_table([always_bet, other], np.array([3.0, 1.0]), player=0)
    np.testing.assert_allclose(mixture[1::2], np.tile([0.25, 0.75], (3, 1)))
    np.testing.assert_allclose(mixture[0::2], np.tile([0.0, 1.0], (3, 1)))


def test_tables_from_policy_queries_once_per_player():
    calls = []

    def policy_fn(player, observations):
        calls.append((player, observations.copy()))
        # Bet with the probability given by the card index / 2.
        bet = observations[:, :3] @ np.array([0.0, 0.5, 1.0])
        return np.stack([1 - bet, bet], axis=1).astype(np.float32)

    tables = tables_from_policy(policy_fn)
    assert [player for player, _ in calls] == [0, 1]
    for player, observations in calls:
        np.testing.assert_array_equal(observations, kuhn_infoset_observations(player))
    for table in tables:
        assert table.dtype == np.float64 and table.shape == (6, 2)
        np.testing.assert_allclose(table[:, 1], [0.0, 0.0, 0.5, 0.5, 1.0, 1.0])


def test_tables_from_policy_errors():
    with pytest.raises(ValueError, match=r"policy_fn\(player=0, observations\) output has shape \(6, 3\)"):
        tables_from_policy(lambda player, observations: np.full((6, 3), 1 / 3))
    with pytest.raises(ValueError, match=r"row 0 sums to .*not logits"):
        tables_from_policy(lambda player, observations: np.full((6, 2), 2.0))


def test_table_errors_name_the_player_and_the_fix():
    with pytest.raises(ValueError, match=r"got 1 tables; pass \[table_player_0, table_player_1\]"):
        kuhn_nash_conv([UNIFORM])
    with pytest.raises(ValueError, match=r"tables\[1\] has shape \(2, 6\); .* shape \(6, 2\)"):
        kuhn_policy_value([UNIFORM, UNIFORM.T])
    bad = UNIFORM.copy()
    bad[4] = [0.9, 0.3]
    with pytest.raises(ValueError, match=r"tables\[0\] row 4 sums to 1.2.*Normalise each row"):
        kuhn_exploitability([bad, UNIFORM])
    negative = UNIFORM.copy()
    negative[0] = [1.5, -0.5]
    with pytest.raises(ValueError, match=r"tables\[1\] has a negative or non-finite entry"):
        kuhn_best_response([UNIFORM, negative], 0)
    with pytest.raises(ValueError, match=r"player=2; Kuhn poker has players 0 and 1"):
        kuhn_best_response([UNIFORM, UNIFORM], 2)
    with pytest.raises(ValueError, match=r"player=-1"):
        kuhn_infoset_observations(-1)


def test_mixture_errors():
    with pytest.raises(ValueError, match="tables is empty"):
        kuhn_mixture_table([], np.array([]), 0)
    with pytest.raises(ValueError, match=r"weights has shape \(1,\) but there are 2 tables"):
        kuhn_mixture_table([UNIFORM, UNIFORM], np.array([1.0]), 0)
    with pytest.raises(ValueError, match="must be non-negative and finite with a positive sum"):
        kuhn_mixture_table([UNIFORM, UNIFORM], np.array([0.0, 0.0]), 1)
    with pytest.raises(ValueError, match="must be non-negative and finite with a positive sum"):
        kuhn_mixture_table([UNIFORM, UNIFORM], np.array([1.5, -0.5]), 1)
