"""kuhn_poker_v0: the payoff table, the fixed observation encoding, and play through the AEC env."""

from __future__ import annotations

import numpy as np
import pytest

from marljoint_envs import kuhn_poker_v0
from marljoint_envs.kuhn_poker_v0 import DECISION_HISTORIES, TERMINAL_HISTORIES, encode_observation, payoff

# Sign of player 0's showdown result for each deal (cards of player 0, player 1), J=0 < Q=1 < K=2.
SHOWDOWN_WINNER = {(0, 1): -1, (0, 2): -1, (1, 0): 1, (1, 2): -1, (2, 0): 1, (2, 1): 1}


@pytest.mark.parametrize("cards", list(SHOWDOWN_WINNER))
def test_payoff_table_for_every_deal_and_terminal_history(cards: tuple[int, int]) -> None:
    sign = SHOWDOWN_WINNER[cards]
    assert {history: payoff(cards, history) for history in TERMINAL_HISTORIES} == {
        "pp": (1.0 * sign, -1.0 * sign),
        "pbp": (-1.0, 1.0),
        "pbb": (2.0 * sign, -2.0 * sign),
        "bp": (1.0, -1.0),
        "bb": (2.0 * sign, -2.0 * sign),
    }


def test_history_lists() -> None:
    assert DECISION_HISTORIES == ("", "p", "b", "pb")
    assert set(TERMINAL_HISTORIES) == {"pp", "pbp", "pbb", "bp", "bb"}


def test_encode_observation_layout() -> None:
    assert encode_observation(2, 1, "").tolist() == [0, 0, 1, 0, 1, 1, 0, 0, 0]
    assert encode_observation(0, 0, "p").tolist() == [1, 0, 0, 1, 0, 0, 1, 0, 0]
    assert encode_observation(1, 1, "b").tolist() == [0, 1, 0, 0, 1, 0, 0, 1, 0]
    assert encode_observation(0, 0, "pb").tolist() == [1, 0, 0, 1, 0, 0, 0, 0, 1]
    for history in TERMINAL_HISTORIES:
        assert encode_observation(1, 0, history).tolist() == [0, 1, 0, 1, 0, 0, 0, 0, 0]
    assert encode_observation(1, 0, "").dtype == np.float32


@pytest.mark.parametrize("history", TERMINAL_HISTORIES)
def test_playing_a_history_observes_encodes_and_pays(history: str) -> None:
    env = kuhn_poker_v0.env()
    env.reset(seed=7)
    cards = env.unwrapped.cards
    played = ""
    for move in history:
        player = len(played) % 2
        agent = f"player_{player}"
        assert env.agent_selection == agent
        observation, reward, terminated, truncated, _ = env.last()
        np.testing.assert_array_equal(
            observation["observation"], encode_observation(cards[player], player, played)
        )
        assert observation["action_mask"].tolist() == [1, 1]
        assert observation["action_mask"].dtype == np.int8
        other = env.observe(f"player_{1 - player}")
        assert other["action_mask"].tolist() == [0, 0]
        assert (reward, terminated, truncated) == (0.0, False, False)
        env.step("pb".index(move))
        played += move
    expected = payoff(cards, history)
    assert env.terminations == {"player_0": True, "player_1": True}
    assert env.truncations == {"player_0": False, "player_1": False}
    returns = {}
    for agent in env.agent_iter():
        observation, reward, terminated, _, _ = env.last()
        assert terminated and observation["action_mask"].tolist() == [0, 0]
        assert observation["observation"][5:].tolist() == [0, 0, 0, 0]
        returns[agent] = reward
        env.step(None)
    assert returns == {"player_0": expected[0], "player_1": expected[1]}


def test_deals_are_two_distinct_cards_covering_every_deal() -> None:
    env = kuhn_poker_v0.raw_env()
    deals = set()
    env.reset(seed=0)
    for _ in range(200):
        deals.add(env.cards)
        env.reset()
    assert deals == set(SHOWDOWN_WINNER)


def test_parallel_env_uses_only_the_acting_players_action() -> None:
    env = kuhn_poker_v0.parallel_env()
    env.reset(seed=1)
    cards = env.unwrapped.cards
    env.step({"player_0": 1, "player_1": 0})  # player_0 bets; player_1's action is not used
    _, rewards, terminations, _, _ = env.step({"player_0": 0, "player_1": 1})  # player_1 calls
    assert all(terminations.values())
    assert (rewards["player_0"], rewards["player_1"]) == payoff(cards, "bb")


@pytest.mark.parametrize(
    ("cards", "history", "message"),
    [
        ((1, 1), "pp", r"cards must be two distinct cards in \{0, 1, 2\}, got \(1, 1\)"),
        ((0, 3), "pp", r"cards must be two distinct cards"),
        ((0,), "pp", r"cards must be two distinct cards"),
        ((0, 1), "pb", r"history 'pb' is not terminal"),
        ((0, 1), "bbb", r"history must be a Kuhn poker history, .* got 'bbb'"),
    ],
)
def test_payoff_rejects_invalid_input(cards: tuple, history: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        payoff(cards, history)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((3, 0, ""), r"card must be 0 \(J\), 1 \(Q\) or 2 \(K\), got 3"),
        ((0, 2, ""), r"player must be 0 or 1, got 2"),
        ((0, 0, "x"), r"history must be a Kuhn poker history"),
    ],
)
def test_encode_observation_rejects_invalid_input(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        encode_observation(*args)


def test_raw_env_rejects_invalid_actions() -> None:
    env = kuhn_poker_v0.raw_env()
    env.reset(seed=0)
    with pytest.raises(
        ValueError, match=r"action 2 of agent 'player_0' is not in its action space Discrete\(2\)"
    ):
        env.step(2)
