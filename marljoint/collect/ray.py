"""The Ray collector: K Ray actors, each stepping a contiguous slice of the env copies with a CPU copy of the policy.

The learner broadcasts its weights once per rollout (one ``ray.put``), every actor plays its copies, and the pieces
are written side by side along the env axis (:func:`~marljoint.collect.slices.assemble`). Env seeds and action noise
are addressed by each copy's global index and every actor evaluates its copies at their rows of a batch of all E
copies (matrix-product kernels choose their summation order by shape), so the result is bit-identical to
collecting all copies in one process.

An actor that dies is replaced: the new actor restores the dead one's last snapshot (its env copies mid-episode and
its per-copy noise generators, taken after every rollout) and collects the same piece again with the same weights.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from marljoint.collect.orchestration import SlicedCollector
from marljoint.collect.ray_actors import WorkerLostError, raise_env_copy_error, ray_actor_class
from marljoint.collect.slices import SliceWorker
from marljoint.collect.snapshots import cut_memory, read_memory, read_state, resliced
from marljoint.env.base import split_copies
from marljoint.env.pettingzoo import PettingZooJointEnv
from marljoint.env.spaces import JointSpec
from marljoint.policies.distributions import BehaviourPolicy
from marljoint.trust import adopt_key, user_key

__all__ = ["RayCollector", "RayTransport", "WorkerLostError"]


class _RaySlice:
    """Body of one Ray actor: a :class:`SliceWorker` over copies ``[start, stop)`` of ``total``."""

    def __init__(
        self,
        env_fn: Callable[[], Any],
        start: int,
        stop: int,
        total: int,
        seed: int,
        plan: bytes,
        torch_threads: int | None,
        key: bytes,
    ) -> None:
        adopt_key(key)  # the node may lack the user's key file: the driver's key signs and checks the snapshots
        env = PettingZooJointEnv(env_fn, num_envs=stop - start, seed=seed, first_copy=start)
        self.slice = SliceWorker(env, seed, total, plan, torch_threads)

    def pid(self) -> int:
        return os.getpid()

    def collect(
        self,
        weights: Mapping[str, Any],
        steps: int,
        restore: Mapping[str, Any] | None,
        behaviour: BehaviourPolicy | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Restores ``restore`` if given, then plays one rollout (played by ``behaviour`` when given); returns its
        piece and the snapshot after it."""
        if restore is not None:
            self.slice.collector.load_state(restore)
        piece = self.slice.collect(weights, steps, behaviour)
        return piece, self.slice.collector.state()


