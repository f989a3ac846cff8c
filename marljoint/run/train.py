"""The main job behind ``marljoint train``: a training run that writes a run directory and can be resumed.

A run directory holds:

- ``config.toml``: the full resolved configuration (:class:`RunSpec`: the env, its keyword arguments, the budget,
  the redundancy penalty and every :class:`~marljoint.JointTrainerConfig` field), readable by ``--config``;
- ``metrics.csv``: one row per iteration (``docs/metrics.md`` lists every column);
- ``tensorboard/``: TensorBoard event files, when the ``tensorboard`` package is installed;
- ``checkpoints/ckpt_<iteration>.pt``: the newest checkpoints, each written atomically;
- ``learning_curve.png``: mean episode return against env steps, when matplotlib is installed.

A checkpoint holds the trainer's state and, when the env copies can be pickled, their state mid-episode, so a
resumed run is bit-identical (on CPU) to one that was never interrupted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from marljoint.checkpoint import (
    CheckpointError,
    atomic_torch_save,
    list_checkpoints,
    load_checkpoint,
    non_finite_weights,
    save_checkpoint,
)
from marljoint.env.base import EnvCopyError
from marljoint.ppo.config import JointTrainerConfig
from marljoint.ppo.divergence import DivergenceError
from marljoint.run import _toml, memory, migrations, plotting, runlog
from marljoint.run.episodes import play_episodes
from marljoint.run.errors import EnvFailure, RunError, RunInterrupted, unwritable_file_error
from marljoint.run.lock import LOCK_FILE, RunLock
from marljoint.run.memory import format_bytes
from marljoint.run.registry import EnvSpecError, ResolvedEnv, resolve_env, supersuit_wrappers, wrapped_factory
from marljoint.trust import SnapshotTrustError

__all__ = [
    "CHECKPOINT_DIR",
    "CONFIG_FILE",
    "CURVE_FILE",
    "DEFAULT_ENV",
    "DEFAULT_ENV_KWARGS",
    "EnvFailure",
    "RunError",
    "RunInterrupted",
    "RunResult",
    "RunSpec",
    "build_trainer",
    "check_memory",
    "check_minibatch",
    "load_run_spec",
    "make_env",
    "refuse_diverged",
    "resume_spec",
    "train_run",
]

CONFIG_FILE = "config.toml"
CHECKPOINT_DIR = "checkpoints"
CURVE_FILE = "learning_curve.png"
_RUN_FILES = (CONFIG_FILE, "metrics.csv", CURVE_FILE, "wandb_id")
BEST_CHECKPOINT = "best.pt"
"""The checkpoint of the best evaluation during training (``RunSpec.eval_every``), beside ``ckpt_*.pt``."""
_RUN_DIRS = (CHECKPOINT_DIR, "tensorboard", "wandb")

DEFAULT_ENV = "bucket_brigade_v0"
"""The env trained when ``--env`` is not given."""
DEFAULT_ENV_KWARGS: dict[str, Any] = {"scenario": "easy"}
"""Keyword arguments of :data:`DEFAULT_ENV` when neither ``--env`` nor ``--env-kwargs`` is given."""
DEFAULT_TOTAL_STEPS = 200_000
"""Env steps of a run when ``--total-steps`` is not given (about a minute on two CPU cores for the default env)."""
DEFAULT_TRAINER = {
    "num_envs": 16,
    "rollout_steps": 256,
    "n_epochs": 10,
    "num_minibatches": 16,
    "learning_rate": None,
}
"""Trainer settings of ``marljoint train`` that differ from :class:`~marljoint.JointTrainerConfig`'s defaults.

