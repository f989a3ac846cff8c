"""The one table of defaults: for every setting of a run (every ``config.toml`` key), its library default, its
``marljoint train`` default and why they differ, with the rule that resolves a setting left to the env or the
machine.

The library defaults are the field defaults of :class:`~marljoint.JointTrainerConfig`; ``marljoint train`` changes
a few of them (:data:`PRODUCT_CHANGES`), and the run's own settings (the env, the budget, checkpoints, evaluation)
have their defaults here (:data:`RUN_DEFAULTS`), which :class:`~marljoint.run.spec.RunSpec` takes. The command's
help, a fresh run's ``config.toml`` and ``docs/cli.md`` show these values.

Example:
    >>> product_default("n_epochs"), library_default("n_epochs")
    (10, 4)
    >>> product_default("checkpoint_every")
    10
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from marljoint.ppo.config import JointTrainerConfig

__all__ = [
    "DEFAULT_ENV",
    "DEFAULT_ENV_KWARGS",
    "DEFAULT_TOTAL_STEPS",
    "DEFAULT_TRAINER",
    "DERIVED_RULES",
    "PRODUCT_CHANGES",
    "RUN_DEFAULTS",
    "Default",
    "defaults_table",
    "library_default",
    "product_default",
]

DEFAULT_ENV = "bucket_brigade_v0"
"""The env trained when ``--env`` is not given."""
DEFAULT_ENV_KWARGS: dict[str, Any] = {"scenario": "easy"}
"""Keyword arguments of :data:`DEFAULT_ENV` when neither ``--env`` nor ``--env-kwargs`` is given."""
DEFAULT_TOTAL_STEPS = 200_000
"""Env steps of a run when ``--total-steps`` is not given (about a minute on two CPU cores for the default env)."""

RUN_DEFAULTS: dict[str, Any] = {
    "env": DEFAULT_ENV,
    "env_kwargs": DEFAULT_ENV_KWARGS,
    "wrappers": (),
    "total_steps": DEFAULT_TOTAL_STEPS,
    "redundancy": None,
    "redundancy_coef": 0.05,
    "checkpoint_every": 10,
    "keep_checkpoints": 3,
    "eval_every": None,
    "eval_episodes": 10,
    "exploitability_every": None,
    "exploitability_steps": 20_000,
    "exploitability_episodes": 200,
    "exploitability_budget_s": 30.0,
    "wandb_project": None,
    "self_play": None,
    "mmd": None,
    "algorithm": None,
    "offpolicy": None,
}
"""The run's own settings (:class:`~marljoint.run.train.RunSpec`'s fields) and their defaults, which are
``marljoint train``'s: a run exists only in the product, so these have no separate library default. ``algorithm``
``None`` is PPO as ``centralized_critic`` says; ``offpolicy`` is an off-policy run's
:class:`~marljoint.offpolicy.OffPolicyConfig` (``None`` for other runs), parsed from its table, whose keys take
that config's field defaults. A run writes these two to ``config.toml`` only when they are set."""

_MEASURED = (
    "chosen on the generalization suite (benchmarks/generalization.py; docs/learning.md, 'Defaults on envs "
    "without a preset')"
)

PRODUCT_CHANGES: dict[str, tuple[Any, str]] = {
    "num_envs": (16, f"16 env copies stepped together: rollouts of 16 × 256 rows; {_MEASURED}"),
    "rollout_steps": (256, f"256 steps per copy and rollout; {_MEASURED}"),
    "n_epochs": (10, f"10 passes over each rollout; {_MEASURED}"),
    "num_minibatches": (
        16,
        "16 minibatches per epoch (256 rows each at 16 × 256): more copies or steps make larger minibatches, not "
        f"more of them, so the update's cost per env step falls as the rollout grows; {_MEASURED}",
    ),
    "learning_rate": (
        None,
        "derived from the action spaces (1e-3 when every agent's actions are discrete, 3e-4 when some agent acts "
        f"in a Box; see DERIVED_RULES); {_MEASURED}",
    ),
    "anneal_lr": (
        None,
        "derived from the agent count (annealed from 5 agents; see DERIVED_RULES): with six agents on "
        "simple_spread a constant rate stops improving after 250k env steps (benchmarks/agent_count.py; "
        "docs/learning.md, 'Learning against the number of agents')",
    ),
}
"""The trainer settings ``marljoint train`` changes from :class:`~marljoint.JointTrainerConfig`'s defaults:
``{setting: (its value in marljoint train, why)}``."""