class RayTransport:
    """A :class:`~marljoint.collect.orchestration.SliceTransport` over K Ray actors (:class:`_RaySlice`), each
    holding one slice of the copies; an actor that dies is replaced from its last snapshot.

    Args: as :class:`RayCollector`'s.
    """

    def __init__(
        self,
        env_fn: Callable[[], Any],
        num_envs: int,
        workers: int,
        seed: int,
        torch_threads: int | None = None,
        max_restarts: int = 3,
    ) -> None:
        self.slices = split_copies(num_envs, workers)
        self.env_fn = env_fn
        self.num_envs = num_envs
        self.seed = int(seed)
        self.torch_threads = torch_threads
        self.max_restarts = max_restarts
        self.restarts = 0
        self.actors: list[Any] = []
        self.snapshots: list[dict[str, Any] | None] = [None] * workers
        self._pending_restore: list[dict[str, Any] | None] = [None] * workers
        self._plan: bytes | None = None
        self._ray: Any = None

    def _start(self) -> None:
        if self._ray is not None:
            return
        self._ray, self._actor_class = ray_actor_class(_RaySlice, len(self.slices), "rollout workers")

    def _spawn(self, k: int) -> Any:
        start, stop = self.slices[k]
        # A new actor starts from the last snapshot of the one it replaces (sent with its first collect call).
        self._pending_restore[k] = self.snapshots[k]
        return self._actor_class.remote(
            self.env_fn, start, stop, self.num_envs, self.seed, self._plan, self.torch_threads, user_key()
        )

    def _submit(self, k: int, weights_ref: Any, steps: int, behaviour: BehaviourPolicy | None) -> Any:
        restore, self._pending_restore[k] = self._pending_restore[k], None
        return self.actors[k].collect.remote(weights_ref, steps, restore, behaviour)

    def adopt(self, plan: bytes) -> None:
        self._start()
        self._kill()
        self._plan = plan

    def live_actors(self) -> list[Any]:
        """The actors, started if they are not yet."""
        self._start()
        if not self.actors:
            if self._plan is None:
                raise RuntimeError("the actors start with the first rollout, which needs the policy to copy")
            self.actors = [self._spawn(k) for k in range(len(self.slices))]
        return self.actors

    def pids(self) -> list[int]:
        """The process id of every actor (started if they are not yet)."""
        actors = self.live_actors()  # starts Ray first
        return self._ray.get([a.pid.remote() for a in actors])

    def play(self, weights: Mapping[str, Any], steps: int, behaviour: BehaviourPolicy | None) -> list[dict[str, Any]]:
        self.live_actors()
        ref = self._ray.put(weights)
        pending = {k: self._submit(k, ref, steps, behaviour) for k in range(len(self.slices))}
        failures = [0] * len(self.slices)
        pieces: list[Any] = [None] * len(self.slices)
        while pending:
            done, _ = self._ray.wait(list(pending.values()), num_returns=1)
            k = next(k for k, r in pending.items() if r == done[0])
            del pending[k]
            outcome = self._receive(k, done[0], failures)
            if outcome is None:  # the actor died: a new one collects the same piece again
                self.actors[k] = self._spawn(k)
                pending[k] = self._submit(k, ref, steps, behaviour)
                continue
            pieces[k], self.snapshots[k] = outcome
        return pieces

    def _receive(self, k: int, ref: Any, failures: list[int]) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Actor ``k``'s piece and snapshot, or ``None`` if it died (then counted against ``max_restarts``)."""
        ray = self._ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            failures[k] += 1
            self.restarts += 1
            if failures[k] > self.max_restarts:
                raise WorkerLostError(
                    f"rollout worker {k} (env copies {self.slices[k][0]}..{self.slices[k][1] - 1}) died "
                    f"{failures[k]} times in one iteration; last error: {exc}"
                ) from exc
            return None
        except ray.exceptions.RayTaskError as exc:
            raise_env_copy_error(exc)
            raise

    def state(self) -> dict[str, Any] | None:
        if all(s is None for s in self.snapshots):
            return None
        return {"workers": list(self.snapshots)}

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        snapshots: list[dict[str, Any] | None] = [None] * len(self.slices)
        if state is not None:
            parts = resliced(read_state(state), self.slices)  # checks the copies here, not later in an actor
            snapshots = [{"env": env} if gens is None else {"env": env, "copy_generators": gens} for env, gens in parts]
            memory = read_memory(state)
            if memory is not None:  # the recurrent agents' states, cut at the actors' slices
                for snapshot, (a, b) in zip(snapshots, self.slices):
                    snapshot["memory"] = cut_memory(memory, a, b)
        self._kill()
        self.snapshots = snapshots
        self._pending_restore = [None] * len(self.slices)

    def reslice(self, slices: Sequence[tuple[int, int]]) -> None:
        """The actors restart on their new slices (from the resliced snapshots the caller loads next)."""
        self._kill()
        self.slices = [(int(a), int(b)) for a, b in slices]

    def _kill(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
        self.actors = []

    def close(self) -> None:
        if self._ray is not None:
            self._kill()


class RayCollector(SlicedCollector):
    """Collects with K Ray actors, each over a contiguous slice of the env copies
    (:func:`~marljoint.collect.split_copies`).

    Ray is started locally (``ray.init()``) on the first rollout unless it already runs (call
    ``ray.init(address=...)`` or :func:`~marljoint.distributed.connect_ray` first to use a cluster). The actors get
    a CPU copy of the policy's networks once, and its weights every rollout.

    Args:
        env_fn: factory of one env copy, pickled to the actors.
        spec: the env's agents and layouts (of the learner's env).
        num_envs: E, split over the actors.
        workers: K actors (each reserves one Ray CPU).
        seed: the seed of the env resets and of the copies' noise generators.
        torch_threads: torch threads of each actor (default 1).
        max_restarts: how many times in a row one actor's piece is re-collected after the actor died.
        balance: hand copies from slow actors to fast ones by their measured speed
            (:class:`~marljoint.collect.balance.WorkBalancer`; the actors are restarted on their new slices from
            their snapshots); the rollouts stay the same bits.

    Attributes:
        busy_seconds: ``[K]`` the seconds each actor spent on its slice in the last rollout (loading the weights,
            acting and stepping; empty before): the slowest sets the rollout's pace.
        balancer: the :class:`~marljoint.collect.balance.WorkBalancer` (``None`` without ``balance``).

    Raises:
        ValueError: if E < K; at the first rollout, if the Ray cluster has fewer CPUs than K.
        WorkerLostError: from :meth:`collect`, if one actor's piece failed ``max_restarts + 1`` times in a row.
    """

    def __init__(
        self,
        env_fn: Callable[[], Any],
        spec: JointSpec,
        num_envs: int,
        workers: int,
        seed: int,
        torch_threads: int | None = None,
        max_restarts: int = 3,
        balance: bool = False,
    ) -> None:
        self._actors = RayTransport(env_fn, num_envs, workers, seed, torch_threads, max_restarts)
        super().__init__(self._actors, spec, num_envs, balance=balance)
        self.env_fn = env_fn
        self.seed = int(seed)
        self.torch_threads = torch_threads

    @property
    def max_restarts(self) -> int:
        """How many times in a row one actor's piece is re-collected after the actor died (settable)."""
        return self._actors.max_restarts

    @max_restarts.setter
    def max_restarts(self, value: int) -> None:
        self._actors.max_restarts = int(value)

    @property
    def restarts(self) -> int:
        """Actors replaced after dying, over the collector's life."""
        return self._actors.restarts

    @property
    def actors(self) -> list[Any]:
        """The live actors (empty until the first rollout)."""
        return self._actors.actors

    @property
    def snapshots(self) -> list[dict[str, Any] | None]:
        """Each actor's snapshot after its last rollout (its copies and noise generators)."""
        return self._actors.snapshots

    def pids(self) -> list[int]:
        """The process id of every actor (the actors are started if they are not yet)."""
        return self._actors.pids()
