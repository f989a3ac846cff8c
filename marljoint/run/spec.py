"""A run's settings: :class:`RunSpec` (the env, the budget, checkpoints, evaluation and the trainer's config) and
its ``config.toml`` (read, written, and changed on a resume)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from marljoint.ppo.config import JointTrainerConfig
from marljoint.run import _toml, migrations
from marljoint.run.algorithms import ALGORITHMS, check_run_algorithm, with_algorithm_defaults
from marljoint.run.config_trust import config_signed, function_env, sign_config, untrusted_config_error
from marljoint.run.defaults import DEFAULT_ENV, DEFAULT_ENV_KWARGS, DEFAULT_TOTAL_STEPS, DEFAULT_TRAINER, RUN_DEFAULTS
from marljoint.run.errors import RunError
from marljoint.run.game_runs import GAME_ALGORITHMS, check_game_run, game_iterations, settings_table
from marljoint.run.reads import (
    SPEC_FIELDS_NOT_SETTINGS,
    SettingsRead,
    check_settings_read,
    given_names,
    table_keys,
    table_of,
    with_dotted_keys,
)
from marljoint.run.registry import EnvSpecError, supersuit_wrappers
from marljoint.run.rundir import CONFIG_FILE

if TYPE_CHECKING:
    from marljoint.best_response.mmd import MmdConfig
    from marljoint.best_response.nfsp import NfspConfig
    from marljoint.best_response.psro import PsroConfig
    from marljoint.offpolicy.config import OffPolicyConfig

__all__ = [
    "MACHINE_SETTINGS",
    "OPTIONAL_SETTINGS",
    "RESUMABLE_CHANGES",
    "TABLES",
    "RunSpec",
    "iterations_for",
    "load_run_spec",
    "parse_env_kwargs",
    "read_config",
    "read_config_file",
    "resume_spec",
    "write_config",
]

OPTIONAL_SETTINGS = ("algorithm", "offpolicy", "psro", "nfsp", "max_seconds")
"""Run settings that ``config.toml`` (:meth:`RunSpec.to_dict`) holds only when they are set: a PPO run as
``centralized_critic`` says writes neither, so its file is what it was before ``algorithm`` existed."""

TABLES = ("offpolicy", "mmd", *GAME_ALGORITHMS)
"""The run settings that are tables of an algorithm's own settings (``[offpolicy]``, ``[mmd]``, ``[psro]``,
``[nfsp]`` in ``config.toml``), each held by the spec as its algorithm's config."""