DERIVED_RULES: dict[str, str] = {
    "gamma": "None: 1 − 1/H for episodes of at most H steps, kept within [0.9, 0.99]; 0.99 when the env states "
    "no limit (marljoint.ppo.derive_settings)",
    "ent_coef": "None: 0.01 when every agent's actions are discrete, 0 when some agent acts in a Box "
    "(marljoint.ppo.derive_settings)",
    "learning_rate": "None: 1e-3 when every agent's actions are discrete, 3e-4 when some agent acts in a Box "
    "(marljoint.ppo.derive_settings)",
    "anneal_lr": "None: the learning rate annealed linearly to 0 over the run from 5 agents, constant below "
    "(marljoint.ppo.derive_settings)",
    "normalize_observations": "None: on when some agent observes a Box with an infinite bound (or one of "
    "magnitude >= 1e6), off otherwise (marljoint.ppo.derive_settings)",
    "torch_threads": "'auto': the cores this process may use less those the env workers take, one when it "
    "collects itself or updates on a GPU (marljoint.ppo.derive_threads)",
    "acting_device": "'auto': the learner's device only where that pays (images, large networks), else the CPU "
    "(marljoint.ppo.derived.derive_acting_device)",
    "recurrent_replay": "'auto': the fused GRU/LSTM kernel on CUDA, the stacked cells elsewhere "
    "(marljoint.ppo.derive_replay)",
}
"""Settings whose default (``None`` or ``"auto"``) is resolved when the trainer is built, and the rule that does;
a run's ``config.toml`` holds the resolved value with its reason."""

DEFAULT_TRAINER: dict[str, Any] = {name: value for name, (value, _) in PRODUCT_CHANGES.items()}
"""Trainer settings of ``marljoint train`` that differ from :class:`~marljoint.JointTrainerConfig`'s defaults
(:data:`PRODUCT_CHANGES` without the reasons)."""


@dataclass(frozen=True)
class Default:
    """One setting's defaults.

    Attributes:
        setting: its name (a ``config.toml`` key).
        library: :class:`~marljoint.JointTrainerConfig`'s default (for a run setting, the same as ``product``).
        product: ``marljoint train``'s default.
        why: why ``product`` differs from ``library`` (empty when it does not).
        rule: the rule that resolves a default left to the env or the machine (empty when there is none).
    """

    setting: str
    library: Any
    product: Any
    why: str = ""
    rule: str = ""


def _trainer_library_defaults() -> dict[str, Any]:
    defaults = {}
    for f in dataclasses.fields(JointTrainerConfig):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        else:
            defaults[f.name] = f.default_factory().to_dict()  # type: ignore[misc]  # collection, a table
    return defaults


def defaults_table() -> tuple[Default, ...]:
    """Every setting of a run, in ``config.toml`` order: the run's own settings, then the trainer's."""
    rows = [Default(name, value, value) for name, value in RUN_DEFAULTS.items()]
    for name, library in _trainer_library_defaults().items():
        product, why = PRODUCT_CHANGES.get(name, (library, ""))
        rows.append(Default(name, library, product, why, DERIVED_RULES.get(name, "")))
    return tuple(rows)


def product_default(setting: str) -> Any:
    """``marljoint train``'s default of ``setting``.

    Raises:
        KeyError: naming the unknown setting.
    """
    return _row(setting).product


def library_default(setting: str) -> Any:
    """:class:`~marljoint.JointTrainerConfig`'s default of ``setting`` (a run setting's own default).

    Raises:
        KeyError: naming the unknown setting.
    """
    return _row(setting).library


def _row(setting: str) -> Default:
    for row in defaults_table():
        if row.setting == setting:
            return row
    raise KeyError(f"no setting {setting!r}; the settings are the config.toml keys")
