"""Every key a run's settings are given by, and which of them each algorithm reads.

A run's settings are the :class:`~marljoint.run.spec.RunSpec` fields and the
:class:`~marljoint.JointTrainerConfig` fields, each under its own name, and the keys of its tables, named with dots:
``offpolicy.<key>`` (:class:`~marljoint.offpolicy.OffPolicyConfig`), ``offpolicy.sac.<key>``
(:class:`~marljoint.offpolicy.sac.SacConfig`) and ``mmd.<key>`` (:class:`~marljoint.best_response.MmdConfig`).
``--set``, ``--sweep``, ``marljoint tune --param`` and a ``--config`` file take every one of them
(:func:`setting_keys`); :func:`with_dotted_keys` folds the dotted ones into their tables.

A setting the run's algorithm does not read is refused (:func:`check_settings_read`), naming the one it reads
instead where there is one: ``--set clip_range=0.1 --algorithm qmix`` would otherwise train as if it were not
there. What counts is a setting given on the command line (``--set``, its option, ``--sweep``, ``marljoint tune
--param``: :attr:`RunSpec.given <marljoint.run.spec.RunSpec.given>`), whatever its value, and any other whose
value is not its default: a run's ``config.toml`` holds every trainer setting, the defaults of those its algorithm
does not read included, and is read back, or passed as ``--config``, without tripping this.

Example:
    >>> keys = setting_keys(["env", "algorithm", "offpolicy"])
    >>> "offpolicy.sac.actor_lr" in keys and "algorithm" in keys and "clip_range" in keys
    True
    >>> with_dotted_keys({"offpolicy.tau": 0.05}, {"offpolicy": {"batch_size": 64}})
    {'offpolicy': {'batch_size': 64, 'tau': 0.05}}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from marljoint.offpolicy.config import SAC_TABLE_SETTINGS, VALUE_ALGORITHMS, OffPolicyConfig
from marljoint.offpolicy.sac import SacConfig
from marljoint.ppo.config import JointTrainerConfig
from marljoint.run.errors import RunError

__all__ = [
    "OFFPOLICY_RUN_SETTINGS",
    "OFFPOLICY_TRAINER_SETTINGS",
    "READ_INSTEAD",
    "SPEC_FIELDS_NOT_SETTINGS",
    "SettingsRead",
    "check_settings_read",
    "given_names",
    "offpolicy_reads",
    "setting_keys",
    "settings_not_read",
    "table_keys",
    "table_of",
    "unread_settings",
    "with_dotted_keys",
]

OFFPOLICY_TRAINER_SETTINGS = (
    "num_envs",
    "rollout_steps",
    "seed",
    "gamma",
    "hidden_sizes",
    "share_parameters",
    "collection",
    "torch_threads",
    "device",
)
"""The trainer settings every off-policy algorithm reads: the run's env copies, rollout, seed, discount and
networks (declared once, for every family), and how and where it computes. vdn and qmix also read
``learning_rate``; every other trainer setting is PPO's."""

OFFPOLICY_RUN_SETTINGS = ("algorithm", "num_envs", "rollout_steps", "seed", "gamma", "hidden_sizes", "share_parameters")
""":class:`~marljoint.offpolicy.OffPolicyConfig` fields an off-policy run takes from the run's own settings
(``algorithm`` and the trainer settings of the same names), never from its ``[offpolicy]`` table."""

SPEC_FIELDS_NOT_SETTINGS = ("trainer", "given", "reasons")
""":class:`~marljoint.run.spec.RunSpec` fields that are no key of ``config.toml``: ``trainer`` (its fields are,
each under its own name), ``given`` (what the command line gave) and ``reasons`` (why a rule chose a setting)."""

_OFFPOLICY_ONLY_PPO = ("learning_rate",)
_NOT_REFUSED = ("recurrent", "acting_device", "recurrent_replay")
# recurrent is refused with its own reason (the off-policy networks are feed-forward); acting_device and
# recurrent_replay are resolved from the machine, and the run layer sets them for every run (evaluation acts on the
# CPU), so they are not the user's to refuse.
_SAC_RATES = "offpolicy.sac.actor_lr, offpolicy.sac.critic_lr and offpolicy.sac.alpha_lr"

