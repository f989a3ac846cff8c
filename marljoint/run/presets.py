"""Presets: the one table of named setting bundles measured for a task (:data:`ALL_PRESETS`), each with the
command it applies to.

``marljoint train --preset NAME`` (:data:`PRESETS`): a task (an env, its keyword arguments, a budget of env steps)
and the settings measured to learn it best against ``marljoint train``'s defaults (``docs/learning.md``): the
defaults themselves where nothing measured beat them (``spread``), the defaults with a centralised critic on
speaker-listener, and a ten-night horizon on the bucket brigade scenarios.

``marljoint psro`` and ``marljoint nfsp`` (:data:`BEST_RESPONSE_PRESETS`): the PPO settings of the best responses
and the PSRO and NFSP settings of each bundled best-response env, of OpenSpiel games and of every other env
(:func:`~marljoint.run.recipes.recipe_for` picks the one of an env).

Example:
    >>> from marljoint.run.presets import get_preset
    >>> preset = get_preset("spread")
    >>> preset.env_name
    'mpe2.simple_spread_v3'
    >>> get_preset("speaker_listener").config(seed=1).centralized_critic
    True
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from marljoint.env.openspiel import OPENSPIEL_PREFIX
from marljoint.ppo.config import JointTrainerConfig
from marljoint.run.defaults import DEFAULT_TRAINER
from marljoint.run.spec import RunSpec

__all__ = ["ALL_PRESETS", "BEST_RESPONSE_PRESETS", "COMMANDS", "PRESETS", "SELF_PLAY_PRESETS", "Preset", "get_preset"]


COMMANDS = ("train", "best_response", "self_play")
"""The commands a :class:`Preset` applies to: ``marljoint train`` (``--preset NAME``), ``marljoint psro`` and
``marljoint nfsp``, which take the preset of their env (:func:`~marljoint.run.recipes.recipe_for`), or
``marljoint train --self-play``, which starts from the self-play preset of its env
(:func:`~marljoint.run.recipes.self_play_settings`)."""


@dataclass(frozen=True)
class Preset:
    """A named bundle of settings measured for a task, and the command it applies to.

    For ``marljoint train`` (``command="train"``): an env, its keyword arguments, a budget of env steps and the
    trainer settings tuned for it. For ``marljoint psro`` and ``marljoint nfsp`` (``command="best_response"``):
    the PPO settings of the best responses on an env and the PSRO and NFSP settings that suit it.

    Attributes:
        name: the preset's name.
        env_name: the env it was measured on: for ``"train"`` the import path of the PettingZoo env module
            (``package.module``), for ``"best_response"`` the env name ``marljoint psro --env`` takes (``None``:
            every other env).
        env_kwargs: keyword arguments of the env's ``parallel_env``/``env``.
        config_kwargs: :class:`JointTrainerConfig` fields (of the best responses, for ``"best_response"``).
        total_steps: the env-step budget a ``"train"`` preset was measured with.
        description: one line on the task and the choices.
        command: ``"train"``, ``"best_response"`` or ``"self_play"`` (:data:`COMMANDS`).
        br_steps: env steps of PPO best-response training per PSRO iteration.
        episodes_per_entry: episodes per simulated meta-game entry.
        eval_num_envs: env copies for meta-game simulation.
        nfsp: NfspConfig fields other than the trainer.
        nfsp_trainer: changes to :attr:`trainer` for NFSP's best responses (see :meth:`nfsp_trainer_config`).
        warm_start: PSRO's :attr:`~marljoint.best_response.PsroConfig.warm_start`.
        warm_start_policy_scale: PSRO's :attr:`~marljoint.best_response.PsroConfig.warm_start_policy_scale`.
        meta_solver: PSRO's meta-solver with PPO best responses when ``--meta-solver`` is ``auto``; ``None``
            leaves it to the number of players (:func:`~marljoint.run.recipes.auto_meta_solver`).
    """

    name: str
    env_name: str | None
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    config_kwargs: Mapping[str, Any] = field(default_factory=dict)
    total_steps: int = 0
    description: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)
    command: str = "train"
    br_steps: int = 0
    episodes_per_entry: int = 32
    eval_num_envs: int = 32
    nfsp: Mapping[str, Any] = field(default_factory=dict)
    nfsp_trainer: Mapping[str, Any] = field(default_factory=dict)
    warm_start: bool = False
    warm_start_policy_scale: float = 1.0
    meta_solver: str | None = None

    def __post_init__(self) -> None:
        if self.command not in COMMANDS:
            raise ValueError(f"preset {self.name!r}: command must be one of {list(COMMANDS)}, got {self.command!r}")
        JointTrainerConfig(**self.config_kwargs)  # refuses a bundle of invalid settings when the table is built

    @property
    def trainer(self) -> JointTrainerConfig:
        """The preset's :class:`JointTrainerConfig` (of the best responses, for ``"best_response"``)."""
        return self.config()

    def nfsp_trainer_config(self) -> JointTrainerConfig:
        """PPO settings of NFSP's best responses: :attr:`trainer` with :attr:`nfsp_trainer` applied.

        NFSP's best responses must keep adapting to average policies that move, so they keep more entropy than
        PSRO's, which answer a fixed meta-mixture.
        """
        return self.trainer.replace(**self.nfsp_trainer)

    def env_fn(self) -> Callable[[], Any]:
        """A factory building the preset's env (raises ImportError naming the package to install)."""
        try:
            module = importlib.import_module(self.env_name)
        except ImportError as exc:
            package = self.env_name.split(".")[0]
            raise ImportError(
                f"preset {self.name!r} needs the {package!r} package; install it (e.g. pip install {package})"
            ) from exc
        factory = getattr(module, "parallel_env", None) or module.env
        return functools.partial(factory, **dict(self.env_kwargs))

    def config(self, **overrides: Any) -> JointTrainerConfig:
        """The preset's :class:`JointTrainerConfig`, with ``overrides`` applied (validated)."""
        return JointTrainerConfig(**{**dict(self.config_kwargs), **overrides})

    def run_values(self) -> dict[str, Any]:
        """The preset as run settings (``config.toml`` keys): env, env_kwargs, total_steps and its trainer fields
        at the top level."""
        return {
            "env": self.env_name,
            "env_kwargs": dict(self.env_kwargs),
            "total_steps": self.total_steps,
            **dict(self.config_kwargs),
        }

    def changes(self) -> dict[str, tuple[Any, Any]]:
        """What the preset changes from ``marljoint train``'s defaults on the preset's env.

        A default derived from the env is the value its rule gives on this env
        (:func:`~marljoint.ppo.derived.derive_settings`), so a preset that sets what the rule would give changes
        nothing there. Builds one copy of the env.

        Returns:
            ``{setting: (default on this env, preset's value)}`` for every setting that differs.
        """
        from marljoint.env.pettingzoo import PettingZooJointEnv
        from marljoint.ppo.derived import derive_settings

        if self.command != "train":
            raise ValueError(f"preset {self.name!r} is for marljoint psro and nfsp; changes() compares train presets")
        env = PettingZooJointEnv(self.env_fn(), num_envs=1)
        try:
            defaults = derive_settings(env.spec, RunSpec().trainer)[0].to_dict()
            mine = derive_settings(env.spec, self.config())[0].to_dict()
        finally:
            env.close()
        return {key: (defaults[key], value) for key, value in mine.items() if value != defaults[key]}


