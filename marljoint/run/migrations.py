"""Older run and checkpoint formats, read into the current one: the only module that knows them.

Each function converts one kind of older content (a ``config.toml``'s settings, a checkpoint's state) into what the
current code writes, so the core classes (:class:`~marljoint.JointTrainerConfig`, the trainer) read the current
format alone. The run layer applies them on read; content already in the current format passes through unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marljoint.best_response import nfsp, psro
from marljoint.checkpoint import load_checkpoint
from marljoint.collect.config import CollectionConfig

__all__ = [
    "COLLECTION_KEYS",
    "SAVED_BEFORE",
    "collection_from_keys",
    "migrate_checkpoint",
    "migrate_collection_keys",
    "migrate_offpolicy_state",
    "migrate_best_response_state",
    "migrate_psro_config",
    "migrate_saved_config",
    "without_settings_not_read",
    "read_nfsp_checkpoint",
    "read_psro_checkpoint",
]

PICKLED_PSRO = (
    "a PSRO checkpoint of an earlier marljoint version, which pickled its population of networks and is no longer "
    "read: start the run afresh (marljoint psro ... --force)"
)
"""What a ``psro.pt`` holding pickled objects is, if marljoint wrote it, and what to do: the one older format that
cannot be converted (reading it would run code from the file)."""

COLLECTION_KEYS = ("vector_mode", "num_env_workers", "num_workers", "extra")
"""Settings of older configs, now :attr:`JointTrainerConfig.collection`: ``vector_mode="subprocess"`` with
``num_env_workers=K`` is ``backend="subprocess", workers=K``; ``num_workers=K`` is ``backend="ray", workers=K``;
``extra`` was read by nothing and is dropped."""

SAVED_BEFORE = {"normalize_observations": False}
"""Settings that configs saved before they existed lack, with the value those runs trained with (a run saved
before observation normalisation had none, whatever its env)."""


def migrate_collection_keys(values: Mapping[str, Any], base: CollectionConfig | None = None) -> dict[str, Any]:
    """Flat config settings with the older collection keys (:data:`COLLECTION_KEYS`) replaced by the
    ``collection`` table they describe.

    Args:
        values: run and trainer settings (a ``config.toml``'s top level).
        base: the collection the older keys apply on top of (the default collection when ``None``).

    Returns:
        A new dict: ``values`` unchanged when it holds none of the older keys; else without them, and with
        ``collection`` as a table (``{"backend": ..., "workers": ...}``) unless only ``extra`` was given.

    Raises:
        ValueError: if the older keys come together with ``collection``, or describe no valid collection.

    Example:
        >>> migrate_collection_keys({"vector_mode": "subprocess", "num_env_workers": 4, "gamma": 0.9})
        {'gamma': 0.9, 'collection': {'backend': 'subprocess', 'workers': 4}}
    """
    out = dict(values)
    older = {key: out.pop(key) for key in COLLECTION_KEYS if key in out}
    older.pop("extra", None)
    if older:
        if "collection" in out:
            raise ValueError(f"{sorted(older)} are the older names of the collection settings; give collection alone")
        out["collection"] = collection_from_keys(older, base or CollectionConfig()).to_dict()
    return out


def collection_from_keys(values: Mapping[str, Any], base: CollectionConfig) -> CollectionConfig:
    """The collection described by the settings of older configs: ``vector_mode`` (``"sync"``/``"subprocess"``)
    with ``num_env_workers``, and ``num_workers`` (Ray actors, 0 for none), applied on top of ``base``.

    Raises:
        ValueError: for an unknown ``vector_mode``, or Ray workers combined with subprocess stepping.
    """
    mode = values.get("vector_mode")
    ray_workers = values.get("num_workers", 0)
    if mode not in (None, "sync", "subprocess"):
        raise ValueError(f"vector_mode must be 'sync' or 'subprocess', got {mode!r}")
    if not isinstance(ray_workers, int) or isinstance(ray_workers, bool) or ray_workers < 0:
        raise ValueError(f"num_workers must be an integer >= 0 (0: no Ray workers), got {ray_workers!r}")
    if ray_workers > 0 and mode == "subprocess":
        raise ValueError(
            f"num_workers={ray_workers} (Ray rollout workers) cannot be combined with vector_mode='subprocess'; "
            "choose one collection backend"
        )
    env_workers = values.get("num_env_workers")
    if ray_workers > 0:
        return CollectionConfig("ray", ray_workers)
    if mode == "subprocess":
        return CollectionConfig("subprocess", 2 if env_workers is None else env_workers)
    if mode == "sync" or "num_workers" in values:
        return CollectionConfig("local", base.workers)
    if env_workers is not None and base.backend == "subprocess":
        return base.replace(workers=env_workers)
    return base


def migrate_saved_config(values: Mapping[str, Any]) -> dict[str, Any]:
    """A saved trainer config (a run's flat ``config.toml``, or a config holding one as ``trainer``) with the
    settings it predates (:data:`SAVED_BEFORE`) set to the values it trained with, so an old run resumes as it ran;
    a run's settings its algorithm never read (:func:`~marljoint.run.reads.settings_not_read`: PPO settings of an
    off-policy run, which older versions took and ignored) are dropped, so they take their defaults.

    Example:
        >>> migrate_saved_config({"gamma": 0.9})
        {'normalize_observations': False, 'gamma': 0.9}
        >>> migrate_saved_config({"algorithm": "qmix", "n_epochs": 3, "offpolicy": {"batch_size": 8}})
        {'algorithm': 'qmix', 'offpolicy': {'batch_size': 8}}
    """
    trainer = values.get("trainer")
    if isinstance(trainer, Mapping):
        return {**values, "trainer": {**SAVED_BEFORE, **trainer}}
    return without_settings_not_read({**SAVED_BEFORE, **values})


def without_settings_not_read(values: Mapping[str, Any]) -> dict[str, Any]:
    """A run's flat settings without those its ``algorithm`` never reads (they changed nothing in the run).

    Example:
        >>> without_settings_not_read({"algorithm": "masac", "learning_rate": 0.01, "offpolicy": {"tau": 0.1}})
        {'algorithm': 'masac', 'offpolicy': {}}
    """
    from marljoint.run.algorithms import ALGORITHMS
    from marljoint.run.reads import settings_not_read

    out = dict(values)
    algorithm = out.get("algorithm")
    row = ALGORITHMS.get(algorithm) if isinstance(algorithm, str) else None
    for name in settings_not_read(row.reads) if row is not None else ():
        table, _, key = name.rpartition(".")
        if not table:
            out.pop(key, None)
        elif isinstance(out.get("offpolicy"), Mapping):
            out["offpolicy"] = _without(out["offpolicy"], table.split(".")[1:], key)
    return out


def _without(table: Mapping[str, Any], path: list[str], key: str) -> dict[str, Any]:
    """``table`` without ``key`` in its sub-table at ``path`` (``["sac"]``), or at its top (``[]``)."""
    out = dict(table)
    if not path:
        out.pop(key, None)
    elif isinstance(out.get(path[0]), Mapping):
        out[path[0]] = _without(out[path[0]], path[1:], key)
    return out


def migrate_checkpoint(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """A ``marljoint train`` checkpoint (``{"trainer", "env", "env_state_saved", "run"}``) in the current layout.

    Checkpoints written before the collector's state held the env copies' noise generators kept them in the
    trainer's state as ``copy_generators``; they move into the env state, where the collector restores them
    (whichever backend it is), exactly as they were.

    Example:
        >>> migrate_checkpoint({"trainer": {"copy_generators": ["g"]}, "env": {"env": b""}})
        {'trainer': {}, 'env': {'env': b'', 'copy_generators': ['g']}}
    """
    out = dict(checkpoint)
    trainer = out.get("trainer")
    if isinstance(trainer, Mapping) and "buffer" in trainer:  # an off-policy trainer's
        trainer = out["trainer"] = migrate_offpolicy_state(trainer)
    if not isinstance(trainer, Mapping) or "copy_generators" not in trainer:
        return out
    trainer = dict(trainer)
    generators = trainer.pop("copy_generators")
    out["trainer"] = trainer
    env = out.get("env")
    # Only an in-process or subprocess env state took them; a state holding its own keeps those.
    if isinstance(env, Mapping) and generators is not None and "env" in env and "copy_generators" not in env:
        out["env"] = {**env, "copy_generators": generators}
    return out


def migrate_offpolicy_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """An off-policy trainer's state (:meth:`~marljoint.offpolicy.OffPolicyTrainer.state_dict`) in the current
    layout.

    States written before off-policy rollouts were collected through :mod:`marljoint.collect` held the moves
    waiting for their agents' next decision as ``pending_moves``, in a form the rollout-based credit does not
    read: they are dropped (the run resumes without those few moves, so not bit-identically to an uninterrupted
    run), and nothing is carried. Their replay buffers lack the legal actions at each decision (``masks``):
    every action counts as legal there, as it did for those transitions' learners.

    Example:
        >>> migrate_offpolicy_state({"buffer": None, "pending_moves": None})
        {'buffer': None, 'carried': None}
    """
    out = dict(state)
    if "carried" in out:
        return out
    out.pop("pending_moves", None)
    out["carried"] = None
    buffer = out.get("buffer")
    if isinstance(buffer, Mapping) and "masks" not in buffer.get("transitions", {"masks": None}):
        transitions = dict(buffer["transitions"])
        transitions["masks"] = tuple(m.new_ones(m.shape) for m in transitions["next_masks"])
        out["buffer"] = {**buffer, "transitions": transitions}
    return out


def migrate_psro_config(values: Mapping[str, Any]) -> dict[str, Any]:
    """A saved :class:`~marljoint.best_response.PsroConfig` dict in the current format: ``num_workers``, the older
    name of ``task_split``, renamed, and the trainer settings it predates filled (:func:`migrate_saved_config`).

    Example:
        >>> migrate_psro_config({"num_workers": 3, "trainer": {"seed": 1}})
        {'trainer': {'normalize_observations': False, 'seed': 1}, 'task_split': 3}
    """
    out = migrate_saved_config(values)
    if "num_workers" in out and "task_split" not in out:
        out["task_split"] = out.pop("num_workers")
    return out


def migrate_best_response_state(state: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """A PSRO (``kind="psro"``) or NFSP (``kind="nfsp"``) checkpoint's state with its config in the current format,
    as :meth:`PSRO.from_state <marljoint.best_response.PSRO.from_state>` and
    :meth:`NFSP.from_state <marljoint.best_response.NFSP.from_state>` take it.

    Example:
        >>> migrate_best_response_state({"config": {"iterations": 3, "trainer": {}}, "iteration": 1}, "nfsp")
        {'config': {'iterations': 3, 'trainer': {'normalize_observations': False}}, 'iteration': 1}

    Raises:
        ValueError: a ``kind`` other than ``"psro"`` or ``"nfsp"``.
    """
    convert = {"psro": migrate_psro_config, "nfsp": migrate_saved_config}.get(kind)
    if convert is None:
        raise ValueError(f"kind must be 'psro' or 'nfsp', got {kind!r}")
    return {**state, "config": convert(state["config"])}


def read_psro_checkpoint(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The state of a PSRO run's ``psro.pt``, in the current format whichever version wrote it.

    Raises:
        marljoint.checkpoint.CheckpointError: a missing or unreadable file, or one holding pickled objects (the
            format earlier versions wrote, which is refused unread, saying to start afresh).
    """
    state = load_checkpoint(Path(directory) / psro.CHECKPOINT_NAME, PICKLED_PSRO)
    return migrate_best_response_state(state, "psro")


def read_nfsp_checkpoint(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The state of an NFSP run's ``nfsp.pt``, in the current format whichever version wrote it.

    Raises:
        marljoint.checkpoint.CheckpointError: a missing or unreadable file, or one holding Python objects other
            than tensors, arrays and plain values, refused unread.
    """
    return migrate_best_response_state(load_checkpoint(Path(directory) / nfsp.CHECKPOINT_NAME), "nfsp")