Rollouts of 16 copies × 256 steps, 10 epochs of 16 minibatches per rollout (of 256 rows at this rollout size; more
copies or steps make larger minibatches, not more of them, so the update's cost per env step falls as the rollout
grows), and the learning rate derived from the action spaces (1e-3 when every agent's actions are discrete, 3e-4
when some agent acts in a Box; :func:`~marljoint.ppo.derived.derive_settings`), chosen on the
generalization suite (``benchmarks/generalization.py``; the figures are in ``docs/learning.md``, "Defaults on
envs without a preset")."""


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
    wrappers: tuple[Any, ...] = ()
    """SuperSuit wrappers applied to every env copy, in order, before the adapter: names
    (``"color_reduction_v0"``) or tables with ``name`` and keyword arguments
    (``{name = "resize_v1", x_size = 84, y_size = 84}``); ``--wrap`` on the command line."""
    total_steps: int = DEFAULT_TOTAL_STEPS
    """Env steps to train for (one step of one env copy is one env step), rounded up to whole iterations."""
    redundancy: str | None = None
    """Kind of :class:`~marljoint.redundancy.RedundancyPenalty` to add as the aux loss (``xcorr``, ``cka``,
    ``hsic``), or ``None``."""
    redundancy_coef: float = 0.05
    """λ of the redundancy penalty."""
    checkpoint_every: int = 10
    """Iterations between checkpoints (the last iteration is always checkpointed)."""
    keep_checkpoints: int = 3
    """How many of the newest checkpoints to keep."""
    eval_every: int | None = None
    """Evaluate the greedy policies every K iterations (and after the last) on ``eval_episodes`` fresh episodes of
    an in-process copy of the env, always the same ones: logged as the ``eval/...`` columns, and the best evaluation
    so far kept as ``checkpoints/best.pt``. ``None``: no evaluation during training. Training is the same with or
    without it."""
    eval_episodes: int = 10
    """Episodes of each evaluation during training."""
    wandb_project: str | None = None
    """Also log every metrics row to this Weights & Biases project (``pip install "marljoint[wandb]"``; set
    ``WANDB_MODE=offline`` without network). ``None``: CSV and TensorBoard only."""
    self_play: str | None = None
    """``"mmd"``: magnetic mirror descent self-play of a two-player zero-sum game (each seat's PPO loss plus
    α·KL(π ‖ magnet), :mod:`marljoint.best_response.mmd`); ``"ppo"`` or ``None``: plain PPO of every agent."""
    mmd: Mapping[str, Any] | None = None
    """:class:`~marljoint.best_response.MmdConfig` settings (a TOML table) with ``self_play = "mmd"``; ``None``:
    its defaults."""
    trainer: JointTrainerConfig = field(default_factory=lambda: JointTrainerConfig(**DEFAULT_TRAINER))
    """The trainer's hyperparameters."""

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
        if self.wandb_project is not None and (not isinstance(self.wandb_project, str) or not self.wandb_project):
            raise RunError(f"wandb_project must be a project name, got {self.wandb_project!r}")
        self.mmd_config()
        if self.redundancy is not None:
            self.penalty()
        elif not isinstance(self.redundancy_coef, (int, float)) or isinstance(self.redundancy_coef, bool):
            raise RunError(f"redundancy_coef must be a number, got {self.redundancy_coef!r}")

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
        if self.self_play != "mmd":
            if self.mmd is not None:
                raise RunError(f'mmd settings {dict(self.mmd)} need self_play = "mmd" (--self-play mmd)')
            return None
        if self.mmd is not None and not isinstance(self.mmd, Mapping):
            raise RunError(f"mmd must be a table of MmdConfig settings, got {self.mmd!r}")
        try:
            return MmdConfig.from_dict(self.mmd or {})
        except (TypeError, ValueError) as exc:
            raise RunError(f"mmd: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """The run fields followed by the trainer fields, flat (as in ``config.toml``)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "trainer"}
        out["env_kwargs"] = dict(self.env_kwargs)
        out["wrappers"] = [w if isinstance(w, str) else dict(w) for w in self.wrappers]
        if self.self_play == "mmd":  # every MMD setting in effect, the defaults included
            out["mmd"] = self.mmd_config().to_dict()
        out.update(self.trainer.to_dict())
        return out

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], base: RunSpec | None = None) -> RunSpec:
        """Applies flat ``values`` (run and trainer fields) on top of ``base`` (the defaults when ``None``).

        Raises:
            RunError: for unknown keys (listing the valid ones) or invalid values (naming the field).
        """
        base = base or cls()
        run_names = [f.name for f in dataclasses.fields(cls) if f.name != "trainer"]
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
        trainer_changes = {k: v for k, v in values.items() if k in accepted}
        try:
            trainer = base.trainer.replace(**trainer_changes)
        except (TypeError, ValueError) as exc:
            raise RunError(f"invalid trainer setting: {exc}") from None
        return dataclasses.replace(base, trainer=trainer, **run_changes)


def parse_env_kwargs(value: Any) -> dict[str, Any]:
    """Env keyword arguments from a mapping or a JSON object string.

    Raises:
        RunError: for invalid JSON or JSON that is not an object.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
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
        RunError: if the file is missing, not UTF-8 text or not valid TOML.
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
        return _toml.loads(text)
    except ValueError as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise RunError(f"config file {path} is not valid TOML: {exc}") from None


def write_config(spec: RunSpec, path: str | os.PathLike[str], derived: Mapping[str, str] | None = None) -> None:
    """Writes ``spec`` as TOML (``env_kwargs`` as a JSON string when TOML cannot hold them).

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
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def load_run_spec(run_dir: str | os.PathLike[str]) -> RunSpec:
    """The :class:`RunSpec` saved in a run directory's ``config.toml``.

    Raises:
        RunError: if the directory holds no run or the file is invalid.
    """
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise RunError(f"{run_dir} is not a marljoint run directory (no {CONFIG_FILE})")
    return RunSpec.from_dict(migrations.migrate_saved_config(read_config_file(path)), base=RunSpec(env_kwargs={}))


_RESUMABLE_CHANGES = (
    "total_steps",
    "checkpoint_every",
    "keep_checkpoints",
    "collection",
    "torch_threads",
    "device",
    "acting_device",
    "recurrent_replay",
)
MACHINE_SETTINGS = ("torch_threads", "acting_device", "recurrent_replay")
"""Settings resolved from the machine rather than the env (``torch_threads``, ``acting_device`` and
``recurrent_replay`` set to ``"auto"``); ``config.toml`` holds the value used, so a resume, on any backend, computes
with the same threads, devices and replay, and gives the same bits."""