READ_INSTEAD: dict[str, dict[str, str]] = {
    "value": {
        "critic_lr": "offpolicy.learning_rate (one rate for every network)",
        "adam_eps": "offpolicy.adam_eps",
        "max_grad_norm": "offpolicy.max_grad_norm",
    },
    "vdn": {
        "offpolicy.mixer_embed_dim": "qmix only",
        "offpolicy.hypernet_hidden": "qmix only",
    },
    "actor-critic": {
        "learning_rate": _SAC_RATES,
        "critic_lr": "offpolicy.sac.critic_lr",
        "adam_eps": "offpolicy.adam_eps",
        "max_grad_norm": "offpolicy.max_grad_norm",
        "offpolicy.learning_rate": _SAC_RATES,
        "offpolicy.tau": "offpolicy.sac.tau",
        "offpolicy.target_update": "offpolicy.sac.tau (Polyak targets after every gradient step)",
        "offpolicy.target_update_interval": "offpolicy.sac.tau (Polyak targets after every gradient step)",
        "offpolicy.double_q": "the twin critics of masac",
        "offpolicy.exploration": "offpolicy.sac.exploration_noise (maddpg) or offpolicy.sac.init_alpha (masac)",
        "offpolicy.exploration_start": "offpolicy.sac.exploration_noise (maddpg) or offpolicy.sac.init_alpha (masac)",
        "offpolicy.exploration_end": "offpolicy.sac.exploration_noise (maddpg) or offpolicy.sac.init_alpha (masac)",
        "offpolicy.exploration_steps": "offpolicy.sac.exploration_noise (maddpg) or offpolicy.sac.init_alpha (masac)",
        "offpolicy.mixer_embed_dim": "qmix only",
        "offpolicy.hypernet_hidden": "qmix only",
    },
    "masac": {
        "offpolicy.sac.exploration_noise": "maddpg only (masac explores by its entropy temperature)",
        "offpolicy.sac.gumbel_temperature": "maddpg only",
    },
    "maddpg": {
        "offpolicy.sac.init_alpha": "masac only (maddpg has no entropy temperature)",
        "offpolicy.sac.autotune_alpha": "masac only",
        "offpolicy.sac.alpha_lr": "masac only",
        "offpolicy.sac.target_entropy": "masac only",
        "offpolicy.sac.target_entropy_fraction": "masac only",
    },
}
"""``{family or algorithm: {setting: what it reads instead}}`` for the settings an off-policy algorithm does not
read but another does (``"qmix only"`` where nothing stands in). A trainer setting not listed and not in
:data:`OFFPOLICY_TRAINER_SETTINGS` is PPO's (mappo, ippo)."""


def table_keys() -> dict[str, list[str]]:
    """``{table: its keys}``: ``offpolicy`` (the :class:`~marljoint.offpolicy.OffPolicyConfig` fields that are
    not run settings), ``offpolicy.sac`` (the :class:`~marljoint.offpolicy.sac.SacConfig` fields that are not
    taken from the run) and ``mmd`` (:class:`~marljoint.best_response.MmdConfig`)."""
    from marljoint.best_response.mmd import MmdConfig

    offpolicy = [f.name for f in dataclasses.fields(OffPolicyConfig) if f.name not in OFFPOLICY_RUN_SETTINGS]
    sac = list(SAC_TABLE_SETTINGS)
    mmd = [f.name for f in dataclasses.fields(MmdConfig)]
    return {"offpolicy": offpolicy, "offpolicy.sac": sac, "mmd": mmd}


def setting_keys(run_settings: Iterable[str]) -> list[str]:
    """Every key ``--set``, ``--sweep``, ``marljoint tune --param`` and a config file take: ``run_settings`` (the
    :class:`~marljoint.run.spec.RunSpec` fields, which the run layer passes: that module builds on this one), the
    trainer's fields and each table's keys with their table's prefix (``offpolicy.tau``, ``offpolicy.sac.actor_lr``,
    ``mmd.alpha``)."""
    run = [name for name in run_settings if name not in SPEC_FIELDS_NOT_SETTINGS]
    trainer = [f.name for f in dataclasses.fields(JointTrainerConfig)]
    dotted = [f"{table}.{key}" for table, keys in table_keys().items() for key in keys]
    return [*run, *trainer, *dotted]


