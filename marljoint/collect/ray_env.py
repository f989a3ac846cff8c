"""Env copies stepped in Ray actors, for a trainer that acts in its own process (the off-policy trainers)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from marljoint.collect.ray_actors import WorkerLostError, raise_env_copy_error, ray_actor_class
from marljoint.env.base import JointObs, JointStep, join_obs, join_steps, split_copies
from marljoint.env.pettingzoo import PettingZooJointEnv
from marljoint.env.subprocess import action_arrays, sliced_snapshot, sliced_snapshot_entries
from marljoint.env.validation import check_copy_counts
from marljoint.threads import limit_threads
from marljoint.trust import adopt_key, user_key

__all__ = ["RayJointEnv"]


class _RayEnvSlice:
    """Body of one Ray actor: the env copies ``[start, stop)`` of a larger set, reset and stepped on request."""

    def __init__(self, env_fn: Callable[[], Any], start: int, stop: int, key: bytes) -> None:
        adopt_key(key)  # the node may lack the user's key file: the driver's key signs and checks the snapshots
        limit_threads(1)  # an actor steps its copies on one core (marljoint.threads)
        self.env = PettingZooJointEnv(env_fn, num_envs=stop - start, first_copy=start)

    def reset(self, seed: int | None) -> JointObs:
        return self.env.reset(seed=seed)

    def step(self, actions: list[np.ndarray]) -> JointStep:
        return self.env.step(actions)

    def get_state(self) -> bytes:
        return self.env.get_state()

    def set_state(self, snapshot: bytes) -> JointObs:
        return self.env.set_state(snapshot)

    def close(self) -> None:
        self.env.close()


class RayJointEnv:
    """A :class:`~marljoint.env.JointEnv` whose copies step in Ray actors, in parallel, while this process acts.

    Each of K actors holds a contiguous slice of the E copies (:func:`~marljoint.env.split_copies`) in a
    :class:`~marljoint.env.PettingZooJointEnv` whose copies are seeded by their global index, so the same seed gives
    the same episodes as one process (:class:`~marljoint.env.PettingZooJointEnv`) or worker processes
    (:class:`~marljoint.env.SubprocessJointEnv`), bit for bit. One :meth:`step` sends every actor its slice of the
    actions at once, then gathers the slices' outcomes and joins them along the env axis
    (:func:`~marljoint.env.base.join_steps`): one round trip per actor and step, which pays off when a step of the
    env costs more than that round trip. Snapshots (:meth:`get_state`) are signed as a
    :class:`~marljoint.env.SubprocessJointEnv`'s are, in the same format.

    Ray is started locally (``ray.init()``) unless it already runs: call
    :func:`~marljoint.distributed.connect_ray` with an address first to use a cluster. Each actor reserves one
    Ray CPU.

    Example:
        >>> from marljoint_envs import mock_v0
        >>> env = RayJointEnv(mock_v0.parallel_env, num_envs=4, num_workers=2, seed=0)  # doctest: +SKIP
        >>> env.slices  # doctest: +SKIP
        [(0, 2), (2, 4)]

    Args:
        env_fn: a function building one PettingZoo env, or an env module (pickled to the actors).
        num_envs: number of copies E.
        num_workers: Ray actors K (at most E).
        seed: seed of the first reset when it is given none.

    Raises:
        ValueError: for a non-positive ``num_workers`` or ``num_envs``, or a Ray cluster with fewer CPUs than
            actors.
        WorkerLostError: from any call, when an actor has died (its copies are lost, the env is closed: build a new
            one; a run resumes from its last checkpoint).
        EnvCopyError: an env copy raised in an actor (named as in one process, with the actor's traceback as
            text); the env is closed.
    """

    def __init__(self, env_fn: Any, num_envs: int = 2, num_workers: int = 2, seed: int | None = None) -> None:
        if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 1:
            raise ValueError(f"num_workers must be a positive integer, got {num_workers!r}")
        check_copy_counts(num_envs, 0)
        probe = PettingZooJointEnv(env_fn, num_envs=1)  # the spec; the copies themselves are built in the actors
        self.env_fn = probe.env_fn
        """The factory building one env copy."""
        self.spec = probe.spec
        self.num_envs = int(num_envs)
        self.num_workers = min(num_workers, self.num_envs)
        self._seed = seed
        self.observation_spaces: tuple[Any, ...] = probe.observation_spaces
        """The raw PettingZoo observation space of each agent."""
        self.action_spaces: tuple[Any, ...] = probe.action_spaces
        """The raw PettingZoo action space of each agent."""
        probe.close()
        self.slices = split_copies(self.num_envs, self.num_workers)
        """Each actor's copies ``[start, stop)``."""
        self._closed = True  # until the actors exist: close() then has nothing to stop
        self._ray, actor_class = ray_actor_class(_RayEnvSlice, self.num_workers, "env workers")
        key = user_key()
        self._actors = [actor_class.remote(self.env_fn, a, b, key) for a, b in self.slices]
        self._closed = False
        self._reset_done = False

    @property
    def actors(self) -> list[Any]:
        """The Ray actor of each slice, in :attr:`slices` order (empty once closed)."""
        return list(self._actors)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run (the actors are gone)."""
        return self._closed

    def _gather(self, refs: Sequence[Any]) -> list[Any]:
        """Every actor's answer, in :attr:`slices` order; on any failure the env is closed and the error raised."""
        ray = self._ray
        results = []
        for w, ref in enumerate(refs):
            try:
                results.append(ray.get(ref))
            except ray.exceptions.RayActorError as exc:
                self.close()
                a, b = self.slices[w]
                raise WorkerLostError(
                    f"env worker {w} (the Ray actor stepping env copies {a}..{b - 1}) died ({type(exc).__name__}); "
                    "its copies are lost, so the env is closed: build a new one (a run continues from its last "
                    "checkpoint with marljoint train --resume)"
                ) from None
            except Exception as exc:  # the actor raised: the set of copies is left mid-call
                self.close()
                raise_env_copy_error(exc)
                raise
        return results

    def _live_actors(self) -> list[Any]:
        """The actors, or a RuntimeError once the env is closed."""
        if self._closed:
            raise RuntimeError(f"{self!r} is closed; build a new env")
        return self._actors

    def _call(self, method: str, *args: Any) -> list[Any]:
        """``method(*args)`` in every actor at once; the answers in :attr:`slices` order."""
        return self._gather([getattr(actor, method).remote(*args) for actor in self._live_actors()])

    def reset(self, seed: int | None = None) -> JointObs:
        """Resets every copy (copy e with ``seed + e``, as :meth:`~marljoint.env.PettingZooJointEnv.reset`).

        Returns:
            The first :class:`~marljoint.env.JointObs` of all E copies (new arrays).
        """
        if seed is None:
            seed, self._seed = self._seed, None
        current = join_obs(self._call("reset", seed))
        self._reset_done = True
        return current

    def step(self, actions: Sequence[np.ndarray]) -> JointStep:
        """Steps every copy, each actor its slice, in parallel (same contract as
        :meth:`~marljoint.env.PettingZooJointEnv.step`).

        Args:
            actions: per group, ``[E, n_g, *action_shape_g]``; torch tensors are accepted.

        Returns:
            The :class:`~marljoint.env.JointStep` of all E copies (new arrays).

        Raises:
            RuntimeError: before :meth:`reset`, or when an actor has died.
            ValueError: for another number of groups or a wrong shape (checked here), or actions an env copy
                refuses (checked in the actor; the env is then closed).
        """
        if not self._reset_done:
            raise RuntimeError("step() was called before reset(); call env.reset(seed=...) first")
        arrays = action_arrays(self.spec, self.num_envs, actions)
        actors = self._live_actors()
        refs = [actor.step.remote([arr[a:b] for arr in arrays]) for actor, (a, b) in zip(actors, self.slices)]
        return join_steps(self._gather(refs))

    def get_state(self) -> bytes:
        """Snapshot of every actor's copies mid-episode, in :class:`~marljoint.env.SubprocessJointEnv`'s format.

        Raises:
            TypeError: if an env copy cannot be pickled.
        """
        return self.snapshot(self._call("get_state"))

    def set_state(self, state: bytes) -> JointObs:
        """Restores a :meth:`get_state` snapshot taken with the same copies and actors (or from a
        :class:`~marljoint.env.SubprocessJointEnv` with as many workers).

        Returns:
            The restored current :class:`~marljoint.env.JointObs`.

        Raises:
            marljoint.trust.SnapshotTrustError: if the snapshot is not signed with this user's key.
            ValueError: if the snapshot is unreadable or was taken with another split of the copies.
        """
        entries = sliced_snapshot_entries(state, self.slices)
        # A collector's snapshot pairs each worker's copies with what it keeps beside them.
        pieces = [entry[0] if isinstance(entry, tuple) else entry for entry in entries]
        refs = [actor.set_state.remote(piece) for actor, piece in zip(self._live_actors(), pieces)]
        current = join_obs(self._gather(refs))
        self._reset_done = True
        return current

    def snapshot(self, workers: Sequence[bytes]) -> bytes:
        """A snapshot in :meth:`get_state`'s format from each actor's env snapshot, in :attr:`slices` order."""
        return sliced_snapshot(self.num_envs, self.slices, workers)

    def close(self) -> None:
        """Closes the copies and stops the actors (an env dropped without it loses its actors with their last
        handles, as Ray ends those)."""
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        try:
            ray.get([actor.close.remote() for actor in self._actors], timeout=10)
        except Exception:  # a dead or stuck actor: it is stopped below all the same
            pass
        for actor in self._actors:
            ray.kill(actor)
        self._actors = []

    def __repr__(self) -> str:
        return f"RayJointEnv(num_envs={self.num_envs}, num_workers={self.num_workers}, agents={list(self.spec.agents)})"
