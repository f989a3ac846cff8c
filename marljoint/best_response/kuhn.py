"""Kuhn poker, solved exactly: game tree, tabular policies, values, best responses and meta-mixtures.

The game (as in ``marljoint_envs.kuhn_poker_v0`` and OpenSpiel's ``kuhn_poker``): three cards J < Q < K
(0, 1, 2); each player antes 1 and is dealt one of two distinct cards, all 6 deals equally likely. Actions are
0 = pass (check or fold) and 1 = bet (bet or call), one bet of 1 at most. Player 0 acts at histories ``""``
and ``"pb"``, player 1 at ``"p"`` and ``"b"``. Terminal histories and player 0's payoff: ``"pp"`` showdown
±1; ``"bb"`` and ``"pbb"`` showdown ±2; ``"bp"`` +1 (player 1 folded); ``"pbp"`` −1 (player 0 folded). The
game is zero-sum.

A player's information set is the pair (own card, betting history); each player has six, listed in
:data:`KUHN_INFOSETS`. A **tabular policy** of a player is an array of shape ``[6, 2]``: row ``k`` is the
distribution over (pass, bet) at information set ``KUHN_INFOSETS[player][k]``. Rows must sum to 1 (within
1e-5; they are renormalised before use).

The observation of the acting player (shape ``[9]``, float32) is the env's encoding: ``[0:3]`` own card
one-hot, ``[3:5]`` own player id one-hot, ``[5:9]`` one-hot of the history before the decision over
:data:`KUHN_HISTORIES` = ``("", "p", "b", "pb")``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = [
    "KUHN_CARDS",
    "KUHN_HISTORIES",
    "KUHN_DEALS",
    "KUHN_INFOSETS",
    "KUHN_NUM_INFOSETS",
    "KUHN_NUM_ACTIONS",
    "KUHN_OBSERVATION_SIZE",
    "kuhn_infoset_observations",
    "kuhn_policy_value",
    "kuhn_profile_values",
    "kuhn_best_response",
    "kuhn_mixture_table",
    "kuhn_reach",
    "tables_from_policy",
]

KUHN_CARDS: tuple[str, ...] = ("J", "Q", "K")
"""Card names by card index."""

KUHN_HISTORIES: tuple[str, ...] = ("", "p", "b", "pb")
"""The betting histories at which a decision is taken, in the order of the observation's one-hot ``[5:9]``."""

KUHN_DEALS: tuple[tuple[int, int], ...] = tuple(
    (card_0, card_1) for card_0 in range(3) for card_1 in range(3) if card_0 != card_1
)
"""The 6 equally likely deals ``(card of player 0, card of player 1)``."""

KUHN_INFOSETS: dict[int, list[tuple[int, str]]] = {
    0: [(card, history) for card in range(3) for history in ("", "pb")],
    1: [(card, history) for card in range(3) for history in ("p", "b")],
}
"""Player → its 6 information sets ``(card, history)``, card-major: the row order of a tabular policy.

Player 0: ``(J, "")``, ``(J, "pb")``, ``(Q, "")``, ``(Q, "pb")``, ``(K, "")``, ``(K, "pb")``.
Player 1: ``(J, "p")``, ``(J, "b")``, ``(Q, "p")``, ``(Q, "b")``, ``(K, "p")``, ``(K, "b")``.
"""

KUHN_NUM_INFOSETS = 6
KUHN_NUM_ACTIONS = 2
KUHN_OBSERVATION_SIZE = 9

_ACTION_CHARS = "pb"
_ROW = {player: {infoset: row for row, infoset in enumerate(infosets)} for player, infosets in KUHN_INFOSETS.items()}
_TERMINALS = ("pp", "bp", "bb", "pbp", "pbb")
_ROW_SUM_ATOL = 1e-5
_TIE_TOL = 1e-12


def _acting_player(history: str) -> int:
    return len(history) % 2


