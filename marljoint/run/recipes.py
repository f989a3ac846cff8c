"""Best-response recipes: the tuned PSRO and NFSP settings of each bundled env and of OpenSpiel games, the env
factory ``marljoint psro`` and ``marljoint nfsp`` build their envs with, and their metrics CSV.

Example:
    >>> recipe_for("kuhn_poker_v0").trainer.num_envs
    128
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marljoint.env.openspiel import OPENSPIEL_PREFIX
from marljoint.ppo.config import JointTrainerConfig
from marljoint.run.registry import resolve_env
from marljoint.run.train import DEFAULT_TRAINER

__all__ = [
    "BUNDLED_ENVS",
    "GENERAL_RECIPE",
    "OPENSPIEL_RECIPE",
    "RECIPES",
    "Recipe",
    "auto_meta_solver",
    "env_factory",
    "recipe_for",
    "self_play_settings",
    "write_metrics_csv",
]

BUNDLED_ENVS = ("kuhn_poker_v0", "matrix_game_v0", "bucket_brigade_v0")


@dataclass(frozen=True)
class Recipe:
    """Tuned defaults for one bundled env: how to build it and the PPO/PSRO/NFSP settings that suit it.

    Attributes:
        trainer: PPO settings of the best responses.
        br_steps: env steps of PPO best-response training per PSRO iteration.
        episodes_per_entry: episodes per simulated meta-game entry.
        eval_num_envs: env copies for meta-game simulation.
        nfsp: NfspConfig fields other than the trainer.
        nfsp_trainer: changes to ``trainer`` for NFSP's best responses (see :meth:`nfsp_trainer_config`).
        warm_start: PSRO's :attr:`~marljoint.best_response.PsroConfig.warm_start`.
        warm_start_policy_scale: PSRO's :attr:`~marljoint.best_response.PsroConfig.warm_start_policy_scale`.
        meta_solver: PSRO's meta-solver with PPO best responses when ``--meta-solver`` is ``auto``; ``None``
            leaves it to the number of players (:func:`auto_meta_solver`).
    """

    trainer: JointTrainerConfig
    br_steps: int
    episodes_per_entry: int = 32
    eval_num_envs: int = 32
    nfsp: Mapping[str, Any] = field(default_factory=dict)
    nfsp_trainer: Mapping[str, Any] = field(default_factory=dict)
    warm_start: bool = False
    warm_start_policy_scale: float = 1.0
    meta_solver: str | None = None

    def nfsp_trainer_config(self) -> JointTrainerConfig:
        """PPO settings of NFSP's best responses: ``trainer`` with ``nfsp_trainer`` applied.

        NFSP's best responses must keep adapting to average policies that move, so they keep more entropy than
        PSRO's, which answer a fixed meta-mixture.
        """
        return self.trainer.replace(**self.nfsp_trainer)


RECIPES: dict[str, Recipe] = {
    # Episodes are 2-3 moves: many copies, short rollouts, a small network, undiscounted returns.
    "kuhn_poker_v0": Recipe(
        trainer=JointTrainerConfig(
            num_envs=128,
            rollout_steps=8,
            gamma=1.0,
            gae_lambda=1.0,
            learning_rate=1e-2,
            ent_coef=0.01,
            n_epochs=4,
            minibatch_size=512,
            hidden_sizes=(64,),
            share_parameters=False,
        ),
        br_steps=40_000,
        nfsp={"anticipatory": 0.3, "sl_steps_per_rollout": 8, "rollouts_per_iteration": 10},
        nfsp_trainer={"ent_coef": 0.1, "learning_rate": 1e-3},
    ),
    # One-step episodes: a contextual bandit with a constant observation.
    "matrix_game_v0": Recipe(
        trainer=JointTrainerConfig(
            num_envs=64,
            rollout_steps=4,
            gamma=1.0,
            gae_lambda=1.0,
            learning_rate=1e-2,
            ent_coef=0.0,
            n_epochs=4,
            minibatch_size=256,
            hidden_sizes=(16,),
            share_parameters=False,
        ),
        br_steps=4_096,
        episodes_per_entry=64,
        nfsp={"anticipatory": 0.1, "sl_steps_per_rollout": 2, "rollouts_per_iteration": 10},
    ),
    # Long episodes (up to 100 nights) with large, state-dependent returns: many copies (each learner gets a
    # quarter of them), a faster critic and more epochs, so the critics fit (explained variance > 0.5). A ruined
    # house costs every agent for the rest of the episode: a ten-night horizon (γ = λ = 0.9) keeps that tail from
    # drowning each night's decision (see the bucket_brigade preset in docs/learning.md).
    "bucket_brigade_v0": Recipe(
        trainer=JointTrainerConfig(
            num_envs=64,
            rollout_steps=32,
            gamma=0.9,
            gae_lambda=0.9,
            learning_rate=1e-3,
            critic_lr=3e-3,
            ent_coef=0.001,
            n_epochs=8,
            minibatch_size=512,
            hidden_sizes=(64, 64),
            share_parameters=False,
        ),
        br_steps=65_536,
        episodes_per_entry=1,
        eval_num_envs=64,
        nfsp={"anticipatory": 0.1, "sl_steps_per_rollout": 2, "rollouts_per_iteration": 4},
    ),
}
"""Bundled env name → its :class:`Recipe`."""

GENERAL_RECIPE = Recipe(
    trainer=JointTrainerConfig(**{**DEFAULT_TRAINER, "share_parameters": False}),
    br_steps=100_000,
    episodes_per_entry=32,
    eval_num_envs=16,
    nfsp={"anticipatory": 0.1, "rollouts_per_iteration": 4},
)
"""Every other env's settings: ``marljoint train``'s defaults (one network per seat), 100k env steps per PSRO best
response, 32 episodes per meta-game entry, and NFSP's anticipatory 0.1."""