PRESETS: dict[str, Preset] = {
    "spread": Preset(
        name="spread",
        env_name="mpe2.simple_spread_v3",
        env_kwargs={"N": 3, "max_cycles": 25, "local_ratio": 0.5},
        # marljoint train's defaults, which learn this task best of what was measured (docs/learning.md): over
        # seeds 0-2 they reach -9.8 per agent at 1M env steps, the MAPPO-style settings this preset had before (a
        # centralised critic, 4 epochs of 16 x 64-step rollouts, gamma 0.95) -11.9 at 2M, and the defaults with a
        # centralised critic -10.5 at 1M.
        config_kwargs=dict(DEFAULT_TRAINER),
        total_steps=1_000_000,
        description="mpe2 simple_spread (3 identical agents): marljoint train's defaults, one network shared "
        "with the agent id",
        tags=("cooperative", "mpe"),
    ),
    "speaker_listener": Preset(
        name="speaker_listener",
        env_name="mpe2.simple_speaker_listener_v4",
        env_kwargs={"max_cycles": 25},
        # The defaults with a centralised critic (each agent's critic reads both observations): over seeds 0-2 at
        # 1M env steps ahead of the defaults, where MAPPO's MPE settings (this preset before) trailed them.
        config_kwargs={**DEFAULT_TRAINER, "centralized_critic": True},
        total_steps=1_000_000,
        description="mpe2 simple_speaker_listener (heterogeneous): one network per agent, centralised critic",
        tags=("cooperative", "mpe", "heterogeneous"),
    ),
    **{
        name: Preset(
            name=name,
            env_name="marljoint_envs.bucket_brigade_v0",
            env_kwargs={"scenario": scenario},
            # Measured: a ruined house costs every agent for the rest of the episode, so with γ = 0.99 a night's
            # decision shows only in a long, noisy tail and nothing was learned in 1M steps. γ = λ = 0.9 (a
            # ten-night horizon) and a small entropy bonus learn to beat the specialist team within 300k steps.
            config_kwargs={
                "num_envs": 16,
                "rollout_steps": 64,
                "minibatch_size": 512,
                "n_epochs": 4,
                "learning_rate": 1e-3,
                "gamma": 0.9,
                "gae_lambda": 0.9,
                "ent_coef": 0.001,
                "value_normalization": True,
                "share_parameters": True,
            },
            total_steps=1_000_000,
            description=f"bucket brigade, {scenario} scenario (4 agents, MultiDiscrete): a ten-night horizon "
            "(γ = λ = 0.9) and value normalisation for its large reward scale",
            tags=("cooperative", "social-dilemma"),
        )
        for name, scenario in (
            ("bucket_brigade", "default"),
            ("bucket_brigade_minimal_specialization", "minimal_specialization"),
        )
    },
}
"""The presets of ``marljoint train --preset NAME``, by name."""