@dataclass(frozen=True)
class RunSpec:
    """Everything a run is defined by, as written to ``config.toml``.

    ``config.toml`` (and a ``--config`` file) holds these fields and every
    :class:`~marljoint.JointTrainerConfig` field at the top level, each under its own name.
    """

    env: str = DEFAULT_ENV
    """A bundled env name, a module path (``mpe2.simple_spread_v3``) or a factory path (``pkg.mod:make``)."""
    env_kwargs: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_ENV_KWARGS))
    """Keyword arguments of the env factory."""
    wrappers: tuple[Any, ...] = RUN_DEFAULTS["wrappers"]
    """SuperSuit wrappers applied to every env copy, in order, before the adapter: names
    (``"color_reduction_v0"``) or tables with ``name`` and keyword arguments
    (``{name = "resize_v1", x_size = 84, y_size = 84}``); ``--wrap`` on the command line."""
    total_steps: int = DEFAULT_TOTAL_STEPS
    """Env steps to train for (one step of one env copy is one env step), rounded up to whole iterations."""
    redundancy: str | None = RUN_DEFAULTS["redundancy"]
    """Kind of :class:`~marljoint.redundancy.RedundancyPenalty` to add as the aux loss (``xcorr``, ``cka``,
    ``hsic``), or ``None``."""
    redundancy_coef: float = RUN_DEFAULTS["redundancy_coef"]
    """λ of the redundancy penalty."""
    checkpoint_every: int = RUN_DEFAULTS["checkpoint_every"]
    """Iterations between checkpoints (the last iteration is always checkpointed)."""
    keep_checkpoints: int = RUN_DEFAULTS["keep_checkpoints"]
    """How many of the newest checkpoints to keep."""
    eval_every: int | None = RUN_DEFAULTS["eval_every"]
    """Evaluate the greedy policies every K iterations (and after the last) on ``eval_episodes`` fresh episodes of
    an in-process copy of the env, always the same ones: logged as the ``eval/...`` columns, and the best evaluation
    so far kept as ``checkpoints/best.pt``. ``None``: no evaluation during training. Training is the same with or
    without it."""
    eval_episodes: int = RUN_DEFAULTS["eval_episodes"]
    """Episodes of each evaluation during training."""
    exploitability_every: int | None = RUN_DEFAULTS["exploitability_every"]
    """Measure the exploitability of the current policies every K iterations (and after the last): exactly for a
    known game (Kuhn poker, a matrix game, a tabulable OpenSpiel game), else, in a two-player env, approximately
    with best responses of ``exploitability_steps`` env steps; logged as the ``exploit/...`` columns, and the least
    exploitable checkpoint kept as ``checkpoints/best.pt`` (:mod:`marljoint.run.exploitability`). ``None``: only at
    evaluations, and only for a known game."""
    exploitability_steps: int = RUN_DEFAULTS["exploitability_steps"]
    """Env steps of PPO best-response training per approximate measure (envs without a known game)."""
    exploitability_episodes: int = RUN_DEFAULTS["exploitability_episodes"]
    """Episodes of each estimate of an approximate measure (the profile, and each best response)."""
    exploitability_budget_s: float = RUN_DEFAULTS["exploitability_budget_s"]
    """The most seconds one exact measurement of an OpenSpiel game may take, as the run estimates it at its start
    (the walk of the game tree, then one timed measurement): a run with ``exploitability_every`` over it is
    refused, naming the estimate; without ``exploitability_every`` the evaluations skip the exact measure. ``0``:
    no exact measure of OpenSpiel games (two-player ones are measured approximately, with ``best_response_gain``);
    ``inf``: no limit, and no estimate."""
    wandb_project: str | None = RUN_DEFAULTS["wandb_project"]
    """Also log every metrics row to this Weights & Biases project (``pip install "marljoint[wandb]"``; set
    ``WANDB_MODE=offline`` without network). ``None``: CSV and TensorBoard only."""
    self_play: str | None = RUN_DEFAULTS["self_play"]
    """``"mmd"``: magnetic mirror descent self-play of a two-player zero-sum game (each seat's PPO loss plus
    α·KL(π ‖ magnet), :mod:`marljoint.best_response.mmd`); ``"ppo"`` or ``None``: plain PPO of every agent."""
    mmd: MmdConfig | None = RUN_DEFAULTS["mmd"]
    """The :class:`~marljoint.best_response.MmdConfig` of ``self_play = "mmd"``, parsed from its table (``[mmd]``
    in ``config.toml``, ``mmd.<key>`` on the command line; a mapping may be given) when the spec is built; ``None``
    without MMD self-play."""
    trainer: JointTrainerConfig = field(default_factory=lambda: JointTrainerConfig(**DEFAULT_TRAINER))
    """The trainer's hyperparameters: :class:`~marljoint.JointTrainerConfig`'s defaults with
    :data:`~marljoint.run.defaults.DEFAULT_TRAINER` applied (:mod:`marljoint.run.defaults` says why)."""
    algorithm: str | None = RUN_DEFAULTS["algorithm"]
    """An algorithm of :data:`~marljoint.run.algorithms.ALGORITHMS` that ``--algorithm`` selects: ``mappo`` or
    ``ippo`` (PPO with or without ``centralized_critic``), ``vdn`` or ``qmix`` (value decomposition, trained
    off-policy), or ``masac`` or ``maddpg`` (off-policy actor-critics with centralised critics); ``None``: PPO as
    ``centralized_critic`` says."""
    offpolicy: OffPolicyConfig | None = RUN_DEFAULTS["offpolicy"]
    """The :class:`~marljoint.offpolicy.OffPolicyConfig` an off-policy run (vdn, qmix, masac, maddpg) trains with,
    parsed when the spec is built from its table (``[offpolicy]`` in ``config.toml``, with masac's and maddpg's
    settings in ``[offpolicy.sac]``; ``offpolicy.<key>`` on the command line; a mapping may be given) and the run's
    own settings (``num_envs``, ``rollout_steps``, ``seed``, ``gamma``, ``hidden_sizes``, ``share_parameters``, and
    vdn's and qmix's ``learning_rate`` where it is set); ``None`` for other algorithms."""
    psro: PsroConfig | None = None
    """A ``psro`` run's :class:`~marljoint.best_response.PsroConfig`, parsed when the spec is built from its table
    (``[psro]`` in ``config.toml``: every field but ``trainer``, ``seed`` and ``device``, which are the run's own
    settings; a mapping may be given; :mod:`marljoint.run.game_runs`); ``None`` for other algorithms."""
    nfsp: NfspConfig | None = None
    """An ``nfsp`` run's :class:`~marljoint.best_response.NfspConfig`, parsed as :attr:`psro` is from ``[nfsp]``;
    ``None`` for other algorithms."""
    max_seconds: float | None = None
    """A psro or nfsp run's wall-time budget in seconds, checked between iterations (resumed time included): the
    run ends, checkpointed, after the iteration that reaches it. ``None``: no time budget."""
    given: frozenset[str] = field(default_factory=frozenset, compare=False, repr=False)
    """Not a setting, and not written to ``config.toml``: the settings the user gave on the command line (``--set``,
    the options, ``--sweep``, ``marljoint tune --param``; a table's keys with dots, ``offpolicy.tau``), which
    count as given whatever their values, so that one the algorithm does not read is refused even at its default
    (:func:`~marljoint.run.reads.unread_settings`). :meth:`from_dict` adds to it."""
    reasons: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    """Not a setting: ``{setting: reason}`` of the settings the command line chose by a rule from the game
    (``--self-play mmd``'s magnet, :func:`~marljoint.run.recipes.self_play_rule`), written beside them as comments
    in ``config.toml``."""

    def __post_init__(self) -> None:
        if not isinstance(self.env, str) or not self.env:
            raise RunError(f"env must be a non-empty string, got {self.env!r}")
        if not isinstance(self.env_kwargs, Mapping):
            raise RunError(f"env_kwargs must be a table of keyword arguments, got {self.env_kwargs!r}")
        try:
            supersuit_wrappers(self.wrappers)
        except (EnvSpecError, TypeError) as exc:
            raise RunError(str(exc)) from None
        object.__setattr__(self, "wrappers", tuple(self.wrappers))
        render_mode = self.env_kwargs.get("render_mode")
        if render_mode not in (None, "rgb_array", "ansi"):
            raise RunError(
                f"env kwargs render_mode={render_mode!r} would open a window for every env copy and wait on it; "
                "leave render_mode out (marljoint eval --gif FILE renders the frames of a trained run itself)"
            )
        _positive_int("total_steps", self.total_steps)
        _positive_int("checkpoint_every", self.checkpoint_every)
        _positive_int("keep_checkpoints", self.keep_checkpoints)
        if self.eval_every is not None:
            _positive_int("eval_every", self.eval_every)
        _positive_int("eval_episodes", self.eval_episodes)
        if self.exploitability_every is not None:
            _positive_int("exploitability_every", self.exploitability_every)
        _positive_int("exploitability_steps", self.exploitability_steps)
        _positive_int("exploitability_episodes", self.exploitability_episodes)
        if self.exploitability_episodes < 2:
            raise RunError("exploitability_episodes must be at least 2 (a confidence interval needs two), got 1")
        budget = self.exploitability_budget_s
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget >= 0:
            raise RunError(
                f"exploitability_budget_s must be a number of seconds >= 0 (0: no exact measure of OpenSpiel games; "
                f"inf: no limit), got {budget!r}"
            )
        if self.wandb_project is not None and (not isinstance(self.wandb_project, str) or not self.wandb_project):
            raise RunError(f"wandb_project must be a project name, got {self.wandb_project!r}")
        object.__setattr__(self, "mmd", self.mmd_config())
        if self.redundancy is not None:
            self.penalty()
        elif not isinstance(self.redundancy_coef, (int, float)) or isinstance(self.redundancy_coef, bool):
            raise RunError(f"redundancy_coef must be a number, got {self.redundancy_coef!r}")
        object.__setattr__(self, "given", frozenset(self.given))
        object.__setattr__(self, "reasons", dict(self.reasons))
        # An unknown name is refused by check_run_algorithm, listing the names.
        named = ALGORITHMS.get(self.algorithm) if isinstance(self.algorithm, str) else None
        self._parse_tables(named.table if named is not None else None)
        check_settings_read(self, named.reads if named is not None else SettingsRead())
        check_run_algorithm(self)
        check_game_run(self)

    def _parse_tables(self, own: str | None) -> None:
        """Parses the table of the run's algorithm (``own``: ``offpolicy``, ``psro`` or ``nfsp``) into its config.
        Another algorithm's table is ``None`` when empty; one that holds settings is refused by
        :func:`~marljoint.run.algorithms.check_run_algorithm`, naming the algorithms that read it.

        Raises:
            RunError: a table that is no table, or a key of the algorithm's table that is no setting or whose value
                is refused, naming ``<table>.<key>``, the value and the fix.
        """
        from marljoint.run.game_runs import parse_game_table
        from marljoint.run.offpolicy import parse_offpolicy

        parsers = {"offpolicy": parse_offpolicy, **{name: parse_game_table for name in GAME_ALGORITHMS}}
        for name, parse in parsers.items():
            value = getattr(self, name)
            if name == own:
                value = parse(self.algorithm, self.trainer, value)
            elif value is not None and not isinstance(value, Mapping) and not dataclasses.is_dataclass(value):
                raise RunError(f"{name} must be a table of settings, got {value!r}")
            elif not value:
                value = None
            object.__setattr__(self, name, value)

    def penalty(self) -> Any:
        """The redundancy penalty (an ``aux_fn``), or ``None``."""
        if self.redundancy is None:
            return None
        from marljoint.redundancy import RedundancyPenalty

        try:
            return RedundancyPenalty(kind=self.redundancy, coef=self.redundancy_coef)
        except (TypeError, ValueError) as exc:
            raise RunError(f"redundancy: {exc}") from None

    def mmd_config(self) -> Any:
        """The :class:`~marljoint.best_response.MmdConfig` of ``self_play = "mmd"``, or ``None``.

        Raises:
            RunError: an unknown ``self_play``, invalid ``mmd`` settings, or ``mmd`` without ``self_play = "mmd"``.
        """
        from marljoint.best_response.mmd import SELF_PLAY_KINDS, MmdConfig

        if self.self_play is not None and self.self_play not in SELF_PLAY_KINDS:
            raise RunError(f"self_play must be one of {SELF_PLAY_KINDS} (or unset), got {self.self_play!r}")
        if self.mmd is not None and not isinstance(self.mmd, (Mapping, MmdConfig)):
            raise RunError(f"mmd must be a table of MmdConfig settings, got {self.mmd!r}")
        if self.self_play != "mmd":
            if self.mmd is not None:
                raise RunError(f'mmd settings {table_of(self.mmd)} need self_play = "mmd" (--self-play mmd)')
            return None
        if isinstance(self.mmd, MmdConfig):
            return self.mmd
        table = dict(self.mmd or {})
        valid = table_keys()["mmd"]
        unknown = sorted(set(table) - set(valid))
        if unknown:
            raise RunError(f"unknown setting mmd.{unknown[0]}; valid keys: {', '.join(f'mmd.{k}' for k in valid)}")
        try:
            return MmdConfig.from_dict(table)
        except (TypeError, ValueError) as exc:
            raise RunError(f"mmd.{exc}") from None

    def offpolicy_config(self) -> OffPolicyConfig | None:
        """The :class:`~marljoint.offpolicy.OffPolicyConfig` an off-policy run trains with (:attr:`offpolicy`), or
        ``None`` for another algorithm."""
        return self.offpolicy

    def to_dict(self) -> dict[str, Any]:
        """The run fields followed by the trainer fields, flat (as in ``config.toml``)."""
        out = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in SPEC_FIELDS_NOT_SETTINGS
        }
        out["env_kwargs"] = dict(self.env_kwargs)
        out["wrappers"] = [w if isinstance(w, str) else dict(w) for w in self.wrappers]
        if self.self_play == "mmd":  # every MMD setting in effect, the defaults included
            out["mmd"] = self.mmd_config().to_dict()
        if self.offpolicy is not None:  # the settings that differ from their defaults
            from marljoint.run.offpolicy import offpolicy_table

            out["offpolicy"] = offpolicy_table(self.offpolicy, self.trainer)
        if self.algorithm in GAME_ALGORITHMS:  # every setting in effect, the defaults included
            out[self.algorithm] = settings_table(self.algorithm, getattr(self, self.algorithm))
        for name in OPTIONAL_SETTINGS:  # PPO runs as configured write neither
            if not out[name]:
                del out[name]
        out.update(self.trainer.to_dict())
        return out

    def tables(self) -> dict[str, dict[str, Any]]:
        """Each of :data:`TABLES` as ``config.toml`` holds it (``{}`` for a table the run does not have)."""
        written = self.to_dict()
        return {name: dict(written.get(name) or {}) for name in TABLES}

    @classmethod
    def from_dict(
        cls, values: Mapping[str, Any], base: RunSpec | None = None, given: Mapping[str, Any] | None = None
    ) -> RunSpec:
        """Applies flat ``values`` (run and trainer fields) on top of ``base`` (the defaults when ``None``).

        Args:
            values: the settings, flat (a table's keys with dots, or the table whole).
            base: the run they change.
            given: the settings of ``values`` the user gave on the command line (``--set``, an option, ``--sweep``,
                ``--param``): they count as given whatever their values (:attr:`given`); the others (a
                ``--config`` file's, a preset's) only where they differ from their defaults.

        Raises:
            RunError: for unknown keys (listing the valid ones) or invalid values (naming the field).
        """
        base = base or cls()
        tables = base.tables()
        values = with_dotted_keys(values, tables)
        values = with_algorithm_defaults(values)
        run_names = [f.name for f in dataclasses.fields(cls) if f.name not in SPEC_FIELDS_NOT_SETTINGS]
        trainer_names = [f.name for f in dataclasses.fields(JointTrainerConfig)]
        try:
            values = migrations.migrate_collection_keys(values, base.trainer.collection)
        except ValueError as exc:
            raise RunError(f"invalid trainer setting: {exc}") from None
        accepted = set(trainer_names)
        unknown = sorted(set(values) - set(run_names) - accepted)
        if unknown:
            raise RunError(
                f"unknown config key(s) {unknown}; valid keys: {run_names} and the JointTrainerConfig fields "
                f"{trainer_names}"
            )
        run_changes = {k: v for k, v in values.items() if k in run_names}
        if "env_kwargs" in run_changes:
            run_changes["env_kwargs"] = parse_env_kwargs(run_changes["env_kwargs"])
        for name in ("offpolicy", *GAME_ALGORITHMS):  # the base's table, applied to the changed settings
            if getattr(base, name) is not None:
                run_changes.setdefault(name, tables[name])
        trainer_changes = {k: v for k, v in values.items() if k in accepted}
        try:
            trainer = base.trainer.replace(**trainer_changes)
        except (TypeError, ValueError) as exc:
            raise RunError(f"invalid trainer setting: {exc}") from None
        named = base.given | given_names(given or {})
        return dataclasses.replace(base, trainer=trainer, given=named, **run_changes)


