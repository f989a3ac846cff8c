"""Checkpoint files: atomic writes, and loads that fail with a clear message."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

__all__ = ["CheckpointError", "atomic_torch_save", "load_checkpoint"]

_MAGIC = "marljoint-checkpoint-v1"


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, corrupted or not a marljoint checkpoint."""


def atomic_torch_save(state: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Saves ``state`` so that ``path`` always holds either the old file or the complete new one.

    The bytes go to a temporary file in the same directory, are flushed and fsynced, and the file is renamed over
    ``path`` (an atomic operation on POSIX and Windows). A crash mid-write leaves the previous checkpoint intact.

    Args:
        state: a ``torch.save``-able mapping.
        path: destination file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save({"format": _MAGIC, "state": state}, buffer)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(buffer.getbuffer())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Loads a file written by :func:`atomic_torch_save`.

    Raises:
        CheckpointError: naming the file and what is wrong with it.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch raises several unrelated types for damaged files
        raise CheckpointError(f"checkpoint {path} is corrupted or truncated and cannot be read ({exc})") from exc
    if not isinstance(payload, dict) or payload.get("format") != _MAGIC:
        raise CheckpointError(f"{path} is not a marljoint checkpoint")
    return payload["state"]
