"""Where a run is written when no directory is named."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["default_run_dir"]


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