def resume_spec(run_dir: str | os.PathLike[str], overrides: Mapping[str, Any] | None = None) -> RunSpec:
    """The saved :class:`RunSpec` of a run, with the changes a resume may make.

    Args:
        run_dir: the run directory.
        overrides: flat settings given for the resume; ``total_steps``, ``checkpoint_every``,
            ``keep_checkpoints``, ``collection`` (the backend: the results stay the same), ``torch_threads``,
            ``device``, ``acting_device`` and ``recurrent_replay`` (the learner's threads, devices and kernels: the
            training stays the same, its bits may not) may change, every other one must equal the saved value. A
            new ``device`` chooses the acting device and the recurrent replay again (``"auto"``) unless they are
            given too.

    Raises:
        RunError: if the directory holds no run, or an override contradicts the saved config.
    """
    saved = load_run_spec(run_dir)
    overrides = dict(overrides or {})
    current = saved.to_dict()
    for key, value in overrides.items():
        if key in _RESUMABLE_CHANGES or key not in current:
            continue
        if key == "env_kwargs":
            value = parse_env_kwargs(value)
        if _normal(value) != _normal(current[key]):
            raise RunError(
                f"cannot resume with {key} = {value!r}: the run in {run_dir} has {key} = {current[key]!r} "
                f"(a resume keeps the run's config; only {', '.join(_RESUMABLE_CHANGES)} may change)"
            )
    changes = {k: v for k, v in overrides.items() if k in _RESUMABLE_CHANGES}
    if "device" in changes and changes["device"] != current["device"]:
        changes.setdefault("acting_device", "auto")  # the saved ones were chosen for the old device
        changes.setdefault("recurrent_replay", "auto")
    return RunSpec.from_dict(changes, base=saved)


