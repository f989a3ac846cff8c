"""One orchestration for every multi-process collector: the copies split into slices, one worker per slice playing
its copies with a CPU copy of the policy, and the pieces written side by side into one rollout.

:class:`SlicedCollector` holds the schedule (send the policy's networks once, its weights every rollout, gather the
pieces, assemble them in copy order, move copies from slow workers to fast ones); a :class:`SliceTransport`
reaches the workers: pipes to a :class:`~marljoint.env.SubprocessJointEnv`'s processes
(:class:`~marljoint.collect.subprocess.PipeTransport`) or Ray actors (:class:`~marljoint.collect.ray.RayTransport`).
Errors raised in a worker come back as they would in one process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from marljoint.collect.balance import WorkBalancer
from marljoint.collect.base import rollout_storage
from marljoint.collect.rollout import JointRollout
from marljoint.collect.slices import assemble, blueprint
from marljoint.env.spaces import JointSpec
from marljoint.policies.distributions import BehaviourPolicy
from marljoint.policies.joint import JointPolicy

__all__ = ["SliceTransport", "SlicedCollector"]


class SliceTransport(Protocol):
    """How a :class:`SlicedCollector` reaches its workers, one per slice of the copies.

    Attributes:
        slices: each worker's copies ``[start, stop)``, contiguous, in copy order.
    """

    slices: list[tuple[int, int]]

    def adopt(self, plan: bytes) -> None:
        """The workers act with the policy of ``plan`` (:func:`~marljoint.collect.slices.blueprint`) from the
        next rollout on."""
        ...

    def play(self, weights: Mapping[str, Any], steps: int, behaviour: BehaviourPolicy | None) -> list[dict[str, Any]]:
        """Every worker plays ``steps`` steps of its copies with ``weights`` (played by ``behaviour`` when given);
        their pieces in :attr:`slices` order (:func:`~marljoint.collect.slices.rollout_piece`, with
        ``"busy_seconds"``)."""
        ...

    def state(self) -> dict[str, Any] | None:
        """The workers' copies and noise generators (the collector's saved state), or ``None`` before the first
        rollout."""
        ...

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        """Restores any collector's saved state into the workers' slices; ``None``: reset at the next rollout."""
        ...

    def reslice(self, slices: Sequence[tuple[int, int]]) -> None:
        """Hands the copies to the workers anew (the caller restores their state afterwards)."""
        ...

    def close(self) -> None:
        """Releases the workers (an env the caller owns stays open)."""
        ...


class SlicedCollector:
    """A :class:`~marljoint.collect.base.WorkerCollector` over a :class:`SliceTransport`: the rollout is
    bit-identical to :class:`~marljoint.collect.LocalCollector` over all copies in one process.

    Args:
        transport: how the workers are reached.
        spec: the env's agents and layouts.
        num_envs: E, the copies of all slices.
        balance: hand copies from slow workers to fast ones by their measured speed
            (:class:`~marljoint.collect.balance.WorkBalancer`); the rollouts stay the same bits.

    Attributes:
        in_workers: whether the policy acts in the workers (``None`` before the first rollout).
        balancer: the :class:`~marljoint.collect.balance.WorkBalancer` (``None`` without ``balance``).
        busy_seconds: ``[K]`` the seconds each worker spent on its slice in the last rollout played in the workers
            (loading the weights, acting and stepping; empty before): the slowest sets the rollout's pace.
    """

    def __init__(self, transport: SliceTransport, spec: JointSpec, num_envs: int, balance: bool = False) -> None:
        self.transport = transport
        self.spec = spec
        self.num_envs = num_envs
        self.in_workers: bool | None = None
        self.busy_seconds: list[float] = []
        self.balancer = WorkBalancer(transport.slices) if balance and len(transport.slices) > 1 else None
        self._policy: JointPolicy | None = None
        self._storage: JointRollout | None = None

    @property
    def slices(self) -> list[tuple[int, int]]:
        """Each worker's copies ``[start, stop)``."""
        return self.transport.slices

    @property
    def num_workers(self) -> int:
        """K."""
        return len(self.transport.slices)

    def collect(
        self,
        policy: JointPolicy,
        steps: int,
        weights: Mapping[str, Any] | None = None,
        into: JointRollout | None = None,
        behaviour: BehaviourPolicy | None = None,
    ) -> JointRollout:
        """Plays ``steps`` joint steps of every copy in the workers; returns the assembled rollout.

        Args:
            policy: the policy (its networks go to the workers once).
            steps: joint steps per copy.
            weights: :meth:`~marljoint.policies.JointPolicy.weights` to act with (default: the policy's current
                ones), e.g. a snapshot taken before an update that runs meanwhile.
            into: a rollout to fill instead of the collector's own storage (reused when its shape fits, another is
                allocated otherwise), so that a caller may train on one rollout while the next is collected.
            behaviour: the :class:`~marljoint.policies.BehaviourPolicy` that plays in the policy's place (``None``:
                the policy itself); the workers receive it with the weights.
        """
        if policy is not self._policy:
            self._policy = policy
            self.in_workers = self._adopt(policy)
        if not self.in_workers:
            return self._collect_here(policy, steps, behaviour)
        held = self._storage if into is None else into
        storage = rollout_storage(held, self.spec, steps, self.num_envs, policy.device)
        if into is None:
            self._storage = storage
        pieces = self.transport.play(policy.weights() if weights is None else weights, steps, behaviour)
        assemble(storage, pieces, self.transport.slices)
        self.busy_seconds = [piece["busy_seconds"] for piece in pieces]
        if self.balancer is not None:
            slices = self.balancer.observe(self.busy_seconds)
            if slices is not None:
                self._move_copies(slices)
        return storage

    def _adopt(self, policy: JointPolicy) -> bool:
        """Sends ``policy``'s networks to the workers; whether they act there."""
        self.transport.adopt(blueprint(policy))
        return True

    def _collect_here(self, policy: JointPolicy, steps: int, behaviour: BehaviourPolicy | None) -> JointRollout:
        """A rollout acted in this process (for a transport whose workers cannot take the policy)."""
        raise RuntimeError(f"{type(self).__name__} acts in its workers only")

    def _move_copies(self, slices: list[tuple[int, int]]) -> None:
        """Hands the copies to the workers as ``slices`` say, with everything the next rollout continues from."""
        state = self.state()
        self.transport.reslice(slices)
        self.load_state(state)

    def state(self) -> dict[str, Any] | None:
        """The workers' copies mid-episode and their noise generators, for a bit-identical resume with any
        backend; ``None`` before the first rollout."""
        return self.transport.state()

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        """Restores the :meth:`~marljoint.collect.Collector.state` of any collector over the same copies (with any
        number of workers, a local, subprocess or Ray collector's); ``None`` resets the copies at the next rollout.

        Raises:
            ValueError: for a state that is unreadable or holds another number of copies.
        """
        self.transport.load_state(state)

    def close(self) -> None:
        """Releases the workers (an env given to the collector stays open)."""
        self.transport.close()
        self._policy = None
