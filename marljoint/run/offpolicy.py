"""The off-policy runs: value decomposition (``vdn``, ``qmix``) and centralised-critic actor-critics (``masac``,
``maddpg``), their settings (the run's ``[offpolicy]`` table, parsed into the run spec's
:class:`~marljoint.offpolicy.OffPolicyConfig` by :func:`parse_offpolicy` when the spec is built), their refusals
and their trainer, an :class:`~marljoint.offpolicy.OffPolicyTrainer` (the rows of
:data:`~marljoint.run.algorithms.ALGORITHMS` build it with :func:`build_offpolicy_trainer`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import torch

from marljoint.offpolicy import OffPolicyConfig, OffPolicyTrainer
from marljoint.offpolicy.config import RUN_SAC_SETTINGS, VALUE_ALGORITHMS
from marljoint.offpolicy.defaults import OFFPOLICY_DEFAULTS
from marljoint.run.errors import RunError
from marljoint.run.reads import OFFPOLICY_RUN_SETTINGS, table_keys
from marljoint.threads import learner_threads

__all__ = [
    "build_offpolicy_trainer",
    "check_offpolicy_env",
    "check_offpolicy_run",
    "offpolicy_config",
    "offpolicy_table",
    "parse_offpolicy",
]

# Settings an off-policy run takes from the run's trainer settings, not from its [offpolicy] table.
_FROM_RUN = OFFPOLICY_RUN_SETTINGS


def offpolicy_config(algorithm: str, trainer: Any, table: Mapping[str, Any]) -> OffPolicyConfig:
    """The :class:`~marljoint.offpolicy.OffPolicyConfig` of an off-policy run (masac and maddpg: its ``sac`` a
    :class:`~marljoint.offpolicy.sac.SacConfig`, so that two tables that train alike give equal configs).

    Args:
        algorithm: ``vdn``, ``qmix``, ``masac`` or ``maddpg``.
        trainer: the run's :class:`~marljoint.JointTrainerConfig` (E, T, seed, widths, sharing and γ come from it;
            γ 0.99 where it is derived).
        table: the run's ``offpolicy`` settings (every other OffPolicyConfig field).

    Raises:
        RunError: for a key the table cannot hold, or an invalid value (naming ``offpolicy.<key>``).
    """
    misplaced = sorted(set(table) & set(_FROM_RUN))
    if misplaced:
        raise RunError(
            f"offpolicy.{misplaced[0]} is a setting of the run itself; set {misplaced[0]} at the top level "
            "(or with its command-line option) instead"
        )
    shared = {
        **_learning_rate(algorithm, trainer, table),
        "algorithm": algorithm,
        "num_envs": trainer.num_envs,
        "rollout_steps": trainer.rollout_steps,
        "seed": trainer.seed,
        "hidden_sizes": trainer.hidden_sizes,
        "share_parameters": trainer.share_parameters,
        "gamma": OFFPOLICY_DEFAULTS["gamma"] if trainer.gamma is None else trainer.gamma,
    }
    _check_table_keys(table)
    try:
        return OffPolicyConfig(**shared, **dict(table))
    except (TypeError, ValueError) as exc:
        # The config's messages start with the field they name ("batch_size must be ...", "sac.tau=0.0 ...").
        first = str(exc).split(" ")[0].split("=")[0]
        named = first in OffPolicyConfig.__dataclass_fields__ or first.startswith("sac.")
        raise RunError(f"offpolicy.{exc}" if named else f"offpolicy: {exc}") from None


def offpolicy_table(config: OffPolicyConfig, trainer: Any) -> dict[str, Any]:
    """The ``[offpolicy]`` table of a run's config, as ``config.toml`` holds it: the settings of the table (not the
    run's own) whose values differ from their defaults, as plain values, with its ``sac`` table where it has one.
    ``learning_rate`` is left out where the run's ``learning_rate`` set it (vdn and qmix).

    Args:
        config: the run's :class:`~marljoint.offpolicy.OffPolicyConfig`.
        trainer: the run's :class:`~marljoint.JointTrainerConfig`.
    """
    plain = config.to_dict()
    left_out = {*_FROM_RUN, "sac"}
    if config.algorithm in VALUE_ALGORITHMS and trainer.learning_rate is not None:
        left_out.add("learning_rate")
    table = {
        f.name: plain[f.name]
        for f in dataclasses.fields(config)
        if f.name not in left_out and getattr(config, f.name) != f.default
    }
    if plain["sac"]:
        table["sac"] = plain["sac"]
    return table


def parse_offpolicy(algorithm: str, trainer: Any, value: Any) -> OffPolicyConfig:
    """The :class:`~marljoint.offpolicy.OffPolicyConfig` of an off-policy run from its ``offpolicy`` setting: a
    table (``[offpolicy]`` of ``config.toml``; ``None``: every default), or a config (built for the run before a
    change of its settings: its table is applied to the run's current ones).

    Raises:
        RunError: for a value that is no table, or as :func:`offpolicy_config`.
    """
    if isinstance(value, OffPolicyConfig):
        value = offpolicy_table(value, trainer)
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise RunError(f"offpolicy must be a table of settings, got {value!r}")
    return offpolicy_config(algorithm, trainer, value)


def _check_table_keys(table: Mapping[str, Any]) -> None:
    """Refuses a key of the ``[offpolicy]`` table, or of its ``sac`` table, that is no setting, naming it as
    ``offpolicy.<key>`` and listing the valid keys."""
    keys = table_keys()
    sac = table.get("sac")
    for prefix, given, own in (("offpolicy", table, ()), ("offpolicy.sac", sac, RUN_SAC_SETTINGS)):
        if not isinstance(given, Mapping):
            continue  # not a table: the config refuses it
        unknown = sorted(set(given) - set(keys[prefix]) - set(own))
        if unknown:
            valid = ", ".join(f"{prefix}.{key}" for key in keys[prefix])
            raise RunError(f"unknown setting {prefix}.{unknown[0]}; valid keys: {valid}")


def _learning_rate(algorithm: str, trainer: Any, table: Mapping[str, Any]) -> dict[str, Any]:
    """The run's ``learning_rate`` (``--learning-rate``) as the value methods' ``offpolicy.learning_rate``; refused
    when given twice (masac and maddpg read ``offpolicy.sac``'s rates: :mod:`marljoint.run.reads` refuses it
    there)."""
    rate = trainer.learning_rate
    if algorithm not in VALUE_ALGORITHMS:  # masac and maddpg read offpolicy.sac's rates (marljoint.run.reads)
        return {}
    if rate is None:
        return {}
    if "learning_rate" in table:
        raise RunError(
            f"learning_rate = {rate!r} and offpolicy.learning_rate = {table['learning_rate']!r} both set the "
            f"{algorithm} networks' learning rate; set one of them"
        )
    return {"learning_rate": rate}


def check_offpolicy_run(spec: Any) -> None:
    """Refuses run settings an off-policy run cannot honour: recurrent networks, a device other than the CPU,
    ``policy_lag`` and ``balance`` (it collects each rollout with its latest weights),
    ``exploitability_every`` (it scores per-seat policies, which these runs do not have), and a
    ``learning_starts`` the run never reaches (the run would end without a gradient step).

    Raises:
        RunError: naming the setting, its value and the fix.
    """
    algorithm, trainer = spec.algorithm, spec.trainer
    if trainer.recurrent is not None:
        raise RunError(
            f"{algorithm} trains feed-forward utilities, but recurrent={trainer.recurrent!r}; drop recurrent or "
            "use --algorithm mappo or ippo"
        )
    if trainer.device != "cpu":
        raise RunError(f"{algorithm} trains on the CPU, got device={trainer.device!r}; drop --device")
    collection = trainer.collection
    if collection.policy_lag or collection.balance:
        raise RunError(
            f"{algorithm} collects every rollout with the weights of its last gradient steps, so there is no "
            "rollout to collect ahead, and its workers keep their share of the env copies (--env-workers K and "
            "--ray work as they are); drop --policy-lag and --balance"
        )
    config = spec.offpolicy
    if spec.exploitability_every is not None:
        raise RunError(
            f"exploitability_every = {spec.exploitability_every} scores each seat's policy, which a {algorithm} run "
            "does not have; drop --exploitability-every (--eval-every measures its returns), or train with "
            "--algorithm mappo or ippo, or run marljoint psro or nfsp"
        )
    per_iteration = config.transitions_per_iteration
    stored = math.ceil(spec.total_steps / per_iteration) * per_iteration
    if config.learning_starts > stored:
        raise RunError(
            f"offpolicy.learning_starts = {config.learning_starts} is more than the {stored} joint transitions "
            f"this run stores (total_steps = {spec.total_steps}, in iterations of {per_iteration}), so it would end "
            "without training; lower learning_starts or raise total_steps"
        )


def check_offpolicy_env(spec: Any, joint_spec: Any, per_copy: int = 0, zero_sum: bool = False) -> Any:
    """Refuses, before the env copies and networks are built, an off-policy run that cannot learn on its env or
    does not fit in memory: vdn and qmix on a zero-sum game (their team reward, the agents' rewards summed or
    averaged, is always 0 there), and a replay buffer, networks and env copies larger than the memory available
    (:func:`~marljoint.run.memory.estimate_offpolicy_memory`).

    Args:
        spec: the run's :class:`~marljoint.run.spec.RunSpec`.
        joint_spec: its env's :class:`~marljoint.JointSpec`.
        per_copy: bytes one env copy allocates.
        zero_sum: whether the env is a zero-sum game (:func:`~marljoint.run.exploitability.zero_sum_env`).

    Returns:
        The :class:`~marljoint.run.memory.OffPolicyMemory` estimate.

    Raises:
        RunError: naming the reason, the numbers and the fix.
    """
    from marljoint.run import memory

    algorithm = spec.algorithm
    if algorithm in VALUE_ALGORITHMS and zero_sum:
        raise RunError(
            f"env {spec.env!r} is a zero-sum game, so the team reward {algorithm} learns (the agents' rewards "
            "averaged or summed) is always 0 and nothing would be learnt; train its players against each other "
            "with --algorithm mappo or ippo (self-play), or run marljoint psro or nfsp"
        )
    config = spec.offpolicy
    estimate = memory.estimate_offpolicy_memory(
        joint_spec, config, per_copy, ray=spec.trainer.collection.backend == "ray"
    )
    free = memory.available_memory()
    if free is not None and estimate.host > free:
        size = memory.format_bytes
        raise RunError(
            f"the {algorithm} run needs about {size(estimate.host)} of memory, but only {size(free)} is "
            f"available: the replay buffer of {config.buffer_size:,} transitions x {size(estimate.transition)} "
            f"(twice, while a checkpoint is written) {size(estimate.replay)}, the networks {size(estimate.networks)}, "
            f"a batch of {config.batch_size} {size(estimate.batch)}, the {config.num_envs:,} env copies "
            f"{size(estimate.env_copies)}; lower offpolicy.buffer_size, batch_size, mixer_embed_dim, "
            "hypernet_hidden or hidden_sizes, or num_envs"
        )
    return estimate


def build_offpolicy_trainer(spec: Any, env: Any, ranks: Any = None) -> OffPolicyTrainer:
    """The off-policy trainer of a run (``spec.algorithm`` vdn, qmix, masac or maddpg) on ``env``; with ``ranks``
    (a :class:`~marljoint.distributed.ranks.RankGroup`), ``env`` is this rank's slice of the copies and the trainer
    keeps this rank's replay shard (:mod:`marljoint.offpolicy.sharded`).

    Raises:
        RunError: for settings or an env the algorithm cannot train (e.g. Box actions for vdn and qmix).
    """
    config = spec.offpolicy
    # The process acts at every env step, so more compute threads would only spin (the PPO runs' rule).
    threads = spec.trainer.torch_threads
    torch.set_num_threads(threads if isinstance(threads, int) else learner_threads(0, collects=True)[0])
    try:
        return OffPolicyTrainer(env, config, collection=spec.trainer.collection, ranks=ranks)
    except ValueError as exc:
        raise RunError(f"cannot build the {spec.algorithm} trainer for env {spec.env!r}: {exc}") from None
