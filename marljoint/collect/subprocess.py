"""The subprocess collector: a SubprocessJointEnv's worker processes play whole rollouts of their own copies."""

from __future__ import annotations

import pickle
import uuid
import warnings
from collections.abc import Mapping
from typing import Any

from marljoint.collect.balance import WorkBalancer
from marljoint.collect.base import rollout_storage
from marljoint.collect.local import LocalCollector
from marljoint.collect.noise import generators_from_states
from marljoint.collect.rollout import JointRollout
from marljoint.collect.slices import SliceWorker, assemble, blueprint
from marljoint.collect.snapshots import cut_memory, join_memories, joined_generators, read_memory, read_state, resliced
from marljoint.env.subprocess import EnvWorker, SubprocessJointEnv
from marljoint.policies.joint import JointPolicy

__all__ = ["SubprocessCollector"]


class SubprocessCollector:
    """Collects with the policy running inside a :class:`~marljoint.env.SubprocessJointEnv`'s workers.

    Each worker evaluates a CPU copy of the policy (:class:`~marljoint.collect.slices.SliceWorker`), samples with its
    copies' noise generators and steps its copies, so the workers overlap one another's env stepping with their
    policy inference and exchange nothing per step: per rollout, the weights go out and the arrays come back. The
    rollout is bit-identical to :class:`~marljoint.collect.LocalCollector` over all copies in one process.

    A policy that cannot be pickled to the workers (a warning says why) acts in this process instead, one step at a
    time, while the workers only step the copies: slower, and the same rollouts.

    Args:
        env: the subprocess env (it stays the caller's: :meth:`close` leaves it open).
        seed: the seed of the env resets and of the copies' noise generators.
        torch_threads: torch threads of each worker (default 1).
        balance: hand copies from slow workers to fast ones by their measured speed
            (:class:`~marljoint.collect.balance.WorkBalancer`); the rollouts stay the same bits.

    Attributes:
        in_workers: whether the policy runs in the workers (``None`` before the first rollout; False after the
            pickling fallback).
        balancer: the :class:`~marljoint.collect.balance.WorkBalancer` (``None`` without ``balance``).
        busy_seconds: ``[K]`` the seconds each worker spent on its slice in the last rollout played in the workers
            (loading the weights, acting and stepping; empty before): the slowest sets the rollout's pace.

    Raises:
        TypeError: if ``env`` is not a :class:`~marljoint.env.SubprocessJointEnv`.
    """

    def __init__(
        self, env: SubprocessJointEnv, seed: int, torch_threads: int | None = None, balance: bool = False
    ) -> None:
        if not isinstance(env, SubprocessJointEnv):
            raise TypeError(
                f"the subprocess collector needs a SubprocessJointEnv, got {type(env).__name__}; build it with "
                "CollectionConfig(backend='subprocess').make_env(env_fn, num_envs, seed)"
            )
        self.env = env
        self.num_envs = env.num_envs
        self.spec = env.spec
        self.seed = int(seed)
        self.torch_threads = torch_threads
        # Identifies this collector's slice workers among those of other collectors on the same env.
        self._key = uuid.uuid4().hex
        self.in_workers: bool | None = None
        self._policy: JointPolicy | None = None
        self._started = False
        self._storage: JointRollout | None = None
        # Collects from this process when the policy cannot be pickled (its state is kept in step with the workers').
        self._here = LocalCollector(env, seed)
        self.balancer = WorkBalancer(env.slices) if balance and env.num_workers > 1 else None
        self.busy_seconds: list[float] = []

    def collect(
        self,
        policy: JointPolicy,
        steps: int,
        weights: Mapping[str, Any] | None = None,
        into: JointRollout | None = None,
    ) -> JointRollout:
        """Plays ``steps`` joint steps of every copy in the workers; returns the assembled rollout.

        Args:
            policy: the policy (its networks go to the workers once).
            steps: joint steps per copy.
            weights: :meth:`~marljoint.policies.JointPolicy.weights` to act with (default: the policy's current
                ones), e.g. a snapshot taken before an update that runs meanwhile.
            into: a rollout to fill instead of the collector's own storage (reused when its shape fits, another is
                allocated otherwise), so that a caller may train on one rollout while the next is collected.
        """
        plan = None
        if policy is not self._policy:
            self._policy = policy
            try:
                plan = blueprint(policy)
                self.in_workers = True
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                warnings.warn(
                    f"the policies cannot be pickled to the env worker processes ({exc}); the workers step the env "
                    "copies only and the policies run in this process, one step at a time",
                    stacklevel=3,
                )
                self.in_workers = False
        if not self.in_workers:
            self._started = True
            return self._here.collect(policy, steps)
        storage = rollout_storage(
            self._storage if into is None else into, self.env.spec, steps, self.num_envs, policy.device
        )
        if into is None:
            self._storage = storage
        weights = policy.weights() if weights is None else weights
        pieces = self.env.run_in_workers(
            _collect_slice, self._key, plan, self.seed, self.torch_threads, weights, steps, not self._started
        )
        self._started = True
        assemble(storage, pieces, self.env.slices)
        self.busy_seconds = [piece["busy_seconds"] for piece in pieces]
        if self.balancer is not None:
            slices = self.balancer.observe(self.busy_seconds)
            if slices is not None:
                self._move_copies(slices)
        return storage

    def _move_copies(self, slices: list[tuple[int, int]]) -> None:
        """Hands the copies to the workers as ``slices`` say, with everything the next rollout continues from."""
        state = self.state()
        self.env.reslice(slices)
        self._policy = None  # the workers' slices are gone: the next rollout sends the networks again
        self.load_state(state)

    def state(self) -> dict[str, Any] | None:
        """``{"env": snapshot}``: every worker's copies with its noise generators (in the env's
        :meth:`~marljoint.env.SubprocessJointEnv.get_state` format); ``None`` before the first rollout."""
        if not self._started:
            return None
        if not self.in_workers:
            return self._here.state()
        state: dict[str, Any] = {"env": self.env.snapshot(self.env.run_in_workers(_slice_state, self._key))}
        memories = self.env.run_in_workers(_slice_memory, self._key)
        if all(m is not None for m in memories):
            state["memory"] = join_memories(memories)
        return state

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        """Restores the :meth:`~marljoint.collect.Collector.state` of any collector over the same copies (this
        one's with any number of workers, a local or a Ray collector's); a plain env snapshot's copies draw fresh
        noise.

        Raises:
            ValueError: for a state that is unreadable or holds another number of copies.
        """
        if state is None:
            self._started = False
            self._here.load_state(None)
            return
        entries = resliced(read_state(state), self.env.slices)
        self.env.run_in_workers(_restore_slice, self._key, entries)
        self._here.current = self.env.current()
        generators = joined_generators(entries)
        if generators is not None:
            self._here.copy_generators = generators_from_states(generators)
        memory = read_memory(state)
        pieces = [None if memory is None else cut_memory(memory, a, b) for a, b in self.env.slices]
        self.env.run_in_workers(_restore_memory, self._key, pieces)
        self._here.load_memory(memory)
        self._started = True

    def close(self) -> None:
        """Drops this collector's slice workers (the env stays open)."""
        if not self.env.closed:
            self.env.run_in_workers(_drop_slice, self._key)
        self._policy = None


