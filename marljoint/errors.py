"""The errors of the product layer: a run that cannot start or continue, and an interrupted run."""

from __future__ import annotations

__all__ = ["EnvFailure", "RunError", "RunInterrupted"]


class RunError(ValueError):
    """A run that cannot start or continue: bad settings, an unusable run directory or checkpoint."""


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