def parse_env_kwargs(value: Any) -> dict[str, Any]:
    """Env keyword arguments from a mapping or a JSON object string.

    Raises:
        RunError: for invalid JSON, JSON nested deeper than 64 levels, or JSON that is not an object.
    """
    if isinstance(value, str):
        try:
            value = _toml.loads_json(value, "env_kwargs")
        except _toml.NestingTooDeep as exc:
            raise RunError(str(exc)) from None
        except json.JSONDecodeError as exc:
            raise RunError(
                f'env kwargs are not valid JSON ({exc}): {value!r}; e.g. \'{{"scenario": "easy"}}\''
            ) from None
    if not isinstance(value, Mapping):
        raise RunError(f"env kwargs must be a JSON object of keyword arguments, got {value!r}")
    return dict(value)


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RunError(f"{name} must be a positive integer, got {value!r}")


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Reads a TOML config file (run and trainer fields at the top level).

    Raises:
        RunError: if the file is missing, not UTF-8 text, not valid TOML or nested deeper than 64 levels.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise RunError(
            f"config file {path} is not a TOML text file (byte {exc.object[exc.start]:#04x} at offset {exc.start} "
            "is not UTF-8 text); give a UTF-8 TOML file of settings"
        ) from None
    except OSError as exc:
        raise RunError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        return _toml.loads(text, f"config file {path}")
    except _toml.NestingTooDeep as exc:
        raise RunError(str(exc)) from None
    except ValueError as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise RunError(f"config file {path} is not valid TOML: {exc}") from None