def _normal(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_normal(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _normal(v) for k, v in value.items()}
    return value


def _env_factory(spec: RunSpec, **extra_kwargs: Any) -> Any:
    """The factory of one copy of the run's env, wrappers applied."""
    try:
        resolved: ResolvedEnv = resolve_env(spec.env, dict(spec.env_kwargs))
    except EnvSpecError as exc:
        raise RunError(str(exc)) from None
    try:
        return wrapped_factory(resolved.env_fn(**extra_kwargs), supersuit_wrappers(spec.wrappers))
    except Exception as exc:  # env constructors raise anything for bad keyword arguments
        raise RunError(f"env {spec.env!r} with kwargs {dict(spec.env_kwargs)} cannot be built: {exc}") from None


def make_env(spec: RunSpec, num_envs: int | None = None, seed: int | None = None, **extra_kwargs: Any) -> Any:
    """Builds the JointEnv of a run: the env its collection backend collects from
    (:meth:`~marljoint.collect.CollectionConfig.make_env`: worker processes for ``"subprocess"``).

    Args:
        spec: the run.
        num_envs: copies (``spec.trainer.num_envs`` when ``None``).
        seed: seed of the first reset (``spec.trainer.seed`` when ``None``).
        **extra_kwargs: extra env keyword arguments (e.g. ``render_mode``).

    Raises:
        RunError: if the env cannot be resolved or built (naming the env and the reason).
    """
    factory = _env_factory(spec, **extra_kwargs)
    try:
        return spec.trainer.collection.make_env(
            factory,
            num_envs=spec.trainer.num_envs if num_envs is None else num_envs,
            seed=spec.trainer.seed if seed is None else seed,
        )
    except Exception as exc:  # env constructors raise anything for bad keyword arguments
        raise RunError(f"env {spec.env!r} with kwargs {dict(spec.env_kwargs)} cannot be built: {exc}") from None


def check_minibatch(config: JointTrainerConfig) -> None:
    """Refuses a ``minibatch_size`` larger than the rows of an update (a minibatch can only hold them all).

    Raises:
        RunError: naming both numbers and the fix.
    """
    rows = config.batch_rows
    if config.num_minibatches is None and config.minibatch_size > rows:
        raise RunError(
            f"minibatch_size = {config.minibatch_size} is more than the {rows} rows of an update (rollout_steps "
            f"{config.rollout_steps} x num_envs {config.num_envs}); set minibatch_size to at most {rows}, raise "
            "rollout_steps or num_envs, or set num_minibatches instead"
        )


LONG_BUILD_SECONDS = 30.0
"""Building the env copies is announced when one copy's build time says it will take longer than this."""


def check_memory(spec: RunSpec, stream: TextIO | None = None) -> Any:
    """Refuses a run whose rollout storage, update and env copies would not fit in the memory available, before
    the env copies are built: one copy is built, measured and closed (:mod:`marljoint.run.memory`). A build of the
    copies expected to take longer than :data:`LONG_BUILD_SECONDS` is announced on ``stream``.

    Returns:
        The :class:`~marljoint.run.memory.MemoryEstimate`.

    Raises:
        RunError: with the estimate, the memory available and the fix; or if the env cannot be built.
    """
    from marljoint.collect.config import CollectionConfig

    local = dataclasses.replace(spec, trainer=spec.trainer.replace(collection=CollectionConfig()))
    probe = make_env(local, num_envs=1)
    try:
        joint_spec = probe.spec
    finally:
        probe.close()
    try:
        per_copy, seconds = memory.measure_env_copy(_env_factory(spec), seed=spec.trainer.seed)
    except Exception:  # the copy above was built and reset by the adapter: the estimate goes without its size
        per_copy, seconds = 0, 0.0
    estimate = memory.estimate_memory(joint_spec, spec.trainer, per_copy)
    _refuse_oversized(estimate, spec.trainer, joint_spec.num_agents)
    copies = spec.trainer.num_envs
    if stream is not None and seconds * copies > LONG_BUILD_SECONDS:
        expected = f"about {seconds * copies:.0f} s ({seconds * 1e3:.1f} ms each)"
        _say(stream, True, f"building {copies:,} env copies: {expected}")
    return estimate


def _refuse_oversized(estimate: Any, config: JointTrainerConfig, agents: int) -> None:
    copies = config.num_envs
    parts = (
        f"the rollout storage of {config.rollout_steps} steps x {copies:,} env copies x {agents} agents needs "
        f"{format_bytes(estimate.rollout)}, the update {format_bytes(estimate.update)}, the {copies:,} env copies "
        f"{format_bytes(estimate.env_copies)} ({format_bytes(estimate.per_copy)} each)"
    )
    fix = "lower rollout_steps or num_envs (or shrink the observations, e.g. with --wrap resize_v1:x_size=...)"
    for needed, free, where in (
        (estimate.host, memory.available_memory(), "memory"),
        (estimate.device, memory.available_device_memory(estimate.on_device), f"free memory on {estimate.on_device}"),
    ):
        if free is not None and needed > free:
            raise RunError(
                f"{parts}: about {format_bytes(needed)} of {where}, but only {format_bytes(free)} is available; {fix}"
            )


def build_trainer(spec: RunSpec, env: Any) -> Any:
    """The :class:`~marljoint.JointMultiAgentTrainer` of a run, on ``env``."""
    from marljoint.ppo.trainer import JointMultiAgentTrainer

    try:
        trainer = JointMultiAgentTrainer.from_env(env, spec.trainer)
        if spec.self_play == "mmd":
            from marljoint.best_response.mmd import attach_mmd

            attach_mmd(trainer, spec.mmd_config())
        return trainer
    except ValueError as exc:
        raise RunError(f"cannot build the trainer for env {spec.env!r}: {exc}") from None


def holds_run(run_dir: str | os.PathLike[str]) -> bool:
    """Whether ``run_dir`` holds (part of) a marljoint run."""
    run_dir = Path(run_dir)
    return any((run_dir / name).exists() for name in _RUN_FILES + _RUN_DIRS)


def clear_run(run_dir: str | os.PathLike[str]) -> None:
    """Deletes a run's files (only those a run writes) from ``run_dir``."""
    run_dir = Path(run_dir)
    for name in _RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    for name in _RUN_DIRS:
        shutil.rmtree(run_dir / name, ignore_errors=True)


def iterations_for(spec: RunSpec) -> int:
    """Iterations needed to reach ``spec.total_steps`` env steps."""
    per_iteration = spec.trainer.rollout_steps * spec.trainer.num_envs
    return math.ceil(spec.total_steps / per_iteration)


@dataclass
class RunResult:
    """What :func:`train_run` did.

    Attributes:
        run_dir: the run directory.
        iterations: iterations completed in total (including those before a resume).
        env_steps: env steps completed in total.
        seconds: wall time of this call.
        final_return: mean episode return over the last iterations that finished episodes (``nan`` if none did).
        env_state_saved: whether the checkpoints hold the env copies' state (False: resume is not bit-identical).
    """

    run_dir: Path
    iterations: int
    env_steps: int
    seconds: float
    final_return: float
    env_state_saved: bool


def _check_run_dir(run_dir: Path, resume: bool, force: bool) -> dict[str, Any] | None:
    """Checks the run directory (without changing it); returns the checkpoint to resume from, if any.

    Raises:
        RunError: nothing to resume, a path that is not a directory, or a run already there without ``force``.
    """
    if resume:
        if not (run_dir / CONFIG_FILE).is_file():
            raise RunError(f"--resume: {run_dir} holds no run to resume (no {CONFIG_FILE})")
        checkpoint = _latest_checkpoint(run_dir)
        if checkpoint is None:
            raise RunError(
                f"--resume: {run_dir} holds no checkpoint ({CHECKPOINT_DIR}/ is missing or empty), so there is "
                "nothing to continue from; start the run again with --force (its metrics are replaced)"
            )
        return checkpoint
    if run_dir.exists() and not run_dir.is_dir():
        raise RunError(f"output path {run_dir} exists and is not a directory")
    if holds_run(run_dir) and not force:
        raise RunError(
            f"{run_dir} already holds a run; pass --resume to continue it, --force to overwrite it, "
            "or choose another --out"
        )
    return None


class _StopRequests:
    """SIGINT and SIGTERM ask the training loop to stop after the iteration in progress, with a checkpoint.

    A second Ctrl-C stops at once (``KeyboardInterrupt``). Outside the main thread nothing is installed.
    """

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopRequests:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._request)
        return self

    def _request(self, signum: int, frame: Any) -> None:
        import signal

        if self.signal_name is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name

    def __exit__(self, *exc: Any) -> None:
        import signal

        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def train_run(
    spec: RunSpec,
    run_dir: str | os.PathLike[str],
    resume: bool = False,
    force: bool = False,
    progress: bool = True,
    stream: TextIO | None = None,
    stop_after: int | None = None,
    on_iteration: Callable[[dict[str, Any]], None] | None = None,
    trust_snapshot: bool = False,
) -> RunResult:
    """Trains according to ``spec`` and writes the run directory.

    The run holds :class:`~marljoint.run.lock.RunLock` on ``run_dir`` from start to end, taken before anything
    there is read or written: a second writer (another run, a ``force``, a ``resume``) is refused with
    :class:`~marljoint.run.lock.RunLocked`. Nothing else is written, and with ``force`` nothing is deleted, until the
    env and the trainer are built and the first iteration has run: a run that fails to start leaves the directory
    as it was. SIGINT (Ctrl-C) and SIGTERM (a cluster's pre-emption) stop the run after the iteration in progress,
    with a checkpoint, and raise :class:`RunInterrupted` saying how to resume; a second Ctrl-C stops at once. An
    exception from the env stops the run with :class:`EnvFailure`, the last completed iteration checkpointed.

    Args:
        spec: the run; when resuming, the run's own (see :func:`resume_spec`).
        run_dir: the run directory (created if needed).
        resume: continue the run in ``run_dir`` from its newest checkpoint.
        force: overwrite a run already in ``run_dir``.
        progress: show the progress display.
        stream: where messages and progress go (standard error by default).
        stop_after: stop after this many iterations in total, as if interrupted (for tests and experiments).
        on_iteration: called with each iteration's metrics row.
        trust_snapshot: when resuming, restore an env snapshot signed by someone else (a run you received and
            trust; :mod:`marljoint.trust`). Without it, such a snapshot is refused before it is unpickled.

    Returns:
        A :class:`RunResult`.

    Raises:
        RunError: for an unusable run directory, a corrupted checkpoint, a checkpoint whose env snapshot is not
            signed with this user's key (without ``trust_snapshot``), or an env that cannot be built.
        RunLocked: another process (or thread) is writing ``run_dir``.
        RunInterrupted: after SIGINT or SIGTERM.
        EnvFailure: the env raised in ``reset()`` or ``step()``.
        DivergenceError: a loss, gradient or parameter became non-finite; the diverged state is not saved and the
            newest checkpoint, the last good one, is kept (the message names it).
    """
    with RunLock(run_dir):
        return _train_locked(
            spec, Path(run_dir), resume, force, progress, stream, stop_after, on_iteration, trust_snapshot
        )


