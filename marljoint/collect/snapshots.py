"""One collector's saved state read by another: every backend's snapshot cut or joined to any split of the copies.

A local collector saves its E copies as one env snapshot with E noise generators; the subprocess and Ray
collectors save one env snapshot and its generators per worker slice. All of them are the same copies in the same
states, so a run saved with one backend (or number of workers) resumes bit-identically with another: the pieces
are joined in copy order and cut again at the new slices.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from marljoint.env.pettingzoo import PettingZooJointEnv
from marljoint.trust import resign, verify

__all__ = [
    "SlicedState",
    "cut_memory",
    "join_memories",
    "joined_generators",
    "read_memory",
    "read_state",
    "resliced",
    "restore_env",
    "trusted_state",
]

# One slice of the copies: its env snapshot and its copies' noise generator states (None: fresh noise).
SlicedState = list[tuple[bytes, list[Any] | None]]


def read_state(state: Mapping[str, Any]) -> SlicedState:
    """The slices of any collector's :meth:`~marljoint.collect.Collector.state`, in copy order.

    Raises:
        marljoint.trust.SnapshotTrustError: for a snapshot not signed with this user's key (checked before anything
            is unpickled; :func:`trusted_state` vouches for one you trust).
        ValueError: for a state no collector wrote, or one whose snapshots cannot be read.
    """
    if "workers" in state:  # Ray: one {"env", "copy_generators"} per actor
        snapshots = list(state["workers"])
        if any(s is None for s in snapshots):
            raise ValueError("the saved state lacks some Ray workers' snapshots (they had not collected yet)")
        return [(s["env"], s.get("copy_generators")) for s in snapshots]
    if "env" not in state:
        raise ValueError(f"not a collector state: it has the keys {sorted(state)}, not 'env' or 'workers'")
    env_bytes = state["env"]
    payload = verify(env_bytes)  # before unpickling: bytes that are not this user's could run code
    try:
        outer = pickle.loads(payload)
    except Exception:  # noqa: BLE001 - an env snapshot needs the env's own unpickler (or is damaged)
        outer = None
    generators = state.get("copy_generators")
    if isinstance(outer, dict) and "slices" in outer and "workers" in outer:  # a subprocess env's workers
        entries = [e if isinstance(e, tuple) else (e, None) for e in outer["workers"]]
        if generators is not None and all(gens is None for _, gens in entries):
            # a local collector over a subprocess env: its generators, cut at the workers' slices
            entries = [(env, list(generators[a:b])) for (env, _), (a, b) in zip(entries, outer["slices"])]
        return [(env, None if gens is None else list(gens)) for env, gens in entries]
    return [(env_bytes, None if generators is None else list(generators))]


def trusted_state(state: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Any collector's saved state with every env snapshot in it re-signed with this user's key: how a user
    vouches for a run received from someone else (its snapshots carry their signature, or none).

    Only for a state you trust: a subprocess env's snapshot is unpickled here, unchecked, to re-sign the workers'
    snapshots it holds.
    """
    if state is None:
        return None
    if "workers" in state:  # Ray: one {"env", "copy_generators"} per actor
        workers = [None if s is None else {**s, "env": _trusted_snapshot(s["env"])} for s in state["workers"]]
        return {**state, "workers": workers}
    return {**state, "env": _trusted_snapshot(state["env"])} if "env" in state else dict(state)


def _trusted_snapshot(data: bytes) -> bytes:
    """One snapshot re-signed with this user's key; a subprocess env's has its workers' snapshots re-signed too."""
    mine = resign(data)
    try:
        outer = pickle.loads(verify(mine))
    except Exception:  # noqa: BLE001 - an in-process env's snapshot needs the env's own unpickler
        return mine
    if not (isinstance(outer, dict) and "slices" in outer and "workers" in outer):
        return mine
    entries = [(resign(e[0]), *e[1:]) if isinstance(e, tuple) else resign(e) for e in outer["workers"]]
    return resign(pickle.dumps({**outer, "workers": entries}))


def resliced(parts: SlicedState, slices: Sequence[tuple[int, int]]) -> SlicedState:
    """``parts`` (consecutive slices of the copies) cut again at ``slices``; unchanged when they are cut there.

    Raises:
        ValueError: if the snapshots do not hold as many copies as ``slices`` cover.
    """
    sizes = [PettingZooJointEnv.state_copies(env) for env, _ in parts]
    if sizes == [b - a for a, b in slices]:  # the same split
        return list(parts)
    if sum(sizes) != slices[-1][1]:
        raise ValueError(
            f"the saved state holds {sum(sizes)} env copies, this collector has {slices[-1][1]}; resume with the "
            "same num_envs"
        )
    joined = PettingZooJointEnv.join_states([env for env, _ in parts]) if len(parts) > 1 else parts[0][0]
    generators: list[Any] | None = None
    if all(gens is not None for _, gens in parts):
        generators = [g for _, gens in parts for g in gens]
    pieces = PettingZooJointEnv.split_state(joined, slices) if len(slices) > 1 else [joined]
    return [(piece, None if generators is None else generators[a:b]) for piece, (a, b) in zip(pieces, slices)]


def restore_env(env: Any, parts: SlicedState) -> tuple[Any, list[Any] | None]:
    """Restores ``parts`` into ``env`` (an in-process adapter, or a subprocess env at its workers' slices).

    Returns:
        The restored :class:`~marljoint.env.JointObs` and every copy's generator states (``None``: fresh noise).
    """
    from marljoint.env.subprocess import SubprocessJointEnv

    if isinstance(env, SubprocessJointEnv):
        fitted = resliced(parts, env.slices)
        current = env.set_state(env.snapshot([e for e, _ in fitted]))
    else:
        fitted = resliced(parts, [(0, env.num_envs)])
        current = env.set_state(fitted[0][0])
    return current, joined_generators(fitted)


def joined_generators(parts: SlicedState) -> list[Any] | None:
    """Every copy's generator states in copy order, or ``None`` if a slice has none."""
    if any(gens is None for _, gens in parts):
        return None
    return [g for _, gens in parts for g in gens]


def read_memory(state: Mapping[str, Any]) -> dict[str, Any] | None:
    """The recurrent agents' states in any collector's saved state, over all its copies in copy order (``None``
    when it holds none: a feed-forward policy, or a state saved before recurrent policies)."""
    if "workers" in state:  # Ray: one memory per actor
        memories = [None if s is None else s.get("memory") for s in state["workers"]]
        return None if any(m is None for m in memories) else join_memories(memories)
    return state.get("memory")


def join_memories(memories: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Slices' recurrent states side by side along the copy axis."""
    groups = len(memories[0]["hidden"])
    return {
        "hidden": [np.concatenate([np.asarray(m["hidden"][g]) for m in memories]) for g in range(groups)],
        "fresh": np.concatenate([np.asarray(m["fresh"]) for m in memories]),
    }


def cut_memory(memory: Mapping[str, Any], start: int, stop: int) -> dict[str, Any]:
    """The recurrent states of copies ``start .. stop - 1``."""
    return {
        "hidden": [np.asarray(h)[start:stop].copy() for h in memory["hidden"]],
        "fresh": np.asarray(memory["fresh"])[start:stop].copy(),
    }
