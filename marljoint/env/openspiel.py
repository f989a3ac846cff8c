"""OpenSpiel games as PettingZoo envs, observing the information state: ``--env openspiel:<game string>``.

:func:`openspiel_env` builds a game through Shimmy's ``OpenSpielCompatibilityV0`` (the ``openspiel`` extra:
``pip install "marljoint[openspiel]"``) with two changes that training and exact exploitability need:

- **Observations are the information-state tensor** where the game has one. Shimmy hands out the observation
  tensor when a game has both, and in games such as Leduc poker that tensor merges information states (it omits
  the betting history), so no policy of it can be a policy of the information state. With perfect recall a
  policy of the information state loses nothing, and exact exploitability tabulates exactly those. Games without
  an information-state tensor keep Shimmy's observation.
- **Episodes end where the game ends.** Shimmy truncates an episode once its count of nodes (chance nodes
  included, from 1) passes the game's ``max_game_length()``, which OpenSpiel counts in decisions only. That cuts
  the longest games short with no payoff: every Kuhn poker game after its first bet, every Leduc betting war.
  Here an episode is truncated only when its decisions pass ``max_game_length()``, which a correct game never
  reaches, so every episode ends at OpenSpiel's terminal state with OpenSpiel's returns.
- **Episodes are seeded once.** ``reset(seed=s)`` seeds the chance outcomes, and every later ``reset()`` draws the
  next episode's seed from that, so a seeded run replays exactly (Shimmy reseeds from the operating system then).

Legal actions arrive as ``info["action_mask"]``, which the adapter reads as the action mask.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["OPENSPIEL_PREFIX", "import_pyspiel", "load_openspiel_game", "openspiel_env"]

OPENSPIEL_PREFIX = "openspiel:"
"""The ``--env`` prefix of an OpenSpiel game string, e.g. ``openspiel:leduc_poker``."""


def import_pyspiel() -> Any:
    try:
        import pyspiel
    except ImportError:
        raise ImportError(
            'OpenSpiel games need the openspiel extra: pip install "marljoint[openspiel]" (it brings shimmy and '
            "open_spiel)"
        ) from None
    return pyspiel


def load_openspiel_game(game: str, **parameters: Any) -> Any:
    """``pyspiel.load_game`` of a game string (``"leduc_poker"``, ``"liars_dice(numdice=2)"``) with ``parameters``.

    Raises:
        ImportError: without the openspiel extra.
        ValueError: an unknown game or parameters it does not take (OpenSpiel's message).
    """
    pyspiel = import_pyspiel()
    # Checked here first: OpenSpiel also prints its own errors to stderr, with the list of every game.
    short = game.split("(", 1)[0].strip()
    if short not in pyspiel.registered_names():
        raise ValueError(f"unknown OpenSpiel game {short!r}; pyspiel.registered_names() lists the games")
    try:
        loaded = pyspiel.load_game(game)
        if not parameters:
            return loaded
        unknown = sorted(set(parameters) - set(loaded.get_parameters()))
        if unknown:
            raise ValueError(
                f"OpenSpiel's {short} has no parameter(s) {unknown}; it takes {sorted(loaded.get_parameters())}"
            )
        return pyspiel.load_game(short, {**loaded.get_parameters(), **parameters})
    except (pyspiel.SpielError, RuntimeError, TypeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"OpenSpiel cannot load {game!r} with {parameters}: {first}") from None


def openspiel_env(game: str, render_mode: str | None = None, **parameters: Any) -> Any:
    """One OpenSpiel game as a PettingZoo AEC env (see the module docstring).

    Example:
        >>> env = openspiel_env("kuhn_poker")  # doctest: +SKIP
        >>> env.reset(seed=0); env.observation_space("player_0").shape  # doctest: +SKIP
        (11,)

    Args:
        game: an OpenSpiel game string.
        render_mode: passed to Shimmy (``None`` or ``"human"``).
        **parameters: game parameters (``--env-kwargs``), e.g. ``players=3``.

    Raises:
        ImportError: without the openspiel extra.
        ValueError: see :func:`load_openspiel_game`.
    """
    loaded = load_openspiel_game(game, **parameters)
    return _information_state_env_class()(loaded, render_mode)


_ENV_CLASS: Any = None


def _information_state_env_class() -> Any:
    """The Shimmy subclass, defined once Shimmy can be imported."""
    global _ENV_CLASS
    if _ENV_CLASS is not None:
        return _ENV_CLASS
    pyspiel = import_pyspiel()
    from gymnasium import spaces
    from shimmy.openspiel_compatibility import OpenSpielCompatibilityV0

    class InformationStateEnv(OpenSpielCompatibilityV0):  # type: ignore[misc]
        """Shimmy's env observing the information-state tensor, truncating by decisions only, with episodes
        seeded from the first reset."""

        metadata = {**OpenSpielCompatibilityV0.metadata, "name": "openspiel_information_state"}

        def __init__(self, game: Any, render_mode: str | None = None) -> None:
            # Shimmy reloads the game by short name and config at every reset: pass the parameters as the config.
            name = game.get_type().short_name
            super().__init__(game_name=name, render_mode=render_mode, config=dict(game.get_parameters()) or None)
            self._episode_seeds: np.random.Generator | None = None

        def _uses_information_state(self) -> bool:
            return bool(self.game_type.provides_information_state_tensor)

        def _update_observation_spaces(self) -> None:
            if not self._uses_information_state():
                super()._update_observation_spaces()
                return
            shape = tuple(self._env.information_state_tensor_shape())
            for agent in self.possible_agents:
                self.observation_spaces[agent] = spaces.Box(-np.inf, np.inf, shape=shape, dtype=np.float32)

        def _update_observations(self) -> None:
            if not self._uses_information_state():
                super()._update_observations()
                return
            if self.game_state.is_terminal():
                return
            shape = self.observation_space(self.possible_agents[0]).shape
            self.observations = {
                self.agents[i]: np.asarray(self.game_state.information_state_tensor(i), np.float32).reshape(shape)
                for i in self.agent_ids
            }

        def _update_termination_truncation(self) -> None:
            super()._update_termination_truncation()
            chance = int(pyspiel.PlayerId.CHANCE)
            decisions = sum(1 for move in self.game_state.full_history() if move.player != chance)
            over = decisions > self._env.max_game_length() and not self.game_state.is_terminal()
            self.truncations = {agent: over for agent in self.agents}

        def reset(self, seed: int | None = None, options: dict | None = None) -> None:
            if seed is not None or self._episode_seeds is None:
                self._episode_seeds = np.random.default_rng(seed)
            super().reset(seed=int(self._episode_seeds.integers(2**63 - 1)), options=options)

    _ENV_CLASS = InformationStateEnv
    return _ENV_CLASS