def _train_locked(
    spec: RunSpec,
    run_dir: Path,
    resume: bool,
    force: bool,
    progress: bool,
    stream: TextIO | None,
    stop_after: int | None,
    on_iteration: Callable[[dict[str, Any]], None] | None,
    trust_snapshot: bool,
) -> RunResult:
    """:func:`train_run` once the run directory is locked."""
    stream = stream if stream is not None else sys.stderr
    started = time.perf_counter()
    checkpoint = _check_run_dir(run_dir, resume, force)
    if not resume:  # a resumed run already trained with its sizes
        check_minibatch(spec.trainer)
    check_memory(spec, stream if progress else None)
    env = make_env(spec)
    try:
        trainer = build_trainer(spec, env)
        loop = _Loop(spec, run_dir, trainer, stream, progress, resume, force)
        if checkpoint is not None:
            restored = _restore(trainer, checkpoint, stream, run_dir, trust_snapshot)
            loop.clock_offset, loop.agent_steps, loop.env_state_saved = restored
            loop.best_eval = float(checkpoint["run"].get("best_eval_return", -math.inf))
        with _StopRequests() as stops:
            try:
                loop.run(stop_after, on_iteration, stops)
            except RunError as exc:
                if not isinstance(exc, RunInterrupted):
                    loop.discard_if_empty()
                raise
    finally:
        env.close()
    with _writing(run_dir / CURVE_FILE):
        _write_curve(run_dir, stream, progress)
    _say(stream, progress, f"done: {trainer.iteration} iterations, {trainer.env_steps:,} env steps, run in {run_dir}")
    final = sum(loop.recent) / len(loop.recent) if loop.recent else math.nan
    seconds = time.perf_counter() - started
    return RunResult(run_dir, trainer.iteration, trainer.env_steps, seconds, final, loop.env_state_saved)


