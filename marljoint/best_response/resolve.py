"""Known games by name: the one table that turns a game's name into its :class:`KnownGame`.

Kuhn poker answers to its own name and its bundled env's; an OpenSpiel game to ``openspiel:<game>``. A bundled
matrix game needs its env's payoffs, so the product layer builds it (:func:`marljoint.run.registry.known_game`,
which asks this table first).
"""

from __future__ import annotations

from typing import Any

from marljoint.best_response.games import KnownGame, KuhnGame, MatrixGame
from marljoint.best_response.openspiel_game import OpenSpielGame
from marljoint.env.openspiel import OPENSPIEL_PREFIX

__all__ = ["KUHN_NAMES", "game_by_name", "resolve_game"]

KUHN_NAMES = ("kuhn_poker", "kuhn_poker_v0")
"""The names :func:`resolve_game` takes for Kuhn poker (the game and its bundled env)."""


def game_by_name(name: str, parameters: dict[str, Any] | None = None) -> KnownGame | None:
    """The known game a name stands for, or ``None`` when the name is no known game's.

    Args:
        name: ``"kuhn_poker"`` / ``"kuhn_poker_v0"``, or ``"openspiel:<game>"``.
        parameters: an OpenSpiel game's parameters (``render_mode`` is the env's, not the game's, and is dropped).

    Raises:
        ImportError: an OpenSpiel game without the openspiel extra.
        ValueError: an OpenSpiel game that cannot be tabulated (see
            :class:`~marljoint.best_response.openspiel_game.OpenSpielGame`).
    """
    if name in KUHN_NAMES:
        return KuhnGame()
    if name.startswith(OPENSPIEL_PREFIX):
        game_parameters = {k: v for k, v in (parameters or {}).items() if k != "render_mode"}
        return OpenSpielGame(name[len(OPENSPIEL_PREFIX) :].strip(), game_parameters)
    return None


def resolve_game(game: Any) -> KnownGame:
    """A :class:`KnownGame` from a game object, a name, or a list of payoff arrays.

    Example:
        >>> resolve_game("kuhn_poker").num_players
        2

    Args:
        game: a :class:`KnownGame`; ``"kuhn_poker"`` / ``"kuhn_poker_v0"``; ``"openspiel:<game>"`` (an
            :class:`~marljoint.best_response.openspiel_game.OpenSpielGame`); or one payoff array per player.

    Raises:
        ValueError: an unknown name or ill-formed payoffs.
    """
    if isinstance(game, KnownGame):
        return game
    if isinstance(game, str):
        known = game_by_name(game)
        if known is not None:
            return known
        raise ValueError(
            f"unknown game {game!r}; pass 'kuhn_poker', 'openspiel:<game>', a list of payoff arrays, or a KnownGame "
            "(a bundled matrix "
            f"game by name: marljoint.run.registry.known_game('matrix_game_v0', {{'game': {game!r}}}))"
        )
    if isinstance(game, (list, tuple)):
        return MatrixGame(game)
    raise ValueError(
        f"cannot compute exactly on {type(game).__name__}; exact NashConv needs a known game (Kuhn poker or a "
        "matrix game). For other envs estimate it with best_response_gain()"
    )
