"""One-shot normal-form (matrix) games.

A payoff array has shape ``[n_1, ..., n_P, P]``: entry ``[a_1, ..., a_P, p]`` is player ``p``'s payoff when
player ``q`` plays action ``a_q``. Named games (:data:`GAMES`, read-only arrays):

- ``rps``: rock-paper-scissors (actions rock, paper, scissors); win +1, loss -1, tie 0. Zero-sum.
- ``biased_rps``: OpenSpiel's biased rock-paper-scissors; player 0's payoffs
  ``[[0, -25, 50], [25, 0, -5], [-50, 5, 0]]``, player 1 gets the negative. Zero-sum.
- ``matching_pennies``: player 0 wins +1 when the two actions match, player 1 wins +1 when they differ.
  Zero-sum.
- ``prisoners_dilemma``: actions cooperate (0), defect (1); payoffs (C, C) = 3/3, (C, D) = 0/5, (D, C) = 5/0,
  (D, D) = 1/1. General-sum; the unique Nash equilibrium (D, D) is Pareto-dominated by (C, C).
- ``coordination``: the climbing game (Claus and Boutilier, 1998), a cooperative 3x3 game where both players
  receive ``[[11, -30, 0], [-30, 7, 6], [0, 0, 5]]``. The unique optimum (0, 0) is hard to reach because
  miscoordinating around it costs -30, which pulls independent learners towards (1, 1) or (2, 2).
- ``three_player``: "odd one out", a 3-player 2-action zero-sum game. When all three players pick the same
  action everybody gets 0; otherwise the one player in the minority gets +2 and the other two -1 each. Uniform
  play is its symmetric Nash equilibrium.

Agents:
    ``player_0 .. player_{P-1}``.

Observations:
    ``Box(0, 1, (1,), float32)``, the constant ``[1.0]`` (the game has a single state).

Actions:
    ``Discrete(n_p)`` for player ``p``.

Rewards, termination and truncation:
    The game lasts one step: every player receives its payoff for the joint action and is terminated.

Options:
    ``reset`` takes no options (any given are ignored), and the env draws no random numbers.

Example:
    >>> from marljoint_envs import matrix_game_v0
    >>> env = matrix_game_v0.parallel_env(game="prisoners_dilemma")
    >>> _ = env.reset(seed=0)
    >>> _, rewards, terminations, _, _ = env.step({"player_0": 1, "player_1": 0})
    >>> rewards, terminations
    ({'player_0': 5.0, 'player_1': 0.0}, {'player_0': True, 'player_1': True})
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from marljoint_envs._common import RENDER_MODES, SimultaneousEnv, check_choice, check_discrete_action

__all__ = ["GAMES", "MatrixGameEnv", "parallel_env", "payoff_tensors", "validate_payoffs"]


def _two_player_zero_sum(row_payoffs: list[list[float]]) -> np.ndarray:
    """Payoff array ``[n_0, n_1, 2]`` of a zero-sum game from player 0's payoffs."""
    row = np.asarray(row_payoffs, dtype=np.float64)
    return np.stack([row, -row], axis=-1)


def _odd_one_out() -> np.ndarray:
    payoffs = np.zeros((2, 2, 2, 3))
    for joint in np.ndindex(2, 2, 2):
        ones = sum(joint)
        if ones in (1, 2):
            minority = 1 if ones == 1 else 0
            payoffs[joint] = [2.0 if action == minority else -1.0 for action in joint]
    return payoffs


def _shared_payoff(payoffs: list[list[float]]) -> np.ndarray:
    """Payoff array of a fully cooperative game in which every player receives ``payoffs``."""
    shared = np.asarray(payoffs, dtype=np.float64)
    return np.stack([shared] * shared.ndim, axis=-1)


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


GAMES: dict[str, np.ndarray] = {
    "rps": _read_only(_two_player_zero_sum([[0, -1, 1], [1, 0, -1], [-1, 1, 0]])),
    "biased_rps": _read_only(_two_player_zero_sum([[0, -25, 50], [25, 0, -5], [-50, 5, 0]])),
    "matching_pennies": _read_only(_two_player_zero_sum([[1, -1], [-1, 1]])),
    "prisoners_dilemma": _read_only(np.array([[[3.0, 3.0], [0.0, 5.0]], [[5.0, 0.0], [1.0, 1.0]]])),
    "coordination": _read_only(_shared_payoff([[11, -30, 0], [-30, 7, 6], [0, 0, 5]])),
    "three_player": _read_only(_odd_one_out()),
}
"""Named games: payoff arrays of shape ``[n_1, ..., n_P, P]`` (see the module docstring)."""