def _payoff_player_0(history: str, card_0: int, card_1: int) -> float:
    """Player 0's payoff at a terminal history."""
    if history == "bp":
        return 1.0
    if history == "pbp":
        return -1.0
    stake = 1.0 if history == "pp" else 2.0
    return stake if card_0 > card_1 else -stake


def _check_player(player: int) -> None:
    if player not in (0, 1):
        raise ValueError(f"player={player!r}; Kuhn poker has players 0 and 1")


def _validated_table(table: np.ndarray, name: str, fix: str) -> np.ndarray:
    """A ``[6, 2]`` row-stochastic float64 copy of ``table`` (rows renormalised); errors name ``name``."""
    array = np.asarray(table, dtype=np.float64)
    if array.shape != (KUHN_NUM_INFOSETS, KUHN_NUM_ACTIONS):
        raise ValueError(
            f"{name} has shape {array.shape}; a Kuhn poker tabular policy has shape (6, 2): one row per "
            f"information set (see KUHN_INFOSETS), columns (pass, bet). {fix}"
        )
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise ValueError(f"{name} has a negative or non-finite entry; rows must be probabilities. {fix}")
    sums = array.sum(axis=1)
    bad = np.flatnonzero(np.abs(sums - 1.0) > _ROW_SUM_ATOL)
    if bad.size:
        row = int(bad[0])
        raise ValueError(
            f"{name} row {row} sums to {sums[row]}; every row must be a distribution over (pass, bet) "
            f"summing to 1. {fix}"
        )
    return array / sums[:, None]


def _validated_tables(tables: Sequence[np.ndarray]) -> list[np.ndarray]:
    if len(tables) != 2:
        raise ValueError(f"got {len(tables)} tables; pass [table_player_0, table_player_1], each of shape (6, 2)")
    return [
        _validated_table(table, f"tables[{player}]", "Normalise each row (e.g. with a softmax).")
        for player, table in enumerate(tables)
    ]


def kuhn_infoset_observations(player: int) -> np.ndarray:
    """The env's observation at each of ``player``'s information sets, in :data:`KUHN_INFOSETS` order.

    Args:
        player: 0 or 1.

    Returns:
        float32 array of shape ``[6, 9]``.

    Raises:
        ValueError: ``player`` is not 0 or 1.
    """
    _check_player(player)
    observations = np.zeros((KUHN_NUM_INFOSETS, KUHN_OBSERVATION_SIZE), dtype=np.float32)
    for row, (card, history) in enumerate(KUHN_INFOSETS[player]):
        observations[row, card] = 1.0
        observations[row, 3 + player] = 1.0
        observations[row, 5 + KUHN_HISTORIES.index(history)] = 1.0
    return observations


def tables_from_policy(policy_fn: Callable[[int, np.ndarray], np.ndarray]) -> list[np.ndarray]:
    """Tabulate a policy by querying it once per player on all six information sets.

    Args:
        policy_fn: ``policy_fn(player, observations)`` with ``observations`` of shape ``[6, 9]`` (float32,
            from :func:`kuhn_infoset_observations`) returns the action probabilities, shape ``[6, 2]``. It is
            called exactly once per player; wrap a torch policy so that it returns a numpy array.

    Returns:
        ``[table_0, table_1]``, float64 arrays of shape ``[6, 2]`` with rows renormalised to sum to 1.

    Raises:
        ValueError: ``policy_fn`` returned a wrong shape, a negative entry, or rows not summing to 1
            (within 1e-5).
    """
    tables = []
    for player in range(2):
        probabilities = policy_fn(player, kuhn_infoset_observations(player))
        tables.append(
            _validated_table(
                probabilities,
                f"policy_fn(player={player}, observations) output",
                "Return action probabilities (e.g. softmax of the logits), not logits.",
            )
        )
    return tables