OPENSPIEL_RECIPE = dataclasses.replace(
    RECIPES["kuhn_poker_v0"],
    warm_start=True,
    warm_start_policy_scale=0.3,
    nfsp={**RECIPES["kuhn_poker_v0"].nfsp, "anticipatory": 0.7},
    meta_solver="prd",
)
"""OpenSpiel games' settings (short card and board games): Kuhn poker's (many copies, short rollouts,
undiscounted returns), with three changes measured on Leduc poker (``docs/best_response.md``):

- PSRO's best responses start from their seat's newest member with its policy output layer scaled by 0.3
  (``warm_start=True``, ``warm_start_policy_scale=0.3``). Fresh best responses relearn their card features every
  iteration, stay about 0.8 short of an exact best response and stall PSRO near exploitability 0.8; copying the
  whole member stalls it near 1.5 (the copied policy is nearly deterministic and stops exploring); keeping the
  features and critic and shrinking the copied logits restores exploration without losing what was learned.
- NFSP plays its best responses in 70% of the episodes (η = 0.7, Kuhn poker's is 0.3): the PPO best responses
  learn only from the episodes they play, and in a game of Leduc's size they need that data.
- PSRO's meta-solver is projected replicator dynamics (``prd``), not an exact Nash equilibrium. The meta-game of
  PPO best responses is inexact (approximate best responses; simulated entries carry sampling noise), and its
  exact Nash equilibrium jumps between supports from one iteration to the next; PRD's time-averaged strategies
  keep more members in the mixture and move smoothly. On Leduc poker it leaves PSRO less exploitable on five
  runs of six at equal iterations, and below 0.5 at 600 s on every seed.
"""


SELF_PLAY_TRAINER: dict[str, Any] = {
    "num_envs": 512,
    "rollout_steps": 8,
    "gamma": 1.0,
    "gae_lambda": 1.0,
    "learning_rate": 1e-3,
    "ent_coef": 0.0,
    "n_epochs": 4,
    "normalize_advantages": False,
    "num_minibatches": 4,
    "hidden_sizes": (128,),
    "share_parameters": False,
}
"""``marljoint train --self-play`` on an OpenSpiel game or the bundled Kuhn poker (unless the command line or
``--config`` says otherwise): many copies of the short episodes (large batches: the last iterate of self-play
jitters with the sampling noise of each update), undiscounted returns, one network per seat, no entropy bonus (MMD's
KL to the magnet regularises instead), advantages not normalised (so α keeps the units of the payoffs as the
equilibrium it approaches is defined); measured on Kuhn and Leduc poker (``docs/best_response.md``)."""


def self_play_settings(env_name: str, self_play: str | None) -> dict[str, Any]:
    """The run settings ``--self-play`` starts from on ``env_name``: :data:`SELF_PLAY_TRAINER` for an OpenSpiel
    game or the bundled Kuhn poker, nothing for other envs (their own defaults) or without self-play."""
    if self_play is None or not (env_name.startswith(OPENSPIEL_PREFIX) or env_name == "kuhn_poker_v0"):
        return {}
    return {"self_play": self_play, **SELF_PLAY_TRAINER}


def auto_meta_solver(recipe: Recipe, players: int, oracle: str = "ppo") -> str:
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


def recipe_for(env_name: str) -> Recipe:
    """The :class:`Recipe` of an env: its own for a bundled best-response env, :data:`OPENSPIEL_RECIPE` for an
    OpenSpiel game, :data:`GENERAL_RECIPE` otherwise."""
    if env_name in RECIPES:
        return RECIPES[env_name]
    if env_name.startswith(OPENSPIEL_PREFIX):
        return OPENSPIEL_RECIPE
    return GENERAL_RECIPE


def env_factory(env_name: str, env_kwargs: Mapping[str, Any]) -> Callable[[], Any]:
    """A function building one env of ``env_name`` with ``env_kwargs``: any name ``marljoint train --env`` takes
    (a bundled env, a PettingZoo module path, ``package.module:factory``).

    Kuhn poker is built as its bare AEC env (``raw_env``): the adapter checks actions itself, and PettingZoo's
    checking wrappers would halve the env's speed.

    Raises:
        ValueError: an env that does not resolve, keyword arguments the env rejects (one env is built here to
            check), or an env with fewer than two agents (best responses need opponents).
    """
    kwargs = dict(env_kwargs)
    if env_name == "kuhn_poker_v0":
        import marljoint_envs

        factory: Callable[[], Any] = functools.partial(marljoint_envs.kuhn_poker_v0.raw_env, **kwargs)
    else:
        factory = resolve_env(env_name, kwargs).env_fn()
    try:
        probe = factory()
    except TypeError as exc:
        raise ValueError(f"{env_name} does not accept the keyword arguments {kwargs}: {exc}") from exc
    agents = list(getattr(probe, "possible_agents", []))
    probe.close()
    if len(agents) < 2:
        raise ValueError(
            f"env {env_name!r} has {len(agents)} agent(s) {agents}; PSRO and NFSP play agents against each other, "
            "so they need at least two"
        )
    return factory


def write_metrics_csv(rows: Sequence[Mapping[str, Any]], path: str | Path, first: Sequence[str] = ()) -> None:
    """Writes metric rows to a CSV file atomically; columns are ``first`` then every other key, sorted.

    Rows lacking a column leave it empty.
    """
    path = Path(path)
    keys = {key for row in rows for key in row}
    columns = [c for c in first if c in keys] + sorted(keys - set(first))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            for row in rows:
                writer.writerow({key: _csv_value(row.get(key, "")) for key in columns})
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _csv_value(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return value