class _Loop:
    """The iterations of :func:`train_run`: log, checkpoint, progress; the run directory is opened after the
    first iteration."""

    def __init__(
        self, spec: RunSpec, run_dir: Path, trainer: Any, stream: TextIO, progress: bool, resume: bool, force: bool
    ) -> None:
        self.spec, self.run_dir, self.trainer = spec, run_dir, trainer
        self.stream, self.progress, self.resume, self.force = stream, progress, resume, force
        self.aux_fn = spec.penalty()
        self.clock_offset, self.agent_steps, self.env_state_saved = 0.0, 0, True
        self.recent: list[float] = []
        self.log: Any = None
        self.logged = 0
        """The last iteration whose metrics row is written."""
        self.best_eval = -math.inf
        self._eval_env: Any = None
        self._new_best = False
        self.created = False
        if spec.wandb_project is not None:  # before anything is written
            try:
                import wandb  # noqa: F401
            except ImportError:
                raise RunError('--wandb needs Weights & Biases: pip install "marljoint[wandb]"') from None

    def _open(self) -> None:
        """Replaces an old run (``force``), creates the directory and writes the config: the run has started."""
        if self.force and not self.resume:
            clear_run(self.run_dir)
        # The run's lock file may be there already: the directory counts as new while it holds nothing else.
        self.created = not self.run_dir.exists() or {p.name for p in self.run_dir.iterdir()} <= {LOCK_FILE}
        try:
            with _writing(self.run_dir):
                self.run_dir.mkdir(parents=True, exist_ok=True)
            # The settings the trainer derived from the env are written as resolved, with their reasons.
            self.spec = dataclasses.replace(self.spec, trainer=self.trainer.config)
            with _writing(self.run_dir / CONFIG_FILE):
                write_config(self.spec, self.run_dir / CONFIG_FILE, self.trainer.derived)
            self._open_log()
        except BaseException:
            self.discard_if_empty()
            raise

    def discard_if_empty(self) -> None:
        """Empties the run directory this run created when it holds no checkpoint yet: a run that could not start
        (a full disk, say) leaves nothing behind (the lock, released last, removes the directory itself)."""
        if self.created and not list_checkpoints(self.run_dir / CHECKPOINT_DIR):
            for path in self.run_dir.iterdir():
                if path.name == LOCK_FILE:
                    continue
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)

    def _open_log(self) -> None:
        wandb = None
        if self.spec.wandb_project is not None:
            try:
                wandb = runlog.WandbLog(self.spec.wandb_project, self.run_dir, self.spec.to_dict())
            except ImportError as exc:
                raise RunError(str(exc)) from None
        keep_until = self.trainer.iteration - 1 if self.resume else None
        with _writing(self.run_dir / runlog.METRICS_FILE):
            self.log = runlog.MetricsLog(self.run_dir, keep_until=keep_until, wandb=wandb)

    def run(self, stop_after: int | None, on_iteration: Any, stops: _StopRequests) -> None:
        trainer, spec = self.trainer, self.spec
        total = iterations_for(spec)
        display = runlog.Progress(
            total * spec.trainer.rollout_steps * spec.trainer.num_envs,
            start_steps=trainer.env_steps,
            stream=self.stream,
            enabled=self.progress,
        )
        _say(self.stream, self.progress, _banner(spec, self.run_dir, trainer, total, self.resume))
        if trainer.iteration >= total:
            _say(self.stream, self.progress, f"the run already has {trainer.iteration} iterations; raise --total-steps")
        clock = time.perf_counter()
        last_saved = self.logged = trainer.iteration
        try:
            while trainer.iteration < total and (stop_after is None or trainer.iteration < stop_after):
                row = self._iteration(total, clock)
                if on_iteration is not None:
                    on_iteration(row)
                last = trainer.iteration >= total
                if last or trainer.iteration % spec.checkpoint_every == 0 or stops.signal_name is not None:
                    self._save(clock)
                    last_saved = trainer.iteration
                if self._new_best:
                    self._save(clock, best=True)
                    self._new_best = False
                display.update(trainer.env_steps, row["sps"], row["episode_return_mean"], force=last)
                if stops.signal_name is not None and not last:
                    raise RunInterrupted(
                        f"stopped by {stops.signal_name} after iteration {trainer.iteration}, which is checkpointed. "
                        f"Continue with: marljoint train --out {self.run_dir} --resume",
                        143 if stops.signal_name == "SIGTERM" else 130,
                    )
        except EnvCopyError as exc:
            raise self._env_failure(exc, clock, last_saved) from exc
        except DivergenceError as exc:
            raise exc.with_note(self._kept(last_saved)) from None
        except KeyboardInterrupt:
            raise RunInterrupted(
                f"interrupted at iteration {trainer.iteration}; the newest checkpoint is from iteration "
                f"{last_saved}. Continue with: marljoint train --out {self.run_dir} --resume"
            ) from None
        finally:
            display.close()
            if self.log is not None:
                self.log.close()
            if self._eval_env is not None:
                self._eval_env.close()
            trainer.close()

    def _kept(self, last_saved: int) -> str:
        """Which checkpoint holds the last good weights after a divergence (the diverged state is never saved)."""
        if self.log is None:
            return "nothing was written"
        paths = list_checkpoints(self.run_dir / CHECKPOINT_DIR)
        if not paths:
            return f"no checkpoint was written, {self.run_dir} keeps the metrics of the iterations before"
        return f"{paths[-1]} (iteration {last_saved}) holds the last good weights and was kept"

    def _iteration(self, total: int, clock: float) -> dict[str, Any]:
        trainer = self.trainer
        rollout, stats, seconds = trainer.iterate(total, aux_fn=self.aux_fn)
        metrics = trainer.iteration_metrics(rollout, stats, seconds)
        if trainer.learner.regularizer is not None:  # the self-play term's schedule and size (mmd/alpha, mmd/kl)
            metrics.update(trainer.learner.regularizer.metrics())
        every = self.spec.eval_every
        if every is not None and (trainer.iteration % every == 0 or trainer.iteration >= total):
            metrics.update(self._evaluate())
        if self.log is None:
            self._open()
        self.agent_steps += metrics["agent_steps"]
        row = _row(metrics, self.clock_offset + time.perf_counter() - clock, self.agent_steps)
        with _writing(self.log.path):
            self.log.log(row)
        self.logged = trainer.iteration
        if math.isfinite(row["episode_return_mean"]):
            self.recent = (self.recent + [row["episode_return_mean"]])[-10:]
        return row

    def _evaluate(self) -> dict[str, float]:
        """Greedy returns on the same fresh episodes every time; the trainer's generator is left as it was."""
        from marljoint.collect.config import CollectionConfig

        trainer, spec = self.trainer, self.spec
        seed = (spec.trainer.seed + 1_000_003) % 2**63
        if self._eval_env is None:
            copies = min(spec.eval_episodes, 8)
            local = dataclasses.replace(spec, trainer=spec.trainer.replace(collection=CollectionConfig()))
            self._eval_env = make_env(local, num_envs=copies, seed=seed)
        generator = trainer.generator.get_state()
        try:
            returns, _ = play_episodes(trainer, self._eval_env, spec.eval_episodes, deterministic=True, seed=seed)
        finally:
            trainer.generator.set_state(generator)
        mean = float(returns.mean())
        if mean > self.best_eval:
            self.best_eval, self._new_best = mean, True
        out = {"eval/episode_return_mean": mean, "eval/best_episode_return_mean": self.best_eval}
        for agent, value in zip(trainer.spec.agents, returns.mean(axis=0)):
            out[f"eval/episode_return/{agent}"] = float(value)
        return out

    def _save(self, clock: float, best: bool = False, with_env: bool = True) -> None:
        seconds = self.clock_offset + time.perf_counter() - clock
        run = {"best_eval_return": self.best_eval}
        with _writing(self.run_dir / CHECKPOINT_DIR):
            self.env_state_saved = _save(
                self.trainer,
                self.run_dir,
                self.spec,
                seconds,
                self.agent_steps,
                self.env_state_saved and with_env,
                self.stream,
                run,
                best,
            )

    def _env_failure(self, exc: EnvCopyError, clock: float, last_saved: int) -> EnvFailure:
        """Checkpoints the last completed iteration, if no checkpoint holds it, and says what the user can do.

        The env raised while collecting, before the update, so the trainer still holds the completed iteration
        exactly; the env copies, left mid-call, are not saved, and the resume starts them on fresh episodes.
        """
        completed = self.logged
        if self.log is not None and completed == self.trainer.iteration and completed > last_saved:
            self._save(clock, with_env=False)
            last_saved = completed
        failed = f"env {self.spec.env!r} failed in iteration {completed + 1}: {exc}"
        if self.log is None and not self.resume:
            return EnvFailure(f"{failed}; nothing was written to {self.run_dir}", 0)
        return EnvFailure(
            f"{failed}; the newest checkpoint is from iteration {last_saved}. Once the env is fixed, continue with: "
            f"marljoint train --out {self.run_dir} --resume",
            last_saved,
        )


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """A full disk (or quota, or a read-only or forbidden directory) while writing ``path``, one of the run's files,
    becomes one :class:`RunError` naming the file, the reason and the fix; other errors pass unchanged."""
    try:
        yield
    except OSError as exc:
        error = unwritable_file_error(exc, path)
        if error is None:
            raise
        raise error from None


