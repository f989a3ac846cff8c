"""Checkpoint files: atomic writes, and loads that fail with a clear message and run no code from the file.

Every checkpoint (training, PSRO, NFSP) holds tensors, numpy arrays and plain values only, and loads with
``torch.load(..., weights_only=True)`` plus an allow-list of numpy's array types (object arrays excluded): a file
crafted to run code when unpickled is refused. The env copies' snapshot inside a training checkpoint stays bytes
until a resume restores it, and is unpickled only if it is signed with the user's own key (:mod:`marljoint.trust`);
evaluating a run or loading its policies never touches it.
"""

from __future__ import annotations

import inspect
import io
import json
import os
import pickle
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "CheckpointError",
    "atomic_torch_save",
    "atomic_write_bytes",
    "atomic_write_json",
    "checkpoint_path",
    "list_checkpoints",
    "load_checkpoint",
    "non_finite_weights",
    "save_checkpoint",
]

_MAGIC = "marljoint-checkpoint-v1"
_NAME = re.compile(r"^ckpt_(\d+)\.pt$")


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, corrupted, not a marljoint checkpoint, or holds Python objects
    that could run code when loaded."""


# What a training checkpoint may hold beyond tensors and plain values: numpy arrays of non-object dtypes.
_SAFE_GLOBALS = [
    np._core.multiarray._reconstruct,
    np._core.multiarray.scalar,
    np.ndarray,
    np.dtype,
    bytes,
    *(
        cls
        for _, cls in inspect.getmembers(np.dtypes, inspect.isclass)
        if issubclass(cls, np.dtype) and cls is not np.dtypes.ObjectDType
    ),
]


def atomic_write_bytes(data: bytes | memoryview, path: str | os.PathLike[str]) -> None:
    """Writes ``data`` so that ``path`` always holds either the old file or the complete new one.

    The bytes go to a temporary file in the same directory, are flushed and fsynced, and the file is renamed over
    ``path`` (an atomic operation on POSIX and Windows). A crash mid-write leaves the previous file intact.

    Args:
        data: the file's bytes.
        path: destination file (its directory is created).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:  # the rename itself reaches the disk once the directory is synced
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def atomic_write_json(value: Any, path: str | os.PathLike[str]) -> None:
    """Writes ``value`` as JSON with :func:`atomic_write_bytes` (a reader never sees half a file)."""
    atomic_write_bytes(json.dumps(value).encode(), path)


def atomic_torch_save(state: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Saves ``state`` so that ``path`` always holds either the old file or the complete new one
    (:func:`atomic_write_bytes`): a crash mid-write leaves the previous checkpoint intact.

    Args:
        state: a ``torch.save``-able mapping.
        path: destination file.
    """
    buffer = io.BytesIO()
    torch.save({"format": _MAGIC, "state": state}, buffer)
    atomic_write_bytes(buffer.getbuffer(), path)


def load_checkpoint(path: str | os.PathLike[str], former_objects: str | None = None) -> dict[str, Any]:
    """Loads a file written by :func:`atomic_torch_save`, weights-only: nothing in the file can run code.

    Args:
        path: the file.
        former_objects: for a kind of file that earlier versions wrote with pickled Python objects, what it is
            and what to do instead (e.g. ``"a PSRO checkpoint of an earlier marljoint version ...; start the run
            afresh with --force"``): the message of a refused file then says so.

    Raises:
        CheckpointError: naming the file and what is wrong with it; for a file holding other objects than
            tensors, arrays and plain values, saying that it was refused.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        with torch.serialization.safe_globals(_SAFE_GLOBALS):
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "Weights only load failed" not in str(exc):
            raise CheckpointError(f"checkpoint {path} is corrupted or truncated and cannot be read ({exc})") from exc
        detail = next((line.strip() for line in str(exc).splitlines() if "WeightsUnpickler error" in line), "")
        detail = detail or "an object that is not allowed"
        if former_objects is not None:
            raise CheckpointError(
                f"refused to load {path}: it holds pickled Python objects ({detail}), which could run code when "
                f"loaded; if marljoint wrote it, it is {former_objects}; otherwise it was crafted or altered"
            ) from None
        raise CheckpointError(
            f"refused to load {path}: it holds Python objects other than tensors, arrays and plain values, which "
            f"could run code when loaded ({detail}); a marljoint checkpoint never does, so the file was not "
            "written by marljoint or was altered"
        ) from None
    except Exception as exc:  # torch raises several unrelated types for damaged files
        raise CheckpointError(f"checkpoint {path} is corrupted or truncated and cannot be read ({exc})") from exc
    if not isinstance(payload, dict) or payload.get("format") != _MAGIC:
        raise CheckpointError(f"{path} is not a marljoint checkpoint")
    return payload["state"]


def checkpoint_path(directory: str | os.PathLike[str], iteration: int) -> Path:
    """The file of the checkpoint taken after ``iteration`` iterations: ``directory/ckpt_<iteration>.pt``."""
    return Path(directory) / f"ckpt_{int(iteration):07d}.pt"


def list_checkpoints(directory: str | os.PathLike[str]) -> list[Path]:
    """The checkpoints in ``directory``, oldest (lowest iteration) first; temporary files are ignored."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME.match(p.name)) and p.is_file()]
    return [p for _, p in sorted(found)]


def save_checkpoint(
    directory: str | os.PathLike[str], iteration: int, state: dict[str, Any], keep: int | None = None
) -> Path:
    """Writes ``state`` atomically as the checkpoint of ``iteration``, then deletes all but the newest ``keep``.

    Older checkpoints are removed only after the new one is complete, so a crash at any point leaves at least
    one loadable checkpoint (once one was written).

    Args:
        directory: the checkpoint folder (created if needed).
        iteration: the iteration the state was taken after.
        state: a ``torch.save``-able mapping.
        keep: how many checkpoints to keep (>= 1); ``None`` keeps all.

    Returns:
        The path written.

    Raises:
        ValueError: if ``keep`` is not a positive integer.
    """
    if keep is not None and (not isinstance(keep, int) or isinstance(keep, bool) or keep < 1):
        raise ValueError(f"keep must be a positive integer or None, got {keep!r}")
    path = checkpoint_path(directory, iteration)
    atomic_torch_save(state, path)
    if keep is not None:
        for old in list_checkpoints(directory)[:-keep]:
            old.unlink(missing_ok=True)
    return path


def non_finite_weights(state: Any, prefix: str = "") -> tuple[str, float] | None:
    """The first floating-point tensor or array in a (nested) checkpoint state that holds a NaN or an infinity, as
    ``(its dotted path, the value)``, or ``None`` when every one is finite.

    A run that diverged must not be acted with: a NaN policy never ends an episode it could end by acting, so
    evaluating it would play until its step limit.

    Example:
        >>> non_finite_weights({"policies": [{"w": torch.tensor([1.0, float("inf")])}]})
        ('policies.0.w', inf)
    """
    if isinstance(state, dict):
        items: Any = state.items()
    elif isinstance(state, (list, tuple)):
        items = enumerate(state)
    else:
        array = state.detach().cpu().numpy() if isinstance(state, torch.Tensor) and state.is_floating_point() else state
        if isinstance(array, np.ndarray) and array.dtype.kind == "f" and not np.isfinite(array).all():
            return prefix, float(array[~np.isfinite(array)].reshape(-1)[0])
        return None
    for key, value in items:
        found = non_finite_weights(value, f"{prefix}.{key}" if prefix else str(key))
        if found is not None:
            return found
    return None