def write_config(spec: RunSpec, path: str | os.PathLike[str], derived: Mapping[str, str] | None = None) -> None:
    """Writes ``spec`` as TOML (``env_kwargs`` as a JSON string when TOML cannot hold them), signed with the user's
    key in its first line (:func:`~marljoint.run.config_trust.sign_config`), so that reading it back trusts the
    function it may name as its env.

    Args:
        spec: the run's settings.
        path: the file.
        derived: ``{setting: reason}`` of the settings derived from the env (the trainer's
            :attr:`~marljoint.JointMultiAgentTrainer.derived`), written as a comment above each.
    """
    values = spec.to_dict()
    comments = {
        key: f"derived from {'this machine' if key in MACHINE_SETTINGS else 'the env'} ({reason}); set it to override"
        for key, reason in (derived or {}).items()
    }
    try:
        _toml.dumps({"env_kwargs": values["env_kwargs"]})
    except TypeError:
        values["env_kwargs"] = json.dumps(values["env_kwargs"])
    header = (
        "marljoint run configuration: the run fields, then every JointTrainerConfig field.\n"
        "Pass it to `marljoint train --config FILE`; options on the command line override it."
    )
    text = _toml.dumps({"__header__": None, **values}, comments={"__header__": header, **comments}).replace(
        "# __header__ is not set (None)\n", ""
    )
    text = sign_config(text)  # a first line that says this user wrote it (marljoint.run.config_trust)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_config(path: str | os.PathLike[str], trust_run: bool = False, typed_env: bool | None = None) -> dict[str, Any]:
    """Reads a config file (:func:`read_config_file`) and refuses it, before anything it names is imported, when it
    names a function to call but is not signed with this user's key (:mod:`marljoint.run.config_trust`).

    Args:
        path: a run's ``config.toml`` or a ``--config`` file.
        trust_run: the user vouches for the file (``--trust-run``): it may name any env.
        typed_env: for a ``--config`` file, whether ``--env`` was given on the command line (the file's env is then
            not used); ``None`` for a run directory's ``config.toml``.

    Raises:
        RunError: if the file is missing or not a TOML config.
        UntrustedConfigError: for a ``package.module:function`` env in a file that is not signed with this user's
            key, without ``trust_run``.
        marljoint.trust.TrustKeyError: if the signature must be checked and the user's key file cannot be trusted.
    """
    values = read_config_file(path)  # a file that is not a config is refused first, whoever wrote it
    env = function_env(values)
    if env is None or trust_run or typed_env:
        return values
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):  # gone or changed since: as good as unsigned
        text = ""
    signed = config_signed(text)
    if not signed:
        raise untrusted_config_error(path, env, signed, typed_env)
    return _toml.loads(text)  # the settings of the very text whose signature was checked


