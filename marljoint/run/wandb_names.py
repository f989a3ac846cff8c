"""The names Weights & Biases accepts for a run's project and id, checked before a run starts.

W&B refuses a bad name only inside ``wandb.init``, with a ``UsageError`` traceback, after the env and the trainer are
built. These checks apply its rules (``wandb.sdk.wandb_settings.Settings.validate_project`` and ``validate_run_id``,
and the characters ``wandb.init``'s documentation reserves for run ids) when the settings are read.
"""

from __future__ import annotations

import os
from pathlib import Path

from marljoint.run.errors import RunError

__all__ = [
    "PROJECT_FORBIDDEN",
    "PROJECT_MAX_LENGTH",
    "RUN_ID_FILE",
    "RUN_ID_FORBIDDEN",
    "check_project",
    "check_run_id",
    "check_wandb_run",
]

PROJECT_FORBIDDEN = "/\\#?%:"
"""Characters W&B refuses in a project name."""

PROJECT_MAX_LENGTH = 128
"""The longest project name W&B accepts."""

RUN_ID_FORBIDDEN = "/\\#?%:;,'"
"""Characters W&B refuses in a run id (those its documentation names, and those its settings check refuses)."""

RUN_ID_FILE = "wandb_id"
"""The file of a run directory that keeps its W&B run id, so that a resumed run continues the same W&B run."""


def check_project(name: object, source: str = "--wandb") -> str:
    """``name`` if W&B accepts it as a project name.

    Args:
        name: the project name.
        source: where it comes from, for the message (``--wandb``, or the ``wandb_project`` setting of a file).

    Raises:
        RunError: for a name that is not a string, is empty or blank, is longer than :data:`PROJECT_MAX_LENGTH`, or
            holds one of :data:`PROJECT_FORBIDDEN`; the message names the character and the rule.

    Example:
        >>> check_project("marl-experiments")
        'marl-experiments'
    """
    if not isinstance(name, str) or not name.strip():
        raise RunError(f"{source}: expected a W&B project name such as marl-experiments, got {name!r}")
    if len(name) > PROJECT_MAX_LENGTH:
        raise RunError(
            f"{source}: the W&B project name {name[:20]!r}... is {len(name)} characters long; W&B allows at most "
            f"{PROJECT_MAX_LENGTH}: choose a shorter name"
        )
    bad = _first_forbidden(name, PROJECT_FORBIDDEN)
    if bad is not None:
        raise RunError(
            f"{source}: the W&B project name {name!r} holds {bad!r}; W&B project names cannot hold any of the "
            f"characters {' '.join(PROJECT_FORBIDDEN)} (use - or _ instead)"
        )
    return name


def check_run_id(run_id: str, source: str) -> str:
    """``run_id`` if W&B accepts it as a run id.

    Args:
        run_id: the id.
        source: where it comes from, for the message (the ``wandb_id`` file of a run directory).

    Raises:
        RunError: for an empty id, one that starts or ends with whitespace, or one holding a character of
            :data:`RUN_ID_FORBIDDEN`; the message names the character and the rule.
    """
    fix = f"correct it, or delete {source} to start a new W&B run"
    if not run_id.strip():
        raise RunError(f"{source} holds an empty W&B run id; {fix}")
    if run_id != run_id.strip():
        raise RunError(f"{source}: the W&B run id {run_id!r} starts or ends with whitespace, which W&B refuses; {fix}")
    bad = _first_forbidden(run_id, RUN_ID_FORBIDDEN)
    if bad is not None:
        raise RunError(
            f"{source}: the W&B run id {run_id!r} holds {bad!r}; W&B run ids cannot hold any of the characters "
            f"{' '.join(RUN_ID_FORBIDDEN)}; {fix}"
        )
    return run_id


def check_wandb_run(project: str | None, run_dir: str | os.PathLike[str]) -> None:
    """Checks a run's W&B project and, when its directory keeps one already (a resumed run), its W&B run id.

    Nothing is checked without a project (the run does not log to W&B).

    Raises:
        RunError: naming the project or the id file, the offending character and the rule.
    """
    if project is None:
        return
    check_project(project, "wandb_project")
    id_file = Path(run_dir) / RUN_ID_FILE
    if id_file.is_file():
        try:
            text = id_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise RunError(
                f"cannot read the W&B run id in {id_file} ({exc}); delete it to start a new W&B run"
            ) from None
        check_run_id(text.strip(), str(id_file))


def _first_forbidden(text: str, forbidden: str) -> str | None:
    return next((char for char in text if char in forbidden), None)
