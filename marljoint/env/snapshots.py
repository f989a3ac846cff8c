"""Snapshots of env copies mid-episode: the bytes behind :meth:`PettingZooJointEnv.get_state` and ``set_state``.

A snapshot is a signed pickle (:mod:`marljoint.trust`) of a dict: ``num_envs``, ``agents``, ``seed``, ``envs`` (the
PettingZoo env copies, pickled with their current attributes), ``episode_seeds`` (one generator per copy) and
``buffers`` (the adapter arrays of :data:`STATE_BUFFERS`, each cut along its first axis, the copy). Both adapters,
parallel and turn-based, write and read this one format; snapshots of consecutive slices of copies join into one.
"""

from __future__ import annotations

import copyreg
import io
import pickle
from collections.abc import Sequence
from typing import Any

import cloudpickle
import numpy as np
from gymnasium.utils import EzPickle

from marljoint.trust import sign, verify

__all__ = [
    "STATE_BUFFERS",
    "dump_snapshot",
    "join_snapshots",
    "load_snapshot",
    "restore_buffers",
    "snapshot_buffers",
    "split_snapshot",
    "transplant",
]

STATE_BUFFERS = (
    "obs",
    "final_obs",
    "masks",
    "alive",
    "acting",
    "rewards",
    "terminated",
    "truncated",
    "reset_envs",
    "returns",
    "lengths",
    "ended",
)
"""The adapter's arrays that carry over between steps. A snapshot keys each by its name with a leading underscore,
the names of the snapshot format."""


def _set_attributes(obj: Any, attributes: dict[str, Any]) -> None:
    obj.__dict__.update(attributes)


class _StatePickler(cloudpickle.Pickler):
    """Pickles env objects with their current attributes.

    Gymnasium's and PettingZoo's ``EzPickle`` pickles an env as its constructor arguments, which rebuilds a fresh
    env: the episode in progress would be lost. Here such objects are pickled attribute by attribute instead.
    """

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, EzPickle) and not isinstance(obj, type) and hasattr(obj, "__dict__"):
            return copyreg.__newobj__, (type(obj),), obj.__dict__, None, None, _set_attributes
        return super().reducer_override(obj)

    def persistent_id(self, obj: Any) -> Any:
        # pygame surfaces and fonts only serve rendering and cannot be pickled: they are left out, and set_state
        # takes them from the env copies it replaces.
        if type(obj).__module__.partition(".")[0] == "pygame":
            return "render-resource"
        return None


class _LeftOut:
    """Stands for an object :class:`_StatePickler` left out, until :func:`transplant` replaces it."""


# Snapshots written while both adapters lived in one module name the attribute setter of EzPickle envs there.
_MOVED = {("marljoint.env.pettingzoo", "_set_attributes"): _set_attributes}


class _StateUnpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> Any:
        if pid != "render-resource":
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        return _LeftOut()

    def find_class(self, module: str, name: str) -> Any:
        moved = _MOVED.get((module, name))
        return moved if moved is not None else super().find_class(module, name)


def transplant(restored: Any, live: Any, seen: set[int]) -> int:
    """Replaces the left-out attributes of ``restored`` (and of the objects it holds) with ``live``'s.

    Args:
        restored: an object unpickled from a snapshot (an env copy).
        live: the object it replaces, whose render resources it takes over.
        seen: ids of the objects already visited (pass an empty set).

    Returns:
        How many were replaced.
    """
    if id(restored) in seen or not hasattr(restored, "__dict__") or type(restored) is not type(live):
        return 0
    seen.add(id(restored))
    replaced = 0
    for name, value in list(vars(restored).items()):
        counterpart = vars(live).get(name)
        if isinstance(value, _LeftOut):
            restored.__dict__[name] = counterpart
            replaced += 1
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            replaced += transplant(value, counterpart, seen)
    return replaced


def snapshot_buffers(adapter: Any) -> dict[str, Any]:
    """The :data:`STATE_BUFFERS` of an adapter, keyed as a snapshot keys them."""
    return {f"_{name}": getattr(adapter, name) for name in STATE_BUFFERS}


