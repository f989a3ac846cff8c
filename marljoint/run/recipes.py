"""What ``marljoint psro`` and ``marljoint nfsp`` take for an env: its best-response preset (the tuned PSRO and NFSP
settings, kept in the one table of :mod:`marljoint.run.presets`), the env factory they build their envs with, and
their metrics CSV (:func:`~marljoint.run.runlog.write_metrics_csv`).

Example:
    >>> recipe_for("kuhn_poker_v0").trainer.num_envs
    128
"""

from __future__ import annotations

from typing import Any

from marljoint.env.openspiel import OPENSPIEL_PREFIX
from marljoint.run.presets import BEST_RESPONSE_PRESETS, SELF_PLAY_PRESETS, Preset
from marljoint.run.registry import env_factory

__all__ = [
    "BUNDLED_ENVS",
    "GENERAL_RECIPE",
    "OPENSPIEL_RECIPE",
    "RECIPES",
    "auto_meta_solver",
    "env_factory",
    "recipe_for",
    "self_play_settings",
]

BUNDLED_ENVS = ("kuhn_poker_v0", "matrix_game_v0", "bucket_brigade_v0")


RECIPES: dict[str, Preset] = {name: BEST_RESPONSE_PRESETS[name] for name in BUNDLED_ENVS}
"""Bundled env name → its best-response :class:`~marljoint.run.presets.Preset`."""
GENERAL_RECIPE = BEST_RESPONSE_PRESETS["general"]
"""Every other env's best-response preset."""
OPENSPIEL_RECIPE = BEST_RESPONSE_PRESETS["openspiel"]
"""OpenSpiel games' best-response preset (Kuhn poker's, with the changes measured on Leduc poker)."""
SELF_PLAY_TRAINER: dict[str, Any] = dict(SELF_PLAY_PRESETS["openspiel"].config_kwargs)
"""The trainer settings ``marljoint train --self-play`` starts from on an OpenSpiel game or the bundled Kuhn poker:
those of the ``self_play/openspiel`` preset."""


def self_play_settings(env_name: str, self_play: str | None) -> dict[str, Any]:
    """The run settings ``--self-play`` starts from on ``env_name``: :data:`SELF_PLAY_TRAINER` for an OpenSpiel
    game or the bundled Kuhn poker, nothing for other envs (their own defaults) or without self-play."""
    if self_play is None or not (env_name.startswith(OPENSPIEL_PREFIX) or env_name == "kuhn_poker_v0"):
        return {}
    return {"self_play": self_play, **SELF_PLAY_TRAINER}


def auto_meta_solver(recipe: Preset, players: int, oracle: str = "ppo") -> str:
    """The meta-solver ``--meta-solver auto`` picks.

    With PPO best responses, the recipe's own when it names one. Otherwise ``nash`` for two players (an exact
    equilibrium of the meta-game: with exact best responses PSRO is then the double oracle, which ends at an exact
    equilibrium) and ``regret_matching`` for more (``nash`` solves two-player games only).

    Args:
        recipe: the env's settings (:func:`recipe_for`).
        players: the number of players.
        oracle: ``"ppo"`` or ``"exact"``, the best-response oracle.
    """
    if oracle == "ppo" and recipe.meta_solver is not None:
        return recipe.meta_solver
    return "nash" if players == 2 else "regret_matching"


def recipe_for(env_name: str) -> Preset:
    """The best-response :class:`~marljoint.run.presets.Preset` of an env: its own for a bundled best-response
    env, :data:`OPENSPIEL_RECIPE` for an OpenSpiel game, :data:`GENERAL_RECIPE` otherwise."""
    if env_name in RECIPES:
        return RECIPES[env_name]
    if env_name.startswith(OPENSPIEL_PREFIX):
        return OPENSPIEL_RECIPE
    return GENERAL_RECIPE
