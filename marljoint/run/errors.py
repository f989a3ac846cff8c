"""The errors of the product layer: a run that cannot start or continue, and an interrupted run."""

from __future__ import annotations

import errno
import os

__all__ = ["EnvFailure", "ExportRefused", "RunError", "RunInterrupted", "WorkerFailure", "unwritable_file_error"]

# The errors of a file system that will not take a run's files, and what the user can do about each.
_UNWRITABLE_FIXES = {
    errno.ENOSPC: "free space on that disk or choose another --out",
    errno.EDQUOT: "free space within your disk quota or choose another --out",
    errno.EROFS: "choose another --out on a writable file system",
    errno.EACCES: "choose another --out that you may write to",
    errno.EPERM: "choose another --out that you may write to",
}


class RunError(ValueError):
    """A run that cannot start or continue: bad settings, an unusable run directory or checkpoint."""


class ExportRefused(RunError):
    """An algorithm whose trained policy cannot be exported (or handed out per agent), with the reason and what to
    use instead (:meth:`~marljoint.run.algorithms.Algorithm.acting_policy`)."""


class RunInterrupted(RunError):
    """The run was interrupted (Ctrl-C, SIGTERM); the message says how to resume it.

    Attributes:
        exit_status: the command's exit status (130 after SIGINT, 143 after SIGTERM, as a shell reports them).
    """

    def __init__(self, message: str, exit_status: int = 130) -> None:
        super().__init__(message)
        self.exit_status = exit_status


class EnvFailure(RunError):
    """The env (or a wrapper around it) raised during a run, which stopped there; the message names the env, the
    env copy, the step and the exception, and says what was saved.

    The last completed iteration is checkpointed on the way out (unless a checkpoint of it exists already), so the
    run continues with ``--resume`` once the env is fixed. The env's exception
    (:class:`~marljoint.env.EnvCopyError`) is the ``__cause__``.

    Attributes:
        iteration: the last completed iteration (0: none, and nothing was written).
    """

    def __init__(self, message: str, iteration: int) -> None:
        super().__init__(message)
        self.iteration = iteration


class WorkerFailure(RunError):
    """A worker process stepping env copies died during a run (killed by a signal or the out-of-memory killer),
    which stopped there; the message names the worker (its index, pid and env copies) and how it ended, and says
    what was saved.

    As after an :class:`EnvFailure`, the last completed iteration is checkpointed on the way out (unless a
    checkpoint of it exists already) and the run continues with ``--resume``. The worker's error
    (:class:`~marljoint.env.EnvWorkerDied`, or a Ray worker's
    :class:`~marljoint.collect.WorkerLostError`) is the ``__cause__``.

    Attributes:
        iteration: the last completed iteration (0: none, and nothing was written).
    """

    def __init__(self, message: str, iteration: int) -> None:
        super().__init__(message)
        self.iteration = iteration


def unwritable_file_error(exc: OSError, path: str | os.PathLike[str]) -> RunError | None:
    """The :class:`RunError` for a file that cannot be written because the disk is full, over quota, read-only or
    forbidden: the file, the system's reason and the fix, on one line. ``None`` for any other ``OSError``.

    Example:
        >>> error = unwritable_file_error(OSError(errno.ENOSPC, "No space left on device"), "runs/a/metrics.csv")
        >>> print(error)  # doctest: +NORMALIZE_WHITESPACE
        cannot write runs/a/metrics.csv: No space left on device (ENOSPC); free space on that disk or choose
        another --out

    Args:
        exc: the error raised while writing.
        path: the file being written (``exc.filename`` wins when the error names one).
    """
    fix = _UNWRITABLE_FIXES.get(exc.errno) if exc.errno is not None else None
    if fix is None:
        return None
    where = exc.filename if exc.filename is not None else os.fspath(path)
    return RunError(f"cannot write {where}: {os.strerror(exc.errno)} ({errno.errorcode[exc.errno]}); {fix}")
