"""The settings ``marljoint train`` takes from its command line: the dedicated options and ``--set KEY=VALUE``.

A setting given twice on the command line with two different values is refused (which one was meant cannot be
known); given twice with the same value it is taken once. The settings given here count as given whatever their
values (:attr:`RunSpec.given <marljoint.run.spec.RunSpec.given>`): one the run's algorithm does not read is refused
even at its default. A ``--config`` file's value that the command line
changes is the documented precedence, not an error: :func:`config_overrides` says which ones changed, in one line.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

from marljoint.run import _toml

__all__ = ["DEDICATED_OPTIONS", "command_line_settings", "config_overrides"]

DEDICATED_OPTIONS = {
    "env": ("--env", "env"),
    "env_kwargs": ("--env-kwargs", "env_kwargs"),
    "wrappers": ("--wrap", "wrap"),
    "total_steps": ("--total-steps", "total_steps"),
    "num_envs": ("--num-envs", "num_envs"),
    "seed": ("--seed", "seed"),
    "self_play": ("--self-play", "self_play"),
    "redundancy": ("--redundancy", "redundancy"),
    "redundancy_coef": ("--redundancy-coef", "redundancy_coef"),
    "checkpoint_every": ("--checkpoint-every", "checkpoint_every"),
    "keep_checkpoints": ("--keep-checkpoints", "keep_checkpoints"),
    "eval_every": ("--eval-every", "eval_every"),
    "eval_episodes": ("--eval-episodes", "eval_episodes"),
    "exploitability_every": ("--exploitability-every", "exploitability_every"),
    "wandb_project": ("--wandb", "wandb"),
    "learning_rate": ("--learning-rate", "learning_rate"),
    "rollout_steps": ("--rollout-steps", "rollout_steps"),
    "device": ("--device", "device"),
    "recurrent": ("--recurrent", "recurrent"),
    "algorithm": ("--algorithm", "algorithm"),
}
"""Setting -> (its option of ``marljoint train``, the attribute argparse stores it in)."""

_COLLECTION_OPTIONS = ("env_workers", "ray", "ray_address", "num_workers")


def command_line_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line: every ``--set`` and every dedicated option given.

    Raises:
        RunError: a setting given twice with different values (two ``--set`` of one key, or a ``--set`` and the
            option of the same setting), naming both and their values.
    """
    from marljoint.run.errors import RunError

    settings: dict[str, Any] = {}
    for key, value in args.set:
        if key in settings and not same_value(key, settings[key], value):
            raise RunError(
                f"--set {key}={_show(settings[key])} and --set {key}={_show(value)} give {key} two values; give it once"
            )
        settings[key] = value
    for key, (flag, attribute) in DEDICATED_OPTIONS.items():
        value = getattr(args, attribute)
        if value is None:
            continue
        if key in settings and not same_value(key, settings[key], value):
            raise RunError(
                f"--set {key}={_show(settings[key])} and {flag} {_show(value)} give {key} two values; keep one"
            )
        settings[key] = value
    if args.seeds and "seed" in settings:
        seeds = " ".join(str(seed) for seed in args.seeds)
        raise RunError(f"--set seed={_show(settings['seed'])} and --seeds {seeds} give seed two values; keep one")
    if "collection" in settings and any(getattr(args, name) not in (None, False) for name in _COLLECTION_OPTIONS):
        raise RunError(
            f"--set collection={_show(settings['collection'])} and --env-workers/--ray/--num-workers both choose "
            "how to collect; keep one"
        )
    return settings


def config_overrides(path: Any, file_values: Mapping[str, Any], settings: Mapping[str, Any]) -> str | None:
    """One line naming the ``--config`` values that the command line changes (``None`` when it changes none).

    Example:
        >>> config_overrides("a.toml", {"num_envs": 3, "gamma": 0.9}, {"num_envs": 2, "gamma": 0.9})
        'note: the command line overrides a.toml: num_envs 3 -> 2'
    """
    changed = [
        f"{key} {_show(file_values[key])} -> {_show(value)}"
        for key, value in settings.items()
        if key in file_values and not same_value(key, file_values[key], value)
    ]
    return f"note: the command line overrides {path}: {', '.join(changed)}" if changed else None


def same_value(key: str, first: Any, second: Any) -> bool:
    """Whether two values of setting ``key`` are the same (env kwargs as JSON text or as a table alike)."""
    if key == "env_kwargs":
        first, second = _table(first), _table(second)
    return _plain(first) == _plain(second)


def _table(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return _toml.loads_json(value, "env_kwargs")
        except ValueError:  # not JSON, or nested too deep: the spec's validation says which
            return value
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_plain(v) for v in value]
    return value


def _show(value: Any) -> str:
    """A value as it would be typed: JSON for tables and lists, plain otherwise."""
    if isinstance(value, (Mapping, list, tuple)):
        try:
            return json.dumps(_plain(value), separators=(",", ":"))
        except TypeError:
            return str(value)
    return str(value)
