"""The acting side of a subprocess env's worker processes: what the subprocess collector keeps in each of them.

An env worker only steps its copies and runs the functions it is handed on them
(:meth:`~marljoint.env.SubprocessJointEnv.run_in_workers`). The collector's functions below compose that with
acting: each worker process holds, per collector, one :class:`HostedSlice` (its :class:`SliceWorker`: a CPU copy
of the policy over the worker's copies, and whatever was restored before that existed), in this module's registry
of the process. Nothing of it lives in the env layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from marljoint.collect.noise import generators_from_states
from marljoint.collect.slices import SliceWorker
from marljoint.env.subprocess import EnvWorker
from marljoint.policies.distributions import BehaviourPolicy

__all__ = [
    "HostedSlice",
    "collect_slice",
    "drop_slice",
    "restore_memory",
    "restore_slice",
    "slice_memory",
    "slice_state",
]


@dataclass
class HostedSlice:
    """One collector's acting in one worker process.

    Attributes:
        worker: the :class:`SliceWorker` over the process's copies (``None`` until the policy arrives).
        generators: noise generator states restored before ``worker`` existed (applied when it is built).
        memory: recurrent states restored before ``worker`` existed (likewise).
    """

    worker: SliceWorker | None = None
    generators: list[Any] | None = None
    memory: dict[str, Any] | None = None


# Per worker process: the slices of the collectors acting there, by collector key.
_HOSTED: dict[str, HostedSlice] = {}


def _hosted(env_worker: EnvWorker, key: str) -> HostedSlice:
    """The collector's slice in this process; a slice over copies the worker has since replaced (a reslice) is
    dropped, as its copies are gone."""
    hosted = _HOSTED.setdefault(key, HostedSlice())
    if hosted.worker is not None and hosted.worker.collector.env is not env_worker.env:
        hosted = _HOSTED[key] = HostedSlice()
    return hosted


def collect_slice(
    env_worker: EnvWorker,
    key: str,
    plan: bytes | None,
    seed: int,
    torch_threads: int | None,
    weights: Mapping[str, Any],
    steps: int,
    reset: bool,
    behaviour: BehaviourPolicy | None = None,
) -> dict[str, Any]:
    """In a worker: plays one rollout of its copies (building its slice first when a plan comes), played by
    ``behaviour`` when given."""
    hosted = _hosted(env_worker, key)
    if plan is not None:
        hosted.worker = SliceWorker(env_worker.env, seed, env_worker.total, plan, torch_threads)
        if hosted.generators is not None:  # noise generators restored before this slice existed
            hosted.worker.collector.copy_generators = generators_from_states(hosted.generators)
        hosted.worker.collector.load_memory(hosted.memory)
        hosted.generators = hosted.memory = None
    if hosted.worker is None:
        raise RuntimeError("the collector's slice has not been built in this worker; send the plan first")
    collector = hosted.worker.collector
    collector.current = None if reset else env_worker.state
    piece = hosted.worker.collect(weights, steps, behaviour)
    env_worker.state = collector.current
    return piece


def slice_state(env_worker: EnvWorker, key: str) -> tuple[bytes, list[Any] | None]:
    """In a worker: its copies' snapshot and this collector's noise generator states."""
    hosted = _hosted(env_worker, key)
    if hosted.worker is None:
        generators = hosted.generators
    else:
        generators = [g.get_state() for g in hosted.worker.collector.copy_generators]
    return env_worker.env.get_state(), generators


def restore_slice(env_worker: EnvWorker, key: str, entries: list[tuple[bytes, list[Any] | None]]) -> None:
    """In a worker: puts its copies and this collector's noise generators back."""
    env_bytes, generators = entries[env_worker.index]
    env_worker.state = env_worker.env.set_state(env_bytes)
    hosted = _hosted(env_worker, key)
    if generators is None:
        return
    if hosted.worker is None:
        hosted.generators = generators
    else:
        hosted.worker.collector.copy_generators = generators_from_states(generators)


def slice_memory(env_worker: EnvWorker, key: str) -> dict[str, Any] | None:
    """In a worker: the recurrent states of its copies (``None`` for a feed-forward policy)."""
    hosted = _hosted(env_worker, key)
    return hosted.memory if hosted.worker is None else hosted.worker.collector.memory_state()


def restore_memory(env_worker: EnvWorker, key: str, pieces: list[dict[str, Any] | None]) -> None:
    """In a worker: puts its copies' recurrent states back (kept for the slice if it does not exist yet)."""
    hosted = _hosted(env_worker, key)
    if hosted.worker is None:
        hosted.memory = pieces[env_worker.index]
    else:
        hosted.worker.collector.load_memory(pieces[env_worker.index])


def drop_slice(env_worker: EnvWorker, key: str) -> None:
    """In a worker: forgets this collector's slice."""
    _HOSTED.pop(key, None)