_FIRST_COLUMNS = ("iteration", "wall_time", "env_steps", "agent_steps", "sps", "episodes", "episode_return_mean")


def _row(metrics: Mapping[str, Any], wall_time: float, agent_steps: int) -> dict[str, Any]:
    """A metrics.csv row: the trainer's metrics with run-wide counters and a fixed column order."""
    values = dict(metrics)
    values["wall_time"] = wall_time
    values["agent_steps"] = agent_steps
    head = {k: values[k] for k in _FIRST_COLUMNS}
    return {**head, **{k: v for k, v in values.items() if k not in head}}


def _banner(spec: RunSpec, run_dir: Path, trainer: Any, iterations: int, resume: bool) -> str:
    agents = ", ".join(trainer.spec.agents)
    verb = f"resuming at iteration {trainer.iteration} of" if resume else "training"
    kwargs = f" {json.dumps(dict(spec.env_kwargs))}" if spec.env_kwargs else ""
    hint = idle_cores_hint(trainer.config)
    return (
        f"{verb} {spec.env}{kwargs} ({agents}) for {iterations} iterations "
        f"({iterations * spec.trainer.rollout_steps * spec.trainer.num_envs:,} env steps) -> {run_dir}"
    ) + (f"\n{hint}" if hint else "")


def idle_cores_hint(config: JointTrainerConfig, cores: int | None = None) -> str | None:
    """One line on how to use the cores a run leaves idle, or ``None`` unless it leaves most of them idle.

    A run uses one core per env worker plus the learner's threads, or one core when it collects in-process.

    Args:
        config: the trainer's resolved config (``torch_threads`` a number).
        cores: the cores this process may use (default :func:`marljoint.threads.usable_cores`).
    """
    from marljoint.threads import auto_workers, usable_cores

    cores = usable_cores() if cores is None else cores
    collection = config.collection
    threads = config.torch_threads if isinstance(config.torch_threads, int) else 1
    used = collection.workers + threads if collection.multiprocess else 1
    if 2 * used >= cores:
        return None
    if not collection.multiprocess:
        workers = auto_workers(config.num_envs, cores)
        more = f"--env-workers auto steps the {config.num_envs} env copies in {workers} worker processes"
        if workers < cores - 1:
            more += f" (at most one per copy: --num-envs {cores - 1} would use every core)"
        return f"this run collects on 1 of the {cores} cores this process may use; {more}"
    return (
        f"this run uses {used} of the {cores} cores this process may use ({collection.workers} env workers, "
        f"{threads} learner thread{'s' if threads != 1 else ''}); --env-workers auto uses them all"
    )