def _history_value(tables: list[np.ndarray], history: str, cards: tuple[int, int]) -> float:
    """Player 0's expected payoff from ``history`` onward under ``tables``, for one deal."""
    if history in _TERMINALS:
        return _payoff_player_0(history, *cards)
    player = _acting_player(history)
    probabilities = tables[player][_ROW[player][(cards[player], history)]]
    return sum(
        float(probabilities[action]) * _history_value(tables, history + _ACTION_CHARS[action], cards)
        for action in range(KUHN_NUM_ACTIONS)
    )


def kuhn_policy_value(tables: Sequence[np.ndarray]) -> tuple[float, float]:
    """Expected payoff of each player when both play their tabular policies.

    Args:
        tables: ``[table_0, table_1]``, each of shape ``[6, 2]``.

    Returns:
        ``(value of player 0, value of player 1)``; they sum to 0.

    Raises:
        ValueError: a table of the wrong shape or whose rows are not distributions.
    """
    checked = _validated_tables(tables)
    value = sum(_history_value(checked, "", deal) for deal in KUHN_DEALS) / len(KUHN_DEALS)
    return value, -value


def _terminal_reach(tables: np.ndarray, player: int) -> np.ndarray:
    """``[K, 3, 5]``: each member's own probability of each terminal history (:data:`_TERMINALS` order) per card."""
    reach = np.ones((tables.shape[0], len(KUHN_CARDS), len(_TERMINALS)))
    for column, terminal in enumerate(_TERMINALS):
        for depth, action_char in enumerate(terminal):
            history = terminal[:depth]
            if _acting_player(history) != player:
                continue
            action = _ACTION_CHARS.index(action_char)
            rows = [_ROW[player][(card, history)] for card in range(len(KUHN_CARDS))]
            reach[:, :, column] *= tables[:, rows, action]
    return reach


def _terminal_payoffs() -> np.ndarray:
    """``[3, 3, 5]``: player 0's payoff per (card 0, card 1, terminal history); 0 where the cards coincide."""
    payoffs = np.zeros((len(KUHN_CARDS), len(KUHN_CARDS), len(_TERMINALS)))
    for card_0, card_1 in KUHN_DEALS:
        for column, terminal in enumerate(_TERMINALS):
            payoffs[card_0, card_1, column] = _payoff_player_0(terminal, card_0, card_1)
    return payoffs


_TERMINAL_PAYOFFS = _terminal_payoffs()


def kuhn_profile_values(tables_0: np.ndarray, tables_1: np.ndarray) -> np.ndarray:
    """Player 0's expected payoff for many pairs of tabular policies at once.

    The value is bilinear in the two players' reach probabilities of the terminal histories, so pair ``k``'s
    value is ``sum over deals and terminals of chance * reach_0 * reach_1 * payoff``, evaluated for all pairs
    in one ``einsum`` (no tree walk per pair).

    Args:
        tables_0: ``[K, 6, 2]``, player 0's tables (rows renormalised, not validated: use
            :func:`kuhn_policy_value` for checked single evaluations).
        tables_1: ``[K, 6, 2]``, player 1's tables.

    Returns:
        ``[K]`` float64; player 1's values are the negatives.

    Raises:
        ValueError: the two stacks differ in length or are not ``[K, 6, 2]``.
    """
    stack_0 = np.asarray(tables_0, dtype=np.float64)
    stack_1 = np.asarray(tables_1, dtype=np.float64)
    shape = (KUHN_NUM_INFOSETS, KUHN_NUM_ACTIONS)
    if stack_0.ndim != 3 or stack_0.shape[1:] != shape or stack_1.shape != stack_0.shape:
        raise ValueError(
            f"tables_0 has shape {stack_0.shape} and tables_1 {stack_1.shape}; pass two stacks of the same "
            "length K, each of shape [K, 6, 2]"
        )
    stack_0 = stack_0 / stack_0.sum(-1, keepdims=True)
    stack_1 = stack_1 / stack_1.sum(-1, keepdims=True)
    reach_0 = _terminal_reach(stack_0, 0)
    reach_1 = _terminal_reach(stack_1, 1)
    return np.einsum("kah,kbh,abh->k", reach_0, reach_1, _TERMINAL_PAYOFFS) / len(KUHN_DEALS)


