"""The subprocess collector: a SubprocessJointEnv's worker processes play whole rollouts of their own copies."""

from __future__ import annotations

import pickle
import uuid
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from marljoint.collect import workers
from marljoint.collect.local import LocalCollector
from marljoint.collect.noise import generators_from_states
from marljoint.collect.orchestration import SlicedCollector
from marljoint.collect.rollout import JointRollout
from marljoint.collect.slices import blueprint
from marljoint.collect.snapshots import cut_memory, join_memories, joined_generators, read_memory, read_state, resliced
from marljoint.env.subprocess import SubprocessJointEnv
from marljoint.policies.distributions import BehaviourPolicy
from marljoint.policies.joint import JointPolicy

__all__ = ["PipeTransport", "SubprocessCollector"]


class PipeTransport:
    """A :class:`~marljoint.collect.orchestration.SliceTransport` over a
    :class:`~marljoint.env.SubprocessJointEnv`'s worker processes: the collector's functions
    (:mod:`marljoint.collect.workers`) run in them through the env's pipes.

    Args:
        env: the subprocess env (it stays the caller's).
        seed: the seed of the env resets and of the copies' noise generators.
        torch_threads: torch threads of each worker (default 1).
    """

    def __init__(self, env: SubprocessJointEnv, seed: int, torch_threads: int | None = None) -> None:
        self.env = env
        self.seed = int(seed)
        self.torch_threads = torch_threads
        # Identifies this collector's slices among those of other collectors on the same env.
        self.key = uuid.uuid4().hex
        self.started = False
        self._plan: bytes | None = None
        self._send_plan = False

    @property
    def slices(self) -> list[tuple[int, int]]:
        """The env workers' copies ``[start, stop)``."""
        return self.env.slices

    def adopt(self, plan: bytes) -> None:
        self._plan, self._send_plan = plan, True

    def play(self, weights: Mapping[str, Any], steps: int, behaviour: BehaviourPolicy | None) -> list[dict[str, Any]]:
        plan = self._plan if self._send_plan else None
        pieces = self.env.run_in_workers(
            workers.collect_slice,
            self.key,
            plan,
            self.seed,
            self.torch_threads,
            weights,
            steps,
            not self.started,
            behaviour,
        )
        self._send_plan = False
        self.started = True
        return pieces

    def state(self) -> dict[str, Any] | None:
        if not self.started:
            return None
        state: dict[str, Any] = {"env": self.env.snapshot(self.env.run_in_workers(workers.slice_state, self.key))}
        memories = self.env.run_in_workers(workers.slice_memory, self.key)
        if all(m is not None for m in memories):
            state["memory"] = join_memories(memories)
        return state

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        if state is None:
            self.started = False
            return
        entries = resliced(read_state(state), self.env.slices)
        self.env.run_in_workers(workers.restore_slice, self.key, entries)
        memory = read_memory(state)
        pieces = [None if memory is None else cut_memory(memory, a, b) for a, b in self.env.slices]
        self.env.run_in_workers(workers.restore_memory, self.key, pieces)
        self.started = True

    def reslice(self, slices: Sequence[tuple[int, int]]) -> None:
        self.env.reslice(slices)
        self._send_plan = True  # the workers' slices are gone: the next rollout sends the networks again

    def close(self) -> None:
        if not self.env.closed:
            self.env.run_in_workers(workers.drop_slice, self.key)
        self._send_plan = True


class SubprocessCollector(SlicedCollector):
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
        self.pipes = PipeTransport(env, seed, torch_threads)
        super().__init__(self.pipes, env.spec, env.num_envs, balance=balance)
        self.env = env
        self.seed = int(seed)
        self.torch_threads = torch_threads
        # Collects from this process when the policy cannot be pickled (its state is kept in step with the workers').
        self._here = LocalCollector(env, seed)

    def _adopt(self, policy: JointPolicy) -> bool:
        try:
            plan = blueprint(policy)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            warnings.warn(
                f"the policies cannot be pickled to the env worker processes ({exc}); the workers step the env "
                "copies only and the policies run in this process, one step at a time",
                stacklevel=4,
            )
            return False
        self.pipes.adopt(plan)
        return True

    def _collect_here(self, policy: JointPolicy, steps: int, behaviour: BehaviourPolicy | None) -> JointRollout:
        self.pipes.started = True
        return self._here.collect(policy, steps, behaviour)

    def state(self) -> dict[str, Any] | None:
        """``{"env": snapshot}``: every worker's copies with its noise generators (in the env's
        :meth:`~marljoint.env.SubprocessJointEnv.get_state` format); ``None`` before the first rollout."""
        if self.in_workers is False:
            return self._here.state() if self.pipes.started else None
        return self.pipes.state()

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        """Restores the :meth:`~marljoint.collect.Collector.state` of any collector over the same copies (this
        one's with any number of workers, a local or a Ray collector's); a plain env snapshot's copies draw fresh
        noise.

        Raises:
            ValueError: for a state that is unreadable or holds another number of copies.
        """
        self.pipes.load_state(state)
        if state is None:
            self._here.load_state(None)
            return
        # The fallback in this process continues from the same copies, generators and memory.
        self._here.current = self.env.current()
        generators = joined_generators(resliced(read_state(state), self.env.slices))
        if generators is not None:
            self._here.copy_generators = generators_from_states(generators)
        self._here.load_memory(read_memory(state))