def validate_payoffs(payoffs: Any) -> np.ndarray:
    """Checks a custom payoff array and returns it as a float64 array.

    Args:
        payoffs: array-like of shape ``[n_1, ..., n_P, P]`` with ``P >= 1`` players, ``n_p >= 1`` actions
            each, and finite entries.

    Returns:
        A float64 copy of ``payoffs``.

    Raises:
        ValueError: if the array is not numeric, not finite, or its last axis is not the number of players.
    """
    try:
        array = np.array(payoffs, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"payoffs must be a numeric array of shape [n_1, ..., n_P, P], got {payoffs!r}; pass e.g. "
            "matrix_game_v0.GAMES['rps']."
        ) from exc
    num_players = array.ndim - 1
    if num_players < 1 or array.shape[-1] != num_players or 0 in array.shape:
        raise ValueError(
            "payoffs must have shape [n_1, ..., n_P, P] (one axis per player, then one payoff per player), "
            f"got shape {array.shape}; for P players the last axis must have length P = ndim - 1, e.g. shape "
            "(3, 3, 2) for two players with three actions each."
        )
    if not np.all(np.isfinite(array)):
        raise ValueError(
            "payoffs must be finite, got NaN or infinite entries; replace them with finite numbers."
        )
    return array


def _resolve(name: str, game: Any) -> np.ndarray:
    """The payoff array of a game given by name (a key of :data:`GAMES`) or as an array."""
    if isinstance(game, str):
        return GAMES[check_choice(name, game, GAMES)]
    return validate_payoffs(game)


def payoff_tensors(game_or_array: str | np.ndarray) -> list[np.ndarray]:
    """Splits a game into one payoff tensor per player.

    Args:
        game_or_array: a name in :data:`GAMES`, or a payoff array of shape ``[n_1, ..., n_P, P]``.

    Returns:
        ``P`` arrays of shape ``[n_1, ..., n_P]``; array ``p`` holds player ``p``'s payoffs.

    Raises:
        ValueError: for an unknown game name or an invalid payoff array.

    Example:
        >>> row, column = payoff_tensors("matching_pennies")
        >>> row.tolist(), column.tolist()
        ([[1.0, -1.0], [-1.0, 1.0]], [[-1.0, 1.0], [1.0, -1.0]])
    """
    payoffs = _resolve("game_or_array", game_or_array)
    return [payoffs[..., p].copy() for p in range(payoffs.shape[-1])]


class MatrixGameEnv(SimultaneousEnv):
    """A one-shot normal-form game; see the module docstring for the named games.

    Args:
        game: name of a game in :data:`GAMES`; ignored when ``payoffs`` is given.
        payoffs: a custom payoff array of shape ``[n_1, ..., n_P, P]`` (see :func:`validate_payoffs`).
        render_mode: ``None`` or ``"ansi"`` (``render()`` then returns the state as text).

    Raises:
        ValueError: for an unknown game name or an invalid payoff array.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "name": "matrix_game_v0",
        "render_modes": RENDER_MODES,
        "is_parallelizable": True,
    }

    def __init__(self, game: str = "rps", payoffs: Any = None, render_mode: str | None = None) -> None:
        if payoffs is None:
            self.payoffs = GAMES[check_choice("game", game, GAMES)]
        else:
            self.payoffs = validate_payoffs(payoffs)
        self.game = game if payoffs is None else "custom"
        num_actions = self.payoffs.shape[:-1]
        agents = [f"player_{p}" for p in range(len(num_actions))]
        super().__init__(
            {agent: spaces.Box(0.0, 1.0, (1,), np.float32) for agent in agents},
            {agent: spaces.Discrete(n) for agent, n in zip(agents, num_actions)},
            render_mode,
        )
        self.last_joint_action: tuple[int, ...] | None = None

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        self._reseed(seed)
        self.agents = self.possible_agents[:]
        self.last_joint_action = None
        return self._observations(), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        live = self._live_actions(actions)
        joint = tuple(check_discrete_action(agent, a, self.action_spaces[agent]) for agent, a in live.items())
        self.last_joint_action = joint
        observations = self._observations()
        rewards = {agent: float(self.payoffs[joint][p]) for p, agent in enumerate(self.agents)}
        terminations = dict.fromkeys(self.agents, True)
        truncations = dict.fromkeys(self.agents, False)
        infos: dict[str, dict] = {agent: {} for agent in self.agents}
        self.agents = []
        return observations, rewards, terminations, truncations, infos

    def _observations(self) -> dict[str, np.ndarray]:
        return {agent: np.ones(1, dtype=np.float32) for agent in self.agents}

    def _render_text(self) -> str:
        if self.last_joint_action is None:
            return f"matrix_game_v0 {self.game}: waiting for the joint action"
        payoff = self.payoffs[self.last_joint_action].tolist()
        return f"matrix_game_v0 {self.game}: joint action {self.last_joint_action} -> payoffs {payoff}"


def parallel_env(**kwargs: Any) -> MatrixGameEnv:
    """Creates the matrix-game ParallelEnv; the keyword arguments are those of :class:`MatrixGameEnv`."""
    return MatrixGameEnv(**kwargs)
