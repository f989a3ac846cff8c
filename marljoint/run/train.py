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
import io
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from marljoint.run.build import build_trainer, check_memory, check_minibatch, make_env, say
from marljoint.run.defaults import DEFAULT_ENV, DEFAULT_ENV_KWARGS, DEFAULT_TRAINER
from marljoint.run.errors import EnvFailure, RunError, RunInterrupted, WorkerFailure
from marljoint.run.lock import RunLock
from marljoint.run.loop import RunLoop, StopRequests, write_curve
from marljoint.run.ranks import agree
from marljoint.run.rundir import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    CURVE_FILE,
    check_run_dir,
    holds_run,
    refuse_diverged,
    restore_state,
    run_path,
    writing,
)
from marljoint.run.spec import RunSpec, load_run_spec, read_config_file, resume_spec, write_config
from marljoint.run.wandb_names import check_wandb_run
from marljoint.trust import user_key

if TYPE_CHECKING:
    from marljoint.distributed.ranks import RankGroup

# train_run with the names its callers use beside it (RunSpec, the run directory files, the checks), each defined in
# the run module of its concern (spec, rundir, build, loop).
__all__ = [
    "CHECKPOINT_DIR",
    "CONFIG_FILE",
    "CURVE_FILE",
    "DEFAULT_ENV",
    "DEFAULT_ENV_KWARGS",
    "DEFAULT_TRAINER",
    "EnvFailure",
    "RunError",
    "RunInterrupted",
    "RunResult",
    "RunSpec",
    "WorkerFailure",
    "build_trainer",
    "check_memory",
    "check_minibatch",
    "holds_run",
    "load_run_spec",
    "make_env",
    "read_config_file",
    "refuse_diverged",
    "resume_spec",
    "train_run",
    "write_config",
]


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
    ranks: RankGroup | None = None,
) -> RunResult:
    """Trains according to ``spec`` and writes the run directory.

    The run holds :class:`~marljoint.run.lock.RunLock` on ``run_dir`` from start to end, taken before anything
    there is read or written: a second writer (another run, a ``force``, a ``resume``) is refused with
    :class:`~marljoint.run.lock.RunLocked`. Nothing else is written, and with ``force`` nothing is deleted, until the
    env and the trainer are built and the first iteration has run: a run that fails to start leaves the directory
    as it was. SIGINT (Ctrl-C) and SIGTERM (a cluster's pre-emption) stop the run after the iteration in progress,
    with a checkpoint, and raise :class:`RunInterrupted` saying how to resume; a measurement in progress (an
    evaluation, an exploitability) is abandoned at once, and a second Ctrl-C stops at once. An exception from the
    env, or a non-finite reward or observation, stops the run with :class:`EnvFailure`, and an env worker process
    that dies with :class:`WorkerFailure`; either way the last completed iteration is checkpointed.

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
        ranks: this process's rank of a data-parallel run (all call with the same arguments), or ``None``: rank 0
            alone locks, reads, writes and prints, and every stop is agreed (:mod:`marljoint.run.ranks`).

    Returns:
        A :class:`RunResult`.

    Raises:
        RunError: for an unusable run directory (empty, or with a symbolic link where the run writes), a
            corrupted checkpoint, a checkpoint whose env snapshot is not signed with this user's key (without
            ``trust_snapshot``), or an env that cannot be built.
        RunLocked: another process (or thread) is writing ``run_dir``.
        RunInterrupted: after SIGINT or SIGTERM.
        EnvFailure: the env raised in ``reset()`` or ``step()``, or returned a non-finite reward or observation.
        WorkerFailure: a worker process stepping env copies died (killed by a signal, say).
        DivergenceError: a loss, gradient or parameter became non-finite; the diverged state is not saved and the
            newest checkpoint, the last good one, is kept (the message names it).
    """
    if not os.fspath(run_dir).strip():
        raise RunError("run_dir is empty, which would be the current directory; give the run directory to write")
    if ranks is not None and not ranks.is_writer:
        stream, progress = io.StringIO(), False  # the other ranks print nothing but errors
    with contextlib.ExitStack() as held:
        return _train_locked(
            spec, Path(run_dir), resume, force, progress, stream, stop_after, on_iteration, trust_snapshot, ranks, held
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
    ranks: RankGroup | None,
    held: contextlib.ExitStack,
) -> RunResult:
    """:func:`train_run` once the run directory is locked (by rank 0, into ``held``)."""
    stream = stream if stream is not None else sys.stderr
    started = time.perf_counter()

    def prepare() -> dict[str, Any] | None:
        held.enter_context(RunLock(run_dir))
        return _prepare(spec, run_dir, resume, force, stream if progress else None)

    checkpoint = agree(ranks, prepare)
    env = make_env(spec, ranks=ranks) if ranks is not None else make_env(spec)
    try:
        trainer = build_trainer(spec, env, ranks=ranks) if ranks is not None else build_trainer(spec, env)
        loop = RunLoop(spec, run_dir, trainer, stream, progress, resume, force, ranks=ranks)
        if checkpoint is not None:
            restored = _restore(trainer, checkpoint, stream, run_dir, trust_snapshot, ranks)
            loop.clock_offset, loop.agent_steps, loop.env_state_saved = restored
            loop.best_eval = float(checkpoint["run"].get("best_eval_return", -math.inf))
            loop.tracker.restore(checkpoint["run"])
        with StopRequests() as stops:
            try:
                loop.run(stop_after, on_iteration, stops)
            except RunError as exc:
                if not isinstance(exc, RunInterrupted):
                    loop.discard_if_empty()
                raise
    finally:
        env.close()
    if ranks is None or ranks.is_writer:
        with writing(run_path(run_dir, CURVE_FILE)):  # matplotlib would write through a link there
            write_curve(run_dir, stream, progress)
    say(stream, progress, f"done: {trainer.iteration} iterations, {trainer.env_steps:,} env steps, run in {run_dir}")
    final = sum(loop.recent) / len(loop.recent) if loop.recent else math.nan
    seconds = time.perf_counter() - started
    return RunResult(run_dir, trainer.iteration, trainer.env_steps, seconds, final, loop.env_state_saved)


def _prepare(spec: RunSpec, run_dir: Path, resume: bool, force: bool, stream: TextIO | None) -> dict[str, Any] | None:
    """The checks before anything is built (rank 0's, under the lock); returns the checkpoint to resume from."""
    checkpoint = check_run_dir(run_dir, resume, force)
    user_key()  # signs config.toml and checks snapshots: a key that cannot be trusted is refused first, as itself
    check_wandb_run(spec.wandb_project, run_dir)  # W&B would refuse a bad name only once the run is built
    if not resume:  # a resumed run already trained with its sizes
        check_minibatch(spec.trainer)
    check_memory(spec, stream)
    return checkpoint


def _restore(
    trainer: Any,
    checkpoint: dict[str, Any],
    stream: TextIO,
    run_dir: Path,
    trust_snapshot: bool,
    ranks: RankGroup | None,
) -> tuple[float, int, bool]:
    """:func:`restore_state` on every rank: rank 0 first, checking the snapshot's signature with this user's key;
    the other ranks then restore the same snapshot (broadcast by rank 0, which vouched for it) without a key of
    their own: their machines may hold another."""
    restored = agree(ranks, lambda: restore_state(trainer, checkpoint, stream, run_dir, trust_snapshot))
    if ranks is not None and not ranks.is_writer:
        restore_state(trainer, checkpoint, stream, run_dir, True)
    return restored