def _best_response_values(
    tables: list[np.ndarray],
    player: int,
    card: int,
    history: str,
    opponent_reach: np.ndarray,
    br_table: np.ndarray,
) -> np.ndarray:
    """Counterfactual values, per opponent card, of ``player`` holding ``card`` and best-responding.

    ``opponent_reach[c]`` (shape ``[3]``) is the opponent's probability of having played to ``history`` when
    it holds card ``c`` (0 at ``c == card``). Entry ``c`` of the result is ``player``'s payoff from
    ``history`` onward when the opponent holds ``c``, weighted by that reach (chance is applied by the
    caller). At each of ``player``'s decisions the action with the larger reach-weighted value summed over the
    opponent's cards is taken, and written into ``br_table``: the information set (card, history) pools
    exactly those opponent cards.
    """
    opponent_cards = [other for other in range(3) if other != card]
    if history in _TERMINALS:
        values = np.zeros(3)
        for other in opponent_cards:
            cards = (card, other) if player == 0 else (other, card)
            payoff = _payoff_player_0(history, *cards)
            values[other] = opponent_reach[other] * (payoff if player == 0 else -payoff)
        return values
    if _acting_player(history) == player:
        children = [
            _best_response_values(tables, player, card, history + _ACTION_CHARS[action], opponent_reach, br_table)
            for action in range(KUHN_NUM_ACTIONS)
        ]
        # Ties go to pass, so the best response is deterministic.
        action = int(children[1].sum() > children[0].sum() + _TIE_TOL)
        row = _ROW[player][(card, history)]
        br_table[row] = 0.0
        br_table[row, action] = 1.0
        return children[action]
    opponent = 1 - player
    action_probabilities = np.zeros((3, KUHN_NUM_ACTIONS))
    for other in opponent_cards:
        action_probabilities[other] = tables[opponent][_ROW[opponent][(other, history)]]
    return sum(
        _best_response_values(
            tables,
            player,
            card,
            history + _ACTION_CHARS[action],
            opponent_reach * action_probabilities[:, action],
            br_table,
        )
        for action in range(KUHN_NUM_ACTIONS)
    )


def kuhn_best_response(tables: Sequence[np.ndarray], player: int) -> tuple[float, np.ndarray]:
    """Exact best response of ``player`` to the opponent's tabular policy.

    The tree is walked once per card of ``player``; at each of its information sets the action is chosen that
    maximises the counterfactual value summed over the opponent cards consistent with that information set,
    each weighted by the opponent's reach probability (chance weights are equal). Decisions are resolved from
    the leaves up, so later information sets are chosen first; ties go to pass.

    Args:
        tables: ``[table_0, table_1]``, each of shape ``[6, 2]``; ``tables[player]`` is only validated.
        player: 0 or 1, the best-responding player.

    Returns:
        ``(value, br_table)``: the best response's expected payoff against ``tables[1 - player]``, and the
        deterministic best response as a ``[6, 2]`` one-hot table in :data:`KUHN_INFOSETS` order.

    Raises:
        ValueError: ``player`` not 0 or 1, or a table of the wrong shape or whose rows are not distributions.
    """
    _check_player(player)
    checked = _validated_tables(tables)
    br_table = np.zeros((KUHN_NUM_INFOSETS, KUHN_NUM_ACTIONS))
    total = 0.0
    for card in range(len(KUHN_CARDS)):
        opponent_reach = np.ones(3)
        opponent_reach[card] = 0.0
        total += _best_response_values(checked, player, card, "", opponent_reach, br_table).sum()
    return float(total) / len(KUHN_DEALS), br_table


