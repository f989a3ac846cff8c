"""OpenSpiel games as PettingZoo envs, observing the information state: ``--env openspiel:<game string>``.

:func:`openspiel_env` builds a game through Shimmy's ``OpenSpielCompatibilityV0`` (the ``openspiel`` extra:
``pip install "marljoint[openspiel]"``) with changes that training and exact exploitability need:

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
- **Episodes are seeded once.** ``reset(seed=s)`` seeds the generator of the chance outcomes, and every later
  ``reset()`` continues it, so a seeded run replays exactly (Shimmy reseeds from the operating system then).
- **Spaces are built once.** Shimmy rebuilds every observation and action space at every step; they are fixed by
  the game, and rebuilding them was two thirds of a Leduc step.
- **Resets reuse the game.** Shimmy reloads the game by name and seeds a new generator at every reset, and draws
  chance outcomes with ``Generator.choice``; here the game loaded once starts every episode, and each reset draws
  the uniform numbers of its episode's chance nodes (``max_chance_nodes_in_history()`` of them, at most 64) from
  the run's generator, one per chance node. That makes a Leduc step through the adapter 1.4 to 1.7 times as
  fast again, and an episode's chance outcomes still depend on the seed and the episode's number only, never on how
  earlier episodes were played (so different policies meet the same deals). Games that take their seed as a game
  parameter (``deep_sea``, ``hanabi``, ``mfg_garnet``) are still reloaded with the episode's seed at every reset,
  as Shimmy does.

Legal actions arrive as ``info["action_mask"]``, which the adapter reads as the action mask.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

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
        with _own_stderr_on_failure():
            loaded = pyspiel.load_game(game)
            if not parameters:
                return loaded
            defaults = loaded.get_parameters()
            unknown = sorted(set(parameters) - set(defaults))
            if unknown:
                raise ValueError(f"OpenSpiel's {short} has no parameter(s) {unknown}; it takes {sorted(defaults)}")
            for name, value in parameters.items():
                _check_parameter_type(short, name, value, defaults[name])
            return pyspiel.load_game(short, {**defaults, **parameters})
    except (pyspiel.SpielError, RuntimeError, TypeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"OpenSpiel cannot load {game!r} with {parameters}: {first}") from None


def _check_parameter_type(game: str, name: str, value: Any, default: Any) -> None:
    """Refuses a game parameter whose type is not its default's (an int where a float is expected is fine)."""
    expected = type(default)
    fits = isinstance(value, expected) and (expected is bool or not isinstance(value, bool))
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        fits = True
    if not fits:
        kind = _KINDS.get(expected, expected.__name__)
        raise ValueError(
            f"OpenSpiel's {game} parameter {name!r} takes {kind} (its default is {default!r}), got {value!r}; pass "
            f"{kind} in --env-kwargs"
        )


_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


@contextlib.contextmanager
def _own_stderr_on_failure() -> Iterator[None]:
    """OpenSpiel prints its exceptions to the process's stderr (file descriptor 2) before raising them: while a
    game loads, that output is held back, dropped when the load fails (the error says it in one line) and passed on
    when it succeeds."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to redirect
        yield
        return
    with tempfile.TemporaryFile() as held:
        sys.stderr.flush()
        os.dup2(held.fileno(), 2)
        failed = True
        try:
            yield
            failed = False
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if not failed:
                held.seek(0)
                text = held.read()
                if text:
                    os.write(2, text)


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


def _information_state_env_class() -> Any:
    """The Shimmy subclass (:class:`marljoint.env.openspiel_shimmy.InformationStateEnv`), imported once the
    openspiel extra is known to be installed."""
    import_pyspiel()  # the clear ImportError without the extra
    from marljoint.env.openspiel_shimmy import InformationStateEnv

    return InformationStateEnv