BEST_RESPONSE_PRESETS: dict[str, Preset] = {
    # Episodes are 2-3 moves: many copies, short rollouts, a small network, undiscounted returns.
    "kuhn_poker_v0": Preset(
        name="kuhn_poker_v0",
        env_name="kuhn_poker_v0",
        command="best_response",
        config_kwargs=dict(
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
    "matrix_game_v0": Preset(
        name="matrix_game_v0",
        env_name="matrix_game_v0",
        command="best_response",
        config_kwargs=dict(
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
    "bucket_brigade_v0": Preset(
        name="bucket_brigade_v0",
        env_name="bucket_brigade_v0",
        command="best_response",
        config_kwargs=dict(
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
"""The presets of ``marljoint psro`` and ``marljoint nfsp``: those of the bundled best-response envs by env name,
``"openspiel"`` for OpenSpiel games and ``"general"`` for every other env."""

BEST_RESPONSE_PRESETS["general"] = Preset(
    name="general",
    env_name=None,
    command="best_response",
    config_kwargs={**DEFAULT_TRAINER, "share_parameters": False},
    br_steps=100_000,
    episodes_per_entry=32,
    eval_num_envs=16,
    nfsp={"anticipatory": 0.1, "rollouts_per_iteration": 4},
    description="every other env: marljoint train's defaults (one network per seat), 100k env steps per PSRO best "
    "response, 32 episodes per meta-game entry, and NFSP's anticipatory 0.1",
)

# OpenSpiel games' settings (short card and board games): Kuhn poker's (many copies, short rollouts,
# undiscounted returns), with three changes measured on Leduc poker (``docs/best_response.md``):
#
# - PSRO's best responses start from their seat's newest member with its policy output layer scaled by 0.3
#   (``warm_start=True``, ``warm_start_policy_scale=0.3``). Fresh best responses relearn their card features every
#   iteration, stay about 0.8 short of an exact best response and stall PSRO near exploitability 0.8; copying the
#   whole member stalls it near 1.5 (the copied policy is nearly deterministic and stops exploring); keeping the
#   features and critic and shrinking the copied logits restores exploration without losing what was learned.
# - NFSP plays its best responses in 70% of the episodes (η = 0.7, Kuhn poker's is 0.3): the PPO best responses
#   learn only from the episodes they play, and in a game of Leduc's size they need that data.
# - PSRO's meta-solver is projected replicator dynamics (``prd``), not an exact Nash equilibrium. The meta-game of
#   PPO best responses is inexact (approximate best responses; simulated entries carry sampling noise), and its
#   exact Nash equilibrium jumps between supports from one iteration to the next; PRD's time-averaged strategies
#   keep more members in the mixture and move smoothly. On Leduc poker it leaves PSRO less exploitable on five
#   runs of six at equal iterations, and below 0.5 at 600 s on every seed.
BEST_RESPONSE_PRESETS["openspiel"] = dataclasses.replace(
    BEST_RESPONSE_PRESETS["kuhn_poker_v0"],
    name="openspiel",
    env_name=OPENSPIEL_PREFIX,
    warm_start=True,
    warm_start_policy_scale=0.3,
    nfsp={**BEST_RESPONSE_PRESETS["kuhn_poker_v0"].nfsp, "anticipatory": 0.7},
    meta_solver="prd",
)

SELF_PLAY_PRESETS: dict[str, Preset] = {
    "openspiel": Preset(
        name="openspiel",
        env_name=OPENSPIEL_PREFIX,
        command="self_play",
        config_kwargs=dict(
            num_envs=512,
            rollout_steps=8,
            gamma=1.0,
            gae_lambda=1.0,
            learning_rate=1e-3,
            ent_coef=0.0,
            n_epochs=4,
            normalize_advantages=False,
            num_minibatches=4,
            hidden_sizes=(128,),
            share_parameters=False,
        ),
        description="marljoint train --self-play on an OpenSpiel game or the bundled Kuhn poker (unless the command "
        "line or --config says otherwise): many copies of the short episodes (large batches: the last iterate of "
        "self-play jitters with the sampling noise of each update), undiscounted returns, one network per seat, no "
        "entropy bonus (MMD's KL to the magnet regularises instead), advantages not normalised (so alpha keeps the "
        "units of the payoffs in which the equilibrium it approaches is defined); measured on Kuhn and Leduc poker "
        "(docs/best_response.md)",
    ),
}
"""The presets of ``marljoint train --self-play`` (:func:`~marljoint.run.recipes.self_play_settings`):
``"openspiel"`` for OpenSpiel games and the bundled Kuhn poker."""

ALL_PRESETS: dict[str, Preset] = {
    **{name: preset for name, preset in PRESETS.items()},
    **{f"best_response/{name}": preset for name, preset in BEST_RESPONSE_PRESETS.items()},
    **{f"self_play/{name}": preset for name, preset in SELF_PLAY_PRESETS.items()},
}
"""The one table of named setting bundles: ``marljoint train``'s presets by name, the best-response presets
as ``best_response/<env name>`` (``best_response/general``, ``best_response/openspiel``), and the self-play
presets as ``self_play/<name>`` (``self_play/openspiel``)."""


def get_preset(name: str) -> Preset:
    """Looks up a preset by name.

    Raises:
        ValueError: naming the unknown preset and listing the known ones.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known presets: {sorted(PRESETS)}")
    return PRESETS[name]