def restore_buffers(adapter: Any, buffers: dict[str, Any]) -> None:
    """Copies a snapshot's buffers into an adapter's arrays (which keep their identity: callers hold them)."""
    for key, value in buffers.items():
        target = getattr(adapter, key.removeprefix("_"))
        if isinstance(target, tuple):
            for dst, src in zip(target, value):
                if dst is not None:
                    np.copyto(dst, src)
        else:
            np.copyto(target, value)


def dump_snapshot(snapshot: dict[str, Any]) -> bytes:
    """Pickles a snapshot dict (render resources left out) and signs it with the user's key."""
    buffer = io.BytesIO()
    _StatePickler(buffer).dump(snapshot)
    return sign(buffer.getvalue())


def load_snapshot(state: bytes) -> dict[str, Any]:
    """The snapshot dict of signed bytes.

    Raises:
        marljoint.trust.SnapshotTrustError: if the bytes are not signed with the user's key (checked first).
        ValueError: if they cannot be unpickled.
    """
    payload = verify(state)  # before unpickling: bytes that are not this user's could run code
    try:
        return _StateUnpickler(io.BytesIO(payload)).load()
    except Exception as exc:  # unpickling damaged bytes raises many types
        raise ValueError(f"the env state cannot be unpickled ({type(exc).__name__}: {exc})") from exc


def _slice_snapshot(snapshot: dict[str, Any], start: int, stop: int) -> dict[str, Any]:
    """The part of a snapshot that holds copies ``[start, stop)``: every per-copy entry cut along its first axis."""

    def cut(value: Any) -> Any:
        if isinstance(value, tuple):
            return tuple(None if v is None else v[start:stop].copy() for v in value)
        return value[start:stop].copy()

    return {
        **snapshot,
        "num_envs": stop - start,
        "envs": list(snapshot["envs"][start:stop]),
        "episode_seeds": list(snapshot["episode_seeds"][start:stop]),
        "buffers": {name: cut(value) for name, value in snapshot["buffers"].items()},
    }


def split_snapshot(state: bytes, slices: Sequence[tuple[int, int]]) -> list[bytes]:
    """Signed snapshots of the copies ``[start, stop)`` of each slice of a signed snapshot.

    Raises:
        ValueError: if the snapshot is unreadable or the slices leave its copies.
    """
    snapshot = load_snapshot(state)
    total = snapshot["num_envs"]
    if any(not 0 <= a < b <= total for a, b in slices):
        raise ValueError(f"slices {list(slices)} do not fit the snapshot's {total} copies")
    return [dump_snapshot(_slice_snapshot(snapshot, a, b)) for a, b in slices]


def _join_buffers(values: list[Any]) -> Any:
    if isinstance(values[0], tuple):
        return tuple(None if parts[0] is None else np.concatenate(parts) for parts in zip(*values))
    return np.concatenate(values)


def join_snapshots(states: Sequence[bytes]) -> bytes:
    """One signed snapshot of the copies of signed snapshots of consecutive slices, in order.

    Raises:
        ValueError: if a snapshot is unreadable or they hold different agents.
    """
    parts = [load_snapshot(s) for s in states]
    if not parts:
        raise ValueError("join_states needs at least one snapshot")
    if any(tuple(p["agents"]) != tuple(parts[0]["agents"]) for p in parts):
        raise ValueError("the snapshots hold different agents; they are not slices of one set of copies")
    try:
        buffers = {name: _join_buffers([p["buffers"][name] for p in parts]) for name in parts[0]["buffers"]}
    except (KeyError, ValueError) as exc:
        raise ValueError(f"the snapshots hold copies of different envs ({exc}); join slices of one set") from None
    joined = {
        "num_envs": sum(p["num_envs"] for p in parts),
        "agents": parts[0]["agents"],
        "seed": parts[0]["seed"],
        "envs": [env for p in parts for env in p["envs"]],
        "episode_seeds": [g for p in parts for g in p["episode_seeds"]],
        "buffers": buffers,
    }
    return dump_snapshot(joined)
