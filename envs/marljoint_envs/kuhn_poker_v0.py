"""Standard 3-card Kuhn poker as a turn-based (AEC) game with action masks.

Rules:
    Cards J=0, Q=1, K=2; each player antes 1 and is dealt one of two distinct cards drawn from ``np_random``.
    ``player_0`` acts first. Actions: 0 = pass (check, or fold facing a bet), 1 = bet (bet, or call facing a
    bet). A history is the string of moves so far, ``"p"`` for pass and ``"b"`` for bet/call. One bet of 1 is
    allowed, so the decision histories are ``""``, ``"p"``, ``"b"``, ``"pb"`` (:data:`DECISION_HISTORIES`) and
    the terminal histories are ``"pp"``, ``"pbp"``, ``"pbb"``, ``"bp"``, ``"bb"``
    (:data:`TERMINAL_HISTORIES`).

Payoffs (zero-sum, :func:`payoff`):
    ``"pp"``: showdown for 1 (the higher card wins +1, the other -1). ``"bb"`` and ``"pbb"``: showdown for 2.
    ``"bp"``: player 1 folds, player 0 +1 and player 1 -1. ``"pbp"``: player 0 folds, player 1 +1 and
    player 0 -1.

Agents:
    ``player_0``, ``player_1``.

Observations (fixed encoding, :func:`encode_observation`):
    ``Dict(observation=Box(0, 1, (9,), float32), action_mask=Box(0, 1, (2,), int8))``. ``observation[0:3]``:
    own card one-hot; ``[3:5]``: own player id one-hot; ``[5:9]``: one-hot of the betting history before the
    current decision, over :data:`DECISION_HISTORIES` in that order (all zeros at terminal histories).
    ``action_mask`` is ``[1, 1]`` for the player to act and ``[0, 0]`` for the other player and after the
    game.

Rewards, termination and truncation:
    Rewards are 0 until the game ends; then both players receive their payoff and both are terminated. There
    is no truncation.

Options:
    ``reset`` takes no options (any given are ignored); ``reset(seed=...)`` seeds the deal.

``env()`` is the AEC env wrapped in PettingZoo's order-enforcing and bounds-checking wrappers, ``raw_env`` the
bare class, and ``parallel_env()`` the turn-based conversion to a ParallelEnv (every live player sends an
action; only the action of the player to act is used).

Example:
    >>> from marljoint_envs import kuhn_poker_v0
    >>> kuhn_poker_v0.payoff((2, 0), "pbb")
    (2.0, -2.0)
    >>> kuhn_poker_v0.encode_observation(1, 0, "pb").tolist()
    [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import wrappers
from pettingzoo.utils.conversions import turn_based_aec_to_parallel

from marljoint_envs._common import RENDER_MODES, check_choice, check_discrete_action, render_text

__all__ = [
    "CARD_NAMES",
    "DECISION_HISTORIES",
    "TERMINAL_HISTORIES",
    "encode_observation",
    "env",
    "parallel_env",
    "payoff",
    "raw_env",
]

CARD_NAMES = ("J", "Q", "K")
DECISION_HISTORIES = ("", "p", "b", "pb")
TERMINAL_HISTORIES = ("pp", "pbp", "pbb", "bp", "bb")
_MOVES = "pb"
_AGENTS = ["player_0", "player_1"]


def _check_history(history: Any) -> str:
    if not (isinstance(history, str) and (history in DECISION_HISTORIES or history in TERMINAL_HISTORIES)):
        raise ValueError(
            f"history must be a Kuhn poker history, one of {DECISION_HISTORIES + TERMINAL_HISTORIES}, got "
            f"{history!r}; build it from 'p' (pass) and 'b' (bet/call) in order of play."
        )
    return history


def payoff(cards: tuple[int, int], history: str) -> tuple[float, float]:
    """Payoffs of both players at a terminal history.

    Args:
        cards: ``(card of player 0, card of player 1)``, two distinct cards in ``{0, 1, 2}`` (J, Q, K).
        history: one of :data:`TERMINAL_HISTORIES`.

    Returns:
        ``(payoff of player 0, payoff of player 1)``; they sum to 0.

    Raises:
        ValueError: for invalid cards or a history that is not terminal.
    """
    valid_cards = (
        isinstance(cards, (tuple, list))
        and len(cards) == 2
        and all(isinstance(c, (int, np.integer)) and 0 <= c <= 2 for c in cards)
        and cards[0] != cards[1]
    )
    if not valid_cards:
        raise ValueError(f"cards must be two distinct cards in {{0, 1, 2}}, got {cards!r}; pass e.g. (2, 0).")
    if _check_history(history) not in TERMINAL_HISTORIES:
        raise ValueError(f"history {history!r} is not terminal; payoffs exist only for {TERMINAL_HISTORIES}.")
    if history == "bp":
        return 1.0, -1.0
    if history == "pbp":
        return -1.0, 1.0
    stake = 1.0 if history == "pp" else 2.0
    won = stake if cards[0] > cards[1] else -stake
    return won, -won


def encode_observation(card: int, player: int, history: str) -> np.ndarray:
    """The 9-float observation of ``player`` holding ``card`` at ``history`` (layout in the module docstring).

    Raises:
        ValueError: for a card outside ``{0, 1, 2}``, a player outside ``{0, 1}`` or an invalid history.
    """
    if not (isinstance(card, (int, np.integer)) and 0 <= card <= 2):
        raise ValueError(f"card must be 0 (J), 1 (Q) or 2 (K), got {card!r}.")
    if not (isinstance(player, (int, np.integer)) and 0 <= player <= 1):
        raise ValueError(f"player must be 0 or 1, got {player!r}.")
    observation = np.zeros(9, dtype=np.float32)
    observation[card] = 1.0
    observation[3 + player] = 1.0
    if _check_history(history) in DECISION_HISTORIES:
        observation[5 + DECISION_HISTORIES.index(history)] = 1.0
    return observation


class raw_env(AECEnv):
    """Kuhn poker as a bare AEC env; prefer :func:`env`, which adds PettingZoo's checking wrappers.

    Args:
        render_mode: ``None`` or ``"ansi"`` (``render()`` then returns the state as text).
    """

    # Not parallelizable in PettingZoo's sense (aec_to_parallel): players move in turns, so parallel_env()
    # uses the turn-based conversion instead.
    metadata: ClassVar[dict[str, Any]] = {
        "name": "kuhn_poker_v0",
        "render_modes": RENDER_MODES,
        "is_parallelizable": False,
    }

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__()
        if render_mode is not None:
            check_choice("render_mode", render_mode, self.metadata["render_modes"])
        self.render_mode = render_mode
        self.possible_agents = _AGENTS[:]
        self.agents = _AGENTS[:]
        self.observation_spaces = {
            agent: spaces.Dict(
                {
                    "observation": spaces.Box(0.0, 1.0, (9,), np.float32),
                    "action_mask": spaces.Box(0, 1, (2,), np.int8),
                }
            )
            for agent in _AGENTS
        }
        self.action_spaces = {agent: spaces.Discrete(2) for agent in _AGENTS}
        self.np_random, self.np_random_seed = seeding.np_random()
        self.cards: tuple[int, int] = (0, 1)
        self.history = ""
        self._start_hand()

    def observation_space(self, agent: str) -> gymnasium.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.Space:
        return self.action_spaces[agent]

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        player = _AGENTS.index(agent)
        to_act = self.history in DECISION_HISTORIES and agent == self.agent_selection
        return {
            "observation": encode_observation(self.cards[player], player, self.history),
            "action_mask": np.full(2, int(to_act), dtype=np.int8),
        }

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        if seed is not None:
            self.np_random, self.np_random_seed = seeding.np_random(seed)
        first, second = self.np_random.choice(3, size=2, replace=False)
        self.cards = (int(first), int(second))
        self.history = ""
        self._start_hand()

    def _start_hand(self) -> None:
        self.agents = _AGENTS[:]
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {agent: {} for agent in self.agents}
        self.agent_selection = _AGENTS[0]

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        move = check_discrete_action(agent, action, self.action_spaces[agent])
        # The acting player has collected its accumulated reward through last(); start its sum afresh.
        self._cumulative_rewards[agent] = 0.0
        self.history += _MOVES[move]
        if self.history in TERMINAL_HISTORIES:
            self.rewards = dict(zip(_AGENTS, payoff(self.cards, self.history)))
            self.terminations = dict.fromkeys(self.agents, True)
        else:
            self.rewards = dict.fromkeys(self.agents, 0.0)
        self.agent_selection = _AGENTS[len(self.history) % 2]
        self._accumulate_rewards()

    def render(self) -> str | None:
        """Returns the hand as text (``render_mode="ansi"``)."""
        return render_text(self.metadata["name"], self.render_mode, self._describe)

    def _describe(self) -> str:
        cards = "/".join(CARD_NAMES[c] for c in self.cards)
        return f"kuhn_poker_v0 cards {cards} history {self.history!r}"

    def close(self) -> None:
        """Nothing to release."""


def env(**kwargs: Any) -> AECEnv:
    """Creates the wrapped AEC env; the keyword arguments are those of :class:`raw_env`."""
    wrapped: AECEnv = raw_env(**kwargs)
    wrapped = wrappers.AssertOutOfBoundsWrapper(wrapped)
    return wrappers.OrderEnforcingWrapper(wrapped)


def parallel_env(**kwargs: Any) -> ParallelEnv:
    """Creates the turn-based ParallelEnv; the keyword arguments are those of :class:`raw_env`."""
    return turn_based_aec_to_parallel(env(**kwargs))