def with_dotted_keys(values: Mapping[str, Any], tables: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with every dotted key (``offpolicy.tau``, ``offpolicy.sac.actor_lr``, ``mmd.alpha``) folded into
    its table: the table ``values`` gives, else the one in ``tables`` (the run's current tables), with the key set.

    Raises:
        RunError: for a dotted key of no table, or one its table does not hold, listing the valid keys.
    """
    dotted = {key: value for key, value in values.items() if "." in key}
    if not dotted:
        return dict(values)
    known = table_keys()
    out = {key: value for key, value in values.items() if "." not in key}
    for key, value in dotted.items():
        table, _, name = key.rpartition(".")
        if table not in known or name not in known[table]:
            tables = [table] if table in known else list(known)
            valid = ", ".join(f"{t}.{k}" for t in tables for k in known[t])
            raise RunError(f"unknown setting {key}; valid keys: {valid}")
        top, _, sub = table.partition(".")
        current = table_of(out[top] if top in out else tables.get(top))
        if sub:
            current[sub] = {**dict(current.get(sub) or {}), name: value}
        else:
            current[name] = value
        out[top] = current
    return out


def given_names(settings: Mapping[str, Any]) -> frozenset[str]:
    """The names of ``settings`` (flat, as ``--set`` gives them), with those of the keys of a table given whole.

    Example:
        >>> sorted(given_names({"clip_range": 0.2, "offpolicy": {"tau": 0.1, "sac": {"actor_lr": 1e-3}}}))
        ['clip_range', 'offpolicy', 'offpolicy.sac', 'offpolicy.sac.actor_lr', 'offpolicy.tau']
    """
    tables = table_keys()
    names: set[str] = set()

    def add(name: str, value: Any) -> None:
        names.add(name)
        if name in tables and isinstance(value, Mapping):
            for key, item in value.items():
                add(f"{name}.{key}", item)

    for key, value in settings.items():
        add(key, value)
    return frozenset(names)


def table_of(value: Any) -> dict[str, Any]:
    """A table's settings as a dict: a mapping's items, a config's ``to_dict()``, ``{}`` for ``None``."""
    if value is None:
        return {}
    return value.to_dict() if hasattr(value, "to_dict") else dict(value)


@dataclasses.dataclass(frozen=True)
class SettingsRead:
    """Which of a run's settings an algorithm reads: each row of the table of algorithms
    (:data:`~marljoint.run.algorithms.ALGORITHMS`) holds one, so a new algorithm states its own.

    Attributes:
        trainer: the :class:`~marljoint.JointTrainerConfig` settings it reads; ``None``: every one (PPO).
        instead: settings it does not read, each with what it reads instead (``"qmix only"`` where nothing stands
            in); its tables' keys with dots (``offpolicy.tau``).

    Example:
        >>> "clip_range" in settings_not_read(offpolicy_reads("qmix")), settings_not_read(SettingsRead())
        (True, [])
    """

    trainer: frozenset[str] | None = None
    instead: Mapping[str, str] = dataclasses.field(default_factory=dict)


def offpolicy_reads(algorithm: str) -> SettingsRead:
    """What the off-policy ``algorithm`` (vdn, qmix, masac or maddpg) reads: :data:`OFFPOLICY_TRAINER_SETTINGS`
    (and ``learning_rate`` for the value methods), and :data:`READ_INSTEAD`'s entries of its family and its own."""
    family = "value" if algorithm in VALUE_ALGORITHMS else "actor-critic"
    trainer = {*OFFPOLICY_TRAINER_SETTINGS, *_NOT_REFUSED, *(_OFFPOLICY_ONLY_PPO if family == "value" else ())}
    return SettingsRead(frozenset(trainer), {**READ_INSTEAD[family], **READ_INSTEAD.get(algorithm, {})})


def settings_not_read(reads: SettingsRead) -> list[str]:
    """The settings an algorithm never reads, whatever their values (``reads``: its row's
    :class:`SettingsRead`): the trainer settings and the keys of its tables (``offpolicy.<key>``,
    ``offpolicy.sac.<key>``); empty for PPO, which reads every trainer setting."""
    if reads.trainer is None:
        return []
    trainer = [f.name for f in dataclasses.fields(JointTrainerConfig) if f.name not in reads.trainer]
    return [*trainer, *(key for key in reads.instead if "." in key)]


def unread_settings(spec: Any, reads: SettingsRead) -> list[tuple[str, Any, str]]:
    """The settings of a run (a :class:`~marljoint.run.spec.RunSpec`) its algorithm does not read (``reads``: its
    row's :class:`SettingsRead`) that the run gives: those the command line gave (``spec.given``), whatever their
    values, and any other whose value is not its default: ``[(setting, value, what the algorithm reads instead, or
    "")]``."""
    usual = (JointTrainerConfig(), _product_trainer())  # a trainer setting at either default is not given
    found = []
    for name in settings_not_read(reads):
        value, defaults = _value_and_defaults(name, spec, usual)
        if name in spec.given or value not in defaults:
            found.append((name, value, reads.instead.get(name, "")))
    return found


def _value_and_defaults(name: str, spec: Any, usual: tuple[JointTrainerConfig, ...]) -> tuple[Any, list[Any]]:
    """The value ``spec`` holds for ``name`` (a trainer setting, ``offpolicy.<key>`` or ``offpolicy.sac.<key>``),
    and the values that are its defaults."""
    if not name.startswith("offpolicy."):
        return getattr(spec.trainer, name), [getattr(config, name) for config in usual]
    key, config = name.rpartition(".")[2], spec.offpolicy
    if name.startswith("offpolicy.sac."):
        default = SacConfig.__dataclass_fields__[key].default
        return (default if config is None or config.sac is None else getattr(config.sac, key)), [default]
    default = OffPolicyConfig.__dataclass_fields__[key].default
    return (default if config is None else getattr(config, key)), [default]


def _product_trainer() -> JointTrainerConfig:
    from marljoint.run.defaults import DEFAULT_TRAINER

    return JointTrainerConfig(**DEFAULT_TRAINER)


def check_settings_read(spec: Any, reads: SettingsRead) -> None:
    """Refuses a run that gives a setting its algorithm does not read (:func:`unread_settings`; ``reads``: its
    row's :class:`SettingsRead`).

    Raises:
        RunError: naming the algorithm, the setting and its value, and what the algorithm reads instead.
    """
    found = unread_settings(spec, reads)
    if not found:
        return
    name, value, instead = found[0]
    algorithm = spec.algorithm
    if instead.endswith(" only") or " only (" in instead:
        why = f"it is read by {instead}; drop it"
    elif instead:
        why = f"set {instead} instead"
    else:
        why = "it is a PPO setting (--algorithm mappo or ippo); drop it"
    raise RunError(f"{algorithm} does not read {name} (= {value!r}); {why}")
