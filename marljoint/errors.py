"""The errors of the product layer: a run that cannot start or continue, and an interrupted run."""

from __future__ import annotations

__all__ = ["RunError", "RunInterrupted"]


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