def _say(stream: TextIO, enabled: bool, text: str) -> None:
    if enabled:
        stream.write(text + "\n")
        stream.flush()


def refuse_diverged(trainer_state: Any, path: Path) -> None:
    """Refuses a checkpoint whose networks or value normaliser hold a NaN or an infinity, naming the file and the
    parameter (a policy with such weights acts nonsense, and an evaluation would play until its step limit).

    Raises:
        RunError: naming ``path``, the parameter and what to use instead.
    """
    weights = (
        {k: trainer_state.get(k) for k in ("policies", "value_normalizer")} if isinstance(trainer_state, dict) else {}
    )
    found = non_finite_weights(weights)
    if found is not None:
        name, value = found
        raise RunError(
            f"checkpoint {path} holds non-finite weights ({name} is {value}): the run diverged before it was saved; "
            "use an earlier checkpoint (--checkpoint FILE) or train again with a lower learning_rate"
        )


def _latest_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    paths = list_checkpoints(run_dir / CHECKPOINT_DIR)
    if not paths:
        return None
    try:
        checkpoint = load_checkpoint(paths[-1])
    except CheckpointError as exc:
        hint = f"; delete it to resume from {paths[-2].name}" if len(paths) > 1 else ""
        raise RunError(f"{exc}{hint}") from None
    refuse_diverged(checkpoint.get("trainer"), paths[-1])
    return migrations.migrate_checkpoint(checkpoint)


def _save(
    trainer: Any,
    run_dir: Path,
    spec: RunSpec,
    wall_time: float,
    agent_steps: int,
    with_env: bool,
    stream: TextIO,
    extra: Mapping[str, Any] | None = None,
    best: bool = False,
) -> bool:
    env_state = None
    if with_env:
        try:
            env_state = trainer.env_state()
        except TypeError as exc:
            stream.write(
                f"note: the env state cannot be saved ({exc}); checkpoints hold the trainer only, so a resumed run "
                "restarts the env copies from fresh episodes and is not bit-identical to an uninterrupted one\n"
            )
            with_env = False
    state = {
        "trainer": trainer.state_dict(),
        "env": env_state,
        "env_state_saved": with_env,
        "run": {"wall_time": wall_time, "agent_steps": agent_steps, "spec": spec.to_dict(), **dict(extra or {})},
    }
    if best:  # outside the rotation of ckpt_*.pt
        atomic_torch_save(state, run_dir / CHECKPOINT_DIR / BEST_CHECKPOINT)
    else:
        save_checkpoint(run_dir / CHECKPOINT_DIR, trainer.iteration, state, keep=spec.keep_checkpoints)
    return with_env


def _restore(
    trainer: Any, checkpoint: Mapping[str, Any], stream: TextIO, run_dir: Path, trust_snapshot: bool
) -> tuple[float, int, bool]:
    try:
        trainer.load_state_dict(checkpoint["trainer"])
        if checkpoint.get("env_state_saved", False):
            trainer.load_env_state(checkpoint["env"], trust_snapshot=trust_snapshot)
        else:
            stream.write(
                "note: the checkpoint holds no env state, so the env copies restart from fresh episodes and this "
                "resume is not bit-identical to an uninterrupted run\n"
            )
            trainer.load_env_state(None)
        run = checkpoint["run"]
        return float(run["wall_time"]), int(run["agent_steps"]), bool(checkpoint.get("env_state_saved", False))
    except SnapshotTrustError as exc:
        newest = list_checkpoints(run_dir / CHECKPOINT_DIR)[-1]
        raise RunError(f"refused to resume from {newest}: {exc}") from None
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise RunError(f"the newest checkpoint does not fit this run ({type(exc).__name__}: {exc})") from None


def _write_curve(run_dir: Path, stream: TextIO, verbose: bool) -> None:
    try:
        plotting.plot_learning_curve(run_dir, run_dir / CURVE_FILE)
    except plotting.PlottingUnavailable as exc:
        _say(stream, verbose, f"note: {exc}; {CURVE_FILE} not written")