def _slices(worker: EnvWorker) -> dict[str, Any]:
    return worker.store.setdefault("slices", {})


def _collect_slice(
    worker: EnvWorker,
    key: str,
    plan: bytes | None,
    seed: int,
    torch_threads: int | None,
    weights: Mapping[str, Any],
    steps: int,
    reset: bool,
) -> dict[str, Any]:
    """In a worker: plays one rollout of its copies (building its slice first when a plan comes)."""
    slices = _slices(worker)
    if plan is not None:
        slices[key] = SliceWorker(worker.env, seed, worker.total, plan, torch_threads)
        pending = worker.store.pop(f"generators:{key}", None)
        if pending is not None:  # noise generators restored before this slice existed
            slices[key].collector.copy_generators = generators_from_states(pending)
        slices[key].collector.load_memory(worker.store.pop(f"memory:{key}", None))
    piece_maker = slices[key]
    piece_maker.collector.current = None if reset else worker.state
    piece = piece_maker.collect(weights, steps)
    worker.state = piece_maker.collector.current
    return piece


def _slice_state(worker: EnvWorker, key: str) -> tuple[bytes, list[Any] | None]:
    """In a worker: its copies' snapshot and this collector's noise generator states."""
    piece_maker = _slices(worker).get(key)
    if piece_maker is None:
        generators = worker.store.get(f"generators:{key}")
    else:
        generators = [g.get_state() for g in piece_maker.collector.copy_generators]
    return worker.env.get_state(), generators


def _restore_slice(worker: EnvWorker, key: str, entries: list[tuple[bytes, list[Any] | None]]) -> None:
    """In a worker: puts its copies and this collector's noise generators back."""
    env_bytes, generators = entries[worker.index]
    worker.state = worker.env.set_state(env_bytes)
    piece_maker = _slices(worker).get(key)
    if generators is None:
        return
    if piece_maker is None:
        worker.store[f"generators:{key}"] = generators
    else:
        piece_maker.collector.copy_generators = generators_from_states(generators)


def _slice_memory(worker: EnvWorker, key: str) -> dict[str, Any] | None:
    """In a worker: the recurrent states of its copies (``None`` for a feed-forward policy)."""
    piece_maker = _slices(worker).get(key)
    if piece_maker is None:
        return worker.store.get(f"memory:{key}")
    return piece_maker.collector.memory_state()


def _restore_memory(worker: EnvWorker, key: str, pieces: list[dict[str, Any] | None]) -> None:
    """In a worker: puts its copies' recurrent states back (kept for the slice if it does not exist yet)."""
    piece_maker = _slices(worker).get(key)
    if piece_maker is None:
        worker.store[f"memory:{key}"] = pieces[worker.index]
    else:
        piece_maker.collector.load_memory(pieces[worker.index])


def _drop_slice(worker: EnvWorker, key: str) -> None:
    _slices(worker).pop(key, None)
    worker.store.pop(f"generators:{key}", None)
    worker.store.pop(f"memory:{key}", None)