def load_run_spec(run_dir: str | os.PathLike[str], trust_run: bool = False) -> RunSpec:
    """The :class:`RunSpec` saved in a run directory's ``config.toml``.

    Args:
        run_dir: the run directory.
        trust_run: read a ``config.toml`` that is not signed with this user's key (a run received from someone
            else, or written before runs were signed) even if it names a function as its env
            (:mod:`marljoint.run.config_trust`).

    Raises:
        RunError: if the directory holds no run or the file is invalid.
        UntrustedConfigError: a ``config.toml`` that is not signed with this user's key names a function as its env
            (without ``trust_run``); nothing was imported.
    """
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise RunError(f"{run_dir} is not a marljoint run directory (no {CONFIG_FILE})")
    values = read_config(path, trust_run)
    return RunSpec.from_dict(migrations.migrate_saved_config(values), base=RunSpec(env_kwargs={}))


RESUMABLE_CHANGES = (
    "total_steps",
    "checkpoint_every",
    "keep_checkpoints",
    "collection",
    "torch_threads",
    "device",
    "acting_device",
    "recurrent_replay",
    "max_seconds",
)
MACHINE_SETTINGS = ("torch_threads", "acting_device", "recurrent_replay", "collection")
"""Settings resolved from the machine rather than the env (``torch_threads``, ``acting_device`` and
``recurrent_replay`` set to ``"auto"``, and the ``collection`` that self-play on a game chooses from the cores);
``config.toml`` holds the value used, so a resume, on any backend, computes with the same threads, devices and
replay, and gives the same bits."""


