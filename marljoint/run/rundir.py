"""The run directory: its files, the checks before a run writes there, its checkpoints (saved, found, restored)
and where a run goes when no directory is named.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
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
from marljoint.run import _toml, migrations
from marljoint.run.algorithms import Algorithm
from marljoint.run.errors import RunError, unwritable_file_error
from marljoint.trust import SnapshotTrustError

__all__ = [
    "BEST_CHECKPOINT",
    "CHECKPOINT_DIR",
    "CONFIG_FILE",
    "CURVE_FILE",
    "LOG_FILE",
    "WRITTEN",
    "check_run_dir",
    "clear_run",
    "default_run_dir",
    "holds_run",
    "is_run",
    "latest_checkpoint",
    "open_run_file",
    "refuse_diverged",
    "refuse_links",
    "restore_state",
    "run_path",
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
LOG_FILE = "train.log"
"""The file in each run directory of ``--seeds``, ``--sweep`` and ``marljoint tune`` that receives the run's progress
and messages (and its traceback if it fails)."""
WRITTEN = (
    *RUN_FILES,
    *RUN_DIRS,
    LOG_FILE,
    f".{CONFIG_FILE}.tmp",
    "export",
    "psro.pt",
    "nfsp.pt",
    "openspiel_policy.json",
)
"""The names a run (train, psro, nfsp, export) writes, appends to or deletes in its directory: none of them may be a
symbolic link (:func:`refuse_links`)."""


def holds_run(run_dir: str | os.PathLike[str]) -> bool:
    """Whether ``run_dir`` holds (part of) a marljoint run: any of the files or folders a run writes."""
    run_dir = Path(run_dir)
    return any(os.path.lexists(run_dir / name) for name in RUN_FILES + RUN_DIRS)


def is_run(run_dir: str | os.PathLike[str]) -> bool:
    """Whether ``run_dir`` holds a marljoint training run, as ``--force`` requires before it deletes anything: a
    ``config.toml`` that reads as a run configuration (TOML naming the run's ``env`` and ``total_steps``) or a
    ``checkpoints/`` folder holding ``ckpt_*.pt`` files."""
    run_dir = Path(run_dir)
    config = run_dir / CONFIG_FILE
    if config.is_file() and not config.is_symlink():
        try:
            values = _toml.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            values = {}
        if isinstance(values.get("env"), str) and isinstance(values.get("total_steps"), int):
            return True
    checkpoints = run_dir / CHECKPOINT_DIR
    return not checkpoints.is_symlink() and bool(list_checkpoints(checkpoints))


def run_path(run_dir: str | os.PathLike[str], *parts: str) -> Path:
    """``run_dir/parts...``, checked before a run writes or deletes there: neither the path nor a folder between
    ``run_dir`` and it may be a symbolic link, so nothing is written or deleted outside the run directory.

    Raises:
        RunError: naming the link, where it points and the fix (remove it).
    """
    path = Path(run_dir)
    for part in parts:
        path = path / part
        if path.is_symlink():
            raise RunError(_linked(path))
    return path


def _linked(path: Path) -> str:
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return (
        f"{path} is a symbolic link{target}; marljoint writes and deletes nothing through a link in a run "
        f"directory: remove the link (rm {path}) or choose another --out"
    )


def refuse_links(run_dir: str | os.PathLike[str], names: tuple[str, ...] = WRITTEN) -> None:
    """Refuses a run directory in which a file or folder a run writes (``names``) is a symbolic link.

    Raises:
        RunError: naming the first link and the fix (:func:`run_path`).
    """
    for name in names:
        run_path(run_dir, name)


def open_run_file(path: Path, append: bool = True) -> Any:
    """Opens one of the run's text files for writing (created if missing; appended to, or emptied first unless
    ``append``) without following a symbolic link at its name: a link planted there is refused, never written
    through.

    Raises:
        RunError: ``path`` is a symbolic link or not a regular file.
    """
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | (os.O_APPEND if append else 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError:
        run_path(path.parent, path.name)  # a link (ELOOP): say so; anything else is raised as it is
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunError(f"{path} is not a regular file; remove it (marljoint writes its own) or choose another --out")
    if not append:
        os.ftruncate(fd, 0)  # only now: a special file is refused above, never emptied
    return os.fdopen(fd, "a", newline="", encoding="utf-8")


def clear_run(run_dir: str | os.PathLike[str]) -> None:
    """Deletes a run's files (only those a run writes) from ``run_dir``, following no symbolic link.

    Raises:
        RunError: ``run_dir`` holds no marljoint run (:func:`is_run`) but files named like a run's, or one of the
            run's files or folders is a symbolic link; nothing is deleted then.
    """
    run_dir = Path(run_dir)
    refuse_links(run_dir)
    if holds_run(run_dir) and not is_run(run_dir):
        raise RunError(_not_a_run(run_dir))
    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    for name in RUN_DIRS:
        shutil.rmtree(run_dir / name, ignore_errors=True)


def _not_a_run(run_dir: Path) -> str:
    found = ", ".join(name for name in RUN_FILES + RUN_DIRS if os.path.lexists(run_dir / name))
    return (
        f"--force: {run_dir} holds {found} but no marljoint training run (no {CONFIG_FILE} that reads as a run "
        f"configuration, no {CHECKPOINT_DIR}/ckpt_*.pt); --force deletes only a run's files: move those away or "
        "choose another --out"
    )


def check_run_dir(run_dir: Path, resume: bool, force: bool) -> dict[str, Any] | None:
    """Checks the run directory (without changing it); returns the checkpoint to resume from, if any.

    Raises:
        RunError: nothing to resume, a path that is not a directory, a run already there without ``force``, files
            named like a run's that are not a run with ``force`` (:func:`is_run`), or a file or folder the run
            writes that is a symbolic link (:func:`refuse_links`).
    """
    if run_dir.is_dir():
        refuse_links(run_dir)
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
    if holds_run(run_dir) and not is_run(run_dir):
        raise RunError(_not_a_run(run_dir))
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
    # PPO's networks and value normaliser; an off-policy trainer's networks, targets and reward scale ("algorithm").
    keys = ("policies", "value_normalizer", "algorithm")
    weights = {k: trainer_state.get(k) for k in keys} if isinstance(trainer_state, dict) else {}
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
    trainer: Algorithm,
    run_dir: Path,
    spec: Any,
    wall_time: float,
    agent_steps: int,
    with_env: bool,
    stream: TextIO,
    extra: Mapping[str, Any] | None = None,
    best: bool = False,
    write: bool = True,
) -> bool:
    """Writes a checkpoint of the run (``best``: ``checkpoints/best.pt``, outside the rotation); returns whether
    it holds the env copies' state.

    On a run of data-parallel ranks every rank calls it (the trainer's state and the env copies' state are
    gathered from every rank: an off-policy trainer's replay shards) and only rank 0 writes (``write``).
    """
    trainer_state = trainer.state_dict()
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
    if not write:  # the gathering above is every rank's part; the file is rank 0's
        return with_env
    state = {
        "trainer": trainer_state,
        "env": env_state,
        "env_state_saved": with_env,
        "run": {"wall_time": wall_time, "agent_steps": agent_steps, "spec": spec.to_dict(), **dict(extra or {})},
    }
    directory = run_path(run_dir, CHECKPOINT_DIR)  # the rotation deletes there: never in another run's folder
    if best:  # outside the rotation of ckpt_*.pt
        atomic_torch_save(state, run_path(run_dir, CHECKPOINT_DIR, BEST_CHECKPOINT))
    else:
        save_checkpoint(directory, trainer.iteration, state, keep=spec.keep_checkpoints)
    return with_env


def restore_state(
    trainer: Algorithm, checkpoint: Mapping[str, Any], stream: TextIO, run_dir: Path, trust_snapshot: bool
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
