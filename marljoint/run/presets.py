"""Tuned training presets for standard tasks.

Each preset is a task (an env, its keyword arguments, a budget of env steps) and the settings measured to learn it
best against ``marljoint train``'s defaults (``docs/learning.md``): the defaults themselves where nothing measured
beat them (``spread``), the defaults with a centralised critic on speaker-listener, and a ten-night horizon on the
bucket brigade scenarios.

Example:
    >>> from marljoint.run.presets import get_preset
    >>> preset = get_preset("spread")
    >>> preset.env_name
    'mpe2.simple_spread_v3'
    >>> get_preset("speaker_listener").config(seed=1).centralized_critic
    True
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from marljoint.ppo.config import JointTrainerConfig
from marljoint.run.defaults import DEFAULT_TRAINER
from marljoint.run.train import RunSpec

__all__ = ["PRESETS", "Preset", "get_preset"]


@dataclass(frozen=True)
class Preset:
    """A task and the trainer settings tuned for it.

    Attributes:
        name: the preset's name.
        env_name: import path of the PettingZoo env module (``package.module``).
        env_kwargs: keyword arguments of the env's ``parallel_env``/``env``.
        config_kwargs: :class:`JointTrainerConfig` fields.
        total_steps: the env-step budget the preset was measured with.
        description: one line on the task and the choices.
    """

    name: str
    env_name: str
    env_kwargs: Mapping[str, Any]
    config_kwargs: Mapping[str, Any]
    total_steps: int
    description: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)

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


def get_preset(name: str) -> Preset:
    """Looks up a preset by name.

    Raises:
        ValueError: naming the unknown preset and listing the known ones.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known presets: {sorted(PRESETS)}")
    return PRESETS[name]
