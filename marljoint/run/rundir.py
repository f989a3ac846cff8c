"""The run directory: its files, the checks before a run writes there, its checkpoints (saved, found, restored)
and where a run goes when no directory is named.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Mapping
from datetime import datetime
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
from marljoint.run import migrations
from marljoint.run.errors import RunError, unwritable_file_error
from marljoint.trust import SnapshotTrustError

__all__ = [
    "BEST_CHECKPOINT",
    "CHECKPOINT_DIR",
    "CONFIG_FILE",
    "CURVE_FILE",
    "check_run_dir",
    "clear_run",
    "default_run_dir",
    "holds_run",
    "latest_checkpoint",
    "refuse_diverged",
    "restore_state",
    "save_state",
    "writing",
]

CONFIG_FILE = "config.toml"
CHECKPOINT_DIR = "checkpoints"
CURVE_FILE = "learning_curve.png"
RUN_FILES = (CONFIG_FILE, "metrics.csv", CURVE_FILE, "wandb_id")
BEST_CHECKPOINT = "best.pt"
"""The checkpoint of the best evaluation during training (``RunSpec.eval_every``), beside ``ckpt_*.pt``."""
RUN_DIRS = (CHECKPOINT_DIR, "tensorboard", "wandb")


def holds_run(run_dir: str | os.PathLike[str]) -> bool:
    """Whether ``run_dir`` holds (part of) a marljoint run."""
    run_dir = Path(run_dir)
    return any((run_dir / name).exists() for name in RUN_FILES + RUN_DIRS)


def clear_run(run_dir: str | os.PathLike[str]) -> None:
    """Deletes a run's files (only those a run writes) from ``run_dir``."""
    run_dir = Path(run_dir)
    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    for name in RUN_DIRS:
        shutil.rmtree(run_dir / name, ignore_errors=True)


def check_run_dir(run_dir: Path, resume: bool, force: bool) -> dict[str, Any] | None:
    """Checks the run directory (without changing it); returns the checkpoint to resume from, if any.

    Raises:
        RunError: nothing to resume, a path that is not a directory, or a run already there without ``force``.
    """
    if resume:
        if not (run_dir / CONFIG_FILE).is_file():
            raise RunError(f"--resume: {run_dir} holds no run to resume (no {CONFIG_FILE})")
        checkpoint = latest_checkpoint(run_dir)
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


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """A full disk (or quota, or a read-only or forbidden directory) while writing ``path``, one of the run's files,
    becomes one :class:`RunError` naming the file, the reason and the fix; other errors pass unchanged."""
    try:
        yield
    except OSError as exc:
        error = unwritable_file_error(exc, path)
        if error is None:
            raise
        raise error from None


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


def latest_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    """The newest checkpoint of a run, converted to the current format, or ``None``.

    Raises:
        RunError: for a corrupted or diverged checkpoint.
    """
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


def save_state(
    trainer: Any,
    run_dir: Path,
    spec: Any,
    wall_time: float,
    agent_steps: int,
    with_env: bool,
    stream: TextIO,
    extra: Mapping[str, Any] | None = None,
    best: bool = False,
) -> bool:
    """Writes a checkpoint of the run (``best``: ``checkpoints/best.pt``, outside the rotation); returns whether
    it holds the env copies' state."""
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


def restore_state(
    trainer: Any, checkpoint: Mapping[str, Any], stream: TextIO, run_dir: Path, trust_snapshot: bool
) -> tuple[float, int, bool]:
    """Loads a checkpoint into ``trainer``; returns the run's wall time, agent steps and whether the env copies
    were restored.

    Raises:
        RunError: for a snapshot signed by someone else (without ``trust_snapshot``) or a checkpoint that does
            not fit the run.
    """
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


def default_run_dir(spec: Any, root: Path = Path("runs")) -> Path:
    """``runs/<env>-<date>-<time>`` for a run of ``spec`` (its env's last name), with ``-2``, ``-3``, ... added
    while a directory of that name exists.

    Args:
        spec: the run (a :class:`~marljoint.run.train.RunSpec`; only its ``env`` is read).
        root: the directory the runs go in.
    """
    name = spec.env.replace(":", ".").split(".")[-1]
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out = root / f"{name}-{stamp}"
    k = 1
    while out.exists():
        k += 1
        out = root / f"{name}-{stamp}-{k}"
    return out