def kuhn_reach(tables: np.ndarray, player: int) -> np.ndarray:
    """``player``'s own probability of playing to each of its information sets, for ``K`` tables at once.

    Example:
        >>> table = np.tile([0.25, 0.75], (6, 1))  # pass with 1/4 everywhere
        >>> kuhn_reach(table[None], 0)[0].tolist()  # (card, "pb") is reached by passing first
        [1.0, 0.25, 1.0, 0.25, 1.0, 0.25]

    Args:
        tables: ``[K, 6, 2]`` row-stochastic tables in ``player``'s :data:`KUHN_INFOSETS` order.
        player: 0 or 1.

    Returns:
        ``[K, 6]`` float64.
    """
    _check_player(player)
    tables = np.asarray(tables, dtype=np.float64)
    reach = np.ones(tables.shape[:2])
    for row, (card, history) in enumerate(KUHN_INFOSETS[player]):
        for depth, action_char in enumerate(history):
            if _acting_player(history[:depth]) == player:
                earlier_row = _ROW[player][(card, history[:depth])]
                reach[:, row] *= tables[:, earlier_row, _ACTION_CHARS.index(action_char)]
    return reach


def _own_reach(table: np.ndarray, player: int) -> np.ndarray:
    """``player``'s own probability of playing to each of its information sets, shape ``[6]``."""
    return kuhn_reach(np.asarray(table)[None], player)[0]


def kuhn_mixture_table(tables: Sequence[np.ndarray], weights: np.ndarray, player: int) -> np.ndarray:
    """The behaviour policy of a meta-mixture of tabular policies of one player.

    Playing member ``k`` with probability ``weights[k]`` for a whole game is, by Kuhn's theorem, equivalent to
    one behaviour policy: at information set ``s`` it plays
    ``sum_k w_k r_k(s) pi_k(s) / sum_k w_k r_k(s)``, where ``r_k(s)`` is member ``k``'s own probability of
    playing to ``s``. A naive average of the members' tables is wrong wherever the members reach ``s`` with
    different probabilities. Where no member reaches ``s`` (zero denominator) the row is the weighted average,
    which is never played.

    Args:
        tables: the ``K`` members, each of shape ``[6, 2]`` in ``player``'s :data:`KUHN_INFOSETS` order.
        weights: shape ``[K]``, non-negative with a positive sum (normalised here).
        player: 0 or 1, whose policies these are.

    Returns:
        float64 array of shape ``[6, 2]``, row-stochastic.

    Raises:
        ValueError: ``player`` not 0 or 1; no tables; a table of the wrong shape or whose rows are not
            distributions; weights of the wrong length, negative, non-finite or summing to 0.
    """
    _check_player(player)
    if len(tables) == 0:
        raise ValueError("tables is empty; pass at least one tabular policy of shape (6, 2)")
    members = [
        _validated_table(table, f"tables[{index}]", "Normalise each row (e.g. with a softmax).")
        for index, table in enumerate(tables)
    ]
    weight_vector = np.asarray(weights, dtype=np.float64)
    if weight_vector.shape != (len(members),):
        raise ValueError(
            f"weights has shape {weight_vector.shape} but there are {len(members)} tables; pass one weight per table"
        )
    if not np.all(np.isfinite(weight_vector)) or np.any(weight_vector < 0) or weight_vector.sum() <= 0:
        raise ValueError(
            f"weights = {weight_vector} must be non-negative and finite with a positive sum; pass the meta-strategy"
        )
    weight_vector = weight_vector / weight_vector.sum()
    stacked = np.stack(members)
    reach_weights = weight_vector[:, None] * np.stack([_own_reach(member, player) for member in members])
    numerator = np.einsum("ks,ksa->sa", reach_weights, stacked)
    denominator = reach_weights.sum(axis=0)
    fallback = np.einsum("k,ksa->sa", weight_vector, stacked)
    reached = denominator > 0
    mixture = np.where(reached[:, None], numerator / np.where(reached, denominator, 1.0)[:, None], fallback)
    return mixture / mixture.sum(axis=1, keepdims=True)