def resume_spec(
    run_dir: str | os.PathLike[str], overrides: Mapping[str, Any] | None = None, trust_run: bool = False
) -> RunSpec:
    """The saved :class:`RunSpec` of a run, with the changes a resume may make.

    Args:
        run_dir: the run directory.
        overrides: flat settings given for the resume; ``total_steps``, ``checkpoint_every``,
            ``keep_checkpoints``, ``collection`` (the backend: the results stay the same), ``torch_threads``,
            ``device``, ``acting_device`` and ``recurrent_replay`` (the learner's threads, devices and kernels: the
            training stays the same, its bits may not) may change, every other one must equal the saved value. A
            new ``device`` chooses the acting device and the recurrent replay again (``"auto"``) unless they are
            given too.
        trust_run: resume a run whose ``config.toml`` is not signed with this user's key (see
            :func:`load_run_spec`); the resumed run signs it anew with the user's key.

    Raises:
        RunError: if the directory holds no run, or an override contradicts the saved config.
        UntrustedConfigError: see :func:`load_run_spec`.
    """
    saved = load_run_spec(run_dir, trust_run)
    given = dict(overrides or {})
    tables = saved.tables()
    overrides = with_dotted_keys(given, tables)
    current = {**tables, **saved.to_dict()}
    for key, value in overrides.items():
        if key in RESUMABLE_CHANGES or key not in current:
            continue
        if key == "env_kwargs":
            value = parse_env_kwargs(value)
        if key in TABLES and isinstance(value, Mapping):  # as config.toml would hold it, to compare like with like
            value = RunSpec.from_dict({key: value}, base=saved).tables()[key]
        if _normal(value) != _normal(current[key]):
            raise RunError(
                f"cannot resume with {key} = {value!r}: the run in {run_dir} has {key} = {current[key]!r} "
                f"(a resume keeps the run's config; only {', '.join(RESUMABLE_CHANGES)} may change)"
            )
    changes = {k: v for k, v in overrides.items() if k in RESUMABLE_CHANGES}
    if "device" in changes and changes["device"] != current["device"]:
        changes.setdefault("acting_device", "auto")  # the saved ones were chosen for the old device
        changes.setdefault("recurrent_replay", "auto")
    return RunSpec.from_dict(changes, base=saved, given=given)


def _normal(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_normal(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _normal(v) for k, v in value.items()}
    return value


def iterations_for(spec: RunSpec) -> int:
    """Iterations needed to reach ``spec.total_steps`` env steps (a psro or nfsp run's:
    :func:`~marljoint.run.game_runs.game_iterations`)."""
    if spec.algorithm in GAME_ALGORITHMS:
        return game_iterations(spec)
    per_iteration = spec.trainer.rollout_steps * spec.trainer.num_envs
    return math.ceil(spec.total_steps / per_iteration)
